"""Queue claims: mentions.claimed_by, mentions.claimed_at.

Two coders on the same batch used to be shown the same next mention; the
queue now claims the mention it serves (db.services.next_mention). Two new
nullable columns, nothing existing changes: upgrading a database in use is
safe (every mention starts unclaimed). tests/test_db.py checks that the
migrated schema and the models do not differ.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op


revision: str = '0003'
down_revision: str | None = '0002'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column('mentions', sa.Column('claimed_by', sa.String(length=100), nullable=True))
    op.add_column('mentions', sa.Column('claimed_at', sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('mentions') as batch:
        batch.drop_column('claimed_at')
        batch.drop_column('claimed_by')
