"""Reading vocabularies (and keyword lists) from the files coders actually have.

Every approach of methods.md (A..E) ranks *term names* of one vocabulary;
this module turns the published vocabularies, and a hospital's own list, into
a :class:`~termnorm.vocabulary.Vocabulary`:

===================  ===========================================================
format               file
===================  ===========================================================
``code_name``        no header, ``code, name`` per row: ICD-10 北京临床版 v601
                     ``.xlsx`` (CHIP-CDN) and Yidu-N7K ``code.txt`` (TAB).
``vocab_table``      CSV / TSV / XLSX with a header row naming ``code``, ``name``
                     and optional ``synonyms`` (``|`` or ``;`` separated) and
                     ``parent``; Chinese headers 编码/代码, 名称/标准词, 同义词, 上级编码.
``icd_tree``         ICD-9-CM-3 医保版 tree JSON ``{code: {code, term_name,
                     father, child, level, level_name}}``.
``medic``            CTD MEDIC ``id|alt ids||name|synonym|synonym...`` (English).
===================  ===========================================================

The format is recognised from the file itself (:func:`sniff_format`: magic
bytes, extension, first row); ``format=`` overrides it.

What a coder importing their own list gets wrong, and what happens:

* UTF-8 with BOM, GBK/GB18030 (Excel on Chinese Windows) and UTF-16 ("Unicode
  text" export) are decoded (tried in that order); anything else raises
  :class:`~termnorm.errors.DataFormatError` naming the first bad line.
* Blank lines / rows are skipped; duplicated rows are harmless; stray BOMs and
  surrounding blanks in cells are removed; integral numbers stored as Excel
  numbers (a code typed as ``4501``) are read back without ``.0``.
* A header the loader does not recognise would otherwise silently become a
  term, so a first row whose code cell has no digit is refused with a hint.
* Legacy ``.xls`` and non-zip ``.xlsx`` files are refused with a hint.

Row numbers in errors are 1-based lines / spreadsheet rows; for JSON inputs
they are the 1-based position of the item (node) in the file.
"""

from __future__ import annotations

import csv
import html
import io
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import DataFormatError
from ..records import KEYWORD_KINDS
from ..vocabulary import Vocabulary

# ---------------------------------------------------------------------------
# formats
# ---------------------------------------------------------------------------
VOCAB_FORMATS = ("code_name", "vocab_table", "icd_tree", "medic")
LABELLED_FORMATS = ("cdn_json", "labelled_table", "pubtator")
ALL_FORMATS = VOCAB_FORMATS + LABELLED_FORMATS

# Header aliases, compared after _header_key() (lower case, no blanks / _ / -).
CODE_HEADERS = {
    "code", "codes", "编码", "代码", "icd编码", "icdcode", "疾病编码", "手术编码", "conceptid", "id",
}
NAME_HEADERS = {
    "name", "term", "标准词", "名称", "标准名称", "标准术语", "术语", "疾病名称", "手术名称",
    "诊断名称", "手术操作名称", "preferredname",
}
SYNONYM_HEADERS = {"synonyms", "synonym", "同义词", "别名", "近义词"}
PARENT_HEADERS = {"parent", "parentcode", "father", "父编码", "上级编码", "父节点"}
MENTION_HEADERS = {"mention", "mentions", "text", "原始词", "原词", "原始名称", "原始诊断", "原始手术"}
TERMS_HEADERS = {"terms", "normalizedresult", "标准词", "gold", "labels", "label"}

# Several synonyms in one cell: '|' or ';' (ASCII or full width). Not '、' or
# ',': both occur inside ICD names ("颅、脑和脑膜的其他手术", "霍乱,由于...").
_SYNONYM_SPLIT = re.compile(r"[|;｜；]")
_CJK = re.compile(r"[\u3400-\u9fff]")
_PUBTATOR_TEXT = re.compile(r"^[^\t|]+\|[ta]\|")
_MEDIC_LINE = re.compile(r"^[^\t|]+(\|[^\t|]*)*\|\|[^|\t]")


