"""The dashboards and adjudication pages in a real browser (headless Chromium over DevTools, as test_browser.py).

A lead signs in through the form (sign-in is on), opens Dashboards and
Adjudicate from the sidebar, and the test checks what the browser drew: the
headline numbers equal those termnorm.dashboard computes from the same
database, every chart is a drawn Plotly chart, the annotators' answers sit
side by side. Screenshots of both pages are taken; with
``TERMNORM_SCREENSHOTS=1`` they are copied to ``benchmarks/results/``
(``dashboards_page.png``, ``adjudicate_page.png``).

The database is a small but complete history built at the function level:
119 demo procedure mentions, an older model version ("demo-v0", its top two
candidates swapped) answered on the first 40 and the current engine on the
next 40 by two coders over six days, auto-coding of the rest and a few
audits, and a 30-mention blind gold task with two annotators, half of whose
disagreements are adjudicated.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import time
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest

import test_browser as tb  # the DevTools helpers (Tab, _free_port, _wait_http) of the coding-page browser test

REPO = Path(__file__).resolve().parents[1]
CHROMIUM = tb.CHROMIUM
WIDTH, HEIGHT = 1440, 3000  # tall: Streamlit scrolls inside its own container, so capture the whole page at once

pytestmark = pytest.mark.skipif(
    not Path(CHROMIUM).exists(),
    reason="headless Chromium not installed (Debian: apt-get install chromium); browser test skipped")


def build_history(url: str) -> dict:
    """The database described in the module docstring; returns what the assertions need."""
    from sqlalchemy import update

    from db import auth, gold, services
    from db.models import Decision, Suggestion as SuggestionRow
    from pages import _ui
    from termnorm.engine import Engine, demo_mentions

    services.init_db(url)
    with services.session_scope(url) as s:
        _ui.seed_demo(s)
        auth.create_admin(s, "root", "root-password")
        for name, role in (("lead1", "lead"), ("li", "annotator"), ("wang", "annotator"), ("zhang", "coder"),
                           ("liu", "coder")):
            auth.create_user(s, "root", name, f"{name}-password", role)
        vid = services.vocabulary_id(s, "demo-procedures")
        bid = next(b["id"] for b in services.batches(s) if b["name"] == "demo procedures")
        ms = services.mentions(s, bid)
        engine = Engine(services.vocabulary_from_db(s, vid))
        gold_of = {m.text: m.terms for m in demo_mentions("procedures")}
        sugs = engine.suggest_batch([m["text"] for m in ms])
        # an older model: the same candidates with the top two swapped and its own (often wrong) choice
        old = [replace(x, candidates=x.candidates[1:2] + x.candidates[:1] + x.candidates[2:],
                       chosen=[x.candidates[1].term] if len(x.candidates) > 1 else x.chosen,
                       model_version="demo-v0") for x in sugs[:40]]
        services.store_suggestions(s, [m["id"] for m in ms[:40]], old)
        services.store_suggestions(s, [m["id"] for m in ms[40:]], sugs[40:])
        start = services.utcnow() - timedelta(days=6)
        # suggested before the coders started (else the dashboard counts them as "already taught")
        s.execute(update(SuggestionRow).values(created_at=start - timedelta(days=1)))
        for i, m in enumerate(ms[:80]):
            chosen = old[i].chosen if i < 40 else sugs[i].chosen
            right = gold_of[m["text"]]
            action = "accept" if sorted(chosen) == sorted(right) else "correct"
            did = services.record_decision(s, m["id"], ("zhang", "liu")[i % 2], action, right,
                                           seconds=8 + (i * 7) % 40)
            # spread the work over six days, 20 minutes apart within a day (the history a real team leaves)
            s.execute(update(Decision).where(Decision.id == did)
                      .values(at=start + timedelta(days=i // 14, minutes=20 * (i % 14))))
        s.commit()
        # without a fitted ranker the engine's confidence is uncalibrated and at most 0.5: 0.3 auto-codes
        # enough of the last 39 demo mentions for the eight audits below
        n_auto = services.auto_code(s, bid, 0.3, "lead1", model_version=engine.model_version)["auto_coded"]
        audited = [m for m in services.mentions(s, bid, status="auto_coded")][:8]
        for m in audited:
            services.record_decision(s, m["id"], "zhang", "correct", gold_of[m["text"]], seconds=15)
        tid = gold.create_gold_task(s, "lead1", "procedures gold", bid, ["li", "wang"], sample=30, seed=11)
        queue = gold.annotation_queue(s, tid, "li")
        names = engine.vocabulary.names
        for i, m in enumerate(queue):
            right = gold_of[m["text"]]
            gold.record_annotation(s, tid, m["mention_id"], "li", right, seconds=20)
            other = right if i % 4 else [next(n for n in names if n not in right)]
            gold.record_annotation(s, tid, m["mention_id"], "wang", other, seconds=25)
        todo = gold.disagreement_queue(s, "lead1", tid, open_only=True)
        for mid in todo["mention_id"].tolist()[: len(todo) // 2]:
            gold.adjudicate(s, "lead1", tid, int(mid), gold_of[todo.set_index("mention_id").loc[mid, "mention"]])
    services.dispose(url)
    assert len(audited) == 8
    return {"vocabulary_id": vid, "batch_id": bid, "task_id": tid, "n_auto": n_auto}


@pytest.fixture
def server(tmp_path, monkeypatch):
    monkeypatch.setenv("TERMNORM_BCRYPT_ROUNDS", "4")
    url = f"sqlite:///{tmp_path / 'dash.sqlite3'}"
    port = tb._free_port()
    env = dict(os.environ, TERMNORM_DB_URL=url, TERMNORM_BCRYPT_ROUNDS="4")
    env.pop("TERMNORM_AUTH", None)  # sign-in on, as deployed
    # the server boots while the history is built (it touches the database only when a browser connects)
    proc = tb.start_streamlit(port, env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        info = build_history(url)
        tb._wait_http(f"http://127.0.0.1:{port}/_stcore/health", 30)
        yield f"http://127.0.0.1:{port}", url, info
    finally:
        tb._stop(proc)


@pytest.fixture
def tab(tmp_path):
    with tb.chromium_tab(tmp_path / "chromium-profile", WIDTH, HEIGHT) as t:
        yield t


def type_into(tab, selector: str, text: str) -> None:
    tab.eval(f"document.querySelector({json.dumps(selector)}).focus()")
    tab.call("Input.insertText", text=text)


def click_text(tab, selector: str, text: str) -> None:
    """Click the first ``selector`` element whose text contains ``text``."""
    ok = tab.eval(f"(() => {{ const e = [...document.querySelectorAll({json.dumps(selector)})]"
                  f".find(e => e.innerText.includes({json.dumps(text)})); if (e) e.click(); return !!e; }})()")
    assert ok, f"no {selector} with {text!r}"


def shoot(tab, tmp_path, name: str) -> bytes:
    png = base64.b64decode(tab.call("Page.captureScreenshot", format="png")["data"])
    (tmp_path / name).write_bytes(png)
    if os.environ.get("TERMNORM_SCREENSHOTS") == "1":
        out = REPO / "benchmarks" / "results" / name
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(tmp_path / name, out)
    return png


def metric_values(tab) -> dict[str, str]:
    return tab.eval("Object.fromEntries([...document.querySelectorAll('[data-testid=\"stMetric\"]')].map(m => "
                    "[m.querySelector('[data-testid=\"stMetricLabel\"]').innerText.trim(), "
                    "m.querySelector('[data-testid=\"stMetricValue\"]').innerText.trim()]))")


def test_dashboards_and_adjudication_in_browser(server, tab, tmp_path):
    from db import dashboard_data, services
    from pages import _ui
    from termnorm import coding_metrics as dashboard

    base, url, info = server
    # -- sign in through the form
    tab.call("Page.navigate", url=base + "/")
    tab.wait_for("document.querySelector('input[aria-label=\"Password\"]')", 60)
    type_into(tab, 'input[aria-label="User name"]', "lead1")
    type_into(tab, 'input[aria-label="Password"]', "lead1-password")
    click_text(tab, "button", "Sign in")
    tab.wait_for("[...document.querySelectorAll('[data-testid=\"stSidebarNavLink\"]')]"
                 ".some(a => a.innerText.includes('Dashboards'))", 60)

    # -- dashboards: the numbers the browser shows are those termnorm.dashboard computes from the database
    click_text(tab, '[data-testid="stSidebarNavLink"]', "Dashboards")
    tab.wait_for("document.querySelectorAll('.js-plotly-plot .main-svg').length >= 8", 90)
    tab.settle(30)
    # widgets drawn lazily show a grey skeleton first: wait for the error filters' labels
    tab.wait_for("document.querySelectorAll('[data-testid=\"stMultiSelect\"] label').length >= 4", 30)
    time.sleep(1.0)  # plotly's entry transitions
    with services.session_scope(url) as s:
        data = dashboard_data.load_dashboard(s, "lead1", info["vocabulary_id"], shown=_ui.SHOWN)
    acc = dashboard.acceptance(data.decisions).summary
    shown = metric_values(tab)
    assert shown["Decisions"] == str(acc["n"]) == "88"
    assert shown["Top-1 accepted"] == f"{acc['top1']:.1%}"
    assert shown["Rejected all"] == f"{acc['rejected_all']:.1%}"
    assert shown["Annotator κ"] not in ("", "—")
    assert tab.eval("document.querySelectorAll('.js-plotly-plot .treemap').length") == 1
    png = shoot(tab, tmp_path, "dashboards_page.png")
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 100_000

    # -- adjudication: the annotators' answers side by side
    from db import gold

    with services.session_scope(url) as s:
        open_mentions = set(gold.disagreement_queue(s, "lead1", info["task_id"], open_only=True)["mention"])
    assert open_mentions
    # a shorter window: this page is one screen, not a long report
    tab.call("Emulation.setDeviceMetricsOverride", width=WIDTH, height=1350, deviceScaleFactor=1, mobile=False)
    click_text(tab, '[data-testid="stSidebarNavLink"]', "Adjudicate")
    tab.wait_for("[...document.querySelectorAll('button')].some(b => b.innerText.includes(\"Use li's answer\"))", 60)
    tab.settle(30)
    assert tab.eval("[...document.querySelectorAll('button')].filter(b => /Use (li|wang)'s answer/"
                    ".test(b.innerText)).length") == 2
    assert tab.eval("document.querySelector('.tn-mention').textContent") in open_mentions
    assert tab.eval("document.querySelectorAll('.tn-chosen').length") >= 2  # each answer's terms as chips
    png = shoot(tab, tmp_path, "adjudicate_page.png")
    assert len(png) > 50_000
