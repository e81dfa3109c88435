"""The review app's database operations (the contract in notes/db_contract.md).

Pages call these functions and never build SQL. Every function takes a
SQLAlchemy ``Session`` first (except :func:`init_db` / :func:`session_scope`)
and every write commits before it returns, so a decision is on disk before
the UI moves on (SQLite runs in WAL mode with ``synchronous=FULL``: a commit
returns only after the write-ahead log is fsync'ed).

The training signal written here feeds the engine's retraining: accepted and
corrected terms are positives; the shown candidates a coder did not choose are
*confirmed* hard negatives (Approach B: hard negatives matter more than model
choice; Approach D: unconfirmed top-k negatives hurt without false-negative
elimination -- these are confirmed by a person). Accepted / corrected mentions
also return to the engine as coded history (Approach B history recall,
Approach E sieve) through :func:`coded_mentions`, and user synonyms through
:func:`user_synonyms`.
"""

from __future__ import annotations

import json
import threading
from datetime import timedelta, timezone
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from urllib.parse import quote

import pandas as pd
from sqlalchemy import Engine, case, create_engine, event, func, insert, select, update
from sqlalchemy.orm import Session, aliased, selectinload, sessionmaker
from sqlalchemy.pool import NullPool, StaticPool

from db import io as dbio
from db.models import (
    DECISION_ACTIONS,
    RELATIONSHIPS,
    ROLES,
    AppSetting,
    AuditLog,
    Batch,
    Decision,
    Mention,
    Suggestion as SuggestionRow,
    SuggestionCandidate,
    Synonym,
    Term,
    TrainingPair,
    User,
    Vocabulary as VocabularyRow,
    VocabularyEdition,
    utcnow,
)
from termnorm.errors import DataFormatError
from termnorm.records import Candidate, KeywordSpan, LabelledMention, Suggestion
from termnorm import settings
from termnorm.vocabulary import Vocabulary

DB_DIR = Path(__file__).resolve().parent
ALEMBIC_INI = DB_DIR / "alembic.ini"

# How many of a suggestion's ranked candidates the review screen shows. Those not
# chosen on "correct" and all of them on "reject" become confirmed hard negatives;
# candidates below were never seen, so they say nothing. 5 = the deployed setting
# of Approach D ("show the top 5, the user confirms"); the app passes ``shown=``
# to record_decision when it shows another number.
SHOWN_CANDIDATES = 5

# How long a mention served to one coder is kept from the others (next_mention); a decision ends it sooner.
CLAIM_MINUTES = 15

FINAL_STATUSES = ("decided", "auto_coded")  # counted as done by batch_progress / batches
OPEN_STATUSES = ("new", "suggested")  # the review queue proper
# mentions whose decision needs another look (retired / re-coded term, sent back by a lead): served first
REREVIEW = "rereview"
STATUS_AFTER = {"accept": "decided", "correct": "decided", "reject": "decided",
                "skip": "skipped", "flag": "flagged", "auto": "auto_coded"}
REVIEW_AFTER = {"flag": "flagged", "auto": "auto"}  # the mapping status a new decision starts with, else unchecked
# The relationship a decision gets unless the coder sets another (README, "Mapping status and relationship"):
# one term -- the coder states the mention *is* that concept; several -- the mention means more than any one
# of them, so each target is narrower than the mention; no term (reject) -- no relationship (FHIR noMap).
SINGLE_RELATIONSHIP = "equivalent"
PART_RELATIONSHIP = "source-is-broader-than-target"


class NotYourMention(ValueError):
    """An action for a mention that is not (or no longer) on this coder's screen: a stale click or key press
    after the next mention was drawn, or a mention a colleague has claimed since. Nothing is written."""


def default_relationship(terms: Sequence[str]) -> str | None:
    """The FHIR relationship of a mention to ``terms`` when the coder sets none (see PART_RELATIONSHIP)."""
    return None if not terms else SINGLE_RELATIONSHIP if len(terms) == 1 else PART_RELATIONSHIP
ORDERS = ("file", "uncertainty")

_lock = threading.Lock()
_engines: dict[str, Engine] = {}
_makers: dict[str, sessionmaker] = {}
_migrated: set[str] = set()


# ================================================================ engine / sessions
def database_url(url: str | None = None) -> str:
    """``url``, else ``db_url`` of termnorm.settings (``$TERMNORM_DB_URL``), else the SQLite file
    ``termnorm.sqlite3`` in the data directory (created when missing)."""
    if url:
        return url
    s = settings.get()
    if s.db_url:
        return s.db_url
    s.db_path.parent.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{s.db_path}"


def get_engine(url: str | None = None) -> Engine:
    """The engine for ``url``, made once per process (no migrations: see :func:`init_db`)."""
    url = database_url(url)
    with _lock:
        eng = _engines.get(url)
        if eng is None:
            eng = _engines[url] = _make_engine(url)
            _makers[url] = sessionmaker(eng, expire_on_commit=False)
        return eng


def _make_engine(url: str) -> Engine:
    dumps = lambda o: json.dumps(o, ensure_ascii=False)  # noqa: E731 - readable Chinese in the JSON columns
    if not url.startswith("sqlite"):
        return create_engine(url, json_serializer=dumps, pool_pre_ping=True)
    memory = url in ("sqlite://", "sqlite:///:memory:")
    if not memory:
        path = url.split("///", 1)[-1].split("?", 1)[0]
        if path:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
    eng = create_engine(
        url,
        json_serializer=dumps,
        # wait up to 30 s for another writer (several coders, Streamlit threads) instead of failing
        connect_args={"timeout": 30, "check_same_thread": False},
        **({"poolclass": StaticPool} if memory else {}),
    )

    @event.listens_for(eng, "connect")
    def _pragmas(dbapi_conn, _record):
        cur = dbapi_conn.cursor()
        # WAL: readers never block the writer; FULL: fsync the WAL on every commit, so a
        # committed decision survives a crash or power loss (NORMAL may lose the last ones)
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA synchronous=FULL")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.close()

    return eng


def init_db(url: str | None = None) -> Engine:
    """Create / upgrade the schema (Alembic ``upgrade head``) and return the cached engine."""
    eng = get_engine(url)
    url = database_url(url)
    with _lock:
        if url not in _migrated:
            from alembic import command
            from alembic.config import Config

            cfg = Config(str(ALEMBIC_INI))
            cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
            cfg.attributes["configure_logger"] = False  # leave the app's logging alone
            if url.startswith("sqlite") and url not in ("sqlite://", "sqlite:///:memory:"):
                _upgrade_sqlite(url, cfg, eng)
            else:
                with eng.begin() as conn:
                    cfg.attributes["connection"] = conn
                    command.upgrade(cfg, "head")
            _migrated.add(url)
    return eng


