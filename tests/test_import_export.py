"""Importing mention files (good and bad rows) and exporting decisions in every format."""

from __future__ import annotations

import csv
import io
import json
import random
from pathlib import Path

import openpyxl
import pandas as pd
import pytest
from sqlalchemy import update

from db import imports as dbio
from db.models import Term
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
def db(url):  # conftest's url: a fresh database of each backend
    S.init_db(url)
    with S.session_scope(url) as s:
        vid = S.load_vocabulary(s, vocabulary(), "procedures")
        yield s, vid
    S.dispose(url)


def problems(report):
    return [(e.row, e.problem) for e in report.errors]


def adds_up(report) -> bool:
    """Every data row read is imported or rejected (an ImportReport or a MentionsRead)."""
    imported = report.n_imported if isinstance(report, dbio.ImportReport) else len(report.good)
    rejected = [e for e in report.errors if e.row is not None]
    return report.n_read == imported + report.n_rejected and report.n_rejected == len(rejected)


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
        "阑尾切除, 腹腔镜,阑尾切除术".encode(),  # row 10: the same comma unquoted: a cell too many, not cut short
        "胆囊切除,胆囊切除术,,".encode(),  # row 11: empty cells beyond the header are no problem
    ]
    path.write_bytes(b"\n".join(lines) + b"\n")
    rep = S.import_mentions(s, path, "csv batch", vid, username="alice")
    assert rep.file == str(path) and all(e.file == str(path) for e in rep.errors)
    assert problems(rep) == [(3, "empty mention"), (4, "mention too long (600 > 500 characters)"),
                             (5, dbio.UNDECODABLE), (8, "empty mention"),
                             (10, "has 3 cells but the header 2: an unquoted ',' inside a cell? Quote that cell and "
                                  "import the row again")]
    assert rep.n_ok == 4 and rep.n_bad == 5 and rep.batch_id is not None
    assert (rep.n_read, rep.n_imported, rep.n_rejected) == (9, 4, 5) and adds_up(rep)
    assert [(n.row, n.problem) for n in rep.notices] == [(None, "1 blank row(s) skipped (no cell filled): row 7")]
    ms = S.mentions(s, rep.batch_id)
    assert [(m["position"], m["text"], m["source_row"]) for m in ms] == [
        (1, "右侧甲状腺肿块切除", 2), (2, "LC+胆总管探查", 6), (3, "阑尾切除, 腹腔镜", 9), (4, "胆囊切除", 11)]
    assert ms[1]["gold_terms"] == ["腹腔镜下胆囊切除术", "胆总管探查术"]
    assert rep.summary() == f"{path}: 9 rows read, 4 imported, 5 rejected, 1 notice"
    assert "row 5" in str(rep.errors[2])


def test_a_placeholder_for_an_empty_cell_is_rejected_not_coded(db, tmp_path):
    """A database export writes NULL, a spreadsheet '-' or 无 for an empty cell: coded, each became a term."""
    s, vid = db
    path = tmp_path / "export.csv"
    path.write_text("mention\n胆囊切除\nNULL\n-\n无\nN/A\n—\n卵巢Ca\n2\n", encoding="utf-8")
    rep = S.import_mentions(s, path, "placeholders", vid)
    assert problems(rep) == [(3, "no mention: 'NULL' stands for an empty cell"),
                             (4, "no mention: '-' holds no letter, digit or character"),
                             (5, "no mention: '无' stands for an empty cell"),
                             (6, "no mention: 'N/A' stands for an empty cell"),
                             (7, "no mention: '—' holds no letter, digit or character")]
    assert [m["text"] for m in S.mentions(s, rep.batch_id)] == ["胆囊切除", "卵巢Ca", "2"]
    assert (rep.n_read, rep.n_imported, rep.n_rejected) == (8, 3, 5) and adds_up(rep)


def test_gb18030_tsv_is_decoded(db, tmp_path):
    s, vid = db
    path = tmp_path / "从Excel导出.tsv"
    path.write_bytes("原始词\t标准词\n胆囊切除\t胆囊切除术\n甲状腺全切\t甲状腺全部切除术\n".encode("gb18030"))
    rep = S.import_mentions(s, path, "gbk", vid)
    assert rep.errors == [] and rep.n_ok == 2 and rep.n_read == 2 and adds_up(rep)
    assert [(m["text"], m["gold_terms"]) for m in S.mentions(s, rep.batch_id)] == [
        ("胆囊切除", ["胆囊切除术"]), ("甲状腺全切", ["甲状腺全部切除术"])]


def test_a_western_european_file_is_read_as_windows_1252_and_a_gbk_one_as_gbk_each_said(db, tmp_path):
    """A user test: a Latin-1 file (Excel on French Windows) was read as GBK without a word, Cholécystectomie
    imported as Chol閏ystectomie. Lone Chinese characters inside Latin words read it as Windows-1252; Chinese text,
    Latin letters around a character included (MRI示T2), stays GBK. Either guess is said in a notice."""
    s, vid = db
    cases = {"west.csv": ("mention\nCholécystectomie\nAppendicectomie\nMénière opéré\n", "cp1252"),
             "gbk.csv": ("mention\nMRI示T2高信号\n甲状腺全切\n", "gbk")}
    for name, (text, encoding) in cases.items():
        path = tmp_path / name
        path.write_bytes(text.encode(encoding))
        rep = S.import_mentions(s, path, name, vid)
        assert rep.errors == [] and adds_up(rep)
        assert [m["text"] for m in S.mentions(s, rep.batch_id)] == text.split("\n")[1:-1]
        said = [n.problem for n in rep.notices if "not UTF-8" in n.problem]
        assert said == ["not UTF-8: read as " + ("Windows-1252 (Western European)" if encoding == "cp1252" else
                        "GBK / GB18030 (Chinese Windows)") + "; if the text looks wrong, save the file as UTF-8 "
                        "and import it again"]


