"""Small files that many processes read and write: atomic JSON, an exclusive file lock, UTC timestamps.

The model registry (termnorm.registry) and the background jobs (termnorm.jobs) keep their state in JSON
files that a reader may open at any moment, and that another process may be rewriting: a file is written
to a temporary name, flushed and renamed over the old one (then its folder flushed), so a reader sees the
old file or the new one, never a torn one, and a crash leaves the old one. Read-modify-write cycles hold
an ``flock`` (:func:`file_lock`).
"""

from __future__ import annotations

import fcntl
import json
import os
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path


def utc_now() -> str:
    """Now, in UTC, as the registry and the jobs store it (``2024-01-31T12:00:00Z``)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def write_json_atomic(path, obj) -> None:
    """Write JSON so readers see the old or the new file, never a torn one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(obj, f, ensure_ascii=False, indent=1, default=json_default)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    fsync_dir(path.parent)


def read_json(path, default=None):
    """The JSON in ``path``; ``default`` when there is no such file."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return default


def fsync_dir(folder: Path) -> None:
    """Flush a folder's entries: a rename into it is durable only once the directory entry is on disk."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def json_default(o):
    """``json.dump``'s ``default``: numpy scalars and arrays, sets (sorted) and paths."""
    if hasattr(o, "item"):  # numpy scalars
        return o.item()
    if hasattr(o, "tolist"):
        return o.tolist()
    if isinstance(o, (set, frozenset)):
        return sorted(o)
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


@contextmanager
def file_lock(path):
    """An exclusive ``flock`` on ``path`` (created if missing) for the duration of the block."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)
