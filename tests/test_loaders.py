"""Loaders on the real shared data (exact counts) and on malformed temp files.

Counts were measured with ``load_vocabulary`` / ``load_labelled`` on the files
of ``<repo>/../shared/data`` (see the README of that folder for the published
sizes); tests needing the data skip when the folder is absent.
"""

from __future__ import annotations

import json
from pathlib import Path

import openpyxl
import pytest

from termnorm.errors import DataFormatError
from termnorm.loaders import load_keywords, load_labelled, load_vocabulary, normalize_concept_id, sniff_format

DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data"
needs_data = pytest.mark.skipif(not DATA.is_dir(), reason="shared data folder absent")

V601 = DATA / "chip-cdn" / "icd10_beijing_clinical_v601.xlsx"
CODE_TXT = DATA / "yidu-n7k" / "code.txt"
ICD9_TREE = DATA / "icd9cm3" / "icd9cm3_yibao_v2_tree.json"
MEDIC = DATA / "ncbi-disease" / "medic_06Jul2012.txt"


@pytest.fixture(scope="module")
def v601():
    # The 40,474-row sheet is the slow load (~1.3 s): once per module.
    return load_vocabulary(V601)


@pytest.fixture(scope="module")
def medic():
    return load_vocabulary(MEDIC)


def raises_at(path, row, fn, *args, match=None, **kw):
    """Call fn, expect DataFormatError naming ``path`` and ``row``; return it."""
    with pytest.raises(DataFormatError, match=match) as ei:
        fn(*args, **kw)
    err = ei.value
    assert err.row == row
    assert str(path) in str(err)
    if row is not None:
        assert f"row {row}:" in str(err)
    return err


def write_xlsx(path, rows):
    wb = openpyxl.Workbook()
    ws = wb.active
    for r in rows:
        ws.append(list(r))
    wb.save(path)
    return path


# ---------------------------------------------------------------------------
# real vocabularies
# ---------------------------------------------------------------------------
@needs_data
def test_v601_xlsx(v601):
    assert sniff_format(V601) == "code_name"
    assert len(v601) == 37_645  # distinct names
    assert sum(len(c) for c in v601.codes.values()) == 40_474  # one (code, name) per row
    assert len(v601.code_names) == 40_474
    assert v601.language == "zh"
    # a name with several codes keeps them all
    assert v601.codes["霍乱"] == ["A00", "A00.901"]  # file order; exported: the leaf
    assert v601.codes_of("霍乱") == ["A00.901", "A00"] and v601.code_kind("A00") == "category"
    assert sum(len(c) > 1 for c in v601.codes.values()) == 2_671
    # no tree: hierarchy from code prefixes
    assert v601.ancestors("A00.001") == ["A00.0", "A00"]


@needs_data
def test_yidu_code_txt():
    v = load_vocabulary(CODE_TXT)
    assert sniff_format(CODE_TXT) == "code_name"
    assert len(v) == 9_468
    assert len(v.code_names) == 9_867
    assert v.codes["颅骨病损的切除术"] == ["01.6", "01.6x00"]
    assert v.codes_of("颅骨病损的切除术") == ["01.6x00", "01.6"]
    assert sum(len(c) > 1 for c in v.codes.values()) == 395


@needs_data
def test_icd9_tree_hierarchy():
    v = load_vocabulary(ICD9_TREE)
    assert sniff_format(ICD9_TREE) == "icd_tree"
    # terms = childless nodes: 13,686 手术操作 + the childless 细目 99.92 其他针刺
    assert len(v) == 13_687
    assert "其他针刺" in v
    assert len(v.code_names) == 18_360  # inner names kept for the hierarchy
    assert len(v.parent) == 18_360 - 18  # every node but the 18 chapters
    leaf = "头和颈部血管治疗性超声"
    assert v.codes_of(leaf) == ["00.0100"]
    anc = v.ancestors("00.0100")
    assert anc == ["00.01", "00.0", "00", "c1"]
    assert v.code_names["c1"] == "操作和介入不能分类于他处"
    assert v.chapter(leaf) == "c1"
    # an inner-only name (类目 01) is not a term unless asked for
    inner = v.code_names["01"]
    assert inner not in v
    assert inner in load_vocabulary(ICD9_TREE, inner_terms=True)
    assert len(load_vocabulary(ICD9_TREE, inner_terms=True)) == 14_884


