"""Shared test fixtures.

Database tests run on both backends the app supports: a SQLite file and a real PostgreSQL server that the
tests start themselves (tests/postgres.py: Debian's server binaries, a throw-away cluster, one fresh
database per test). ``TERMNORM_TEST_BACKENDS=sqlite`` narrows a local run; CI runs both, and with
``CI=true`` a missing PostgreSQL server is a failure, not a skip.
"""

from __future__ import annotations

import os
import sys
import uuid

import pytest

BACKENDS = tuple(b for b in os.environ.get("TERMNORM_TEST_BACKENDS", "sqlite,postgresql").split(",") if b)


@pytest.fixture(autouse=True)
def _main_module_kept():
    """Streamlit's AppTest leaves the app script as ``sys.modules["__main__"]``; a process pool that spawns
    (benchmarks/cv.py) runs the main module in each child, so a later test's pool ran the app there and broke."""
    main = sys.modules.get("__main__")
    yield
    if main is not None:
        sys.modules["__main__"] = main


@pytest.fixture(scope="module")
def one_torch_thread():
    """Tiny models on a shared 2-core machine: torch's OpenMP threads spin against other jobs and thread
    hand-offs cost more than they save (measured 10-20x slower with 2 threads)."""
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def demo():
    """The demo procedures vocabulary and the demo mentions whose terms it holds: ``(vocabulary, mentions)``."""
    from termnorm.engine import demo_mentions, demo_vocabulary

    vocab = demo_vocabulary("procedures")
    return vocab, [m for m in demo_mentions("procedures") if all(t in vocab for t in m.terms)]


@pytest.fixture(autouse=True)
def private_data_dir(monkeypatch, tmp_path_factory):
    """Every run-time folder (database, model registry, jobs; termnorm.settings) in a temporary data directory:
    no test reads or writes the developer's data directory or the source tree, whatever the shell exports."""
    for var in ("TERMNORM_DB_URL", "TERMNORM_MODELS", "TERMNORM_JOBS", "TERMNORM_CONFIG"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("TERMNORM_DATA_DIR", str(tmp_path_factory.mktemp("termnorm-data")))


@pytest.fixture(autouse=True)
def instant_clicks(monkeypatch):
    """AppTest clicks a button the instant a page is drawn; the coding page ignores decisions that come sooner
    than a person could read the mention (app_pages/coding_queue.py MIN_GAP_S). The browser tests set it back."""
    monkeypatch.setenv("TERMNORM_MIN_DWELL_S", "0")


@pytest.fixture(scope="session")
def postgres_server():
    """One private PostgreSQL server for the session (tests/postgres.py); its URL, or a skip outside CI when
    no server is installed."""
    import postgres

    if postgres.bin_dir() is None:
        if os.environ.get("CI") == "true":
            pytest.fail("PostgreSQL server binaries missing (Debian: apt-get install postgresql)")
        pytest.skip("no PostgreSQL server installed")
    with postgres.postgres_server() as server_url:
        yield server_url


def fresh_url(backend: str, tmp_path, request) -> str:
    """An empty database of ``backend``: a SQLite file in ``tmp_path`` or a new database on the session's
    PostgreSQL server."""
    if backend == "sqlite":
        return f"sqlite:///{tmp_path / 'termnorm.sqlite3'}"
    import postgres

    server = request.getfixturevalue("postgres_server")
    return postgres.fresh_database(server, f"t_{uuid.uuid4().hex[:12]}")


@pytest.fixture(params=BACKENDS)
def backend(request) -> str:
    return request.param


@pytest.fixture
def url(backend, tmp_path, request):
    """A fresh database of each backend for the database layer (its engine is disposed afterwards)."""
    from db import services

    u = fresh_url(backend, tmp_path, request)
    yield u
    services.dispose(u)


@pytest.fixture
def deployment_url(tmp_path, request):
    """A fresh database of the backend a hospital team deploys on (PostgreSQL; SQLite when the run is narrowed to
    it), for an end-to-end test whose database part the two-backend tests cover: one real fit, not one per backend."""
    from db import services

    u = fresh_url("postgresql" if "postgresql" in BACKENDS else BACKENDS[0], tmp_path, request)
    yield u
    services.dispose(u)


@pytest.fixture
def db_url(url):
    """The fresh database, migrated to the newest schema (Alembic)."""
    from db import services

    services.init_db(url)
    return url


@pytest.fixture
def fast_bcrypt(monkeypatch):
    """bcrypt's minimum cost: tests check behaviour, not the work factor (production: auth.BCRYPT_ROUNDS)."""
    monkeypatch.setenv("TERMNORM_BCRYPT_ROUNDS", "4")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Under ``CI=true`` a skipped test is a failed one: CI cannot pass by skipping its browser, server or
    shared-data tests (every skip in this suite is a missing dependency; an expected failure is not a skip)."""
    outcome = yield
    rep = outcome.get_result()
    if os.environ.get("CI") == "true" and rep.skipped and not hasattr(rep, "wasxfail"):
        reason = rep.longrepr[2] if isinstance(rep.longrepr, tuple) else str(rep.longrepr)
        rep.outcome = "failed"
        rep.longrepr = f"skipped under CI=true, which must have every dependency: {reason}"


_BACKEND_OF: dict[str, str] = {}
_OUTCOMES: dict[str, str] = {}


def pytest_collection_modifyitems(items):
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        _BACKEND_OF[item.nodeid] = params.get("backend", "")


def pytest_runtest_logreport(report):
    """One outcome per test: its call's, or its setup's when that failed or skipped."""
    if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
        _OUTCOMES[report.nodeid] = report.outcome
    elif report.when == "teardown" and report.outcome == "failed":
        _OUTCOMES[report.nodeid] = "failed"


def pytest_terminal_summary(terminalreporter):
    """How many tests ran on each database backend (``make test`` prints it; issue 25 asks for the count)."""
    counts: dict[str, dict[str, int]] = {}
    for nodeid, outcome in _OUTCOMES.items():
        b = _BACKEND_OF.get(nodeid) or "no database parameter"
        counts.setdefault(b, {}).setdefault(outcome, 0)
        counts[b][outcome] += 1
    if not counts:
        return
    terminalreporter.write_sep("-", "tests per database backend")
    for b in sorted(counts, key=lambda k: (k == "no database parameter", k)):
        terminalreporter.write_line(f"{b}: " + ", ".join(f"{n} {o}" for o, n in sorted(counts[b].items())))
