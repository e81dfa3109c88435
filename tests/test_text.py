"""Text handling: normalization, segmentation, keyword tagging, mention splitting."""

from __future__ import annotations

import json
import pickle
import time
from pathlib import Path

import pytest

from termnorm.errors import DataFormatError
from termnorm.records import KEYWORD_KINDS
from termnorm.text.keywords import KeywordTagger, mine_keywords, read_keyword_dir
from termnorm.text.normalize import Abbreviations, expand_abbreviations, normalize, normalize_with_offsets
from termnorm.text.segment import Segmenter, vocabulary_pieces
from termnorm.text.split import KnownTerms, split_mention
from termnorm.vocabulary import Vocabulary

DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data"


# ---------------------------------------------------------------------------
# normalize
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("form", ["Ⅱ型糖尿病", "II型糖尿病", "ii型糖尿病", "二型糖尿病", "2型糖尿病",
                                  "Ⅱ 型 糖尿病", "ⅱ型糖尿病", "２型糖尿病"])
def test_type_numerals_meet(form):
    assert normalize(form) == "2型糖尿病"


@pytest.mark.parametrize("a,b", [
    ("肺癌ⅢA期", "肺癌IIIA期"), ("肺癌三a期", "肺癌3A期"), ("心功能Ⅳ级", "心功能IV级"),
    ("心功能四级", "心功能4级"), ("三度房室传导阻滞", "Ⅲ度房室传导阻滞"), ("第十二胸椎骨折", "第12胸椎骨折"),
    ("二十一型", "21型"), ("十一期", "XI期"), ("二次手术", "2次手术"), ("乳腺癌IV", "乳腺癌Ⅳ"),
    ("CINII", "CIN2"), ("type II diabetes", "Type 2 diabetes"),
])
def test_numeral_contexts_convert(a, b):
    assert normalize(a) == normalize(b)
    assert any(ch.isdigit() for ch in normalize(a))


@pytest.mark.parametrize("text", ["一侧肢体无力", "一般情况差", "十二指肠溃疡", "三尖瓣关闭不全", "二尖瓣狭窄",
                                  "单一型", "唯一期", "一次性", "一氧化碳中毒", "三叉神经痛", "四肢麻木",
                                  "一过性黑矇", "十二指肠球部", "九价疫苗", "二便失禁"])
def test_numeral_traps_keep_characters(text):
    assert normalize(text) == text


@pytest.mark.parametrize("text", ["胸部X线检查", "x光片", "46,XX", "ivf术后", "Fragile X syndrome", "vitamin c"])
def test_latin_letters_that_are_not_numerals(text):
    assert not any(ch.isdigit() for ch in normalize(text).replace("46", ""))


def test_punctuation_width_case_and_spaces():
    assert normalize("【右】 甲状腺“肿瘤”切除术（ＲＯＳＥ）") == '(右)甲状腺"肿瘤"切除术(rose)'
    assert normalize("腹腔镜胆囊切除术＋术中胆道造影") == "腹腔镜胆囊切除术+术中胆道造影"
    assert normalize("高血压，糖尿病；冠心病、脑梗") == "高血压,糖尿病;冠心病,脑梗"
    assert normalize("吉兰—巴雷综合征") == normalize("吉兰-巴雷综合征") == "吉兰-巴雷综合征"
    assert normalize("3✕4cm") == normalize("3×4cm")
    assert normalize("  Type  2   Diabetes\tMellitus ") == "type 2 diabetes mellitus"  # English keeps word spaces
    assert normalize("急性 阑尾炎") == "急性阑尾炎"
    assert normalize("高血压\x04\x04冠心病") == "高血压冠心病"
    assert normalize("") == ""


