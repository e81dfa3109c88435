"""The review app's database operations (the contract in notes/db_contract.md), in one namespace.

Pages call these functions and never build SQL. Every function takes a
SQLAlchemy ``Session`` first (except :func:`init_db` / :func:`session_scope`)
and every write commits before it returns, so a decision is on disk before
the UI moves on (SQLite runs in WAL mode with ``synchronous=FULL``: a commit
returns only after the write-ahead log is fsync'ed).

This module only re-exports them (``from db import services as S;
S.record_decision(...)``); each lives in the module of its concern, and those
modules import one another directly, never through this one:

* ``db.store`` -- connection, sessions, migrations (database_url, init_db, session_scope, dispose);
* ``db.accounts`` -- users as operations name them, the audit log, app settings;
* ``db.vocabularies`` -- vocabularies, terms, synonyms; the engine's Vocabulary rebuilt from them;
* ``db.batches`` -- batches, mentions, import, the coders' queue and its claims (next_mention);
* ``db.suggestions`` -- the engine's suggestions stored and read back;
* ``db.decisions`` -- record_decision, training pairs, the coded history (coded_mentions);
* ``db.auto_coding`` -- auto_code (and, with an audit sample, auto_code_with_audit / audit_results);
* ``db.reporting`` -- decisions_frame and export_decisions.

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

from db.accounts import audit_frame, ensure_user, get_setting, put_setting, users
from db.auto_coding import auto_code
from db.batches import (
    CLAIM_MINUTES,
    FINAL_STATUSES,
    OPEN_STATUSES,
    ORDERS,
    ORDER_LABELS,
    REREVIEW,
    RETURN_HOURS,
    SENT_BACK,
    batch_progress,
    batches,
    claim,
    claimed_by_others,
    claims,
    last_batch,
    release_claim,
    release_claims,
    create_batch,
    import_mentions,
    mention,
    mention_documents,
    mentions,
    next_mention,
    queue_order,
    set_queue_order,
)
from db.decisions import (
    MAPS,
    NOT_RELATED,
    PART_RELATIONSHIP,
    REREVIEW_ANSWER,
    REVIEW_AFTER,
    SHOWN_CANDIDATES,
    SINGLE_RELATIONSHIP,
    STATUS_AFTER,
    NotYourMention,
    coded_mentions,
    default_relationship,
    last_saved,
    record_decision,
    training_pairs_frame,
)
from db.models import utcnow
from db.reporting import DECISION_COLUMNS, code_system, decisions_count, decisions_frame, export_decisions
from db.store import (
    ALEMBIC_INI,
    DB_DIR,
    DATABASE_DOWN,
    database_url,
    dispose,
    get_engine,
    get_sessionmaker,
    init_db,
    session_scope,
)
from db.suggestions import latest_suggestion, latest_suggestion_versions, store_suggestion, store_suggestions
from db.vocabularies import (
    ACTIVE,
    add_synonym,
    create_vocabulary,
    load_vocabulary,
    retired_notes,
    set_system_uri,
    term_code_fields,
    term_synonyms,
    user_synonyms,
    vocabularies,
    vocabulary_from_db,
    vocabulary_id,
)

__all__ = [
    # db.store
    "ALEMBIC_INI", "DB_DIR", "database_url", "dispose", "get_engine", "get_sessionmaker", "init_db",
    "session_scope", "DATABASE_DOWN",
    # db.accounts
    "audit_frame", "ensure_user", "get_setting", "put_setting", "users",
    # db.vocabularies
    "ACTIVE", "add_synonym", "create_vocabulary", "load_vocabulary", "retired_notes", "set_system_uri",
    "term_code_fields", "term_synonyms", "user_synonyms", "vocabularies", "vocabulary_from_db", "vocabulary_id",
    # db.batches
    "CLAIM_MINUTES", "FINAL_STATUSES", "OPEN_STATUSES", "ORDERS", "ORDER_LABELS", "REREVIEW", "RETURN_HOURS",
    "SENT_BACK", "batch_progress",
    "batches", "claim", "claimed_by_others", "claims", "last_batch", "release_claim", "release_claims", "create_batch",
    "import_mentions", "mention", "mention_documents", "mentions", "next_mention", "queue_order", "set_queue_order",
    # db.suggestions
    "latest_suggestion", "latest_suggestion_versions", "store_suggestion", "store_suggestions",
    # db.decisions
    "MAPS", "NOT_RELATED", "PART_RELATIONSHIP", "REREVIEW_ANSWER", "REVIEW_AFTER", "SHOWN_CANDIDATES",
    "SINGLE_RELATIONSHIP", "STATUS_AFTER",
    "NotYourMention", "coded_mentions", "default_relationship", "last_saved", "record_decision",
    "training_pairs_frame",
    # db.auto_coding
    "auto_code",
    # db.reporting
    "DECISION_COLUMNS", "code_system", "decisions_count", "decisions_frame", "export_decisions",
    # db.models
    "utcnow",
]
