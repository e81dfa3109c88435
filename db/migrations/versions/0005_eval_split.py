"""The evaluation split: mentions.split ('train' | 'eval', NULL for unlabelled mentions).

Labelled mentions used to be kept out of training altogether (all of them
were gold); now each one is on the training side or on the held-out
evaluation side of an explicit split per vocabulary (db.learning: a share and
a seed a lead sees and can change, stored in ``app_settings`` under
``eval_split:<vocabulary id>``). One new nullable column with a check
constraint (batch mode: SQLite copies the table); nothing existing changes.
Labelled mentions of an upgraded database are assigned their side the first
time they are needed (db.learning.assign_unassigned, called by retraining
and the Training page), with the default settings.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op


revision: str = '0005'
down_revision: str | None = '0004'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SPLIT = "split IS NULL OR split IN ('train', 'eval')"


def upgrade() -> None:
    with op.batch_alter_table('mentions') as batch:
        batch.add_column(sa.Column('split', sa.String(length=10), nullable=True))
        batch.create_check_constraint(op.f('ck_mentions_split'), SPLIT)


def downgrade() -> None:
    with op.batch_alter_table('mentions') as batch:
        batch.drop_constraint(op.f('ck_mentions_split'), type_='check')
        batch.drop_column('split')
