"""How far could choosing, mention by mention, between the pipeline and the day-one engine lift the long tail?

On the mentions whose gold term no training mention codes, the day-one engine (db.serving.shipped_engine: the
cold-start ranker of the domain, which reads no coded history) beats the full pipeline (docs/benchmarks.md,
"Name scorer"), and is far below it on every other bucket. A score carrying its opinion did not move the
pipeline's ranker (the ``name`` row of benchmarks/cv.py). This script bounds the other way to use it: give each
mention the answer of one of the two engines. Per familiarity bucket (termnorm.evaluate.familiarity_buckets over
the training file), on the official split (Yidu-N7K val, CHIP-CDN dev):

- ``pipeline`` and ``day_one``: each engine's exact-set accuracy;
- ``oracle``: right with either, the ceiling of any chooser of the two answers;
- ``switch_novel``: a chooser that needs no training -- the day-one answer whenever it names a term no training
  mention codes (the pipeline's answer otherwise).

The cold-start rankers were fitted on the training files, never on val / dev, so fold 0 is the honest split for
them (folds 1-4 of benchmarks/cv.py hold out training mentions they saw).

    python3 benchmarks/switch_bound.py                # Yidu-N7K and CHIP-CDN (about 25 minutes on 2 cores)
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._results import write_json  # noqa: E402


def answers(name: str, data: Path) -> dict:
    """Per test mention of the official split: its bucket, and whether each engine is right; with the day-one
    answer's newness (a term no training mention codes)."""
    from benchmarks.accuracy import SETS
    from db.serving import shipped_engine
    from termnorm.engine import Engine
    from termnorm.evaluate import familiarity_buckets
    from termnorm.loaders import load_labelled, load_vocabulary

    vpath, trpath, tepath, settings = SETS[name]
    vocab = load_vocabulary(data / vpath)
    train, test = (load_labelled(data / p, vocab).mentions for p in (trpath, tepath))
    texts = [m.text for m in test]
    t0 = time.perf_counter()
    eng = Engine(vocab, history=train, keyword_dir=data / "keywords", recall_profile=settings["recall_profile"],
                 max_candidates=settings["max_candidates"])
    eng.fit_ranker(eng.ranker_training_data(train, seed=0, term_classifier=settings.get("term_classifier", True)),
                   seed=0, rule_metric=settings["rule_metric"])
    piped = [set(s.chosen) for s in eng.suggest_batch(texts, documents=[m.document for m in test])]
    day_one = [set(s.chosen) for s in shipped_engine(vocab, []).suggest_batch(texts)]
    coded = Counter(t for m in train for t in set(m.terms))
    return {"buckets": familiarity_buckets((m.terms for m in train), [m.terms for m in test]),
            "pipeline": [p == set(m.terms) for p, m in zip(piped, test)],
            "day_one": [d == set(m.terms) for d, m in zip(day_one, test)],
            "day_one_novel": [any(coded[t] == 0 for t in d) for d in day_one],
            "seconds": round(time.perf_counter() - t0, 1)}


def bound(a: dict) -> dict:
    """Per bucket (and ``all``): n, each engine's accuracy, the oracle's and the untrained switch's."""
    from termnorm.evaluate import FAMILIARITY_BUCKETS

    rows = list(zip(a["buckets"], a["pipeline"], a["day_one"], a["day_one_novel"]))
    out = {}
    for b in [*(b for b, _, _ in FAMILIARITY_BUCKETS), "all"]:
        sel = [r for r in rows if b in ("all", r[0])]
        n = len(sel)
        if not n:
            continue
        out[b] = {"n": n, "pipeline": round(sum(r[1] for r in sel) / n, 4),
                  "day_one": round(sum(r[2] for r in sel) / n, 4),
                  "oracle": round(sum(r[1] or r[2] for r in sel) / n, 4),
                  "switch_novel": round(sum(r[2] if r[3] else r[1] for r in sel) / n, 4),
                  "right_only_pipeline": sum(r[1] and not r[2] for r in sel),
                  "right_only_day_one": sum(r[2] and not r[1] for r in sel)}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data"))
    ap.add_argument("--sets", default="yidu,cdn", help="sets with a shipped cold-start ranker (yidu, cdn)")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "switch_bound.json"))
    args = ap.parse_args(argv)
    results = {}
    for name in args.sets.split(","):
        a = answers(name, Path(args.data))
        results[name] = {"by_familiarity": bound(a), "seconds": a["seconds"]}
        for b, v in results[name]["by_familiarity"].items():
            print(f"{name} {b:7s} n={v['n']:5d} pipeline {v['pipeline']:.3f} day-one {v['day_one']:.3f} "
                  f"oracle {v['oracle']:.3f} switch {v['switch_novel']:.3f} "
                  f"(right only: pipeline {v['right_only_pipeline']}, day-one {v['right_only_day_one']})", flush=True)
    write_json(Path(args.out), {"command": "python3 benchmarks/switch_bound.py " + " ".join(argv or sys.argv[1:]),
                                "results": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
