"""Suggestions in background jobs: real worker processes over a real SQLite file, the page that starts them,
the engine lock held per small group, and the blocking benchmark's quick run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
from helpers import wait_for
from sqlalchemy import func, select

from db import serving, services, suggest_jobs, suggestions
from db.models import Suggestion as SuggestionRow
from termnorm.engine import demo_mentions
from termnorm.jobs import FINAL, JobBusy, JobRunner
from termnorm.registry import Registry

REPO = Path(__file__).resolve().parents[1]
VOCAB = "demo-procedures"
GOLD = {m.text: m.terms for m in demo_mentions("procedures")}
VARIANTS = ("", "（复诊）", "术后", " 待查", "（左）", "史", " 拟行", "（右）", "（急诊）", "？")


@pytest.fixture
def env(url, tmp_path, monkeypatch):
    """A seeded demo database (``url``: a fresh one of each backend, conftest), a jobs root and a registry root
    of this test (the workers inherit them)."""
    from app_pages import _ui

    monkeypatch.setenv("TERMNORM_DB_URL", url)
    monkeypatch.setenv("TERMNORM_JOBS", str(tmp_path / "jobs"))
    monkeypatch.setenv("TERMNORM_MODELS", str(tmp_path / "models"))
    services.init_db(url)
    with services.session_scope(url) as s:
        _ui.seed_demo(s)
        vid = services.vocabulary_id(s, VOCAB)
        batch = services.batches(s, vid)[0]["id"]
    runner = JobRunner(tmp_path / "jobs")
    yield {"url": url, "vid": vid, "batch": batch, "runner": runner, "models": tmp_path / "models"}
    for st in runner.jobs(limit=100):  # never leave a worker behind
        if st["state"] not in FINAL:
            runner.cancel(st["id"], grace_s=1)
    services.dispose(url)


def big_batch(env, n: int = 600) -> int:
    """A batch of ``n`` demo mention texts, each with a qualifier, so a job runs long enough to be watched."""
    texts = [t + VARIANTS[i // len(GOLD) % len(VARIANTS)] for i, t in
             zip(range(n), (list(GOLD) * (n // len(GOLD) + 1)))]
    with services.session_scope(env["url"]) as s:
        return services.create_batch(s, "big", env["vid"], texts)


def latest_rows(url, batch_id) -> dict[int, tuple]:
    """mention id -> (model_version, edition, how many suggestion rows) for every mention of the batch."""
    with services.session_scope(url) as s:
        out = {}
        for m in services.mentions(s, batch_id):
            n = s.scalar(select(func.count()).where(SuggestionRow.mention_id == m["id"]))
            row = suggestions.latest_suggestion_row(s, m["id"])
            out[m["id"]] = (row.model_version, row.edition, n) if row else (None, None, 0)
        return out


def serving_version(env) -> str:
    return serving.build_engine(env["url"], env["vid"], serving.serving_version(env["url"], env["vid"])).model_version


def decide(url, mention_id) -> float:
    """A coder's correction through services.record_decision; returns the seconds it took."""
    t0 = time.perf_counter()
    with services.session_scope(url) as s:
        services.record_decision(s, mention_id, "coder1", "correct", next(iter(GOLD.values())), seconds=3.0)
    return time.perf_counter() - t0


# ------------------------------------------------------------------ precompute
def test_precompute_stores_a_suggestion_of_the_serving_model_for_every_open_mention(env):
    url, runner = env["url"], env["runner"]
    with services.session_scope(url) as s:
        first = services.mentions(s, env["batch"])[0]
    decide(url, first["id"])  # decided before: not open, nothing to suggest
    job = suggest_jobs.start_precompute(url, env["batch"], by="lead", runner=runner)
    st = runner.wait(job, 120)
    assert st["state"] == "done", st
    assert st["pid"] != os.getpid()  # a worker process: the app's engine lock is never held by it
    assert st["lock"] == f"suggest:{env['vid']}"
    assert st["tags"] == {"kind": "precompute", "vocabulary_id": env["vid"], "by": "lead", "batch_id": env["batch"]}
    rows = latest_rows(url, env["batch"])
    version = serving_version(env)
    assert rows.pop(first["id"])[2] == 0
    assert set(rows.values()) == {(version, 1, 1)}  # every open mention: one suggestion, the serving model's
    m = st["metrics"]
    assert m["done"] == m["total"] == m["stored"] == len(rows) and m["rate"] > 0 and m["model_version"] == version


