"""Reading a mention in its document (termnorm.context, termnorm.reading): abbreviations the document defines
(Schwartz–Hearst) spelled out, on the NCBI disease abstracts and MEDIC."""

from __future__ import annotations

import pytest
from helpers import DATA, need

from termnorm import reading
from termnorm.context import defined_abbreviations, definitions_used, read_in_document
from termnorm.engine import Engine
from termnorm.loaders import load_labelled, load_vocabulary
from termnorm.records import LabelledMention
from termnorm.vocabulary import Vocabulary

DOC = ("Fish-eye disease (FED) is a rare disorder. Glucose-6-phosphate dehydrogenase (G6PD) deficiency was "
       "excluded. FED patients and G6PD deficiency carriers were compared with the Wiskott-Aldrich syndrome (WAS).")


def test_definitions_of_a_document():
    assert defined_abbreviations(DOC) == {"FED": "Fish-eye disease", "G6PD": "Glucose-6-phosphate dehydrogenase",
                                          "WAS": "Wiskott-Aldrich syndrome"}
    assert defined_abbreviations("No brackets here.") == {}
    assert defined_abbreviations("") == {}


@pytest.mark.parametrize("mention, read", [
    ("FED", "Fish-eye disease"),  # the mention is a short form
    ("G6PD deficiency", "Glucose-6-phosphate dehydrogenase deficiency"),  # one inside the mention
    ("Glucose-6-phosphate dehydrogenase (G6PD) deficiency", "Glucose-6-phosphate dehydrogenase deficiency"),
    ("G6PD-deficient", "Glucose-6-phosphate dehydrogenase-deficient"),
    ("WAS syndrome", "Wiskott-Aldrich syndrome"),  # the long form's last word is not said twice
    ("FEDX syndrome", "FEDX syndrome"),  # not a whole word: untouched
    ("rare disorder", "rare disorder"),
])
def test_read_in_document(mention, read):
    assert read_in_document(mention, DOC) == read
    assert read_in_document(mention, "") == mention and read_in_document(mention, None) == mention


def test_definitions_used_name_what_was_spelled_out():
    assert definitions_used("FED", DOC) == [("FED", "Fish-eye disease")]
    assert definitions_used("G6PD deficiency and WAS", DOC) == [
        ("G6PD", "Glucose-6-phosphate dehydrogenase"), ("WAS", "Wiskott-Aldrich syndrome")]
    assert definitions_used("rare disorder", DOC) == [] and definitions_used("FED", "") == []


def _tiny_engine(history=()):
    v = Vocabulary(language="en")
    for name, syn in [("Fish-eye disease", []), ("Familial amyloid polyneuropathy", ["FAP"]),
                      ("Adenomatous Polyposis Coli", ["familial adenomatous polyposis"])]:
        v.add_term(name, synonyms=syn)
    return Engine(v, history=list(history), keyword_dir=None)


def test_the_engine_reads_history_and_suggestions_in_their_documents():
    doc = "Familial adenomatous polyposis (FAP) is inherited. FAP patients develop polyps."
    coded = LabelledMention("FED", ["Fish-eye disease"], document=DOC)
    eng = _tiny_engine([coded])
    assert [m.text for m in eng.history] == ["Fish-eye disease"]  # coded history is stored as read
    # a mention that is itself a name or synonym of the vocabulary is read as written (FAP is one here)
    assert reading.in_document(eng, "FAP", doc) == "FAP"
    assert reading.in_document(eng, "FED", DOC) == "Fish-eye disease"
    sug, plain = eng.suggest_batch(["FED", "FED"], documents=[DOC, ""])
    assert sug.mention == "FED" and sug.spelled_out == "Fish-eye disease"  # the mention kept as written
    assert sug.chosen == ["Fish-eye disease"]
    assert plain.spelled_out == ""  # without its document "FED" is read as written


