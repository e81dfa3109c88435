"""Suggestions computed in background jobs, never in a page script (termnorm.jobs targets).

* ``precompute`` (:func:`start_precompute`): every open mention of a batch
  that lacks a stored suggestion of the serving model gets one;
* ``rescore`` (:func:`start_rescore`, after a promotion or rollback): every
  open mention of a vocabulary whose stored suggestion was made by another
  model version or from another edition is suggested again, so no open
  mention keeps a retired version's suggestion;
* ``score`` (:func:`start_score`): given mentions whatever their status (the
  dashboards' gold mentions).

The job builds the engine the pages serve with ``db.serving.build_engine`` in
its own process, so the app's engine lock is never held by it, and works in
chunks of :data:`CHUNK` mentions: ``engine.suggest_batch`` with no database
transaction open, then one short write transaction per chunk, so coders'
decisions interleave (SQLite WAL). It is resumable (what is stored with the
serving version is skipped, so a re-run after a cancel or crash does only the
rest) and follows the serving version: when a promotion lands mid-run, the
engine is rebuilt and the rest is suggested with the new version.

All suggestion jobs of a vocabulary share one lock key (``suggest:<id>``):
two of them would only suggest the same mentions twice. Retraining holds
``retrain:<id>`` and runs beside them: it reads decisions and writes the
registry, they read the serving version and write suggestions; when a
retraining promotes, :func:`start_rescore` takes over from a running
pre-computation.
"""

from __future__ import annotations

import json
import sys
import time

from sqlalchemy import JSON, Column, MetaData, Table, Text, bindparam, case, func, insert, select, text, update

from db import serving, services
from db.models import Batch, Mention, SuggestionCandidate, utcnow
from db.models import Suggestion as SuggestionRow
from db.suggestions import suggestion_values
from termnorm.jobs import JobBusy, JobRunner, lock_key

PRECOMPUTE, RESCORE, SCORE = "precompute", "rescore", "score"
KINDS = (PRECOMPUTE, RESCORE, SCORE)
TARGETS = {PRECOMPUTE: "db.suggest_jobs:precompute_job", RESCORE: "db.suggest_jobs:rescore_job",
           SCORE: "db.suggest_jobs:score_job"}

#: Mentions per engine call (``suggest_batch`` batches its recall; more gains little throughput).
CHUNK = 128
#: Mentions per write transaction. A coder's decision or claim that needs SQLite's write lock meanwhile
#: waits for one: ~7 ms for 32 mentions (their ~640 candidate rows) and the fsync, ~18 ms for 128
#: (2 busy cores); see benchmarks/blocking.py.
WRITE = 32
#: Every status without a final decision: each shows its suggestion to someone (re-review and skipped
#: mentions come back to coders, flagged ones to leads).
PENDING = ("new", "suggested", services.REREVIEW, "skipped", "flagged")
#: The worker's niceness (termnorm.jobs.NICENESS is 10).
NICENESS = 10


def lock(vocabulary_id: int) -> str:
    """The lock key every suggestion job of a vocabulary holds."""
    return lock_key("suggest", int(vocabulary_id))


# ------------------------------------------------------------------------------------- starting
def start_precompute(url: str | None, batch_id: int, by: str = "", *, runner: JobRunner | None = None,
                     chunk: int = CHUNK, write: int = WRITE, registry_root=None, niceness: int = NICENESS) -> str:
    """Pre-compute the serving model's suggestions for a batch in the background; returns the job id.

    Raises ``termnorm.jobs.JobBusy`` while a suggestion job of the batch's vocabulary runs.
    """
    url = services.database_url(url)
    with services.session_scope(url) as s:
        b = s.get(Batch, int(batch_id))
        if b is None:
            raise KeyError(f"no batch {batch_id}")
        vid, name = b.vocabulary_id, b.name
    params = _params(url, vid, by, chunk, registry_root, batch_id=int(batch_id), write=int(write))
    return _start(runner, PRECOMPUTE, params, f"pre-compute suggestions · {name}", niceness,
                  batch_id=int(batch_id))


