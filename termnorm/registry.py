"""Model registry: every trained pipeline as a version, a quality gate, promotion and rollback.

The learning loop (db.retrain) retrains the engine from coders'
decisions and labelled mentions; each result is *registered* here as a version
and *promoted* to current only if the gate (termnorm.gate) says it is not worse
than the model serving now -- the shipped model included -- on the same
held-out mentions (exact-set accuracy, the task's metric in methods.md, with a
paired sign test). A lead can roll back to any version that served, the
shipped one included. Nothing is ever deleted.

Layout (one lineage per vocabulary; the root is ``models_dir`` of termnorm.settings:
``$TERMNORM_MODELS``, else ``models/`` in the data directory)::

    <root>/<name>/index.json            versions, the current one, the event log
    <root>/<name>/index.lock            flock for read-modify-write of the index
    <root>/<name>/versions/<version>/   Engine.save folder (config.json, pipeline.joblib)
                                        + version.json + gold_predictions.json
    <root>/<name>/versions/<name>-shipped/   version.json + gold_predictions.json only

``index.json`` is replaced atomically (temp file, fsync, ``os.replace``,
fsync of the folder), so a reader never sees a half-written index and a crash
leaves the previous one. A version folder is written under a temporary name
and renamed into place, so a half-saved pipeline never becomes a version.

A version's name is ``<name>-v<n>``; it is also the engine's
``model_version``, so every stored suggestion says which version made it.
The **shipped model** (what a vocabulary has before any retraining:
db.serving.shipped_engine) is version ``<name>-shipped``, number 0, recorded
when it is first measured: it has no pipeline (it is built from the database),
it serves while ``current`` is None, and rolling back to it sets ``current``
back to None -- so "None: the shipped model serves" holds everywhere.
Each version record carries its ``confidence_bands`` (termnorm.stats), the
words a coder reads, calibrated on its held-out predictions.
"""

from __future__ import annotations

import os
import re
import shutil
import uuid
from dataclasses import asdict
from functools import lru_cache
from pathlib import Path

from termnorm.filestore import file_lock, fsync_dir, read_json, utc_now, write_json_atomic
from termnorm.gate import Gate, GateResult, paired_results

FORMAT = "termnorm-registry/1"
#: Suffix of the shipped model's version name (number 0).
SHIPPED = "shipped"


def default_root() -> Path:
    """The registry root: ``models_dir`` of termnorm.settings (``$TERMNORM_MODELS``, else ``<data dir>/models``)."""
    from termnorm import settings

    return settings.get().models_dir


def slug(name: str) -> str:
    """A file-name-safe lineage name from a vocabulary name ("demo-procedures", "code")."""
    s = re.sub(r"[^0-9A-Za-z_.-]+", "-", str(name or "")).strip("-.")
    return (s or "model")[:60]


