"""Tidy frames for the lead's dashboards, built from the database for :mod:`termnorm.coding_metrics`.

termnorm.coding_metrics computes (acceptance, accuracy on gold, errors by
chapter, confused pairs, count errors, throughput, audits, error examples);
this module only reads the tables into the frames it documents:

* :func:`decisions_frame` -- ``db.services.decisions_frame`` plus, per
  decision, the answered suggestion's ``shown`` candidates (the top
  ``SHOWN_CANDIDATES`` names the coder saw, best first), ``predicted_count``
  (the engine's count head, approach E's "how many terms") and
  ``suggestion_id``;
* :func:`gold_predictions` -- one row per (gold mention, model version): the
  gold terms (``GoldLabel``; optionally the gold terms imported with the
  file) against the *latest* stored suggestion of that model version:
  ``suggested`` (chosen set), ``ranked`` (every stored candidate, best
  first), ``predicted_count``; ``seen_in_history`` flags a suggestion made
  after coders had already coded the same mention text (the engine's history
  recall / sieve then answers from memory, so its accuracy there says
  nothing about generalisation);
* :func:`unscored_gold` -- gold mentions the given model version has no
  suggestion for yet (the page scores them with the cached engine);
* :func:`load_dashboard` -- all of the above for one vocabulary (lead only).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Callable

import pandas as pd
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from db import auth, gold, services
from db.accounts import LOADER_USER
from db.models import Batch, Decision, Mention, Suggestion, SuggestionCandidate
from termnorm.coding_metrics import vocabulary_levels
from termnorm.text.normalize import normalize
from termnorm.vocabulary import Vocabulary

# SQLite allows 32766 bound parameters per statement (999 before 3.32); chunks of 900 are safe everywhere.
_CHUNK = 900


def _chunks(ids: Sequence[int]) -> Iterable[list[int]]:
    ids = list(ids)
    for i in range(0, len(ids), _CHUNK):
        yield ids[i:i + _CHUNK]


def _ranked_terms(s: Session, suggestion_ids: Iterable[int], top: int | None) -> dict[int, list[str]]:
    """suggestion id -> candidate names by rank (at most ``top``)."""
    out: dict[int, list[str]] = {}
    for chunk in _chunks(sorted(set(suggestion_ids))):
        q = (select(SuggestionCandidate.suggestion_id, SuggestionCandidate.term)
             .where(SuggestionCandidate.suggestion_id.in_(chunk))
             .order_by(SuggestionCandidate.suggestion_id, SuggestionCandidate.rank))
        if top is not None:
            q = q.where(SuggestionCandidate.rank <= top)
        for sid, term in s.execute(q):
            out.setdefault(sid, []).append(term)
    return out


def _batch_ids(s: Session, vocabulary_id: int | None, batch_id: int | None) -> list[int] | None:
    if batch_id is not None:
        return [batch_id]
    if vocabulary_id is None:
        return None
    return list(s.scalars(select(Batch.id).where(Batch.vocabulary_id == vocabulary_id)))


# ================================================================ decisions
def decisions_frame(s: Session, batch_id: int | None = None, vocabulary_id: int | None = None,
                    history: bool = False, shown: int = services.SHOWN_CANDIDATES) -> pd.DataFrame:
    """``services.decisions_frame`` + ``suggestion_id``, ``shown`` (top ``shown`` candidate names of the
    answered suggestion) and ``predicted_count`` (None where no suggestion was answered)."""
    df = services.decisions_frame(s, batch_id, history=history)
    keep = _batch_ids(s, vocabulary_id, batch_id)
    if keep is not None:
        df = df[df["batch_id"].isin(keep)].reset_index(drop=True)
    # what `termnorm load-data` decided for the loaded sets (mentions whose gold names the vocabulary lacks) is
    # not a coder's work: it would fill the throughput and count charts with a 300,000-an-hour "coder"
    df = df[df["user"] != LOADER_USER].reset_index(drop=True)
    sug_of: dict[int, int | None] = {}
    for chunk in _chunks(df["decision_id"].tolist()):
        sug_of.update(s.execute(select(Decision.id, Decision.suggestion_id).where(Decision.id.in_(chunk))).all())
    sids = [sug_of.get(d) for d in df["decision_id"]]
    counts: dict[int, int] = {}
    for chunk in _chunks([i for i in set(sids) if i is not None]):
        counts.update(s.execute(select(Suggestion.id, Suggestion.predicted_count)
                                .where(Suggestion.id.in_(chunk))).all())
    names = _ranked_terms(s, [i for i in sids if i is not None], shown)
    df["suggestion_id"] = pd.array(sids, dtype="Int64")
    df["shown"] = [list(names.get(i, [])) if i is not None else [] for i in sids]
    df["predicted_count"] = pd.array([counts.get(i) if i is not None else None for i in sids], dtype="Int64")
    return df


# ================================================================ gold vs the engine
GOLD_PREDICTION_COLUMNS = ["mention_id", "mention", "gold_terms", "gold_source", "task_id", "model_version",
                           "suggested", "ranked", "predicted_count", "confidence", "at", "seen_in_history"]


def _file_gold(s: Session, vocabulary_id: int | None, batch_id: int | None = None) -> list[tuple[int, str, list]]:
    """(mention id, text, gold terms) of the mentions imported with their gold terms (of the vocabulary, of the
    batch); an absent gold is stored as JSON null, so the empty ones are left out here, not in SQL."""
    q = select(Mention.id, Mention.text, Mention.gold_terms).join(Batch, Batch.id == Mention.batch_id).where(
        Mention.gold_terms.is_not(None))
    if vocabulary_id is not None:
        q = q.where(Batch.vocabulary_id == vocabulary_id)
    if batch_id is not None:
        q = q.where(Mention.batch_id == batch_id)
    return [(m, t, list(gt)) for m, t, gt in s.execute(q) if gt]


def _gold_terms(s: Session, vocabulary_id: int | None, task_id: int | None,
                include_file_gold: bool) -> pd.DataFrame:
    """One gold set per mention: adjudicated beats agreed beats the file's own gold; newest wins."""
    g = gold.gold_frame(s, task_id, vocabulary_id)
    g = g[g["terms"].map(bool).astype(bool)]  # astype: an empty object Series would select columns
    rank = g["source"].map({"adjudicated": 0, "agreed": 1})
    g = (g.assign(_r=rank).sort_values(["mention_id", "_r", "at"], ascending=[True, True, False])
         .drop_duplicates("mention_id"))
    out = pd.DataFrame({"mention_id": g["mention_id"], "mention": g["mention"], "gold_terms": g["terms"],
                        "gold_source": g["source"], "task_id": g["task_id"].astype("Int64")})
    if include_file_gold and task_id is None:
        have = set(out["mention_id"])
        extra = [(m, t, gt) for m, t, gt in _file_gold(s, vocabulary_id) if m not in have]
        if extra:
            out = pd.concat([out, pd.DataFrame({"mention_id": [e[0] for e in extra], "mention": [e[1] for e in extra],
                                                "gold_terms": [e[2] for e in extra], "gold_source": "file",
                                                "task_id": pd.array([None] * len(extra), dtype="Int64")})],
                            ignore_index=True)
    return out.reset_index(drop=True)


