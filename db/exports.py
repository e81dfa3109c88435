"""Export of coding decisions (``db.services.decisions_frame``) in six formats.

* ``csv`` / ``xlsx`` -- every column, list cells joined by ``##``; every text
  cell that a spreadsheet would run as a formula gets a leading ``'``
  (``db.imports.neutralise_formula``, OWASP "CSV injection"; the importer takes it
  off again) and no XLSX cell is ever stored as a formula or an error value;
* ``jsonl`` -- one JSON object per decision, lists kept;
* ``chip-cdn`` -- ``[{"text", "normalized_result": "a##b"}]``: a training-data
  format, so only decisions with terms (a rejection, skip or flag has no
  ``normalized_result`` to learn from, and terms marked "not related" are not one);
* ``fhir`` -- a FHIR R5 ``ConceptMap`` (:func:`fhir_concept_map`): rejections
  as ``noMap``; skips and flags are no mappings and are left out;
* ``omop`` -- an OMOP CDM v5.4 ``SOURCE_TO_CONCEPT_MAP`` CSV of approved
  decisions (:func:`omop_source_to_concept_map`), skips and flags left out; a mention
  marked "not related" to its terms maps to no concept, as a rejection does.

Every decision a coder made is in CSV, XLSX and JSONL (rejections included).
:func:`export_batch` reads a batch from the database and gives the bytes, a
file name and a small report for the page.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import quote

import pandas as pd
from openpyxl import Workbook
from openpyxl.cell import WriteOnlyCell
from openpyxl.cell.cell import ILLEGAL_CHARACTERS_RE
from sqlalchemy.orm import Session

from db import services
from db.imports import neutralise_formula
from db.models import Batch

# format -> (file suffix, MIME type)
FILE_TYPES = {
    "csv": ("csv", "text/csv"),
    "xlsx": ("xlsx", "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"),
    "jsonl": ("jsonl", "application/jsonl"),
    "chip-cdn": ("json", "application/json"),
    "fhir": ("fhir.json", "application/fhir+json"),
    "omop": ("csv", "text/csv"),
}
EXPORT_FORMATS = tuple(FILE_TYPES)

# A skip ("later") or a flag ("ask a lead") says nothing about what the mention means: no mapping.
NOT_MAPPINGS = ("skip", "flag")
# R5 invariant cmd-1: a target "source-is-broader-than-target" or "not-related-to" SHALL have a comment
# unless the map is draft; we always give one, so a map stays valid when it becomes active.
NEEDS_COMMENT = {"source-is-broader-than-target": "The coder judged the mention broader than this term.",
                 "not-related-to": "The coder judged the mention not related to this term."}

# OMOP CDM v5.4 DDL (OHDSI/CommonDataModel, SOURCE_TO_CONCEPT_MAP), in column order with the varchar lengths
OMOP_COLUMNS = ("source_code", "source_concept_id", "source_vocabulary_id", "source_code_description",
                "target_concept_id", "target_vocabulary_id", "valid_start_date", "valid_end_date", "invalid_reason")
OMOP_SOURCE_CODE_LEN, OMOP_DESCRIPTION_LEN, OMOP_VOCABULARY_ID_LEN = 50, 255, 20
# the defaults OHDSI Usagi writes: concept 0 = "No matching concept", whose vocabulary_id is "None"
OMOP_NO_CONCEPT, OMOP_NO_VOCABULARY = 0, "None"
OMOP_VALID_START, OMOP_VALID_END = "1970-01-01", "2099-12-31"
DEFAULT_SOURCE_VOCABULARY = "TERMNORM"
# RFC 4180 line ends: the csv module quotes a cell holding a lone CR only when CR is part of the line end,
# and a reader (Excel, csv, pandas) would break the row there
CRLF = "\r\n"
CONCEPT_COLUMNS = ("concept_id", "vocabulary_id", "concept_code")
XLSX_CELL_CHARS = 32_767  # Excel's limit of characters in a cell


@dataclass(frozen=True)
class Export:
    """An export ready to download: the bytes, a file name, its MIME type and what was written."""

    data: bytes
    file_name: str
    mime: str
    report: dict = field(default_factory=dict)


# ---------------------------------------------------------------- from the database
def export_batch(s: Session, batch_id: int | None, fmt: str, *, approved_only: bool = False,
                 source_vocabulary_id: str | None = None, target_vocabulary_id: str = "",
                 concepts=None) -> Export:
    """The latest decisions of a batch (None: all batches) as ``fmt`` (one of EXPORT_FORMATS).

    ``approved_only``: only decisions a lead approved (``omop`` always). The
    OMOP options are those of :func:`omop_source_to_concept_map`.
    """
    _check_format(fmt)
    if batch_id is not None:
        b = s.get(Batch, batch_id)
        if b is None:
            raise KeyError(f"no batch {batch_id}")
        title, map_id, stem = f"termnorm decisions: {b.name}", f"termnorm-batch-{batch_id}", b.name
    else:
        title, map_id, stem = "termnorm decisions", "termnorm-decisions", "termnorm_decisions"
    df = services.decisions_frame(s, batch_id)
    if approved_only or fmt == "omop":
        df = df[df["review_status"] == "approved"].reset_index(drop=True)
    data, report = _export(df, fmt, title=title, map_id=map_id, source_vocabulary_id=source_vocabulary_id,
                           target_vocabulary_id=target_vocabulary_id, concepts=concepts)
    suffix, mime = FILE_TYPES[fmt]
    stem = _file_stem(stem) + ("_source_to_concept_map" if fmt == "omop" else "")
    return Export(data, f"{stem}.{suffix}", mime, {"format": fmt, "approved_only": approved_only or fmt == "omop",
                                                  **report})


def _file_stem(name: str) -> str:
    """A file name from a batch name: no path separators, no spaces."""
    return re.sub(r"[\s/\\:*?\"<>|]+", "_", name.strip()).strip("_") or "decisions"


def _check_format(fmt: str) -> None:
    if fmt not in EXPORT_FORMATS:
        raise ValueError(f"unknown export format {fmt!r}; expected one of {', '.join(EXPORT_FORMATS)}")


# ---------------------------------------------------------------- from a frame
def export_frame(df: pd.DataFrame, fmt: str, *, title: str = "termnorm decisions",
                 map_id: str = "termnorm-decisions", sheet: str = "decisions", **omop) -> bytes:
    """Serialise a frame of decisions (``db.services.decisions_frame``; the gold set for csv / xlsx / jsonl /
    chip-cdn) as ``fmt``; ``omop`` options as in :func:`omop_source_to_concept_map`."""
    _check_format(fmt)
    return _export(df, fmt, title=title, map_id=map_id, sheet=sheet, **omop)[0]


def _export(df: pd.DataFrame, fmt: str, *, title: str, map_id: str, sheet: str = "decisions",
            source_vocabulary_id: str | None = None, target_vocabulary_id: str = "",
            concepts=None) -> tuple[bytes, dict]:
    if fmt == "omop":
        return omop_source_to_concept_map(df, source_vocabulary_id=source_vocabulary_id,
                                          target_vocabulary_id=target_vocabulary_id, concepts=concepts)
    if fmt in ("csv", "xlsx"):
        rows = spreadsheet_rows(df, xlsx=fmt == "xlsx")
        if fmt == "csv":
            return _csv(rows, list(df.columns)), {"rows": len(rows)}
        # Excel holds 32,767 characters a cell and openpyxl cuts there: a long note is named, never cut silently
        cut = [f"row {i} ({col}{_whose(df, i - 2)})" for i, row in enumerate(rows, start=2)
               for col, v in zip(df.columns, row) if isinstance(v, str) and len(v) > XLSX_CELL_CHARS]
        return _xlsx(rows, list(df.columns), sheet), {"rows": len(rows), "cut": cut}
    records = [_jsonable(r) for r in df.to_dict(orient="records")]
    if fmt == "jsonl":
        return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records).encode("utf-8"), \
            {"rows": len(records)}
    if fmt == "chip-cdn":
        items = [{"text": r["mention"], "normalized_result": "##".join(_mapped(r))} for r in records if _mapped(r)]
        return json.dumps(items, ensure_ascii=False, indent=1).encode("utf-8"), \
            {"rows": len(items), "left_out": len(records) - len(items)}
    cm = fhir_concept_map(records, title=title, map_id=map_id)
    elements = [e for g in cm.get("group", []) for e in g["element"]]
    report = {"elements": len(elements), "no_map": sum(1 for e in elements if e.get("noMap")),
              "left_out": sum(1 for r in records if not _is_mapping(r)), "status": cm["status"]}
    return json.dumps(cm, ensure_ascii=False, indent=2).encode("utf-8"), report


# ---------------------------------------------------------------- csv / xlsx
def spreadsheet_rows(df: pd.DataFrame, xlsx: bool = False) -> list[list]:
    """The frame's rows as plain cell values: lists joined by ``##``, text neutralised (db.imports.neutralise_formula),
    missing values None, times naive UTC (spreadsheets have no time zones); ``xlsx``: text as XLSX keeps it
    (:func:`_xml_text`)."""
    return [[_spreadsheet_cell(v, xlsx) for v in row] for row in df.itertuples(index=False, name=None)]


def _spreadsheet_cell(v, xlsx: bool):
    if isinstance(v, (list, tuple)):
        v = "##".join(map(str, v))
    if isinstance(v, str):
        return neutralise_formula(_xml_text(v) if xlsx else v)
    if v is None or (pd.api.types.is_scalar(v) and pd.isna(v)):
        return None
    if isinstance(v, datetime):
        if v.tzinfo is not None:
            v = v.astimezone(UTC).replace(tzinfo=None)
        return v.to_pydatetime() if isinstance(v, pd.Timestamp) else v
    return v.item() if hasattr(v, "item") else v  # numpy scalar


def _xml_text(text: str) -> str:
    """Text as an XLSX cell keeps it: no control characters (openpyxl refuses them), CR as LF (XML reads every
    CR back as LF, and "'" before an LF would not be taken off on import: LF is no formula trigger)."""
    return ILLEGAL_CHARACTERS_RE.sub("", text.replace("\r\n", "\n").replace("\r", "\n"))


def _whose(df: pd.DataFrame, i: int) -> str:
    """"; mention 'x', source row N" for row ``i`` of a decisions frame: the export's row is not the source's."""
    r = df.iloc[i]
    mention = f"; mention {r['mention']!r}" if "mention" in df.columns else ""
    src = r["source_row"] if "source_row" in df.columns else None
    return mention + (f", source row {int(src)}" if src is not None and not pd.isna(src) else "")


def _csv(rows: list[list], columns: list[str]) -> bytes:
    # UTF-8 with BOM so that Excel shows Chinese; object dtype keeps integer columns with gaps integers
    frame = pd.DataFrame(rows, columns=columns, dtype=object)
    return frame.to_csv(index=False, lineterminator=CRLF).encode("utf-8-sig")


def _xlsx(rows: list[list], columns: list[str], sheet: str) -> bytes:
    wb = Workbook(write_only=True)
    ws = wb.create_sheet(sheet)
    ws.append(columns)
    for row in rows:
        ws.append([_text_cell(ws, v) if isinstance(v, str) else v for v in row])
    buf = io.BytesIO()
    wb.save(buf)
    return buf.getvalue()


def _text_cell(ws, text: str) -> WriteOnlyCell:
    """A cell that is text whatever it reads like: openpyxl would store "=..." as a formula, "#N/A" as an error."""
    cell = WriteOnlyCell(ws, value=text)
    cell.data_type = "s"
    return cell


def jsonable_records(df: pd.DataFrame) -> list[dict]:
    """A decisions frame as JSON-ready records (timestamps as ISO text, NaN as null, lists as lists)."""
    return [_jsonable(r) for r in df.to_dict("records")]


def _jsonable(r: dict) -> dict:
    out = {}
    for k, v in r.items():
        if hasattr(v, "isoformat"):  # stored in UTC; SQLite hands them back without their zone: say it
            v = None if pd.isna(v) else (v.replace(tzinfo=UTC) if isinstance(v, datetime) and v.tzinfo is None
                                         else v).isoformat()
        elif isinstance(v, float) and v != v:  # NaN -> null
            v = None
        elif hasattr(v, "item"):  # numpy scalar
            v = v.item()
        out[k] = list(v) if isinstance(v, tuple) else v
    return out


# ---------------------------------------------------------------- FHIR R5 ConceptMap
_WS = re.compile(r"\s+")
_VERSION_UNSAFE = re.compile(r"[\s|#%]")


def fhir_code(text: str) -> str:
    """A FHIR ``code`` value: no leading/trailing whitespace, single inner spaces."""
    return _WS.sub(" ", str(text)).strip()


def _latest(records: Iterable[dict], key) -> dict:
    """The latest decision (highest decision_id) per ``key(record)``, keys in first-seen order."""
    out: dict = {}
    for r in records:
        k = key(r)
        if k not in out or (r.get("decision_id") or 0) >= (out[k].get("decision_id") or 0):
            out[k] = r
    return out


def _is_mapping(r: dict) -> bool:
    """A decision that states what the mention maps to: terms, or a rejection ("no term fits")."""
    action = r.get("action")
    return action == "reject" or (action not in NOT_MAPPINGS and bool(r.get("terms")))


def _mapped(r: dict) -> list[str]:
    """The terms a record maps its mention to: its terms, none when the coder marked them not related."""
    return [] if r.get("relationship") == services.NOT_RELATED else list(r.get("terms") or [])


def target_system(r: dict) -> str:
    """``group.target``: the code system's canonical with the edition (its label, else its number) as its version.

    >>> target_system({"code_system": "urn:termnorm:vocabulary:icd9", "edition": 2, "edition_label": "2024 北京临床版"})
    'urn:termnorm:vocabulary:icd9|2024%20北京临床版'
    """
    system = r.get("code_system") or services.code_system(str(r.get("vocabulary") or "vocabulary"))
    # a canonical holds no whitespace, and "|" / "#" would end its version: those are percent-encoded
    given = r.get("edition_label") or r.get("edition")
    edition = _VERSION_UNSAFE.sub(lambda m: quote(m.group()), str("" if pd.isna(given) else given).strip())
    return f"{system}|{edition}" if edition else system


def _targets(r: dict) -> list[dict]:
    terms, codes = list(r["terms"]), list(r.get("codes") or [])
    # a frame written before decisions kept their relationship gets the rule the coding page applies
    relationship = r.get("relationship") or services.default_relationship(terms)
    out = []
    for i, term in enumerate(terms):
        code = codes[i] if i < len(codes) and codes[i] else term  # a term without a code is named by itself
        tgt = {"code": fhir_code(code), "display": term, "relationship": relationship}
        if len(terms) > 1 and relationship != services.NOT_RELATED:
            tgt["comment"] = f"The mention maps to {len(terms)} terms together; this is one of them."
        elif relationship in NEEDS_COMMENT:
            tgt["comment"] = NEEDS_COMMENT[relationship]
        out.append(tgt)
    return out


def fhir_concept_map(records: Iterable[dict], *, title: str = "termnorm decisions",
                     map_id: str = "termnorm-decisions") -> dict:
    """A FHIR R5 ConceptMap from decision records (rows of ``decisions_frame`` as dicts).

    One ``group`` per (source batch ``urn:termnorm:batch:<id>``, target code
    system with its edition, see :func:`target_system`). Element = the mention
    (code whitespace-normalised); its targets carry the decision's exported
    codes, term names as display and the decision's ``relationship`` (a target
    that is one of several terms, or broader / not related, says why in its
    comment: R5 invariant cmd-1). A rejection is an element with ``noMap``
    (no term of the edition fits). Skips and flags are left out. When a mention
    text occurs several times in a batch its latest decision wins. ``status``
    is ``active`` when every decision in the map is approved, else ``draft``.
    """
    mapped = [r for r in records if _is_mapping(r) and fhir_code(r["mention"])]
    latest = _latest(mapped, lambda r: (r.get("batch_id"), fhir_code(r["mention"])))
    groups: dict[tuple[str, str], list[dict]] = {}
    for (batch, code), r in latest.items():
        source = f"urn:termnorm:batch:{batch}" if batch is not None else "urn:termnorm:mentions"
        element = {"code": code, "display": str(r["mention"]).strip()}
        if r.get("terms"):
            element["target"] = _targets(r)
        else:
            element["noMap"] = True
        groups.setdefault((source, target_system(r)), []).append(element)
    approved = bool(latest) and all(r.get("review_status") == "approved" for r in latest.values())
    cm = {
        "resourceType": "ConceptMap",
        "id": re.sub(r"[^A-Za-z0-9\-.]", "-", map_id)[:64],
        "url": f"urn:termnorm:conceptmap:{quote(map_id, safe='')}",
        "name": _fhir_name(title),
        "title": title,
        "status": "active" if approved else "draft",
        "experimental": False,
        "date": datetime.now(UTC).replace(microsecond=0).isoformat(),
        "publisher": "termnorm review app",
        "description": "Clinical mentions mapped to standard terms by coders (accepted, corrected and auto-coded "
                       "decisions; a rejected mention is an element with noMap). " + (
                           "Status active: every mapping here was approved by a lead." if approved else
                           f"Status draft: {sum(r.get('review_status') != 'approved' for r in latest.values())} "
                           f"of the {len(latest)} mappings here are not approved by a lead yet."),
    }
    if groups:  # FHIR JSON has no empty arrays
        cm["group"] = [{"source": s, "target": t, "element": elements} for (s, t), elements in groups.items()]
    return cm


def _fhir_name(title: str) -> str:
    """A computable name matching FHIR's ``[A-Z]([A-Za-z0-9_]){1,254}``."""
    name = re.sub(r"[^A-Za-z0-9_]", "", title.title())
    if len(name) < 2 or not name[:1].isascii() or not name[:1].isupper():
        name = "TermnormMap" + name
    return name[:255]


