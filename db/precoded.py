"""Import a pre-coded file (``termnorm normalize --input ... --output FILE``) as a batch with its suggestions.

One mention per distinct text (the file has a row per source record; coders decide a text once), its
``frequency`` the source rows sharing it (the file's ``mention_rows``), its suggestion the file's own (chosen
terms, predicted count, confidence, candidates with codes and scores, model version): nothing is suggested again
at import. The batch is served most frequent text first. Streamed (termnorm.batch_io): memory grows with the
distinct texts, not the rows. Bad rows are reported with their row numbers and skipped; a candidate the
vocabulary lacks is reported and left out of that suggestion.
"""

from __future__ import annotations

import json
from pathlib import Path

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from db import imports as dbio
from db.batches import create_batch, set_queue_order
from db.models import Mention, Term
from db.suggestions import store_suggestions
from termnorm.batch_io import read_rows
from termnorm.records import Candidate, LabelledMention, Suggestion

PRECODED_COLUMNS = ("chosen_terms", "predicted_count", "confidence", "model_version", "candidates")
STORE_CHUNK = 2000  # suggestions per transaction


def is_precoded(path) -> bool:
    """Whether the file's header has the columns ``termnorm normalize --output`` writes."""
    try:
        first = next(read_rows(path, "mention", list(PRECODED_COLUMNS)), None)
    except Exception:
        return False
    return first is not None


def import_precoded(s: Session, path, batch_name: str, vocabulary_id: int, username: str | None = None,
                    progress=None, shown_name: str | None = None) -> dbio.ImportReport:
    """Import ``path`` as a new batch with its stored suggestions; ``progress(done, total)`` while storing."""
    fname = shown_name or Path(path).name
    terms = {name: (pos, codes or ([code] if code else [])) for name, pos, code, codes in s.execute(
        select(Term.name, Term.position, Term.code, Term.codes).where(Term.vocabulary_id == vocabulary_id))}
    report = dbio.ImportReport(file=fname)
    first: dict[str, tuple[int, dict]] = {}
    rows_of: dict[str, int] = {}
    try:
        for r in read_rows(path, "mention", ["mention_rows", *PRECODED_COLUMNS]):
            report.n_read += 1
            problem = r.problem or dbio.validate_mention(r.mention)
            if problem:
                report.errors.append(dbio.ImportProblem(fname, r.row, problem))
                report.n_rejected += 1
                continue
            rows_of[r.mention] = rows_of.get(r.mention, 0) + 1
            if r.mention not in first:
                first[r.mention] = (r.row, r.keep)
    except Exception as e:  # a header without the pre-coded columns, a damaged workbook ...
        report.errors.append(dbio.ImportProblem(fname, None, str(e)))
        return report
    mentions, suggestions = [], []
    for text, (row, cells) in first.items():
        sug, notes = _suggestion(text, cells, terms)
        report.notices.extend(dbio.ImportProblem(fname, row, n) for n in notes)
        mentions.append(LabelledMention(text, [], row))
        suggestions.append(sug)
    if not mentions:
        return report
    report.batch_id = create_batch(s, batch_name, vocabulary_id, mentions, username=username, source_file=fname)
    report.n_imported = report.n_read - report.n_rejected  # rows taken (n_read == n_imported + n_rejected)
    report.notices.insert(0, dbio.ImportProblem(
        fname, None, f"{report.n_imported:,} rows hold {len(mentions):,} distinct texts: one mention per text, "
                     "with the file's suggestion; served most frequent text first"))
    ids = dict(s.execute(select(Mention.position, Mention.id).where(Mention.batch_id == report.batch_id)).all())
    freq = [{"id": ids[i], "frequency": _frequency(first[m.text][1], rows_of[m.text])}
            for i, m in enumerate(mentions, start=1)]
    s.execute(update(Mention).execution_options(synchronize_session=False), freq)
    s.commit()
    for start in range(0, len(mentions), STORE_CHUNK):
        chunk = [(ids[i + 1], g) for i, g in enumerate(suggestions[start:start + STORE_CHUNK], start=start)
                 if g is not None]
        store_suggestions(s, [m for m, _ in chunk], [g for _, g in chunk])
        if progress:
            progress(min(len(mentions), start + STORE_CHUNK), len(mentions))
    set_queue_order(s, report.batch_id, "frequency", username)
    return report


def _frequency(cells: dict, counted: int) -> int:
    try:
        return max(counted, int(float(cells.get("mention_rows") or 0)))
    except ValueError:
        return counted


def _suggestion(text: str, cells: dict, terms: dict) -> tuple[Suggestion | None, list[str]]:
    """The file's suggestion for ``text`` (None: unusable, the app suggests it when drawn) and notices."""
    try:
        listed = json.loads(cells.get("candidates") or "[]")
        confidence = float(cells.get("confidence") or 0)
        count = int(float(cells.get("predicted_count") or 0))
    except ValueError as e:
        return None, [f"its suggestion cannot be read ({e}); the app suggests it when a coder opens it"]
    cands, missing = [], []
    for item in listed:
        name, score = (item[0], item[2]) if isinstance(item, list) and len(item) >= 3 else (None, None)
        if name not in terms:
            missing.append(str(name))
            continue
        pos, codes = terms[name]
        cands.append(Candidate(pos, name, float(score), {"precoded": float(score)}, list(codes)))
    chosen = [t for t in (cells.get("chosen_terms") or "").split(" ## ") if t]
    notes = []
    if missing or any(t not in terms for t in chosen):
        lacking = sorted(set(missing) | {t for t in chosen if t not in terms})
        notes.append(f"the vocabulary has no term {', '.join(map(repr, lacking[:3]))}: left out of its suggestion "
                     "(pre-coded against another vocabulary or edition?)")
        chosen = [t for t in chosen if t in terms]
    return Suggestion(text, cands, count, chosen, confidence, [], cells.get("model_version") or "precoded"), notes