def _first_coded(s: Session, vocabulary_id: int | None) -> dict[str, object]:
    """normalized mention text -> time of the first accept / correct decision on it (the engine's history)."""
    q = (select(Mention.text, func.min(Decision.at)).join(Decision, Decision.mention_id == Mention.id)
         .join(Batch, Batch.id == Mention.batch_id).where(Decision.action.in_(("accept", "correct")), services.MAPS)
         .group_by(Mention.text))
    if vocabulary_id is not None:
        q = q.where(Batch.vocabulary_id == vocabulary_id)
    out: dict[str, object] = {}
    for text, at in s.execute(q):
        key = normalize(text)
        if key not in out or at < out[key]:
            out[key] = at
    return out


def _naive_utc(x) -> pd.Timestamp:
    """SQLite gives naive UTC datetimes, PostgreSQL aware ones: compare them as naive UTC."""
    ts = pd.Timestamp(x)
    return ts.tz_convert("UTC").tz_localize(None) if ts.tzinfo is not None else ts


def gold_predictions(s: Session, vocabulary_id: int | None = None, task_id: int | None = None,
                     include_file_gold: bool = False, model_version: str | None = None) -> pd.DataFrame:
    """Gold terms vs the latest stored suggestion of each model version, one row per (mention, version).

    Columns: :data:`GOLD_PREDICTION_COLUMNS`. Gold mentions without any
    suggestion are left out (see :func:`unscored_gold`). ``gold_source``:
    adjudicated / agreed / file.
    """
    g = _gold_terms(s, vocabulary_id, task_id, include_file_gold)
    if g.empty:
        return pd.DataFrame(columns=GOLD_PREDICTION_COLUMNS)
    latest: list[tuple] = []
    for chunk in _chunks(g["mention_id"].tolist()):
        last = (select(func.max(Suggestion.id)).where(Suggestion.mention_id.in_(chunk))
                .group_by(Suggestion.mention_id, Suggestion.model_version))
        if model_version is not None:
            last = last.where(Suggestion.model_version == model_version)
        latest += s.execute(select(Suggestion.id, Suggestion.mention_id, Suggestion.model_version, Suggestion.chosen,
                                   Suggestion.predicted_count, Suggestion.confidence, Suggestion.created_at)
                            .where(Suggestion.id.in_(last))).all()
    if not latest:
        return pd.DataFrame(columns=GOLD_PREDICTION_COLUMNS)
    ranked = _ranked_terms(s, [r[0] for r in latest], None)
    p = pd.DataFrame([{"mention_id": m, "model_version": v, "suggested": list(ch), "ranked": ranked.get(sid, []),
                       "predicted_count": int(n), "confidence": float(c), "at": at}
                      for sid, m, v, ch, n, c, at in latest])
    out = g.merge(p, on="mention_id", how="inner")
    coded = _first_coded(s, vocabulary_id)

    def seen(text: str, at) -> bool:
        first = coded.get(normalize(text))
        return first is not None and _naive_utc(first) <= _naive_utc(at)

    out["seen_in_history"] = [seen(t, a) for t, a in zip(out["mention"], out["at"])]
    return out.sort_values(["model_version", "mention_id"]).reset_index(drop=True)[GOLD_PREDICTION_COLUMNS]


