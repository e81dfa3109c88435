"""termnorm's settings, in one object: environment variables over an optional TOML file over defaults.

Every ``TERMNORM_*`` variable the package reads is read here (the table is
``FIELDS``; the README's configuration table is generated from it by
``termnorm settings``). Run-time data -- the app's database, the model
registry, the background jobs' folders -- lives in the *data directory*, never
inside the installed package, so a non-editable ``pip install .`` works:

=================  ===============================================================
data directory     ``$TERMNORM_DATA_DIR``, else ``data_dir`` in the TOML file,
                   else ``$XDG_DATA_HOME/termnorm`` (``~/.local/share/termnorm``)
TOML file          ``$TERMNORM_CONFIG``, else ``./termnorm.toml`` when present
                   (keys: the field names below, e.g. ``db_url = "postgresql+psycopg://..."``)
=================  ===============================================================

``get()`` reads them once per distinct environment (a test that sets a
variable gets a fresh object; the app reads them once).
"""

from __future__ import annotations

import os
import re
import tomllib
from dataclasses import dataclass, fields
from functools import lru_cache
from pathlib import Path

CONFIG_ENV = "TERMNORM_CONFIG"
LOCAL_CONFIG = "termnorm.toml"


_TRUE, _FALSE = ("on", "1", "true", "yes"), ("off", "0", "false", "no")


def _bool(v) -> bool:
    if isinstance(v, bool):
        return v
    text = str(v).strip().lower()
    if text not in _TRUE + _FALSE:
        raise ValueError(f"expected on or off, got {v!r}")
    return text in _TRUE


def _number(kind, low: float | None = None, high: float | None = None):
    """A converter to int / float that refuses values outside [low, high] (saying which bound)."""
    def convert(v):
        try:
            x = kind(v)
        except (TypeError, ValueError):
            raise ValueError(f"expected a{'n integer' if kind is int else ' number'}, got {v!r}") from None
        if (low is not None and x < low) or (high is not None and x > high):
            raise ValueError(f"{x} is outside {low if low is not None else '-inf'}..{high if high is not None else 'inf'}")
        return x
    return convert


@dataclass(frozen=True)
class Settings:
    """What can be configured: field -> (environment variable, default, meaning) in ``FIELDS``."""

    data_dir: Path
    db_url: str
    models_dir: Path
    jobs_dir: Path
    cache_dir: Path
    auth: bool
    session_hours: float
    oidc_claim: str
    bcrypt_rounds: int
    min_dwell_s: float
    device: str
    threads: int
    fit_threads: int
    search_pause_ms: int
    config_file: str

    @property
    def db_path(self) -> Path:
        """The default SQLite file (used when ``db_url`` is not set)."""
        return self.data_dir / "termnorm.sqlite3"


#: field -> (environment variable, default (None: derived), what it sets). One row per setting.
FIELDS: dict[str, tuple[str, object, str]] = {
    "data_dir": ("TERMNORM_DATA_DIR", None, "run-time data: database, models, jobs (default ~/.local/share/termnorm)"),
    "db_url": ("TERMNORM_DB_URL", "", "SQLAlchemy URL of the app's database (default: SQLite file in the data dir)"),
    "models_dir": ("TERMNORM_MODELS", None, "model registry (default: models/ in the data dir)"),
    "jobs_dir": ("TERMNORM_JOBS", None, "background jobs' folders (default: jobs/ in the data dir)"),
    "cache_dir": ("TERMNORM_CACHE", None, "built encoder and downloaded wheels (default ~/.cache/termnorm)"),
    "auth": ("TERMNORM_AUTH", "on", "sign-in and roles; off = single demo coder"),
    "session_hours": ("TERMNORM_SESSION_HOURS", 12.0, "how long a sign-in lasts"),
    "oidc_claim": ("TERMNORM_OIDC_CLAIM", "email",
                   "single sign-on (st.login, .streamlit/secrets.toml [auth]): the claim naming the account"),
    "bcrypt_rounds": ("TERMNORM_BCRYPT_ROUNDS", 12, "bcrypt cost of stored passwords (4-31)"),
    "min_dwell_s": ("TERMNORM_MIN_DWELL_S", 0.4, "a decision sooner than this after a mention is drawn is refused"),
    "device": ("TERMNORM_DEVICE", "", "force a torch device (cpu, cuda, cuda:1); default: cuda when present"),
    "threads": ("TERMNORM_THREADS", 0, "torch CPU threads (0: the cores this process may use)"),
    "fit_threads": ("TERMNORM_FIT_THREADS", 1, "OpenMP threads of the GBM fits (1 is fastest on shared cores)"),
    "search_pause_ms": ("TERMNORM_SEARCH_PAUSE_MS", 0, "typing pause before the coding page searches (0: each key)"),
}


