"""Reading labelled mentions (mention -> gold term names) for training and evaluation.

Approaches A..E of methods.md all train and are scored on (mention, gold
names) pairs; this module reads them into a
:class:`~termnorm.records.LabelledSet`:

==================  ============================================================
format              file
==================  ============================================================
``cdn_json``        CHIP-CDN: JSON list of ``{"text", "normalized_result":
                    "a##b"}``; a missing / empty result (``unlabeled.json``)
                    gives ``terms == []``.
``labelled_table``  XLSX / CSV / TSV with a header: mention column (mention,
                    text, 原始词) and gold column (terms, normalized_result,
                    标准词) with names joined by ``##`` (Yidu-N7K train/val).
``pubtator``        NCBI disease corpus: every annotation line ``pmid, start,
                    end, mention, type, ids`` is one mention; composite ids
                    ``D1|D2`` / ``D1+D2`` give several terms; the document's
                    title and abstract lines are the mention's ``document``
                    (termnorm.context reads its abbreviations).
==================  ============================================================

Gold names that are not names of ``vocab`` are *reported* in
``LabelledSet.missing`` as ``(row, name)`` and kept on the mention: about 4%
of CHIP-CDN gold names are absent from v601, and dropping them would inflate
every score. For PubTator, ids are resolved to ``vocab`` names (MEDIC); an id
the vocabulary lacks stays on the mention as the normalised id and is
reported. Nothing is printed; callers decide how to report.
"""

from __future__ import annotations

import re

from ..errors import DataFormatError
from ..records import LabelledMention, LabelledSet
from ..vocabulary import Vocabulary
from .sources import (
    LABELLED_FORMATS,
    MENTION_HEADERS,
    TERMS_HEADERS,
    Source,
    _clean,
    _header_roles,
    open_source,
    resolve_format,
)
from .vocab_loaders import normalize_concept_id

TERM_SEPARATOR = "##"
_ID_SPLIT = re.compile(r"[|+]")

_LABELLED_ALIASES = {
    "chip-cdn": "cdn_json", "cdn": "cdn_json", "json": "cdn_json",
    "table": "labelled_table", "csv": "labelled_table", "tsv": "labelled_table",
    "xlsx": "labelled_table", "yidu": "labelled_table",
    "ncbi": "pubtator",
}


def split_terms(value: str) -> list[str]:
    """``"a##b##a"`` -> ``["a", "b"]``: order kept, blanks and repeats dropped.

    ASCII double quotes at either end of a name are removed: they are CSV
    quoting left in CHIP-CDN gold (``'"慢性肾脏病,5期##痛风性肾病"'`` -- a name
    containing a comma was quoted, then joined). No v601 name contains an
    ASCII '"'; the strip turns 91 of the 620 train and 15 of the 124 dev gold
    names missing from v601 into v601 names (measured with load_labelled).
    """
    out: dict[str, None] = {}
    for t in value.split(TERM_SEPARATOR):
        t = _clean(_clean(t).strip('"'))
        if t:
            out.setdefault(t, None)
    return list(out)


def load_labelled(path, vocab: Vocabulary | None = None, format: str | None = None) -> LabelledSet:
    """Load a labelled file (format sniffed, ``format`` overrides; see the module docstring).

    ``LabelledMention.row`` is the 1-based line (PubTator), sheet / text row
    (tables) or item position (JSON).
    """
    src = open_source(path)
    try:
        fmt = resolve_format(src, format, LABELLED_FORMATS, _LABELLED_ALIASES, "labelled mentions")
        if fmt == "cdn_json":
            mentions = _load_cdn_json(src)
        elif fmt == "labelled_table":
            mentions = _load_table(src)
        else:
            return _load_pubtator(src, vocab)
    finally:
        src.close()
    if not mentions:
        raise DataFormatError(src.path, None, "no mentions found")
    missing: list[tuple[int | None, str]] = []
    if vocab is not None:
        missing = [(m.row, t) for m in mentions for t in m.terms if t not in vocab]
    return LabelledSet(path=str(src.path), mentions=mentions, missing=missing)


