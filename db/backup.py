"""``termnorm backup DEST``: a consistent copy of the app's database while coders keep working.

* **SQLite**: the online backup API (``sqlite3.Connection.backup``, SQLite's ``sqlite3_backup_*``): pages are
  copied under SQLite's own locking, so the copy is one consistent state of the database even while decisions
  are being written (a plain file copy of a WAL database can miss or tear the last transactions). The copy is
  checked (``PRAGMA integrity_check``) before the command says it is done. Restore: stop the app, put the copy
  in place of the database file (``termnorm settings`` shows where), start the app.
* **PostgreSQL**: ``pg_dump --format=custom`` (a consistent snapshot; PostgreSQL's own tool, from the
  server's client package); restore with ``pg_restore --clean --if-exists --no-owner --dbname ...`` into the
  app's database (``--if-exists``: into an empty database too, without an error per table).
"""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
from pathlib import Path

from sqlalchemy.engine import make_url

from db import store


def backup(dest, url: str | None = None, progress=None) -> dict:
    """Copy the database at ``url`` (default: the app's) to ``dest``; returns what was written."""
    url = store.database_url(url)
    u = make_url(url)
    dest = Path(dest)
    if dest.exists():
        raise FileExistsError(f"{dest} already exists: a backup never overwrites a file")
    dest.parent.mkdir(parents=True, exist_ok=True)
    if u.get_backend_name() == "sqlite":
        return _sqlite(u.database, dest, progress)
    if u.get_backend_name() == "postgresql":
        out = _postgres(u, dest)
        if dest.suffix.lower() in (".sqlite3", ".sqlite", ".db"):
            out["note"] = f"{dest.name} is a pg_dump archive, not a SQLite file: name PostgreSQL backups .dump"
        return out
    raise ValueError(f"no backup for {u.get_backend_name()} databases (SQLite and PostgreSQL are supported)")


def _sqlite(path: str | None, dest: Path, progress) -> dict:
    if not path or path == ":memory:" or not Path(path).is_file():
        raise FileNotFoundError(f"{path}: no SQLite database file to back up")
    src = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)
    out = sqlite3.connect(str(dest))
    try:
        # 1,024 pages per step: other connections may write between steps (a write restarts the copy of what
        # changed, so the result is still one consistent state)
        src.backup(out, pages=1024, progress=(lambda status, remaining, total: progress(total - remaining, total))
                   if progress else None)
        check = out.execute("PRAGMA integrity_check").fetchone()[0]
    finally:
        out.close()
        src.close()
    if check != "ok":
        dest.unlink(missing_ok=True)
        raise RuntimeError(f"the copy of {path} failed its integrity check ({check}); nothing kept")
    return {"backend": "sqlite", "source": path, "file": str(dest), "bytes": dest.stat().st_size,
            "restore": f"stop the app, then copy {dest} over {path}"}


def pg_tool(name: str) -> str:
    """``pg_dump`` / ``pg_restore`` on the PATH, else Debian's server package folder."""
    found = shutil.which(name)
    if found:
        return found
    for folder in sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True):
        if (folder / name).is_file():
            return str(folder / name)
    raise FileNotFoundError(f"{name} not found: install PostgreSQL's client tools (Debian: postgresql-client)")


def libpq_url(u) -> str:
    """The SQLAlchemy URL as libpq takes it (no ``+psycopg`` driver part)."""
    return u.set(drivername="postgresql").render_as_string(hide_password=False)


def _postgres(u, dest: Path) -> dict:
    r = subprocess.run([pg_tool("pg_dump"), "--format=custom", "--file", str(dest), "--dbname", libpq_url(u)],
                       capture_output=True, text=True, timeout=3600)
    if r.returncode != 0:
        dest.unlink(missing_ok=True)
        raise RuntimeError(f"pg_dump failed: {r.stderr.strip()[-500:]}")
    shown = u.set(drivername="postgresql").render_as_string(hide_password=True)
    return {"backend": "postgresql", "source": u.render_as_string(hide_password=True), "file": str(dest),
            "bytes": dest.stat().st_size,
            "restore": f"pg_restore --clean --if-exists --no-owner --dbname {shown} {dest}"}
