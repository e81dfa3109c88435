"""Model registry: every trained pipeline as a version, a quality gate, promotion and rollback.

The learning loop (termnorm.retrain) retrains the engine from coders'
decisions; each result is *registered* here as a version and *promoted* to
current only if the gate says it is not worse than the current model on the
project's gold set (exact-set accuracy, the task's metric in methods.md). A
lead can roll back to any earlier version. Nothing is ever deleted.

Layout (one lineage per vocabulary; the root is ``$TERMNORM_MODELS`` or
``models/registry/``)::

    <root>/<name>/index.json            versions, the current one, the event log
    <root>/<name>/index.lock            flock for read-modify-write of the index
    <root>/<name>/versions/<version>/   Engine.save folder (config.json, pipeline.joblib)
                                        + version.json + gold_predictions.json

``index.json`` is replaced atomically (temp file, fsync, ``os.replace``,
fsync of the folder), so a reader never sees a half-written index and a crash
leaves the previous one. A version folder is written under a temporary name
and renamed into place, so a half-saved pipeline never becomes a version.

A version's name is ``<name>-v<n>``; it is also the engine's
``model_version``, so every stored suggestion says which version made it.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import tempfile
import time
import uuid
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ENV_ROOT = "TERMNORM_MODELS"
FORMAT = "termnorm-registry/1"

#: The gate's metric: exact-set accuracy on gold (a mention counts only when the
#: predicted set equals the gold set -- the Yidu-N7K / CHIP 2019 metric).
GATE_METRIC = "accuracy"
#: Default margin 0.0: a candidate is promoted when candidate >= current - margin,
#: i.e. "not worse". A lead may allow a small loss (margin > 0) to accept a model
#: trained on much more data, or demand a gain (margin < 0).
GATE_MARGIN = 0.0


def default_root() -> Path:
    """``$TERMNORM_MODELS`` if set, else ``models/registry/`` in the repository (git-ignored)."""
    env = os.environ.get(ENV_ROOT)
    return Path(env) if env else REPO / "models" / "registry"


def slug(name: str) -> str:
    """A file-name-safe lineage name from a vocabulary name ("demo-procedures", "code")."""
    s = re.sub(r"[^0-9A-Za-z_.-]+", "-", str(name or "")).strip("-.")
    return (s or "model")[:60]


def utc_now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


# ------------------------------------------------------------------------------------- atomic files
def write_json_atomic(path, obj) -> None:
    """Write JSON so readers see the old or the new file, never a torn one (also used by termnorm.jobs)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(obj, f, ensure_ascii=False, indent=1, default=_json_default)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    _fsync_dir(path.parent)


def read_json(path, default=None):
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return default


def _fsync_dir(folder: Path) -> None:
    # the rename itself is durable only once the directory entry is on disk
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


def _json_default(o):
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


# ------------------------------------------------------------------------------------- the gate
@dataclass
class GateResult:
    """The gate's decision, stored with the candidate version and in the event log."""

    promoted: bool
    metric: str
    candidate: float | None
    current: float | None
    margin: float
    reason: str
    current_version: str | None = None
    gold_n: int | None = None
    gold_sha256: str | None = None
    forced: bool = False
    at: str = field(default_factory=utc_now)

    def summary(self) -> str:
        if self.current is None:
            return f"{'promoted' if self.promoted else 'kept'}: {self.reason}"
        verb = "promoted" if self.promoted else "rejected"
        return (f"{verb}: {self.metric} {self.candidate:.4f} vs current {self.current:.4f} "
                f"(margin {self.margin:+.4f}){' [forced]' if self.forced else ''}")


@dataclass
class Gate:
    """Promote a candidate only if ``candidate >= current - margin`` on the same gold set.

    ``metric`` is a key of the metrics dict (``termnorm.evaluate.evaluate_predictions``);
    default exact-set accuracy. ``margin`` default 0.0 = "not worse than current".
    """

    margin: float = GATE_MARGIN
    metric: str = GATE_METRIC

    def decide(self, candidate: dict, current: dict | None, current_version: str | None = None) -> GateResult:
        cand = candidate.get(self.metric)
        gold_n, gold_sha = candidate.get("n"), candidate.get("gold_sha256")
        if cand is None:
            return GateResult(False, self.metric, None, None, self.margin, f"candidate has no {self.metric} on gold",
                              current_version, gold_n, gold_sha)
        if current is None:
            return GateResult(True, self.metric, float(cand), None, self.margin, "no current model: first version",
                              None, gold_n, gold_sha)
        cur = current.get(self.metric)
        if cur is None:
            return GateResult(False, self.metric, float(cand), None, self.margin,
                              f"current model has no {self.metric} on gold", current_version, gold_n, gold_sha)
        if current.get("gold_sha256") != gold_sha:
            return GateResult(False, self.metric, float(cand), float(cur), self.margin,
                              "current was measured on another gold set: re-evaluate it (baseline=)",
                              current_version, gold_n, gold_sha)
        ok = float(cand) >= float(cur) - self.margin
        reason = ("not worse than current" if ok else "worse than current") + f" on {gold_n} gold mentions"
        return GateResult(ok, self.metric, float(cand), float(cur), self.margin, reason, current_version, gold_n,
                          gold_sha)


