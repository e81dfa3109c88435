"""What the browser tests share: ``streamlit run app.py`` on a free port, and Playwright driving Debian's Chromium.

Playwright (PyPI) drives the Chromium of Debian's ``chromium`` package through ``executable_path``: never
``playwright install``, no browser download. Without Playwright or Chromium a browser test is skipped, and under
``CI=true`` (which must have both) it fails instead.

Waits, not sleeps: a Streamlit page is drawn over a websocket after the document has loaded, so a test waits
for the elements it checks (locators, ``wait_for_function``) and for Streamlit to finish its run
(:func:`settle`). The machine is small and shared: every wait allows 60 s by default.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"  # Debian's chromium package
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
TIMEOUT_MS = 60_000  # every Playwright wait of a page from chromium_page


def need_browser():
    """Playwright's ``sync_playwright`` with Debian's Chromium present; a skip without them, a failure under
    ``CI=true``."""
    missing = [] if Path(CHROMIUM).exists() else [f"{CHROMIUM} (Debian package chromium)"]
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        missing.append("the playwright package (pip install playwright; no browser download)")
        sync_playwright = None
    if missing:
        if os.environ.get("CI") == "true":
            pytest.fail("browser test needs " + " and ".join(missing))
        pytest.skip("browser test needs " + " and ".join(missing))
    return sync_playwright


def launch(p):
    """Debian's headless Chromium from a started ``sync_playwright()`` ``p``."""
    return p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)


@contextlib.contextmanager
def chromium_page(width: int, height: int, timeout_ms: int = TIMEOUT_MS):
    """A Playwright page of ``width`` x ``height`` in Debian's headless Chromium (fresh profile); every wait on
    it allows ``timeout_ms``."""
    sync_playwright = need_browser()
    with sync_playwright() as p:
        browser = launch(p)
        try:
            page = browser.new_page(viewport={"width": width, "height": height})
            page.set_default_timeout(timeout_ms)
            yield page
        finally:
            browser.close()


def settle(pg) -> None:
    """Until Streamlit has finished the run: the app says its script is not running, and not "initial" (a page just
    loaded or reloaded, nothing drawn yet), no running-status widget, no element marked stale."""
    idle = ("['notRunning', 'compilationError'].includes(document.querySelector('[data-testid=\"stApp\"]')"
            "?.getAttribute('data-test-script-state')) && "
            "!document.querySelector('[data-testid=\"stStatusWidget\"]') && "
            "!document.querySelector('[data-stale=\"true\"]')")
    for _ in range(20):  # idle twice, 0.5 s apart: a run requested by the last key press has begun by then
        pg.wait_for_function(idle)
        pg.wait_for_timeout(500)
        if pg.evaluate(idle):
            return


def cut_short(pg, selector: str) -> list[str]:
    """The text of every element under ``selector`` that its box cuts short (a CSS ellipsis: wider inside than
    shown), e.g. a button's label or a metric card's figure in a column too narrow for it."""
    return pg.evaluate("s => [...document.querySelectorAll(s)].flatMap(r => [r, ...r.querySelectorAll('*')])"
                       ".filter(e => e.scrollWidth > e.clientWidth + 1 && e.innerText.trim())"
                       ".map(e => e.innerText.trim())", selector)


def wait_unchanged(pg, js: str, every_ms: int = 500, timeout_ms: int | None = None) -> None:
    """Until the value of the expression ``js`` is the same at two polls ``every_ms`` apart (e.g. the markup
    of charts whose entry transitions are running)."""
    key = f"__tn_unchanged_{time.monotonic_ns()}"
    pg.wait_for_function(
        f"() => {{ const v = JSON.stringify({js}); const same = window['{key}'] === v; "
        f"window['{key}'] = v; return same; }}",
        polling=every_ms, **({"timeout": timeout_ms} if timeout_ms else {}))


def screenshot(pg, tmp_path: Path, name: str, **options) -> bytes:
    """A PNG of ``pg`` written to ``tmp_path / name`` and, with ``TERMNORM_SCREENSHOTS=1``, to
    ``benchmarks/results/name``; its bytes."""
    path = tmp_path / name
    png = pg.screenshot(path=str(path), **options)
    if os.environ.get("TERMNORM_SCREENSHOTS") == "1":
        out = REPO / "benchmarks" / "results" / name
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, out)
    return png


# -- the app under test -------------------------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_streamlit(port: int, env: dict, *options: str, **popen):
    """``streamlit run app.py`` headless on ``port``, more ``--section.option value`` pairs in ``options`` (stop it
    with :func:`stop`)."""
    return subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true", "--server.port", str(port),
         "--server.fileWatcherType", "none", "--browser.gatherUsageStats", "false", *options], cwd=REPO, env=env,
        **popen)


def wait_http(url: str, timeout: float, proc=None) -> None:
    """Until ``url`` answers 200 (TimeoutError after ``timeout`` s; RuntimeError at once if ``proc`` exits)."""
    end = time.time() + timeout
    while time.time() < end:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"the server exited with status {proc.returncode} before {url} answered")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.2)
    raise TimeoutError(f"{url} did not answer within {timeout} s")


def stop(proc) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def health_url(port: int) -> str:
    return f"http://127.0.0.1:{port}/_stcore/health"


@contextlib.contextmanager
def streamlit_app(env: dict, log: Path | None = None, timeout: float = 60):
    """``streamlit run app.py`` with ``env`` on a free port, once it answers; yields its base URL. Its output goes
    to ``log`` (quoted when it does not start) or nowhere."""
    port = free_port()
    with open(log, "wb") if log else contextlib.nullcontext(subprocess.DEVNULL) as out:
        proc = start_streamlit(port, env, stdout=out, stderr=subprocess.STDOUT)
        try:
            try:
                wait_http(health_url(port), timeout, proc)
            except (TimeoutError, RuntimeError) as e:
                tail = log.read_text(errors="replace")[-3000:] if log else ""
                pytest.fail(f"{e}\n{tail}")
            yield f"http://127.0.0.1:{port}"
        finally:
            stop(proc)
