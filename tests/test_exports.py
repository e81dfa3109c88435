"""Exports are safe and complete: formula cells neutralised (CSV, XLSX, re-import), rejections kept (FHIR noMap),
a FHIR R5 ConceptMap that fhir.resources validates, an OMOP CDM v5.4 SOURCE_TO_CONCEPT_MAP, and the page that
prepares an export before offering its download."""

from __future__ import annotations

import csv
import io
import json
import re
import time
from pathlib import Path

import openpyxl
import pandas as pd
import pytest
from fhir.resources.conceptmap import ConceptMap
from helpers import rerun as run
from sqlalchemy import update
from streamlit.testing.v1 import AppTest

from app_pages._markup import md
from db import editions, exports, review
from db import imports as dbio
from db import services as S
from db.models import Decision
from termnorm.vocabulary import Vocabulary

APP = str(Path(__file__).resolve().parents[1] / "app.py")
TIMEOUT = 60  # as tests/test_app.py: the first run of a process loads jieba and builds the engine

TERMS = {"甲状腺病损切除术": "06.3100", "甲状腺全部切除术": "06.4x00", "胆囊切除术": "51.2200",
         "腹腔镜下胆囊切除术": "51.2300", "胆总管探查术": "51.5100", "阑尾切除术": "47.0900"}
FORMULAS = ['=HYPERLINK("http://evil.example","click")', "+1", "-2+3", "@SUM(A1)"]
RELATIONSHIPS = {"related-to", "equivalent", "source-is-narrower-than-target", "source-is-broader-than-target",
                 "not-related-to"}  # http://hl7.org/fhir/ValueSet/concept-map-relationship (R5)
OMOP_HEADER = ["source_code", "source_concept_id", "source_vocabulary_id", "source_code_description",
               "target_concept_id", "target_vocabulary_id", "valid_start_date", "valid_end_date", "invalid_reason"]


def vocabulary(codes: dict[str, str] = TERMS) -> Vocabulary:
    v = Vocabulary(name="procedures")
    for name, code in codes.items():
        v.add_term(name, [code])
    return v


@pytest.fixture
def db(url):  # conftest's url: a fresh database of each backend
    S.init_db(url)
    with S.session_scope(url) as s:
        vid = S.load_vocabulary(s, vocabulary(), "procedures")
        S.ensure_user(s, "lead", role="lead")
        yield s, vid
    S.dispose(url)


def batch(s, vid, texts, name="export batch") -> tuple[int, list[int]]:
    bid = S.create_batch(s, name, vid, texts)
    return bid, [m["id"] for m in S.mentions(s, bid)]


def approve_all(s, decision_ids):
    """Approved by a lead; a rejection cannot be approved on the review page (nothing to approve), so set here."""
    rejects = [d for d in decision_ids if s.get(Decision, d).action == "reject"]
    review.approve(s, [d for d in decision_ids if d not in rejects], "lead")
    s.execute(update(Decision).where(Decision.id.in_(rejects)).values(review_status="approved"))
    s.commit()


# ------------------------------------------------------------------ formula injection
def test_formula_mentions_are_quoted_in_csv_and_xlsx_and_import_back(db, tmp_path):
    s, vid = db
    bid, ids = batch(s, vid, [*FORMULAS, "胆囊切除"], name="\t=batch")  # the batch name is a cell too
    S.record_decision(s, ids[0], "@coder", "correct", ["胆囊切除术"], comment="=1+2")
    S.record_decision(s, ids[1], "@coder", "reject", comment="-x")
    csv_bytes, xlsx_bytes = S.export_decisions(s, bid, "csv"), S.export_decisions(s, bid, "xlsx")

    rows = list(csv.reader(io.StringIO(csv_bytes.decode("utf-8-sig"))))
    header, body = rows[0], rows[1:]
    col = header.index
    assert [r[col("mention")] for r in body] == ["'" + f for f in FORMULAS[:2]]
    assert {r[col("batch")] for r in body} == {"'\t=batch"}
    assert body[0][col("comment")] == "'=1+2" and body[0][col("user")] == "'@coder" and body[1][col("comment")] == "'-x"
    assert not any(cell.startswith(dbio.FORMULA_STARTS) for r in body for cell in r)

    sheet = openpyxl.load_workbook(io.BytesIO(xlsx_bytes))["decisions"]
    cells = [c for r in sheet.iter_rows(min_row=2) for c in r]
    assert cells and all(c.data_type != "f" for c in cells)
    mentions = [r[header.index("mention")].value for r in sheet.iter_rows(min_row=2)]
    assert mentions == ["'" + f for f in FORMULAS[:2]]

    # every mention (undecided ones too) through an export file and back
    every = pd.DataFrame({"mention": [*FORMULAS, "胆囊切除"], "terms": [["=怪", "阑尾切除术"], [], [], [], []]})
    for fmt in ("csv", "xlsx"):
        path = tmp_path / f"formulas.{fmt}"
        path.write_bytes(exports.export_frame(every, fmt))
        rep = S.import_mentions(s, path, f"again {fmt}", vid, again=True)  # the csv's batch holds the same mentions
        assert not rep.errors and [m["text"] for m in S.mentions(s, rep.batch_id)] == [*FORMULAS, "胆囊切除"], fmt
        assert dbio.read_mentions(path)[0][0].terms == ["=怪", "阑尾切除术"]


