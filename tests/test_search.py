"""Vocabulary search (termnorm.search) on the real vocabularies: codes, code prefixes, nearest codes, names,
synonyms and abbreviations first, character similarity last (issue 22, item 5).

Yidu-N7K ``code.txt`` (ICD-9-CM-3 clinical edition, 9,468 names) and CHIP-CDN v601 (ICD-10 北京临床版, 37,645
names) come from ../shared/data: skipped when it is absent, except under ``CI=true`` where that fails.
"""

from __future__ import annotations

import json
import pickle
import time
from pathlib import Path

import pytest
from helpers import need

from termnorm.engine import DEMO_ABBREVIATIONS, Engine, demo_vocabulary
from termnorm.loaders import load_keywords, load_vocabulary
from termnorm.search import SearchHit, VocabularySearch, found_tag, is_code_like, named_term, naming, nearest_note
from termnorm.vocabulary import Vocabulary, code_key

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data"
YIDU = DATA / "yidu-n7k" / "code.txt"
CDN = DATA / "chip-cdn" / "icd10_beijing_clinical_v601.xlsx"
CDN_DEV = DATA / "chip-cdn" / "dev.json"
KEYWORDS = DATA / "keywords"


@pytest.fixture(scope="module")
def shared_abbreviations() -> dict[str, str]:
    return load_keywords(need(KEYWORDS / "abbreviations.json").parent)["abbreviations"]


@pytest.fixture(scope="module")
def yidu(shared_abbreviations) -> VocabularySearch:
    return VocabularySearch(load_vocabulary(need(YIDU)), abbreviations=shared_abbreviations)


@pytest.fixture(scope="module")
def cdn(shared_abbreviations) -> VocabularySearch:
    return VocabularySearch(load_vocabulary(need(CDN)), abbreviations=shared_abbreviations)


def terms(hits) -> list[str]:
    return [h.term for h in hits]


# ----------------------------------------------------------------------------- codes
def test_exact_codes_find_their_names_and_nothing_else(yidu, cdn):
    # code.txt: 06.3100 甲状腺病损切除术, 85.2100 乳房病损局部切除术 (both leaves: nothing below them)
    for code, name in [("06.3100", "甲状腺病损切除术"), ("85.2100", "乳房病损局部切除术"),
                       (" 06.4X00 ", "甲状腺全部切除术")]:
        hits = yidu.search(code, 10)
        assert terms(hits) == [name], code  # no name merely similar to the digits
        assert hits[0].found == "code" and hits[0].scores == {"code": 1.0} and isinstance(hits[0], SearchHit)
    # the export code comes first even when another code was typed: 甲状腺全部切除术 is 06.4x00 and 06.4
    assert yidu.search("06.4", 1)[0].codes == ["06.4x00", "06.4"]
    assert terms(cdn.search("E11.901", 1)) == ["2型糖尿病"]
    assert terms(cdn.search("e11.901", 1)) == ["2型糖尿病"]  # case-insensitive


def test_code_prefix_gives_the_leaves_under_it(yidu):
    hits = yidu.search("06.31", 20)
    # 06.31 is no code of code.txt; 06.3100 and 06.3101 lie below it
    assert [(h.term, h.code, h.found) for h in hits] == [("甲状腺病损切除术", "06.3100", "code_prefix"),
                                                         ("腔镜下甲状腺病损切除术", "06.3101", "code_prefix")]
    # 06.3 is a code (其他部分甲状腺切除术) and a category: its names, then every leaf below, by code
    hits = yidu.search("06.3", 50)
    assert hits[0].term == "其他部分甲状腺切除术" and hits[0].found == "code"
    below = hits[1:]
    assert below and all(h.found == "code_prefix" and code_key(h.code).startswith("063") for h in below)
    keys = [code_key(h.code) for h in below]
    assert keys == sorted(keys) and len(below) == 10  # 06.3100 .. 06.3908, all leaves
    assert all(yidu.vocabulary.code_kind(h.code) == "leaf" for h in below)


def test_prefix_lists_leaves_before_categories(cdn):
    hits = cdn.search("E11.9", 20)
    assert hits[0].term == "非胰岛素依赖型糖尿病不伴有并发症" and hits[0].found == "code"
    assert terms(hits[1:]) == ["2型糖尿病"]
    hits = cdn.search("E10", 400)
    kinds = [cdn.vocabulary.code_kind(h.code) for h in hits if h.found == "code_prefix"]
    assert "category" in kinds and kinds == sorted(kinds, key=lambda k: k == "category")  # leaves first
    assert all(code_key(c).startswith("E10") for h in hits for c in h.codes[:1])


