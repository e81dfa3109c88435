"""History recall (approach B): find similar already-coded mentions and propose their terms."""

from __future__ import annotations

import re

import numpy as np
import scipy.sparse as sp
from sklearn.feature_extraction.text import HashingVectorizer
from sklearn.preprocessing import normalize as l2_normalize

from termnorm.recall.base import Hits, Recaller
from termnorm.recall.jaccard import intersections_to_jaccard
from termnorm.recall.tfidf import SurfaceIndex, top_k_sparse
from termnorm.records import LabelledMention
from termnorm.text.normalize import normalize
from termnorm.vocabulary import Vocabulary

#: Coded mentions added after ``fit`` sit in a small buffer index searched
#: alongside the main one; at this size the buffer is merged into the main
#: index (rebuilding the buffer costs O(buffer) per added mention, merging
#: O(history): ~10 ms for 6,000 CHIP-CDN mentions).
MERGE_EVERY = 512


class HashedCharTfidf:
    """Char n-gram TF-IDF (sublinear tf, smooth idf, L2 rows) over *hashed* n-grams.

    Same weighting as :func:`termnorm.recall.tfidf.char_vectorizer`, but with
    no fitted n-gram vocabulary: a mention coded after ``fit`` that holds
    characters never seen (an English abbreviation such as "tace") still gets
    all its features, weighted with the idf of an unseen n-gram (the largest).
    2^20 buckets: collisions are negligible for ~10^5 distinct n-grams.
    """

    def __init__(self, ngram_range: tuple[int, int] = (1, 2), n_features: int = 1 << 20):
        self.hasher = HashingVectorizer(analyzer="char", ngram_range=ngram_range, lowercase=False,
                                        alternate_sign=False, norm=None, n_features=n_features,
                                        dtype=np.float32)

    def document_frequencies(self, texts: list[str]) -> np.ndarray:
        counts = self.hasher.transform(texts).tocsr()
        return np.bincount(counts.indices, minlength=counts.shape[1])

    def fit(self, texts: list[str], more: tuple[np.ndarray, int] | None = None) -> "HashedCharTfidf":
        """idf over ``texts`` and, when given, ``more``: (document frequencies, number of texts) of others."""
        df, n = self.document_frequencies(texts) if texts else 0, len(texts)
        if more is not None:
            df, n = df + more[0], n + more[1]
        self.idf = (np.log((1 + n) / (1 + df)) + 1).astype(np.float32)  # sklearn's smooth idf
        return self

    def transform(self, texts: list[str]) -> sp.csr_matrix:
        x = self.hasher.transform(texts).tocsr()
        x.data = (1 + np.log(x.data)) * self.idf[x.indices]
        return l2_normalize(x, copy=False)


_NAMES_DF: list = []  # [(weakref to the vocabulary, key, (df, n))]: the last vocabulary's, see _names_df


def _names_df(vocab: Vocabulary, tfidf: HashedCharTfidf) -> tuple[np.ndarray, int]:
    """Document frequencies of the vocabulary's normalized names and synonyms, and their number: the same for
    both history recallers and for every ``Engine.with_history`` copy (K-fold candidates, the app's rebuilds),
    so computed once per vocabulary state (400,000 names: ~4 s each time otherwise)."""
    import weakref

    names, _ = vocab.surface_forms()
    key = (tfidf.hasher.ngram_range, tfidf.hasher.n_features, len(names), names[-1] if names else "")
    last = _NAMES_DF[0] if _NAMES_DF else None  # one read: another thread may replace it meanwhile
    if last is not None and last[0]() is vocab and last[1] == key:
        return last[2]
    got = (tfidf.document_frequencies([normalize(t) for t in names]), len(names))
    _NAMES_DF[:] = [(weakref.ref(vocab), key, got)]
    return got


def add_history_terms(vocab: Vocabulary, history: list[LabelledMention]) -> list[str]:
    """Add to ``vocab`` the gold names of ``history`` it lacks; return them.

    Coders' labels are terms too: ~4% of CHIP-CDN gold names are not in the
    v601 ICD-10 file, and 79 of the 108 dev mentions that need such a name
    find it among the train labels. Call before fitting the strategies so
    every strategy (and the ranker) can propose those names.
    """
    added = []
    for m in history:
        for t in m.terms:
            t = t.strip()
            if t and t not in vocab:
                vocab.add_term(t)
                added.append(t)
    return added


