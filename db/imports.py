"""Import of mention files (the export of decisions is ``db.exports``).

Import (``read_mentions`` / ``read_mentions_report``) accepts what coders actually receive:

* CSV / TSV (UTF-8 with or without BOM, UTF-16, or GB18030 / Windows-1252 as Excel writes it on Chinese /
  Western Windows, with a notice) and XLSX, with a column named ``mention``, ``text`` or ``原始词`` and a column
  of gold terms if any (``terms``, ``gold``, ``标准词``, ``normalized_result``; several joined by ``##`` or ``|``);
* CHIP-CDN JSON (a list of ``{"text", "normalized_result"}`` objects) and JSON lines;
* in either, optionally the text each mention was found in (column / field ``document``, ``context``, ``note``,
  ``abstract``, ``原文``, ``病历``): the engine reads the abbreviations it defines and the coding page shows it.

No row is dropped without being named: every data row read is either imported
or an :class:`ImportProblem` (file, row, problem) in the report, and bad rows
never block good ones. What was changed in an imported row (control characters
removed) is a notice. A wholly unreadable file gives one clear problem (row
None), never an exception. Rows are counted as a person counts them:
spreadsheet rows (header = row 1; a CSV row with a quoted multi-line note is
one row, as in Excel), the 1-based item number in a JSON list, the line number
in JSON lines.

Spreadsheet text cells that would run as formulas are exported (``db.exports``)
with a leading ``'`` (:func:`neutralise_formula`); the importer takes it off
again (:func:`restore_formula`), so an export imports back to the same texts.
"""

from __future__ import annotations

import csv
import io
import json
import re
import zipfile
from collections.abc import Collection
from itertools import islice
from pathlib import Path
from typing import Any

from db.import_rows import (
    DOCUMENT_COLUMNS,
    FORMULA_STARTS,
    JSON_TERMS_KEYS,
    JSON_TEXT_KEYS,
    MAX_DOCUMENT_CHARS,
    MAX_MENTION_CHARS,
    MAX_TITLE_ROWS,
    MENTION_COLUMNS,
    TERMS_COLUMNS,
    UNBALANCED_QUOTE,
    UNDECODABLE,
    ImportProblem,
    ImportReport,
    MentionsRead,
    cell_text,
    clean_text,
    control_notice,
    find_column,
    gold_terms,
    header_index,
    neutralise_formula,
    restore_formula,
    split_terms,
    take_row,
    text_cell,
    validate_mention,
)
from termnorm.batch_io import extra_cells, line_cells
from termnorm.records import LabelledMention

# a note in a document column may be long (db.import_rows.MAX_DOCUMENT_CHARS and beyond, to name it in a
# notice): the csv module's 128 KiB cell limit would make such a file unreadable
csv.field_size_limit(max(csv.field_size_limit(), 32 * 1024 * 1024))

# the names importers use from here (the row-level pieces live in db.import_rows)
__all__ = [
    "DOCUMENT_COLUMNS", "FORMULA_STARTS", "JSON_TERMS_KEYS", "JSON_TEXT_KEYS", "MAX_DOCUMENT_CHARS",
    "MAX_MENTION_CHARS", "MENTION_COLUMNS", "TERMS_COLUMNS",
    "UNBALANCED_QUOTE", "UNDECODABLE", "ImportProblem", "ImportReport", "MentionsRead", "clean_text",
    "control_notice", "neutralise_formula", "read_mentions", "read_mentions_report", "restore_formula",
    "split_terms", "validate_mention",
]


# ---------------------------------------------------------------- reading
def read_mentions(source, name: str | None = None) -> tuple[list[LabelledMention], list[ImportProblem]]:
    """Read mentions (with gold terms if the file has them) from a path, bytes or an uploaded file.

    ``source``: a path; ``bytes``; or a file-like object with ``getvalue()`` /
    ``read()`` (e.g. Streamlit's ``UploadedFile``), named by ``name`` or its
    ``.name``. Never raises for bad content: returns the good rows (with
    ``row`` set) and the problems. :func:`read_mentions_report` also gives the
    notices and the count of rows read.
    """
    read = read_mentions_report(source, name)
    return read.good, read.errors


def read_mentions_report(source, name: str | None = None) -> MentionsRead:
    """Like :func:`read_mentions`, with the notices on imported rows and the number of data rows read."""
    out = _read_report(source, name)
    _say_repeats(out)
    return out