def test_leading_tab_cr_and_error_values_stay_text():
    """Mentions are stripped on import, so a leading tab / CR reaches an export only in hand-made frames; still
    quoted. XLSX stores "=..." and "#N/A" as text, not as a formula or an error value."""
    df = pd.DataFrame({"mention": ["\tx", "\rx", "=1", "#N/A", "'=quoted", "plain"],
                       "n": pd.array([1, 2, 3, 4, 5, None], dtype="Int64")})
    rows = list(csv.reader(io.StringIO(exports.export_frame(df, "csv").decode("utf-8-sig"), newline="")))
    assert [r[0] for r in rows[1:]] == ["'\tx", "'\rx", "'=1", "#N/A", "''=quoted", "plain"]
    assert [r[1] for r in rows[1:]] == ["1", "2", "3", "4", "5", ""]  # integers stay integers
    ws = openpyxl.load_workbook(io.BytesIO(exports.export_frame(df, "xlsx")))["decisions"]
    values = [(c.value, c.data_type) for c in ws["A"][1:]]
    # XLSX is XML, which reads every CR back as LF: a CR is written as LF, no formula trigger, so no quote
    assert values == [("'\tx", "s"), ("\nx", "s"), ("'=1", "s"), ("#N/A", "s"), ("''=quoted", "s"), ("plain", "s")]
    good, bad = dbio.read_mentions(exports.export_frame(df, "xlsx"), "x.xlsx")
    # read back as text; "#N/A" is then a placeholder for an empty cell, refused by name (not coded as a mention)
    assert [(b.row, b.problem) for b in bad] == [(5, "no mention: '#N/A' stands for an empty cell")]
    assert [g.text for g in good] == ["x", "x", "=1", "'=quoted", "plain"]


# ------------------------------------------------------------------ rejected mentions
def test_a_rejection_is_in_csv_xlsx_jsonl_and_a_fhir_no_map(db):
    s, vid = db
    bid, ids = batch(s, vid, ["右侧甲状腺肿块切除", "奇怪的写法", "阑尾", "看不清"])
    S.record_decision(s, ids[0], "alice", "correct", ["甲状腺病损切除术"])
    S.record_decision(s, ids[1], "alice", "reject")
    S.record_decision(s, ids[2], "alice", "skip", comment="later")
    S.record_decision(s, ids[3], "alice", "flag", comment="ask")
    df = pd.read_csv(io.BytesIO(S.export_decisions(s, bid, "csv")), keep_default_na=False)
    assert list(df["action"]) == ["correct", "reject", "skip", "flag"]
    assert {"edition", "code_system"} <= set(df.columns) and set(df["edition"].astype(str)) == {"1"}
    ws = openpyxl.load_workbook(io.BytesIO(S.export_decisions(s, bid, "xlsx")), read_only=True)["decisions"]
    assert [r[7] for r in ws.iter_rows(min_row=2, values_only=True)] == ["correct", "reject", "skip", "flag"]
    jsonl = [json.loads(x) for x in S.export_decisions(s, bid, "jsonl").decode().splitlines()]
    assert [(r["action"], r["terms"]) for r in jsonl][1] == ("reject", [])
    assert jsonl[0]["code_system"] == "urn:termnorm:vocabulary:procedures"
    assert (jsonl[0]["edition"], jsonl[0]["edition_label"]) == (1, "")
    assert jsonl[0]["at"].endswith("+00:00")  # UTC said on both backends (SQLite hands times back without a zone)
    cm = validated(S.export_decisions(s, bid, "fhir"))
    (group,) = cm["group"]
    assert [e["code"] for e in group["element"]] == ["右侧甲状腺肿块切除", "奇怪的写法"]  # skip / flag: no mapping
    assert group["element"][1] == {"code": "奇怪的写法", "display": "奇怪的写法", "noMap": True}
    # CHIP-CDN is training data: only decisions with terms
    assert json.loads(S.export_decisions(s, bid, "chip-cdn")) == [
        {"text": "右侧甲状腺肿块切除", "normalized_result": "甲状腺病损切除术"}]


