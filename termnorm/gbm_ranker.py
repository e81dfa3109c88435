"""Lexical learning-to-rank and count prediction: the ``--stage full`` pipeline without neural models.

The recall union keeps every strategy's score per candidate (approach B's
multi-strategy recall); here a gradient-boosted classifier learns P(candidate
is a gold term) from those scores plus cheap pair features (character
overlap, containment, keyword match / mismatch of body site and type — the
keyword sensitivity that approach A's ranker models with attention). A second
classifier predicts how many terms the mention needs (1 / 2 / >=3, approach
A's count classes) from the mention's shape (split parts, separators) and the
candidate probabilities. The output rule is approach A's fusion rule: the top
x candidates, x the predicted count; for ">=3", the first three plus every
further candidate with p > theta.

The pair model is point-wise: on Yidu-N7K val a LambdaMART ranker (LightGBM
``lambdarank``, same features) put every gold term first for 0.883 of the
mentions against 0.879 here (one run), not worth another dependency; the
features, not the learner, limit the ranking.

Training candidates must look like test-time candidates: history recall on
the training set would always find the mention itself, so features for
training are built with K-fold history (each fold's history = other folds).

Input data:

    | mention (str)         | candidates (list[Candidate]) | gold (list[str]) |
    |-----------------------|------------------------------|------------------|
    | 右侧甲状腺肿瘤切除术   | union recall output          | [甲状腺病损切除术] |
"""

from __future__ import annotations

import numpy as np
from threadpoolctl import threadpool_limits

from termnorm.records import Candidate
from termnorm.text.normalize import normalize

# theta of approach A's fusion block for the ">=3" class. Approach A used 0.8
# on its fused score; our p is a GBM probability, and 0.5 measured better on
# Yidu-N7K train CV (few >=3 mentions, so this matters mostly for CHIP-CDN).
THETA = 0.5

SITE_TYPE = ("site", "type", "nature")

#: GBMs in the pair scorer and the share of the feature columns each sees (:class:`SubspaceEnsemble`).
#: One by default: with the list-context features, 3 GBMs on 70% of the columns each were +0.1 point
#: of exact-set accuracy over one GBM on 5,000 Yidu-N7K mentions cross-validated (``benchmarks/cv.py``,
#: row ``ensemble_3``; sign test p=0.66, within noise) for 1.3x the ranker's time; on CHIP-CDN +0.2 points
#: of micro-F1 over 7,000 mentions (0.697 -> 0.700, lower on 2 of 5 folds; ``cv_cdn.json``).
#: Selectable: ``termnorm train lexical --ensemble N``.
ENSEMBLE = 1
COLUMN_SHARE = 0.7

#: Scores that also get *list-context* features: the best value among the mention's candidates (how
#: familiar the mention is: a coded mention this close, a term classifier this sure) and the
#: candidate's gap to it. A pointwise ranker otherwise sees one candidate at a time and cannot tell a
#: history score of 0.6 on an unfamiliar mention (trust the lexical match) from one on a mention whose
#: best coded neighbour scores 0.95. Measured by 5-fold cross-validation over Yidu-N7K train + val
#: (``benchmarks/cv.py``, row ``no_context``): see the README.
CONTEXT_KEYS = ("history", "history_jaccard", "tfidf", "jaccard", "clf", "diff", "name")