def _say_repeats(out: MentionsRead) -> None:
    """A notice on each row whose mention (with its document) an earlier row of the file already has: it is
    imported as a mention of its own, as a person may mean it, but a file joined twice must not pass unseen;
    gold terms that disagree between the two rows are named."""
    first: dict[tuple[str, str], LabelledMention] = {}
    for m in out.good:
        was = first.setdefault((m.text, m.document or ""), m)
        if was is m:
            continue
        differ = sorted(was.terms) != sorted(m.terms)
        out.notices.append(ImportProblem(out.file, m.row, (
            f"same mention as row {was.row}" + (" (and the same document)" if m.document else "")
            + ": imported as a mention of its own" + (
                f"; the gold terms differ: {'##'.join(m.terms) or 'none'} here, {'##'.join(was.terms) or 'none'} "
                f"in row {was.row}" if differ else ""))))


def _read_report(source, name: str | None) -> MentionsRead:
    fname, data, problem = _load(source, name)
    if problem:
        return _failed(fname, problem)
    kind = _kind(fname, data)
    try:
        if kind == "xls":
            return _failed(fname, "legacy .xls workbook is not supported: save it as .xlsx or CSV")
        if kind == "xlsx":
            rows, header_problem, formulas, sheets = _xlsx_rows(data)
            out = _from_table(fname, rows, header_problem)
            if sheets:  # a workbook of several sheets: which was read, and those left that hold mentions too
                read, *others = sheets
                out.sheets_left = others
                out.notices.append(ImportProblem(fname, None, f"sheet {read!r} read" + (
                    f"; sheet(s) {', '.join(map(repr, others))} also have a mention column and were not imported "
                    "(one sheet per import: import each as a file of its own)" if others else
                    " (the workbook's other sheets have no mention column)")))
            if formulas:
                shown = ", ".join(f"row {r} column {c}" for r, c in formulas[:10])  # column B (病历)
                more = f" and {len(formulas) - 10} more" if len(formulas) > 10 else ""
                out.notices.append(ImportProblem(fname, formulas[0][0], (
                    f"{len(formulas)} cell(s) hold a formula without a saved value (text typed starting with '=' "
                    f"is stored as one); their text was imported as written: {shown}{more}")))
            return out
        if kind == "json":
            return _from_json(fname, data)
        if _binary(data):
            return _failed(fname, "not a text file: its bytes are binary (an image, a PDF, a damaged file?); import "
                                  "CSV / TSV (UTF-8, GB18030 or UTF-16), XLSX or JSON")
        rows, nul_rows, encoding = _csv_rows(data)
        out = _from_table(fname, rows, None, nul_rows)
        if encoding and out.good:  # a guess between the two legacy encodings: said, so a wrong one is seen
            out.notices.append(ImportProblem(fname, None, f"not UTF-8: read as {LEGACY[encoding]}; if the text "
                                                          "looks wrong, save the file as UTF-8 and import it again"))
        return out
    except Exception as e:  # last resort: the UI must get a report, never a traceback
        return _failed(fname, f"unreadable file ({type(e).__name__}: {e})")


def _failed(fname: str, problem: str) -> MentionsRead:
    return MentionsRead(fname, errors=[ImportProblem(fname, None, problem)])


def _load(source, name) -> tuple[str, bytes, str | None]:
    if isinstance(source, (bytes, bytearray)):
        fname, data = name or "<upload>", bytes(source)
    elif hasattr(source, "getvalue") or hasattr(source, "read"):
        fname = str(name or getattr(source, "name", None) or "<upload>")
        try:
            data = source.getvalue() if hasattr(source, "getvalue") else source.read()
        except Exception as e:
            return fname, b"", f"cannot read the upload ({e})"
        if isinstance(data, str):
            data = data.encode("utf-8")
    else:
        path = Path(source)
        fname = name or str(path)
        try:
            data = path.read_bytes()
        except OSError as e:
            return fname, b"", f"cannot open the file ({e.strerror or e})"
    if not data.strip():
        return fname, b"", "empty file"
    return fname, data, None


