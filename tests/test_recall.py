"""Lexical recall strategies and their union (approach B): small hand-made vocabulary + a real-data check."""

from __future__ import annotations

import math
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from termnorm.records import Candidate, LabelledMention
from termnorm.recall.bm25 import BM25Recaller
from termnorm.recall.exact import ContainedNameRecaller, ExactRecaller
from termnorm.recall.analogy import AnalogyRecaller, carry_edit
from termnorm.recall.history import CodedKeyRecaller, HistoryRecaller, add_history_terms, coded_key
from termnorm.recall.jaccard import JaccardRecaller
from termnorm.recall.tfidf import CharTfidfRecaller, name_variants, row_top_k, searchable_forms
from termnorm.recall.union import UnionRecaller
from termnorm.text.normalize import normalize
from termnorm.vocabulary import Vocabulary

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / ".." / "shared" / "data"

NAMES = [
    ("甲状腺病损切除术", "06.3101"), ("甲状腺全部切除术", "06.4x00"), ("单侧甲状腺叶切除术", "06.2x00"),
    ("乳房病损切除术", "85.2101"), ("胆囊切除术", "51.2201"), ("腹腔镜下胆囊切除术", "51.2300"),
    ("胆总管切开取石术", "51.4101"), ("慢性阻塞性肺疾病", "J44.900"), ("糖尿病", "E14.900"),
    ("糖尿病肾病", "E14.201"), ("预激综合征[沃-帕-怀综合征]", "I45.600"), ("胆道造影", "87.5400"),
]
QUERIES = ["右侧甲状腺肿瘤切除术", "腹腔镜胆囊切除术", "慢阻肺", "糖尿病糖尿病肾病", "乳腺病损切除", "预激综合征射频消融"]


@pytest.fixture(scope="module")
def vocab() -> Vocabulary:
    v = Vocabulary(name="tiny")
    for name, code in NAMES:
        v.add_term(name, [code])
    v.add_synonym("慢性阻塞性肺疾病", "慢阻肺")
    v.add_synonym("胆囊切除术", "胆囊摘除术")
    return v


def _forms(vocab):
    texts, ids = searchable_forms(vocab)
    return [normalize(t) for t in texts], ids


def _pool_top(scores_per_form, ids, k):
    """Brute force: max over a term's forms, then the k best (ties by term id), zeros dropped."""
    best: dict[int, float] = {}
    for s, t in zip(scores_per_form, ids):
        best[t] = max(best.get(t, 0.0), float(s))
    ranked = sorted(((t, s) for t, s in best.items() if s > 0), key=lambda x: (-x[1], x[0]))
    return ranked[:k]


def _assert_same(hits, expected):
    assert [t for t, _ in hits] == [t for t, _ in expected]
    np.testing.assert_allclose([s for _, s in hits], [s for _, s in expected], rtol=1e-5)


# --- exact / contained -------------------------------------------------------
def test_exact_hit_first_and_laterality(vocab):
    r = ExactRecaller().fit(vocab)
    hits = r.recall_batch(["胆囊切除术", "右侧甲状腺叶切除术", "胆囊摘除术", "完全不相干"], k=5)
    assert hits[0] == [(vocab.index("胆囊切除术"), 1.0)]
    # "右侧" and "单侧" both strip away: the stripped match scores below an exact one
    assert hits[1] == [(vocab.index("单侧甲状腺叶切除术"), 0.9)]
    assert hits[2] == [(vocab.index("胆囊切除术"), 1.0)]  # a synonym resolves to its term
    assert hits[3] == []


def test_contained_names_longest_first(vocab):
    r = ContainedNameRecaller().fit(vocab)
    (hits,) = r.recall_batch(["糖尿病糖尿病肾病"], k=5)
    # 糖尿病肾病 covers 5/8 characters, 糖尿病 3/8
    assert hits == [(vocab.index("糖尿病肾病"), 5 / 8), (vocab.index("糖尿病"), 3 / 8)]


def test_name_variants_are_searched(vocab):
    assert name_variants("预激综合征[沃-帕-怀综合征]") == ["沃-帕-怀综合征", "预激综合征"]
    assert name_variants("拇指创伤性切断(完全)(部分)") == ["拇指创伤性切断"]
    assert name_variants("白斑病,不可归类在他处者") == ["白斑病"]
    assert ExactRecaller().fit(vocab).recall("预激综合征", 3) == [(vocab.index("预激综合征[沃-帕-怀综合征]"), 1.0)]


