"""Day one: a hospital's first day with termnorm -- no coded history, the full vocabulary, only what ships.

The engine a vocabulary gets before any decision (db.serving.shipped_engine: the lexical pipeline with the
cold-start ranker of its domain; built-in keywords, no keyword folder, no training file) suggests for the
official held-out file; against it, the recall order alone (the same engine without the ranker). Every
mention is on day one a mention of a never-coded term. Exact-set accuracy and micro-F1 (CHIP-CDN's metric)
go to ``benchmarks/results/day_one.json``. Issue 26's day-one measurement: what vocabulary-side learning
must raise.

    python3 benchmarks/day_one.py                 # Yidu-N7K val and CHIP-CDN dev (a few minutes)
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._results import write_json  # noqa: E402

#: (vocabulary file, held-out file) per set
SETS = {"yidu": ("yidu-n7k/code.txt", "yidu-n7k/val.xlsx"),
        "cdn": ("chip-cdn/icd10_beijing_clinical_v601.xlsx", "chip-cdn/dev.json")}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data"))
    ap.add_argument("--sets", default="yidu,cdn")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "day_one.json"))
    args = ap.parse_args(argv)
    from benchmarks.learning_curve import measure
    from db.serving import shipped_engine
    from termnorm.engine import Engine
    from termnorm.loaders import load_labelled, load_vocabulary

    data, out = Path(args.data), {}
    for name in args.sets.split(","):
        vfile, held_file = SETS[name]
        vocab = load_vocabulary(data / vfile)
        # a coder can only pick terms of the vocabulary (CHIP-CDN's files name a few others)
        held = [m for m in load_labelled(data / held_file, vocab).mentions
                if m.terms and all(t in vocab for t in m.terms)]
        res = {"vocabulary_names": len(vocab), "mentions": len(held)}
        rows = (("recall_order", lambda: Engine(vocab)), ("shipped_cold_start", lambda: shipped_engine(vocab, [])))
        for row, build in rows:
            t0 = time.perf_counter()
            eng = build()
            got = measure(eng, held)
            res[row] = {**{k: round(v, 4) for k, v in got.items()}, "model": eng.model_version,
                        "seconds": round(time.perf_counter() - t0, 1)}
            print(f"{name} {row:20s} accuracy {got['accuracy']:.4f} micro-F1 {got['micro_f1']:.4f} "
                  f"({res[row]['seconds']} s)", flush=True)
        out[name] = res
    write_json(Path(args.out), {"command": "python3 benchmarks/day_one.py " + " ".join(argv or sys.argv[1:]),
                                "results": out})
    return 0


if __name__ == "__main__":
    sys.exit(main())