def test_normalize_is_idempotent_and_offsets_agree():
    samples = ["右侧 二十一型Ⅱ期（左）", "Ⅱ型 糖尿病（待查）", "ＣＩＮ Ⅱ级", "type II  diabetes", "第十二胸椎骨折",
               "肺癌ⅢB期, T2N0M0 IIIB期", "【右】乳腺癌Ⅳ期＋骨转移", "Alzheimer's disease"]
    for s in samples:
        n = normalize(s)
        assert normalize(n) == n
        nt = normalize_with_offsets(s)
        assert nt.text == n
        assert len(nt.starts) == len(nt.ends) == len(n)
        assert all(0 <= a < b <= len(s) for a, b in zip(nt.starts, nt.ends))
        assert nt.starts == sorted(nt.starts)


def test_offsets_map_back_to_original():
    s = "右侧 二十一型Ⅱ期（左）"
    nt = normalize_with_offsets(s)
    assert nt.text == "右侧21型2期(左)"
    i = nt.text.index("21型")
    a, b = nt.to_original(i, i + 3)
    assert s[a:b] == "二十一型"
    i = nt.text.index("2期")
    a, b = nt.to_original(i, i + 2)
    assert s[a:b] == "Ⅱ期"
    i = nt.text.index("(左)")
    assert s[slice(*nt.to_original(i, i + 3))] == "（左）"


def test_expand_abbreviations_whole_tokens_only():
    table = {"copd": "慢性阻塞性肺疾病", "ca": "恶性肿瘤", "as": "强直性脊柱炎", "＋": "+", "VINII": "外阴上皮内瘤变2"}
    assert expand_abbreviations("copd急性加重", table) == "慢性阻塞性肺疾病急性加重"
    assert expand_abbreviations(normalize("胃CA"), table) == "胃恶性肿瘤"
    assert expand_abbreviations("ca125升高", table) == "ca125升高"  # not inside a longer token
    assert expand_abbreviations("copd", table) == "慢性阻塞性肺疾病"  # the abbreviation alone
    assert expand_abbreviations("as well as", table) == "as well as"  # English text is left alone
    assert expand_abbreviations(normalize("VINII"), table) == "外阴上皮内瘤变2"  # keys are normalized too
    ab = Abbreviations(table)
    assert "＋" not in ab.table and "+" not in ab.table  # only ASCII-token keys are used


@pytest.mark.skipif(not (DATA / "keywords" / "abbreviations.json").exists(), reason="shared data absent")
def test_expand_with_shared_table():
    table = json.loads((DATA / "keywords" / "abbreviations.json").read_text(encoding="utf-8"))
    assert expand_abbreviations("copd伴pci术后", table) == "慢性阻塞性肺疾病伴经皮冠状动脉介入治疗术后"


def test_normalize_speed_40k():
    names = [f"右侧Ⅱ型{i}糖尿病（待查）伴第十二胸椎骨折 type II {i}" for i in range(40_000)]
    t = time.perf_counter()
    out = [normalize(x) for x in names]
    elapsed = time.perf_counter() - t
    assert out[7].startswith("右侧2型7糖尿病(待查)伴第12胸椎骨折type 2")
    assert elapsed < 8.0  # ~0.6 s on an idle 2-core box (2.5 s at load 10); guards against a pathological regex


# ---------------------------------------------------------------------------
# segmenter
# ---------------------------------------------------------------------------
def test_user_dictionary_keeps_vocabulary_term_whole():
    text = normalize("甲状腺病损切除术")
    plain = Segmenter().cut(text)
    assert "甲状腺病损" not in plain
    seg = Segmenter(words=["甲状腺病损"])
    assert "甲状腺病损" in seg.cut(text)
    assert "".join(seg.cut(text)) == text


def test_segmenter_instances_do_not_leak():
    a = Segmenter(words=["肾上腺病损"])
    b = Segmenter()
    assert "肾上腺病损" in a.cut("肾上腺病损切除术")
    assert "肾上腺病损" not in b.cut("肾上腺病损切除术")


