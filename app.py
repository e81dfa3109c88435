"""termnorm review app: navigation and shared state only (run: ``streamlit run app.py``).

The pages in ``app_pages/`` draw the screens; this script prepares the database
(``TERMNORM_DB_URL``, default ``termnorm.sqlite3`` in the data directory, termnorm.settings; seeded with the embedded
demo vocabularies and batches on first run), asks who is there (sign-in,
db.auth; ``TERMNORM_AUTH=off`` only for tests and the offline demo), offers
the pages the user's role allows, and keeps in the sidebar what every page
shares: who is coding, which vocabulary, which batch.
"""

import streamlit as st

from db import auth, services
from app_pages import _ui

st.set_page_config(page_title="termnorm review", page_icon=":material/medical_information:", layout="wide")

try:
    url = _ui.ready_database(_ui.db_url())
except _ui.DATABASE_DOWN as e:
    _ui.database_down(e)

if st.session_state.pop("_sso_logout", False):  # signed out after single sign-on: end the provider's sign-in here
    st.logout()
if not auth.auth_enabled():  # the address keeps the typed name (?coder=): a reload or a bookmark of a lead's
    # page is that user from the first run, whose pages are then known (it fell back to "coder" and the home page)
    st.session_state.setdefault("username", (st.query_params.get("coder") or "coder")[:100])
user = _ui.current_user()
_ui.cookie_script()  # the session cookie of a sign-in or sign-out, set in the browser
if user is None:
    # a bookmarked page (/dashboards) shows the sign-in form at its own address, so the page opens once signed in
    st.navigation([st.Page("app_pages/sign_in.py", title="Sign in", icon=":material/login:", default=True)]
                  + [st.Page("app_pages/sign_in.py", title="Sign in", url_path=path) for path in _ui.PAGE_PATHS],
                  position="hidden").run()
    st.stop()
signed_in = bool(st.session_state.get(_ui.AUTH_KEY))
if signed_in:
    st.session_state["username"] = user["username"]  # what the pages record as the decider

with _ui.session() as s:
    vocabs = services.vocabularies(s)
    vocab_ids = [v["id"] for v in vocabs]
    vocab_names = _ui.distinct({v["id"]: v["name"] for v in vocabs})  # no live count in a label (below)
    # a link ...?batch=<id> (or ?vocabulary=<id>) opens that batch and its vocabulary in a new session: a reload
    # or a bookmark returns to the work on screen, which the address always names (below)
    if "batch_id" not in st.session_state and st.query_params.get("batch", "").isdigit():
        wanted = int(st.query_params["batch"])
        linked = next((b for b in services.batches(s) if b["id"] == wanted), None)
        if linked:
            st.session_state["vocabulary_id"] = linked["vocabulary_id"]
            st.session_state["batch_id"] = linked["id"]
        else:
            st.session_state["_unknown_link"] = f"batch {wanted}"
    elif "vocabulary_id" not in st.session_state and st.query_params.get("vocabulary", "").isdigit():
        if int(st.query_params["vocabulary"]) in vocab_ids:
            st.session_state["vocabulary_id"] = int(st.query_params["vocabulary"])
        else:
            st.session_state["_unknown_link"] = f"vocabulary {st.query_params['vocabulary']}"
    elif "vocabulary_id" not in st.session_state and "batch_id" not in st.session_state:
        # a new session at the bare address (a new sign-in, a new tab): back to the user's last work
        last = services.last_batch(s, st.session_state.get("username") or "")
        if last:
            st.session_state["vocabulary_id"], st.session_state["batch_id"] = last["vocabulary_id"], last["id"]


def _keep(widget_key: str, state_key: str) -> None:
    if st.session_state[widget_key] != st.session_state.get(state_key):
        _ui.release_held()  # another batch, vocabulary or name: the mention left on screen goes back to the queue
    st.session_state[state_key] = st.session_state[widget_key]
    st.session_state.pop("_unknown_link", None)  # a choice made: the stale link's warning has done its work


def _bound(widget_key: str, state_key: str) -> dict:
    """Widget kwargs that mirror a plain session key: the shared value survives page switches and
    fragment reruns, which may drop the state of widgets that were not drawn."""
    st.session_state[widget_key] = st.session_state[state_key]
    return {"key": widget_key, "on_change": _keep, "args": (widget_key, state_key)}


