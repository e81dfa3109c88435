"""Fusion block (approach A's FB): s_c, the average with the ranker, the count rule, the confidence."""

from __future__ import annotations

import numpy as np
import pytest

from termnorm.fusion import (DEFAULT_THETA, FusionBlock, predicted_count, recall_scores,
                             similarity_to_distance)
from termnorm.records import Candidate


def cands(sims, ranker=None, key="tfidf", extra=None):
    out = []
    for i, s in enumerate(sims):
        scores = {key: s} if s is not None else {}
        if extra:
            scores.update(extra[i])
        if ranker is not None:
            scores["ranker"] = ranker[i]
        out.append(Candidate(term_id=i, term=f"t{i}", scores=scores))
    return out


def test_recall_score_formula_by_hand():
    # sims .9 .6 .5 -> d .1 .4 .5, sum 1.0 -> s_c = 1 - d / 1.0
    np.testing.assert_allclose(recall_scores(similarity_to_distance([0.9, 0.6, 0.5])), [0.9, 0.6, 0.5])
    # d 1 1 2 -> s_c 1 - d/4
    np.testing.assert_allclose(recall_scores([1.0, 1.0, 2.0]), [0.75, 0.75, 0.5])
    # every candidate an exact match: no distance to share out
    np.testing.assert_allclose(recall_scores([0.0, 0.0]), [1.0, 1.0])
    # cosine can be negative: d up to 2, still a valid share
    np.testing.assert_allclose(recall_scores(similarity_to_distance([1.0, -1.0])), [1.0, 0.0])


def test_fused_score_is_the_average_and_orders_candidates():
    fb = FusionBlock()
    cs = cands([0.9, 0.6, 0.5], ranker=[0.2, 0.9, 0.4])
    # s = (s_c + s_r) / 2 = (.9+.2)/2, (.6+.9)/2, (.5+.4)/2 = .55, .75, .45
    chosen, conf = fb.fuse(cs, count_probs=[0.9, 0.05, 0.05])
    assert chosen == ["t1"]
    assert [c.term for c in cs] == ["t1", "t0", "t2"]  # ordered in place, best first
    assert [c.score for c in cs] == pytest.approx([0.75, 0.55, 0.45])
    c1 = cs[0]
    assert c1.scores["fused"] == pytest.approx(0.75) and c1.scores["ranker"] == 0.9
    assert c1.scores["recall"] == pytest.approx(0.6) and c1.scores["tfidf"] == 0.6  # strategy score kept
    assert 0.0 < conf < 1.0


def test_weights_are_configurable_and_ranker_probs_can_be_passed():
    fb = FusionBlock(w_recall=1.0, w_ranker=3.0)
    cs = cands([0.9, 0.6, 0.5])
    fb.fuse(cs, 1, ranker_probs=[0.2, 0.9, 0.4])
    by_term = {c.term: c.score for c in cs}
    assert by_term["t0"] == pytest.approx((0.9 + 3 * 0.2) / 4)
    assert by_term["t1"] == pytest.approx((0.6 + 3 * 0.9) / 4)
    assert cs[0].scores["ranker"] == 0.9
    with pytest.raises(ValueError):
        fb.fuse(cands([0.9, 0.6]), 1, ranker_probs=[0.5])


def test_without_ranker_the_recall_score_alone_decides():
    cs = cands([0.5, 0.9, 0.6])
    chosen, _ = FusionBlock().fuse(cs, 1)
    assert chosen == ["t1"] and cs[0].score == pytest.approx(cs[0].scores["recall"])


def test_best_similarity_over_strategies_and_missing_counts_zero():
    fb = FusionBlock(recall_keys=("dense", "jaccard"))
    cs = [Candidate(0, "a", scores={"dense": 0.8, "jaccard": 0.3}),
          Candidate(1, "b", scores={"jaccard": 0.6, "bm25": 12.0}),  # bm25 is not a similarity
          Candidate(2, "c", scores={"bm25": 30.0})]
    np.testing.assert_allclose(fb.recall_similarity(cs), [0.8, 0.6, 0.0])
    # d = .2 .4 1 (sum 1.6)
    fb.score(cs)
    assert [c.scores["recall"] for c in cs] == pytest.approx([1 - 0.2 / 1.6, 1 - 0.4 / 1.6, 1 - 1 / 1.6])


