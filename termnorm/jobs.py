"""Background jobs (retraining) that outlive the Streamlit script run that started them.

A job is a separate Python process (``python -m termnorm.job_worker run <folder>``)
started in its own session (``start_new_session``: its own process group, no
controlling terminal), so Streamlit reruns, page reloads and browser sessions
come and go while it runs; the page only reads the job's status file.

Jobs exclude each other by a **lock key** (one lock file per key): one job per
key at a time, jobs of different keys side by side -- e.g. ``retrain:<vocabulary
id>`` and ``suggest:<vocabulary id>`` (:func:`lock_key`), so retraining one
vocabulary never stops a lead pre-computing suggestions for another. A job
started without a key holds :data:`DEFAULT_LOCK` (``running.lock``), the one
lock of earlier versions. Tags (``kind``, ``vocabulary_id``, ...) are stored
with the job; :meth:`JobRunner.latest` / :meth:`JobRunner.active` filter on
them, so a page shows only its own vocabulary's jobs.

Per job, a folder ``<root>/<job id>/`` holds::

    job.json      what to run: target "module:function", params, lock key, tags
    status.json   state (queued / running / done / failed / cancelled), progress
                  fraction, message, metrics, pid, times -- replaced atomically
    job.log       the worker's stdout + stderr (tqdm bars, tracebacks)

Crash safety: a status that says running (or queued) while its process is
gone (killed, machine rebooted) is turned into ``failed`` by the next reader
and the lock is released; a lock whose job is not alive is stale and removed.
The process is identified by pid *and* start time, so a recycled pid is not
mistaken for the job.

A target is ``fn(params: dict, ctx: JobContext) -> dict`` (the metrics);
``ctx.progress(fraction, message)`` reports progress (the worker's side:
termnorm.job_worker). Cancel sends SIGTERM to the job's process group (the
worker records ``cancelled``), then SIGKILL after a grace period.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

from termnorm.filestore import file_lock, read_json, utc_now, write_json_atomic

#: The repository root: the workers' working directory, first on their PYTHONPATH.
REPO = Path(__file__).resolve().parent.parent

FINAL = ("done", "failed", "cancelled")

#: Seconds a job may stay "queued" with no live process before it is declared failed
#: (spawning a Python process takes ~1 s; 60 s leaves room for a heavily loaded machine).
QUEUED_GRACE_S = 60.0
#: Seconds between SIGTERM and SIGKILL on cancel: enough for the worker to write its final
#: status between two Python bytecodes; a long C call (a GBM fit) is then killed outright.
CANCEL_GRACE_S = 5.0
#: The worker lowers its priority by this much: the app and the coders come first.
NICENESS = 10


#: The lock key of a job started without one (the single lock of earlier versions: running.lock).
DEFAULT_LOCK = "default"


class JobBusy(RuntimeError):
    """Another job holding the same lock key is running."""


_held = threading.local()  # guard files this thread holds (flock is not re-entrant across open())


@contextmanager
def _guard(path: Path):
    """A re-entrant (per thread) exclusive lock on ``path``."""
    held = getattr(_held, "paths", None)
    if held is None:
        held = _held.paths = set()
    key = str(path)
    if key in held:
        yield
        return
    with file_lock(path):
        held.add(key)
        try:
            yield
        finally:
            held.discard(key)


def default_root() -> Path:
    """The jobs' folders: ``jobs_dir`` of termnorm.settings (``$TERMNORM_JOBS``, else ``<data dir>/jobs``)."""
    from termnorm import settings

    return settings.get().jobs_dir