@needs_data
def test_medic(medic):
    assert sniff_format(MEDIC) == "medic"
    assert medic.language == "en"
    assert len(medic) == 11_915
    assert len(medic.code_names) == 14_942
    assert sum(len(s) for s in medic.synonyms.values()) == 64_322
    # primary + alternative ids, OMIM prefixed; HTML entities unescaped
    assert medic.codes_of("Fanconi Anemia") == ["D005199", "OMIM:227650"]  # two systems: file order
    assert "Anemia, Fanconi's" in medic.synonyms["Fanconi Anemia"]
    # a code with several names (alt id of a MeSH concept + its own OMIM
    # concept): both kept, the concept whose primary id it is preferred
    assert sorted(medic.names_of("OMIM:260350")) == ["PANCREATIC CANCER PANCREATIC CARCINOMA", "Pancreatic Neoplasms"]
    assert medic.code_names["OMIM:260350"] == "PANCREATIC CANCER PANCREATIC CARCINOMA"


# ---------------------------------------------------------------------------
# real labelled sets
# ---------------------------------------------------------------------------
@needs_data
def test_chip_cdn(v601):
    tr = load_labelled(DATA / "chip-cdn" / "train.json")
    assert len(tr) == 6_000 and tr.missing == []  # no vocab, nothing checked
    assert sum(len(m.terms) for m in tr.mentions) == 10_915
    un = load_labelled(DATA / "chip-cdn" / "unlabeled.json")
    assert len(un) == 10_000 and all(m.terms == [] for m in un.mentions)
    assert not any(m.text.startswith("\ufeff") for m in un.mentions)  # item 1 has a glued BOM


@needs_data
def test_chip_cdn_dev_missing_names_reported_not_dropped(v601):
    dev = load_labelled(DATA / "chip-cdn" / "dev.json", v601)
    assert sniff_format(DATA / "chip-cdn" / "dev.json") == "cdn_json"
    assert len(dev) == 1_000
    gold = sum(len(m.terms) for m in dev.mentions)
    assert gold == 1_750
    # 109 of 1,750 gold (mention, name) pairs (6.2%) name no v601 term, in 100 mentions
    assert len(dev.missing) == 109
    assert len({r for r, _ in dev.missing}) == 100
    by_row = {m.row: m for m in dev.mentions}
    for row, name in dev.missing:
        assert name not in v601
        assert name in by_row[row].terms  # reported, kept
    assert dev.mentions[1].text == "卵巢Ca" and dev.mentions[1].terms == ["卵巢恶性肿瘤", "癌"]
    # CSV quotes left in the gold are removed: '"慢性肾脏病,5期##痛风性肾病"'
    assert not any('"' in t for m in dev.mentions for t in m.terms)


@needs_data
def test_yidu_labelled():
    codes = load_vocabulary(CODE_TXT)
    tr = load_labelled(DATA / "yidu-n7k" / "train.xlsx", codes)
    va = load_labelled(DATA / "yidu-n7k" / "val.xlsx", codes)
    assert sniff_format(DATA / "yidu-n7k" / "val.xlsx") == "labelled_table"
    assert (len(tr), len(va)) == (4_000, 1_000)
    assert sum(len(m.terms) for m in tr.mentions) == 4_270
    assert sum(len(m.terms) > 1 for m in va.mentions) == 50
    assert tr.missing == [] and va.missing == []  # every gold name is in code.txt
    assert va.mentions[0].row == 2  # sheet row under the header
    assert va.mentions[0].text == "右侧甲状腺叶切除术"