def start_rescore(url: str | None, vocabulary_id: int, by: str = "", *, runner: JobRunner | None = None,
                  chunk: int = CHUNK, registry_root=None) -> str:
    """Re-suggest every open mention of a vocabulary whose stored suggestion is not the serving model's
    (call it after a promotion or rollback); returns the job id.

    A running rescore of the vocabulary already follows the serving version: its id is returned. A running
    pre-computation (or scoring) is cancelled and its batch (its mentions) handed to the rescore, which
    finishes it with the new model.
    """
    url = services.database_url(url)
    runner = runner or JobRunner()
    full: set[int] = set()
    extra: set[int] = set()
    for _ in range(3):  # another job may take the lock between the cancel and our start
        busy = runner.active(lock=lock(vocabulary_id))
        if busy is not None and (busy.get("tags") or {}).get("kind") == RESCORE:
            return busy["id"]
        if busy is not None:
            runner.cancel(busy["id"])
            taken = _params_of(runner, busy["id"])
            full.update(int(b) for b in [taken.get("batch_id")] if b is not None)
            extra.update(int(m) for m in taken.get("mention_ids") or [])
        params = _params(url, vocabulary_id, by, chunk, registry_root, full_batches=sorted(full),
                         mention_ids=sorted(extra))
        try:
            return _start(runner, RESCORE, params, f"re-score suggestions · {_name(url, vocabulary_id)}", NICENESS)
        except JobBusy:
            continue
    raise JobBusy(f"could not start re-scoring vocabulary {vocabulary_id}: other suggestion jobs keep starting")


def start_score(url: str | None, vocabulary_id: int, mention_ids, by: str = "", *, title: str = "",
                runner: JobRunner | None = None, chunk: int = CHUNK, registry_root=None) -> str:
    """Suggest (and store) for the given mentions of a vocabulary whatever their status, e.g. gold mentions
    to score the serving model on; returns the job id."""
    url = services.database_url(url)
    params = _params(url, vocabulary_id, by, chunk, registry_root, mention_ids=[int(i) for i in mention_ids])
    return _start(runner, SCORE, params, title or f"score {len(params['mention_ids'])} mention(s)", NICENESS)


def _name(url: str, vocabulary_id: int) -> str:
    with services.session_scope(url) as s:
        return serving.vocabulary_name(s, int(vocabulary_id)) or f"vocabulary {vocabulary_id}"


def _params(url, vocabulary_id, by, chunk, registry_root, **more) -> dict:
    return {"url": url, "vocabulary_id": int(vocabulary_id), "by": by, "chunk": int(chunk),
            "registry_root": None if registry_root is None else str(registry_root), **more}


def _start(runner, kind, params, title, niceness, **tags) -> str:
    runner = runner or JobRunner()
    return runner.start(TARGETS[kind], params, title=title, niceness=niceness, lock=lock(params["vocabulary_id"]),
                        tags={"kind": kind, "vocabulary_id": params["vocabulary_id"], "by": params["by"], **tags})


def _params_of(runner: JobRunner, job_id: str) -> dict:
    from termnorm.filestore import read_json

    return (read_json(runner.folder(job_id) / "job.json") or {}).get("params") or {}


def active(runner: JobRunner, vocabulary_id: int) -> dict | None:
    """The running suggestion job of a vocabulary, if any."""
    return runner.active(lock=lock(vocabulary_id))


