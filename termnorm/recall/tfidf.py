"""Character n-gram TF-IDF recall, plus the sparse search core the lexical strategies share.

:class:`SurfaceIndex` is the one piece of machinery behind every sparse
strategy here (TF-IDF, BM25, Jaccard, history): rows are surface forms, each
resolving to a term id; a batch of queries is scored with one sparse product
``Q · Nᵀ``, and the top k terms per query are taken with ``argpartition`` on
that query's nonzero scores only, a term's several forms max-pooled — no
Python loop over the vocabulary.
"""

from __future__ import annotations

import re
from typing import Callable, Iterable

import numpy as np
import scipy.sparse as sp
from sklearn.feature_extraction.text import TfidfVectorizer

from termnorm.recall.base import Hits, Recaller
from termnorm.records import LabelledMention
from termnorm.text.normalize import normalize
from termnorm.vocabulary import Vocabulary

# Queries scored per sparse product: bounds the memory of one product
# (256 queries x ~10k matching ICD-10 forms each ~ 20 MB); larger chunks
# measured no faster.
CHUNK = 256


def row_top_k(data: np.ndarray, cols: np.ndarray, col_terms: np.ndarray, k: int, pooled: bool) -> Hits:
    """Best ``k`` terms of one sparse score row (``data`` at columns ``cols``), max-pooled per term.

    Only the row's nonzeros are looked at (``argpartition`` on them). With
    pooling, the distinct terms among the top ``take`` forms are exactly the
    best terms by max-pooled score (a term's best form outranks the best form
    of any term below it), so ``take`` starts at ``2k`` and grows only while
    fewer than ``k`` distinct terms are found. Ties are broken by term id.
    """
    n = len(data)
    if n == 0 or k <= 0:
        return []
    take = min(n, 2 * k if pooled else k)
    while True:
        sel = np.argpartition(data, n - take)[n - take:] if take < n else np.arange(n)
        terms = col_terms[cols[sel]]
        vals = data[sel]
        order = np.lexsort((terms, -vals))
        hits: dict[int, float] = {}
        for t, v in zip(terms[order].tolist(), vals[order].tolist()):
            if v <= 0 or len(hits) == k:
                break
            if t not in hits:  # first (best) form of the term
                hits[t] = v
        if not pooled or len(hits) >= k or take == n:
            return list(hits.items())
        take = min(n, take * 4)


def top_k_sparse(scores: sp.csr_matrix, col_terms: np.ndarray, k: int, pooled: bool = True) -> list[Hits]:
    """:func:`row_top_k` for every row of a CSR score matrix (a loop over queries, never over the vocabulary)."""
    indptr, indices, data = scores.indptr, scores.indices, scores.data
    return [row_top_k(data[indptr[i]:indptr[i + 1]], indices[indptr[i]:indptr[i + 1]], col_terms, k, pooled)
            for i in range(scores.shape[0])]


class SurfaceIndex:
    """Rows of a sparse feature matrix (surface forms) that each resolve to a term id."""

    def __init__(self, matrix: sp.spmatrix, form_terms: Iterable[int]):
        self.form_terms = np.asarray(form_terms, dtype=np.int64).reshape(-1)
        self.rows = sp.csr_matrix(matrix)  # forms x features
        if self.rows.shape[0] != len(self.form_terms):
            raise ValueError(f"{self.rows.shape[0]} rows but {len(self.form_terms)} term ids")
        self.rows_t = self.rows.T.tocsr()  # features x forms, for Q @ Nᵀ
        # several forms of one term -> max-pool (names with synonyms, variants, history pairs)
        self.pooled = len(np.unique(self.form_terms)) < len(self.form_terms)

    def __len__(self) -> int:
        return self.rows.shape[0]

    def products(self, queries: sp.spmatrix, chunk: int = CHUNK):
        """Yield ``(row slice, Q[rows] · Nᵀ)`` chunk by chunk (raw scores per form)."""
        queries = sp.csr_matrix(queries)
        for start in range(0, queries.shape[0], chunk):
            rows = slice(start, min(start + chunk, queries.shape[0]))
            yield rows, sp.csr_matrix(queries[rows] @ self.rows_t)

    def search(self, queries: sp.spmatrix, k: int,
               post: Callable[[sp.csr_matrix, slice], sp.csr_matrix] | None = None,
               chunk: int = CHUNK) -> list[Hits]:
        """Top-k ``(term_id, score)`` per query row, best first.

        ``post(S, rows)`` may rewrite the raw product (intersection counts ->
        Jaccard) before the top-k.
        """
        if len(self) == 0:
            return [[] for _ in range(queries.shape[0])]
        out: list[Hits] = []
        for rows, s in self.products(queries, chunk):
            if post is not None:
                s = post(s, rows)
            out.extend(top_k_sparse(s, self.form_terms, k, self.pooled))
        return out


