"""Users, roles and sign-in (db/auth.py, termnorm/cli_admin.py) on a real SQLite file.

Checks the server-side rules, not the pages: bcrypt hashes (never the
password) are stored, sign-in succeeds only with the right password on an
enabled account and is audited either way, repeated failures lock a name out,
admin actions raise PermissionError for anyone below admin (a coder, a lead,
a disabled admin), the last admin cannot be removed, and ``termnorm
create-admin`` reads the password from a file or stdin.
"""

from __future__ import annotations

import io

import pytest
from sqlalchemy import select

from db import accounts, auth, services
from db.models import User
from termnorm import cli_admin


pytestmark = pytest.mark.usefixtures("fast_bcrypt")


@pytest.fixture
def s(db_url):
    with services.session_scope(db_url) as session:
        yield session


@pytest.fixture
def admin(s):
    auth.create_admin(s, "root", "correct horse battery")
    return "root"


def actions(s, action: str) -> list[dict]:
    df = services.audit_frame(s, limit=1000)
    return df[df.action == action].to_dict("records")


# ------------------------------------------------------------------ passwords
def test_password_hash_is_salted_bcrypt_and_verifies():
    h1, h2 = auth.hash_password("secret-pass-1"), auth.hash_password("secret-pass-1")
    assert h1.startswith(auth.HASH_PREFIX + "$2b$04$") and h1 != h2  # salted, cost from the env
    assert "secret-pass-1" not in h1
    assert auth.verify_password("secret-pass-1", h1) and auth.verify_password("secret-pass-1", h2)
    assert not auth.verify_password("secret-pass-2", h1)
    assert not auth.verify_password("secret-pass-1", None) and not auth.verify_password("x", "garbage")
    # bcrypt alone ignores bytes after 72: the SHA-256 pre-hash keeps long passphrases distinct
    long_a, long_b = "长" * 30 + "a", "长" * 30 + "b"  # 91 UTF-8 bytes each, differing at the end
    assert not auth.verify_password(long_b, auth.hash_password(long_a))
    with pytest.raises(ValueError):
        auth.hash_password("short")
    with pytest.raises(ValueError):
        auth.hash_password(" " * 12)


def test_roles_are_ordered():
    assert auth.has_role("admin", "lead") and auth.has_role("lead", "annotator") and auth.has_role("coder", "coder")
    assert not auth.has_role("coder", "annotator") and not auth.has_role("annotator", "lead")
    assert not auth.has_role(None, "coder") and not auth.has_role("boss", "coder")
    with pytest.raises(ValueError):
        auth.has_role("admin", "boss")


def test_auth_switch(monkeypatch):
    monkeypatch.delenv("TERMNORM_AUTH", raising=False)
    assert auth.auth_enabled()  # on unless explicitly switched off
    for off in ("off", "0", "false", "NO"):
        monkeypatch.setenv("TERMNORM_AUTH", off)
        assert not auth.auth_enabled()


# ------------------------------------------------------------------ sign-in
def test_first_admin_and_sign_in_are_audited(s):
    assert auth.needs_first_admin(s)
    u = auth.create_admin(s, "root", "correct horse battery")
    assert u["role"] == "admin" and u["has_password"] and not auth.needs_first_admin(s)
    stored = s.scalar(select(User.password_hash).where(User.username == "root"))
    assert stored.startswith(auth.HASH_PREFIX) and "horse" not in stored

    assert auth.authenticate(s, "root", "correct horse battery")["username"] == "root"
    assert auth.authenticate(s, "root", "wrong horse battery") is None
    assert auth.authenticate(s, "nobody", "correct horse battery") is None
    assert [a["user"] for a in actions(s, "sign_in")] == ["root"]
    failed = actions(s, "sign_in_failed")
    assert sorted((a["user"], a["details"]["reason"]) for a in failed) == [
        ("nobody", "unknown user"), ("root", "wrong password")]
    assert all("horse" not in str(a["details"]) for a in failed)
    assert actions(s, "create_admin")[0]["user"] == "(command line)"


def test_users_without_password_or_disabled_cannot_sign_in(s, admin):
    services.ensure_user(s, "legacy")  # made by the coding queue in demo mode: no password
    assert auth.authenticate(s, "legacy", "") is None and auth.authenticate(s, "legacy", "anything-long") is None
    auth.create_user(s, admin, "li", "li-password", "annotator")
    auth.set_disabled(s, admin, "li")
    assert auth.authenticate(s, "li", "li-password") is None and auth.role_of(s, "li") is None
    with pytest.raises(PermissionError, match="disabled"):
        auth.require(s, "li", "coder")
    auth.set_disabled(s, admin, "li", False)
    assert auth.authenticate(s, "li", "li-password")["role"] == "annotator"