def test_count_one_and_two():
    fb = FusionBlock()
    sims = [0.8] * 4  # equal s_c = 1 - .2/.8 = .75: the ranker orders
    cs = cands(sims, ranker=[0.3, 0.95, 0.9, 0.1])
    assert fb.fuse(cs, [0.8, 0.15, 0.05])[0] == ["t1"]
    cs = cands(sims, ranker=[0.3, 0.95, 0.9, 0.1])
    assert fb.fuse(cs, [0.2, 0.7, 0.1])[0] == ["t1", "t2"]
    cs = cands(sims, ranker=[0.3, 0.95, 0.9, 0.1])
    assert fb.fuse(cs, 2)[0] == ["t1", "t2"]  # an int count passes through
    assert predicted_count(None) == 1 and predicted_count([0.1, 0.2, 0.7]) == 3 and predicted_count(5) == 3


def test_theta_rule_for_three_or_more():
    # five candidates, sims .8 each: d = .2, sum 1.0, s_c = .8
    # s = (.8 + r)/2 = .895 .875 .85 .825 .75
    ranker = [0.99, 0.95, 0.9, 0.85, 0.7]
    fb = FusionBlock()
    assert fb.theta == DEFAULT_THETA == 0.8
    chosen, _ = fb.fuse(cands([0.8] * 5, ranker=ranker), [0.1, 0.1, 0.8])
    assert chosen == ["t0", "t1", "t2", "t3"]  # .825 > .8 joins, .75 does not
    chosen, _ = FusionBlock(theta=0.83).fuse(cands([0.8] * 5, ranker=ranker), [0.1, 0.1, 0.8])
    assert chosen == ["t0", "t1", "t2"]  # the first three always
    chosen, _ = FusionBlock(theta=0.7).fuse(cands([0.8] * 5, ranker=ranker), [0.1, 0.1, 0.8])
    assert len(chosen) == 5
    # fewer candidates than the count
    chosen, _ = fb.fuse(cands([0.8, 0.7], ranker=[0.9, 0.8]), 3)
    assert chosen == ["t0", "t1"]
    assert fb.fuse([], 1) == ([], 0.0)


def test_unfitted_confidence_rises_with_the_margin():
    fb = FusionBlock()
    confs = []
    for second in [0.9, 0.7, 0.5, 0.3, 0.1]:
        cs = cands([0.8, 0.8, 0.8], ranker=[0.95, second, 0.05])
        confs.append(fb.fuse(cs, [0.9, 0.05, 0.05])[1])
    assert all(b > a for a, b in zip(confs, confs[1:])), confs
    # a less certain count lowers it
    low = fb.fuse(cands([0.8, 0.8, 0.8], ranker=[0.95, 0.1, 0.05]), [0.5, 0.3, 0.2])[1]
    assert low < confs[-1]