# ---------------------------------------------------------------- OMOP SOURCE_TO_CONCEPT_MAP
def omop_source_to_concept_map(df: pd.DataFrame, *, source_vocabulary_id: str | None = None,
                               target_vocabulary_id: str = "", concepts=None) -> tuple[bytes, dict]:
    """An OMOP CDM v5.4 ``SOURCE_TO_CONCEPT_MAP`` CSV of the approved decisions in ``df``, and a report.

    As OHDSI Usagi exports free-text sources: ``source_code`` = the mention
    (cut to 50 characters, the DDL's varchar(50); ``source_code_description``
    keeps up to 255), ``source_concept_id`` 0, one row per (mention, target
    term). ``target_concept_id`` is looked up by (``target_vocabulary_id``,
    ``concept_code`` = the exported code) in ``concepts``, an Athena
    ``CONCEPT.csv`` (path, bytes or upload); a code without a concept, and a
    rejected mention, get 0 ("No matching concept", vocabulary "None").
    When a mention text occurs several times its latest decision wins.

    The report: ``rows``, ``decisions``, ``rejected``, ``cut`` (mentions cut to
    50 characters), ``cut_description`` (cut to 255), ``same_source_code``
    (different mentions equal after the cut), ``no_concept`` (codes without a
    concept id) and ``rows_without_concept``.
    """
    source_vocabulary_id = _vocabulary_id(source_vocabulary_id or DEFAULT_SOURCE_VOCABULARY, "source")
    target_vocabulary_id = (target_vocabulary_id or "").strip()
    if concepts is not None and not target_vocabulary_id:
        raise ValueError("give the target vocabulary_id (e.g. ICD10CN) to look codes up in CONCEPT.csv")
    if target_vocabulary_id:
        _vocabulary_id(target_vocabulary_id, "target")
    ids = concept_ids(concepts, target_vocabulary_id) if concepts is not None else {}
    records = df[df["review_status"] == "approved"].to_dict(orient="records")
    latest = _latest([r for r in records if _is_mapping(r) and r["mention"].strip()], lambda r: r["mention"].strip())
    rows, no_concept = [], []
    for mention, r in latest.items():
        codes = list(r.get("codes") or [])
        # one row per target term; a rejection, or terms the coder said the mention is not, one row without a target
        for term, code in [(t, codes[i] if i < len(codes) else "") for i, t in enumerate(_mapped(r))] or [(None, "")]:
            concept = ids.get((code or "").strip(), OMOP_NO_CONCEPT)
            if term is not None and concept == OMOP_NO_CONCEPT:
                no_concept.append(code or f"{term} (no code)")
            rows.append([mention[:OMOP_SOURCE_CODE_LEN], 0, source_vocabulary_id, mention[:OMOP_DESCRIPTION_LEN],
                         concept, target_vocabulary_id if concept != OMOP_NO_CONCEPT else OMOP_NO_VOCABULARY,
                         OMOP_VALID_START, OMOP_VALID_END, ""])
    report = {"rows": len(rows), "decisions": len(latest),
              "rejected": sum(1 for r in latest.values() if not r["terms"]),
              "not_related": sum(1 for r in latest.values() if r["terms"] and not _mapped(r)),
              "source_vocabulary_id": source_vocabulary_id, "target_vocabulary_id": target_vocabulary_id,
              "concepts_given": concepts is not None, "concepts_read": len(ids), **_cuts(list(latest)),
              "no_concept": sorted(set(no_concept)), "rows_without_concept": len(no_concept)}
    # plain UTF-8 without BOM: these files go to a database loader (COPY / bulk insert), not to Excel
    data = pd.DataFrame(rows, columns=list(OMOP_COLUMNS)).to_csv(index=False, lineterminator=CRLF)
    return data.encode("utf-8"), report