def test_segmenter_keywords_batch_and_pickle():
    tagger = KeywordTagger.builtin()
    seg = Segmenter(keywords=tagger)
    texts = [normalize(t) for t in ["右侧甲状腺肿瘤切除术", "腹腔镜胆囊切除术 术中胆道造影", "Type 2 diabetes"]]
    batch = seg.cut_batch(texts)
    assert batch == [seg.cut(t) for t in texts]
    assert "甲状腺" in batch[0] and "切除术" in batch[0]
    assert all(not w.isspace() for ws in batch for w in ws)
    assert "diabetes" in batch[2]
    again = pickle.loads(pickle.dumps(seg))
    assert again.cut_batch(texts) == batch


def test_segmenter_from_vocabulary_pieces():
    names = ["膝关节游离体摘除术", "肘关节游离体摘除术", "踝关节游离体取出术", "左膝退变"]
    tagger = KeywordTagger.builtin()
    pieces = vocabulary_pieces(names, tagger)
    assert "游离体" in pieces  # recurring stretch between a site and a type
    seg = Segmenter.from_vocabulary(names, tagger)
    assert "游离体" in seg.cut(normalize("右髋关节游离体"))


# ---------------------------------------------------------------------------
# keyword tagger
# ---------------------------------------------------------------------------
def _kinds(spans):
    return [(s.kind, s.text) for s in spans]


def test_builtin_tagger_on_thyroid_procedure():
    spans = KeywordTagger.builtin().tag("右侧甲状腺肿瘤切除术")
    assert _kinds(spans) == [("laterality", "右侧"), ("site", "甲状腺"), ("type", "肿瘤"), ("type", "切除术")]
    assert (spans[1].start, spans[1].end) == (2, 5)


def test_tagger_offsets_are_into_the_original_text():
    t = KeywordTagger.builtin()
    s = "【右侧】 甲状腺  ＩＩ期 恶性肿瘤，经腹腔镜 切除术"
    spans = t.tag(s)
    assert all(sp.text == s[sp.start:sp.end] for sp in spans)
    got = _kinds(spans)
    assert ("laterality", "右侧") in got and ("site", "甲状腺") in got
    assert ("nature", "恶性") not in got and ("type", "恶性肿瘤") in got  # the longer keyword wins
    assert ("approach", "经腹腔镜") in got and ("type", "切除术") in got
    assert set(sp.kind for sp in spans) <= set(KEYWORD_KINDS)


def test_longest_cover_and_blockers():
    t = KeywordTagger.builtin()
    assert _kinds(t.tag("十二指肠溃疡")) == [("site", "十二指肠"), ("type", "溃疡")]
    assert _kinds(t.tag("股骨骨折")) == [("site", "股骨"), ("type", "骨折")]
    assert _kinds(t.tag("右乳腺癌")) == [("laterality", "右"), ("site", "乳腺"), ("type", "癌")]
    assert ("site", "指") not in _kinds(t.tag("其他和未特指部位的损伤"))  # 未特指 blocks the site 指
    assert t.keywords_of("左侧甲状腺及甲状旁腺病损切除术", "site") == ["甲状腺", "甲状旁腺"]
    assert t.keywords_of("Ⅱ型糖尿病", "type") == ["糖尿病"]


def test_tagger_mined_from_a_vocabulary_without_keyword_files():
    names = ["鼻泪管悬吊术", "鼻泪管探通术", "鼻泪管吻合术", "鼻泪管成形术", "鼻泪管切开术",
             "膀胱颈悬吊术", "子宫悬吊术", "眼睑悬吊术", "直肠悬吊术",
             "舌下腺囊肿切除术", "舌下腺病损切除术", "舌下腺切除术", "舌下腺切开引流术"]
    vocab = Vocabulary(names=names)
    mined = mine_keywords(names, min_support=2)
    assert mined.get("鼻泪管") == "site" and mined.get("舌下腺") == "site"
    assert mined.get("悬吊术") == "type"
    assert "泪管" not in mined and "吊术" not in mined  # containment: the longer unit wins
    t = KeywordTagger.from_vocabulary(vocab, min_support=2)
    assert t.sources["鼻泪管"] == "mined" and t.sources["切除术"] == "builtin"
    assert _kinds(t.tag("左侧鼻泪管悬吊术")) == [("laterality", "左侧"), ("site", "鼻泪管"), ("type", "悬吊术")]
    bare = KeywordTagger.from_vocabulary(vocab, include_builtin=False, min_support=2)
    assert bare.kind_of("鼻泪管") == "site" and bare.kind_of("悬吊术") == "type"
    assert "鼻泪管" in bare.words("site") and "悬吊术" in bare.words()


