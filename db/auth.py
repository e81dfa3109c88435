"""Users, roles and sign-in for the review app (server-side checks; the pages only mirror them).

Roles are ordered: ``coder`` < ``annotator`` < ``lead`` < ``admin``; a role
may do everything the roles below it may. Who may do what:

========== =====================================================================
coder      the coding queue (accept / correct / reject suggestions), import
annotator  + gold annotation of the tasks assigned to them (db.gold)
lead       + gold tasks, agreement, adjudication, dashboards (db.gold, db.dashboard_data)
admin      + users: create, change role, reset password, disable (this module)
========== =====================================================================

Every function for a lead or admin action takes the *acting* username and
raises :class:`PermissionError` when that user's stored role is too low or
the account is disabled -- the role is read from the database on every call,
so a demotion takes effect at once, and a page that forgot to hide a button
still cannot act.

Passwords are stored as bcrypt hashes (the ``bcrypt`` package). bcrypt reads
at most 72 bytes, so the password is first reduced with HMAC-SHA-256 to 44
base64 bytes (the "bcrypt_sha256" construction of passlib): long passphrases
keep all their entropy and never hit the 72-byte limit. Stored format:
``bcrypt-sha256$<bcrypt hash>``.

Sign-in can be switched off for tests and the offline demo only
(``TERMNORM_AUTH=off``, see :func:`auth_enabled`); it is on by default.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from collections.abc import Sequence
from datetime import UTC, timedelta

import bcrypt
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from db import accounts, services
from db.models import ROLES, AuditLog, User, UserSession, utcnow
from termnorm import settings

ROLE_RANK = {role: i for i, role in enumerate(ROLES)}  # coder 0 < annotator 1 < lead 2 < admin 3
ROLE_HELP = {
    "coder": "codes mentions in the coding queue",
    "annotator": "codes, and annotates the gold tasks assigned to them",
    "lead": "annotates, creates gold tasks, adjudicates, sees the dashboards",
    "admin": "everything, and manages users",
}

# bcrypt cost: 2**12 rounds take ~0.25 s per hash on one 2020s CPU core -- slow for a guesser, barely
# noticeable at sign-in (OWASP's minimum for bcrypt is 10). Tests lower it with TERMNORM_BCRYPT_ROUNDS
# (bcrypt's minimum is 4) so that they stay fast; verification reads the cost from the stored hash.
BCRYPT_ROUNDS = 12
# Shorter passwords are refused (NIST SP 800-63B: at least 8 characters for a memorised secret).
MIN_PASSWORD_LENGTH = 8
# After this many failed sign-ins for one user name within LOCKOUT_MINUTES, further attempts are refused
# (even with the right password) until the window has passed: slows online guessing to ~40 tries an hour
# per name while a user who mistypes a few times is never locked out. Counted from the audit log.
MAX_FAILURES = 10
LOCKOUT_MINUTES = 15
# A signed-in browser stays signed in for a working day and its overtime (a reload or a new tab no longer
# signs the coder out); signing out, disabling the account or this expiry ends it.
SESSION_HOURS = 12
HASH_PREFIX = "bcrypt-sha256$"
AUTH_ENV = "TERMNORM_AUTH"
_HMAC_KEY = b"termnorm-bcrypt-sha256"  # a fixed domain separator (not a secret): only the pre-hash uses it


# ================================================================ configuration
def auth_enabled() -> bool:
    """Sign-in is required unless ``$TERMNORM_AUTH`` is ``off`` / ``0`` / ``false`` / ``no`` (tests, demo)."""
    return settings.get().auth


def has_role(role: str | None, needed: str) -> bool:
    """True when ``role`` is ``needed`` or above it (coder < annotator < lead < admin)."""
    if needed not in ROLE_RANK:
        raise ValueError(f"unknown role {needed!r}; expected one of {', '.join(ROLES)}")
    return role in ROLE_RANK and ROLE_RANK[role] >= ROLE_RANK[needed]


# ================================================================ passwords
def _rounds() -> int:
    return settings.get().bcrypt_rounds


def _prehash(password: str) -> bytes:
    digest = hmac.new(_HMAC_KEY, password.encode("utf-8"), hashlib.sha256).digest()
    return base64.b64encode(digest)  # 44 bytes, no NUL (bcrypt stops at NUL)


def check_password_policy(password: str) -> None:
    """ValueError unless ``password`` has at least MIN_PASSWORD_LENGTH characters and is not only spaces."""
    if not isinstance(password, str) or len(password) < MIN_PASSWORD_LENGTH or not password.strip():
        raise ValueError(f"a password needs at least {MIN_PASSWORD_LENGTH} characters")


def hash_password(password: str) -> str:
    """A salted bcrypt hash of ``password`` (HMAC-SHA-256 pre-hashed, see the module docstring)."""
    check_password_policy(password)
    return HASH_PREFIX + bcrypt.hashpw(_prehash(password), bcrypt.gensalt(_rounds())).decode("ascii")


def verify_password(password: str, stored: str | None) -> bool:
    """True when ``password`` matches the stored hash (constant time in bcrypt); False for no / bad hash."""
    if not stored or not stored.startswith(HASH_PREFIX) or not isinstance(password, str):
        return False
    try:
        return bcrypt.checkpw(_prehash(password), stored[len(HASH_PREFIX):].encode("ascii"))
    except ValueError:  # a corrupted hash
        return False


# A hash to check against when the user does not exist, so that "no such user" and "wrong password"
# take the same time (no user enumeration by timing). Made on first use (hashing costs ~0.25 s).
_dummy_hash: str | None = None


def _dummy() -> str:
    global _dummy_hash
    if _dummy_hash is None:
        _dummy_hash = hash_password("not-a-real-password")
    return _dummy_hash


# ================================================================ look-ups
def _get(s: Session, username: str) -> User | None:
    return s.scalar(select(User).where(User.username == (username or "").strip()))


def _user_dict(u: User) -> dict:
    return {"id": u.id, "username": u.username, "role": u.role, "has_password": bool(u.password_hash),
            "disabled": u.disabled_at is not None, "created_at": u.created_at}


def user(s: Session, username: str) -> dict | None:
    """The user as a dict (id, username, role, has_password, disabled, created_at), or None."""
    u = _get(s, username)
    return None if u is None else _user_dict(u)


def role_of(s: Session, username: str) -> str | None:
    """The stored role of an enabled user, else None."""
    u = _get(s, username)
    return None if u is None or u.disabled_at is not None else u.role


def require(s: Session, username: str, role: str) -> User:
    """The acting user, if it exists, is enabled and has ``role`` or above; else PermissionError.

    Every lead / admin function of db/ calls this first with the acting username.
    """
    u = _get(s, username)
    if u is None:
        raise PermissionError(f"unknown user {username!r}: a {role} is required")
    if u.disabled_at is not None:
        raise PermissionError(f"user {u.username!r} is disabled")
    if not has_role(u.role, role):
        raise PermissionError(f"{u.username!r} is a {u.role}: this needs the {role} role")
    return u


def list_users(s: Session, acting_user: str) -> list[dict]:
    """Every user (admin only): id, username, role, has_password, disabled, created_at."""
    require(s, acting_user, "admin")
    return [_user_dict(u) for u in s.scalars(select(User).order_by(User.username))]


def users_with_role(s: Session, role: str) -> list[str]:
    """Names of the enabled users with ``role`` or above (e.g. who can be assigned gold annotation); not the
    account ``termnorm load-data`` acts as (accounts.LOADER_USER): nobody signs in as it, so its work never ends."""
    wanted = [r for r in ROLES if has_role(r, role)]
    return list(s.scalars(select(User.username).where(User.role.in_(wanted), User.disabled_at.is_(None),
                                                      User.username != accounts.LOADER_USER)
                          .order_by(User.username)))


def needs_first_admin(s: Session) -> bool:
    """True while no enabled admin with a password exists (the app then explains ``termnorm create-admin``)."""
    n = s.scalar(select(func.count()).select_from(User).where(User.role == "admin", User.disabled_at.is_(None),
                                                               User.password_hash.is_not(None)))
    return not n


# ================================================================ sign-in
def authenticate(s: Session, username: str, password: str) -> dict | None:
    """The user dict when ``username`` / ``password`` are right and the account is enabled, else None.

    Both outcomes are written to the audit log (``sign_in`` / ``sign_in_failed``,
    with the reason, never the password). Unknown users cost the same bcrypt
    check as known ones.
    """
    u = _get(s, username)
    ok = verify_password(password or "", u.password_hash if u is not None else _dummy())
    if u is not None and u.password_hash is None:
        ok = False
    reason = ("unknown user" if u is None else "no password set" if u.password_hash is None
              else "disabled" if u.disabled_at is not None else None if ok else "wrong password")
    if _recent_failures(s, (username or "").strip()) >= MAX_FAILURES:
        reason = "locked: too many failed sign-ins"
    if reason is None:
        accounts.audit(s, u, "sign_in", "user", u.id, {})
        s.commit()
        return _user_dict(u)
    # the attempted name is kept (it may be a typo of a real one) but never the password
    s.add(AuditLog(user_id=u.id if u else None, username=(username or "")[:100], action="sign_in_failed",
                            object_type="user", object_id=u.id if u else None, details={"reason": reason}))
    s.commit()
    return None


def authenticate_oidc(s: Session, identity: str | None, issuer: str | None = None) -> dict | None:
    """The enabled account named ``identity`` (the claim the hospital's identity provider vouched for, st.login),
    else None. No password is checked (the provider did that); accounts are still created by an admin, so
    signing in at the provider gives no rights by itself. Audited like a password sign-in, with the issuer."""
    name = (identity or "").strip()
    u = _get(s, name) if name else None
    reason = ("no identity claim" if not name else "unknown user" if u is None
              else "disabled" if u.disabled_at is not None else None)
    details = {"method": "oidc", "issuer": issuer or ""}
    if reason is None:
        accounts.audit(s, u, "sign_in", "user", u.id, details)
        s.commit()
        return _user_dict(u)
    s.add(AuditLog(user_id=u.id if u else None, username=name[:100], action="sign_in_failed",
                   object_type="user", object_id=u.id if u else None, details={**details, "reason": reason}))
    s.commit()
    return None


def _recent_failures(s: Session, username: str) -> int:
    since = utcnow() - timedelta(minutes=LOCKOUT_MINUTES)
    return int(s.scalar(select(func.count()).select_from(AuditLog).where(
        AuditLog.action == "sign_in_failed", AuditLog.username == username[:100], AuditLog.at >= since)) or 0)


def record_sign_out(s: Session, username: str, token: str | None = None) -> None:
    """Audit a sign-out and end the browser's session (``token``: its cookie), so the cookie no longer signs in."""
    u = _get(s, username)
    if u is not None:
        if token:
            revoke_session(s, token, commit=False)
        accounts.audit(s, u, "sign_out", "user", u.id, {})
        s.commit()


# ================================================================ sessions that survive a reload
def session_hours() -> float:
    """How long a signed-in browser stays signed in: ``$TERMNORM_SESSION_HOURS``, default SESSION_HOURS."""
    return settings.get().session_hours


def _token_sha256(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


SESSION_KINDS = ("web", "api")  # a browser's cookie; a token of termnorm api-token


def create_session(s: Session, username: str, hours: float | None = None, kind: str = "web") -> str:
    """A new random session token for a user who has just signed in (only its SHA-256 is stored), valid for
    ``hours`` (default :func:`session_hours`); ``kind``: web (the app's cookie) or api (the HTTP API's token)."""
    if kind not in SESSION_KINDS:
        raise ValueError(f"session kind {kind!r}: expected one of {', '.join(SESSION_KINDS)}")
    u = _get(s, username)
    if u is None or u.disabled_at is not None:
        raise PermissionError(f"no enabled user {username!r}")
    token = secrets.token_urlsafe(32)
    s.add(UserSession(user_id=u.id, token_sha256=_token_sha256(token), kind=kind,
                      expires_at=utcnow() + timedelta(hours=hours if hours is not None else session_hours())))
    s.commit()
    return token


#: Days an API token lasts unless the command says otherwise (a year: ETL jobs are set up once; revoke by
#: disabling the account, which ends all its tokens).
API_TOKEN_DAYS = 365


def create_api_token(s: Session, username: str, days: float = API_TOKEN_DAYS) -> str:
    """A token for the normalization API (db.http_api) acting as ``username`` with that user's role; audited.
    Refused for a lifetime of no days (a token dead on issue) and for the loader's own account, an admin nobody
    signs in as (a caller gets an account of its own, whose role and audit trail are its own)."""
    if not days > 0:
        raise ValueError(f"a token must last some time: --days {days:g} would be expired when issued")
    if username == accounts.LOADER_USER:
        raise PermissionError(f"{username!r} is the account termnorm load-data records loaded sets as, not a caller: "
                              "create a user for the calling system")
    token = create_session(s, username, hours=24 * days, kind="api")
    u = _get(s, username)
    accounts.audit(s, u, "api_token_created", "user", u.id, {"days": days})
    s.commit()
    return token


def session_user(s: Session, token: str | None, kind: str = "web") -> dict | None:
    """The user a session token of ``kind`` signs in: None when unknown, of the other kind (an API token set as
    the app's cookie), expired, revoked, or the account is disabled."""
    if not isinstance(token, str) or not token:  # no cookie (or a test harness's stand-in for one)
        return None
    row = s.scalar(select(UserSession).where(UserSession.token_sha256 == _token_sha256(token)))
    if row is None or (row.kind or "web") != kind or row.revoked_at is not None or _aware(row.expires_at) <= utcnow():
        return None
    u = s.get(User, row.user_id)
    return None if u is None or u.disabled_at is not None else _user_dict(u)


def other_sessions(s: Session, username: str, token: str | None) -> int:
    """How many live sessions ``username`` has besides the one ``token`` holds: other browsers signed in."""
    u = _get(s, username)
    if u is None:
        return 0
    q = select(func.count()).select_from(UserSession).where(
        UserSession.user_id == u.id, UserSession.kind == "web", UserSession.revoked_at.is_(None),
        UserSession.expires_at > utcnow())
    if isinstance(token, str) and token:
        q = q.where(UserSession.token_sha256 != _token_sha256(token))
    return int(s.scalar(q) or 0)


def revoke_session(s: Session, token: str, commit: bool = True) -> None:
    if not isinstance(token, str) or not token:
        return
    row = s.scalar(select(UserSession).where(UserSession.token_sha256 == _token_sha256(token)))
    if row is not None and row.revoked_at is None:
        row.revoked_at = utcnow()
    if commit:
        s.commit()


def _aware(t):
    """SQLite returns timestamps without their zone; they are stored in UTC."""
    return t if t.tzinfo is not None else t.replace(tzinfo=UTC)


# ================================================================ administration
def create_admin(s: Session, username: str, password: str) -> dict:
    """Bootstrap: create (or promote and set the password of) an admin. For the command line only.

    Whoever runs ``termnorm create-admin`` already has the database file, so no
    acting user is asked for; the audit log records ``create_admin`` by
    ``(command line)``.
    """
    username = (username or "").strip()
    if not username:
        raise ValueError("empty username")
    digest = hash_password(password)
    u = _get(s, username)
    new = u is None
    if new:
        u = User(username=username, role="admin", password_hash=digest)
        s.add(u)
        s.flush()
    else:
        u.role, u.password_hash, u.disabled_at = "admin", digest, None
    s.add(AuditLog(user_id=u.id, username="(command line)", action="create_admin", object_type="user",
                            object_id=u.id, details={"username": username, "new": new}))
    s.commit()
    return _user_dict(u)


def create_user(s: Session, acting_user: str, username: str, password: str, role: str = "coder") -> dict:
    """Create a user with a password (admin only). ValueError for a taken name, a bad role or a weak password."""
    actor = require(s, acting_user, "admin")
    username = (username or "").strip()
    if not username or len(username) > 100:
        raise ValueError("a username needs 1 to 100 characters")
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}; expected one of {', '.join(ROLES)}")
    digest = hash_password(password)
    u = _get(s, username)
    if u is not None and u.password_hash is not None:
        raise ValueError(f"user {username!r} exists already")
    twin = s.scalar(select(User.username).where(func.lower(User.username) == username.lower(),
                                                User.username != username))
    if twin is not None:  # LEAD1 beside lead1: two accounts a reader of the audit log takes for one
        raise ValueError(f"user {twin!r} exists already: names differing only in case are one name here")
    if u is None:  # a name seen before (demo mode, decisions) gets its password now
        u = User(username=username, role=role)
        s.add(u)
    u.role, u.password_hash = role, digest
    s.flush()
    accounts.audit(s, actor, "create_user", "user", u.id, {"username": username, "role": role})
    s.commit()
    return _user_dict(u)


def _last_admin_guard(s: Session, u: User) -> None:
    if u.role == "admin" and u.disabled_at is None:
        others = s.scalar(select(func.count()).select_from(User).where(
            User.role == "admin", User.disabled_at.is_(None), User.id != u.id))
        if not others:
            raise ValueError(f"{u.username!r} is the last admin: make another admin first")


def set_role(s: Session, acting_user: str, username: str, role: str) -> dict:
    """Change a user's role (admin only). The last enabled admin cannot be demoted."""
    actor = require(s, acting_user, "admin")
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}; expected one of {', '.join(ROLES)}")
    u = _get(s, username)
    if u is None:
        raise KeyError(f"no user {username!r}")
    if role != "admin":
        _last_admin_guard(s, u)
    old, u.role = u.role, role
    accounts.audit(s, actor, "set_role", "user", u.id, {"username": u.username, "from": old, "to": role})
    s.commit()
    return _user_dict(u)


