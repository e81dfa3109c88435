"""A learned surface-difference scorer: which differences between a mention and a term a coder accepts.

The GBM ranker (termnorm.gbm_ranker) sees how much a mention and a candidate
overlap, not *what* differs. Coders' labels are full of systematic
rewrites — 肿瘤 -> 病损, 造瘘 -> 造口, 活检 -> 活组织检查, ORIF -> 切开复位内固定
— and of differences that are fatal although small (锁骨 for 髌骨, 大腿 for
小腿). A cross-encoder learns both from the pair's tokens; this is its sparse,
CPU-cheap stand-in: a logistic regression over hashed features of the pair's
*difference*:

* characters and character bigrams only the term has / only the mention has,
* every (mention-only character, term-only character) pair — the learned
  substitutions (瘤 -> 损 good, 胫 -> 锁 bad),
* keyword-level differences (body site, type, nature from the tagger) and
  their pairs, the number of differing characters, the pair of endings (last
  two and three characters of term and mention: the type of procedure or
  disease), and the term itself (a learned prior over how often coders pick
  it given the rest).

Its decision value becomes one more score of a candidate (key ``"diff"``),
so the GBM ranker takes it (value and rank) as a feature next to the recall
strategies' scores, and the count classifier through the GBM's probabilities. For training candidates it must be out-of-fold (a
mention's own label never scores its candidates): :meth:`fit_out_of_fold`
returns such scores and keeps a model fitted on every mention for inference.

Measured (``python3 benchmarks/accuracy.py``, rows ``full`` vs ``no_diff``):
see the README's accuracy table.

Input table (one row per candidate):

    | mention              | term             | gold? |
    |----------------------|------------------|-------|
    | 左髌骨骨折术后内固定物取出术 | 髌骨内固定装置去除术 | 1     |
    | 左髌骨骨折术后内固定物取出术 | 锁骨内固定装置去除术 | 0     |
"""

from __future__ import annotations

import numpy as np
from sklearn.feature_extraction.text import HashingVectorizer
from sklearn.linear_model import LogisticRegression

from termnorm.gbm_ranker import SITE_TYPE
from termnorm.text.normalize import normalize

#: Cached texts per cache (mention and term keywords, normalized terms) before it is emptied.
CACHE_SIZE = 200_000
#: Pairs of differing characters are crossed only when both sides differ in at most this many characters
#: (long unrelated pairs would add hundreds of meaningless features).
MAX_CROSS = 12
#: Inverse regularization of the logistic regression. Yidu-N7K val exact-set accuracy of the lexical
#: pipeline (without the scorer 0.821), before the ending features: C=1 0.852, C=4 0.857, C=8 0.864;
#: with them: C=4 0.868, C=8 0.866 (one run each; differences below ~0.005 are noise). Tried and left
#: out: jieba word differences (0.855), pairs of first two characters (0.862), pairs of differing
#: bigrams (0.859), mention characters and bigrams crossed with the term's code category (ICD prefix
#: 81.65: 0.871, 81.6: 0.863), the differences to the most similar coded mention of the term (0.856).
C = 4.0
#: Hashed feature space; 2^21 buckets keep collisions rare for the ~10^5-10^6 distinct pair features.
N_FEATURES = 1 << 21


def _bigrams(s: str) -> set[str]:
    return {s[i:i + 2] for i in range(len(s) - 1)}