def test_repeated_failures_lock_the_name(s, admin, monkeypatch):
    monkeypatch.setattr(auth, "MAX_FAILURES", 3)
    auth.create_user(s, admin, "wang", "wang-password", "coder")
    for _ in range(3):
        assert auth.authenticate(s, "wang", "guess-guess") is None
    assert auth.authenticate(s, "wang", "wang-password") is None  # locked, even with the right password
    assert actions(s, "sign_in_failed")[0]["details"]["reason"].startswith("locked")
    assert auth.authenticate(s, admin, "correct horse battery") is not None  # other names are not affected


def test_single_sign_on_signs_in_only_enabled_accounts_an_admin_made(s, admin):
    """authenticate_oidc: the identity provider's word names the account; it creates none and lifts no lock."""
    auth.create_user(s, admin, "li@hospital.example", "li-password", "lead")
    user = auth.authenticate_oidc(s, "li@hospital.example", "https://sso.hospital.example")
    assert user["role"] == "lead"
    assert actions(s, "sign_in")[0]["details"] == {"method": "oidc", "issuer": "https://sso.hospital.example"}
    assert auth.authenticate_oidc(s, "stranger@hospital.example") is None
    assert auth.user(s, "stranger@hospital.example") is None  # no account appears
    assert actions(s, "sign_in_failed")[0]["details"]["reason"] == "unknown user"
    assert auth.authenticate_oidc(s, "") is None
    auth.set_disabled(s, admin, "li@hospital.example")
    assert auth.authenticate_oidc(s, "li@hospital.example") is None
    assert actions(s, "sign_in_failed")[0]["details"]["reason"] == "disabled"


# ------------------------------------------------------------------ administration is for admins
def test_admin_manages_users(s, admin):
    auth.create_user(s, admin, "lead1", "lead-password", "lead")
    auth.create_user(s, admin, "coder1", "coder-password")
    assert {u["username"]: u["role"] for u in auth.list_users(s, admin)} == {
        "root": "admin", "lead1": "lead", "coder1": "coder"}
    auth.set_role(s, admin, "coder1", "annotator")
    assert auth.role_of(s, "coder1") == "annotator"
    assert auth.users_with_role(s, "annotator") == ["coder1", "lead1", "root"]
    services.ensure_user(s, accounts.LOADER_USER, role="admin")  # termnorm load-data's account: never assigned work
    assert auth.users_with_role(s, "annotator") == ["coder1", "lead1", "root"]
    auth.set_password(s, admin, "coder1", "new-coder-password")
    assert auth.authenticate(s, "coder1", "new-coder-password") is not None
    with pytest.raises(ValueError, match="exists"):
        auth.create_user(s, admin, "coder1", "whatever-password")
    with pytest.raises(ValueError, match="'lead1' exists already: names differing only in case"):
        auth.create_user(s, admin, "LEAD1", "whatever-password", "admin")  # a look-alike of lead1
    with pytest.raises(ValueError, match="role"):
        auth.create_user(s, admin, "x", "whatever-password", "boss")
    roles = actions(s, "set_role")[0]
    assert (roles["user"], roles["details"]["from"], roles["details"]["to"]) == ("root", "coder", "annotator")
    assert {a["details"]["username"] for a in actions(s, "create_user")} == {"lead1", "coder1"}


@pytest.mark.parametrize("role", ["coder", "annotator", "lead"])
def test_non_admins_cannot_administer(s, admin, role):
    auth.create_user(s, admin, "someone", "someone-password", role)
    auth.create_user(s, admin, "other", "other-password", "coder")
    for call in (lambda: auth.create_user(s, "someone", "evil", "evil-password", "admin"),
                 lambda: auth.set_role(s, "someone", "someone", "admin"),
                 lambda: auth.set_role(s, "someone", "other", "lead"),
                 lambda: auth.set_password(s, "someone", "other", "taken-over-pw"),
                 lambda: auth.set_disabled(s, "someone", "root"),
                 lambda: auth.list_users(s, "someone")):
        with pytest.raises(PermissionError):
            call()
    assert auth.role_of(s, "someone") == role and auth.role_of(s, "other") == "coder"
    assert auth.user(s, "evil") is None
    with pytest.raises(PermissionError):
        auth.create_user(s, "ghost", "x1", "ghost-password")  # an unknown acting user is refused too


def test_users_change_their_own_password_with_the_current_one(s, admin):
    auth.create_user(s, admin, "li", "li-password", "coder")
    with pytest.raises(PermissionError):
        auth.set_password(s, "li", "li", "li-new-password", current_password="wrong-one")
    auth.set_password(s, "li", "li", "li-new-password", current_password="li-password")
    assert auth.authenticate(s, "li", "li-new-password") is not None


def test_the_last_admin_stays(s, admin):
    with pytest.raises(ValueError, match="last admin"):
        auth.set_role(s, admin, admin, "lead")
    with pytest.raises(ValueError, match="last admin"):
        auth.set_disabled(s, admin, admin)
    auth.create_user(s, admin, "root2", "second-root-pw", "admin")
    auth.set_role(s, admin, admin, "lead")  # now allowed: root2 is still admin
    with pytest.raises(PermissionError):
        auth.set_role(s, admin, admin, "admin")  # and root, now a lead, cannot promote itself back