def unscored_gold(s: Session, model_version: str, vocabulary_id: int | None = None,
                  task_id: int | None = None, include_file_gold: bool = False) -> list[dict]:
    """Gold mentions with no stored suggestion of ``model_version``: [{mention_id, text}] in id order."""
    g = _gold_terms(s, vocabulary_id, task_id, include_file_gold)
    if g.empty:
        return []
    have: set[int] = set()
    for chunk in _chunks(g["mention_id"].tolist()):
        have.update(s.scalars(select(Suggestion.mention_id).where(Suggestion.mention_id.in_(chunk),
                                                                  Suggestion.model_version == model_version)))
    return [{"mention_id": int(m), "text": t} for m, t in zip(g["mention_id"], g["mention"]) if m not in have]


def file_gold_count(s: Session, vocabulary_id: int | None = None, batch_id: int | None = None) -> int:
    """Mentions imported with their gold terms: the gold "Also gold from imported files" adds, so a page that
    leaves it out can say that it is there."""
    return len(_file_gold(s, vocabulary_id, batch_id))


# ================================================================ everything a dashboard page needs
@dataclass
class DashboardData:
    """What :func:`load_dashboard` returns; the frames are those termnorm.coding_metrics documents."""

    decisions: pd.DataFrame  # latest decision per mention (+ shown, predicted_count)
    history: pd.DataFrame  # every decision, superseded ones too (throughput, audits of auto-coding)
    gold: pd.DataFrame  # gold_predictions
    vocabulary: Vocabulary
    chapter_of: Callable[[str], str]
    category_of: Callable[[str], str]


def load_dashboard(s: Session, acting_user: str, vocabulary_id: int, batch_id: int | None = None,
                   include_file_gold: bool = False, shown: int = services.SHOWN_CANDIDATES) -> DashboardData:
    """The dashboard frames of one vocabulary (optionally one batch) -- lead only (PermissionError).

    ``shown``: how many candidates the coding page lists (what ``record_decision(..., shown=)`` was
    given), so that "rejected all" means none of the candidates the coder actually saw.
    """
    auth.require(s, acting_user, "lead")
    vocab = services.vocabulary_from_db(s, vocabulary_id)
    chapter_of, category_of = vocabulary_levels(vocab)
    decisions = decisions_frame(s, batch_id, vocabulary_id, shown=shown)
    history = decisions_frame(s, batch_id, vocabulary_id, history=True, shown=shown)
    g = gold_predictions(s, vocabulary_id, include_file_gold=include_file_gold)
    if batch_id is not None and len(g):
        in_batch = set(s.scalars(select(Mention.id).where(Mention.batch_id == batch_id)))
        g = g[g["mention_id"].isin(in_batch)].reset_index(drop=True)
    return DashboardData(decisions, history, g, vocab, chapter_of, category_of)