def _upgrade_sqlite(url: str, cfg, app_engine: Engine) -> None:
    """Alembic ``upgrade head`` on SQLite: all or nothing, with foreign keys off while tables are copied.

    SQLite alters a table by copying it (Alembic batch mode), which fails with foreign keys enforced once
    other tables point at its rows ("FOREIGN KEY constraint failed [SQL: DROP TABLE mentions]") -- and the
    pragma cannot change inside a transaction. Python's sqlite3 also runs DDL outside any transaction, so a
    failed migration left half-copied tables behind. Here one connection of its own turns the checks off,
    runs the whole upgrade in one real transaction (SQLAlchemy's recipe for SQLite: the driver's own
    transaction handling off, an explicit BEGIN), and the database's foreign keys are verified before the
    commit.
    """
    from alembic import command

    eng = create_engine(url, poolclass=NullPool)

    @event.listens_for(eng, "connect")
    def _setup(dbapi_conn, _record):
        dbapi_conn.isolation_level = None  # no implicit BEGIN / COMMIT: the "begin" event below emits BEGIN
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA foreign_keys=OFF")
        cur.close()

    @event.listens_for(eng, "begin")
    def _begin(conn):
        conn.exec_driver_sql("BEGIN IMMEDIATE")

    try:
        with eng.begin() as conn:
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, "head")
            broken = conn.exec_driver_sql("PRAGMA foreign_key_check").fetchall()
            if broken:
                raise RuntimeError(f"{url}: migration left rows whose references are missing: {broken[:5]}")
    finally:
        eng.dispose()
        cfg.attributes.pop("connection", None)
    app_engine.dispose()  # connections opened before the upgrade may have cached the old schema


def get_sessionmaker(url: str | None = None) -> sessionmaker:
    init_db(url)
    return _makers[database_url(url)]


@contextmanager
def session_scope(url: str | None = None) -> Iterator[Session]:
    """A session on the (migrated) database: commit on success, rollback on error."""
    s = get_sessionmaker(url)()
    try:
        yield s
        s.commit()
    except BaseException:
        s.rollback()
        raise
    finally:
        s.close()


def dispose(url: str | None = None) -> None:
    """Close and forget the cached engine (tests use it to simulate an app restart)."""
    url = database_url(url)
    with _lock:
        eng = _engines.pop(url, None)
        _makers.pop(url, None)
        _migrated.discard(url)
    if eng is not None:
        eng.dispose()


# ================================================================ users / audit
def _user(s: Session, username: str, role: str = "coder") -> User:
    username = (username or "").strip()
    if not username:
        raise ValueError("empty username")
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}; expected one of {', '.join(ROLES)}")
    u = s.scalar(select(User).where(User.username == username))
    if u is None:
        u = User(username=username, role=role)
        s.add(u)
        s.flush()
        _audit(s, u, "create", "user", u.id, {"role": role})
    return u


def ensure_user(s: Session, username: str, role: str = "coder") -> User:
    """The user ``username``, created with ``role`` if new (an existing user's role is kept)."""
    u = _user(s, username, role)
    s.commit()
    return u


def users(s: Session) -> list[dict]:
    return [{"id": u.id, "username": u.username, "role": u.role}
            for u in s.scalars(select(User).order_by(User.username))]


def _audit(s: Session, user: User | None, action: str, object_type: str, object_id: int | None,
           details: dict | None = None) -> None:
    s.add(AuditLog(user_id=user.id if user else None, username=user.username if user else "",
                   action=action, object_type=object_type, object_id=object_id, details=details or {}))


def audit_frame(s: Session, limit: int = 200) -> pd.DataFrame:
    """The latest audit entries, newest first."""
    rows = s.scalars(select(AuditLog).order_by(AuditLog.id.desc()).limit(limit))
    return pd.DataFrame([{"id": a.id, "at": a.at, "user": a.username, "action": a.action,
                          "object": a.object_type, "object_id": a.object_id, "details": a.details} for a in rows],
                        columns=["id", "at", "user", "action", "object", "object_id", "details"])


# ================================================================ app settings
def get_setting(s: Session, key: str, default=None):
    """A setting of the ``app_settings`` table (any JSON value), ``default`` when never set."""
    row = s.get(AppSetting, key)
    return default if row is None else row.value.get("value", default)


def put_setting(s: Session, key: str, value) -> None:
    """Set a setting in the caller's transaction (the caller checks the role, audits and commits)."""
    row = s.get(AppSetting, key)
    if row is None:
        s.add(AppSetting(key=key, value={"value": value}))
    else:
        row.value = {"value": value}


# ================================================================ vocabularies
def load_vocabulary(s: Session, vocab: Vocabulary, name: str) -> int:
    """Store ``vocab`` under ``name`` and return its id; idempotent by name (adds only what is new)."""
    row = s.scalar(select(VocabularyRow).where(VocabularyRow.name == name))
    inner = {c: n for c, n in vocab.code_names.items() if n not in vocab or c not in vocab.codes.get(n, [])}
    hierarchy = {"parent": dict(vocab.parent), "code_names": inner}
    new = row is None
    if new:
        row = VocabularyRow(name=name, source=vocab.source or "", language=vocab.language or "zh",
                            hierarchy=hierarchy, edition=1)
        s.add(row)
        s.flush()
        s.add(VocabularyEdition(vocabulary_id=row.id, number=1, label="", source_file=vocab.source or "",
                                diff={"counts": {"added": len(vocab)}, "first": True}))
    elif hierarchy["parent"] and not (row.hierarchy or {}).get("parent"):
        row.hierarchy = hierarchy
    known = dict(s.execute(select(Term.name, Term.id).where(Term.vocabulary_id == row.id)).all())
    fresh = [dict(term_code_fields(vocab, n), vocabulary_id=row.id, position=i, name=n, added_edition=row.edition)
             for i, n in enumerate(vocab.names) if n not in known]
    if fresh:
        s.execute(insert(Term), fresh)
        known = dict(s.execute(select(Term.name, Term.id).where(Term.vocabulary_id == row.id)).all())
    have = {tuple(r) for r in s.execute(select(Synonym.term_id, Synonym.text).join(Term, Term.id == Synonym.term_id)
                                        .where(Term.vocabulary_id == row.id))}
    syns = [{"term_id": known[n], "text": t, "source": "vocabulary"}
            for n, lst in vocab.synonyms.items() if n in known for t in dict.fromkeys(lst)
            if (known[n], t) not in have]
    if syns:
        s.execute(insert(Synonym), syns)
    if new or fresh or syns:
        _audit(s, None, "load" if new else "extend", "vocabulary", row.id,
               {"name": name, "new_terms": len(fresh), "new_synonyms": len(syns)})
    s.commit()
    return row.id


def term_code_fields(vocab: Vocabulary, name: str) -> dict:
    """A term's code columns: the export code, every code (export code first) and each code's kind."""
    codes = vocab.codes_of(name)
    return {"code": codes[0] if codes else None, "codes": codes,
            "code_kinds": {c: vocab.code_kind(c) for c in codes}}