def test_a_second_suggestion_job_of_the_vocabulary_is_refused(env):
    big = big_batch(env)
    job = suggest_jobs.start_precompute(env["url"], big, runner=env["runner"], chunk=8)
    with pytest.raises(JobBusy, match="pre-compute suggestions · big"):
        suggest_jobs.start_precompute(env["url"], env["batch"], runner=env["runner"])
    assert suggest_jobs.active(env["runner"], env["vid"])["id"] == job
    env["runner"].cancel(job, grace_s=2)


def test_cancel_then_resume_suggests_only_the_rest(env):
    url, runner = env["url"], env["runner"]
    big = big_batch(env)
    job = suggest_jobs.start_precompute(url, big, runner=runner, chunk=8)
    wait_for(lambda: (runner.status(job)["metrics"] or {}).get("done", 0) >= 40)
    st = runner.cancel(job)
    assert st["state"] == "cancelled"
    before = latest_rows(url, big)
    stored = {mid for mid, (_, _, n) in before.items() if n}
    assert 40 <= len(stored) < 600  # cut mid-way (a chunk being written when cancelled is rolled back)
    again = suggest_jobs.start_precompute(url, big, runner=runner, chunk=64)
    st = runner.wait(again, 120)
    assert st["state"] == "done" and st["metrics"]["total"] == 600 - len(stored)  # skipped what was stored
    after = latest_rows(url, big)
    assert all(n == 1 for _, _, n in after.values())  # nothing suggested twice
    assert {after[mid] for mid in stored} == {before[mid] for mid in stored}


def test_suggestions_of_another_version_are_suggested_again(env):
    url, runner = env["url"], env["runner"]
    engine = serving.build_engine(url, env["vid"])
    with services.session_scope(url) as s:
        ms = services.mentions(s, env["batch"])[:6]
        sugs = engine.suggest_batch([m["text"] for m in ms])
        old = [replace(g, model_version="retired-v0") for g in sugs[:3]]
        services.store_suggestions(s, [m["id"] for m in ms[:3]], old)  # a retired version's
        services.store_suggestions(s, [m["id"] for m in ms[3:]], sugs[3:])  # the serving version's already
    st = runner.wait(suggest_jobs.start_precompute(url, env["batch"], runner=runner), 120)
    assert st["state"] == "done"
    rows = latest_rows(url, env["batch"])
    assert [rows[m["id"]] for m in ms] == [(engine.model_version, 1, 2)] * 3 + [(engine.model_version, 1, 1)] * 3
    assert st["metrics"]["total"] == len(rows) - 3


# ------------------------------------------------------------------ rescore
def register_a_version(env) -> str:
    """The shipped engine registered as version 1, not yet current (building it is the slow part)."""
    reg = Registry.for_vocabulary(VOCAB, env["models"])
    return reg.register(serving.build_engine(env["url"], env["vid"]), {"accuracy": 0.5, "n": 10})


def promote(env, v: str) -> str:
    """A (forced) promotion of version ``v``, made current at once."""
    assert Registry.for_vocabulary(VOCAB, env["models"]).promote(v, force=True, by="lead").promoted
    assert serving.serving_version(env["url"], env["vid"]) == v
    return v


def promote_a_version(env) -> str:
    """A (forced) promotion: the shipped engine registered as version 1 and made current."""
    return promote(env, register_a_version(env))