def test_ncbi_abbreviations_are_read_in_their_abstracts():
    path = need(DATA / "ncbi-disease" / "NCBIdevelopset_corpus.txt")
    medic = load_vocabulary(need(DATA / "ncbi-disease" / "medic_06Jul2012.txt"))
    dev = load_labelled(path, medic).mentions
    eng = Engine(medic, history=[], keyword_dir=None)
    read = reading.read_labelled(eng, dev)
    changed = {(a.text, b.text) for a, b in zip(dev, read) if a.text != b.text}
    assert ("CHD", "coronary heart disease") in changed and ("SPG", "spastic paraplegia") in changed
    assert ("LA variant of galactosemia", "Los Angeles variant of galactosemia") in changed
    assert ("HPT-JT syndrome", "hyperparathyroidism-jaw tumor syndrome") in changed  # not "syndrome syndrome"
    assert ("von Hippel-Lindau (VHL) disease", "von Hippel-Lindau disease") in changed
    assert ("AO-GLD", "adult onset globoid cell leukodystrophy") in changed  # "(Krabbe disease; AO-GLD)"
    assert ("AAPC", "attenuated adenomatous polyposis coli") in changed  # not "adenomatous polyposis coli"
    # the parts of a hyphenated short form, which the abstract then writes alone ("HPT-JT" defined once)
    parts = {("HPT", "hyperparathyroidism"), ("JT", "jaw tumor"), ("primary HPT", "primary hyperparathyroidism")}
    assert parts <= changed
    # a MEDIC name or synonym is read as written: SJS (a synonym of SJS type 1; spelled out, Schwartz-Jampel
    # syndrome is a synonym of Osteochondrodysplasias), FED (fish-eye disease's)
    assert not any(a in ("SJS", "FED") for a, _ in changed)
    assert 55 <= sum(a.text != b.text for a, b in zip(dev, read)) <= 75  # of 787 (measured: 65)


@pytest.mark.parametrize("note, mention, read", [
    ("既往诊断为阵发性心房颤动（PAF），长期口服华法林。", "PAF", "阵发性心房颤动"),
    ("既往诊断为阵发性心房颤动（PAF）。", "paf", "阵发性心房颤动"),  # the whole mention in another case
    ("诊断：1型糖尿病（DM1）。", "DM1复查", "1型糖尿病复查"),  # digits inside the long form
    ("患者因急性非ST段抬高型心肌梗死（NSTEMI）入院。", "NSTEMI", "急性非ST段抬高型心肌梗死"),
    ("Atrial fibrillation (AF) 病史3年。", "AF", "AF"),  # an English long form: a Chinese vocabulary cannot use it
])
def test_chinese_notes_define_latin_short_forms(note, mention, read):
    v = Vocabulary(language="zh")
    for name in ("阵发性心房颤动", "1型糖尿病", "急性非ST段抬高型心肌梗死", "心房颤动"):
        v.add_term(name)
    eng = Engine(v, history=[], keyword_dir=None)
    assert reading.in_document(eng, mention, note) == read
    assert reading.definitions_in(eng, mention, note) == ([] if read == mention else [(mention.upper(), read)]
                                                          if mention != "DM1复查" else [("DM1", "1型糖尿病")])


def test_the_coding_page_shows_the_note_around_its_definition():
    from app_pages._markup import document_html

    note = "x" * 5000 + "既往阵发性心房颤动（PAF）。" + "y" * 3000
    shown = document_html(note, ["PAF", "阵发性心房颤动"], focus="阵发性心房颤动")
    assert "… 4,002 characters before" in shown and '<mark class="tn-focus">阵发性心房颤动</mark>（<mark>PAF</mark>）' in shown
    assert shown.count("tn-focus") == 1  # the box scrolls to the definition (app_pages._markup._FOCUS_SCROLL)
    assert "more characters" in shown
    # a Latin mark only as a whole word (AF is not marked inside PAF); text is escaped
    assert document_html("AF 与 PAF <b>", ["AF"]).count("<mark>") == 1 and "&lt;b&gt;" in document_html("<b>", [])


def test_a_taught_synonym_is_read_as_written():
    eng = _tiny_engine()
    assert reading.in_document(eng, "FED", DOC) == "Fish-eye disease"
    eng.add_synonym("Fish-eye disease", "FED")  # a coder teaches FED: from now on it is the vocabulary's
    assert reading.in_document(eng, "FED", DOC) == "FED"


