"""The model registry with real pipelines on the demo data: register, gate (against the serving model, the shipped
one included, with a paired sign test and a minimum of held-out mentions), promote, rollback, atomicity."""

from __future__ import annotations

import json

import pytest

from termnorm.engine import Engine, demo_mentions, demo_vocabulary
from termnorm.gate import MIN_GATE_MENTIONS, Gate, paired_results
from termnorm.records import LabelledMention
from termnorm.registry import Registry, slug
from termnorm.refit import evaluate_on_gold, limited_threads
from termnorm.stats import band_of, confidence_bands, sign_test

#: the demo's 79 gold mentions are below the gate's minimum: tests of the comparison itself lower it
SMALL = 20


@pytest.fixture(scope="module")
def models():
    """A lexical pipeline fitted on right labels (good) and one fitted on shuffled labels (worse)."""
    vocab = demo_vocabulary("procedures")
    ms = demo_mentions("procedures")
    train, gold = ms[:40], ms[40:]
    wrong = [LabelledMention(m.text, train[(i + 7) % len(train)].terms) for i, m in enumerate(train)]
    with limited_threads():
        good = Engine(vocab, history=train)
        good.fit_lexical(train)
        bad = Engine(demo_vocabulary("procedures"), history=wrong)
        bad.fit_lexical(wrong)
        good_m, good_p = evaluate_on_gold(good, gold)
        bad_m, bad_p = evaluate_on_gold(bad, gold)
    assert bad_m["accuracy"] < good_m["accuracy"]  # the premise of the gate tests
    assert good_m["gold_sha256"] == bad_m["gold_sha256"] and good_m["n"] == len(gold)
    return {"good": (good, good_m, good_p), "bad": (bad, bad_m, bad_p), "gold": gold}


@pytest.fixture
def reg(tmp_path):
    return Registry.for_vocabulary("demo procedures/v", tmp_path / "registry")


def test_first_version_is_promoted_and_suggestions_carry_it(reg, models):
    eng, m, p = models["good"]
    v1 = reg.register(eng, m, pairs={"corrected": 3}, train={"max_pair_id": 7}, gold_predictions=p)
    assert v1 == f"{slug('demo procedures/v')}-v1" and reg.current() is None
    assert reg.get(v1)["status"] == "registered"
    res = reg.promote(v1)
    assert res.promoted and res.current is None and "first version" in res.reason
    assert reg.current_version() == v1
    loaded = reg.load()
    assert loaded.model_version == v1 and loaded.suggest("甲状腺肿物切除").model_version == v1
    assert json.loads((reg.path(v1) / "config.json").read_text())["model_version"] == v1
    assert len(reg.gold_predictions()) == m["n"] and reg.get(v1)["train"]["max_pair_id"] == 7


def test_gate_refuses_a_worse_model_and_records_why(reg, models):
    good, gm, gp = models["good"]
    bad, bm, bp = models["bad"]
    v1 = reg.register(good, gm, gold_predictions=gp)
    reg.promote(v1)
    v2 = reg.register(bad, bm, parent=v1, gold_predictions=bp)
    res = reg.promote(v2, Gate(margin=0.0, min_n=SMALL))
    assert not res.promoted and reg.current_version() == v1
    # the paired numbers: mentions only one of the two got right, and the sign test on them
    st = sign_test([p["correct"] for p in bp], [p["correct"] for p in gp])
    assert (res.only_candidate, res.only_current, res.sign_p) == (st["right_only_here"], st["right_only_there"],
                                                                  st["sign_test_p"])
    assert res.only_current > res.only_candidate and res.sign_p < 0.05
    assert f"{bm['accuracy']:.4f} vs {gm['accuracy']:.4f}" in res.reason and "sign test p" in res.reason
    assert res.candidate == pytest.approx(bm["accuracy"]) and res.current == pytest.approx(gm["accuracy"])
    rec = reg.get(v2)
    assert rec["status"] == "rejected" and rec["gate"]["margin"] == 0.0
    assert rec["gate"]["candidate"] == pytest.approx(bm["accuracy"])
    assert rec["gate"]["current"] == pytest.approx(gm["accuracy"])
    assert [e["action"] for e in reg.history()] == ["register", "promote", "register", "reject"]
    # a margin wider than the loss lets it through, and says so
    gap = gm["accuracy"] - bm["accuracy"]
    res = reg.promote(v2, Gate(margin=gap + 0.01, min_n=SMALL))
    # ... but not past the sign test: allowing a loss never lets a significantly worse model in
    assert not res.promoted and "significantly worse" in res.reason
    res = reg.promote(v2, Gate(margin=gap + 0.01, min_n=SMALL, alpha=0.0))
    assert res.promoted and reg.current_version() == v2 and res.margin == pytest.approx(gap + 0.01)
    assert "allows a loss of up to" in res.reason