def test_a_code_that_does_not_exist_falls_back_to_the_nearest_codes(cdn, yidu):
    # v601 has no E11.900 (nor E11.90): E11.901 2型糖尿病 lies under E11.90, E11.9 under E11.9
    hits = cdn.search("E11.900", 10)
    assert hits[0].term == "2型糖尿病" and hits[0].found == "code_nearest" and hits[0].via == "E11.90"
    assert nearest_note("E11.900", hits) == "no code E11.900; codes under E11.90"
    assert hits[1].term == "非胰岛素依赖型糖尿病不伴有并发症" and hits[1].via == "E11.9"
    assert all(h.found == "code_nearest" and h.code.startswith("E11") for h in hits)
    assert found_tag(hits[0]) == "nearest code"
    hits = yidu.search("06.3199", 3)
    assert terms(hits)[:2] == ["甲状腺病损切除术", "腔镜下甲状腺病损切除术"] and hits[0].via == "06.31"
    assert nearest_note("06.31", yidu.search("06.31", 3)) is None


def test_what_reads_as_a_code():
    assert all(map(is_code_like, ["06.31", "06.4x00", "E11.900", "I10xx", "C56.x", "M814000/3", "E11.221+N08.3*",
                                  "０６．３１"]))
    assert not any(map(is_code_like, ["T2DM", "PCI", "CA125", "2型糖尿病", "甲状腺", "ca"]))


# ----------------------------------------------------------------------------- names and synonyms
def test_an_exact_name_comes_first_then_names_containing_the_query(yidu, cdn):
    hits = yidu.search("甲状腺病损切除术", 5)
    assert hits[0].term == "甲状腺病损切除术" and hits[0].found == "name"
    assert hits[1].found == "name_contains" and "甲状腺病损切除术" in hits[1].term
    assert cdn.search("2型糖尿病", 1)[0].term == "2型糖尿病"
    assert cdn.search("２型糖尿病", 1)[0].term == "2型糖尿病"  # normalized (full width)
    hits = yidu.search("胆囊切除", 4)
    assert hits[0].term == "胆囊切除术" and all("胆囊切除" in h.term for h in hits)  # the fuller form first


def test_a_query_like_no_term_finds_nothing_and_a_misspelt_one_its_term(yidu):
    """Seen in a browser: keys typed at random found a term (asdfgh -> 内镜下胃黏膜下剥离术[ESD]), so "No term
    found" never showed. A similar term must hold half the query's words (Chinese characters, Latin runs)."""
    for q in ("asdfgh", "zzz", "xyz123", "qwerty", "你好世界"):
        assert yidu.search(q, 5) == [], (q, terms(yidu.search(q, 5)))
    for q, want in (("甲壮腺病损切除术", "甲状腺病损切除术"), ("阑尾切除木", "阑尾切除术"), ("胆囊切出", "胆囊切除术")):
        assert yidu.search(q, 5)[0].term == want and yidu.search(q, 5)[0].found == "similar"
    assert "腹腔镜辅助阴道子宫切除术(LAVH)" in terms(yidu.search("lavh手术", 5))  # a Latin run found whole
    medic = VocabularySearch(load_vocabulary(need(DATA / "ncbi-disease" / "medic_06Jul2012.txt")))
    for q, want in (("hypertnsion", "Hypertension"), ("myotonic dystrofy", "Myotonic Dystrophy"),
                    ("parkinsons diseas", "Parkinson Disease")):  # most of a misspelt word's letter trigrams
        assert medic.search(q, 5)[0].term == want, (q, terms(medic.search(q, 5)))
    assert medic.search("qwerty", 5) == [] and medic.search("asdf", 5) == []


def test_synonyms_are_found_also_when_added_later():
    vocab = demo_vocabulary("procedures")
    s = VocabularySearch(vocab)
    hit = s.search("乳内动脉冠脉搭桥", 3)[0]
    assert (hit.term, hit.found, hit.via) == ("单乳房内动脉-冠状动脉旁路移植", "synonym", "乳内动脉冠脉搭桥")
    assert s.search("甲状腺结节挖除", 1)[0].found != "synonym"
    vocab.add_synonym("甲状腺病损切除术", "甲状腺结节挖除")
    s.add_synonym("甲状腺病损切除术", "甲状腺结节挖除")
    hit = s.search("甲状腺结节挖除", 1)[0]
    assert (hit.term, hit.found) == ("甲状腺病损切除术", "synonym")
    assert s.search("结节挖除", 1)[0].term == "甲状腺病损切除术"  # contained in the new synonym