def _kind(fname: str, data: bytes) -> str:
    ext = Path(fname).suffix.lower()
    head = data[:8]
    if head.startswith(b"\xd0\xcf\x11\xe0") or ext == ".xls":
        return "xls"
    if head.startswith(b"PK\x03\x04") or ext in (".xlsx", ".xlsm"):
        return "xlsx"
    if ext in (".json", ".jsonl", ".ndjson"):
        return "json"
    if ext not in (".csv", ".tsv", ".txt") and data.lstrip(b"\xef\xbb\xbf \t\r\n")[:1] in (b"[", b"{"):
        return "json"
    return "csv"


def _binary(data: bytes) -> bool:
    """Control bytes (tab and line breaks aside) in more than 5% of the first 8 KiB, and more than 8: no text file
    has them (a stray NUL or two are cleaned with a notice), random or compressed bytes have one in nine."""
    if data[:2] in (b"\xff\xfe", b"\xfe\xff"):  # UTF-16 with its BOM: every other byte is NUL in ASCII text
        return False
    head = data[:8192]
    return sum(1 for b in head if b < 32 and b not in (9, 10, 12, 13)) > max(8, 0.05 * len(head))


def _decode_text(data: bytes) -> tuple[str, str | None]:
    """(the text, the legacy encoding its non-UTF-8 lines were read in or None). UTF-16 with its BOM (Excel's
    "Unicode text"); else line by line: a line that is UTF-8 is read as UTF-8, and the others, when most non-ASCII
    lines are not UTF-8, as GB18030 (a GBK file) or, when most of those read as Western European text
    (:func:`_western`), as Windows-1252; else as undecodable.

    Line-wise so that one corrupt row is reported (its bytes become U+FFFD) instead of the whole file being
    mis-read, and so that the UTF-8 rows of a file with a few GBK or corrupt ones keep their text.
    """
    if data[:2] in (b"\xff\xfe", b"\xfe\xff"):
        return data.decode("utf-16", errors="replace"), None
    try:
        return data.decode("utf-8-sig"), None
    except UnicodeDecodeError:
        pass
    lines = data.split(b"\n")
    non_ascii = [ln for ln in lines if not ln.isascii()]
    legacy = [ln for ln in non_ascii if not _decodes(ln, "utf-8")]
    encoding = None if len(legacy) * 2 <= len(non_ascii) else "cp1252" if sum(map(_western, legacy)) * 2 > len(
        legacy) else "gb18030"

    def line(ln: bytes) -> str:
        if _decodes(ln, "utf-8"):
            return ln.decode("utf-8")
        return ln.decode(encoding if encoding and _decodes(ln, encoding) else "utf-8", errors="replace")

    return "\n".join(line(ln) for ln in lines).removeprefix("\ufeff"), encoding


LEGACY = {"gb18030": "GBK / GB18030 (Chinese Windows)", "cp1252": "Windows-1252 (Western European)"}
_LATIN_SANDWICH = re.compile(r"[A-Za-z][^\x00-\x7f][A-Za-z]")
_TWO_WIDE = re.compile(r"[^\x00-\x7f]{2}")


def _western(line: bytes) -> bool:
    """Whether a line that is not UTF-8 reads as Windows-1252 (Latin-1) text rather than GBK: read as GB18030 it
    fails, or gives lone Chinese characters inside Latin words (Cholécystectomie -> Chol閏ystectomie: é takes the
    next letter as its second byte), never two in a row as Chinese text has them."""
    if not _decodes(line, "cp1252"):
        return False
    try:
        text = line.decode("gb18030")
    except UnicodeDecodeError:
        return True
    return bool(_LATIN_SANDWICH.search(text)) and not _TWO_WIDE.search(text)


def _decodes(b: bytes, enc: str) -> bool:
    try:
        b.decode(enc)
        return True
    except UnicodeDecodeError:
        return False


AGAIN = "import the row again"  # what a row's problem asks; termnorm normalize --input reads by the same rules