def test_rescore_after_a_promotion_leaves_no_open_mention_with_a_retired_suggestion(env):
    url, runner = env["url"], env["runner"]
    assert runner.wait(suggest_jobs.start_precompute(url, env["batch"], runner=runner), 120)["state"] == "done"
    with services.session_scope(url) as s:
        untouched = services.create_batch(s, "not suggested", env["vid"], ["胆囊切除", "阑尾切除"])
        ms = services.mentions(s, env["batch"])
    decided = ms[0]
    decide(url, decided["id"])  # decided: keeps the suggestion it was decided on
    shipped = serving_version(env)
    v = promote_a_version(env)
    job = suggest_jobs.start_rescore(url, env["vid"], by="lead", runner=runner)
    second = suggest_jobs.start_rescore(url, env["vid"], runner=runner)
    assert second == job or runner.status(job)["state"] in FINAL  # a running rescore is reused, not doubled
    st = runner.wait(job, 120)
    runner.wait(second, 120)
    assert st["state"] == "done" and st["tags"]["kind"] == "rescore"
    rows = latest_rows(url, env["batch"])
    assert rows.pop(decided["id"])[0] == shipped
    assert {r[0] for r in rows.values()} == {v}  # every open mention: the promoted version's suggestion
    assert set(latest_rows(url, untouched).values()) == {(None, None, 0)}  # nothing to re-score there
    assert st["metrics"]["stored"] == len(rows) and st["metrics"]["model_version"] == v


def test_rescore_takes_over_a_running_precompute(env):
    url, runner = env["url"], env["runner"]
    big = big_batch(env, 2400)  # 600 were all written during the promotion in a local CI run on an idle machine
    v = register_a_version(env)  # before the precompute starts: on a slow machine it could finish meanwhile
    pre = suggest_jobs.start_precompute(url, big, runner=runner, chunk=8)
    wait_for(lambda: (runner.status(pre)["metrics"] or {}).get("done", 0) >= 16)
    promote(env, v)
    assert runner.status(pre)["state"] == "running"  # still writing: the rescore below has one to take over
    job = suggest_jobs.start_rescore(url, env["vid"], runner=runner, chunk=64)
    assert runner.status(pre)["state"] == "cancelled"
    st = runner.wait(job, 180)
    assert st["state"] == "done", st
    assert {r[0] for r in latest_rows(url, big).values()} == {v}  # the whole batch, with the new version


def test_score_suggests_for_given_mentions_whatever_their_status(env):
    url, runner = env["url"], env["runner"]
    with services.session_scope(url) as s:
        ms = services.mentions(s, env["batch"])[:3]
    decide(url, ms[0]["id"])  # decided without a suggestion: a gold mention to score, say
    job = suggest_jobs.start_score(url, env["vid"], [m["id"] for m in ms], title="score on gold", runner=runner)
    st = runner.wait(job, 120)
    assert st["state"] == "done" and st["title"] == "score on gold" and st["tags"]["kind"] == "score"
    rows = latest_rows(url, env["batch"])
    assert [rows[m["id"]][0] for m in ms] == [serving_version(env)] * 3
    with services.session_scope(url) as s:
        assert services.mention(s, ms[0]["id"])["status"] == "decided"


# ------------------------------------------------------------------ the coder is not blocked
def test_a_coder_decides_while_a_job_writes(env):
    url, runner = env["url"], env["runner"]
    big = big_batch(env)
    job = suggest_jobs.start_precompute(url, big, runner=runner, chunk=32)
    wait_for(lambda: (runner.status(job)["metrics"] or {}).get("done", 0) >= 64)
    with services.session_scope(url) as s:
        tail = services.mentions(s, big)[-5:]  # not reached by the job yet
    waits = [decide(url, m["id"]) for m in tail]
    assert runner.status(job)["state"] == "running"  # the decisions were committed while it ran
    assert max(waits) < 5.0, waits  # a coder waits for one chunk's write at most, never for the job
    assert runner.wait(job, 180)["state"] == "done"
    with services.session_scope(url) as s:
        assert {services.mention(s, m["id"])["status"] for m in tail} == {"decided"}  # never reopened
        assert all(services.latest_suggestion(s, m["id"]) is None for m in tail)  # decided first: skipped


