"""Import a pre-coded file (``termnorm normalize --input ... --output FILE``) as a batch with its suggestions.

One mention per distinct text (the file has a row per source record; coders decide a text once), its
``frequency`` the source rows sharing it (the file's ``mention_rows``), its suggestion the file's own (chosen
terms, predicted count, confidence, candidates with codes and scores, model version, stored as
``precoded:<version>``): nothing is suggested again at import, and the coding page shows it as stored
(db.engine_holder) unless a coder has since taught the engine something about a similar mention. The batch is
served most frequent text first. The whole import is one transaction: a failure, a second click or a reload
leaves no half-imported batch. Streamed (termnorm.batch_io): memory grows with the distinct texts, not the rows.
Bad rows are reported with their row numbers and skipped; an unreadable suggestion or a candidate the
vocabulary lacks is named in a notice (the mention is imported; the app suggests it when a coder opens it).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from db import imports as dbio
from db.batches import create_batch, free_name, same_mentions_batch, set_queue_order
from db.models import Mention, Term
from db.suggestions import PRECODED, store_suggestions
from termnorm.batch_io import read_rows
from termnorm.errors import DataFormatError
from termnorm.records import Candidate, LabelledMention, Suggestion

PRECODED_COLUMNS = ("chosen_terms", "predicted_count", "confidence", "model_version", "candidates")
STORE_CHUNK = 2000  # suggestions per insert (one transaction for the whole import)


#: optional: how the pre-computing engine read the mention (abbreviations spelled out); older files lack it
READING_COLUMN = "spelled_out"


def is_precoded(path, columns=PRECODED_COLUMNS) -> bool:
    """Whether the file's header (JSON lines: its first object) has the columns ``termnorm normalize --output``
    writes (or ``columns``). An empty file has no header: it is not one."""
    try:
        with open(path, "rb") as f:
            if not f.read(1 << 16).strip():
                return False
        next(read_rows(path, "mention", list(columns)), None)
    except Exception:
        return False
    return True


def import_precoded(s: Session, path, batch_name: str, vocabulary_id: int, username: str | None = None,
                    progress=None, shown_name: str | None = None, again: bool = False) -> dbio.ImportReport:
    """Import ``path`` as a new batch with its stored suggestions; ``progress(done, total)`` while storing.
    Never raises for the file's content: problems are in the report (nothing imported on a file-level one).
    A file whose mentions a batch already holds imports nothing unless ``again`` (db.batches.import_mentions)."""
    fname = shown_name or Path(path).name
    report = dbio.ImportReport(file=fname)
    if not Path(path).is_file():
        report.errors.append(dbio.ImportProblem(fname, None, "no such file"))
        return report
    if not is_precoded(path):
        report.errors.append(dbio.ImportProblem(fname, None, "not a pre-coded file: it lacks the columns "
                                                f"termnorm normalize --output writes ({', '.join(PRECODED_COLUMNS)})"))
        return report
    first: dict[str, tuple[int, dict]] = {}
    rows_of: dict[str, int] = {}
    try:
        reading = [READING_COLUMN] if is_precoded(path, [READING_COLUMN]) else []
        for r in read_rows(path, "mention", ["mention_rows", *PRECODED_COLUMNS, *reading]):
            report.n_read += 1
            problem = r.problem or dbio.validate_mention(r.mention)
            if problem:
                report.errors.append(dbio.ImportProblem(fname, r.row, problem))
                report.n_rejected += 1
                continue
            rows_of[r.mention] = rows_of.get(r.mention, 0) + 1
            first.setdefault(r.mention, (r.row, r.keep))
    except DataFormatError as e:  # a damaged workbook or Parquet file
        report.errors.append(dbio.ImportProblem(fname, e.row, e.problem))
        return report
    if not first:
        return report
    if not again:
        report.duplicate_of = same_mentions_batch(s, vocabulary_id, list(first))
        if report.duplicate_of is not None:
            return report
    terms = {name: (pos, codes or ([code] if code else [])) for name, pos, code, codes in s.execute(
        select(Term.name, Term.position, Term.code, Term.codes).where(Term.vocabulary_id == vocabulary_id))}
    mentions, suggestions, answered, foreign = [], [], 0, 0
    for text, (row, cells) in first.items():
        sug, notes = _suggestion(text, cells, terms)
        report.notices.extend(dbio.ImportProblem(fname, row, n) for n in notes)
        mentions.append(LabelledMention(text, [], row))
        suggestions.append(sug)
        wanted = [t for t in (cells.get("chosen_terms") or "").split(" ## ") if t]
        answered += bool(wanted)
        foreign += bool(wanted) and not any(t in terms for t in wanted)
    if answered and foreign * 2 > answered:  # most answers name terms this vocabulary lacks: the wrong vocabulary
        report.notices.clear()
        report.errors.append(dbio.ImportProblem(fname, None, (
            f"nothing imported: {foreign:,} of the {answered:,} suggested answers name only terms this vocabulary "
            "lacks; the file was pre-coded against another vocabulary (or edition): import it into that one")))
        return report
    name = free_name(s, vocabulary_id, batch_name, report)
    try:
        bid = create_batch(s, name, vocabulary_id, mentions, username=username, source_file=fname, commit=False)
        ids = dict(s.execute(select(Mention.position, Mention.id).where(Mention.batch_id == bid)).all())
        s.execute(update(Mention).execution_options(synchronize_session=False),
                  [{"id": ids[i], "frequency": max(rows_of[m.text], _int(first[m.text][1].get("mention_rows")))}
                   for i, m in enumerate(mentions, start=1)])
        for start in range(0, len(mentions), STORE_CHUNK):
            chunk = [(ids[i + 1], g) for i, g in enumerate(suggestions[start:start + STORE_CHUNK], start=start)
                     if g is not None]
            store_suggestions(s, [m for m, _ in chunk], [g for _, g in chunk], commit=False)
            if progress:
                progress(min(len(mentions), start + STORE_CHUNK), len(mentions))
        set_queue_order(s, bid, "frequency", username, commit=False)
        s.commit()
    except BaseException:  # a database error, or Streamlit stopping the run (a reload, a second click)
        s.rollback()
        raise
    report.batch_id, report.n_mentions = bid, len(mentions)
    report.n_imported = report.n_read - report.n_rejected  # rows taken (n_read == n_imported + n_rejected)
    report.notices.insert(0, dbio.ImportProblem(
        fname, None, f"{report.n_imported:,} rows hold {len(mentions):,} distinct texts: one mention per text, "
                     "with the file's suggestion; served most frequent text first"))
    return report


def _int(text) -> int:
    try:
        return max(0, int(float(text or 0)))
    except (TypeError, ValueError, OverflowError):
        return 0


def _suggestion(text: str, cells: dict, terms: dict) -> tuple[Suggestion | None, list[str]]:
    """The file's suggestion for ``text`` (None: unusable, the app suggests it when drawn) and notices."""
    unusable = "its suggestion is not usable ({}): the app suggests it when a coder opens it"
    try:
        listed = json.loads(cells.get("candidates") or "[]")
        confidence = float(cells.get("confidence"))
    except (TypeError, ValueError) as e:
        return None, [unusable.format(e)]
    if not math.isfinite(confidence) or not 0.0 <= confidence <= 1.0:
        return None, [unusable.format(f"confidence {cells.get('confidence')!r} is not between 0 and 1")]
    if not isinstance(listed, list) or not all(
            isinstance(c, list) and len(c) >= 3 and isinstance(c[0], str) and isinstance(c[2], (int, float))
            and math.isfinite(c[2]) for c in listed):
        return None, [unusable.format("candidates are not a list of [term, code, score]")]
    chosen = [t for t in (cells.get("chosen_terms") or "").split(" ## ") if t]
    lacking = [n for n in dict.fromkeys([c[0] for c in listed] + chosen) if n not in terms]
    cands = [Candidate(terms[n][0], n, float(score), {"precoded": float(score)}, list(terms[n][1]))
             for n, _, score, *_ in listed if n in terms]
    chosen = [t for t in chosen if t in terms]
    notes = [f"the vocabulary has no term {', '.join(map(repr, lacking[:3]))}: left out of its suggestion "
             "(pre-coded against another vocabulary or edition?)"] if lacking else []
    count = _int(cells.get("predicted_count")) or len(chosen)
    version = PRECODED + (cells.get("model_version") or "unknown")
    read = (cells.get(READING_COLUMN) or "").strip()  # how the pre-computing engine read it (termnorm.batch)
    return Suggestion(text, cands, count, chosen, confidence, [], version,
                      spelled_out=read if read != text else ""), notes
