"""Analogy recall: carry a coded neighbour's edit over to its term.

History recall proposes the terms of the coded mentions most like the query. When the query
differs from its neighbour in the very word that decides the term, that term is wrong and the
right one is often the neighbour's term *with the same edit*:

==============================  ==============================  ==========================================
query                            coded neighbour -> its term      the edit carried over to the term
==============================  ==============================  ==========================================
``右髋关节脱位手法整复术``          ``右肩关节脱位手法整复术``          肩 -> 髋: ``髋脱位闭合性复位术``
                                 -> 肩脱位闭合性复位术
``左枕开颅脑膜瘤切除术``           ``左额开颅脑膜瘤切除术``            额 -> 枕: ``经枕脑膜病损切除术``
                                 -> 经额脑膜病损切除术
``主动脉-一支冠状动脉搭桥术``       ``主动脉-二支冠状动脉搭桥术``        二 -> 一: ``一根冠状动脉的(主动脉)...``
                                 -> 二根冠状动脉的(主动脉)...
==============================  ==============================  ==========================================

For each of the query's :data:`NEIGHBOURS` most similar coded mentions (character TF-IDF over
:func:`termnorm.recall.history.coded_key`, so side, punctuation and a final 术 do not count as
edits) the character-level edit from the neighbour to the query is computed
(:class:`difflib.SequenceMatcher`): at most :data:`MAX_EDITS` replaced, deleted or (at the front)
inserted spans. Each of the neighbour's terms that contains every replaced span is edited the same
way (:func:`carry_edit`); if the result is a name (or synonym) of the vocabulary, and not one of the
neighbour's own terms, it is proposed with the neighbour's cosine as score (``history_analogy``; the
best neighbour counts). The ranker weighs it like any other strategy's score.

On Yidu-N7K val with train as history, 179 of the 1,000 mentions get a proposal and for 157 the best
one is a gold term (``python3 benchmarks/history_extras.py``); the three rows above are errors of the
pipeline without this strategy (髋脱位闭合性复位术 was not among its candidates at all). What the
pipeline gains is in the README (cross-validation, rows ``coded_key`` and ``history_extras``).

New coded mentions count at once (:meth:`add_coded_mention`).

Example::

    r = AnalogyRecaller().fit(v, [LabelledMention("右肩关节脱位手法整复术", ["肩脱位闭合性复位术"])])
    r.recall("右髋关节脱位手法整复术", k=2)   # [(id of 髋脱位闭合性复位术, 0.9...)]
"""

from __future__ import annotations

import difflib

import numpy as np
import scipy.sparse as sp

from termnorm.recall.base import Hits, Recaller
from termnorm.recall.history import HashedCharTfidf, coded_key, known_term_ids
from termnorm.records import LabelledMention
from termnorm.text.normalize import normalize
from termnorm.vocabulary import Vocabulary

#: Coded neighbours whose edit is tried per query (the most similar first).
NEIGHBOURS = 10
#: Edited spans allowed between a neighbour and the query; more is a different mention, not an edit.
MAX_EDITS = 2
#: Share of the longer of the two texts that the edit must leave as it was: 人工股骨头置换 -> 尺骨骨折切开复位
#: 内固定 is two "edits" that keep only 骨.
MIN_KEPT = 0.5


def carry_edit(neighbour: str, query: str, term: str) -> str | None:
    """``term`` (normalized) edited as ``neighbour`` was edited into ``query``; None if it cannot be.

    Every replaced span of the neighbour must occur in the term (its first occurrence is edited); a
    deleted span is removed from the term if it occurs there and ignored if not (a detail the term
    never named); an inserted span is carried only at the front (腹腔镜 + X). No edit at all, more than
    :data:`MAX_EDITS`, or edits that leave less than :data:`MIN_KEPT` of the texts give None.

    >>> carry_edit("肩关节脱位手法整复", "髋关节脱位手法整复", "肩脱位闭合性复位术")
    '髋脱位闭合性复位术'
    >>> carry_edit("肩关节脱位手法整复", "髋关节脱位手法整复", "脱位闭合性复位术") is None
    True
    """
    all_ops = difflib.SequenceMatcher(None, neighbour, query, autojunk=False).get_opcodes()
    ops = [op for op in all_ops if op[0] != "equal"]
    kept = sum(i2 - i1 for tag, i1, i2, _, _ in all_ops if tag == "equal")
    if not ops or len(ops) > MAX_EDITS or kept < MIN_KEPT * max(len(neighbour), len(query)):
        return None
    out = term
    for tag, i1, i2, j1, j2 in ops:
        old, new = neighbour[i1:i2], query[j1:j2]
        if tag == "insert":
            if i1 != 0:
                return None  # new words the term cannot place
            out = new + out
        elif old in out:
            out = out.replace(old, new, 1)
        elif tag == "replace":
            return None
        # a deleted span the term never named (钢板 of 切开复位钢板内固定): nothing to carry
    return out