_BRACKET_END = re.compile(r"^(?P<head>[^\[\]]+)\[(?P<alt>[^\[\]]+)\]$")
_BRACKETS = re.compile(r"\[[^\[\]]*\]|\([^()]*\)|（[^（）]*）")
_NOT_ELSEWHERE = re.compile(r"[,，]\s*不可归类在他处(?:者)?")


def name_variants(name: str) -> list[str]:
    """Shorter forms of a standard name that mentions are written like (besides the name itself).

    ICD names carry qualifiers coders never type: "预激综合征[沃-帕-怀综合征]",
    "拇指创伤性切断(完全)(部分)", "白斑病,不可归类在他处者". Variants:
    the name without bracketed / parenthesised parts and without
    "不可归类在他处者"; and, for a name ``X[Y]`` ending in a bracket, ``Y``
    alone (there the bracket holds a synonym or eponym: 甲状腺毒症[甲状腺功能亢进症]).
    On the ICD-10 v601 file this adds ~2,600 forms to 37,645 names and lifted
    the CHIP-CDN dev union from 0.897 to 0.902 candidate recall at 50
    candidates (a small but free gain; names without qualifiers are unchanged).
    """
    out: list[str] = []
    m = _BRACKET_END.match(name)
    if m and len(m.group("alt").strip()) >= 2:
        alt = m.group("alt").strip()
        out.append(alt)
        if "/" in alt:  # 多发性神经病[多发性神经炎/周围神经炎]
            out.extend(a.strip() for a in alt.split("/") if len(a.strip()) >= 2)
    core = _NOT_ELSEWHERE.sub("", _BRACKETS.sub("", name)).strip(" ,，")
    if core and core != name:
        out.append(core)
    return [v for v in dict.fromkeys(out) if v != name]


def searchable_forms(vocab: Vocabulary, variants: bool = True) -> tuple[list[str], list[int]]:
    """Surface forms (names, synonyms) plus, optionally, :func:`name_variants` of each name, with term ids."""
    texts, ids = vocab.surface_forms()
    if variants:
        extra = [(v, i) for t, i in zip(texts[: len(vocab.names)], ids) for v in name_variants(t)]
        texts = texts + [t for t, _ in extra]
        ids = ids + [i for _, i in extra]
    return texts, ids


def char_vectorizer(ngram_range=(1, 2)) -> TfidfVectorizer:
    """Char n-gram TF-IDF on already-normalized text (cosine = dot product of L2 rows)."""
    return TfidfVectorizer(analyzer="char", ngram_range=ngram_range, sublinear_tf=True,
                           lowercase=False, dtype=np.float32)


class CharTfidfRecaller(Recaller):
    """Character n-gram TF-IDF cosine between the query and every surface form.

    The classic lexical baseline of approaches A and B (Approach A reports
    TF-IDF alone at 46.8 exact-set accuracy on CHIP 2019 procedures); here it
    is one recall strategy among several. Characters rather than words because
    Chinese clinical mentions are short (~12 characters) and segmentation of
    colloquial text is unreliable; 1-2-grams with sublinear tf are the
    baseline of ``data/README.md``. 1-3-grams measured worse (recall@10 on
    Yidu-N7K val 0.743 vs 0.696, on CHIP-CDN dev 0.448 vs 0.417).

    Input table (what ``fit`` indexes and what a query returns):

    ======================  ==================================  ===========
    fit: surface form       resolves to                          query hit
    ======================  ==================================  ===========
    ``甲状腺病损切除术``      term id of 甲状腺病损切除术           (id, cos)
    synonym of a term        that term id (max-pooled)            (id, cos)
    ======================  ==================================  ===========

    Relation to siblings: :class:`~termnorm.recall.jaccard.JaccardRecaller`
    uses the same characters without weights (sets, so length and frequent
    characters weigh differently);
    :class:`~termnorm.recall.bm25.BM25Recaller` works on jieba words;
    :class:`~termnorm.recall.history.HistoryRecaller` uses this same
    representation against already-coded mentions instead of names.

    Example::

        from termnorm.vocabulary import Vocabulary
        v = Vocabulary(names=["甲状腺病损切除术", "甲状腺全部切除术"])
        r = CharTfidfRecaller().fit(v)
        r.recall("右侧甲状腺肿瘤切除术", k=2)   # [(0, 0.709...), (1, 0.709...)]: a tie the ranker breaks
    """

    name = "tfidf"

    def __init__(self, ngram_range: tuple[int, int] = (1, 2), variants: bool = True):
        self.ngram_range = ngram_range
        self.variants = variants

    def fit(self, vocab: Vocabulary, history: list[LabelledMention] | None = None) -> "CharTfidfRecaller":
        texts, ids = searchable_forms(vocab, self.variants)
        self.vectorizer = char_vectorizer(self.ngram_range)
        m = self.vectorizer.fit_transform([normalize(t) for t in texts])
        self.index = SurfaceIndex(m, ids)
        return self

    def recall_batch(self, queries: list[str], k: int) -> list[Hits]:
        q = self.vectorizer.transform([normalize(t) for t in queries])
        return self.index.search(q, k)
