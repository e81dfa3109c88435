"""Gold annotation and sign-in: gold_tasks, gold_assignments, gold_annotations, gold_labels; users.disabled_at.

Generated with `alembic revision --autogenerate` against a database at 0001,
then tidied by hand (plain create_index calls, as in 0001). Only new tables
and one new nullable column: nothing existing changes, so upgrading a
database that coders already use is safe. tests/test_gold.py checks that the
migrated schema and the models do not differ.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-21
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op


revision: str = '0002'
down_revision: str | None = '0001'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # nullable: existing users stay enabled; SQLite adds a nullable column in place
    op.add_column('users', sa.Column('disabled_at', sa.DateTime(timezone=True), nullable=True))
    op.create_table('gold_tasks',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('name', sa.String(length=200), nullable=False),
        sa.Column('batch_id', sa.Integer(), nullable=False),
        sa.Column('mode', sa.String(length=10), nullable=False),
        sa.Column('annotators_per_mention', sa.Integer(), nullable=False),
        sa.Column('sample_size', sa.Integer(), nullable=True),
        sa.Column('seed', sa.Integer(), nullable=True),
        sa.Column('created_by_id', sa.Integer(), nullable=True),
        sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("mode IN ('blind', 'assisted')", name=op.f('ck_gold_tasks_mode')),
        sa.ForeignKeyConstraint(['batch_id'], ['batches.id'], name=op.f('fk_gold_tasks_batch_id_batches')),
        sa.ForeignKeyConstraint(['created_by_id'], ['users.id'], name=op.f('fk_gold_tasks_created_by_id_users')),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_gold_tasks'))
    )
    op.create_index(op.f('ix_gold_tasks_batch_id'), 'gold_tasks', ['batch_id'], unique=False)
    op.create_table('gold_assignments',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('task_id', sa.Integer(), nullable=False),
        sa.Column('mention_id', sa.Integer(), nullable=False),
        sa.Column('user_id', sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(['mention_id'], ['mentions.id'], name=op.f('fk_gold_assignments_mention_id_mentions')),
        sa.ForeignKeyConstraint(['task_id'], ['gold_tasks.id'], name=op.f('fk_gold_assignments_task_id_gold_tasks'),
                                ondelete='CASCADE'),
        sa.ForeignKeyConstraint(['user_id'], ['users.id'], name=op.f('fk_gold_assignments_user_id_users')),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_gold_assignments')),
        sa.UniqueConstraint('task_id', 'mention_id', 'user_id',
                            name=op.f('uq_gold_assignments_task_id_mention_id_user_id'))
    )
    op.create_index('ix_gold_assignments_user', 'gold_assignments', ['task_id', 'user_id'], unique=False)
    op.create_table('gold_annotations',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('task_id', sa.Integer(), nullable=False),
        sa.Column('mention_id', sa.Integer(), nullable=False),
        sa.Column('user_id', sa.Integer(), nullable=False),
        sa.Column('terms', sa.JSON(), nullable=False),
        sa.Column('comment', sa.Text(), nullable=False),
        sa.Column('seconds', sa.Float(), nullable=False),
        sa.Column('at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('is_latest', sa.Boolean(), nullable=False),
        sa.ForeignKeyConstraint(['mention_id'], ['mentions.id'], name=op.f('fk_gold_annotations_mention_id_mentions')),
        sa.ForeignKeyConstraint(['task_id'], ['gold_tasks.id'], name=op.f('fk_gold_annotations_task_id_gold_tasks'),
                                ondelete='CASCADE'),
        sa.ForeignKeyConstraint(['user_id'], ['users.id'], name=op.f('fk_gold_annotations_user_id_users')),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_gold_annotations'))
    )
    op.create_index('ix_gold_annotations_task', 'gold_annotations', ['task_id', 'mention_id', 'is_latest'],
                    unique=False)
    op.create_table('gold_labels',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('task_id', sa.Integer(), nullable=False),
        sa.Column('mention_id', sa.Integer(), nullable=False),
        sa.Column('terms', sa.JSON(), nullable=False),
        sa.Column('source', sa.String(length=20), nullable=False),
        sa.Column('by_id', sa.Integer(), nullable=True),
        sa.Column('comment', sa.Text(), nullable=False),
        sa.Column('at', sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("source IN ('agreed', 'adjudicated')", name=op.f('ck_gold_labels_source')),
        sa.ForeignKeyConstraint(['by_id'], ['users.id'], name=op.f('fk_gold_labels_by_id_users')),
        sa.ForeignKeyConstraint(['mention_id'], ['mentions.id'], name=op.f('fk_gold_labels_mention_id_mentions')),
        sa.ForeignKeyConstraint(['task_id'], ['gold_tasks.id'], name=op.f('fk_gold_labels_task_id_gold_tasks'),
                                ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_gold_labels')),
        sa.UniqueConstraint('task_id', 'mention_id', name=op.f('uq_gold_labels_task_id_mention_id'))
    )
    op.create_index(op.f('ix_gold_labels_mention_id'), 'gold_labels', ['mention_id'], unique=False)


def downgrade() -> None:
    op.drop_index(op.f('ix_gold_labels_mention_id'), table_name='gold_labels')
    op.drop_table('gold_labels')
    op.drop_index('ix_gold_annotations_task', table_name='gold_annotations')
    op.drop_table('gold_annotations')
    op.drop_index('ix_gold_assignments_user', table_name='gold_assignments')
    op.drop_table('gold_assignments')
    op.drop_index(op.f('ix_gold_tasks_batch_id'), table_name='gold_tasks')
    op.drop_table('gold_tasks')
    # SQLite cannot always drop a column in place: batch mode copies the table
    with op.batch_alter_table('users') as batch_op:
        batch_op.drop_column('disabled_at')
