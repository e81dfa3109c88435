"""Active learning: uncertainty ordering, the auto-accept threshold, the audit sample on a real SQLite DB."""

from __future__ import annotations

import numpy as np
import pytest

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


# ------------------------------------------------------------------ threshold
CONF = [0.99, 0.95, 0.90, 0.90, 0.80, 0.70, 0.60, 0.50]
OK = [1, 1, 1, 1, 0, 1, 0, 0]
# by hand, cumulative from the top: >=0.99 1/1, >=0.95 2/2, >=0.90 4/4, >=0.80 4/5, >=0.70 5/6,
# >=0.60 5/7, >=0.50 5/8


def test_threshold_lowest_reaching_target_not_monotone():
    ch = A.choose_threshold(CONF, OK, target=0.8, min_support=1)
    assert ch.threshold == 0.70 and ch.precision == pytest.approx(5 / 6)
    assert ch.support == 6 and ch.coverage == pytest.approx(6 / 8)


def test_threshold_ties_and_support():
    ch = A.choose_threshold(CONF, OK, target=0.98, min_support=1)
    assert ch.threshold == 0.90 and ch.support == 4 and ch.coverage == 0.5  # both 0.90 included
    assert A.choose_threshold(CONF, OK, target=0.98, min_support=5).threshold is None  # 4 < 5
    none = A.choose_threshold(CONF, OK, target=0.8, min_support=7)  # >=0.6: 5/7 < 0.8
    assert none.threshold is None and "not advised" in none.summary()
    assert A.choose_threshold([], [], 0.9).threshold is None
    with pytest.raises(ValueError):
        A.choose_threshold([0.5], [True, False])


def test_threshold_matches_brute_force_on_random_data():
    rng = np.random.default_rng(3)
    conf = np.round(rng.random(400), 2)
    ok = rng.random(400) < conf  # calibrated-ish
    ch = A.choose_threshold(conf, ok, target=0.9, min_support=20)
    best = None
    for t in sorted(set(conf)):
        sel = conf >= t
        if sel.sum() >= 20 and ok[sel].mean() >= 0.9:
            best = t
            break
    assert ch.threshold == best
    assert A.coverage_at(conf, ch.threshold) == pytest.approx(ch.coverage)


def test_audit_sample():
    ids = list(range(100, 150))
    pick = A.audit_sample(ids, 0.1, seed=1)
    assert len(pick) == 5 and set(pick) <= set(ids) and pick == sorted(pick)
    assert pick == A.audit_sample(ids, 0.1, seed=1)
    assert A.audit_sample([7], 0.1) == [7] and A.audit_sample([], 0.5) == [] and A.audit_sample(ids, 0) == []


# ------------------------------------------------------------------ database: auto-code + audit
def test_auto_code_with_audit_routes_a_share_back_to_coders(url):
    vocab = demo_vocabulary("procedures")
    names = vocab.names[:3]
    S.init_db(url)
    with S.session_scope(url) as s:
        vid = S.load_vocabulary(s, vocab, "demo-procedures")
        bid = S.create_batch(s, "b", vid, [f"mention {i}" for i in range(20)])
        ids = [m["id"] for m in S.mentions(s, bid)]
        sugs = [Suggestion(f"mention {i}", [Candidate(vocab.index(n), n, 0.9 - 0.1 * j) for j, n in enumerate(names)],
                           1, [names[0]], 0.99 if i < 10 else 0.5, model_version="demo-v1") for i in range(20)]
        S.store_suggestions(s, ids, sugs)
        out = A.auto_code_with_audit(s, bid, 0.9, "lead", audit_share=0.2, seed=0)
        assert out["auto_coded"] == 10 and len(out["audit"]) == 2 and out["kept"] == 8
        assert set(out["audit"]) <= set(ids[:10])
        status = {m["id"]: m["status"] for m in S.mentions(s, bid)}
        assert [status[i] for i in out["audit"]] == ["suggested", "suggested"]
        assert sum(v == "auto_coded" for v in status.values()) == 8
        assert S.batch_progress(s, bid) == (8, 20)  # audited mentions are not done until a coder decides
        # a coder meets them in the queue: in file order the first audited mention comes first
        assert S.next_mention(s, bid, "coder")["id"] == min(out["audit"])
        S.record_decision(s, out["audit"][0], "coder", "accept")  # agrees with the auto-code
        S.record_decision(s, out["audit"][1], "coder", "correct", [names[1]])  # disagrees
        assert A.audit_results(s, bid) == {"audited": 2, "decided": 2, "agreed": 1, "precision": 0.5}
