"""The dashboards and adjudication pages in a real browser (Playwright in Debian's headless Chromium, tests/browser.py).

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

import os
import re
import subprocess
from dataclasses import replace
from datetime import timedelta

import pytest
from browser import (
    chromium_page,
    cut_short,
    free_port,
    health_url,
    screenshot,
    settle,
    start_streamlit,
    stop,
    wait_http,
    wait_unchanged,
)

WIDTH, HEIGHT = 1440, 3000  # tall: Streamlit scrolls inside its own container, so capture the whole page at once


def build_history(url: str) -> dict:
    """The database described in the module docstring; returns what the assertions need."""
    from sqlalchemy import update

    from db import auth, gold, services
    from db.models import Decision, Suggestion as SuggestionRow
    from app_pages import _ui
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
    port = free_port()
    env = dict(os.environ, TERMNORM_DB_URL=url, TERMNORM_BCRYPT_ROUNDS="4")
    env.pop("TERMNORM_AUTH", None)  # sign-in on, as deployed
    # the server boots while the history is built (it touches the database only when a browser connects)
    proc = start_streamlit(port, env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        info = build_history(url)
        wait_http(health_url(port), 60, proc)
        yield f"http://127.0.0.1:{port}", url, info
    finally:
        stop(proc)


@pytest.fixture
def page():
    with chromium_page(WIDTH, HEIGHT) as pg:
        yield pg


def nav_link(page, text: str):
    """The sidebar's link to the page named ``text``."""
    return page.locator('[data-testid="stSidebarNavLink"]', has_text=text).first


def metric_values(page) -> dict[str, str]:
    return page.evaluate("Object.fromEntries([...document.querySelectorAll('[data-testid=\"stMetric\"]')].map(m => "
                         "[m.querySelector('[data-testid=\"stMetricLabel\"]').innerText.trim(), "
                         "m.querySelector('[data-testid=\"stMetricValue\"]').innerText.trim()]))")


def test_dashboards_and_adjudication_in_browser(server, page, tmp_path):
    from db import dashboard_data, services
    from app_pages import _ui
    from termnorm import coding_metrics as dashboard

    base, url, info = server
    # -- sign in through the form
    page.goto(base + "/")
    page.locator('input[aria-label="Password"]').wait_for()
    page.locator('input[aria-label="User name"]').fill("lead1")
    page.locator('input[aria-label="Password"]').fill("lead1-password")
    page.locator("button", has_text="Sign in").first.click()
    nav_link(page, "Dashboards").wait_for()

    # -- dashboards: the numbers the browser shows are those termnorm.dashboard computes from the database
    nav_link(page, "Dashboards").click()
    page.wait_for_function("document.querySelectorAll('.js-plotly-plot .main-svg').length >= 8", timeout=90_000)
    settle(page)
    # widgets drawn lazily show a grey skeleton first: wait for the error filters' labels
    page.wait_for_function("document.querySelectorAll('[data-testid=\"stMultiSelect\"] label').length >= 4")
    # plotly's entry transitions: until the charts' markup stops changing
    wait_unchanged(page, "[...document.querySelectorAll('.js-plotly-plot')].map(e => e.innerHTML)")
    with services.session_scope(url) as s:
        data = dashboard_data.load_dashboard(s, "lead1", info["vocabulary_id"], shown=_ui.SHOWN)
    acc = dashboard.acceptance(data.decisions).summary
    shown = metric_values(page)
    assert shown["Decisions"] == str(acc["n"]) == "88"
    assert shown["Top-1 accepted"] == f"{acc['top1']:.1%}"
    assert shown["Rejected all"] == f"{acc['rejected_all']:.1%}"
    assert shown["Annotator κ"] not in ("", "—")
    assert page.locator(".js-plotly-plot .treemap").count() == 1
    png = screenshot(page, tmp_path, "dashboards_page.png")
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 100_000
    # no figure, label or note of a card cut short ("8…"), here nor on a laptop's narrower window
    for width in (WIDTH, 1100):
        page.set_viewport_size({"width": width, "height": HEIGHT})
        settle(page)
        assert cut_short(page, '[data-testid="stMetric"], [data-testid="stMain"] label') == [], width
    page.set_viewport_size({"width": WIDTH, "height": HEIGHT})

    # -- adjudication: the annotators' answers side by side
    from db import gold

    with services.session_scope(url) as s:
        open_mentions = set(gold.disagreement_queue(s, "lead1", info["task_id"], open_only=True)["mention"])
    assert open_mentions
    # a shorter window: this page is one screen, not a long report
    page.set_viewport_size({"width": WIDTH, "height": 1350})
    nav_link(page, "Adjudicate").click()
    page.locator("button", has_text="Use li's answer").first.wait_for()
    settle(page)
    assert page.locator("button").filter(has_text=re.compile(r"Use (li|wang)'s answer")).count() == 2
    assert page.locator(".tn-mention").first.text_content() in open_mentions
    assert page.locator(".tn-chosen").count() >= 2  # each answer's terms as chips
    png = screenshot(page, tmp_path, "adjudicate_page.png")
    assert len(png) > 50_000

    # a term no annotator gave, typed into the gold box by its code: the box takes the term (_typing.typed_terms)
    box = page.locator('[data-testid="stMultiSelect"]', has_text="Gold answer")
    assert "胆囊切开取石术" not in box.inner_text()
    box.locator("input").click()
    page.keyboard.type("51.0401")
    page.wait_for_selector("[role='option']")
    page.keyboard.press("Enter")
    settle(page)
    assert "胆囊切开取石术 · 51.0401" in box.inner_text(), box.inner_text()
    assert "51.0401 ·" not in box.inner_text()  # never the typed text as a term