def _header_key(s: str) -> str:
    return re.sub(r"[\s_\-]+", "", s).lower()


def _clean(s: str) -> str:
    # A BOM glued to a value happens when exports are concatenated.
    return s.strip().strip("\ufeff").strip()


def _cell_str(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    return _clean(str(v))


# ---------------------------------------------------------------------------
# reading a file once: text (with encoding fallback), rows, JSON, xlsx
# ---------------------------------------------------------------------------
@dataclass
class Source:
    """A file read once; loaders and :func:`sniff_format` share it."""

    path: Path
    kind: str  # "xlsx" | "text"
    text: str = ""
    _rows: list[tuple[int, list[str]]] | None = field(default=None, repr=False)
    _json: Any = field(default=None, repr=False)
    _json_done: bool = field(default=False, repr=False)
    _wb: Any = field(default=None, repr=False)

    # -- spreadsheet rows ------------------------------------------------
    def _sheet(self):
        if self._wb is None:
            import openpyxl  # heavy import, only when a spreadsheet is read

            try:
                self._wb = openpyxl.load_workbook(self.path, read_only=True, data_only=True)
            except Exception as e:  # corrupt zip, not a workbook, encrypted ...
                raise DataFormatError(self.path, None, f"cannot read spreadsheet: {e}") from e
        wb = self._wb
        return wb.active if wb.active is not None else wb.worksheets[0]

    def _iter_xlsx(self):
        for i, r in enumerate(self._sheet().iter_rows(min_row=1, values_only=True), 1):
            cells = [_cell_str(v) for v in r]
            while cells and not cells[-1]:
                cells.pop()
            if cells:
                yield i, cells

    def first_xlsx_row(self) -> tuple[int, list[str]] | None:
        """The first non-blank row, without reading the whole sheet (for sniffing)."""
        if self._rows is not None:
            return self._rows[0] if self._rows else None
        return next(self._iter_xlsx(), None)

    def xlsx_rows(self) -> list[tuple[int, list[str]]]:
        """Non-blank rows of the active sheet as (1-based sheet row, cells as str).

        openpyxl ``read_only`` iteration was measured faster than
        ``pandas.read_excel(engine="openpyxl")`` on the 40,474-row v601 file
        (1.28 s vs 1.72 s: 0.55 s opening, 0.75 s iterating) and keeps the
        true sheet row numbers for errors.
        """
        if self._rows is None:
            try:
                self._rows = list(self._iter_xlsx())
            finally:
                self.close()
        return self._rows

    def close(self) -> None:
        if self._wb is not None:
            self._wb.close()
            self._wb = None

    # -- text lines ------------------------------------------------------
    def lines(self) -> list[tuple[int, str]]:
        """Non-blank lines as (1-based line number, line without newline)."""
        out = []
        for i, line in enumerate(self.text.split("\n"), 1):
            line = line.rstrip("\r")
            if line.strip().strip("\ufeff"):
                out.append((i, line))
        return out

    def delimited_rows(self, delimiter: str) -> list[tuple[int, list[str]]]:
        """Non-blank rows of a delimited text file (csv module).

        Tab files are read without quote processing: names such as
        ``输尿管双"J"管取出术`` contain quotes that are not field quoting.
        """
        quoting = csv.QUOTE_NONE if delimiter == "\t" else csv.QUOTE_MINIMAL
        reader = csv.reader(io.StringIO(self.text, newline=""), delimiter=delimiter, quoting=quoting)
        rows = []
        start = 1
        try:
            for rec in reader:
                cells = [_clean(c) for c in rec]
                while cells and not cells[-1]:
                    cells.pop()
                if cells:
                    rows.append((start, cells))
                start = reader.line_num + 1
        except csv.Error as e:
            raise DataFormatError(self.path, reader.line_num, f"bad delimited text: {e}") from e
        return rows

    def table_rows(self) -> list[tuple[int, list[str]]]:
        """Rows of a spreadsheet or of a delimited text file (delimiter sniffed)."""
        if self.kind == "xlsx":
            return self.xlsx_rows()
        lines = self.lines()
        if not lines:
            return []
        return self.delimited_rows(_sniff_delimiter(lines[0][1]))

    # -- JSON --------------------------------------------------------------
    def json(self) -> Any:
        if not self._json_done:
            if self.kind != "text":
                raise DataFormatError(self.path, None, "expected a JSON text file, found a spreadsheet")
            try:
                self._json = json.loads(self.text)
            except json.JSONDecodeError as e:
                raise DataFormatError(self.path, e.lineno, f"invalid JSON: {e.msg} (column {e.colno})") from e
            self._json_done = True
        return self._json


def _sniff_delimiter(header: str) -> str:
    counts = {d: header.count(d) for d in ("\t", ",", ";")}
    best = max(counts, key=lambda d: (counts[d], d == "\t"))
    return best if counts[best] else "\t"


def _decode(path: Path, data: bytes) -> str:
    """UTF-16 (BOM), then UTF-8 (BOM optional), then GB18030 (a superset of GBK)."""
    if data[:2] in (b"\xff\xfe", b"\xfe\xff"):
        try:
            return data.decode("utf-16")
        except UnicodeDecodeError as e:
            raise DataFormatError(path, None, f"unreadable encoding: bad UTF-16 ({e.reason})") from e
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as first:
        try:
            return data.decode("gb18030")
        except UnicodeDecodeError:
            line = data.count(b"\n", 0, first.start) + 1
            raise DataFormatError(
                path,
                line,
                f"unreadable encoding: byte 0x{data[first.start]:02x} is neither UTF-8 nor GB18030/GBK; "
                "save the file as UTF-8",
            ) from first


def open_source(path) -> Source:
    """Read ``path`` once (bytes -> text, or a zip spreadsheet) for sniffing and loading."""
    p = Path(path)
    if not p.is_file():
        raise DataFormatError(p, None, "file not found")
    data = p.read_bytes()
    if not data.strip():
        raise DataFormatError(p, None, "empty file")
    ext = p.suffix.lower()
    if data[:4] == b"PK\x03\x04":
        return Source(p, "xlsx")
    if data[:4] == b"\xd0\xcf\x11\xe0" or ext == ".xls":
        raise DataFormatError(p, None, "legacy .xls workbooks are not supported: save as .xlsx or CSV")
    if ext in (".xlsx", ".xlsm"):
        raise DataFormatError(p, None, "not a valid .xlsx workbook (not a zip archive)")
    return Source(p, "text", text=_decode(p, data))


# ---------------------------------------------------------------------------
# sniffing
# ---------------------------------------------------------------------------
def _header_roles(cells: list[str]) -> dict[str, int]:
    """Map roles (code, name, synonyms, parent, mention, terms) to column indexes."""
    roles: dict[str, int] = {}
    for j, c in enumerate(cells):
        k = _header_key(c)
        for role, aliases in (
            ("mention", MENTION_HEADERS),
            ("code", CODE_HEADERS),
            ("synonyms", SYNONYM_HEADERS),
            ("parent", PARENT_HEADERS),
        ):
            if k in aliases:
                roles.setdefault(role, j)
        # 标准词 is the name column of a vocabulary and the gold column of a
        # labelled table: record both, the presence of a mention column decides.
        if k in NAME_HEADERS:
            roles.setdefault("name", j)
        if k in TERMS_HEADERS:
            roles.setdefault("terms", j)
    return roles


def _sniff_header(first: list[str]) -> str:
    roles = _header_roles(first)
    if "mention" in roles:
        return "labelled_table"
    if "code" in roles or "name" in roles:
        return "vocab_table"
    return "code_name"


def detect_format(src: Source) -> str:
    """The format of an opened file; see :func:`sniff_format`."""
    p = src.path
    if src.kind == "xlsx":
        first = src.first_xlsx_row()
        if first is None:
            raise DataFormatError(p, None, "empty file: the sheet has no rows")
        return _sniff_header(first[1])
    head = src.text.lstrip("\ufeff \t\r\n")
    if not head:
        raise DataFormatError(p, None, "empty file")
    if head[0] in "[{" and (p.suffix.lower() == ".json" or head[:1] == "["):
        data = src.json()
        if isinstance(data, list):
            return "cdn_json"
        if isinstance(data, dict):
            first = next(iter(data.values()), None)
            if isinstance(first, dict) and ("term_name" in first or "father" in first):
                return "icd_tree"
        raise DataFormatError(
            p, None, "unknown format: JSON is neither a list of {text, normalized_result} items nor an ICD tree"
        )
    lines = src.lines()
    first = lines[0][1]
    if _PUBTATOR_TEXT.match(first) or (len(first.split("\t")) == 6 and first.split("\t")[1].isdigit()):
        return "pubtator"
    if "\t" not in first and _MEDIC_LINE.match(first):
        return "medic"
    cells = [_clean(c) for c in first.split(_sniff_delimiter(first))]
    fmt = _sniff_header(cells)
    if fmt == "code_name" and "\t" not in first:
        raise DataFormatError(
            p,
            lines[0][0],
            "unknown format: no recognised header row (code, name [, synonyms] or mention, terms) "
            "and not a TAB-separated code/name list",
        )
    return fmt


def sniff_format(path) -> str:
    """Recognise a vocabulary or labelled file; one of :data:`ALL_FORMATS`.

    Magic bytes tell a spreadsheet from text; JSON lists are CHIP-CDN style,
    JSON objects of ``{term_name, father}`` nodes an ICD tree; ``pmid|t|``
    lines PubTator; ``id||name`` lines MEDIC; a header row with a mention
    column a labelled table, with code/name columns a vocabulary table; a
    header-less ``code<TAB>name`` text or two-column sheet a code/name list.
    """
    src = open_source(path)
    try:
        return detect_format(src)
    finally:
        src.close()


def resolve_format(
    src: Source, format: str | None, allowed: tuple[str, ...], aliases: dict[str, str], what: str
) -> str:
    """The format to load ``src`` with: ``format`` (or its alias) if given, else sniffed."""
    if format is None:
        fmt = detect_format(src)
    else:
        fmt = aliases.get(format.lower(), format.lower())
        if fmt not in ALL_FORMATS:
            raise DataFormatError(
                src.path, None, f"unknown format {format!r}; expected one of {', '.join(allowed)}"
            )
    if fmt not in allowed:
        raise DataFormatError(
            src.path, None, f"this is a {fmt} file, not {what} (expected one of {', '.join(allowed)})"
        )
    return fmt


# ---------------------------------------------------------------------------
# vocabulary loaders
# ---------------------------------------------------------------------------
_VOCAB_ALIASES = {
    "code.txt": "code_name", "yidu": "code_name", "icd10": "code_name", "v601": "code_name",
    "table": "vocab_table", "csv": "vocab_table", "tsv": "vocab_table", "xlsx": "vocab_table",
    "tree": "icd_tree", "icd9": "icd_tree", "json": "icd_tree",
}


def load_vocabulary(
    path, format: str | None = None, name: str | None = None, *, inner_terms: bool = False
) -> Vocabulary:
    """Load a vocabulary file of any supported format (see the module docstring).

    ``name`` defaults to the file stem. ``inner_terms`` (ICD tree only):
    by default only childless nodes are terms — the codable procedures
    (13,687 in the 医保版 v2 tree: the 13,686 手术操作 nodes plus the childless
    细目 ``99.92 其他针刺``); inner nodes (章/类目/亚目/细目) keep their
    names in ``code_names`` and their place in ``parent``. Set it to True
    when coders label with category names as well (72 of the 5,333 Yidu-N7K
    train+val gold names have only category-level codes, such as ``01.6``, in code.txt).
    """
    src = open_source(path)
    vocab = Vocabulary(name=name or src.path.stem, source=str(src.path))
    try:
        fmt = resolve_format(src, format, VOCAB_FORMATS, _VOCAB_ALIASES, "a vocabulary")
        if fmt == "code_name":
            _load_code_name(src, vocab)
        elif fmt == "vocab_table":
            _load_vocab_table(src, vocab)
        elif fmt == "icd_tree":
            _load_icd_tree(src, vocab, inner_terms)
        else:
            _load_medic(src, vocab)
    finally:
        src.close()
    if not len(vocab):
        raise DataFormatError(src.path, None, "no terms found")
    if fmt == "medic":
        vocab.language = "en"
    else:
        vocab.language = _guess_language(vocab.names)
    return vocab


def _guess_language(names: list[str]) -> str:
    # The vocabularies at hand are either almost all CJK (zh) or none (MEDIC);
    # a 50% cut leaves a wide margin on both sides.
    sample = names[:2000]
    cjk = sum(1 for n in sample if _CJK.search(n))
    return "zh" if cjk * 2 >= len(sample) else "en"


def _load_code_name(src: Source, vocab: Vocabulary) -> None:
    """Header-less ``code, name`` rows (v601 xlsx, Yidu-N7K code.txt)."""
    if src.kind == "xlsx":
        rows = src.xlsx_rows()
        for row, cells in rows:
            if len(cells) > 2:
                raise DataFormatError(
                    src.path, row,
                    f"unexpected value in column {len(cells)} of a header-less code/name sheet; "
                    "add a header row (code, name, synonyms)",
                )
            _add_code_name(src, vocab, row, cells, first=row == rows[0][0])
        return
    lines = src.lines()
    for row, line in lines:
        cells = [_clean(c) for c in line.split("\t")]
        while cells and not cells[-1]:
            cells.pop()  # trailing TABs are a harmless export habit
        if len(cells) != 2:
            raise DataFormatError(
                src.path, row, f"expected 2 TAB-separated fields (code, name), found {len(cells)}"
            )
        _add_code_name(src, vocab, row, cells, first=row == lines[0][0])


def _add_code_name(src: Source, vocab: Vocabulary, row: int, cells: list[str], first: bool) -> None:
    code = cells[0] if cells else ""
    nm = cells[1] if len(cells) > 1 else ""
    if not code:
        raise DataFormatError(src.path, row, "missing code")
    if not nm:
        raise DataFormatError(src.path, row, "missing name")
    if first and not any(ch.isdigit() for ch in code):
        # Every ICD code (c1, A00, 00.01) and hospital code seen has a digit;
        # a first row without one is an unrecognised header, not a term.
        raise DataFormatError(
            src.path, row,
            f"first row {code!r} | {nm!r} looks like a header but no column is recognised; "
            "name the columns code, name [, synonyms] (or 编码/代码, 名称/标准词)",
        )
    vocab.add_term(nm, [code])


def _cell(cells: list[str], j: int | None) -> str:
    return cells[j] if j is not None and j < len(cells) else ""


def _load_vocab_table(src: Source, vocab: Vocabulary) -> None:
    """CSV / TSV / XLSX with a header: code, name, optional synonyms and parent."""
    rows = src.table_rows()
    if not rows:
        raise DataFormatError(src.path, None, "empty file")
    hrow, header = rows[0]
    roles = _header_roles(header)
    for role, aliases in (("code", CODE_HEADERS), ("name", NAME_HEADERS)):
        if role not in roles:
            raise DataFormatError(
                src.path, hrow,
                f"missing required column {role!r} (accepted headers: {', '.join(sorted(aliases))}); "
                f"found {', '.join(header)}",
            )
    ci, ni = roles["code"], roles["name"]
    si, pi = roles.get("synonyms"), roles.get("parent")
    parent_rows: list[tuple[int, str, str]] = []
    for row, cells in rows[1:]:
        code, nm = _cell(cells, ci), _cell(cells, ni)
        if not code:
            raise DataFormatError(src.path, row, f"missing code (column {header[ci]!r})")
        if not nm:
            raise DataFormatError(src.path, row, f"missing name (column {header[ni]!r})")
        syns = [s for s in (_clean(x) for x in _SYNONYM_SPLIT.split(_cell(cells, si))) if s]
        vocab.add_term(nm, [code], syns)
        if _cell(cells, pi):
            parent_rows.append((row, code, _cell(cells, pi)))
    for row, code, par in parent_rows:
        if par not in vocab.code_names:
            raise DataFormatError(src.path, row, f"parent code {par!r} of {code!r} is not a code of this file")
        vocab.parent[code] = par


_TREE_KEYS = ("code", "term_name", "father")


def _load_icd_tree(src: Source, vocab: Vocabulary, inner_terms: bool) -> None:
    """ICD-9-CM-3 tree JSON: childless nodes are terms, every node is in the hierarchy."""
    data = src.json()
    if not isinstance(data, dict):
        raise DataFormatError(src.path, None, "expected a JSON object {code: node}")
    nodes: list[tuple[int, str, str, str | None]] = []
    for row, (key, node) in enumerate(data.items(), 1):
        if not isinstance(node, dict):
            raise DataFormatError(src.path, row, f"node {key!r} is not an object")
        lacking = [k for k in _TREE_KEYS if k not in node]
        if lacking:
            raise DataFormatError(src.path, row, f"node {key!r} lacks key(s) {', '.join(lacking)}")
        code = _cell_str(node["code"])
        nm = _cell_str(node["term_name"])
        father = _cell_str(node["father"]) or None
        if not code:
            raise DataFormatError(src.path, row, f"node {key!r} has an empty code")
        if code != str(key):
            raise DataFormatError(src.path, row, f"node key {key!r} differs from its code {code!r}")
        if not nm:
            raise DataFormatError(src.path, row, f"node {code!r} has an empty term_name")
        nodes.append((row, code, nm, father))
    codes = {c for _, c, _, _ in nodes}
    for row, code, nm, father in nodes:
        if father is not None and father not in codes:
            raise DataFormatError(src.path, row, f"node {code!r}: father {father!r} is not a node of the tree")
        for ch in data[code].get("child") or ():
            if str(ch) not in codes:
                raise DataFormatError(src.path, row, f"node {code!r}: child {ch!r} is not a node of the tree")
    # Leaves from the father links, not the child lists: one fewer field to trust.
    fathers = {f for _, _, _, f in nodes if f is not None}
    for row, code, nm, father in nodes:
        vocab.code_names[code] = nm
        if father is not None:
            vocab.parent[code] = father
        if inner_terms or code not in fathers:
            vocab.add_term(nm, [code])


def normalize_concept_id(cid: str) -> str:
    """One spelling for MeSH / OMIM ids: ``MESH:D012345``/``D012345`` -> ``D012345``;
    ``OMIM:123456``/``123456`` -> ``OMIM:123456`` (MEDIC writes OMIM ids bare, the
    NCBI disease corpus with the prefix)."""
    c = _clean(cid)
    head, sep, tail = c.partition(":")
    if sep:
        h = head.upper()
        if h in ("MESH", "MSH"):
            return tail.strip().upper()
        if h == "OMIM":
            return "OMIM:" + tail.strip()
        return h + ":" + tail.strip()
    if c.isdigit():
        return "OMIM:" + c
    return c.upper()


def _load_medic(src: Source, vocab: Vocabulary) -> None:
    """CTD MEDIC: ``id|alt id|...||name|synonym|...``; HTML entities unescaped."""
    primary: dict[str, str] = {}
    for row, line in src.lines():
        ids, sep, names = line.partition("||")
        if not sep:
            raise DataFormatError(src.path, row, "expected 'id|alt ids||name|synonyms' (no '||' found)")
        id_list = [normalize_concept_id(i) for i in ids.split("|") if _clean(i)]
        if not id_list:
            raise DataFormatError(src.path, row, "missing concept id")
        forms = [html.unescape(_clean(n)) for n in names.split("|")]
        if not forms[0]:
            raise DataFormatError(src.path, row, "missing name")
        vocab.add_term(forms[0], id_list, [f for f in forms[1:] if f])
        primary[id_list[0]] = forms[0]
    # An alternative id listed on an earlier concept must not shadow the
    # concept whose primary id it is.
    vocab.code_names.update(primary)


# ---------------------------------------------------------------------------
# keywords
# ---------------------------------------------------------------------------
_PLURAL = {"approach": "approaches", "nature": "natures", "laterality": "lateralities"}


def _keyword_files(folder: Path, kind: str) -> Path | None:
    plural = _PLURAL.get(kind, kind + "s")
    for fn in (f"procedure_{plural}.txt", f"{plural}.txt", f"{kind}.txt"):
        if (folder / fn).is_file():
            return folder / fn
    return None


def load_keywords(folder) -> dict[str, Any]:
    """Keyword vocabularies for the keyword-attentive ranker (approach A, KAR).

    Reads ``procedure_sites.txt`` / ``procedure_types.txt`` /
    ``procedure_approaches.txt`` (one word per line, optionally
    ``word<TAB>frequency``; also ``sites.txt`` or ``site.txt`` and the same
    for every kind of :data:`~termnorm.records.KEYWORD_KINDS`) and
    ``abbreviations.json`` (``{abbreviation: expansion}``). Returns
    ``{"site": [...], "type": [...], "approach": [...], "abbreviations": {...}}``
    (plus ``laterality`` / ``nature`` when such files exist), words in file
    order without duplicates. Missing files give empty entries; a folder
    with none of them is an error.
    """
    d = Path(folder)
    if not d.is_dir():
        raise DataFormatError(d, None, "keyword folder not found")
    out: dict[str, Any] = {"site": [], "type": [], "approach": []}
    found = False
    for kind in KEYWORD_KINDS:
        f = _keyword_files(d, kind)
        if f is None:
            continue
        found = True
        out[kind] = _read_word_list(f)
    out["abbreviations"] = {}
    ab = d / "abbreviations.json"
    if ab.is_file():
        found = True
        out["abbreviations"] = _read_abbreviations(ab)
    if not found:
        raise DataFormatError(
            d, None, "no keyword files found (expected procedure_sites.txt, procedure_types.txt, "
            "procedure_approaches.txt or abbreviations.json)"
        )
    return out


def _read_word_list(path: Path) -> list[str]:
    src = open_source(path)
    if src.kind != "text":
        raise DataFormatError(path, None, "expected a text file with one word per line")
    words: dict[str, None] = {}
    for row, line in src.lines():
        cells = [_clean(c) for c in line.split("\t")]
        while cells and not cells[-1]:
            cells.pop()
        if len(cells) > 2 or (len(cells) == 2 and not cells[1].isdigit()):
            raise DataFormatError(
                path, row, f"expected 'word' or 'word<TAB>frequency', found {line.strip()!r}"
            )
        if not cells[0]:
            raise DataFormatError(path, row, "missing word before the TAB")
        words.setdefault(cells[0], None)
    return list(words)


def _read_abbreviations(path: Path) -> dict[str, str]:
    data = open_source(path).json()
    if not isinstance(data, dict):
        raise DataFormatError(path, None, "expected a JSON object {abbreviation: expansion}")
    out = {}
    for row, (k, v) in enumerate(data.items(), 1):
        if not isinstance(v, str) or not _clean(v) or not _clean(k):
            raise DataFormatError(path, row, f"entry {k!r}: expansion must be a non-empty string, found {v!r}")
        out[_clean(k)] = _clean(v)
    return out
