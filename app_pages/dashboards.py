"""Dashboards (lead): how the engine fares with coders and on gold, where it errs, how the team works.

Top to bottom: filters; headline numbers (acceptance of suggestions, accuracy
on gold, annotator agreement); acceptance over time and per model version;
accuracy of each model version on the gold set; missed terms by vocabulary
chapter; the term pairs coders correct most; predicted vs final number of
terms; coder throughput; audits of auto-coded mentions; a filterable table of
error examples with a download. Every number is computed by
termnorm.coding_metrics / termnorm.agreement on the frames of db.dashboard_data,
and each chart or table carries the ``how`` line that says how (caption and
hover). db.dashboard_data.load_dashboard checks the lead role again.
"""

import math

import pandas as pd
import streamlit as st

from db import dashboard_data, gold, services, suggest_jobs
from app_pages import _jobs, _ui
from termnorm.jobs import FINAL, JobBusy, JobRunner
from termnorm import coding_metrics as dash

CHART_HEIGHT = 340
ERROR_ROWS = 200  # rows shown in the error table (the download has all of them)

ctx = _ui.page("lead")
ss = st.session_state

with _ui.session() as s:
    vocabs = services.vocabularies(s)
if not vocabs:
    st.info("No vocabulary yet.")
    st.stop()
vocabulary_id = ctx.vocabulary_id or vocabs[0]["id"]
with _ui.session() as s:
    batch_list = services.batches(s, vocabulary_id)
holder = _ui.serving_holder(ctx.url, vocabulary_id)
current_version = holder.engine.model_version


def pct(x) -> str:
    return "—" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.1%}"


def num(x, digits: int = 3) -> str:
    return "—" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def chart(fig, key: str) -> None:
    """One chart, in the page's common size and style (the hover text is set by termnorm.coding_metrics)."""
    fig.update_layout(height=CHART_HEIGHT, margin={"l": 10, "r": 10, "t": 48, "b": 10}, template="plotly_white",
                      title={"font": {"size": 15}}, legend={"orientation": "h", "y": -0.18, "x": 0},
                      font={"family": "Source Sans Pro, WenQuanYi Zen Hei, sans-serif"})
    if fig.layout.xaxis.title.text in ("day", "week", "model_version", "user"):
        fig.update_xaxes(title_text=None)  # the ticks say it; the title would sit on the legend
    st.plotly_chart(fig, key=key, config={"displaylogo": False})


def empty(message: str) -> None:
    st.container(border=True, height=CHART_HEIGHT).caption(message)


# ---------------------------------------------------------------- filters
st.markdown("### Dashboards")
f = st.container(horizontal=True, wrap=True, vertical_alignment="bottom", gap="medium")  # wraps, never cuts
batch_labels = _ui.distinct({None: "All batches"} | {b["id"]: b["name"] for b in batch_list})
batch_id = f.selectbox("Batch", list(batch_labels), format_func=batch_labels.get, key="dash_batch", width=360)
file_gold = f.toggle("Also gold from imported files", key="dash_file_gold",
                     help="mentions imported with their gold terms (e.g. a CHIP-CDN dev file) count as gold "
                          "where no gold task labelled them")
fresh_only = f.toggle("Leave out mentions already taught", value=True, key="dash_fresh",
                      help="a suggestion made after coders had coded the same mention text comes from the "
                           "engine's memory (history recall), not from generalisation")

with _ui.session() as s:
    data = dashboard_data.load_dashboard(s, ctx.username, vocabulary_id, batch_id, include_file_gold=file_gold,
                                         shown=_ui.SHOWN)
    unscored = dashboard_data.unscored_gold(s, current_version, vocabulary_id, include_file_gold=file_gold)
    tasks = gold.gold_tasks(s, ctx.username, batch_id=batch_id, vocabulary_id=vocabulary_id)
    agreements = {t["id"]: gold.task_agreement(s, ctx.username, t["id"])[0] for t in tasks}
    # imported gold the toggle leaves out: said, never "no gold yet" beside a job that scored it
    file_gold_off = 0 if file_gold or len(data.gold) else dashboard_data.file_gold_count(s, vocabulary_id, batch_id)

