"""Initial schema: every table of db/models.py.

Generated with `alembic revision --autogenerate` against an empty database, then
tidied by hand (plain create_index calls). tests/test_db.py checks that the
migrated schema and the models do not differ.

Revision ID: 0001
Revises:
Create Date: 2026-11-21
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op


revision: str = '0001'
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table('users',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('username', sa.String(length=100), nullable=False),
        sa.Column('role', sa.String(length=20), nullable=False),
        sa.Column('password_hash', sa.String(length=255), nullable=True),
        sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("role IN ('coder', 'annotator', 'lead', 'admin')", name=op.f('ck_users_role')),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_users')),
        sa.UniqueConstraint('username', name=op.f('uq_users_username'))
    )
    op.create_table('vocabularies',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('name', sa.String(length=200), nullable=False),
        sa.Column('source', sa.String(length=500), nullable=False),
        sa.Column('language', sa.String(length=10), nullable=False),
        sa.Column('hierarchy', sa.JSON(), nullable=False),
        sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_vocabularies')),
        sa.UniqueConstraint('name', name=op.f('uq_vocabularies_name'))
    )
    op.create_table('audit_log',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('user_id', sa.Integer(), nullable=True),
        sa.Column('username', sa.String(length=100), nullable=False),
        sa.Column('action', sa.String(length=50), nullable=False),
        sa.Column('object_type', sa.String(length=50), nullable=False),
        sa.Column('object_id', sa.Integer(), nullable=True),
        sa.Column('details', sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(['user_id'], ['users.id'], name=op.f('fk_audit_log_user_id_users')),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_audit_log'))
    )
    op.create_index(op.f('ix_audit_log_at'), 'audit_log', ['at'], unique=False)
    op.create_index('ix_audit_log_object', 'audit_log', ['object_type', 'object_id'], unique=False)
    op.create_table('batches',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('name', sa.String(length=200), nullable=False),
        sa.Column('vocabulary_id', sa.Integer(), nullable=False),
        sa.Column('source_file', sa.String(length=500), nullable=False),
        sa.Column('created_by_id', sa.Integer(), nullable=True),
        sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(['created_by_id'], ['users.id'], name=op.f('fk_batches_created_by_id_users')),
        sa.ForeignKeyConstraint(['vocabulary_id'], ['vocabularies.id'], name=op.f('fk_batches_vocabulary_id_vocabularies')),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_batches'))
    )
    op.create_index(op.f('ix_batches_vocabulary_id'), 'batches', ['vocabulary_id'], unique=False)
    op.create_table('terms',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('vocabulary_id', sa.Integer(), nullable=False),
        sa.Column('position', sa.Integer(), nullable=False),
        sa.Column('name', sa.String(length=500), nullable=False),
        sa.Column('code', sa.String(length=64), nullable=True),
        sa.Column('codes', sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(['vocabulary_id'], ['vocabularies.id'], name=op.f('fk_terms_vocabulary_id_vocabularies'), ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_terms')),
        sa.UniqueConstraint('vocabulary_id', 'name', name=op.f('uq_terms_vocabulary_id_name'))
    )
    op.create_index('ix_terms_vocabulary_code', 'terms', ['vocabulary_id', 'code'], unique=False)
    op.create_table('mentions',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('batch_id', sa.Integer(), nullable=False),
        sa.Column('position', sa.Integer(), nullable=False),
        sa.Column('text', sa.Text(), nullable=False),
        sa.Column('gold_terms', sa.JSON(), nullable=True),
        sa.Column('source_row', sa.Integer(), nullable=True),
        sa.Column('status', sa.String(length=20), nullable=False),
        sa.Column('confidence', sa.Float(), nullable=True),
        sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("status IN ('new', 'suggested', 'decided', 'auto_coded', 'flagged', 'skipped')", name=op.f('ck_mentions_status')),
        sa.ForeignKeyConstraint(['batch_id'], ['batches.id'], name=op.f('fk_mentions_batch_id_batches'), ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_mentions')),
        sa.UniqueConstraint('batch_id', 'position', name=op.f('uq_mentions_batch_id_position'))
    )
    op.create_index('ix_mentions_queue', 'mentions', ['batch_id', 'status', 'position'], unique=False)
    op.create_table('synonyms',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('term_id', sa.Integer(), nullable=False),
        sa.Column('text', sa.String(length=500), nullable=False),
        sa.Column('source', sa.String(length=20), nullable=False),
        sa.Column('added_by_id', sa.Integer(), nullable=True),
        sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("source IN ('vocabulary', 'user')", name=op.f('ck_synonyms_source')),
        sa.ForeignKeyConstraint(['added_by_id'], ['users.id'], name=op.f('fk_synonyms_added_by_id_users')),
        sa.ForeignKeyConstraint(['term_id'], ['terms.id'], name=op.f('fk_synonyms_term_id_terms'), ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_synonyms')),
        sa.UniqueConstraint('term_id', 'text', name=op.f('uq_synonyms_term_id_text'))
    )
    op.create_table('suggestions',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('mention_id', sa.Integer(), nullable=False),
        sa.Column('model_version', sa.String(length=100), nullable=False),
        sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('predicted_count', sa.Integer(), nullable=False),
        sa.Column('confidence', sa.Float(), nullable=False),
        sa.Column('chosen', sa.JSON(), nullable=False),
        sa.Column('keywords', sa.JSON(), nullable=False),
        sa.Column('parts', sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(['mention_id'], ['mentions.id'], name=op.f('fk_suggestions_mention_id_mentions'), ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_suggestions'))
    )
    op.create_index('ix_suggestions_mention', 'suggestions', ['mention_id', 'id'], unique=False)
    op.create_table('decisions',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('mention_id', sa.Integer(), nullable=False),
        sa.Column('user_id', sa.Integer(), nullable=False),
        sa.Column('suggestion_id', sa.Integer(), nullable=True),
        sa.Column('at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('action', sa.String(length=10), nullable=False),
        sa.Column('terms', sa.JSON(), nullable=False),
        sa.Column('comment', sa.Text(), nullable=False),
        sa.Column('seconds', sa.Float(), nullable=False),
        sa.Column('model_version', sa.String(length=100), nullable=True),
        sa.Column('is_latest', sa.Boolean(), nullable=False),
        sa.CheckConstraint("action IN ('accept', 'correct', 'reject', 'skip', 'flag', 'auto')", name=op.f('ck_decisions_action')),
        sa.ForeignKeyConstraint(['mention_id'], ['mentions.id'], name=op.f('fk_decisions_mention_id_mentions')),
        sa.ForeignKeyConstraint(['suggestion_id'], ['suggestions.id'], name=op.f('fk_decisions_suggestion_id_suggestions'), ondelete='SET NULL'),
        sa.ForeignKeyConstraint(['user_id'], ['users.id'], name=op.f('fk_decisions_user_id_users')),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_decisions'))
    )
    op.create_index('ix_decisions_mention_latest', 'decisions', ['mention_id', 'is_latest'], unique=False)
    op.create_index('ix_decisions_user_at', 'decisions', ['user_id', 'at'], unique=False)
    op.create_table('suggestion_candidates',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('suggestion_id', sa.Integer(), nullable=False),
        sa.Column('rank', sa.Integer(), nullable=False),
        sa.Column('term', sa.String(length=500), nullable=False),
        sa.Column('term_index', sa.Integer(), nullable=True),
        sa.Column('codes', sa.JSON(), nullable=False),
        sa.Column('score', sa.Float(), nullable=False),
        sa.Column('scores', sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(['suggestion_id'], ['suggestions.id'], name=op.f('fk_suggestion_candidates_suggestion_id_suggestions'), ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_suggestion_candidates')),
        sa.UniqueConstraint('suggestion_id', 'rank', name=op.f('uq_suggestion_candidates_suggestion_id_rank'))
    )
    op.create_table('training_pairs',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('vocabulary_id', sa.Integer(), nullable=False),
        sa.Column('mention_id', sa.Integer(), nullable=True),
        sa.Column('decision_id', sa.Integer(), nullable=True),
        sa.Column('synonym_id', sa.Integer(), nullable=True),
        sa.Column('mention_text', sa.Text(), nullable=False),
        sa.Column('term', sa.String(length=500), nullable=False),
        sa.Column('label', sa.SmallInteger(), nullable=False),
        sa.Column('kind', sa.String(length=20), nullable=False),
        sa.Column('active', sa.Boolean(), nullable=False),
        sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("kind IN ('accepted', 'corrected', 'rejected_candidate', 'synonym')", name=op.f('ck_training_pairs_kind')),
        sa.CheckConstraint('label IN (0, 1)', name=op.f('ck_training_pairs_label')),
        sa.ForeignKeyConstraint(['decision_id'], ['decisions.id'], name=op.f('fk_training_pairs_decision_id_decisions')),
        sa.ForeignKeyConstraint(['mention_id'], ['mentions.id'], name=op.f('fk_training_pairs_mention_id_mentions')),
        sa.ForeignKeyConstraint(['synonym_id'], ['synonyms.id'], name=op.f('fk_training_pairs_synonym_id_synonyms')),
        sa.ForeignKeyConstraint(['vocabulary_id'], ['vocabularies.id'], name=op.f('fk_training_pairs_vocabulary_id_vocabularies')),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_training_pairs'))
    )
    op.create_index(op.f('ix_training_pairs_decision_id'), 'training_pairs', ['decision_id'], unique=False)
    op.create_index(op.f('ix_training_pairs_mention_id'), 'training_pairs', ['mention_id'], unique=False)
    op.create_index('ix_training_pairs_vocab', 'training_pairs', ['vocabulary_id', 'active', 'kind'], unique=False)


def downgrade() -> None:
    op.drop_index('ix_training_pairs_vocab', table_name='training_pairs')
    op.drop_index(op.f('ix_training_pairs_mention_id'), table_name='training_pairs')
    op.drop_index(op.f('ix_training_pairs_decision_id'), table_name='training_pairs')
    op.drop_table('training_pairs')
    op.drop_table('suggestion_candidates')
    op.drop_index('ix_decisions_user_at', table_name='decisions')
    op.drop_index('ix_decisions_mention_latest', table_name='decisions')
    op.drop_table('decisions')
    op.drop_index('ix_suggestions_mention', table_name='suggestions')
    op.drop_table('suggestions')
    op.drop_table('synonyms')
    op.drop_index('ix_mentions_queue', table_name='mentions')
    op.drop_table('mentions')
    op.drop_index('ix_terms_vocabulary_code', table_name='terms')
    op.drop_table('terms')
    op.drop_index(op.f('ix_batches_vocabulary_id'), table_name='batches')
    op.drop_table('batches')
    op.drop_index('ix_audit_log_object', table_name='audit_log')
    op.drop_index(op.f('ix_audit_log_at'), table_name='audit_log')
    op.drop_table('audit_log')
    op.drop_table('vocabularies')
    op.drop_table('users')