# ----------------------------------------------------------------------------- abbreviations
def test_pci_with_the_shared_list_finds_a_coronary_intervention_not_ercp(yidu):
    hits = yidu.search("PCI", 10)
    # pci -> 经皮冠状动脉介入治疗 (Yidu-N7K has no such name: PTCA is its percutaneous coronary intervention)
    assert hits[0].term == "经皮冠状动脉腔内血管成形术[PTCA]" and hits[0].found == "abbreviation"
    assert hits[0].via == "经皮冠状动脉介入治疗" and found_tag(hits[0]) == "abbreviation → 经皮冠状动脉介入治疗"
    assert not any("ERCP" in t for t in terms(hits))
    assert yidu.search("pci", 1)[0].term == hits[0].term  # any case


def test_eswl_finds_shock_wave_lithotripsy(yidu):
    # not in the shared list; code.txt writes the abbreviation into the names (体外休克波碎石[ESWL])
    hits = yidu.search("ESWL", 3)
    assert all(h.code.startswith("98.5") and "ESWL" in h.term for h in hits), terms(hits)
    assert not any("ESD" in t for t in terms(hits))
    # the names ending in [ESWL] first, then with the demo list (ESWL -> 体外冲击波碎石术) the 冲击波 names holding it
    s = VocabularySearch(yidu.vocabulary, yidu.union, abbreviations=json.loads(DEMO_ABBREVIATIONS.read_text("utf-8")))
    hits = s.search("eswl", 5)
    assert [h.found for h in hits] == ["bracketed"] * 3 + ["abbreviation"] * 2, [(h.term, h.found) for h in hits]
    assert hits[3].term == "肾体外冲击波碎石术" and all(h.code.startswith("98.5") for h in hits)


def test_a_short_form_a_name_ends_with_in_brackets_names_that_term(yidu):
    # code.txt writes some terms' own short forms at the end of their names: typing it names the term
    for typed, name in [("ERCP", "内镜逆行胰胆管造影[ERCP]"), ("dcr", "泪囊鼻腔吻合术[DCR]"),
                        ("Epi-LASIK", "微型角膜刀法准分子激光角膜上皮瓣下磨镶术（Epi-LASIK）"),
                        ("PTCA", "经皮冠状动脉腔内血管成形术[PTCA]")]:  # the shared list's PTCA expansion only holds it
        hits = yidu.search(typed, 5)
        assert (hits[0].term, hits[0].found, found_tag(hits[0])) == (name, "bracketed", "in brackets"), typed
        assert named_term(hits) is hits[0], typed
    # two terms end with (EST) / [EST]: both first, neither named; a bracket inside a name names a part, not the term
    est = yidu.search("EST", 5)
    assert {h.term for h in est[:2]} == {"内镜下十二指肠乳头肌切开术(EST)", "电休克疗法[EST]"} and named_term(est) is None
    evd = yidu.search("EVD", 5)
    assert evd and all(h.found == "name_contains" for h in evd) and named_term(evd) is None
    # a synonym taught later with its short form in brackets is read the same way
    s = VocabularySearch(yidu.vocabulary, yidu.union)
    s.search("x", 1)
    s.add_synonym("腹腔镜下胆囊切除术", "腹腔镜胆囊切除术（LCX）")
    hit = named_term(s.search("lcx", 3))
    assert hit is not None and (hit.term, hit.via) == ("腹腔镜下胆囊切除术", "腹腔镜胆囊切除术（LCX）")


