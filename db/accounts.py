"""Users as the operations name them, the audit log and the app's settings table.

Sign-in, passwords and roles are ``db.auth``; here a username becomes a ``User`` row (created on first use
by :func:`get_or_create_user`), every write of the app is recorded with :func:`audit`, and app settings are
read and written with :func:`get_setting` / :func:`put_setting`.
"""

from __future__ import annotations

import pandas as pd
from sqlalchemy import select
from sqlalchemy.orm import Session

from db.models import ROLES, AppSetting, AuditLog, User


# ================================================================ users / audit
def get_or_create_user(s: Session, username: str, role: str = "coder") -> User:
    """The user ``username``, added (with ``role``, audited) if new; the caller commits."""
    username = (username or "").strip()
    if not username:
        raise ValueError("empty username")
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}; expected one of {', '.join(ROLES)}")
    u = s.scalar(select(User).where(User.username == username))
    if u is None:
        u = User(username=username, role=role)
        s.add(u)
        s.flush()
        audit(s, u, "create", "user", u.id, {"role": role})
    return u


#: The account `termnorm load-data` acts as (db.loader): its decisions are the loaded sets' gold, not a coder's work.
LOADER_USER = "import"


def acting_user(s: Session, username: str) -> User:
    """The user a write is done by (:func:`get_or_create_user`), refused when the account is disabled: a page
    left open after an admin disabled it saves nothing (PermissionError, nothing written)."""
    u = get_or_create_user(s, username)
    if u.disabled_at is not None:
        raise PermissionError(f"user {u.username!r} is disabled: nothing saved")
    return u


def ensure_user(s: Session, username: str, role: str = "coder") -> User:
    """The user ``username``, created with ``role`` if new (an existing user's role is kept)."""
    u = get_or_create_user(s, username, role)
    s.commit()
    return u


def users(s: Session) -> list[dict]:
    return [{"id": u.id, "username": u.username, "role": u.role}
            for u in s.scalars(select(User).order_by(User.username))]


def audit(s: Session, user: User | None, action: str, object_type: str, object_id: int | None,
          details: dict | None = None) -> None:
    """Add an audit-log entry in the caller's transaction (``user`` None: the system)."""
    s.add(AuditLog(user_id=user.id if user else None, username=user.username if user else "",
                   action=action, object_type=object_type, object_id=object_id, details=details or {}))


def audit_frame(s: Session, limit: int = 200) -> pd.DataFrame:
    """The latest audit entries, newest first."""
    rows = s.scalars(select(AuditLog).order_by(AuditLog.id.desc()).limit(limit))
    return pd.DataFrame([{"id": a.id, "at": a.at, "user": a.username, "action": a.action,
                          "object": a.object_type, "object_id": a.object_id, "details": a.details} for a in rows],
                        columns=["id", "at", "user", "action", "object", "object_id", "details"])


# ================================================================ app settings
def get_setting(s: Session, key: str, default=None):
    """A setting of the ``app_settings`` table (any JSON value), ``default`` when never set."""
    row = s.get(AppSetting, key)
    return default if row is None else row.value.get("value", default)


def put_setting(s: Session, key: str, value) -> None:
    """Set a setting in the caller's transaction (the caller checks the role, audits and commits)."""
    row = s.get(AppSetting, key)
    if row is None:
        s.add(AppSetting(key=key, value={"value": value}))
    else:
        row.value = {"value": value}