def known_term_ids(vocab: Vocabulary, terms) -> tuple[list[int], int]:
    """The vocabulary ids of a coded mention's terms (each once, in order) and how many it does not know."""
    tids, unknown = [], 0
    for t in dict.fromkeys(terms):
        tid = vocab.get_id(t.strip())
        if tid is None:
            unknown += 1
        else:
            tids.append(tid)
    return tids, unknown


class HistoryRecaller(Recaller):
    """Char TF-IDF match of the query against already-coded mentions; propose their gold terms.

    Approach B's third strategy (history recall@10 0.515 alone, but it lifts
    the union to 0.983), and approach E's "annotated training mentions (D)"
    search target. A term's score is the cosine of the *most similar* coded
    mention that proposes it. Each (coded mention, gold term) pair is one row
    of a :class:`~termnorm.recall.tfidf.SurfaceIndex`, so max-pooling per term
    is the same machinery as synonyms of a name.

    New coded mentions (a coder accepting or correcting a suggestion) are
    searchable at once through :meth:`add_coded_mention`: like approach E,
    nothing is retrained; the mention is vectorised (hashed n-grams, so even
    unseen characters count: :class:`HashedCharTfidf`) into a small append
    buffer, merged into the main index every :data:`MERGE_EVERY` mentions.
    Gold names unknown to the vocabulary are skipped (counted in
    ``skipped_terms``); see :func:`add_history_terms` to add them first.

    Input table (``history``):

    ==========================  ===================================
    coded mention                gold terms
    ==========================  ===================================
    ``腹腔镜胆囊切除术+胆道造影``   ``胆囊切除术``, ``胆道造影``
    ``卵巢Ca``                    ``卵巢恶性肿瘤``, ``癌``
    ==========================  ===================================

    A query close to ``卵巢ca`` gets both ``卵巢恶性肿瘤`` and ``癌`` with the
    same score.

    ``similarity="jaccard"`` compares character *sets* instead (as
    :class:`~termnorm.recall.jaccard.JaccardRecaller` does with names; the
    instance is then named ``history_jaccard``): on 1,000 held-out CHIP-CDN
    train mentions it lifts the union's candidate recall from 0.892 to 0.899
    at 50 candidates, though alone it is slightly weaker (recall@20 0.561 vs
    0.577).

    Relation to siblings: the other strategies compare the query with *names*
    and cannot find a colloquial or abbreviated mention's terms
    ("肿标升高" → 肿瘤标记物升高) nor guess that one mention needs several
    terms; this one can, whenever a similar mention was coded before.

    Example::

        v = Vocabulary(names=["卵巢恶性肿瘤", "癌"])
        r = HistoryRecaller().fit(v, [LabelledMention("卵巢Ca", ["卵巢恶性肿瘤", "癌"])])
        r.recall("卵巢ca术后", k=5)     # [(0, 0.647...), (1, 0.647...)]
        r.add_coded_mention("肿标升高", ["癌"])   # searchable now
    """

    name = "history"

    def __init__(self, ngram_range: tuple[int, int] = (1, 2), merge_every: int = MERGE_EVERY,
                 similarity: str = "tfidf"):
        if similarity not in ("tfidf", "jaccard"):
            raise ValueError(f"similarity must be 'tfidf' or 'jaccard', not {similarity!r}")
        self.ngram_range = ngram_range
        self.merge_every = merge_every
        self.similarity = similarity
        if similarity == "jaccard":
            self.name = "history_jaccard"

    def _vectorize(self, texts: list[str]) -> sp.csr_matrix:
        if self.similarity == "jaccard":
            return self._chars.transform(texts).tocsr()
        return self.vectorizer.transform(texts)

    def fit(self, vocab: Vocabulary, history: list[LabelledMention] | None = None) -> "HistoryRecaller":
        self.vocab = vocab
        self.skipped_terms = 0
        history = list(history or [])
        texts = [normalize(m.text) for m in history]
        # idf from the coded mentions and the names together: a mention added
        # later is weighted like the rest (hashing gives it features anyway).
        self.vectorizer = HashedCharTfidf(self.ngram_range)
        self.vectorizer.fit(texts, _names_df(vocab, self.vectorizer))
        # character sets, hashed, for similarity="jaccard"
        self._chars = HashingVectorizer(analyzer="char", lowercase=False, binary=True, norm=None,
                                        alternate_sign=False, n_features=self.vectorizer.hasher.n_features,
                                        dtype=np.float32)
        rows, terms = self._pairs(history, self._vectorize(texts) if texts else None)
        self._main_rows, self._main_terms = rows, terms
        self._main = SurfaceIndex(rows, terms)
        self._buf_rows: list[sp.csr_matrix] = []
        self._buf_terms: list[int] = []
        self._buf: SurfaceIndex | None = None
        return self

    def _pairs(self, mentions: list[LabelledMention], vectors) -> tuple[sp.csr_matrix, np.ndarray]:
        """One row per (mention, known gold term) pair."""
        src, terms = [], []
        for i, m in enumerate(mentions):
            tids, unknown = known_term_ids(self.vocab, m.terms)  # a term listed twice counts once
            self.skipped_terms += unknown
            src.extend([i] * len(tids))
            terms.extend(tids)
        n_feat = self.vectorizer.hasher.n_features
        if not src:
            return sp.csr_matrix((0, n_feat), dtype=np.float32), np.zeros(0, dtype=np.int64)
        return vectors[np.asarray(src)], np.asarray(terms, dtype=np.int64)

    def __len__(self) -> int:
        """Number of (coded mention, term) pairs searchable now."""
        return len(self._main) + len(self._buf_terms)

    def add_coded_mention(self, mention: str, terms: list[str]) -> None:
        """Make a newly coded mention searchable for the next query (no refit)."""
        rows, tids = self._pairs([LabelledMention(mention, list(terms))], self._vectorize([normalize(mention)]))
        if not len(tids):
            return
        self._buf_rows.append(rows)
        self._buf_terms.extend(tids.tolist())
        if len(self._buf_terms) >= self.merge_every:
            self._merge()
        else:
            self._buf = SurfaceIndex(sp.vstack(self._buf_rows, format="csr"), self._buf_terms)

    def _merge(self) -> None:
        self._main_rows = sp.vstack([self._main_rows] + self._buf_rows, format="csr")
        self._main_terms = np.concatenate([self._main_terms, np.asarray(self._buf_terms, dtype=np.int64)])
        self._main = SurfaceIndex(self._main_rows, self._main_terms)
        self._buf_rows, self._buf_terms, self._buf = [], [], None

    def recall_batch(self, queries: list[str], k: int) -> list[Hits]:
        norm = [normalize(t) for t in queries]
        q = self._vectorize(norm)
        indexes = [ix for ix in (self._main, self._buf) if ix is not None and len(ix)]
        if not indexes:
            return [[] for _ in queries]
        # Main and buffer scored side by side: a term's rows in either are max-pooled.
        form_terms = np.concatenate([ix.form_terms for ix in indexes])
        if self.similarity == "jaccard":
            q_sizes = np.array([len(set(t)) for t in norm], dtype=np.float32)
            form_sizes = np.concatenate([np.diff(ix.rows.indptr) for ix in indexes]).astype(np.float32)
        out: list[Hits] = []
        for chunks in zip(*(ix.products(q) for ix in indexes)):
            rows = chunks[0][0]
            s = chunks[0][1] if len(chunks) == 1 else sp.hstack([c for _, c in chunks], format="csr")
            if self.similarity == "jaccard":
                s = intersections_to_jaccard(s, q_sizes[rows], form_sizes)
            out.extend(top_k_sparse(s, form_terms, k, pooled=True))
        return out