def test_lc_with_the_demo_list_and_taught_abbreviations_at_once(yidu):
    s = VocabularySearch(yidu.vocabulary, yidu.union, abbreviations=json.loads(DEMO_ABBREVIATIONS.read_text("utf-8")))
    hits = s.search("LC", 5)
    assert (hits[0].term, hits[0].found) == ("腹腔镜下胆囊切除术", "abbreviation")
    assert not any("PCNL" in t for t in terms(hits))
    # only the reading's answer says "abbreviation →": a user read LC's other laparoscopic names as what LC means
    assert [found_tag(h) for h in hits] == ["abbreviation → 腹腔镜下胆囊切除术"] + [
        f"{'holds' if '腹腔镜下胆囊切除术' in h.term else 'like'} 腹腔镜下胆囊切除术 (abbreviation)" for h in hits[1:]]
    assert s.search("TKA", 1)[0].term == "全部膝关节置换"  # 全膝关节置换术 is similar to it
    # taught while the app runs: found on the next keystroke
    assert terms(s.search("LCBDE2", 1)) != ["腹腔镜下胆总管探查术"]
    assert s.add_abbreviation("LCBDE2", "腹腔镜下胆总管探查术") and not s.add_abbreviation("lcbde2", "腹腔镜下胆总管探查术")
    hit = s.search("lcbde2", 1)[0]
    assert (hit.term, hit.found, hit.via) == ("腹腔镜下胆总管探查术", "abbreviation", "腹腔镜下胆总管探查术")
    with pytest.raises(ValueError):
        s.add_abbreviation(" ", "胆囊切除术")


DEMO_WORD_PARTS = {"Ca": ("卵巢Ca", "卵巢恶性肿瘤")}  # abbreviations of a word part: a mention using it, its term
DEMO_EXPECTED = {  # abbreviation -> the demo term it must bring first (procedures or diagnoses)
    "PCI": "经皮冠状动脉腔内血管成形术[PTCA]", "PTCA": "经皮冠状动脉腔内血管成形术[PTCA]", "CAG": "单根导管的冠状动脉造影术",
    "CABG": "一根冠状动脉的(主动脉)冠状动脉旁路移植", "RFCA": "经导管心脏射频消融术",
    "PICC": "经外周静脉穿刺中心静脉置管术", "HD": "血液透析", "ERCP": "内镜逆行胰胆管造影[ERCP]",
    "EST": "内镜下十二指肠乳头肌切开术(EST)", "ESD": "内镜下胃黏膜下剥离术[ESD]", "EMR": "内镜下胃黏膜切除术[EMR]",
    "EGD": "食管胃十二指肠镜检查[EGD]伴活组织检查", "LC": "腹腔镜下胆囊切除术", "LCBDE": "腹腔镜下胆总管探查术",
    "PTGBD": "经皮经肝胆囊置管引流术", "TACE": "经导管肝动脉栓塞术", "RFA": "肝病损射频消融术",
    "PCNL": "经皮肾镜碎石术（PCNL）", "ESWL": "肾体外冲击波碎石术", "TURP": "经尿道前列腺切除术（TURP）",
    "TURBT": "经尿道膀胱病损切除术", "LAVH": "腹腔镜辅助阴道子宫切除术(LAVH)", "PPH": "痔上直肠黏膜环形切除吻合术（PPH术）",
    "THA": "全髋关节置换", "TKA": "全部膝关节置换", "PKP": "经皮椎体球囊扩张成形术", "PLIF": "腰椎椎体间融合术，后入路",
    "Phaco": "白内障晶状体乳化和抽吸",
    "COPD": "慢性阻塞性肺疾病", "AECOPD": "慢性阻塞性肺疾病急性加重", "DM": "糖尿病", "T1DM": "1型糖尿病",
    "T2DM": "2型糖尿病", "GDM": "妊娠期糖尿病", "DKA": "2型糖尿病性酮症酸中毒", "DN": "2型糖尿病性肾病",
    "DR": "2型糖尿病性视网膜病变", "DPN": "2型糖尿病性周围神经病", "HTN": "高血压", "CHD": "冠状动脉粥样硬化性心脏病",
    "UA": "不稳定性心绞痛", "AMI": "急性前壁心肌梗死", "NSTEMI": "急性非ST段抬高型心肌梗死", "AF": "心房颤动[心房纤颤]",
    "HF": "心力衰竭", "CHF": "慢性心力衰竭", "TIA": "短暂性脑缺血发作", "DVT": "下肢深静脉血栓形成",
    "URTI": "急性上呼吸道感染", "PTB": "肺结核", "UTI": "泌尿系感染", "CKD": "慢性肾脏病,3期", "CRF": "慢性肾衰竭",
    "BPH": "前列腺增生", "HCC": "肝细胞癌", "CHB": "慢性乙型病毒性肝炎", "IDA": "缺铁性贫血", "RA": "类风湿性关节炎",
    "LDH": "腰椎间盘突出", "AD": "阿尔茨海默病",
}


