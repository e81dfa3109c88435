"""Family priors: how much more often coders use terms of a candidate's code family than the vocabulary's share.

A term no coder has used yet has no history and no term-classifier score, so the ranker cannot tell one
never-coded candidate from another but by their wording. Their families can: NCBI's annotators give a MeSH
descriptor (D…) as 84% of gold ids, though MEDIC's 11,915 terms are mostly supplementary concepts (C…) and
OMIM entries; a hospital codes some ICD chapters and code depths far more than others. Per candidate, two
scores, each log(lift) = log(share of coded (mention, term) pairs in the term's family / share of the
vocabulary's terms in it), smoothed towards 0 with :data:`ALPHA` pseudo-pairs spread as the terms are:

==================  ==========================================================================================
``family_code``     the shape of the term's codes, digits read as 9 (D012878 -> D999999, C50.900x001 ->
                    C99.999x999, a MeSH id with an OMIM one -> ``C999999|OMIM:999999``)
``family_cat``      its nearest category (termnorm.rank.hierarchy.categories: 06.3, C50, MEDIC's parent)
==================  ==========================================================================================

Fitted on the coded mentions a candidate list may see: the other folds' in ranker training
(termnorm.fitting.kfold_candidates), every coded mention at inference. Off unless ``Engine.family_features``:
cross-validated it did not help (NCBI disease 0.9177 with, 0.9167 without, p = 0.54, never coded 0.524 both;
Yidu-N7K 0.8780 with, 0.8788 without, never coded 0.618 against 0.633, p = 0.096; ``benchmarks/results/
cv_ncbi_family.json``, ``cv_yidu_family.json``). ``benchmarks/cv.py --rows shipped,family`` measures it again.
A fitted engine does not save its prior (termnorm.persist): only an engine fitted in the same process uses it.
"""

from __future__ import annotations

import math
import re
from collections import Counter

from termnorm.rank.hierarchy import categories

ALPHA = 20.0
KEYS = ("family_code", "family_cat")
_DIGITS = re.compile(r"\d")


def code_shape(codes: list[str]) -> str:
    """The family of a term's codes: each code's shape, digits as 9, the distinct shapes sorted and joined."""
    return "|".join(sorted({_DIGITS.sub("9", c) for c in codes})) if codes else ""


class FamilyPrior:
    """``fit(coded mentions)`` counts the pairs per family; ``annotate(candidate lists)`` writes :data:`KEYS`."""

    def __init__(self, vocabulary, cache: dict | None = None):
        self.vocabulary = vocabulary
        self._cache = {} if cache is None else cache  # what the vocabulary alone gives: shared between folds
        self._families = self._cache.setdefault("families", {})  # term -> (code shape, category)
        self.scores: list[dict[str, float]] = [{}, {}]

    def families(self, term: str) -> tuple[str, str]:
        got = self._families.get(term)
        if got is None:
            cats = categories(self.vocabulary, term, self._cache.setdefault("categories", {}))
            got = self._families[term] = (code_shape(self.vocabulary.codes.get(term) or []), cats[0] if cats else "")
        return got

    def fit(self, mentions) -> FamilyPrior:
        if "terms" not in self._cache:  # how many of the vocabulary's terms each family holds
            per = [Counter(), Counter()]
            for name in self.vocabulary.names:
                for i, f in enumerate(self.families(name)):
                    per[i][f] += 1
            self._cache["terms"] = per
        terms = self._cache["terms"]
        coded = [Counter(), Counter()]
        for m in mentions:
            for t in dict.fromkeys(m.terms):
                if t in self.vocabulary:
                    for i, f in enumerate(self.families(t)):
                        coded[i][f] += 1
        total_terms = max(1, len(self.vocabulary.names))
        for i in range(len(KEYS)):
            n = sum(coded[i].values())
            self.scores[i] = {}
            for f, t in terms[i].items():
                share = t / total_terms
                self.scores[i][f] = math.log((coded[i][f] + ALPHA * share) / (n + ALPHA) / share)
        return self

    def annotate(self, cand_lists) -> None:
        for cands in cand_lists:
            for c in cands:
                for key, f, table in zip(KEYS, self.families(c.term), self.scores):
                    c.scores[key] = table.get(f, 0.0)