#: Side words a coded mention's key drops: 左/右 rarely decide a procedure's code (单侧 terms serve both
#: sides), but 双侧 often does (甲状腺全部切除术 vs 单侧甲状腺叶切除术), so it stays. 左右 (左右心导管) is
#: one word and stays too.
_SIDE = re.compile(r"(?<![左右])(左侧|右侧|左|右)(?![左右])")
#: What else a key drops: punctuation, spaces, and code numbers pasted in (((55.4001+59.0301))).
_NOISE = re.compile(r"\d+\.\d+|[\s,，.。;；:：()（）\[\]【】{}\"“”'‘’、*#]+")


def coded_key(text: str) -> str:
    """The loose key under which :class:`CodedKeyRecaller` files a mention: normalized, without
    left/right, punctuation, pasted codes and a final 术.

    >>> coded_key("显微支撑喉镜下CO2激光左侧声带切除术。")
    '显微支撑喉镜下co2激光声带切除'
    >>> coded_key("左右心导管检查")
    '左右心导管检查'
    """
    s = _NOISE.sub("", _SIDE.sub("", normalize(text)))
    return s[:-1] if s.endswith("术") and len(s) > 2 else s


class CodedKeyRecaller(Recaller):
    """Coded mentions that say the same thing up to side, punctuation and a final 术: propose their terms.

    The sieve (``Engine``) takes a coded mention's terms only for an *identical* normalized mention: on
    Yidu-N7K 13 val mentions equal a train mention, while 251 equal one up to left/right, punctuation,
    pasted codes and a final 术 (:func:`coded_key`), and for 245 of these (0.976) the terms most of those
    train mentions carry are the val gold (``python3 benchmarks/history_extras.py``). History recall
    finds such neighbours too, but by a cosine that a few changed characters (左侧 in a short mention)
    pull down to a near-miss's level. Here a term's score is the *share* of the coded mentions under the
    query's key that carry it (1.0 when they agree), so the ranker can learn how far an equal key is to
    be trusted; each part of a split mention is looked up by its own key (``history_key_part``).

    Input table (``history``) and what a query finds:

    ======================  ==================  =============================================
    coded mention            gold terms          query -> hits
    ======================  ==================  =============================================
    ``左侧腰交感神经阻滞术``     麻醉药交感神经注射…   ``腰交感神经阻滞术`` -> (麻醉药交感神经注射…, 1.0)
    ``右三叉神经射频术``        三叉神经射频消融术    ``左侧三叉神经射频术`` -> (…消融术, 0.5),
    ``左侧三叉神经射频术``      颅和周围神经的破坏术   (颅和周围神经的破坏术, 0.5)
    ======================  ==================  =============================================

    New coded mentions count at once (:meth:`add_coded_mention`), as for the other history strategies.

    Example::

        r = CodedKeyRecaller().fit(v, [LabelledMention("左侧腰交感神经阻滞术", ["麻醉药交感神经注射，为了镇痛"])])
        r.recall("腰交感神经阻滞术", k=3)   # [(term id, 1.0)]
    """

    name = "history_key"

    def fit(self, vocab: Vocabulary, history: list[LabelledMention] | None = None) -> "CodedKeyRecaller":
        self.vocab = vocab
        self.skipped_terms = 0
        self._mentions: dict[str, int] = {}  # key -> coded mentions under it
        self._votes: dict[str, dict[int, int]] = {}  # key -> term id -> coded mentions carrying it
        for m in history or []:
            self.add_coded_mention(m.text, m.terms)
        return self

    def add_coded_mention(self, mention: str, terms: list[str]) -> None:
        tids, unknown = known_term_ids(self.vocab, terms)
        self.skipped_terms += unknown
        key = coded_key(mention)
        if not tids or not key:
            return
        self._mentions[key] = self._mentions.get(key, 0) + 1
        votes = self._votes.setdefault(key, {})
        for tid in tids:
            votes[tid] = votes.get(tid, 0) + 1

    def recall_batch(self, queries: list[str], k: int) -> list[Hits]:
        out: list[Hits] = []
        for q in queries:
            key = coded_key(q)
            votes = self._votes.get(key)
            if not votes:
                out.append([])
                continue
            n = self._mentions[key]
            hits = sorted(((tid, c / n) for tid, c in votes.items()), key=lambda h: (-h[1], h[0]))
            out.append(hits[:k])
        return out
