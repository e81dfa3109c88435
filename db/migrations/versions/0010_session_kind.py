"""What a session token is for: user_sessions.kind, ``web`` (a browser's cookie) or ``api`` (termnorm api-token).

Browser sessions and API tokens shared the table, so an API token set as the app's cookie signed in to the web
app for its 365 days, with no password and past TERMNORM_SESSION_HOURS. The app now takes only ``web`` tokens,
the API only ``api`` ones. Rows stored before this revision: a token issued for more than seven days was an API
token (browser sessions last hours, TERMNORM_SESSION_HOURS), the rest browser sessions.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-29
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

import sqlalchemy as sa
from alembic import op


revision: str = '0010'
down_revision: str | None = '0009'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: a stored token issued for longer than this was an API token
API_LIFETIME = timedelta(days=7)


def upgrade() -> None:
    with op.batch_alter_table('user_sessions') as b:
        b.add_column(sa.Column('kind', sa.String(length=8), nullable=False, server_default='web'))
    bind = op.get_bind()
    table = sa.table('user_sessions', sa.column('id'), sa.column('created_at', sa.DateTime(timezone=True)),
                     sa.column('expires_at', sa.DateTime(timezone=True)), sa.column('kind'))
    api = [i for i, made, ends in bind.execute(sa.select(table.c.id, table.c.created_at, table.c.expires_at))
           if made is not None and ends is not None and ends - made > API_LIFETIME]
    if api:
        bind.execute(table.update().where(table.c.id.in_(api)).values(kind='api'))


def downgrade() -> None:
    with op.batch_alter_table('user_sessions') as b:
        b.drop_column('kind')
