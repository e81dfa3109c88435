"""The engine's suggestions stored per mention (ranked candidates with every score, the model version and
the vocabulary edition) and read back as the engine's Suggestion records.
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from dataclasses import asdict

from sqlalchemy import func, insert, select, update
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, selectinload

from db.models import (
    Batch,
    Mention,
    Suggestion as SuggestionRow,
    SuggestionCandidate,
    Vocabulary as VocabularyRow,
    utcnow,
)
from termnorm.records import Candidate, KeywordSpan, Suggestion


# ================================================================ suggestions
def suggestion_values(mention_id: int, sug: Suggestion, edition: int | None) -> tuple[dict, list[dict]]:
    row = {"mention_id": mention_id, "model_version": str(sug.model_version), "edition": edition,
           "created_at": utcnow(),
           "predicted_count": int(sug.predicted_count), "confidence": float(sug.confidence),
           "chosen": [str(t) for t in sug.chosen],
           "keywords": [asdict(k) if isinstance(k, KeywordSpan) else dict(k) for k in sug.keywords],
           "parts": [str(p) for p in sug.parts], "read_as": sug.spelled_out or None}
    cands = [{"rank": r, "term": str(c.term), "term_index": None if c.term_id is None else int(c.term_id),
              "codes": [str(x) for x in c.codes], "score": float(c.score),
              "scores": {str(k): float(v) for k, v in (c.scores or {}).items()}}  # numpy floats -> JSON
             for r, c in enumerate(sug.candidates, start=1)]
    return row, cands


#: Model version prefix of a suggestion imported from a pre-coded file (db.precoded): shown as stored.
PRECODED = "precoded:"

#: Retries of a suggestion write that met a deadlock.
RETRIES = 3


def store_suggestions(s: Session, mention_ids: Sequence[int], suggestions: Sequence[Suggestion],
                      commit: bool = True) -> None:
    """Store the engine's suggestions for many mentions in one transaction (one fsync, not one per mention).

    Rows are written in mention-id order, so concurrent writers lock mentions in one order; a PostgreSQL
    deadlock that still happens (a coder's decision or claim takes the same rows) is retried with a short
    backoff (:data:`RETRIES` times) -- a suggestion is recomputable, a coder's decision never waits on it."""
    mention_ids = [int(i) for i in mention_ids]
    if len(mention_ids) != len(suggestions):
        raise ValueError("mention_ids and suggestions differ in length")
    if not mention_ids:
        return
    pairs = sorted(zip(mention_ids, suggestions), key=lambda p: p[0])
    if not commit:  # part of the caller's transaction (db.precoded: a whole import or nothing)
        _store(s, [m for m, _ in pairs], [g for _, g in pairs], commit=False)
        return
    s.commit()  # what the caller wrote before is theirs to keep: a retry's rollback must not take it along
    for attempt in range(RETRIES + 1):
        try:
            _store(s, [m for m, _ in pairs], [g for _, g in pairs])
            return
        except OperationalError as e:
            s.rollback()
            if attempt == RETRIES or not _deadlock(e):
                raise
            time.sleep(0.05 * 2 ** attempt * (1 + random.random()))


def _deadlock(e: OperationalError) -> bool:
    """A PostgreSQL deadlock or serialization failure (SQLSTATE 40P01 / 40001): safe to run again."""
    return getattr(getattr(e, "orig", None), "sqlstate", None) in ("40P01", "40001")


def _store(s: Session, mention_ids: list[int], suggestions: Sequence[Suggestion], commit: bool = True) -> None:
    ms = {m.id: m for m in s.scalars(select(Mention).where(Mention.id.in_(mention_ids)))}
    missing = [i for i in mention_ids if i not in ms]
    if missing:
        raise KeyError(f"no mention {missing[0]}")
    editions = dict(s.execute(select(Batch.id, VocabularyRow.edition).join(VocabularyRow)
                              .where(Batch.id.in_({m.batch_id for m in ms.values()}))).all())
    values = [suggestion_values(mid, sug, editions.get(ms[mid].batch_id)) for mid, sug in zip(mention_ids, suggestions)]
    # bulk INSERT ... RETURNING (ids in parameter order): ~10x faster than one ORM object per candidate
    ids = s.scalars(insert(SuggestionRow).returning(SuggestionRow.id, sort_by_parameter_order=True),
                    [v for v, _ in values]).all()
    cands = [dict(c, suggestion_id=sid) for sid, (_, cs) in zip(ids, values) for c in cs]
    if cands:
        s.execute(insert(SuggestionCandidate), cands)
    # conditional UPDATEs, not the statuses read above: a coder may have decided one of these mentions since
    # (a background job or the page's prepare thread suggests beside the coders), and writing "suggested"
    # from that read would reopen it
    s.execute(update(Mention).execution_options(synchronize_session=False),
              [{"id": mid, "confidence": float(sug.confidence)} for mid, sug in zip(mention_ids, suggestions)])
    s.execute(update(Mention).where(Mention.id.in_(mention_ids), Mention.status == "new").values(status="suggested")
              .execution_options(synchronize_session=False))
    if commit:
        s.commit()


def store_suggestion(s: Session, mention_id: int, suggestion: Suggestion) -> None:
    """Store the ranked candidates with every score and the model version (the newest one is used)."""
    store_suggestions(s, [mention_id], [suggestion])


def latest_suggestion_versions(s: Session, mention_ids: Sequence[int]) -> dict[int, tuple[str, int | None]]:
    """(model version, edition) of each mention's newest stored suggestion; mentions without one are absent."""
    ids = [int(i) for i in mention_ids]
    if not ids:
        return {}
    latest = (select(func.max(SuggestionRow.id).label("sid")).where(SuggestionRow.mention_id.in_(ids))
              .group_by(SuggestionRow.mention_id).subquery())
    q = select(SuggestionRow.mention_id, SuggestionRow.model_version, SuggestionRow.edition).join(
        latest, latest.c.sid == SuggestionRow.id)
    return {m: (v, e) for m, v, e in s.execute(q)}


def latest_suggestion_row(s: Session, mention_id: int) -> SuggestionRow | None:
    return s.scalar(select(SuggestionRow).where(SuggestionRow.mention_id == mention_id)
                    .options(selectinload(SuggestionRow.candidates)).order_by(SuggestionRow.id.desc()).limit(1))


def shown_suggestion_row(s: Session, mention_id: int, screen: Suggestion | None) -> SuggestionRow | None:
    """The stored row of the suggestion a screen showed (``screen``): the newest of the mention's rows with its model
    version, chosen terms and candidates, not a newer one a background job stored while it was on screen; the
    newest row when ``screen`` is None or was not stored."""
    latest = latest_suggestion_row(s, mention_id)
    if screen is None or latest is None or _shows(latest, screen):
        return latest
    rows = s.scalars(select(SuggestionRow).where(SuggestionRow.mention_id == mention_id,
                                                 SuggestionRow.model_version == screen.model_version,
                                                 SuggestionRow.id < latest.id)
                     .options(selectinload(SuggestionRow.candidates)).order_by(SuggestionRow.id.desc()).limit(20))
    return next((r for r in rows if _shows(r, screen)), latest)


def _shows(row: SuggestionRow, screen: Suggestion) -> bool:
    return (row.model_version == screen.model_version and list(row.chosen) == list(screen.chosen)
            and [c.term for c in row.candidates] == [c.term for c in screen.candidates])


def latest_suggestion(s: Session, mention_id: int, edition: int | None = None) -> Suggestion | None:
    """The newest stored suggestion for the mention, as the engine's Suggestion record.

    With ``edition`` (the vocabulary's edition in force): None when the stored one was made from another
    edition, whose terms may since have been retired or re-coded -- the caller suggests again.
    """
    row = latest_suggestion_row(s, mention_id)
    if row is None or (edition is not None and row.edition is not None and row.edition != edition):
        return None
    text = s.scalar(select(Mention.text).where(Mention.id == mention_id))
    cands = [Candidate(term_id=-1 if c.term_index is None else c.term_index, term=c.term, score=c.score,
                       scores=dict(c.scores), codes=list(c.codes)) for c in row.candidates]
    return Suggestion(mention=text, candidates=cands, predicted_count=row.predicted_count, chosen=list(row.chosen),
                      confidence=row.confidence, keywords=[KeywordSpan(**k) for k in row.keywords],
                      model_version=row.model_version, parts=list(row.parts), spelled_out=row.read_as or "")