ACTIVE = Term.retired_edition.is_(None)  # terms of the edition in force


def vocabularies(s: Session) -> list[dict]:
    """Vocabularies with their number of terms in the edition in force and that edition's number."""
    n_terms = (select(Term.vocabulary_id, func.count().label("n")).where(ACTIVE).group_by(Term.vocabulary_id)
               .subquery())
    q = (select(VocabularyRow.id, VocabularyRow.name, func.coalesce(n_terms.c.n, 0), VocabularyRow.edition,
                VocabularyRow.system_uri)
         .outerjoin(n_terms, n_terms.c.vocabulary_id == VocabularyRow.id).order_by(VocabularyRow.id))
    return [{"id": i, "name": n, "n_terms": k, "edition": e, "system_uri": u} for i, n, k, e, u in s.execute(q)]


def set_system_uri(s: Session, vocabulary_id: int, uri: str, username: str) -> None:
    """The code system URI exports name for the vocabulary ("" = a urn:termnorm one); lead or admin, audited."""
    from db import auth

    user = auth.require(s, username, "lead")
    uri = (uri or "").strip()
    if uri and (len(uri) > 500 or any(c.isspace() for c in uri) or ":" not in uri):
        raise ValueError(f"{uri!r} is not a URI (e.g. http://hl7.org/fhir/sid/icd-10-cn)")
    row = s.get(VocabularyRow, vocabulary_id)
    if row is None:
        raise KeyError(f"no vocabulary {vocabulary_id}")
    _audit(s, user, "set_system_uri", "vocabulary", vocabulary_id, {"old": row.system_uri, "new": uri})
    row.system_uri = uri
    s.commit()


def vocabulary_id(s: Session, name: str) -> int | None:
    return s.scalar(select(VocabularyRow.id).where(VocabularyRow.name == name))


def vocabulary_from_db(s: Session, vocabulary_id: int) -> Vocabulary:
    """Rebuild a termnorm Vocabulary (terms, codes, hierarchy, vocabulary *and* user synonyms)."""
    row = s.get(VocabularyRow, vocabulary_id)
    if row is None:
        raise KeyError(f"no vocabulary {vocabulary_id}")
    v = Vocabulary(name=row.name, source=row.source, language=row.language)
    for name, codes in s.execute(select(Term.name, Term.codes).where(Term.vocabulary_id == vocabulary_id, ACTIVE)
                                 .order_by(Term.position, Term.id)):
        v.add_term(name, codes)
    for name, text in s.execute(select(Term.name, Synonym.text).join(Synonym, Synonym.term_id == Term.id)
                                .where(Term.vocabulary_id == vocabulary_id, ACTIVE).order_by(Synonym.id)):
        v.add_synonym(name, text)
    h = row.hierarchy or {}
    v.parent.update(h.get("parent", {}))
    for c, n in h.get("code_names", {}).items():
        v.code_names.setdefault(c, n)
    return v


def _term_ids(s: Session, vocabulary_id: int, names: Iterable[str]) -> dict[str, int]:
    """Term ids of the names that are terms of the edition in force."""
    return {name: t.id for name, t in _terms(s, vocabulary_id, names).items()}


def _terms(s: Session, vocabulary_id: int, names: Iterable[str], active: bool = True) -> dict[str, Term]:
    names = list(names)
    if not names:
        return {}
    q = select(Term).where(Term.vocabulary_id == vocabulary_id, Term.name.in_(names))
    return {t.name: t for t in s.scalars(q.where(ACTIVE) if active else q)}


# ================================================================ batches / mentions
def create_batch(s: Session, name: str, vocabulary_id: int, mentions: Sequence[str | LabelledMention],
                 username: str | None = None, source_file: str = "") -> int:
    """A batch of mentions in the given order (``position`` 1..n); returns its id.

    Items may be strings or LabelledMention (gold terms and source row kept).
    Raises DataFormatError(source, item number, problem) on an empty or too long mention.
    """
    if s.get(VocabularyRow, vocabulary_id) is None:
        raise KeyError(f"no vocabulary {vocabulary_id}")
    items = [m if isinstance(m, LabelledMention) else LabelledMention(str(m) if m is not None else "", [])
             for m in mentions]
    for i, m in enumerate(items, start=1):
        problem = dbio.validate_mention(m.text)
        if problem:
            raise DataFormatError(source_file or name, m.row or i, problem)
    user = _user(s, username) if username else None
    b = Batch(name=name, vocabulary_id=vocabulary_id, source_file=source_file,
              created_by_id=user.id if user else None)
    s.add(b)
    s.flush()
    now = utcnow()
    if items:
        s.execute(insert(Mention), [
            {"batch_id": b.id, "position": i, "text": m.text.strip(), "gold_terms": list(m.terms) or None,
             "source_row": m.row, "status": "new", "updated_at": now}
            for i, m in enumerate(items, start=1)])
    if any(m.terms for m in items):  # labelled mentions take their side of the evaluation split (db.learning)
        from db import learning  # db.learning builds on this module

        learning.assign_unassigned(s, vocabulary_id)
    _audit(s, user, "create", "batch", b.id, {"name": name, "n_mentions": len(items), "source_file": source_file})
    s.commit()
    return b.id


def import_mentions(s: Session, path, batch_name: str, vocabulary_id: int,
                    username: str | None = None) -> dbio.ImportReport:
    """Import a CSV / XLSX / CHIP-CDN JSON file (a path or an uploaded file) as a new batch.

    Bad rows are reported (file, row, problem) and skipped; good rows are
    imported, with notices on what was cleaned and on gold terms the vocabulary
    lacks. No batch is created when no row is good. Never raises for bad content.
    """
    read = dbio.read_mentions_report(path)
    notices = sorted(read.notices + _unknown_gold_notices(s, vocabulary_id, read.file, read.good),
                     key=lambda n: n.row or 0)
    report = dbio.ImportReport(file=read.file, errors=read.errors, notices=notices,
                               n_read=read.n_read, n_rejected=read.n_rejected)
    if read.good:
        report.batch_id = create_batch(s, batch_name, vocabulary_id, read.good, username=username,
                                       source_file=read.file)
        report.n_imported = len(read.good)
    if report.errors or report.notices:
        user = _user(s, username) if username else None
        _audit(s, user, "import_problems", "batch", report.batch_id,
               {"file": read.file, "n_read": report.n_read, "n_ok": report.n_imported,
                "n_rejected": report.n_rejected, "problems": [list(e) for e in report.errors[:200]],
                "notices": [list(n) for n in report.notices[:200]]})
        s.commit()
    return report


