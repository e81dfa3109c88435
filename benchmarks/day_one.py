"""Day one: a hospital's first day with termnorm -- no coded history, the full vocabulary, only what ships.

The engine a vocabulary gets before any decision (db.serving.shipped_engine: the lexical pipeline with the
cold-start ranker of its domain; built-in keywords, no keyword folder, no training file) suggests for the
official held-out file; against it, the recall order alone (the same engine without the ranker). Every
mention is on day one a mention of a never-coded term. The cold-start engine once more with the built-in
Chinese short forms read (termnorm.text.short_forms: 上感 → 上呼吸道感染), with the sign test against it without
them. Exact-set accuracy and micro-F1 (CHIP-CDN's metric)
go to ``benchmarks/results/day_one.json``. Issue 26's day-one measurement: what vocabulary-side learning
must raise.

Per row also the accuracy by familiarity (termnorm.evaluate.accuracy_by_familiarity): the buckets the full
pipeline is measured in, by how often the set's *training* file codes the mention's rarest gold term (the
day-one engine never reads that file). It says how the day-one engine, which knows no coded history, does on
the mentions the full pipeline finds hardest: on Yidu-N7K val's never-coded bucket it beats the pipeline (0.598,
``termnorm evaluate``; docs/benchmarks.md, "Name scorer").

    python3 benchmarks/day_one.py                 # Yidu-N7K val and CHIP-CDN dev (a few minutes)
    python3 benchmarks/day_one.py --sets ncbi --dense-ncbi runs/ncbi_top2/model

NCBI disease dev (English, MEDIC) has no cold-start ranker of its domain: its day-one engine is the recall order.
``--dense-<set> DIR`` adds the recall order with a bi-encoder trained on the vocabulary's own names and synonyms (no
coded mention: ``termnorm train recall --data vocab``, docs/benchmarks.md), what a hospital can have on day one,
with the sign test against it without. NCBI mentions are read in their abstracts, as the app reads them.
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
        "cdn": ("chip-cdn/icd10_beijing_clinical_v601.xlsx", "chip-cdn/dev.json"),
        "ncbi": ("ncbi-disease/medic_06Jul2012.txt", "ncbi-disease/NCBIdevelopset_corpus.txt")}
#: each set's training file: only its gold terms are read, for the familiarity buckets
TRAIN = {"yidu": "yidu-n7k/train.xlsx", "cdn": "chip-cdn/train.json", "ncbi": "ncbi-disease/NCBItrainset_corpus.txt"}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data"))
    ap.add_argument("--sets", default="yidu,cdn")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "day_one.json"))
    for n in SETS:
        ap.add_argument(f"--dense-{n}", help=f"a bi-encoder trained on {n}'s vocabulary alone (adds a row)")
    args = ap.parse_args(argv)
    from db.serving import shipped_engine
    from termnorm.dense.crossfit import load_dense
    from termnorm.engine import Engine, cold_start_domain
    from termnorm.evaluate import accuracy_by_familiarity, evaluate_predictions
    from termnorm.loaders import load_labelled, load_vocabulary
    from termnorm.stats import sign_test
    from termnorm.text import short_forms

    data, out = Path(args.data), {}
    for name in args.sets.split(","):
        vfile, held_file = SETS[name]
        vocab = load_vocabulary(data / vfile)
        # a coder can only pick terms of the vocabulary (CHIP-CDN's files name a few others)
        held = [m for m in load_labelled(data / held_file, vocab).mentions
                if m.terms and all(t in vocab for t in m.terms)]
        res = {"vocabulary_names": len(vocab), "mentions": len(held)}
        coded = [m.terms for m in load_labelled(data / TRAIN[name], vocab).mentions]
        rows = [("recall_order", lambda: Engine(vocab), False)]
        if cold_start_domain(vocab):
            rows += [("shipped_cold_start", lambda: shipped_engine(vocab, []), False),
                     ("shipped_cold_start_short_forms", lambda: shipped_engine(vocab, []), True)]
        dense_dir = getattr(args, f"dense_{name}")
        if dense_dir:  # in the recall order: a cold-start ranker was fitted without the encoder's score
            rows.append(("recall_order_synonym_encoder", lambda: Engine(vocab, dense=load_dense(dense_dir)), False))
        right = {}
        for row, build, reads_short_forms in rows:
            t0 = time.perf_counter()
            was, short_forms.ENABLED = short_forms.ENABLED, reads_short_forms
            try:
                eng = build()
                chosen = [s.chosen for s in eng.suggest_batch([m.text for m in held],
                                                              documents=[m.document for m in held])]
            finally:  # the switch is the process's: a caller (a test) gets it back as it was
                short_forms.ENABLED = was
            gold = [m.terms for m in held]
            right[row] = [set(c) == set(g) for c, g in zip(chosen, gold)]
            got = evaluate_predictions(gold, chosen, None)
            fam = accuracy_by_familiarity(coded, gold, chosen)
            res[row] = {"accuracy": round(float(got["accuracy"]), 4), "micro_f1": round(float(got["micro_f1"]), 4),
                        "by_familiarity": {b: {"n": v["n"], "accuracy": None if v["accuracy"] is None
                                               else round(v["accuracy"], 4)} for b, v in fam.items()},
                        "model": eng.model_version, "seconds": round(time.perf_counter() - t0, 1)}
            buckets = " ".join(f"{b} {v['accuracy']:.3f} (n={v['n']})" for b, v in fam.items() if v["n"])
            print(f"{name} {row:20s} accuracy {got['accuracy']:.4f} micro-F1 {got['micro_f1']:.4f} "
                  f"({res[row]['seconds']} s); by familiarity {buckets}", flush=True)
        for key, (a, b) in {"short_forms_vs_not": ("shipped_cold_start_short_forms", "shipped_cold_start"),
                            "synonym_encoder_vs_not": ("recall_order_synonym_encoder", "recall_order")}.items():
            if a in right and b in right:
                res[key] = sign_test(right[a], right[b])
                print(f"{name} {key}: {res[key]}", flush=True)
        out[name] = res
    write_json(Path(args.out), {"command": "python3 benchmarks/day_one.py " + " ".join(argv or sys.argv[1:]),
                                "results": out})
    return 0


if __name__ == "__main__":
    sys.exit(main())
