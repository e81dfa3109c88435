"""Exact-set accuracy on the embedded demo mentions: recall order vs. the shipped cold-start rankers.

    python3 benchmarks/demo.py [--out benchmarks/results/demo.json]
    python3 benchmarks/demo.py --ranker diagnoses=/tmp/other.joblib --out /tmp/demo_other.json

``--ranker DOMAIN=PATH`` (repeatable) scores another exported ranker (``termnorm train lexical
--cold-start ... --export-ranker PATH``) in place of the shipped one of that domain.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._results import write_json  # noqa: E402

from termnorm.engine import PRETRAINED, Engine, demo_mentions, demo_vocabulary, evaluate_engine  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "demo.json"))
    ap.add_argument("--ranker", action="append", default=[], metavar="DOMAIN=PATH",
                    help="score this exported ranker instead of the shipped one (domain: procedures, diagnoses)")
    args = ap.parse_args(argv)
    other = {}
    for spec in args.ranker:
        domain, _, path = spec.partition("=")
        if domain not in ("procedures", "diagnoses") or not Path(path).is_file():
            ap.error(f"--ranker {spec!r}: expected procedures=PATH or diagnoses=PATH of an existing file")
        other[domain] = path
    res = {}
    for which in ("procedures", "diagnoses"):
        vocab = demo_vocabulary(which)
        ms = [m for m in demo_mentions(which) if all(t in vocab for t in m.terms)]
        base = evaluate_engine(Engine(vocab), ms, stage="recall")
        eng, path = Engine(vocab), other.get(which, PRETRAINED[which])
        if not eng.use_pretrained_ranker(path):  # the shipped one too: no ranker would measure recall order
            ap.error(f"{path}: not a ranker written by termnorm train lexical --export-ranker")
        full = evaluate_engine(eng, ms, stage="full")
        res[which] = {"n": len(ms), "recall_order_accuracy": base["accuracy"], "ranker_accuracy": full["accuracy"],
                      "recall_order_micro_f1": base["micro_f1"], "ranker_micro_f1": full["micro_f1"],
                      "candidate_recall": base["candidate_recall"], "model_version": eng.model_version,
                      "ranker": other.get(which, "shipped")}
        print(f"{which:10s} n={len(ms)}  recall order {base['accuracy']:.3f}  cold-start ranker {full['accuracy']:.3f}"
              f"  (micro-F1 {base['micro_f1']:.3f} -> {full['micro_f1']:.3f})")
    write_json(args.out, res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
