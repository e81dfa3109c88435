"""Hierarchy scores (termnorm.rank.hierarchy): a candidate's category vouched for by the mention's coded
neighbours, on a real ICD-9-CM-3 fragment and through the engine."""

from __future__ import annotations

from termnorm.engine import Engine
from termnorm.rank import hierarchy
from termnorm.records import Candidate, LabelledMention
from termnorm.vocabulary import Vocabulary

TERMS = {"甲状腺部分切除术": "06.3900", "甲状腺病损切除术": "06.3100", "甲状腺全部切除术": "06.4x00",
         "胆囊切除术": "51.2200", "腹腔镜下胆囊切除术": "51.2300"}


def vocab() -> Vocabulary:
    v = Vocabulary(name="procedures")
    for name, code in TERMS.items():
        v.add_term(name, [code])
    return v


def test_a_never_coded_candidate_gets_the_history_of_its_coded_siblings():
    v = vocab()
    assert hierarchy.categories(v, "甲状腺病损切除术", {}) == ("06.3", "06")
    cands = [Candidate(0, "甲状腺部分切除术", scores={"history": 0.9}),
             Candidate(1, "甲状腺病损切除术", scores={"tfidf": 0.5}),  # never coded: no history of its own
             Candidate(2, "甲状腺全部切除术", scores={"history_jaccard": 0.4}),
             Candidate(3, "胆囊切除术", scores={"tfidf": 0.3})]
    hierarchy.annotate(v, [cands], {})
    got = [(c.scores.get("category1", 0.0), c.scores.get("category2", 0.0)) for c in cands]
    # 06.3: the sibling's 0.9 (never a candidate's own score); 06: the best other one of 06.3 / 06.4
    assert got == [(0.0, 0.4), (0.9, 0.9), (0.0, 0.9), (0.0, 0.0)]


def test_the_engine_scores_categories_only_when_switched_on():
    eng = Engine(vocab(), history=[LabelledMention("甲状腺部分切除", ["甲状腺部分切除术"])], keyword_dir=None)
    assert not any("category1" in c.scores for c in eng.recall_batch(["甲状腺肿物切除"])[0])  # off: measured
    eng.category_features = True
    cands = eng.recall_batch(["甲状腺肿物切除"])[0]
    by = {c.term: c.scores for c in cands}
    assert by["甲状腺病损切除术"].get("category1", 0) > 0 and "category1" not in by.get("胆囊切除术", {})


def test_family_priors_lift_the_code_families_coders_use_and_are_fitted_on_the_other_folds():
    """termnorm.rank.family: a never-coded term of a family coders use often (MeSH D…) scores above one of a
    family they rarely use (supplementary C…); the ranker's K-fold candidates get priors fitted without their
    own fold."""
    from termnorm.rank.family import FamilyPrior, code_shape

    v = Vocabulary(name="medic", language="en")
    for name, code in [("Breast Neoplasms", "D001943"), ("Ovarian Neoplasms", "D010051"), ("Colonic Neoplasms",
                       "D003110"), ("Breast cancer, early-onset", "C565102"), ("Ovarian cancer 2", "C564331"),
                       ("Colon cancer 4", "C567890"), ("Colon cancer 5", "C567891")]:
        v.add_term(name, [code])
    assert code_shape(["D001943", "OMIM:114480"]) == "D999999|OMIM:999999"
    coded = [LabelledMention("breast cancer", ["Breast Neoplasms"]),
             LabelledMention("ovarian cancer", ["Ovarian Neoplasms"]),
             LabelledMention("breast and ovarian cancer", ["Breast Neoplasms", "Ovarian Neoplasms"])]
    prior = FamilyPrior(v).fit(coded)
    cands = [Candidate(2, "Colonic Neoplasms"), Candidate(6, "Colon cancer 5")]  # neither ever coded
    prior.annotate([cands])
    d, c = (x.scores["family_code"] for x in cands)
    assert d > 0 > c  # 4 of 4 coded pairs are D… where 3 of 7 terms are
    eng = Engine(v, history=coded, keyword_dir=None)
    eng.family_features = True
    splits = eng.ranker_training_data(coded, folds=3)
    assert eng.family_prior is not None and eng.family_prior.scores[0] == prior.scores[0]
    # a training mention's candidates: the prior of the other folds (two pairs fewer for "breast and ovarian")
    scored = [c.scores["family_code"] for cl in splits[0][1] for c in cl if c.term == "Colonic Neoplasms"]
    assert scored and all(s < d for s in scored)
    assert any(c.scores.get("family_code") == d for c in eng.recall_batch(["colon neoplasms"])[0])