def _unknown_gold_notices(s: Session, vocabulary_id: int, fname: str,
                          mentions: Sequence[LabelledMention]) -> list[dbio.ImportProblem]:
    """A notice per mention whose gold terms include names the vocabulary does not have."""
    if not any(m.terms for m in mentions):
        return []
    q = select(Term.name).where(Term.vocabulary_id == vocabulary_id)
    # a retired term is no longer an answer the engine gives (the column comes with migration 0004)
    retired = getattr(Term, "retired_edition", None)
    if retired is not None:
        q = q.where(retired.is_(None))
    names = set(s.scalars(q))
    vocab = s.get(VocabularyRow, vocabulary_id)
    vname = vocab.name if vocab is not None else str(vocabulary_id)
    out = []
    for m in mentions:
        unknown = [t for t in m.terms if t not in names]
        if unknown:
            listed = ", ".join(repr(t) for t in unknown)
            out.append(dbio.ImportProblem(fname, m.row, f"gold term{'s' if len(unknown) > 1 else ''} not in "
                                          f"vocabulary {vname}: {listed} (kept as given; the engine cannot "
                                          f"suggest {'them' if len(unknown) > 1 else 'it'})"))
    return out


def batches(s: Session, vocabulary_id: int | None = None) -> list[dict]:
    """Batches with their size and how many mentions are done (decided or auto-coded)."""
    counts = (select(Mention.batch_id, func.count().label("n"),
                     func.sum(case((Mention.status.in_(FINAL_STATUSES), 1), else_=0)).label("done"))
              .group_by(Mention.batch_id).subquery())
    q = (select(Batch.id, Batch.name, Batch.vocabulary_id, Batch.created_at,
                func.coalesce(counts.c.n, 0), func.coalesce(counts.c.done, 0))
         .outerjoin(counts, counts.c.batch_id == Batch.id).order_by(Batch.id))
    if vocabulary_id is not None:
        q = q.where(Batch.vocabulary_id == vocabulary_id)
    return [{"id": i, "name": n, "vocabulary_id": v, "created_at": at, "n_mentions": k, "n_done": d}
            for i, n, v, at, k, d in s.execute(q)]


def batch_progress(s: Session, batch_id: int) -> tuple[int, int]:
    """(mentions decided or auto-coded, all mentions) of a batch."""
    n, done = s.execute(select(func.count(), func.sum(case((Mention.status.in_(FINAL_STATUSES), 1), else_=0)))
                        .where(Mention.batch_id == batch_id)).one()
    return int(done or 0), int(n or 0)


def _mention_dict(m: Mention) -> dict:
    return {"id": m.id, "batch_id": m.batch_id, "position": m.position, "text": m.text, "status": m.status,
            "gold_terms": list(m.gold_terms or []), "source_row": m.source_row, "confidence": m.confidence}


def mention(s: Session, mention_id: int) -> dict:
    """A mention with its batch / vocabulary, latest decision and decision history (oldest first)."""
    m = s.get(Mention, mention_id)
    if m is None:
        raise KeyError(f"no mention {mention_id}")
    out = _mention_dict(m)
    out["vocabulary_id"] = m.batch.vocabulary_id
    out["batch"] = m.batch.name
    hist = s.execute(select(Decision, User.username).join(User, User.id == Decision.user_id)
                     .where(Decision.mention_id == mention_id).order_by(Decision.id)).all()
    out["decisions"] = [{"id": d.id, "user": u, "at": d.at, "action": d.action, "terms": list(d.terms),
                         "codes": list(d.codes or []), "term_ids": list(d.term_ids or []),
                         "relationship": d.relationship, "review_status": d.review_status,
                         "review_note": d.review_note, "edition": d.edition,
                         "comment": d.comment, "seconds": d.seconds, "model_version": d.model_version,
                         "is_latest": d.is_latest} for d, u in hist]
    out["decision"] = next((d for d in out["decisions"] if d["is_latest"]), None)
    return out


def mentions(s: Session, batch_id: int, status: str | Sequence[str] | None = None,
             limit: int | None = None) -> list[dict]:
    """Mentions of a batch in file order, optionally only those with the given status(es), at most ``limit``."""
    q = select(Mention).where(Mention.batch_id == batch_id).order_by(Mention.position)
    if status is not None:
        q = q.where(Mention.status.in_([status] if isinstance(status, str) else list(status)))
    if limit is not None:
        q = q.limit(int(limit))
    return [_mention_dict(m) for m in s.scalars(q)]


def next_mention(s: Session, batch_id: int, username: str, order: str = "file", claim: bool = True) -> dict | None:
    """The mention to review next, or None when the batch is finished.

    Mentions sent to re-review first (their decision's term was retired or
    re-coded by a new vocabulary edition, or a lead sent it back); then the
    first mention in file order without a final decision (status new or
    suggested); then the skipped ones (also in file order), so skipping never
    loses a mention. Flagged mentions wait for a lead: they are queued (after the
    skipped ones) only for users with role lead / admin. Because the queue is
    derived from the committed statuses, a restarted app resumes where the
    coder was. ``order="uncertainty"`` serves the least confident stored
    suggestion first (active learning), unsuggested mentions last.

    Coders sharing a batch get different mentions: the mention served is
    *claimed* for ``username`` (committed), and mentions other coders claimed
    less than :data:`CLAIM_MINUTES` ago are passed over. A coder's own claimed
    mention comes first, so the screen does not change under them; a decision
    releases the claim, and an abandoned screen's claim lapses. ``claim=False``
    only looks (nothing written, other coders' claims still respected).
    """
    if order not in ORDERS:
        raise ValueError(f"unknown order {order!r}; expected one of {', '.join(ORDERS)}")
    role = s.scalar(select(User.role).where(User.username == username))
    later = ("skipped", "flagged") if role in ("lead", "admin") else ("skipped",)
    for _ in range(5):  # another coder may claim the same mention between our read and our write
        now = utcnow()
        cutoff = now - timedelta(minutes=CLAIM_MINUTES)
        mine = (Mention.claimed_by == username) & (Mention.claimed_at >= cutoff)
        free = Mention.claimed_by.is_(None) | (Mention.claimed_by == username) | (Mention.claimed_at < cutoff)
        tier = case((Mention.status == REREVIEW, 0), (Mention.status.in_(OPEN_STATUSES), 1),
                    (Mention.status == "skipped", 2), else_=3)
        keys = [case((mine, 0), else_=1), tier]
        if order == "uncertainty":
            keys += [Mention.confidence.is_(None), Mention.confidence]
        q = (select(Mention.id, Mention.text, Mention.position, Mention.status, Mention.claimed_by,
                    Mention.claimed_at)
             .where(Mention.batch_id == batch_id, Mention.status.in_((REREVIEW,) + OPEN_STATUSES + later), free)
             .order_by(*keys, Mention.position).limit(1))
        r = s.execute(q).first()
        if r is None:
            return None
        out = {"id": r.id, "text": r.text, "position": r.position, "status": r.status}
        fresh = now - timedelta(minutes=CLAIM_MINUTES / 2)
        if not claim or (r.claimed_by == username and _aware(r.claimed_at) >= fresh):
            return out  # looking only, or our own claim is recent: no write on every redraw
        try:
            won = s.execute(update(Mention).where(Mention.id == r.id, free)
                            .values(claimed_by=username, claimed_at=now)).rowcount
            if won:  # one claim per coder and batch: the mention left behind is free again
                s.execute(update(Mention).where(Mention.batch_id == batch_id, Mention.id != r.id,
                                                Mention.claimed_by == username)
                          .values(claimed_by=None, claimed_at=None))
            s.commit()
        except BaseException:
            s.rollback()
            raise
        if won:
            return out
    return None


