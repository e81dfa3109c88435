"""What each candidate rests on (termnorm.explain), on the demo procedures engine as the app ships it."""

import pickle

from termnorm import explain
from termnorm.engine import Engine
from termnorm.records import LabelledMention


def _why(eng, mention):
    sug = eng.suggest(mention)
    return {c.term: w for c, w in zip(sug.candidates, explain.evidence(eng, mention, sug.candidates))}, sug


def test_never_coded_then_taught_then_coded():
    eng = Engine.from_demo("procedures")
    why, sug = _why(eng, "甲状腺肿物切除")
    term = "甲状腺病损切除术"
    # nothing coded yet: "never coded" would be on every row, so it is on none; the name's evidence is
    assert not any("never coded" in w for ws in why.values() for w in ws)
    assert why[term] == ["shares 甲状腺", "learned: 肿物 → 病损"], why[term]
    # a weaker learned pair (肿物 -> 活组织检查, a coding habit at weight 1.5) is not offered as a reason
    biopsy = [w for t, ws in why.items() if "活组织检查" in t for w in ws]
    assert biopsy and not any("→ 活组织检查" in w for w in biopsy), biopsy
    eng.add_coded_mention("阑尾切除术", ["阑尾切除术"])
    why, _ = _why(eng, "甲状腺肿物切除")
    assert why[term][0] == "never coded"

    eng.add_synonym(term, "甲状腺肿物切除")  # a coder teaches the wording as a synonym
    why, _ = _why(eng, "甲状腺肿物切除")
    assert why[term][:2] == ["never coded", "synonym “甲状腺肿物切除” as written"]

    eng.add_coded_mention("右侧甲状腺肿物切除", [term])
    eng.add_coded_mention("甲状腺肿物切除", [term])
    why, _ = _why(eng, "甲状腺肿物切除")
    assert why[term][:2] == ["coded 2×", "as written before"]
    why, _ = _why(eng, "左侧甲状腺肿物切除")
    assert why[term][:2] == ["coded 2×", "like “右侧甲状腺肿物切除”"]

    state = pickle.loads(pickle.dumps(eng)).__dict__
    assert "_evidence_counts" not in state and "_evidence_counts" in eng.__dict__


def test_a_new_history_is_counted_afresh():
    eng = Engine.from_demo("procedures")
    sug = eng.suggest("胆囊切除")
    term = sug.candidates[0].term
    eng.add_coded_mention("胆囊切除", [term])
    assert explain.evidence(eng, "胆囊切除", sug.candidates[:1])[0][0] == "coded 1×"
    other = eng.with_history([LabelledMention("阑尾切除", ["阑尾切除术"])])  # a copy with other coded mentions
    assert explain.evidence(other, "胆囊切除", sug.candidates[:1])[0][0] == "never coded"
    assert explain.evidence(eng, "胆囊切除", sug.candidates[:1])[0][0] == "coded 1×"
    assert eng.__dict__["_evidence_counts"] is not other.__dict__["_evidence_counts"]


def test_a_candidate_that_shares_nothing_says_so():
    """A user test: for 奇怪的写法 (no procedure at all) a bypass term said only "never coded", and a term that
    came in by history only said "coded 1×", which reads as a reason to pick it."""
    eng = Engine.from_demo("procedures")
    eng.add_coded_mention("阑尾切除术", ["阑尾切除术"])
    why, sug = _why(eng, "奇怪的写法")
    assert sug.candidates and all(ws == ["never coded", "shares nothing with the mention"] for ws in why.values())
    eng.add_coded_mention("奇怪的写法", ["阑尾切除术"])  # now it comes in by history: "as written before" is evidence
    why, _ = _why(eng, "奇怪的写法")
    assert why["阑尾切除术"] == ["coded 2×", "as written before"]
    why, _ = _why(eng, "甲状腺肿物切除")  # a candidate with evidence does not say it
    assert why["甲状腺病损切除术"] == ["never coded", "shares 甲状腺", "learned: 肿物 → 病损"]


