"""Abbreviations coders teach (PCI -> 经皮冠状动脉介入治疗), kept so a restarted app still knows them.

Rows of :class:`db.models.Abbreviation`: one per (vocabulary, abbreviation, expansion); ``vocabulary_id``
None means every vocabulary. The app replays :func:`abbreviations` into ``Engine.add_abbreviation`` at
start (``app_pages/_ui.py::build_holder``), and the Vocabulary page adds new ones with :func:`add_abbreviation`
and the engine's method together. An abbreviation matches in any case (``pci`` = ``PCI``), as in the
engine's search (termnorm.search).
"""

from __future__ import annotations

from sqlalchemy import func, or_, select
from sqlalchemy.orm import Session

from db.accounts import acting_user, audit
from db.models import ABBREVIATION_SOURCES, NAME_LEN, Abbreviation, User, Vocabulary

ABBREVIATION_LEN = 100  # the column's length (db.models.Abbreviation.abbreviation)


def _scope(vocabulary_id: int | None):
    """Rows that apply to ``vocabulary_id``: its own and the global ones (None: the global ones only)."""
    if vocabulary_id is None:
        return Abbreviation.vocabulary_id.is_(None)
    return or_(Abbreviation.vocabulary_id == vocabulary_id, Abbreviation.vocabulary_id.is_(None))


def add_abbreviation(s: Session, vocabulary_id: int | None, abbreviation: str, expansion: str, username: str,
                     source: str = "user") -> bool:
    """Store ``abbreviation`` -> ``expansion`` for a vocabulary (None: all), by ``username``, with an audit entry.

    Returns False (and writes nothing) when the pair already applies to the vocabulary (its own or a
    global one; the abbreviation compared without case). Raises ValueError for an empty text, an
    abbreviation over 100 characters or an unknown source, KeyError for an unknown vocabulary.
    """
    abbreviation, expansion = (abbreviation or "").strip(), (expansion or "").strip()
    if not abbreviation or not expansion:
        raise ValueError("an abbreviation and its expansion must be non-empty")
    if len(abbreviation) > ABBREVIATION_LEN:
        raise ValueError(f"an abbreviation has at most {ABBREVIATION_LEN} characters")
    if len(expansion) > NAME_LEN:
        raise ValueError(f"an expansion has at most {NAME_LEN} characters")
    if source not in ABBREVIATION_SOURCES:
        raise ValueError(f"unknown source {source!r}; expected one of {', '.join(ABBREVIATION_SOURCES)}")
    if vocabulary_id is not None and s.get(Vocabulary, vocabulary_id) is None:
        raise KeyError(f"no vocabulary {vocabulary_id}")
    known = select(Abbreviation.id).where(_scope(vocabulary_id), Abbreviation.expansion == expansion,
                                          func.lower(Abbreviation.abbreviation) == abbreviation.lower())
    if s.scalar(known.limit(1)) is not None:
        return False
    user = acting_user(s, username)
    row = Abbreviation(vocabulary_id=vocabulary_id, abbreviation=abbreviation, expansion=expansion, source=source,
                       added_by_id=user.id)
    s.add(row)
    s.flush()
    audit(s, user, "add_abbreviation", "abbreviation", row.id,
          {"vocabulary_id": vocabulary_id, "abbreviation": abbreviation, "expansion": expansion, "source": source})
    s.commit()
    return True


def import_list(s: Session, vocabulary_id: int | None, pairs, username: str) -> int:
    """Store an abbreviation list file's pairs (source ``list``) in one transaction; returns how many were new."""
    have = {(a.lower(), e) for a, e in abbreviations(s, vocabulary_id)}
    user = acting_user(s, username)
    new = []
    for abbreviation, expansion in pairs:
        abbreviation, expansion = str(abbreviation).strip(), str(expansion).strip()
        key = (abbreviation.lower(), expansion)
        if abbreviation and expansion and len(abbreviation) <= ABBREVIATION_LEN and key not in have:
            have.add(key)
            new.append(Abbreviation(vocabulary_id=vocabulary_id, abbreviation=abbreviation, expansion=expansion,
                                    source="list", added_by_id=user.id))
    s.add_all(new)
    if new:
        audit(s, user, "import_abbreviations", "vocabulary", vocabulary_id, {"n": len(new)})
    s.commit()
    return len(new)


def abbreviations(s: Session, vocabulary_id: int | None) -> list[tuple[str, str]]:
    """(abbreviation, expansion) pairs of the vocabulary and the global ones, oldest first (replayed into the
    engine at start)."""
    q = select(Abbreviation.abbreviation, Abbreviation.expansion).where(_scope(vocabulary_id)).order_by(Abbreviation.id)
    return [(a, e) for a, e in s.execute(q)]


def abbreviation_rows(s: Session, vocabulary_id: int | None) -> list[dict]:
    """The same rows for display: abbreviation, expansion, scope, source, who added it and when."""
    q = (select(Abbreviation, User.username).outerjoin(User, User.id == Abbreviation.added_by_id)
         .where(_scope(vocabulary_id)).order_by(Abbreviation.id))
    return [{"abbreviation": a.abbreviation, "expansion": a.expansion,
             "scope": "all vocabularies" if a.vocabulary_id is None else "this vocabulary",
             "source": a.source, "added_by": u or "", "at": a.created_at} for a, u in s.execute(q)]


def for_engine(url: str | None, vocabulary_id: int) -> list[tuple[str, str]]:
    """:func:`abbreviations` in a session of its own: what a new engine is given at start."""
    from db import services

    with services.session_scope(url) as s:
        return abbreviations(s, vocabulary_id)
