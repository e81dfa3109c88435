"""Evaluation metrics against small hand-computed cases (arithmetic in the comments)."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from termnorm.evaluate import (
    accuracy_by_familiarity,
    candidate_recall,
    count_accuracy,
    error_kind,
    error_table,
    evaluate_predictions,
    exact_set_accuracy,
    mean_candidates,
    micro_prf,
    ndcg_at_k,
    pair_recall,
    recall_at_k,
)
from termnorm.records import Candidate

# Four mentions. Gold sets: {a}, {b, c}, {d}, {e, f}
GOLD = [["a"], ["b", "c"], ["d"], ["e", "f"]]
# Predicted sets: exact; missing c; wrong (x for d); extra g
PRED = [{"a"}, {"b"}, {"x"}, {"e", "f", "g"}]
# Ranked candidate lists, best first
RANKED = [
    ["a", "y", "z"],            # a at rank 1
    ["y", "b", "z", "q", "c"],  # b at 2, c at 5
    ["x", "y"],                 # d absent
    ["f", "e", "g"],            # f at 1, e at 2
]


def test_exact_set_accuracy():
    # only mention 1 has predicted == gold: 1/4
    assert exact_set_accuracy(GOLD, PRED) == pytest.approx(0.25)
    # order and duplicates in gold lists do not matter
    assert exact_set_accuracy([["a", "b", "a"]], [{"b", "a"}]) == 1.0


def test_micro_prf():
    # true positives: a, b, e, f = 4; predicted pairs 1+1+1+3 = 6; gold pairs 1+2+1+2 = 6
    p, r, f = micro_prf(GOLD, PRED)
    assert p == pytest.approx(4 / 6)
    assert r == pytest.approx(4 / 6)
    assert f == pytest.approx(4 / 6)  # 2PR/(P+R) with P = R
    # nothing predicted: P = R = F = 0, no division error
    assert micro_prf([["a"]], [set()]) == (0.0, 0.0, 0.0)
    # P = 1/2 (a right, z wrong), R = 1/3 (a of a, b, c): F = 2 * 1/2 * 1/3 / (5/6) = 0.4
    assert micro_prf([["a", "b", "c"]], [{"a", "z"}])[2] == pytest.approx(0.4)


def test_recall_at_k():
    # k=1: mention 1 (a) yes; 2 needs b, c no; 3 no; 4 needs e, f: only f -> 1/4
    assert recall_at_k(GOLD, RANKED, 1) == pytest.approx(0.25)
    # k=2: 1 yes; 2 no (c at 5); 3 no; 4 yes (f, e) -> 2/4
    assert recall_at_k(GOLD, RANKED, 2) == pytest.approx(0.5)
    # k=5: 1, 2, 4 -> 3/4
    assert recall_at_k(GOLD, RANKED, 5) == pytest.approx(0.75)


def test_candidate_and_pair_recall_and_mean():
    # all gold among the whole list: mentions 1, 2, 4 -> 3/4
    assert candidate_recall(GOLD, RANKED) == pytest.approx(0.75)
    # gold pairs found: a, b, c, e, f = 5 of 6
    assert pair_recall(GOLD, RANKED) == pytest.approx(5 / 6)
    # list lengths 3, 5, 2, 3 -> 13/4
    assert mean_candidates(RANKED) == pytest.approx(13 / 4)


def test_ndcg_at_5():
    # m1: a at rank 1 -> DCG 1, ideal 1 -> 1
    # m2: b at 2 (1/log2 3), c at 5 (1/log2 6); ideal 1 + 1/log2 3
    m2 = (1 / math.log2(3) + 1 / math.log2(6)) / (1 + 1 / math.log2(3))
    # m3: 0; m4: f at 1, e at 2 -> ideal -> 1
    assert ndcg_at_k(GOLD, RANKED, 5) == pytest.approx((1 + m2 + 0 + 1) / 4)
    # cut at k: c at rank 5 does not count at k=4
    m2_k4 = (1 / math.log2(3)) / (1 + 1 / math.log2(3))
    assert ndcg_at_k([["b", "c"]], [RANKED[1]], 4) == pytest.approx(m2_k4)


def test_count_accuracy():
    # gold counts 1, 2, 1, 2; predicted 1, 1, 1, 3 -> mentions 1, 3 -> 2/4
    assert count_accuracy(GOLD, [1, 1, 1, 3]) == pytest.approx(0.5)


def test_error_kinds_and_table():
    assert [error_kind(g, p) for g, p in zip(GOLD, PRED)] == ["correct", "missing term", "wrong term", "extra term"]
    # two gold, one different predicted: neither subset nor superset, other count
    assert error_kind(["a", "b"], ["c"]) == "wrong count"
    table = error_table(["m1", "m2", "m3", "m4"], GOLD, PRED)
    assert isinstance(table, pd.DataFrame) and list(table.columns) == ["mention", "gold", "predicted", "correct", "kind"]
    assert table["correct"].tolist() == [True, False, False, False]
    assert table.loc[3, "predicted"] == "e##f##g" and table.loc[1, "gold"] == "b##c"
    rows = error_table(["m1"], [["a"]], [{"a"}], as_frame=False)
    assert rows == [{"mention": "m1", "gold": "a", "predicted": "a", "correct": True, "kind": "correct"}]


def test_candidates_accepted_as_ranked_items():
    cands = [Candidate(term_id=0, term="y"), Candidate(term_id=1, term="a")]
    assert recall_at_k([["a"]], [cands], 1) == 0.0
    assert recall_at_k([["a"]], [cands], 2) == 1.0


def test_evaluate_predictions_keys_and_values():
    out = evaluate_predictions(GOLD, PRED, RANKED)
    assert out["n"] == 4
    assert out["accuracy"] == pytest.approx(0.25)
    assert out["micro_f1"] == pytest.approx(4 / 6)
    assert out["recall_at_1"] == pytest.approx(0.25) and out["recall_at_20"] == pytest.approx(0.75)
    assert out["candidate_recall"] == pytest.approx(0.75) and out["pair_recall"] == pytest.approx(5 / 6)
    assert out["mean_candidates"] == pytest.approx(13 / 4)
    # predicted set sizes 1, 1, 1, 3 vs gold 1, 2, 1, 2 -> 2/4
    assert out["count_accuracy"] == pytest.approx(0.5)
    # explicit counts override the set sizes: all right -> 1
    assert evaluate_predictions(GOLD, PRED, RANKED, predicted_counts=[1, 2, 1, 2])["count_accuracy"] == 1.0
    for key in ("micro_precision", "micro_recall", "recall_at_5", "recall_at_10", "ndcg_at_5"):
        assert key in out
    # recall-only evaluation
    assert "accuracy" not in evaluate_predictions(GOLD, None, RANKED)
    with pytest.raises(ValueError):
        evaluate_predictions(GOLD, PRED[:3], RANKED)


def test_accuracy_by_familiarity_buckets_by_the_rarest_gold_term():
    # coded history: a x12, b x3, c x1; d never
    history = [["a"]] * 12 + [["b"]] * 3 + [["c"]]
    gold = [["a"], ["a"], ["b"], ["a", "c"], ["d"], ["a", "d"]]
    pred = [["a"], ["b"], ["b"], ["a", "c"], ["a"], ["a", "d"]]
    r = accuracy_by_familiarity(history, gold, pred)
    # 10+: the two {a} mentions, one right; 3-9: {b} right; 1-2: {a, c} (c seen once) right;
    # unseen: {d} wrong and {a, d} right
    assert r == {"unseen": {"n": 2, "accuracy": 0.5}, "1-2": {"n": 1, "accuracy": 1.0},
                 "3-9": {"n": 1, "accuracy": 1.0}, "10+": {"n": 2, "accuracy": 0.5}}
    assert accuracy_by_familiarity([], [["a"]], [["a"]])["10+"] == {"n": 0, "accuracy": None}
    # with the candidates: the unseen {d} miss had d among them (the ranker's miss), the 10+ one had not
    ranked = [["a"], ["b"], ["b"], ["c", "a"], ["a", "d"], ["a", "d"]]
    r = accuracy_by_familiarity(history, gold, pred, ranked)
    assert (r["unseen"]["candidate_recall"], r["10+"]["candidate_recall"], r["1-2"]["candidate_recall"]) == \
        (1.0, 0.5, 1.0)