def test_the_utf8_rows_of_a_file_with_bad_bytes_keep_their_text(db, tmp_path):
    """Two of three non-ASCII rows are not UTF-8 (neither are they GBK): they are rejected, and the UTF-8 row is
    imported as written, where it was read as GBK (鑳嗗泭鍒囬櫎) and reported imported."""
    s, vid = db
    path = tmp_path / "mixed.csv"
    path.write_bytes(b"mention\n\x80\x81abc\n" + "胆囊切除".encode() + b"\n" + "café".encode("latin-1") + b"\n")
    rep = S.import_mentions(s, path, "mixed", vid)
    assert problems(rep) == [(2, dbio.UNDECODABLE), (4, dbio.UNDECODABLE)] and adds_up(rep)
    assert [m["text"] for m in S.mentions(s, rep.batch_id)] == ["胆囊切除"]


def test_utf16_text_from_excel_is_decoded(db, tmp_path):
    """Excel's "Unicode text" (UTF-16 with its BOM, tab-separated), as the Editions upload already read it."""
    s, vid = db
    path = tmp_path / "unicode.txt"
    path.write_bytes("原始词\t标准词\r\n胆囊切除\t胆囊切除术\r\n".encode("utf-16"))
    rep = S.import_mentions(s, path, "utf16", vid)
    assert rep.errors == [] and rep.n_ok == 1 and adds_up(rep)
    assert [(m["text"], m["gold_terms"]) for m in S.mentions(s, rep.batch_id)] == [("胆囊切除", ["胆囊切除术"])]


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
    assert (rep.n_read, rep.n_imported, rep.n_rejected) == (4, 2, 2) and adds_up(rep)
    assert [(m["text"], m["gold_terms"], m["source_row"]) for m in S.mentions(s, rep.batch_id)] == [
        ("双侧甲状腺全切术", ["甲状腺全部切除术"], 2), ("12345", [], 5)]


def test_an_xlsx_cell_stored_as_a_formula_keeps_its_text_and_is_named(db, tmp_path):
    """Text typed starting with "=" is stored by spreadsheet writers as a formula without a saved value, which
    reads as an empty cell: the note came in silently empty. Its text is kept and the cell named."""
    s, vid = db
    wb = openpyxl.Workbook()
    wb.active.append(["原始词", "病历"])
    wb.active.append(["甲状腺肿物切除", "=== 出院小结 === 甲状腺肿物"])  # openpyxl writes these as formulas
    wb.active.append(["=胆囊切除术", None])
    wb.active.append(["阑尾切除", "阑尾炎"])
    wb.save(tmp_path / "formulas.xlsx")
    rep = S.import_mentions(s, tmp_path / "formulas.xlsx", "formulas", vid)
    assert rep.errors == [] and rep.n_ok == 3 and adds_up(rep)
    assert (2, "2 cell(s) hold a formula without a saved value (text typed starting with '=' is stored as one); "
               "their text was imported as written: row 2 column B (病历), row 3 column A (原始词)") in [(n.row, n.problem) for n in rep.notices]
    ms = S.mentions(s, rep.batch_id)
    assert [m["text"] for m in ms] == ["甲状腺肿物切除", "=胆囊切除术", "阑尾切除"]
    assert S.mention_documents(s, [m["id"] for m in ms])[ms[0]["id"]] == "=== 出院小结 === 甲状腺肿物"
    # under a title row the cell is named by the header's column name, not the title's (a team test); a column
    # termnorm does not read is named too
    wb = openpyxl.Workbook()
    for row in (["病历导出 2026-12"], ["原始词", "科室", "vocabulary"], ["甲状腺肿物切除", "外科", "icd10"],
                ["=胆囊切除术", "外科", "no-such-vocab"]):
        wb.active.append(row)
    wb.save(tmp_path / "titled.xlsx")
    rep = S.import_mentions(s, tmp_path / "titled.xlsx", "titled", vid)
    assert rep.errors == [] and rep.n_ok == 2 and adds_up(rep)
    said = [(n.row, n.problem) for n in rep.notices]
    assert any("row 4 column A (原始词)" in p for _, p in said), said
    assert (None, "2 column(s) not read: '科室', 'vocabulary' (read: the mentions from '原始词'; every row goes to "
                  "the batch's vocabulary)") in said, said


