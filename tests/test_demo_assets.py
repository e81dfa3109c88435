"""The embedded demo data (assets/demo): shape, codes, gold terms, multi-term share.

The demo files are what `Engine.from_demo()` and the app run on when no
vocabulary is given, so a malformed row there breaks the product's first
impression. These tests read the files with the csv module (independent of
the project's loaders), then again through `termnorm.loaders` when it is
available, and, when `../shared/data` is present, check every term against
the full vocabularies and every mention against the public labelled sets
(the mentions must be our own).
"""

from __future__ import annotations

import csv
import json
import re
import unicodedata
from collections import Counter
from pathlib import Path

import pytest

from termnorm.loaders import load_vocabulary

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "assets" / "demo"
SHARED = REPO / ".." / "shared" / "data"

VOCABS = ("procedures", "diagnoses")
# ICD-9-CM-3 clinical extension: chapter NN, then .N + (digit or x) + NN ("06.3100", "06.4x00"); a name's
# category code as the full file gives it beside the leaf ("06.4").
PROCEDURE_CODE = re.compile(r"^\d{2}(\.\d([\dx]\d{2})?)?$")
# ICD-10 Beijing clinical v6.01: A00 / A00.0 / A00.001 / C79.8823 / I10xx02, with an optional
# asterisk code of a dagger-asterisk pair ("E11.221+N08.3*"); or an ICD-O morphology code
# ("M814000/3" 腺癌: histology terms, given alongside the site term as CHIP-CDN does).
DIAGNOSIS_CODE = re.compile(r"^([A-Z]\d{2}(\.\d{1,4}|\.x|xx\d{2})?\+?([A-Z]\d{2}(\.\d{1,3})?\*)?|M\d{6}/\d)$")
CODE_PATTERNS = {"procedures": PROCEDURE_CODE, "diagnoses": DIAGNOSIS_CODE}

# "about 200" of each; the ranges leave room for edits without letting the files
# shrink into a toy or grow into a copy of a vocabulary.
COUNT_RANGE = (150, 300)
MIN_MULTI_SHARE = 0.20


def _read(name: str) -> tuple[list[str], list[dict[str, str]]]:
    with open(DEMO / name, encoding="utf-8", newline="") as f:
        reader = csv.DictReader(f)
        rows = list(reader)
        return list(reader.fieldnames or []), rows


def _fold(text: str) -> str:
    """Width / case / blank / punctuation folding, to catch near-duplicate mentions."""
    text = unicodedata.normalize("NFKC", text).casefold()
    return re.sub(r"[\s\W_]+", "", text)


@pytest.fixture(scope="module")
def vocab_rows() -> dict[str, list[dict[str, str]]]:
    return {v: _read(f"{v}.csv")[1] for v in VOCABS}


@pytest.fixture(scope="module")
def mention_rows() -> list[dict[str, str]]:
    return _read("mentions.csv")[1]


# ---------------------------------------------------------------------------
# files
# ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    "name, header",
    [
        ("procedures.csv", ["code", "name", "synonyms"]),
        ("diagnoses.csv", ["code", "name", "synonyms"]),
        ("mentions.csv", ["mention", "terms", "vocabulary"]),
    ],
)
def test_file_is_utf8_csv_with_header(name, header):
    raw = (DEMO / name).read_bytes()
    assert not raw.startswith(b"\xef\xbb\xbf"), f"{name}: BOM"
    raw.decode("utf-8")  # raises if not UTF-8
    fields, rows = _read(name)
    assert fields == header
    for i, row in enumerate(rows, start=2):
        assert None not in row, f"{name} row {i}: more fields than the header (unquoted comma?)"
        assert all(v is not None for v in row.values()), f"{name} row {i}: missing field"
        assert all(v == v.strip() for v in row.values()), f"{name} row {i}: blank around a value"


def test_readme_describes_files():
    text = (DEMO / "README.md").read_text(encoding="utf-8")
    for word in ("procedures.csv", "diagnoses.csv", "mentions.csv", "synonyms", "vocabulary", "##"):
        assert word in text


