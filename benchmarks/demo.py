"""Exact-set accuracy on the embedded demo mentions: recall order vs. the shipped cold-start rankers.

    python3 benchmarks/demo.py [--out benchmarks/results/demo.json]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._results import write_json  # noqa: E402

from termnorm.engine import Engine, demo_mentions, demo_vocabulary, evaluate_engine  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "demo.json"))
    args = ap.parse_args(argv)
    res = {}
    for which in ("procedures", "diagnoses"):
        vocab = demo_vocabulary(which)
        ms = [m for m in demo_mentions(which) if all(t in vocab for t in m.terms)]
        base = evaluate_engine(Engine(vocab), ms, stage="recall")
        eng = Engine.from_demo(which)
        full = evaluate_engine(eng, ms, stage="full")
        res[which] = {"n": len(ms), "recall_order_accuracy": base["accuracy"], "ranker_accuracy": full["accuracy"],
                      "recall_order_micro_f1": base["micro_f1"], "ranker_micro_f1": full["micro_f1"],
                      "candidate_recall": base["candidate_recall"], "model_version": eng.model_version}
        print(f"{which:10s} n={len(ms)}  recall order {base['accuracy']:.3f}  cold-start ranker {full['accuracy']:.3f}"
              f"  (micro-F1 {base['micro_f1']:.3f} -> {full['micro_f1']:.3f})")
    write_json(args.out, res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