def _aware(t):
    """SQLite hands timestamps back without their zone; they are stored in UTC."""
    return t if t is None or t.tzinfo is not None else t.replace(tzinfo=timezone.utc)


def claimed_by_others(s: Session, batch_id: int, username: str) -> int:
    """How many open mentions of the batch other coders have on their screens now."""
    cutoff = utcnow() - timedelta(minutes=CLAIM_MINUTES)
    return s.scalar(select(func.count()).select_from(Mention).where(
        Mention.batch_id == batch_id, Mention.claimed_by.is_not(None), Mention.claimed_by != username,
        Mention.claimed_at >= cutoff, Mention.status.not_in(FINAL_STATUSES))) or 0


# ================================================================ suggestions
def _suggestion_values(mention_id: int, sug: Suggestion, edition: int | None) -> tuple[dict, list[dict]]:
    row = {"mention_id": mention_id, "model_version": str(sug.model_version), "edition": edition,
           "created_at": utcnow(),
           "predicted_count": int(sug.predicted_count), "confidence": float(sug.confidence),
           "chosen": [str(t) for t in sug.chosen],
           "keywords": [asdict(k) if isinstance(k, KeywordSpan) else dict(k) for k in sug.keywords],
           "parts": [str(p) for p in sug.parts]}
    cands = [{"rank": r, "term": str(c.term), "term_index": None if c.term_id is None else int(c.term_id),
              "codes": [str(x) for x in c.codes], "score": float(c.score),
              "scores": {str(k): float(v) for k, v in (c.scores or {}).items()}}  # numpy floats -> JSON
             for r, c in enumerate(sug.candidates, start=1)]
    return row, cands


def store_suggestions(s: Session, mention_ids: Sequence[int], suggestions: Sequence[Suggestion]) -> None:
    """Store the engine's suggestions for many mentions in one transaction (one fsync, not one per mention)."""
    mention_ids = [int(i) for i in mention_ids]
    if len(mention_ids) != len(suggestions):
        raise ValueError("mention_ids and suggestions differ in length")
    if not mention_ids:
        return
    ms = {m.id: m for m in s.scalars(select(Mention).where(Mention.id.in_(mention_ids)))}
    missing = [i for i in mention_ids if i not in ms]
    if missing:
        raise KeyError(f"no mention {missing[0]}")
    editions = dict(s.execute(select(Batch.id, VocabularyRow.edition).join(VocabularyRow)
                              .where(Batch.id.in_({m.batch_id for m in ms.values()}))).all())
    values = [_suggestion_values(mid, sug, editions.get(ms[mid].batch_id)) for mid, sug in zip(mention_ids, suggestions)]
    # bulk INSERT ... RETURNING (ids in parameter order): ~10x faster than one ORM object per candidate
    ids = s.scalars(insert(SuggestionRow).returning(SuggestionRow.id, sort_by_parameter_order=True),
                    [v for v, _ in values]).all()
    cands = [dict(c, suggestion_id=sid) for sid, (_, cs) in zip(ids, values) for c in cs]
    if cands:
        s.execute(insert(SuggestionCandidate), cands)
    # conditional UPDATEs, not the statuses read above: a coder may have decided one of these mentions since
    # (a background job or the page's prepare thread suggests beside the coders), and writing "suggested"
    # from that read would reopen it
    s.execute(update(Mention).execution_options(synchronize_session=False),
              [{"id": mid, "confidence": float(sug.confidence)} for mid, sug in zip(mention_ids, suggestions)])
    s.execute(update(Mention).where(Mention.id.in_(mention_ids), Mention.status == "new").values(status="suggested")
              .execution_options(synchronize_session=False))
    s.commit()


def store_suggestion(s: Session, mention_id: int, suggestion: Suggestion) -> None:
    """Store the ranked candidates with every score and the model version (the newest one is used)."""
    store_suggestions(s, [mention_id], [suggestion])


def latest_suggestion_versions(s: Session, mention_ids: Sequence[int]) -> dict[int, tuple[str, int | None]]:
    """(model version, edition) of each mention's newest stored suggestion; mentions without one are absent."""
    ids = [int(i) for i in mention_ids]
    if not ids:
        return {}
    latest = (select(func.max(SuggestionRow.id).label("sid")).where(SuggestionRow.mention_id.in_(ids))
              .group_by(SuggestionRow.mention_id).subquery())
    q = select(SuggestionRow.mention_id, SuggestionRow.model_version, SuggestionRow.edition).join(
        latest, latest.c.sid == SuggestionRow.id)
    return {m: (v, e) for m, v, e in s.execute(q)}


def _latest_suggestion_row(s: Session, mention_id: int) -> SuggestionRow | None:
    return s.scalar(select(SuggestionRow).where(SuggestionRow.mention_id == mention_id)
                    .options(selectinload(SuggestionRow.candidates)).order_by(SuggestionRow.id.desc()).limit(1))


def latest_suggestion(s: Session, mention_id: int, edition: int | None = None) -> Suggestion | None:
    """The newest stored suggestion for the mention, as the engine's Suggestion record.

    With ``edition`` (the vocabulary's edition in force): None when the stored one was made from another
    edition, whose terms may since have been retired or re-coded -- the caller suggests again.
    """
    row = _latest_suggestion_row(s, mention_id)
    if row is None or (edition is not None and row.edition is not None and row.edition != edition):
        return None
    text = s.scalar(select(Mention.text).where(Mention.id == mention_id))
    cands = [Candidate(term_id=-1 if c.term_index is None else c.term_index, term=c.term, score=c.score,
                       scores=dict(c.scores), codes=list(c.codes)) for c in row.candidates]
    return Suggestion(mention=text, candidates=cands, predicted_count=row.predicted_count, chosen=list(row.chosen),
                      confidence=row.confidence, keywords=[KeywordSpan(**k) for k in row.keywords],
                      model_version=row.model_version, parts=list(row.parts))


# ================================================================ decisions
def _clean_terms(terms) -> list[str]:
    if isinstance(terms, str):
        terms = [terms]
    out: list[str] = []
    for t in terms or ():
        t = str(t).strip()
        if t and t not in out:
            out.append(t)
    return out


