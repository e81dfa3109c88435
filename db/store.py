"""The database connection: the engine per URL, migrations (Alembic ``upgrade head``) and sessions.

Every write of the app commits before it returns; SQLite runs in WAL mode with ``synchronous=FULL``, so a
commit returns only after the write-ahead log is fsync'ed. The operations themselves live in the modules
beside this one (``db.services`` lists them).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.exc import ArgumentError, InterfaceError, OperationalError
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.pool import NullPool, StaticPool

from termnorm import settings

DB_DIR = Path(__file__).resolve().parent
ALEMBIC_INI = DB_DIR / "alembic.ini"

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
        try:
            return create_engine(url, json_serializer=dumps, pool_pre_ping=True)
        except (ValueError, ArgumentError) as e:  # 'p@ss:w/rd' in the URL: "invalid literal for int() ... 'w'"
            raise ValueError(f"TERMNORM_DB_URL is not a database URL SQLAlchemy reads ({e}). A password with @ : / "
                             "# % ? & must be URL-encoded: @ as %40, : as %3A, / as %2F, # as %23, % as %25, "
                             "? as %3F, & as %26") from None
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


#: the PostgreSQL advisory lock key the schema upgrade holds (any constant of this application's own)
MIGRATION_LOCK = 0x7465726D  # "term"


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
                    if conn.dialect.name == "postgresql":  # two services starting on an empty database at once:
                        # the second waits here for the first's schema (it raced to create alembic_version)
                        conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({MIGRATION_LOCK})")
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


#: what a database that is down, restarting or unreachable raises (also SQLite's "database is locked"): the app
#: and the API say so in words (the pages import no SQLAlchemy)
DATABASE_DOWN = (OperationalError, InterfaceError)


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