def test_the_document_of_each_mention_is_imported_with_it(db, tmp_path):
    """A column (CSV / XLSX) or field (JSON) holding the note a mention came from: stored with the mention,
    read by the engine; a document that cannot be used is a notice and the row comes in without it."""
    s, vid = db
    note = "入院记录：患者因经皮冠状动脉介入治疗（PCI）术后复查入院。\n既往 PCI 一次。"
    path = tmp_path / "notes.csv"
    with open(path, "w", encoding="utf-8", newline="") as f:
        w = csv.writer(f)
        w.writerow(["mention", "病历"])
        w.writerows([["PCI术后", note], ["胆囊切除", ""], ["阑尾切除", "x" * (dbio.MAX_DOCUMENT_CHARS + 1)]])
    rep = S.import_mentions(s, path, "notes", vid)
    assert rep.errors == [] and rep.n_ok == 3 and adds_up(rep)
    assert [(n.row, n.problem) for n in rep.notices] == [  # row 4 in Excel (the note above spans lines 2-3)
        (None, "documents read from column '病历': 1 of 3 imported rows have one"),
        (4, f"document longer than {dbio.MAX_DOCUMENT_CHARS:,} characters (100,001): imported without it")]
    ms = S.mentions(s, rep.batch_id)
    docs = S.mention_documents(s, [m["id"] for m in ms])
    assert docs == {ms[0]["id"]: note}  # line breaks inside the quoted note kept; empty / dropped: none
    assert S.mention(s, ms[0]["id"])["document"] == note and S.mention(s, ms[1]["id"])["document"] == ""

    wb = openpyxl.Workbook()
    wb.active.append(["原始词", "document"])
    wb.active.append(["FED", "Fish-eye disease (FED) is rare."])
    wb.save(tmp_path / "notes.xlsx")
    rep = S.import_mentions(s, tmp_path / "notes.xlsx", "notes xlsx", vid)
    (m,) = S.mentions(s, rep.batch_id)
    assert S.mention_documents(s, [m["id"]]) == {m["id"]: "Fish-eye disease (FED) is rare."}

    path = tmp_path / "notes.jsonl"
    path.write_text(json.dumps({"text": "FED", "context": "Fish-eye disease (FED)."}) + "\n"
                    + json.dumps({"text": "WAS", "document": ["not", "text"]}) + "\n", encoding="utf-8")
    rep = S.import_mentions(s, path, "notes jsonl", vid)
    assert rep.n_ok == 2 and [(n.row, n.problem) for n in rep.notices] == [
        (None, "documents read from field 'context' / 'document': 1 of 2 imported rows have one"),
        (2, "document is not text (list): imported without it")]
    ms = S.mentions(s, rep.batch_id)
    assert S.mention_documents(s, [m["id"] for m in ms]) == {ms[0]["id"]: "Fish-eye disease (FED)."}

    # a note over the csv module's 128 KiB cell limit: the row comes in (without it), the file is not refused
    path = tmp_path / "huge.csv"
    path.write_text("mention,note\n阑尾切除," + "很" * 150_000 + "\n胆囊切除,\n", encoding="utf-8")
    rep = S.import_mentions(s, path, "huge", vid)
    assert rep.n_ok == 2 and rep.errors == []
    assert rep.notices[1].row == 2 and "(150,000): imported without it" in rep.notices[1].problem


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
    assert (rep.n_read, rep.n_imported, rep.n_rejected) == (6, 2, 4) and adds_up(rep)
    assert [(m["text"], m["gold_terms"], m["source_row"]) for m in S.mentions(s, rep.batch_id)] == [
        ("胆囊结石伴胆囊炎", ["胆囊切除术"], 1), ("甲状腺癌术后", ["甲状腺病损切除术", "甲状腺全部切除术"], 6)]


def test_json_lines_with_a_broken_line():
    data = '{"text": "阑尾炎"}\n{"text": "broken\n\n[1, 2]\n{"text": "胆囊炎", "normalized_result": "胆囊切除术"}\n'
    good, bad = dbio.read_mentions(data.encode(), "upload.jsonl")
    assert [(m.text, m.terms, m.row) for m in good] == [("阑尾炎", [], 1), ("胆囊炎", ["胆囊切除术"], 5)]
    assert [(b.row, b.problem.split(":")[0]) for b in bad] == [(2, "not valid JSON"), (4, "not an object (list)")]
    read = dbio.read_mentions_report(data.encode(), "upload.jsonl")
    assert (read.n_read, len(read.good), read.n_rejected) == (4, 2, 2) and adds_up(read)


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
    assert rep.errors[0].row is None and (rep.n_read, rep.n_imported, rep.n_rejected) == (0, 0, 0) and adds_up(rep)
    assert needle in rep.summary()
    assert S.batches(s) == []


def test_a_binary_file_named_csv_is_said_to_be_no_text_file():
    """Seen in a browser: random bytes named .csv read as 'unreadable header: unbalanced quote'."""
    noise = random.Random(5).randbytes(4000)
    read = dbio.read_mentions_report(noise, name="scan.csv")
    assert [(e.row, e.problem.split(":")[0]) for e in read.errors] == [(None, "not a text file")] and not read.good
    # a text file with a stray NUL or two stays a text file (the NUL is removed with a notice)
    read = dbio.read_mentions_report("mention\n胆囊\x00切除\n阑尾\x00切除\n".encode(), name="nul.csv")
    assert [m.text for m in read.good] == ["胆囊切除", "阑尾切除"] and not read.errors


def test_missing_file_and_uploaded_file_objects(db, tmp_path):
    s, vid = db
    rep = S.import_mentions(s, tmp_path / "nope.csv", "x", vid)
    assert len(rep.errors) == 1 and rep.errors[0].row is None and "cannot open" in rep.errors[0].problem
    assert rep.n_read == 0 and adds_up(rep)
    upload = io.BytesIO("text\n胆囊切除\n".encode("utf-8-sig"))
    upload.name = "upload.csv"  # what Streamlit's UploadedFile provides
    rep = S.import_mentions(s, upload, "upload", vid)
    assert rep.errors == [] and rep.file == "upload.csv" and rep.n_read == 1 and adds_up(rep)
    assert [m["text"] for m in S.mentions(s, rep.batch_id)] == ["胆囊切除"]