# ------------------------------------------------------------------------------------- the registry
class Registry:
    """One lineage of pipeline versions (usually one per vocabulary) with a current version.

    >>> reg = Registry.for_vocabulary("demo-procedures", root=tmp)          # doctest: +SKIP
    >>> v = reg.register(engine, metrics, parent=reg.current_version())     # doctest: +SKIP
    >>> reg.promote(v, Gate(margin=0.0)).promoted                           # doctest: +SKIP
    >>> reg.rollback("demo-procedures-v1")                                  # doctest: +SKIP
    >>> reg.rollback(reg.shipped_name())                                    # doctest: +SKIP
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
        """Every version record, oldest first (the shipped one, number 0, first), with ``is_current``: the
        version serving now (the shipped one while no other is current)."""
        idx = self._read()
        return [dict(v, is_current=v["version"] == idx["current"] or (idx["current"] is None and _is_shipped(v)))
                for v in sorted(idx["versions"], key=lambda v: v["number"])]

    def get(self, version: str) -> dict:
        for v in self.versions():
            if v["version"] == version:
                return v
        raise KeyError(f"no version {version!r} in registry {self.folder}")

    def current_version(self) -> str | None:
        return self._read()["current"]

    def current(self) -> dict | None:
        """The current version's record (None while the shipped model serves)."""
        cur = self.current_version()
        return self.get(cur) if cur else None

    def shipped_name(self) -> str:
        return f"{self.name}-{SHIPPED}"

    def is_shipped(self, version: str | None) -> bool:
        return version == self.shipped_name()

    def serving(self) -> dict | None:
        """The record of the version serving now: the current one, else the shipped one once measured."""
        idx = self._read()
        name = idx["current"] or self.shipped_name()
        rec = next((v for v in idx["versions"] if v["version"] == name), None)
        return dict(rec, is_current=True) if rec else None

    def confidence_bands(self, version: str | None = None) -> dict | None:
        """The confidence bands (termnorm.stats.confidence_bands) of ``version`` (default: the one serving);
        None when it was never measured on held-out mentions."""
        from termnorm.stats import BANDS_METHOD

        rec = self.get(version) if version else self.serving()
        bands = (rec or {}).get("confidence_bands")
        if bands and bands.get("measured") and bands.get("method") != BANDS_METHOD:  # set by an earlier rule
            path = self.path(rec["version"]) / "gold_predictions.json"
            if path.exists():  # once per file: the coding page asks for every mention
                bands = _bands_of_file(str(path), path.stat().st_mtime_ns) or bands
        return bands

    def history(self) -> list[dict]:
        """The event log, oldest first: register / promote / reject / rollback, with gate results."""
        return list(self._read()["events"])

    def path(self, version: str) -> Path:
        return self.versions_dir / version

    def load(self, version: str | None = None):
        """The Engine of ``version`` (default: the current one); None when there is no current version."""
        from termnorm.engine import Engine

        version = version or self.current_version()
        if version is None or self.is_shipped(version):
            return None  # the shipped model is built from the database (db.serving.shipped_engine)
        self.get(version)  # KeyError for an unknown version
        eng = Engine.load(self.path(version))
        eng.model_version = version
        return eng

    def gold_predictions(self, version: str | None = None) -> list[dict]:
        """Per-mention held-out results of a version (mention, gold, chosen, confidence, correct; default:
        the version serving, the shipped one included) for the gate, the confidence bands and the auto-coding
        threshold; [] when not stored."""
        version = version or self.current_version() or self.shipped_name()
        return read_json(self.path(version) / "gold_predictions.json", []) or []

    # -- changes --------------------------------------------------------------------
    def register(self, engine, metrics: dict, *, parent: str | None = None, pairs: dict | None = None,
                 train: dict | None = None, gold_predictions: list[dict] | None = None, notes: str = "",
                 extra_writer=None) -> str:
        """Save ``engine`` as a new version (not yet current) and return its name.

        ``metrics``: the version's metrics on the gold set (``accuracy`` ... plus
        ``n`` and ``gold_sha256``, see termnorm.refit.evaluate_on_gold);
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
                          "gate": None, "status": "registered",
                          "confidence_bands": _bands(gold_predictions)}
                write_json_atomic(tmp / "version.json", record)
                if gold_predictions is not None:
                    write_json_atomic(tmp / "gold_predictions.json", gold_predictions)
                os.replace(tmp, self.path(version))
                fsync_dir(self.versions_dir)
            except BaseException:
                engine.model_version = old_version
                shutil.rmtree(tmp, ignore_errors=True)
                raise
            idx["versions"].append(record)
            idx["events"].append({"at": record["created"], "action": "register", "version": version,
                                  "parent": parent})
            self._write(idx)
        return version

    def record_shipped(self, metrics: dict, gold_predictions: list[dict], *, model_version: str = "",
                       notes: str = "") -> str:
        """Record (or refresh) the shipped model's measurement on held-out mentions: version
        ``<name>-shipped``, number 0, no pipeline. Its metrics, predictions and confidence bands are those of
        this latest measurement (its history grows with every decision, so it is re-measured whenever a
        candidate is gated against it)."""
        name = self.shipped_name()
        self.versions_dir.mkdir(parents=True, exist_ok=True)
        with file_lock(self.lock_path):
            idx = self._read()
            rec = next((v for v in idx["versions"] if v["version"] == name), None)
            if rec is None:
                rec = {"version": name, "number": 0, "created": utc_now(), "parent": None, "shipped": True,
                       "status": "shipped", "gate": None, "pairs": {}, "train": {}}
                idx["versions"].insert(0, rec)
                idx["events"].append({"at": rec["created"], "action": "register", "version": name, "parent": None})
            rec.update(metrics=dict(metrics or {}), measured=utc_now(), model_version=model_version, notes=notes,
                       confidence_bands=_bands(gold_predictions))
            folder = self.path(name)
            write_json_atomic(folder / "gold_predictions.json", gold_predictions)
            write_json_atomic(folder / "version.json", rec)
            self._write(idx)
        return name

    def promote(self, version: str, gate: Gate | None = None, *, baseline: dict | None = None,
                baseline_predictions: list[dict] | None = None, force: bool = False, by: str = "") -> GateResult:
        """Make ``version`` current if the gate passes (or ``force``); record the decision either way.

        The candidate is compared with the version serving now -- the current one, else the shipped one once
        it was measured (:meth:`record_shipped`). ``baseline`` / ``baseline_predictions``: the serving
        model's metrics and per-mention results on the candidate's held-out mentions (the retrainer always
        passes them: it re-measures what serves); otherwise the serving version's stored ones are compared.
        The paired sign test runs on the per-mention results of both.
        """
        gate = gate or Gate()
        if self.is_shipped(version):
            raise ValueError(f"{version} is the shipped model: roll back to it (it has no gate of its own)")
        cand_preds = self.gold_predictions(version)
        with file_lock(self.lock_path):
            idx = self._read()
            rec = _find(idx, version)
            cur_name = idx["current"]
            if cur_name == version:
                res = GateResult(True, gate.metric, rec["metrics"].get(gate.metric), rec["metrics"].get(gate.metric),
                                 gate.margin, "already current", cur_name, rec["metrics"].get("n"),
                                 rec["metrics"].get("gold_sha256"))
                return res
            serving = cur_name or next((v["version"] for v in idx["versions"] if _is_shipped(v)), None)
            cur_metrics = None
            if baseline is not None:
                cur_metrics = dict(baseline)
                cur_metrics.setdefault("gold_sha256", rec["metrics"].get("gold_sha256"))
            elif serving is not None:
                cur_metrics = dict(_find(idx, serving)["metrics"])
            if baseline_predictions is None and serving is not None:
                baseline_predictions = read_json(self.path(serving) / "gold_predictions.json", []) or []
            paired = paired_results(cand_preds, baseline_predictions or [])
            res = gate.decide(rec["metrics"], cur_metrics, serving or (SHIPPED if cur_metrics else None), paired)
            if force and not res.promoted:
                res.promoted, res.forced = True, True
                res.reason = f"forced by {by or 'a lead'} ({res.reason})"
            rec["gate"] = asdict(res)
            rec["status"] = "promoted" if res.promoted else "rejected"
            if res.promoted:
                idx["current"] = version
            idx["events"].append({"at": res.at, "action": "promote" if res.promoted else "reject",
                                  "version": version, "from": serving, "by": by, "gate": asdict(res)})
            self._write(idx)
        return res

    def rollback(self, version: str, *, by: str = "", reason: str = "") -> dict:
        """Serve a version that served before (the shipped one included) again, without a gate: one click for a
        lead who finds the current model worse in use. A version the gate refused never served: promoting it
        (gated, or forced) is the way in, so a rollback cannot slip a refused model past the gate."""
        shipped = self.is_shipped(version)
        with file_lock(self.lock_path):
            idx = self._read()
            cur_name = idx["current"]
            if cur_name == version or (shipped and cur_name is None):
                raise ValueError(f"{version} is already serving")
            rec = None if shipped else _find(idx, version)
            if rec is not None and rec.get("status") != "promoted":
                raise ValueError(f"{version} never served (status {rec.get('status')}): promote it instead, "
                                 "through the gate or forced")
            idx["current"] = None if shipped else version
            event = {"at": utc_now(), "action": "rollback", "version": version,
                     "from": cur_name or self.shipped_name(), "by": by, "reason": reason}
            idx["events"].append(event)
            self._write(idx)
        return event


def _is_shipped(rec: dict) -> bool:
    return bool(rec.get("shipped"))


def _bands(predictions: list[dict] | None) -> dict | None:
    from termnorm.stats import confidence_bands

    return confidence_bands(predictions) if predictions is not None else None


@lru_cache(maxsize=32)
def _bands_of_file(path: str, mtime_ns: int) -> dict | None:
    """:func:`_bands` of a stored ``gold_predictions.json`` (``mtime_ns``: read again when the file changes)."""
    return _bands(read_json(Path(path), []) or None)


def _find(idx: dict, version: str) -> dict:
    for v in idx["versions"]:
        if v["version"] == version:
            return v
    raise KeyError(f"no version {version!r}")