dec, hist = data.decisions, data.history
gold_frame = data.gold[~data.gold["seen_in_history"].astype(bool)] if fresh_only and len(data.gold) else data.gold
# gold there is, all of it left out by the toggle: said so, never "no gold yet" (a user test read that as lost gold)
all_taught = len(data.gold) - len(gold_frame) if len(data.gold) and not len(gold_frame) else 0
NO_GOLD = (f"all {all_taught} gold mentions already taught" if all_taught else
           f"{file_gold_off:,} imported gold mentions not included" if file_gold_off else "no gold yet")
acc = dash.acceptance(dec)
accuracy = dash.model_accuracy(gold_frame, ranked_col="ranked", count_col="predicted_count") if len(gold_frame) \
    else None

# ---------------------------------------------------------------- headline numbers
# deltas here are context, not changes; each card as wide as its figures, the row wrapping where they do not fit
QUIET = {"delta_color": "off", "delta_arrow": "off", "border": True, "width": "stretch"}
n = acc.summary["n"]
# six fixed columns cut the figures short on a laptop screen ("8…" at 1,100 px)
row = st.container(horizontal=True, wrap=True, gap="small")
row.metric("Decisions", n, delta="on suggestions", help="accept / correct / reject decisions that answered a "
           "stored suggestion (latest decision per mention)", **QUIET)
row.metric("Top-1 accepted", pct(acc.summary["top1"]), delta=f"{round(acc.summary['top1'] * n) if n else 0} "
           f"of {n}", help=acc.how, **QUIET)
row.metric(f"Within top-{acc.summary['k']}", pct(acc.summary["topk"]),
           delta=f"{round(acc.summary['topk'] * n) if n else 0} of {n}", help=acc.how, **QUIET)
row.metric("Rejected all", pct(acc.summary["rejected_all"]),
           delta=f"{round(acc.summary['rejected_all'] * n) if n else 0} of {n}", help=acc.how, **QUIET)
version_rows = accuracy.table.set_index("model_version") if accuracy is not None else None
shown_version = current_version if version_rows is not None and current_version in version_rows.index else (
    accuracy.summary["best"] if accuracy is not None else None)
row.metric("Gold accuracy", pct(version_rows.loc[shown_version, "accuracy"]) if shown_version else "—",
           # the version's name (often 30 characters) is in the tooltip and the chart below: in the card it
           # was cut short, and the count with it
           delta=f"n={int(version_rows.loc[shown_version, 'n'])}" if shown_version else NO_GOLD,
           help=((f"Model version **{shown_version}**. " if shown_version else "")
                 + (accuracy.how if accuracy is not None else "no gold mention with a suggestion yet")), **QUIET)
latest_task = next((t for t in reversed(tasks) if not math.isnan(agreements[t["id"]]["mean_pair_kappa"])), None)
row.metric("Annotator κ", num(agreements[latest_task["id"]]["mean_pair_kappa"]) if latest_task else "—",
           delta=latest_task["name"] if latest_task else "no gold task",
           help=(agreements[latest_task["id"]]["how"].get("kappa") if latest_task else None), **QUIET)

# ---------------------------------------------------------------- acceptance
head = st.columns([5, 1], vertical_alignment="bottom")
head[0].markdown("#### Acceptance of suggestions")
# by day while the history is short (a few weeks), by week after that
times = pd.to_datetime(dec["at"], utc=True)
span_days = (times.max() - times.min()).days if len(dec) else 0
period = head[1].selectbox("Period", ["day", "week"], index=int(span_days > 28), key="dash_period",
                           label_visibility="collapsed")
c = st.columns(2)
with c[0]:
    if acc.summary["n"]:
        over_time = dash.acceptance(dec, by=period)
        chart(dash.fig_acceptance(over_time), "fig_acceptance_time")
        st.caption(over_time.how)
    else:
        empty("No decision on a suggestion yet.")
with c[1]:
    if acc.summary["n"]:
        by_version = dash.acceptance(dec, by="model_version")
        fig = dash.fig_acceptance(by_version)
        fig.update_layout(title="Acceptance per model version")
        chart(fig, "fig_acceptance_version")
        st.caption(by_version.how)
    else:
        empty("Acceptance per model version appears with the first decisions.")


