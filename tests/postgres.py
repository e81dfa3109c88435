"""A throw-away PostgreSQL server for the tests: Debian's ``postgresql`` binaries, a cluster in a temporary folder.

The tests start it themselves (never assume a running service): ``initdb`` a
fresh cluster, ``pg_ctl start`` it on a free port with a Unix socket in the
same folder, and stop and delete it at the end. PostgreSQL refuses to run as
root, so as root the server runs as the ``postgres`` system user (Debian's
package creates it) through ``runuser``. Written by hand because
pytest-postgresql and testing.postgresql both start the server as the current
user, which fails as root (CI runs as root).
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path


def bin_dir() -> Path | None:
    """The newest installed PostgreSQL server's bin folder (``/usr/lib/postgresql/<n>/bin``), or None."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[4]))
    return Path(found[-1]).parent if found else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _as_server_user(cmd: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *cmd] if os.geteuid() == 0 else cmd


@contextmanager
def postgres_server(timeout: float = 60.0):
    """Yield the SQLAlchemy URL of a fresh, empty database on a private PostgreSQL server."""
    bins = bin_dir()
    if bins is None:
        raise RuntimeError("no PostgreSQL server installed (Debian: apt-get install postgresql)")
    folder = Path(tempfile.mkdtemp(prefix="termnorm-pg-"))
    data, port = folder / "data", _free_port()
    if os.geteuid() == 0:
        shutil.chown(folder, "postgres", "postgres")
    log = folder / "server.log"
    try:
        subprocess.run(_as_server_user([str(bins / "initdb"), "-D", str(data), "-U", "termnorm", "-A", "trust",
                                        "-E", "UTF8", "--locale=C", "--no-sync"]),
                       check=True, capture_output=True, timeout=timeout)
        # fsync on: the durability the app promises is the server's own (tests must not measure a weaker one)
        opts = f"-p {port} -k {folder} -c listen_addresses=127.0.0.1 -c max_connections=200"
        subprocess.run(_as_server_user([str(bins / "pg_ctl"), "-D", str(data), "-l", str(log), "-o", opts, "-w",
                                        "-t", str(int(timeout)), "start"]),
                       check=True, capture_output=True, timeout=timeout + 10)
        subprocess.run(_as_server_user([str(bins / "createdb"), "-h", str(folder), "-p", str(port), "-U", "termnorm",
                                        "termnorm"]), check=True, capture_output=True, timeout=timeout)
        url = f"postgresql+psycopg://termnorm@127.0.0.1:{port}/termnorm"
        _SERVERS[url] = (bins, data, log, opts, timeout)
        yield url
    finally:
        _SERVERS.pop(f"postgresql+psycopg://termnorm@127.0.0.1:{port}/termnorm", None)
        if (data / "postmaster.pid").exists():
            subprocess.run(_as_server_user([str(bins / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"]),
                           capture_output=True, timeout=timeout)
        shutil.rmtree(folder, ignore_errors=True)


_SERVERS: dict[str, tuple] = {}  # a running server's URL -> what stop_server / start_server need


def stop_server(server_url: str) -> None:
    """Stop a server of :func:`postgres_server` (a database going down under the app), its cluster kept."""
    bins, data, _, _, timeout = _SERVERS[server_url]
    subprocess.run(_as_server_user([str(bins / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop"]),
                   check=True, capture_output=True, timeout=timeout)


def start_server(server_url: str) -> None:
    """Start a server :func:`stop_server` stopped, on the same port and cluster."""
    bins, data, log, opts, timeout = _SERVERS[server_url]
    subprocess.run(_as_server_user([str(bins / "pg_ctl"), "-D", str(data), "-l", str(log), "-o", opts, "-w",
                                    "-t", str(int(timeout)), "start"]), check=True, capture_output=True,
                   timeout=timeout + 10)


def fresh_database(server_url: str, name: str) -> str:
    """A new empty database on the server of ``server_url`` (one per test: tests never see each other's rows)."""
    import psycopg

    base = server_url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return server_url.rsplit("/", 1)[0] + f"/{name}"


def wait_ready(url: str, timeout: float = 30.0) -> None:
    import psycopg

    end = time.time() + timeout
    plain = url.replace("postgresql+psycopg://", "postgresql://")
    while True:
        try:
            with psycopg.connect(plain, connect_timeout=2):
                return
        except psycopg.OperationalError:
            if time.time() > end:
                raise
            time.sleep(0.2)
