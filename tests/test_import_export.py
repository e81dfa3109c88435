"""Importing mention files (good and bad rows) and exporting decisions in every format."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import openpyxl
import pandas as pd
import pytest

from db import io as dbio
from db import services as S
from termnorm.vocabulary import Vocabulary

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "assets" / "demo"
DATA = REPO / ".." / "shared" / "data"

TERMS = {"甲状腺病损切除术": "06.3100", "甲状腺全部切除术": "06.4x00", "胆囊切除术": "51.2200",
         "腹腔镜下胆囊切除术": "51.2300", "胆总管探查术": "51.5100", "阑尾切除术": "47.0900"}


def vocabulary() -> Vocabulary:
    v = Vocabulary(name="procedures")
    if (DEMO / "procedures.csv").exists():
        with open(DEMO / "procedures.csv", encoding="utf-8") as f:
            for row in csv.DictReader(f):
                v.add_term(row["name"], [row["code"]])
    for name, code in TERMS.items():
        if name not in v:
            v.add_term(name, [code])
    return v


@pytest.fixture
def db(tmp_path):
    url = f"sqlite:///{tmp_path / 'io.sqlite3'}"
    S.init_db(url)
    with S.session_scope(url) as s:
        vid = S.load_vocabulary(s, vocabulary(), "procedures")
        yield s, vid
    S.dispose(url)


def problems(report):
    return [(e.row, e.problem) for e in report.errors]


# ------------------------------------------------------------------ import
def test_csv_with_good_and_bad_rows(db, tmp_path):
    s, vid = db
    path = tmp_path / "mentions.csv"
    lines = [
        "mention,terms".encode(),
        "右侧甲状腺肿块切除,甲状腺病损切除术".encode(),  # row 2
        ",胆囊切除术".encode(),  # row 3: empty mention
        ('"' + "很长" * 300 + '",').encode(),  # row 4: 600 characters
        b"\xff\xfe\xfa bad bytes,",  # row 5: not UTF-8 (the rest of the file is)
        "LC+胆总管探查,腹腔镜下胆囊切除术##胆总管探查术".encode(),  # row 6
        b"",  # blank line: not a row
        "   ,阑尾切除术".encode(),  # row 8: blank mention (a row holding only blanks is skipped as a blank line)
        '"阑尾切除, 腹腔镜",阑尾切除术'.encode(),  # row 9 (quoted comma)
    ]
    path.write_bytes(b"\n".join(lines) + b"\n")
    rep = S.import_mentions(s, path, "csv batch", vid, username="alice")
    assert rep.file == str(path) and all(e.file == str(path) for e in rep.errors)
    assert problems(rep) == [(3, "empty mention"), (4, "mention too long (600 > 500 characters)"),
                             (5, dbio.UNDECODABLE), (8, "empty mention")]
    assert rep.n_ok == 3 and rep.n_bad == 4 and rep.batch_id is not None
    ms = S.mentions(s, rep.batch_id)
    assert [(m["position"], m["text"], m["source_row"]) for m in ms] == [
        (1, "右侧甲状腺肿块切除", 2), (2, "LC+胆总管探查", 6), (3, "阑尾切除, 腹腔镜", 9)]
    assert ms[1]["gold_terms"] == ["腹腔镜下胆囊切除术", "胆总管探查术"]
    assert "4 problem(s)" in rep.summary() and "row 5" in str(rep.errors[2])


def test_gb18030_tsv_is_decoded(db, tmp_path):
    s, vid = db
    path = tmp_path / "从Excel导出.tsv"
    path.write_bytes("原始词\t标准词\n胆囊切除\t胆囊切除术\n甲状腺全切\t甲状腺全部切除术\n".encode("gb18030"))
    rep = S.import_mentions(s, path, "gbk", vid)
    assert rep.errors == [] and rep.n_ok == 2
    assert [(m["text"], m["gold_terms"]) for m in S.mentions(s, rep.batch_id)] == [
        ("胆囊切除", ["胆囊切除术"]), ("甲状腺全切", ["甲状腺全部切除术"])]


def test_xlsx_with_good_and_bad_rows(db, tmp_path):
    s, vid = db
    wb = openpyxl.Workbook()
    ws = wb.active
    ws.append(["编号", "原始词", "标准词"])
    ws.append([1, "双侧甲状腺全切术", "甲状腺全部切除术"])
    ws.append([2, None, "胆囊切除术"])  # row 3: empty
    ws.append([3, "x" * 501, None])  # row 4: too long
    ws.append([4, 12345, None])  # row 5: a number is still a (strange) mention
    path = tmp_path / "batch.xlsx"
    wb.save(path)
    rep = S.import_mentions(s, path, "xlsx batch", vid)
    assert problems(rep) == [(3, "empty mention"), (4, "mention too long (501 > 500 characters)")]
    assert [(m["text"], m["gold_terms"], m["source_row"]) for m in S.mentions(s, rep.batch_id)] == [
        ("双侧甲状腺全切术", ["甲状腺全部切除术"], 2), ("12345", [], 5)]


def test_chip_cdn_json_with_bad_items(db, tmp_path):
    s, vid = db
    items = [{"text": "胆囊结石伴胆囊炎", "normalized_result": "胆囊切除术"}, "just a string",
             {"txt": "typo in key"}, {"text": ""}, {"text": ["a list"]},
             {"text": "甲状腺癌术后", "normalized_result": "甲状腺病损切除术##甲状腺全部切除术"}]
    path = tmp_path / "cdn.json"
    path.write_text(json.dumps(items, ensure_ascii=False), encoding="utf-8")
    rep = S.import_mentions(s, path, "cdn", vid)
    assert problems(rep) == [(2, "not an object (str)"), (3, "missing field 'text'"), (4, "empty mention"),
                             (5, "field 'text' is not a string")]
    assert [(m["text"], m["gold_terms"], m["source_row"]) for m in S.mentions(s, rep.batch_id)] == [
        ("胆囊结石伴胆囊炎", ["胆囊切除术"], 1), ("甲状腺癌术后", ["甲状腺病损切除术", "甲状腺全部切除术"], 6)]


def test_json_lines_with_a_broken_line():
    data = '{"text": "阑尾炎"}\n{"text": "broken\n\n[1, 2]\n{"text": "胆囊炎", "normalized_result": "胆囊切除术"}\n'
    good, bad = dbio.read_mentions(data.encode(), "upload.jsonl")
    assert [(m.text, m.terms, m.row) for m in good] == [("阑尾炎", [], 1), ("胆囊炎", ["胆囊切除术"], 5)]
    assert [(b.row, b.problem.split(":")[0]) for b in bad] == [(2, "not valid JSON"), (4, "not an object (list)")]


@pytest.mark.parametrize("name,content,needle", [
    ("garbage.xlsx", b"PK\x03\x04 this is not really a zip", "not a readable XLSX"),
    ("old.xls", b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1 legacy", "legacy .xls"),
    ("broken.json", b'[{"text": "a"}, {"text": ', "not valid JSON"),
    ("object.json", b'{"rows": [1, 2]}', "top level is not a list"),
    ("latin1.json", '[{"text": "caf\u00e9"}]'.encode("latin-1"), "undecodable"),
    ("nocolumn.csv", "diagnosis,code\n阑尾炎,K35\n".encode(), "missing column"),
    ("empty.csv", b"   \n", "empty file"),
])
def test_wholly_unreadable_files_give_one_clear_error(db, tmp_path, name, content, needle):
    s, vid = db
    path = tmp_path / name
    path.write_bytes(content)
    rep = S.import_mentions(s, path, "bad", vid)
    assert rep.n_ok == 0 and rep.batch_id is None and len(rep.errors) == 1
    assert rep.errors[0].file == str(path) and needle in rep.errors[0].problem
    assert S.batches(s) == []


def test_missing_file_and_uploaded_file_objects(db, tmp_path):
    s, vid = db
    rep = S.import_mentions(s, tmp_path / "nope.csv", "x", vid)
    assert len(rep.errors) == 1 and rep.errors[0].row is None and "cannot open" in rep.errors[0].problem
    upload = io.BytesIO("text\n胆囊切除\n".encode("utf-8-sig"))
    upload.name = "upload.csv"  # what Streamlit's UploadedFile provides
    rep = S.import_mentions(s, upload, "upload", vid)
    assert rep.errors == [] and rep.file == "upload.csv"
    assert [m["text"] for m in S.mentions(s, rep.batch_id)] == ["胆囊切除"]


@pytest.mark.skipif(not (DEMO / "mentions.csv").exists(), reason="demo mentions not written yet")
def test_demo_mentions_import_cleanly(db):
    s, vid = db
    with open(DEMO / "mentions.csv", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    rep = S.import_mentions(s, DEMO / "mentions.csv", "demo", vid)
    assert rep.errors == [] and rep.n_ok == len(rows)
    ms = S.mentions(s, rep.batch_id)
    assert [m["text"] for m in ms] == [r["mention"] for r in rows]
    assert [m["gold_terms"] for m in ms] == [r["terms"].split("##") for r in rows]


@pytest.mark.skipif(not DATA.exists(), reason="shared data absent")
def test_research_files_import_without_problems():
    good, bad = dbio.read_mentions(DATA / "chip-cdn" / "dev.json")
    items = json.loads((DATA / "chip-cdn" / "dev.json").read_text(encoding="utf-8"))
    assert bad == [] and len(good) == len(items)
    assert good[0].terms == items[0]["normalized_result"].split("##")
    good, bad = dbio.read_mentions(DATA / "yidu-n7k" / "val.xlsx")
    assert bad == [] and len(good) == 1000 and good[0].row == 2


# ------------------------------------------------------------------ export
@pytest.fixture
def decided(db):
    """Corrections (1 and 2 terms, one superseded), a skip, an undecided mention, a repeated mention text."""
    s, vid = db
    bid = S.create_batch(s, "export batch", vid, ["右侧甲状腺肿块切除", "LC+胆总管探查", "奇怪的写法", "阑尾",
                                                  "未处理", "右侧甲状腺肿块切除"])
    ids = [m["id"] for m in S.mentions(s, bid)]
    S.record_decision(s, ids[5], "bob", "correct", ["甲状腺全部切除术"])  # same text, decided earlier
    S.record_decision(s, ids[0], "alice", "correct", ["甲状腺病损切除术"], seconds=3)
    S.record_decision(s, ids[1], "alice", "correct", ["腹腔镜下胆囊切除术", "胆总管探查术"], comment="2 terms")
    S.record_decision(s, ids[2], "bob", "correct", ["阑尾切除术"])
    S.record_decision(s, ids[2], "bob", "correct", ["胆囊切除术"])  # supersedes: the latest wins
    S.record_decision(s, ids[3], "bob", "skip", comment="unclear")
    return s, bid


def test_export_csv_and_xlsx_parse_back(decided):
    s, bid = decided
    df = pd.read_csv(io.BytesIO(S.export_decisions(s, bid, "csv")), keep_default_na=False)
    assert list(df["mention"]) == ["右侧甲状腺肿块切除", "LC+胆总管探查", "奇怪的写法", "阑尾", "右侧甲状腺肿块切除"]
    assert list(df["terms"]) == ["甲状腺病损切除术", "腹腔镜下胆囊切除术##胆总管探查术", "胆囊切除术", "",
                                 "甲状腺全部切除术"]
    v = vocabulary()
    assert list(df["codes"]) == ["##".join(v.codes_of(t)[0] for t in terms.split("##")) if terms else ""
                                 for terms in df["terms"]]
    assert df["codes"][0] == v.codes_of("甲状腺病损切除术")[0] != ""
    assert list(df["action"]) == ["correct", "correct", "correct", "skip", "correct"]
    wb = openpyxl.load_workbook(io.BytesIO(S.export_decisions(s, bid, "xlsx")), read_only=True)
    rows = list(wb["decisions"].iter_rows(values_only=True))
    assert list(rows[0]) == S.DECISION_COLUMNS and len(rows) == 6
    col = rows[0].index("terms")
    assert [r[col] for r in rows[1:]][:2] == ["甲状腺病损切除术", "腹腔镜下胆囊切除术##胆总管探查术"]


def test_export_jsonl_and_chip_cdn_parse_back(decided, tmp_path):
    s, bid = decided
    recs = [json.loads(ln) for ln in S.export_decisions(s, bid, "jsonl").decode("utf-8").splitlines()]
    assert len(recs) == 5 and recs[1]["terms"] == ["腹腔镜下胆囊切除术", "胆总管探查术"]
    assert recs[3]["comment"] == "unclear" and recs[3]["terms"] == []
    cdn = json.loads(S.export_decisions(s, bid, "chip-cdn"))
    assert cdn == [{"text": "右侧甲状腺肿块切除", "normalized_result": "甲状腺病损切除术"},
                   {"text": "LC+胆总管探查", "normalized_result": "腹腔镜下胆囊切除术##胆总管探查术"},
                   {"text": "奇怪的写法", "normalized_result": "胆囊切除术"},
                   {"text": "右侧甲状腺肿块切除", "normalized_result": "甲状腺全部切除术"}]
    # the export is importable again
    path = tmp_path / "export.json"
    path.write_bytes(S.export_decisions(s, bid, "chip-cdn"))
    good, bad = dbio.read_mentions(path)
    assert bad == [] and [(m.text, "##".join(m.terms)) for m in good] == [
        (c["text"], c["normalized_result"]) for c in cdn]


def test_export_fhir_r5_concept_map(decided):
    s, bid = decided
    cm = json.loads(S.export_decisions(s, bid, "fhir"))
    assert cm["resourceType"] == "ConceptMap" and cm["status"] in ("draft", "active", "retired", "unknown")
    assert {"url", "name", "title", "date", "group"} <= set(cm)
    assert cm["name"][0].isupper() and cm["name"].isascii()
    (group,) = cm["group"]
    assert group["source"] == f"urn:termnorm:batch:{bid}" and group["target"].startswith("urn:termnorm:vocabulary:")
    elements = group["element"]
    # three distinct coded mention texts; skip and undecided are not mapped; for the repeated
    # text the most recent decision (not the last in file order) wins
    assert len(elements) == 3
    by_code = {e["code"]: e for e in elements}
    single = by_code["右侧甲状腺肿块切除"]
    assert single["display"] == "右侧甲状腺肿块切除"
    assert single["target"] == [{"code": vocabulary().codes_of("甲状腺病损切除术")[0], "display": "甲状腺病损切除术",
                                 "relationship": "equivalent"}]
    multi = by_code["LC+胆总管探查"]["target"]
    assert [t["display"] for t in multi] == ["腹腔镜下胆囊切除术", "胆总管探查术"]
    assert all(t["relationship"] == "source-is-broader-than-target" and t["comment"] for t in multi)
    assert by_code["奇怪的写法"]["target"][0]["display"] == "胆囊切除术"
    with pytest.raises(ValueError):
        S.export_decisions(s, bid, "pdf")