@needs_data
def test_ncbi_pubtator(medic):
    path = DATA / "ncbi-disease" / "NCBIdevelopset_corpus.txt"
    assert sniff_format(path) == "pubtator"
    raw = load_labelled(path)
    assert len(raw) == 787
    assert raw.mentions[0].text == "enzyme deficiency" and raw.mentions[0].terms == ["D008661"]
    assert raw.mentions[0].row == 4
    assert any(m.terms == ["OMIM:217000"] for m in raw.mentions)
    dev = load_labelled(path, medic)
    assert dev.missing == []  # every dev id resolves once prefixes are normalised
    assert dev.mentions[0].terms == ["Metabolism, Inborn Errors"]
    composite = [m for m in dev.mentions if m.text == "breast or ovarian cancer"]
    assert composite[0].terms == ["Breast Neoplasms", "Ovarian Neoplasms"]
    # each mention carries its document: the title and abstract lines of its PMID
    fed = next(m for m in dev.mentions if m.text == "FED")
    assert fed.document.count("\n") == 1 and "fish-eye disease (FED)" in fed.document
    assert all(m.document for m in dev.mentions)
    assert sum(len(m.terms) for m in dev.mentions) == 821
    train = load_labelled(DATA / "ncbi-disease" / "NCBItrainset_corpus.txt", medic)
    assert len(train) == 5_145 and sum(len(m.terms) for m in train.mentions) == 5_263
    assert train.missing == []


@needs_data
def test_keywords_real():
    kw = load_keywords(DATA / "keywords")
    # procedure_sites.txt has 3,339 lines, 168 of them repeats
    assert {k: len(v) for k, v in kw.items()} == {"site": 3_171, "type": 137, "approach": 239, "abbreviations": 190}
    assert kw["abbreviations"]["copd"] == "慢性阻塞性肺疾病"
    assert "经骶尾部" in kw["approach"]


def test_normalize_concept_id():
    assert normalize_concept_id("MESH:D012345") == "D012345"
    assert normalize_concept_id(" D012345") == "D012345"
    assert normalize_concept_id("227650") == "OMIM:227650"
    assert normalize_concept_id("omim:227650") == "OMIM:227650"


# ---------------------------------------------------------------------------
# what a coder's own file looks like
# ---------------------------------------------------------------------------
def test_gbk_csv_with_chinese_headers_synonyms_and_blank_lines(tmp_path):
    p = tmp_path / "hospital.csv"
    text = (
        "编码,名称,同义词\r\nK35.9,急性阑尾炎,阑尾炎急性;急性阑尾炎症\r\n\r\n"
        "K35.9,急性阑尾炎,阑尾炎急性\r\nK35.901,急性阑尾炎,\r\nK35.902,阑尾周围脓肿,阑尾脓肿|周围脓肿\r\n"
    )
    p.write_bytes(text.encode("gbk"))
    assert sniff_format(p) == "vocab_table"
    v = load_vocabulary(p)
    assert v.names == ["急性阑尾炎", "阑尾周围脓肿"]  # duplicate row harmless
    assert v.codes["急性阑尾炎"] == ["K35.9", "K35.901"]  # several codes, in file order
    assert v.export_code("急性阑尾炎") == "K35.901"
    assert v.synonyms["急性阑尾炎"] == ["阑尾炎急性", "急性阑尾炎症"]
    assert v.synonyms["阑尾周围脓肿"] == ["阑尾脓肿", "周围脓肿"]
    assert v.ancestors("K35.901") == ["K35.9"]


def test_utf8_bom_tsv_multi_name_code_and_parent(tmp_path):
    p = tmp_path / "list.tsv"
    p.write_text("\ufeffcode\tname\tparent\nA1\t总类\t\nA1.1\t甲\tA1\nA1.1\t乙\tA1\n", encoding="utf-8")
    v = load_vocabulary(p)
    assert v.names_of("A1.1") == ["甲", "乙"]  # a code with several names
    assert v.parent == {"A1.1": "A1"}


