"""Part-context features of the pair scorer: a candidate against the mention part it names.

脾切除+胆囊切除术 needs 全脾切除术 and 胆囊切除术. The list-context features (termnorm.gbm_ranker.CONTEXT_KEYS)
compare each candidate with the best of *all* the mention's candidates, so 全脾切除术, a term no coder has used
yet, is measured against 胆囊切除术, an exact match of the other part, and loses (p 0.35: the count classifier
then outputs one term). Here each candidate is assigned to the part whose *distinctive* characters it holds the
largest share of (those not in every part: 脾 | 胆囊, since 切除 tells the parts apart not at all), and compared
with that part's candidates only:

==========================  ==============================================================================
``cover``                   the share of its part's distinctive characters the candidate's name contains
``crowd``                   the share of the mention's candidates assigned to the same part
``best``, ``gap`` per score the best value of the score (:data:`PART_KEYS`) among the part's candidates, and
                            the candidate's own value minus it
==========================  ==============================================================================

A candidate with none of any part's distinctive characters (切除术 alone) is in a group of its own. A one-part
mention (or an engine that does not split) gets zeros: its one part is the whole list, which the list-context
features already describe (measured: with them repeated here, 5,000 Yidu-N7K mentions cross-validated gained
1.7 points on the 575 multi-part mentions and lost 0.1 on the others, 32 right only with, 38 only without).

Off by default (``GBMOptions.part_context``): cross-validated it did not help overall (CHIP-CDN exact-set 0.3940
against 0.3959, p = 0.56, micro-F1 0.6997 against 0.6985; Yidu-N7K level, 42 / 42). On CHIP-CDN it raised the
multi-part mentions (82 / 56) and lowered the one-part ones (119 / 158): docs/benchmarks.md, "Part context".
``benchmarks/cv.py --rows shipped,part_context`` measures it.
"""

from __future__ import annotations

import numpy as np

from termnorm.gbm_ranker import PART_STOP

#: Scores that get a per-part best and gap (those of them a fitted ranker has).
PART_KEYS = ("history", "history_part", "history_jaccard", "history_jaccard_part", "tfidf", "tfidf_part",
             "jaccard", "jaccard_part", "clf", "diff", "prior")


def distinctive_parts(mention: str, n_parts: int) -> list[frozenset]:
    """Each part's characters less :data:`PART_STOP` and less those every part has; none when ``n_parts`` < 2
    or fewer than two parts have characters, and the parts' own characters when some part has none of its own
    (右甲状腺全切+左甲状腺次全切除术: one term names both)."""
    from termnorm.text.split import split_mention

    if n_parts < 2:
        return []
    parts = [_chars(p) for p in split_mention(mention)]
    parts = [p for p in parts if p]
    if len(parts) < 2:
        return []
    common = frozenset.intersection(*parts)
    own = [p - common for p in parts]
    return own if all(own) else parts


def _chars(text: str) -> frozenset:
    """The letters and digits of the normalised text, less :data:`PART_STOP` (a '+' names no part)."""
    from termnorm.text.normalize import normalize

    return frozenset(ch for ch in normalize(text) if ch.isalnum()) - PART_STOP


def assign(term: str, parts: list[frozenset]) -> tuple[int, float]:
    """(the part the term names, the share of that part's characters it contains); (-1, 0.0) for none."""
    chars = set(term)
    shares = [len(chars & p) / len(p) if p else 0.0 for p in parts]
    j = int(np.argmax(shares)) if shares else -1
    return (j, shares[j]) if j >= 0 and shares[j] > 0 else (-1, 0.0)


def layout(score_keys: list[str]) -> tuple[list[int], int]:
    """(indices into a featurizer's ``score_keys`` of the :data:`PART_KEYS` it has, :func:`width` for them)."""
    cols = [j for j, k in enumerate(score_keys) if k in PART_KEYS]
    return cols, width(len(cols))


def width(n_keys: int) -> int:
    """Columns of :func:`part_context` for ``n_keys`` scores."""
    return 2 + 2 * n_keys


def part_context(mention: str, terms: list[str], S: np.ndarray, n_parts: int) -> np.ndarray:
    """The part-context columns for one mention's candidates.

    ``terms`` are the candidates' normalised names, ``S`` their values of the chosen scores (one column per
    key, 0 where absent), ``n_parts`` the engine's part count. Returns ``len(terms)`` x :func:`width` columns:
    cover, crowd, then each score's best among the candidate's part, then its gap to that best; zeros for a
    one-part mention.
    """
    n, nk = S.shape
    out = np.zeros((n, width(nk)), dtype=np.float32)
    parts = distinctive_parts(mention, n_parts) if n else []
    if not parts:
        return out
    groups = np.empty(n, dtype=np.int64)
    for i, t in enumerate(terms):
        groups[i], out[i, 0] = assign(t, parts)
    for g in np.unique(groups):
        rows = groups == g
        out[rows, 1] = rows.sum() / n
        if nk:
            best = S[rows].max(axis=0)
            out[rows, 2:2 + nk] = best
            out[rows, 2 + nk:] = S[rows] - best
    return out
