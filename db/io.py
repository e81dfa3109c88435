"""Import of mention files (the export of decisions is ``db.exports``).

Import (``read_mentions`` / ``read_mentions_report``) accepts what coders actually receive:

* CSV / TSV (UTF-8, UTF-8 with BOM, or GB18030 as Excel writes it on Chinese
  Windows) and XLSX, with a column named ``mention``, ``text`` or ``原始词``
  and optionally a column of gold terms (``terms``, ``gold``, ``标准词``,
  ``normalized_result``; several names joined by ``##`` or ``|``);
* CHIP-CDN JSON (a list of ``{"text", "normalized_result"}`` objects) and
  JSON lines.

No row is dropped without being named: every data row read is either imported
or an :class:`ImportProblem` (file, row, problem) in the report, and bad rows
never block good ones. What was changed in an imported row (control characters
removed) is a notice. A wholly unreadable file gives one clear problem (row
None), never an exception. Rows are counted as a person counts them:
spreadsheet / CSV line numbers (header = row 1), the 1-based item number in a
JSON list, the line number in JSON lines.

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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from termnorm.records import LabelledMention

# 500 characters is ~4x the longest real mention (122 characters over the 22,000
# CHIP-CDN + Yidu-N7K mentions, median 10): a longer "mention" is a pasted
# paragraph or a wrong column, and would make a useless coding task.
MAX_MENTION_CHARS = 500
MENTION_COLUMNS = ("mention", "text", "原始词")
TERMS_COLUMNS = ("terms", "gold", "gold_terms", "标准词", "normalized_result")
JSON_TEXT_KEYS = ("text", "mention", "原始词")
JSON_TERMS_KEYS = ("normalized_result", "terms", "标准词")
UNDECODABLE = "undecodable text (neither UTF-8 nor GB18030)"
UNBALANCED_QUOTE = 'unbalanced quote (") in this row: fix the quoting and import the row again'

# A spreadsheet runs a cell starting with one of these as a formula (OWASP "CSV injection").
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def neutralise_formula(text: str) -> str:
    """``text`` with a leading ``'`` when a spreadsheet would run it as a formula (undone by restore_formula).

    >>> [neutralise_formula(t) for t in ("=1+2", "-5", "@x", "胆囊切除", "'=a")]
    ["'=1+2", "'-5", "'@x", '胆囊切除', "''=a"]
    """
    # quotes already before a trigger get one more too, so that restore_formula(neutralise_formula(t)) == t for every t
    return "'" + text if text.lstrip("'").startswith(FORMULA_STARTS) else text


def restore_formula(text: str) -> str:
    """``text`` without the one leading ``'`` that neutralise_formula put before a formula trigger.

    >>> [restore_formula(t) for t in ("'=1+2", "'-5", "'quoted'", "=raw", "''=a")]
    ['=1+2', '-5', "'quoted'", '=raw', "'=a"]
    """
    return text[1:] if text.startswith("'") and text.lstrip("'").startswith(FORMULA_STARTS) else text


class ImportProblem(NamedTuple):
    """One rejected row, or a notice on an imported row (``row`` None: the whole file)."""

    file: str
    row: int | None
    problem: str

    def __str__(self) -> str:
        return f"{self.file}, row {self.row}: {self.problem}" if self.row is not None else f"{self.file}: {self.problem}"


@dataclass
class MentionsRead:
    """What a file held: the good rows, the problems (file-level ones have row None), notices on good rows."""

    file: str
    good: list[LabelledMention] = field(default_factory=list)
    errors: list[ImportProblem] = field(default_factory=list)
    notices: list[ImportProblem] = field(default_factory=list)
    n_read: int = 0  # data rows read (blank lines are not rows); each is in good or in errors

    @property
    def n_rejected(self) -> int:
        return sum(1 for e in self.errors if e.row is not None)


@dataclass
class ImportReport:
    """What ``db.services.import_mentions`` did: the batch made (None if no good row), the counts, the
    rows refused and file-level problems (``errors``) and the notices on imported rows.

    ``n_read == n_imported + n_rejected`` for every file.
    """

    file: str
    batch_id: int | None = None
    n_read: int = 0
    n_imported: int = 0
    n_rejected: int = 0
    errors: list[ImportProblem] = field(default_factory=list)
    notices: list[ImportProblem] = field(default_factory=list)

    @property
    def n_ok(self) -> int:
        """The rows imported (the name before ``n_imported``)."""
        return self.n_imported

    @n_ok.setter
    def n_ok(self, n: int) -> None:
        self.n_imported = n

    @property
    def n_bad(self) -> int:
        return self.n_rejected

    @property
    def rejected(self) -> list[ImportProblem]:
        return [e for e in self.errors if e.row is not None]

    @property
    def file_problems(self) -> list[ImportProblem]:
        return [e for e in self.errors if e.row is None]

    def summary(self) -> str:
        s = (f"{self.file}: {_plural(self.n_read, 'row')} read, {self.n_imported} imported, "
             f"{self.n_rejected} rejected, {_plural(len(self.notices), 'notice')}")
        return s + "".join(f"; {e.problem}" for e in self.file_problems)


def _plural(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


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
    fname, data, problem = _load(source, name)
    if problem:
        return _failed(fname, problem)
    kind = _kind(fname, data)
    try:
        if kind == "xls":
            return _failed(fname, "legacy .xls workbook is not supported: save it as .xlsx or CSV")
        if kind == "xlsx":
            rows, header_problem = _xlsx_rows(data)
            return _from_table(fname, rows, header_problem)
        if kind == "json":
            return _from_json(fname, data)
        rows, nul_rows = _csv_rows(data)
        return _from_table(fname, rows, None, nul_rows)
    except Exception as e:  # last resort: the UI must get a report, never a traceback
        return _failed(fname, f"unreadable file ({type(e).__name__}: {e})")


def _failed(fname: str, problem: str) -> MentionsRead:
    return MentionsRead(fname, errors=[ImportProblem(fname, None, problem)])


def validate_mention(text) -> str | None:
    """The problem with one mention text, or None if it can be coded."""
    if text is None or not str(text).strip():
        return "empty mention"
    text = str(text).strip()
    if "\ufffd" in text:
        return UNDECODABLE
    if len(text) > MAX_MENTION_CHARS:
        return f"mention too long ({len(text)} > {MAX_MENTION_CHARS} characters)"
    return None


def split_terms(value) -> list[str]:
    """Gold terms from a cell: a list, or names joined by ``##`` (CHIP-CDN / Yidu-N7K) or ``|``."""
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        items = [str(v) for v in value]
    else:
        value = _cell(value)
        sep = "##" if "##" in value else "|"
        items = value.split(sep)
    out: list[str] = []
    for t in items:
        t = t.strip()
        if t and t not in out:
            out.append(t)
    return out


