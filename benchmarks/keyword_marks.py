"""Keyword marks that agree with coders: how often the coding page marks a correct answer as lacking a keyword.

The candidate table marks a mention keyword the term lacks ("lacks 肿块") and a term keyword that differs from
the mention's (red). Marks that fire on correct answers teach coders to ignore them. This fits the shipped
pipeline on a set's training file, suggests for its held-out file, and counts, for the top candidate:

* ``correct_marked``: correct top candidates (a gold term) that carry at least one mark -- should be low;
* ``wrong_marked``: wrong top candidates that carry one -- a mark should still flag these;

once with the marks as before (same text only) and once with the engine's learned equivalences
(Engine.same_keyword: rewrites the surface-difference scorer learned from coders, weight >= threshold),
for a few thresholds; the first two rows compare nested site keywords (乳 / 乳房) as written, the shipped
marks let them agree (app_pages._markup.NESTED_SITES_AGREE). The last rows add what the coding page does since:
a multi-part mention's term compared with the part it answers (app_pages._markup.answered_part), and a keyword
coders leave out of their terms not marked as lacking (termnorm.explain.dropped, counted over the training
file as the engine's history). Writes ``benchmarks/results/keyword_marks.json``.

    python3 benchmarks/keyword_marks.py            # Yidu-N7K val (a few minutes)
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._results import write_json  # noqa: E402


def marked(engine, sug, same, parts: bool = False, dropped: bool = False) -> bool:
    """Whether the coding page marks the top candidate: as app_pages.coding_queue draws it when ``parts`` and
    ``dropped`` (a multi-part mention's term against the part it answers; detail coders drop not lacking)."""
    from app_pages._markup import answered_part, compare_keywords, missing_keywords
    from termnorm import explain

    if not sug.candidates:
        return False
    spans = engine.tag(sug.candidates[0].term)
    kw = sug.keywords
    if parts and len(sug.parts) > 1:
        kw = answered_part([engine.tag(p) for p in sug.parts], spans, same) or kw
    drop = (lambda span: explain.dropped(engine, span)) if dropped else None
    return bool(missing_keywords(kw, spans, same, drop)) or "mismatch" in compare_keywords(kw, spans, same)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data"))
    ap.add_argument("--set", default="yidu")
    ap.add_argument("--thresholds", default="0.25,0.5,1.0")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "keyword_marks.json"))
    args = ap.parse_args(argv)
    from benchmarks.accuracy import SETS
    from termnorm import reading
    from termnorm.engine import Engine
    from termnorm.loaders import load_labelled, load_vocabulary

    vpath, trpath, tepath, settings = SETS[args.set]
    data = Path(args.data)
    vocab = load_vocabulary(data / vpath)
    train = [m for m in load_labelled(data / trpath, vocab).mentions if m.terms]
    test = load_labelled(data / tepath, vocab).mentions
    t0 = time.perf_counter()
    eng = Engine(vocab, history=train, keyword_dir=data / "keywords", recall_profile=settings["recall_profile"],
                 max_candidates=settings["max_candidates"])
    eng.fit_ranker(eng.ranker_training_data(train), rule_metric=settings["rule_metric"])
    sugs = eng.suggest_batch([m.text for m in test])
    fit_s = time.perf_counter() - t0
    right = [bool(s.candidates) and s.candidates[0].term in set(m.terms) for s, m in zip(sugs, test)]

    def count(same, parts=False, dropped=False) -> dict:
        marks = [marked(eng, s, same, parts, dropped) for s in sugs]
        n_right = sum(right)
        return {"correct_marked": round(sum(k for k, r in zip(marks, right) if r) / max(1, n_right), 4),
                "wrong_marked": round(sum(k for k, r in zip(marks, right) if not r) / max(1, len(right) - n_right), 4)}

    from app_pages import _markup

    _markup.NESTED_SITES_AGREE = False  # the rows as before nested sites (乳 / 乳房) agreed
    rows = [{"marks": "no learned equivalences, nested sites compared as written", **count(None)},
            {"marks": "learned equivalences, weight >= 0.5, nested sites compared as written",
             **count(eng.same_keyword)}]
    _markup.NESTED_SITES_AGREE = True
    rows.append({"marks": "no learned equivalences", **count(None)})
    default = reading.SAME_KEYWORD_WEIGHT
    for th in [float(x) for x in args.thresholds.split(",")]:
        reading.SAME_KEYWORD_WEIGHT = th
        rows.append({"marks": f"learned equivalences, weight >= {th}", **count(eng.same_keyword)})
    reading.SAME_KEYWORD_WEIGHT = default
    rows += [{"marks": "learned equivalences, each term against the part of the mention it answers",
              **count(eng.same_keyword, parts=True)},
             {"marks": "learned equivalences, detail coders leave out not lacking", **count(eng.same_keyword,
                                                                                        dropped=True)},
             {"marks": "both (shipped)", **count(eng.same_keyword, parts=True, dropped=True)}]
    for r in rows:
        print(f"{r['marks']:70s} correct top candidates marked {r['correct_marked']:.3f}, "
              f"wrong ones marked {r['wrong_marked']:.3f}")
    write_json(Path(args.out), {"command": "python3 benchmarks/keyword_marks.py " + " ".join(argv or sys.argv[1:]),
                                "set": args.set, "mentions": len(test), "top_candidate_right": sum(right),
                                "shipped_threshold": default, "fit_and_suggest_seconds": round(fit_s, 1),
                                "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
