"""The review app end to end with Streamlit's AppTest: real pages, real engine, a real SQLite file.

Every action on the coding page is checked in the database rows it writes
(decision, training pairs, mention status, synonyms); import, restart and
resume, HTML escaping and the engine learning from a correction are checked
through the pages as a coder would meet them.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
import streamlit as st
from helpers import rerun
from streamlit.testing.v1 import AppTest

from db import services
from termnorm.engine import demo_mentions
from termnorm.records import LabelledMention

REPO = Path(__file__).resolve().parents[1]
APP = str(REPO / "app.py")
TIMEOUT = 60  # the first run of a process loads jieba and builds the engine (~6 s on 2 busy cores)


@pytest.fixture
def db_url(url, monkeypatch):  # conftest's url: a fresh database of each backend
    monkeypatch.setenv("TERMNORM_DB_URL", url)
    monkeypatch.setenv("TERMNORM_AUTH", "off")  # sign-in is tested in test_dashboard_pages.py; here the typed name
    yield url
    services.dispose(url)


def start(**query) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    for k, v in query.items():
        at.query_params[k] = str(v)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def current_id(at: AppTest) -> int:
    """The mention on screen: its terms box is keyed ``terms_<mention id>``."""
    keys = [w.key for w in at.multiselect if w.key and w.key.startswith("terms_")]
    assert len(keys) == 1, keys
    return int(keys[0].split("_")[1])


def box(at: AppTest, mention_id: int):
    """The terms box of the mention: keyed ``terms_<id>``, then ``terms_<id>_v<n>`` after each change the server
    makes to it (Clear, a term added from the search, a synonym)."""
    found = [w for w in at.multiselect if w.key and (w.key == f"terms_{mention_id}"
                                                     or w.key.startswith(f"terms_{mention_id}_v"))]
    assert len(found) == 1, [w.key for w in found]
    return found[0]


def latest(url: str, mention_id: int) -> dict:
    with services.session_scope(url) as s:
        return services.mention(s, mention_id)


def pairs(url: str, mention_id: int) -> list[tuple[str, int, str]]:
    with services.session_scope(url) as s:
        df = services.training_pairs_frame(s)
    df = df[df.mention_id == mention_id]
    return sorted(zip(df.term, df.label, df.kind))


def suggestion(url: str, mention_id: int):
    with services.session_scope(url) as s:
        return services.latest_suggestion(s, mention_id)


def add_batch(url: str, texts: list[str], name: str = "test batch", vocabulary: str = "demo-procedures") -> int:
    with services.session_scope(url) as s:
        return services.create_batch(s, name, services.vocabulary_id(s, vocabulary), texts)


# ----------------------------------------------------------------------------- start-up
def test_first_run_seeds_demo_data_without_gold(db_url):
    at = start()
    with services.session_scope(db_url) as s:
        vocabs = {v["name"]: v["n_terms"] for v in services.vocabularies(s)}
        bl = services.batches(s)
        first = services.mentions(s, bl[0]["id"])
    assert set(vocabs) == {"demo-procedures", "demo-diagnoses"} and min(vocabs.values()) > 100
    assert [b["n_mentions"] for b in bl] == [len(demo_mentions("procedures")), len(demo_mentions("diagnoses"))]
    assert all(not m["gold_terms"] for m in first)  # gold answers stay out of the coders' way
    assert first[0]["text"] == demo_mentions("procedures")[0].text
    assert current_id(at) == first[0]["id"]
    assert any("Mention #1 of" in c.value for c in at.caption)
    # the suggestion was stored with its ranked candidates and the next mentions prepared ahead (in a thread
    # started once the page is drawn)
    assert suggestion(db_url, first[0]["id"]).candidates
    end = time.time() + 30
    while suggestion(db_url, first[1]["id"]) is None and time.time() < end:
        time.sleep(0.1)
    assert suggestion(db_url, first[1]["id"]) is not None


def test_a_new_coder_opens_the_vocabulary_the_team_added_not_the_demo(db_url):
    """A user test: once a hospital had added its own list, every new coder still landed in the demo batch."""
    start()  # the first run seeds the demo vocabularies
    from termnorm.vocabulary import Vocabulary

    own = Vocabulary(name="x")
    own.add_term("甲状腺病损切除术", ["H01"])
    own.add_term("腹腔镜胆囊切除术", ["H02"])
    with services.session_scope(db_url) as s:
        services.ensure_user(s, "boss", role="lead")
        vid = services.create_vocabulary(s, own, "本院手术", "boss")
        batch = services.create_batch(s, "第一批", vid, ["右甲状腺肿物切除"])
        with pytest.raises(ValueError, match="exists already"):
            services.create_vocabulary(s, own, "本院手术", "boss")
        services.ensure_user(s, "li", role="coder")
        with pytest.raises(PermissionError):
            services.create_vocabulary(s, own, "科室列表", "li")
        # a later vocabulary with nothing to code yet is not where people land (a second user test's coders were
        # told to import mentions there)
        services.create_vocabulary(s, own, "另一个目录", "boss")
    at = start(coder="wang")
    assert at.session_state["vocabulary_id"] == vid and at.session_state["batch_id"] == batch
    with services.session_scope(db_url) as s:
        assert current_id(at) == services.mentions(s, batch)[0]["id"]


# ----------------------------------------------------------------------------- decisions
def test_accept_records_engine_terms(db_url):
    at = start()
    mid = current_id(at)
    chosen = suggestion(db_url, mid).chosen
    assert chosen
    at.button(key=f"accept_{mid}").click()
    rerun(at)
    m = latest(db_url, mid)
    assert m["status"] == "decided"
    d = m["decision"]
    assert (d["action"], d["terms"], d["user"]) == ("accept", chosen, "coder") and d["seconds"] >= 0
    assert pairs(db_url, mid) == sorted((t, 1, "accepted") for t in chosen)
    assert current_id(at) != mid and any("Mention #2 of" in c.value for c in at.caption)


def test_correct_with_a_different_candidate(db_url):
    at = start()
    at.sidebar.text_input(key="_username").set_value("alice")
    rerun(at)
    mid = current_id(at)
    sug = suggestion(db_url, mid)
    other = next(c.term for c in sug.candidates if c.term not in sug.chosen)
    box(at, mid).set_value([other])
    at.button(key=f"save_{mid}").click()
    rerun(at)
    d = latest(db_url, mid)["decision"]
    assert (d["action"], d["terms"], d["user"]) == ("correct", [other], "alice")
    got = pairs(db_url, mid)
    assert (other, 1, "corrected") in got
    for t in sug.chosen:  # the engine's wrong answer, shown and not chosen: a confirmed hard negative
        assert (t, 0, "rejected_candidate") in got


def test_a_decision_is_of_the_suggestion_on_screen_not_one_stored_meanwhile(db_url):
    """A background job (a lead's suggestion job after a promotion, another app process) may store a new suggestion
    for the mention on a coder's screen. The decision was linked to that newest row: another model's version on
    the coder's decision, and candidates the coder never saw taken as their hard negatives."""
    from dataclasses import replace

    from app_pages import _ui
    from db.models import Decision
    from db.models import Suggestion as SuggestionRow

    at = start()
    mid = current_id(at)
    shown = suggestion(db_url, mid)
    assert len(shown.candidates) > _ui.SHOWN  # the job's top ten below differ from the screen's
    other = next(c.term for c in shown.candidates if c.term not in shown.chosen)
    meanwhile = replace(shown, candidates=shown.candidates[::-1], chosen=[shown.candidates[-1].term],
                        model_version="suggest-job-v9")
    with services.session_scope(db_url) as s:
        services.store_suggestion(s, mid, meanwhile)
    box(at, mid).set_value([other])
    at.button(key=f"save_{mid}").click()
    rerun(at)
    with services.session_scope(db_url) as s:
        d = s.query(Decision).filter_by(mention_id=mid, is_latest=True).one()
        row = s.get(SuggestionRow, d.suggestion_id)
        assert (d.action, d.terms, d.model_version) == ("correct", [other], shown.model_version)
        assert row.model_version == shown.model_version and [c.term for c in row.candidates] == [
            c.term for c in shown.candidates]
    negatives = {t for t, label, kind in pairs(db_url, mid) if kind == "rejected_candidate"}
    assert negatives == {c.term for c in shown.candidates[:_ui.SHOWN]} - {other}


def test_pick_two_terms(db_url):
    at = start()
    mid = current_id(at)
    two = [c.term for c in suggestion(db_url, mid).candidates[:2]]
    box(at, mid).set_value(two)
    at.button(key=f"save_{mid}").click()
    rerun(at)
    d = latest(db_url, mid)["decision"]
    assert d["action"] == "correct" and d["terms"] == two
    assert [p for p in pairs(db_url, mid) if p[1] == 1] == sorted((t, 1, "corrected") for t in two)


def test_search_the_vocabulary_and_pick(db_url):
    at = start()
    mid = current_id(at)
    shown = {c.term for c in suggestion(db_url, mid).candidates}
    at.text_input(key=f"q_{mid}").set_value("胆囊切除")
    rerun(at)
    picks = [b for b in at.button if b.key and b.key.startswith(f"pick_{mid}_")]
    assert picks, "no search result"
    at.button(key=f"clear_{mid}").click()  # reject the candidates: only the searched term is kept
    rerun(at)
    assert box(at, mid).value == []
    at.button(key=f"pick_{mid}_0").click()
    rerun(at)
    picked = box(at, mid).value
    assert len(picked) == 1 and "胆囊" in picked[0] and picked[0] not in shown
    at.button(key=f"save_{mid}").click()
    rerun(at)
    d = latest(db_url, mid)["decision"]
    assert d["action"] == "correct" and d["terms"] == picked
    assert (picked[0], 1, "corrected") in pairs(db_url, mid)


def test_reject_none_fits(db_url):
    at = start()
    mid = current_id(at)
    shown = [c.term for c in suggestion(db_url, mid).candidates[:10]]
    at.button(key=f"reject_{mid}").click()
    rerun(at)
    d = latest(db_url, mid)["decision"]
    assert d["action"] == "reject" and d["terms"] == []
    assert pairs(db_url, mid) == sorted((t, 0, "rejected_candidate") for t in dict.fromkeys(shown))


def test_add_synonym_teaches_engine(db_url):
    at = start()
    mid = current_id(at)
    text = latest(db_url, mid)["text"]
    sug = suggestion(db_url, mid)
    target = next(c.term for c in sug.candidates if c.term not in sug.chosen)
    at.selectbox(key=f"syn_term_{mid}").set_value(target)
    assert at.text_input(key=f"syn_text_{mid}").value == text  # the mention is the default synonym
    at.button(key=f"syn_add_{mid}").click()
    rerun(at)
    with services.session_scope(db_url) as s:
        vid = services.vocabulary_id(s, "demo-procedures")
        assert (target, text) in services.user_synonyms(s, vid)
        tp = services.training_pairs_frame(s, vid)
    assert ((tp.kind == "synonym") & (tp.term == target) & (tp.mention == text)).sum() == 1
    # same mention still on screen, now suggested the taught term (engine.add_synonym took effect)
    assert current_id(at) == mid
    assert suggestion(db_url, mid).chosen == [target]
    assert box(at, mid).value == [target]


def test_skip_moves_on_and_comes_back_last(db_url):
    at = start()
    mid = current_id(at)
    at.button(key=f"skip_{mid}").click()
    rerun(at)
    m = latest(db_url, mid)
    assert m["status"] == "skipped" and m["decision"]["action"] == "skip"
    assert pairs(db_url, mid) == []
    assert current_id(at) != mid


def test_skipping_the_only_mention_left_says_why_it_comes_back(db_url):
    """A lead skipped the one mention left for them and met it again at once, with no word why."""
    start()  # the first run seeds the demo vocabularies
    small = add_batch(db_url, ["右侧甲状腺肿瘤切除术", "胆囊切除"], name="two left")
    at = start(batch=small)
    first = current_id(at)
    with services.session_scope(db_url) as s:
        other = next(m["id"] for m in services.mentions(s, small) if m["id"] != first)
        assert services.claim(s, other, "dana")  # a colleague holds the other one
    assert not [i for i in at.info if "only one left" in i.value]
    at.button(key=f"skip_{first}").click()
    rerun(at)
    assert current_id(at) == first and latest(db_url, first)["status"] == "skipped"
    assert [i.value for i in at.info if "only one left" in i.value] == [
        "You skipped this mention, and it is the only one left for you in this batch: the others are decided or "
        "wait for colleagues or a lead. It comes back until someone decides it."]
    at.button(key=f"accept_{first}").click()  # decided now: the batch holds nothing for this coder
    rerun(at)
    assert not [i for i in at.info if "only one left" in i.value]


def test_a_lead_who_decides_in_a_batch_then_holds_the_mentions_shown_as_a_coder_does(db_url):
    """A lead opening the queue only looks (nothing claimed). A user test's lead then coded beside a coder: each
    mention on the lead's screen was the one the coder was served next, and 44 of the lead's 94 presses were
    refused as a colleague's. Once a lead decides in a batch, the mentions shown to them are claimed."""
    start()  # the first run seeds the demo vocabularies
    small = add_batch(db_url, ["右侧甲状腺肿瘤切除术", "胆囊切除", "阑尾切除术"], name="side by side")
    with services.session_scope(db_url) as s:
        services.ensure_user(s, "lead", role="lead")
    at = start(batch=small, coder="lead")
    first = current_id(at)

    def held() -> dict:
        with services.session_scope(db_url) as s:
            return {c["mention_id"]: c["coder"] for c in services.claims(s, small)}

    assert held() == {}  # passing by: only looks
    with services.session_scope(db_url) as s:
        assert services.claim(s, first, "dana")  # the coder beside was served it meanwhile
    at.button(key=f"skip_{first}").click()  # refused, but the lead means to code here
    rerun(at)
    assert any("a colleague has this mention on screen" in w.value for w in at.warning)
    second = current_id(at)
    assert second != first and held() == {first: "dana", second: "lead"}
    at.button(key=f"skip_{second}").click()
    rerun(at)
    third = current_id(at)
    assert third not in (first, second) and held() == {first: "dana", third: "lead"}
    with services.session_scope(db_url) as s:
        assert services.next_mention(s, small, "dana")["id"] == first  # the coder keeps theirs; never the lead's


def test_a_lead_opening_a_flagged_mention_reads_the_coder_s_question(db_url):
    """A lead served a flagged mention saw it like any open one: no flag, no comment."""
    start()  # the first run seeds the demo vocabularies
    small = add_batch(db_url, ["右侧甲状腺肿瘤切除术"], name="flag me")
    with services.session_scope(db_url) as s:
        services.ensure_user(s, "lead", role="lead")
        mid = services.mentions(s, small)[0]["id"]
        services.record_decision(s, mid, "dana", "flag", comment="两个部位，**请组长**确认")
    at = start(batch=small, coder="lead")
    assert current_id(at) == mid
    assert any("flagged for a lead" in c.value for c in at.caption)
    assert [i.value for i in at.info if "Flagged by" in i.value] == [
        "**Flagged by dana:** 两个部位，\\*\\*请组长\\*\\*确认"]


def test_a_colleague_on_the_same_batch_is_shown_other_mentions(db_url):
    at = start()
    mine = current_id(at)
    with services.session_scope(db_url) as s:
        bid = services.mention(s, mine)["batch_id"]
        theirs = services.next_mention(s, bid, "dana")["id"]  # a colleague opens the same batch
    assert theirs != mine
    at.button(key=f"accept_{mine}").click()
    rerun(at)
    nxt = current_id(at)
    assert nxt not in (mine, theirs)
    assert "1 other mention(s) on colleagues' screens now" in [c.value for c in at.caption]
    # a batch whose last open mention is on a colleague's screen is not reported finished
    small = add_batch(db_url, ["右侧甲状腺肿瘤切除术"], name="one left")
    with services.session_scope(db_url) as s:
        services.next_mention(s, small, "dana")
    at = start(batch=small)
    assert not [w for w in at.multiselect if w.key and w.key.startswith("terms_")]
    assert "on colleagues' screens" in at.info[0].value and not at.success


def test_flag_needs_a_comment(db_url):
    at = start()
    mid = current_id(at)
    at.button(key=f"flag_{mid}").click()
    rerun(at)
    assert latest(db_url, mid)["decision"] is None
    assert any("comment" in e.value for e in at.error)
    at.text_input(key=f"comment_{mid}").set_value("两个部位，请组长确认")
    at.button(key=f"flag_{mid}").click()
    rerun(at)
    m = latest(db_url, mid)
    assert m["status"] == "flagged"
    assert (m["decision"]["action"], m["decision"]["comment"]) == ("flag", "两个部位，请组长确认")
    assert current_id(at) != mid


# ----------------------------------------------------------------------------- import / export
def test_import_malformed_file_reports_bad_rows_and_keeps_good_ones(db_url, tmp_path, monkeypatch):
    monkeypatch.setenv("TERMNORM_JOBS", str(tmp_path / "jobs"))  # pre-suggesting runs as a background job
    at = start()
    at.switch_page("app_pages/import_export.py")
    rerun(at)
    data = ("mention,terms\n"
            "右侧腹股沟斜疝无张力修补术,\n"
            ",甲状腺全部切除术\n"
            f"{'很长' * 300},\n"
            "经尿道前列腺电切术,\n").encode("utf-8")
    at.file_uploader(key="upload").set_value(("ward7_bad.csv", data, "text/csv"))
    at.text_input(key="batch_name").set_value("ward 7")
    rerun(at)
    at.button[0].click()  # Import
    rerun(at)
    report = at.table[0].value.reset_index()
    assert list(report.columns) == ["file", "row", "problem"]
    assert set(report.file) == {"ward7_bad.csv"} and sorted(report.row) == ["3", "4"]
    assert any("2 mention(s) imported" in s.value for s in at.success)
    with services.session_scope(db_url) as s:
        b = next(b for b in services.batches(s) if b["name"] == "ward 7")
        texts = [m["text"] for m in services.mentions(s, b["id"])]
    assert texts == ["右侧腹股沟斜疝无张力修补术", "经尿道前列腺电切术"]
    assert at.session_state["batch_id"] == b["id"]  # the sidebar moved to the new batch
    # pre-suggest the whole batch (a background job): every mention gets a stored suggestion
    at.button(key="suggest_all").click()
    rerun(at)
    from termnorm.jobs import JobRunner

    runner = JobRunner()
    assert runner.wait(runner.latest(kind="precompute", batch_id=b["id"])["id"], TIMEOUT)["state"] == "done"
    with services.session_scope(db_url) as s:
        assert all(services.latest_suggestion(s, m["id"]) is not None for m in services.mentions(s, b["id"]))



def test_importing_the_same_file_again_asks_first(db_url):
    """The second import of a file names the batch that already holds its mentions and imports only when asked."""
    at = start()
    at.switch_page("app_pages/import_export.py")
    rerun(at)
    data = "mention\n胆囊切除\n阑尾切除\n".encode()
    for _ in range(2):
        at.file_uploader(key="upload").set_value(("ward7.csv", data, "text/csv"))
        rerun(at)
        at.button[0].click()  # Import
        rerun(at)
    warning = " ".join(w.value for w in at.warning)
    assert "nothing imported" in warning and "already batch" in warning and "ward7" in warning
    with services.session_scope(db_url) as s:
        assert [b["name"] for b in services.batches(s)].count("ward7") == 1
    at.button(key="import_again").click()
    rerun(at)
    assert any("2 mention(s) imported" in s.value for s in at.success)
    with services.session_scope(db_url) as s:
        assert sorted(b["name"] for b in services.batches(s) if "ward7" in b["name"]) == ["ward7", "ward7 (2)"]


def test_the_import_says_when_a_file_s_terms_become_gold(db_url):
    """A re-imported export (its 'terms' column) turned the coders' decisions into gold labels without a word:
    training and evaluation data the person importing must know about."""
    at = start()
    at.switch_page("app_pages/import_export.py")
    rerun(at)
    for name, data in (("export.csv", "mention,terms\n胆囊切除,胆囊切除术\n阑尾,\n甲状腺肿物切除,甲状腺病损切除术\n"),
                       ("plain.csv", "mention,terms\n胆囊切除,\n")):
        at.file_uploader(key="upload").set_value((name, data.encode(), "text/csv"))
        at.text_input(key="batch_name").set_value(name)
        rerun(at)
        at.button[0].click()  # Import
        rerun(at)
        said = [i.value for i in at.info if "Gold terms" in i.value]
        if name == "export.csv":
            assert said and said[0].startswith("Gold terms read from column 'terms': 2 imported row(s) carry them")
        else:
            assert not said

def test_import_report_counts_rows_and_names_a_stray_quote_row(db_url):
    at = start()
    at.switch_page("app_pages/import_export.py")
    rerun(at)
    data = ("mention,terms\n"
            "右侧腹股沟斜疝无张力修补术,\n"
            '"经尿道前列腺电切术,\n'  # row 3: a stray quote (it used to swallow the rows below)
            "胆囊\x00切除,\n"  # row 4: NUL removed, with a notice
            "阑尾切除,\n").encode("utf-8")
    at.file_uploader(key="upload").set_value(("stray.csv", data, "text/csv"))
    at.text_input(key="batch_name").set_value("stray")
    rerun(at)
    at.button[0].click()  # Import
    rerun(at)
    assert {m.label: m.value for m in at.metric} == {"Rows read": "4", "Imported": "3", "Rejected": "1",
                                                     "Notices": "1"}
    # short lists as tables whose text wraps (a grid cut a long notice off)
    rejected, notices = (t.value.reset_index() for t in at.table[:2])
    assert list(rejected.columns) == ["file", "row", "problem"] and list(rejected.row) == ["3"]
    assert "unbalanced quote" in rejected.problem[0]
    assert list(notices.columns) == ["file", "row", "notice"] and list(notices.row) == ["4"]
    assert notices.notice[0] == "control character U+0000 removed"
    assert any("3 mention(s) imported" in s.value for s in at.success)
    with services.session_scope(db_url) as s:
        b = next(b for b in services.batches(s) if b["name"] == "stray")
        assert [(m["source_row"], m["text"]) for m in services.mentions(s, b["id"])] == [
            (2, "右侧腹股沟斜疝无张力修补术"), (4, "胆囊切除"), (5, "阑尾切除")]


def test_import_of_a_header_only_file_says_why_nothing_came_in(db_url):
    at = start()
    at.switch_page("app_pages/import_export.py")
    rerun(at)
    at.file_uploader(key="upload").set_value(("header.csv", b"mention,terms\n", "text/csv"))
    rerun(at)
    at.button[0].click()  # Import
    rerun(at)
    # (the page escapes Markdown in file names and messages: compare the text a person reads)
    assert any("nothing imported: no data rows below the header (row 1)" in e.value.replace("\\", "")
               for e in at.error)
    assert {m.label: m.value for m in at.metric}["Rows read"] == "0" and not at.dataframe


# ----------------------------------------------------------------------------- restart, escaping, learning
def test_restart_resumes_at_next_undecided_mention(db_url):
    at = start()
    first = current_id(at)
    at.button(key=f"accept_{first}").click()
    rerun(at)
    second = current_id(at)
    sug = suggestion(db_url, second)
    other = next(c.term for c in sug.candidates if c.term not in sug.chosen)
    box(at, second).set_value([other])
    at.button(key=f"save_{second}").click()
    rerun(at)
    third = current_id(at)

    # a new process: no cached engine, no open database connection
    st.cache_resource.clear()
    services.dispose(db_url)
    at2 = start()
    assert current_id(at2) == third
    captions = [c.value for c in at2.caption]
    assert any("Mention #3 of" in c for c in captions), captions
    from app_pages import _markup

    # what the database kept is on screen after the restart: a coder cut off mid-save reads it, not guesses
    code = next(c.codes[0] for c in sug.candidates if c.term == other)  # the code kept is said with its term
    said = f"Last saved: #2 correct · {_markup.md(f'{other} ({code})')} · "  # Markdown-escaped, as the page writes it
    assert any(c.startswith(said) for c in captions), captions
    with services.session_scope(db_url) as s:
        df = services.decisions_frame(s)
    assert list(zip(df.mention_id, df.action)) == [(first, "accept"), (second, "correct")]
    # the rebuilt engine was fed the coded mentions: the corrected one now gets the coder's term
    from app_pages import _ui

    holder = _ui.serving_holder(db_url, at2.session_state["vocabulary_id"])
    assert holder.engine.suggest(latest(db_url, second)["text"]).chosen == [other]


def test_html_in_a_mention_is_escaped(db_url):
    start()  # seeds the demo data
    hostile = '<img src=x onerror="alert(1)">右侧甲状腺肿块<script>alert(2)</script>'
    bid = add_batch(db_url, [hostile, "甲状腺全切术"], name="hostile")
    at = start(batch=bid)
    assert at.session_state["batch_id"] == bid
    html = next(m.value for m in at.markdown if 'class="tn-mention"' in m.value)
    assert "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;" in html
    assert "&lt;script&gt;alert(2)&lt;/script&gt;" in html
    assert "<img" not in html and "<script" not in html
    assert 'class="kw kw-site"' in html  # keywords still highlighted around the escaped text
    assert all("<script" not in m.value and "<img" not in m.value for m in at.markdown)
    # the colour key names the kinds on the page: each one marked in the mention or a candidate, and only those
    key = next(m.value for m in at.markdown if 'class="tn-legend">Keywords:' in m.value)
    marked = set(re.findall(r'class="kw kw-(\w+)', "".join(m.value for m in at.markdown if "tn-legend" not in m.value)))
    assert set(re.findall(r'class="kw kw-(\w+)"', key.split("in candidates")[0])) == marked - {"match", "mismatch"}
    assert "site" in marked
    from app_pages import _markup

    assert _markup.legend_html(kinds=set()) == "" and "Keywords:" in _markup.legend_html(kinds={"site"})


def test_an_abbreviation_in_a_mention_is_spelled_out_and_shown(db_url):
    """卵巢Ca used to be suggested as 卵巢炎: the engine now reads it as 卵巢恶性肿瘤 and says so."""
    start()
    bid = add_batch(db_url, ["卵巢Ca", "左卵巢Ca术后"], name="abbreviations", vocabulary="demo-diagnoses")
    at = start(batch=bid)
    mid = current_id(at)
    assert latest(db_url, mid)["text"] == "卵巢Ca"
    assert suggestion(db_url, mid).chosen == ["卵巢恶性肿瘤"]
    shown = [m.value for m in at.markdown if "tn-spelled-out" in m.value]
    assert shown and "卵巢恶性肿瘤" in shown[0]
    at.button(key=f"accept_{mid}").click()
    rerun(at)
    assert latest(db_url, mid)["decision"]["terms"] == ["卵巢恶性肿瘤"]
    # the next one, 左卵巢Ca术后: the marks compare the terms with the mention as read, so the right term's
    # 恶性肿瘤 is not marked as a different type (it was, against the mention's 术后, in a user test)
    assert latest(db_url, current_id(at))["text"] == "左卵巢Ca术后"
    table = next(m.value for m in at.markdown if "tn-cands" in m.value)
    pick = next(row for row in table.split("<tr") if 'class="tn-pick"' in row)
    assert "卵巢恶性肿瘤" in pick or "恶性肿瘤" in pick
    assert "kw-mismatch" not in pick


def test_a_chinese_short_form_is_recalled_spelled_out_and_shown(db_url, monkeypatch):
    """Clinical notes write 房颤 for 心房颤动: the recall reads the built-in short forms and the page says so."""
    from termnorm.text import short_forms

    monkeypatch.setattr(short_forms, "ENABLED", True)
    start()
    at = start(batch=add_batch(db_url, ["阵发性房颤"], name="short forms", vocabulary="demo-diagnoses"))
    assert suggestion(db_url, current_id(at)).chosen == ["阵发性心房颤动"]
    page = "\n".join(m.value for m in at.markdown)
    assert page.count('data-testid="tn-also-read"') == 1
    assert "also read as: <b>阵发性心房颤动</b> (short forms spelled out)" in page
    pick = next(row for row in page.split("<tr") if 'class="tn-pick"' in row)
    assert "kw-mismatch" not in pick and "lacks" not in pick  # compared with the mention as read


def test_a_mention_is_read_in_the_note_it_came_from(db_url):
    """PAF alone means nothing to the engine; the note it came from defines it (阵发性心房颤动（PAF）): the
    suggestion follows the note, the page says how the mention was read and shows the note."""
    start()
    note = "既往诊断为阵发性心房颤动（PAF），长期口服华法林。"
    with services.session_scope(db_url) as s:
        vid = services.vocabulary_id(s, "demo-diagnoses")
        bid = services.create_batch(s, "notes", vid, [LabelledMention("PAF", [], 1, document=note),
                                                      LabelledMention("PAF", [], 2)])
    at = start(batch=bid)
    mid = current_id(at)
    assert suggestion(db_url, mid).chosen == ["阵发性心房颤动"]
    shown = [m.value for m in at.markdown if "tn-spelled-out" in m.value]
    assert len(shown) == 1 and "read as: <b>阵发性心房颤动</b> (PAF = 阵发性心房颤动 in the document)" in shown[0]
    doc = next(m.value for m in at.markdown if "tn-document" in m.value)
    assert '<mark class="tn-focus">阵发性心房颤动</mark>（<mark>PAF</mark>），长期口服华法林' in doc
    at.button(key=f"accept_{mid}").click()
    rerun(at)
    assert latest(db_url, mid)["decision"]["terms"] == ["阵发性心房颤动"]
    # the same text without a note is read as written: no reading line, no document
    nxt = current_id(at)
    assert nxt != mid and latest(db_url, nxt)["document"] == ""
    assert not [m for m in at.markdown if "tn-spelled-out" in m.value or "tn-document" in m.value]


def test_a_long_note_is_shown_around_the_mention_and_whole_on_request(db_url):
    """A note longer than the window (app_pages._markup.DOCUMENT_WINDOW) opens around the definition the
    mention uses; one switch shows all of it, which a coder needs to read what comes before and after."""
    start()
    note = "主诉：" + "反复心悸。" * 1000 + "既往诊断为阵发性心房颤动（PAF）。" + "出院医嘱：" + "按时服药。" * 600
    with services.session_scope(db_url) as s:
        vid = services.vocabulary_id(s, "demo-diagnoses")
        bid = services.create_batch(s, "long note", vid, [LabelledMention("PAF", [], 1, document=note)])
    at = start(batch=bid)
    mid = current_id(at)
    doc = lambda: "".join(m.value for m in at.markdown if "tn-document" in m.value)  # noqa: E731
    assert "characters before" in doc() and "more characters" in doc() and "<mark>PAF</mark>" in doc()
    assert doc().count("反复心悸") < 1000
    at.toggle(key=f"whole_doc_{mid}").set_value(True)
    rerun(at)
    assert "characters before" not in doc() and "more characters" not in doc()
    assert doc().count("反复心悸") == 1000 and doc().count("按时服药") == 600 and "<mark>PAF</mark>" in doc()
    assert f"({len(note):,} characters)" in at.toggle(key=f"whole_doc_{mid}").label


def _evidence_of(at, term: str) -> str:
    """The evidence line under ``term`` in the page's candidate table."""
    import re

    table = next(m.value for m in at.markdown if "tn-cands" in m.value)
    for row in re.findall(r"<tr[^>]*>(.*?)</tr>", table)[1:]:
        cell = re.findall(r"<td[^>]*>(.*?)</td>", row)[2]  # rank, code, term (+ marks, + evidence)
        name, _, why = cell.partition('<div class="tn-why">')
        if re.sub(r"<[^>]+>", "", name).split(" lacks ")[0].strip() == term:
            return re.sub(r"<[^>]+>", "", why)
    raise AssertionError(f"{term} is not in the candidate table")


def test_each_candidate_says_what_it_rests_on_and_a_decision_changes_it_at_once(db_url):
    """A never-coded candidate's evidence is the vocabulary's (what its name shares with the mention); once a
    coder picks it, the next mention's table says it was coded, and from which mention."""
    start()
    text = "甲状腺肿物切除"
    bid = add_batch(db_url, [text, text + "术"], name="evidence")
    at = start(batch=bid)
    first = current_id(at)
    sug = suggestion(db_url, first)
    other = next(c.term for c in sug.candidates if c.term not in sug.chosen and "甲状腺" in c.term)
    before = _evidence_of(at, other)
    assert "甲状腺" in before.split("shares ")[1] and "coded" not in before, before  # nothing is coded yet
    box(at, first).set_value([other])
    at.button(key=f"save_{first}").click()
    rerun(at)
    assert current_id(at) != first
    after = _evidence_of(at, other)
    assert after.startswith(f"coded 1× · like “{text}”"), after
    rest = [_evidence_of(at, c.term) for c in suggestion(db_url, current_id(at)).candidates[:8] if c.term != other]
    assert rest and all(w.startswith("never coded") for w in rest), rest
    assert 'class="tn-new">never coded' in next(m.value for m in at.markdown if "tn-cands" in m.value)


def test_a_term_of_a_multi_term_answer_that_shares_nothing_is_left_out_of_the_box(db_url):
    """A user test: 输尿管镜检查+扩张+置双J管术 was answered with three terms, one of them an eye procedure that
    "shares nothing with the mention", and all three were in the terms box, one S from being recorded. Here the
    answer comes from a pre-coded file (db.precoded), served as stored."""
    from termnorm.records import Candidate, Suggestion

    start()
    bid = add_batch(db_url, ["胆囊切除+阑尾切除（二次）", "胆囊切除+阑尾切除"], name="two parts")
    terms = ["胆囊切除术", "阑尾切除术", "白内障晶状体乳化和抽吸"]
    with services.session_scope(db_url) as s:
        sure, mid = [m["id"] for m in services.mentions(s, bid)]
        for m, ranker in ((mid, 0.1), (sure, 0.9)):  # the ranker's score of the third term
            services.store_suggestion(s, m, Suggestion(
                "胆囊切除+阑尾切除", [Candidate(i, t, 0.9, {"ranker": 0.9 if i < 2 else ranker})
                                     for i, t in enumerate(terms)], 3, terms, 0.4,
                model_version="precoded:history.parquet"))
    at = start(batch=bid)
    # a term the ranker is sure of stays (化疗 shares no run of text with 化学治疗, its right term, in a user test)
    assert current_id(at) == sure and box(at, sure).value == terms
    at.button(key=f"skip_{sure}").click()
    rerun(at)
    assert current_id(at) == mid and suggestion(db_url, mid).chosen == terms  # shown as stored
    assert box(at, mid).value == terms[:2]
    said = [m.value for m in at.markdown if "tn-groundless" in m.value]
    assert said and "白内障晶状体乳化和抽吸 shares nothing with the mention: not put in the terms box" in said[0]
    at.button(key=f"save_{mid}").click()
    rerun(at)
    assert latest(db_url, mid)["decision"]["terms"] == terms[:2]
    assert latest(db_url, mid)["decision"]["action"] == "correct"  # not the engine's answer


def test_a_suggestion_that_shares_nothing_with_the_mention_is_shown_not_put_in_the_box(db_url):
    """A user test: a mention of digits only got a term at 0.01 in its terms box, so Save (S) recorded a guess.
    A suggestion with no ground in the mention is shown and said so; the box stays empty until the coder fills
    it. A mention with ground keeps its pre-filled box."""
    start()
    bid = add_batch(db_url, ["20231125", "甲状腺肿物切除"], name="groundless")
    at = start(batch=bid)
    first = current_id(at)
    assert suggestion(db_url, first).chosen  # the engine does suggest something
    assert box(at, first).value == []
    said = [m.value for m in at.markdown if "tn-groundless" in m.value]
    assert said and "shares nothing with the mention" in said[0]
    at.button(key=f"save_{first}").click()
    rerun(at)
    assert current_id(at) == first and latest(db_url, first)["decision"] is None  # nothing saved from an empty box
    assert any("Pick at least one term" in e.value for e in at.error)
    at.button(key=f"skip_{first}").click()
    rerun(at)
    second = current_id(at)
    assert second != first and box(at, second).value == suggestion(db_url, second).chosen != []
    assert not [m.value for m in at.markdown if "tn-groundless" in m.value]


def test_the_address_names_the_batch_on_screen_so_a_reload_returns_to_it(db_url):
    """A reload (a new session) opened the first vocabulary's first batch, whatever the coder was working on."""
    start()
    bid = add_batch(db_url, ["胆囊切除术"], name="ward 9")
    at = start()
    assert at.query_params["batch"] != str(bid)
    at.selectbox(key="_batch").set_value(bid)
    rerun(at)
    assert at.query_params["batch"] == str(bid)
    again = start(**dict(at.query_params))  # the reload: a new session, same address
    assert again.selectbox(key="_batch").value == bid
    assert latest(db_url, current_id(again))["text"] == "胆囊切除术"
    assert not again.sidebar.warning
    # an old bookmark naming a batch that is gone: said, not silently replaced by another batch
    stale = start(batch=bid + 100)
    assert f"names batch {bid + 100}, which does not exist" in stale.sidebar.warning[0].value
    stale.selectbox(key="_batch").set_value(bid)
    rerun(stale)
    assert not stale.sidebar.warning and stale.query_params["batch"] == str(bid)




def test_without_sign_in_a_reload_keeps_the_typed_name(db_url):
    """With TERMNORM_AUTH=off a reload turned every coder into "coder": decisions were recorded under that name
    and two coders who reloaded were served the same mention (a user test). The address keeps the name."""
    at = start()
    at.text_input(key="_username").set_value("alice")
    rerun(at)
    assert at.query_params["coder"] == "alice"
    again = start(**dict(at.query_params))  # the reload
    assert again.text_input(key="_username").value == "alice"
    assert again.session_state["username"] == "alice"

def test_two_batches_named_alike_stay_two_choices(db_url):
    """Streamlit keeps a select box's choice by its label: the second "dup" batch (a monthly file imported
    under its file name) took over the first's label, so opening the first showed the second after one rerun,
    and the coder's decisions went to the other batch."""
    start()
    first = add_batch(db_url, ["胆囊切除术"], name="dup")
    second = add_batch(db_url, ["阑尾切除术"], name="dup")
    at = start(batch=first)
    options = at.selectbox(key="_batch").options
    assert f"dup · #{first}" in options and f"dup · #{second}" in options
    rerun(at)
    assert at.selectbox(key="_batch").value == first and at.query_params["batch"] == str(first)
    assert latest(db_url, current_id(at))["text"] == "胆囊切除术"

def test_correction_changes_the_suggestion_for_the_same_mention(db_url):
    start()
    text = "甲状腺肿物切除"
    bid = add_batch(db_url, [text, text, "胆囊切除术"], name="duplicates")
    at = start(batch=bid)
    first = current_id(at)
    sug = suggestion(db_url, first)
    other = next(c.term for c in sug.candidates if c.term not in sug.chosen)
    box(at, first).set_value([other])
    at.button(key=f"save_{first}").click()
    rerun(at)
    second = current_id(at)
    assert second != first and latest(db_url, second)["text"] == text
    # prepared before the correction, recomputed before being shown
    assert suggestion(db_url, second).chosen == [other]
    assert box(at, second).value == [other]
    assert any(other in m.value and "Suggested" in m.value for m in at.markdown)


# ----------------------------------------------------------------------------- vocabulary browser
def test_vocabulary_browser_shows_codes_and_user_synonyms(db_url):
    at = start()
    mid = current_id(at)
    target = suggestion(db_url, mid).chosen[0]
    at.text_input(key=f"syn_text_{mid}").set_value("甲状腺肿块切")
    at.selectbox(key=f"syn_term_{mid}").set_value(target)
    at.button(key=f"syn_add_{mid}").click()
    rerun(at)
    at.switch_page("app_pages/vocabulary_browser.py")
    rerun(at)
    at.text_input(key="vocab_q").set_value(target)
    rerun(at)
    results = at.dataframe[0].value
    assert results.term.iloc[0] == target and results.code.iloc[0]
    at.selectbox(key="vocab_term").set_value(target)
    rerun(at)
    syn = at.dataframe[1].value
    row = syn[syn.synonym == "甲状腺肿块切"]
    assert len(row) == 1 and (row.iloc[0]["source"], row.iloc[0]["added_by"]) == ("user", "coder")
    assert row.iloc[0]["at"] is not None


def test_new_coder_codes_twenty_mentions_exports_restarts_and_finds_them_all(db_url):
    """Issue acceptance: code 20 demo mentions, export, restart, all 20 decisions are there."""
    import io

    import pandas as pd

    at = start()
    coded = []
    for i in range(20):
        mid = current_id(at)
        sug = suggestion(db_url, mid)
        if i % 3 == 2:  # every third one corrected to the second candidate, the others accepted
            other = next(c.term for c in sug.candidates if c.term not in sug.chosen)
            box(at, mid).set_value([other])
            at.button(key=f"save_{mid}").click()
            coded.append((mid, "correct", [other]))
        else:
            at.button(key=f"accept_{mid}").click()
            coded.append((mid, "accept", sug.chosen))
        rerun(at)
    batch = at.session_state["batch_id"]
    with services.session_scope(db_url) as s:
        exported = pd.read_csv(io.BytesIO(services.export_decisions(s, batch, "csv")))
    assert len(exported) == 20

    st.cache_resource.clear()  # restart: a new process
    services.dispose(db_url)
    at2 = start()
    assert any("Mention #21 of" in c.value for c in at2.caption)
    with services.session_scope(db_url) as s:
        df = services.decisions_frame(s, batch)
        assert services.batch_progress(s, batch)[0] == 20
    assert [(r.mention_id, r.action, list(r.terms)) for r in df.itertuples()] == coded


# ----------------------------------------------------------------------------- vocabulary search (issue 22, item 5)
def test_vocabulary_page_finds_the_leaves_under_a_typed_code_prefix(db_url):
    at = start()
    at.switch_page("app_pages/vocabulary_browser.py")
    rerun(at)
    at.text_input(key="vocab_q").set_value("06.31")
    rerun(at)
    results = at.dataframe[0].value
    assert list(results.term) == ["甲状腺病损切除术", "腔镜下甲状腺病损切除术"]
    assert list(results.code) == ["06.3100", "06.3101"] and set(results["found as"]) == {"code prefix"}
    at.text_input(key="vocab_q").set_value("06.3199")  # no such code: the codes under 06.31, said so
    rerun(at)
    assert any(c.value == "no code 06.3199; codes under 06.31" for c in at.caption)
    assert list(at.dataframe[0].value.term[:2]) == ["甲状腺病损切除术", "腔镜下甲状腺病损切除术"]


def test_the_term_detail_follows_a_new_search(db_url):
    """A user test: after PCI, searching ERCP+EST updated the table but the Term detail (codes, synonyms) still
    showed PCI's term. A new query now shows its first result; a pick stays while the query does."""
    at = start()
    at.switch_page("app_pages/vocabulary_browser.py")
    rerun(at)
    at.text_input(key="vocab_q").set_value("ERCP+EST")
    rerun(at)
    later = list(at.dataframe[0].value.term)
    at.text_input(key="vocab_q").set_value("PCI")
    rerun(at)
    second = next(t for t in at.dataframe[0].value.term[1:] if t in later)  # a term both searches list
    at.selectbox(key="vocab_term").set_value(second)
    rerun(at)
    assert at.selectbox(key="vocab_term").value == second
    at.text_input(key="vocab_q").set_value("ERCP+EST")
    rerun(at)
    first = at.dataframe[0].value.term.iloc[0]
    assert first == "内镜逆行胰胆管造影[ERCP]" and at.selectbox(key="vocab_term").value == first
    assert any(f"</span> {first}</b>" in m.value for m in at.markdown)  # its codes and hierarchy
    assert not any(f"</span> {second}</b>" in m.value for m in at.markdown)


def test_teaching_a_listed_pair_or_an_expansion_no_name_holds_is_said(db_url):
    """A user test: PCI → 经皮冠状动脉介入治疗, already on the demo list, was stored again without a word, and an
    expansion no term is named by was taken silently."""
    from db import abbreviations

    at = start()
    at.switch_page("app_pages/vocabulary_browser.py")
    rerun(at)
    said = []
    for abbr, expansion in (("pci", "经皮冠状动脉介入治疗"), ("ZZQ", "不存在的术式")):
        at.text_input(key="abbr_text").set_value(abbr)
        at.text_input(key="abbr_expansion").set_value(expansion)
        at.button(key="abbr_teach").click()
        rerun(at)
        said.append(([e.value for e in at.error], [w.value for w in at.warning]))
    assert len(said[0][0]) == 1 and said[0][0][0].startswith("pci → 经皮冠状动脉介入治疗 is already known") \
        and not said[0][1]
    assert not said[1][0] and any("holds “不存在的术式”" in w for w in said[1][1]), said[1]
    assert not any("it now finds" in t.value for t in at.toast)  # no term to find: none is named
    at.button(key="abbr_teach").click()  # the form cleared itself: a second click of a double click
    rerun(at)
    assert not at.error
    with services.session_scope(db_url) as s:
        vid = services.vocabulary_id(s, "demo-procedures")
        assert abbreviations.abbreviations(s, vid) == [("ZZQ", "不存在的术式")]  # taught, with the warning


def test_an_abbreviation_taught_on_the_vocabulary_page_is_found_on_the_coding_page(db_url):
    from db import abbreviations

    at = start()
    at.switch_page("app_pages/vocabulary_browser.py")
    rerun(at)
    at.text_input(key="abbr_text").set_value("CBDE")
    at.text_input(key="abbr_expansion").set_value("胆总管探查术")
    at.button(key="abbr_teach").click()
    rerun(at)
    with services.session_scope(db_url) as s:
        vid = services.vocabulary_id(s, "demo-procedures")
        assert abbreviations.abbreviations(s, vid) == [("CBDE", "胆总管探查术")]
        assert services.audit_frame(s).action.iloc[0] == "add_abbreviation"
    table = at.dataframe[-1].value  # every abbreviation the search knows: the taught one and the demo list
    assert ((table.abbreviation == "CBDE") & (table.added_by == "coder")).sum() == 1
    assert (table.source == "list").sum() == 61
    at.switch_page("app_pages/coding_queue.py")
    rerun(at)
    mid = current_id(at)
    at.text_input(key=f"q_{mid}").set_value("cbde")
    rerun(at)
    tags = [m.value for m in at.markdown if "abbreviation → 胆总管探查术" in m.value]
    assert tags and '<b title="exported code">51.5100</b>' in tags[0]  # the first result, with its code
    at.button(key=f"pick_{mid}_0").click()
    rerun(at)
    assert "胆总管探查术" in box(at, mid).value
    # a restarted app replays it from the database
    st.cache_resource.clear()
    services.dispose(db_url)
    at2 = start()
    mid = current_id(at2)
    at2.text_input(key=f"q_{mid}").set_value("CBDE")
    rerun(at2)
    assert any("abbreviation → 胆总管探查术" in m.value for m in at2.markdown)