# --- sparse paths vs brute force -------------------------------------------------
def test_tfidf_matches_brute_force(vocab):
    r = CharTfidfRecaller().fit(vocab)
    texts, ids = _forms(vocab)
    names = r.vectorizer.transform(texts).toarray()
    for q, hits in zip(QUERIES, r.recall_batch(QUERIES, k=4)):
        qv = r.vectorizer.transform([normalize(q)]).toarray()[0]
        _assert_same(hits, _pool_top(names @ qv, ids, 4))
    # the exact name ranks first with cosine 1
    (hits,) = r.recall_batch(["腹腔镜下胆囊切除术"], k=1)
    assert hits[0][0] == vocab.index("腹腔镜下胆囊切除术") and hits[0][1] == pytest.approx(1.0, abs=1e-5)


def test_jaccard_matches_brute_force(vocab):
    r = JaccardRecaller().fit(vocab)
    texts, ids = _forms(vocab)
    for q, hits in zip(QUERIES + ["完全不相干x"], r.recall_batch(QUERIES + ["完全不相干x"], k=5)):
        a = set(normalize(q))
        brute = [len(a & set(t)) / len(a | set(t)) for t in texts]
        _assert_same(hits, _pool_top(brute, ids, 5))


def test_bm25_matches_brute_force(vocab):
    r = BM25Recaller(user_words=["甲状腺", "病损", "切除术", "胆囊", "糖尿病"]).fit(vocab)
    texts, ids = searchable_forms(vocab)
    docs = [r._tokens(t) for t in texts]
    n, avgdl = len(docs), sum(map(len, docs)) / len(docs)
    df = Counter(w for d in docs for w in set(d))
    for q, hits in zip(QUERIES, r.recall_batch(QUERIES, k=5)):
        words = set(r._tokens(q))
        brute = []
        for d in docs:
            tf = Counter(d)
            s = 0.0
            for w in words & set(d):
                idf = math.log(1 + (n - df[w] + 0.5) / (df[w] + 0.5))
                s += idf * tf[w] * 2.2 / (tf[w] + 1.2 * (0.25 + 0.75 * len(d) / avgdl))
            brute.append(s)
        _assert_same(hits, _pool_top(brute, ids, 5))


def test_row_top_k_pools_exactly():
    rng = np.random.default_rng(0)
    for _ in range(50):
        n_forms, n_terms, k = 60, 12, int(rng.integers(1, 8))
        col_terms = rng.integers(0, n_terms, n_forms)
        cols = rng.choice(n_forms, size=int(rng.integers(0, n_forms)), replace=False)
        data = rng.random(len(cols)).astype(np.float32)
        dense = np.zeros(n_forms, dtype=np.float32)
        dense[cols] = data
        _assert_same(row_top_k(data, cols, col_terms, k, pooled=True), _pool_top(dense, col_terms, k))


# --- history -------------------------------------------------------------------
def test_history_proposes_gold_terms_and_learns_at_once(vocab):
    history = [LabelledMention("腹腔镜胆囊切除+胆道造影", ["腹腔镜下胆囊切除术", "胆道造影"]),
               LabelledMention("copd", ["慢性阻塞性肺疾病"]),
               LabelledMention("不在词表的名称", ["不存在的术语"])]
    r = HistoryRecaller(merge_every=2).fit(vocab, history)
    assert r.skipped_terms == 1
    (hits,) = r.recall_batch(["腹腔镜胆囊切除术+术中胆道造影"], k=5)
    got = dict(hits)
    # both gold terms of the coded mention, with the same score (its similarity)
    assert got[vocab.index("腹腔镜下胆囊切除术")] == pytest.approx(got[vocab.index("胆道造影")])
    assert r.recall_batch(["甲减"], k=5) == [[]]
    r.add_coded_mention("甲减", ["甲状腺全部切除术"])  # into the buffer, no refit
    (hits,) = r.recall_batch(["甲减"], k=5)
    assert hits[0][0] == vocab.index("甲状腺全部切除术") and hits[0][1] == pytest.approx(1.0, abs=1e-5)
    # main index hits still come back alongside the buffer's
    assert vocab.index("慢性阻塞性肺疾病") in dict(r.recall_batch(["copd"], k=5)[0])
    n_before = len(r)
    r.add_coded_mention("乳腺肿物切除", ["乳房病损切除术"])  # reaches merge_every: merged into the main index
    assert len(r) == n_before + 1 and r._buf is None
    assert r.recall_batch(["乳腺肿物切除"], k=1)[0][0][0] == vocab.index("乳房病损切除术")
    assert r.recall_batch(["甲减"], k=1)[0][0][0] == vocab.index("甲状腺全部切除术")


