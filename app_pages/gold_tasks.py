"""Gold tasks (lead): build a gold set by independent double annotation, and see how far annotators agree.

Top to bottom: a form to create a task from a batch (all mentions or a random
sample, N annotators per mention, blind or assisted), the list of tasks with
their progress, and for the selected task the agreement numbers -- exact-set
agreement, Cohen's κ per annotator pair, Fleiss' κ, Krippendorff's α, each
computed by termnorm.agreement and explained next to it -- plus the gold set
download. Every action goes through db.gold, which checks the lead role again.
"""

import math
import time

import pandas as pd
import streamlit as st

from db import auth, gold, services
from app_pages import _ui

ctx = _ui.page("lead")

MODE_HELP = {"blind": "blind: annotators see only the mention and search the vocabulary (no anchoring on the "
                      "engine's answer; use it for gold the engine will be measured on)",
             "assisted": "assisted: annotators also see the engine's ranked candidates (faster, but answers "
                         "lean towards the engine)"}


def fmt(x, digits: int = 3) -> str:
    return "—" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


with _ui.session() as s:
    vocabs = services.vocabularies(s)
    vocabulary_id = ctx.vocabulary_id or (vocabs[0]["id"] if vocabs else None)
    batch_list = services.batches(s, vocabulary_id) if vocabulary_id else []
    annotators = auth.users_with_role(s, "annotator")
    tasks = gold.gold_tasks(s, ctx.username, vocabulary_id=vocabulary_id)

st.markdown("### Gold tasks")
st.caption("Each mention of a task is coded independently by several annotators; where they agree it becomes "
           "gold at once, where they differ a lead adjudicates. The engine's accuracy is then measured on this "
           "gold set (Dashboards).")


# ---------------------------------------------------------------- a new task
def on_create() -> None:
    ss = st.session_state
    sample = int(ss.get("gt_sample") or 0)
    try:
        with _ui.session() as s:
            tid = gold.create_gold_task(
                s, ctx.username, ss.get("gt_name", ""), ss.get("gt_batch"), ss.get("gt_annotators") or [],
                per_mention=int(ss.get("gt_per_mention") or 2), mode=ss.get("gt_mode", "blind"),
                sample=sample or None, seed=int(ss.get("gt_seed") or 0))
    except (ValueError, KeyError, PermissionError) as e:
        made = ss.get("gt_made")  # a double click: the first press made it (a user test saw "created" and an error)
        if made and made[:2] == (ss.get("gt_name", "").strip(), ss.get("gt_batch")) and time.time() - made[2] < 10:
            return
        _ui.flash("error", f"Task not created: {e}")
        return
    ss["gt_selected"], ss["gt_made"] = tid, (ss.get("gt_name", "").strip(), ss.get("gt_batch"), time.time())
    _ui.flash("toast", f"Gold task {ss.get('gt_name')!r} created")


with st.expander("New gold task", expanded=not tasks, icon=":material/add_task:"):
    if not batch_list:
        st.info("No batch in this vocabulary yet: import mentions first.")
    elif len(annotators) < 2:
        st.info("A gold task needs at least two users with the annotator role (or above): an admin adds them on "
                "the Users page.")
    else:
        with st.form("new_gold_task", border=False):
            c = st.columns([2, 2])
            c[0].text_input("Task name", key="gt_name", placeholder="e.g. thyroid gold, May")
            batch_ids = [b["id"] for b in batch_list]  # the sidebar's batch first chosen (a user test took another)
            c[1].selectbox("From batch", batch_ids, key="gt_batch",
                           index=batch_ids.index(ctx.batch_id) if ctx.batch_id in batch_ids else 0,
                           format_func=_ui.distinct({b["id"]: f'{b["name"]} ({b["n_mentions"]} mentions)'
                                                       for b in batch_list}).get)
            st.multiselect("Annotators", annotators, key="gt_annotators",
                           help="users with role annotator, lead or admin; mentions are shared out in rotation so "
                                "each annotator and each pair gets the same share")
            c = st.columns(4)
            c[0].number_input("Annotators per mention", min_value=2, max_value=max(2, len(annotators)), value=2,
                              key="gt_per_mention")
            c[1].number_input("Sample of N mentions (0 = all)", min_value=0, value=0, step=10, key="gt_sample")
            c[2].number_input("Random seed", min_value=0, value=0, key="gt_seed",
                              help="the same seed draws the same sample")
            c[3].radio("Mode", list(MODE_HELP), key="gt_mode", horizontal=True,
                       help=" · ".join(MODE_HELP.values()))
            st.form_submit_button("Create gold task", type="primary", on_click=on_create)

