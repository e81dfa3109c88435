"""Sign in: the only page shown until a user has signed in (db.auth checks the bcrypt hash).

The signed-in name is kept in ``st.session_state["auth_user"]``, which only
server code can set (a browser cannot): every page re-reads the user's role
from the database on each run (``_ui.require_role``), so a disabled or
demoted account loses access at once. There is no sign-up: an admin creates
accounts on the Users page, and the first admin comes from the command line.
"""

import streamlit as st

from db import auth
from app_pages import _ui

_ui.style()

left, mid, right = st.columns([1, 1.4, 1])
with mid:
    st.markdown("## :material/medical_information: termnorm review")
    st.caption("Sign in to code mentions, annotate gold data or see the dashboards.")
    with _ui.session() as s:
        first_run = auth.needs_first_admin(s)
    if first_run:
        st.info("No admin account exists yet. On the server, create the first one with\n\n"
                "`termnorm create-admin YOUR_NAME` (it asks for the password), then sign in here.")
    providers = _ui.sso_providers()
    if providers is not None:  # the hospital's identity provider (.streamlit/secrets.toml [auth], st.login)
        refused = st.session_state.get("_sso_refused")
        if refused and _ui.sso_signed_in():
            st.error(f"Your identity provider signed you in as {_ui.md(refused)}, but termnorm has no enabled "
                     "account of that name. Ask an admin to create it on the Users page.", icon=":material/block:")
            st.button("Sign out of single sign-on", on_click=st.logout)
        else:
            for name in providers or [None]:
                label = f"Sign in with {name}" if name else "Sign in with single sign-on"
                st.button(label, on_click=st.login, args=(name,) if name else (), type="primary", width="stretch",
                          icon=":material/key:")
            st.caption("or with a termnorm password:")
    with st.form("sign_in", border=True):
        username = st.text_input("User name", key="sign_in_user", max_chars=100)
        password = st.text_input("Password", type="password", key="sign_in_password")
        submitted = st.form_submit_button("Sign in", type="primary", width="stretch")
    if submitted:
        with _ui.session() as s:
            user = auth.authenticate(s, username, password)
        if user is None:
            # one message for every reason (unknown name, wrong password, disabled, locked): no hints to a guesser
            st.error("Wrong user name or password, or the account is disabled or locked for a while.")
        else:
            _ui.sign_in(user["username"])
            st.rerun()