def test_history_jaccard_matches_brute_force(vocab):
    history = [LabelledMention("胆囊结石胆囊切除", ["胆囊切除术"]), LabelledMention("甲状腺肿物切除", ["甲状腺病损切除术"]),
               LabelledMention("甲状腺全切", ["甲状腺全部切除术", "单侧甲状腺叶切除术"])]
    r = HistoryRecaller(similarity="jaccard").fit(vocab, history)
    assert r.name == "history_jaccard"
    r.add_coded_mention("胆总管取石", ["胆总管切开取石术"])  # buffer rows are searched with the main ones
    rows = history + [LabelledMention("胆总管取石", ["胆总管切开取石术"])]
    texts = [normalize(m.text) for m in rows for _ in m.terms]
    ids = [vocab.index(t) for m in rows for t in m.terms]
    for q in ["甲状腺肿物切除术", "胆总管结石取石", "胆囊切除"]:
        a = set(normalize(q))
        brute = [len(a & set(t)) / len(a | set(t)) for t in texts]
        _assert_same(r.recall(q, 3), _pool_top(brute, ids, 3))


def test_coded_key_drops_side_punctuation_codes_and_final_shu():
    assert coded_key("（左侧）甲状腺叶切除术。") == coded_key("右甲状腺叶切除") == "甲状腺叶切除"
    assert coded_key("肾部分切除术((55.4001))") == "肾部分切除"
    # 双侧 decides codes and stays; 左右 is one word
    assert coded_key("双侧甲状腺切除术") != coded_key("甲状腺切除术")
    assert coded_key("左右心导管检查") == "左右心导管检查" != coded_key("右心导管检查")


def test_coded_key_recall_scores_the_share_of_agreeing_coded_mentions(vocab):
    history = [LabelledMention("左侧甲状腺肿物切除术", ["甲状腺病损切除术"]),
               LabelledMention("右甲状腺肿物切除", ["甲状腺病损切除术"]),
               LabelledMention("甲状腺肿物切除术。", ["单侧甲状腺叶切除术"]),
               LabelledMention("双侧甲状腺肿物切除术", ["甲状腺全部切除术"]),
               LabelledMention("胆囊切除", ["不存在的术语"])]
    r = CodedKeyRecaller().fit(vocab, history)
    assert r.name == "history_key" and r.skipped_terms == 1
    (hits,) = r.recall_batch(["右侧甲状腺肿物切除术"], k=5)
    assert hits == [(vocab.index("甲状腺病损切除术"), pytest.approx(2 / 3)),
                    (vocab.index("单侧甲状腺叶切除术"), pytest.approx(1 / 3))]
    assert r.recall("双侧甲状腺肿物切除", k=5) == [(vocab.index("甲状腺全部切除术"), 1.0)]
    assert r.recall("甲状腺肿物切除", k=1) == [(vocab.index("甲状腺病损切除术"), pytest.approx(2 / 3))]
    assert r.recall_batch(["胆囊切除", "腹腔镜胆囊切除术"], k=5) == [[], []]
    # a coder's decision counts for the next query, no refit
    r.add_coded_mention("左侧胆囊切除术", ["胆囊切除术", "胆道造影"])
    assert r.recall("胆囊切除", k=5) == [(vocab.index("胆囊切除术"), 1.0), (vocab.index("胆道造影"), 1.0)]


