"""Accuracy of the full pipeline on Yidu-N7K val, CHIP-CDN dev and NCBI dev, with ablations.

    python3 benchmarks/accuracy.py [--data ../shared/data] [--sets yidu,cdn,ncbi] [--out benchmarks/results/accuracy.json]

For each data set: the lexical pipeline (multi-strategy recall + history +
GBM ranker + count classifier + output rule, fitted on the training set) and
its ablations — no history recall / sieve ("history" strategies and coded
mentions removed), no ranker (recall order, top-1), no splitting of
multi-part mentions. Prints a table and writes JSON.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from termnorm.engine import Engine, evaluate_engine  # noqa: E402
from termnorm.io import load_labelled, load_vocabulary  # noqa: E402

SETS = {
    "yidu": ("yidu-n7k/code.txt", "yidu-n7k/train.xlsx", "yidu-n7k/val.xlsx", "compact"),
    "cdn": ("chip-cdn/icd10_beijing_clinical_v601.xlsx", "chip-cdn/train.json", "chip-cdn/dev.json", "wide"),
    "ncbi": ("ncbi-disease/medic_06Jul2012.txt", "ncbi-disease/NCBItrainset_corpus.txt",
             "ncbi-disease/NCBIdevelopset_corpus.txt", "wide"),
}
KEYS = ["accuracy", "micro_f1", "recall_at_10", "candidate_recall", "mean_candidates", "count_accuracy",
        "mentions_per_second"]


def run_set(name: str, data: Path, ablations: bool) -> dict:
    vpath, trpath, tepath, profile = SETS[name]
    kw = data / "keywords"
    out = {}

    def build(history, split=True):
        vocab = load_vocabulary(data / vpath)
        train = load_labelled(data / trpath, vocab).mentions
        test = load_labelled(data / tepath, vocab).mentions
        eng = Engine(vocab, history=train if history else None, keyword_dir=kw if name != "ncbi" else None,
                     split=split, recall_profile=profile)
        return eng, train, test

    configs = [("full", dict(history=True, split=True), True)]
    if ablations:
        configs += [("no_ranker", dict(history=True, split=True), False),
                    ("no_history", dict(history=False, split=True), True),
                    ("no_split", dict(history=True, split=False), True)]
    for label, kwargs, ranker in configs:
        t0 = time.perf_counter()
        eng, train, test = build(**kwargs)
        if ranker:
            eng.fit_lexical(train, progress=False)
        fit_s = time.perf_counter() - t0
        rep = evaluate_engine(eng, test, stage="full" if ranker else "recall")
        rep.pop("errors", None)
        rep["setup_and_fit_seconds"] = round(fit_s, 1)
        if ranker:
            rep["output_rule"] = eng.meta.get("output_rule")
        out[label] = rep
        print(f"{name:5s} {label:11s} " + "  ".join(
            f"{k}={rep[k]:.4f}" if isinstance(rep.get(k), float) else f"{k}={rep.get(k)}" for k in KEYS), flush=True)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data"))
    ap.add_argument("--sets", default="yidu,cdn,ncbi")
    ap.add_argument("--no-ablations", action="store_true")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "accuracy.json"))
    args = ap.parse_args(argv)
    data = Path(args.data)
    results = {"data": str(data), "machine": {"python": platform.python_version(), "platform": platform.platform()},
               "command": "python3 benchmarks/accuracy.py " + " ".join(argv or sys.argv[1:]), "results": {}}
    out = Path(args.out)
    if out.exists():  # keep the sets measured by an earlier run (each set records its own command)
        results["results"] = json.loads(out.read_text(encoding="utf-8")).get("results", {})
    for name in args.sets.split(","):
        results["results"][name] = run_set(name, data, not args.no_ablations)
        results["results"][name]["command"] = results["command"]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, ensure_ascii=False, indent=1), encoding="utf-8")
    print(f"written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
