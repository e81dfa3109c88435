"""Codes first-class, vocabulary editions, terms by id, mapping status and relationship, abbreviations.

* ``terms``: ``code`` becomes the *export* code (the most specific code of the
  name: a leaf before a category, termnorm.vocabulary.Vocabulary.export_code)
  instead of the first one in the file; ``codes`` is reordered with it first;
  new ``code_kinds`` (code -> leaf / category), ``added_edition``,
  ``retired_edition``, ``replaced_by_id``.
* ``vocabularies``: ``system_uri`` and ``edition``; new table
  ``vocabulary_editions`` with edition 1 for every existing vocabulary.
* ``decisions``: ``term_ids``, ``codes`` (the code exported for each term),
  ``edition``, ``relationship``, ``review_status``, ``reviewed_by_id``,
  ``reviewed_at``, ``review_note``. Existing decisions are filled in from
  their term names: the export code, ``equivalent`` for one term and
  ``source-is-broader-than-target`` for several (what the FHIR export wrote
  so far), ``auto`` / ``flagged`` / ``unchecked`` from the action.
* ``suggestions.edition`` (a suggestion of an older edition is recomputed);
  ``training_pairs.term_id``; mention status ``rereview``; tables
  ``abbreviations`` and ``app_settings``.

No decision, pair or term is deleted or rewritten except the fields named
above; tests/test_db.py migrates a database at 0003 holding decisions and
checks every one survives with its export code.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-25
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op


revision: str = '0004'
down_revision: str | None = '0003'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

OLD_STATUSES = "status IN ('new', 'suggested', 'decided', 'auto_coded', 'flagged', 'skipped')"
NEW_STATUSES = "status IN ('new', 'suggested', 'decided', 'auto_coded', 'flagged', 'skipped', 'rereview')"
REVIEW = "review_status IN ('unchecked', 'approved', 'flagged', 'auto', 'needs_rereview')"
RELATIONSHIP = ("relationship IS NULL OR relationship IN ('equivalent', 'source-is-narrower-than-target', "
                "'source-is-broader-than-target', 'related-to', 'not-related-to')")


def upgrade() -> None:
    op.create_table('vocabulary_editions',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('vocabulary_id', sa.Integer(), nullable=False),
        sa.Column('number', sa.Integer(), nullable=False),
        sa.Column('label', sa.String(length=200), nullable=False),
        sa.Column('source_file', sa.String(length=500), nullable=False),
        sa.Column('imported_at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('imported_by_id', sa.Integer(), nullable=True),
        sa.Column('diff', sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(['imported_by_id'], ['users.id'],
                                name=op.f('fk_vocabulary_editions_imported_by_id_users')),
        sa.ForeignKeyConstraint(['vocabulary_id'], ['vocabularies.id'],
                                name=op.f('fk_vocabulary_editions_vocabulary_id_vocabularies'), ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_vocabulary_editions')),
        sa.UniqueConstraint('vocabulary_id', 'number', name=op.f('uq_vocabulary_editions_vocabulary_id_number'))
    )
    op.create_table('abbreviations',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('vocabulary_id', sa.Integer(), nullable=True),
        sa.Column('abbreviation', sa.String(length=100), nullable=False),
        sa.Column('expansion', sa.String(length=500), nullable=False),
        sa.Column('source', sa.String(length=20), nullable=False),
        sa.Column('added_by_id', sa.Integer(), nullable=True),
        sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("source IN ('list', 'user')", name=op.f('ck_abbreviations_source')),
        sa.ForeignKeyConstraint(['added_by_id'], ['users.id'], name=op.f('fk_abbreviations_added_by_id_users')),
        sa.ForeignKeyConstraint(['vocabulary_id'], ['vocabularies.id'],
                                name=op.f('fk_abbreviations_vocabulary_id_vocabularies'), ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_abbreviations')),
        sa.UniqueConstraint('vocabulary_id', 'abbreviation', 'expansion',
                            name=op.f('uq_abbreviations_vocabulary_id_abbreviation_expansion'))
    )
    op.create_index(op.f('ix_abbreviations_vocabulary_id'), 'abbreviations', ['vocabulary_id'], unique=False)
    op.create_table('app_settings',
        sa.Column('key', sa.String(length=100), nullable=False),
        sa.Column('value', sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint('key', name=op.f('pk_app_settings'))
    )
    with op.batch_alter_table('vocabularies') as batch:
        batch.add_column(sa.Column('system_uri', sa.String(length=500), nullable=False, server_default=''))
        batch.add_column(sa.Column('edition', sa.Integer(), nullable=False, server_default='1'))
    with op.batch_alter_table('terms') as batch:
        batch.add_column(sa.Column('code_kinds', sa.JSON(), nullable=False, server_default=sa.text("'{}'")))
        batch.add_column(sa.Column('added_edition', sa.Integer(), nullable=False, server_default='1'))
        batch.add_column(sa.Column('retired_edition', sa.Integer(), nullable=True))
        batch.add_column(sa.Column('replaced_by_id', sa.Integer(), nullable=True))
        batch.create_foreign_key(op.f('fk_terms_replaced_by_id_terms'), 'terms', ['replaced_by_id'], ['id'])
    with op.batch_alter_table('decisions') as batch:
        batch.add_column(sa.Column('term_ids', sa.JSON(), nullable=False, server_default=sa.text("'[]'")))
        batch.add_column(sa.Column('codes', sa.JSON(), nullable=False, server_default=sa.text("'[]'")))
        batch.add_column(sa.Column('edition', sa.Integer(), nullable=True))
        batch.add_column(sa.Column('relationship', sa.String(length=40), nullable=True))
        batch.add_column(sa.Column('review_status', sa.String(length=20), nullable=False,
                                   server_default='unchecked'))
        batch.add_column(sa.Column('reviewed_by_id', sa.Integer(), nullable=True))
        batch.add_column(sa.Column('reviewed_at', sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column('review_note', sa.Text(), nullable=False, server_default=''))
        batch.create_foreign_key(op.f('fk_decisions_reviewed_by_id_users'), 'users', ['reviewed_by_id'], ['id'])
        batch.create_check_constraint(op.f('ck_decisions_review_status'), REVIEW)
        batch.create_check_constraint(op.f('ck_decisions_relationship'), RELATIONSHIP)
        batch.create_index('ix_decisions_review', ['is_latest', 'review_status'], unique=False)
    with op.batch_alter_table('suggestions') as batch:
        batch.add_column(sa.Column('edition', sa.Integer(), nullable=True))
    with op.batch_alter_table('training_pairs') as batch:
        batch.add_column(sa.Column('term_id', sa.Integer(), nullable=True))
        batch.create_foreign_key(op.f('fk_training_pairs_term_id_terms'), 'terms', ['term_id'], ['id'])
    with op.batch_alter_table('mentions') as batch:
        batch.drop_constraint(op.f('ck_mentions_status'), type_='check')
        batch.create_check_constraint(op.f('ck_mentions_status'), NEW_STATUSES)
    _backfill(op.get_bind())


def _backfill(conn) -> None:
    """Export codes and kinds of every term, edition 1, and the new decision / pair fields from term names."""
    from termnorm.vocabulary import Vocabulary

    vocabularies = conn.execute(sa.text("SELECT id, source, created_at, hierarchy FROM vocabularies")).all()
    term_of: dict[tuple[int, str], tuple[int, str | None]] = {}  # (vocabulary, name) -> (term id, export code)
    for vid, source, created_at, hierarchy in vocabularies:
        conn.execute(sa.text("INSERT INTO vocabulary_editions (vocabulary_id, number, label, source_file, "
                             "imported_at, diff) VALUES (:v, 1, '', :src, :at, :diff)"),
                     {"v": vid, "src": source or "", "at": created_at, "diff": '{"first": true, "counts": {}}'})
        rows = conn.execute(sa.text("SELECT id, name, codes FROM terms WHERE vocabulary_id = :v "
                                    "ORDER BY position, id"), {"v": vid}).all()
        vocab = Vocabulary()
        parents = (_json(hierarchy) or {}).get("parent") or {}
        vocab.parent.update(parents)
        for _, name, codes in rows:
            vocab.add_term(name, _json(codes) or [])
        kinds = vocab.code_kinds()
        updates = []
        for tid, name, _ in rows:
            codes = vocab.codes_of(name)
            term_of[(vid, name)] = (tid, codes[0] if codes else None)
            updates.append({"id": tid, "code": codes[0] if codes else None, "codes": _dump(codes),
                            "kinds": _dump({c: kinds.get(c, "leaf") for c in codes})})
        if updates:
            conn.execute(sa.text("UPDATE terms SET code = :code, codes = :codes, code_kinds = :kinds "
                                 "WHERE id = :id"), updates)
    decisions = conn.execute(sa.text(
        "SELECT d.id, d.action, d.terms, b.vocabulary_id FROM decisions d JOIN mentions m ON m.id = d.mention_id "
        "JOIN batches b ON b.id = m.batch_id")).all()
    updates = []
    for did, action, terms, vid in decisions:
        terms = _json(terms) or []
        found = [term_of.get((vid, t)) for t in terms]
        rel = None if not terms else "equivalent" if len(terms) == 1 else "source-is-broader-than-target"
        status = {"auto": "auto", "flag": "flagged"}.get(action, "unchecked")
        updates.append({"id": did, "ids": _dump([f[0] if f else None for f in found]),
                        "codes": _dump([f[1] if f else None for f in found]), "rel": rel, "st": status})
    if updates:
        conn.execute(sa.text("UPDATE decisions SET term_ids = :ids, codes = :codes, edition = 1, "
                             "relationship = :rel, review_status = :st WHERE id = :id"), updates)
    pairs = conn.execute(sa.text("SELECT id, vocabulary_id, term FROM training_pairs")).all()
    updates = [{"id": pid, "t": term_of[(vid, t)][0]} for pid, vid, t in pairs if (vid, t) in term_of]
    if updates:
        conn.execute(sa.text("UPDATE training_pairs SET term_id = :t WHERE id = :id"), updates)


def _json(value):
    import json

    return json.loads(value) if isinstance(value, str) else value


def _dump(value) -> str:
    import json

    return json.dumps(value, ensure_ascii=False)


def downgrade() -> None:
    with op.batch_alter_table('mentions') as batch:
        batch.drop_constraint(op.f('ck_mentions_status'), type_='check')
        batch.create_check_constraint(op.f('ck_mentions_status'), OLD_STATUSES)
    with op.batch_alter_table('training_pairs') as batch:
        batch.drop_constraint(op.f('fk_training_pairs_term_id_terms'), type_='foreignkey')
        batch.drop_column('term_id')
    with op.batch_alter_table('suggestions') as batch:
        batch.drop_column('edition')
    with op.batch_alter_table('decisions') as batch:
        batch.drop_index('ix_decisions_review')
        batch.drop_constraint(op.f('ck_decisions_relationship'), type_='check')
        batch.drop_constraint(op.f('ck_decisions_review_status'), type_='check')
        batch.drop_constraint(op.f('fk_decisions_reviewed_by_id_users'), type_='foreignkey')
        for col in ('review_note', 'reviewed_at', 'reviewed_by_id', 'review_status', 'relationship', 'edition',
                    'codes', 'term_ids'):
            batch.drop_column(col)
    with op.batch_alter_table('terms') as batch:
        batch.drop_constraint(op.f('fk_terms_replaced_by_id_terms'), type_='foreignkey')
        for col in ('replaced_by_id', 'retired_edition', 'added_edition', 'code_kinds'):
            batch.drop_column(col)
    with op.batch_alter_table('vocabularies') as batch:
        batch.drop_column('edition')
        batch.drop_column('system_uri')
    op.drop_table('app_settings')
    op.drop_index(op.f('ix_abbreviations_vocabulary_id'), table_name='abbreviations')
    op.drop_table('abbreviations')
    op.drop_table('vocabulary_editions')