def _cuts(mentions: list[str]) -> dict:
    """What the varchar lengths cut: mentions cut in source_code / source_code_description, and the source codes
    that the cut made equal for different mentions."""
    by_code: dict[str, set[str]] = {}
    for m in mentions:
        by_code.setdefault(m[:OMOP_SOURCE_CODE_LEN], set()).add(m)
    return {"cut": [m for m in mentions if len(m) > OMOP_SOURCE_CODE_LEN],
            "cut_description": [m for m in mentions if len(m) > OMOP_DESCRIPTION_LEN],
            "same_source_code": sorted(c for c, ms in by_code.items() if len(ms) > 1)}


def _vocabulary_id(value: str, which: str) -> str:
    value = value.strip()
    if len(value) > OMOP_VOCABULARY_ID_LEN:
        raise ValueError(f"the {which} vocabulary_id {value!r} is longer than OMOP's {OMOP_VOCABULARY_ID_LEN} "
                         "characters")
    return value


def concept_ids(source, vocabulary_id: str) -> dict[str, int]:
    """``concept_code -> concept_id`` of one vocabulary in an Athena ``CONCEPT.csv`` (path, bytes or an upload).

    Athena's files are tab-separated with unquoted text (a name may hold a
    lone ``"``); a comma-separated file is read too. A valid concept wins over
    a deprecated or upgraded one with the same code.
    """
    # No Python package reads Athena vocabulary files (OHDSI's tools are R / Java): it is one filtered table read.
    f = _binary(source)
    try:
        header = f.readline().decode("utf-8-sig", errors="replace")
        f.seek(0)
        tab = "\t" in header
        missing = [c for c in CONCEPT_COLUMNS if c not in re.split(r"[\t,]", header.strip().lower())]
        if missing:
            raise ValueError(f"CONCEPT.csv: missing column(s) {', '.join(missing)} (expected Athena's CONCEPT.csv)")
        wanted = {*CONCEPT_COLUMNS, "invalid_reason"}
        chunks = pd.read_csv(f, sep="\t" if tab else ",", dtype=str, keep_default_na=False, encoding="utf-8-sig",
                             quoting=csv.QUOTE_NONE if tab else csv.QUOTE_MINIMAL, chunksize=200_000,
                             usecols=lambda c: c.strip().lower() in wanted)
        parts = []
        for chunk in chunks:
            chunk.columns = [c.strip().lower() for c in chunk.columns]
            parts.append(chunk[chunk["vocabulary_id"].str.strip() == vocabulary_id])
    finally:
        f.close()
    found = pd.concat(parts) if parts else pd.DataFrame(columns=list(wanted))
    if "invalid_reason" not in found:
        found["invalid_reason"] = ""
    found = found.assign(code=found["concept_code"].str.strip(), deprecated=found["invalid_reason"].str.strip() != "",
                         id=pd.to_numeric(found["concept_id"], errors="coerce")).dropna(subset=["id"])
    found = found.sort_values("deprecated", kind="stable").drop_duplicates("code")
    return {c: int(i) for c, i in zip(found["code"], found["id"])}


def _binary(source) -> io.BufferedIOBase:
    if isinstance(source, (bytes, bytearray)):
        return io.BytesIO(bytes(source))
    if hasattr(source, "getvalue"):  # Streamlit's UploadedFile
        return io.BytesIO(source.getvalue())
    if hasattr(source, "read"):
        data = source.read()
        return io.BytesIO(data.encode("utf-8") if isinstance(data, str) else data)
    return open(Path(source), "rb")