def test_carry_edit_applies_the_neighbours_edit_to_its_term():
    assert carry_edit("肩关节脱位手法整复", "髋关节脱位手法整复", "肩脱位闭合性复位术") == "髋脱位闭合性复位术"
    assert carry_edit("主动脉-二支冠状动脉搭桥", "主动脉-一支冠状动脉搭桥", "二根冠状动脉旁路移植") == "一根冠状动脉旁路移植"
    # a deleted span leaves the term too; a span inserted at the front is prefixed
    assert carry_edit("胸腔镜下胸腺病损切除", "胸腺病损切除", "胸腔镜下胸腺病损切除术") == "胸腺病损切除术"
    assert carry_edit("前列腺根治性切除", "腹腔镜下前列腺根治性切除", "前列腺根治性切除术") == "腹腔镜下前列腺根治性切除术"
    # a deleted detail the term never named is left alone
    assert carry_edit("桡骨骨折切开复位钢板内固定", "尺骨骨折切开复位内固定", "桡骨骨折切开复位内固定术") == "尺骨骨折切开复位内固定术"
    # nothing to carry: the replaced span is not in the term, an insertion inside, no edit, too many edits
    assert carry_edit("肩关节脱位手法整复", "髋关节脱位手法整复", "关节脱位闭合性复位术") is None
    assert carry_edit("胆囊切除", "胆囊部分切除", "胆囊切除术") is None
    assert carry_edit("胆囊切除", "胆囊切除", "胆囊切除术") is None
    assert carry_edit("甲状腺左叶切除伴峡部", "甲状腺右叶次全切除不伴淋巴", "甲状腺左叶切除伴峡部") is None
    assert carry_edit("人工股骨头置换", "尺骨骨折切开复位内固定", "人工股骨头置换术") is None  # only 骨 kept


@pytest.fixture()
def joints() -> Vocabulary:
    v = Vocabulary(name="joints")
    for name in ["肩脱位闭合性复位术", "髋脱位闭合性复位术", "经额脑膜病损切除术", "经枕脑膜病损切除术", "脑膜病损切除术"]:
        v.add_term(name)
    return v


def test_analogy_recall_proposes_the_neighbours_term_edited_like_the_query(joints):
    from termnorm.recall.history import coded_key

    v = joints
    history = [LabelledMention("右肩关节脱位手法整复术", ["肩脱位闭合性复位术"]),
               LabelledMention("左额开颅脑膜瘤切除术", ["经额脑膜病损切除术", "不存在的术语"])]
    r = AnalogyRecaller().fit(v, history)
    assert r.name == "history_analogy" and r.skipped_terms == 1
    hits = r.recall_batch(["右髋关节脱位手法整复术", "左枕开颅脑膜瘤切除术", "左肩关节脱位手法整复", "胆囊切除术"], k=3)
    cos = (r.vectorizer.transform([coded_key("右髋关节脱位手法整复术")])
           @ r.vectorizer.transform([coded_key("右肩关节脱位手法整复术")]).T).toarray()[0, 0]
    assert 0 < cos < 1 and hits[0] == [(v.index("髋脱位闭合性复位术"), pytest.approx(cos))]
    assert [t for t, _ in hits[1]] == [v.index("经枕脑膜病损切除术")]
    # the same mention up to side proposes nothing here (the coded-key strategy's case); no neighbour, nothing
    assert hits[2] == [] and hits[3] == []
    # a coder's decision is a neighbour for the next query; a term added to the vocabulary is found
    r.add_coded_mention("右侧膝关节脱位手法复位术", ["肩脱位闭合性复位术"])
    v.add_term("膝脱位闭合性复位术")
    assert r.recall("左侧膝关节脱位手法复位术", k=3) == []  # its own term is not an analogy
    r.add_coded_mention("肘关节脱位手法复位", ["肩脱位闭合性复位术"])
    assert [t for t, _ in r.recall("肩关节脱位手法复位", k=3)] == []  # 肘 is not in the neighbour's term
    v.add_term("肘脱位闭合性复位术")
    r.add_coded_mention("右肩关节脱位手法复位", ["肩脱位闭合性复位术"])
    assert v.index("肘脱位闭合性复位术") in dict(r.recall("右肘关节脱位手法复位", k=3))


def test_add_history_terms_extends_vocabulary():
    v = Vocabulary(names=["糖尿病"])
    added = add_history_terms(v, [LabelledMention("x", ["糖尿病", "新术语"]), LabelledMention("y", ["新术语"])])
    assert added == ["新术语"] and "新术语" in v and len(v) == 2


# --- union ---------------------------------------------------------------------
def _union(vocab, **kw):
    strategies = [ExactRecaller(), ContainedNameRecaller(), CharTfidfRecaller(), JaccardRecaller(),
                  BM25Recaller(user_words=["胆囊", "切除术"]), HistoryRecaller()]
    k = {"exact": 3, "contained": 3, "tfidf": 3, "jaccard": 3, "bm25": 3, "history": 3,
         "tfidf_part": 2, "history_part": 2}
    history = [LabelledMention("胆囊炎胆囊切除", ["胆囊切除术"])]
    return UnionRecaller(strategies, k, **kw).fit(vocab, history)


