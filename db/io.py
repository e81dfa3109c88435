"""Import of mention files and export of coding decisions.

Import (``read_mentions``) accepts what coders actually receive:

* CSV / TSV (UTF-8, UTF-8 with BOM, or GB18030 as Excel writes it on Chinese
  Windows) and XLSX, with a column named ``mention``, ``text`` or ``原始词``
  and optionally a column of gold terms (``terms``, ``gold``, ``标准词``,
  ``normalized_result``; several names joined by ``##`` or ``|``);
* CHIP-CDN JSON (a list of ``{"text", "normalized_result"}`` objects) and
  JSON lines.

Bad rows never block good ones: each becomes an :class:`ImportProblem`
(file, row, problem) in the report and the rest is imported. A wholly
unreadable file gives one clear problem, never an exception. Rows are counted
as a person counts them: spreadsheet / CSV line numbers (header = row 1), the
1-based item number in a JSON list, the line number in JSON lines.

Export (``export_frame``) turns ``db.services.decisions_frame`` into CSV, XLSX,
JSON lines, CHIP-CDN JSON and a FHIR R5 ``ConceptMap``.
"""

from __future__ import annotations

import csv
import io
import json
import re
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import quote

from termnorm.records import LabelledMention

# 500 characters is ~4x the longest real mention (122 characters over the 22,000
# CHIP-CDN + Yidu-N7K mentions, median 10): a longer "mention" is a pasted
# paragraph or a wrong column, and would make a useless coding task.
MAX_MENTION_CHARS = 500
MENTION_COLUMNS = ("mention", "text", "原始词")
TERMS_COLUMNS = ("terms", "gold", "gold_terms", "标准词", "normalized_result")
JSON_TEXT_KEYS = ("text", "mention", "原始词")
JSON_TERMS_KEYS = ("normalized_result", "terms", "标准词")
EXPORT_FORMATS = ("csv", "xlsx", "jsonl", "chip-cdn", "fhir")
UNDECODABLE = "undecodable text (neither UTF-8 nor GB18030)"


class ImportProblem(NamedTuple):
    """One rejected row (``row`` None: the whole file)."""

    file: str
    row: int | None
    problem: str

    def __str__(self) -> str:
        return f"{self.file}, row {self.row}: {self.problem}" if self.row is not None else f"{self.file}: {self.problem}"


@dataclass
class ImportReport:
    """What ``db.services.import_mentions`` did: the batch made (None if no good row) and the rows refused."""

    file: str
    batch_id: int | None = None
    n_ok: int = 0
    errors: list[ImportProblem] = field(default_factory=list)

    @property
    def n_bad(self) -> int:
        return sum(1 for e in self.errors if e.row is not None)

    def summary(self) -> str:
        s = f"{self.file}: {self.n_ok} mention(s) imported"
        return s + (f", {len(self.errors)} problem(s)" if self.errors else "")


# ---------------------------------------------------------------- reading
def read_mentions(source, name: str | None = None) -> tuple[list[LabelledMention], list[ImportProblem]]:
    """Read mentions (with gold terms if the file has them) from a path, bytes or an uploaded file.

    ``source``: a path; ``bytes``; or a file-like object with ``getvalue()`` /
    ``read()`` (e.g. Streamlit's ``UploadedFile``), named by ``name`` or its
    ``.name``. Never raises for bad content: returns the good rows (with
    ``row`` set) and the problems.
    """
    fname, data, problem = _load(source, name)
    if problem:
        return [], [ImportProblem(fname, None, problem)]
    kind = _kind(fname, data)
    try:
        if kind == "xls":
            return [], [ImportProblem(fname, None, "legacy .xls workbook is not supported: save it as .xlsx or CSV")]
        if kind == "xlsx":
            rows, header_problem = _xlsx_rows(data)
            return _from_table(fname, rows, header_problem)
        if kind == "json":
            return _from_json(fname, data)
        return _from_table(fname, *_csv_rows(data))
    except Exception as e:  # last resort: the UI must get a report, never a traceback
        return [], [ImportProblem(fname, None, f"unreadable file ({type(e).__name__}: {e})")]


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