@pytest.mark.parametrize("document, short, long", [
    # Schwartz–Hearst alone takes the shortest long form spelling the short form: "adenomatous polyposis coli"
    ("Familial attenuated adenomatous polyposis coli (AAPC) is rare. AAPC carriers were compared.",
     "AAPC", "attenuated adenomatous polyposis coli"),
    # a short form last in a bracket with other words: Schwartz–Hearst alone finds nothing
    ("patients with adult onset globoid cell leukodystrophy (Krabbe disease; AO-GLD) by PCR.",
     "AO-GLD", "adult onset globoid cell leukodystrophy"),
    ("the X-linked adrenoleukodystrophy (X-ALD) gene", "X-ALD", "X-linked adrenoleukodystrophy"),
])
def test_long_forms_schwartz_hearst_cuts_short_or_misses(document, short, long):
    assert defined_abbreviations(document)[short] == long
    # nothing is made of a bracket that ends in a number or an ordinary word
    assert defined_abbreviations("Huntington disease (HD, 143100) and more (see below; Table 1).") == {}


def test_the_parts_of_a_hyphenated_short_form_are_defined_too():
    found = defined_abbreviations("Familial hyperparathyroidism-jaw tumor syndrome (HPT-JT) is rare.")
    assert found["HPT"] == "hyperparathyroidism" and found["JT"] == "jaw tumor"  # not "jaw tumor syndrome"
    # one-letter parts, or parts whose long part does not start with their letters, define nothing
    assert set(defined_abbreviations("ataxia-telangiectasia (A-T) and X-linked adrenoleukodystrophy (X-ALD)")) == \
        {"A-T", "X-ALD"}


def test_a_mention_coded_as_written_outweighs_a_reading_in_the_sieve():
    """Coders wrote "Fish-eye disease" and coded it one way; another note's "FED" read as "Fish-eye disease"
    and coded differently must not change what the written mention gets, whichever came last."""
    written = LabelledMention("Fish-eye disease", ["Fish-eye disease"])
    read = LabelledMention("FED", ["Familial amyloid polyneuropathy"], document=DOC)
    for history in ([written, read], [read, written]):
        eng = _tiny_engine(history)
        assert [m.written for m in eng.history if m.terms == read.terms] == ["FED"]
        assert eng.suggest_batch(["Fish-eye disease"])[0].chosen == ["Fish-eye disease"]
        # a copy answering from other coded mentions (the ranker's folds) keeps the rule
        assert eng.with_history(list(reversed(eng.history)))._sieve["fish-eye disease"] == ["Fish-eye disease"]
    # two readings, or two written codings, of one text: the latest wins (a coder's correction takes effect)
    again = LabelledMention("Fish-eye disease", ["Adenomatous Polyposis Coli"])
    assert _tiny_engine([written, again])._sieve["fish-eye disease"] == ["Adenomatous Polyposis Coli"]


@pytest.mark.parametrize("mention, read", [
    ("TLH术", "腹腔镜经腹全子宫切除术"),  # not 切除术术
    ("TLH术后", "腹腔镜经腹全子宫切除术后"),
    ("PCI术后", "经皮冠状动脉介入治疗术后"),  # the long form does not end in 术: kept
])
def test_a_character_the_long_form_ends_with_is_not_said_twice(mention, read):
    note = "既往行腹腔镜经腹全子宫切除术（TLH）及经皮冠状动脉介入治疗（PCI）。"
    v = Vocabulary(language="zh")
    for name in ("腹腔镜经腹全子宫切除术", "经皮冠状动脉介入治疗"):
        v.add_term(name)
    assert reading.in_document(Engine(v, history=[], keyword_dir=None), mention, note) == read


def test_a_decision_on_a_reading_does_not_replace_one_on_the_mention_as_written():
    """The app learns each decision at once (Engine.add_coded_mention, db.engine_holder): the sieve keeps the
    rule the engine is fitted with, a mention coded as written outweighs a reading, the latest of a kind wins."""
    eng = _tiny_engine()
    eng.add_coded_mention("Fish-eye disease", ["Fish-eye disease"])  # as written
    eng.add_coded_mention("Fish-eye disease", ["Familial amyloid polyneuropathy"], written="FED")  # a reading
    assert eng._sieve["fish-eye disease"] == ["Fish-eye disease"]
    assert eng.history[-1].written == "FED"
    eng.add_coded_mention("Fish-eye disease", ["Adenomatous Polyposis Coli"])  # a coder's correction, as written
    assert eng._sieve["fish-eye disease"] == ["Adenomatous Polyposis Coli"]
    fresh = _tiny_engine()
    fresh.add_coded_mention("Fish-eye disease", ["Familial amyloid polyneuropathy"], written="FED")
    fresh.add_coded_mention("Fish-eye disease", ["Fish-eye disease"], written="FED")  # readings: the latest
    assert fresh._sieve["fish-eye disease"] == ["Fish-eye disease"]


