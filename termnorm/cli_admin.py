"""``termnorm create-admin USERNAME``: the first admin of the review app, from the command line.

The app has no sign-up: an admin creates every other account on the Users
page, and the first admin comes from here (whoever can run this already holds
the database). The password is never taken as an argument (it would end up
in the shell history and in ``ps``): it is read from ``--password-file``,
else from standard input when that is not a terminal (first line), else
asked twice with :func:`getpass.getpass`.

Wiring into ``termnorm/cli.py``::

    from termnorm.cli_admin import add_create_admin_arguments, cmd_create_admin
    p = sub.add_parser("create-admin", help="create the first admin of the review app (password from stdin)")
    add_create_admin_arguments(p)
    p.set_defaults(func=cmd_create_admin)

Also runnable alone: ``python -m termnorm.cli_admin alice --password-file pw.txt``.
"""

from __future__ import annotations

import argparse
import getpass
import sys
from pathlib import Path
from typing import TextIO


def add_create_admin_arguments(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    p.add_argument("username")
    p.add_argument("--password-file", help="read the password from the first line of this file (else the first "
                                            "line piped to standard input, else asked twice at the terminal)")
    p.add_argument("--db", help="SQLAlchemy URL (default: $TERMNORM_DB_URL, else termnorm.sqlite3 in the data directory: termnorm settings)")
    return p


def read_password(password_file: str | None = None, stdin: TextIO | None = None) -> str:
    """The password from ``password_file`` (first line), else piped stdin (first line), else getpass (twice)."""
    stdin = sys.stdin if stdin is None else stdin
    if password_file:
        lines = Path(password_file).read_text(encoding="utf-8").splitlines()
        return lines[0] if lines else ""
    if not stdin.isatty():
        line = stdin.readline().rstrip("\r\n")
        if not line:
            raise ValueError("no password on standard input: pipe one in, or use --password-file or a terminal")
        return line
    try:
        first = getpass.getpass("Password: ")
        again = getpass.getpass("Repeat the password: ")
    except (EOFError, KeyboardInterrupt):
        raise ValueError("no password given: nothing changed") from None
    if again != first:
        raise ValueError("the two passwords differ")
    return first


def create_admin(username: str, password_file: str | None = None, db: str | None = None,
                 stdin: TextIO | None = None, stdout: TextIO | None = None, stderr: TextIO | None = None) -> int:
    """Create (or promote, resetting the password) the admin ``username``; exit status 0, or 2 on a bad input."""
    from sqlalchemy.exc import OperationalError

    from db import auth, services
    from termnorm import settings

    stdout = sys.stdout if stdout is None else stdout
    stderr = sys.stderr if stderr is None else stderr
    try:
        password = read_password(password_file, stdin)
        auth.check_password_policy(password)
        with services.session_scope(db) as s:
            existed = any(x["username"] == username.strip() for x in services.users(s))
            u = auth.create_admin(s, username, password)
    except (ValueError, OSError) as e:
        print(f"error: {e}", file=stderr)
        return 2
    except OperationalError as e:  # the server down, a wrong password: one line, not a traceback
        first = str(e.orig or e).strip().splitlines()[0]
        print(f"error: the database {settings.shown_url(services.database_url(db))} did not answer: {first}",
              file=stderr)
        return 2
    what = " (an existing account: its password was reset, it is an enabled admin)" if existed else ""
    print(f"admin {u['username']!r} ready in {settings.shown_url(services.database_url(db))}{what}", file=stdout)
    return 0


def cmd_create_admin(args: argparse.Namespace) -> int:
    """The argparse entry point (``args.username``, ``args.password_file``, ``args.db``)."""
    return create_admin(args.username, args.password_file, args.db)


def add_server_commands(sub) -> None:
    """``termnorm serve`` (the normalization API, db.http_api), ``termnorm api-token USER`` (its tokens) and
    ``termnorm backup DEST`` (db.backup)."""
    p = sub.add_parser("serve", help="start the normalization API (FastAPI; OpenAPI docs at /docs)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default: this machine only)")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--db", help="SQLAlchemy URL (default: $TERMNORM_DB_URL, else the data directory's SQLite file)")
    p.set_defaults(func=cmd_serve)
    p = sub.add_parser("api-token", help="a token for the normalization API acting as USER (printed once)")
    p.add_argument("username")
    p.add_argument("--days", type=float, default=None, help="how long it lasts (default 365)")
    p.add_argument("--db", help="SQLAlchemy URL (default: $TERMNORM_DB_URL, else the data directory's SQLite file)")
    p.set_defaults(func=cmd_api_token)
    p = sub.add_parser("backup", help="a consistent copy of the app's database while it runs (SQLite backup API; "
                                      "pg_dump for PostgreSQL)")
    p.add_argument("dest", help="the backup file to write (never overwritten)")
    p.add_argument("--db", help="SQLAlchemy URL (default: $TERMNORM_DB_URL, else the data directory's SQLite file)")
    p.set_defaults(func=cmd_backup)
    p = sub.add_parser("import-precoded", help="a pre-coded file (termnorm normalize --output) into the app as a "
                                               "batch with its suggestions, most frequent text first")
    p.add_argument("file")
    p.add_argument("--vocabulary", required=True, help="the app's vocabulary it was coded against (its name)")
    p.add_argument("--batch", help="the batch's name (default: the file name)")
    p.add_argument("--user", help="the account the import is audited as (default: none)")
    p.add_argument("--again", action="store_true", help="import it even when a batch already holds its mentions")
    p.add_argument("--db", help="SQLAlchemy URL (default: $TERMNORM_DB_URL, else the data directory's SQLite file)")
    p.set_defaults(func=cmd_import_precoded)


def cmd_serve(args: argparse.Namespace) -> int:
    import os

    if args.db:
        os.environ["TERMNORM_DB_URL"] = args.db
    from db import http_api

    return http_api.main(args.host, args.port)


def cmd_api_token(args: argparse.Namespace) -> int:
    """Print a new API token for ``args.username`` (only its SHA-256 is stored: it cannot be shown again)."""
    from db import auth, services

    try:
        with services.session_scope(args.db) as s:
            token = auth.create_api_token(s, args.username, args.days if args.days is not None
                                          else auth.API_TOKEN_DAYS)
    except (PermissionError, ValueError) as e:
        hint = " (create the user on the Users page first)" if str(e).startswith("no enabled user") else ""
        print(f"error: {e}{hint}", file=sys.stderr)
        return 2
    print(token)
    return 0


def cmd_import_precoded(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from db import precoded, services

    with services.session_scope(args.db) as s:
        vid = services.vocabulary_id(s, args.vocabulary)
        if vid is None:
            names = ", ".join(v["name"] for v in services.vocabularies(s)) or "none yet"
            print(f"error: no vocabulary {args.vocabulary!r} in the app (it has: {names})", file=sys.stderr)
            return 2
        bar = tqdm(desc="store suggestions", unit=" mentions", file=sys.stderr)

        def progress(done, total):
            bar.total = total
            bar.update(done - bar.n)

        report = precoded.import_precoded(s, args.file, args.batch or Path(args.file).stem, vid, args.user,
                                          progress=progress, again=args.again)
        bar.close()
    if report.duplicate_of is not None:
        dup = report.duplicate_of
        print(f"error: {args.file}: nothing imported: batch #{dup['id']} {dup['name']!r} holds its {dup['n']:,} "
              "mentions already (--again imports it as a new batch)", file=sys.stderr)
        return 2
    out = sys.stdout if report.batch_id else sys.stderr  # nothing imported: an error, where scripts look for one
    print(report.summary() + (f"; batch #{report.batch_id}" if report.batch_id else ""), file=out)
    for e in [*report.errors, *report.notices][:20]:
        print(f"  {e}", file=out)
    return 0 if report.batch_id else 2


def cmd_backup(args: argparse.Namespace) -> int:
    from db import backup

    try:
        out = backup.backup(args.dest, args.db)
    except (OSError, RuntimeError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"backed up {out['source']} to {out['file']} ({out['bytes']:,} bytes, {out['backend']})\n"
          f"restore: {out['restore']}")
    if out.get("note"):
        print(f"note: {out['note']}", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    p = add_create_admin_arguments(argparse.ArgumentParser(prog="termnorm create-admin", description=__doc__,
                                                           formatter_class=argparse.RawDescriptionHelpFormatter))
    return cmd_create_admin(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