ss = st.session_state
with st.sidebar:
    if signed_in:
        who = st.columns([3, 2], vertical_alignment="center")
        who[0].markdown(f"**{_ui.md(user['username'])}** · {user['role']}")
        who[1].button("Sign out", on_click=_ui.sign_out, icon=":material/logout:", type="tertiary")
    else:  # sign-in switched off (TERMNORM_AUTH=off): the typed name says who decided
        st.text_input("Your name", max_chars=100, **_bound("_username", "username"))
    if ss.get("_unknown_link"):  # an old bookmark: say so, never open other work as if it were the one asked for
        st.warning(f"The address names {ss['_unknown_link']}, which does not exist (any more): pick the batch "
                   "below.", icon=":material/link_off:")
    if vocab_ids:
        if ss.get("vocabulary_id") not in vocab_ids:
            with _ui.session() as s:
                ss["vocabulary_id"] = _ui.first_vocabulary(vocabs, services.batches(s))
        st.selectbox("Vocabulary", vocab_ids, format_func=vocab_names.get, **_bound("_vocabulary", "vocabulary_id"),
                     help=f"Every page works on {vocab_names[ss['vocabulary_id']]}")  # the box may cut a long name
        with _ui.session() as s:
            batch_list = services.batches(s, ss["vocabulary_id"])
        batch_ids = [b["id"] for b in batch_list]
        # a label that never changes: Streamlit keeps the choice by its label, and a label holding the live count
        # (a key pressed twice while the page redrew after a decision sent the old count) matched no option and
        # moved the coder to the first batch; the progress is the caption below
        labels = {b["id"]: f'{b["name"]} · #{b["id"]}' for b in batch_list}
        if ss.get("batch_id") not in batch_ids:
            ss["batch_id"] = batch_ids[0] if batch_ids else None
        if batch_ids:
            st.selectbox("Batch", batch_ids, format_func=labels.get, **_bound("_batch", "batch_id"))
            on = next(b for b in batch_list if b["id"] == ss["batch_id"])
            st.caption(f'{on["n_done"]:,} of {on["n_mentions"]:,} mentions coded')
        else:
            st.caption("No batch for this vocabulary yet: import one.")
        here = {"batch": str(ss["batch_id"])} if ss.get("batch_id") else {"vocabulary": str(ss["vocabulary_id"])}
        if not signed_in:
            here["coder"] = ss["username"]
        if {k: st.query_params.get(k) for k in ("batch", "vocabulary", "coder") if k in st.query_params} != here:
            for k in ("batch", "vocabulary", "coder"):
                st.query_params.pop(k, None)
            st.query_params.update(here)

role = user["role"]
# an annotator lands on Annotate: landing on the coding queue claimed a mention, kept from coders for 15 minutes
annotating = role == "annotator"
pages = {"Coding": [
    st.Page("app_pages/coding_queue.py", title="Coding queue", icon=":material/edit_note:", default=not annotating),
    st.Page("app_pages/import_export.py", title="Import / Export", icon=":material/swap_vert:"),
    st.Page("app_pages/vocabulary_browser.py", title="Vocabulary", icon=":material/menu_book:"),
]}
# only the pages the role allows are offered; each of them checks the role again (_ui.require_role)
if auth.has_role(role, "annotator"):
    pages["Gold data"] = [st.Page("app_pages/annotate.py", title="Annotate", icon=":material/rate_review:",
                                  default=annotating)]
if auth.has_role(role, "lead"):
    pages["Gold data"] += [st.Page("app_pages/gold_tasks.py", title="Gold tasks", icon=":material/fact_check:"),
                           st.Page("app_pages/adjudicate.py", title="Adjudicate", icon=":material/gavel:")]
    pages["Lead"] = [st.Page("app_pages/review.py", title="Review", icon=":material/task_alt:"),
                     st.Page("app_pages/auto_coding.py", title="Auto-coding", icon=":material/done_all:"),
                     st.Page("app_pages/dashboards.py", title="Dashboards", icon=":material/monitoring:"),
                     st.Page("app_pages/training.py", title="Training", icon=":material/model_training:"),
                     st.Page("app_pages/editions.py", title="Editions", icon=":material/difference:")]
if auth.has_role(role, "admin"):
    pages["Admin"] = [st.Page("app_pages/admin_users.py", title="Users", icon=":material/manage_accounts:")]
# a page the role lacks, asked for by its address (/review), says so (its _ui.require_role) instead of opening the
# coding queue without a word (a team test's coder)
offered = {p.url_path for group in pages.values() for p in group}
offered |= {"annotate"} if annotating else set()  # a default page's url_path is "" (it is served at the root)
pages["Coding"] += [st.Page(f"app_pages/{path}.py", url_path=path, visibility="hidden")
                    for path in _ui.PAGE_PATHS if path not in offered]
try:
    st.navigation(pages).run()
except _ui.DATABASE_DOWN as e:  # a page's own reads (the engine, jobs) outside _ui.session()
    _ui.database_down(e)