def test_utf16_headerless_code_txt(tmp_path):
    p = tmp_path / "code.txt"
    # UTF-16 is Excel's "Unicode text" export; a trailing TAB is tolerated
    p.write_bytes("01.1\t颅骨切开术\n01.2\t颅骨切除术\t\n".encode("utf-16"))
    v = load_vocabulary(p)
    assert v.names == ["颅骨切开术", "颅骨切除术"]


def test_xlsx_numeric_code_and_header(tmp_path):
    rows = [("代码", "标准词"), (4501, "小肠切开术"), (None, None), ("45.02", "小肠切开术")]
    p = write_xlsx(tmp_path / "v.xlsx", rows)
    v = load_vocabulary(p, name="mine")
    assert v.name == "mine" and v.codes_of("小肠切开术") == ["4501", "45.02"]


def test_labelled_csv_and_missing(tmp_path):
    p = tmp_path / "gold.csv"
    p.write_text("mention,terms\n阑尾炎,急性阑尾炎##不存在的名字\n\n肚子痛,\n", encoding="utf-8")
    vocab = load_vocabulary(write_xlsx(tmp_path / "v.xlsx", [("K35.9", "急性阑尾炎")]))
    ls = load_labelled(p, vocab)
    assert [(m.text, m.terms, m.row) for m in ls.mentions] == [
        ("阑尾炎", ["急性阑尾炎", "不存在的名字"], 2),
        ("肚子痛", [], 4),
    ]
    assert ls.missing == [(2, "不存在的名字")]


# ---------------------------------------------------------------------------
# malformed files: the error names file, row and problem
# ---------------------------------------------------------------------------
def test_empty_and_unknown(tmp_path):
    p = tmp_path / "empty.csv"
    p.write_bytes(b"")
    raises_at(p, None, load_vocabulary, p, match="empty file")
    q = tmp_path / "prose.txt"
    q.write_text("just some words, nothing else\n", encoding="utf-8")
    raises_at(q, 1, sniff_format, q, match="unknown format")
    c = tmp_path / "ok.txt"
    c.write_text("A1\tx\n", encoding="utf-8")
    raises_at(c, None, load_vocabulary, c, format="bogus", match="unknown format 'bogus'")
    err = raises_at(c, None, load_labelled, c, match="not labelled mentions")
    assert "this reads as a code / name list, not labelled mentions (expected CHIP-CDN mentions" in str(err)
    m = tmp_path / "mentions.csv"  # a user test uploaded a list of mentions as a vocabulary
    m.write_text("mention\n胆囊切除\n", encoding="utf-8")
    err = raises_at(m, None, load_vocabulary, m, match="this reads as a table of mentions")
    assert "_" not in err.problem, err.problem  # no internal format names
    raises_at(tmp_path / "nope.txt", None, load_vocabulary, tmp_path / "nope.txt", match="not found")


def test_unreadable_encoding(tmp_path):
    p = tmp_path / "bad.txt"
    p.write_bytes("A1\t甲\n".encode("utf-8") + b"A2\t\xff\xfe\xff\n")
    raises_at(p, 2, load_vocabulary, p, match="unreadable encoding")


def test_bad_spreadsheets(tmp_path):
    p = tmp_path / "old.xls"
    p.write_bytes(b"\xd0\xcf\x11\xe0" + b"\0" * 100)
    raises_at(p, None, load_vocabulary, p, match="legacy .xls")
    q = tmp_path / "fake.xlsx"
    q.write_text("code,name\n", encoding="utf-8")
    raises_at(q, None, load_vocabulary, q, match="not a valid .xlsx")


def test_vocab_table_errors(tmp_path):
    p = tmp_path / "v.csv"
    p.write_text("code,label\nA1,x\n", encoding="utf-8")
    raises_at(p, 1, load_vocabulary, p, match="missing required column 'name'")
    p.write_text("code,name\nA1,x\n\n,y\n", encoding="utf-8")
    raises_at(p, 4, load_vocabulary, p, match="missing code")
    x = write_xlsx(tmp_path / "v.xlsx", [("编码", "名称"), ("A1", "甲"), ("A2", None)])
    raises_at(x, 3, load_vocabulary, x, match="missing name")
    p.write_text("code,name,parent\nA1,x,\nA1.1,y,B9\n", encoding="utf-8")
    raises_at(p, 3, load_vocabulary, p, match="parent code 'B9'")