# ---------------------------------------------------------------------------
# vocabularies
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("which", VOCABS)
def test_vocabulary_counts_names_codes(vocab_rows, which):
    rows = vocab_rows[which]
    lo, hi = COUNT_RANGE
    assert lo <= len(rows) <= hi
    names = [r["name"] for r in rows]
    codes = [r["code"] for r in rows]
    assert all(names), "empty name"
    # a name may have several codes (category + leaf, as the full files give them); a code names one term
    dup_pairs = [p for p, c in Counter(zip(names, codes)).items() if c > 1]
    dup_codes = [n for n, c in Counter(codes).items() if c > 1]
    assert not dup_pairs and not dup_codes
    # every name's export code is the one the demo rows listed first for it: the most specific
    v = load_vocabulary(DEMO / f"{which}.csv")
    first = {}
    for r in rows:
        first.setdefault(r["name"], r["code"])
    assert {n: v.export_code(n) for n in first} == first
    assert sum(1 for n in first if len(v.codes_of(n)) > 1) >= 15
    bad = [c for c in codes if not CODE_PATTERNS[which].match(c)]
    assert not bad, f"malformed {which} codes: {bad[:5]}"
    # several chapters, not one corner of the classification
    chapters = {c[:2] if which == "procedures" else c[0] for c in codes}
    assert len(chapters) >= 10


def test_vocabularies_share_no_name(vocab_rows):
    p = {r["name"] for r in vocab_rows["procedures"]}
    d = {r["name"] for r in vocab_rows["diagnoses"]}
    assert not p & d


@pytest.mark.parametrize("which", VOCABS)
def test_synonyms_well_formed(vocab_rows, which):
    rows = vocab_rows[which]
    all_names = {r["name"] for rs in vocab_rows.values() for r in rs}
    owner: dict[str, str] = {}
    with_syn = 0
    for r in rows:
        if not r["synonyms"]:
            continue
        with_syn += 1
        for s in r["synonyms"].split("|"):
            assert s and s == s.strip(), f"{r['name']}: empty or padded synonym"
            assert s not in all_names, f"{r['name']}: synonym {s!r} is itself a term name"
            assert owner.setdefault(s, r["name"]) == r["name"], f"synonym {s!r} on two terms"
    # "a few entries with synonyms, most empty"
    assert 5 <= with_syn <= len(rows) // 4


@pytest.mark.parametrize("which", VOCABS)
def test_keyword_families_present(vocab_rows, which):
    """Near-identical terms (one contains the other: 胆囊切除术 / 腹腔镜下胆囊切除术) are the point."""
    names = sorted({r["name"] for r in vocab_rows[which]}, key=len)
    pairs = sum(1 for i, a in enumerate(names) for b in names[i + 1:] if a in b)
    assert pairs >= 10


# ---------------------------------------------------------------------------
# mentions
# ---------------------------------------------------------------------------
def test_mentions_count_and_columns(mention_rows):
    lo, hi = COUNT_RANGE
    assert lo <= len(mention_rows) <= hi
    by_vocab = Counter(r["vocabulary"] for r in mention_rows)
    assert set(by_vocab) == set(VOCABS)
    assert min(by_vocab.values()) >= 80
    for i, r in enumerate(mention_rows, start=2):
        terms = r["terms"].split("##")
        assert r["mention"], f"row {i}: empty mention"
        assert 1 <= len(terms) <= 4 and all(terms), f"row {i}: bad terms {r['terms']!r}"
        assert len(set(terms)) == len(terms), f"row {i}: repeated gold term"


def test_no_duplicate_mentions(mention_rows):
    exact = [m for m, c in Counter(r["mention"] for r in mention_rows).items() if c > 1]
    folded = [m for m, c in Counter(_fold(r["mention"]) for r in mention_rows).items() if c > 1]
    assert not exact and not folded


def test_every_gold_term_in_its_vocabulary(vocab_rows, mention_rows):
    names = {v: {r["name"] for r in rows} for v, rows in vocab_rows.items()}
    missing = [
        (i, t) for i, r in enumerate(mention_rows, start=2)
        for t in r["terms"].split("##") if t not in names[r["vocabulary"]]
    ]
    assert not missing, missing[:5]


