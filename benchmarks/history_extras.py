"""What the two extra history strategies propose, alone: coded key and analogy recall.

    python3 benchmarks/history_extras.py [--data ../shared/data] [--sets yidu,cdn,ncbi]
                                         [--out benchmarks/results/history_extras.json]

With the training file as history and the val / dev file as queries, per set:

* ``exact``: queries whose normalized text equals a coded mention (the sieve's case);
* ``key``: queries whose :func:`termnorm.recall.history.coded_key` equals a coded mention's, and how
  many of them have as gold exactly the term set that most of those coded mentions carry
  (:class:`~termnorm.recall.history.CodedKeyRecaller` scores a term by that share);
* ``analogy``: queries for which :class:`~termnorm.recall.analogy.AnalogyRecaller` proposes a term,
  how often its best proposal is a gold term, and how often some proposal is.

What they add to the whole pipeline is measured by ``benchmarks/cv.py`` (rows ``coded_key`` and
``history_extras``).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._results import write_json  # noqa: E402

from termnorm.loaders import load_labelled, load_vocabulary  # noqa: E402
from termnorm.recall.analogy import AnalogyRecaller  # noqa: E402
from termnorm.recall.history import add_history_terms, coded_key  # noqa: E402
from termnorm.text.normalize import normalize  # noqa: E402

SETS = {
    "yidu": ("yidu-n7k/code.txt", "yidu-n7k/train.xlsx", "yidu-n7k/val.xlsx"),
    "cdn": ("chip-cdn/icd10_beijing_clinical_v601.xlsx", "chip-cdn/train.json", "chip-cdn/dev.json"),
    "ncbi": ("ncbi-disease/medic_06Jul2012.txt", "ncbi-disease/NCBItrainset_corpus.txt",
             "ncbi-disease/NCBIdevelopset_corpus.txt"),
}


def measure(vocab, history, queries) -> dict:
    exact = {normalize(m.text) for m in history}
    by_key: dict[str, list[frozenset]] = defaultdict(list)
    for m in history:
        by_key[coded_key(m.text)].append(frozenset(m.terms))
    key_n = key_majority = 0
    for m in queries:
        sets = by_key.get(coded_key(m.text))
        if sets:
            key_n += 1
            key_majority += Counter(sets).most_common(1)[0][0] == frozenset(m.terms)
    t0 = time.perf_counter()
    recaller = AnalogyRecaller().fit(vocab, history)
    hits = recaller.recall_batch([m.text for m in queries], k=5)
    seconds = time.perf_counter() - t0
    proposed = [(m, h) for m, h in zip(queries, hits) if h]
    best_gold = sum(vocab.names[h[0][0]] in m.terms for m, h in proposed)
    any_gold = sum(any(vocab.names[t] in m.terms for t, _ in h) for m, h in proposed)
    return {"queries": len(queries), "history": len(history),
            "exact": sum(normalize(m.text) in exact for m in queries),
            "key": {"queries": key_n, "gold_is_majority_set": key_majority},
            "analogy": {"queries": len(proposed), "best_is_gold": best_gold, "some_is_gold": any_gold,
                        "fit_and_recall_seconds": round(seconds, 2)}}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data"))
    ap.add_argument("--sets", default="yidu,cdn,ncbi")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "history_extras.json"))
    args = ap.parse_args(argv)
    data = Path(args.data)
    out = {}
    for name in args.sets.split(","):
        vpath, trpath, tepath = SETS[name]
        vocab = load_vocabulary(data / vpath)
        history = load_labelled(data / trpath, vocab).mentions
        add_history_terms(vocab, history)  # as the engine does: coders' gold names are terms
        queries = [m for m in load_labelled(data / tepath, vocab).mentions if m.terms]
        r = out[name] = measure(vocab, history, queries)
        k, a = r["key"], r["analogy"]
        print(f"{name}: {r['queries']} queries, {r['history']} coded mentions; equal text {r['exact']}; "
              f"equal key {k['queries']} (gold = the majority's terms: {k['gold_is_majority_set']}); "
              f"analogy proposals {a['queries']} (best is gold {a['best_is_gold']}, some is gold "
              f"{a['some_is_gold']}; {a['fit_and_recall_seconds']} s)")
    write_json(args.out, out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