def test_the_learning_loop_refit_reads_its_mentions_in_their_documents():
    """db.retrain's refit (termnorm.refit.fit_with_pairs) trains on mentions as serving reads them: "HNPCC" in
    an abstract that defines it is learnt as "hereditary nonpolyposis colorectal cancer", and a coder's
    rejection of a candidate for "HNPCC" (keyed by the text the coder saw) still reaches that mention."""
    from termnorm.fitting import hash_mentions
    from termnorm.refit import fit_with_pairs

    medic = load_vocabulary(need(DATA / "ncbi-disease" / "medic_06Jul2012.txt"))
    dev = load_labelled(need(DATA / "ncbi-disease" / "NCBIdevelopset_corpus.txt"), medic).mentions[:150]
    hnpcc = next(m for m in dev if m.text == "HNPCC")
    eng = Engine(medic, history=dev, keyword_dir=None)
    [sug] = eng.suggest_batch(["HNPCC"], documents=[hnpcc.document])
    assert sug.spelled_out == "hereditary nonpolyposis colorectal cancer"
    wrong = next(c.term for c in sug.candidates if c.term not in hnpcc.terms)
    report = fit_with_pairs(eng, dev, {"HNPCC": [wrong]})
    assert eng.meta["train_sha256"] == hash_mentions(reading.read_labelled(eng, dev))
    assert eng.meta["train_sha256"] != hash_mentions(dev)  # some of these 150 are read differently
    # the rejection lands on the read mention: no mention of its own, and the rejected term is a training row
    assert report["reject_only_mentions"] == 0 and report["confirmed_negatives_used"] >= 1


def test_the_gate_forgets_a_held_out_mention_coded_earlier_even_when_it_was_stored_as_read():
    """termnorm.refit.without_history: "FED" coded in its abstract is stored read as "Fish-eye disease"; held
    out as "FED", it must leave the history, and a mention coders wrote out in full must stay."""
    from termnorm.refit import without_history
    from termnorm.text.normalize import normalize

    eng = _tiny_engine([LabelledMention("FED", ["Fish-eye disease"], document=DOC),
                        LabelledMention("fish-eye disease", ["Fish-eye disease"])])
    assert [(m.text, m.written) for m in eng.history] == [("Fish-eye disease", "FED"), ("fish-eye disease", "")]
    kept = without_history(eng, {normalize("FED")})
    assert [(m.text, m.written) for m in kept.history] == [("fish-eye disease", "")]


def test_a_candidate_scores_the_words_its_name_adds_that_the_mention_s_abstract_holds():
    """termnorm.rank.document: NCBI dev codes "hereditary breast cancer" in an abstract about families with breast
    and ovarian cancers as the hereditary syndrome. Its name adds "ovarian" to the mention, which the abstract
    holds; Breast Neoplasms adds "neoplasm", which it does not. The ranker's training candidates of mentions with
    documents get the score; a ranker reads it only when fitted with ``document_words``, and only then do the
    candidates of a mention with a document get it at inference."""
    syndrome = "Hereditary Breast and Ovarian Cancer Syndrome"
    medic = load_vocabulary(need(DATA / "ncbi-disease" / "medic_06Jul2012.txt"))
    dev = load_labelled(need(DATA / "ncbi-disease" / "NCBIdevelopset_corpus.txt"), medic).mentions
    m = next(m for m in dev if m.text.lower() == "hereditary breast cancer" and m.terms == [syndrome])
    train = dev[:150]
    eng = Engine(medic, history=train, keyword_dir=None)
    splits = eng.ranker_training_data(train)
    assert any("doc_words" in c.scores for cl in splits[0][1] for c in cl)
    assert "doc_words" not in eng.fit_ranker(splits)["score_keys"]
    [plain] = eng.suggest_batch([m.text], documents=[m.document])
    assert not [c for c in plain.candidates if "doc_words" in c.scores]
    assert "doc_words" in eng.fit_ranker(splits, document_words=True)["score_keys"]
    with_doc, without = eng.suggest_batch([m.text, m.text], documents=[m.document, ""])
    got = {c.term: c.scores for c in with_doc.candidates}
    assert got[syndrome]["doc_words"] == 1.0 and got["Breast Neoplasms"]["doc_words"] == 0.0
    assert all("doc_words" in s for s in got.values())
    assert not [c for c in without.candidates if "doc_words" in c.scores]
