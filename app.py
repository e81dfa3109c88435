"""termnorm review app: navigation and shared state only (run: ``streamlit run app.py``).

The pages in ``pages/`` draw the screens; this script prepares the database
(``TERMNORM_DB_URL``, default ``db/termnorm.sqlite3``; seeded with the embedded
demo vocabularies and batches on first run) and keeps in the sidebar what
every page shares: who is coding, which vocabulary, which batch.
"""

import streamlit as st

from db import services
from pages import _ui

st.set_page_config(page_title="termnorm review", page_icon=":material/medical_information:", layout="wide")

url = _ui.ready_database(_ui.db_url())

with _ui.session() as s:
    vocabs = services.vocabularies(s)
    vocab_ids = [v["id"] for v in vocabs]
    vocab_names = {v["id"]: f'{v["name"]} ({v["n_terms"]} terms)' for v in vocabs}
    # a link ...?batch=<id> opens that batch (and its vocabulary) in a new session
    if "batch_id" not in st.session_state and st.query_params.get("batch", "").isdigit():
        wanted = int(st.query_params["batch"])
        linked = next((b for b in services.batches(s) if b["id"] == wanted), None)
        if linked:
            st.session_state["vocabulary_id"] = linked["vocabulary_id"]
            st.session_state["batch_id"] = linked["id"]


def _keep(widget_key: str, state_key: str) -> None:
    st.session_state[state_key] = st.session_state[widget_key]


def _bound(widget_key: str, state_key: str) -> dict:
    """Widget kwargs that mirror a plain session key: the shared value survives page switches and
    fragment reruns, which may drop the state of widgets that were not drawn."""
    st.session_state[widget_key] = st.session_state[state_key]
    return {"key": widget_key, "on_change": _keep, "args": (widget_key, state_key)}


ss = st.session_state
with st.sidebar:
    # roles and passwords arrive in a later issue; for now the name says who decided
    ss.setdefault("username", "coder")
    st.text_input("Your name", max_chars=100, **_bound("_username", "username"))
    if vocab_ids:
        if ss.get("vocabulary_id") not in vocab_ids:
            ss["vocabulary_id"] = vocab_ids[0]
        st.selectbox("Vocabulary", vocab_ids, format_func=vocab_names.get, **_bound("_vocabulary", "vocabulary_id"))
        with _ui.session() as s:
            batch_list = services.batches(s, ss["vocabulary_id"])
        batch_ids = [b["id"] for b in batch_list]
        labels = {b["id"]: f'{b["name"]} · {b["n_done"]}/{b["n_mentions"]}' for b in batch_list}
        if ss.get("batch_id") not in batch_ids:
            ss["batch_id"] = batch_ids[0] if batch_ids else None
        if batch_ids:
            st.selectbox("Batch", batch_ids, format_func=labels.get, **_bound("_batch", "batch_id"))
        else:
            st.caption("No batch for this vocabulary yet: import one.")

pages = [
    st.Page("pages/coding_queue.py", title="Coding queue", icon=":material/edit_note:", default=True),
    st.Page("pages/import_export.py", title="Import / Export", icon=":material/swap_vert:"),
    st.Page("pages/vocabulary_browser.py", title="Vocabulary", icon=":material/menu_book:"),
]
st.navigation(pages).run()
