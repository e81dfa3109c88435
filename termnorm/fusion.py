"""Fusion block: combine recall and ranker scores, decide how many terms to output.

Not the engine's path: the Engine's gradient-boosted ranker (termnorm.gbm_ranker) learns how to weigh every
strategy's score and applies approach A's output rule itself (``gbm_ranker.choose``). This block is approach A's
fixed average, used for the cross-encoder's own validation figure while it trains (termnorm.rank.train,
``val_fused_top1``) and kept for comparing the two (docs/methods.md, "Count and fusion").

Approach A's fusion block (FB) of methods.md:

* recall score over the k_c recalled candidates
  ``s_c(i) = 1 - d(m, c_i) / Σ_j d(m, c_j)``, with ``d = 1 - similarity`` for
  recall strategies that give a similarity (cosine, Jaccard) rather than a
  distance (:func:`similarity_to_distance`; any other map can be passed);
* final score ``s = (s_c + s_r) / 2`` with s_r the ranker probability
  (weights configurable);
* output the top x terms, x the predicted count (classes 1, 2, ≥3); for
  "≥3" the first three plus every further candidate with ``s > θ``,
  θ = 0.8 as in approach A.

Approach A's ablation: without FB 90.85 vs 91.47 exact-set accuracy.

Added here: a learned variant of the score (:meth:`FusionBlock.fit_weights`,
logistic regression on every strategy's score, s_c and the ranker
probability, trained on validation candidates) and a calibrated confidence
that the whole answer is right (:meth:`FusionBlock.fit_confidence`, Platt or
isotonic on the top score, the weakest chosen score, its margin to the first
left-out candidate and the count probability), for auto-accept.

Input (one mention; ``scores`` as the recall union and the ranker left them):

    | term               | scores                                 |
    |--------------------|----------------------------------------|
    | 甲状腺病损切除术      | {tfidf: 0.62, jaccard: 0.50, ranker: 0.97} |
    | 甲状腺部分切除术      | {tfidf: 0.58, ranker: 0.10}              |

Example::

    fb = FusionBlock()
    chosen, confidence = fb.fuse(candidates, count_probs=[0.9, 0.08, 0.02])
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from termnorm.records import Candidate

#: Count classes of approach A's count head: 1, 2 and "3 or more".
COUNT_CLASSES = (1, 2, 3)

#: θ of approach A: beyond the first three, a candidate is output when its
#: fused score exceeds 0.8 (their setting; kept until our ≥3 class is large
#: enough to tune it: 0.3% of Yidu-N7K train rows need 3+ terms).
DEFAULT_THETA = 0.8

#: Strategy scores read as a similarity for s_c: cosine (dense, char TF-IDF)
#: and Jaccard are bounded similarities; BM25 and the exact bonus are not, and
#: the rank-fusion ``score`` of the union is not a similarity at all.
DEFAULT_RECALL_KEYS = ("dense", "tfidf", "jaccard", "history")


def similarity_to_distance(sim: np.ndarray) -> np.ndarray:
    """d = 1 - similarity (cosine in [-1, 1] gives d in [0, 2]; Jaccard d in [0, 1])."""
    return 1.0 - np.asarray(sim, dtype=np.float64)


def recall_scores(distances: Sequence[float]) -> np.ndarray:
    """Approach A's ``s_c(i) = 1 - d_i / Σ_j d_j`` over one mention's candidates.

    Distances are clipped at 0. When every distance is 0 (all candidates are
    exact matches) every s_c is 1.
    """
    d = np.clip(np.asarray(distances, dtype=np.float64), 0.0, None)
    total = d.sum()
    if total <= 0:
        return np.ones_like(d)
    return 1.0 - d / total


def predicted_count(count_probs) -> int:
    """1, 2 or 3 (meaning ≥3) from class probabilities, or an int passed through."""
    if count_probs is None:
        return 1
    if isinstance(count_probs, (int, np.integer)):
        return int(min(max(count_probs, 1), 3))
    p = np.asarray(count_probs, dtype=np.float64).ravel()
    return COUNT_CLASSES[int(np.argmax(p[:3]))]


def _count_prob(count_probs, count: int) -> float:
    if count_probs is None or isinstance(count_probs, (int, np.integer)):
        return 1.0
    p = np.asarray(count_probs, dtype=np.float64).ravel()
    return float(p[count - 1]) if len(p) >= count else 1.0


@dataclass
class FusionBlock:
    """Approach A's fusion block with configurable weights, θ and a calibrated confidence.

    Knobs (defaults and why):

    * ``w_recall`` / ``w_ranker`` = 0.5 / 0.5: approach A's plain average. The
      weights are renormalised over the scores present (no ranker: s = s_c).
    * ``theta`` = 0.8 (approach A), see :data:`DEFAULT_THETA`.
    * ``recall_keys``: strategy scores read as similarities; a candidate's
      similarity is the best of them (a strategy that did not propose it
      counts 0), so a term found by any similarity strategy keeps its best
      evidence. See :data:`DEFAULT_RECALL_KEYS`.
    * ``distance``: similarity -> distance map, :func:`similarity_to_distance`.
    """

    w_recall: float = 0.5
    w_ranker: float = 0.5
    theta: float = DEFAULT_THETA
    recall_keys: tuple[str, ...] = DEFAULT_RECALL_KEYS
    distance: Callable[[np.ndarray], np.ndarray] = similarity_to_distance
    learned: object | None = None  # fitted LogisticRegression of fit_weights
    learned_keys: tuple[str, ...] = ()
    confidence_model: object | None = None  # fitted by fit_confidence
    confidence_method: str = ""
    confidence_features_used: tuple[int, ...] = field(default_factory=tuple)

    # ---- scores --------------------------------------------------------
    def recall_similarity(self, candidates: Sequence[Candidate]) -> np.ndarray:
        return np.array([max((c.scores.get(k, 0.0) for k in self.recall_keys), default=0.0)
                         for c in candidates], dtype=np.float64)

    def score(self, candidates: list[Candidate], ranker_probs: Sequence[float] | None = None) -> np.ndarray:
        """Set ``scores["recall"]`` (s_c), ``scores["ranker"]`` (if given) and ``scores["fused"]``; return s."""
        if not candidates:
            return np.zeros(0)
        if ranker_probs is not None:
            if len(ranker_probs) != len(candidates):
                raise ValueError(f"{len(ranker_probs)} ranker probabilities for {len(candidates)} candidates")
            for c, p in zip(candidates, ranker_probs):
                c.scores["ranker"] = float(p)
        s_c = recall_scores(self.distance(self.recall_similarity(candidates)))
        for c, v in zip(candidates, s_c):
            c.scores["recall"] = float(v)
        if self.learned is not None:
            s = self.learned.predict_proba(self._features(candidates))[:, 1]
        else:
            have_r = all("ranker" in c.scores for c in candidates)
            s_r = np.array([c.scores.get("ranker", 0.0) for c in candidates])
            wr = self.w_ranker if have_r else 0.0
            s = (self.w_recall * s_c + wr * s_r) / (self.w_recall + wr)
        for c, v in zip(candidates, s):
            c.scores["fused"] = float(v)
            c.score = float(v)
        return np.asarray(s, dtype=np.float64)

    def choose(self, ordered: Sequence[Candidate], count: int) -> list[str]:
        """Top ``count`` terms; for 3 (≥3) also every later candidate with s > θ."""
        chosen = [c.term for c in ordered[:count]]
        if count >= 3:
            chosen += [c.term for c in ordered[3:] if c.score > self.theta]
        return chosen

    def fuse(self, candidates: list[Candidate], count_probs=None,
             ranker_probs: Sequence[float] | None = None) -> tuple[list[str], float]:
        """Score, order ``candidates`` in place (best first), choose; return (terms, confidence).

        ``count_probs``: probabilities of 1, 2, ≥3 terms (or an int count;
        None means 1). ``ranker_probs`` (optional) are stored as
        ``scores["ranker"]``; otherwise a ranker score already there is used.
        """
        if not candidates:
            return [], 0.0
        self.score(candidates, ranker_probs)
        candidates.sort(key=lambda c: -c.score)
        count = predicted_count(count_probs)
        chosen = self.choose(candidates, count)
        return chosen, self.confidence(candidates, len(chosen), count_probs, count)

    # ---- confidence ------------------------------------------------------
    @staticmethod
    def confidence_features(ordered: Sequence[Candidate], n_chosen: int, count_probs=None,
                            count: int | None = None) -> np.ndarray:
        """[top s, weakest chosen s, its margin to the first left-out s, P(count)]."""
        s = np.array([c.score for c in ordered], dtype=np.float64)
        if not len(s) or n_chosen == 0:
            return np.zeros(4)
        last = s[n_chosen - 1]
        nxt = s[n_chosen] if len(s) > n_chosen else 0.0
        count = count if count is not None else predicted_count(count_probs)
        return np.array([s[0], last, last - nxt, _count_prob(count_probs, count)])

    def confidence(self, ordered: Sequence[Candidate], n_chosen: int, count_probs=None,
                   count: int | None = None) -> float:
        """P(the chosen set is exactly right).

        Fitted (:meth:`fit_confidence`): the calibrated model. Unfitted: the
        naive-independence estimate ``P(count) * s_last * (1 - s_next)``
        (uncalibrated; rises with the margin), to be replaced by a fit on
        validation data before any auto-accept threshold is trusted.
        """
        f = self.confidence_features(ordered, n_chosen, count_probs, count)
        if n_chosen == 0:
            return 0.0
        if self.confidence_model is None:
            last, margin, pc = f[1], f[2], f[3]
            nxt = last - margin
            return float(np.clip(pc * last * (1.0 - nxt), 0.0, 1.0))
        return float(self._confidence_from_features(f[None, :])[0])

    def _confidence_from_features(self, X: np.ndarray) -> np.ndarray:
        lr = self.confidence_model["lr"]
        Xs = X[:, list(self.confidence_features_used)]
        if self.confidence_method == "isotonic":
            return self.confidence_model["iso"].predict(lr.decision_function(Xs))
        return lr.predict_proba(Xs)[:, 1]

    def fit_confidence(self, examples: Sequence[tuple[list[Candidate], object, Sequence[str]]],
                       method: str = "platt") -> dict:
        """Calibrate the confidence on validation examples ``(candidates, count_probs, gold terms)``.

        Each example is fused as at run time and labelled 1 when the chosen set
        equals the gold set. ``"platt"``: logistic regression on the
        confidence features; ``"isotonic"``: isotonic regression on that
        regression's score (more flexible, needs a few hundred examples). Every
        feature should only *raise* confidence, so a feature that gets a
        negative weight (collinearity, noise) is dropped and the fit repeated:
        this keeps the confidence monotone in the margin. Returns a summary
        (examples, accuracy, features used, Brier score on the fitting data).
        """
        from sklearn.isotonic import IsotonicRegression
        from sklearn.linear_model import LogisticRegression

        if method not in ("platt", "isotonic"):
            raise ValueError(f"method must be 'platt' or 'isotonic', got {method!r}")
        saved = self.confidence_model
        self.confidence_model = None
        X, y = [], []
        for cands, cp, gold in examples:
            cands = list(cands)
            chosen, _ = self.fuse(cands, cp)
            X.append(self.confidence_features(cands, len(chosen), cp))
            y.append(int(set(chosen) == set(gold)))
        X, y = np.array(X), np.array(y)
        if len(set(y)) < 2:
            self.confidence_model = saved
            raise ValueError("fit_confidence needs both right and wrong answers among the examples")
        used = list(range(X.shape[1]))
        while True:
            lr = LogisticRegression(C=10.0, max_iter=1000).fit(X[:, used], y)
            neg = [u for u, w in zip(used, lr.coef_[0]) if w < 0]
            if not neg or len(used) == 1:
                break
            used = [u for u in used if u not in neg]
        model = {"lr": lr}
        if method == "isotonic":
            model["iso"] = IsotonicRegression(out_of_bounds="clip", y_min=0.0, y_max=1.0).fit(
                lr.decision_function(X[:, used]), y)
        self.confidence_model = model
        self.confidence_method = method
        self.confidence_features_used = tuple(used)
        p = self._confidence_from_features(X)
        return {"examples": int(len(y)), "accuracy": float(y.mean()), "features_used": used,
                "brier": float(np.mean((p - y) ** 2))}

    # ---- learned score variant -------------------------------------------
    def _features(self, candidates: Sequence[Candidate]) -> np.ndarray:
        return np.array([[c.scores.get(k, 0.0) for k in self.learned_keys] for c in candidates],
                        dtype=np.float64)

    def fit_weights(self, examples: Sequence[tuple[list[Candidate], Sequence[str]]], C: float = 1.0) -> dict:
        """Learned variant of s: logistic regression P(gold | every score of the candidate).

        Features: each strategy's score seen in the examples (0 when a strategy
        did not propose the term), s_c and the ranker probability; labels: is
        the candidate a gold term. Fit on validation candidates, not on the
        ranker's own training data (its probabilities are overconfident there).
        """
        from sklearn.linear_model import LogisticRegression

        self.learned = None
        keys: set[str] = set()
        for cands, _ in examples:
            self.score(cands)  # sets "recall"
            for c in cands:
                # history_size (fitting.HISTORY_SIZE): the same for every candidate of a mention, read by no fusion
                keys.update(k for k in c.scores if k not in ("fused", "learned", "history_size"))
        self.learned_keys = tuple(sorted(keys))
        X, y = [], []
        for cands, gold in examples:
            gold = set(gold)
            X.append(self._features(cands))
            y.extend(int(c.term in gold) for c in cands)
        X = np.vstack(X) if X else np.zeros((0, len(self.learned_keys)))
        y = np.array(y)
        if len(set(y)) < 2:
            raise ValueError("fit_weights needs both gold and non-gold candidates")
        self.learned = LogisticRegression(C=C, max_iter=2000).fit(X, y)
        return {"candidates": int(len(y)), "keys": list(self.learned_keys),
                "weights": [float(w) for w in self.learned.coef_[0]]}

    # ---- persistence ------------------------------------------------------
    def save(self, path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(pickle.dumps(self))
        return path

    @staticmethod
    def load(path) -> "FusionBlock":
        obj = pickle.loads(Path(path).read_bytes())
        if not isinstance(obj, FusionBlock):
            raise TypeError(f"{path} does not hold a FusionBlock")
        return obj