# ------------------------------------------------------------------ FHIR R5 ConceptMap
def validated(data: bytes) -> dict:
    """The ConceptMap checked by fhir.resources (R5 structure, types, cardinality, required elements), plus the R5
    invariants it does not evaluate (FHIRPath): cnl-0, cnl-1, cmd-1, cmd-4, cmd-5, cmd-7 and the bound codes."""
    ConceptMap.model_validate_json(data)
    cm = json.loads(data)
    assert cm["resourceType"] == "ConceptMap" and cm["status"] in ("draft", "active")
    assert re.fullmatch(r"[A-Z][A-Za-z0-9_]{1,254}", cm["name"])  # cnl-0
    assert not re.search(r"[|# ]", cm["url"])  # cnl-1
    for g in cm.get("group", []):
        assert not re.search(r"\s", g["source"] + g["target"])  # canonical
        for e in g["element"]:
            assert "code" in e and "valueSet" not in e  # cmd-5
            assert (e.get("noMap") is True) == ("target" not in e)  # cmd-4 (and every other element maps)
            for t in e.get("target", []):
                assert "code" in t and "valueSet" not in t and t["code"] == t["code"].strip()  # cmd-7
                assert t["relationship"] in RELATIONSHIPS
                if t["relationship"] in ("source-is-broader-than-target", "not-related-to"):
                    assert t.get("comment")  # cmd-1, given even in a draft so that the map can become active
    return cm


def test_fhir_single_multi_reject_and_relationships_validate(db):
    s, vid = db
    bid, ids = batch(s, vid, ["右侧甲状腺肿块切除", "LC+胆总管探查", "奇怪的写法", "胆囊", "阑尾", "甲状腺"])
    S.record_decision(s, ids[0], "alice", "correct", ["甲状腺病损切除术"])
    S.record_decision(s, ids[1], "alice", "correct", ["腹腔镜下胆囊切除术", "胆总管探查术"])
    S.record_decision(s, ids[2], "alice", "reject")
    S.record_decision(s, ids[3], "alice", "correct", ["胆囊切除术"], relationship="source-is-narrower-than-target")
    S.record_decision(s, ids[4], "alice", "correct", ["阑尾切除术"], relationship="source-is-broader-than-target")
    S.record_decision(s, ids[5], "alice", "correct", ["甲状腺全部切除术"], codes={"甲状腺全部切除术": "06.4x00"})
    cm = validated(S.export_decisions(s, bid, "fhir"))
    assert cm["status"] == "draft"  # nothing approved yet
    (group,) = cm["group"]
    assert group["source"] == f"urn:termnorm:batch:{bid}"
    assert group["target"] == "urn:termnorm:vocabulary:procedures|1"  # code system | edition
    by = {e["code"]: e for e in group["element"]}
    assert by["右侧甲状腺肿块切除"]["target"] == [{"code": "06.3100", "display": "甲状腺病损切除术",
                                                 "relationship": "equivalent"}]
    multi = by["LC+胆总管探查"]["target"]
    assert [(t["code"], t["relationship"]) for t in multi] == [("51.2300", "source-is-broader-than-target"),
                                                               ("51.5100", "source-is-broader-than-target")]
    assert all("2 terms" in t["comment"] for t in multi)
    assert by["奇怪的写法"]["noMap"] is True and "target" not in by["奇怪的写法"]
    assert by["胆囊"]["target"][0]["relationship"] == "source-is-narrower-than-target"
    assert by["阑尾"]["target"][0]["relationship"] == "source-is-broader-than-target"
    assert by["阑尾"]["target"][0]["comment"]


