"""Word-level BM25 recall over jieba tokens, as one sparse product per batch."""

from __future__ import annotations

from typing import Iterable

import numpy as np
import scipy.sparse as sp
from sklearn.feature_extraction.text import CountVectorizer
from tqdm.auto import tqdm

from termnorm.recall.base import Hits, Recaller
from termnorm.recall.tfidf import SurfaceIndex, searchable_forms
from termnorm.records import LabelledMention
from termnorm.text.normalize import normalize
from termnorm.text.segment import Segmenter
from termnorm.vocabulary import Vocabulary


def _as_is(tokens: list[str]) -> list[str]:
    """Analyzer for already-segmented text (a named function so the fitted recaller pickles)."""
    return tokens


class BM25Recaller(Recaller):
    """Okapi BM25 between the query's words and each surface form's words.

    Approach B recalls with TF-IDF over *segmented words* of the vocabulary
    terms (score = sum of the term's weights of the query's words); approach C
    mines its hard negatives with BM25. This is the BM25 form of the same idea,
    precomputed as a sparse matrix ``W[form, word] = idf(word) · tf·(k1+1) /
    (tf + k1·(1 − b + b·|form|/avgdl))`` so that a batch of queries (binary
    bag of words ``Q``) is scored with one product ``Q · Wᵀ``. idf is Lucene's
    ``ln(1 + (N − df + 0.5)/(df + 0.5))`` (never negative).

    Words come from :class:`termnorm.text.segment.Segmenter` (jieba) with a
    user dictionary of domain words (keywords: body sites, operation types,
    approaches; pass them as ``user_words``, or pass a ready ``segmenter``)
    so "甲状腺" or "切除术" stay whole.

    Input table:

    ===========================  ==========================  ==========
    query words                   surface form words          score
    ===========================  ==========================  ==========
    右侧 / 甲状腺 / 肿瘤 / 切除术   甲状腺 / 病损 / 切除术        Σ BM25 of 甲状腺, 切除术
    ===========================  ==========================  ==========

    Relation to siblings: word matching ignores the character overlap that
    :class:`~termnorm.recall.tfidf.CharTfidfRecaller` and
    :class:`~termnorm.recall.jaccard.JaccardRecaller` reward, so it ranks names
    sharing the *rare whole words* (sites, disease heads) higher; it is the
    weakest alone but adds recall in the union.

    Example::

        v = Vocabulary(names=["甲状腺病损切除术", "乳房病损切除术"])
        BM25Recaller(user_words=["甲状腺", "病损", "切除术"]).fit(v).recall("甲状腺肿瘤切除术", k=1)
        # [(0, 0.875...)]: 甲状腺 is rare (idf high), 切除术 is in both names
    """

    name = "bm25"

    def __init__(self, user_words: Iterable[str] = (), k1: float = 1.2, b: float = 0.75,
                 variants: bool = True, segmenter: Segmenter | None = None, progress: bool = False):
        # k1, b: Robertson's defaults; names are short (~9 chars, ~3 words), so
        # length normalisation matters little either way.
        self.user_words = [w for w in user_words if w and w.strip()]
        self.k1 = k1
        self.b = b
        self.variants = variants  # also index name_variants (see termnorm.recall.tfidf)
        self.segmenter = segmenter
        self.progress = progress

    def _tokens(self, text: str) -> list[str]:
        return self.segmenter.cut(normalize(text))

    def fit(self, vocab: Vocabulary, history: list[LabelledMention] | None = None) -> "BM25Recaller":
        if self.segmenter is None:
            # Keyword lists as the user dictionary. Segmenter.from_vocabulary
            # (mined vocabulary pieces) measured the same recall (CHIP-CDN dev
            # pair recall@20 0.455 vs 0.456; Yidu-N7K val 0.705 vs 0.691) but
            # fits in 7.0 s instead of 4.1 s on the 40k ICD-10 names.
            self.segmenter = Segmenter(self.user_words)
        texts, ids = searchable_forms(vocab, self.variants)
        docs = [self._tokens(t) for t in tqdm(texts, desc="bm25: segmenting", disable=not self.progress)]
        self.vectorizer = CountVectorizer(analyzer=_as_is, dtype=np.float32)
        tf = self.vectorizer.fit_transform(docs).tocsr()
        n_docs = tf.shape[0]
        df = np.bincount(tf.indices, minlength=tf.shape[1]).astype(np.float32)
        idf = np.log1p((n_docs - df + 0.5) / (df + 0.5))
        dl = np.asarray(tf.sum(axis=1)).ravel()
        avgdl = max(float(dl.mean()), 1e-9) if n_docs else 1.0
        rows = np.repeat(np.arange(n_docs), np.diff(tf.indptr))
        f = tf.data
        denom = f + self.k1 * (1 - self.b + self.b * dl[rows] / avgdl)
        w = sp.csr_matrix((idf[tf.indices] * f * (self.k1 + 1) / denom, tf.indices, tf.indptr), shape=tf.shape)
        self.index = SurfaceIndex(w, ids)
        return self

    def recall_batch(self, queries: list[str], k: int) -> list[Hits]:
        q = self.vectorizer.transform([self._tokens(t) for t in queries])
        q.data[:] = 1.0  # each query word counts once
        return self.index.search(q, k)
