"""A per-term text classifier over the coded mentions: how likely coders would give *this* mention this term.

History recall (termnorm.recall.history) proposes the terms of the most similar
coded mention and scores a term by that one neighbour's similarity; the
surface-difference scorer (termnorm.rank.surface) learns which mention/term
differences coders accept. Neither learns, per term, which words of a mention
point to it *against its siblings* — that 双侧甲状腺全切除 is coded
甲状腺病损切除术 or 甲状腺全部切除术 depending on the words around it, that
射频毁损 of the trigeminal nerve goes to 三叉神经射频消融术. A one-vs-rest
linear SVM over the mentions' character 1–3-grams (TF-IDF) learns exactly
that from the labels: the text-classification view of normalization, here
one more ranker feature rather than the answer (it knows only terms that
coded mentions name; the ranker still sees every candidate).

Its decision value, squashed to (0, 1) by a logistic, becomes the candidate's
score ``"clf"`` — 0 for a term no coded mention names — so the GBM ranker
weighs it (value and rank) next to recall and surface scores. Training
candidates get it *out of fold*: in :meth:`termnorm.engine.Engine.kfold_candidates`
each fold's classifier is fitted on the other folds' mentions, as history
recall is; the one used at inference is fitted on every training mention.

Measured on Yidu-N7K val (lexical pipeline, seeds 0/1/2): 0.868/0.857/0.858
without it; see the README's accuracy table (row ``no_termclf``) and
``benchmarks/results/seeds.json`` for the figures with it. ``C``: 0.15 /
0.5 / 2 / 8 gave 0.869 / 0.876 / 0.881 / 0.877 (seed 0, one run each, before
the SVM's random state was fixed: runs then varied by ~0.3 points).
Character 1–4-grams: 0.873. On English NCBI it cost accuracy before the
ranker's list-context features (0.832 with it, 0.844 without on dev); with them
it adds 0.7 points cross-validated over 5,932 NCBI mentions (0.909 → 0.916,
sign test p = 0.0008, ``benchmarks/results/cv_ncbi.json``), so every set now
runs with it.

Only candidates' terms are scored (it proposes no candidates: adding its
top 3 terms to the candidate list measured 0.880 against 0.881).

The weights are kept as a sparse matrix: an SVM's weights are nonzero for
every n-gram seen, but only ~2% exceed :data:`PRUNE` in magnitude (Yidu-N7K:
956 terms × 17k n-grams, 130 MB dense, a few MB pruned).

Input table (the coded mentions it is fitted on):

    | mention                  | gold terms                 |
    |--------------------------|----------------------------|
    | 双侧甲状腺次全切除术        | [甲状腺病损切除术]            |
    | 左乳切除+前哨淋巴结活检术    | [单侧单纯乳房切除术, 前哨淋巴结活组织检查] |

Example::

    clf = TermClassifier(vocab).fit(coded_mentions)
    clf.annotate(["双侧甲状腺全切除"], [candidates])   # candidates[i].scores["clf"]
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from termnorm.recall.tfidf import char_vectorizer
from termnorm.records import Candidate, LabelledMention
from termnorm.text.normalize import normalize

#: Inverse regularization of each term's SVM (values tried: see the module docstring).
C = 2.0
#: Character n-gram lengths of the mention features.
NGRAMS = (1, 3)
#: Weights smaller in magnitude are dropped after fitting.
PRUNE = 1e-3


class TermClassifier:
    """One-vs-rest linear SVMs over mention char n-grams; ``annotate`` writes score ``"clf"``."""

    def __init__(self, vocabulary, c: float = C):
        self.vocabulary = vocabulary
        self.c = c
        self.vectorizer = None
        self.weights: sp.csr_matrix | None = None  # n-grams x known terms
        self.bias: np.ndarray | None = None
        self.column: dict[int, int] = {}  # term id -> column of weights
        self.n_mentions = 0

    @property
    def fitted(self) -> bool:
        return self.weights is not None

    def fit(self, mentions: list[LabelledMention]) -> "TermClassifier":
        """Fit on coded mentions; names unknown to the vocabulary are ignored, fewer than two usable
        mentions (or a single term) leave it unfitted (``annotate`` then does nothing)."""
        from sklearn.multiclass import OneVsRestClassifier
        from sklearn.preprocessing import MultiLabelBinarizer
        from sklearn.svm import LinearSVC

        texts, labels = [], []
        for m in mentions:
            tids = sorted({t for t in (self.vocabulary.get_id(name) for name in m.terms) if t is not None})
            if tids:
                texts.append(normalize(m.text))
                labels.append(tids)
        terms = {t for ts in labels for t in ts}
        if len(texts) < 2 or len(terms) < 2:
            return self
        # the recall strategies' char TF-IDF, in float64 as the measured figures were taken
        self.vectorizer = char_vectorizer(NGRAMS).set_params(dtype=np.float64)
        X = self.vectorizer.fit_transform(texts)
        binarizer = MultiLabelBinarizer()
        Y = binarizer.fit_transform(labels)
        # liblinear shuffles with a random state: fixed, so a refit gives the same weights
        model = OneVsRestClassifier(LinearSVC(C=self.c, random_state=0)).fit(X, Y)
        rows, cols, vals, bias = [], [], [], []
        for j, e in enumerate(model.estimators_):
            if not hasattr(e, "coef_"):  # a term every mention names: a constant "yes", no weights
                bias.append(1.0)
                continue
            w = e.coef_.ravel()
            keep = np.flatnonzero(np.abs(w) >= PRUNE)
            rows.append(keep)
            cols.append(np.full(len(keep), j))
            vals.append(w[keep])
            bias.append(float(np.ravel(e.intercept_)[0]))
        cat = lambda xs, dt: np.concatenate(xs).astype(dt) if xs else np.zeros(0, dt)  # noqa: E731
        self.weights = sp.csr_matrix((cat(vals, np.float32), (cat(rows, np.int64), cat(cols, np.int64))),
                                     shape=(X.shape[1], len(model.estimators_)))  # n-grams x terms
        self.bias = np.asarray(bias, dtype=np.float32)
        self.column = {int(t): j for j, t in enumerate(binarizer.classes_)}
        self.n_mentions = len(texts)
        return self

    def decision(self, mentions: list[str]) -> np.ndarray:
        """SVM decision values, one row per mention, one column per known term."""
        X = self.vectorizer.transform([normalize(m) for m in mentions])
        return np.asarray((X @ self.weights).todense()) + self.bias

    def annotate(self, mentions: list[str], cand_lists: list[list[Candidate]]) -> None:
        """Write score ``"clf"`` = logistic(2 · decision) into every candidate (0: term never coded)."""
        if not self.fitted or not mentions:
            return
        D = self.decision(mentions)
        for d, cands in zip(D, cand_lists):
            for c in cands:
                j = self.column.get(c.term_id)
                c.scores["clf"] = float(1.0 / (1.0 + np.exp(-2.0 * d[j]))) if j is not None else 0.0