def test_mining_drops_compositions_and_qualifiers():
    names = [f"{site}{kind}" for site in ["肝", "肺", "胃", "脾", "肾", "心"]
             for kind in ["病损切除术", "部分切除术", "活检术"]] + [f"其他{x}" for x in ["肝病", "肺病", "胃病", "肾病"]]
    mined = mine_keywords(names, KeywordTagger.builtin()._lex, min_support=3)
    assert "病损切除术" not in mined  # = 病损 + 切除术, both known
    assert not any("其他" in w for w in mined)


def test_keyword_dir_reader_and_errors(tmp_path):
    (tmp_path / "procedure_sites.txt").write_text("鼻泪管\n# comment\n\n舌下腺\n", encoding="utf-8")
    (tmp_path / "procedure_types.txt").write_text("悬吊术\t45\n探通术\t3\n", encoding="utf-8")
    (tmp_path / "abbreviations.json").write_text("{}", encoding="utf-8")
    words = read_keyword_dir(tmp_path)
    assert words["site"] == ["鼻泪管", "舌下腺"] and words["type"] == ["悬吊术", "探通术"]
    t = KeywordTagger.from_keyword_dir(tmp_path)
    assert t.sources["鼻泪管"] == "file" and t.kind_of("探通术") == "type"
    assert _kinds(t.tag("鼻泪管探通术")) == [("site", "鼻泪管"), ("type", "探通术")]
    (tmp_path / "procedure_types.txt").write_text("悬吊术\t45\n探通术\tmany\n", encoding="utf-8")
    with pytest.raises(DataFormatError) as e:
        read_keyword_dir(tmp_path)
    assert e.value.row == 2 and "procedure_types.txt" in e.value.path
    with pytest.raises(DataFormatError):
        read_keyword_dir(tmp_path / "missing")


def test_tagger_batch_pickle_and_words():
    t = KeywordTagger.builtin()
    texts = ["左膝关节镜下半月板切除术", "慢性萎缩性胃炎", ""]
    batch = t.tag_batch(texts)
    assert batch == [t.tag(x) for x in texts] and batch[2] == []
    again = pickle.loads(pickle.dumps(t))
    assert again.tag_batch(texts) == batch
    assert "甲状腺" in t.words() and "甲状腺" in t.words("site") and "甲状腺" not in t.words("type")
    assert "未特指" not in t.words() and "未特指" in t.blockers()
    with pytest.raises(ValueError):
        t.add("某词", "organ")


@pytest.mark.skipif(not (DATA / "yidu-n7k" / "code.txt").exists(), reason="shared data absent")
def test_mined_tagger_on_real_procedure_vocabulary():
    names = [ln.split("\t", 1)[1].strip() for ln in
             (DATA / "yidu-n7k" / "code.txt").read_text(encoding="utf-8").splitlines() if "\t" in ln]
    t = KeywordTagger.from_vocabulary(names)
    mined = {w: k for w, k in ((w, t.kind_of(w)) for w in t.words()) if t.sources[w] == "mined"}
    assert len(mined) > 50
    assert sum(k == "type" for k in mined.values()) > 20 and sum(k == "site" for k in mined.values()) > 10
    spans = t.tag("右侧甲状腺肿瘤切除术")
    assert ("site", "甲状腺") in _kinds(spans) and ("type", "切除术") in _kinds(spans)