def record_decision(s: Session, mention_id: int, username: str, action: str, terms: Sequence[str] = (),
                    comment: str = "", seconds: float = 0.0, *, shown: int | None = None,
                    codes: dict[str, str] | None = None, relationship: str | None = None,
                    require_claim: bool = False) -> int:
    """Record a coder's decision atomically and durably; returns the decision id.

    One transaction writes the Decision, its TrainingPairs, the mention's new
    status and an AuditLog entry, and commits (fsync'ed) before returning; on
    any error nothing is written.

    * ``accept``  -- ``terms`` (default: the suggestion's chosen terms) become
      positives (kind ``accepted``);
    * ``correct`` -- ``terms`` (required) become positives (``corrected``); the
      shown candidates not chosen become hard negatives (``rejected_candidate``);
    * ``reject``  -- none of the shown candidates fits: all of them become hard
      negatives; no terms;
    * ``skip`` / ``flag`` -- only the comment is kept (no training pairs).

    ``shown`` = how many top candidates the screen displayed (default
    SHOWN_CANDIDATES). A new decision on a mention supersedes the previous one
    (its ``is_latest`` and its training pairs' ``active`` are cleared; the
    history stays).

    Terms must be terms of the vocabulary's edition in force; the decision keeps
    each one's id and the code to export: ``codes[term]`` when the coder picked
    one (it must be a code of that term), else the term's export code (the most
    specific). ``relationship`` is a FHIR concept-map-relationship code
    (default :func:`default_relationship`). ``require_claim`` (the coding page):
    refuse with :class:`NotYourMention` unless the mention is the one this coder
    has claimed -- a click or key press that reaches the server after the next
    mention was drawn must not land on the previous one.
    """
    if action not in DECISION_ACTIONS or action == "auto":
        raise ValueError(f"unknown action {action!r}; expected accept, correct, reject, skip or flag")
    terms = _clean_terms(terms)
    if relationship is not None and relationship not in RELATIONSHIPS:
        raise ValueError(f"unknown relationship {relationship!r}; expected one of {', '.join(RELATIONSHIPS)}")
    try:
        if require_claim:
            # The claim ends here, in one conditional UPDATE: the first write of the transaction, so two
            # deciders of one mention are serialised by the database (SQLite's write lock, a row lock on
            # PostgreSQL) and the second finds the claim gone. Streamlit may run a late click's callback in a
            # second script thread while the first one is still writing: a read-then-check would let both in.
            released = s.execute(update(Mention).where(Mention.id == mention_id,
                                                       Mention.claimed_by == (username or "").strip())
                                 .values(claimed_by=None, claimed_at=None)).rowcount
            if not released:
                m = s.get(Mention, mention_id)
                if m is None:
                    raise KeyError(f"no mention {mention_id}")
                raise NotYourMention(_not_yours(s, m))
        m = s.get(Mention, mention_id, with_for_update=True)  # serialises decisions on PostgreSQL
        if m is None:
            raise KeyError(f"no mention {mention_id}")
        vocab_id = m.batch.vocabulary_id
        user = _user(s, username)
        sug = _latest_suggestion_row(s, mention_id)
        if action == "accept" and not terms:
            if sug is None or not sug.chosen:
                raise ValueError("accept needs terms: this mention has no suggestion to accept")
            terms = list(sug.chosen)
        if action == "correct" and not terms:
            raise ValueError("correct needs the chosen terms")
        if action == "reject" and terms:
            raise ValueError("reject takes no terms (use correct to give the right ones)")
        rows = _terms(s, vocab_id, terms) if action in ("accept", "correct") else {}
        unknown = [t for t in terms if t not in rows] if action in ("accept", "correct") else []
        if unknown:
            raise ValueError(f"not terms of the batch's vocabulary (edition in force): {', '.join(unknown)}")
        chosen_codes = [_chosen_code(rows[t], (codes or {}).get(t)) for t in terms] if rows else []
        n_shown = SHOWN_CANDIDATES if shown is None else max(0, int(shown))
        shown_terms = list(dict.fromkeys(c.term for c in sug.candidates[:n_shown])) if sug else []
        previous_status = m.status
        d = Decision(mention_id=m.id, user_id=user.id, suggestion_id=sug.id if sug else None, action=action,
                     terms=terms, term_ids=[rows[t].id for t in terms] if rows else [], codes=chosen_codes,
                     edition=m.batch.vocabulary.edition,
                     relationship=(relationship or default_relationship(terms)) if rows else None,
                     review_status=REVIEW_AFTER.get(action, "unchecked"),
                     comment=(comment or "").strip(), seconds=max(0.0, float(seconds or 0.0)),
                     model_version=sug.model_version if sug else None, is_latest=True)
        s.add(d)
        s.flush()
        pairs = _supersede_and_pairs(s, m, d, vocab_id, terms, shown_terms)
        m.status = STATUS_AFTER[action]
        m.claimed_by = m.claimed_at = None  # decided (or skipped): back to the queue's rules
        _audit(s, user, action, "mention", m.id,
               {"decision_id": d.id, "terms": terms, "codes": chosen_codes, "relationship": d.relationship,
                "comment": d.comment, "previous_status": previous_status,
                "model_version": d.model_version, "positives": sum(p["label"] for p in pairs),
                "hard_negatives": sum(1 - p["label"] for p in pairs)})
        s.commit()
    except BaseException:
        s.rollback()
        raise
    return d.id


def _chosen_code(term: Term, picked: str | None) -> str | None:
    """The code exported for ``term``: the coder's pick (one of the term's codes) or the term's export code."""
    if picked is None or picked == "":
        return term.code
    if picked not in (term.codes or []):
        raise ValueError(f"{picked!r} is not a code of {term.name!r} (its codes: {', '.join(term.codes or [])})")
    return picked


def _not_yours(s: Session, m: Mention) -> str:
    """Why an action on ``m`` is refused: what the coder should know about the mention now."""
    latest = s.scalar(select(Decision).where(Decision.mention_id == m.id, Decision.is_latest).limit(1))
    if m.claimed_by:
        return f"mention #{m.position} is now on {m.claimed_by}'s screen: nothing saved"
    if latest is not None:
        return (f"mention #{m.position} was already decided ({latest.action} by {latest.user.username}): "
                "nothing saved for it; the page shows the next mention")
    return f"mention #{m.position} is not on your screen any more: nothing saved"


def _supersede_and_pairs(s: Session, m: Mention, d: Decision, vocab_id: int, terms: list[str],
                         shown_terms: list[str]) -> list[dict]:
    # "the latest wins": older decisions and their pairs stay for history but stop counting.
    # Updating rows *other than* the new one after inserting it stays right when two coders
    # decide the same mention at once (SQLite serialises the two write transactions).
    s.execute(update(Decision).where(Decision.mention_id == m.id, Decision.id != d.id, Decision.is_latest)
              .values(is_latest=False))
    s.execute(update(TrainingPair).where(TrainingPair.mention_id == m.id, TrainingPair.decision_id != d.id,
                                         TrainingPair.active).values(active=False))
    kind = {"accept": "accepted", "correct": "corrected"}.get(d.action)
    pairs = [(t, 1, kind) for t in terms] if kind else []
    if d.action == "correct":
        pairs += [(t, 0, "rejected_candidate") for t in shown_terms if t not in terms]
    elif d.action == "reject":
        pairs += [(t, 0, "rejected_candidate") for t in shown_terms]
    ids = _term_ids(s, vocab_id, [t for t, _, _ in pairs])
    rows = [{"vocabulary_id": vocab_id, "mention_id": m.id, "decision_id": d.id, "mention_text": m.text,
             "term": t, "term_id": ids.get(t), "label": lab, "kind": k, "active": True,
             "created_at": d.at or utcnow()}
            for t, lab, k in pairs]
    if rows:
        s.execute(insert(TrainingPair), rows)
    return rows


