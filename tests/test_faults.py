"""Nothing lost under faults (issue 25): the app's server killed with SIGKILL in the middle of a stream of
decisions made in a real browser, and database connections dropped on a PostgreSQL server.

* **kill -9**: a coder accepts mention after mention in Chromium (Playwright); a decision is acknowledged when
  the page shows the next mention (it was committed before that page was drawn). The server is killed the
  instant the next click is sent, restarted on the same database, and the browser reloaded: every
  acknowledged decision is in the database, none twice, and the coder goes on where they were.
* **dropped connections**: every connection of the app to PostgreSQL is terminated by the server
  (``pg_terminate_backend``, what a database restart or a network cut does); the next decision either goes
  through on a fresh connection or fails with a clear error and nothing written, and a retry records it
  exactly once.
"""

from __future__ import annotations

import os
import signal
import subprocess

import pytest

from browser import chromium_page, free_port, health_url, settle, start_streamlit, stop, wait_http
from test_decisions_browser import button, on_screen


def _decisions(url: str) -> dict[int, list[str]]:
    from db import services

    with services.session_scope(url) as s:
        df = services.decisions_frame(s, history=True)
    out: dict[int, list[str]] = {}
    for r in df.itertuples():
        out.setdefault(int(r.mention_id), []).append(r.action)
    services.dispose(url)
    return out


def _demo_database(path) -> tuple[str, dict]:
    """A SQLite file holding the demo data, and the environment of an app on it without sign-in."""
    from db import services
    from db.engine_holder import seed_demo

    url = f"sqlite:///{path}"
    services.init_db(url)
    with services.session_scope(url) as s:
        seed_demo(s)
    services.dispose(url)
    return url, dict(os.environ, TERMNORM_DB_URL=url, TERMNORM_AUTH="off")