# ---------------------------------------------------------------------------
# splitter
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("text,parts", [
    ("糖尿病反复低血糖;骨质疏松;高血压冠心病不稳定心绞痛", ["糖尿病反复低血糖", "骨质疏松", "高血压冠心病不稳定心绞痛"]),
    ("头痛.头晕.高血压", ["头痛", "头晕", "高血压"]),
    ("腹腔镜胆囊切除术+术中胆道造影", ["腹腔镜胆囊切除术", "术中胆道造影"]),
    ("慢性萎缩性胃炎并肠化生", ["慢性萎缩性胃炎", "肠化生"]),
    ("左膝退变伴游离体", ["左膝退变", "游离体"]),
    ("肝硬化腹水，胸水", ["肝硬化腹水", "胸水"]),
    ("发热;上呼吸道感染?;泌尿道感染?", ["发热", "上呼吸道感染", "泌尿道感染"]),
    ("①高血压②糖尿病", ["高血压", "糖尿病"]),
    ("1.高血压 2.糖尿病", ["高血压", "糖尿病"]),
    ("消化性溃疡伴出血和穿孔", ["消化性溃疡", "出血", "穿孔"]),
    ("高血压\x04\x04冠心病", ["高血压", "冠心病"]),
])
def test_split_cases(text, parts):
    assert split_mention(text) == parts


@pytest.mark.parametrize("text", [
    "肿物直径1.5cm",  # no split inside a number
    "糖尿病并发症", "肺癌累及胸膜", "高血压不伴心衰",  # protected words
    "伴发热",  # a side shorter than 2 characters
    "大腿肌肉和肌腱损伤", "胎儿胃及部分肠管扩张",  # 和/及 joining two sites
    "G2P1孕35+5周", "HBsAg(+)",  # + inside numbers / lab signs
    "激光碎石术(肾盂\\输尿管)",  # separators inside brackets
    "type 2 diabetes, unspecified",  # English: only ; and + split
])
def test_split_keeps_whole(text):
    assert split_mention(text) == [normalize(text)]


@pytest.mark.parametrize("mention, parts", [
    ("brain, breast, and prostate cancer", ["brain cancer", "breast cancer", "prostate cancer"]),
    ("pancreatic, basal cell, colonic, breast, and cervical carcinomas",
     ["pancreatic carcinomas", "basal cell carcinomas", "colonic carcinomas", "breast carcinomas",
      "cervical carcinomas"]),
    ("facial, limb and genital abnormalities", ["facial abnormalities", "limb abnormalities",
                                                "genital abnormalities"]),
    ("breast and ovarian cancer", ["breast and ovarian cancer"]),  # two findings: NCBI's syndrome as often
    ("contractures of the elbows, Achilles tendons and spine",  # a shared start: one finding as often
     ["contractures of the elbows, achilles tendons and spine"]),
    ("rare, sex-linked recessive disease", ["rare, sex-linked recessive disease"]),  # commas alone: adjectives
    ("breast, ovarian and colon cancer syndrome", ["breast, ovarian and colon cancer syndrome"]),  # a known term
])
def test_english_lists_of_three_or_more_are_split_when_asked(mention, parts, monkeypatch):
    from termnorm.text import split

    known = KnownTerms(["Breast, Ovarian and Colon Cancer Syndrome"])
    monkeypatch.setattr(split, "ENGLISH_LISTS", True)
    assert split_mention(mention, known) == parts
    monkeypatch.setattr(split, "ENGLISH_LISTS", False)
    assert split_mention(mention, known) == [normalize(mention)]


def test_split_respects_known_terms():
    known = KnownTerms(["2型糖尿病伴有酮症酸中毒"])
    assert split_mention("2型糖尿病伴有酮症酸中毒") == ["2型糖尿病", "酮症酸中毒"]
    assert split_mention("2型糖尿病伴有酮症酸中毒", known) == ["2型糖尿病伴有酮症酸中毒"]
    assert split_mention("2型糖尿病伴有酮症酸中毒;高血压", ["2型糖尿病伴有酮症酸中毒"]) == \
        ["2型糖尿病伴有酮症酸中毒", "高血压"]
    assert split_mention("左、右肾结石") == [normalize("左、右肾结石")]  # a 1-char part is glued, no split
    assert split_mention("") == []