# ------------------------------------------------------------------------------------- the registry
class Registry:
    """One lineage of pipeline versions (usually one per vocabulary) with a current version.

    >>> reg = Registry.for_vocabulary("demo-procedures", root=tmp)          # doctest: +SKIP
    >>> v = reg.register(engine, metrics, parent=reg.current_version())     # doctest: +SKIP
    >>> reg.promote(v, Gate(margin=0.0)).promoted                           # doctest: +SKIP
    >>> reg.rollback("demo-procedures-v1")                                  # doctest: +SKIP
    """

    def __init__(self, root=None, name: str = "default"):
        self.name = slug(name)
        self.root = Path(root) if root is not None else default_root()
        self.folder = self.root / self.name
        self.index_path = self.folder / "index.json"
        self.lock_path = self.folder / "index.lock"
        self.versions_dir = self.folder / "versions"

    @classmethod
    def for_vocabulary(cls, vocabulary_name: str, root=None) -> "Registry":
        return cls(root, slug(vocabulary_name))

    # -- index ----------------------------------------------------------------------
    def _read(self) -> dict:
        idx = read_json(self.index_path)
        if idx is None:
            return {"format": FORMAT, "name": self.name, "current": None, "versions": [], "events": []}
        if idx.get("format") != FORMAT:
            raise ValueError(f"{self.index_path}: unknown registry format {idx.get('format')!r}")
        return idx

    def _write(self, idx: dict) -> None:
        write_json_atomic(self.index_path, idx)

    # -- queries --------------------------------------------------------------------
    def versions(self) -> list[dict]:
        """Every version record, oldest first, with ``is_current``."""
        idx = self._read()
        return [dict(v, is_current=v["version"] == idx["current"]) for v in idx["versions"]]

    def get(self, version: str) -> dict:
        for v in self.versions():
            if v["version"] == version:
                return v
        raise KeyError(f"no version {version!r} in registry {self.folder}")

    def current_version(self) -> str | None:
        return self._read()["current"]

    def current(self) -> dict | None:
        """The current version's record (None before the first promotion)."""
        cur = self.current_version()
        return self.get(cur) if cur else None

    def history(self) -> list[dict]:
        """The event log, oldest first: register / promote / reject / rollback, with gate results."""
        return list(self._read()["events"])

    def path(self, version: str) -> Path:
        return self.versions_dir / version

    def load(self, version: str | None = None):
        """The Engine of ``version`` (default: the current one); None when there is no current version."""
        from termnorm.engine import Engine

        version = version or self.current_version()
        if version is None:
            return None
        self.get(version)  # KeyError for an unknown version
        eng = Engine.load(self.path(version))
        eng.model_version = version
        return eng

    def gold_predictions(self, version: str | None = None) -> list[dict]:
        """Per-mention gold results of a version (mention, gold, chosen, confidence, correct) for the
        auto-accept threshold tool; [] when not stored."""
        version = version or self.current_version()
        if version is None:
            return []
        return read_json(self.path(version) / "gold_predictions.json", []) or []

    # -- changes --------------------------------------------------------------------
    def register(self, engine, metrics: dict, *, parent: str | None = None, pairs: dict | None = None,
                 train: dict | None = None, gold_predictions: list[dict] | None = None, notes: str = "",
                 extra_writer=None) -> str:
        """Save ``engine`` as a new version (not yet current) and return its name.

        ``metrics``: the version's metrics on the gold set (``accuracy`` ... plus
        ``n`` and ``gold_sha256``, see termnorm.retrain.evaluate_on_gold);
        ``pairs``: training-pair counts by kind; ``train``: sizes / seconds;
        ``extra_writer(folder)`` may write more parts (dense model, ranker) into
        the version folder before it is published. The engine's ``model_version``
        becomes the version name.
        """
        self.versions_dir.mkdir(parents=True, exist_ok=True)
        with file_lock(self.lock_path):
            idx = self._read()
            # folders count too: a crash between publishing a folder and writing the index leaves an
            # orphan folder, whose name must not be reused
            on_disk = [int(m.group(1)) for p in self.versions_dir.iterdir()
                       if (m := re.fullmatch(re.escape(self.name) + r"-v(\d+)", p.name))]
            n = 1 + max([v.get("number", 0) for v in idx["versions"]] + on_disk, default=0)
            version = f"{self.name}-v{n}"
            tmp = self.versions_dir / f".tmp-{version}-{uuid.uuid4().hex[:8]}"
            old_version = engine.model_version
            engine.model_version = version
            try:
                engine.save(tmp)
                if extra_writer is not None:
                    extra_writer(tmp)
                record = {"version": version, "number": n, "created": utc_now(), "parent": parent,
                          "vocabulary": getattr(engine.vocabulary, "name", ""), "metrics": dict(metrics or {}),
                          "pairs": dict(pairs or {}), "train": dict(train or {}), "notes": notes,
                          "gate": None, "status": "registered"}
                write_json_atomic(tmp / "version.json", record)
                if gold_predictions is not None:
                    write_json_atomic(tmp / "gold_predictions.json", gold_predictions)
                os.replace(tmp, self.path(version))
                _fsync_dir(self.versions_dir)
            except BaseException:
                engine.model_version = old_version
                shutil.rmtree(tmp, ignore_errors=True)
                raise
            idx["versions"].append(record)
            idx["events"].append({"at": record["created"], "action": "register", "version": version,
                                  "parent": parent})
            self._write(idx)
        return version

    def promote(self, version: str, gate: Gate | None = None, *, baseline: dict | None = None, force: bool = False,
                by: str = "") -> GateResult:
        """Make ``version`` current if the gate passes (or ``force``); record the decision either way.

        ``baseline``: the current model's metrics on the candidate's gold set,
        when the gold set changed since the current version was measured (the
        retrainer always passes it); otherwise the current version's stored
        metrics are compared.
        """
        gate = gate or Gate()
        with file_lock(self.lock_path):
            idx = self._read()
            rec = _find(idx, version)
            cur_name = idx["current"]
            if cur_name == version:
                res = GateResult(True, gate.metric, rec["metrics"].get(gate.metric), rec["metrics"].get(gate.metric),
                                 gate.margin, "already current", cur_name, rec["metrics"].get("n"),
                                 rec["metrics"].get("gold_sha256"))
                return res
            cur_metrics = None
            if cur_name is not None:
                cur_metrics = dict(baseline) if baseline is not None else dict(_find(idx, cur_name)["metrics"])
                if baseline is not None and "gold_sha256" not in cur_metrics:
                    cur_metrics["gold_sha256"] = rec["metrics"].get("gold_sha256")
            res = gate.decide(rec["metrics"], cur_metrics, cur_name)
            if force and not res.promoted:
                res.promoted, res.forced = True, True
                res.reason = f"forced by {by or 'a lead'} ({res.reason})"
            rec["gate"] = asdict(res)
            rec["status"] = "promoted" if res.promoted else "rejected"
            if res.promoted:
                idx["current"] = version
            idx["events"].append({"at": res.at, "action": "promote" if res.promoted else "reject",
                                  "version": version, "from": cur_name, "by": by, "gate": asdict(res)})
            self._write(idx)
        return res

    def rollback(self, version: str, *, by: str = "", reason: str = "") -> dict:
        """Make an earlier version (registered before the current one) current again, without a gate."""
        with file_lock(self.lock_path):
            idx = self._read()
            rec = _find(idx, version)
            cur_name = idx["current"]
            if cur_name == version:
                raise ValueError(f"{version} is already current")
            if cur_name is not None and rec["number"] >= _find(idx, cur_name)["number"]:
                raise ValueError(f"{version} is not earlier than the current {cur_name}: promote it instead")
            idx["current"] = version
            rec["status"] = "promoted"
            event = {"at": utc_now(), "action": "rollback", "version": version, "from": cur_name, "by": by,
                     "reason": reason}
            idx["events"].append(event)
            self._write(idx)
        return event


def _find(idx: dict, version: str) -> dict:
    for v in idx["versions"]:
        if v["version"] == version:
            return v
    raise KeyError(f"no version {version!r}")


def current_engine(vocabulary_name: str, root=None):
    """The current registered Engine for a vocabulary, or None (for the app's engine loader)."""
    return Registry.for_vocabulary(vocabulary_name, root).load()