# ------------------------------------------------------------------------------------- processes
def process_start_ticks(pid: int) -> int | None:
    """The process start time (clock ticks since boot, /proc/<pid>/stat field 22); None if gone or a zombie."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError, OSError):
        return None
    rest = raw[raw.rfind(")") + 2:].split()  # fields after "(comm)": state is field 3
    if rest[0] in ("Z", "X"):
        return None
    return int(rest[19])


def pid_alive(pid: int | None, start: int | None = None) -> bool:
    """Is ``pid`` a live (non-zombie) process, and the same one that started at ``start``?"""
    if not pid:
        return False
    try:  # reap it if it is our own exited child (else it lingers as a zombie)
        os.waitpid(pid, os.WNOHANG)
    except OSError:  # ChildProcessError: not our child
        pass
    now = process_start_ticks(pid)
    if now is None:
        return False
    return start is None or now == start


def detect_device() -> str:
    """``$TERMNORM_DEVICE`` if set; else "cuda" when torch is installed and sees a GPU; else "cpu".

    (The lexical GBM is CPU-only; the neural parts' training functions pick the same device.)
    """
    import importlib.util

    from termnorm import settings

    forced = settings.get().device
    if forced:
        return forced

    if importlib.util.find_spec("torch") is None:
        return "cpu"
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def lock_key(kind: str, vocabulary_id) -> str:
    """The lock key of ``kind`` work on one vocabulary, e.g. ``retrain:3``."""
    return f"{kind}:{vocabulary_id}"


def _matches(st: dict, filters: dict) -> bool:
    """Does a status match every filter? ``lock`` is the lock key, anything else a tag; a tuple / list / set
    value means "any of these". Values compare as text (a vocabulary id may come back as a string)."""
    tags = st.get("tags") or {}
    for name, want in filters.items():
        have = st.get("lock", DEFAULT_LOCK) if name == "lock" else tags.get(name)
        wants = want if isinstance(want, (tuple, list, set, frozenset)) else (want,)
        if have is None or str(have) not in {str(w) for w in wants}:
            return False
    return True


# ------------------------------------------------------------------------------------- the runner
class JobRunner:
    """Start, watch and cancel background jobs under one root folder (one job per lock key at a time)."""

    def __init__(self, root=None):
        self.root = Path(root) if root is not None else default_root()
        self.lock_path = self.root / "running.lock"  # the default key's lock
        self.locks_dir = self.root / "locks"  # the other keys' locks
        self.guard_path = self.root / ".guard"  # serialises lock acquisition between processes

    def lock_file(self, lock: str | None = None) -> Path:
        """The lock file of a key (quoted into a file name: keys hold ``:``)."""
        if lock in (None, DEFAULT_LOCK):
            return self.lock_path
        return self.locks_dir / (quote(str(lock), safe="") + ".lock")

    def _lock_of(self, job_id: str) -> str:
        spec = read_json(self.folder(job_id) / "job.json") or {}
        return spec.get("lock") or DEFAULT_LOCK

    # -- paths / files -----------------------------------------------------------------
    def folder(self, job_id: str) -> Path:
        return self.root / job_id

    def _status_path(self, job_id: str) -> Path:
        return self.folder(job_id) / "status.json"

    def _read_status(self, job_id: str) -> dict | None:
        return read_json(self._status_path(job_id))

    def update(self, job_id: str, **changes) -> dict:
        """Read-modify-write the status under the job's lock; a final state is never overwritten
        by a non-final one (a late progress report cannot resurrect a cancelled job)."""
        folder = self.folder(job_id)
        with file_lock(folder / ".status.lock"):
            st = self._read_status(job_id) or {"id": job_id}
            if st.get("state") in FINAL and changes.get("state") not in (None, *FINAL):
                return st
            if st.get("state") in FINAL and "state" in changes and changes["state"] != st["state"]:
                return st  # the first final state wins (done vs cancelled race)
            if st.get("state") in FINAL and "state" not in changes:
                return st
            st.update(changes)
            st["updated"] = utc_now()
            write_json_atomic(self._status_path(job_id), st)
            return st

    # -- lock ---------------------------------------------------------------------------
    def _lock_holder(self, path: Path | None = None) -> dict | None:
        path = path or self.lock_path
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (json.JSONDecodeError, OSError):
            return {"job_id": None, "torn": True}

    def _lock_is_stale(self, holder: dict, path: Path | None = None) -> bool:
        job_id = holder.get("job_id")
        if not job_id:
            # torn / empty lock: stale once older than the queued grace period
            try:
                age = time.time() - (path or self.lock_path).stat().st_mtime
            except FileNotFoundError:
                return True
            return age > QUEUED_GRACE_S
        st = self.status(job_id)  # also turns a dead "running" job into failed
        return st is None or st.get("state") in FINAL

    def _release(self, job_id: str) -> None:
        path = self.lock_file(self._lock_of(job_id))
        with _guard(self.guard_path):
            holder = self._lock_holder(path)
            if holder is not None and holder.get("job_id") in (job_id, None):
                try:
                    path.unlink()
                except FileNotFoundError:
                    pass

    def _lock_files(self) -> list[Path]:
        return [self.lock_path, *sorted(self.locks_dir.glob("*.lock"))] if self.locks_dir.exists() \
            else [self.lock_path]

    # -- public API -------------------------------------------------------------------------
    def start(self, target: str, params: dict | None = None, title: str = "", niceness: int = NICENESS,
              lock: str | None = None, tags: dict | None = None) -> str:
        """Start ``target`` ("package.module:function") in a detached worker; returns the job id.

        ``lock``: the key this job holds (default :data:`DEFAULT_LOCK`); ``tags``: JSON values stored with
        it for :meth:`latest` / :meth:`active` (``kind``, ``vocabulary_id``, ...). Raises JobBusy when
        another job holding ``lock`` is alive (a stale lock is recovered first).
        """
        if ":" not in target:
            raise ValueError(f"target must be 'module:function', got {target!r}")
        lock = str(lock or DEFAULT_LOCK)
        tags = dict(tags or {})
        path = self.lock_file(lock)
        path.parent.mkdir(parents=True, exist_ok=True)
        now = time.time()  # milliseconds in the id: jobs sort newest first, even two started in one second
        job_id = time.strftime("%Y%m%d-%H%M%S", time.gmtime(now)) + f"{int(now * 1000) % 1000:03d}-" \
            + uuid.uuid4().hex[:6]
        with _guard(self.guard_path):
            holder = self._lock_holder(path)
            if holder is not None:
                if not self._lock_is_stale(holder, path):
                    raise JobBusy(self._busy_message(holder.get("job_id"), lock))
                path.unlink(missing_ok=True)
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            with os.fdopen(fd, "w") as f:
                json.dump({"job_id": job_id, "lock": lock, "created": utc_now()}, f)
                f.flush()
                os.fsync(f.fileno())
            folder = self.folder(job_id)
            folder.mkdir(parents=True)
            write_json_atomic(folder / "job.json", {"id": job_id, "target": target, "params": params or {},
                                                    "title": title or target, "niceness": niceness,
                                                    "lock": lock, "tags": tags})
            write_json_atomic(folder / "status.json", {
                "id": job_id, "title": title or target, "target": target, "lock": lock, "tags": tags,
                "state": "queued", "progress": 0.0,
                "message": "starting", "metrics": {}, "pid": None, "pid_start": None, "created": utc_now(),
                "started": None, "finished": None, "updated": utc_now(), "error": None, "device": None})
        try:
            log = open(folder / "job.log", "ab")
            env = dict(os.environ)
            env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [env.get("PYTHONPATH")])])
            env["PYTHONUNBUFFERED"] = "1"
            proc = subprocess.Popen([sys.executable, "-m", "termnorm.job_worker", "run", str(folder)], cwd=str(REPO),
                                    stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True, close_fds=True, env=env)
            log.close()
        except BaseException as e:
            self.update(job_id, state="failed", error=f"could not start the worker: {e}", finished=utc_now())
            self._release(job_id)
            raise
        # reap the worker when it exits, so it never lingers as a zombie of this (long-lived) process
        threading.Thread(target=proc.wait, daemon=True, name=f"reap-{job_id}").start()
        self.update(job_id, pid=proc.pid, pid_start=process_start_ticks(proc.pid))
        return job_id

    def _busy_message(self, job_id: str | None, lock: str) -> str:
        st = self._read_status(job_id) if job_id else None
        what = f"“{st.get('title')}” (job {job_id})" if st else f"job {job_id}"
        since = f", started {st['created']}" if st and st.get("created") else ""
        return f"{what} is running{since}; one {lock} job at a time"

    def status(self, job_id: str) -> dict | None:
        """The job's status; a running / queued job whose process is gone is marked failed first."""
        st = self._read_status(job_id)
        if st is None or st.get("state") in FINAL:
            return st
        pid = st.get("pid")
        if pid and pid_alive(pid, st.get("pid_start")):
            return st
        if not pid:
            created = _parse_time(st.get("created"))
            if created is not None and time.time() - created < QUEUED_GRACE_S:
                return st
        st = self.update(job_id, state="failed", finished=utc_now(),
                         error="the worker process died (killed or crashed) without reporting",
                         message="failed: worker process gone")
        self._release(job_id)
        return st

    def jobs(self, limit: int = 20, **filters) -> list[dict]:
        """The newest jobs first (statuses checked for dead workers), those matching ``filters`` only
        (``lock=`` key, or tags such as ``kind=``, ``vocabulary_id=``; a tuple means any of them)."""
        if not self.root.exists():
            return []
        ids = sorted((p.name for p in self.root.iterdir() if (p / "status.json").exists()), reverse=True)
        out = []
        for j in ids:
            if len(out) >= limit:
                break
            raw = self._read_status(j)  # filter on the stored tags before the liveness check
            if raw is None or not _matches(raw, filters):
                continue
            st = self.status(j)
            if st is not None:
                out.append(st)
        return out

    def running(self, **filters) -> list[dict]:
        """Every live job holding a lock (stale locks recovered), newest first, filtered as in :meth:`jobs`."""
        out = []
        for path in self._lock_files():
            holder = self._lock_holder(path)
            if holder is None:
                continue
            if self._lock_is_stale(holder, path):
                with _guard(self.guard_path):
                    if self._lock_holder(path) == holder:
                        path.unlink(missing_ok=True)
                continue
            st = self.status(holder["job_id"])
            if st is not None and st.get("state") not in FINAL and _matches(st, filters):
                out.append(st)
        return sorted(out, key=lambda st: st["id"], reverse=True)

    def active(self, **filters) -> dict | None:
        """The newest live job matching ``filters`` (any lock; see :meth:`jobs`), else None."""
        live = self.running(**filters)
        return live[0] if live else None

    def latest(self, **filters) -> dict | None:
        """The newest job matching ``filters`` (e.g. ``kind="retrain", vocabulary_id=3``), whatever its state."""
        js = self.jobs(limit=1, **filters)
        return js[0] if js else None

    def log(self, job_id: str, tail: int = 200) -> str:
        p = self.folder(job_id) / "job.log"
        if not p.exists():
            return ""
        data = p.read_bytes()[-200_000:].decode("utf-8", errors="replace")
        # tqdm redraws with carriage returns: keep the last state of each line
        lines = [ln.rsplit("\r", 1)[-1] for ln in data.splitlines()]
        return "\n".join(lines[-tail:])

    def cancel(self, job_id: str, grace_s: float = CANCEL_GRACE_S) -> dict:
        """Terminate the job's process group (SIGTERM, then SIGKILL after ``grace_s``); state -> cancelled."""
        st = self.status(job_id)
        if st is None:
            raise KeyError(f"no job {job_id}")
        if st.get("state") in FINAL:
            return st
        pid, start = st.get("pid"), st.get("pid_start")
        if pid and pid_alive(pid, start):
            _signal_group(pid, signal.SIGTERM)
            deadline = time.time() + grace_s
            while time.time() < deadline and pid_alive(pid, start):
                time.sleep(0.05)
            if pid_alive(pid, start):
                _signal_group(pid, signal.SIGKILL)
                deadline = time.time() + 5
                while time.time() < deadline and pid_alive(pid, start):
                    time.sleep(0.05)
        st = self.update(job_id, state="cancelled", finished=utc_now(), message="cancelled")
        self._release(job_id)
        return st

    def wait(self, job_id: str, timeout: float = 60.0, poll: float = 0.1) -> dict:
        """Block until the job reaches a final state (or ``timeout``); returns its status."""
        deadline = time.time() + timeout
        while True:
            st = self.status(job_id)
            if st is None or st.get("state") in FINAL or time.time() > deadline:
                return st
            time.sleep(poll)


def _signal_group(pid: int, sig) -> None:
    try:
        os.killpg(os.getpgid(pid), sig)  # the worker leads its own group: children (joblib) go too
    except (ProcessLookupError, PermissionError):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def _parse_time(s: str | None) -> float | None:
    if not s:
        return None
    import calendar

    try:
        return float(calendar.timegm(time.strptime(s, "%Y-%m-%dT%H:%M:%SZ")))
    except ValueError:
        return None
