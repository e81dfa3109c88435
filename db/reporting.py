"""Decisions as a table (:func:`decisions_frame`, one row per mention's latest decision or every decision)
and the export entry point (:func:`export_decisions`; the formats are ``db.exports``).
"""

from __future__ import annotations

from urllib.parse import quote

import pandas as pd
from sqlalchemy import func, select
from sqlalchemy.orm import Session, aliased

from db.models import (
    Batch,
    Decision,
    Mention,
    Suggestion as SuggestionRow,
    User,
    Vocabulary as VocabularyRow,
    VocabularyEdition,
)


# ================================================================ reporting / export
# new columns go last, so readers by position keep working: ``source_row``, the mention's row in the file it
# was imported from (a data team's key back to its rows); ``document``, the note or abstract it was read in;
# ``read_as``, the mention as the engine read it for the suggestion the decision answered ("" if as written)
DECISION_COLUMNS = ["decision_id", "batch_id", "batch", "vocabulary", "mention_id", "position", "mention", "action",
                    "terms", "codes", "term_ids", "code_system", "edition", "edition_label", "relationship",
                    "review_status", "reviewed_by", "reviewed_at", "review_note", "user", "at", "seconds", "comment",
                    "model_version", "suggested", "confidence", "gold_terms", "is_latest", "source_row", "document",
                    "read_as"]


def code_system(name: str, system_uri: str = "") -> str:
    """The URI naming a vocabulary's code system in exports: the one set for it, else ``urn:termnorm:vocabulary:<name>``
    (local editions such as ICD-10 北京临床版 are not the HL7 ICD systems, so no official URI is claimed)."""
    return system_uri or f"urn:termnorm:vocabulary:{quote(name, safe='')}"


def _decisions_where(q, batch_id: int | None, history: bool, mention: str | None):
    """``q`` narrowed to a batch, to latest decisions unless ``history``, and to a mention's text."""
    if batch_id is not None:
        q = q.where(Mention.batch_id == batch_id)
    if not history:
        q = q.where(Decision.is_latest)
    if mention is not None:
        q = q.where(Mention.text == mention)
    return q


def decisions_count(s: Session, batch_id: int | None = None, history: bool = False, mention: str | None = None) -> int:
    """How many rows :func:`decisions_frame` gives with the same filters, counted in the database."""
    q = select(func.count(Decision.id)).join(Mention, Mention.id == Decision.mention_id)
    return int(s.execute(_decisions_where(q, batch_id, history, mention)).scalar_one())


def decisions_frame(s: Session, batch_id: int | None = None, history: bool = False, mention: str | None = None,
                    offset: int = 0, limit: int | None = None) -> pd.DataFrame:
    """One row per mention's latest decision (``history=True``: every decision), in batch / file order;
    ``mention`` keeps that text's rows, ``offset`` / ``limit`` a page of them (read from the database alone).

    ``terms``, ``codes`` (the code exported for each term: the one the coder
    picked, else the term's most specific), ``term_ids``, ``suggested`` and
    ``gold_terms`` are lists; ``code_system``, ``edition`` (its number, 1 for the first import) and
    ``edition_label`` (the label given to it on import, else "") say where the codes come from;
    ``relationship`` and ``review_status`` are the mapping's; ``confidence`` / ``suggested`` are
    those of the suggestion the decision answered, and so is ``read_as``: the mention as the engine read it
    (abbreviations spelled out; "" when read as written or answered without a suggestion).
    """
    reviewer = aliased(User)
    q = (select(Decision, Mention, Batch.name, VocabularyRow.id, VocabularyRow.name, VocabularyRow.system_uri,
                User.username, reviewer.username, SuggestionRow.chosen, SuggestionRow.confidence, SuggestionRow.read_as)
         .join(Mention, Mention.id == Decision.mention_id).join(Batch, Batch.id == Mention.batch_id)
         .join(VocabularyRow, VocabularyRow.id == Batch.vocabulary_id).join(User, User.id == Decision.user_id)
         .outerjoin(reviewer, reviewer.id == Decision.reviewed_by_id)
         .outerjoin(SuggestionRow, SuggestionRow.id == Decision.suggestion_id)
         .order_by(Batch.id, Mention.position, Decision.id))
    q = _decisions_where(q, batch_id, history, mention).offset(offset)
    rows = s.execute(q.limit(limit) if limit is not None else q).all()
    labels = {(v, n): lab or "" for v, n, lab in s.execute(
        select(VocabularyEdition.vocabulary_id, VocabularyEdition.number, VocabularyEdition.label))}
    data = []
    for d, m, bname, vid, vname, uri, uname, rname, chosen, conf, read_as in rows:
        codes = [c or "" for c in (d.codes or [])]
        data.append([d.id, m.batch_id, bname, vname, m.id, m.position, m.text, d.action, list(d.terms),
                     codes, list(d.term_ids or []), code_system(vname, uri), d.edition,
                     labels.get((vid, d.edition), ""), d.relationship or "",
                     d.review_status, rname or "", d.reviewed_at, d.review_note or "", uname, d.at, d.seconds,
                     d.comment, d.model_version, list(chosen or []), conf, list(m.gold_terms or []), d.is_latest,
                     m.source_row, m.document or "", read_as or ""])
    frame = pd.DataFrame(data, columns=DECISION_COLUMNS)
    frame["edition"] = frame["edition"].astype("Int64")  # a number in every row ("" in CSV for none)
    return frame


def export_decisions(s: Session, batch_id: int | None, fmt: str, approved_only: bool = False, **omop) -> bytes:
    """The latest decisions of a batch (None: all batches) as csv, xlsx, jsonl, chip-cdn, fhir (R5 ConceptMap)
    or omop (SOURCE_TO_CONCEPT_MAP, approved only); ``db.exports.export_batch`` also gives a file name and a report."""
    from db import exports  # db.exports builds on this module (decisions_frame): a top-level import would be a cycle

    return exports.export_batch(s, batch_id, fmt, approved_only=approved_only, **omop).data