def _validation_set(n, seed):
    """Mentions whose top candidate is right more often the larger its lead."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        top = rng.uniform(0.4, 1.0)
        second = rng.uniform(0.0, top)
        r = [top, second, rng.uniform(0.0, second)]
        right = rng.random() < 1 / (1 + np.exp(-12 * (top - second - 0.3)))
        gold = ["t0"] if right else ["t1"]
        out.append((cands([0.7, 0.7, 0.7], ranker=r), [0.9, 0.07, 0.03], gold))
    return out


@pytest.mark.parametrize("method", ["platt", "isotonic"])
def test_fitted_confidence_is_calibrated_and_monotone_in_margin(method):
    fb = FusionBlock()
    summary = fb.fit_confidence(_validation_set(600, 0), method=method)
    assert summary["examples"] == 600 and 0.2 < summary["accuracy"] < 0.8
    assert 2 in summary["features_used"]  # the margin carries the signal
    held = _validation_set(600, 1)
    confs, right = [], []
    for cs, cp, gold in held:
        chosen, conf = fb.fuse(cs, cp)
        confs.append(conf)
        right.append(set(chosen) == set(gold))
    confs, right = np.array(confs), np.array(right)
    # calibrated: predicted rate close to the observed rate, overall and in the top half
    assert abs(confs.mean() - right.mean()) < 0.06
    hi = confs >= np.median(confs)
    assert abs(confs[hi].mean() - right[hi].mean()) < 0.08
    assert right[hi].mean() > right[~hi].mean() + 0.2
    # monotone in the margin: fixed top score, shrinking runner-up
    grid = []
    for second in np.linspace(0.85, 0.0, 12):
        grid.append(fb.fuse(cands([0.7, 0.7, 0.7], ranker=[0.9, second, 0.0]), [0.9, 0.07, 0.03])[1])
    assert all(b >= a - 1e-12 for a, b in zip(grid, grid[1:])) and grid[-1] > grid[0] + 0.3


def test_fit_confidence_needs_both_outcomes():
    fb = FusionBlock()
    examples = [(cands([0.7, 0.6], ranker=[0.9, 0.1]), 1, ["t0"]) for _ in range(5)]
    with pytest.raises(ValueError):
        fb.fit_confidence(examples)
    assert fb.confidence_model is None


def test_learned_weights_pick_the_informative_score(tmp_path):
    rng = np.random.default_rng(0)
    examples = []
    for _ in range(200):
        gold = int(rng.integers(0, 5))
        jac = rng.uniform(0.0, 0.5, 5)
        jac[gold] += 0.5  # jaccard is informative here, the ranker is noise
        ranker = rng.uniform(0, 1, 5)
        size = float(np.log1p(rng.integers(0, 3000)))  # the history's size: the same for every candidate
        cs = cands(list(rng.uniform(0.3, 0.6, 5)), ranker=list(ranker),
                   extra=[{"jaccard": float(j), "history_size": size} for j in jac])
        examples.append((cs, [f"t{gold}"]))
    fb = FusionBlock(recall_keys=("tfidf",))
    info = fb.fit_weights(examples[:150])
    w = dict(zip(info["keys"], info["weights"]))
    assert set(w) >= {"jaccard", "ranker", "recall", "tfidf"} and "history_size" not in w
    assert w["jaccard"] > 3 * abs(w["ranker"])
    hits = [fb.fuse(cs, 1)[0] == gold for cs, gold in examples[150:]]
    assert np.mean(hits) > 0.9
    # saved and loaded, the same decisions
    again = FusionBlock.load(fb.save(tmp_path / "fusion.pkl"))
    for cs, _ in examples[150:160]:
        a = fb.fuse([Candidate(c.term_id, c.term, scores=dict(c.scores)) for c in cs], 1)
        b = again.fuse([Candidate(c.term_id, c.term, scores=dict(c.scores)) for c in cs], 1)
        assert a == b


def test_output_rule_follows_the_metric_of_the_data_set():
    """By hand: one 4-term mention whose count model says 1, two 1-term mentions with a 0.45 runner-up.

    Top-1 ("count"): 2 of 3 sets right; pairs tp 3, predicted 3, gold 6 -> F1 6/9.
    Everything above 0.4: 1 of 3 sets right; tp 6, predicted 8, gold 6 -> F1 12/14.
    Exact-set accuracy keeps approach A's count rule, micro-F1 takes a threshold below 0.45.
    """
    import numpy as np

    from termnorm.gbm_ranker import select_rule
    from termnorm.records import Candidate

    def cands(prefix, n):
        return [Candidate(i, f"{prefix}{i}", 0.0, {}, []) for i in range(n)]

    lists = [cands("a", 4), cands("c", 2), cands("d", 2)]
    probs = [np.array([0.9, 0.45, 0.45, 0.45]), np.array([0.9, 0.45]), np.array([0.9, 0.45])]
    one = np.array([1.0, 0.0, 0.0])
    golds = [["a0", "a1", "a2", "a3"], ["c0"], ["d0"]]
    rule, scores = select_rule(lists, probs, [one] * 3, golds, metric="accuracy")
    assert rule == ("count", 0.5) and scores["count@0.5"] == round(2 / 3, 4)
    rule, scores = select_rule(lists, probs, [one] * 3, golds, metric="micro_f1")
    assert rule[0] in ("count+threshold", "threshold") and rule[1] < 0.45
    assert scores["count@0.5"] == round(6 / 9, 4) and scores[f"{rule[0]}@{rule[1]}"] == round(12 / 14, 4)