def test_a_refused_vocabulary_names_every_bad_row_and_a_code_given_twice_is_found(tmp_path):
    """A user test fixed a hospital's list once per bad row: the refusal named only the first."""
    p = tmp_path / "本院.csv"
    rows = ["编码,名称", "H1,甲", "H2,", "H3,丙", ",丁"] + [f"H{i}," for i in range(10, 40)]
    p.write_text("\n".join(rows) + "\n", encoding="utf-8")
    err = raises_at(p, 3, load_vocabulary, p, match="missing name")
    assert "also row 5: missing code (column '编码'); row 6: missing name" in err.problem
    assert "and 12 more rows (32 rows wrong; nothing imported)" in err.problem
    t = tmp_path / "code.txt"
    t.write_text("01.1\t甲\n01.2\n01.3\t丙\t多\n", encoding="utf-8")
    err = raises_at(t, 2, load_vocabulary, t, match="found 1; also row 3: expected 2 TAB-separated fields")
    p.write_text("编码,名称\nH1,甲\nH2,胆囊切除\nH2,胆囊摘除\n", encoding="utf-8")
    assert load_vocabulary(p).shared_codes() == {"H2": ["胆囊切除", "胆囊摘除"]}
    t.write_text("01\t甲\n02\t乙\n03\t甲\n", encoding="utf-8")  # one name under two codes is not one code twice
    assert load_vocabulary(t).shared_codes() == {}


def test_headerless_errors(tmp_path):
    p = tmp_path / "code.txt"
    p.write_text("01.1\t甲\n\n01.2\t乙\t多余\n", encoding="utf-8")
    raises_at(p, 3, load_vocabulary, p, match="expected 2 TAB-separated fields")
    x = write_xlsx(tmp_path / "h.xlsx", [("编号", "诊断")])
    raises_at(x, 1, load_vocabulary, x, match="looks like a header")
    y = write_xlsx(tmp_path / "w.xlsx", [("A1", "甲"), ("A2", "乙", "?")])
    raises_at(y, 2, load_vocabulary, y, match="unexpected value in column 3")


def test_tree_errors(tmp_path):
    node = {"code": "01", "term_name": "类目", "father": None, "child": ["01.1"], "level": 2, "level_name": "类目"}
    leaf = {"code": "01.1", "term_name": "叶", "father": "01", "child": None, "level": 3, "level_name": "手术操作"}
    p = tmp_path / "tree.json"
    p.write_text('{\n "01": {"code": "01",\n "term_name": }\n}', encoding="utf-8")
    raises_at(p, 3, load_vocabulary, p, match="invalid JSON")
    nameless = {k: v for k, v in leaf.items() if k != "term_name"}
    p.write_text(json.dumps({"01": node, "01.1": nameless}), encoding="utf-8")
    raises_at(p, 2, load_vocabulary, p, format="icd_tree", match="lacks key.*term_name")
    p.write_text(json.dumps({"01": node, "01.1": dict(leaf, father="09")}), encoding="utf-8")
    raises_at(p, 2, load_vocabulary, p, match="father '09'")
    p.write_text(json.dumps({"01": node, "01.1": leaf}), encoding="utf-8")
    v = load_vocabulary(p)
    assert v.names == ["叶"] and v.ancestors("01.1") == ["01"]


def test_medic_errors(tmp_path):
    p = tmp_path / "medic.txt"
    p.write_text("D000001||Ok Disease|Syn\nD000002|Missing Sep\n", encoding="utf-8")
    raises_at(p, 2, load_vocabulary, p, format="medic", match="no '\\|\\|' found")
    p.write_text("D000001||Ok Disease\nD000002||\n", encoding="utf-8")
    raises_at(p, 2, load_vocabulary, p, match="missing name")