def test_every_demo_abbreviation_brings_its_demo_term_first():
    table = json.loads(DEMO_ABBREVIATIONS.read_text("utf-8"))
    assert set(table) == set(DEMO_EXPECTED) | set(DEMO_WORD_PARTS) and 30 <= len(table) <= 70
    searches = {w: VocabularySearch(demo_vocabulary(w), abbreviations=table) for w in ("procedures", "diagnoses")}
    wrong = {}
    engine = Engine.from_demo("diagnoses")
    for abbr, (mention, right) in DEMO_WORD_PARTS.items():  # part of a word: the engine reads 卵巢Ca as 卵巢恶性肿瘤
        got = engine.suggest(mention).chosen
        if got != [right]:
            wrong[mention] = got
    for abbr, right in DEMO_EXPECTED.items():
        s = next(s for s in searches.values() if right in s.vocabulary)
        # the expansion itself must lead there: the abbreviation alone could be a demo synonym already
        for q in (abbr, table[abbr]):
            got = s.search(q, 1)
            if not got or got[0].term != right:
                wrong[q] = got[0].term if got else None
    assert not wrong, wrong


# ----------------------------------------------------------------------------- the engine
def test_engine_search_on_the_demo_finds_codes_prefixes_and_demo_abbreviations():
    eng = Engine.from_demo("procedures")
    assert terms(eng.search_vocabulary("06.3100")) == ["甲状腺病损切除术"]
    hits = eng.search_vocabulary("06.31")
    assert terms(hits) == ["甲状腺病损切除术", "腔镜下甲状腺病损切除术"] and hits[0].code == "06.3100"
    hits = eng.search_vocabulary("06.", limit=50)
    assert len(hits) == 15 and all(h.code.startswith("06.") for h in hits)  # the demo's thyroid operations
    hit = eng.search_vocabulary("ESWL", 1)[0]
    assert (hit.term, hit.found) == ("肾体外冲击波碎石术", "abbreviation")
    assert eng.search_vocabulary("", 5) == [] and eng.search_vocabulary("  ", 5) == []
    # taught at run time, kept through save / load; the search index itself is not pickled
    assert eng.add_abbreviation("LCBDE2", "腹腔镜下胆总管探查术") and not eng.add_abbreviation("LCBDE2", "腹腔镜下胆总管探查术")
    assert eng.search_vocabulary("lcbde2", 1)[0].term == "腹腔镜下胆总管探查术"
    eng.add_synonym("甲状腺病损切除术", "甲状腺结节挖除")
    assert eng.search_vocabulary("甲状腺结节挖除", 1)[0].found == "synonym"
    back = pickle.loads(pickle.dumps(eng))
    assert back._search is None and eng._search is not None  # rebuilt on the next search
    assert back.search_vocabulary("lcbde2", 1)[0].term == "腹腔镜下胆总管探查术"
    assert back.search_vocabulary("甲状腺结节挖除", 1)[0].found == "synonym"


def test_an_abbreviation_inside_the_query_is_searched_spelled_out():
    """卵巢Ca is 卵巢恶性肿瘤, not the names sharing the letters ca (PTCA) nor the other ovarian ones; an abbreviation
    taught later counts at once; a query without a known short form is searched as typed."""
    eng = Engine.from_demo("diagnoses")
    for query, read in (("卵巢Ca", "卵巢恶性肿瘤"), ("肺Ca", "肺恶性肿瘤"), ("COPD急性加重", "慢性阻塞性肺疾病急性加重")):
        hit = eng.search_vocabulary(query, 5)[0]
        assert (hit.term, hit.found, found_tag(hit)) == (read, "abbreviation", f"abbreviation → {read}"), query
    assert eng.search_vocabulary("MYX伴", 1)[0].term != "甲状腺功能减退"
    eng.add_abbreviation("MYX", "甲状腺功能减退")
    assert eng.search_vocabulary("MYX伴", 1)[0].term == "甲状腺功能减退"
    plain = eng.search_vocabulary("卵巢囊肿", 1)[0]
    assert (plain.term, plain.found) == ("卵巢囊肿", "name")