def test_the_gate_refuses_below_its_minimum_of_held_out_mentions(reg, models):
    good, gm, gp = models["good"]
    v1 = reg.register(good, gm, gold_predictions=gp)
    reg.promote(v1)
    v2 = reg.register(good, gm, parent=v1, gold_predictions=gp)
    res = reg.promote(v2)  # the same model: "not worse", but on 79 mentions
    assert gm["n"] < MIN_GATE_MENTIONS and not res.promoted and reg.current_version() == v1
    assert f"too few held-out mentions to compare: {gm['n']} < {MIN_GATE_MENTIONS}" in res.reason
    assert reg.promote(v2, Gate(min_n=SMALL)).promoted


def test_a_first_version_is_gated_against_the_shipped_model_and_rollback_to_it_is_one_click(reg, models):
    """The shipped model is version <name>-shipped, number 0, measured but without a pipeline: a first fit worse
    than it is refused; once a version serves, rolling back to the shipped one serves it again (current None)."""
    good, gm, gp = models["good"]
    bad, bm, bp = models["bad"]
    assert reg.serving() is None and reg.confidence_bands() is None  # nothing measured yet
    shipped = reg.record_shipped(gm, gp, model_version="lexical")
    assert shipped == reg.shipped_name() == f"{reg.name}-shipped" and reg.current_version() is None
    [rec] = reg.versions()
    assert rec["number"] == 0 and rec["is_current"] and rec["shipped"] and reg.load(shipped) is None
    assert reg.gold_predictions() == gp and reg.serving()["version"] == shipped
    assert reg.confidence_bands() == confidence_bands(gp)
    # bands recorded by the earlier rule (no "method") are set again from the held-out predictions when read
    idx = reg._read()
    idx["versions"][0]["confidence_bands"] = {"measured": True, "n": len(gp), "below": "unsure",
                                              "bands": [{"word": "likely", "min_confidence": 0.0, "precision": 0.9}]}
    reg._write(idx)
    assert reg.confidence_bands() == confidence_bands(gp) and reg.confidence_bands()["method"] == "isotonic"

    v1 = reg.register(bad, bm, gold_predictions=bp)
    res = reg.promote(v1, Gate(min_n=SMALL))
    assert not res.promoted and res.current_version == shipped and reg.current_version() is None
    assert res.current == pytest.approx(gm["accuracy"]) and res.only_current > res.only_candidate
    assert reg.get(v1)["status"] == "rejected" and reg.history()[-1]["from"] == shipped
    with pytest.raises(ValueError, match="never served"):
        reg.rollback(v1)  # a refused version does not get in through a rollback
    with pytest.raises(ValueError, match="shipped model"):
        reg.promote(shipped)

    v2 = reg.register(good, gm, gold_predictions=gp)
    assert reg.promote(v2, Gate(min_n=SMALL)).promoted and reg.current_version() == v2
    assert [v["version"] for v in reg.versions() if v["is_current"]] == [v2]
    ev = reg.rollback(shipped, by="lead")
    assert ev["from"] == v2 and reg.current_version() is None and reg.load() is None
    assert [v["version"] for v in reg.versions() if v["is_current"]] == [shipped]
    with pytest.raises(ValueError, match="already serving"):
        reg.rollback(shipped)
    reg.rollback(v2)  # and forward again: it served before
    assert reg.current_version() == v2


def test_the_verdict_states_both_figures_and_what_the_margin_asks_for():
    """The old message said "worse than current 0.35 vs 0.35" with margin -0.2: both figures with four digits,
    and the margin in words."""
    cand = {"accuracy": 0.3512, "n": 200, "gold_sha256": "x"}
    cur = {"accuracy": 0.3487, "n": 200, "gold_sha256": "x"}
    res = Gate(margin=-0.2).decide(cand, cur, "demo-v1")
    assert not res.promoted
    assert "0.3512 vs 0.3487 for demo-v1 on 200 held-out mentions (+0.0025)" in res.reason
    assert "asks for a gain of at least 0.2000" in res.reason and "sign test not run" in res.reason
    assert res.summary().startswith("refused: worse than the gate allows")
    assert Gate().decide(cand, cur, "demo-v1").summary().startswith("promoted: better")


def test_paired_results_and_the_sign_test_by_hand():
    # 10 mentions: both right on 4, only the candidate on 1, only the serving model on 5 -> p = 2 * P(X <= 1 | 6)
    right_c = [True] * 4 + [True] + [False] * 5
    right_s = [True] * 4 + [False] + [True] * 5
    cand = [{"mention": f"m{i}", "correct": r} for i, r in enumerate(right_c)]
    serv = [{"mention": f"m{i}", "correct": r} for i, r in reversed(list(enumerate(right_s)))]  # any order
    paired = paired_results(cand, serv)
    assert paired == {"n": 10, "only_candidate": 1, "only_current": 5, "sign_p": round(2 * 7 / 64, 4)}
    assert paired_results(cand, []) is None
    res = Gate(min_n=10).decide({"accuracy": 0.5, "n": 10, "gold_sha256": "x"},
                                {"accuracy": 0.9, "n": 10, "gold_sha256": "x"}, "v1", paired)
    assert (res.only_candidate, res.only_current, res.sign_p) == (1, 5, 0.2188) and not res.promoted