# ---------------------------------------------------------------- gold
def score_on_gold() -> None:
    """In the background (db.suggest_jobs): a lead scoring thousands of gold mentions keeps no one waiting."""
    with _ui.session() as s:
        todo = dashboard_data.unscored_gold(s, current_version, vocabulary_id, include_file_gold=file_gold)
    if not todo:
        return
    try:
        suggest_jobs.start_score(ctx.url, vocabulary_id, [m["mention_id"] for m in todo], by=ctx.username,
                                 title=f"score {current_version} on {len(todo)} gold mentions")
        _ui.flash("toast", f"Scoring {current_version} on {len(todo)} gold mentions in the background")
    except JobBusy as e:
        _ui.flash("error", f"Not started: {e}")


st.markdown("#### Accuracy on gold")
c = st.columns(2)
with c[0]:
    if accuracy is not None and len(accuracy.table):
        chart(dash.fig_model_accuracy(accuracy), "fig_model_accuracy")
        st.caption(accuracy.how + (" (mentions already taught to the engine left out)" if fresh_only else ""))
    else:
        empty(f"No fresh gold: {NO_GOLD} (coded before the engine suggested them, so answered from its memory, not "
              "by generalising). Turn off \"Leave out mentions already taught\" to see them." if all_taught else
              f"{file_gold_off:,} mentions were imported with their gold terms: turn on \"Also gold from imported "
              "files\" to measure the engine on them, or build gold on the Gold tasks page." if file_gold_off else
              "No gold mention with a stored suggestion yet: build gold on the Gold tasks page, then score the "
              "engine on it.")
    score_slot = st.empty()  # the button above the job panel, drawn once the panel has read the job
    scoring = _jobs.panel(JobRunner(), "dash_score_job", lock=suggest_jobs.lock(vocabulary_id))
    busy = scoring is not None and scoring["state"] not in FINAL  # a second press would only be refused
    if unscored:
        # the version in the help: in the label a long version name cut it in half column ("Score the curr…")
        score_slot.button(f"Score the current engine on {len(unscored)} gold mentions",
                          on_click=score_on_gold, key="dash_score", icon=":material/play_arrow:", disabled=busy,
                          help="A suggestion job of this vocabulary is running (below): score when it has ended."
                          if busy else f"The serving version, {current_version}, suggests for each gold mention "
                                       "in a background job; the chart then shows its accuracy.")
with c[1]:
    if accuracy is not None and len(accuracy.table):
        cols = [x for x in ("model_version", "n", "accuracy", "micro_f1", "count_accuracy", "recall_at_5")
                if x in accuracy.table.columns]
        st.dataframe(accuracy.table[cols], hide_index=True, width="stretch", column_config={
            "model_version": "model", "micro_f1": st.column_config.NumberColumn("micro-F1", format="%.3f"),
            "accuracy": st.column_config.NumberColumn("accuracy", format="%.3f", help=accuracy.how),
            "count_accuracy": st.column_config.NumberColumn("count right", format="%.3f",
                                                            help="share with the right number of terms"),
            "recall_at_5": st.column_config.NumberColumn("recall@5", format="%.3f",
                                                         help="gold terms among the top 5 ranked candidates")})
    if tasks:
        how_agree = next(iter(agreements.values())).get("how", {})
        st.dataframe([{"gold task": t["name"], "gold": t["n_gold"], "open": t["n_to_adjudicate"],
                       "exact": agreements[t["id"]]["exact_agreement"],
                       "Cohen κ": agreements[t["id"]]["mean_pair_kappa"],
                       "Fleiss κ": agreements[t["id"]]["fleiss_kappa"],
                       "Kripp. α": agreements[t["id"]]["krippendorff_alpha"]} for t in tasks],
                     hide_index=True, width="stretch", column_config={
                         "open": st.column_config.NumberColumn("open", help="disagreements not adjudicated yet"),
                         "exact": st.column_config.NumberColumn("exact", format="%.3f",
                                                                help=how_agree.get("exact_agreement")),
                         "Cohen κ": st.column_config.NumberColumn("Cohen κ", format="%.3f",
                                                                  help=how_agree.get("kappa")),
                         "Fleiss κ": st.column_config.NumberColumn("Fleiss κ", format="%.3f",
                                                                   help=how_agree.get("fleiss_kappa")),
                         "Kripp. α": st.column_config.NumberColumn("Kripp. α", format="%.3f",
                                                                   help=how_agree.get("krippendorff_alpha"))})
        st.caption("Annotator agreement per gold task (termnorm.agreement): each answer set is one category; "
                   "Cohen's κ is the mean over annotator pairs.")