class PairFeaturizer:
    """Turns (mention, candidate list) into a feature matrix; score keys are fixed at fit time."""

    def __init__(self, score_keys: list[str], tagger=None, vocab=None, keywords: bool = True,
                 context: bool = True, part_context: bool = False):
        self.score_keys = list(score_keys)
        self.tagger = tagger
        # False: the keyword match / mismatch features stay 0 (the "no keyword attention" ablation)
        self.keywords = keywords
        # list context (see CONTEXT_KEYS); featurizers pickled before it existed have no attribute: False
        self.context = context
        # per-part context (termnorm.rank.parts); featurizers pickled before it have no attribute: False
        self.part_context = part_context
        self._term_kw: dict[int, dict[str, set]] = {}
        self.vocab = vocab

    def _context_columns(self) -> list[int]:
        """Indices into ``score_keys`` of the keys that get list-context features."""
        if not getattr(self, "context", False):
            return []
        return [j for j, k in enumerate(self.score_keys) if k in CONTEXT_KEYS]

    def _kw(self, text: str) -> dict[str, set]:
        out: dict[str, set] = {k: set() for k in SITE_TYPE}
        if self.tagger is None or not getattr(self, "keywords", True):
            return out
        for sp in self.tagger.tag(text):
            if sp.kind in out:
                out[sp.kind].add(normalize(sp.text))
        return out

    def _term_keywords(self, c: Candidate) -> dict[str, set]:
        kw = self._term_kw.get(c.term_id)
        if kw is None:
            kw = self._term_kw[c.term_id] = self._kw(c.term)
        return kw

    def _norm(self, c: Candidate) -> str:
        cache = self.__dict__.setdefault("_term_norm", {})
        t = cache.get(c.term_id)
        if t is None:
            t = cache[c.term_id] = normalize(c.term)
        return t

    @property
    def keyword_columns(self) -> slice:
        """The keyword match / mismatch columns of :meth:`transform` (3 per kind of :data:`SITE_TYPE`)."""
        start = 2 * len(self.score_keys) + 14
        return slice(start, start + 3 * len(SITE_TYPE))

    @property
    def context_columns(self) -> slice:
        """The list-context columns: the best value of each :data:`CONTEXT_KEYS` score, then the gaps."""
        start = 2 * len(self.score_keys) + 14 + 3 * len(SITE_TYPE)
        return slice(start, start + 2 * len(self._context_columns()))

    def _part_layout(self) -> tuple[list[int], int]:
        """(score, feature) columns of termnorm.rank.parts.layout, cached; ([], 0) when off, importing nothing."""
        if not getattr(self, "part_context", False):
            return [], 0
        if "_part_layout_" not in self.__dict__:
            from termnorm.rank.parts import layout
            self._part_layout_ = layout(self.score_keys)
        return self._part_layout_

    @property
    def n_features(self) -> int:
        n = 2 * len(self.score_keys) + 14 + 3 * len(SITE_TYPE) + 2 * len(self._context_columns())
        return n + self._part_layout()[1]

    def transform(self, mention: str, cands: list[Candidate], n_parts: int = 1) -> np.ndarray:
        n = len(cands)
        X = np.zeros((n, self.n_features), dtype=np.float32)
        if n == 0:
            return X
        nk = len(self.score_keys)
        S = np.zeros((n, nk), dtype=np.float32)
        for i, c in enumerate(cands):
            for j, key in enumerate(self.score_keys):
                v = c.scores.get(key)
                if v is not None:
                    S[i, j] = v
        X[:, :nk] = S
        # reciprocal rank of each candidate under each strategy (0 when the strategy did not find it)
        order = np.argsort(-S, axis=0, kind="stable")
        ranks = np.empty_like(order)
        ranks[order, np.arange(nk)] = np.arange(n)[:, None]
        X[:, nk:2 * nk] = np.where(S > 0, 1.0 / (1.0 + ranks), 0.0)
        m = normalize(mention)
        mset = set(m)
        mkw = self._kw(mention)
        base = 2 * nk
        for i, c in enumerate(cands):
            t = self._norm(c)
            tset = set(t)
            inter = len(mset & tset)
            f = X[i, base:]
            f[0] = float((S[i] > 0).sum())
            f[1] = len(t)
            f[2] = len(m)
            f[3] = len(t) / max(1, len(m))
            f[4] = inter / max(1, len(tset))
            f[5] = inter / max(1, len(mset))
            f[6] = float(t in m)
            f[7] = float(m in t)
            f[8] = _lcs_len(m, t) / max(1, len(t))
            f[9] = float(t[-2:] == m[-2:]) if len(t) >= 2 else 0.0
            f[10] = float(t[:2] == m[:2]) if len(t) >= 2 else 0.0
            f[11] = n_parts
            f[12] = i / n  # position in the union order
            f[13] = n
            tkw = self._term_keywords(c)
            for j, kind in enumerate(SITE_TYPE):
                a, b = mkw[kind], tkw[kind]
                f[14 + 3 * j] = float(bool(a & b))
                f[15 + 3 * j] = float(bool(a) and bool(b) and not (a & b))
                f[16 + 3 * j] = float(bool(b) and not any(k in m for k in b))
        ctx = self._context_columns()
        if ctx:
            col = self.context_columns.start
            best = S[:, ctx].max(axis=0)
            X[:, col:col + len(ctx)] = best
            X[:, col + len(ctx):col + 2 * len(ctx)] = S[:, ctx] - best
        cols, width = self._part_layout()
        if width:
            from termnorm.rank.parts import part_context

            X[:, X.shape[1] - width:] = part_context(mention, [self._norm(c) for c in cands], S[:, cols], n_parts)
        return X


