"""Coding queue: one mention at a time, the engine's ranked candidates, one key to decide.

Reads top to bottom like the screen: batch progress, the mention with its
keywords highlighted, what the engine proposes (how many terms, how sure),
the ranked candidates with every score and the keyword agreement, the terms
to save (candidates, vocabulary search), then the actions. Each decision is
committed to the database (``db.services.record_decision``) before the
engine learns it and the queue moves on; suggestions for the next mentions
are prepared after the page is drawn, so the next one is a database read.
The mention shown is claimed for this coder, so colleagues on the same batch
are shown other mentions (``db.services.next_mention``).
"""

import time

import streamlit as st

from db import services
from pages import _ui

SHOWN = _ui.SHOWN
PREPARE_AHEAD = _ui.PREPARE_AHEAD

SHORTCUTS = [("S", "save the terms in the box (accept if unchanged, else correct)"),
             ("A", "accept the engine's terms"), ("X", "reject: no candidate fits"), ("K", "skip"),
             ("Enter", "in the comment box: flag for a lead")]

ctx = _ui.page()

if ctx.vocabulary_id is None or ctx.batch_id is None:
    st.info("No batch to code: import mentions on the Import / Export page.")
    st.stop()

holder = ctx.holder()
with _ui.session() as s:
    batch = next(b for b in services.batches(s, ctx.vocabulary_id) if b["id"] == ctx.batch_id)
    done, total = services.batch_progress(s, ctx.batch_id)
    current = services.next_mention(s, ctx.batch_id, ctx.username)
    others = services.claimed_by_others(s, ctx.batch_id, ctx.username)
    sug = holder.suggestion(s, current["id"], current["text"]) if current else None

head = st.columns([3, 2], vertical_alignment="bottom")
head[0].markdown(f"### Coding · {_ui.esc(batch['name'])}")
head[1].progress(done / total if total else 0.0, text=f"**{done} / {total}** coded")

if current is None and others:
    st.info(f"Nothing left for you here: the {others} mention(s) still open are on colleagues' screens. "
            f"A mention left undecided comes back to the queue after {services.CLAIM_MINUTES} minutes.")
    st.button("Check again", key="recheck")
    st.stop()
if current is None:
    st.success("This batch is finished: every mention has a decision. Export it on the Import / Export page.")
    st.stop()
if others:
    head[1].caption(f"{others} other mention(s) on colleagues' screens now")

mid, text = current["id"], current["text"]
st.session_state.setdefault(f"shown_at_{mid}", time.time())
sel_key = f"terms_{mid}"
if sel_key not in st.session_state:
    st.session_state[sel_key] = list(sug.chosen)


# ---------------------------------------------------------------- actions (callbacks run before the next draw)
def _forget(mention_id: int) -> None:
    for k in [k for k in st.session_state if isinstance(k, str) and k.endswith(f"_{mention_id}")]:
        del st.session_state[k]


def _decide(action: str, terms=(), comment: str = "") -> None:
    try:
        _ui.decide(ctx, mid, text, action, terms, comment, shown=SHOWN)
    except (ValueError, KeyError) as e:
        _ui.flash("error", f"Not saved: {e}")
        return
    _forget(mid)
    _ui.flash("toast", f"#{current['position']} {action}" + (": " + " + ".join(terms) if terms else ""))


def on_save() -> None:
    terms = list(st.session_state.get(sel_key) or [])
    if not terms:
        _ui.flash("error", "Pick at least one term (or use Reject / Skip / Flag).")
        return
    _decide("accept" if set(terms) == set(sug.chosen) else "correct", terms)


def on_accept() -> None:
    _decide("accept", list(sug.chosen))


def on_flag() -> None:
    comment = (st.session_state.get(f"comment_{mid}") or "").strip()
    if not comment:
        _ui.flash("error", "A flag needs a comment for the lead.")
        return
    _decide("flag", comment=comment)


def on_pick(term: str, term_codes: list[str]) -> None:
    chosen = list(st.session_state.get(sel_key) or [])
    if term not in chosen:
        st.session_state[sel_key] = chosen + [term]
    st.session_state.setdefault(f"codes_{mid}", {})[term] = ", ".join(term_codes)


def on_clear() -> None:
    st.session_state[sel_key] = []


def on_synonym() -> None:
    term = st.session_state.get(f"syn_term_{mid}")
    synonym = (st.session_state.get(f"syn_text_{mid}") or "").strip()
    try:
        with _ui.session() as s:
            added = services.add_synonym(s, ctx.vocabulary_id, term, synonym, ctx.username)
    except (ValueError, KeyError) as e:
        _ui.flash("error", f"Synonym not added: {e}")
        return
    holder.learn_synonym(term, synonym)
    # the mention's own suggestion is now stale (holder.is_stale); offer the taught term at once
    st.session_state[sel_key] = [term]
    _ui.flash("toast", f"Synonym {'added' if added else 'already known'}: {synonym} → {term}")