if not tasks:
    st.info("No gold task yet for this vocabulary.")
    st.stop()

# ---------------------------------------------------------------- the tasks
overview = pd.DataFrame([{
    "task": t["name"], "batch": t["batch"], "mode": t["mode"], "mentions": t["n_mentions"],
    "annotators": ", ".join(t["annotators"]),
    "annotated": t["n_annotated"] / t["n_assignments"] if t["n_assignments"] else 0.0,
    "agreed": t["n_agreed"], "adjudicated": t["n_adjudicated"], "to adjudicate": t["n_to_adjudicate"],
    "gold": t["n_gold"]} for t in tasks])
st.dataframe(overview, hide_index=True, width="stretch", column_config={
    "annotated": st.column_config.ProgressColumn("annotated", format="percent", min_value=0.0, max_value=1.0,
                                                 help="answers given / answers needed (mentions × annotators)"),
    "gold": st.column_config.NumberColumn("gold", help="agreed + adjudicated mentions")})

ids = [t["id"] for t in tasks]
if st.session_state.get("gt_selected") not in ids:
    st.session_state["gt_selected"] = ids[-1]
task_id = st.selectbox("Task", ids, key="gt_selected",
                       format_func=_ui.distinct({t["id"]: t["name"] for t in tasks}).get)
t = next(x for x in tasks if x["id"] == task_id)

with _ui.session() as s:
    overall, pairs = gold.task_agreement(s, ctx.username, task_id)
how = overall.get("how", {})

st.markdown(f"#### Agreement · {_ui.md(t['name'])}")
st.caption(f"{t['mode']} · {t['per_mention']} annotators per mention · {t['n_mentions']} mentions"
           + (f" (random sample, seed {t['seed']})" if t["sample_size"] else "")
           + f" · created by {t['created_by']} · {overall['n_multi']} mentions with ≥ 2 answers so far")
m = st.columns(4)
m[0].metric("Exact-set agreement", fmt(overall["exact_agreement"]), help=how.get("exact_agreement"))
m[1].metric("Cohen's κ (mean over pairs)", fmt(overall["mean_pair_kappa"]), help=how.get("kappa"))
m[2].metric("Fleiss' κ", fmt(overall["fleiss_kappa"]), help=how.get("fleiss_kappa"))
m[3].metric("Krippendorff's α", fmt(overall["krippendorff_alpha"]), help=how.get("krippendorff_alpha"))
st.caption("Each answer set counts as one category (two sets that differ by one term disagree). κ and α correct "
           "the observed agreement for chance; above 0.8 is usually read as reliable, 0.67–0.8 as tentative "
           "(Krippendorff 2004).")

if len(pairs):
    st.dataframe(pairs, hide_index=True, width="stretch", column_config={
        "annotator_a": "annotator", "annotator_b": "with",
        "n_common": st.column_config.NumberColumn("mentions in common"),
        "exact_agreement": st.column_config.NumberColumn("exact agreement", format="%.3f"),
        "kappa": st.column_config.NumberColumn("Cohen's κ", format="%.3f", help=how.get("kappa")),
        "kappa_terms": st.column_config.NumberColumn("κ per term", format="%.3f", help=how.get("kappa_terms"))})

if t["n_to_adjudicate"]:
    st.warning(f"{t['n_to_adjudicate']} mentions wait for adjudication (Adjudicate page).",
               icon=":material/gavel:")

with _ui.session() as s:
    csv, _ = gold.export_gold(s, ctx.username, task_id, "csv")
    chip, no_term = gold.export_gold(s, ctx.username, task_id, "chip-cdn")
d = st.columns([1, 1, 3])
d[0].download_button("Gold set (CSV)", csv, file_name=f"gold_task_{task_id}.csv", mime="text/csv",
                     disabled=not t["n_gold"], icon=":material/download:",
                     help="each mention's gold terms and their codes; an empty terms cell: no term fits")
d[1].download_button("Gold set (CHIP-CDN JSON)", chip, file_name=f"gold_task_{task_id}.json",
                     mime="application/json", disabled=not t["n_gold"], icon=":material/download:",
                     help="the format `termnorm evaluate --test` reads")
if no_term:
    d[2].caption(f"The CHIP-CDN file leaves out the {no_term} mention{'s' if no_term > 1 else ''} whose gold is "
                 "\"no term fits\": the format has no way to say it. The CSV keeps them.")