# ------------------------------------------------------------------------------------- what to do
def todo(s, *, batch_ids=None, mention_ids=None, version: str, edition: int | None,
         only_stale: bool = False, statuses=PENDING) -> list[tuple[int, str]]:
    """(id, text) of the mentions whose latest suggestion is missing or not ``version`` on ``edition``.

    ``only_stale``: those with a suggestion of another version / edition only (a rescore leaves
    never-suggested mentions to the page). Order: position first, so every batch's next mentions come
    first -- they are the ones coders open next.
    """
    latest = (select(func.max(SuggestionRow.id)).where(SuggestionRow.mention_id == Mention.id)
              .correlate(Mention).scalar_subquery())
    q = (select(Mention.id, Mention.text, SuggestionRow.id, SuggestionRow.model_version, SuggestionRow.edition)
         .outerjoin(SuggestionRow, SuggestionRow.id == latest).order_by(Mention.position, Mention.batch_id))
    if batch_ids is not None:
        q = q.where(Mention.batch_id.in_(list(batch_ids)))
    if mention_ids is not None:
        q = q.where(Mention.id.in_(list(mention_ids)))
    if statuses is not None:
        q = q.where(Mention.status.in_(list(statuses)))
    out = []
    for mid, mtext, sid, ver, ed in s.execute(q):
        if sid is not None and _current(ver, ed, version, edition):
            continue
        if only_stale and sid is None:
            continue
        out.append((mid, mtext))
    return out


def _current(stored_version, stored_edition, version, edition) -> bool:
    # the rule of services.latest_suggestion / EngineHolder.suggestion: an unknown stored edition passes
    return stored_version == version and (edition is None or stored_edition is None or stored_edition == edition)


def _write_first(s, mention_id: int) -> None:
    """Start the transaction with a write, so its reads see what coders committed and nothing commits in
    between (SQLite: the database's one write lock; elsewhere: the mention's row lock)."""
    if s.get_bind().dialect.name == "sqlite":
        s.execute(text("UPDATE mentions SET status = status WHERE id = :i"), {"i": int(mention_id)})
    else:
        s.execute(select(Mention.id).where(Mention.id == int(mention_id)).with_for_update(key_share=True))


def store_chunk(url: str, ids: list[int], suggestions, version: str, edition: int | None,
                statuses=PENDING, group: int = WRITE) -> int:
    """Store the suggestions, :data:`WRITE` mentions per transaction, except for mentions decided (or
    suggested with ``version`` by a coder's page) since they were chosen; returns how many were stored.

    On SQLite the rows are built before the transaction (:class:`_Rows`), so the write lock, which every
    coder's decision needs too, is held for the inserts alone (~7 ms for 32 mentions, against ~30 ms
    through ``services.store_suggestions``, whose ORM bulk insert and JSON encoding run under it).
    """
    fast = services.get_engine(url).dialect.name == "sqlite"
    stored = 0
    for at in range(0, len(ids), max(1, group)):
        part, sugs = ids[at:at + group], suggestions[at:at + group]
        rows = _Rows(part, sugs, edition) if fast else None
        with services.session_scope(url) as s:
            _job_connection(s)
            _write_first(s, part[0])
            still = {m for m, _ in todo(s, mention_ids=part, version=version, edition=edition, statuses=statuses)}
            if fast:
                stored += rows.insert(s, still)
                continue
            # a decision committed between store_suggestions' read of a status and its write would be undone
            # (the mention reopened): the row locks taken above keep it out
            keep = [(m, g) for m, g in zip(part, sugs) if m in still]
            services.store_suggestions(s, [m for m, _ in keep], [g for _, g in keep])
            stored += len(keep)
    _checkpoint(url)
    return stored


def _plain(table) -> Table:
    """``table`` with its JSON columns as text, to take JSON encoded beforehand (none at execute)."""
    return Table(table.name, MetaData(), *(Column(c.name, Text if isinstance(c.type, JSON) else c.type,
                                                  primary_key=c.primary_key) for c in table.columns))


_SUGGESTIONS = _plain(SuggestionRow.__table__)
_CANDIDATES = _plain(SuggestionCandidate.__table__)
_JSON = {c.name for t in (SuggestionRow.__table__, SuggestionCandidate.__table__) for c in t.columns
         if isinstance(c.type, JSON)}


def _encoded(values: dict) -> dict:
    # the database's own JSON encoding (db.store's engine): readable Chinese, numpy floats made plain
    return {k: json.dumps(v, ensure_ascii=False) if k in _JSON else v for k, v in values.items()}