def auto_code(s: Session, batch_id: int, min_confidence: float, username: str, *, model_version: str,
              dry_run: bool = False, commit: bool = True) -> dict:
    """Accept the batch's stored suggestions of the serving model version with confidence >= ``min_confidence``.

    The rules hold here, whatever a page shows:

    * ``username`` must be a lead or above (db.auth.require: PermissionError, nothing written);
    * only mentions still open (new / suggested), and not those sent back as an audit sample (their latest
      decision is the auto-code itself: they wait for a coder), nor those on a coder's screen now (claimed
      less than CLAIM_MINUTES ago: the coder's decision would otherwise be refused as "already decided");
    * only a latest stored suggestion made by ``model_version``, the version serving the vocabulary: the
      threshold was measured on its held-out mentions, and another version's confidence is on another
      scale. Those mentions are counted (``skipped_version``: re-score them first) and never touched;
    * a suggestion with no chosen term, or a term retired by a newer vocabulary edition, is skipped
      (``skipped_terms``).

    Each accepted mention gets an ``auto`` decision (status ``auto_coded``, review status ``auto``) with
    the suggestion's terms, their codes and the edition in force. No training pairs: the engine's own
    guesses are not confirmed labels. ``dry_run``: count only (the page's preview, by the same rules);
    ``commit=False``: the caller commits (termnorm.active.auto_code_with_audit). Returns the counts
    ``open``, ``unsuggested``, ``awaiting_audit``, ``on_screen``, ``skipped_version``, ``below_threshold``,
    ``skipped_terms``, ``auto_coded`` and the auto-coded ``mention_ids``.
    """
    from db import auth  # db.auth imports this module

    user = auth.require(s, username, "lead")
    threshold = float(min_confidence)
    if not 0.0 <= threshold <= 1.0:
        raise ValueError(f"min_confidence must lie in [0, 1], not {min_confidence!r}")
    if not model_version:
        raise ValueError("model_version is required: the serving version's name (only its suggestions are auto-coded)")
    batch = s.get(Batch, batch_id)
    if batch is None:
        raise KeyError(f"no batch {batch_id}")
    latest = (select(SuggestionRow.mention_id, func.max(SuggestionRow.id).label("sid"))
              .group_by(SuggestionRow.mention_id).subquery())
    in_audit = Mention.id.in_(select(Decision.mention_id).where(Decision.is_latest, Decision.action == "auto"))
    on_screen = Mention.claimed_by.is_not(None) & (Mention.claimed_at >= utcnow() - timedelta(minutes=CLAIM_MINUTES))
    base = (select(Mention.id).select_from(Mention).outerjoin(latest, latest.c.mention_id == Mention.id)
            .outerjoin(SuggestionRow, SuggestionRow.id == latest.c.sid)
            .where(Mention.batch_id == batch_id, Mention.status.in_(OPEN_STATUSES)))
    out = dict.fromkeys(("open", "unsuggested", "awaiting_audit", "on_screen", "skipped_version", "below_threshold",
                         "skipped_terms", "auto_coded"), 0)
    for _, sid, version, conf, audit, shown in s.execute(base.add_columns(
            SuggestionRow.id, SuggestionRow.model_version, SuggestionRow.confidence, in_audit, on_screen)):
        out["open"] += 1
        key = ("awaiting_audit" if audit else "on_screen" if shown else "unsuggested" if sid is None
               else "skipped_version" if version != model_version
               else "below_threshold" if conf < threshold else None)
        if key:
            out[key] += 1
    rows = s.execute(base.with_only_columns(Mention, SuggestionRow)
                     .where(SuggestionRow.model_version == model_version, SuggestionRow.confidence >= threshold,
                            ~in_audit, ~on_screen).order_by(Mention.position)).all()  # file order on every backend
    terms = _terms(s, batch.vocabulary_id, {t for _, sug in rows for t in sug.chosen})
    ids = []
    for m, sug in rows:
        if not sug.chosen or any(t not in terms for t in sug.chosen):  # empty, or a term since retired
            out["skipped_terms"] += 1
            continue
        ids.append(m.id)
        if dry_run:
            continue
        d = Decision(mention_id=m.id, user_id=user.id, suggestion_id=sug.id, action="auto", terms=list(sug.chosen),
                     term_ids=[terms[t].id for t in sug.chosen], codes=[terms[t].code for t in sug.chosen],
                     edition=batch.vocabulary.edition, relationship=default_relationship(sug.chosen),
                     review_status="auto", comment="", seconds=0.0, model_version=sug.model_version,
                     is_latest=True)
        s.add(d)
        s.flush()
        _supersede_and_pairs(s, m, d, batch.vocabulary_id, [], [])
        m.status = "auto_coded"
    out["auto_coded"] = len(ids)
    if not dry_run:
        _audit(s, user, "auto_code", "batch", batch_id,
               {"min_confidence": threshold, "model_version": model_version, **out})
        if commit:
            s.commit()
    return {**out, "mention_ids": ids}


# ================================================================ synonyms / history for the engine
def add_synonym(s: Session, vocabulary_id: int, term: str, synonym: str, username: str) -> bool:
    """Store ``synonym`` of ``term`` (by ``username``) plus a positive training pair of kind ``synonym``.

    Returns False (and writes nothing) if the synonym is already known. Raises
    KeyError for a term not in the vocabulary, ValueError for an empty synonym.
    """
    synonym = (synonym or "").strip()
    term = (term or "").strip()
    if not synonym or synonym == term:
        raise ValueError("a synonym must be a non-empty text different from the term")
    term_id = _term_ids(s, vocabulary_id, [term]).get(term)
    if term_id is None:
        raise KeyError(f"{term!r} is not a term of vocabulary {vocabulary_id}")
    if s.scalar(select(Synonym.id).where(Synonym.term_id == term_id, Synonym.text == synonym)) is not None:
        return False
    user = _user(s, username)
    syn = Synonym(term_id=term_id, text=synonym, source="user", added_by_id=user.id)
    s.add(syn)
    s.flush()
    s.add(TrainingPair(vocabulary_id=vocabulary_id, synonym_id=syn.id, mention_text=synonym, term=term, label=1,
                       kind="synonym", active=True))
    _audit(s, user, "add_synonym", "term", term_id, {"term": term, "synonym": synonym})
    s.commit()
    return True


