"""Auto-coding a lead can defend, on a real SQLite file: the lead role and the serving model version are checked
by db.services.auto_code itself; the audit share goes back to the coders and measures the precision with its
interval; the Auto-coding page (AppTest, signed in with real bcrypt accounts) refuses while the shipped model
serves and offers the threshold and the button once a registered version with held-out predictions serves.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import demo_team, rerun
from scipy.stats import binomtest
from sqlalchemy import func, select, update
from streamlit.testing.v1 import AppTest

from app_pages._markup import md
from db import auth, auto_coding, services, serving
from db.models import AuditLog, Decision, Term
from termnorm.engine import Engine
from termnorm.records import Candidate, Suggestion
from termnorm.registry import Registry

REPO = Path(__file__).resolve().parents[1]
PAGE = str(REPO / "app_pages" / "auto_coding.py")
TIMEOUT = 90
SERVING, RETIRED = "demo-procedures-v2", "demo-procedures-v1"


@pytest.fixture
def team(url, tmp_path, monkeypatch):
    """Sign-in on; root (admin), lead1, coder1; the demo procedures with a 12-mention batch; an empty registry.
    ``url``: a fresh database of each backend (conftest)."""
    vid, bid = demo_team(url, monkeypatch, (("lead1", "lead"), ("coder1", "coder")), models_dir=tmp_path / "models")
    with services.session_scope(url) as s:
        ids = [m["id"] for m in services.mentions(s, bid)]
        names = services.vocabulary_from_db(s, vid).names
    yield {"url": url, "vid": vid, "bid": bid, "ids": ids, "names": names, "root": tmp_path / "models"}
    services.dispose(url)


def store(url: str, ids: list[int], version: str, confidence: float, chosen: list[str]) -> None:
    """A stored suggestion of ``version`` for each mention (what the engine of that version would leave)."""
    with services.session_scope(url) as s:
        sugs = [Suggestion(services.mention(s, i)["text"], [Candidate(-1, t, 0.9) for t in chosen], len(chosen),
                           list(chosen), confidence, model_version=version) for i in ids]
        services.store_suggestions(s, ids, sugs)


def states(url: str, ids: list[int]) -> list[tuple]:
    """(status, latest decision's action) per mention."""
    with services.session_scope(url) as s:
        ms = [services.mention(s, i) for i in ids]
    return [(m["status"], (m["decision"] or {}).get("action")) for m in ms]


def n_rows(url: str, model, *where) -> int:
    with services.session_scope(url) as s:
        return s.scalar(select(func.count()).select_from(model).where(*where))


# ------------------------------------------------------------------ server-side rules
def test_auto_coding_as_a_coder_is_refused_and_writes_nothing(team):
    url, ids = team["url"], team["ids"]
    store(url, ids, SERVING, 0.99, team["names"][:1])
    before = states(url, ids)
    with services.session_scope(url) as s:
        for who in ("coder1", "nobody"):
            with pytest.raises(PermissionError):
                services.auto_code(s, team["bid"], 0.5, who, model_version=SERVING)
            with pytest.raises(PermissionError):
                auto_coding.auto_code_with_audit(s, team["bid"], 0.5, who, model_version=SERVING)
    assert states(url, ids) == before == [("suggested", None)] * len(ids)
    assert n_rows(url, Decision) == 0
    assert n_rows(url, AuditLog, AuditLog.action.in_(("auto_code", auto_coding.AUDIT_ACTION))) == 0


def test_only_the_serving_versions_suggestions_are_auto_coded(team):
    url, ids, names = team["url"], team["ids"], team["names"]
    store(url, ids[0:4], SERVING, 0.99, names[:1])
    store(url, ids[4:6], RETIRED, 0.999, names[:1])  # more confident, but another version's scale
    store(url, ids[6:7], RETIRED, 0.99, names[:1])
    store(url, ids[6:7], SERVING, 0.99, names[:1])  # re-scored since: its latest suggestion serves
    store(url, ids[7:8], SERVING, 0.99, names[:1])
    store(url, ids[7:8], RETIRED, 0.99, names[:1])  # its latest is the retired version's: never used
    store(url, ids[8:9], SERVING, 0.50, names[:1])  # below the threshold
    store(url, ids[9:10], SERVING, 0.99, [])  # no term chosen
    store(url, ids[10:11], SERVING, 0.99, [names[1]])  # a term a newer edition retires, below
    with services.session_scope(url) as s:  # ids[11]: never suggested
        s.execute(update(Term).where(Term.vocabulary_id == team["vid"], Term.name == names[1])
                  .values(retired_edition=2))
        s.commit()
        expected = {"open": 12, "unsuggested": 1, "awaiting_audit": 0, "skipped_version": 3,
                    "below_threshold": 1, "skipped_terms": 2, "auto_coded": 5}
        dry = services.auto_code(s, team["bid"], 0.9, "lead1", model_version=SERVING, dry_run=True)
        assert {k: dry[k] for k in expected} == expected and n_rows(url, Decision) == 0
        out = services.auto_code(s, team["bid"], 0.9, "lead1", model_version=SERVING)
    assert out == dry and out["mention_ids"] == ids[0:4] + ids[6:7]
    after = states(url, ids)
    assert [i for i, st in zip(ids, after) if st == ("auto_coded", "auto")] == ids[0:4] + ids[6:7]
    assert after[4:6] + after[7:11] == [("suggested", None)] * 6 and after[11] == ("new", None)  # untouched
    with services.session_scope(url) as s:
        d = services.mention(s, ids[0])["decision"]
        assert (d["model_version"], d["review_status"], d["terms"]) == (SERVING, "auto", names[:1])
        log = services.audit_frame(s)
    details = log[log.action == "auto_code"].iloc[0]["details"]
    assert details["model_version"] == SERVING and details["skipped_version"] == 3
    with services.session_scope(url) as s:
        with pytest.raises(ValueError):
            services.auto_code(s, team["bid"], 0.9, "lead1", model_version="")


def test_a_mention_on_a_coders_screen_is_not_auto_coded(team):
    """Auto-coding the mention a coder is looking at would make the coder's decision "already decided"."""
    url, ids, names = team["url"], team["ids"], team["names"]
    store(url, ids, SERVING, 0.99, names[:1])
    with services.session_scope(url) as s:
        shown = services.next_mention(s, team["bid"], "coder1")["id"]
        out = services.auto_code(s, team["bid"], 0.9, "lead1", model_version=SERVING)
        assert out["on_screen"] == 1 and shown not in out["mention_ids"] and out["auto_coded"] == len(ids) - 1
        services.record_decision(s, shown, "coder1", "accept", require_claim=True)  # the coder's click counts
        assert services.mention(s, shown)["decision"]["user"] == "coder1"


def test_the_audit_share_goes_back_to_coders_and_measures_precision(team):
    url, ids, names, bid = team["url"], team["ids"], team["names"], team["bid"]
    store(url, ids, SERVING, 0.99, names[:1])
    with services.session_scope(url) as s:
        out = auto_coding.auto_code_with_audit(s, bid, 0.9, "lead1", audit_share=5 / 12, seed=2, model_version=SERVING)
    audit = out["audit"]
    assert (out["auto_coded"], len(audit), out["kept"]) == (12, 5, 7)
    assert [st for i, st in zip(ids, states(url, ids)) if i in audit] == [("suggested", "auto")] * 5
    with services.session_scope(url) as s:
        # a second run leaves the audit sample to the coders
        again = services.auto_code(s, bid, 0.9, "lead1", model_version=SERVING)
        assert (again["auto_coded"], again["awaiting_audit"]) == (0, 5)
        assert auto_coding.audit_results(s, bid)["decided"] == 0
        served = []
        for k in range(5):  # the coder meets exactly the audit sample in the queue
            m = services.next_mention(s, bid, "coder1")
            served.append(m["id"])
            if k < 4:
                services.record_decision(s, m["id"], "coder1", "accept")  # keeps the auto-coded term
            else:
                services.record_decision(s, m["id"], "coder1", "correct", [names[2]])
        assert sorted(served) == sorted(audit) and services.next_mention(s, bid, "coder1") is None
        res = auto_coding.audit_results(s, bid, model_version=SERVING)
        assert auto_coding.audit_results(s, bid, model_version=RETIRED)["audited"] == 0
    ci = binomtest(4, 5).proportion_ci(0.95, method="exact")
    assert {k: res[k] for k in ("audited", "decided", "agreed", "precision")} == {
        "audited": 5, "decided": 5, "agreed": 4, "precision": 0.8}
    assert (res["lower"], res["upper"]) == (pytest.approx(ci.low), pytest.approx(ci.high))
    assert res["lower"] == pytest.approx(0.2836, abs=1e-4)  # 5 audits say little: the page shows it


# ------------------------------------------------------------------ the page
def page_as(user: str, team: dict) -> AppTest:
    at = AppTest.from_file(PAGE, default_timeout=TIMEOUT)
    at.session_state["auth_user"] = user
    at.session_state["vocabulary_id"] = team["vid"]
    at.session_state["batch_id"] = team["bid"]
    return rerun(at)


def promote_measured_version(team: dict) -> tuple[str, float]:
    """Register the real engine as a version whose held-out record puts the threshold at the 6th highest
    confidence of its suggestions for the batch, promote it, and store those suggestions."""
    url, vid = team["url"], team["vid"]
    with services.session_scope(url) as s:
        engine = Engine(services.vocabulary_from_db(s, vid))
        texts = [m["text"] for m in services.mentions(s, team["bid"])]
    t = sorted((x.confidence for x in engine.suggest_batch(texts)), reverse=True)[5]
    # 200 right at t: the lower 95% bound 0.025 ** (1 / 200) = 0.9817 meets 0.98; with the 100 wrong below, none
    preds = [{"confidence": t, "correct": True}] * 200 + [{"confidence": t / 2, "correct": False}] * 100
    reg = Registry.for_vocabulary("demo-procedures", team["root"])
    version = reg.register(engine, {"accuracy": 0.9, "n": 300}, gold_predictions=preds)
    assert reg.promote(version, force=True, by="lead1").promoted
    assert serving.serving_version(url, vid) == version == engine.model_version
    with services.session_scope(url) as s:
        services.store_suggestions(s, team["ids"], engine.suggest_batch(texts))
    return version, t


def test_page_refuses_while_the_shipped_model_serves_and_for_a_coder(team):
    at = page_as("lead1", team)
    assert [w.value for w in at.warning] == [
        "Auto-coding is refused: auto-coding needs the serving model measured on held-out mentions: fit or "
        "retrain it on the Training page (the shipped model serves this vocabulary and has not been measured on "
        "held-out mentions yet: the first retraining measures it)."]
    assert not at.button and not at.metric
    with services.session_scope(team["url"]) as s:
        engine = Engine(services.vocabulary_from_db(s, team["vid"]))
    reg = Registry.for_vocabulary("demo-procedures", team["root"])
    unmeasured = reg.register(engine, {"accuracy": 0.9, "n": 300})  # no held-out predictions stored
    reg.promote(unmeasured, force=True)
    at = page_as("lead1", team)
    assert at.warning and at.warning[0].value.endswith(
        f"Training page ({unmeasured} has no predictions on held-out mentions stored).")
    assert not at.button and not at.metric
    at = page_as("coder1", team)
    assert at.error and "is a coder" in at.error[0].value
    assert not at.button and not at.number_input and not at.metric


def test_the_shipped_model_once_measured_auto_codes_its_own_suggestions(team):
    """A first retraining the gate refused measured the shipped model (Training page: its held-out accuracy and
    confidence words), yet auto-coding called it unmeasured: a lead had to force a worse model to auto-code."""
    url, vid, ids = team["url"], team["vid"], team["ids"]
    with services.session_scope(url) as s:
        shipped = serving.shipped_engine(services.vocabulary_from_db(s, vid), [])
        texts = [m["text"] for m in services.mentions(s, team["bid"])]
        services.store_suggestions(s, ids, shipped.suggest_batch(texts))
        confs = {m["id"]: m["confidence"] for m in services.mentions(s, team["bid"])}
    t = sorted(confs.values(), reverse=True)[5]
    preds = [{"confidence": t, "correct": True}] * 200 + [{"confidence": t / 2, "correct": False}] * 100
    reg = Registry.for_vocabulary("demo-procedures", team["root"])
    reg.record_shipped({"accuracy": 0.67, "n": 300}, preds, model_version=shipped.model_version)
    assert serving.serving_version(url, vid) is None  # nothing promoted: the shipped model serves
    at = page_as("lead1", team)
    assert not at.warning or all("refused" not in w.value for w in at.warning)
    assert any(f"**{md(shipped.model_version)}** (the shipped model, as measured" in m.value for m in at.markdown)
    assert [m.value for m in at.metric][:2] == [f"{t:.4f}", "100.0%"]
    hit = [i for i in ids if confs[i] >= t]
    at.button(key="ac_go").click()
    rerun(at)
    assert any(f"Auto-coded {len(hit)} mention(s) with {shipped.model_version}" in x.value for x in at.success)
    after = dict(zip(ids, states(url, ids)))
    assert all(after[i][1] == "auto" for i in hit) and all(after[i] == ("suggested", None) for i in ids if i not in hit)


def test_page_shows_threshold_interval_and_auto_codes_the_serving_versions_mentions(team):
    url, ids = team["url"], team["ids"]
    version, t = promote_measured_version(team)
    store(url, ids[-1:], "pretrained:lexical-gbm-0000", 0.999, team["names"][:1])  # another version, latest
    with services.session_scope(url) as s:
        confs = {m["id"]: m["confidence"] for m in services.mentions(s, team["bid"])}
    hit = [i for i in ids[:-1] if confs[i] >= t]
    at = page_as("lead1", team)
    assert [m.value for m in at.metric] == [f"{t:.4f}", "100.0%", "98.2%", f"{200 / 300:.1%}"]
    assert any("Even the low end 98.2% meets the target 98.0%" in x.value for x in at.success)
    assert any(f"**{len(hit)}** would be auto-coded" in m.value for m in at.markdown)
    assert any("1 open mention(s) carry a suggestion of another model version" in w.value for w in at.warning)
    go = at.button(key="ac_go")
    assert not go.disabled and go.label == f"Auto-code {len(hit)} mention(s)"
    # the button is checked by the server: a lead demoted since the page was drawn writes nothing
    with services.session_scope(url) as s:
        auth.set_role(s, "root", "lead1", "coder")
    go.click()
    rerun(at)
    assert n_rows(url, Decision) == 0 and at.error and "is a coder" in at.error[0].value
    with services.session_scope(url) as s:
        auth.set_role(s, "root", "lead1", "lead")
    rerun(at)
    at.slider(key="ac_audit").set_value(0.2)
    rerun(at)
    at.button(key="ac_go").click()
    rerun(at)
    assert any(f"Auto-coded {len(hit)} mention(s) with {version}" in x.value for x in at.success)
    after = dict(zip(ids, states(url, ids)))
    assert after[ids[-1]] == ("suggested", None)  # the other version's suggestion is never auto-coded
    assert all(after[i][1] == "auto" for i in hit) and all(after[i] == ("suggested", None) for i in ids[:-1]
                                                            if i not in hit)
    audit = [i for i in hit if after[i] == ("suggested", "auto")]  # sent back to the coders
    assert len(audit) == max(1, round(0.2 * len(hit)))
    # a coder re-decides the audit sample: the page shows the measured precision with its interval
    with services.session_scope(url) as s:
        for i in audit:
            services.record_decision(s, i, "coder1", "accept")
    rerun(at)
    n = len(audit)
    low = 0.025 ** (1 / n)  # n right of n, by hand
    assert any(f"**100.0%** measured precision (95% interval {low:.1%}–100.0%): {n} of {n} re-decided" in m.value
               for m in at.markdown)