def _lcs_len(a: str, b: str) -> int:
    """Longest common substring length (short strings: O(len(a)*len(b)) is fine)."""
    if not a or not b:
        return 0
    best = 0
    prev = [0] * (len(b) + 1)
    for ca in a:
        cur = [0] * (len(b) + 1)
        for j, cb in enumerate(b, 1):
            if ca == cb:
                v = prev[j - 1] + 1
                cur[j] = v
                if v > best:
                    best = v
        prev = cur
    return best


#: Characters that say nothing about which part of a mention a term names (laterality, "operation").
PART_STOP = frozenset("左右双单侧术行及和与并的下")
#: Features :func:`part_features` adds to the count classifier's (rankers pickled before them have no
#: ``count_parts`` attribute and count from the others alone).
N_PART_FEATURES = 8


def part_features(mention: str, cands: list[Candidate] | None, probs: np.ndarray, n_parts: int = 2) -> np.ndarray:
    """How the top candidates cover the parts of a multi-part mention (zeros for a one-part mention).

    ``n_parts`` is the engine's part count: below 2 (one part, or an engine that does not split) the
    features stay zero, so ``Engine(split=False)`` really counts without the splitter.

    右尺骨鹰嘴、桡骨颈骨折切开复位内固定 needs a term per part; 右甲状腺全切+左甲状腺次全切除术 one term
    covering both. Per part, the share of its characters the top candidate (and the top two) contain, and
    whether the top two candidates name different parts.
    """
    out = np.zeros(N_PART_FEATURES, dtype=np.float32)
    if not cands or len(probs) < 2 or n_parts < 2:
        return out
    from termnorm.text.split import split_mention

    parts = [set(p) - PART_STOP for p in split_mention(mention)]
    parts = [p for p in parts if p]
    if len(parts) < 2:
        return out
    order = np.argsort(-probs, kind="stable")[:3]
    tops = [set(normalize(cands[i].term)) - PART_STOP for i in order]
    cov = np.array([[len(t & p) / len(p) for p in parts] for t in tops])  # candidate x part
    own = np.array([[len(t & p) / max(1, len(t)) for p in parts] for t in tops])
    assigned = own.argmax(axis=1)
    p_sorted = probs[order]
    both = np.maximum(cov[0], cov[1])
    out[0] = cov[0].min()
    out[1] = cov[0].mean()
    out[2] = both.min()
    out[3] = both.mean() - cov[0].mean()
    out[4] = float(assigned[0] != assigned[1])
    out[5] = len({a for a, p in zip(assigned, p_sorted) if p > 0.2})
    out[6] = p_sorted[1] * out[4]
    out[7] = own[1].max()
    return out


def count_features(mention: str, probs: np.ndarray, n_parts: int, history_count: int,
                   cands: list[Candidate] | None = None, parts: bool = False) -> np.ndarray:
    base = _count_base(mention, probs, n_parts, history_count)
    return np.concatenate([base, part_features(mention, cands, probs, n_parts)]) if parts else base


