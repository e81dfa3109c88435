"""A non-editable ``pip install .`` works end to end (issue 24): the wheel carries the engine, the store and the
app, and an installed ``termnorm`` codes the demo and serves the app from anywhere, its data in the data directory.

The wheel is built from this checkout (``pip wheel``; setuptools comes from the package registry as ``make``
fetches it) and installed with ``--no-deps`` into a virtual environment that sees this machine's packages
(torch, Streamlit...) but has its own ``termnorm``, ``db`` and ``termnorm_app``; every command runs from an empty
folder, so nothing can come from the source tree.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import tomllib
import urllib.request
import zipfile
from pathlib import Path

import pytest

import browser

REPO = Path(__file__).resolve().parents[1]


def _packages_in_tree() -> set[str]:
    found = {p.parent.relative_to(REPO).as_posix().replace("/", ".")
             for top in ("termnorm", "db") for p in (REPO / top).rglob("__init__.py")}
    return found | {"db.migrations", "db.migrations.versions", "termnorm_app", "termnorm_app.app_pages"}


def test_every_package_folder_is_in_the_wheel_list():
    """pyproject.toml lists the packages (the app is mapped from the repository root): a new folder must be added."""
    listed = set(tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    assert listed == _packages_in_tree()


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """The wheel of this checkout installed in a fresh virtual environment; (its bin folder, the wheel)."""
    tmp = tmp_path_factory.mktemp("install")
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp / "wheel"), str(REPO)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    wheel = next((tmp / "wheel").glob("termnorm-*.whl"))
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True, timeout=300)
    r = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps", str(wheel)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return venv / "bin", wheel


def _env(tmp_path: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TERMNORM_") and k != "PYTHONPATH"}
    return dict(env, TERMNORM_DATA_DIR=str(tmp_path / "data"), TERMNORM_AUTH="off", TERMNORM_BCRYPT_ROUNDS="4")


def test_the_wheel_carries_engine_store_and_app(installed):
    names = set(zipfile.ZipFile(installed[1]).namelist())
    for need in ("termnorm/engine.py", "termnorm/settings.py", "db/models.py", "db/alembic.ini",
                 "db/migrations/env.py", "termnorm_app/app.py", "termnorm_app/app_pages/coding_queue.py",
                 "termnorm_app/assets/demo/procedures.csv", "termnorm_app/assets/models/procedures_ranker.joblib",
                 "termnorm_app/assets/models/diagnoses_history.joblib",
                 "termnorm_app/.streamlit/config.toml"):
        assert need in names, need
    assert not [n for n in names if n.startswith(("tests/", "benchmarks/")) or n.endswith(".sqlite3")]


def test_installed_termnorm_codes_the_demo_from_anywhere(installed, tmp_path):
    bin_dir, _ = installed
    env = _env(tmp_path)
    where = subprocess.run([str(bin_dir / "python"), "-c", "import termnorm, db; print(termnorm.__file__, db.__file__)"],
                           cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=True).stdout
    assert str(REPO) not in where and str(bin_dir.parent) in where  # the installed copy, not the checkout
    r = subprocess.run([str(bin_dir / "termnorm"), "normalize", "--json", "右侧甲状腺肿瘤切除术"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout)
    assert out["chosen"] == ["甲状腺病损切除术"], out["chosen"]
    top = out["candidates"][0]
    assert top["term"] == "甲状腺病损切除术" and re.match(r"^\d{2}\.\d", top["code"]), top


def test_installed_app_serves_the_coding_page(installed, tmp_path):
    """``termnorm app`` of the installed package: the coding page with a demo mention, the database in the data
    directory (none written next to the installed code)."""
    bin_dir, _ = installed
    env = _env(tmp_path)
    port = browser.free_port()
    log = tmp_path / "app.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([str(bin_dir / "termnorm"), "app", "--port", str(port)], cwd=tmp_path, env=env,
                                stdout=out, stderr=subprocess.STDOUT)
        try:
            try:
                browser.wait_http(browser.health_url(port), 120, proc)
            except (TimeoutError, RuntimeError) as e:
                pytest.fail(f"{e}\n{log.read_text(errors='replace')[-3000:]}")
            with browser.chromium_page(1400, 1000) as pg:
                pg.goto(f"http://127.0.0.1:{port}/")
                pg.get_by_text("Coding queue").first.wait_for()
                pg.get_by_text("Mention #1", exact=False).first.wait_for(timeout=120_000)
                browser.settle(pg)
                assert not pg.locator('[data-testid="stException"]').count(), pg.inner_text("body")[:2000]
        finally:
            browser.stop(proc)
    # stopping `termnorm app` stops the server: nothing is left answering on the port (a SIGTERM from a service
    # manager once stopped only the command and left Streamlit running)
    time.sleep(1.0)
    with pytest.raises(OSError):
        urllib.request.urlopen(browser.health_url(port), timeout=2)
    assert (tmp_path / "data" / "termnorm.sqlite3").is_file()
    site = bin_dir.parent / "lib"
    assert not list(site.rglob("*.sqlite3")) and not list(site.rglob("registry"))
