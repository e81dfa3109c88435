"""Adjudicate (lead): the mentions on which annotators disagree, side by side; the lead's answer becomes gold.

Top to bottom: the task and how much is left, the contested mention with
every annotator's answer in its own column (terms with their codes, and a
button to take that answer), what they share, the final answer box (any of
their terms, or a term found in the vocabulary), then the whole queue as a
table. Saving calls db.gold.adjudicate, which checks the lead role and the
terms again and writes the GoldLabel (source "adjudicated") and the audit log.
"""

import math
import time

import pandas as pd
import streamlit as st

from db import gold, services
from app_pages import _typing, _ui
from termnorm import settings

#: a Save sooner than this after its mention was drawn is ignored (the coding page's rule): S pressed twice saved the
#: next mention, unseen, as "no term fits"
MIN_GAP_S = settings.get().min_dwell_s

FIXED = ("mention_id", "position", "mention", "n_annotators", "n_distinct", "common", "any", "majority", "gold")

ctx = _ui.page("lead")
ss = st.session_state

with _ui.session() as s:
    vocabs = services.vocabularies(s)
    vocabulary_id = ctx.vocabulary_id or (vocabs[0]["id"] if vocabs else None)
    tasks = gold.gold_tasks(s, ctx.username, vocabulary_id=vocabulary_id)

st.markdown("### Adjudication")
if not tasks:
    st.info("No gold task in this vocabulary yet (Gold tasks page).")
    st.stop()

ids = [t["id"] for t in tasks]
if ss.get("adj_task") not in ids:
    ss["adj_task"] = next((t["id"] for t in tasks if t["n_to_adjudicate"]), ids[-1])
top = st.columns([3, 1.2], vertical_alignment="bottom")
task_id = top[0].selectbox("Gold task", ids, key="adj_task",
                           format_func=_ui.distinct({t["id"]: t["name"] for t in tasks}).get)  # no live count
show_all = top[1].toggle("Show adjudicated too", key="adj_all")
t = next(x for x in tasks if x["id"] == task_id)
holder = _ui.serving_holder(ctx.url, t["vocabulary_id"])
vocab = holder.engine.vocabulary

with _ui.session_lock(), _ui.session() as s:  # waits for a save in progress (_ui.session_lock)
    queue = gold.disagreement_queue(s, ctx.username, task_id)
    overall, _pairs = gold.task_agreement(s, ctx.username, task_id)


def fmt(x) -> str:
    return "—" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.3f}"


k = st.columns(5)
k[0].metric("To adjudicate", t["n_to_adjudicate"])
k[1].metric("Adjudicated", t["n_adjudicated"])
k[2].metric("Agreed (gold at once)", t["n_agreed"])
k[3].metric("Cohen's κ", fmt(overall["mean_pair_kappa"]), help=overall.get("how", {}).get("kappa"))
k[4].metric("Krippendorff's α", fmt(overall["krippendorff_alpha"]),
            help=overall.get("how", {}).get("krippendorff_alpha"))
everyone = "both annotators" if t["per_mention"] == 2 else f"all {t['per_mention']} annotators"
st.caption(f"{t['n_complete']} of {t['n_mentions']} mentions answered by {everyone}; "
           "only those can be adjudicated. Agreement counts each answer set as one category.")

if queue.empty:
    st.success("No disagreement so far: every fully answered mention is agreed gold.")
    st.stop()

annotator_cols = [c for c in queue.columns if c not in FIXED]
open_rows = queue[queue["gold"].isna()]
rows = queue if show_all else open_rows
if rows.empty:
    st.success("Every disagreement of this task is adjudicated. Switch on “Show adjudicated too” to revise one.")
    st.stop()

row_ids = rows["mention_id"].tolist()
pick_key = f"adj_pick_{task_id}"
if ss.get(pick_key) not in row_ids:
    ss[pick_key] = row_ids[0]
labels = _ui.distinct({r.mention_id: f"#{r.position} {r.mention}" + (" ✓" if r.gold else "")
                       for r in rows.itertuples()})
st.selectbox(f"Mention ({len(open_rows)} open, most contested first)", row_ids, key=pick_key, format_func=labels.get)
row = rows[rows["mention_id"] == ss[pick_key]].iloc[0]
mid = int(row["mention_id"])


def split(cell) -> list[str]:
    return [] if cell is None or (isinstance(cell, float) and math.isnan(cell)) else \
        [x for x in str(cell).split("##") if x]


answers = {a: split(row[a]) for a in annotator_cols if row[a] is not None and not (
    isinstance(row[a], float) and math.isnan(row[a]))}
sel_key = f"adj_terms_{task_id}_{mid}"
if sel_key not in ss:
    ss[sel_key] = split(row["gold"]) if row["gold"] else split(row["common"])


# ---------------------------------------------------------------- actions
def on_use(terms: list[str]) -> None:
    ss[sel_key] = list(terms)
    ss[f"adj_none_{task_id}_{mid}"] = not terms  # an answer of "no term fits" ticks the box (a user test's did not)


def on_pick(term: str) -> None:
    chosen = list(ss.get(sel_key) or [])
    if term not in chosen:
        ss[sel_key] = chosen + [term]