def _count_base(mention: str, probs: np.ndarray, n_parts: int, history_count: int) -> np.ndarray:
    p = np.sort(probs)[::-1] if len(probs) else np.zeros(0)
    top = np.zeros(6, dtype=np.float32)
    top[: min(6, len(p))] = p[:6]
    m = normalize(mention)
    seps = sum(m.count(s) for s in ";,、+/") + m.count("伴") + m.count("并")
    return np.concatenate([top, [n_parts, seps, len(m), history_count,
                                 float((p > 0.5).sum()) if len(p) else 0.0,
                                 float((p > 0.3).sum()) if len(p) else 0.0]]).astype(np.float32)


class LexicalRanker:
    """GBM pair scorer + GBM count classifier + approach A's output rule."""

    def __init__(self, featurizer: PairFeaturizer, theta: float = THETA, seed: int = 0,
                 ensemble: int = ENSEMBLE, column_share: float = COLUMN_SHARE, count_parts: bool = True):
        self.featurizer = featurizer
        self.theta = theta
        self.rule = ("count", theta)
        self.seed = seed
        self.bag = 1
        # the pair scorer: ``ensemble`` GBMs on random column subsets, averaged (1: one GBM, every column)
        self.ensemble = ensemble
        self.column_share = column_share
        self.pair_model = None
        self.count_model = None
        # the count classifier also sees how the top candidates cover the mention's parts (part_features)
        self.count_parts = count_parts

    # -- training -----------------------------------------------------------
    def fit(self, mentions, cand_lists, golds, n_parts, history_counts, weights=None,
            count_mask=None) -> "LexicalRanker":
        """Fit the pair scorer and the count classifier.

        ``weights`` (optional, one array per mention aligned with its candidates)
        are per-row sample weights; a weight of 0 leaves the row out. The learning
        loop (db.retrain) uses it for approach D's false-negative elimination
        (likely unlabelled positives get 0) and for coder-confirmed negatives.
        ``count_mask`` (optional, one bool per mention) says which mentions train
        the count classifier: a mention a coder only rejected has no known count.
        Both default to the original behaviour (every row weight 1, every mention counted).
        """
        from sklearn.ensemble import HistGradientBoostingClassifier

        Xs, ys, ws = [], [], []
        for i, (m, cands, gold, npart) in enumerate(zip(mentions, cand_lists, golds, n_parts)):
            if not cands:
                continue
            g = set(gold)
            Xs.append(self.featurizer.transform(m, cands, npart))
            ys.append(np.array([c.term in g for c in cands], dtype=np.int8))
            ws.append(np.ones(len(cands)) if weights is None else np.asarray(weights[i], dtype=np.float64))
        X, y, w = np.vstack(Xs), np.concatenate(ys), np.concatenate(ws)
        keep = w > 0
        X, y, w = X[keep], y[keep], (None if weights is None else w[keep])
        ensemble = getattr(self, "ensemble", 1)
        if ensemble <= 1:
            self.pair_model = self._pair_estimator().fit(X, y, sample_weight=w)
        else:
            self.pair_model = SubspaceEnsemble(self._pair_estimator(), ensemble, self.column_share,
                                               self.seed).fit(X, y, sample_weight=w)
        if count_mask is not None:
            sel = [i for i, ok in enumerate(count_mask) if ok]
            mentions, cand_lists, golds, n_parts, history_counts = (
                [seq[i] for i in sel] for seq in (mentions, cand_lists, golds, n_parts, history_counts))
        probs = self.score(mentions, cand_lists, n_parts)
        CX = self._count_matrix(mentions, probs, n_parts, history_counts, cand_lists)
        cy = np.array([min(3, max(1, len(g))) for g in golds])
        self.count_model = HistGradientBoostingClassifier(max_iter=150, learning_rate=0.08, random_state=self.seed)
        self.count_model.fit(CX, cy)
        return self

    def _pair_estimator(self, seed: int | None = None):
        from sklearn.ensemble import HistGradientBoostingClassifier

        return HistGradientBoostingClassifier(max_iter=300, learning_rate=0.08, max_leaf_nodes=31,
                                              l2_regularization=1.0,
                                              random_state=self.seed if seed is None else seed)

    @classmethod
    def bagged(cls, members: list["LexicalRanker"]) -> "LexicalRanker":
        """One ranker whose pair and count probabilities are the means of ``members``' (fitted on the same
        features; the first member's output rule and theta are kept). ``Engine.fit_lexical(bag=N)`` fits
        the members on N different K-fold splits of the history, which moves a single ranker's accuracy
        by more than a point on Yidu-N7K val; the mean moves less (``benchmarks/seeds.py``)."""
        first = members[0]
        if any(m.featurizer.score_keys != first.featurizer.score_keys for m in members):
            raise ValueError("bagged rankers must share their features")
        out = cls(first.featurizer, theta=first.theta, seed=first.seed, ensemble=getattr(first, "ensemble", 1),
                  column_share=getattr(first, "column_share", COLUMN_SHARE),
                  count_parts=getattr(first, "count_parts", False))
        out.rule, out.bag = first.rule, len(members)
        out.pair_model = MeanProba([m.pair_model for m in members])
        out.count_model = MeanProba([m.count_model for m in members])
        return out

    # -- inference ----------------------------------------------------------
    def score(self, mentions, cand_lists, n_parts) -> list[np.ndarray]:
        sizes = [len(c) for c in cand_lists]
        mats = [self.featurizer.transform(m, c, p) for m, c, p in zip(mentions, cand_lists, n_parts) if c]
        if not mats:
            return [np.zeros(0) for _ in cand_lists]
        # One OpenMP thread: per-call thread start-up dominates on the small
        # batches the app sends (measured 12 ms -> <1 ms per call on 2 cores).
        with threadpool_limits(limits=1, user_api="openmp"):
            allp = self.pair_model.predict_proba(np.vstack(mats))[:, 1]
        out, pos = [], 0
        for s in sizes:
            out.append(allp[pos:pos + s])
            pos += s
        return out

    def _count_matrix(self, mentions, probs, n_parts, history_counts, cand_lists=None) -> np.ndarray:
        parts = getattr(self, "count_parts", False)
        cand_lists = cand_lists if cand_lists is not None else [None] * len(mentions)
        return np.vstack([count_features(m, p, npart, hc, cl, parts)
                          for m, p, npart, hc, cl in zip(mentions, probs, n_parts, history_counts, cand_lists)])

    def count_probs(self, mentions, probs, n_parts, history_counts, cand_lists=None) -> np.ndarray:
        """P(1 / 2 / >=3 terms) per mention; ``cand_lists`` (aligned with ``probs``) feed the part features."""
        CX = self._count_matrix(mentions, probs, n_parts, history_counts, cand_lists)
        with threadpool_limits(limits=1, user_api="openmp"):
            P = self.count_model.predict_proba(CX)
        full = np.zeros((len(mentions), 3))
        for j, cls in enumerate(self.count_model.classes_):
            full[:, int(cls) - 1] = P[:, j]
        return full