def test_detail_coders_leave_out_is_not_marked_lacking_a_site_they_keep_still_is():
    """颈部 of 颈部甲状腺肿物切除术 is detail no procedure term codes: once coders have left it out of the term they
    chose three times (explain.DROPPED_MIN_CODED), the candidate table stops saying "lacks 颈部". 胸骨, which
    coders keep (胸骨后甲状腺病损切除术), is still marked where a term lacks it; 肿物 -> 病损 is a rewrite, not a drop."""
    from app_pages import _ui
    from termnorm.records import Candidate

    eng = Engine.from_demo("procedures")
    term = "甲状腺病损切除术"

    def lacks(mention):
        html = _ui.candidate_table_html([Candidate(0, term, 0.5, {}, [])], eng.tag(mention), [term], eng.tag,
                                        same=eng.same_keyword, dropped=lambda span: explain.dropped(eng, span))
        return html.split("lacks ")[1].split("<")[0] if "lacks " in html else ""

    assert lacks("颈部甲状腺肿物切除术") == "颈部" and lacks("胸骨后甲状腺肿物切除") == "胸骨"
    for i, site in enumerate(["左", "右", ""]):
        eng.add_coded_mention(f"颈部{site}甲状腺肿物切除", [term])
        eng.add_coded_mention("胸骨后甲状腺肿物切除", ["胸骨后甲状腺病损切除术"])
        assert lacks("颈部甲状腺肿物切除术") == ("" if i == 2 else "颈部"), i  # three coded mentions, not two
    assert lacks("胸骨后甲状腺肿物切除") == "胸骨"
    c = explain.counts(eng)
    assert c.kw_coded["site", "颈部"] == 3 and c.kw_dropped["site", "颈部"] == 3
    assert c.kw_coded["type", "肿物"] == 6 and c.kw_dropped["type", "肿物"] == 0  # rewritten as 病损, not dropped
    assert c.kw_dropped["site", "胸骨"] == 0


def test_a_term_first_because_its_text_was_coded_so_says_why_it_outranks_higher_scores():
    """A user test: after a coder coded a mention as a term the ranker scored low, that term came first with a
    lower fused score than the row below it, and nothing said why."""
    from app_pages import _ui

    eng = Engine.from_demo("procedures")
    mention = "甲状腺肿物切除"
    before = eng.suggest(mention).candidates
    taught = before[2].term  # a term the engine ranked third
    eng.add_coded_mention(mention, [taught])
    sug = eng.suggest(mention)
    assert sug.candidates[0].term == taught and sug.candidates[0].score < sug.candidates[1].score
    html = _ui.candidate_table_html(sug.candidates, eng.tag(mention), sug.chosen, eng.tag)
    rows = html.split("<tr")[2:]
    assert "first: coded as written" in rows[0]
    assert all("first: coded as written" not in r for r in rows[1:])


def test_a_rewrite_is_named_only_between_words_of_two_characters_or_more(tmp_path):
    """A user test on a hospital's ICD-9-CM-3 list, day one: 全部膝关节置换 for 左膝人工关节表面置换术 read "learned: 面 →
    全部" (面 of 表面 tagged as the face, 全部 mined from the list as a site; the shipped scorer weighs it 1.6)."""
    from helpers import DATA

    from app_pages import _ui
    from db import services
    from termnorm.loaders import load_vocabulary
    from termnorm.records import Candidate

    url = f"sqlite:///{tmp_path / 'x.sqlite3'}"
    services.init_db(url)
    with services.session_scope(url) as s:
        services.ensure_user(s, "boss", role="lead")
        vid = services.create_vocabulary(s, load_vocabulary(DATA / "icd9cm3" / "icd9cm3_yibao_v2_tree.json"), "本院",
                                         "boss")
    eng = _ui.build_holder(url, vid).engine
    mention = "左膝人工关节表面置换术"
    assert eng.diff_scorer.rewrite_weight("面", "全部") >= explain.REWRITE_SHOWN  # the pair is weighty
    why = explain.evidence(eng, mention, [Candidate(0, "全部膝关节置换", 0.5, {}, [])], eng.tag(mention))[0]
    assert not any(w.startswith("learned") for w in why), why
    # a pair of words is still named (肿物 -> 病损 on the same scorer)
    why = explain.evidence(eng, "甲状腺肿物切除术", [Candidate(0, "甲状腺病损切除术", 0.5, {}, [])],
                           eng.tag("甲状腺肿物切除术"))[0]
    assert "learned: 肿物 → 病损" in why, why
    services.dispose(url)


def test_english_names_share_whole_words_in_any_order():
    """A user test on MEDIC read "shares e Deficiency", "shares ogen, ase", "shares uco": runs of letters cut
    inside words. An English name shares whole words, those the mention has in another order included."""
    from termnorm.vocabulary import Vocabulary

    vocab = Vocabulary(name="medic-excerpt")
    for i, name in enumerate(["Glucosephosphate Dehydrogenase Deficiency", "Complement Component 6 Deficiency",
                              "Anemia, Hemolytic, Congenital Nonspherocytic", "Hemolytic anemia"]):
        vocab.add_term(name, [f"D{i:06d}"])
    eng = Engine(vocab)
    why, _ = _why(eng, "glucose-6-phosphate dehydrogenase deficiency")
    assert why["Glucosephosphate Dehydrogenase Deficiency"] == ["shares Dehydrogenase Deficiency"]
    assert why["Complement Component 6 Deficiency"] == ["shares Deficiency"]
    why, _ = _why(eng, "chronic nonspherocytic hemolytic anemia")
    assert why["Anemia, Hemolytic, Congenital Nonspherocytic"] == ["shares Nonspherocytic, Anemia, Hemolytic"]
    assert why["Hemolytic anemia"] == ["shares Hemolytic anemia"]