def _csv_rows(data: bytes) -> tuple[list[tuple[int, list[str] | str]], set[int], str | None]:
    """(row number, cells or the row's problem) per row, the rows that held NUL bytes, and the legacy encoding
    read (:func:`_decode_text`). Rows are numbered as a spreadsheet shows the file (the header is row 1, a quoted
    note with line breaks is one row), so a row named in the report, and the ``source_row`` exports carry, is the
    row a person finds in Excel.

    A stray ``"`` at the start of a cell opens a quoted cell that swallows the following lines into one record. So
    a record that spans several lines is kept as one row (a quoted note with line breaks in another column is
    legitimate) only when its mention and terms cells hold no line break and none of its continuation lines reads,
    on its own, as a row of the file (as many cells as the header, a mention). Otherwise each of its physical lines
    is read on its own: the line whose quote never closes is reported, the lines below stay rows.
    """
    # the line breaks the csv module itself recognises (\n, \r\n, a lone \r), so line numbers match a reader's
    text, encoding = _decode_text(data)
    lines = io.StringIO(text, newline="").readlines()
    # NUL is removed before parsing (some csv versions refuse it) but remembered, for the row's notice
    nul_rows = {n for n, ln in enumerate(lines, start=1) if "\x00" in ln}
    lines = [ln.replace("\x00", "").rstrip("\r\n") for ln in lines]
    first = next((ln for ln in lines if ln.strip()), "")
    delimiter = max(("\t", ",", ";"), key=first.count) if any(d in first for d in "\t,;") else ","
    per_line = [(n, line_cells(line, delimiter, AGAIN)) for n, line in enumerate(lines, start=1)]
    records = _records(lines, delimiter)
    # the first filled rows only: a title row or two may come above the header
    filled = list(islice((cells for _, _, cells in records or () if any(c.strip() for c in cells)),
                         MAX_TITLE_ROWS + 1))
    header = filled[header_index(filled)] if filled else None
    col = find_column(header, MENTION_COLUMNS) if header is not None else None
    if records is None or col is None:
        return per_line, nul_rows, encoding  # _from_table reports the header
    tcol = find_column(header, TERMS_COLUMNS)
    spans: list[tuple[range, list[str] | str]] = []  # the lines of each row, its cells
    for start, end, cells in records:
        whole = start == end or not _rows_inside(per_line[start:end], col, len(header))
        broken = next((what for c, what in ((col, "mention"), (tcol, "gold terms"))
                       if c is not None and c < len(cells) and "\n" in cells[c]), None)
        if whole and not broken:
            spans.append((range(start, end + 1), cells))
        elif whole and len(cells) == len(header):  # well quoted, but a mention is one line: say that, not "quote"
            first = len(spans) + 1
            spans.append((range(start, start + 1), f"the quoted {broken} holds a line break ({end - start + 1} "
                                                   "lines) but must be one line: join them and import the row"))
            spans.extend((range(n, n + 1), f"continues the quoted {broken} of row {first} (a line break in it)")
                         for n in range(start + 1, end + 1))
        else:
            spans.extend((range(n, n + 1), c) for n, c in per_line[start - 1:end])
    return ([(row, cells if isinstance(cells, str) else extra_cells(cells, len(header), delimiter, AGAIN) or cells)
             for row, (_, cells) in enumerate(spans, start=1)],
            {row for row, (lines_of, _) in enumerate(spans, start=1) if nul_rows.intersection(lines_of)}, encoding)


def _records(lines: list[str], delimiter: str) -> list[tuple[int, int, list[str]]] | None:
    """(first line, last line, cells) of each CSV record read the standard way; None if the csv module fails."""
    reader = csv.reader(io.StringIO("".join(ln + "\n" for ln in lines), newline=""), delimiter=delimiter)
    out, last = [], 0
    try:
        for cells in reader:
            out.append((last + 1, reader.line_num, cells))
            last = reader.line_num
    except csv.Error:
        return None
    return out


def _rows_inside(continuation, col: int, width: int) -> bool:
    """Whether a continuation line of a record spanning lines reads as a row of the file on its own: rows a
    stray quote swallowed, not a quoted multi-line note."""
    return any(isinstance(c, list) and len(c) >= width and col < len(c) and c[col].strip() for _, c in continuation)


