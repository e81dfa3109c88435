"""The coding page in a real browser: `streamlit run app.py` driven by Debian's headless Chromium.

Chromium is driven over the DevTools protocol (its ``--remote-debugging-port``)
with the ``websockets`` package that Streamlit itself depends on, so no extra
test dependency and no browser download is needed. ``--screenshot`` /
``--dump-dom`` alone are not enough: a Streamlit page is drawn over a
websocket after the document loads, and with ``--virtual-time-budget`` the
capture came back blank (the app had not drawn yet).

Checks: the page loads and shows the first demo mention with keyword spans
(``kw kw-site`` ...) and ✓/✗ marks on candidates; a mention containing
``<img src=x onerror=...>`` and ``<script>`` is shown as text (no such
element in the DOM, the handler never ran). With ``TERMNORM_SCREENSHOTS=1``
the screenshot is copied to ``benchmarks/results/coding_page.png``.
"""

from __future__ import annotations

import base64
import contextlib
import json
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
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
XSS = '<img src=x onerror="window.__pwned=1">右侧甲状腺肿块切除<script>window.__pwned=2</script>'

pytestmark = pytest.mark.skipif(
    not Path(CHROMIUM).exists(),
    reason="headless Chromium not installed (Debian: apt-get install chromium); browser test skipped")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_http(url: str, timeout: float) -> None:
    end = time.time() + timeout
    while time.time() < end:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.2)
    raise TimeoutError(f"{url} did not answer within {timeout} s")


class Tab:
    """The few DevTools calls the test needs, over one websocket."""

    def __init__(self, ws):
        self.ws = ws
        self._id = 0

    def call(self, method: str, **params):
        self._id += 1
        self.ws.send(json.dumps({"id": self._id, "method": method, "params": params}))
        while True:  # events arrive in between; keep the answer to this call
            msg = json.loads(self.ws.recv(timeout=30))
            if msg.get("id") == self._id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})

    def eval(self, js: str):
        return self.call("Runtime.evaluate", expression=js, returnByValue=True)["result"].get("value")

    def wait_for(self, js: str, timeout: float):
        end = time.time() + timeout
        while time.time() < end:
            value = self.eval(f"!!({js})")
            if value:
                return value
            time.sleep(0.2)
        raise TimeoutError(f"never true within {timeout} s: {js}")

    def settle(self, timeout: float = 15) -> None:
        """Wait until Streamlit has finished the run (no status widget, nothing marked stale)."""
        self.wait_for("!document.querySelector('[data-testid=\"stStatusWidget\"]') && "
                      "!document.querySelector('[data-stale=\"true\"]')", timeout)
        time.sleep(0.5)


@pytest.fixture
def server(tmp_path):
    """A seeded database (demo data + a batch whose first mention is hostile HTML) and a running app."""
    from db import services
    from pages import _ui

    url = f"sqlite:///{tmp_path / 'browser.sqlite3'}"
    services.init_db(url)
    with services.session_scope(url) as s:
        _ui.seed_demo(s)
        vid = services.vocabulary_id(s, "demo-procedures")
        xss_batch = services.create_batch(s, "hostile", vid, [XSS, "腹腔镜下胆囊切除术"])
    services.dispose(url)
    port = _free_port()
    env = dict(os.environ, TERMNORM_DB_URL=url, TERMNORM_AUTH="off")  # sign-in: see tests/test_gold_browser.py
    proc = start_streamlit(port, env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        _wait_http(f"http://127.0.0.1:{port}/_stcore/health", 30)
        yield f"http://127.0.0.1:{port}", xss_batch
    finally:
        _stop(proc)


@contextlib.contextmanager
def chromium_tab(profile: Path, width: int, height: int):
    """Debian's headless Chromium with a fresh profile, driven over the DevTools protocol (also used by
    test_gold_browser.py)."""
    from websockets.sync.client import connect

    proc = subprocess.Popen(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={profile}", "--remote-debugging-port=0", f"--window-size={width},{height}", "about:blank"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        port_file = profile / "DevToolsActivePort"
        end = time.time() + 20
        while not port_file.exists() or not port_file.read_text().strip():
            if time.time() > end or proc.poll() is not None:
                pytest.fail("Chromium did not start (no DevToolsActivePort)")
            time.sleep(0.1)
        port = int(port_file.read_text().split()[0])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=5) as r:
            page = next(p for p in json.load(r) if p["type"] == "page")
        with connect(page["webSocketDebuggerUrl"], max_size=None, open_timeout=10) as ws:
            t = Tab(ws)
            t.call("Page.enable")
            t.call("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1, mobile=False)
            yield t
    finally:
        _stop(proc)


def _stop(proc) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()


def start_streamlit(port: int, env: dict, **popen):
    """``streamlit run app.py`` headless on ``port`` (stop it with :func:`_stop`)."""
    return subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true", "--server.port", str(port),
         "--server.fileWatcherType", "none", "--browser.gatherUsageStats", "false"], cwd=REPO, env=env, **popen)


@pytest.fixture
def tab(tmp_path):
    with chromium_tab(tmp_path / "chromium-profile", 1400, 1300) as t:
        yield t


def test_coding_page_in_browser(server, tab, tmp_path):
    from termnorm.engine import demo_mentions

    base, xss_batch = server
    first = demo_mentions("procedures")[0].text

    # -- the coding page of the first demo batch: highlighted mention, candidates, actions
    tab.call("Page.navigate", url=base + "/")
    tab.wait_for("document.querySelector('.tn-mention .kw') && document.querySelector('table.tn-cands')", 60)
    tab.settle()
    assert tab.eval("document.querySelector('.tn-mention').textContent") == first
    kinds = tab.eval("[...document.querySelectorAll('.tn-mention span.kw')].map(e => e.className)")
    assert any("kw-site" in k for k in kinds) and any("kw-type" in k for k in kinds), kinds
    assert tab.eval("document.querySelectorAll('table.tn-cands span.kw-match').length") > 0
    assert tab.eval("document.querySelectorAll('table.tn-cands tr').length") > 2
    labels = tab.eval("[...document.querySelectorAll('button')].map(b => b.innerText)")
    assert any("Save terms" in b for b in labels) and any("Accept suggestion" in b for b in labels)

    png = base64.b64decode(tab.call("Page.captureScreenshot", format="png")["data"])
    shot = tmp_path / "coding_page.png"
    shot.write_bytes(png)
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20_000  # a drawn page, not a blank one
    if os.environ.get("TERMNORM_SCREENSHOTS") == "1":
        out = REPO / "benchmarks" / "results" / "coding_page.png"
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shot, out)

    # -- hostile HTML in a mention is shown as text, never parsed
    tab.call("Page.navigate", url=f"{base}/?batch={xss_batch}")
    tab.wait_for("(document.querySelector('.tn-mention') || {}).textContent === " + json.dumps(XSS), 60)
    tab.settle()
    assert tab.eval("document.querySelectorAll('img[src=\"x\"]').length") == 0
    assert tab.eval("[...document.querySelectorAll('script')].filter(s => s.text.includes('__pwned')).length") == 0
    assert tab.eval("typeof window.__pwned") == "undefined"
    assert tab.eval("document.querySelectorAll('.tn-mention span.kw-site').length") >= 1  # still highlighted