def test_fhir_status_is_active_only_when_every_mapping_is_approved(db):
    s, vid = db
    bid, ids = batch(s, vid, ["右侧甲状腺肿块切除", "LC+胆总管探查", "奇怪的写法", "阑尾"])
    d = [S.record_decision(s, ids[0], "alice", "correct", ["甲状腺病损切除术"]),
         S.record_decision(s, ids[1], "alice", "correct", ["腹腔镜下胆囊切除术", "胆总管探查术"]),
         S.record_decision(s, ids[2], "alice", "reject")]
    S.record_decision(s, ids[3], "alice", "skip")  # not a mapping: does not keep the map in draft
    approve_all(s, d[:1])
    mixed = validated(S.export_decisions(s, bid, "fhir"))
    assert mixed["status"] == "draft" and len(mixed["group"][0]["element"]) == 3
    # its description agrees (a user test read "draft" above "Status active: every mapping here was approved")
    assert "Status draft: 2 of the 3 mappings here are not approved" in mixed["description"]
    assert "Status active" not in mixed["description"]
    only = validated(S.export_decisions(s, bid, "fhir", approved_only=True))
    assert only["status"] == "active" and [e["code"] for e in only["group"][0]["element"]] == ["右侧甲状腺肿块切除"]
    assert "Status active: every mapping here was approved by a lead." in only["description"]
    approve_all(s, d[1:])
    every = validated(S.export_decisions(s, bid, "fhir"))
    assert every["status"] == "active" and len(every["group"][0]["element"]) == 3
    report = exports.export_batch(s, bid, "fhir").report
    assert (report["status"], report["elements"], report["no_map"], report["left_out"]) == ("active", 3, 1, 1)


def test_fhir_one_group_per_batch_and_edition(db):
    s, vid = db
    S.set_system_uri(s, vid, "http://example.org/fhir/CodeSystem/icd9cm3-bj", "lead")
    b1, ids1 = batch(s, vid, ["右侧甲状腺肿块切除", "阑尾"], name="ward 1")
    b2, ids2 = batch(s, vid, ["胆囊"], name="ward 2")
    S.record_decision(s, ids1[0], "alice", "correct", ["甲状腺病损切除术"])
    S.record_decision(s, ids2[0], "alice", "correct", ["胆囊切除术"])
    # a new edition (one code changed elsewhere): later decisions belong to it
    editions.import_edition(s, vid, vocabulary({**TERMS, "胆总管探查术": "51.5101"}), "2024 北京临床版", "lead")
    S.record_decision(s, ids1[1], "alice", "correct", ["阑尾切除术"])
    cm = validated(S.export_decisions(s, None, "fhir"))
    uri = "http://example.org/fhir/CodeSystem/icd9cm3-bj"
    assert sorted((g["source"], g["target"], [e["code"] for e in g["element"]]) for g in cm["group"]) == [
        (f"urn:termnorm:batch:{b1}", f"{uri}|1", ["右侧甲状腺肿块切除"]),
        (f"urn:termnorm:batch:{b1}", f"{uri}|2024%20北京临床版", ["阑尾"]),
        (f"urn:termnorm:batch:{b2}", f"{uri}|1", ["胆囊"])]


# ------------------------------------------------------------------ OMOP SOURCE_TO_CONCEPT_MAP
def athena_concepts(path, rows):
    """A small Athena-like CONCEPT.csv: tab-separated, unquoted (a lone quote in a name), dates YYYYMMDD."""
    head = ["concept_id", "concept_name", "domain_id", "vocabulary_id", "concept_class_id", "standard_concept",
            "concept_code", "valid_start_date", "valid_end_date", "invalid_reason"]
    lines = ["\t".join(head)] + [
        "\t".join([str(cid), name, "Procedure", vocab, "6-dig billing code", "", code, "19700101", "20991231", bad])
        for cid, name, vocab, code, bad in rows]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def omop_rows(data: bytes) -> pd.DataFrame:
    text = data.decode("utf-8")
    assert not text.startswith("\ufeff")  # a database loader reads it: no BOM
    return pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False)