# C0 / C1 controls and zero-width characters are invisible: they make two equal-looking
# mentions differ (and a NUL breaks tools downstream). Tab / CR / LF separate words: a space.
_CONTROLS = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u200b-\u200d\ufeff]")
_BREAKS = re.compile("[ \t\r\n]*[\t\r\n][ \t\r\n]*")
_SPACED = "\t\r\n"


def clean_text(text: str) -> tuple[str, set[str]]:
    """``text`` stripped, without control / zero-width characters (tab, CR, LF: one space), and those found.

    >>> text, found = clean_text(" 胆囊\\x00切除\\t术\\u200b ")
    >>> text, sorted(found)
    ('胆囊切除 术', ['\\x00', '\\t', '\\u200b'])
    """
    text = text.strip()
    found = set(_CONTROLS.findall(text)) | {c for c in _SPACED if c in text}
    if not found:
        return text, found
    return _BREAKS.sub(" ", _CONTROLS.sub("", text)).strip(), found


def control_notice(found: set[str]) -> str:
    """What cleaning did to a row, e.g. ``control character U+0000 removed``."""
    def codes(chars):
        return ", ".join(f"U+{ord(c):04X}" for c in sorted(chars))

    removed = {c for c in found if c not in _SPACED}
    spaced = found & set(_SPACED)
    parts = []
    if removed:
        parts.append(f"control character{'s' if len(removed) > 1 else ''} {codes(removed)} removed")
    if spaced:
        parts.append(f"tab / line break {codes(spaced)} replaced by a space")
    return "; ".join(parts)