def _xlsx_rows(data: bytes):
    """(rows, header problem, formula cells, sheets): the rows of the first sheet with a mention column (else
    the first sheet), read by termnorm.batch_io.xlsx_rows; the names of that sheet and of the others with a
    mention column (none for a one-sheet workbook). A cell holding a formula without a saved value (a note typed
    "=== 出院小结" that a tool stored as a formula) keeps its text, and its (row, column) is listed."""
    import openpyxl
    from openpyxl.utils import get_column_letter

    from termnorm.batch_io import xlsx_rows

    try:
        wb = openpyxl.load_workbook(io.BytesIO(data), read_only=True, data_only=True)
    except (zipfile.BadZipFile, KeyError, OSError, ValueError) as e:
        return [], f"not a readable XLSX workbook ({type(e).__name__}: {e})", [], []
    try:
        with_mentions = []  # the sheets whose header (first row with text) names a mention column
        for i, ws in enumerate(wb.worksheets):
            ws.reset_dimensions()  # some writers store wrong dimensions; read every row
            texts = ([cell_text(v) for v in r] for r in ws.iter_rows(values_only=True))
            first = list(islice((c for c in texts if any(c)), MAX_TITLE_ROWS + 1))
            if first and find_column(first[header_index(first)], MENTION_COLUMNS) is not None:
                with_mentions.append(i)
        names = [ws.title for ws in wb.worksheets]  # sheetnames would count chart sheets too
    finally:
        wb.close()
    sheet = with_mentions[0] if with_mentions else 0
    rows = list(xlsx_rows(data, sheet, reset=True))
    out = [(n, [cell_text(v) for v in r]) for n, r, _ in rows]
    nonblank = [c for _, c in out if any(c)][:MAX_TITLE_ROWS + 1]  # the header, not a title row above it
    header = nonblank[header_index(nonblank)] if nonblank else []
    named = [(n, get_column_letter(j + 1) + (f" ({header[j]})" if j < len(header) and header[j] else ""))
             for n, _, at in rows for j in at]
    # the sheet read first, then the others holding mentions; [] for a one-sheet workbook
    sheets = [names[sheet]] + [names[i] for i in with_mentions if i != sheet] if len(names) > 1 else []
    return out, None, named, sheets


def _from_table(fname, rows, header_problem, nul_rows: Collection[int] = ()) -> MentionsRead:
    """Rows of a CSV / TSV / XLSX sheet; ``nul_rows``: lines whose NUL bytes were removed before parsing."""
    if header_problem:
        return _failed(fname, header_problem)
    kept = [(i, c) for i, c in rows if isinstance(c, str) or any(x.strip() for x in c)]  # blank lines are not rows
    titles = kept[:header_index([c for _, c in kept[:MAX_TITLE_ROWS + 1]])]  # named below, not data rows
    kept = kept[len(titles):]
    # ...but a blank line between the header and the last row is named: it may be a row someone emptied
    blank = [i for i, c in rows if kept and kept[0][0] < i < kept[-1][0] and not isinstance(c, str)
             and not any(x.strip() for x in c)]
    rows = kept
    if not rows:
        return _failed(fname, "no header row")
    head_row, header = rows[0]
    if isinstance(header, str):
        return _failed(fname, f"unreadable header (row {head_row}): {header}")
    col = find_column(header, MENTION_COLUMNS)
    if col is None:
        shown = ", ".join(repr(h) for h in header[:8])
        return _failed(fname, f"missing column: none of {'/'.join(MENTION_COLUMNS)} in the header "
                              f"(row {head_row}: {shown})")
    if len(rows) == 1:
        return _failed(fname, f"no data rows below the header (row {head_row})")
    tcol = find_column(header, TERMS_COLUMNS)
    dcol = find_column(header, DOCUMENT_COLUMNS)
    out = MentionsRead(fname, n_read=len(rows) - 1)
    if titles:
        said = "; ".join(f"row {i}: {' '.join(x for x in c if x.strip())[:60]!r}" for i, c in titles)
        out.notices.append(ImportProblem(fname, None, f"the header is row {head_row}; the {len(titles)} row(s) "
                                                      f"above it read as a title, not as mentions ({said})"))
    if blank:
        shown = ", ".join(map(str, blank[:20])) + (f" and {len(blank) - 20} more" if len(blank) > 20 else "")
        out.notices.append(ImportProblem(fname, None, f"{len(blank)} blank row(s) skipped (no cell filled): "
                                                      f"row {shown}"))
    for row, cells in rows[1:]:
        if isinstance(cells, str):
            out.errors.append(ImportProblem(fname, row, cells))
            continue
        text, found = text_cell(cells[col] if col < len(cells) else "", restore=True)
        terms, in_terms = gold_terms(cells[tcol] if tcol is not None and tcol < len(cells) else None, restore=True)
        take_row(out, row, text, terms, found | in_terms | ({"\x00"} if row in nul_rows else set()),
                 cells[dcol] if dcol is not None and dcol < len(cells) else None, spreadsheet=True)
    if tcol is not None:
        _say_gold(out, f"column {header[tcol].strip()!r}")
    if dcol is not None:
        _say_documents(out, f"column {header[dcol].strip()!r}")
    unread = [h.strip() for j, h in enumerate(header) if j not in (col, tcol, dcol) and h.strip()]
    if unread:  # a team test's "vocabulary" column was dropped without a word (its rows went to the page's choice)
        read = [f"{what} from {header[j].strip()!r}" for what, j in (("the mentions", col), ("gold terms", tcol),
                                                                     ("documents", dcol)) if j is not None]
        shown = ", ".join(map(repr, unread[:10])) + (" …" if len(unread) > 10 else "")
        out.notices.append(ImportProblem(fname, None, f"{len(unread)} column(s) not read: {shown} (read: "
                                                      f"{', '.join(read)}; every row goes to the batch's vocabulary)"))
    return out


