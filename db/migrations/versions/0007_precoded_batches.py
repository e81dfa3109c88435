"""Pre-coded batches (termnorm normalize --input/--output imported into the app) and the batch's queue order.

mentions.frequency: how many rows of the source share the mention's text (the pre-coded file's mention_rows);
batches.queue_order: the order coders are served in (file, uncertainty, confidence, frequency). Both nullable /
defaulted: existing rows keep today's behaviour (file order).

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-26
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op


revision: str = '0007'
down_revision: str | None = '0006'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table('mentions') as b:
        b.add_column(sa.Column('frequency', sa.Integer(), nullable=True))
    with op.batch_alter_table('batches') as b:
        b.add_column(sa.Column('queue_order', sa.String(length=20), nullable=False, server_default='file'))


def downgrade() -> None:
    with op.batch_alter_table('batches') as b:
        b.drop_column('queue_order')
    with op.batch_alter_table('mentions') as b:
        b.drop_column('frequency')
