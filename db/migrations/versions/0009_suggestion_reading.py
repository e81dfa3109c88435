"""How the engine read a mention when it suggested: suggestions.read_as.

The mention with the abbreviations its note defines, and those of the abbreviation lists, spelled out
(termnorm.reading). Exports give it beside each decision, so a reader of a coded "PAF" sees that the coder
was shown "paroxysmal atrial fibrillation". Nullable: a mention read as written, and suggestions stored
before this revision, have none.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-27
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op


revision: str = '0009'
down_revision: str | None = '0008'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table('suggestions') as b:
        b.add_column(sa.Column('read_as', sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('suggestions') as b:
        b.drop_column('read_as')
