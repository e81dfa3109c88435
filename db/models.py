"""Schema of the review app's database (SQLAlchemy 2 typed declarative models).

What the app stores, in the words of the domain:

* a **vocabulary** of standard **terms** (name, codes) and their **synonyms** (from the vocabulary file, or
  added by a coder: who, when);
* **batches** of imported **mentions** kept in file order (``position``), each with a review ``status``;
* the engine's **suggestions** for a mention (model version, predicted count,
  confidence, chosen terms) with every ranked **candidate** and all of its
  per-strategy scores, so a decision can later be explained and replayed;
* the coders' **decisions** (accept / correct / reject / skip / flag, plus the
  lead's bulk ``auto`` coding) -- never overwritten: a new decision on the same
  mention supersedes the previous one (``is_latest``) and the history stays;
* **training pairs** derived from decisions: confirmed positives and, as
  confirmed hard negatives, the shown candidates a coder did not choose --
  the "hard negatives matter more than model choice" lesson of Approach B and the user-confirmed negatives
  that Approach D's false-negative elimination otherwise has to guess (methods.md);
* **users** (role, bcrypt password hash, disabled flag), their sessions and API tokens, and an append-only
  **audit log**;
* **gold tasks**: a batch, or a sample of it, given to several annotators
  independently (``blind`` or ``assisted``), their **gold annotations**, and the
  resulting **gold labels** (``agreed`` by all annotators, or ``adjudicated`` by a
  lead) that the engine's accuracy is measured on (db/gold.py).

The initial Alembic revision (``db/migrations/versions/0001_initial.py``)
creates the tables up to the audit log; ``0002_gold.py`` adds the gold tables
and ``users.disabled_at``; ``0003`` the queue claims; ``0004_codes_editions_review.py``
export codes and their kinds, vocabulary editions, terms by id in decisions and
training pairs, mapping status and relationship, abbreviations and app settings;
``0005_eval_split.py`` the side of each labelled mention in the evaluation split; later ones say what they add.
``tests/test_db.py`` / ``tests/test_gold.py`` check that the models and the migrated schema do not drift apart.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    CheckConstraint,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    SmallInteger,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship
from sqlalchemy.orm import relationship as orm_relationship  # Decision has a column named "relationship"

ROLES = ("coder", "annotator", "lead", "admin")
# "rereview": a decision on it needs another look (its term was retired or re-coded by a new vocabulary
# edition, or a lead sent it back); it is queued for coders first (db.services.next_mention)
MENTION_STATUSES = ("new", "suggested", "decided", "auto_coded", "flagged", "skipped", "rereview")
# "auto" is the lead's bulk acceptance of confident suggestions (services.auto_code)
DECISION_ACTIONS = ("accept", "correct", "reject", "skip", "flag", "auto")
PAIR_KINDS = ("accepted", "corrected", "rejected_candidate", "synonym")
SYNONYM_SOURCES = ("vocabulary", "user")
ABBREVIATION_SOURCES = ("list", "user")  # a keyword list file / taught by a coder
CODE_KINDS = ("leaf", "category")
# Mapping status of a decision, as mapping teams keep it (OHDSI Usagi, Snap2SNOMED): a coder's decision is
# "unchecked" until a lead approves it or sends it back ("needs_rereview", with the reason in review_note);
# "flagged" waits for a lead; "auto" is the lead's bulk acceptance of confident suggestions.
REVIEW_STATUSES = ("unchecked", "approved", "flagged", "auto", "needs_rereview")
# The side of a labelled mention in its vocabulary's evaluation split (db.learning): "train" labels are
# training data, "eval" ones the held-out mentions every model is measured on; NULL: not labelled (or its
# gold names are not terms of the vocabulary).
SPLITS = ("train", "eval")
# FHIR R5 ConceptMap relationship codes (http://hl7.org/fhir/concept-map-relationship), read as
# "the mention <relationship> the term(s)"
RELATIONSHIPS = ("equivalent", "source-is-narrower-than-target", "source-is-broader-than-target", "related-to",
                 "not-related-to")

# Lengths: real mentions are <= 122 characters (max over the 22,000 CHIP-CDN and
# Yidu-N7K mentions) and db.imports rejects mentions longer than 500; term names are
# shorter still. String lengths only matter on PostgreSQL/MySQL; SQLite ignores them.
NAME_LEN = 500
CODE_LEN = 64


def utcnow() -> datetime:
    """Timestamps are UTC (SQLite stores them without the zone)."""
    return datetime.now(UTC)


def _in(column: str, values: tuple[str, ...]) -> str:
    return f"{column} IN ({', '.join(repr(v) for v in values)})"


class Base(DeclarativeBase):
    # Named constraints so Alembic can alter them later (SQLite batch mode needs names).
    metadata = MetaData(
        naming_convention={
            "ix": "ix_%(column_0_label)s",
            "uq": "uq_%(table_name)s_%(column_0_N_name)s",
            "ck": "ck_%(table_name)s_%(constraint_name)s",
            "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
            "pk": "pk_%(table_name)s",
        }
    )
    type_annotation_map = {dict[str, Any]: JSON, list[str]: JSON, list[Any]: JSON}


class User(Base):
    __tablename__ = "users"
    __table_args__ = (CheckConstraint(_in("role", ROLES), name="role"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    username: Mapped[str] = mapped_column(String(100), unique=True)
    role: Mapped[str] = mapped_column(String(20), default="coder")
    # bcrypt hash (db.auth); None = cannot sign in (users made by services.ensure_user / demo mode)
    password_hash: Mapped[str | None] = mapped_column(String(255))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    # (revision 0002) a disabled account keeps its history but can no longer sign in (db.auth)
    disabled_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class UserSession(Base):
    """A signed-in browser (0006): the app keeps a random token in a cookie and only its SHA-256 here, so a
    reload or a new tab stays signed in until the session expires, is signed out or the account disabled."""

    __tablename__ = "user_sessions"

    id: Mapped[int] = mapped_column(primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id"), index=True)
    token_sha256: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    expires_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    kind: Mapped[str] = mapped_column(String(8), default="web", server_default="web")  # (0010) web: cookie; api: token


class Vocabulary(Base):
    __tablename__ = "vocabularies"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    source: Mapped[str] = mapped_column(String(NAME_LEN), default="")
    language: Mapped[str] = mapped_column(String(10), default="zh")
    # (0004) the code system URI written into exports (FHIR ConceptMap group.target); "" = a urn:termnorm one
    system_uri: Mapped[str] = mapped_column(String(NAME_LEN), default="")
    # (0004) the edition in force: the highest VocabularyEdition.number of this vocabulary
    edition: Mapped[int] = mapped_column(Integer, default=1)
    # code hierarchy (code -> parent code) and names of inner (non-term) codes,
    # so termnorm.vocabulary.Vocabulary can be rebuilt from the database alone
    hierarchy: Mapped[dict[str, Any]] = mapped_column(default=dict)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class VocabularyEdition(Base):
    """One imported edition of a vocabulary (1 = the first import) and what changed from the one before
    (db.editions: added / retired / renamed / code changed, and the decisions sent to re-review)."""

    __tablename__ = "vocabulary_editions"
    __table_args__ = (UniqueConstraint("vocabulary_id", "number"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    vocabulary_id: Mapped[int] = mapped_column(ForeignKey("vocabularies.id", ondelete="CASCADE"))
    number: Mapped[int] = mapped_column(Integer)
    label: Mapped[str] = mapped_column(String(200), default="")  # e.g. "v601", "2017"
    source_file: Mapped[str] = mapped_column(String(NAME_LEN), default="")
    imported_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    imported_by_id: Mapped[int | None] = mapped_column(ForeignKey("users.id"))
    diff: Mapped[dict[str, Any]] = mapped_column(default=dict)


class Term(Base):
    """A standard term (name) of a vocabulary; ``position`` is its termnorm term id.

    ``code`` is the code exported unless a coder picks another: the most specific of ``codes``
    (termnorm.vocabulary.Vocabulary.export_code); ``code_kinds`` says which codes are leaves and which
    categories. A term absent from a later edition is kept (decisions point at it) with
    ``retired_edition`` set, and ``replaced_by_id`` when the edition gave its code to a new name.
    """

    __tablename__ = "terms"
    __table_args__ = (
        UniqueConstraint("vocabulary_id", "name"),
        Index("ix_terms_vocabulary_code", "vocabulary_id", "code"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    vocabulary_id: Mapped[int] = mapped_column(ForeignKey("vocabularies.id", ondelete="CASCADE"))
    position: Mapped[int] = mapped_column(Integer)
    name: Mapped[str] = mapped_column(String(NAME_LEN))
    code: Mapped[str | None] = mapped_column(String(CODE_LEN))  # the export code (most specific)
    codes: Mapped[list[str]] = mapped_column(default=list)  # every code of the name, the export code first
    code_kinds: Mapped[dict[str, Any]] = mapped_column(default=dict)  # (0004) code -> leaf / category
    added_edition: Mapped[int] = mapped_column(Integer, default=1)  # (0004)
    retired_edition: Mapped[int | None] = mapped_column(Integer)  # (0004) None: in the current edition
    replaced_by_id: Mapped[int | None] = mapped_column(ForeignKey("terms.id"))  # (0004) renamed to

    vocabulary: Mapped[Vocabulary] = relationship()


class Synonym(Base):
    __tablename__ = "synonyms"
    __table_args__ = (
        UniqueConstraint("term_id", "text"),
        CheckConstraint(_in("source", SYNONYM_SOURCES), name="source"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    term_id: Mapped[int] = mapped_column(ForeignKey("terms.id", ondelete="CASCADE"))
    text: Mapped[str] = mapped_column(String(NAME_LEN))
    source: Mapped[str] = mapped_column(String(20), default="user")
    added_by_id: Mapped[int | None] = mapped_column(ForeignKey("users.id"))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)

    term: Mapped[Term] = relationship()


class Abbreviation(Base):
    """An abbreviation and what it stands for (PCI -> 经皮冠状动脉介入治疗), used by vocabulary search and the
    engine; from a keyword list file or taught by a coder. ``vocabulary_id`` None: every vocabulary."""

    __tablename__ = "abbreviations"
    __table_args__ = (
        UniqueConstraint("vocabulary_id", "abbreviation", "expansion"),
        CheckConstraint(_in("source", ABBREVIATION_SOURCES), name="source"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    vocabulary_id: Mapped[int | None] = mapped_column(ForeignKey("vocabularies.id", ondelete="CASCADE"),
                                                      index=True)
    abbreviation: Mapped[str] = mapped_column(String(100))
    expansion: Mapped[str] = mapped_column(String(NAME_LEN))
    source: Mapped[str] = mapped_column(String(20), default="user")
    added_by_id: Mapped[int | None] = mapped_column(ForeignKey("users.id"))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class AppSetting(Base):
    """A setting an admin changes in the app (e.g. ``allow_self_approval``); the audit log keeps who did."""

    __tablename__ = "app_settings"

    key: Mapped[str] = mapped_column(String(100), primary_key=True)
    value: Mapped[dict[str, Any]] = mapped_column(default=dict)  # {"value": ...}: JSON of any shape


class Batch(Base):
    """An imported file (or list) of mentions to review against one vocabulary."""

    __tablename__ = "batches"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    vocabulary_id: Mapped[int] = mapped_column(ForeignKey("vocabularies.id"), index=True)
    source_file: Mapped[str] = mapped_column(String(NAME_LEN), default="")
    created_by_id: Mapped[int | None] = mapped_column(ForeignKey("users.id"))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    # (0007) the order coders are served in: db.batches.ORDERS
    queue_order: Mapped[str] = mapped_column(String(20), default="file", server_default="file")

    vocabulary: Mapped[Vocabulary] = relationship()


class Mention(Base):
    __tablename__ = "mentions"
    __table_args__ = (
        UniqueConstraint("batch_id", "position"),
        # the review queue: open mentions of a batch in file order / by confidence
        Index("ix_mentions_queue", "batch_id", "status", "position"),
        CheckConstraint(_in("status", MENTION_STATUSES), name="status"),
        CheckConstraint("split IS NULL OR " + _in("split", SPLITS), name="split"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    batch_id: Mapped[int] = mapped_column(ForeignKey("batches.id", ondelete="CASCADE"))
    position: Mapped[int] = mapped_column(Integer)  # 1-based order in the imported file
    text: Mapped[str] = mapped_column(Text)
    gold_terms: Mapped[list[str] | None] = mapped_column(JSON)  # when the file carries labels
    source_row: Mapped[int | None] = mapped_column(Integer)  # row / item in the source file
    status: Mapped[str] = mapped_column(String(20), default="new")
    # copy of the latest suggestion's confidence, so order="uncertainty" is one indexed sort
    confidence: Mapped[float | None] = mapped_column(Float)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow, onupdate=utcnow)
    # the coder whose screen shows the mention (db.services.next_mention); others skip it until the
    # claim is older than services.CLAIM_MINUTES or the mention is decided
    claimed_by: Mapped[str | None] = mapped_column(String(100))
    claimed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # (0005) "train" / "eval": the side of a labelled mention in the vocabulary's evaluation split (db.learning)
    split: Mapped[str | None] = mapped_column(String(10))
    # (0007) rows of the source sharing this text (a pre-coded file's mention_rows): order="frequency"
    frequency: Mapped[int | None] = mapped_column(Integer)
    # (0008) the text the mention was found in (a note, an abstract): the engine reads its abbreviations
    document: Mapped[str | None] = mapped_column(Text)

    batch: Mapped[Batch] = relationship()


class Suggestion(Base):
    __tablename__ = "suggestions"
    __table_args__ = (Index("ix_suggestions_mention", "mention_id", "id"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    mention_id: Mapped[int] = mapped_column(ForeignKey("mentions.id", ondelete="CASCADE"))
    model_version: Mapped[str] = mapped_column(String(100))
    # (0004) vocabulary edition the engine suggested from: a suggestion of an older edition is recomputed
    edition: Mapped[int | None] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    predicted_count: Mapped[int] = mapped_column(Integer)
    confidence: Mapped[float] = mapped_column(Float)
    chosen: Mapped[list[str]] = mapped_column(default=list)
    keywords: Mapped[list[Any]] = mapped_column(default=list)  # [{start, end, kind, text}]
    parts: Mapped[list[str]] = mapped_column(default=list)
    # (0009) the mention as the engine read it, abbreviations spelled out (None: as written); exports give it
    read_as: Mapped[str | None] = mapped_column(Text)

    candidates: Mapped[list[SuggestionCandidate]] = relationship(
        order_by="SuggestionCandidate.rank", cascade="all, delete-orphan", passive_deletes=True
    )


class SuggestionCandidate(Base):
    __tablename__ = "suggestion_candidates"
    __table_args__ = (UniqueConstraint("suggestion_id", "rank"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    suggestion_id: Mapped[int] = mapped_column(ForeignKey("suggestions.id", ondelete="CASCADE"))
    rank: Mapped[int] = mapped_column(Integer)  # 1 = best
    term: Mapped[str] = mapped_column(String(NAME_LEN))
    term_index: Mapped[int | None] = mapped_column(Integer)  # the engine's term id (Candidate.term_id)
    codes: Mapped[list[str]] = mapped_column(default=list)
    score: Mapped[float] = mapped_column(Float)  # fused score used for the ranking
    scores: Mapped[dict[str, Any]] = mapped_column(default=dict)  # every strategy / ranker score


class Decision(Base):
    __tablename__ = "decisions"
    __table_args__ = (
        Index("ix_decisions_mention_latest", "mention_id", "is_latest"),
        Index("ix_decisions_user_at", "user_id", "at"),
        Index("ix_decisions_review", "is_latest", "review_status"),
        CheckConstraint(_in("action", DECISION_ACTIONS), name="action"),
        CheckConstraint(_in("review_status", REVIEW_STATUSES), name="review_status"),
        CheckConstraint("relationship IS NULL OR " + _in("relationship", RELATIONSHIPS), name="relationship"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    # no ON DELETE CASCADE: decisions are the product of paid work; deleting a
    # batch that has decisions must fail rather than silently drop them
    mention_id: Mapped[int] = mapped_column(ForeignKey("mentions.id"))
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id"))
    suggestion_id: Mapped[int | None] = mapped_column(ForeignKey("suggestions.id", ondelete="SET NULL"))
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    action: Mapped[str] = mapped_column(String(10))
    terms: Mapped[list[str]] = mapped_column(default=list)  # the chosen standard terms (names, as shown)
    term_ids: Mapped[list[Any]] = mapped_column(default=list)  # (0004) Term.id of each of ``terms``
    codes: Mapped[list[Any]] = mapped_column(default=list)  # (0004) the code exported for each of ``terms``
    edition: Mapped[int | None] = mapped_column(Integer)  # (0004) vocabulary edition the codes belong to
    # (0004) FHIR concept-map-relationship of the mention to its term(s); None when there are no terms
    relationship: Mapped[str | None] = mapped_column(String(40))
    # (0004) mapping status (REVIEW_STATUSES) and the lead's review of this decision
    review_status: Mapped[str] = mapped_column(String(20), default="unchecked")
    reviewed_by_id: Mapped[int | None] = mapped_column(ForeignKey("users.id"))
    reviewed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    review_note: Mapped[str] = mapped_column(Text, default="")
    comment: Mapped[str] = mapped_column(Text, default="")
    seconds: Mapped[float] = mapped_column(Float, default=0.0)  # time the coder spent
    model_version: Mapped[str | None] = mapped_column(String(100))  # of the suggestion answered
    is_latest: Mapped[bool] = mapped_column(Boolean, default=True)  # the latest decision wins

    user: Mapped[User] = orm_relationship(foreign_keys=[user_id])
    mention: Mapped[Mention] = orm_relationship()


class TrainingPair(Base):
    """A (mention, term, label) pair confirmed by a person, for retraining.

    label 1: ``accepted`` / ``corrected`` terms and user ``synonym`` s;
    label 0: ``rejected_candidate`` -- a candidate shown and not chosen, i.e. a
    confirmed hard negative. ``active`` is False once a later decision on the
    same mention superseded the one that produced the pair.
    """

    __tablename__ = "training_pairs"
    __table_args__ = (
        Index("ix_training_pairs_vocab", "vocabulary_id", "active", "kind"),
        CheckConstraint("label IN (0, 1)", name="label"),
        CheckConstraint(_in("kind", PAIR_KINDS), name="kind"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    vocabulary_id: Mapped[int] = mapped_column(ForeignKey("vocabularies.id"))
    mention_id: Mapped[int | None] = mapped_column(ForeignKey("mentions.id"), index=True)
    decision_id: Mapped[int | None] = mapped_column(ForeignKey("decisions.id"), index=True)
    synonym_id: Mapped[int | None] = mapped_column(ForeignKey("synonyms.id"))
    mention_text: Mapped[str] = mapped_column(Text)
    term: Mapped[str] = mapped_column(String(NAME_LEN))
    term_id: Mapped[int | None] = mapped_column(ForeignKey("terms.id"))  # (0004)
    label: Mapped[int] = mapped_column(SmallInteger)
    kind: Mapped[str] = mapped_column(String(20))
    active: Mapped[bool] = mapped_column(Boolean, default=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class AuditLog(Base):
    """Append-only record of who changed what (``username`` kept even if the user row changes)."""

    __tablename__ = "audit_log"
    __table_args__ = (Index("ix_audit_log_object", "object_type", "object_id"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow, index=True)
    user_id: Mapped[int | None] = mapped_column(ForeignKey("users.id"))
    username: Mapped[str] = mapped_column(String(100), default="")
    action: Mapped[str] = mapped_column(String(50))
    object_type: Mapped[str] = mapped_column(String(50))
    object_id: Mapped[int | None] = mapped_column(Integer)
    details: Mapped[dict[str, Any]] = mapped_column(default=dict)


# ================================================================ gold annotation
GOLD_MODES = ("blind", "assisted")  # blind: no engine suggestion shown (no anchoring); assisted: candidates shown
GOLD_SOURCES = ("agreed", "adjudicated")  # every annotator gave the same set / the lead decided


class GoldTask(Base):
    """A gold-annotation task: a batch (all or a sample of its mentions) given to ``annotators_per_mention``
    annotators each, independently, to build a gold set the engine can be measured on."""

    __tablename__ = "gold_tasks"
    __table_args__ = (CheckConstraint(_in("mode", GOLD_MODES), name="mode"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    batch_id: Mapped[int] = mapped_column(ForeignKey("batches.id"), index=True)
    mode: Mapped[str] = mapped_column(String(10), default="blind")
    annotators_per_mention: Mapped[int] = mapped_column(Integer, default=2)
    sample_size: Mapped[int | None] = mapped_column(Integer)  # None = every mention of the batch
    seed: Mapped[int | None] = mapped_column(Integer)  # of the random sample, so it can be redrawn
    created_by_id: Mapped[int | None] = mapped_column(ForeignKey("users.id"))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)

    batch: Mapped[Batch] = relationship()


class GoldAssignment(Base):
    """Mention ``mention_id`` of task ``task_id`` is to be annotated by user ``user_id``."""

    __tablename__ = "gold_assignments"
    __table_args__ = (
        UniqueConstraint("task_id", "mention_id", "user_id"),
        Index("ix_gold_assignments_user", "task_id", "user_id"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    task_id: Mapped[int] = mapped_column(ForeignKey("gold_tasks.id", ondelete="CASCADE"))
    mention_id: Mapped[int] = mapped_column(ForeignKey("mentions.id"))
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id"))


class GoldAnnotation(Base):
    """One annotator's term set for a mention of a task; a new answer supersedes the old (``is_latest``).

    ``terms`` may be empty: "no term of the vocabulary fits" is an answer (a
    category of its own in the agreement measures of termnorm.agreement).
    """

    __tablename__ = "gold_annotations"
    __table_args__ = (Index("ix_gold_annotations_task", "task_id", "mention_id", "is_latest"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    task_id: Mapped[int] = mapped_column(ForeignKey("gold_tasks.id", ondelete="CASCADE"))
    mention_id: Mapped[int] = mapped_column(ForeignKey("mentions.id"))
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id"))
    terms: Mapped[list[str]] = mapped_column(default=list)
    comment: Mapped[str] = mapped_column(Text, default="")
    seconds: Mapped[float] = mapped_column(Float, default=0.0)
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    is_latest: Mapped[bool] = mapped_column(Boolean, default=True)


class GoldLabel(Base):
    """The gold answer for a mention of a task: ``agreed`` (all annotators gave this set) or ``adjudicated``
    (chosen by a lead, ``by_id``). One per (task, mention); a re-adjudication replaces it (audit log keeps
    the old one)."""

    __tablename__ = "gold_labels"
    __table_args__ = (
        UniqueConstraint("task_id", "mention_id"),
        CheckConstraint(_in("source", GOLD_SOURCES), name="source"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    task_id: Mapped[int] = mapped_column(ForeignKey("gold_tasks.id", ondelete="CASCADE"))
    mention_id: Mapped[int] = mapped_column(ForeignKey("mentions.id"), index=True)
    terms: Mapped[list[str]] = mapped_column(default=list)
    source: Mapped[str] = mapped_column(String(20))
    by_id: Mapped[int | None] = mapped_column(ForeignKey("users.id"))  # the lead; None when agreed
    comment: Mapped[str] = mapped_column(Text, default="")
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
