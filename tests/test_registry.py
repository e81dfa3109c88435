"""The model registry with real pipelines on the demo data: register, gate, promote, rollback, atomicity."""

from __future__ import annotations

import json

import pytest

from termnorm.engine import Engine, demo_mentions, demo_vocabulary
from termnorm.records import LabelledMention
from termnorm.registry import Gate, Registry, slug
from termnorm.retrain import evaluate_on_gold, limited_threads


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
    res = reg.promote(v2, Gate(margin=0.0))
    assert not res.promoted and reg.current_version() == v1
    assert res.candidate == pytest.approx(bm["accuracy"]) and res.current == pytest.approx(gm["accuracy"])
    rec = reg.get(v2)
    assert rec["status"] == "rejected" and rec["gate"]["margin"] == 0.0
    assert rec["gate"]["candidate"] == pytest.approx(bm["accuracy"])
    assert rec["gate"]["current"] == pytest.approx(gm["accuracy"])
    assert [e["action"] for e in reg.history()] == ["register", "promote", "register", "reject"]
    # a margin wider than the loss lets it through, and says so
    gap = gm["accuracy"] - bm["accuracy"]
    res = reg.promote(v2, Gate(margin=gap + 0.01))
    assert res.promoted and reg.current_version() == v2 and res.margin == pytest.approx(gap + 0.01)


def test_gold_set_change_needs_a_baseline(reg, models):
    good, gm, _ = models["good"]
    v1 = reg.register(good, gm)
    reg.promote(v1)
    other = dict(gm, gold_sha256="another gold set")
    v2 = reg.register(good, other)
    res = reg.promote(v2)
    assert not res.promoted and "another gold set" in res.reason
    res = reg.promote(v2, baseline={"accuracy": gm["accuracy"] - 0.1})
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
    with pytest.raises(ValueError):
        reg.rollback(v2)  # not earlier than the current v1: promote it instead
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
