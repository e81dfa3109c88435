"""The cold-start ranker as a prior: its pair probability becomes one more candidate score, ``prior``.

A vocabulary starts with the shipped cold-start ranker of its domain (fitted
on thousands of public labelled mentions, termnorm.engine.PRETRAINED). The
first models the app retrains from coders' decisions learn from a few hundred
mentions only, and without this score they start from scratch: on Yidu-N7K a
GBM fitted on the first 100-1,000 decisions measured 0.25-0.78 exact-set
accuracy on held-out mentions against the cold-start model's 0.78-0.82, and
the gate refused every one of them until 2,000 decisions
(``benchmarks/learning_curve.py --cold-start``). With the prior as an input,
the retrained GBM learns how far to trust the cold-start ranker and what the
coders' decisions add to it -- stacking (Wolpert 1992), the prior being fitted
on other data, so its score is out-of-sample for the coders' mentions.

Input, per candidate list of a mention (what the shipped ranker was fitted on):

======================  =====================================================
the lexical scores      ``tfidf``, ``bm25``, ``jaccard``, ``exact``, ``contained``
                        (and their ``_part`` forms) of the candidates
the surface difference  computed here by the cold-start ranker's *own* scorer
                        (on copies: the engine's ``diff`` is its own refit one)
======================  =====================================================

Output: ``scores["prior"]`` on every candidate, the cold-start ranker's
P(the candidate is a gold term).
"""

from __future__ import annotations

import warnings
from pathlib import Path

from termnorm.records import Candidate


def load_exported_ranker(path, tagger) -> dict | None:
    """A ranker written by ``Engine.export_ranker``, rebuilt for ``tagger``: ``{"ranker", "confidence_model",
    "diff_scorer", "state"}``; None when absent or unreadable (e.g. written by an incompatible scikit-learn)."""
    import joblib

    from termnorm.gbm_ranker import LexicalRanker, PairFeaturizer

    if not path or not Path(path).exists():
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            state = joblib.load(path)
    except Exception as e:  # an old pickle must never stop the app
        warnings.warn(f"{path}: exported ranker not loaded ({e})")
        return None
    # rankers exported before the list-context and part-coverage features have neither
    feat = PairFeaturizer(state["score_keys"], tagger=tagger, context=state.get("context", False),
                          part_context=state.get("part_context", False))
    r = LexicalRanker(feat, theta=state["theta"], count_parts=state.get("count_parts", False))
    r.pair_model, r.count_model, r.rule = state["pair_model"], state["count_model"], tuple(state["rule"])
    r.bag = state.get("bag", 1)
    diff = state.get("diff_scorer")
    if diff is not None:
        diff.tagger = tagger
    return {"ranker": r, "confidence_model": state["confidence_model"], "diff_scorer": diff, "state": state}


class PriorScorer:
    """Score ``prior`` = the exported cold-start ranker's pair probability (see the module docstring)."""

    def __init__(self, path, tagger):
        loaded = load_exported_ranker(path, tagger)
        if loaded is None:
            raise FileNotFoundError(f"{path}: no exported ranker to use as a prior")
        self.path = str(path)
        self.ranker, self.diff_scorer = loaded["ranker"], loaded["diff_scorer"]
        self.model_version = loaded["state"].get("model_version", Path(path).stem)

    def set_tagger(self, tagger) -> None:
        self.ranker.featurizer.tagger = tagger
        if self.diff_scorer is not None:
            self.diff_scorer.tagger = tagger

    def annotate(self, mentions: list[str], cand_lists: list[list[Candidate]], n_parts: list[int]) -> None:
        copies = [[Candidate(c.term_id, c.term, c.score, dict(c.scores), c.codes) for c in cl] for cl in cand_lists]
        if self.diff_scorer is not None:
            self.diff_scorer.annotate(list(mentions), copies)
        probs = self.ranker.score(list(mentions), copies, list(n_parts))
        for cl, ps in zip(cand_lists, probs):
            for c, p in zip(cl, ps):
                c.scores["prior"] = float(p)