def _say_gold(out: MentionsRead, where: str) -> None:
    """Where the file's gold terms came from, when rows carry them (``MentionsRead.gold_from``)."""
    if any(m.terms for m in out.good):
        out.gold_from = where


def _say_documents(out: MentionsRead, where: str) -> None:
    """A notice of where the documents came from and how many rows have one (a coder checks the column)."""
    n = sum(1 for m in out.good if m.document)
    out.notices.append(ImportProblem(out.file, None, f"documents read from {where}: {n:,} of {len(out.good):,} "
                                                     "imported rows have one"))


def _from_json(fname, data) -> MentionsRead:
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        return _failed(fname, f"undecodable: JSON must be UTF-8 ({e.reason} at byte {e.start})")
    out = MentionsRead(fname)
    items: list[tuple[int, Any]] = []
    try:
        # strict=False lets raw control characters through inside strings: they are cleaned with a notice
        doc = json.loads(text, strict=False)
    except json.JSONDecodeError as e:
        if not (fname.lower().endswith((".jsonl", ".ndjson")) or e.msg == "Extra data"):
            return _failed(fname, f"not valid JSON: {e.msg} (line {e.lineno}, column {e.colno})")
        # split on "\n" only: str.splitlines() would also cut at U+2028 / U+0085, which JSON strings may hold raw
        for n, ln in enumerate(text.split("\n"), start=1):  # JSON lines: one object per line
            if not ln.strip():
                continue
            try:
                items.append((n, json.loads(ln, strict=False)))
            except json.JSONDecodeError as le:
                out.errors.append(ImportProblem(fname, n, f"not valid JSON: {le.msg}"))
    else:
        if isinstance(doc, dict):
            doc = [doc] if any(k in doc for k in JSON_TEXT_KEYS) else doc
        if not isinstance(doc, list):
            return _failed(fname, "top level is not a list of objects (expected CHIP-CDN: [{\"text\": ...}])")
        if not doc:
            return _failed(fname, "no data rows: the JSON list is empty")
        items = list(enumerate(doc, start=1))
    out.n_read = len(items) + len(out.errors)  # a line that is not JSON was a row too (rejected above)
    keys: set[str] = set()  # the document fields the items use
    gold_keys: set[str] = set()  # and the gold terms' fields
    for row, obj in items:
        if not isinstance(obj, dict):
            out.errors.append(ImportProblem(fname, row, f"not an object ({type(obj).__name__})"))
            continue
        key = next((k for k in JSON_TEXT_KEYS if k in obj), None)
        if key is None:
            out.errors.append(ImportProblem(fname, row, "missing field 'text'"))
            continue
        value = obj[key]
        if isinstance(value, bool) or not isinstance(value, (str, int, float, type(None))):
            out.errors.append(ImportProblem(fname, row, f"field '{key}' is not a string"))
            continue
        text, found = text_cell(value, restore=False)
        tkey = next((k for k in JSON_TERMS_KEYS if k in obj), None)
        terms, in_terms = gold_terms(obj[tkey] if tkey else None, restore=False)
        dkey = next((k for k in DOCUMENT_COLUMNS if k in obj), None)
        keys.update([dkey] if dkey else [])
        gold_keys.update([tkey] if tkey else [])
        take_row(out, row, text, terms, found | in_terms, obj[dkey] if dkey else None)
    if gold_keys:
        _say_gold(out, "field " + " / ".join(repr(k) for k in sorted(gold_keys)))
    if keys:
        _say_documents(out, "field " + " / ".join(repr(k) for k in sorted(keys)))
    out.errors.sort(key=lambda p: p.row or 0)
    return out