def test_labelled_errors(tmp_path):
    j = tmp_path / "x.json"
    j.write_text(json.dumps([{"text": "a", "normalized_result": "b"}, ["oops"]]), encoding="utf-8")
    raises_at(j, 2, load_labelled, j, match="item is not an object")
    j.write_text(json.dumps([{"text": "a"}, {"text": "  ", "normalized_result": "b"}]), encoding="utf-8")
    raises_at(j, 2, load_labelled, j, match="empty mention")
    j.write_text('[{"text": "a",\n "normalized_result": "b"\n', encoding="utf-8")
    raises_at(j, 3, load_labelled, j, match="invalid JSON")
    x = write_xlsx(tmp_path / "g.xlsx", [("原始词", "备注"), ("阑尾炎", "")])
    raises_at(x, 1, load_labelled, x, match="missing required column 'terms'")
    c = tmp_path / "g.csv"
    c.write_text("原始词,标准词\n阑尾炎,急性阑尾炎\n,急性阑尾炎\n", encoding="utf-8")
    raises_at(c, 3, load_labelled, c, match="empty mention")


def test_pubtator_errors(tmp_path):
    p = tmp_path / "corpus.txt"
    good = "1|t|Breast cancer.\n1|a|Text.\n1\t0\t13\tBreast cancer\tSpecificDisease\tD001943\n"
    p.write_text(good + "1\t0\t13\tBreast cancer\tD001943\n", encoding="utf-8")
    raises_at(p, 4, load_labelled, p, match="expected 6 TAB-separated fields")
    p.write_text(good + "\n2|t|x\n2\t5\t2\tx\tModifier\tD1\n", encoding="utf-8")
    raises_at(p, 6, load_labelled, p, match="offsets")
    p.write_text(good + "garbage line\n", encoding="utf-8")
    raises_at(p, 4, load_labelled, p, format="pubtator", match="bad PubTator line")
    p.write_text(good + "1\t0\t5\tx\tCompositeMention\tMESH:D1+OMIM:7|D1\n", encoding="utf-8")
    ls = load_labelled(p)
    assert ls.mentions[1].terms == ["D1", "OMIM:7"]


def test_keyword_errors(tmp_path):
    raises_at(tmp_path, None, load_keywords, tmp_path, match="no keyword files")
    (tmp_path / "procedure_types.txt").write_text("切除术\t111\n切开术\tmany\n", encoding="utf-8")
    raises_at(tmp_path / "procedure_types.txt", 2, load_keywords, tmp_path, match="word<TAB>frequency")
    (tmp_path / "procedure_types.txt").write_text("切除术\t111\n\n切除术\t5\n", encoding="utf-8")
    (tmp_path / "abbreviations.json").write_text(json.dumps({"copd": "慢阻肺", "pci": 3}), encoding="utf-8")
    raises_at(tmp_path / "abbreviations.json", 2, load_keywords, tmp_path, match="'pci'")
    (tmp_path / "abbreviations.json").write_text(json.dumps({"copd": "慢阻肺"}), encoding="utf-8")
    kw = load_keywords(tmp_path)
    assert kw == {"site": [], "type": ["切除术"], "approach": [], "abbreviations": {"copd": "慢阻肺"}}


def _bad_file_in_a_worker(path):
    return load_labelled(path)


def test_a_data_error_raised_in_a_worker_process_comes_back_whole(tmp_path):
    """Ray actors and process pools send exceptions back pickled: the file, row and problem must survive
    (without them the parent got "DataFormatError.__init__() missing 2 required positional arguments")."""
    from concurrent.futures import ProcessPoolExecutor

    bad = tmp_path / "train.json"
    bad.write_text("[{\"text\": 1}", encoding="utf-8")
    with pytest.raises(DataFormatError) as here:
        load_labelled(bad)
    with ProcessPoolExecutor(max_workers=1) as pool, pytest.raises(DataFormatError) as there:
        pool.submit(_bad_file_in_a_worker, bad).result()
    assert (there.value.path, there.value.row, str(there.value)) == (here.value.path, here.value.row,
                                                                      str(here.value))
