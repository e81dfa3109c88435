"""The app's Streamlit side: the cached database and engine, who is signed in, the shared sidebar context,
decisions from a page, flash messages and the vocabulary search widget.

Pages import this module and stay free of SQL and model code: the database is reached through the services of
``db`` (db.services and its siblings), suggestions through db.engine_holder.EngineHolder (one cached per
vocabulary with ``st.cache_resource``), the HTML of the screens from app_pages/_markup.py (re-exported here so a
page needs one import).
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass

import streamlit as st

from db import auth, serving, services
from db.engine_holder import DEMO_SETS as DEMO_SETS, DEMO_USER as DEMO_USER  # noqa: F401 - re-exported for pages
from db.engine_holder import PREPARE_AHEAD as PREPARE_AHEAD, EngineHolder as EngineHolder  # noqa: F401
from db.engine_holder import DEMO_VOCABULARIES, build_holder as build_holder, seed_demo as seed_demo  # noqa: F401
from db.engine_holder import ServingSwitch
from db.engine_holder import prepare_in_background as prepare_in_background  # noqa: F401
from app_pages._markup import CSS as CSS, candidate_table_html as candidate_table_html  # noqa: F401 - the pages' markup
from app_pages._markup import code_cell as code_cell, compare_keywords as compare_keywords  # noqa: F401
from app_pages._markup import distinct as distinct  # noqa: F401
from app_pages._markup import confidence_badge as confidence_badge, esc as esc, highlight_html as highlight_html  # noqa: F401
from app_pages._markup import confidence_text as confidence_text, model_label as model_label  # noqa: F401
from app_pages._markup import legend_html as legend_html, md as md, missing_keywords as missing_keywords  # noqa: F401


# Candidates in the coding page's main table; the next ones sit in an expander. 10 = approach A's
# k_c (recall top-10 feeds the ranker). This many count as "shown": those not chosen become
# confirmed hard negatives (db.services.record_decision(shown=...)).
SHOWN = 10


def style() -> None:
    """Inject the page CSS (a style-only st.html is applied without taking space)."""
    st.html(CSS)


def markup(html_text: str) -> None:
    """Render trusted markup built by this module (all user text inside is escaped)."""
    st.markdown(html_text, unsafe_allow_html=True)


# ---------------------------------------------------------------------------------- database
def db_url() -> str:
    return services.database_url()


@st.cache_resource(show_spinner="Preparing the database…")
def ready_database(url: str) -> str:
    """Migrate the database; on first run with no vocabulary, seed the embedded demo data."""
    services.init_db(url)
    with services.session_scope(url) as s:
        if not services.vocabularies(s):
            seed_demo(s)
    return url


def first_vocabulary(vocabs: list[dict], batch_list: list[dict]) -> int:
    """The vocabulary a session opens with when nothing names one: the newest the team added (not a demo one:
    seeded into an empty database first, a user test's new coders all landed in the demo batch) that has a batch
    with mentions left to code; else the newest with a batch at all; else the first demo vocabulary with work
    (before a team adds one: the demo's procedures); else the newest. A second test's coders landed on a
    vocabulary just added, with nothing to code and a 600,000-name engine to load."""
    own = [v["id"] for v in vocabs if v["name"] not in DEMO_VOCABULARIES]
    open_work = {b["vocabulary_id"] for b in batch_list if b["n_done"] < b["n_mentions"]}
    any_work = {b["vocabulary_id"] for b in batch_list}
    for wanted in (open_work, any_work):  # the team's newest first
        found = [v for v in own if v in wanted]
        if found:
            return found[-1]
    demo = [v["id"] for v in vocabs if v["id"] in open_work] or [v["id"] for v in vocabs if v["id"] in any_work]
    return demo[0] if demo else own[-1] if own else vocabs[0]["id"]  # the demo's first: its procedures


DATABASE_DOWN = services.DATABASE_DOWN  # what a database that is down or unreachable raises (db.store)


def database_down(error: Exception) -> None:
    """Say in words that the database is not answering and stop this run: a coder saw a traceback naming the
    server's address and the installation's paths. The details go to the app's log, for IT."""
    logging.getLogger("termnorm.app").error("database not answering: %s", error)
    st.error("The database is not answering right now, so this page cannot be shown. Decisions saved before are "
             "kept; the last one was saved only if the page said so (\"Last saved\"). The page works again as soon "
             "as the database is back. IT: the app's log has the details.", icon=":material/cloud_off:")
    st.button("Try again", key="_db_retry", icon=":material/refresh:")
    st.stop()


@contextmanager
def session():
    """A database session (commit on success); every page call goes through one of these."""
    try:
        with services.session_scope(db_url()) as s:
            yield s
    except DATABASE_DOWN as e:
        database_down(e)


# one per vocabulary; the switch holds one engine at a time (two while a newly promoted one is built)
@st.cache_resource(show_spinner=False, max_entries=12)
def serving_switch(url: str, vocabulary_id: int) -> ServingSwitch:
    return ServingSwitch(url, vocabulary_id)


def serving_holder(url: str, vocabulary_id: int, wait: bool = False) -> EngineHolder:
    """The engine every page uses for a vocabulary: the promoted model version on the edition in force. A
    promotion or rollback reaches every page once its engine is built in the background (the version before
    serves meanwhile: db.engine_holder.ServingSwitch), or at once with ``wait`` (a page that must read the new
    version); a new edition or withdrawn history at the next run."""
    key = serving.serving_key(url, vocabulary_id)
    switch = serving_switch(url, vocabulary_id)
    if switch.builds_at_once(key):
        with st.spinner("Loading the engine for this vocabulary…"):
            return switch.get(key)
    holder = switch.get(key)
    if wait and switch.pending is not None:
        with st.spinner(f"Loading {key[0] or 'the shipped model'}, just promoted…"):
            switch.settled()
        holder = switch.get(key)
    return holder


# ---------------------------------------------------------------------------------- shared state
@dataclass
class Context:
    url: str
    username: str
    vocabulary_id: int | None
    batch_id: int | None
    role: str = "coder"  # set by require_role from the database

    def holder(self, wait: bool = False) -> EngineHolder:
        # the promoted version on the edition in force (serving_holder: a promotion reaches pages once built)
        return serving_holder(self.url, self.vocabulary_id, wait)


def context() -> Context:
    """What app.py's sidebar chose: user, vocabulary, batch."""
    ss = st.session_state
    return Context(db_url(), (ss.get("username") or "").strip() or "coder", ss.get("vocabulary_id"),
                   ss.get("batch_id"))


# ---------------------------------------------------------------------------------- sign-in (db.auth)
AUTH_KEY = "auth_user"  # the signed-in user name: set by the sign-in page (or a test), never by the browser


#: the address of every page but the default one (app.py's navigation): what a bookmark may hold before sign-in
PAGE_PATHS = ("import_export", "vocabulary_browser", "annotate", "gold_tasks", "adjudicate", "review", "auto_coding",
              "dashboards", "training", "editions", "admin_users")

SESSION_COOKIE = "termnorm_session"  # the browser's session token (db.auth.create_session)


def sign_in(username: str, remember: bool = True) -> None:
    """Sign ``username`` in for this browser session and, with ``remember``, for later reloads and tabs (a
    session cookie set at the next run: :func:`cookie_script`)."""
    st.session_state[AUTH_KEY] = username
    st.session_state["username"] = username
    if remember:
        with session() as s:
            token = st.session_state["_set_cookie"] = auth.create_session(s, username)
            st.session_state[SESSION_TOKEN] = token


SESSION_TOKEN = "_session_token"  # this browser's session token, as the cookie holds it (ended at sign-out)


def my_token() -> str | None:
    """This browser's session token: the one this sign-in set or signed in with, else the page's cookie (a cookie
    the page's script set after it connected is not in ``st.context.cookies``: a sign-out read none there and
    left the session alive on the server)."""
    return st.session_state.get(SESSION_TOKEN) or st.context.cookies.get(SESSION_COOKIE)


HOLDING = "_holding"  # the mention this browser's coding page claimed last (db.batches.next_mention)


def release_held() -> None:
    """The user leaves the mention on their screen undecided (signs out, switches batch or name): colleagues are
    served it at once rather than after services.CLAIM_MINUTES -- unless the user is signed in in another
    browser too, which is served the same mention (claims are per user): that one keeps it."""
    mention_id, name = st.session_state.pop(HOLDING, None), (st.session_state.get("username") or "").strip()
    if mention_id and name:
        with session() as s:
            if not auth.other_sessions(s, name, my_token()):
                services.release_claim(s, mention_id, name)


def sign_out() -> None:
    """Forget the user and everything this browser session held (widget state of the previous user), end the
    session the cookie holds, and have the cookie cleared (and, after single sign-on, the provider's sign-in
    in this app: app.py calls st.logout at the next run)."""
    name = st.session_state.get(AUTH_KEY)
    release_held()
    if name:
        with session() as s:
            if not auth.other_sessions(s, name, my_token()):  # claims left in other batches too (a team test)
                services.release_claim(s, None, name)
            auth.record_sign_out(s, name, my_token())
    for key in list(st.session_state):
        del st.session_state[key]
    st.session_state["_set_cookie"] = ""  # cleared at the next run
    if sso_signed_in():
        st.session_state["_sso_logout"] = True


def sso_providers() -> list[str] | None:
    """Single sign-on (Streamlit's st.login over OpenID Connect) when ``.streamlit/secrets.toml`` has an ``[auth]``
    section: [] for its one provider, else the names of its ``[auth.NAME]`` providers; None without it."""
    try:
        conf = st.secrets.get("auth")
    except Exception:  # no secrets file at all
        return None
    if not conf:
        return None
    return [k for k, v in conf.items() if hasattr(v, "items")]


def sso_signed_in() -> bool:
    try:
        return sso_providers() is not None and bool(st.user.is_logged_in)
    except Exception:
        return False


def _sso_user() -> str | None:
    """Sign in the account the identity provider vouched for (its ``oidc_claim``), once per browser session;
    None (and the refused identity kept for the sign-in page) when no enabled account has that name."""
    if not sso_signed_in():
        return None
    from termnorm import settings

    identity = str(st.user.get(settings.get().oidc_claim) or "")
    with session() as s:
        user = auth.authenticate_oidc(s, identity, str(st.user.get("iss") or ""))
    if user is None:
        st.session_state["_sso_refused"] = identity or "(no " + settings.get().oidc_claim + " claim)"
        return None
    sign_in(user["username"])
    return user["username"]


def cookie_script() -> None:
    """Set or clear the session cookie in the browser when a sign-in or sign-out asked for it. Streamlit has no
    API to set a cookie; a hidden page script (:func:`page_script`) runs in the app's origin."""
    token = st.session_state.pop("_set_cookie", None)
    if token is None:
        return
    age = int(auth.session_hours() * 3600) if token else 0
    page_script(f"<script>document.cookie = '{SESSION_COOKIE}={token}; path=/; max-age={age}; "
                "SameSite=Strict';</script>", "cookie")


def page_script(html: str, key: str) -> None:
    """Run ``html``'s script in the app's origin: ``st.iframe`` of it (same-origin, scripts allowed; Streamlit
    deprecated ``components.v1.html`` for it), one pixel high in a container the page's CSS hides."""
    with st.container(key=f"tn_script_{key}"):
        st.iframe(html, height=1)


def current_user() -> dict | None:
    """The signed-in user (username, role, ...), re-read from the database on every run; None if nobody.

    Re-reading means a disabled or demoted account loses access at its next click. With sign-in switched
    off (``TERMNORM_AUTH=off``: tests and the offline demo only) the name typed in the sidebar is the user,
    created as a coder when new, and its stored role applies -- except that a typed name of an account with
    a password is refused (that account still has to sign in), so switching sign-in off never hands out an
    admin's or a lead's rights to whoever types their name.
    """
    ss = st.session_state
    name = ss.get(AUTH_KEY)
    if not name and auth.auth_enabled():  # a reload or a new tab: the browser's session cookie signs in
        with session() as s:
            remembered = auth.session_user(s, st.context.cookies.get(SESSION_COOKIE))
        if remembered is not None:
            sign_in(remembered["username"], remember=False)
            ss[SESSION_TOKEN] = st.context.cookies.get(SESSION_COOKIE)
            name = remembered["username"]
        elif "_sso_refused" not in ss:
            name = _sso_user()
    typed = not name and not auth.auth_enabled()
    if typed:
        name = (ss.get("username") or "").strip() or "coder"
    if not name:
        return None
    with session() as s:
        if typed:
            services.ensure_user(s, name)
        user = auth.user(s, name)
    if user is None or user["disabled"] or (typed and user["has_password"]):
        ss.pop(AUTH_KEY, None)
        return None
    return user


def require_role(role: str) -> Context:
    """Stop the page unless the current user has ``role`` or above; else the shared context with the user.

    Pages call this before drawing anything. It only guards the screen: the db functions behind every lead /
    admin action check the role again (PermissionError).
    """
    user = current_user()
    if user is None:
        st.warning("Please sign in.", icon=":material/lock:")
        st.stop()
    if not auth.has_role(user["role"], role):
        st.error(f"This page is for the {role} role and above; {md(user['username'])} is a {user['role']}.",
                 icon=":material/block:")
        st.stop()
    ctx = context()
    ctx.username, ctx.role = user["username"], user["role"]
    return ctx


_decision_slots = threading.Lock()  # Streamlit may run two callbacks of one browser session in two threads


def claim_decision_slot(min_gap_s: float) -> float | None:
    """Take this browser session's next decision slot: None if the previous decision was at least
    ``min_gap_s`` ago (the slot is now taken), else the seconds since it (the caller ignores the action).
    Check and update are one step, so two callbacks running at once cannot both pass."""
    with _decision_slots:
        now = time.time()
        last = st.session_state.get("_last_decision_at")
        if last is not None and now - last < min_gap_s:
            return now - last
        st.session_state["_last_decision_at"] = now
        return None


def session_lock() -> threading.RLock:
    """This browser session's lock: a decision's callback holds it while saving, and the coding page's read of the
    queue waits for it. Streamlit's fast reruns start a new script thread for a press that arrives while the run
    before is still saving; that run read the queue before the save was committed and drew the mention just
    decided again (tests/test_decisions_browser.py, a press queued behind a save)."""
    with _decision_slots:
        return st.session_state.setdefault("_session_lock", threading.RLock())


def serialised(callback):
    """``callback`` run under :func:`session_lock`."""
    @functools.wraps(callback)
    def run(*args, **kwargs):
        with session_lock():
            return callback(*args, **kwargs)
    return run


def decide(ctx: Context, mention_id: int, text: str, action: str, terms=(), comment: str = "",
           shown: int | None = None, codes: dict[str, str] | None = None, relationship: str | None = None,
           screen=None) -> int:
    """Record a decision durably, THEN teach the engine (accept / correct, unless the coder said "not related"), so
    a crash never leaves the engine knowing something the database does not. Returns the decision id.

    The server refuses (services.NotYourMention) unless ``mention_id`` is the mention this coder has
    claimed, i.e. the one on their screen: a click or key press on the previous mention that reaches the
    server after the next one was drawn writes nothing. ``screen``: the suggestion the page showed, which the
    decision is of (its candidates are the shown ones)."""
    started = st.session_state.get(f"shown_at_{mention_id}")
    seconds = time.time() - started if started else 0.0
    with session() as s:
        did = services.record_decision(s, mention_id, ctx.username, action, list(terms), comment, seconds,
                                       shown=shown, codes=codes, relationship=relationship, require_claim=True,
                                       screen=screen)
        document = services.mention_documents(s, [mention_id]).get(mention_id, "")
    if action in ("accept", "correct") and terms and relationship != services.NOT_RELATED:
        ctx.holder().learn(text, list(terms), document=document)
    return did


def flash(kind: str, message: str) -> None:
    """A message to show on the next run (callbacks cannot draw where the page wants it)."""
    st.session_state.setdefault("_flash", []).append((kind, message))


def page(role: str | None = None) -> Context:
    """What every page does first: the role check (``role``; None = any signed-in user or the demo),
    the CSS and the messages left by the previous run. Returns the shared context."""
    ctx = require_role(role) if role else context()
    style()
    show_flash()
    return ctx


def show_flash() -> None:
    """The messages left by callbacks, each once, user text escaped (messages hold terms, notes, reasons);
    repeated warnings (a burst of late key presses) are shown once."""
    seen = set()
    for kind, message in st.session_state.pop("_flash", []):
        if (kind, message) in seen:
            continue
        seen.add((kind, message))
        message = md(message)
        if kind == "error":
            st.error(message)
        elif kind == "warning":  # e.g. a late click that was refused: it stays until the next action
            st.warning(message, icon=":material/do_not_touch:")
        else:
            st.toast(message)


# ---------------------------------------------------------------------------------- vocabulary search
SEARCH_LIMIT = 10  # results shown while typing (engine.search_vocabulary answers in well under 100 ms)
# every keystroke commits by default (setting search_pause_ms; Streamlit's own default waits for a 250 ms pause):
# the fragment reruns in ~10 ms even at 400,000 names, so results follow the typing (benchmarks/typeahead_browser.py)


def vocabulary_search(holder: EngineHolder, query_key: str, add_key: str, on_pick, with_codes: bool = True) -> None:
    """Type-ahead search of the vocabulary with an Add button per result; call it inside an ``st.fragment``
    so typing reruns only the search. ``on_pick(term, codes)`` (or ``on_pick(term)``) adds the result."""
    from termnorm import settings
    from termnorm.search import found_tag, nearest_note

    q = st.text_input("Search the vocabulary", key=query_key, live=f"{settings.get().search_pause_ms}ms",
                      type="search", placeholder="type a term, a code, a synonym or an abbreviation…")
    if not q.strip():
        return
    results = holder.search(q, limit=SEARCH_LIMIT)
    if q.strip() in holder.retired:  # a name or code the edition in force no longer has
        st.caption(holder.retired[q.strip()])
    if not results:
        st.caption("No term found.")
        return
    note = nearest_note(q, results)  # "no code E11.900; codes under E11.90"
    if note:
        st.caption(note)
    for i, c in enumerate(results):
        rc = st.columns([6, 1], vertical_alignment="center")
        rc[0].markdown(f'<span class="tn-code">{code_cell(c.codes)}</span> &nbsp;'
                       f"{highlight_html(c.term, holder.tag(c.term))} &nbsp;"
                       f'<span class="tn-part" title="how it was found">{esc(found_tag(c))}</span>',
                       unsafe_allow_html=True)
        args = (c.term, c.codes) if with_codes else (c.term,)
        if rc[1].button("Add", key=f"{add_key}_{i}", width="stretch", on_click=on_pick, args=args):
            st.rerun(scope="app")  # the answer box lives outside the fragment
