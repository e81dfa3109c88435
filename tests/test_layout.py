"""The layout holds: dependencies point one way, modules stay small (issue 24).

* ``termnorm/`` is the engine library: no module of it but the command line imports the app's store and
  services (``db``), SQLAlchemy or Streamlit -- read from each module's import statements (``ast``), lazy
  imports inside functions included;
* the page scripts (``app.py``, ``app_pages/``) import neither SQLAlchemy nor torch: they call ``db``'s services;
* no Python module of the project over ``MAX_LINES`` lines (migrations and tests aside), no function with more
  than ``MAX_ARGS`` parameters (the same rule as ruff's PLR0913 with ``max-args = 12``; ast here, so the check
  needs no extra tool).
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MAX_LINES = 500
MAX_ARGS = 12
#: termnorm's command-line modules: they start the app and its services, so they may import db.
CLI = {"termnorm/cli.py", "termnorm/cli_admin.py"}


def _modules(*folders: str) -> list[Path]:
    out = []
    for f in folders:
        p = REPO / f
        out += [p] if p.suffix == ".py" else sorted(p.rglob("*.py"))
    return out


def _imported(path: Path) -> set[str]:
    """Top-level package names a module imports, anywhere in it (function bodies included)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def _rel(p: Path) -> str:
    return p.relative_to(REPO).as_posix()


def test_the_engine_never_imports_the_app_or_the_database():
    bad = {_rel(p): sorted(_imported(p) & {"db", "sqlalchemy", "streamlit", "app_pages", "alembic"})
           for p in _modules("termnorm") if _rel(p) not in CLI}
    bad = {k: v for k, v in bad.items() if v}
    assert not bad, f"engine modules importing the app side: {bad}"


def test_pages_call_services_not_sqlalchemy_or_torch():
    bad = {_rel(p): sorted(_imported(p) & {"sqlalchemy", "torch"}) for p in _modules("app.py", "app_pages")}
    bad = {k: v for k, v in bad.items() if v}
    assert not bad, f"page scripts importing SQLAlchemy / torch: {bad}"


def test_the_checks_see_real_imports():
    """The two tests above would pass on an empty list: they must see db's own SQLAlchemy import."""
    assert "sqlalchemy" in _imported(REPO / "db" / "models.py")
    assert "db" in _imported(REPO / "termnorm" / "cli.py")
    assert len(_modules("termnorm")) > 30 and len(_modules("app_pages")) > 10


def _project_modules() -> list[Path]:
    return [p for p in _modules("app.py", "app_pages", "db", "termnorm", "benchmarks")
            if "migrations" not in p.parts]


def test_no_module_over_the_line_limit():
    long = {_rel(p): n for p in _project_modules() if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines: {long}"


def test_no_function_with_too_many_parameters():
    wide = []
    for p in _project_modules():
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                a = node.args
                n = len(a.posonlyargs) + len(a.args) + len(a.kwonlyargs) + bool(a.vararg) + bool(a.kwarg)
                n -= bool(a.args) and a.args[0].arg in ("self", "cls")
                if n > MAX_ARGS:
                    wide.append(f"{_rel(p)}:{node.lineno} {node.name} ({n})")
    assert not wide, f"functions with more than {MAX_ARGS} parameters: {wide}"


def test_the_readme_stays_short():
    """The README is for users (issue 24: at most 15,000 characters, counted as the project's check counts them:
    UTF-8 bytes); measurements go to docs/."""
    n = len((REPO / "README.md").read_bytes())
    assert 2_000 < n <= 15_000, n