def test_omop_source_to_concept_map(db, tmp_path):
    s, vid = db
    long = "腹腔镜下胆囊切除术" * 6 + "（右）"  # 57 characters
    longer = "甲" * 300
    bid, ids = batch(s, vid, ["右侧甲状腺肿块切除", "LC+胆总管探查", "奇怪的写法", long, longer, "阑尾", "未审"])
    d = [S.record_decision(s, ids[0], "alice", "correct", ["甲状腺病损切除术"]),
         S.record_decision(s, ids[1], "alice", "correct", ["腹腔镜下胆囊切除术", "胆总管探查术"]),
         S.record_decision(s, ids[2], "alice", "reject"),
         S.record_decision(s, ids[3], "alice", "correct", ["胆囊切除术"]),
         S.record_decision(s, ids[4], "alice", "correct", ["甲状腺全部切除术"])]
    S.record_decision(s, ids[5], "alice", "skip")
    S.record_decision(s, ids[6], "alice", "correct", ["阑尾切除术"])  # unchecked: not exported
    approve_all(s, d)
    concepts = athena_concepts(tmp_path / "CONCEPT.csv", [
        (2000001, '甲状腺病损切除术 "旧', "ICD9ProcCN", "06.3100", "D"),  # deprecated: the valid one wins
        (2000002, "甲状腺病损切除术", "ICD9ProcCN", "06.3100", ""),
        (2000003, "腹腔镜下胆囊切除术", "ICD9ProcCN", "51.2300", ""),
        (2000004, "胆囊切除术", "ICD9ProcCN", "51.2200", ""),
        (2000005, "甲状腺全部切除术", "ICD9ProcCN", "06.4x00", ""),
        (9999999, "胆总管探查术", "ICD10CN", "51.5100", "")])  # another vocabulary: no match
    out = exports.export_batch(s, bid, "omop", source_vocabulary_id="WARD7", target_vocabulary_id="ICD9ProcCN",
                               concepts=concepts)
    assert out.file_name == "export_batch_source_to_concept_map.csv" and out.mime == "text/csv"
    df = omop_rows(out.data)
    assert list(df.columns) == OMOP_HEADER
    assert list(zip(df.source_code_description, df.target_concept_id, df.target_vocabulary_id)) == [
        ("右侧甲状腺肿块切除", "2000002", "ICD9ProcCN"),
        ("LC+胆总管探查", "2000003", "ICD9ProcCN"),
        ("LC+胆总管探查", "0", "None"),  # 51.5100 is not an ICD9ProcCN concept in the file
        ("奇怪的写法", "0", "None"),  # rejected: no matching concept
        (long, "2000004", "ICD9ProcCN"),
        (longer[:255], "2000005", "ICD9ProcCN")]
    assert set(df.source_concept_id) == {"0"} and set(df.source_vocabulary_id) == {"WARD7"}
    assert set(df.valid_start_date) == {"1970-01-01"} and set(df.valid_end_date) == {"2099-12-31"}
    assert set(df.invalid_reason) == {""}
    assert list(df.source_code)[4:] == [long[:50], longer[:50]] and df.source_code.str.len().max() == 50
    r = out.report
    assert (r["rows"], r["decisions"], r["rejected"], r["rows_without_concept"]) == (6, 5, 1, 1)
    assert r["no_concept"] == ["51.5100"] and r["cut"] == [long, longer] and r["cut_description"] == [longer]
    # the same through services, with the defaults: no CONCEPT.csv -> every target 0, source vocabulary TERMNORM
    plain = omop_rows(S.export_decisions(s, bid, "omop"))
    assert set(plain.target_concept_id) == {"0"} and set(plain.source_vocabulary_id) == {"TERMNORM"}
    assert len(plain) == 6  # approved only, always


def test_omop_options_are_checked(db, tmp_path):
    s, vid = db
    bid, _ = batch(s, vid, ["阑尾"])
    with pytest.raises(ValueError, match="20"):
        S.export_decisions(s, bid, "omop", source_vocabulary_id="X" * 21)
    with pytest.raises(ValueError, match="target vocabulary_id"):
        S.export_decisions(s, bid, "omop", concepts=athena_concepts(tmp_path / "c.csv", []))
    (tmp_path / "bad.csv").write_text("id\tname\n1\tx\n", encoding="utf-8")
    with pytest.raises(ValueError, match="missing column"):
        S.export_decisions(s, bid, "omop", target_vocabulary_id="ICD10CN", concepts=tmp_path / "bad.csv")
    with pytest.raises(ValueError, match="unknown export format"):
        S.export_decisions(s, bid, "pdf")