def _load(source, name) -> tuple[str, bytes, str | None]:
    if isinstance(source, (bytes, bytearray)):
        return name or "<upload>", bytes(source), None
    if hasattr(source, "getvalue") or hasattr(source, "read"):
        fname = name or getattr(source, "name", None) or "<upload>"
        try:
            data = source.getvalue() if hasattr(source, "getvalue") else source.read()
        except Exception as e:
            return str(fname), b"", f"cannot read the upload ({e})"
        if isinstance(data, str):
            data = data.encode("utf-8")
        return str(fname), data, None
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


def _csv_rows(data: bytes):
    """(row number, cells) pairs of a CSV/TSV file and a header problem (None if fine)."""
    text = _decode_text(data)
    first = text.split("\n", 1)[0]
    delimiter = max(("\t", ",", ";"), key=first.count) if any(d in first for d in "\t,;") else ","
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter)
    out: list[tuple[int, list[str] | str]] = []
    line = 0
    while True:
        start = line + 1
        try:
            cells = next(reader)
        except StopIteration:
            break
        except csv.Error as e:  # e.g. a NUL byte: report the row, keep reading
            line = reader.line_num
            out.append((start, f"unreadable CSV row ({e})"))
            continue
        line = reader.line_num
        out.append((start, cells))
    return out, None


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


def _from_table(fname, rows, header_problem):
    if header_problem:
        return [], [ImportProblem(fname, None, header_problem)]
    rows = [(i, c) for i, c in rows if isinstance(c, str) or any(x.strip() for x in c)]  # blank lines are not rows
    if not rows or isinstance(rows[0][1], str):
        return [], [ImportProblem(fname, None, "no header row")]
    head_row, header = rows[0]
    col = _column(header, MENTION_COLUMNS)
    if col is None:
        shown = ", ".join(repr(h) for h in header[:8])
        return [], [ImportProblem(fname, head_row, f"missing column: none of {'/'.join(MENTION_COLUMNS)} in the header ({shown})")]
    tcol = _column(header, TERMS_COLUMNS)
    good, bad = [], []
    for row, cells in rows[1:]:
        if isinstance(cells, str):
            bad.append(ImportProblem(fname, row, cells))
            continue
        text = cells[col] if col < len(cells) else ""
        problem = validate_mention(text)
        if problem:
            bad.append(ImportProblem(fname, row, problem))
            continue
        terms = split_terms(cells[tcol]) if tcol is not None and tcol < len(cells) else []
        good.append(LabelledMention(text.strip(), terms, row))
    return good, bad


def _from_json(fname, data):
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        return [], [ImportProblem(fname, None, f"undecodable: JSON must be UTF-8 ({e.reason} at byte {e.start})")]
    items: list[tuple[int, Any]] = []
    bad: list[ImportProblem] = []
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        if not (fname.lower().endswith((".jsonl", ".ndjson")) or e.msg == "Extra data"):
            return [], [ImportProblem(fname, None, f"not valid JSON: {e.msg} (line {e.lineno}, column {e.colno})")]
        for n, ln in enumerate(text.splitlines(), start=1):  # JSON lines: one object per line
            if not ln.strip():
                continue
            try:
                items.append((n, json.loads(ln)))
            except json.JSONDecodeError as le:
                bad.append(ImportProblem(fname, n, f"not valid JSON: {le.msg}"))
    else:
        if isinstance(doc, dict):
            doc = [doc] if any(k in doc for k in JSON_TEXT_KEYS) else doc
        if not isinstance(doc, list):
            return [], [ImportProblem(fname, None, "top level is not a list of objects (expected CHIP-CDN: [{\"text\": ...}])")]
        items = list(enumerate(doc, start=1))
    good = []
    for row, obj in items:
        if not isinstance(obj, dict):
            bad.append(ImportProblem(fname, row, f"not an object ({type(obj).__name__})"))
            continue
        key = next((k for k in JSON_TEXT_KEYS if k in obj), None)
        if key is None:
            bad.append(ImportProblem(fname, row, "missing field 'text'"))
            continue
        value = obj[key]
        if isinstance(value, bool) or not isinstance(value, (str, int, float, type(None))):
            bad.append(ImportProblem(fname, row, f"field '{key}' is not a string"))
            continue
        value = _cell(value)
        problem = validate_mention(value)
        if problem:
            bad.append(ImportProblem(fname, row, problem))
            continue
        tkey = next((k for k in JSON_TERMS_KEYS if k in obj), None)
        good.append(LabelledMention(value, split_terms(obj[tkey]) if tkey else [], row))
    bad.sort(key=lambda p: p.row or 0)
    return good, bad


