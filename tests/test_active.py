"""Active learning: uncertainty ordering, the auto-accept threshold, the audit sample on a real SQLite DB."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import binom, binomtest

from db import auto_coding
from db import services as S
from termnorm import active as A
from termnorm.engine import demo_vocabulary
from termnorm.records import Candidate, Suggestion


def sug(scores, chosen=1, confidence=0.5, count_probs=None) -> Suggestion:
    cands = [Candidate(i, f"t{i}", s) for i, s in enumerate(scores)]
    out = Suggestion("m", cands, chosen, [c.term for c in cands[:chosen]], confidence)
    if count_probs is not None:
        out.count_probs = count_probs  # an engine exposing approach A's count probabilities
    return out


# ------------------------------------------------------------------ uncertainty
def test_uncertainty_margin_and_confidence():
    sure = sug([0.95, 0.10], confidence=0.99)
    tie = sug([0.60, 0.60], confidence=0.99)
    unsure = sug([0.95, 0.10], confidence=0.30)
    # 1 - margin * (1 - (1 - confidence)) = 1 - 0.85 * 0.99
    assert A.uncertainty(sure) == pytest.approx(1 - 0.85 * 0.99)
    assert A.uncertainty(tie) == pytest.approx(1.0)
    assert A.uncertainty(unsure) == pytest.approx(1 - 0.85 * 0.30)
    assert A.uncertainty(sug([], chosen=0, confidence=0.9)) == 1.0
    assert A.order_by_uncertainty([sure, tie, unsure]) == [1, 2, 0]


def test_uncertainty_uses_the_boundary_of_a_multi_term_answer_and_count_probs():
    two = sug([0.9, 0.8, 0.2], chosen=2, confidence=0.9)  # margin between 2nd (chosen) and 3rd
    assert A.uncertainty_parts(two)["margin"] == pytest.approx(0.6)
    with_count = sug([0.9, 0.8, 0.2], chosen=2, confidence=0.9, count_probs=[0.3, 0.6, 0.1])
    parts = A.uncertainty_parts(with_count)
    assert parts["second"] == "count" and parts["count"] == pytest.approx(0.4)
    assert A.uncertainty(with_count) == pytest.approx(1 - 0.6 * 0.6)


def test_order_keeps_input_order_on_ties():
    same = [sug([0.7, 0.2], confidence=0.8) for _ in range(4)]
    assert A.order_by_uncertainty(same) == [0, 1, 2, 3]


# ------------------------------------------------------------------ threshold: the lower 95% bound
def cp_lower_all_right(n: int) -> float:
    """Clopper-Pearson lower end for n right of n, by hand: P(X = n | p) = p**n = 0.025."""
    return 0.025 ** (1 / n)


# 40 mentions at 0.99, all right; 40 at 0.80, 36 right. Point precision: >=0.99 40/40, >=0.80 76/80 = 0.95.
HIGH = [0.99] * 40 + [0.80] * 40
HIGH_OK = [1] * 40 + [1] * 36 + [0] * 4


def test_threshold_is_the_lowest_whose_lower_bound_meets_the_target():
    ch = A.choose_threshold(HIGH, HIGH_OK, target=0.9, min_support=1)
    # >=0.80 has point precision 0.95 >= 0.9, but its lower bound does not reach 0.9: the bound rules
    assert ch.threshold == 0.99 and (ch.support, ch.correct, ch.n) == (40, 40, 80)
    assert ch.precision == 1.0 and ch.upper == 1.0 and ch.coverage == 0.5
    assert ch.lower == pytest.approx(cp_lower_all_right(40)) and cp_lower_all_right(40) > 0.9  # 0.9119
    lo80, hi80 = A.precision_interval(76, 80)
    # by definition of the exact interval: P(X >= 76 | p = lower) = P(X <= 76 | p = upper) = 0.025
    assert binom.sf(75, 80, lo80) == pytest.approx(0.025) and binom.cdf(76, 80, hi80) == pytest.approx(0.025)
    assert 76 / 80 >= 0.9 > lo80  # 0.8769
    assert "interval" in ch.summary() and "91.2%" in ch.summary() and "0.9900" in ch.summary()


def test_point_precision_would_choose_lower_than_the_bound():
    # 20 right of 20 (point 100%) has a lower end 0.832 < 0.9: no threshold at all
    ch = A.choose_threshold([0.95] * 20, [1] * 20, target=0.9, min_support=1)
    assert ch.threshold is None and cp_lower_all_right(20) == pytest.approx(0.8316, abs=1e-4)
    assert "83.2%" in ch.reason and "not advised" in ch.summary()


def test_threshold_ties_bound_not_monotone():
    # >=0.99: 20/20 (lower .832); >=0.97 adds 20 right at one confidence, both included: 40/40 (.912);
    # >=0.90 adds 10 with 5 wrong: 45/50 (lower .782); >=0.5 adds 50 right: 95/100 (lower .887)
    conf = [0.99] * 20 + [0.97] * 20 + [0.90] * 10 + [0.5] * 50
    ok = [1] * 40 + [1] * 5 + [0] * 5 + [1] * 50
    ch = A.choose_threshold(conf, ok, target=0.88, min_support=1)
    assert ch.threshold == 0.5 and ch.lower == pytest.approx(A.precision_interval(95, 100)[0])
    assert A.precision_interval(45, 50)[0] < 0.88 < A.precision_interval(95, 100)[0]
    ch = A.choose_threshold(conf, ok, target=0.9, min_support=1)
    assert ch.threshold == 0.97 and ch.support == 40  # the 20 ties at 0.97 all count
    with pytest.raises(ValueError):
        A.choose_threshold([0.5], [True, False])


def test_refused_below_min_support_with_the_reason():
    conf, ok = [0.95] * 30, [1] * 30  # lower end 0.884
    assert A.choose_threshold(conf, ok, target=0.8, min_support=20).threshold == 0.95
    few = A.choose_threshold(conf, ok, target=0.8, min_support=A.MIN_SUPPORT)
    assert few.threshold is None and few.reason == "only 30 held-out mentions, fewer than the minimum support 50"
    assert A.choose_threshold([], [], 0.9).reason.startswith("only 0 held-out mentions")
    # enough mentions, but the support at the only threshold with a good bound is too small
    conf2, ok2 = [0.99] * 30 + [0.5] * 30, [1] * 30 + [0] * 30
    ch = A.choose_threshold(conf2, ok2, target=0.8, min_support=40)
    assert ch.threshold is None and "at least 40 of the 60" in ch.reason and "30 of 60 right" in ch.reason


def test_threshold_matches_brute_force_on_random_data():
    rng = np.random.default_rng(3)
    conf = np.round(rng.random(600), 2)
    ok = rng.random(600) < np.sqrt(conf)  # right more often when confident
    ch = A.choose_threshold(conf, ok, target=0.9, min_support=20)
    best = None
    for t in sorted(set(conf)):
        sel = conf >= t
        ci = binomtest(int(ok[sel].sum()), int(sel.sum())).proportion_ci(0.95, method="exact")
        if sel.sum() >= 20 and ci.low >= 0.9:
            best, low, high = t, ci.low, ci.high
            break
    assert best is not None and ch.threshold == best
    assert (ch.lower, ch.upper) == (pytest.approx(low), pytest.approx(high))
    assert A.coverage_at(conf, ch.threshold) == pytest.approx(ch.coverage)
    assert A.threshold_from_predictions([{"confidence": c, "correct": y} for c, y in zip(conf, ok)], 0.9, 20) == ch


def test_audit_sample():
    ids = list(range(100, 150))
    pick = A.audit_sample(ids, 0.1, seed=1)
    assert len(pick) == 5 and set(pick) <= set(ids) and pick == sorted(pick)
    assert pick == A.audit_sample(ids, 0.1, seed=1)
    assert A.audit_sample([7], 0.1) == [7] and A.audit_sample([], 0.5) == [] and A.audit_sample(ids, 0) == []


# ------------------------------------------------------------------ database: auto-code + audit
def test_auto_code_with_audit_routes_a_share_back_to_coders(url, fast_bcrypt):
    from db import auth

    vocab = demo_vocabulary("procedures")
    names = vocab.names[:3]
    S.init_db(url)
    with S.session_scope(url) as s:
        auth.create_admin(s, "root", "root-password")
        auth.create_user(s, "root", "lead", "lead-password", "lead")
        vid = S.load_vocabulary(s, vocab, "demo-procedures")
        bid = S.create_batch(s, "b", vid, [f"mention {i}" for i in range(20)])
        ids = [m["id"] for m in S.mentions(s, bid)]
        sugs = [Suggestion(f"mention {i}", [Candidate(vocab.index(n), n, 0.9 - 0.1 * j) for j, n in enumerate(names)],
                           1, [names[0]], 0.99 if i < 10 else 0.5, model_version="demo-v1") for i in range(20)]
        S.store_suggestions(s, ids, sugs)
        out = auto_coding.auto_code_with_audit(s, bid, 0.9, "lead", audit_share=0.2, seed=0, model_version="demo-v1")
        assert out["auto_coded"] == 10 and len(out["audit"]) == 2 and out["kept"] == 8
        assert (out["below_threshold"], out["skipped_version"]) == (10, 0)
        assert set(out["audit"]) <= set(ids[:10])
        status = {m["id"]: m["status"] for m in S.mentions(s, bid)}
        assert [status[i] for i in out["audit"]] == ["suggested", "suggested"]
        assert sum(v == "auto_coded" for v in status.values()) == 8
        assert S.batch_progress(s, bid) == (8, 20)  # audited mentions are not done until a coder decides
        # a coder meets them in the queue: in file order the first audited mention comes first
        assert S.next_mention(s, bid, "coder")["id"] == min(out["audit"])
        S.record_decision(s, out["audit"][0], "coder", "accept")  # agrees with the auto-code
        S.record_decision(s, out["audit"][1], "coder", "correct", [names[1]])  # disagrees
        res = auto_coding.audit_results(s, bid)
        assert {k: res[k] for k in ("audited", "decided", "agreed", "precision")} == {
            "audited": 2, "decided": 2, "agreed": 1, "precision": 0.5}
        # 1 of 2, by hand: P(X >= 1 | p) = 1 - (1 - p)**2 = 0.025 at the lower end, symmetric at the upper
        assert res["lower"] == pytest.approx(1 - 0.975 ** 0.5) and res["upper"] == pytest.approx(0.975 ** 0.5)
        assert auto_coding.audit_results(s, bid, model_version="demo-v0")["audited"] == 0  # another version's audit