class AnalogyRecaller(Recaller):
    """Terms of the nearest coded mentions, edited as the neighbour was edited into the query."""

    name = "history_analogy"

    def __init__(self, neighbours: int = NEIGHBOURS):
        self.neighbours = neighbours

    def fit(self, vocab: Vocabulary, history: list[LabelledMention] | None = None) -> "AnalogyRecaller":
        self.vocab = vocab
        self.skipped_terms = 0
        self._keys: list[str] = []
        self._terms: list[tuple[int, ...]] = []
        self._term_texts: list[tuple[str, ...]] = []  # the same terms' normalized names, for carry_edit
        for m in history or []:
            self._remember(m.text, m.terms)
        self.vectorizer = HashedCharTfidf((1, 2)).fit(self._keys or [""])
        self._rows = self.vectorizer.transform(self._keys) if self._keys else None
        self._pending = 0
        self._index_names()
        return self

    def _index_names(self) -> None:
        forms, ids = self.vocab.surface_forms()
        self._names = {}
        for f, tid in zip(forms, ids):
            self._names.setdefault(normalize(f), tid)
        self._n_forms = len(forms)

    def _remember(self, mention: str, terms) -> bool:
        tids, unknown = known_term_ids(self.vocab, terms)
        self.skipped_terms += unknown
        key = coded_key(mention)
        if not tids or not key:
            return False
        self._keys.append(key)
        self._terms.append(tuple(tids))
        self._term_texts.append(tuple(normalize(self.vocab.names[t]) for t in tids))
        return True

    def add_coded_mention(self, mention: str, terms: list[str]) -> None:
        """Make a newly coded mention a neighbour for the next query (vectorized when next searched)."""
        if self._remember(mention, terms):
            self._pending += 1

    def _matrix(self) -> sp.csr_matrix | None:
        if self._pending:
            new = self.vectorizer.transform(self._keys[-self._pending:])
            self._rows = new if self._rows is None else sp.vstack([self._rows, new], format="csr")
            self._pending = 0
        return self._rows

    def recall_batch(self, queries: list[str], k: int) -> list[Hits]:
        rows = self._matrix()
        if rows is None or not k:
            return [[] for _ in queries]
        if len(self.vocab.names) + sum(map(len, self.vocab.synonyms.values())) != self._n_forms:
            self._index_names()  # a term or synonym added since fit
        keys = [coded_key(q) for q in queries]
        sims = (self.vectorizer.transform(keys) @ rows.T).tocsr()
        out: list[Hits] = []
        for qi, key in enumerate(keys):
            lo, hi = sims.indptr[qi], sims.indptr[qi + 1]
            cols, vals = sims.indices[lo:hi], sims.data[lo:hi]
            best: dict[int, float] = {}
            for j in np.argsort(-vals, kind="stable")[: self.neighbours]:
                nb = self._keys[cols[j]]
                if nb == key:
                    continue  # the same mention up to side and punctuation: CodedKeyRecaller's case
                own = self._terms[cols[j]]
                for term in self._term_texts[cols[j]]:
                    edited = carry_edit(nb, key, term)
                    hit = self._names.get(edited) if edited else None
                    if hit is not None and hit not in own and vals[j] > best.get(hit, 0.0):
                        best[hit] = float(vals[j])
            out.append(sorted(best.items(), key=lambda h: (-h[1], h[0]))[:k])
        return out