# ---------------------------------------------------------------- export
def export_frame(df, fmt: str, *, title: str = "termnorm decisions", map_id: str = "termnorm-decisions") -> bytes:
    """Serialise a ``decisions_frame`` (one row per decision; ``terms``/``codes`` are lists).

    * ``csv``  -- UTF-8 with BOM (so Excel shows Chinese), list cells joined by ``##``;
    * ``xlsx`` -- one sheet ``decisions``, same flat columns;
    * ``jsonl``-- one JSON object per decision, lists kept;
    * ``chip-cdn`` -- ``[{"text", "normalized_result": "a##b"}]`` for decisions with terms;
    * ``fhir`` -- a FHIR R5 ``ConceptMap`` (see :func:`fhir_concept_map`).
    """
    if fmt not in EXPORT_FORMATS:
        raise ValueError(f"unknown export format {fmt!r}; expected one of {', '.join(EXPORT_FORMATS)}")
    records = [_jsonable(r) for r in df.to_dict(orient="records")]
    if fmt == "jsonl":
        return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records).encode("utf-8")
    if fmt == "chip-cdn":
        items = [{"text": r["mention"], "normalized_result": "##".join(r["terms"])} for r in records if r["terms"]]
        return json.dumps(items, ensure_ascii=False, indent=1).encode("utf-8")
    if fmt == "fhir":
        cm = fhir_concept_map(records, title=title, map_id=map_id)
        return json.dumps(cm, ensure_ascii=False, indent=2).encode("utf-8")
    flat = df.copy()
    for col in flat.columns:
        if flat[col].map(lambda v: isinstance(v, (list, tuple))).any():
            flat[col] = flat[col].map(lambda v: "##".join(map(str, v)) if isinstance(v, (list, tuple)) else v)
    for col in flat.select_dtypes(include=["datetimetz"]).columns:  # Excel cannot store time zones
        flat[col] = flat[col].dt.tz_localize(None)
    if fmt == "csv":
        return flat.to_csv(index=False).encode("utf-8-sig")
    buf = io.BytesIO()
    flat.to_excel(buf, index=False, sheet_name="decisions", engine="openpyxl")
    return buf.getvalue()


def _jsonable(r: dict) -> dict:
    out = {}
    for k, v in r.items():
        if hasattr(v, "isoformat"):
            v = v.isoformat()
        elif isinstance(v, float) and v != v:  # NaN -> null
            v = None
        elif hasattr(v, "item"):  # numpy scalar
            v = v.item()
        out[k] = list(v) if isinstance(v, tuple) else v
    return out


_WS = re.compile(r"\s+")


def fhir_code(text: str) -> str:
    """A FHIR ``code`` value: no leading/trailing whitespace, single inner spaces."""
    return _WS.sub(" ", str(text)).strip()


