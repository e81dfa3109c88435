"""Keyword vocabularies for the keyword-attentive ranker (approach A, KAR).

Input: a folder of plain word lists (``procedure_sites.txt``,
``procedure_types.txt``, ``procedure_approaches.txt`` ...: one word per
line, optionally ``word<TAB>frequency``) and ``abbreviations.json``
(``{abbreviation: expansion}``). Output: the dict :func:`load_keywords`
returns, keyed by the kinds of :data:`~termnorm.records.KEYWORD_KINDS` plus
``abbreviations``. Files are read through :func:`.sources.open_source`, so
the same encodings are accepted and errors name the file and the line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import DataFormatError
from ..records import KEYWORD_KINDS
from .sources import _clean, open_source

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
