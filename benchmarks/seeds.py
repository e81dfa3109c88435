"""How much the shipped pipeline's accuracy depends on its random seed, and what bagging the ranker buys.

    python3 benchmarks/seeds.py [--data ../shared/data] [--sets yidu] [--seeds 0,1,2,3] [--bag 3]
                                [--out benchmarks/results/seeds.json]

The seed of ``Engine.fit_lexical`` draws the K-fold split of the history (which coded mentions a training
mention may find), the 20% held out to choose the output rule and calibrate the confidence, and the GBM's
random state (its early-stopping validation split). For each seed the set's pipeline (the settings of
``benchmarks/accuracy.py``) is fitted twice — one ranker (``bag 1``, the default) and the mean of
``--bag`` rankers fitted on the splits of seeds seed, seed + 1, ... (``termnorm train lexical --bag``) —
and scored on the set's evaluation file. Prints each run and the mean / min / max per bag size, writes
JSON.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._results import write_json  # noqa: E402
from benchmarks.accuracy import SETS  # noqa: E402

from termnorm.engine import Engine, evaluate_engine  # noqa: E402
from termnorm.loaders import load_labelled, load_vocabulary  # noqa: E402

KEYS = ["accuracy", "micro_f1", "count_accuracy", "mentions_per_second"]


def run_set(name: str, data: Path, seeds: list[int], bags: list[int]) -> dict:
    vpath, trpath, tepath, settings = SETS[name]
    vocab = load_vocabulary(data / vpath)
    train = load_labelled(data / trpath, vocab).mentions
    test = load_labelled(data / tepath, vocab).mentions
    eng = Engine(vocab, history=train, keyword_dir=data / "keywords" if name != "ncbi" else None,
                 recall_profile=settings["recall_profile"], max_candidates=settings["max_candidates"])
    runs = []
    for bag in bags:
        for seed in seeds:
            t0 = time.perf_counter()
            eng.fit_lexical(train, seed=seed, bag=bag, rule_metric=settings["rule_metric"],
                            term_classifier=settings.get("term_classifier", True))
            fit_s = time.perf_counter() - t0
            rep = evaluate_engine(eng, test, stage="full")
            row = {"bag": bag, "seed": seed, **{k: rep[k] for k in KEYS}, "fit_seconds": round(fit_s, 1)}
            runs.append(row)
            print(f"{name:5s} bag {bag} seed {seed}  " + "  ".join(f"{k}={row[k]:.4f}" for k in KEYS)
                  + f"  fit={fit_s:.0f}s", flush=True)
    summary = {}
    for bag in bags:
        acc = [r["accuracy"] for r in runs if r["bag"] == bag]
        f1 = [r["micro_f1"] for r in runs if r["bag"] == bag]
        fit = [r["fit_seconds"] for r in runs if r["bag"] == bag]
        summary[f"bag{bag}"] = {"accuracy_mean": statistics.fmean(acc), "accuracy_min": min(acc),
                                "accuracy_max": max(acc), "accuracy_sd": statistics.pstdev(acc),
                                "micro_f1_mean": statistics.fmean(f1), "fit_seconds_mean": statistics.fmean(fit)}
        s = summary[f"bag{bag}"]
        print(f"{name:5s} bag {bag}: accuracy mean {s['accuracy_mean']:.4f} (min {s['accuracy_min']:.4f}, "
              f"max {s['accuracy_max']:.4f}, sd {s['accuracy_sd']:.4f}), micro-F1 mean {s['micro_f1_mean']:.4f}, "
              f"fit {s['fit_seconds_mean']:.0f} s", flush=True)
    return {"settings": dict(settings), "runs": runs, "summary": summary}


def _int_list(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected whole numbers separated by commas, got {text!r}") from None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data"))
    ap.add_argument("--sets", default="yidu")
    ap.add_argument("--seeds", type=_int_list, default=[0, 1, 2, 3])
    ap.add_argument("--bag", type=int, default=3, help="the bag size compared with a single GBM")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "seeds.json"))
    args = ap.parse_args(argv)
    if args.bag < 2:
        ap.error(f"--bag must be at least 2 to compare with a single GBM, got {args.bag}")
    results = {"data": args.data, "machine": {"python": platform.python_version(), "platform": platform.platform()},
               "command": "python3 benchmarks/seeds.py " + " ".join(argv if argv is not None else sys.argv[1:]),
               "results": {}}
    for name in args.sets.split(","):
        results["results"][name] = run_set(name, Path(args.data), args.seeds, [1, args.bag])
    write_json(args.out, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
