"""The text a mention was found in (a clinical note, an abstract): mentions.document.

The engine reads the mention in it (termnorm.context: abbreviations the document defines spelled out) and the
coding page shows it. Nullable: mentions imported without one are read as they are.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-26
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op


revision: str = '0008'
down_revision: str | None = '0007'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table('mentions') as b:
        b.add_column(sa.Column('document', sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('mentions') as b:
        b.drop_column('document')
