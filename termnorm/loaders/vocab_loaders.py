"""Reading vocabularies from the files coders actually have.

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

The format is recognised from the file itself (:func:`.sources.sniff_format`:
magic bytes, extension, first row); ``format=`` overrides it. Reading and
sniffing live in :mod:`.sources`, keyword lists in :mod:`.keywords`.

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

import html
import re

from ..errors import DataFormatError
from ..vocabulary import Vocabulary
from .sources import (
    CODE_HEADERS,
    NAME_HEADERS,
    VOCAB_FORMATS,
    Source,
    _cell_str,
    _clean,
    _header_roles,
    open_source,
    resolve_format,
)

# Several synonyms in one cell: '|' or ';' (ASCII or full width). Not '、' or
# ',': both occur inside ICD names ("颅、脑和脑膜的其他手术", "霍乱,由于...").
_SYNONYM_SPLIT = re.compile(r"[|;｜；]")
_CJK = re.compile(r"[\u3400-\u9fff]")


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
            _every_bad_row(_load_code_name, src, vocab)
        elif fmt == "vocab_table":
            _every_bad_row(_load_vocab_table, src, vocab)
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


SHOWN_BAD_ROWS = 20  # the rows a refusal names one by one; the rest are counted


def _every_bad_row(load, src: Source, vocab: Vocabulary) -> None:
    """Run a table loader and refuse the file naming every wrong row it noted (an admin fixed a file once per bad
    row while the loader stopped at the first)."""
    problems: list[DataFormatError] = []
    load(src, vocab, problems)
    if problems:
        first, rest = problems[0], problems[1:]
        more = "; ".join(f"row {e.row}: {e.problem}" for e in rest[:SHOWN_BAD_ROWS - 1])
        left = len(rest) - (SHOWN_BAD_ROWS - 1)
        raise DataFormatError(src.path, first.row, first.problem
                              + (f"; also {more}" if more else "") + (f" and {left} more rows" if left > 0 else "")
                              + (f" ({len(problems)} rows wrong; nothing imported)" if rest else ""))


def _guess_language(names: list[str]) -> str:
    # The vocabularies at hand are either almost all CJK (zh) or none (MEDIC);
    # a 50% cut leaves a wide margin on both sides.
    sample = names[:2000]
    cjk = sum(1 for n in sample if _CJK.search(n))
    return "zh" if cjk * 2 >= len(sample) else "en"


def _load_code_name(src: Source, vocab: Vocabulary, problems: list[DataFormatError]) -> None:
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
            _add_code_name(src, vocab, row, cells, row == rows[0][0], problems)
        return
    lines = src.lines()
    for row, line in lines:
        cells = [_clean(c) for c in line.split("\t")]
        while cells and not cells[-1]:
            cells.pop()  # trailing TABs are a harmless export habit
        if len(cells) != 2:
            problems.append(DataFormatError(
                src.path, row, f"expected 2 TAB-separated fields (code, name), found {len(cells)}"
            ))
            continue
        _add_code_name(src, vocab, row, cells, row == lines[0][0], problems)


def _add_code_name(src: Source, vocab: Vocabulary, row: int, cells: list[str], first: bool,
                   problems: list[DataFormatError]) -> None:
    code = cells[0] if cells else ""
    nm = cells[1] if len(cells) > 1 else ""
    if not code or not nm:
        problems.append(DataFormatError(src.path, row, "missing code" if not code else "missing name"))
        return
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


def _load_vocab_table(src: Source, vocab: Vocabulary, problems: list[DataFormatError]) -> None:
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
        if not code or not nm:
            problems.append(DataFormatError(src.path, row, f"missing code (column {header[ci]!r})" if not code
                                          else f"missing name (column {header[ni]!r})"))
            continue
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
