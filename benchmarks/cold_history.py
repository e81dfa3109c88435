"""The shipped model between day one and the first retraining: does the cold-start ranker use the coders' history?

A vocabulary serves the cold-start ranker of its domain (db.serving.shipped_engine) until a retrained model
passes the gate, which takes about 500 decisions at a 20% hold-out. Meanwhile each decision goes into history
recall and the sieve at once, but a ranker fitted without history features (``termnorm train lexical
--cold-start``) cannot weigh a history candidate: a mention nearly equal to a corrected one keeps its old answer.

Cold-start rankers fitted the same way on one half of the set's training file:

* ``no_history``: without history features (how the shipped rankers are fitted);
* ``full_history``: with history features, every K-fold part seeing all the other parts (how the app's
  retrained rankers are fitted);
* ``history_mix``: with history features, each K-fold part seeing a different share of the other parts'
  mentions as its history (``termnorm.fitting.HISTORY_MIX``: none, 3%, 10%, 30%, all), so the ranker learns
  what history scores are worth with no history, a little and much; every candidate also carries the
  history's size (``termnorm.fitting.HISTORY_SIZE``): ``--cold-start --history-mix``, served from
  ``termnorm.demo.HISTORY_FROM`` coded mentions on (docs/benchmarks.md says why not before).

Each is exported and served as the app serves it (``Engine.use_pretrained_ranker`` on the full vocabulary),
with the first 0 / 100 / 300 / 1,000 / all mentions of the *other* half of the training file as the coders'
coded history (the rankers never saw those mentions), on the set's held-out file (Yidu-N7K val, CHIP-CDN dev:
the mentions whose gold terms are in the vocabulary). Exact-set accuracy, micro-F1 and the sign test per
history size go to ``benchmarks/results/cold_history.json``, and (``several_terms``) the exact-set accuracy and
sign test on the mentions coded with two terms or more.

    python3 benchmarks/cold_history.py --rows no_history,history_mix   # both sets, both halves (12 min)
    python3 benchmarks/cold_history.py                  # with full_history too (about 20 min on 2 cores)
    python3 benchmarks/cold_history.py --sets yidu --halves 1
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._results import write_json  # noqa: E402

#: (vocabulary file, training file, held-out file) per set
SETS = {"yidu": ("yidu-n7k/code.txt", "yidu-n7k/train.xlsx", "yidu-n7k/val.xlsx"),
        "cdn": ("chip-cdn/icd10_beijing_clinical_v601.xlsx", "chip-cdn/train.json", "chip-cdn/dev.json")}
SIZES = (0, 100, 300, 1000, None)  # None: the whole other half
ROWS = ("no_history", "full_history", "history_mix")


def fit_export(vocab, train, row: str, path: Path, seed: int) -> float:
    """Fit a cold-start ranker of ``row`` on ``train`` as the shipped ones are fitted (``termnorm train lexical
    --cold-start --no-context-features``, the output rule chosen for exact-set accuracy), export it; the fit's
    seconds."""
    from termnorm.engine import Engine
    from termnorm.fitting import HISTORY_MIX

    t0 = time.perf_counter()
    eng = Engine(vocab)
    mix = row == "history_mix"
    eng.fit_lexical(train, folds=len(HISTORY_MIX) if mix else 4, seed=seed,
                    with_history=HISTORY_MIX if mix else row == "full_history", term_classifier=False,
                    context_features=False)
    eng.export_ranker(path)
    return time.perf_counter() - t0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data"))
    ap.add_argument("--sets", default="yidu,cdn")
    ap.add_argument("--halves", type=int, default=2, help="1: fit on the first half only; 2: also the other way")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rows", default=",".join(ROWS), help="among " + ", ".join(ROWS) + " (no_history and history_mix "
                                                            "always: the sign test compares them)")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "cold_history.json"))
    args = ap.parse_args(argv)
    rows = [r for r in ROWS if r in args.rows.split(",") or r != "full_history"]
    from termnorm.engine import Engine
    from termnorm.evaluate import evaluate_predictions
    from termnorm.loaders import load_labelled, load_vocabulary
    from termnorm.refit import limited_threads
    from termnorm.stats import sign_test

    data, out, t_all = Path(args.data), {}, time.perf_counter()
    tmp = Path(tempfile.mkdtemp(prefix="cold-history-"))
    with limited_threads():
        for name in args.sets.split(","):
            vfile, train_file, held_file = SETS[name]
            vocab = load_vocabulary(data / vfile)
            held = [m for m in load_labelled(data / held_file, vocab).mentions
                    if m.terms and all(t in vocab for t in m.terms)]
            train = [m for m in load_labelled(data / train_file, vocab).mentions
                     if m.terms and all(t in vocab for t in m.terms)]
            perm = np.random.default_rng(args.seed).permutation(len(train))
            halves = [[train[i] for i in perm[: len(perm) // 2]], [train[i] for i in perm[len(perm) // 2:]]]
            right = {(row, size): [] for row in rows for size in SIZES}
            picked = {(row, size): [] for row in rows for size in SIZES}
            fit_s = {}
            for h in range(args.halves):
                fit_half, history_half = halves[h], halves[1 - h]
                for row in rows:
                    path = tmp / f"{name}-{h}-{row}.joblib"
                    fit_s[f"{row}/{h}"] = round(fit_export(vocab, fit_half, row, path, args.seed), 1)
                    base = Engine(vocab)
                    base.use_pretrained_ranker(path)
                    for size in SIZES:
                        eng = base.with_history(history_half[:size])
                        chosen = [s.chosen for s in eng.suggest_batch([m.text for m in held])]
                        right[row, size] += [set(c) == set(m.terms) for c, m in zip(chosen, held)]
                        picked[row, size] += chosen
                        got = evaluate_predictions([m.terms for m in held], chosen, None)
                        print(f"{name} half {h} {row:12s} history {len(history_half[:size]):5d}: accuracy "
                              f"{got['accuracy']:.4f} micro-F1 {got['micro_f1']:.4f} "
                              f"({time.perf_counter() - t_all:.0f} s)", flush=True)
            gold = [m.terms for m in held] * args.halves
            res = {"mentions": len(held), "halves": args.halves, "fit_seconds": fit_s, "by_history": {}}
            for size in SIZES:
                key = str(size if size is not None else "all")
                cell = {}
                for row in rows:
                    got = evaluate_predictions(gold, picked[row, size], None)
                    cell[row] = {"accuracy": round(float(got["accuracy"]), 4),
                                 "micro_f1": round(float(got["micro_f1"]), 4)}
                cell["sign_test"] = sign_test(right["history_mix", size], right["no_history", size])
                several = [len(g) > 1 for g in gold]  # where a ranker must name a second term (ERCP+EST)
                cell["several_terms"] = {"mentions": sum(several), **{
                    row: round(float(np.mean([r for r, s in zip(right[row, size], several) if s])), 4)
                    for row in rows}, "sign_test": sign_test(
                        [r for r, s in zip(right["history_mix", size], several) if s],
                        [r for r, s in zip(right["no_history", size], several) if s])}
                if "full_history" in rows:
                    cell["sign_test_vs_full_history"] = sign_test(right["history_mix", size],
                                                                  right["full_history", size])
                res["by_history"][key] = cell
                print(f"{name} history {key:>5s}: {cell}", flush=True)
            out[name] = res
    write_json(Path(args.out), {"command": "python3 benchmarks/cold_history.py " + " ".join(argv or sys.argv[1:]),
                                "seconds": round(time.perf_counter() - t_all, 1), "results": out})
    return 0


if __name__ == "__main__":
    sys.exit(main())