def test_union_keeps_every_strategy_score(vocab):
    u = _union(vocab)
    (cands,) = u.recall_batch(["腹腔镜下胆囊切除术"])
    assert all(isinstance(c, Candidate) for c in cands)
    top = cands[0]
    assert top.term == "腹腔镜下胆囊切除术" and top.codes == ["51.2300"]
    assert {"exact", "tfidf", "jaccard", "bm25"} <= set(top.scores) and top.scores["exact"] == 1.0
    # the history strategy's proposal keeps its own score next to the lexical ones
    chole = next(c for c in cands if c.term == "胆囊切除术")
    assert {"history", "tfidf", "jaccard"} <= set(chole.scores)
    assert len({c.term_id for c in cands}) == len(cands)
    assert [c.score for c in cands] == sorted((c.score for c in cands), reverse=True)


def test_union_recalls_parts_and_abbreviations(vocab):
    u = _union(vocab, abbreviations={"copd": "慢性阻塞性肺疾病"})
    (cands,) = u.recall_batch(["胆总管切开取石+胆道造影"])
    by = {c.term: c for c in cands}
    assert "tfidf_part" in by["胆道造影"].scores and "胆总管切开取石术" in by
    (cands,) = u.recall_batch(["copd急性加重"])
    assert cands[0].term == "慢性阻塞性肺疾病" and "tfidf_abbr" in cands[0].scores
    assert len(u.recall_batch(["胆总管切开取石+胆道造影"], k=2)[0]) == 2


def test_a_score_only_strategy_scores_the_others_candidates_and_proposes_none(vocab):
    """A strategy marked ``score_only`` (benchmarks/cv.py row dense_scores: a bi-encoder's similarity as a ranker
    input without its own candidates) adds its score to candidates the others found, and changes no order."""
    plain = _union(vocab).recall_batch(["胆总管切开取石+胆道造影"])[0]
    u = _union(vocab)
    bm25 = next(s for s in u.strategies if s.name == "bm25")
    bm25.score_only = True
    got = u.recall_batch(["胆总管切开取石+胆道造影"])[0]
    alone = {vocab.names[t] for t, _ in bm25.recall_batch(["胆总管切开取石+胆道造影"], u.k["bm25"])[0]}
    off = _union(vocab)
    off.k.update(bm25=0, bm25_part=0, bm25_abbr=0)
    without = off.recall_batch(["胆总管切开取石+胆道造影"])[0]
    assert [c.term for c in got] == [c.term for c in without] != [c.term for c in plain]
    scored = [c for c in got if "bm25" in c.scores]
    assert scored and {c.term for c in scored} <= alone
    assert all(c.score == w.score for c, w in zip(got, without))


def test_union_add_coded_mention_reaches_history(vocab):
    u = _union(vocab)
    assert all(c.term != "乳房病损切除术" for c in u.recall_batch(["zz9"])[0])
    u.add_coded_mention("zz9", ["乳房病损切除术"])
    assert u.recall_batch(["zz9"])[0][0].term == "乳房病损切除术"


# --- real data -------------------------------------------------------------------
@pytest.mark.skipif(not (DATA / "yidu-n7k" / "val.xlsx").is_file(), reason="shared data absent")
def test_yidu_val_candidate_recall():
    sys.path.insert(0, str(ROOT))
    from benchmarks.recall import TUNED_K, build_strategies
    from termnorm.evaluate import candidate_recall
    from termnorm.loaders import load_keywords, load_labelled, load_vocabulary

    vocab = load_vocabulary(DATA / "yidu-n7k" / "code.txt")
    history = load_labelled(DATA / "yidu-n7k" / "train.xlsx").mentions
    val = load_labelled(DATA / "yidu-n7k" / "val.xlsx").mentions[:200]
    keywords = load_keywords(DATA / "keywords")
    union = UnionRecaller(build_strategies(keywords), TUNED_K["yidu"],
                          abbreviations=keywords["abbreviations"]).fit(vocab, history)
    cands = union.recall_batch([m.text for m in val])
    assert candidate_recall([m.terms for m in val], cands) >= 0.95
    assert np.mean([len(c) for c in cands]) <= 30