def test_demo_mentions_import_cleanly(db):
    s, vid = db
    with open(DEMO / "mentions.csv", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    rep = S.import_mentions(s, DEMO / "mentions.csv", "demo", vid)
    assert rep.errors == [] and rep.n_ok == len(rows) == rep.n_read and adds_up(rep)
    ms = S.mentions(s, rep.batch_id)
    assert [m["text"] for m in ms] == [r["mention"] for r in rows]
    assert [m["gold_terms"] for m in ms] == [r["terms"].split("##") for r in rows]


def test_the_same_file_imported_twice_makes_no_second_batch_unless_asked(db, tmp_path):
    """One export imported twice made two batches of the same mentions: coders coded each mention twice."""
    s, vid = db
    path = tmp_path / "ward7.csv"
    path.write_text("mention\n胆囊切除\n 阑尾切除 \n甲状腺全切\n", encoding="utf-8")
    first = S.import_mentions(s, path, "ward 7", vid)
    again = S.import_mentions(s, path, "ward 7 (monday)", vid)
    assert again.batch_id is None and again.n_imported == 0 and again.n_read == 3
    assert again.duplicate_of["id"] == first.batch_id and again.duplicate_of["name"] == "ward 7"
    assert [b["name"] for b in S.batches(s, vid)] == ["ward 7"]
    # other mentions, a subset, or another order are another file
    path.write_text("mention\n胆囊切除\n阑尾切除\n", encoding="utf-8")
    assert S.import_mentions(s, path, "part", vid).batch_id is not None
    path.write_text("mention\n阑尾切除\n胆囊切除\n甲状腺全切\n", encoding="utf-8")
    assert S.import_mentions(s, path, "reordered", vid).batch_id is not None
    # told to, it imports the same file again
    path.write_text("mention\n胆囊切除\n阑尾切除\n甲状腺全切\n", encoding="utf-8")
    assert S.import_mentions(s, path, "ward 7", vid).duplicate_of["id"] == first.batch_id
    forced = S.import_mentions(s, path, "ward 7 again", vid, again=True)
    assert forced.batch_id is not None and forced.duplicate_of is None and forced.n_imported == 3
    assert S.import_mentions(s, path, "third", vid).duplicate_of["id"] == forced.batch_id  # the latest is named


@pytest.mark.skipif(not DATA.exists(), reason="shared data absent")
def test_research_files_import_without_problems():
    good, bad = dbio.read_mentions(DATA / "chip-cdn" / "dev.json")
    items = json.loads((DATA / "chip-cdn" / "dev.json").read_text(encoding="utf-8"))
    assert bad == [] and len(good) == len(items)
    assert good[0].terms == items[0]["normalized_result"].split("##")
    good, bad = dbio.read_mentions(DATA / "yidu-n7k" / "val.xlsx")
    assert bad == [] and len(good) == 1000 and good[0].row == 2
    for path in (DATA / "chip-cdn" / "dev.json", DATA / "yidu-n7k" / "val.xlsx"):
        read = dbio.read_mentions_report(path)
        assert read.n_read == len(read.good) > 0 and adds_up(read)


# ------------------------------------------------------------------ import: nothing dropped unnamed (issue 22)
def imported(s, report):
    return [(m["source_row"], m["text"], m["gold_terms"]) for m in S.mentions(s, report.batch_id)]


@pytest.mark.parametrize("delimiter,newline", [(",", "\n"), (",", "\r\n"), ("\t", "\n")])
def test_stray_quote_names_its_row_and_keeps_every_row_below(db, tmp_path, delimiter, newline):
    s, vid = db
    d = delimiter
    lines = [f"mention{d}terms",                          # row 1
             f"胆囊切除{d}胆囊切除术",                      # row 2
             f'"阑尾切除{d}阑尾切除术',                     # row 3: the quote never closes
             f"甲状腺全切{d}甲状腺全部切除术",              # row 4
             f'"阑尾切除, 腹腔镜"{d}阑尾切除术',            # row 5: a quoted cell holding a comma
             f"LC{d}腹腔镜下胆囊切除术",                    # row 6
             f"右侧甲状腺肿块切除{d}甲状腺病损切除术"]      # row 7
    path = tmp_path / ("mentions.csv" if d == "," else "mentions.tsv")
    path.write_bytes(newline.join(lines).encode() + newline.encode())
    rep = S.import_mentions(s, path, "stray", vid)
    assert problems(rep) == [(3, dbio.UNBALANCED_QUOTE)]
    assert "row 3" in str(rep.errors[0]) and "unbalanced quote" in str(rep.errors[0])
    assert imported(s, rep) == [(2, "胆囊切除", ["胆囊切除术"]), (4, "甲状腺全切", ["甲状腺全部切除术"]),
                                (5, "阑尾切除, 腹腔镜", ["阑尾切除术"]), (6, "LC", ["腹腔镜下胆囊切除术"]),
                                (7, "右侧甲状腺肿块切除", ["甲状腺病损切除术"])]
    assert (rep.n_read, rep.n_imported, rep.n_rejected, rep.notices) == (6, 5, 1, []) and adds_up(rep)
    assert rep.summary() == f"{path}: 6 rows read, 5 imported, 1 rejected, 0 notices"


def test_stray_quote_that_never_closes_does_not_swallow_the_file(tmp_path):
    """The reported case: one quote, every later row merged into one 5,100-character cell."""
    rows = [f"手术{i}" * 50 for i in range(30)]  # 150+ characters each: merged, they pass 500
    text = "mention\n" + "\n".join(['"' + rows[0]] + rows[1:]) + "\n"
    read = dbio.read_mentions_report(text.encode(), "ward.csv")
    assert [(e.row, e.problem) for e in read.errors] == [(2, dbio.UNBALANCED_QUOTE)]
    assert [(m.row, m.text) for m in read.good] == [(i + 2, r) for i, r in enumerate(rows)][1:]
    assert read.n_read == 30 and adds_up(read)


def test_a_quoted_line_break_in_a_mention_rejects_both_lines_and_imports_no_half(tmp_path):
    """A one-column file pandas wrote with a line break inside a mention: the first line was rejected, the second
    (第二行") imported as a mention of its own, and a coder coded it."""
    path = tmp_path / "pandas.csv"
    pd.DataFrame({"mention": ["阑尾切除", "胆囊切除术\n第二行", "甲状腺全切"]}).to_csv(path, index=False)
    read = dbio.read_mentions_report(path)
    # named for what it is (a helper read "unbalanced quote" on this well-quoted cell and looked for a stray ")
    assert [(e.row, e.problem) for e in read.errors] == [
        (3, "the quoted mention holds a line break (2 lines) but must be one line: join them and import the row"),
        (4, "continues the quoted mention of row 3 (a line break in it)")]
    assert [(m.row, m.text) for m in read.good] == [(2, "阑尾切除"), (5, "甲状腺全切")]
    assert read.n_read == 4 and adds_up(read)


def test_quoted_cells_still_parse(db, tmp_path):
    s, vid = db
    path = tmp_path / "quoted.csv"
    path.write_text('mention,terms\n"a,b",胆囊切除术\n"他说""胆囊"", 切除",胆囊切除术\n"x",\n', encoding="utf-8")
    rep = S.import_mentions(s, path, "quoted", vid)
    assert rep.errors == [] and adds_up(rep)
    assert imported(s, rep) == [(2, "a,b", ["胆囊切除术"]), (3, '他说"胆囊", 切除', ["胆囊切除术"]), (4, "x", [])]


def _header_only_xlsx(path):
    wb = openpyxl.Workbook()
    wb.active.append(["编号", "原始词", "标准词"])
    wb.save(path)


@pytest.mark.parametrize("name,content,reason", [
    ("header.csv", "mention,terms\n".encode(), "no data rows below the header (row 1)"),
    ("blank_rows.csv", "\n\nmention,terms\n\n ,  \n,\n".encode(), "no data rows below the header (row 3)"),
    ("empty.json", b"[]", "no data rows: the JSON list is empty"),
    ("header.xlsx", None, "no data rows below the header (row 1)"),
])
def test_a_file_without_data_rows_says_why(db, tmp_path, name, content, reason):
    s, vid = db
    path = tmp_path / name
    _header_only_xlsx(path) if content is None else path.write_bytes(content)
    rep = S.import_mentions(s, path, "nothing", vid)
    assert rep.errors == [dbio.ImportProblem(str(path), None, reason)]
    assert (rep.batch_id, rep.n_read, rep.n_imported, rep.n_rejected) == (None, 0, 0, 0) and adds_up(rep)
    assert rep.summary().endswith(f"0 rows read, 0 imported, 0 rejected, 0 notices; {reason}")


def test_control_characters_are_removed_with_a_notice(db, tmp_path):
    s, vid = db
    path = tmp_path / "controls.csv"
    lines = [b"mention,terms",
             "胆囊\x00切除,胆囊切除术".encode(),  # row 2: NUL (csv refuses it in some Python versions)
             "阑尾\x07切除,阑尾\x1b切除术".encode(),  # row 3: BEL in the mention, ESC in the gold term
             "甲状腺\u200b全切\ufeff,甲状腺全部切除术".encode(),  # row 4: zero-width space, BOM inside the text
             '"胆囊\t切除",'.encode(),  # row 5: a tab inside a quoted cell -> a space
             "右侧\x7f\x85甲状腺,".encode(),  # row 6: DEL and C1 NEL (U+0085)
             "\x01\u200b,胆囊切除术".encode(),  # row 7: nothing left after cleaning
             "LC,腹腔镜下胆囊切除术".encode()]  # row 8: clean
    path.write_bytes(b"\n".join(lines) + b"\n")
    rep = S.import_mentions(s, path, "controls", vid)
    assert imported(s, rep) == [(2, "胆囊切除", ["胆囊切除术"]), (3, "阑尾切除", ["阑尾切除术"]),
                                (4, "甲状腺全切", ["甲状腺全部切除术"]), (5, "胆囊 切除", []), (6, "右侧甲状腺", []),
                                (8, "LC", ["腹腔镜下胆囊切除术"])]
    assert problems(rep) == [(7, "empty mention")]
    assert [(n.row, n.problem) for n in rep.notices] == [
        (2, "control character U+0000 removed"), (3, "control characters U+0007, U+001B removed"),
        (4, "control characters U+200B, U+FEFF removed"), (5, "tab / line break U+0009 replaced by a space"),
        (6, "control characters U+007F, U+0085 removed")]
    assert (rep.n_read, rep.n_imported, rep.n_rejected) == (7, 6, 1) and adds_up(rep)
    assert rep.summary().endswith("7 rows read, 6 imported, 1 rejected, 5 notices")


def test_tab_and_line_breaks_inside_a_cell_become_one_space(db, tmp_path):
    s, vid = db
    wb = openpyxl.Workbook()
    ws = wb.active
    ws.append(["mention", "terms"])
    ws.append(["胆囊 \n 切除", "胆囊切除术"])  # Alt+Enter in Excel
    ws.append(["甲状腺\n\n全切", "甲状腺全部切除术"])
    ws.append(["阑尾\t切除\u200b", "阑尾切除术"])
    path = tmp_path / "breaks.xlsx"
    wb.save(path)
    rep = S.import_mentions(s, path, "breaks", vid)
    assert imported(s, rep) == [(2, "胆囊 切除", ["胆囊切除术"]), (3, "甲状腺 全切", ["甲状腺全部切除术"]),
                                (4, "阑尾 切除", ["阑尾切除术"])]
    assert [(n.row, n.problem) for n in rep.notices] == [
        (2, "tab / line break U+000A replaced by a space"),
        (3, "tab / line break U+000A replaced by a space"),
        (4, "control character U+200B removed; tab / line break U+0009 replaced by a space")]
    assert adds_up(rep)


def test_control_characters_in_json(db, tmp_path):
    s, vid = db
    path = tmp_path / "cdn.json"
    # an escaped NUL, and a raw BEL that strict JSON refuses (which would lose the whole file)
    path.write_text('[{"text": "\\u0000胆囊炎", "normalized_result": "胆囊切除术"},'
                    ' {"text": "a\x07b\r\nc"}, {"text": "\\u200b"}]', encoding="utf-8", newline="")
    rep = S.import_mentions(s, path, "json", vid)
    assert imported(s, rep) == [(1, "胆囊炎", ["胆囊切除术"]), (2, "ab c", [])]
    assert problems(rep) == [(3, "empty mention")]
    assert [(n.row, n.problem) for n in rep.notices] == [(1, "control character U+0000 removed"),
                                                          (2, "control character U+0007 removed; "
                                                              "tab / line break U+000A, U+000D replaced by a space")]
    assert (rep.n_read, rep.n_imported, rep.n_rejected) == (3, 2, 1) and adds_up(rep)


def test_json_lines_keep_line_separators_inside_strings():
    data = '{"text": "胆囊\u2028切除"}\n{"text": "阑尾炎"}\n'.encode()
    read = dbio.read_mentions_report(data, "u.jsonl")
    assert [(m.row, m.text) for m in read.good] == [(1, "胆囊\u2028切除"), (2, "阑尾炎")] and read.errors == []


def test_unknown_gold_terms_are_kept_with_a_notice(db, tmp_path):
    s, vid = db
    path = tmp_path / "gold.csv"
    path.write_text("mention,terms\n胆囊切除,胆囊切除术\n阑尾,阑尾切除\nLC+探查,腹腔镜下胆囊切除术##胆总管探察术##假术\n"
                    ",不存在的术式\n", encoding="utf-8")
    rep = S.import_mentions(s, path, "gold", vid, username="alice")
    assert imported(s, rep) == [(2, "胆囊切除", ["胆囊切除术"]), (3, "阑尾", ["阑尾切除"]),
                                (4, "LC+探查", ["腹腔镜下胆囊切除术", "胆总管探察术", "假术"])]
    assert [(n.row, n.problem) for n in rep.notices] == [
        (3, "gold term not in vocabulary procedures: '阑尾切除' (kept as given; the engine cannot suggest it)"),
        (4, "gold terms not in vocabulary procedures: '胆总管探察术', '假术' (kept as given; "
            "the engine cannot suggest them)")]
    assert problems(rep) == [(5, "empty mention")]  # a rejected row gets no gold-term notice
    assert (rep.n_read, rep.n_imported, rep.n_rejected) == (4, 3, 1) and adds_up(rep)
    audit = S.audit_frame(s)
    details = audit[audit.action == "import_problems"].iloc[0].details
    assert details["problems"] == [[str(path), 5, "empty mention"]]
    assert [n[1] for n in details["notices"]] == [3, 4]
    assert (details["n_read"], details["n_rejected"]) == (4, 1)


def test_a_retired_gold_term_gets_the_notice(db, tmp_path):
    s, vid = db
    s.execute(update(Term).where(Term.vocabulary_id == vid, Term.name == "阑尾切除术").values(retired_edition=2))
    s.commit()
    path = tmp_path / "retired.csv"
    path.write_text("mention,terms\n阑尾,阑尾切除术\n胆囊,胆囊切除术\n", encoding="utf-8")
    rep = S.import_mentions(s, path, "retired", vid)
    assert [(n.row, n.problem.split(":")[0]) for n in rep.notices] == [(2, "gold term not in vocabulary procedures")]
    assert rep.n_imported == 2 and adds_up(rep)


def test_notices_alone_are_audited(db, tmp_path):
    s, vid = db
    path = tmp_path / "nul.csv"
    path.write_bytes("mention\n胆囊\x00切除\n".encode())
    rep = S.import_mentions(s, path, "nul", vid)
    assert rep.errors == [] and [(n.row, n.problem) for n in rep.notices] == [(2, "control character U+0000 removed")]
    audit = S.audit_frame(s)
    assert audit[audit.action == "import_problems"].iloc[0].details["notices"] == [
        [str(path), 2, "control character U+0000 removed"]]


FORMULA_TEXTS = ["=SUM(A1:A2)", "+86 胆囊", "-1", "@cmd", "\tx", "\rx", "'=already quoted", "''-x", "'",
                 "'plain", "胆囊切除", "", "a=b", "=", "'@"]


def test_neutralise_and_restore_formula_round_trip():
    for t in FORMULA_TEXTS:
        n = dbio.neutralise_formula(t)
        assert dbio.restore_formula(n) == t, t
        assert not n.startswith(dbio.FORMULA_STARTS), t  # a spreadsheet will not run it
    assert dbio.neutralise_formula("=1+2") == "'=1+2" and dbio.neutralise_formula("胆囊") == "胆囊"
    assert dbio.restore_formula("'=1+2") == "=1+2" and dbio.restore_formula("'abc") == "'abc"


def test_exported_formula_cells_import_back_as_written(db, tmp_path):
    s, vid = db
    texts = [("=胆囊切除", "胆囊切除术"), ("+LC", "=怪##阑尾切除术"), ("-阑尾", ""), ("@甲状腺", ""),
             ("'引号", "")]
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["mention", "terms"])
    w.writerows([dbio.neutralise_formula(m), dbio.neutralise_formula(t)] for m, t in texts)
    (tmp_path / "export.csv").write_text(buf.getvalue(), encoding="utf-8-sig")
    wb = openpyxl.Workbook()
    wb.active.append(["mention", "terms"])
    for m, t in texts:
        wb.active.append([dbio.neutralise_formula(m), dbio.neutralise_formula(t)])
    wb.save(tmp_path / "export.xlsx")
    want = [(m, [x for x in t.split("##") if x]) for m, t in texts]
    for name in ("export.csv", "export.xlsx"):
        good, bad = dbio.read_mentions(tmp_path / name)
        assert bad == [] and [(g.text, g.terms) for g in good] == want, name
    # JSON is no spreadsheet: a leading quote there is the text itself
    good, _ = dbio.read_mentions(json.dumps([{"text": "'=a"}]).encode(), "x.json")
    assert good[0].text == "'=a"



