"""Exact match of the normalized mention against every surface form."""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Iterable

from termnorm.recall.base import Hits, Recaller
from termnorm.recall.tfidf import searchable_forms
from termnorm.records import LabelledMention
from termnorm.text.normalize import normalize
from termnorm.vocabulary import Vocabulary

# Laterality words: they rarely decide the code (methods.md, "keyword
# sensitive") but make a mention miss an otherwise identical name
# ("右侧甲状腺叶切除术" vs "甲状腺叶切除术"). Longest first so "左侧" goes before "左".
# The bare 左/右/双 are kept although they also occur in anatomy (左心室): with
# them Yidu-N7K val gets 83 exact hits, 82 of them gold at the top, against
# 70 (70) with the "X侧" forms only; CHIP-CDN dev 18 (9 gold) against 15 (7).
LATERALITY = ("左右两侧", "左右侧", "双侧", "两侧", "单侧", "左侧", "右侧", "双", "左", "右")

#: Score of a hit found only after removing laterality / approach words. Below
#: an exact hit (1.0) so the union ranks true exact matches first, above any
#: cosine a fuzzy strategy typically gives a different name (~0.6-0.8).
STRIPPED_SCORE = 0.9


class ExactRecaller(Recaller):
    """Dictionary lookup of the normalized mention among the normalized surface forms.

    The first sieve of approach E (take an exact / near-exact match when there
    is one): a hit is certain enough that the union always keeps it. A second
    dictionary maps forms with laterality words (and, if given, surgical
    approach words such as ``经腹`` from ``data/keywords/procedure_approaches.txt``)
    removed, so "右侧甲状腺叶切除术" still finds "甲状腺叶切除术" (score
    :data:`STRIPPED_SCORE`).

    Input table:

    =======================  =======================  ==============
    query (normalized)        surface form             score
    =======================  =======================  ==============
    ``甲状腺叶切除术``          ``甲状腺叶切除术``          1.0
    ``右侧甲状腺叶切除术``      ``甲状腺叶切除术``          0.9 (stripped)
    =======================  =======================  ==============

    Relation to siblings: the fuzzy strategies (:mod:`~termnorm.recall.tfidf`,
    :mod:`~termnorm.recall.bm25`, :mod:`~termnorm.recall.jaccard`) also find
    these names but rank them among near-misses; this strategy returns at most
    the few terms sharing the form, and nothing otherwise.

    Example::

        v = Vocabulary(names=["甲状腺叶切除术"])
        ExactRecaller().fit(v).recall("右侧甲状腺叶切除术", k=5)   # [(0, 0.9)]
    """

    name = "exact"

    def __init__(self, strip_words: Iterable[str] = (), variants: bool = True):
        self.variants = variants  # also index name_variants (see termnorm.recall.tfidf)
        words = set(LATERALITY) | {w.strip() for w in strip_words if w.strip()}
        self._strip_re = re.compile("|".join(re.escape(normalize(w)) for w in sorted(words, key=len, reverse=True)))

    def _strip(self, text: str) -> str:
        return self._strip_re.sub("", text)

    def fit(self, vocab: Vocabulary, history: list[LabelledMention] | None = None) -> "ExactRecaller":
        texts, ids = searchable_forms(vocab, self.variants)
        self._exact: dict[str, set[int]] = defaultdict(set)
        self._stripped: dict[str, set[int]] = defaultdict(set)
        for t, i in zip(texts, ids):
            n = normalize(t)
            self._exact[n].add(i)
            s = self._strip(n)
            if s:
                self._stripped[s].add(i)
        return self

    def recall_batch(self, queries: list[str], k: int) -> list[Hits]:
        out: list[Hits] = []
        for q in queries:
            n = normalize(q)
            hits = [(i, 1.0) for i in sorted(self._exact.get(n, ()))]
            seen = {i for i, _ in hits}
            s = self._strip(n)
            if s:
                hits += [(i, STRIPPED_SCORE) for i in sorted(self._stripped.get(s, ())) if i not in seen]
            out.append(hits[:k])
        return out

    def add_coded_mention(self, mention: str, terms: list[str]) -> None:
        """Nothing: coded mentions are the history strategy's job (they are not names)."""