def test_confidence_bands_hold_their_precision_at_every_confidence_in_them():
    # 100 held-out answers: the 40 most confident all right, the next 40 right 9 times in 10, the last 20 half
    preds = ([{"confidence": 1 - i / 100, "correct": True} for i in range(40)]
             + [{"confidence": 0.6 - i / 100, "correct": i % 10 != 0} for i in range(40)]
             + [{"confidence": 0.1 - i / 1000, "correct": i % 2 == 1} for i in range(20)])
    b = confidence_bands(preds)
    assert b["measured"] and b["n"] == 100
    sure, likely = b["bands"]
    assert (sure["word"], sure["min_confidence"], sure["support"], sure["precision"]) == ("sure", 0.61, 40, 1.0)
    # the band below holds the next 40 only, and says how often they (not they and the 40 above) were right
    assert (likely["word"], likely["min_confidence"], likely["support"], likely["precision"]) == \
        ("likely", 0.21, 40, 0.9)
    assert [band_of(c, b)["word"] for c in (0.99, 0.61, 0.6, 0.21, 0.2, 0.0)] == \
        ["sure", "sure", "likely", "likely", "unsure", "unsure"]
    assert band_of(0.5, confidence_bands(preds[:30])) is None  # too few held-out mentions: not measured
    # a user test's model: right 94% of the time at 0.99 and above, half the time at 0.06-0.2; the many confident
    # answers must not lend their precision to the few unconfident ones
    tail = [{"confidence": 0.99 + i / 100_000, "correct": i % 50 != 0 and i % 17 != 0} for i in range(774)]
    tail += [{"confidence": 0.06 + i / 1000, "correct": i % 2 == 0} for i in range(100)]
    t = confidence_bands(tail)
    assert [x["word"] for x in t["bands"]] == ["likely"] and t["bands"][0]["min_confidence"] >= 0.99
    assert band_of(0.1, t)["word"] == "unsure" and band_of(0.995, t)["word"] == "likely"


def test_gold_set_change_needs_a_baseline(reg, models):
    good, gm, _ = models["good"]
    v1 = reg.register(good, gm)
    reg.promote(v1)
    other = dict(gm, gold_sha256="another gold set")
    v2 = reg.register(good, other)
    res = reg.promote(v2, Gate(min_n=SMALL))
    assert not res.promoted and "other held-out mentions" in res.reason
    res = reg.promote(v2, Gate(min_n=SMALL), baseline={"accuracy": gm["accuracy"] - 0.1})
    assert res.promoted and res.current == pytest.approx(gm["accuracy"] - 0.1)


def test_rollback_to_an_earlier_version(reg, models):
    good, gm, _ = models["good"]
    bad, bm, _ = models["bad"]
    v1 = reg.register(good, gm)
    reg.promote(v1)
    v2 = reg.register(bad, bm, parent=v1)
    reg.promote(v2, force=True, by="lead")
    assert reg.current_version() == v2 and reg.get(v2)["gate"]["forced"]
    with pytest.raises(ValueError):
        reg.rollback(v2)  # already current
    ev = reg.rollback(v1, by="lead", reason="v2 is worse")
    assert ev["from"] == v2 and reg.current_version() == v1
    assert reg.load().suggest("阑尾切除").model_version == v1
    with pytest.raises(KeyError):
        reg.rollback("nope")
    assert reg.history()[-1]["action"] == "rollback"
    assert [v["version"] for v in reg.versions() if v["is_current"]] == [v1]


def test_a_failed_save_leaves_no_version_and_a_valid_index(reg, models):
    good, gm, _ = models["good"]
    v1 = reg.register(good, gm)

    def broken(folder):
        raise OSError("disk full")

    with pytest.raises(OSError):
        reg.register(good, gm, extra_writer=broken)
    assert [v["version"] for v in reg.versions()] == [v1]
    assert sorted(p.name for p in reg.versions_dir.iterdir()) == [v1]  # no half-written folder
    assert good.model_version == v1  # the engine keeps its last good name
    idx = json.loads(reg.index_path.read_text())
    assert idx["current"] is None and len(idx["versions"]) == 1
    assert not [p for p in reg.folder.iterdir() if p.name.endswith(".tmp")]
    v2 = reg.register(good, gm)  # numbering continues
    assert v2.endswith("-v2")
    (reg.versions_dir / f"{reg.name}-v3").mkdir()  # published, but the index write was lost (crash)
    assert reg.register(good, gm).endswith("-v4")  # the orphan's name is not reused


def test_root_from_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("TERMNORM_MODELS", str(tmp_path / "elsewhere"))
    assert Registry.for_vocabulary("x").folder == tmp_path / "elsewhere" / "x"