class SubspaceEnsemble:
    """Ho's random subspace method: the mean ``predict_proba`` of ``n`` classifiers, each fitted on all
    rows (with their sample weights) and its own random ``share`` of the feature columns.

    Why: variants of the pointwise GBM that score alike on Yidu-N7K (within 0.1 point) disagree on
    ~2% of the mentions -- near-ties decided by which features a tree happened to split on; averaging
    members that each miss some columns turns those coin flips into a vote. Measured gain: see
    :data:`ENSEMBLE` (small, so it is an option, not the default).

    Why not scikit-learn's ``BaggingClassifier(bootstrap=False, max_features=share)``: the installed
    release (1.9) uses ``sample_weight`` only as probabilities for drawing rows, and without replacement
    every row is drawn once, so its members see unit weights. The learning loop weights rows
    (coder-confirmed negatives, ``termnorm.refit.CONFIRMED_WEIGHT``); the members here get the
    weights as given.
    """

    def __init__(self, estimator, n: int, share: float = COLUMN_SHARE, seed: int = 0):
        self.estimator = estimator  # unfitted template; member j is a clone with random_state seed + j
        self.n, self.share, self.seed = int(n), float(share), int(seed)
        self.estimators: list = []
        self.columns: list[np.ndarray] = []

    def fit(self, X, y, sample_weight=None) -> "SubspaceEnsemble":
        from sklearn.base import clone

        rng = np.random.default_rng(self.seed)
        d = X.shape[1]
        width = max(1, min(d, int(round(self.share * d))))
        self.columns = [np.sort(rng.choice(d, width, replace=False)) for _ in range(self.n)]
        self.estimators = [clone(self.estimator).set_params(random_state=self.seed + j)
                           .fit(X[:, cols], y, sample_weight=sample_weight) for j, cols in enumerate(self.columns)]
        self.classes_ = self.estimators[0].classes_
        return self

    def predict_proba(self, X) -> np.ndarray:
        return np.mean([e.predict_proba(X[:, c]) for e, c in zip(self.estimators, self.columns)], axis=0)