def _text_cell(value, restore: bool) -> tuple[str, set[str]]:
    text = _cell(value)
    return clean_text(restore_formula(text) if restore else text)


def _gold_terms(value, restore: bool) -> tuple[list[str], set[str]]:
    if value is None:
        return [], set()
    if isinstance(value, (list, tuple)):
        cleaned = [clean_text(_cell(v)) for v in value]
        return split_terms([t for t, _ in cleaned]), set().union(*(f for _, f in cleaned))
    text, found = _text_cell(value, restore)
    return split_terms(text), found


def _take(out: MentionsRead, row: int, text: str, terms: list[str], found: set[str]) -> None:
    """File one data row as good (with a notice if it was cleaned) or as a problem."""
    problem = validate_mention(text)
    if problem:
        out.errors.append(ImportProblem(out.file, row, problem))
        return
    out.good.append(LabelledMention(text, terms, row))
    if found:
        out.notices.append(ImportProblem(out.file, row, control_notice(found)))


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


def _cell(v) -> str:
    if v is None:
        return ""
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return str(v).strip()


def _decode_text(data: bytes) -> str:
    """UTF-8 unless most non-ASCII lines only decode as GB18030.

    Line-wise so that one corrupt row of a UTF-8 file is reported (its bytes
    become U+FFFD) instead of the whole file being mis-read as GB18030.
    """
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        pass
    lines = data.split(b"\n")
    non_ascii = [ln for ln in lines if not ln.isascii()]
    bad_utf8 = sum(1 for ln in non_ascii if not _decodes(ln, "utf-8"))
    if bad_utf8 * 2 > len(non_ascii):
        return "\n".join(ln.decode("gb18030", errors="replace") for ln in lines)
    return data.decode("utf-8", errors="replace").removeprefix("\ufeff")


def _decodes(b: bytes, enc: str) -> bool:
    try:
        b.decode(enc)
        return True
    except UnicodeDecodeError:
        return False


def _csv_rows(data: bytes) -> tuple[list[tuple[int, list[str] | str]], set[int]]:
    """(line number, cells or the row's problem) per row, and the lines that held NUL bytes.

    A stray ``"`` at the start of a cell opens a quoted cell that swallows the
    following lines into one record. So a record that spans several lines is
    kept as one row (numbered by its first line: a quoted note with line breaks
    in another column is legitimate) only when its mention and terms cells hold
    no line break and none of its continuation lines reads, on its own, as a
    row of the file (as many cells as the header, a mention). Otherwise each of
    its physical lines is read on its own: the line whose quote never closes is
    reported, the lines below stay rows.
    """
    # the line breaks the csv module itself recognises (\n, \r\n, a lone \r), so line numbers match a reader's
    lines = io.StringIO(_decode_text(data), newline="").readlines()
    # NUL is removed before parsing (some csv versions refuse it) but remembered, for the row's notice
    nul_rows = {n for n, ln in enumerate(lines, start=1) if "\x00" in ln}
    lines = [ln.replace("\x00", "").rstrip("\r\n") for ln in lines]
    first = next((ln for ln in lines if ln.strip()), "")
    delimiter = max(("\t", ",", ";"), key=first.count) if any(d in first for d in "\t,;") else ","
    per_line = [(n, _line_cells(line, delimiter)) for n, line in enumerate(lines, start=1)]
    records = _records(lines, delimiter)
    header = next((cells for _, _, cells in records if any(c.strip() for c in cells)), None)
    col = _column(header, MENTION_COLUMNS) if header is not None else None
    if records is None or col is None:
        return per_line, nul_rows  # _from_table reports the header
    tcol = _column(header, TERMS_COLUMNS)
    out: list[tuple[int, list[str] | str]] = []
    for start, end, cells in records:
        if start == end or _one_row(cells, per_line[start:end], col, tcol, len(header)):
            out.append((start, cells))
        else:
            out.extend(per_line[start - 1:end])
    return out, nul_rows


def _line_cells(line: str, delimiter: str) -> list[str] | str:
    """One physical line's cells, or why it cannot be read on its own."""
    try:
        # fed with its line break, a cell whose quote never closes ends in that "\n"
        cells = next(csv.reader([line + "\n"], delimiter=delimiter), [])
    except csv.Error as e:  # e.g. a cell over csv.field_size_limit()
        return f"unreadable CSV row ({e})"
    return UNBALANCED_QUOTE if any("\n" in c for c in cells) else cells


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