def test_cancer_written_as_clinicians_write_it_finds_the_malignant_neoplasm_term(cdn):
    """胃癌 is 胃恶性肿瘤 in Chinese ICD-10 names: found first, tagged with the spelling it was read as, ahead of
    names sharing characters (腺癌, 卵巢炎 came first); a name spelled with 癌 itself is still found as a name."""
    demo = Engine.from_demo("diagnoses")
    for search, query, read in ((demo.search_vocabulary, "胃癌", "胃恶性肿瘤"),
                                (demo.search_vocabulary, "结肠癌", "结肠恶性肿瘤"),
                                (cdn.search, "卵巢癌", "卵巢恶性肿瘤"), (cdn.search, "宫颈癌", "宫颈恶性肿瘤")):
        hit = search(query, 5)[0]
        assert (hit.term, hit.found, found_tag(hit)) == (read, "written_as", f"written as {read}"), query
    assert [(h.term, h.found) for h in demo.search_vocabulary("肝细胞癌", 1)] == [("肝细胞癌", "name")]
    assert cdn.search("原位癌", 1)[0].found == "name"
    assert VocabularySearch.written_as("胃癌伴出血") == ["胃恶性肿瘤伴出血"] and VocabularySearch.written_as("胃溃疡") == []


def test_engine_keeps_taught_abbreviations_through_save_and_load(tmp_path):
    eng = Engine.from_demo("diagnoses")
    eng.add_abbreviation("MYX", "甲状腺功能减退")
    eng.save(tmp_path / "p")
    back = Engine.load(tmp_path / "p")
    assert back.search_vocabulary("myx", 1)[0].term == "甲状腺功能减退"
    assert back.search_vocabulary("T2DM", 1)[0].term == "2型糖尿病"
    assert Engine(demo_vocabulary("diagnoses")).use_demo_abbreviations() == 61
    other = demo_vocabulary("diagnoses")
    other.name = "hospital-diagnoses"  # a hospital's own Chinese list gets it too; an English vocabulary does not
    assert Engine(other).use_demo_abbreviations() == 61
    english = Vocabulary(name="hospital-english")
    for code, name in [("D1", "Breast Neoplasms"), ("D2", "Diabetes Mellitus, Type 2"), ("D3", "高血压")]:
        english.add_term(name, [code])
    assert Engine(english).use_demo_abbreviations() == 0


def test_the_built_in_abbreviations_serve_a_real_chinese_vocabulary(yidu):
    """A team test typed LC, TURP and TACE on Yidu-N7K: "names no term of this vocabulary by itself" (the shared
    keyword list is mostly diagnoses); the built-in list now reads them on any Chinese vocabulary."""
    eng = Engine(yidu.vocabulary)
    assert eng.use_demo_abbreviations() > 50
    hit = named_term(eng.search_vocabulary("LC", 3))
    assert hit is not None and (hit.term, hit.found) == ("腹腔镜下胆囊切除术", "abbreviation")
    # TURP: the leaf that ends with (TURP), then the category the list's expansion names
    turp = eng.search_vocabulary("turp", 2)
    assert [(h.term, h.found) for h in turp] == [("经尿道前列腺切除术（TURP）", "bracketed"),
                                                 ("经尿道前列腺切除术", "abbreviation")]
    assert named_term(turp) is None and [h.term for h in naming(turp)] == [h.term for h in turp]  # it names both


# ----------------------------------------------------------------------------- speed
def test_two_hundred_queries_on_v601_average_well_under_50_ms(cdn):
    mentions = [d["text"] for d in json.loads(need(CDN_DEV).read_text("utf-8"))]
    codes = sorted({c for cl in cdn.vocabulary.codes.values() for c in cl})
    # typed text, whole codes, code heads, missing codes, abbreviations and two-character starts
    queries = (mentions[:110] + codes[::800][:40] + [c[:4] for c in codes[5::900]][:20]
               + ["E11.900", "C34.999", "I10xx99", "Z99.9999", "copd", "pci", "hcc", "dvt"]
               + [m[:2] for m in mentions[200:222]])
    assert len(queries) == 200
    cdn.search("糖尿病", 20)  # set-up: the index and the similarity union are built on the first search
    t0 = time.perf_counter()
    found = [cdn.search(q, 20) for q in queries]
    mean_ms = (time.perf_counter() - t0) * 1000 / len(queries)
    print(f"\nvocabulary search on CHIP-CDN v601 ({len(cdn.vocabulary)} names): {mean_ms:.2f} ms per query "
          f"over {len(queries)} queries")
    assert all(found[110:150]) and all(f[0].found == "code" for f in found[110:150])  # each code finds itself
    assert mean_ms < 50


