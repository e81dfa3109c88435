"""Users (admin): accounts, roles, passwords, and the audit log of who did what.

Every button calls a db.auth function that checks the admin role again and
writes the audit log; the last enabled admin can neither be demoted nor
disabled (db.auth refuses), so the app cannot lock itself out.
"""

import pandas as pd
import streamlit as st

from db import auth, review
from db.models import ROLES
from app_pages import _ui

ctx = _ui.page("admin")
ss = st.session_state

st.markdown("### Users")
with _ui.session() as s:
    people = auth.list_users(s, ctx.username)

st.dataframe(pd.DataFrame([{"user": u["username"], "role": u["role"], "can sign in": u["has_password"]
                            and not u["disabled"], "disabled": u["disabled"], "since": u["created_at"]}
                           for u in people]),
             hide_index=True, width="stretch")
st.caption(" · ".join(f"**{r}** {auth.ROLE_HELP[r]}" for r in ROLES) + ". Each role may do what the roles "
           "before it may.")


def _run(fn, ok: str) -> None:
    try:
        with _ui.session() as s:
            fn(s)
    except (ValueError, KeyError, PermissionError) as e:
        _ui.flash("error", f"Not done: {e}")
        return
    _ui.flash("toast", ok)


def on_create() -> None:
    name, pw, pw2 = ss.get("au_name", "").strip(), ss.get("au_pw", ""), ss.get("au_pw2", "")
    if pw != pw2:
        _ui.flash("error", "The two passwords differ.")
        return
    _run(lambda s: auth.create_user(s, ctx.username, name, pw, ss.get("au_role", "coder")),
         f"User {name} created")


def on_role() -> None:
    _run(lambda s: auth.set_role(s, ctx.username, ss["au_who"], ss["au_new_role"]),
         f"{ss['au_who']} is now {ss['au_new_role']}")


def on_password() -> None:
    _run(lambda s: auth.set_password(s, ctx.username, ss["au_who"], ss.get("au_reset", "")),
         f"Password of {ss['au_who']} reset")


def on_disable(disabled: bool) -> None:
    _run(lambda s: auth.set_disabled(s, ctx.username, ss["au_who"], disabled),
         f"{ss['au_who']} {'disabled' if disabled else 'enabled'}")


c = st.columns(2, gap="large")
with c[0].container(border=True):
    st.markdown("**Add a user**")
    with st.form("add_user", border=False, clear_on_submit=True):
        fc = st.columns(2)
        fc[0].text_input("User name", key="au_name", max_chars=100)
        fc[1].selectbox("Role", ROLES, key="au_role")
        fc = st.columns(2)
        fc[0].text_input("Password", type="password", key="au_pw",
                         help=f"at least {auth.MIN_PASSWORD_LENGTH} characters")
        fc[1].text_input("Repeat the password", type="password", key="au_pw2")
        st.form_submit_button("Add user", type="primary", on_click=on_create)

with c[1].container(border=True):
    st.markdown("**Change a user**")
    names = [u["username"] for u in people]
    who = st.selectbox("User", names, key="au_who")
    person = next(u for u in people if u["username"] == who)
    rc = st.columns([2, 1], vertical_alignment="bottom")
    rc[0].selectbox("Role", ROLES, index=ROLES.index(person["role"]), key="au_new_role")
    rc[1].button("Set role", on_click=on_role, width="stretch", key="au_set_role")
    pc = st.columns(2, vertical_alignment="bottom")  # the button's label whole in a half-page box at 1,100 px
    pc[0].text_input("New password", type="password", key="au_reset")
    pc[1].button("Reset password", on_click=on_password, width="stretch", key="au_set_pw")
    if person["disabled"]:
        st.button(f"Enable {who}", on_click=on_disable, args=(False,), key="au_enable")
    else:
        st.button(f"Disable {who}", on_click=on_disable, args=(True,), key="au_disable",
                  help="the account keeps its history but can no longer sign in")

st.markdown("#### Review rules")


def on_self_approval() -> None:
    value = bool(ss.get("au_self_approval"))
    _run(lambda s: review.set_setting(s, review.SELF_APPROVAL, value, ctx.username),
         "Leads may now approve their own decisions" if value else "Leads may no longer approve their own decisions")


with _ui.session() as s:
    ss["au_self_approval"] = bool(review.setting(s, review.SELF_APPROVAL, False))
st.toggle("Allow a lead to approve their own decisions (small teams where the lead also codes)",
          key="au_self_approval", on_change=on_self_approval,
          help="Off by default: a second person confirms every code. Changes are in the audit log.")

st.markdown("#### Audit log")
with _ui.session() as s:
    log = auth.audit_log(s, ctx.username, limit=300)
actions = sorted(log["action"].unique())
pick = st.multiselect("Actions", actions, key="au_actions", placeholder="all actions")
shown = log[log["action"].isin(pick)] if pick else log
st.dataframe(shown.assign(details=shown["details"].map(str)), hide_index=True, width="stretch")