@pytest.mark.parametrize("written, read", [
    ("右全髋关节置换术(THA)", "右全髋关节置换术"),  # was 右全髋关节置换术(全髋关节置换术)
    ("3D腹腔镜Dixon术", "3d腹腔镜直肠切除术"),  # was …直肠切除术术 (Yidu-N7K train)
    ("右THA术后", "右全髋关节置换术后"),
    ("THA", "全髋关节置换术"),
    ("哮喘(THA)", "哮喘(全髋关节置换术)"),  # a bracket after other words is spelled out as before
])
def test_an_expansion_is_not_said_twice(written, read):
    table = Abbreviations({"tha": "全髋关节置换术", "dixon": "直肠切除术"})
    assert table.expand(normalize(written)) == normalize(read)


# ------------------------------------------------------------------ Chinese short forms
def test_short_forms_are_spelled_out_only_where_they_stand_alone():
    from termnorm.text.short_forms import ShortForms, table

    sf = ShortForms(["心房颤动", "脑梗死", "乳房早发育", "乙肝恢复期"], {**table(), "房早": "房性期前收缩"})
    n = normalize
    assert sf.expand(n("晚孕(上感)")) == "晚期妊娠(上呼吸道感染)"
    assert sf.found(n("晚孕(上感)")) == [("晚孕", "晚期妊娠"), ("上感", "上呼吸道感染")]
    assert sf.expand(n("阵发性房颤")) == "阵发性心房颤动"
    assert sf.expand(n("心房颤动")) == n("心房颤动")  # 房颤 inside a name holding it
    assert sf.expand(n("乳房早发育")) == n("乳房早发育")  # 房早 too
    assert sf.expand(n("乙肝恢复期")) == n("乙肝恢复期") and sf.expand(n("慢性乙肝")) == "慢性乙型病毒性肝炎"
    assert sf.expand(n("多发脑梗死")) == n("多发脑梗死")  # the full form written already
    assert sf.expand(n("上呼吸道感染(上感)")) == n("上呼吸道感染(上感)")
    assert sf.expand(n("慢性心衰竭")) == "慢性心力衰竭"  # the 竭 not said twice
    assert sf.expand("copd") == "copd" and sf.found("copd") == []  # Latin short forms are the lists'


def test_the_recall_reads_short_forms_when_switched_on(monkeypatch):
    from termnorm.engine import Engine
    from termnorm.text import short_forms

    v = Vocabulary(name="diagnoses", language="zh")
    for code, name in [("J06.9", "急性上呼吸道感染"), ("F39", "心境[情感]障碍"), ("O26.9", "妊娠相关情况"),
                       ("I48", "阵发性心房颤动"), ("I25.1", "冠状动脉粥样硬化性心脏病"), ("I20.0", "不稳定型心绞痛")]:
        v.add_term(name, [code])
    monkeypatch.setattr(short_forms, "ENABLED", False)
    off = Engine(v)
    assert off.union.variants("冠心病") == [] and not any("_abbr" in k for k in off.suggest("冠心病").candidates[0].scores)
    monkeypatch.setattr(short_forms, "ENABLED", True)
    eng = Engine(v)
    assert eng.union.variants("冠心病") == [("冠状动脉粥样硬化性心脏病", "_abbr")]
    parts = [v for v in eng.union.variants("冠心病;不稳定型心绞痛") if v[1] == "_part"]  # each part read too
    assert [p for p, _ in parts] == ["冠心病", "不稳定型心绞痛", "冠状动脉粥样硬化性心脏病"]
    top = eng.suggest("冠心病").candidates[0]
    assert top.term == "冠状动脉粥样硬化性心脏病" and top.scores["tfidf_abbr"] == pytest.approx(1.0, abs=1e-3)
    cands = eng.suggest("晚孕(上感)").candidates  # read as 晚期妊娠(上呼吸道感染): that name matches best
    best = max(cands, key=lambda c: c.scores.get("tfidf_abbr", 0.0))
    assert best.term == "急性上呼吸道感染" and best.scores["tfidf_abbr"] > best.scores.get("tfidf", 0.0)
