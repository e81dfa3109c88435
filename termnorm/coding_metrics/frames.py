"""What every coding metric returns (:class:`Numbers`), the constants they share, and reading the frames.

The decisions frame and its columns are described in the package docstring (termnorm.coding_metrics);
lists of terms may be lists or ``##`` strings (:func:`_ranked`). The ``_`` helpers are the package's own.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable

import numpy as np
import pandas as pd

from termnorm.agreement import SEPARATOR, is_missing
from termnorm.errors import DataFormatError

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