def user_synonyms(s: Session, vocabulary_id: int) -> list[tuple[str, str]]:
    """(term, synonym) pairs added by users, oldest first (replay into engine.add_synonym at start-up)."""
    q = (select(Term.name, Synonym.text).join(Synonym, Synonym.term_id == Term.id)
         .where(Term.vocabulary_id == vocabulary_id, Synonym.source == "user").order_by(Synonym.id))
    return [tuple(r) for r in s.execute(q)]


def term_synonyms(s: Session, vocabulary_id: int, term: str) -> list[dict]:
    """Every synonym of one term with its source (vocabulary / user), who added it and when."""
    q = (select(Synonym.text, Synonym.source, User.username, Synonym.created_at)
         .join(Term, Term.id == Synonym.term_id).outerjoin(User, User.id == Synonym.added_by_id)
         .where(Term.vocabulary_id == vocabulary_id, Term.name == term).order_by(Synonym.id))
    return [{"synonym": t, "source": src, "added_by": u or "", "at": at} for t, src, u, at in s.execute(q)]


def coded_mentions(s: Session, vocabulary_id: int) -> list[LabelledMention]:
    """Mentions whose latest decision accepted or corrected terms: the engine's coded history.

    One per distinct mention text (the most recent decision wins). Auto-coded
    mentions are left out: feeding the engine its own unconfirmed output back as
    history would only reinforce its mistakes. So are decisions sent to
    re-review: their term was retired or re-coded, or a lead questioned them
    (the engine would otherwise put a retired term back among its terms:
    ``Engine`` adds the coded history's names to the vocabulary).
    """
    q = (select(Mention.text, Decision.terms, Mention.source_row)
         .join(Decision, Decision.mention_id == Mention.id).join(Batch, Batch.id == Mention.batch_id)
         .where(Batch.vocabulary_id == vocabulary_id, Decision.is_latest,
                Decision.action.in_(("accept", "correct")), Decision.review_status != "needs_rereview")
         .order_by(Decision.id))
    latest: dict[str, LabelledMention] = {}
    for text, terms, row in s.execute(q):
        latest.pop(text, None)
        latest[text] = LabelledMention(text, list(terms), row)
    return list(latest.values())


def training_pairs_frame(s: Session, vocabulary_id: int | None = None, active_only: bool = True) -> pd.DataFrame:
    """Confirmed (mention, term, label, kind) pairs for retraining the engine."""
    q = select(TrainingPair).order_by(TrainingPair.id)
    if vocabulary_id is not None:
        q = q.where(TrainingPair.vocabulary_id == vocabulary_id)
    if active_only:
        q = q.where(TrainingPair.active)
    cols = ["id", "vocabulary_id", "mention_id", "decision_id", "mention", "term", "label", "kind", "active",
            "created_at"]
    return pd.DataFrame([[p.id, p.vocabulary_id, p.mention_id, p.decision_id, p.mention_text, p.term, p.label,
                          p.kind, p.active, p.created_at] for p in s.scalars(q)], columns=cols)


# ================================================================ reporting / export
DECISION_COLUMNS = ["decision_id", "batch_id", "batch", "vocabulary", "mention_id", "position", "mention", "action",
                    "terms", "codes", "term_ids", "code_system", "edition", "relationship", "review_status",
                    "reviewed_by", "reviewed_at", "review_note", "user", "at", "seconds", "comment",
                    "model_version", "suggested", "confidence", "gold_terms", "is_latest"]


def code_system(name: str, system_uri: str = "") -> str:
    """The URI naming a vocabulary's code system in exports: the one set for it, else ``urn:termnorm:vocabulary:<name>``
    (local editions such as ICD-10 北京临床版 are not the HL7 ICD systems, so no official URI is claimed)."""
    return system_uri or f"urn:termnorm:vocabulary:{quote(name, safe='')}"


def decisions_frame(s: Session, batch_id: int | None = None, history: bool = False) -> pd.DataFrame:
    """One row per mention's latest decision (``history=True``: every decision), in batch / file order.

    ``terms``, ``codes`` (the code exported for each term: the one the coder
    picked, else the term's most specific), ``term_ids``, ``suggested`` and
    ``gold_terms`` are lists; ``code_system`` and ``edition`` (the edition's
    label, else its number) say where the codes come from; ``relationship`` and
    ``review_status`` are the mapping's; ``confidence`` / ``suggested`` are
    those of the suggestion the decision answered.
    """
    reviewer = aliased(User)
    q = (select(Decision, Mention, Batch.name, VocabularyRow.id, VocabularyRow.name, VocabularyRow.system_uri,
                User.username, reviewer.username, SuggestionRow.chosen, SuggestionRow.confidence)
         .join(Mention, Mention.id == Decision.mention_id).join(Batch, Batch.id == Mention.batch_id)
         .join(VocabularyRow, VocabularyRow.id == Batch.vocabulary_id).join(User, User.id == Decision.user_id)
         .outerjoin(reviewer, reviewer.id == Decision.reviewed_by_id)
         .outerjoin(SuggestionRow, SuggestionRow.id == Decision.suggestion_id)
         .order_by(Batch.id, Mention.position, Decision.id))
    if batch_id is not None:
        q = q.where(Mention.batch_id == batch_id)
    if not history:
        q = q.where(Decision.is_latest)
    rows = s.execute(q).all()
    labels = {(v, n): lab or str(n) for v, n, lab in s.execute(
        select(VocabularyEdition.vocabulary_id, VocabularyEdition.number, VocabularyEdition.label))}
    data = []
    for d, m, bname, vid, vname, uri, uname, rname, chosen, conf in rows:
        codes = [c or "" for c in (d.codes or [])]
        edition = labels.get((vid, d.edition), "") if d.edition is not None else ""
        data.append([d.id, m.batch_id, bname, vname, m.id, m.position, m.text, d.action, list(d.terms),
                     codes, list(d.term_ids or []), code_system(vname, uri), edition, d.relationship or "",
                     d.review_status, rname or "", d.reviewed_at, d.review_note or "", uname, d.at, d.seconds,
                     d.comment, d.model_version, list(chosen or []), conf, list(m.gold_terms or []), d.is_latest])
    return pd.DataFrame(data, columns=DECISION_COLUMNS)


def export_decisions(s: Session, batch_id: int | None, fmt: str, approved_only: bool = False, **omop) -> bytes:
    """The latest decisions of a batch (None: all batches) as csv, xlsx, jsonl, chip-cdn, fhir (R5 ConceptMap)
    or omop (SOURCE_TO_CONCEPT_MAP, approved only); ``db.exports.export_batch`` also gives a file name and a report."""
    from db import exports  # db.exports builds on this module (decisions_frame): a top-level import would be a cycle

    return exports.export_batch(s, batch_id, fmt, approved_only=approved_only, **omop).data