# ------------------------------------------------------------------ the page
@pytest.fixture
def app_db(url, monkeypatch):
    monkeypatch.setenv("TERMNORM_DB_URL", url)
    monkeypatch.setenv("TERMNORM_AUTH", "off")
    yield url
    S.dispose(url)


def test_page_prepares_the_export_then_downloads_ready_bytes(app_db, tmp_path):
    at = run(AppTest.from_file(APP, default_timeout=TIMEOUT))  # seeds the demo data
    bid = at.session_state["batch_id"]
    with S.session_scope(app_db) as s:
        ms = S.mentions(s, bid)[:3]
    end = time.time() + 60  # the coding page prepares the next suggestions in a thread once it is drawn
    while time.time() < end:
        with S.session_scope(app_db) as s:
            if S.latest_suggestion(s, ms[1]["id"]) is not None:
                break
        time.sleep(0.2)
    with S.session_scope(app_db) as s:
        d = [S.record_decision(s, ms[0]["id"], "coder", "accept"),
             S.record_decision(s, ms[1]["id"], "coder", "accept"),
             S.record_decision(s, ms[2]["id"], "coder", "reject")]
        S.ensure_user(s, "lead", role="lead")
        review.approve(s, d[:1], "lead")
        frame = S.decisions_frame(s, bid)
        code, n_terms, vocab = frame.codes[0][0], len(frame.terms[0]), frame.vocabulary[0]
    at.switch_page("app_pages/import_export.py")
    run(at)
    assert not at.get("download_button")  # nothing prepared yet
    at.selectbox(key="export_format").set_value("OMOP SOURCE_TO_CONCEPT_MAP")
    run(at)
    at.text_input(key="omop_target").set_value("ICD9ProcCN")
    concepts = athena_concepts(tmp_path / "CONCEPT.csv", [(4000001, "x", "ICD9ProcCN", code, "")])
    at.file_uploader(key="omop_concepts").set_value(("CONCEPT.csv", concepts.read_bytes(), "text/csv"))
    run(at)
    at.button(key="export_prepare").click()
    run(at)
    ready = at.session_state["export_ready"]["export"]
    (button,) = at.get("download_button")
    # the bytes were handed over when the button was drawn: nothing is built when it is clicked
    assert button.proto.url and not button.proto.deferred_file_id
    assert button.label == f"Download {md(ready.file_name)}" and ready.file_name.endswith("_source_to_concept_map.csv")
    df = omop_rows(ready.data)
    assert list(df.columns) == OMOP_HEADER
    assert len(df) == n_terms and df.target_concept_id[0] == "4000001"  # the approved decision only
    assert {m.label: m.value for m in at.metric}["Rows written"] == "1"
    # another format: the prepared OMOP file is not offered for it
    at.selectbox(key="export_format").set_value("FHIR R5 ConceptMap")
    run(at)
    assert not at.get("download_button") and any("prepare it again" in c.value for c in at.caption)
    at.button(key="export_prepare").click()
    run(at)
    ready = at.session_state["export_ready"]["export"]
    cm = validated(ready.data)
    assert len(cm["group"][0]["element"]) == 3 and cm["status"] == "draft"
    assert cm["group"][0]["target"].startswith(S.code_system(vocab) + "|")
    assert any("status **draft**" in c.value for c in at.caption)
    at.get("download_button")[0].click()
    run(at)
    at.checkbox(key="export_approved").check()
    run(at)
    at.button(key="export_prepare").click()
    run(at)
    cm = validated(at.session_state["export_ready"]["export"].data)
    assert cm["status"] == "active" and len(cm["group"][0]["element"]) == 1


