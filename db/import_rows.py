"""What a row of an imported mention file may hold, and how its problems are reported.

The building blocks of ``db.imports`` (which reads the files): the accepted column and field names, the
records of a reading (:class:`ImportProblem`, :class:`MentionsRead`, :class:`ImportReport`), the checks and
cleaning of one cell (:func:`validate_mention`, :func:`split_terms`, :func:`clean_text`), and
:func:`neutralise_formula` / :func:`restore_formula`, with which exports keep spreadsheet formulas inert and
imports take that mark off again.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import NamedTuple

from termnorm.records import MAX_MENTION_CHARS as MAX_MENTION_CHARS, LabelledMention
MENTION_COLUMNS = ("mention", "text", "原始词")
TERMS_COLUMNS = ("terms", "gold", "gold_terms", "标准词", "normalized_result")
JSON_TEXT_KEYS = ("text", "mention", "原始词")
JSON_TERMS_KEYS = ("normalized_result", "terms", "标准词")
# the text a mention was found in (a note, an abstract): the engine reads the abbreviations it defines
DOCUMENT_COLUMNS = ("document", "context", "note", "abstract", "原文", "病历")
# ~25 pages: a longer cell is a whole record export, not the note the mention came from
MAX_DOCUMENT_CHARS = 100_000
# a GBK row in a UTF-8 file is valid GB18030 yet undecodable here: the file is read in one encoding (imports)
UNDECODABLE = ("undecodable text: this row is not in the file's encoding (UTF-8 and GBK rows mixed, or damaged "
               "bytes): save the whole file as UTF-8 and import the row again")
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
    # where gold terms came from ("column 'terms'"), "" if no row has them: a re-imported export turns
    # decisions into training and evaluation data, which the person importing must be told
    gold_from: str = ""
    sheets_left: list[str] = field(default_factory=list)  # other sheets of a workbook holding mentions, not read

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
    # mentions made (a pre-coded file: one per distinct text, fewer than the rows; db.precoded), None: one per row
    n_mentions: int | None = None
    gold_from: str = ""  # MentionsRead.gold_from
    n_gold: int = 0  # imported rows with gold terms
    sheets_left: list[str] = field(default_factory=list)  # MentionsRead.sheets_left
    # a batch of the vocabulary already holding these very mentions ({"id", "name", "created_at", "n"}): the file
    # imported again, so nothing was imported (db.batches.import_mentions, unless told to import it anyway)
    duplicate_of: dict | None = None

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


# What exports and spreadsheets write for an empty cell: such a "mention" would be coded as a term.
PLACEHOLDERS = frozenset({"null", "none", "nan", "n/a", "#n/a", "na", "nil", "无", "空", "暂无", "不详"})


def validate_mention(text) -> str | None:
    """The problem with one mention text, or None if it can be coded."""
    if text is None or not str(text).strip():
        return "empty mention"
    text = str(text).strip()
    if text.lower() in PLACEHOLDERS:
        return f"no mention: {text!r} stands for an empty cell"
    if not re.search(r"[^\W_]", text):
        return f"no mention: {text!r} holds no letter, digit or character"
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
        value = cell_text(value)
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


def cell_text(v) -> str:
    """A cell's value as stripped text (None: empty; a whole float such as 12.0 from a spreadsheet: "12")."""
    if v is None:
        return ""
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return str(v).strip()


def find_column(header: list[str], names: tuple[str, ...]) -> int | None:
    """The index of the first of ``names`` in ``header`` (case and a BOM ignored), else None."""
    norm = [h.strip().lstrip("\ufeff").lower() for h in header]
    for n in names:
        if n in norm:
            return norm.index(n)
    return None


#: rows above the header read as a sheet's title (one filled cell each: a merged "XX医院手术登记" row), at most
MAX_TITLE_ROWS = 5


def header_index(rows: list) -> int:
    """Where the header is among a table's first filled ``rows`` (each a list of cells): the first row naming a
    mention column when only title rows (one filled cell at most) come before it, else 0. A hospital's sheet
    often carries a title above its header; read as the header, it hid the mention column."""
    for i, cells in enumerate(rows[:MAX_TITLE_ROWS + 1]):  # the callers pass the first rows only
        if isinstance(cells, str):  # a row that could not be read
            return 0
        if find_column(cells, MENTION_COLUMNS) is not None:
            return i
        if sum(1 for c in cells if str(c).strip()) > 1:
            return 0
    return 0


def text_cell(value, restore: bool) -> tuple[str, set[str]]:
    """A mention cell as text, cleaned (:func:`clean_text`); ``restore``: a spreadsheet's formula mark taken off."""
    text = cell_text(value)
    return clean_text(restore_formula(text) if restore else text)


def gold_terms(value, restore: bool) -> tuple[list[str], set[str]]:
    """A gold-terms cell (text or a JSON list) as clean term names, and the characters cleaning removed."""
    if value is None:
        return [], set()
    if isinstance(value, (list, tuple)):
        cleaned = [clean_text(cell_text(v)) for v in value]
        return split_terms([t for t, _ in cleaned]), set().union(*(f for _, f in cleaned))
    text, found = text_cell(value, restore)
    return split_terms(text), found


def document_cell(value, restore: bool = False) -> tuple[str, str | None]:
    """A document cell as text, and a notice when it cannot be used (the row is imported without it);
    ``restore``: a spreadsheet's formula mark taken off, as from a mention (an exported note imports back)."""
    if value is None:
        return "", None
    if not isinstance(value, (str, int, float)) or isinstance(value, bool):
        return "", f"document is not text ({type(value).__name__}): imported without it"
    text = cell_text(value)
    text = _CONTROLS.sub("", (restore_formula(text) if restore else text).replace("\r\n", "\n").replace("\r", "\n"))
    if len(text) > MAX_DOCUMENT_CHARS:
        return "", f"document longer than {MAX_DOCUMENT_CHARS:,} characters ({len(text):,}): imported without it"
    return text, None


def take_row(out: MentionsRead, row: int, text: str, terms: list[str], found: set[str], document=None,
             spreadsheet: bool = False) -> None:
    """File one data row as good (with a notice if it was cleaned or its document dropped) or as a problem."""
    problem = validate_mention(text)
    if problem:
        out.errors.append(ImportProblem(out.file, row, problem))
        return
    doc, doc_problem = document_cell(document, restore=spreadsheet)
    out.good.append(LabelledMention(text, terms, row, document=doc))
    notes = [n for n in (control_notice(found) if found else None, doc_problem) if n]
    if notes:
        out.notices.append(ImportProblem(out.file, row, "; ".join(notes)))
