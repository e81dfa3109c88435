"""Review (lead): approve the coders' decisions or send them back, one by one or a filtered set at once.

Top to bottom: the filters (batch, coder, mapping status, confidence of the
suggestion answered), the decisions they select with their codes,
relationship and status, then the actions: approve the chosen ones, approve
every decision shown, or send the chosen ones back with a note the coder reads
on the coding page. db.review checks the lead role again and refuses
approving one's own decision unless an admin allowed it (Users page).
"""

from collections import Counter

import pandas as pd
import streamlit as st

from db import review, services
from db.models import REVIEW_STATUSES
from app_pages import _ui

ctx = _ui.page("lead")
if ctx.vocabulary_id is None:
    st.info("No vocabulary yet.")
    st.stop()

with _ui.session() as s:
    batch_list = services.batches(s, ctx.vocabulary_id)
    everything = review.review_frame(s, vocabulary_id=ctx.vocabulary_id)
    self_ok = bool(review.setting(s, review.SELF_APPROVAL, False))

st.markdown("### Review")
st.caption("Every decision has a mapping status: **unchecked** (a coder's, not reviewed), **approved**, "
           "**flagged** (a coder asked a lead), **auto** (auto-coded), **needs_rereview** (sent back, or its "
           "term was retired or re-coded by a new vocabulary edition). "
           + ("Self-approval is allowed by an admin." if self_ok else
              "Nobody approves their own decisions (an admin can allow it on the Users page)."))

# ---------------------------------------------------------------- filters
batches = {b["id"]: b["name"] for b in batch_list}
# a row that wraps: in four columns the Status filter cut its two default chips ("flag…") at 1,280 px
f = st.container(horizontal=True, wrap=True, gap="medium")
choices = [None] + list(batches)
batch_pick = f.selectbox("Batch", choices, key=f"rv_batch_{ctx.batch_id}",  # follows the sidebar's batch
                          index=choices.index(ctx.batch_id) if ctx.batch_id in batches else 0,
                          format_func=lambda b: "every batch" if b is None else batches[b], width=220)
coders = f.multiselect("Coders", sorted(set(everything["user"])), key="rv_coders", placeholder="every coder",
                       width=220)
# flagged ones too: a coder's question to a lead must not hide behind a filter
statuses = f.multiselect("Status", list(REVIEW_STATUSES), default=["unchecked", "flagged"], key="rv_status",
                         placeholder="every status", width=300)
low, high = f.slider("Confidence of the suggestion", 0.0, 1.0, (0.0, 1.0), 0.05, key="rv_conf", width=240)
with _ui.session() as s:
    df = review.review_frame(s, vocabulary_id=ctx.vocabulary_id, batch_id=batch_pick, coders=coders,
                             statuses=statuses, min_confidence=low if low > 0 else None,
                             max_confidence=high if high < 1 else None)

# ---------------------------------------------------------------- who holds what (the batches the filter shows)
def on_release(coder: str, batch_ids: list[int]) -> None:
    try:
        with _ui.session() as s:
            n = sum(services.release_claims(s, ctx.username, b, coder) for b in batch_ids)
    except PermissionError as e:
        _ui.flash("error", f"Not released: {e}")
        return
    _ui.flash("success", f"released {n} mention(s) {coder} held: they are back in the queue")


# the filter's batch, not the sidebar's (a user test filtered on a batch and saw no panel for it)
shown_batches = [batch_pick] if batch_pick is not None else list(batches)
with _ui.session() as s:
    held = services.claims(s, shown_batches)
if held:
    where = "this batch" if batch_pick is not None else "these batches"
    with st.expander(f"{len(held)} open mention(s) of {where} are on coders' screens now"):
        st.dataframe(pd.DataFrame({"coder": [h["coder"] for h in held], "batch": [batches[h["batch_id"]] for h in held],
                                   "#": [h["position"] for h in held], "mention": [h["text"] for h in held],
                                   "since": [h["since"] for h in held]}), hide_index=True, width="stretch")
        st.caption(f"A claim lapses by itself after {services.CLAIM_MINUTES} minutes; release one now when its "
                   "coder has left (the mention goes back to the queue, nothing decided is touched).")
        for i, coder in enumerate(sorted({h["coder"] for h in held})):
            st.button(f"Release {coder}'s mentions", key=f"rv_release_{i}", on_click=on_release,
                      args=(coder, sorted({h["batch_id"] for h in held if h["coder"] == coder})))

st.markdown(f"**{len(df)}** decision(s) match.")
if df.empty:
    st.stop()


def _codes(row) -> str:
    return " · ".join(f"{t} ({c})" if c else t for t, c in zip(row["terms"], list(row["codes"]) + [""] * 99)) or "—"


# what a lead judges first (the answer, its status, how sure the engine was) before the rest: at 1,280 px the
# columns after the terms sit past the table's right edge
shown = pd.DataFrame({
    "#": df["position"], "mention": df["mention"], "action": df["action"],
    "terms (code exported)": df.apply(_codes, axis=1),
    # an answer to a send-back says so where the lead looks first (its note, with what was asked, is further right)
    "status": [st_ + (" · re-review answer" if str(n).startswith(services.REREVIEW_ANSWER) else "")
               for st_, n in zip(df["review_status"], df["review_note"])], "confidence": df["confidence"],
    "coder": df["user"], "coder's comment": df["comment"], "relationship": df["relationship"],
    "note": df["review_note"], "batch": df["batch"],
    "edition": ["" if pd.isna(n) else f"{n} ({lab})" if lab else str(n)
                for n, lab in zip(df["edition"], df["edition_label"])]})
