"""Sign-in that lasts, in a real browser (Playwright + Debian's Chromium): a reload or a new tab keeps the coder
signed in (the session cookie, db.auth sessions); signing out ends it for every tab; a disabled account's
cookie no longer signs in."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from urllib.parse import urlparse

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
def app(tmp_path, monkeypatch, request):
    from db import auth, services
    from app_pages import _ui

    monkeypatch.setenv("TERMNORM_BCRYPT_ROUNDS", "4")
    url = f"sqlite:///{tmp_path / 'signin.sqlite3'}"
    services.init_db(url)
    with services.session_scope(url) as s:
        _ui.seed_demo(s)
        auth.create_admin(s, "root", "root-password")
        auth.create_user(s, "root", "zhang", "zhang-password", "coder")
        auth.create_user(s, "root", "li@hospital.example", "li-password-unused", "lead")
    services.dispose(url)
    port = free_port()
    env = dict(os.environ, TERMNORM_DB_URL=url, TERMNORM_BCRYPT_ROUNDS="4")
    env.pop("TERMNORM_AUTH", None)  # sign-in on, as deployed
    secrets = tmp_path / "secrets.toml"
    # single sign-on configured when the test also asks for an identity provider
    idp = request.getfixturevalue("identity_provider") if "identity_provider" in request.fixturenames else None
    secrets.write_text(f"""[auth]
redirect_uri = "http://localhost:{port}/oauth2callback"
cookie_secret = "a-long-random-string-for-the-test-only"
client_id = "termnorm"
client_secret = "termnorm-test-secret"
server_metadata_url = "{idp}/.well-known/openid-configuration"
""" if idp else "", encoding="utf-8")
    proc = start_streamlit(port, env, "--secrets.files", str(secrets), stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
    try:
        wait_http(health_url(port), 60, proc)
        yield {"base": f"http://localhost:{port}", "url": url}
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
        # a sign-out on a page that set its cookie after it connected (no reload) ends the session on the server:
        # the cookie, copied before, signs nobody in (a user test found it alive for 12 hours)
        fresh = browser.new_context(viewport={"width": 1400, "height": 1200}).new_page()
        fresh.set_default_timeout(60_000)
        fresh.goto(app["base"] + "/")
        _sign_in(fresh, "zhang", "zhang-password")
        fresh.wait_for_selector("table.tn-cands")
        fresh.wait_for_function("document.cookie.includes('termnorm_session=')")
        copied = [c for c in fresh.context.cookies() if c["name"] == "termnorm_session"]
        fresh.get_by_role("button", name="Sign out").click()
        fresh.wait_for_selector("text=Sign in to code mentions")
        thief = browser.new_context()
        thief.add_cookies(copied)
        stolen = thief.new_page()
        stolen.set_default_timeout(60_000)
        stolen.goto(app["base"] + "/")
        assert len(copied) == 1 and signed_in_as(stolen) is None
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


def _page(browser):
    page = browser.new_context(viewport={"width": 1400, "height": 1100}).new_page()
    page.set_default_timeout(60_000)
    return page


def _sign_in(page, name: str, password: str) -> None:
    page.get_by_label("User name").fill(name)
    page.get_by_role("textbox", name="Password").fill(password)
    page.get_by_role("button", name="Sign in", exact=True).click()


def test_every_page_address_is_known_before_sign_in():
    from app_pages import _ui

    stems = {p.stem for p in (Path(__file__).resolve().parents[1] / "app_pages").glob("*.py")}
    assert set(_ui.PAGE_PATHS) == stems - {"coding_queue", "sign_in"} - {s for s in stems if s.startswith("_")}


def test_a_bookmarked_page_opens_after_sign_in(app):
    sync_playwright = need_browser()
    with sync_playwright() as p:
        browser = launch(p)
        page = _page(browser)
        page.goto(app["base"] + "/dashboards")
        page.wait_for_selector("text=Sign in to code mentions")
        assert not page.get_by_text("Page not found").count()
        _sign_in(page, "root", "root-password")
        page.wait_for_selector("[data-testid=stMain] >> text=Acceptance of suggestions")
        assert urlparse(page.url).path.rstrip("/").endswith("/dashboards")  # (the query names the batch)
        assert not page.get_by_text("Page not found").count()
        # a coder's bookmark of a lead's page: never the lead's page, and said so (a team test's coder landed on the
        # coding queue without a word); the coding queue is one click away
        coder = _page(browser)
        coder.goto(app["base"] + "/dashboards")
        coder.wait_for_selector("text=Sign in to code mentions")
        _sign_in(coder, "zhang", "zhang-password")
        coder.wait_for_selector("[data-testid=stMain] >> text=This page is for the lead role and above")
        assert signed_in_as(coder) == "zhang"
        assert not coder.locator("[data-testid=stMain] >> text=Acceptance of suggestions").count()
        coder.locator("[data-testid=stSidebarNav] >> text=Coding queue").click()
        coder.wait_for_selector("table.tn-cands")  # the coding queue
        browser.close()


@pytest.fixture
def identity_provider():
    """A real OpenID Connect provider on a loopback port (oidc-provider-mock: its sign-in form asks for the
    subject; the email claim is the subject)."""
    oidc_provider_mock = pytest.importorskip("oidc_provider_mock")
    with oidc_provider_mock.run_server_in_thread() as server:
        yield f"http://localhost:{server.server_port}"


def _sso(page, base: str, identity: str) -> None:
    page.goto(base + "/")
    page.get_by_role("button", name="Sign in with single sign-on").click()
    page.locator("input[name=sub]").fill(identity)
    page.get_by_role("button", name="Authorize").click()


def test_single_sign_on_through_the_hospitals_identity_provider(identity_provider, app):
    from db import auth, services

    sync_playwright = need_browser()
    with sync_playwright() as p:
        browser = launch(p)
        page = _page(browser)
        _sso(page, app["base"], "li@hospital.example")
        page.wait_for_selector("[data-testid=stSidebar] >> text=li@hospital.example")
        assert signed_in_as(page) == "li@hospital.example"
        page.reload()
        assert signed_in_as(page) == "li@hospital.example"
        with services.session_scope(app["url"]) as s:
            log = auth.audit_log(s, "root", actions=["sign_in"]).to_dict("records")
        assert any(e["user"] == "li@hospital.example" and "oidc" in str(e["details"]) for e in log)
        # signing out ends both sign-ins: the provider confirms the end of its session, then the app asks again
        page.get_by_role("button", name="Sign out").click()
        page.get_by_role("button", name="End session").click()
        page.wait_for_selector("text=Sign in to code mentions")
        page.reload()
        assert signed_in_as(page) is None
        # the provider vouching for someone without an account gives no access
        stranger = _page(browser)
        _sso(stranger, app["base"], "nobody@hospital.example")
        stranger.wait_for_selector("text=has no enabled account")
        assert signed_in_as(stranger) is None
        with services.session_scope(app["url"]) as s:
            failed = auth.audit_log(s, "root", actions=["sign_in_failed"]).to_dict("records")
        assert any(e["user"] == "nobody@hospital.example" for e in failed)
        browser.close()