def _config_file() -> Path | None:
    env = os.environ.get(CONFIG_ENV)
    if env:
        return Path(env).expanduser()
    local = Path.cwd() / LOCAL_CONFIG
    return local if local.is_file() else None


def _read_toml(path: Path | None) -> dict:
    if path is None:
        return {}
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except FileNotFoundError:
        raise ValueError(f"{path}: settings file not found (${CONFIG_ENV})") from None
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"{path}: not valid TOML ({e})") from None
    unknown = sorted(set(data) - set(FIELDS))
    if unknown:
        raise ValueError(f"{path}: unknown settings {', '.join(unknown)} (known: {', '.join(FIELDS)})")
    return data


#: How each scalar setting is read (bounds: what makes sense; bcrypt's own range is 4..31).
CONVERT = {"auth": _bool, "session_hours": _number(float, 0.01), "bcrypt_rounds": _number(int, 4, 31),
           "min_dwell_s": _number(float, 0.0, 10.0), "threads": _number(int, 0), "fit_threads": _number(int, 1),
           "search_pause_ms": _number(int, 0, 60_000)}


def _build(env: tuple[tuple[str, str], ...], cwd: str) -> Settings:
    environ = dict(env)
    path = _config_file()
    toml = _read_toml(path)
    raw: dict[str, object] = {}
    source: dict[str, str] = {}
    for name, (var, default, _) in FIELDS.items():
        if environ.get(var, "") != "":
            raw[name], source[name] = environ[var], f"${var}"
        elif name in toml:
            raw[name], source[name] = toml[name], f"{path}: {name}"
        else:
            raw[name], source[name] = default, "default"

    def path_of(name: str, fallback: Path) -> Path:
        v = raw[name]
        if v in (None, ""):
            return fallback
        p = Path(str(v)).expanduser()
        # a relative path in the file is relative to the file (a service may start anywhere)
        return (path.parent / p) if (not p.is_absolute() and source[name] != "default" and path is not None
                                     and source[name].startswith(str(path))) else p

    values = {}
    for name, convert in CONVERT.items():
        try:
            values[name] = convert(raw[name])
        except ValueError as e:
            raise ValueError(f"termnorm setting {name} ({source[name]}): {e}") from None
    xdg = environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    data_dir = path_of("data_dir", Path(xdg) / "termnorm")
    return Settings(
        data_dir=data_dir, db_url=str(raw["db_url"] or ""),
        models_dir=path_of("models_dir", data_dir / "models"), jobs_dir=path_of("jobs_dir", data_dir / "jobs"),
        cache_dir=path_of("cache_dir", Path.home() / ".cache" / "termnorm"),
        device=str(raw["device"] or ""), oidc_claim=str(raw["oidc_claim"] or "email"), config_file=str(path or ""), **values)


@lru_cache(maxsize=32)
def _cached(env: tuple[tuple[str, str], ...], cwd: str, mtime: float) -> Settings:
    return _build(env, cwd)


def get() -> Settings:
    """The settings of the current environment (read once per distinct TERMNORM_* environment and file)."""
    keys = {v for v, _, _ in FIELDS.values()} | {CONFIG_ENV, "XDG_DATA_HOME", "HOME"}
    env = tuple(sorted((k, os.environ[k]) for k in keys if k in os.environ))
    path = _config_file()
    mtime = path.stat().st_mtime if path is not None and path.exists() else 0.0
    return _cached(env, os.getcwd(), mtime)


def table() -> str:
    """The settings as a Markdown table (``termnorm settings``; the README's configuration table)."""
    rows = ["| variable | TOML key | default | what |", "|---|---|---|---|"]
    for name, (var, default, what) in FIELDS.items():
        rows.append(f"| `{var}` | `{name}` | {'' if default in (None, '') else f'`{default}`'} | {what} |")
    return "\n".join(rows)


def shown_url(url: str) -> str:
    """A database URL as printed: its password as ``***`` (a terminal's scrollback and logs are not secret).
    By hand, not SQLAlchemy's ``make_url``: the engine side imports no database library (tests/test_layout.py).

    >>> shown_url("postgresql+psycopg://etl:S3cret@db:5432/termnorm"), shown_url("sqlite:////srv/t.sqlite3")
    ('postgresql+psycopg://etl:***@db:5432/termnorm', 'sqlite:////srv/t.sqlite3')
    """
    return _PASSWORD_RE.sub(r"\1***@", url or "")


_PASSWORD_RE = re.compile(r"^([a-z0-9+.-]+://[^:/@]*:).*@(?=[^@]*$)", re.IGNORECASE)  # user:password@ to the last @


def describe(s: Settings | None = None) -> str:
    """The values in force, one per line (``termnorm settings --show``); the database password hidden."""
    s = s or get()
    return "\n".join(f"{f.name} = {shown_url(getattr(s, f.name)) if f.name == 'db_url' else getattr(s, f.name)}"
                     for f in fields(s))