# FHIR R5 ConceptMap relationship codes (http://hl7.org/fhir/concept-map-relationship):
# related-to | equivalent | source-is-narrower-than-target | source-is-broader-than-target | not-related-to.
# A coder who accepts one term states the mention *is* that standard concept: "equivalent".
# A mention coded to several terms ("腹腔镜胆囊切除术+术中胆道造影" -> 2 terms) means more than
# any one of them, so each target is "source-is-broader-than-target"; R5 invariant cmd-1 then
# requires a comment on the target (unless the map is draft), which we always give.
# ("source-is-narrower-than-target" would claim the mention is a sub-concept of the term, which
# the coder did not assert.)
REL_SINGLE = "equivalent"
REL_PART = "source-is-broader-than-target"


def fhir_concept_map(records: Iterable[dict], *, title: str = "termnorm decisions",
                     map_id: str = "termnorm-decisions", status: str = "draft") -> dict:
    """A FHIR R5 ConceptMap from decision records (dicts with mention, terms, codes, vocabulary, batch_id).

    One ``group`` per vocabulary: source system = the batch's mentions
    (``urn:termnorm:batch:<id>`` or ``urn:termnorm:mentions``), target system =
    ``urn:termnorm:vocabulary:<name>`` (local editions such as ICD-10 北京临床版
    are not the HL7 ICD systems, so no official URI is claimed). Element code =
    the mention (whitespace-normalised), display = the mention; target code =
    the term's first code (its name when it has none), display = the term name.
    Only decisions with terms are mapped (a rejection says "none of the shown
    candidates", not "no target exists", so no ``noMap`` is asserted); when a
    mention text occurs several times the latest decision wins. ``status`` is
    ``draft`` until a lead has reviewed the decisions.
    """
    records = [r for r in records if r.get("terms") and fhir_code(r["mention"])]
    winner: dict[str, int] = {}  # mention code -> index of its most recent decision
    for i, r in enumerate(records):
        code = fhir_code(r["mention"])
        if code not in winner or (r.get("decision_id") or 0) >= (records[winner[code]].get("decision_id") or 0):
            winner[code] = i
    groups: dict[tuple[str, str], dict[str, dict]] = {}
    for i, r in enumerate(records):
        code = fhir_code(r["mention"])
        if winner[code] != i:
            continue
        terms = list(r["terms"])
        batch = r.get("batch_id")
        source = f"urn:termnorm:batch:{batch}" if batch is not None else "urn:termnorm:mentions"
        target = f"urn:termnorm:vocabulary:{quote(str(r.get('vocabulary') or 'vocabulary'), safe='')}"
        codes = list(r.get("codes") or [])
        targets = []
        for i, t in enumerate(terms):
            tc = codes[i] if i < len(codes) and codes[i] else t
            tgt = {"code": fhir_code(tc), "display": t}
            if len(terms) == 1:
                tgt["relationship"] = REL_SINGLE
            else:
                tgt["relationship"] = REL_PART
                tgt["comment"] = f"The mention maps to {len(terms)} terms; this is one of them."
            targets.append(tgt)
        groups.setdefault((source, target), {})[code] = {"code": code, "display": str(r["mention"]).strip(),
                                                         "target": targets}
    now = datetime.now(UTC).replace(microsecond=0).isoformat()
    return {
        "resourceType": "ConceptMap",
        "id": re.sub(r"[^A-Za-z0-9\-.]", "-", map_id)[:64],
        "url": f"urn:termnorm:conceptmap:{quote(map_id, safe='')}",
        "name": _fhir_name(title),
        "title": title,
        "status": status,
        "experimental": False,
        "date": now,
        "publisher": "termnorm review app",
        "description": "Clinical mentions mapped to standard terms by coders (accepted / corrected decisions).",
        "group": [{"source": s, "target": t, "element": list(elements.values())}
                  for (s, t), elements in groups.items()],
    }


def _fhir_name(title: str) -> str:
    """A computable name matching FHIR's ``[A-Z]([A-Za-z0-9_]){0,254}``."""
    name = re.sub(r"[^A-Za-z0-9_]", "", title.title())
    if not name[:1].isascii() or not name[:1].isupper():
        name = "TermnormMap" + name
    return name[:255]