def test_an_export_carries_each_mention_s_source_row_and_note_back(db, tmp_path):
    """A data team joins decisions back to its rows by the row of the imported file; the note a mention was
    read in goes with it, and an exported file imports again with its notes."""
    s, vid = db
    # a line break: still one row; "=" first: written inert ('=), read back as written
    note = "=== 出院小结 === 患者因经皮冠状动脉介入治疗（PCI）术后复查入院，\n\"再次\"评估。"
    path = tmp_path / "notes.csv"
    with open(path, "w", encoding="utf-8", newline="") as f:
        csv.writer(f).writerows([["mention", "病历"], ["PCI术后", note], ["", ""], ["胆囊切除", ""]])
    rep = S.import_mentions(s, path, "notes", vid)
    ms = S.mentions(s, rep.batch_id)
    for m, terms in zip(ms, (["阑尾切除术"], ["胆囊切除术"])):
        S.record_decision(s, m["id"], "alice", "correct", terms)
    df = pd.read_csv(io.BytesIO(S.export_decisions(s, rep.batch_id, "csv")), keep_default_na=False)
    assert list(df["source_row"]) == [2, 4]  # row 3 (an empty mention) was reported, not imported
    rows = pd.read_csv(path, keep_default_na=False)  # the rows as pandas / a spreadsheet count them
    assert [rows["mention"][r - 2] for r in df["source_row"]] == list(df["mention"])
    assert list(df["document"]) == ["'" + note, ""]
    recs = [json.loads(ln) for ln in S.export_decisions(s, rep.batch_id, "jsonl").decode().splitlines()]
    assert [(r["source_row"], r["document"]) for r in recs] == [(2, note), (4, "")]
    for fmt in ("csv", "xlsx"):
        (tmp_path / f"export.{fmt}").write_bytes(S.export_decisions(s, rep.batch_id, fmt))
        again = S.import_mentions(s, tmp_path / f"export.{fmt}", "again", vid, again=True)  # batch "notes" has them
        back = S.mentions(s, again.batch_id)
        assert S.mention_documents(s, [m["id"] for m in back]) == {back[0]["id"]: note}, fmt