# ----------------------------------------------------------------------------- the database
def test_taught_abbreviations_round_trip_through_the_database(db_url):
    from db import abbreviations, services

    with services.session_scope(db_url) as s:
        vid = services.load_vocabulary(s, demo_vocabulary("procedures"), "demo-procedures")
        other = services.load_vocabulary(s, demo_vocabulary("diagnoses"), "demo-diagnoses")
        assert abbreviations.add_abbreviation(s, vid, "CBDE", " 胆总管探查术 ", "ann")
        assert not abbreviations.add_abbreviation(s, vid, "cbde", "胆总管探查术", "bob")  # any case: a duplicate
        assert abbreviations.add_abbreviation(s, None, "MYX", "甲状腺功能减退", "bob")  # every vocabulary
        assert not abbreviations.add_abbreviation(s, vid, "MYX", "甲状腺功能减退", "ann")  # already global
        assert abbreviations.add_abbreviation(s, vid, "CBDE", "腹腔镜下胆总管探查术", "ann")  # a second meaning
        for bad in [("", "胆囊切除术"), ("LC", " "), ("L" * 101, "胆囊切除术")]:
            with pytest.raises(ValueError):
                abbreviations.add_abbreviation(s, vid, *bad, "ann")
        with pytest.raises(KeyError):
            abbreviations.add_abbreviation(s, 999, "LC", "腹腔镜下胆囊切除术", "ann")
        audit = services.audit_frame(s)
    assert abbreviations.for_engine(db_url, vid) == [("CBDE", "胆总管探查术"), ("MYX", "甲状腺功能减退"),
                                                      ("CBDE", "腹腔镜下胆总管探查术")]
    with services.session_scope(db_url) as s:
        assert abbreviations.abbreviations(s, other) == [("MYX", "甲状腺功能减退")]
        rows = abbreviations.abbreviation_rows(s, vid)
    assert [(r["abbreviation"], r["scope"], r["source"], r["added_by"]) for r in rows] == [
        ("CBDE", "this vocabulary", "user", "ann"), ("MYX", "all vocabularies", "user", "bob"),
        ("CBDE", "this vocabulary", "user", "ann")]
    added = audit[audit.action == "add_abbreviation"]
    assert len(added) == 3 and list(added.user) == ["ann", "bob", "ann"][::-1]
    assert added.details.iloc[-1] == {"vocabulary_id": vid, "abbreviation": "CBDE", "expansion": "胆总管探查术",
                                      "source": "user"}
    # replayed into an engine, both meanings are searched
    eng = Engine(demo_vocabulary("procedures"))
    assert eng.add_abbreviations(abbreviations.for_engine(db_url, vid)) == 3
    assert {h.term for h in eng.search_vocabulary("cbde", 2)} == {"胆总管探查术", "腹腔镜下胆总管探查术"}


def test_a_code_nothing_matches_says_so():
    """Seen in the app: E11.900 typed in a procedures vocabulary listed unrelated names as "similar", silently."""
    from termnorm.records import Candidate
    from termnorm.search import nearest_note

    similar = Candidate(0, "甲状腺病损切除术", 0.3, {})
    similar.found = "similar"
    assert nearest_note("E11.900", [similar]) == "no code E11.900 in this vocabulary; the names below only resemble it"
    assert nearest_note("E11.900", []) == "no code E11.900 in this vocabulary"
    assert nearest_note("甲状腺", [similar]) is None  # a name, not a code
    exact = Candidate(0, "甲状腺病损切除术", 1.0, {})
    exact.found = "code"
    assert nearest_note("06.3100", [exact]) is None


def test_a_mention_written_only_in_short_forms_is_read_spelled_out():
    """ERCP+EST (the demo's own mention) is read as both procedures and coded with them, where before only
    ERCP was found and the second term was a prostate operation; an English phrase keeps its words."""
    from db.serving import shipped_engine

    eng = shipped_engine(demo_vocabulary("procedures"), [])
    eng.use_demo_abbreviations()
    gold = ["内镜逆行胰胆管造影[ERCP]", "内镜下十二指肠乳头肌切开术(EST)"]
    for mention in ("ERCP+EST", "EST+ERCP"):
        s = eng.suggest(mention)
        assert "内镜逆行胰胆管造影" in s.spelled_out and "乳头括约肌切开术" in s.spelled_out
        assert sorted(s.chosen) == sorted(gold), (mention, s.chosen)
    assert eng.suggest("ERCP in adults").spelled_out == ""
