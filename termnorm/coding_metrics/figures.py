"""Plotly figures of the coding metrics: each takes the :class:`Numbers` of one measure and explains itself
(every trace's hover repeats its ``how`` line; ``layout.meta["how"]`` holds it too). Plotly is imported
when a figure is drawn, not with the package.
"""

from __future__ import annotations

from typing import Any, Sequence

import pandas as pd

from termnorm.coding_metrics.frames import PERIODS, TOP_K, Numbers


def _hover(fig, how: str, fields: str) -> Any:
    """Every trace's hover = its own values + the how line (so the chart explains itself)."""
    safe = how.replace("%", " percent").replace("{", "(").replace("}", ")")
    fig.update_traces(hovertemplate=fields + "<br><i>" + safe + "</i><extra></extra>")
    fig.update_layout(meta={"how": how})
    return fig


_SHARE_LABELS = {"top1": "accepted at top-1", "topk": "within top-k", "rejected_all": "rejected all"}


def fig_acceptance(numbers: Numbers):
    """Acceptance shares: lines over time (``by="day"/"week"``), grouped bars otherwise (e.g. per model version)."""
    import plotly.express as px

    t = numbers.table
    x = t.columns[0]
    k = numbers.summary.get("k", TOP_K)
    long = t.melt(id_vars=[x, "n"], value_vars=["top1", "topk", "rejected_all"], var_name="measure",
                  value_name="share")
    long["measure"] = long["measure"].map(_SHARE_LABELS).str.replace("top-k", f"top-{k}")
    if x in PERIODS:
        fig = px.line(long, x=x, y="share", color="measure", markers=True, custom_data=["n"])
        _period_axis(fig, t[x], x)
    else:
        fig = px.bar(long, x=x, y="share", color="measure", barmode="group", custom_data=["n"])
    fig.update_yaxes(range=[0, 1], tickformat=".0%")
    fig.update_layout(title="Acceptance of suggestions", legend_title_text="")
    return _hover(fig, numbers.how, "%{x}: %{y:.1%} of %{customdata[0]} decisions")


def _period_axis(fig, periods: pd.Series, period: str) -> None:
    """Date ticks of whole days / weeks, the axis padded by half a period: with one day of data Plotly's
    autorange otherwise zooms into that instant and labels its ticks in fractions of a millisecond."""
    step = pd.Timedelta(days=7 if period == "week" else 1)
    lo, hi = pd.to_datetime(periods.min()), pd.to_datetime(periods.max())
    fig.update_xaxes(type="date", range=[lo - step / 2, hi + step / 2], tickformat="%Y-%m-%d",
                     dtick=step.days * 86_400_000 if (hi - lo) / step <= 14 else None, title_text=period)


def fig_model_accuracy(numbers: Numbers, metrics: Sequence[str] = ("accuracy", "micro_f1")):
    """Grouped bars per model version: exact-set accuracy and micro-F1 (or other ``metrics`` columns)."""
    import plotly.express as px

    t = numbers.table
    x = t.columns[0]
    long = t.melt(id_vars=[x, "n"], value_vars=list(metrics), var_name="metric", value_name="value")
    fig = px.bar(long, x=x, y="value", color="metric", barmode="group", custom_data=["n"])
    fig.update_yaxes(range=[0, 1])
    fig.update_layout(title="Accuracy on gold per model version", legend_title_text="")
    return _hover(fig, numbers.how, "%{x}: %{y:.3f} on %{customdata[0]} mentions")


def fig_errors_treemap(numbers: Numbers):
    """Treemap chapter → category sized by the number of missed terms."""
    import plotly.express as px

    fig = px.treemap(numbers.table, path=[px.Constant("all"), "chapter", "category"], values="count", maxdepth=2)
    # chapters only at first (a click opens one): two levels of small boxes left no label readable
    # "missed", not "errors": a tile of one read "1 errors"; a tile too small for 10-point text hides its label (the
    # hover still names it)
    fig.update_traces(texttemplate="<b>%{label}</b><br>%{value} missed", textfont_size=15, root_color="#f3f4f6")
    fig.update_layout(title="Missed terms by vocabulary chapter (click a chapter for its categories)", height=460,
                      uniformtext={"minsize": 10, "mode": "hide"}, margin={"t": 50, "l": 5, "r": 5, "b": 5})
    return _hover(fig, numbers.how, "%{label}: %{value} missed")


def fig_confused_pairs(numbers: Numbers):
    """Horizontal bars: the most frequent (engine top term → coder term) pairs, most frequent on top."""
    import plotly.express as px

    t = numbers.table.assign(pair=lambda d: d["engine_term"] + " → " + d["coder_term"])
    fig = px.bar(t.iloc[::-1], x="count", y="pair", orientation="h")
    fig.update_layout(title="Most confused terms (engine → coder)", yaxis_title="")
    # counts: whole ticks (a user test read "0 0.5 1 1.5 2" squeezed together under counts of one and two)
    top = int(t["count"].max()) if len(t) else 1
    fig.update_xaxes(tickformat="d", rangemode="tozero", dtick=1 if top <= 10 else None, title_text="times")
    return _hover(fig, numbers.how, "%{y}: %{x} times")


def fig_count_confusion(numbers: Numbers):
    """Heatmap of predicted vs final number of terms (cells = decisions)."""
    import plotly.express as px

    t = numbers.table
    fig = px.imshow(t.to_numpy(), x=[str(c) for c in t.columns], y=[str(i) for i in t.index], text_auto=True,
                    labels={"x": "final count (coder)", "y": "predicted count (engine)", "color": "decisions"},
                    color_continuous_scale="Blues")
    fig.update_layout(title="Count prediction: predicted vs final")
    return _hover(fig, numbers.how, "predicted %{y}, final %{x}: %{z} decisions")


def fig_throughput(numbers: Numbers):
    """Bars per coder: decisions per active hour (hover: median seconds per mention)."""
    import plotly.express as px

    fig = px.bar(numbers.table, x="user", y="decisions_per_hour", custom_data=["n_decisions", "median_seconds"])
    fig.update_layout(title="Coder throughput", yaxis_title="decisions per active hour")
    return _hover(fig, numbers.how, "%{x}: %{y:.1f}/h over %{customdata[0]} decisions, "
                                    "median %{customdata[1]:.0f} s per mention")


def fig_auto_audit(numbers: Numbers):
    """Bars of the confirmed share per group with Wilson interval error bars."""
    import plotly.express as px

    t = numbers.table.copy()
    x = t.columns[0]
    t["plus"], t["minus"] = t["ci_high"] - t["share"], t["share"] - t["ci_low"]
    fig = px.bar(t, x=x, y="share", error_y="plus", error_y_minus="minus",
                 custom_data=["n_confirmed", "n_audited", "ci_low", "ci_high"])
    fig.update_yaxes(range=[0, 1], tickformat=".0%")
    fig.update_layout(title="Audits of auto-coded mentions", yaxis_title="confirmed")
    return _hover(fig, numbers.how, "%{x}: %{customdata[0]} of %{customdata[1]} confirmed, "
                                    "CI %{customdata[2]:.1%}–%{customdata[3]:.1%}")


def fig_error_examples(numbers: Numbers):
    """The error examples as a Plotly table (the page may prefer ``st.dataframe(numbers.table)``)."""
    import plotly.graph_objects as go

    t = numbers.table.astype(str)
    fig = go.Figure(go.Table(header={"values": list(t.columns)}, cells={"values": [t[c] for c in t.columns]}))
    fig.update_layout(title="Error examples", meta={"how": numbers.how})
    return fig
