"""Annotate (annotator): code the mentions of a gold task, independently of the other annotators.

One mention at a time, like the coding queue, but nothing is proposed in a
*blind* task: the annotator finds the terms by searching the vocabulary, so
the gold set is not anchored on the engine it will be used to measure. In an
*assisted* task the engine's ranked candidates are listed (none is
pre-selected). Answers go to db.gold.record_annotation (never to the coding
decisions or the engine's history); the annotator sees only their own
answers and may revise them until the lead adjudicates.
"""

import time

import streamlit as st

from db import gold
from app_pages import _typing, _ui

ASSISTED_SHOWN = 10  # candidates listed in an assisted task (the coding page shows 5 plus "more")

ctx = _ui.page("annotator")
ss = st.session_state

with _ui.session() as s:
    tasks = gold.my_tasks(s, ctx.username)
if not tasks:
    st.markdown("### Gold annotation")
    st.info("No gold task is assigned to you yet: a lead creates them on the Gold tasks page.")
    st.stop()

ids = [t["id"] for t in tasks]
if ss.get("an_task") not in ids:
    ss["an_task"] = next((t["id"] for t in tasks if t["n_done"] < t["n_assigned"]), ids[0])
head = st.columns([3, 2], vertical_alignment="bottom")
task_id = head[0].selectbox("Gold task", ids, key="an_task",
                            format_func=_ui.distinct({t["id"]: f'{t["name"]} · {t["mode"]}' for t in tasks}).get)
task = next(t for t in tasks if t["id"] == task_id)
holder = _ui.serving_holder(ctx.url, task["vocabulary_id"])

with _ui.session_lock(), _ui.session() as s:  # waits for a save in progress (_ui.session_lock)
    queue = gold.annotation_queue(s, task_id, ctx.username)
n_done = sum(m["terms"] is not None for m in queue)
head[1].progress(n_done / len(queue) if queue else 0.0, text=f"**{n_done} / {len(queue)}** answered")

revise_key = f"an_revise_{task_id}"
current = next((m for m in queue if m["mention_id"] == ss.get(revise_key) and not m["final"]), None) \
    or next((m for m in queue if m["terms"] is None), None)


def _status(m: dict) -> str:
    return "✓ final (adjudicated)" if m["final"] else "agreed" if m["agreed"] else ""


def answers_table() -> None:
    done = [m for m in queue if m["terms"] is not None]
    if not done:
        return
    with st.expander(f"My answers ({len(done)})", expanded=current is None):
        st.dataframe([{"#": m["position"], "mention": m["text"], "terms": " + ".join(m["terms"]) or "(no term fits)",
                       "comment": m["comment"], "gold": _status(m)} for m in done],
                     hide_index=True, width="stretch")
        open_ = [m for m in done if not m["final"]]  # an adjudicated answer is final (db.gold.record_annotation)
        if not open_:
            return
        rc = st.columns([3, 1], vertical_alignment="bottom")
        pick = rc[0].selectbox("Revise the answer for", [m["mention_id"] for m in open_], key=f"an_pick_{task_id}",
                               format_func=_ui.distinct({m["mention_id"]: f'#{m["position"]} {m["text"]}'
                                                         for m in open_}).get)
        if rc[1].button("Revise", key=f"an_revise_btn_{task_id}", width="stretch"):
            ss[revise_key] = pick
            st.rerun()


if current is None:
    st.success(f"You have answered all {len(queue)} mentions of this task. Thank you! You can still revise an "
               "answer below until the lead adjudicates.")
    answers_table()
    st.stop()

mid, text = current["mention_id"], current["text"]
sel_key = f"an_terms_{task_id}_{mid}"
ss.setdefault(f"an_shown_at_{task_id}_{mid}", time.time())
if sel_key not in ss:
    ss[sel_key] = list(current["terms"] or [])
assisted = task["mode"] == "assisted"
with _ui.session() as s:
    sug = holder.suggestion(s, mid, text) if assisted else None
spans = sug.keywords if sug else holder.tag(text)


# ---------------------------------------------------------------- actions
def _forget() -> None:
    for k in [k for k in ss if isinstance(k, str) and k.endswith(f"_{task_id}_{mid}")]:
        del ss[k]
    ss.pop(revise_key, None)