class _Rows:
    """The rows ``services.store_suggestions`` writes for some mentions (its ``db.suggestions.suggestion_values``),
    encoded before the write transaction; :meth:`insert` writes those of the mentions still to do."""

    def __init__(self, ids, suggestions, edition):
        built = [(int(m), g, suggestion_values(int(m), g, edition)) for m, g in zip(ids, suggestions)]
        self.rows = [(m, float(g.confidence), _encoded(row), [_encoded(c) for c in cands])
                     for m, g, (row, cands) in built]

    def insert(self, s, still: set[int]) -> int:
        keep = [r for r in self.rows if r[0] in still]
        if not keep:
            return 0
        sids = s.scalars(insert(_SUGGESTIONS).returning(_SUGGESTIONS.c.id, sort_by_parameter_order=True),
                         [row for _, _, row, _ in keep]).all()
        cands = [dict(c, suggestion_id=sid) for sid, (_, _, _, cs) in zip(sids, keep) for c in cs]
        if cands:
            s.execute(insert(_CANDIDATES), cands)
        # as store_suggestions: the confidence copied (order="uncertainty"), "new" becomes "suggested" --
        # decided in SQL, so a status is never written from an earlier read
        mentions = Mention.__table__
        s.execute(update(mentions).where(mentions.c.id == bindparam("mid"))
                  .values(confidence=bindparam("conf"), updated_at=bindparam("now"),
                          status=case((mentions.c.status == "new", "suggested"), else_=mentions.c.status)),
                  [{"mid": m, "conf": conf, "now": utcnow()} for m, conf, _, _ in keep])
        return len(keep)


def _job_connection(s) -> None:
    """The job checkpoints SQLite's write-ahead log itself (:func:`_checkpoint`): left to the automatic
    checkpoint, the commit that crosses 1,000 pages copies the log into the database before it returns,
    and with a job writing that often it is as likely a coder's commit (measured: +450 ms)."""
    if s.get_bind().dialect.name == "sqlite":
        s.execute(text("PRAGMA wal_autocheckpoint=0"))


def _checkpoint(url: str) -> None:
    """A passive checkpoint, after the job's write: it waits for nobody and blocks nobody."""
    eng = services.get_engine(url)
    if eng.dialect.name == "sqlite":
        with eng.connect() as c:
            c.exec_driver_sql("PRAGMA wal_checkpoint(PASSIVE)")


# ------------------------------------------------------------------------------------- the job body
class _Serving:
    """The serving engine of a vocabulary in the job's process, rebuilt when a promotion changes it."""

    def __init__(self, url: str, vocabulary_id: int, root=None):
        self.url, self.vid, self.root = url, vocabulary_id, root
        self.key = None
        self.engine = None

    def now(self) -> tuple:
        return serving.serving_version(self.url, self.vid, self.root), serving.edition(self.url, self.vid)

    def refresh(self) -> bool:
        """Rebuild the engine if the serving version or edition changed; True when it did."""
        key = self.now()
        if key == self.key:
            return False
        self.engine = serving.build_engine(self.url, self.vid, key[0], self.root)
        self.key = key
        return True

    @property
    def version(self) -> str:
        return self.engine.model_version

    @property
    def edition(self) -> int | None:
        return self.key[1]


def _one_thread() -> None:
    """A job must leave the other cores to the app serving coders (numpy / torch would take them all)."""
    try:
        from threadpoolctl import threadpool_limits

        threadpool_limits(1)
    except ImportError:  # pragma: no cover - threadpoolctl comes with scikit-learn
        pass
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(1)