def _app(port: int, env: dict):
    """The app started in a session of its own (killed as a group), once it answers."""
    proc = start_streamlit(port, env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_http(health_url(port), 60, proc)
    except BaseException:
        os.killpg(proc.pid, signal.SIGKILL)
        raise
    return proc


def _open_coding_page(page, port: int) -> None:
    page.goto(f"http://127.0.0.1:{port}/")
    page.wait_for_selector("table.tn-cands")
    settle(page)


def test_kill_9_mid_stream_loses_no_acknowledged_decision(tmp_path):
    url, env = _demo_database(tmp_path / "crash.sqlite3")
    port = free_port()
    proc = _app(port, env)
    acknowledged: list[int] = []
    try:
        with chromium_page(1400, 1600) as page:
            _open_coding_page(page, port)
            for _ in range(5):
                mid = on_screen(page)
                button(page, f"accept_{mid}").click()
                page.wait_for_function(  # acknowledged: the next mention is on screen
                    f"!document.querySelector(\"[class*='st-key-terms_{mid}']\") && "
                    "document.querySelector(\"[class*='st-key-terms_']\")")
                acknowledged.append(mid)
                settle(page)
            in_flight = on_screen(page)
            button(page, f"accept_{in_flight}").click()
            os.killpg(proc.pid, signal.SIGKILL)  # the instant the click is sent: no shutdown of any kind
            proc.wait(30)

            after = _decisions(url)
            assert all(after.get(m) == ["accept"] for m in acknowledged), after  # every acknowledged one, once
            assert after.get(in_flight, []) in ([], ["accept"])  # the click in flight: saved once or not at all

            proc = _app(port, env)
            page.reload()
            page.wait_for_selector("table.tn-cands")
            settle(page)
            resumed = on_screen(page)
            assert resumed not in acknowledged  # the coder goes on where they were, nothing served twice
            if in_flight not in after:
                assert resumed == in_flight  # the unsaved mention comes back first
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            stop(proc)
    assert len(acknowledged) == 5


def test_a_click_as_the_app_restarts_is_said_not_received_and_pressing_again_saves_it(tmp_path):
    """A user test: the app restarted under an open coding page, and the coder's next click was lost without a word
    (the new server session knew no button, so its callback never ran)."""
    url, env = _demo_database(tmp_path / "restart.sqlite3")
    port = free_port()
    proc = _app(port, env)
    try:
        with chromium_page(1400, 1600) as page:
            _open_coding_page(page, port)
            mid = on_screen(page)
            os.killpg(proc.pid, signal.SIGTERM)  # a restart: the page stays open in the coder's browser
            proc.wait(30)
            proc = _app(port, env)
            page.wait_for_timeout(5000)  # the page reconnects on its own
            button(page, f"accept_{mid}").click()
            page.get_by_text("was not received: nothing saved").wait_for(timeout=60_000)
            assert mid not in _decisions(url)  # said not saved, and it was not
            settle(page)
            button(page, f"accept_{mid}").click()
            page.wait_for_function(f"!document.querySelector(\"[class*='st-key-terms_{mid}']\")")
            assert _decisions(url).get(mid) == ["accept"]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            stop(proc)


def test_dropped_postgresql_connections_lose_nothing_and_double_nothing(request):
    if "postgresql" not in os.environ.get("TERMNORM_TEST_BACKENDS", "sqlite,postgresql"):
        pytest.skip("PostgreSQL narrowed out of this run (TERMNORM_TEST_BACKENDS)")
    import postgres
    import psycopg
    from sqlalchemy.exc import DBAPIError

    from db import services
    from db.engine_holder import seed_demo

    server = request.getfixturevalue("postgres_server")
    url = postgres.fresh_database(server, "faults")
    services.init_db(url)
    with services.session_scope(url) as s:
        bid = seed_demo(s)[0]
        services.ensure_user(s, "cora")
        ids = [m["id"] for m in services.mentions(s, bid)][:6]
    admin = server.replace("postgresql+psycopg://", "postgresql://")

    def drop_all() -> int:
        with psycopg.connect(admin, autocommit=True) as c:
            return c.execute("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                             "WHERE datname = 'faults' AND pid <> pg_backend_pid()").fetchone()[0]

    recorded, failures = [], []
    for mid in ids:
        with services.session_scope(url) as s:  # a pooled connection sits idle here
            services.mentions(s, bid, limit=1)
        assert drop_all() >= 1  # the server cut the app's connections
        for attempt in range(2):  # what the page does: a clear error, the coder presses again
            try:
                with services.session_scope(url) as s:
                    recorded.append(services.record_decision(s, mid, "cora", "correct", ["甲状腺病损切除术"]))
                break
            except DBAPIError as e:
                failures.append(str(e.orig)[:80])
                assert attempt == 0, "the retry on a fresh connection must go through"
    got = _decisions(url)
    assert {m: got.get(m) for m in ids} == {m: ["correct"] for m in ids}  # each exactly once
    assert len(recorded) == len(ids)


@pytest.fixture
def stoppable_postgres():
    """The demo data on a private PostgreSQL server a test may stop and start (postgres.stop_server): the URL."""
    if "postgresql" not in os.environ.get("TERMNORM_TEST_BACKENDS", "sqlite,postgresql"):
        pytest.skip("PostgreSQL narrowed out of this run (TERMNORM_TEST_BACKENDS)")
    import postgres

    from db import services
    from db.engine_holder import seed_demo

    with postgres.postgres_server() as url:
        services.init_db(url)
        with services.session_scope(url) as s:
            seed_demo(s)
            services.ensure_user(s, "etl", role="coder")
        services.dispose(url)
        yield url
        services.dispose(url)


def test_the_app_says_in_words_that_the_database_is_down_and_goes_on_when_it_is_back(stoppable_postgres,
                                                                                   monkeypatch):
    """A user test: with PostgreSQL stopped, every page showed sqlalchemy's traceback (the server's address and
    the installation's paths) instead of saying what is wrong. A private server here: it is stopped and started."""
    import postgres
    from streamlit.testing.v1 import AppTest

    from db import services
    from helpers import REPO

    url = stoppable_postgres
    monkeypatch.setenv("TERMNORM_DB_URL", url)
    monkeypatch.setenv("TERMNORM_AUTH", "off")
    monkeypatch.setenv("TERMNORM_MIN_DWELL_S", "0")
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=120)
    at.session_state["username"] = "cora"
    at.run()
    assert not at.exception
    mid = next(int(w.key.split("_")[1]) for w in at.multiselect if w.key and w.key.startswith("terms_"))

    postgres.stop_server(url)
    at.button(key=f"accept_{mid}").click()  # a decision while the database is down
    at.run()
    fresh = AppTest.from_file(str(REPO / "app.py"), default_timeout=120)  # a page opened now
    fresh.session_state["username"] = "cora"
    fresh.run()
    port = url.rsplit(":", 1)[1].split("/")[0]
    for page in (at, fresh):
        assert not page.exception, [e.value for e in page.exception]
        said = " ".join(e.value for e in page.error)
        assert "The database is not answering right now" in said and port not in said and "Traceback" not in said

    postgres.start_server(url)
    at.button(key="_db_retry").click()
    at.run()
    assert not at.exception and not at.error
    with services.session_scope(url) as s:
        assert services.mention(s, mid)["decision"] is None  # said not saved, and it was not
    at.button(key=f"accept_{mid}").click()
    at.run()
    with services.session_scope(url) as s:
        assert services.mention(s, mid)["decision"]["action"] == "accept"
    services.dispose(url)


def test_the_api_says_503_while_the_database_is_down_and_its_health_says_so(stoppable_postgres, tmp_path):
    """A user test: /health said ok with PostgreSQL stopped (a load balancer kept sending calls) and every other
    endpoint answered a bare 'Internal Server Error'."""
    import sys
    import time
    import urllib.error
    import urllib.request

    import postgres
    from test_api import _call

    from db import services

    from helpers import REPO

    url = stoppable_postgres
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(TERMNORM_DB_URL=url, PYTHONPATH=str(REPO))
    token = subprocess.run([sys.executable, "-m", "termnorm.cli", "api-token", "etl"], cwd=REPO, env=env,
                           capture_output=True, text=True, timeout=300, check=True).stdout.strip()
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "termnorm.cli", "serve", "--port", str(port)], cwd=REPO,
                            env=env, stdout=open(tmp_path / "api.log", "wb"), stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_http(base + "/health", 120, proc)
        assert _call(base, "/vocabularies", token)[0] == 200
        postgres.stop_server(url)
        assert _call(base, "/health") == (503, {"status": "database not answering"})
        status, out = _call(base, "/vocabularies", token)
        db_port = url.rsplit(":", 1)[1].split("/")[0]
        assert status == 503 and "not answering" in out["detail"] and db_port not in out["detail"]
        postgres.start_server(url)
        assert _call(base, "/health") == (200, {"status": "ok"})
        assert _call(base, "/vocabularies", token)[0] == 200
    finally:
        stop(proc)
    assert "database not answering" in (tmp_path / "api.log").read_text(errors="replace")  # the details, for IT

    # a server started while the database is down (a reboot, services in any order) starts and says 503 until the
    # database answers: it exited with a traceback
    postgres.stop_server(url)
    services.dispose(url)
    proc = subprocess.Popen([sys.executable, "-m", "termnorm.cli", "serve", "--port", str(port)], cwd=REPO,
                            env=env, stdout=open(tmp_path / "api2.log", "wb"), stderr=subprocess.STDOUT)
    try:
        end = time.time() + 120
        while True:
            assert proc.poll() is None, (tmp_path / "api2.log").read_text(errors="replace")[-2000:]
            try:
                urllib.request.urlopen(base + "/health", timeout=5)
            except urllib.error.HTTPError as e:
                assert (e.code, e.headers.get("Retry-After")) == (503, "30")
                break
            except OSError:
                assert time.time() < end, "the API did not answer while the database was down"
                time.sleep(0.3)
        assert _call(base, "/vocabularies", token)[0] == 503
        postgres.start_server(url)
        assert _call(base, "/health") == (200, {"status": "ok"})
        assert _call(base, "/vocabularies", token)[0] == 200
    finally:
        stop(proc)
    assert "Traceback" not in (tmp_path / "api2.log").read_text(errors="replace")