def _load_cdn_json(src: Source) -> list[LabelledMention]:
    data = src.json()
    if not isinstance(data, list):
        raise DataFormatError(src.path, None, "expected a JSON list of {text, normalized_result} objects")
    out = []
    for row, item in enumerate(data, 1):
        if not isinstance(item, dict):
            raise DataFormatError(src.path, row, f"item is not an object: {item!r:.60}")
        text = item.get("text", item.get("mention"))
        if not isinstance(text, str) or not _clean(text):
            raise DataFormatError(src.path, row, "empty mention (key 'text')")
        gold = item.get("normalized_result")
        if gold is None:
            terms = []
        elif isinstance(gold, str):
            terms = split_terms(gold)
        elif isinstance(gold, list) and all(isinstance(g, str) for g in gold):
            terms = split_terms(TERM_SEPARATOR.join(gold))
        else:
            raise DataFormatError(
                src.path, row, f"normalized_result must be a string 'a##b', found {type(gold).__name__}"
            )
        out.append(LabelledMention(text=_clean(text), terms=terms, row=row))
    return out


def _load_table(src: Source) -> list[LabelledMention]:
    rows = src.table_rows()
    if not rows:
        raise DataFormatError(src.path, None, "empty file")
    hrow, header = rows[0]
    roles = _header_roles(header)
    for role, aliases in (("mention", MENTION_HEADERS), ("terms", TERMS_HEADERS)):
        if role not in roles:
            raise DataFormatError(
                src.path, hrow,
                f"missing required column {role!r} (accepted headers: {', '.join(sorted(aliases))}); "
                f"found {', '.join(header)}",
            )
    mi, ti = roles["mention"], roles["terms"]
    out = []
    for row, cells in rows[1:]:
        text = cells[mi] if mi < len(cells) else ""
        if not text:
            raise DataFormatError(src.path, row, f"empty mention (column {header[mi]!r})")
        gold = cells[ti] if ti < len(cells) else ""
        out.append(LabelledMention(text=text, terms=split_terms(gold), row=row))
    return out


def _load_pubtator(src: Source, vocab: Vocabulary | None) -> LabelledSet:
    if src.kind != "text":
        raise DataFormatError(src.path, None, "PubTator files are text, found a spreadsheet")
    mentions: list[LabelledMention] = []
    missing: list[tuple[int | None, str]] = []
    documents: dict[str, list[str]] = {}
    for row, line in src.lines():
        if "\t" not in line:
            parts = line.split("|", 2)
            if len(parts) == 3 and parts[1] in ("t", "a") and parts[0].strip():
                documents.setdefault(parts[0].strip(), []).append(parts[2])
                continue
            raise DataFormatError(
                src.path, row, "bad PubTator line: neither 'pmid|t|title', 'pmid|a|abstract' nor an annotation"
            )
        f = line.split("\t")
        if len(f) != 6:
            raise DataFormatError(
                src.path, row,
                f"bad PubTator line: expected 6 TAB-separated fields (pmid, start, end, mention, type, ids), "
                f"found {len(f)}",
            )
        pmid, start, end, text, _type, ids = (x.strip() for x in f)
        if not (start.isdigit() and end.isdigit() and int(start) < int(end)):
            raise DataFormatError(src.path, row, f"bad PubTator line: offsets {start!r}, {end!r} are not start < end")
        if not text:
            raise DataFormatError(src.path, row, "bad PubTator line: empty mention")
        id_list: dict[str, None] = {}
        for i in _ID_SPLIT.split(ids):
            if i.strip():
                id_list.setdefault(normalize_concept_id(i), None)
        if not id_list:
            raise DataFormatError(src.path, row, "bad PubTator line: no concept id")
        terms = []
        for cid in id_list:
            if vocab is None:
                terms.append(cid)
                continue
            nm = vocab.code_names.get(cid)
            if nm is None or nm not in vocab:
                alts = vocab.names_of(cid)
                nm = alts[0] if alts else None
            if nm is None:
                missing.append((row, cid))
                nm = cid
            if nm not in terms:
                terms.append(nm)
        mentions.append(LabelledMention(text=text, terms=terms, row=row, document=pmid))
    if not mentions:
        raise DataFormatError(src.path, None, "no annotated mentions found")
    texts = {pmid: "\n".join(lines) for pmid, lines in documents.items()}
    for m in mentions:  # one string per document, shared by its mentions
        m.document = texts.get(m.document, "")
    return LabelledSet(path=str(src.path), mentions=mentions, missing=missing)