def test_an_export_with_no_decision_to_write_offers_no_file(app_db):
    """A user test downloaded an OMOP file holding its header alone: nothing in the batch was approved yet."""
    at = run(AppTest.from_file(APP, default_timeout=TIMEOUT))  # seeds the demo data
    bid = at.session_state["batch_id"]
    with S.session_scope(app_db) as s:
        m = S.mentions(s, bid)[0]
        did = S.record_decision(s, m["id"], "coder", "accept", ["阑尾切除术"])  # decided, not approved
    at.switch_page("app_pages/import_export.py")
    run(at)
    at.selectbox(key="export_format").set_value("OMOP SOURCE_TO_CONCEPT_MAP")
    run(at)
    at.button(key="export_prepare").click()
    run(at)
    assert at.session_state["export_ready"]["export"].report["rows"] == 0
    assert not at.get("download_button")
    assert any("No approved decision" in w.value for w in at.warning)
    assert any("Nothing to download" in c.value for c in at.caption)
    assert not any("CONCEPT.csv" in i.value for i in at.info)  # no row: no word on the concepts of none
    at.selectbox(key="export_format").set_value("CSV")  # the unapproved decision is there to export
    run(at)
    at.button(key="export_prepare").click()
    run(at)
    assert at.session_state["export_ready"]["export"].report["rows"] == 1
    assert len(at.get("download_button")) == 1 and not any("Nothing to download" in c.value for c in at.caption)
    assert any(c.value == "1 decision(s). Times (at, reviewed_at) are UTC." for c in at.caption)  # naive in CSV
    with S.session_scope(app_db) as s:  # approved: the OMOP file has its row, and says it has no concept for it
        S.ensure_user(s, "lead", role="lead")
        review.approve(s, [did], "lead")
    at.selectbox(key="export_format").set_value("OMOP SOURCE_TO_CONCEPT_MAP")
    run(at)
    at.button(key="export_prepare").click()
    run(at)
    assert at.session_state["export_ready"]["export"].report["rows"] == 1
    assert any("No CONCEPT.csv given" in i.value for i in at.info) and len(at.get("download_button")) == 1


def test_a_mention_marked_not_related_to_its_terms_is_no_mapping_and_teaches_them_as_wrong(db):
    """Key 5 then Save: the coder states the mention is *not* the terms in the box. A user test found it stored
    as an accept that became a positive training pair, coded history, an OMOP row with the term's concept and a
    CHIP-CDN training item. It is kept for the record (FHIR's not-related-to, with its comment) and nothing else."""
    s, vid = db
    bid, ids = batch(s, vid, ["甲状旁腺腺瘤切除术（左下）", "LC+胆总管探查", "阑尾"])
    d = [S.record_decision(s, ids[0], "alice", "accept", ["甲状腺病损切除术"], relationship=S.NOT_RELATED),
         S.record_decision(s, ids[1], "alice", "correct", ["腹腔镜下胆囊切除术", "胆总管探查术"],
                           relationship=S.NOT_RELATED),
         S.record_decision(s, ids[2], "alice", "correct", ["阑尾切除术"])]
    pairs = S.training_pairs_frame(s, vid)
    by_mention = {m: sorted(zip(g.term, g.label)) for m, g in pairs.groupby("mention")}
    assert by_mention["甲状旁腺腺瘤切除术（左下）"] == [("甲状腺病损切除术", 0)]
    assert by_mention["LC+胆总管探查"] == [("胆总管探查术", 0), ("腹腔镜下胆囊切除术", 0)]
    assert by_mention["阑尾"] == [("阑尾切除术", 1)]
    assert [m.text for m in S.coded_mentions(s, vid)] == ["阑尾"]  # the engine's history

    approve_all(s, d)
    omop = exports.export_batch(s, bid, "omop")
    rows = omop_rows(omop.data)
    assert list(zip(rows.source_code, rows.target_concept_id)) == [
        ("甲状旁腺腺瘤切除术（左下）", "0"), ("LC+胆总管探查", "0"), ("阑尾", "0")]  # one row each, no target
    assert (omop.report["rows"], omop.report["not_related"], omop.report["rejected"]) == (3, 2, 0)
    cdn = exports.export_batch(s, bid, "chip-cdn")
    assert json.loads(cdn.data) == [{"text": "阑尾", "normalized_result": "阑尾切除术"}]
    assert cdn.report["left_out"] == 2
    cm = validated(S.export_decisions(s, bid, "fhir"))
    by = {e["code"]: e["target"] for e in cm["group"][0]["element"]}
    assert [(t["code"], t["relationship"]) for t in by["LC+胆总管探查"]] == [("51.2300", S.NOT_RELATED),
                                                                         ("51.5100", S.NOT_RELATED)]
    assert all(t["comment"] == exports.NEEDS_COMMENT[S.NOT_RELATED] for t in by["LC+胆总管探查"])