# ------------------------------------------------------------------ export
def test_an_export_says_how_the_engine_read_each_decided_mention(db, tmp_path):
    """A coded "PCI术后" is only auditable with what the coder was shown: the mention with the abbreviation its
    note defines spelled out. The suggestion keeps that reading, and every export row of a decision answering
    it carries it ("" for a mention read as written)."""
    from termnorm.engine import Engine

    s, vid = db
    note = "患者因经皮冠状动脉介入治疗（PCI）术后复查入院。"
    path = tmp_path / "notes.csv"
    with open(path, "w", encoding="utf-8", newline="") as f:
        csv.writer(f).writerows([["mention", "document"], ["PCI术后", note], ["胆囊切除", ""]])
    ms = S.mentions(s, S.import_mentions(s, path, "notes", vid).batch_id)
    sugs = Engine(S.vocabulary_from_db(s, vid)).suggest_batch([m["text"] for m in ms], documents=[note, ""])
    assert [g.spelled_out for g in sugs] == ["经皮冠状动脉介入治疗术后", ""]
    S.store_suggestions(s, [m["id"] for m in ms], sugs)
    assert S.latest_suggestion(s, ms[0]["id"]).spelled_out == "经皮冠状动脉介入治疗术后"  # read back as stored
    for m in ms:
        S.record_decision(s, m["id"], "alice", "correct", ["胆囊切除术"])
    batch = ms[0]["batch_id"]
    df = pd.read_csv(io.BytesIO(S.export_decisions(s, batch, "csv")), keep_default_na=False)
    assert list(df["read_as"]) == ["经皮冠状动脉介入治疗术后", ""] and list(df.columns)[-1] == "read_as"
    recs = [json.loads(ln) for ln in S.export_decisions(s, batch, "jsonl").decode().splitlines()]
    assert [r["read_as"] for r in recs] == ["经皮冠状动脉介入治疗术后", ""]
    sheet = openpyxl.load_workbook(io.BytesIO(S.export_decisions(s, batch, "xlsx"))).active
    rows = list(sheet.values)
    assert [r[rows[0].index("read_as")] or "" for r in rows[1:]] == ["经皮冠状动脉介入治疗术后", ""]


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
    assert adds_up(dbio.read_mentions_report(path))
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