# ------------------------------------------------------------------ the engine lock
def test_suggest_and_store_holds_the_engine_lock_for_a_few_mentions_at_a_time(env):
    from app_pages import _ui

    holder = _ui.build_holder(env["url"], env["vid"])
    sizes, held = [], []
    real = holder.engine.suggest_batch

    def spy(texts, *a, **k):
        sizes.append(len(texts))
        held.append(holder.lock._is_owned())
        return real(texts, *a, **k)

    holder.engine.suggest_batch = spy
    with services.session_scope(env["url"]) as s:
        ms = services.mentions(s, env["batch"])[:7]
        sugs = holder.suggest_and_store(s, [m["id"] for m in ms], [m["text"] for m in ms])
    assert sizes == [3, 3, 1] and all(held) and len(sugs) == 7
    assert not holder.lock._is_owned()


# ------------------------------------------------------------------ the page
def test_import_export_page_starts_the_job_and_shows_its_progress(env, monkeypatch):
    from streamlit.testing.v1 import AppTest

    monkeypatch.setenv("TERMNORM_AUTH", "off")
    big = big_batch(env, 1200)  # long enough to be seen running after a rerun
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=60)
    at.query_params["batch"] = str(big)  # opens the big batch in the sidebar
    at.run()
    at.switch_page("app_pages/import_export.py")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    at.button(key="suggest_all").click()
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    job = env["runner"].latest(lock=suggest_jobs.lock(env["vid"]))
    assert job is not None and job["tags"]["batch_id"] == big
    assert at.button(key="suggest_all").disabled  # one suggestion job per vocabulary
    assert any("pre-compute suggestions · big" in str(p.proto.text) for p in at.get("progress"))
    wait_for(lambda: (env["runner"].status(job["id"])["metrics"] or {}).get("done", 0) > 0)
    at.run()  # a reload reads the job's status: progress, rate
    total = env["runner"].status(job["id"])["metrics"]["total"]
    assert 1190 <= total <= 1200  # the coding page drawn first prepared a few with the same model
    labels = {m.label: m.value for m in at.metric}
    assert labels["Done"].endswith(f"/ {total:,}") and labels["Rate"].endswith("/s")
    assert any(b.key == "suggest_job_cancel" for b in at.button)
    assert env["runner"].wait(job["id"], 180)["state"] == "done"
    at.run()
    assert any(f"{total:,} suggestion(s) stored" in s.value for s in at.success)
    assert not at.button(key="suggest_all").disabled


def test_the_page_cancels_the_job(env, monkeypatch):
    from streamlit.testing.v1 import AppTest

    monkeypatch.setenv("TERMNORM_AUTH", "off")
    big = big_batch(env, 2400)  # still running after the page's first runs on a slow machine
    job = suggest_jobs.start_precompute(env["url"], big, runner=env["runner"], chunk=8)
    wait_for(lambda: env["runner"].status(job)["state"] == "running")
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=60)
    at.run()
    at.switch_page("app_pages/import_export.py")
    at.run()
    assert any("suggestion job is running" in c.value for c in at.caption)
    at.button(key="suggest_job_cancel").click()
    at.run()
    assert env["runner"].status(job)["state"] == "cancelled"
    assert any("starting again suggests only the rest" in i.value for i in at.info)


# ------------------------------------------------------------------ the benchmark
def test_blocking_benchmark_quick_run_writes_its_figures(tmp_path):
    out = tmp_path / "blocking.json"
    env = dict(os.environ, TERMNORM_JOBS=str(tmp_path / "jobs"), TERMNORM_MODELS=str(tmp_path / "models"))
    t0 = time.time()
    subprocess.run([sys.executable, str(REPO / "benchmarks" / "blocking.py"), "--quick", "--out", str(out)],
                   check=True, cwd=REPO, env=env, timeout=120)
    assert time.time() - t0 < 90
    r = json.loads(out.read_text(encoding="utf-8"))
    for phase in ("alone", "during_job"):
        assert r[phase]["p50_ms"] > 0 and r[phase]["p95_ms"] >= r[phase]["p50_ms"]
    # the ratio is written rounded to two decimals: it is within half a hundredth of the two p95s' quotient
    assert r["ratio_p95"] == pytest.approx(r["during_job"]["p95_ms"] / r["alone"]["p95_ms"], abs=0.0051)
    assert r["job"]["mentions_per_s"] > 0 and r["job"]["running_throughout"] is True
    assert {"batch_rows", "vocabulary", "machine", "command", "target"} <= set(r)
