"""Hierarchy features: is a candidate in the category the mention's coded neighbours are in?

A term no coder has used yet has no history score of its own, however close the mention's coded neighbours
are; but its siblings often do (甲状腺部分切除术 coded a hundred times, 甲状腺病损切除术 never: both 06.3 in
ICD-9-CM-3; C50 乳腺 for ICD-10). For every candidate, score ``category1`` is the best history score (of the
history recallers, :data:`HISTORY_KEYS`) among the *other* candidates of the mention that share its nearest
category (the code's parent: 06.3, C50.4), ``category2`` the same one level up (06, C50). The ranker could
learn how far to trust a never-coded candidate whose category the neighbours vouch for.

Off by default (``Engine.category_features``): cross-validated it did not help. Measured with it on by
default (Yidu-N7K at commit 31e03bc, CHIP-CDN at 9eb6056; ``benchmarks/results/cv_yidu_category.json``,
``cv_cdn_category.json``): Yidu-N7K 0.8794 with, 0.8800 without (p = 0.79); CHIP-CDN exact-set 0.3913 with,
0.3961 without (p = 0.11), micro-F1 0.6984 against 0.6996. ``benchmarks/cv.py --rows shipped,category``
measures it again.
"""

from __future__ import annotations

import re

#: Score keys of the history recallers (termnorm.recall.history): a coded mention close to the mention.
HISTORY_KEYS = ("history", "history_jaccard")
LEVELS = 2
#: An ICD-style code's category and subcategory when the vocabulary has no tree: 06.3100 -> 06.3, 06;
#: C56xx02 -> C56 (MeSH's D001943 is not one)
_ICD_HEAD = re.compile(r"([A-Z]?\d{2})(?:\.(\w)|(?=X)|$)")


def categories(vocabulary, term: str, cache: dict) -> tuple[str, ...]:
    """The term's categories, nearest first (:meth:`termnorm.vocabulary.Vocabulary.ancestors` of its first
    code, else the ICD code's own head), at most :data:`LEVELS`; () for a term without either."""
    got = cache.get(term)
    if got is None:
        codes = vocabulary.codes.get(term) or []
        got = tuple(vocabulary.ancestors(codes[0])[:LEVELS]) if codes else ()
        if codes and not got:
            m = _ICD_HEAD.match(codes[0].upper())
            got = ((f"{m[1]}.{m[2]}", m[1]) if m[2] else (m[1],)) if m else ()
        cache[term] = got
    return got


def annotate(vocabulary, cand_lists, cache: dict) -> None:
    """Write ``category1`` / ``category2`` into each candidate's scores (only where positive)."""
    for cands in cand_lists:
        if len(cands) < 2:
            continue
        hist = [max((c.scores.get(k, 0.0) for k in HISTORY_KEYS), default=0.0) for c in cands]
        if not any(hist):
            continue
        cats = [categories(vocabulary, c.term, cache) for c in cands]
        for level in range(LEVELS):
            best: dict[str, list[tuple[float, int]]] = {}  # category -> its two best (score, index)
            for i, (h, cs) in enumerate(zip(hist, cats)):
                if h > 0 and len(cs) > level:
                    top = best.setdefault(cs[level], [])
                    top.append((h, i))
                    top.sort(reverse=True)
                    del top[2:]
            if not best:
                continue
            key = f"category{level + 1}"
            for i, (c, cs) in enumerate(zip(cands, cats)):
                if len(cs) <= level:
                    continue
                v = next((h for h, j in best.get(cs[level], ()) if j != i), 0.0)
                if v > 0:
                    c.scores[key] = float(v)
