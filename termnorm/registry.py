"""Model registry: every trained pipeline as a version, a quality gate, promotion and rollback.

The learning loop (db.retrain) retrains the engine from coders'
decisions and labelled mentions; each result is *registered* here as a version
and *promoted* to current only if the gate (:class:`Gate`) says it is not worse
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
#: Held-out mentions the gate needs to compare two models at all. A model truly 10 points worse (about a
#: fifth of the mentions answered differently, three to one against it) is measured "not worse" by chance
#: 14% of the time on 30 mentions, 7% on 50 and 1.3% on 100 (binomial model of the discordant mentions):
#: 100 keeps that risk near 1%, and one mention then moves accuracy by one point, not three.
MIN_GATE_MENTIONS = 100
#: Significance level of the paired sign test: a candidate significantly worse than the serving model is
#: refused even where the margin allows a loss.
SIGN_TEST_ALPHA = 0.05
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
    """The gate's decision, stored with the candidate version and in the event log.

    ``candidate`` / ``current``: the metric of each on the same ``gold_n`` held-out mentions;
    ``only_candidate`` / ``only_current``: mentions only that model got right; ``sign_p``: the two-sided
    sign test on them (termnorm.stats.sign_test); ``reason``: the verdict in plain words.
    """

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
    only_candidate: int | None = None
    only_current: int | None = None
    sign_p: float | None = None
    min_n: int = MIN_GATE_MENTIONS
    alpha: float = SIGN_TEST_ALPHA

    def summary(self) -> str:
        verb = "promoted" if self.promoted else "refused"
        return f"{verb}{' (forced)' if self.forced else ''}: {self.reason}"


def margin_words(margin: float) -> str:
    """What a gate margin asks for, in words (a negative margin demands a gain, a positive one allows a loss)."""
    if margin > 0:
        return f"the gate allows a loss of up to {margin:.4f} (margin {margin:+.4f})"
    if margin < 0:
        return f"the gate asks for a gain of at least {-margin:.4f} (margin {margin:+.4f})"
    return "the gate asks for no loss (margin 0)"


def paired_results(candidate: list[dict], current: list[dict]) -> dict | None:
    """Right / wrong of two models on the mentions both were measured on (``mention``, ``correct`` records),
    and the sign test on them; None when either side has no records."""
    from termnorm.stats import sign_test

    if not candidate or not current:
        return None
    cur = {p["mention"]: bool(p["correct"]) for p in current}
    both = [(bool(p["correct"]), cur[p["mention"]]) for p in candidate if p["mention"] in cur]
    if not both:
        return None
    st = sign_test([a for a, _ in both], [b for _, b in both])
    return {"n": len(both), "only_candidate": st["right_only_here"], "only_current": st["right_only_there"],
            "sign_p": st["sign_test_p"]}


@dataclass
class Gate:
    """Promote a candidate over the model serving now only when, on the same held-out mentions,

    1. there are at least ``min_n`` of them (:data:`MIN_GATE_MENTIONS`; below it the gate refuses and says so),
    2. ``candidate >= serving - margin`` (default margin 0: "not worse"), and
    3. the paired sign test does not find the candidate significantly worse (p < ``alpha`` with more mentions
       right only with the serving model) -- the check that still binds when a lead allows a loss (margin > 0).

    Why "not worse" and not "significantly better": each retrain adds what coders taught since, so a
    candidate that measures level with the serving model is the one to serve (it also knows the newest
    codes); demanding significance would stall the loop for hundreds of decisions at a time (a 2-point
    gain on 1,000 held-out mentions is rarely significant), while the minimum number of mentions keeps
    the chance that a clearly worse model passes near 1%. A lead who wants a proven gain sets a negative
    margin. The sign test is reported either way.

    ``metric`` is a key of the metrics dict (``termnorm.evaluate.evaluate_predictions``); default exact-set
    accuracy. ``paired`` (``paired_results``) carries the per-mention comparison.
    """

    margin: float = GATE_MARGIN
    metric: str = GATE_METRIC
    min_n: int = MIN_GATE_MENTIONS
    alpha: float = SIGN_TEST_ALPHA

    def decide(self, candidate: dict, current: dict | None, current_version: str | None = None,
               paired: dict | None = None) -> GateResult:
        cand = candidate.get(self.metric)
        cur = (current or {}).get(self.metric)
        res = GateResult(False, self.metric, _float(cand), _float(cur), self.margin, "", current_version,
                         candidate.get("n"), candidate.get("gold_sha256"), min_n=self.min_n, alpha=self.alpha)
        if paired:
            res.only_candidate, res.only_current, res.sign_p = (paired["only_candidate"], paired["only_current"],
                                                                paired["sign_p"])
        res.reason = self._refusal(res, current) or ""
        if current is None and not res.reason:
            res.promoted, res.reason = True, "first version: no measured model serves to compare with"
        elif not res.reason:
            res.promoted, res.reason = self._compare(res)
        return res

    def _refusal(self, res: GateResult, current: dict | None) -> str | None:
        """Why the two models cannot be compared (None: they can)."""
        if res.candidate is None:
            return f"candidate has no {self.metric} on the held-out mentions"
        if current is None:
            return None
        if res.current is None:
            return f"the serving model has no {self.metric} on the held-out mentions"
        if current.get("gold_sha256") != res.gold_sha256:
            return "the serving model was measured on other held-out mentions: re-evaluate it (baseline=)"
        if (res.gold_n or 0) < self.min_n:
            return (f"too few held-out mentions to compare: {res.gold_n or 0} < {self.min_n} (below that a "
                    f"clearly worse model passes too often by chance); add labelled mentions or widen the "
                    f"evaluation split")
        return None

    def _compare(self, res: GateResult) -> tuple[bool, str]:
        who = res.current_version or "the serving model"
        delta = res.candidate - res.current
        not_worse = res.candidate >= res.current - self.margin - 1e-12
        sig_worse = (res.sign_p is not None and res.only_current > res.only_candidate and res.sign_p < self.alpha)
        head = (f"{self.metric} {res.candidate:.4f} vs {res.current:.4f} for {who} on {res.gold_n} held-out "
                f"mentions ({delta:+.4f}); {margin_words(self.margin)}")
        if res.sign_p is not None:
            sig = "significant" if res.sign_p < self.alpha else "not significant"
            head += (f"; {res.only_candidate} mentions right only with the candidate, {res.only_current} only with "
                     f"{who}, sign test p = {res.sign_p:.4f} ({sig} at {self.alpha:g})")
        else:
            head += "; no per-mention results: sign test not run"
        if not not_worse:
            return False, "worse than the gate allows: " + head
        if sig_worse:
            return False, "significantly worse by the sign test: " + head
        return True, ("better: " if delta > 0 else "not worse: ") + head


def _float(x) -> float | None:
    return None if x is None else float(x)


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
        rec = self.get(version) if version else self.serving()
        return (rec or {}).get("confidence_bands")

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


def _find(idx: dict, version: str) -> dict:
    for v in idx["versions"]:
        if v["version"] == version:
            return v
    raise KeyError(f"no version {version!r}")


def current_engine(vocabulary_name: str, root=None):
    """The current registered Engine for a vocabulary, or None (for the app's engine loader)."""
    return Registry.for_vocabulary(vocabulary_name, root).load()