def set_password(s: Session, acting_user: str, username: str, password: str,
                 current_password: str | None = None) -> None:
    """Set a password: an admin for anyone; a user for themself, giving ``current_password``."""
    actor = _get(s, acting_user)
    u = _get(s, username)
    if u is None:
        raise KeyError(f"no user {username!r}")
    if actor is not None and actor.id == u.id and not has_role(actor.role, "admin"):
        if actor.disabled_at is not None or not verify_password(current_password or "", actor.password_hash):
            raise PermissionError("the current password is wrong")
    else:
        actor = require(s, acting_user, "admin")
    u.password_hash = hash_password(password)
    accounts.audit(s, actor, "set_password", "user", u.id, {"username": u.username})
    s.commit()


def set_disabled(s: Session, acting_user: str, username: str, disabled: bool = True) -> dict:
    """Disable (or re-enable) an account (admin only); its decisions and annotations stay."""
    actor = require(s, acting_user, "admin")
    u = _get(s, username)
    if u is None:
        raise KeyError(f"no user {username!r}")
    if disabled:
        _last_admin_guard(s, u)
        u.disabled_at = u.disabled_at or utcnow()
    else:
        u.disabled_at = None
    accounts.audit(s, actor, "disable" if disabled else "enable", "user", u.id, {"username": u.username})
    s.commit()
    return _user_dict(u)


def audit_log(s: Session, acting_user: str, limit: int = 200, actions: Sequence[str] | None = None):
    """The latest audit entries (admin / lead), newest first, optionally only some ``actions``."""
    require(s, acting_user, "lead")
    df = services.audit_frame(s, limit=limit if actions is None else max(limit, 2000))
    if actions is not None:
        df = df[df["action"].isin(list(actions))].head(limit)
    return df.reset_index(drop=True)