# ---------------------------------------------------------------- the mention
status = {"skipped": " · skipped before"}.get(current.get("status"), "")
st.caption(f"Mention #{current['position']} of {total}{status}")
_ui.markup(f'<div class="tn-mention">{_ui.highlight_html(text, sug.keywords)}</div>')
_ui.markup(_ui.legend_html())

# ---------------------------------------------------------------- what the engine proposes
chosen_html = "".join(f'<span class="tn-chosen">{_ui.esc(t)}</span>' for t in sug.chosen) or "—"
count = f"{sug.predicted_count} term" + ("s" if sug.predicted_count != 1 else "")
_ui.markup(f'<div style="margin:.6rem 0"><span class="tn-badge tn-grey">needs {count}</span>'
           f"{_ui.confidence_badge(sug.confidence)}"
           f'<span class="tn-keys">model {_ui.esc(sug.model_version)}</span></div>'
           f'<div style="margin-bottom:.4rem">Suggested: {chosen_html}</div>')

_ui.markup(_ui.candidate_table_html(sug.candidates[:SHOWN], sug.keywords, sug.chosen, holder.tag))
if len(sug.candidates) > SHOWN:
    with st.expander(f"{len(sug.candidates) - SHOWN} more candidates"):
        _ui.markup(_ui.candidate_table_html(sug.candidates[SHOWN:], sug.keywords, sug.chosen, holder.tag,
                                            start=SHOWN + 1))

# ---------------------------------------------------------------- the terms to save
options = list(dict.fromkeys([c.term for c in sug.candidates] + list(st.session_state[sel_key])))
codes = {c.term: ", ".join(c.codes) for c in sug.candidates} | st.session_state.get(f"codes_{mid}", {})
st.multiselect("Terms for this mention", options, key=sel_key,
               format_func=lambda t: f"{t}  ·  {codes[t]}" if codes.get(t) else t,
               placeholder="Pick one or more terms, or search the vocabulary below")

cols = st.columns([1.3, 1.3, 1.2, 1, 1.6])
cols[0].button("Save terms", type="primary", shortcut="S", on_click=on_save, key=f"save_{mid}", width="stretch")
cols[1].button("Accept suggestion", shortcut="A", on_click=on_accept, key=f"accept_{mid}", width="stretch",
               disabled=not sug.chosen)
cols[2].button("Reject: none fits", shortcut="X", on_click=_decide, args=("reject",), key=f"reject_{mid}",
               width="stretch")
cols[3].button("Skip", shortcut="K", on_click=_decide, args=("skip",), key=f"skip_{mid}", width="stretch")
cols[4].button("Clear the box", on_click=on_clear, key=f"clear_{mid}", width="stretch", type="tertiary")

st.markdown('<div class="tn-keys">Keys: ' + " · ".join(f"<kbd>{k}</kbd> {what}" for k, what in SHORTCUTS)
            + "</div>", unsafe_allow_html=True)

with st.form(f"flag_form_{mid}", border=False, enter_to_submit=True):
    fc = st.columns([5, 1], vertical_alignment="bottom")
    fc[0].text_input("Comment", key=f"comment_{mid}", placeholder="What is wrong or unclear? (Enter flags it)")
    fc[1].form_submit_button("Flag", on_click=on_flag, key=f"flag_{mid}", width="stretch")


# ---------------------------------------------------------------- vocabulary search (reruns only itself while typing)
@st.fragment
def search_box() -> None:
    _ui.vocabulary_search(holder, f"q_{mid}", f"pick_{mid}", on_pick)

search_box()

with st.expander("Teach a synonym: this mention (or part of it) is another name of a term"):
    syn_terms = list(dict.fromkeys(list(st.session_state[sel_key]) + [c.term for c in sug.candidates]))
    sc = st.columns([3, 3, 1], vertical_alignment="bottom")
    sc[0].selectbox("Term", syn_terms, key=f"syn_term_{mid}")
    sc[1].text_input("Synonym", value=text, key=f"syn_text_{mid}")
    sc[2].button("Add synonym", on_click=on_synonym, key=f"syn_add_{mid}", width="stretch")


# ---------------------------------------------------------------- prepare the next mentions (page already drawn)
prepared_key = "_prepared"
if st.session_state.get(prepared_key) != (mid, holder.revision):
    with _ui.session() as s:
        holder.prepare(s, ctx.batch_id, mid, PREPARE_AHEAD)
    st.session_state[prepared_key] = (mid, holder.revision)