class SurfaceDiffScorer:
    """Logistic regression on hashed mention/term difference features; ``score`` -> decision values."""

    def __init__(self, tagger=None, c: float = C, seed: int = 0, keywords: bool = True):
        self.tagger = tagger
        # False: no keyword-level features (part of the ranker's "no keyword attention" ablation)
        self.keywords = keywords
        self.c = c
        self.seed = seed
        # the fitted logistic regression's weights over the hashed buckets (dense: a sparse row vector is
        # converted on every product, measured 2 ms per mention) and bias; None until fitted
        self.weights: np.ndarray | None = None
        self.bias = 0.0
        self._kw_cache: dict[str, set[str]] = {}  # text -> its keywords
        self._term_cache: dict[str, str] = {}  # term -> normalized term

    def __getstate__(self):
        state = dict(self.__dict__)
        state["tagger"] = None  # the engine hands its own tagger back after loading
        state["_kw_cache"], state["_term_cache"] = {}, {}  # caches hold text: never pickled
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._kw_cache, self._term_cache = {}, {}

    @property
    def fitted(self) -> bool:
        return self.weights is not None

    # ---- features ----------------------------------------------------------------
    @staticmethod
    def _cached(cache: dict, key: str, compute):
        got = cache.get(key)
        if got is None:
            if len(cache) > CACHE_SIZE:
                cache.clear()
            got = cache[key] = compute(key)
        return got

    def _keywords(self, text: str) -> set[str]:
        """Site / type / nature keywords (the GBM's keyword kinds, termnorm.gbm_ranker.SITE_TYPE), normalized."""
        if self.tagger is None or not self.keywords:
            return set()
        return self._cached(self._kw_cache, text, lambda t: {normalize(sp.text) for sp in self.tagger.tag(t)
                                                              if sp.kind in SITE_TYPE})

    def pair_features(self, mention: str, term: str, m: str | None = None) -> list[str]:
        """The difference features of one (mention, term) pair, as strings to be hashed
        (``m``: the mention already normalized)."""
        m = normalize(mention) if m is None else m
        t = self._norm_term(term)
        ms, ts = set(m), set(t)
        t_only, m_only = ts - ms, ms - ts
        out = ["T" + t, "nt%d" % min(len(t_only), 8), "nm%d" % min(len(m_only), 8),
               # how the term ends given how the mention ends: the procedure / disease type (切除术 | 切除)
               "tt" + t[-3:] + "|" + m[-3:], "tt2" + t[-2:] + "|" + m[-2:]]
        out += ["t+" + ch for ch in t_only]
        out += ["m-" + ch for ch in m_only]
        if len(t_only) <= MAX_CROSS and len(m_only) <= MAX_CROSS:
            out += ["x" + a + b for a in m_only for b in t_only]
        mb, tb = _bigrams(m), _bigrams(t)
        out += ["tb+" + b for b in tb - mb]
        out += ["mb-" + b for b in mb - tb]
        mk, tk = self._keywords(mention), self._keywords(term)
        k_t = [k for k in tk if k not in m]
        k_m = [k for k in mk if k not in t]
        out += ["tk+" + k for k in k_t] + ["mk-" + k for k in k_m]
        out += ["kx" + a + "|" + b for a in k_m for b in k_t]
        return out

    def _norm_term(self, term: str) -> str:
        return self._cached(self._term_cache, term, normalize)

    def _matrix(self, mentions, cand_lists):
        hv = HashingVectorizer(analyzer=_identity, n_features=N_FEATURES, alternate_sign=False, norm="l2",
                               binary=True)
        rows = []
        for mention, cl in zip(mentions, cand_lists):
            m = normalize(mention)
            rows.extend(self.pair_features(mention, c.term, m) for c in cl)
        return hv.transform(rows)

    # ---- fitting ---------------------------------------------------------------
    def _new_model(self) -> LogisticRegression:
        return LogisticRegression(C=self.c, max_iter=2000, solver="liblinear", random_state=self.seed)

    def fit_out_of_fold(self, mentions, cand_lists, golds, folds: int = 5,
                        progress: bool = False) -> list[np.ndarray]:
        """Fit on every labelled mention; return, per mention, scores from a model that did not see it.

        Mentions with no gold terms (only rejected candidates) are scored but never trained on.
        """
        if not cand_lists:
            return []
        X = self._matrix(mentions, cand_lists)
        sizes = np.array([len(cl) for cl in cand_lists])
        owner = np.repeat(np.arange(len(cand_lists)), sizes)
        y = np.array([c.term in set(g) for cl, g in zip(cand_lists, golds) for c in cl], dtype=np.int8)
        labelled = np.repeat(np.array([bool(g) for g in golds], dtype=bool), sizes)
        fold = np.random.default_rng(self.seed).integers(0, folds, len(cand_lists))[owner]
        scores = np.zeros(len(y))
        if labelled.sum() == 0 or len(set(y[labelled])) < 2:
            self.weights = None
            return [np.zeros(s) for s in sizes]
        steps = range(folds)
        if progress:
            from tqdm import tqdm
            steps = tqdm(steps, desc="surface-difference scorer (folds)")
        for f in steps:
            train = labelled & (fold != f)
            if (fold == f).any() and train.any() and len(set(y[train])) == 2:
                scores[fold == f] = self._new_model().fit(X[train], y[train]).decision_function(X[fold == f])
        model = self._new_model().fit(X[labelled], y[labelled])
        self.weights = model.coef_.ravel().astype(np.float32)
        self.bias = float(model.intercept_[0])
        return np.split(scores, np.cumsum(sizes)[:-1])

    # ---- inference ---------------------------------------------------------------
    def score(self, mentions, cand_lists) -> list[np.ndarray]:
        sizes = [len(cl) for cl in cand_lists]
        if self.weights is None or not sum(sizes):
            return [np.zeros(s) for s in sizes]
        s = self._matrix(mentions, cand_lists) @ self.weights + self.bias
        return np.split(np.asarray(s, dtype=float), np.cumsum(sizes)[:-1])

    def rewrite_weight(self, mention_keyword: str, term_keyword: str) -> float:
        """The learned weight of writing ``mention_keyword`` as ``term_keyword`` (feature ``kx``: 肿瘤 -> 病损
        positive, 锁骨 -> 髌骨 negative); 0.0 when never seen or not fitted."""
        if self.weights is None:
            return 0.0
        hv = HashingVectorizer(analyzer=_identity, n_features=N_FEATURES, alternate_sign=False, norm=None,
                               binary=True)
        col = hv.transform([["kx" + normalize(mention_keyword) + "|" + normalize(term_keyword)]]).indices[0]
        return float(self.weights[col])

    def annotate(self, mentions, cand_lists, scores=None) -> None:
        """Write the scores into each candidate's ``scores["diff"]`` (given ones, or the fitted model's)."""
        if scores is None:
            if self.weights is None:
                return
            scores = self.score(mentions, cand_lists)
        for cl, sc in zip(cand_lists, scores):
            for c, v in zip(cl, sc):
                c.scores["diff"] = float(v)


def _identity(x):
    return x
