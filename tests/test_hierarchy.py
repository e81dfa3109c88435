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