def test_a_quoted_note_with_line_breaks_is_one_row_but_a_stray_quote_in_it_is_not(tmp_path):
    """A multi-line quoted note in another column is legitimate; the same quote left open swallows rows."""
    legit = "mention,terms,note\n甲状腺切除,甲状腺全部切除术,\"第一行\n第二行\"\n胆囊切除,胆囊切除术,\n"
    read = dbio.read_mentions_report(legit.encode(), name="notes.csv")
    # rows as a spreadsheet numbers them (the note spans lines 2-3 and is row 2): what source_row exports
    assert [(m.row, m.text) for m in read.good] == [(2, "甲状腺切除"), (3, "胆囊切除")] and not read.errors
    assert read.n_read == 2
    stray = "mention,terms,note\n甲状腺切除,甲状腺全部切除术,\"坏\n胆囊切除,胆囊切除术,\n阑尾切除,阑尾切除术,\n"
    read = dbio.read_mentions_report(stray.encode(), name="notes.csv")
    assert [(m.row, m.text) for m in read.good] == [(3, "胆囊切除"), (4, "阑尾切除")]
    assert [(e.row, e.problem) for e in read.errors] == [(2, dbio.UNBALANCED_QUOTE)]
    assert read.n_read == len(read.good) + read.n_rejected == 3


def test_blank_rows_between_rows_are_named(tmp_path):
    """Seen in a browser: blank and whitespace-only lines vanished from the count without a word."""
    text = "mention,terms\n甲状腺切除,甲状腺全部切除术\n,\n   ,   \n胆囊切除,胆囊切除术\n\n"
    read = dbio.read_mentions_report(text.encode(), name="blanks.csv")
    assert [m.row for m in read.good] == [2, 5] and read.n_read == 2 and not read.errors
    assert [(n.row, n.problem) for n in read.notices] == [(None, "2 blank row(s) skipped (no cell filled): row 3, 4")]


