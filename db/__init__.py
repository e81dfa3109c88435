"""The review app's database: schema (``db.models``), Alembic migrations
(``db/migrations``, ``db/alembic.ini``), the operations pages call
(``db.services``, one namespace over ``db.store``, ``db.accounts``,
``db.vocabularies``, ``db.batches``, ``db.suggestions``, ``db.decisions``,
``db.auto_coding`` and ``db.reporting``; the lead's review ``db.review``;
vocabulary editions ``db.editions``; abbreviations ``db.abbreviations``; sign-in
``db.auth``; gold annotation ``db.gold``), file import (``db.imports``, row
checks ``db.import_rows``) and export (``db.exports``).

The default database is the SQLite file ``termnorm.sqlite3`` in the data
directory (termnorm.settings, never inside the package); set ``TERMNORM_DB_URL``
to any SQLAlchemy URL (e.g. PostgreSQL) to use another.
"""
