"""The coders' side: throughput (decisions per active hour) and audits of auto-coded mentions.

Frames as in the package docstring (termnorm.coding_metrics); the measures return :class:`Numbers`.
"""

from __future__ import annotations

import pandas as pd

from termnorm.agreement import set_label
from termnorm.coding_metrics.frames import (
    ANSWER_ACTIONS,
    CONFIDENCE,
    HUMAN_ACTIONS,
    IDLE_GAP_MINUTES,
    Numbers,
    _group_key,
    _need,
    _ranked,
    _times,
)


def coder_throughput(decisions: pd.DataFrame, idle_gap_minutes: float = IDLE_GAP_MINUTES) -> Numbers:
    """Per coder: decisions, active hours, decisions per active hour, median seconds per mention.

    Coder decisions (every action but ``auto``) are ordered by ``at``; a gap
    over ``idle_gap_minutes`` starts a new session. Active time = Σ over
    sessions of (last − first decision time + the first decision's
    ``seconds``), so a one-decision session still counts its own time.
    Median seconds = median of ``seconds`` > 0 (time measured by the page).

    Table: ``user``, ``n_decisions``, ``n_sessions``, ``active_hours``,
    ``decisions_per_hour``, ``median_seconds``; sorted by user.
    """
    _need(decisions, ("user", "at", "seconds"), "decisions")
    d = decisions[decisions["action"].isin(HUMAN_ACTIONS)] if "action" in decisions.columns else decisions
    d = d.assign(_t=_times(d), _s=pd.to_numeric(d["seconds"], errors="coerce").fillna(0.0)).sort_values(["user", "_t"])
    rows = []
    gap = pd.Timedelta(minutes=idle_gap_minutes)
    for user, g in d.groupby("user", sort=True):
        t = g["_t"]
        new_session = t.diff().isna() | (t.diff() > gap)
        session = new_session.cumsum()
        spans = g.groupby(session).agg(first=("_t", "min"), last=("_t", "max"), s0=("_s", "first"))
        active_s = float(((spans["last"] - spans["first"]).dt.total_seconds() + spans["s0"]).sum())
        timed = g.loc[g["_s"] > 0, "_s"]
        rows.append({"user": user, "n_decisions": len(g), "n_sessions": len(spans),
                     "active_hours": active_s / 3600.0,
                     "decisions_per_hour": len(g) / (active_s / 3600.0) if active_s > 0 else float("nan"),
                     "median_seconds": float(timed.median()) if len(timed) else float("nan")})
    table = pd.DataFrame(rows, columns=["user", "n_decisions", "n_sessions", "active_hours", "decisions_per_hour",
                                        "median_seconds"])
    how = (f"Decisions per active hour: a pause over {idle_gap_minutes:g} min ends a session; active time = "
           f"each session's span + its first decision's seconds. Median seconds per mention as timed by the page")
    return Numbers(table, how, {"n_decisions": int(table["n_decisions"].sum()) if len(table) else 0})


# ---------------------------------------------------------------- audits of auto-coded mentions

def wilson_interval(successes: int, n: int, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Wilson score interval for a proportion (no continuity correction), via ``scipy.stats.binomtest``.

    (p + z²/2n ± z·sqrt(p(1−p)/n + z²/4n²)) / (1 + z²/n); (nan, nan) when n = 0.
    """
    if n == 0:
        return float("nan"), float("nan")
    from scipy.stats import binomtest

    ci = binomtest(int(successes), int(n)).proportion_ci(confidence_level=confidence, method="wilson")
    return float(ci.low), float(ci.high)


def audit_outcomes(history: pd.DataFrame) -> pd.DataFrame:
    """One row per audited auto-coded mention.

    Columns: ``mention_id``, ``model_version``, ``auto_terms``, ``audit_terms``, ``confirmed``.

    ``history``: every decision (``decisions_frame(s, history=True)``) with
    ``mention_id``, ``action``, ``terms``, ``at`` (ties broken by
    ``decision_id`` if present). The audit of a mention is the first
    accept / correct / reject decision after its first ``auto`` decision;
    confirmed = the audit's set equals the auto-coded set.
    """
    _need(history, ("mention_id", "action", "terms", "at"), "decision history")
    order = ["_t", "decision_id"] if "decision_id" in history.columns else ["_t"]
    h = history.assign(_t=_times(history)).sort_values(order, kind="stable")
    rows = []
    for m, g in h.groupby("mention_id", sort=False):
        actions = g["action"].tolist()
        if "auto" not in actions:
            continue
        i = actions.index("auto")
        later = [j for j in range(i + 1, len(actions)) if actions[j] in ANSWER_ACTIONS]
        if not later:
            continue
        auto, audit = g.iloc[i], g.iloc[later[0]]
        a, b = frozenset(_ranked(auto["terms"])), frozenset(_ranked(audit["terms"]))
        rows.append({"mention_id": m, "model_version": auto.get("model_version"), "auto_terms": set_label(a),
                     "audit_terms": set_label(b), "confirmed": a == b})
    return pd.DataFrame(rows, columns=["mention_id", "model_version", "auto_terms", "audit_terms", "confirmed"])


def auto_audit(history: pd.DataFrame, by: str | None = "model_version", confidence: float = CONFIDENCE) -> Numbers:
    """Share of audited auto-coded mentions that the auditor confirmed, with a Wilson interval.

    ``history`` is either the decision history (see :func:`audit_outcomes`) or
    an outcomes frame that already has a boolean ``confirmed`` column.
    ``by``: a column of the outcomes (default the auto-coding model version)
    or None. Table: the group, ``n_audited``, ``n_confirmed``, ``share``,
    ``ci_low``, ``ci_high``. Summary: the same over all audits.
    """
    out = history if "confirmed" in history.columns else audit_outcomes(history)
    name, key = _group_key(out, by) if len(out) else (by or "group", pd.Series(dtype=object))
    rows = []
    for group, g in out.groupby(key, sort=True):
        n, k = len(g), int(g["confirmed"].sum())
        lo, hi = wilson_interval(k, n, confidence)
        rows.append({name: group, "n_audited": n, "n_confirmed": k, "share": k / n, "ci_low": lo, "ci_high": hi})
    table = pd.DataFrame(rows, columns=[name, "n_audited", "n_confirmed", "share", "ci_low", "ci_high"])
    n, k = len(out), int(out["confirmed"].sum()) if len(out) else 0
    lo, hi = wilson_interval(k, n, confidence)
    summary = {"n_audited": n, "n_confirmed": k, "share": k / n if n else float("nan"), "ci_low": lo, "ci_high": hi}
    how = (f"{n} auto-coded mentions re-decided by a coder; confirmed = the coder kept exactly the auto-coded terms; "
           f"{confidence:.0%} Wilson score interval")
    return Numbers(table, how, summary)
