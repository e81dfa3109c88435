"""``termnorm backup``: a consistent copy of a live database, and the copy restores to a working app database."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

REPO = Path(__file__).resolve().parents[1]


def _seeded(url: str) -> tuple[int, list[int]]:
    from db import services
    from db.engine_holder import seed_demo

    services.init_db(url)
    with services.session_scope(url) as s:
        bid = seed_demo(s)[0]
        services.ensure_user(s, "cora")
        ids = [m["id"] for m in services.mentions(s, bid)]
    return bid, ids


def _decisions(url: str) -> dict[int, tuple]:
    from db import services

    with services.session_scope(url) as s:
        df = services.decisions_frame(s, None, history=True)
    return {int(r.decision_id): (int(r.mention_id), r.action, tuple(r.terms)) for r in df.itertuples()}


def test_sqlite_backup_of_a_live_database_is_consistent_and_restores(tmp_path):
    from db import backup, services

    url = f"sqlite:///{tmp_path / 'live.sqlite3'}"
    _, ids = _seeded(url)
    stop, written = threading.Event(), []

    def coder():  # decisions keep coming while the copy is taken
        for mid in ids:
            if stop.is_set():
                return
            with services.session_scope(url) as s:
                written.append(services.record_decision(s, mid, "cora", "correct", ["甲状腺病损切除术"]))

    t = threading.Thread(target=coder)
    t.start()
    while len(written) < 5:
        t.join(0.01)
    dest = tmp_path / "copy.sqlite3"
    out = backup.backup(dest, url)
    stop.set()
    t.join()
    assert out["backend"] == "sqlite" and dest.stat().st_size == out["bytes"] > 0
    with sqlite3.connect(dest) as c:
        assert c.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    copy_url = f"sqlite:///{dest}"
    services.init_db(copy_url)  # the restored file is a current app database (migrations at head: nothing to do)
    copied, live = _decisions(copy_url), _decisions(url)
    assert len(copied) >= 5 and set(copied) <= set(live)
    assert all(copied[d] == live[d] for d in copied)  # every copied decision exactly as written
    # decisions are committed in id order: the copy is a prefix of the live history, never a torn mix
    assert sorted(copied) == sorted(live)[:len(copied)]
    with pytest.raises(FileExistsError):
        backup.backup(dest, url)  # never overwrites
    with pytest.raises(FileNotFoundError):
        backup.backup(tmp_path / "x.sqlite3", f"sqlite:///{tmp_path / 'none.sqlite3'}")
    services.dispose(url)
    services.dispose(copy_url)


def test_backup_command_line(tmp_path):
    url = f"sqlite:///{tmp_path / 'live.sqlite3'}"
    _seeded(url)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    r = subprocess.run([sys.executable, "-m", "termnorm.cli", "backup", str(tmp_path / "b.sqlite3"), "--db", url],
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "backed up" in r.stdout, r.stderr
    r = subprocess.run([sys.executable, "-m", "termnorm.cli", "backup", str(tmp_path / "b.sqlite3"), "--db", url],
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and "already exists" in r.stderr


def test_postgresql_backup_restores_into_a_fresh_database(request, tmp_path):
    if "postgresql" not in os.environ.get("TERMNORM_TEST_BACKENDS", "sqlite,postgresql"):
        pytest.skip("PostgreSQL narrowed out of this run (TERMNORM_TEST_BACKENDS)")
    import postgres

    from db import backup, services

    server = request.getfixturevalue("postgres_server")
    url = postgres.fresh_database(server, "backup_src")
    _, ids = _seeded(url)
    with services.session_scope(url) as s:
        for mid in ids[:7]:
            services.record_decision(s, mid, "cora", "correct", ["甲状腺病损切除术"])
    dest = tmp_path / "pg.dump"
    out = backup.backup(dest, url)
    assert out["backend"] == "postgresql" and dest.stat().st_size > 0
    target = postgres.fresh_database(server, "backup_dst")
    # the command the backup prints, into a fresh database: no error per table a --clean finds missing
    assert out["restore"].startswith("pg_restore --clean --if-exists --no-owner --dbname ")
    r = subprocess.run([backup.pg_tool("pg_restore"), "--clean", "--if-exists", "--no-owner", "--dbname",
                        backup.libpq_url(make_url(target)), str(dest)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert _decisions(target) == _decisions(url) and len(_decisions(target)) == 7
    services.init_db(target)  # a restored database is an app database at the newest schema
    services.dispose(url)
    services.dispose(target)