def test_multi_term_share(mention_rows):
    multi = [r for r in mention_rows if "##" in r["terms"]]
    assert len(multi) / len(mention_rows) >= MIN_MULTI_SHARE
    # both vocabularies exercise the "how many terms" decision
    assert min(Counter(r["vocabulary"] for r in multi).values()) >= 10
    assert max(len(r["terms"].split("##")) for r in multi) >= 3


def test_mentions_are_not_just_the_names(vocab_rows, mention_rows):
    """Messy input: a mention identical (after folding) to a name or synonym would test nothing."""
    forms = set()
    for rows in vocab_rows.values():
        for r in rows:
            forms.add(_fold(r["name"]))
            forms.update(_fold(s) for s in r["synonyms"].split("|") if s)
    trivial = [r["mention"] for r in mention_rows if _fold(r["mention"]) in forms]
    assert len(trivial) <= len(mention_rows) // 20, trivial


# ---------------------------------------------------------------------------
# through the project's loaders
# ---------------------------------------------------------------------------
def test_loaders_read_the_demo(vocab_rows, mention_rows):
    from termnorm import loaders as io
    vocabs = {}
    for which in VOCABS:
        v = io.load_vocabulary(DEMO / f"{which}.csv")
        rows = vocab_rows[which]
        assert len(v) == len({r["name"] for r in rows})
        for r in rows:
            assert r["code"] in v.codes_of(r["name"])
            if r["synonyms"]:
                assert v.synonyms.get(r["name"], []) == [s for s in r["synonyms"].split("|") if s]
        vocabs[which] = v

    labelled = io.load_labelled(DEMO / "mentions.csv")
    assert [m.text for m in labelled.mentions] == [r["mention"] for r in mention_rows]
    assert [m.terms for m in labelled.mentions] == [r["terms"].split("##") for r in mention_rows]
    # Checked against one vocabulary, exactly the other vocabulary's rows report missing names.
    for which in VOCABS:
        checked = io.load_labelled(DEMO / "mentions.csv", vocabs[which])
        other_rows = {i for i, r in enumerate(mention_rows, start=2) if r["vocabulary"] != which}
        assert {row for row, _ in checked.missing} == other_rows


# ---------------------------------------------------------------------------
# against the shared data (skipped where ../shared/data is absent)
# ---------------------------------------------------------------------------
def _need(path: Path) -> Path:
    from helpers import need

    return need(path)  # a skip without ../shared/data, a failure under CI


def test_procedure_terms_exist_in_yidu_vocabulary(vocab_rows):
    pairs = set()
    with open(_need(SHARED / "yidu-n7k" / "code.txt"), encoding="utf-8") as f:
        for line in f:
            code, _, name = line.rstrip("\n").partition("\t")
            pairs.add((code.strip(), name.strip()))
    absent = [(r["code"], r["name"]) for r in vocab_rows["procedures"] if (r["code"], r["name"]) not in pairs]
    assert not absent, absent[:5]


def test_diagnosis_terms_exist_in_v601(vocab_rows):
    import openpyxl
    wb = openpyxl.load_workbook(_need(SHARED / "chip-cdn" / "icd10_beijing_clinical_v601.xlsx"), read_only=True)
    try:
        pairs = {(str(c).strip(), str(n).strip()) for c, n, *_ in wb.active.iter_rows(values_only=True)}
    finally:
        wb.close()
    absent = [(r["code"], r["name"]) for r in vocab_rows["diagnoses"] if (r["code"], r["name"]) not in pairs]
    assert not absent, absent[:5]


def test_mentions_are_our_own(mention_rows):
    """No demo mention equals (after folding) a mention of the public train / dev / test sets."""
    public: set[str] = set()
    for name in ("train.json", "dev.json", "unlabeled.json"):
        with open(_need(SHARED / "chip-cdn" / name), encoding="utf-8") as f:
            public.update(_fold(item["text"]) for item in json.load(f))
    import openpyxl
    for name in ("train.xlsx", "val.xlsx"):
        wb = openpyxl.load_workbook(_need(SHARED / "yidu-n7k" / name), read_only=True)
        try:
            public.update(_fold(str(row[0])) for row in wb.active.iter_rows(min_row=2, values_only=True) if row[0])
        finally:
            wb.close()
    copied = [r["mention"] for r in mention_rows if _fold(r["mention"]) in public]
    assert not copied, copied