def _one_row(cells: list[str], continuation, col: int, tcol: int | None, width: int) -> bool:
    """Whether a record spanning lines is one row (a quoted multi-line note), not rows a stray quote swallowed."""
    for c in (col, tcol):
        if c is not None and c < len(cells) and "\n" in cells[c]:
            return False
    return not any(isinstance(c, list) and len(c) >= width and col < len(c) and c[col].strip()
                   for _, c in continuation)


def _xlsx_rows(data: bytes):
    import openpyxl

    try:
        wb = openpyxl.load_workbook(io.BytesIO(data), read_only=True, data_only=True)
    except (zipfile.BadZipFile, KeyError, OSError, ValueError) as e:
        return [], f"not a readable XLSX workbook ({type(e).__name__}: {e})"
    try:
        first_rows = None
        for ws in wb.worksheets:
            ws.reset_dimensions()  # some writers store wrong dimensions; read every row
            rows = [(i, [_cell(v) for v in r]) for i, r in enumerate(ws.iter_rows(values_only=True), start=1)]
            header = next((c for _, c in rows if any(c)), [])
            if _column(header, MENTION_COLUMNS) is not None:
                return rows, None
            if first_rows is None:
                first_rows = rows
        return first_rows or [], None
    finally:
        wb.close()


def _column(header: list[str], names: tuple[str, ...]) -> int | None:
    norm = [h.strip().lstrip("\ufeff").lower() for h in header]
    for n in names:
        if n in norm:
            return norm.index(n)
    return None


def _from_table(fname, rows, header_problem, nul_rows: Collection[int] = ()) -> MentionsRead:
    """Rows of a CSV / TSV / XLSX sheet; ``nul_rows``: lines whose NUL bytes were removed before parsing."""
    if header_problem:
        return _failed(fname, header_problem)
    kept = [(i, c) for i, c in rows if isinstance(c, str) or any(x.strip() for x in c)]  # blank lines are not rows
    # ...but a blank line between the header and the last row is named: it may be a row someone emptied
    blank = [i for i, c in rows if kept and kept[0][0] < i < kept[-1][0] and not isinstance(c, str)
             and not any(x.strip() for x in c)]
    rows = kept
    if not rows:
        return _failed(fname, "no header row")
    head_row, header = rows[0]
    if isinstance(header, str):
        return _failed(fname, f"unreadable header (row {head_row}): {header}")
    col = _column(header, MENTION_COLUMNS)
    if col is None:
        shown = ", ".join(repr(h) for h in header[:8])
        return _failed(fname, f"missing column: none of {'/'.join(MENTION_COLUMNS)} in the header "
                              f"(row {head_row}: {shown})")
    if len(rows) == 1:
        return _failed(fname, f"no data rows below the header (row {head_row})")
    tcol = _column(header, TERMS_COLUMNS)
    out = MentionsRead(fname, n_read=len(rows) - 1)
    if blank:
        shown = ", ".join(map(str, blank[:20])) + (f" and {len(blank) - 20} more" if len(blank) > 20 else "")
        out.notices.append(ImportProblem(fname, None, f"{len(blank)} blank row(s) skipped (no cell filled): "
                                                      f"row {shown}"))
    for row, cells in rows[1:]:
        if isinstance(cells, str):
            out.errors.append(ImportProblem(fname, row, cells))
            continue
        text, found = _text_cell(cells[col] if col < len(cells) else "", restore=True)
        terms, in_terms = _gold_terms(cells[tcol] if tcol is not None and tcol < len(cells) else None, restore=True)
        _take(out, row, text, terms, found | in_terms | ({"\x00"} if row in nul_rows else set()))
    return out


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
        text, found = _text_cell(value, restore=False)
        tkey = next((k for k in JSON_TERMS_KEYS if k in obj), None)
        terms, in_terms = _gold_terms(obj[tkey] if tkey else None, restore=False)
        _take(out, row, text, terms, found | in_terms)
    out.errors.sort(key=lambda p: p.row or 0)
    return out
