"""The review app's database: schema (``db.models``), Alembic migrations
(``db/migrations``, ``db/alembic.ini``), the operations pages call
(``db.services``) and file import / export (``db.io``).

The default database is the SQLite file ``db/termnorm.sqlite3`` (not in git);
set ``TERMNORM_DB_URL`` to any SQLAlchemy URL (e.g. PostgreSQL) to use another.
"""
