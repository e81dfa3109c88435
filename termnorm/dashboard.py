"""The lead's dashboard numbers: pure functions over tidy DataFrames, plus Plotly figure builders.

No database and no Streamlit here: the DB helper turns the tables
suggestions / decisions / gold into the frames described below (the
decisions frame is ``db.services.decisions_frame`` plus a ``shown`` column),
the pages call these functions and show ``Numbers.table`` with
``Numbers.how`` as caption, or a ``fig_*`` figure whose hover repeats it.

They measure the engine the methods describe (recall → rank → fuse with a
count decision, approaches A..E of methods.md) as coders meet it: how often
its chosen set is taken as is (top-1), how often the answer was among the
shown candidates (top-k), exact-set accuracy and micro-F1 on gold (the
Yidu-N7K and CHIP-CDN metrics, via :mod:`termnorm.evaluate`), where errors
fall in the vocabulary, which terms get confused, how well the count head
predicts the number of terms, coder throughput, and audits of auto-coded
mentions.

The decisions frame (one row per decision; lists may also be ``##`` strings)::

    column         | type            | meaning
    ---------------+-----------------+---------------------------------------------------
    mention_id     | int             | the mention decided
    mention        | str             | its text (error examples only)
    action         | str             | accept / correct / reject / skip / flag / auto
    terms          | list[str]       | the coder's final terms ([] for reject / skip)
    suggested      | list[str]       | the engine's chosen set in the suggestion answered
    shown          | list[str]       | ranked candidate names shown, best first
                   |                 | (optional: falls back to ``suggested``)
    predicted_count| int             | the engine's predicted count (optional: len(suggested))
    model_version  | str             | model version of the suggestion answered
    user           | str             | coder
    at             | datetime        | when decided (UTC; naive values are read as UTC)
    seconds        | float           | time the coder spent on the mention (0 = unknown)
    gold_terms     | list[str]       | gold terms when the mention is in a gold set

Only ``accept`` / ``correct`` / ``reject`` decisions say something about the
suggestion (:data:`ANSWER_ACTIONS`); skip and flag do not, ``auto`` is the
engine itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

import numpy as np
import pandas as pd

from termnorm.agreement import SEPARATOR, is_missing, set_label
from termnorm.errors import DataFormatError
from termnorm.evaluate import error_kind, evaluate_predictions

ANSWER_ACTIONS = ("accept", "correct", "reject")  # decisions that judge the suggestion's terms
HUMAN_ACTIONS = ("accept", "correct", "reject", "skip", "flag")  # every coder action (not "auto")

# Candidates a coder sees at once: the coding page lists the top 5 (db.services.SHOWN_CANDIDATES's default
# screen), so "within top-5" = the answer needed no search.
TOP_K = 5

# A gap longer than this between two decisions of a coder ends a working session: the usual web-analytics
# session timeout (30 min of inactivity). Median time per mention in the demo runs is well under a minute,
# so a 30-minute gap is a break, not a hard mention.
IDLE_GAP_MINUTES = 30.0

# Two-sided 95 % Wilson score interval for audit shares (z = 1.96).
CONFIDENCE = 0.95

PERIODS = ("day", "week")


@dataclass
class Numbers:
    """What every dashboard function returns.

    ``table``: the numbers, tidy (one row per group); ``how``: one line on how
    they were computed (the UI's caption / hover); ``summary``: headline
    scalars over everything (e.g. the overall share).
    """

    table: pd.DataFrame
    how: str
    summary: dict[str, Any] = field(default_factory=dict)


# ---------------------------------------------------------------- frame helpers

def _need(df: pd.DataFrame, columns: Iterable[str], source: str) -> None:
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise DataFormatError(source, None, f"missing column(s) {', '.join(missing)}")


def _ranked(value: Any, source: str = "frame", row: int | None = None) -> list[str]:
    """A list of names in order (duplicates dropped), from a list or a '##' string; missing -> []."""
    if value is None or (not isinstance(value, (list, tuple, np.ndarray, pd.Series, set, frozenset))
                         and is_missing(value)):
        return []
    if isinstance(value, str):
        parts = value.split(SEPARATOR)
    elif isinstance(value, (list, tuple, np.ndarray, pd.Series)):
        parts = list(value)
    elif isinstance(value, (set, frozenset)):
        parts = sorted(value)
    else:
        raise DataFormatError(source, row, f"expected a list of terms or a '##' string, got {type(value).__name__}")
    out: dict[str, None] = {}
    for p in parts:
        p = getattr(p, "term", p)  # Candidate objects are accepted too
        if not isinstance(p, str):
            raise DataFormatError(source, row, f"a term must be a string, got {type(p).__name__}: {p!r}")
        p = p.strip()
        if p:
            out.setdefault(p, None)
    return list(out)


def _lists(df: pd.DataFrame, col: str, source: str) -> list[list[str]]:
    return [_ranked(v, source, i) for i, v in enumerate(df[col], start=1)]


def _times(df: pd.DataFrame, col: str = "at") -> pd.Series:
    """UTC timestamps without tz (so day / week boundaries are UTC days and Monday-start weeks)."""
    return pd.to_datetime(df[col], utc=True).dt.tz_localize(None)


def _group_key(df: pd.DataFrame, by: str | None) -> tuple[str, pd.Series]:
    if by is None:
        return "group", pd.Series("all", index=df.index)
    if by == "day":
        return "day", _times(df).dt.normalize()
    if by == "week":
        day = _times(df).dt.normalize()
        return "week", day - pd.to_timedelta(day.dt.day_of_week, unit="D")
    if by not in df.columns:
        raise DataFormatError("decisions", None, f"cannot group by {by!r}: no such column")
    return by, df[by].fillna("(none)")


def _answers(decisions: pd.DataFrame) -> pd.DataFrame:
    if "action" in decisions.columns:
        return decisions[decisions["action"].isin(ANSWER_ACTIONS)]
    return decisions


# ---------------------------------------------------------------- acceptance of suggestions

def acceptance_flags(decisions: pd.DataFrame, k: int = TOP_K) -> pd.DataFrame:
    """Per answer decision: ``top1``, ``topk``, ``rejected_all`` booleans (see :func:`acceptance`).

    Returns the answer rows (accept / correct / reject with a suggestion)
    with the three flags added.
    """
    _need(decisions, ("terms", "suggested"), "decisions")
    d = _answers(decisions).copy()
    final = [frozenset(x) for x in _lists(d, "terms", "decisions")]
    chosen = _lists(d, "suggested", "decisions")
    shown = _lists(d, "shown", "decisions") if "shown" in d.columns else [list(c) for c in chosen]
    shown = [s if s else c for s, c in zip(shown, chosen)]
    has = [bool(s) or bool(c) for s, c in zip(shown, chosen)]  # no suggestion answered: nothing to judge
    # top-1: the coder kept exactly the engine's chosen set (or, with no chosen set, its top candidate)
    d["top1"] = [bool(f) and f == (frozenset(c) if c else frozenset(s[:1])) for f, c, s in zip(final, chosen, shown)]
    d["topk"] = [bool(f) and f <= frozenset(s[:k]) for f, s in zip(final, shown)]
    d["rejected_all"] = [not (f & frozenset(s)) for f, s in zip(final, shown)]
    return d.loc[np.asarray(has, dtype=bool)]


def acceptance(decisions: pd.DataFrame, by: str | None = None, k: int = TOP_K) -> Numbers:
    """Share of suggestions accepted at top-1, within top-``k``, or all rejected; overall or by group.

    ``by``: None (overall), ``"day"`` / ``"week"`` (UTC, weeks start on
    Monday, from ``at``) or a column such as ``"model_version"`` or ``"user"``.

    Over the accept / correct / reject decisions answering a suggestion:

    * top-1 = the final set equals the engine's chosen set (``suggested``; if
      empty, the top shown candidate);
    * top-k = the final set is non-empty and every final term is among the
      top ``k`` shown candidates;
    * rejected all = no final term is among the shown candidates (a
      ``reject`` counts here).

    Table columns: the group, ``n``, ``n_top1``, ``n_topk``, ``n_rejected``,
    ``top1``, ``topk``, ``rejected_all`` (shares of ``n``).
    """
    flags = acceptance_flags(decisions, k)
    name, key = _group_key(flags, by)
    g = pd.DataFrame({name: key, "top1": flags["top1"], "topk": flags["topk"],
                      "rejected_all": flags["rejected_all"]}).groupby(name, sort=True)
    table = pd.DataFrame({"n": g.size(), "n_top1": g["top1"].sum(), "n_topk": g["topk"].sum(),
                          "n_rejected": g["rejected_all"].sum()}).reset_index()
    for share, count in (("top1", "n_top1"), ("topk", "n_topk"), ("rejected_all", "n_rejected")):
        table[share] = table[count] / table["n"]
    n = len(flags)
    summary = {"n": n, **{c: float(flags[c].mean()) if n else float("nan") for c in ("top1", "topk", "rejected_all")},
               "k": k}
    source = "shown candidates" if "shown" in decisions.columns else "engine's chosen terms (no shown list)"
    how = (f"Over {n} accept/correct/reject decisions{' per ' + name if by else ''}: top-1 = final set equals the "
           f"engine's chosen set; top-{k} = every final term among the top {k} {source}; "
           f"rejected = no final term among the {source}")
    return Numbers(table, how, summary)


# ---------------------------------------------------------------- accuracy on gold

def model_accuracy(frame: pd.DataFrame, gold_col: str = "gold_terms", predicted_col: str = "suggested",
                   ranked_col: str | None = None, count_col: str | None = None,
                   by: str = "model_version") -> Numbers:
    """Exact-set accuracy and micro-F1 of each model version on gold mentions.

    ``frame``: one row per (model version, gold mention) with ``gold_col``
    (gold terms; rows with none are skipped), ``predicted_col`` (the engine's
    chosen set), optional ``ranked_col`` (ranked candidates: adds Recall@k,
    NDCG@5) and ``count_col`` (predicted count), and ``by``. The decisions
    frame works as is (``gold_terms`` vs ``suggested``).

    Metrics from :func:`termnorm.evaluate.evaluate_predictions`: accuracy =
    share of mentions whose predicted set equals the gold set (Yidu-N7K),
    micro P/R/F1 over (mention, term) pairs (CHIP-CDN). Table: ``by``, ``n``,
    ``accuracy``, ``micro_precision``, ``micro_recall``, ``micro_f1``,
    ``count_accuracy`` (+ ranked metrics when ``ranked_col`` is given).
    """
    _need(frame, [gold_col, predicted_col, by], "gold predictions")
    gold_all = _lists(frame, gold_col, "gold predictions")
    keep = np.array([bool(g) for g in gold_all], dtype=bool)
    f = frame[keep]
    gold = [g for g, k in zip(gold_all, keep) if k]
    pred = _lists(f, predicted_col, "gold predictions")
    ranked = _lists(f, ranked_col, "gold predictions") if ranked_col else None
    counts = [int(c) for c in f[count_col]] if count_col else None
    rows = []
    for version, idx in f.groupby(f[by].fillna("(none)"), sort=True).indices.items():
        res = evaluate_predictions([gold[i] for i in idx], [pred[i] for i in idx],
                                   [ranked[i] for i in idx] if ranked is not None else None,
                                   [counts[i] for i in idx] if counts is not None else None)
        rows.append({by: version, **res})
    cols = [by, "n", "accuracy", "micro_precision", "micro_recall", "micro_f1", "count_accuracy"]
    table = pd.DataFrame(rows)
    table = table[[c for c in cols if c in table.columns] + [c for c in table.columns if c not in cols]] \
        if rows else pd.DataFrame(columns=cols)
    if len(table):
        table["n"] = table["n"].astype(int)
    how = (f"Per {by}, on {len(gold)} mentions with gold terms: accuracy = share whose predicted set equals the gold "
           f"set; micro-F1 over (mention, term) pairs")
    best = table.sort_values("accuracy", ascending=False).iloc[0][by] if len(table) else None
    return Numbers(table, how, {"n": len(gold), "best": best})


# ---------------------------------------------------------------- errors by vocabulary part

def vocabulary_levels(vocab) -> tuple[Callable[[str], str], Callable[[str], str]]:
    """``(chapter_of, category_of)`` for :func:`errors_by_chapter` from a :class:`~termnorm.vocabulary.Vocabulary`.

    Chapter = ``vocab.chapter(name)`` (top ancestor of the first code, else its
    head); category = the ancestor just below the chapter (ICD 类目), else the
    code itself. Labels read "code name" when the code has a name; "?" for
    terms without a code.
    """

    def label(code: str) -> str:
        n = vocab.code_names.get(code)
        return f"{code} {n}" if n and n != code else code

    def chapter_of(name: str) -> str:
        c = vocab.chapter(name)
        return c if c == "?" else label(c)

    def category_of(name: str) -> str:
        codes = vocab.codes_of(name)
        if not codes:
            return "?"
        chain = [codes[0], *vocab.ancestors(codes[0])]  # nearest first, chapter last
        return label(chain[-2] if len(chain) >= 2 else chain[0])

    return chapter_of, category_of


def error_terms(frame: pd.DataFrame, expected_col: str = "terms", predicted_col: str = "suggested") -> pd.DataFrame:
    """One row per missed expected term: ``mention_id`` (if present), ``term``, ``predicted`` (## joined).

    A missed term is an expected (coder's / gold) term that the engine's set
    did not contain, on answer decisions whose sets differ.
    """
    _need(frame, [expected_col, predicted_col], "errors")
    f = _answers(frame)
    exp = _lists(f, expected_col, "errors")
    pred = _lists(f, predicted_col, "errors")
    ids = f["mention_id"].tolist() if "mention_id" in f.columns else list(range(len(f)))
    rows = [{"mention_id": m, "term": t, "predicted": SEPARATOR.join(p)}
            for m, e, p in zip(ids, exp, pred) for t in e if t not in set(p)]
    return pd.DataFrame(rows, columns=["mention_id", "term", "predicted"])


def errors_by_chapter(frame: pd.DataFrame, chapter_of: Callable[[str], str],
                      category_of: Callable[[str], str] | None = None, expected_col: str = "terms",
                      predicted_col: str = "suggested") -> Numbers:
    """Missed terms counted by vocabulary chapter → category (for a treemap).

    Each expected term (``expected_col``: the coder's final terms, or
    ``gold_terms``) absent from the engine's set (``predicted_col``) is one
    error, attributed to the part of the vocabulary the right answer lives
    in -- where the engine is weak. ``chapter_of`` / ``category_of`` map a
    term name to a label (see :func:`vocabulary_levels`); without
    ``category_of`` the term itself is the leaf.

    Table: ``chapter``, ``category``, ``count``, sorted by count descending.
    """
    missed = error_terms(frame, expected_col, predicted_col)
    category_of = category_of or (lambda t: t)
    # one call per distinct term, not per error
    terms = missed["term"].unique().tolist()
    chap = {t: str(chapter_of(t)) for t in terms}
    cat = {t: str(category_of(t)) for t in terms}
    t = pd.DataFrame({"chapter": missed["term"].map(chap), "category": missed["term"].map(cat)})
    table = (t.groupby(["chapter", "category"]).size().rename("count").reset_index()
             .sort_values(["count", "chapter", "category"], ascending=[False, True, True]).reset_index(drop=True))
    n_mentions = missed["mention_id"].nunique()
    how = (f"{len(missed)} {expected_col} terms missing from the engine's set ({predicted_col}) in {n_mentions} "
           f"mentions, counted by the chapter and category of the missed term")
    return Numbers(table, how, {"n_errors": len(missed), "n_mentions": int(n_mentions)})


# ---------------------------------------------------------------- confused term pairs

def confused_pairs(decisions: pd.DataFrame, top: int | None = 20) -> Numbers:
    """The (engine's top term → coder's term) pairs most often seen when the coder overrode the engine.

    For each accept / correct decision whose final set does not contain the
    engine's top term (first of ``suggested``, else of ``shown``), every
    final term makes one pair (top term, final term). Table: ``engine_term``,
    ``coder_term``, ``count`` (descending), at most ``top`` rows.
    """
    _need(decisions, ("terms", "suggested"), "decisions")
    d = _answers(decisions)
    final = _lists(d, "terms", "decisions")
    chosen = _lists(d, "suggested", "decisions")
    shown = _lists(d, "shown", "decisions") if "shown" in d.columns else [[] for _ in chosen]
    pairs = []
    for f, c, s in zip(final, chosen, shown):
        head = (c or s or [None])[0]
        if head is None or not f or head in f:
            continue
        pairs.extend((head, t) for t in f)
    table = pd.DataFrame(pairs, columns=["engine_term", "coder_term"])
    table = (table.groupby(["engine_term", "coder_term"]).size().rename("count").reset_index()
             .sort_values(["count", "engine_term", "coder_term"], ascending=[False, True, True])
             .reset_index(drop=True))
    n_total = int(table["count"].sum())
    if top is not None:
        table = table.head(top)
    how = ("Accept/correct decisions whose final terms leave out the engine's top term: one count per "
           "(engine top term, coder term) pair")
    return Numbers(table, how, {"n_pairs": n_total, "n_distinct": len(table)})


# ---------------------------------------------------------------- count prediction

def count_confusion(decisions: pd.DataFrame, max_count: int | None = None) -> Numbers:
    """Predicted number of terms vs the coder's final number (confusion matrix).

    Over accept / correct decisions (final set non-empty): predicted =
    ``predicted_count`` if the column exists, else the size of ``suggested``.
    Counts above ``max_count`` are pooled into ``max_count`` (None: no
    pooling). Table: square matrix, index ``predicted`` count, columns
    ``final`` count. Summary: ``n``, ``count_accuracy`` (diagonal share),
    ``over`` / ``under`` (predicted more / fewer than final).
    """
    _need(decisions, ("terms",), "decisions")
    d = _answers(decisions)
    final = np.array([len(x) for x in _lists(d, "terms", "decisions")], dtype=int)
    if "predicted_count" in d.columns:
        pred = pd.to_numeric(d["predicted_count"], errors="coerce").fillna(0).astype(int).to_numpy()
    else:
        _need(d, ("suggested",), "decisions")
        pred = np.array([len(x) for x in _lists(d, "suggested", "decisions")], dtype=int)
    keep = final > 0
    final, pred = final[keep], pred[keep]
    if max_count is not None:
        final, pred = np.minimum(final, max_count), np.minimum(pred, max_count)
    values = sorted(set(final) | set(pred)) or [1]
    levels = list(range(min(values), max(values) + 1))
    table = (pd.crosstab(pd.Series(pred, name="predicted"), pd.Series(final, name="final"))
             .reindex(index=levels, columns=levels, fill_value=0))
    n = int(len(final))
    summary = {"n": n,
               "count_accuracy": float(np.mean(pred == final)) if n else float("nan"),
               "over": float(np.mean(pred > final)) if n else float("nan"),
               "under": float(np.mean(pred < final)) if n else float("nan")}
    src = "predicted_count" if "predicted_count" in d.columns else "size of the engine's chosen set"
    how = (f"{n} accept/correct decisions: rows = engine's predicted number of terms ({src}), columns = number of "
           f"terms the coder kept" + (f"; counts ≥ {max_count} pooled" if max_count is not None else ""))
    return Numbers(table, how, summary)


# ---------------------------------------------------------------- coder throughput

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


# ---------------------------------------------------------------- error examples

def error_examples(frame: pd.DataFrame, *, expected_col: str = "terms", predicted_col: str = "suggested",
                   model_version: str | Sequence[str] | None = None, user: str | Sequence[str] | None = None,
                   kind: str | Sequence[str] | None = None, chapter: str | Sequence[str] | None = None,
                   chapter_of: Callable[[str], str] | None = None, contains: str | None = None,
                   include_correct: bool = False, limit: int | None = None) -> Numbers:
    """A filterable table of the engine's errors (answer decisions, or gold rows with ``expected_col="gold_terms"``).

    Each row gets ``kind`` from :func:`termnorm.evaluate.error_kind` (wrong
    term, missing term, extra term, wrong count; ``correct`` rows only with
    ``include_correct``) and, with ``chapter_of``, the ``chapter`` of its
    first expected term. Filters (a value or a list of values):
    ``model_version``, ``user``, ``kind``, ``chapter``; ``contains`` keeps
    mentions whose text contains it. Columns: ``mention_id``, ``mention``,
    ``expected``, ``predicted`` (``##`` joined), ``kind``, ``chapter``,
    ``model_version``, ``user``, ``at`` (those present). Newest first if
    ``at`` is present.
    """
    _need(frame, [expected_col, predicted_col], "errors")
    f = _answers(frame).copy()
    exp = _lists(f, expected_col, "errors")
    pred = _lists(f, predicted_col, "errors")
    f["expected"] = [SEPARATOR.join(e) for e in exp]
    f["predicted"] = [SEPARATOR.join(p) for p in pred]
    f["kind"] = [error_kind(e, p) for e, p in zip(exp, pred)]
    if chapter_of is not None:
        f["chapter"] = [str(chapter_of(e[0])) if e else "?" for e in exp]
    n_total = int((f["kind"] != "correct").sum())
    if not include_correct:
        f = f[f["kind"] != "correct"]

    def pick(col: str, value):
        nonlocal f
        if value is None or col not in f.columns:
            return
        values = [value] if isinstance(value, str) else list(value)
        f = f[f[col].isin(values)]

    pick("model_version", model_version)
    pick("user", user)
    pick("kind", kind)
    pick("chapter", chapter)
    if contains and "mention" in f.columns:
        f = f[f["mention"].astype(str).str.contains(contains, regex=False)]
    if "at" in f.columns:
        f = f.assign(_t=_times(f)).sort_values("_t", ascending=False, kind="stable")
    if limit is not None:
        f = f.head(limit)
    cols = [c for c in ("mention_id", "mention", "expected", "predicted", "kind", "chapter", "model_version", "user",
                        "at") if c in f.columns]
    filters = {k: v for k, v in dict(model_version=model_version, user=user, kind=kind, chapter=chapter,
                                     contains=contains).items() if v is not None}
    how = (f"{expected_col} vs the engine's {predicted_col} on accept/correct/reject decisions; kind = how the sets "
           f"differ; {len(f)} of {n_total} errors shown" + (f" (filters: {filters})" if filters else ""))
    return Numbers(f[cols].reset_index(drop=True), how, {"n_errors": n_total, "n_shown": len(f)})


# ---------------------------------------------------------------- figures

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
    fig.update_traces(texttemplate="<b>%{label}</b><br>%{value} errors", textfont_size=15, root_color="#f3f4f6")
    fig.update_layout(title="Missed terms by vocabulary chapter (click a chapter for its categories)", height=460,
                      uniformtext={"minsize": 12, "mode": "hide"}, margin={"t": 50, "l": 5, "r": 5, "b": 5})
    return _hover(fig, numbers.how, "%{label}: %{value} errors")


def fig_confused_pairs(numbers: Numbers):
    """Horizontal bars: the most frequent (engine top term → coder term) pairs, most frequent on top."""
    import plotly.express as px

    t = numbers.table.assign(pair=lambda d: d["engine_term"] + " → " + d["coder_term"])
    fig = px.bar(t.iloc[::-1], x="count", y="pair", orientation="h")
    fig.update_layout(title="Most confused terms (engine → coder)", yaxis_title="")
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