#: Shortest form :class:`ContainedNameRecaller` looks for inside a query; the
#: one-character names of ``single_chars`` are the exception (most one-character
#: strings are not diagnoses: "N", "僵").
MIN_CONTAINED_LEN = 2


class ContainedNameRecaller(Recaller):
    """Every surface form that occurs *inside* the normalized query.

    For multi-part mentions: a CHIP-CDN mention often strings several
    diagnoses together without a delimiter ("糖尿病糖尿病周围神经病变糖尿病肾病IV期"
    -> 糖尿病, 糖尿病性周围神经病, 糖尿病肾病IV期), and 26% of CHIP-CDN dev gold
    names (448 of 1,750) occur verbatim in their mention. A whole-mention
    similarity dilutes each of them; a substring lookup finds them directly.
    All substrings of the query (length >= :data:`MIN_CONTAINED_LEN`) are
    looked up in a dict of normalized forms: O(len²) lookups per query,
    ~1 hit per CHIP-CDN mention on average.

    Score = characters of the query the form covers (``len(form) / len(query)``),
    so longer, more specific names come first.

    Input table:

    ================================  ===================  ==========
    query                              contained form        score
    ================================  ===================  ==========
    ``糖尿病糖尿病肾病4期``              ``糖尿病肾病4期``      7/10
    ``糖尿病糖尿病肾病4期``              ``糖尿病``             3/10
    ================================  ===================  ==========

    Relation to siblings: the exact-match complement of
    :class:`ExactRecaller` (whole query = whole name); the split parts the
    union recalls cover delimited parts, this covers undelimited ones.

    Example::

        v = Vocabulary(names=["糖尿病", "糖尿病肾病IV期", "肾病"])
        ContainedNameRecaller().fit(v).recall("糖尿病糖尿病肾病IV期", k=5)
        # [(1, 0.7), (0, 0.3), (2, 0.2)]   (IV期 normalizes to 4期)
    """

    name = "contained"

    def __init__(self, max_len: int = 20, single_chars: Iterable[str] = ("癌", "痔", "痣", "疣", "痈", "疖"),
                 variants: bool = True):
        self.variants = variants  # also index name_variants (see termnorm.recall.tfidf)
        # max_len: longest form looked for. v601 names reach 68 characters, but
        # no CHIP-CDN train/dev gold name longer than 15 occurs inside its mention.
        # single_chars: one-character names worth proposing when present
        # (癌 is the 3rd most frequent CHIP-CDN gold name, 409 train uses).
        self.max_len = max_len
        self.single_chars = {normalize(c) for c in single_chars}

    def fit(self, vocab: Vocabulary, history: list[LabelledMention] | None = None) -> "ContainedNameRecaller":
        texts, ids = searchable_forms(vocab, self.variants)
        self._forms: dict[str, set[int]] = defaultdict(set)
        for t, i in zip(texts, ids):
            n = normalize(t)
            if len(n) >= MIN_CONTAINED_LEN or n in self.single_chars:
                self._forms[n].add(i)
        self._longest = min(self.max_len, max((len(f) for f in self._forms), default=0))
        return self

    def recall_batch(self, queries: list[str], k: int) -> list[Hits]:
        out: list[Hits] = []
        forms = self._forms
        for q in queries:
            n = normalize(q)
            best: dict[int, float] = {}
            for i in range(len(n)):
                for j in range(i + 1, min(len(n), i + self._longest) + 1):
                    ids = forms.get(n[i:j])
                    if ids:
                        s = (j - i) / len(n)
                        for t in ids:
                            if s > best.get(t, 0.0):
                                best[t] = s
            out.append(sorted(best.items(), key=lambda x: (-x[1], x[0]))[:k])
        return out