st.dataframe(shown, hide_index=True, width="stretch", height=min(38 + 35 * len(shown), 420),
             column_config={"confidence": st.column_config.ProgressColumn(
                 "model confidence", min_value=0.0, max_value=1.0, format="%.2f",
                 help="the engine's own score for the suggestion the coder answered (accepted or not); the coding "
                      "page puts it in words only once the serving version was measured on held-out mentions"),
                 "coder's comment": st.column_config.TextColumn(help="why the coder flagged, skipped or chose")})

# a decision marked not related names terms the mention is *not*: the picker says so, not an arrow to them
labels = {int(r["decision_id"]): f"#{r['position']} {r['mention']} "
          f"{'✗ not related to' if r['relationship'] == services.NOT_RELATED else '→'} {_codes(r)} ({r['user']})"
          for r in df.to_dict(orient="records")}
ids = list(labels)
# what "approve all" approves: the answers shown; a flag or skip is a question for a lead to code or send back,
# and a user test saw every one of them come back "refused" after the bulk approve
answers = [int(i) for i, a in zip(df["decision_id"], df["action"]) if a in review.APPROVABLE]
questions = Counter(a for a in df["action"] if a not in review.APPROVABLE)
CHECKED_KEY = f"rv_checked_{len(ids)}"  # a new count (filters changed) asks again


def every_shown(chosen) -> bool:
    """Whether ``chosen`` is every decision shown (of several): approving it asks for the "checked all" box."""
    return len(ids) > 1 and set(chosen) >= set(ids)


# ---------------------------------------------------------------- actions
def _report(what: str, out: dict, key: str) -> None:
    done = out.get(key, [])
    _ui.flash("toast", f"{len(done)} decision(s) {what}")
    if out.get("refused"):
        reasons = {}
        for _, why in out["refused"]:
            reasons[why] = reasons.get(why, 0) + 1
        _ui.flash("error", f"{len(out['refused'])} refused: " + "; ".join(f"{n} × {w}" for w, n in reasons.items()))


def on_approve(decision_ids: list[int], bulk: bool = False) -> None:
    # every decision shown, however chosen (the picker's "Select all" too), needs the box ticked: a user test
    # approved them all through "Select all" + "Approve chosen" without it
    if (bulk or every_shown(decision_ids)) and not st.session_state.get(CHECKED_KEY):
        _ui.flash("error", f"Not approved: these are all {len(ids)} decisions shown. Tick \"I have checked all "
                           f"{len(ids)} decisions shown\" first.")
        return
    try:
        with _ui.session() as s:
            out = review.approve(s, decision_ids, ctx.username)
    except PermissionError as e:
        _ui.flash("error", str(e))
        return
    st.session_state["rv_pick"] = []
    _report("approved", out, "approved")


def on_send_back(decision_ids: list[int]) -> None:
    try:
        with _ui.session() as s:
            out = review.send_back(s, decision_ids, ctx.username, st.session_state.get("rv_note", ""))
    except (ValueError, PermissionError) as e:
        _ui.flash("error", f"Not sent back: {e}")
        return
    st.session_state["rv_pick"] = []
    if out.get("sent_back"):  # the note was for those: the next send-back gets its own (a user test reused one)
        st.session_state["rv_note"] = ""
    _report("sent back to the coders who made them", out, "sent_back")


picked = st.multiselect("Decisions to act on", ids, format_func=labels.get, key="rv_pick",
                        placeholder="choose decisions, or approve every one shown")
checked = st.checkbox(f"I have checked all {len(ids)} decisions shown (the table scrolls)", key=CHECKED_KEY)
every = every_shown(picked)
# a row that wraps where the labels would not fit: fixed columns cut "Approve the 4 answers sho…" at 1,280 px
a = st.container(horizontal=True, wrap=True, vertical_alignment="bottom", gap="small")
a.button("Approve chosen", type="primary", disabled=not picked or (every and not checked), on_click=on_approve,
         args=(list(picked),), key="rv_approve",
         help="every decision shown is chosen: tick the box above first" if every and not checked else None)
a.button(f"Approve the {len(answers)} answers shown" if questions else f"Approve all {len(ids)} shown",
         on_click=on_approve, args=(answers, True), key="rv_approve_all", disabled=not checked or not answers)
a.text_input("Note for the coder", key="rv_note", placeholder="why it goes back (required)", width=300)
a.button("Send back chosen", disabled=not picked, on_click=on_send_back, args=(list(picked),), key="rv_back")
left = " and ".join(f"{n} {act}{'s' if n > 1 else ''}" for act, n in questions.items())
st.caption("Approve all shown approves the filtered set's answers at once"
           + (f" ({left} shown are questions: code the mention or send it back)" if left else "")
           + "; your own decisions are refused with the reason, unless an admin allows self-approval.")
