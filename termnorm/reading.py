"""How the engine reads a mention beside its recall: abbreviations spelled out, keywords coders treat as the same.

* :func:`spelled_out` -- abbreviations added at run time (the demo list, coders' ones) written out before the
  engine reads the mention (卵巢Ca -> 卵巢恶性肿瘤); the keyword folder's table is the recall's own (its
  ``_abbr`` keys are features of a fitted ranker), so it is left to the recall.
* :func:`same_keyword` -- whether a keyword of the mention and one of a term mean the same to coders: equal, or
  a rewrite the surface-difference scorer (termnorm.rank.surface) learned from their decisions with a weight of
  at least :data:`SAME_KEYWORD_WEIGHT` (肿瘤 -> 病损). The app marks a keyword as missing or different only
  when it is not (``benchmarks/keyword_marks.py`` measures how often correct answers still get a mark).
"""

from __future__ import annotations

from termnorm.text.normalize import Abbreviations, normalize

#: The learned rewrite weight from which a mention's keyword and a term's count as the same.
SAME_KEYWORD_WEIGHT = 0.5


def same_keyword(engine, mention_keyword: str, term_keyword: str) -> bool:
    a, b = normalize(mention_keyword), normalize(term_keyword)
    d = getattr(engine, "diff_scorer", None)
    return a == b or (d is not None and d.rewrite_weight(a, b) >= SAME_KEYWORD_WEIGHT)


def spelled_out(engine, mention: str) -> str:
    """``mention`` with the run-time abbreviations written out, or ``mention`` itself when it has none."""
    added = getattr(engine, "added_abbreviations", None)
    if not added:
        return mention
    cached = getattr(engine, "_spell", None)
    if cached is None or cached[0] != len(added):  # rebuilt when a coder teaches one more
        own = {normalize(a) for a in (engine.abbreviations or {})}
        cached = engine._spell = (len(added), Abbreviations({a: e for a, e in added if normalize(a) not in own}))
    n = normalize(mention)
    expanded = cached[1].expand(n)
    return mention if expanded == n else expanded