# ------------------------------------------------------------------ termnorm create-admin
def test_cli_create_admin_from_password_file_and_stdin(tmp_path, db_url):
    pw = tmp_path / "pw.txt"
    pw.write_text("file-password-123\nignored second line\n", encoding="utf-8")
    out, err = io.StringIO(), io.StringIO()
    assert cli_admin.create_admin("boss", str(pw), db_url, stdout=out, stderr=err) == 0
    assert "boss" in out.getvalue() and not err.getvalue()
    assert cli_admin.create_admin("boss2", None, db_url, stdin=io.StringIO("stdin-password-123\n"), stdout=out) == 0
    # too short: refused with a message, nothing created
    assert cli_admin.create_admin("weak", None, db_url, stdin=io.StringIO("short\n"), stdout=out, stderr=err) == 2
    assert "at least" in err.getvalue()
    with services.session_scope(db_url) as s:
        assert auth.authenticate(s, "boss", "file-password-123")["role"] == "admin"
        assert auth.authenticate(s, "boss2", "stdin-password-123")["role"] == "admin"
        assert auth.user(s, "weak") is None
    # argparse entry point (what `termnorm create-admin` calls)
    assert cli_admin.main(["boss3", "--password-file", str(pw), "--db", db_url]) == 0
    # nothing piped in: said so (not "too short"); running it again on an account says the password was reset
    err = io.StringIO()
    assert cli_admin.create_admin("boss4", None, db_url, stdin=io.StringIO(""), stdout=out, stderr=err) == 2
    assert "no password on standard input" in err.getvalue()
    out = io.StringIO()
    assert cli_admin.create_admin("boss", None, db_url, stdin=io.StringIO("newer-password-456\n"), stdout=out) == 0
    assert "password was reset" in out.getvalue()


def test_the_database_password_is_never_printed_and_a_bad_url_is_one_line(tmp_path, monkeypatch):
    """A user test: create-admin and `termnorm settings` printed the database password; a wrong password gave a
    119-line traceback, a password holding '@' or '/' "invalid literal for int() with base 10: 'w'"."""
    from termnorm import settings

    pw = tmp_path / "pw.txt"
    pw.write_text("file-password-123\n", encoding="utf-8")
    down = "postgresql+psycopg://etl:S3cret-pw@127.0.0.1:1/termnorm"  # nothing listens on port 1
    out, err = io.StringIO(), io.StringIO()
    assert cli_admin.create_admin("boss", str(pw), down, stdout=out, stderr=err) == 2
    said = err.getvalue()
    assert said.startswith("error: the database postgresql+psycopg://etl:***@127.0.0.1:1/termnorm did not answer")
    assert len(said.strip().splitlines()) == 1 and "S3cret" not in said + out.getvalue()
    err = io.StringIO()
    raw = "postgresql+psycopg://etl:p@ss:w/rd@127.0.0.1:1/termnorm"
    assert cli_admin.create_admin("boss", str(pw), raw, stdout=out, stderr=err) == 2
    assert "must be URL-encoded: @ as %40, : as %3A, / as %2F" in err.getvalue()
    monkeypatch.setenv("TERMNORM_DB_URL", down)  # settings are read again when the environment changes
    assert "db_url = postgresql+psycopg://etl:***@127.0.0.1:1/termnorm" in settings.describe().splitlines()


def test_a_session_token_signs_in_until_signed_out_expired_or_disabled(s, admin, monkeypatch):
    """What keeps a coder signed in across a reload or a new tab (the app's session cookie)."""
    from datetime import timedelta

    from db.models import UserSession

    auth.create_user(s, admin, "zhang", "zhang-password", "coder")
    token = auth.create_session(s, "zhang")
    assert auth.session_user(s, token)["username"] == "zhang"
    row = s.scalar(select(UserSession))
    assert row.token_sha256 != token and len(row.token_sha256) == 64  # only the hash is stored
    assert auth.session_user(s, token + "x") is None and auth.session_user(s, None) is None
    # signing out ends it
    auth.record_sign_out(s, "zhang", token)
    assert auth.session_user(s, token) is None
    # it expires
    monkeypatch.setenv("TERMNORM_SESSION_HOURS", "1")
    late = auth.create_session(s, "zhang")
    assert auth.session_user(s, late) is not None
    row = s.scalar(select(UserSession).where(UserSession.revoked_at.is_(None)))
    row.expires_at = services.utcnow() - timedelta(seconds=1)
    s.commit()
    assert auth.session_user(s, late) is None
    # a disabled account's sessions no longer sign in
    other = auth.create_session(s, "zhang")
    auth.set_disabled(s, admin, "zhang", True)
    assert auth.session_user(s, other) is None
    with pytest.raises(PermissionError):
        auth.create_session(s, "zhang")