@_ui.serialised
def on_save(task: int, mention_id: int, position: int, seen: list[str] | None) -> None:
    """Save the box of the mention this button was drawn for (``seen``: the gold the page showed, None: none)."""
    drawn = ss.get(f"adj_drawn_{task}_{mention_id}")
    if drawn is None or time.time() - drawn < MIN_GAP_S:
        _ui.flash("warning", "Ignored a Save that came as the mention was being drawn (a repeated press?): nothing "
                             "saved; press again if you meant it.")
        return
    box = f"adj_terms_{task}_{mention_id}"
    terms, none_fits = list(ss.get(box) or []), bool(ss.get(f"adj_none_{task}_{mention_id}"))
    if bool(terms) == none_fits:
        _ui.flash("error", "Not saved: clear the box or untick \"No term fits\"." if terms else
                  "Not saved: pick the gold terms, or tick \"No term fits\" if none of the vocabulary fits.")
        return
    try:
        with _ui.session() as s:
            gold.adjudicate(s, ctx.username, task, mention_id, terms,
                            ss.get(f"adj_comment_{task}_{mention_id}", ""), seen=seen)
    except (ValueError, KeyError, PermissionError) as e:
        _ui.flash("error", f"Not saved: {e}")
        return
    for key in (box, f"adj_pick_{task}", f"adj_drawn_{task}_{mention_id}"):
        ss.pop(key, None)
    _ui.flash("toast", f"#{position} gold: " + (" + ".join(terms) or "no term fits"))


# ---------------------------------------------------------------- the mention and the answers side by side
spans = holder.tag(str(row["mention"]))
_ui.markup(f'<div class="tn-mention">{_ui.highlight_html(str(row["mention"]), spans)}</div>')


def chips(terms: list[str]) -> str:
    if not terms:
        return '<span class="tn-miss">no term fits</span>'
    out = []
    for term in terms:
        marks = _ui.compare_keywords(spans, holder.tag(term))
        code = ", ".join(vocab.codes_of(term))
        out.append(f'<div class="tn-chosen"><span class="tn-code">{_ui.esc(code)}</span> '
                   f"{_ui.highlight_html(term, holder.tag(term), marks)}</div>")
    return "".join(out)


cols = st.columns(len(answers))
for col, (who, terms) in zip(cols, answers.items()):
    with col.container(border=True):
        st.markdown(f"**{_ui.md(who)}**")
        _ui.markup(chips(terms))
        st.button(f"Use {who}'s answer", key=f"adj_use_{task_id}_{mid}_{who}", on_click=on_use, args=(terms,),
                  width="stretch")

shared = split(row["common"])
majority = split(row["majority"]) if row["majority"] is not None else None
st.caption("In common: " + (" + ".join(shared) or "nothing")
           + (" · majority: " + " + ".join(majority) if majority else " · no majority")
           + (" · current gold: " + str(row["gold"]).replace("##", " + ") if row["gold"] else ""))

# ---------------------------------------------------------------- the final answer
options = list(dict.fromkeys([x for terms in answers.values() for x in terms] + list(ss[sel_key])))
st.multiselect("Gold answer", options, key=sel_key,
               format_func=lambda x: f"{x}  ·  {', '.join(vocab.codes_of(x))}",
               placeholder=f"Take an annotator's answer, {_typing.TYPE_A_TERM}, or search the vocabulary below",
               on_change=lambda shown=options: ss.__setitem__(sel_key, _typing.typed_terms(
                   holder, ss[sel_key], f"adj_q_{task_id}_{mid}", shown)),
               accept_new_options=True,  # a term typed, not only searched (_typing.typed_terms reads it)
               select_all=False)  # no 'Select N matches': Enter after typing must not add every match
_typing.after_terms_box()
b = st.container(horizontal=True, wrap=True, vertical_alignment="center", gap="small")
b.button("Save gold answer", type="primary", shortcut="S", on_click=on_save, key=f"adj_save_{task_id}_{mid}",
         args=(task_id, mid, int(row["position"]), split(row["gold"]) if row["gold"] else None))
# an empty box is no answer by itself: a single Save on a mention whose annotators shared nothing recorded
# "no term fits" without the lead saying so
b.checkbox("No term fits", key=f"adj_none_{task_id}_{mid}", help="none of the vocabulary's terms is right: the "
           "mention is gold without a term, and left out of accuracy")
b.text_input("Comment", key=f"adj_comment_{task_id}_{mid}", label_visibility="collapsed", width=360,
             placeholder="Why (optional; kept with the gold label)")


@st.fragment
def search_box() -> None:
    _ui.vocabulary_search(holder, f"adj_q_{task_id}_{mid}", f"adj_add_{task_id}_{mid}", on_pick, with_codes=False)

search_box()

# ---------------------------------------------------------------- the whole queue
st.markdown("#### All disagreements of this task")
table = queue[["position", "mention", *annotator_cols, "gold"]].copy()
table["gold"] = table["gold"].fillna("— open —")
for c in [*annotator_cols, "gold"]:
    table[c] = table[c].map(lambda v: "" if v is None else str(v).replace("##", " + "))
st.dataframe(pd.DataFrame(table), hide_index=True, width="stretch",
             column_config={"position": st.column_config.NumberColumn("#", width="small")})

# drawn to the end: a Save for this mention counts from now (on_save's MIN_GAP_S)
ss.setdefault(f"adj_drawn_{task_id}_{mid}", time.time())