@_ui.serialised
def _save(terms: list[str]) -> None:
    started = ss.get(f"an_shown_at_{task_id}_{mid}")
    try:
        with _ui.session() as s:
            gold.record_annotation(s, task_id, mid, ctx.username, terms, ss.get(f"an_comment_{task_id}_{mid}", ""),
                                   time.time() - started if started else 0.0)
    except (ValueError, KeyError, PermissionError) as e:
        _ui.flash("error", f"Not saved: {e}")
        return
    _forget()
    said = f"#{current['position']} saved: " + (" + ".join(terms) or "no term fits")
    if current["agreed"] and set(terms) != set(current["terms"]):  # db.gold._settle withdrew the agreed label
        _ui.flash("warning", said + ". The agreed gold answer is withdrawn: the lead adjudicates this mention.")
    else:
        _ui.flash("toast", said)


def on_save() -> None:
    terms = list(ss.get(sel_key) or [])
    if not terms:
        _ui.flash("error", "Pick at least one term, or use “No term fits”.")
        return
    _save(terms)


def on_none() -> None:
    _save([])


def on_pick(term: str, term_codes: list[str]) -> None:
    chosen = list(ss.get(sel_key) or [])
    if term not in chosen:
        ss[sel_key] = chosen + [term]
    ss.setdefault(f"an_codes_{task_id}_{mid}", {})[term] = ", ".join(term_codes)


# ---------------------------------------------------------------- the mention
revising = " · revising your answer" if current["terms"] is not None else ""
st.caption(f"Mention #{current['position']} · {task['name']}{revising}")
_ui.markup(f'<div class="tn-mention">{_ui.highlight_html(text, spans)}</div>')
_ui.markup(_ui.legend_html())
if current["agreed"]:
    st.warning("Every annotator of this mention gave your answer, so it is gold. A different answer withdraws that "
               "gold and sends the mention to the lead to adjudicate.")

if assisted:
    st.markdown("**Engine candidates** (assisted task: pick the right ones; none is pre-selected)")
    _ui.markup(_ui.candidate_table_html(sug.candidates[:ASSISTED_SHOWN], sug.keywords, [], holder.tag))
else:
    st.caption(":material/visibility_off: Blind task: the engine's suggestion is hidden so that your answer is "
               "your own. Search the vocabulary below.")

# ---------------------------------------------------------------- the answer
vocab = holder.engine.vocabulary
options = list(dict.fromkeys(([c.term for c in sug.candidates[:ASSISTED_SHOWN]] if assisted else [])
                             + list(ss[sel_key])))
codes = ss.get(f"an_codes_{task_id}_{mid}", {})
st.multiselect("Your terms for this mention", options, key=sel_key,
               format_func=lambda t: f"{t}  ·  {codes.get(t) or ', '.join(vocab.codes_of(t))}",
               placeholder=f"{_typing.TYPE_A_TERM[0].upper()}{_typing.TYPE_A_TERM[1:]}, or search the vocabulary below",
               on_change=lambda shown=options: ss.__setitem__(sel_key, _typing.typed_terms(
                   holder, ss[sel_key], f"an_q_{task_id}_{mid}", shown)),
               accept_new_options=True,  # a term typed, not only searched (_typing.typed_terms reads it)
               select_all=False)  # no 'Select N matches': Enter after typing must not add every match
_typing.after_terms_box()

cols = st.columns([1.3, 1.3, 3])
cols[0].button("Save answer", type="primary", shortcut="S", on_click=on_save, key=f"an_save_{task_id}_{mid}",
               width="stretch")
cols[1].button("No term fits", on_click=on_none, key=f"an_none_{task_id}_{mid}", width="stretch",
               help="saves an empty answer: no term of the vocabulary fits this mention")
cols[2].text_input("Comment (optional)", key=f"an_comment_{task_id}_{mid}", label_visibility="collapsed",
                   placeholder="Comment for the lead (optional)")


@st.fragment
def search_box() -> None:
    _ui.vocabulary_search(holder, f"an_q_{task_id}_{mid}", f"an_add_{task_id}_{mid}", on_pick)

search_box()
answers_table()