def run_chunks(params: dict, ctx, pick) -> dict:
    """Suggest and store, chunk by chunk, for what ``pick(s, version, edition)`` selects; progress on ``ctx``.

    Re-selects (and rebuilds the engine) when the serving version changes mid-run.
    """
    url, vid = params["url"], int(params["vocabulary_id"])
    chunk = max(1, int(params.get("chunk", CHUNK)))
    _one_thread()
    ctx.progress(0.0, "loading the serving model")
    srv = _Serving(url, vid, params.get("registry_root"))
    srv.refresh()
    _one_thread()  # again: building the engine may have imported torch

    def select_todo() -> list[tuple[int, str]]:
        with services.session_scope(url) as s:
            return pick(s, srv.version, srv.edition)

    pending = select_todo()
    done = stored = 0
    total = len(pending)
    versions = [srv.version]
    t0 = time.perf_counter()
    ctx.progress(0.0 if total else 1.0, f"{total:,} mention(s) to suggest with {srv.version}",
                 done=0, total=total, stored=0, rate=None, eta_s=None, model_version=srv.version)
    while pending:
        part, pending = pending[:chunk], pending[chunk:]
        with services.session_scope(url) as s:
            docs = services.mention_documents(s, [m for m, _ in part])
        sugs = srv.engine.suggest_batch([t for _, t in part], documents=[docs.get(m, "") for m, _ in part])
        stored += store_chunk(url, [m for m, _ in part], sugs, srv.version, srv.edition,
                              statuses=params.get("statuses", PENDING), group=int(params.get("write", WRITE)))
        done += len(part)
        if srv.refresh():  # promoted or rolled back meanwhile: the rest (and what was done) with the new one
            ctx.log(f"the serving model changed to {srv.version}: selecting again")
            versions.append(srv.version)
            pending = select_todo()
            total = done + len(pending)
        secs = time.perf_counter() - t0
        rate = done / secs if secs > 0 else None
        eta = len(pending) / rate if rate else None
        ctx.progress(done / total if total else 1.0,
                     f"{done:,} / {total:,} mentions · {rate or 0:,.0f}/s · ETA {_eta(eta)}",
                     done=done, total=total, stored=stored, rate=rate, eta_s=eta, model_version=srv.version)
    secs = time.perf_counter() - t0
    return {"done": done, "total": total, "stored": stored, "seconds": round(secs, 2),
            "rate": done / secs if secs > 0 and done else None, "eta_s": 0.0,
            "model_version": srv.version, "edition": srv.edition, "versions": versions}


def _eta(seconds) -> str:
    if seconds is None:
        return "–"
    m, s = divmod(int(round(seconds)), 60)
    return f"{m} min {s:02d} s" if m else f"{s} s"


def precompute_job(params: dict, ctx) -> dict:
    """termnorm.jobs target: params url, vocabulary_id, batch_id, chunk, registry_root."""
    bid = int(params["batch_id"])
    return run_chunks(params, ctx, lambda s, version, edition: todo(s, batch_ids=[bid], version=version,
                                                                    edition=edition))


def rescore_job(params: dict, ctx) -> dict:
    """termnorm.jobs target: params url, vocabulary_id; full_batches and mention_ids: the work of the
    pre-computation or scoring it took over."""
    vid = int(params["vocabulary_id"])
    full = sorted({int(b) for b in params.get("full_batches") or []})
    extra = sorted({int(m) for m in params.get("mention_ids") or []})

    def pick(s, version, edition):
        ids = [b["id"] for b in services.batches(s, vid)]
        out = todo(s, batch_ids=ids, version=version, edition=edition, only_stale=True)
        if full:
            out += todo(s, batch_ids=full, version=version, edition=edition)
        if extra:
            out += todo(s, mention_ids=extra, version=version, edition=edition, statuses=None)
        return list(dict(out).items())  # once each, in the order found

    # scoring's mentions may be decided ones (gold): then the store filter takes any status
    return run_chunks(dict(params, statuses=None) if extra else params, ctx, pick)


def score_job(params: dict, ctx) -> dict:
    """termnorm.jobs target: params url, vocabulary_id, mention_ids (any status)."""
    ids = [int(i) for i in params["mention_ids"]]
    params = dict(params, statuses=None)
    return run_chunks(params, ctx, lambda s, version, edition: todo(s, mention_ids=ids, version=version,
                                                                    edition=edition, statuses=None))
