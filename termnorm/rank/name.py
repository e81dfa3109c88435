"""The name scorer: a pair scorer that never sees coded history, stacked into the GBM ranker as score ``name``.

Why: on mentions whose gold term no coder has used, the GBM ranker (which weighs history recall, the sieve and
the term classifier) prefers a coded neighbour. The cold-start ranker (fitted without history) is right more
often on exactly those mentions: on Yidu-N7K val's 117 never-coded mentions 0.675 against the pipeline's 0.598
(``benchmarks/day_one.py``), but far worse on coded ones. This scorer learns the same
thing -- how a mention's wording matches a term's *name* -- from every training mention, not only from the few
whose term is never coded, and the GBM ranker gets its probability (with its list context: best and gap) as
one more score, so it can trust it where history is silent. Stacking (Wolpert 1992): the training mentions get
out-of-fold scores, so the ranker learns how far the scorer is right on mentions it did not see.

Input: the ranker's training candidates (K-fold recall, surface-difference scores already out-of-fold).
Features: termnorm.gbm_ranker.PairFeaturizer over the score keys that do not come from coded mentions.

Measured (``benchmarks/cv.py`` row ``name``): level with the shipped ranker on Yidu-N7K, CHIP-CDN and NCBI, the
never-coded bucket included, so it is off by default (``--name-scorer``; docs/benchmarks.md, "Name scorer").
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from termnorm.records import Candidate

#: score keys learned from coded mentions (history recall, the sieve, the term classifier, the hierarchy's history
#: scores, the cold-start prior) and this scorer's own; every other key (lexical, surface difference, dense,
#: keyword-attentive) is a reading of the mention against the term's name and is kept
HISTORY_PREFIXES = ("history", "sieve", "clf", "category", "prior", "name")
KEY = "name"
FOLDS = 4


def name_keys(keys) -> list[str]:
    """The score keys the name scorer reads: those not learned from coded mentions (:data:`HISTORY_PREFIXES`)."""
    return sorted(k for k in keys if not k.startswith(HISTORY_PREFIXES))


class NameScorer:
    """A GBM pair scorer over the history-free score keys (fit on the ranker's training candidates)."""

    def __init__(self, keywords: bool = True, seed: int = 0):
        self.keywords = keywords
        self.seed = seed
        self.model = None
        self.featurizer = None

    def _estimator(self):
        from termnorm.gbm_ranker import LexicalRanker

        return LexicalRanker(self.featurizer, seed=self.seed)._pair_estimator()  # the ranker's own GBM settings

    def set_tagger(self, tagger) -> None:
        """The engine's keyword tagger (after loading a saved pipeline)."""
        self.featurizer.tagger = tagger

    def fit_out_of_fold(self, mentions, cand_lists, golds, n_parts, tagger=None) -> list[np.ndarray]:
        """Fit on every mention; return each mention's probabilities from a model fitted on the other
        :data:`FOLDS` − 1 folds of the mentions."""
        from termnorm.gbm_ranker import PairFeaturizer

        keys = name_keys({k for cl in cand_lists for c in cl for k in c.scores})
        self.featurizer = PairFeaturizer(keys, tagger=tagger, keywords=self.keywords)
        mats = [self.featurizer.transform(m, cl, p) for m, cl, p in zip(mentions, cand_lists, n_parts)]
        ys = [np.array([c.term in set(g) for c in cl], dtype=np.int8) for cl, g in zip(cand_lists, golds)]
        fold = np.random.default_rng(self.seed).integers(0, FOLDS, len(mentions))
        out: list[np.ndarray] = [np.zeros(len(cl)) for cl in cand_lists]
        for f in range(FOLDS):
            inside = [i for i in range(len(mentions)) if fold[i] != f and len(cand_lists[i])]
            held = [i for i in range(len(mentions)) if fold[i] == f and len(cand_lists[i])]
            if not held:
                continue
            model = self._fit([mats[i] for i in inside], [ys[i] for i in inside])
            for i, p in zip(held, _split(model, [mats[i] for i in held])):
                out[i] = p
        self.model = self._fit([x for x in mats if len(x)], [y for y in ys if len(y)])
        return out

    def _fit(self, mats, ys):
        from threadpoolctl import threadpool_limits

        from termnorm.fitting import fit_threads

        X, y = np.vstack(mats), np.concatenate(ys)
        if len(set(y.tolist())) < 2:
            return None
        with threadpool_limits(limits=fit_threads(), user_api="openmp"):
            return self._estimator().fit(X, y)

    def annotate(self, mentions, cand_lists: list[list[Candidate]], n_parts) -> None:
        """Score ``name`` on every candidate (with the model fitted on every training mention)."""
        mats = [self.featurizer.transform(m, cl, p) for m, cl, p in zip(mentions, cand_lists, n_parts) if cl]
        probs = iter(_split(self.model, mats))
        for cl in cand_lists:
            if cl:
                write(cl, next(probs))


def write(cands: list[Candidate], probs) -> None:
    for c, p in zip(cands, probs):
        c.scores[KEY] = float(p)


def _split(model, mats) -> list[np.ndarray]:
    """``model``'s P(gold) for each matrix of ``mats`` (zeros where no model could be fitted)."""
    if not mats:
        return []
    if model is None:
        return [np.zeros(len(x)) for x in mats]
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1, user_api="openmp"):
        allp = model.predict_proba(np.vstack(mats))[:, 1]
    return list(np.split(allp, np.cumsum([len(x) for x in mats])[:-1]))


def with_name_scores(split: tuple, tagger, keywords: bool, seed: int) -> tuple[tuple, NameScorer]:
    """A copy of a ranker training split (termnorm.fitting.ranker_training_data) whose candidates carry
    out-of-fold ``name`` scores, and the scorer fitted on all of it. Copies: the cross-validation benchmark fits
    several ranker settings on one split, and the others must not see the key."""
    mentions, cand_lists, golds, n_parts = split[:4]
    copies = [[replace(c, scores={k: v for k, v in c.scores.items() if k != KEY}) for c in cl] for cl in cand_lists]
    scorer = NameScorer(keywords, seed)
    for cl, p in zip(copies, scorer.fit_out_of_fold(mentions, copies, golds, n_parts, tagger)):
        write(cl, p)
    return (split[0], copies, *split[2:]), scorer