def test_a_workbook_of_several_sheets_says_which_was_read_and_which_were_left(tmp_path):
    """A workbook with a sheet per month imported only the first month, and said nothing of the others."""
    wb = openpyxl.Workbook()
    wb.active.title = "说明"
    wb.active.append(["这是说明页"])
    for name, rows in (("十月", ["胆囊切除", "阑尾切除"]), ("十一月", ["甲状腺肿物切除", "疝修补", "LC"])):
        ws = wb.create_sheet(name)
        ws.append(["mention"])
        for r in rows:
            ws.append([r])
    wb.save(tmp_path / "months.xlsx")
    read = dbio.read_mentions_report(tmp_path / "months.xlsx")
    assert [m.text for m in read.good] == ["胆囊切除", "阑尾切除"]
    assert [(n.row, n.problem) for n in read.notices] == [(None, (
        "sheet '十月' read; sheet(s) '十一月' also have a mention column and were not imported (one sheet per "
        "import: import each as a file of its own)"))]
    assert read.sheets_left == ["十一月"]  # the Import page shows them as a warning, not among the notices
    del wb["十一月"]
    wb.save(tmp_path / "one_month.xlsx")
    read = dbio.read_mentions_report(tmp_path / "one_month.xlsx")
    assert [n.problem for n in read.notices] == ["sheet '十月' read (the workbook's other sheets have no mention column)"]


def test_a_title_row_above_the_header_is_named_and_the_sheet_below_it_imported(tmp_path):
    """A user test: a workbook whose surgery sheet had a merged title above its header lost that sheet's 10
    mentions, while the page said the other sheets had no mention column."""
    wb = openpyxl.Workbook()
    wb.active.title = "说明"
    wb.active.append(["每行一个手术名称"])
    ws = wb.create_sheet("手术")
    ws.append(["XX医院 2026年11月 手术登记", None, None])  # row 1: a title, merged across the columns
    ws.merge_cells("A1:C1")
    ws.append(["编号", "mention", "科室"])  # row 2: the header
    ws.append([1, "胆囊切除", "普外"])
    ws.append([None, None, None])
    ws.append([2, "阑尾切除", "普外"])
    ws = wb.create_sheet("门诊")
    ws.append(["mention"])
    ws.append(["疝修补"])
    wb.save(tmp_path / "ward.xlsx")
    read = dbio.read_mentions_report(tmp_path / "ward.xlsx")
    assert [(m.text, m.row) for m in read.good] == [("胆囊切除", 3), ("阑尾切除", 5)] and read.n_read == 2
    assert read.sheets_left == ["门诊"]
    said = [n.problem for n in read.notices]
    assert "the header is row 2; the 1 row(s) above it read as a title, not as mentions (row 1: 'XX医院 2026年11月 " \
           "手术登记')" in said
    assert any(p.startswith("sheet '手术' read; sheet(s) '门诊' also have a mention column") for p in said)
    # the same in a CSV, and a first row of several filled cells is still the header (none named: refused)
    (tmp_path / "titled.csv").write_text("手术登记 2026年11月\nmention,terms\n胆囊切除,\n", encoding="utf-8")
    read = dbio.read_mentions_report(tmp_path / "titled.csv")
    assert [m.text for m in read.good] == ["胆囊切除"] and read.n_read == 1 and not read.errors
    (tmp_path / "no_header.csv").write_text("编号,科室\nmention,terms\n胆囊切除,\n", encoding="utf-8")
    read = dbio.read_mentions_report(tmp_path / "no_header.csv")
    assert not read.good and read.errors[0].problem.startswith("missing column")


def test_an_xlsx_export_names_the_cells_excel_cuts(db):
    """Excel holds 32,767 characters a cell and the XLSX writer cut a longer note there without a word."""
    from db.exports import export_batch
    from termnorm.records import LabelledMention

    s, vid = db
    long_note = "入院记录：" + "甲状腺肿物。" * 7000  # 42,005 characters
    bid = S.create_batch(s, "long notes", vid, [LabelledMention("甲状腺肿物切除", [], 2, document=long_note),
                                                LabelledMention("胆囊切除", [], 3, document="短")])
    for m in S.mentions(s, bid):
        S.record_decision(s, m["id"], "alice", "correct", ["胆囊切除术"])
    xlsx = export_batch(s, bid, "xlsx")
    assert xlsx.report["cut"] == ["row 2 (document; mention '甲状腺肿物切除', source row 2)"]
    wb = openpyxl.load_workbook(io.BytesIO(xlsx.data), read_only=True)
    head, first = list(wb["decisions"].iter_rows(values_only=True))[:2]
    assert len(first[head.index("document")]) == 32_767  # what Excel will show
    assert "cut" not in export_batch(s, bid, "csv").report  # CSV keeps it whole
    df = pd.read_csv(io.BytesIO(export_batch(s, bid, "csv").data), keep_default_na=False)
    assert df["document"][0] == long_note


def test_a_mention_repeated_in_one_file_is_imported_and_named(db, tmp_path):
    """Seen in a browser: a file holding the same mention twice made two mentions without a word."""
    s, vid = db
    text = ("mention,terms,note\n甲状腺切除,甲状腺全部切除术,\n胆囊切除,胆囊切除术,\n甲状腺切除,甲状腺全部切除术,\n"
            "胆囊切除,胆囊病损切除术,\n甲状腺切除,,术后第二天\n")
    path = tmp_path / "repeats.csv"
    path.write_text(text, encoding="utf-8")
    report = S.import_mentions(s, str(path), "repeats", vid)
    assert report.n_imported == 5 and adds_up(report) and not report.errors
    assert [r for r, _, _ in imported(s, report)] == [2, 3, 4, 5, 6]  # all kept: a person may mean them
    said = {n.row: n.problem for n in report.notices if "same mention" in n.problem}
    assert said == {4: "same mention as row 2: imported as a mention of its own",
                    5: "same mention as row 3: imported as a mention of its own; the gold terms differ: "
                       "胆囊病损切除术 here, 胆囊切除术 in row 3"}  # row 6 has a document of its own