class MeanProba:
    """The mean of fitted classifiers' ``predict_proba`` (scikit-learn's VotingClassifier refits its members;
    these are fitted on different data beforehand). Members must share their classes."""

    def __init__(self, models):
        self.models = list(models)
        self.classes_ = self.models[0].classes_
        if any(list(m.classes_) != list(self.classes_) for m in self.models):
            raise ValueError("bagged classifiers must share their classes")

    def predict_proba(self, X) -> np.ndarray:
        return np.mean([m.predict_proba(X) for m in self.models], axis=0)


def choose(cands: list[Candidate], probs: np.ndarray, count_probs: np.ndarray, theta: float = THETA,
           rule: tuple[str, float] = ("count", THETA)):
    """The output rule on candidates already sorted by probability.

    ``("count", theta)`` is approach A's: the top x, x the predicted count, and
    for ">=3" every further candidate with p > theta. ``("count+threshold", t)``
    also adds every further candidate with p > t whatever the count says, and
    ``("threshold", t)`` outputs every candidate with p > t (at least one).
    Which rule and t is chosen per data set on held-out training mentions
    (:func:`select_rule`).
    """
    if not cands:
        return []
    kind, t = rule
    if kind == "threshold":
        chosen = [c.term for c, p in zip(cands, probs) if p > t]
        return chosen or [cands[0].term]
    x = int(np.argmax(count_probs)) + 1
    chosen = [c.term for c in cands[:x]]
    if x >= 3:
        chosen += [c.term for c, p in zip(cands[3:], probs[3:]) if p > theta]
    if kind == "count+threshold":
        chosen += [c.term for c, p in zip(cands[x:], probs[x:]) if p > t and c.term not in chosen]
    return chosen


#: What :func:`select_rule` can optimise.
RULE_METRICS = ("accuracy", "micro_f1")

RULES = [("count", THETA)] + [(k, t) for k in ("count+threshold", "threshold")
                              for t in (0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6, 0.7)]


def select_rule(cand_lists, probs, count_probs, golds, theta: float = THETA, metric: str = "accuracy"):
    """The rule of :data:`RULES` with the best score on held-out mentions -> (rule, scores).

    ``metric`` is what the data set is judged by: ``"accuracy"`` (exact-set, Yidu-N7K) or
    ``"micro_f1"`` over (mention, term) pairs (the CHIP-CDN metric). Ties keep approach A's rule.
    """
    if metric not in RULE_METRICS:
        raise ValueError(f"rule metric must be one of {RULE_METRICS}, not {metric!r}")
    scores = {}
    for rule in RULES:
        ok = tp = n_pred = n_gold = 0
        for cands, p, cp, gold in zip(cand_lists, probs, count_probs, golds):
            order = np.argsort(-p, kind="stable")
            ranked = [cands[i] for i in order]
            chosen, g = set(choose(ranked, p[order], cp, theta, rule)), set(gold)
            ok += chosen == g
            tp += len(chosen & g)
            n_pred += len(chosen)
            n_gold += len(g)
        if metric == "accuracy":
            scores[rule] = ok / max(1, len(golds))
        else:
            scores[rule] = 2 * tp / max(1, n_pred + n_gold)
    best = max(RULES, key=lambda r: (scores[r], r == RULES[0]))
    return best, {f"{k}@{t}": round(v, 4) for (k, t), v in scores.items()}
