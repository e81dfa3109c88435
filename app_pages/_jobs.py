"""A background job on a page: the latest job of a kind with its progress, rate, ETA, cancel and result.

Everything shown is read from the job's folder (termnorm.jobs), so the panel
survives page reloads and shows a job started from another browser. While
the job runs, only the panel redraws, every :data:`POLL_S` seconds
(``st.fragment(run_every=...)``); when it ends, the whole page redraws once,
so buttons and counts that depend on it are current.
"""

from __future__ import annotations

import calendar
import time

import streamlit as st

from termnorm.jobs import FINAL, JobRunner
from app_pages._markup import model_label

#: Seconds between two reads of a running job's status (one small JSON file).
POLL_S = 1.5


def panel(runner: JobRunner, key: str, *, can_cancel: bool = True, empty: str = "", result=None,
          **filters) -> dict | None:
    """Show the latest job matching ``filters`` (``kind=``, ``vocabulary_id=``, ``lock=``; see
    ``JobRunner.jobs``); ``result(job)`` draws a finished job's outcome. Returns the job's status."""
    job = runner.latest(**filters)
    if job is None:
        if empty:
            st.caption(empty)
        return None
    if job["state"] in FINAL:
        draw(runner, job, key, can_cancel, result)
    else:
        _live(str(runner.root), key, can_cancel, result, filters)
    return job


@st.fragment(run_every=POLL_S)
def _live(root: str, key: str, can_cancel: bool, result, filters: dict) -> None:
    runner = JobRunner(root)
    job = runner.latest(**filters)
    if job is None or job["state"] in FINAL:
        st.rerun(scope="app")  # it ended while we polled: redraw the page (buttons, counts), this time still
    draw(runner, job, key, can_cancel, result)


def draw(runner: JobRunner, job: dict, key: str, can_cancel: bool = True, result=None) -> None:
    """One job's status: the bar, done / total, rate, ETA, the cancel button, the outcome, the log."""
    state, m = job["state"], job.get("metrics") or {}
    st.progress(float(job.get("progress") or 0.0),
                text=" · ".join([f"**{job.get('title', '')}**", state]
                                + [job["message"]] * bool(job.get("message") and job["message"] != state)))
    if m.get("total") is not None:
        # a row that wraps where the figures would not fit: four columns cut them short in a half-page panel
        row = st.container(horizontal=True, wrap=True, gap="small")
        row.metric("Done", f"{m.get('done', 0):,} / {m['total']:,}", width="stretch")
        row.metric("Rate", f"{m['rate']:,.0f} /s" if m.get("rate") else "–", width="stretch")
        row.metric("Time left", eta_text(m.get("eta_s")) if state not in FINAL else "–", width="stretch")
        row.metric("Running for" if state not in FINAL else "Took", eta_text(elapsed(job)), width="stretch")
    if state not in FINAL:
        if can_cancel:
            st.button("Cancel", key=f"{key}_cancel", on_click=runner.cancel, args=(job["id"],),
                      help="Stops the job; what it stored is kept, and starting it again goes on from there.")
    elif result is not None:
        result(job)
    else:
        outcome(job)
    with st.expander("Job log"):
        st.code(runner.log(job["id"], tail=60) or "(empty)", language=None)


def outcome(job: dict) -> None:
    """The generic outcome of a finished job: the error, or a line saying it was cancelled or is done."""
    if job["state"] == "failed":
        st.error(f"Failed: {job.get('error') or job.get('message')}")
    elif job["state"] == "cancelled":
        st.info("Cancelled.")
    else:
        st.success(f"Done ({job.get('finished', '')}).")


def suggestion_outcome(job: dict) -> None:
    """The outcome of a db.suggest_jobs job: how many suggestions, with which model; a cancel is resumable."""
    m = job.get("metrics") or {}
    if job["state"] == "done":
        st.success(f"{m.get('stored', 0):,} suggestion(s) stored with "
                   f"**{model_label(m.get('model_version'), html=False)}** "
                   f"({m.get('done', 0):,} mention(s) suggested"
                   + (f", {m['rate']:,.0f} per second" if m.get("rate") else "") + ").")
    elif job["state"] == "cancelled":
        st.info(f"Cancelled after {m.get('done', 0):,} of {m.get('total', 0):,} mentions: the suggestions "
                "stored are kept, and starting again suggests only the rest.")
    else:
        outcome(job)


def elapsed(job: dict) -> float | None:
    """Seconds the job ran (until now while it runs)."""
    start = _seconds(job.get("started"))
    if start is None:
        return None
    end = _seconds(job.get("finished")) if job["state"] in FINAL else None
    return max(0.0, (end or time.time()) - start)


def eta_text(seconds) -> str:
    if seconds is None:
        return "–"
    h, rest = divmod(int(round(seconds)), 3600)
    m, s = divmod(rest, 60)
    return f"{h} h {m:02d} min" if h else f"{m} min {s:02d} s" if m else f"{s} s"


def _seconds(stamp: str | None) -> float | None:
    try:
        return float(calendar.timegm(time.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ"))) if stamp else None
    except ValueError:
        return None