# ---------------------------------------------------------------- errors
st.markdown("#### Where the engine errs")
against = st.radio("Errors against", ["coder decisions", "gold"], horizontal=True, key="dash_against",
                   help="coder decisions: the coder's final terms vs the engine's chosen set; gold: the gold terms "
                        "vs each model version's chosen set")
err_frame, expected = (dec, "terms") if against == "coder decisions" else (gold_frame, "gold_terms")
c = st.columns(2)
with c[0]:
    errs = dash.errors_by_chapter(err_frame, data.chapter_of, data.category_of, expected_col=expected) \
        if len(err_frame) else None
    if errs is not None and len(errs.table):
        chart(dash.fig_errors_treemap(errs), "fig_treemap")
        st.caption(errs.how)
    else:
        empty("No missed term yet.")
with c[1]:
    pairs = dash.confused_pairs(dec, top=12)
    if len(pairs.table):
        chart(dash.fig_confused_pairs(pairs), "fig_pairs")
        st.caption(pairs.how)
    else:
        empty("No correction of the engine's top term yet.")

c = st.columns(2)
with c[0]:
    counts = dash.count_confusion(dec, max_count=4)
    if counts.summary["n"]:
        chart(dash.fig_count_confusion(counts), "fig_counts")
        st.caption(f"{counts.how}. Right count {pct(counts.summary['count_accuracy'])}, too many "
                   f"{pct(counts.summary['over'])}, too few {pct(counts.summary['under'])}.")
    else:
        empty("No accepted or corrected mention yet.")
with c[1]:
    audits = dash.auto_audit(hist)
    if len(audits.table):
        chart(dash.fig_auto_audit(audits), "fig_audit")
        st.caption(audits.how)
    else:
        empty("No auto-coded mention has been re-checked by a coder yet (auto-coding: Auto-coding page; "
              "audits are later decisions on auto-coded mentions).")

# ---------------------------------------------------------------- the team
st.markdown("#### Coders")
speed = dash.coder_throughput(hist)
c = st.columns(2)
with c[0]:
    if len(speed.table):
        chart(dash.fig_throughput(speed), "fig_throughput")
    else:
        empty("No decision yet.")
with c[1]:
    if len(speed.table):
        st.dataframe(speed.table[["user", "n_decisions", "active_hours", "decisions_per_hour", "median_seconds"]],
                     hide_index=True, width="stretch", column_config={
                         "n_decisions": st.column_config.NumberColumn("decisions"),
                         "active_hours": st.column_config.NumberColumn("active h", format="%.2f"),
                         "decisions_per_hour": st.column_config.NumberColumn("per hour", format="%.1f"),
                         "median_seconds": st.column_config.NumberColumn("median s", format="%.0f",
                                                                         help="median seconds per mention")})
        st.caption(speed.how)

# ---------------------------------------------------------------- error examples
st.markdown("#### Error examples")
base = dash.error_examples(err_frame, expected_col=expected, chapter_of=data.chapter_of) if len(err_frame) else None
if base is None or not len(base.table):
    st.caption("No error to show.")
    st.stop()
t = base.table
ff = st.columns([1.2, 1.2, 1.6, 1.2, 1.6])
versions = ff[0].multiselect("Model version", sorted(t["model_version"].dropna().unique()), key="dash_f_version")
kinds = ff[1].multiselect("Kind", sorted(t["kind"].unique()), key="dash_f_kind")
chapters = ff[2].multiselect("Chapter", sorted(t["chapter"].unique()), key="dash_f_chapter")
users = ff[3].multiselect("Coder", sorted(t["user"].dropna().unique()) if "user" in t else [], key="dash_f_user")
contains = ff[4].text_input("Mention contains", key="dash_f_contains")
examples = dash.error_examples(err_frame, expected_col=expected, chapter_of=data.chapter_of,
                               model_version=versions or None, kind=kinds or None, chapter=chapters or None,
                               user=users or None, contains=contains or None)
st.dataframe(examples.table.head(ERROR_ROWS), hide_index=True, width="stretch")
st.caption(examples.how)
st.download_button("Download these errors (CSV)", examples.table.to_csv(index=False).encode("utf-8-sig"),
                   file_name="termnorm_errors.csv", mime="text/csv", icon=":material/download:",
                   key="dash_download")
