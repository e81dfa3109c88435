"""Sign-in that lasts, in a real browser (Playwright + Debian's Chromium): a reload or a new tab keeps the coder
signed in (the session cookie, db.auth sessions); signing out ends it for every tab; a disabled account's
cookie no longer signs in."""

from __future__ import annotations

import os
import subprocess

import pytest
from browser import (
    free_port,
    health_url,
    launch,
    need_browser,
    settle,
    start_streamlit,
    stop,
    wait_http,
)


@pytest.fixture
def app(tmp_path, monkeypatch):
    from db import auth, services
    from pages import _ui

    monkeypatch.setenv("TERMNORM_BCRYPT_ROUNDS", "4")
    url = f"sqlite:///{tmp_path / 'signin.sqlite3'}"
    services.init_db(url)
    with services.session_scope(url) as s:
        _ui.seed_demo(s)
        auth.create_admin(s, "root", "root-password")
        auth.create_user(s, "root", "zhang", "zhang-password", "coder")
    services.dispose(url)
    port = free_port()
    env = dict(os.environ, TERMNORM_DB_URL=url, TERMNORM_BCRYPT_ROUNDS="4")
    env.pop("TERMNORM_AUTH", None)  # sign-in on, as deployed
    proc = start_streamlit(port, env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_http(health_url(port), 60, proc)
        yield {"base": f"http://127.0.0.1:{port}", "url": url}
    finally:
        stop(proc)
        services.dispose(url)


def signed_in_as(pg) -> str | None:
    """The user name in the sidebar, or None when the sign-in form is shown."""
    settle(pg)
    if pg.locator("text=Sign in to code mentions").count():
        return None
    return pg.locator("[data-testid=stSidebar]").inner_text().split("·")[0].split("\n")[-1].strip()


def test_a_reload_or_a_new_tab_keeps_the_coder_signed_in_until_sign_out(app):
    from db import auth, services

    sync_playwright = need_browser()
    with sync_playwright() as p:
        browser = launch(p)
        ctx = browser.new_context(viewport={"width": 1400, "height": 1200})
        page = ctx.new_page()
        page.set_default_timeout(60_000)
        page.goto(app["base"] + "/")
        page.get_by_label("User name").fill("zhang")
        page.get_by_role("textbox", name="Password").fill("zhang-password")
        page.get_by_role("button", name="Sign in").click()
        page.wait_for_selector("table.tn-cands")
        assert signed_in_as(page) == "zhang"
        page.reload()  # used to sign the coder out
        page.wait_for_selector("table.tn-cands")
        assert signed_in_as(page) == "zhang"
        tab = ctx.new_page()  # a new tab of the same browser
        tab.set_default_timeout(60_000)
        tab.goto(app["base"] + "/")
        tab.wait_for_selector("table.tn-cands")
        assert signed_in_as(tab) == "zhang"
        other = browser.new_context()  # another browser: not signed in
        other.set_default_timeout(60_000)  # as the first context's pages: a loaded machine takes more than 30 s
        elsewhere = other.new_page()
        elsewhere.goto(app["base"] + "/")
        assert signed_in_as(elsewhere) is None
        # signing out ends the session for every tab
        page.get_by_role("button", name="Sign out").click()
        page.wait_for_selector("text=Sign in to code mentions")
        tab.reload()
        assert signed_in_as(tab) is None
        page.reload()
        assert signed_in_as(page) is None
        # a disabled account's cookie no longer signs in
        page.get_by_label("User name").fill("zhang")
        page.get_by_role("textbox", name="Password").fill("zhang-password")
        page.get_by_role("button", name="Sign in").click()
        page.wait_for_selector("table.tn-cands")
        with services.session_scope(app["url"]) as s:
            auth.set_disabled(s, "root", "zhang", True)
        page.reload()
        assert signed_in_as(page) is None
        browser.close()
