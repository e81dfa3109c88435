"""The Review, Editions and coding pages' new controls with AppTest, signed in for real (bcrypt accounts), on a real
SQLite file: relationship by key and code switch on the coding page; the lead's review queue (filters, approve
chosen, bulk approve, send back with a note, no self-approval, the admin's switch); a new vocabulary edition
uploaded on the Editions page sends exactly the broken decisions to re-review, which the coder meets first.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import demo_team, rerun as run
from streamlit.testing.v1 import AppTest

from db import auth, services

REPO = Path(__file__).resolve().parents[1]
APP = str(REPO / "app.py")
TIMEOUT = 90


@pytest.fixture
def team(url, tmp_path, monkeypatch):  # conftest's url: a fresh database of each backend
    vid, bid = demo_team(url, monkeypatch, (("lead1", "lead"), ("zhang", "coder"), ("liu", "coder")))
    yield {"url": url, "vid": vid, "bid": bid}
    services.dispose(url)


def app_as(user: str, page: str | None = None) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.session_state["auth_user"] = user
    run(at)
    if page:
        at.switch_page(f"app_pages/{page}")
        run(at)
    return at


def page_as(user: str, page: str) -> AppTest:
    at = AppTest.from_file(str(REPO / "app_pages" / page), default_timeout=TIMEOUT)
    at.session_state["auth_user"] = user
    return run(at)


def on_screen(at: AppTest) -> int:
    keys = [w.key for w in at.multiselect if w.key and w.key.startswith("terms_")]
    assert len(keys) == 1, keys
    return int(keys[0].split("_")[1])


def code_as(url: str, user: str, n: int) -> list[int]:
    """``user`` accepts the engine's answer for the next ``n`` mentions on the coding page."""
    at = app_as(user)
    done = []
    for _ in range(n):
        mid = on_screen(at)
        at.button(key=f"accept_{mid}").click()
        run(at)
        done.append(mid)
    return done


def latest(url: str, mid: int) -> dict:
    with services.session_scope(url) as s:
        return services.mention(s, mid)["decision"]


def test_relationship_key_and_code_switch_are_saved(team):
    with services.session_scope(team["url"]) as s:
        bid = services.create_batch(s, "two codes", team["vid"], ["甲状腺全部切除", "胆囊切除"])
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.session_state["auth_user"] = "zhang"
    at.session_state["batch_id"] = bid
    run(at)
    mid = on_screen(at)
    assert at.multiselect(key=f"terms_{mid}").value == ["甲状腺全部切除术"]
    switch = next(w for w in at.get("button_group") if w.key and w.key.startswith(f"code_{mid}_"))
    assert switch.value == "06.4x00"  # the leaf by default
    switch.set_value("06.4")
    run(at)
    at.button(key=f"rel_source-is-narrower-than-target_{mid}").click()  # the "2" key
    run(at)
    at.button(key=f"save_{mid}").click()
    run(at)
    d = latest(team["url"], mid)
    assert (d["action"], d["terms"], d["codes"]) == ("accept", ["甲状腺全部切除术"], ["06.4"])
    assert d["relationship"] == "source-is-narrower-than-target"
    # the next mention starts from the default again (equivalent for one term)
    nxt = on_screen(at)
    at.button(key=f"accept_{nxt}").click()
    run(at)
    d = latest(team["url"], nxt)
    assert d["relationship"] == "equivalent" and d["codes"] == [d["codes"][0]] and d["codes"][0]



def test_not_related_by_key_is_said_so_and_not_taught_as_the_mention_s_term(team):
    """Key 5 (not related) then Save: the toast says "not related to", not "accept"; the decision keeps the
    relationship and the term becomes a negative training pair (db.decisions.NOT_RELATED)."""
    at = app_as("zhang")
    mid = on_screen(at)
    terms = at.multiselect(key=f"terms_{mid}").value
    assert terms
    at.button(key=f"rel_{services.NOT_RELATED}_{mid}").click()  # the "5" key
    run(at)
    at.button(key=f"save_{mid}").click()
    run(at)
    assert any("not related to: " + " + ".join(terms) in t.value.replace("\\", "") for t in at.toast), \
        [t.value for t in at.toast]  # the toast's Markdown escapes (\: \#) render as the plain text
    assert not any(" accept" in t.value for t in at.toast)
    d = latest(team["url"], mid)
    assert (d["terms"], d["relationship"]) == (terms, services.NOT_RELATED)
    with services.session_scope(team["url"]) as s:
        pairs = services.training_pairs_frame(s, team["vid"])
        assert set(pairs[pairs.mention_id == mid].label) == {0}
        assert services.mention(s, mid)["text"] not in {m.text for m in services.coded_mentions(s, team["vid"])}
    # the lead's picker says it, so a lead does not approve it as a mapping unawares
    lead = app_as("lead1", "review.py")
    assert any(f"✗ not related to {terms[0]}" in o for o in lead.multiselect(key="rv_pick").options)

def test_the_review_table_shows_the_coder_s_comment_and_the_edition_by_number(team):
    """Seen in a browser: a flagged decision's question showed only on the coding page, not to the reviewing lead."""
    url = team["url"]
    (mid,) = code_as(url, "zhang", 1)
    with services.session_scope(url) as s:
        other = next(m["id"] for m in services.mentions(s, team["bid"]) if m["id"] != mid)
        services.record_decision(s, other, "zhang", "flag", comment="which side? *left*")
    at = app_as("lead1", "review.py")
    table = at.dataframe[0].value.set_index("#")
    # what a lead judges first, within a laptop's width (at 1,280 px the columns after the terms were off the edge)
    assert list(table.columns[:5]) == ["mention", "action", "terms (code exported)", "status", "confidence"]
    by_mention = dict(zip(table["mention"], table["coder's comment"]))
    with services.session_scope(url) as s:
        assert by_mention[services.mention(s, other)["text"]] == "which side? *left*"
        assert by_mention[services.mention(s, mid)["text"]] == ""
    assert set(table["edition"]) == {"1"}


def test_review_queue_filters_approves_sends_back_and_refuses_self_approval(team):
    url = team["url"]
    zhang = code_as(url, "zhang", 3)
    liu = code_as(url, "liu", 2)
    lead = code_as(url, "lead1", 1)
    at = app_as("lead1", "review.py")
    assert "**6** decision(s) match." in [m.value for m in at.markdown]
    at.multiselect(key="rv_coders").set_value(["zhang"])
    run(at)
    assert "**3** decision(s) match." in [m.value for m in at.markdown]
    # approve one chosen decision of zhang's
    assert len(at.multiselect(key="rv_pick").options) == 3
    ids = {m: latest(url, m)["id"] for m in zhang + liu + lead}
    at.multiselect(key="rv_pick").set_value([ids[zhang[0]]])
    run(at)
    at.button(key="rv_approve").click()
    run(at)
    assert [latest(url, m)["review_status"] for m in zhang] == ["approved", "unchecked", "unchecked"]
    # send one back: a note is required, then the mention goes back to the coders, first in the queue
    at.multiselect(key="rv_pick").set_value([ids[zhang[1]]])
    run(at)
    at.button(key="rv_back").click()
    run(at)
    assert any("Not sent back" in e.value for e in at.error)
    at.multiselect(key="rv_pick").set_value([ids[zhang[1]]])
    at.text_input(key="rv_note").set_value("the side is missing")
    run(at)
    at.button(key="rv_back").click()
    run(at)
    back = [m for m in zhang if latest(url, m)["review_status"] == "needs_rereview"]
    assert back == [zhang[1]] and "the side is missing" in latest(url, back[0])["review_note"]
    assert at.text_input(key="rv_note").value == ""  # that note was for that decision, not for the next one
    # bulk approve of every coder: the lead's own decision is refused with its reason
    at.multiselect(key="rv_coders").set_value([])
    run(at)
    assert at.button(key="rv_approve_all").disabled  # not before the lead says all shown were checked
    # nor through the picker's "Select all" + Approve chosen (a user test approved everything that way)
    every = [ids[m] for m in (zhang[2], *liu, *lead)]  # the unchecked ones: every decision shown
    assert len(at.multiselect(key="rv_pick").options) == len(every)
    at.multiselect(key="rv_pick").set_value(every)
    run(at)
    assert at.button(key="rv_approve").disabled and "tick the box" in at.button(key="rv_approve").help
    at.multiselect(key="rv_pick").set_value(every[:-1])  # fewer than all: chosen one by one, no box needed
    run(at)
    assert not at.button(key="rv_approve").disabled
    at.multiselect(key="rv_pick").set_value([])
    run(at)
    next(c for c in at.checkbox if c.key.startswith("rv_checked_")).check()
    run(at)
    at.button(key="rv_approve_all").click()
    run(at)
    assert any("your own decision" in e.value for e in at.error)
    assert latest(url, lead[0])["review_status"] == "unchecked"
    assert all(latest(url, m)["review_status"] == "approved" for m in liu)
    # the admin allows self-approval on the Users page; now the lead's own decision can be approved
    admin = page_as("root", "admin_users.py")  # the page alone: landing on the coding queue would claim a mention
    admin.toggle(key="au_self_approval").set_value(True)
    run(admin)
    at = app_as("lead1", "review.py")
    next(c for c in at.checkbox if c.key.startswith("rv_checked_")).check()
    run(at)
    at.button(key="rv_approve_all").click()
    run(at)
    assert latest(url, lead[0])["review_status"] == "approved"
    # the coder meets the sent-back mention first, with the lead's note
    with services.session_scope(url) as s:
        assert services.mention(s, back[0])["status"] == "rereview", services.mention(s, back[0])
    coder = app_as("zhang")
    held = on_screen(coder)  # the mention zhang's screen held: it stays until decided
    assert held not in zhang
    coder.button(key=f"accept_{held}").click()
    run(coder)
    assert on_screen(coder) == back[0]
    assert any("the side is missing" in w.value for w in coder.warning)
    # the box holding the very terms sent back says so (one key would save them again); other terms do not
    box = next(w for w in coder.multiselect if w.key.startswith("terms_"))
    sent_terms = latest(url, back[0])["terms"]
    again = lambda: any("the ones sent to re-review" in w.value for w in coder.warning)  # noqa: E731
    box.set_value(sent_terms)
    run(coder)
    assert again()
    box = next(w for w in coder.multiselect if w.key.startswith("terms_"))
    box.set_value([t for t in box.options if t not in sent_terms][:1])
    run(coder)
    assert not again()
    # the engine no longer answers the mention from the decision that was sent back (no sieve, no history 1.0)
    with services.session_scope(url) as s:
        sug = services.latest_suggestion(s, back[0])
    assert not any("sieve" in c.scores for c in sug.candidates)


def test_approve_all_approves_the_answers_shown_and_leaves_flags_and_skips_as_questions(team):
    """A user test: "Approve all shown" also sent the flags and skips shown, and each came back "refused"."""
    url = team["url"]
    answered = code_as(url, "zhang", 2)
    with services.session_scope(url) as s:
        rest = [m["id"] for m in services.mentions(s, team["bid"]) if m["id"] not in answered][:2]
        services.record_decision(s, rest[0], "liu", "flag", comment="which side?")
        services.record_decision(s, rest[1], "liu", "skip")
    at = app_as("lead1", "review.py")
    at.multiselect(key="rv_status").set_value([])  # every status: the skip shows too
    run(at)
    assert "**4** decision(s) match." in [m.value for m in at.markdown]
    assert at.button(key="rv_approve_all").label == "Approve the 2 answers shown"
    assert any("1 flag and 1 skip shown are questions" in c.value for c in at.caption)
    next(c for c in at.checkbox if c.key.startswith("rv_checked_")).check()
    run(at)
    at.button(key="rv_approve_all").click()
    run(at)
    assert not at.error, [e.value for e in at.error]  # nothing refused
    assert [latest(url, m)["review_status"] for m in answered] == ["approved", "approved"]
    assert [latest(url, m)["review_status"] for m in rest] == ["flagged", "unchecked"]


def test_a_sent_back_decision_keeps_its_relationship_unless_the_terms_change(team):
    """A user test: a mention coded "narrower" came back for re-review with "equivalent" as the default, so saving
    the same terms again changed the coding without the coder touching it. The coder who decided it meets it again."""
    url = team["url"]
    at = app_as("zhang")
    mid = on_screen(at)
    at.button(key=f"rel_source-is-narrower-than-target_{mid}").click()
    run(at)
    at.button(key=f"save_{mid}").click()
    run(at)
    first = latest(url, mid)
    assert first["relationship"] == "source-is-narrower-than-target"
    from db import review

    with services.session_scope(url) as s:
        assert review.send_back(s, [first["id"]], "lead1", "which side?")["sent_back"] == [first["id"]]
    # it goes back to zhang, who decided it (a user test's note reached whichever coder came next), once the
    # mention on zhang's screen is decided; a colleague is not served it
    assert on_screen(app_as("liu")) != mid
    coder = at
    held = on_screen(coder)
    assert held != mid
    coder.button(key=f"accept_{held}").click()
    run(coder)
    assert on_screen(coder) == mid
    assert any("(narrower)" in w.value.replace("\\", "") for w in coder.warning)  # with its relationship
    def box():  # the terms box as last drawn
        return next(w for w in coder.multiselect if w.key.startswith("terms_"))

    box().set_value(first["terms"])
    run(coder)
    narrower = coder.button(key=f"rel_source-is-narrower-than-target_{mid}")
    assert narrower.label.endswith("·") and coder.button(key=f"rel_equivalent_{mid}").label == "1 equivalent"
    box().set_value([t for t in box().options if t not in first["terms"]][:1])  # other terms: the usual default
    run(coder)
    assert coder.button(key=f"rel_equivalent_{mid}").label.endswith("·")
    box().set_value(first["terms"])
    run(coder)
    coder.button(key=f"save_{mid}").click()
    run(coder)
    again = latest(url, mid)
    assert again["id"] != first["id"] and again["terms"] == first["terms"]
    assert again["relationship"] == "source-is-narrower-than-target"
    # the lead sees that the answer to the send-back is the same terms again (a user test: it looked like any other)
    assert again["review_note"] == "answers the re-review (sent back by lead1: which side?): the same terms again"
    lead = app_as("lead1", "review.py")
    table = next(d.value for d in lead.dataframe if "note" in d.value.columns).set_index("mention")
    with services.session_scope(url) as s:
        text = services.mention(s, mid)["text"]
    assert table.loc[text, "status"] == "unchecked · re-review answer"  # where the lead looks first
    assert table.loc[text, "note"] == again["review_note"]
    # the rule is the database's: an answer recorded without a relationship (the API, a script) keeps it too
    with services.session_scope(url) as s:
        review.send_back(s, [again["id"]], "lead1", "still the side?")
        services.record_decision(s, mid, "liu", "correct", again["terms"])
    assert latest(url, mid)["relationship"] == "source-is-narrower-than-target"
    # a sent-back decision waits RETURN_HOURS for its coder, then goes to anyone (an absent coder's work moves on)
    from datetime import timedelta

    from db.models import Decision

    with services.session_scope(url) as s:
        review.send_back(s, [latest(url, mid)["id"]], "lead1", "and the approach?")
        services.ensure_user(s, "wu", role="coder")  # a colleague with nothing on screen
        assert services.next_mention(s, team["bid"], "wu", claim=False)["id"] != mid
        d = s.get(Decision, latest(url, mid)["id"])
        d.reviewed_at -= timedelta(hours=services.RETURN_HOURS + 1)
        s.commit()
        assert services.next_mention(s, team["bid"], "wu", claim=False)["id"] == mid


def test_a_colleague_is_told_the_last_mention_went_back_to_its_coder(team):
    """A user test: with only a sent-back mention left, on its coder's screen, a colleague was promised it "comes
    back to the queue after 15 minutes"; it is its coder's for 48 hours."""
    from db import review

    url = team["url"]
    with services.session_scope(url) as s:
        bid = services.create_batch(s, "one left", team["vid"], ["胆囊切除"])
        mid = services.mentions(s, bid)[0]["id"]
        d = services.record_decision(s, mid, "zhang", "reject")
        review.send_back(s, [d], "lead1", "看一下病历")
    liu = AppTest.from_file(APP, default_timeout=TIMEOUT)
    liu.session_state["auth_user"] = "liu"
    liu.query_params["batch"] = str(bid)
    run(liu)
    assert any("a lead sent back wait for the coders who decided them" in i.value for i in liu.info)
    with services.session_scope(url) as s:
        assert services.next_mention(s, bid, "zhang")["id"] == mid  # on zhang's screen now
    run(liu)
    said = [i.value for i in liu.info if "colleagues' screens" in i.value]
    assert said and "one a lead sent back, to the coder who decided it" in said[0], said


def test_only_a_lead_imports_a_file_s_terms_as_gold(team):
    """Gold trains the engine and measures it: a coder's file with a terms column (a re-imported export, say) is
    imported to be coded, and the page says its terms were not taken; a lead's file keeps them."""
    url = team["url"]
    for user, name, ward in (("zhang", "from a coder", "（5病区）"), ("lead1", "from a lead", "（7病区）")):
        data = f"mention,terms\n胆囊切除{ward},胆囊切除术\n阑尾{ward},\n".encode()
        at = app_as(user, "import_export.py")
        at.file_uploader(key="upload").set_value((f"{user}.csv", data, "text/csv"))
        at.text_input(key="batch_name").set_value(name)
        run(at)
        next(b for b in at.button if b.label == "Import").click()
        run(at)
        assert any("2 mention(s) imported" in x.value for x in at.success), [w.value for w in at.warning]
        with services.session_scope(url) as s:
            bid = next(b["id"] for b in services.batches(s) if b["name"] == name)
            gold = [services.mention(s, m["id"])["gold_terms"] for m in services.mentions(s, bid)]
        gold_said = any("Gold terms read from" in i.value for i in at.info)
        refused = " ".join(t.value.to_string() for t in [*at.table, *at.dataframe])
        if user == "zhang":
            assert gold == [[], []] and not gold_said
            assert "only a lead or an admin imports gold" in refused
        else:
            assert gold == [["胆囊切除术"], []] and gold_said


def test_a_coder_cannot_open_the_review_or_editions_page(team):
    for page in ("review.py", "editions.py"):
        at = page_as("zhang", page)
        assert any("lead role" in e.value for e in at.error)


def test_an_edition_file_that_cannot_be_read_is_named_once_in_the_error(team):
    at = app_as("lead1", "editions.py")
    at.file_uploader(key="ed_file").set_value(("empty.txt", b"", "text/plain"))
    run(at)
    at.button(key="ed_import").click()
    run(at)
    said = [e.value.replace("\\", "") for e in at.error]  # as it reads (the flash escapes Markdown)
    assert said and said[0].startswith("empty.txt: not imported: ") and said[0].count("empty.txt") == 1, said


def test_a_new_edition_uploaded_on_the_editions_page_sends_the_broken_decisions_to_rereview(team, tmp_path):
    url = team["url"]
    done = code_as(url, "zhang", 4)
    with services.session_scope(url) as s:
        terms = [latest(url, m)["terms"][0] for m in done]
        vocab = services.vocabulary_from_db(s, team["vid"])
    retired, renamed = terms[0], terms[1]
    keep = [t for t in terms[2:] if t not in (retired, renamed)]
    lines = ["code,name"]
    for name in vocab.names:
        if name == retired:
            continue
        for code in vocab.codes[name]:
            lines.append(f"{code},{name + '（新名）' if name == renamed else name}")
    new_file = tmp_path / "procedures-2027.csv"
    new_file.write_text("\n".join(lines) + "\n", encoding="utf-8")

    # AppTest cannot upload a file: the upload itself is driven in tests/test_decisions_browser.py; here the
    # import is the call the page makes with the uploaded file
    from db import editions
    from termnorm.loaders import load_vocabulary

    with services.session_scope(url) as s:
        out = editions.import_edition(s, team["vid"], load_vocabulary(new_file, name="demo-procedures"), "2027",
                                      "lead1", source_file=new_file.name)
    assert out["counts"]["retired"] == 1 and out["counts"]["renamed"] == 1 and out["rereview"] == \
        sum(1 for t in terms if t in (retired, renamed))
    at = app_as("lead1", "editions.py")
    assert any("Edition in force: **2**" in m.value for m in at.markdown)
    tables = [t.value for t in at.dataframe]
    assert any("renamed" in df.columns and list(df["renamed"])[0] == 1 for df in tables)
    # the coder meets the re-review mentions first, with the reason, and suggestions of edition 2
    coder = app_as("zhang")
    held = on_screen(coder)  # the mention zhang's screen held when the edition came: it stays until decided
    assert held not in done
    coder.button(key=f"accept_{held}").click()
    run(coder)
    first = on_screen(coder)
    assert first in done[:2] and any("retired in edition 2" in w.value or "renamed" in w.value
                                      for w in coder.warning)
    options = coder.multiselect(key=f"terms_{first}").options
    assert retired not in options and renamed not in options and renamed + "（新名）" in options
    # the decisions that kept their term are untouched
    assert all(latest(url, m)["review_status"] == "unchecked" for m, t in zip(done, terms) if t in keep)
    # the Vocabulary page: the old name finds the renamed term first (a synonym now); a retired name is said so
    # (a user test found other terms first for the old name, and nothing said of a retired one)
    vocab_page = app_as("zhang", "vocabulary_browser.py")
    vocab_page.text_input(key="vocab_q").set_value(renamed)
    run(vocab_page)
    found = vocab_page.dataframe[0].value
    assert (found.term.iloc[0], found["found as"].iloc[0]) == (renamed + "（新名）", "synonym")
    assert any(f"{renamed} (" in w.value and f"renamed in edition 2 (2027): now {renamed}（新名）" in w.value
               for w in vocab_page.warning), [w.value for w in vocab_page.warning]
    assert vocab_page.selectbox(key="vocab_term").value == renamed + "（新名）"  # the successor opens
    vocab_page.text_input(key="vocab_q").set_value(retired)
    run(vocab_page)
    assert any(w.value.startswith(f"{retired} (") and "retired in edition 2 (2027)" in w.value
               for w in vocab_page.warning), [w.value for w in vocab_page.warning]
    # its results are other terms: none opens as if it were the retired name's (a user test read one so)
    assert vocab_page.selectbox(key="vocab_term").value is None
    assert "Codes and hierarchy" not in [h.value for h in vocab_page.subheader]
    assert retired not in vocab_page.dataframe[0].value.term.tolist()
    vocab_page.selectbox(key="vocab_term").set_value(vocab_page.dataframe[0].value.term.iloc[1])
    run(vocab_page)
    assert [h.value for h in vocab_page.subheader][:2] == ["Codes and hierarchy", "Synonyms"]
    assert not vocab_page.exception


def test_the_edition_tabs_count_every_change_not_the_stored_list(team, tmp_path, monkeypatch):
    """A user test's edition added 13,464 names; its tab read "added (2000)", the length of the list kept."""
    from db import editions
    from termnorm.loaders import load_vocabulary

    monkeypatch.setattr(editions, "DIFF_LIST_LIMIT", 2)
    with services.session_scope(team["url"]) as s:
        vocab = services.vocabulary_from_db(s, team["vid"])
    new_file = tmp_path / "procedures-2027.csv"
    new_file.write_text("code,name\n" + "".join(f"{c},{n}\n" for n in vocab.names for c in vocab.codes[n])
                        + "".join(f"99.{i:02d},新增操作{i}\n" for i in range(5)), encoding="utf-8")
    with services.session_scope(team["url"]) as s:
        out = editions.import_edition(s, team["vid"], load_vocabulary(new_file, name="demo-procedures"), "2027",
                                      "lead1", source_file=new_file.name)
    assert out["counts"]["added"] == 5
    at = app_as("lead1", "editions.py")
    assert [t.label for t in at.tabs] == ["renamed (0)", "retired (0)", "code changed (0)",
                                          "added (5; the first 2 listed)"]


def test_a_lead_sees_who_holds_what_and_releases_it(team):
    url = team["url"]
    at_zhang = app_as("zhang")  # the coding page claims the mention on zhang's screen
    held = on_screen(at_zhang)
    with services.session_scope(url) as s:
        assert [(c["coder"], c["mention_id"]) for c in services.claims(s, team["bid"])] == [("zhang", held)]
        with pytest.raises(PermissionError):
            services.release_claims(s, "liu", team["bid"], "zhang")  # a coder cannot free a colleague's mention
    at = app_as("lead1", "review.py")
    assert any("1 open mention(s) of this batch are on coders' screens now" in e.label for e in at.expander)
    at.button(key="rv_release_0").click()
    run(at)
    with services.session_scope(url) as s:
        assert services.claims(s, team["bid"]) == []
        log = services.audit_frame(s)
        assert "release_claims" in set(log["action"])
    # the released mention is served to the next coder who asks
    with services.session_scope(url) as s:
        assert services.next_mention(s, team["bid"], "liu")["id"] == held
    # the panel follows the Review filter's batch, not the sidebar's (a user test saw none for the batch it filtered)
    with services.session_scope(url) as s:
        other = services.create_batch(s, "第二批", team["vid"], ["胆囊切除", "阑尾切除"])
        services.next_mention(s, other, "zhang")
    at = app_as("lead1", "review.py")
    assert at.session_state["batch_id"] != other
    batch_box = next(b for b in at.selectbox if b.key.startswith("rv_batch_"))
    batch_box.set_value(other)
    run(at)
    panel = [e.label for e in at.expander if "on coders' screens now" in e.label]
    assert panel == ["1 open mention(s) of this batch are on coders' screens now"], panel
    batch_box = next(b for b in at.selectbox if b.key.startswith("rv_batch_"))
    batch_box.select_index(0)  # every batch
    run(at)
    assert any("2 open mention(s) of these batches" in e.label for e in at.expander)  # zhang in one, liu in the other


def test_a_coder_who_leaves_frees_the_mention_on_screen_and_comes_back_to_the_last_batch(team):
    """Seen in a browser: a coder who signed out or switched batch kept the mention on screen from colleagues
    for CLAIM_MINUTES, and a new sign-in opened the first batch of the list, not the one they were coding."""
    url = team["url"]
    with services.session_scope(url) as s:
        second = services.create_batch(s, "second", team["vid"], ["阑尾切除", "胆囊切除", "甲状腺全部切除"])
    at = app_as("zhang")
    held = on_screen(at)  # the first batch's first mention, claimed by zhang
    with services.session_scope(url) as s:
        assert services.next_mention(s, team["bid"], "liu", claim=False)["id"] != held
    at.selectbox(key="_batch").set_value(second)
    run(at)
    with services.session_scope(url) as s:
        assert services.next_mention(s, team["bid"], "liu", claim=False)["id"] == held  # freed at the switch
    mid = on_screen(at)
    at.button(key=f"accept_{mid}").click()
    run(at)
    on_second = on_screen(at)  # the second batch's next mention, now on zhang's screen
    with services.session_scope(url) as s:
        assert services.next_mention(s, second, "liu", claim=False)["id"] != on_second
        third = services.create_batch(s, "third", team["vid"], ["脾切除", "肾切除"])
        left = services.next_mention(s, third, "zhang")["id"]  # a claim left in another batch (another tab)
    next(b for b in at.button if b.label == "Sign out").click()
    run(at)
    with services.session_scope(url) as s:
        assert services.next_mention(s, second, "liu", claim=False)["id"] == on_second  # freed at the sign-out
        assert services.next_mention(s, third, "liu", claim=False)["id"] == left  # so is the other batch's
    again = app_as("zhang")  # a new sign-in (a new browser session) at the bare address
    assert again.selectbox(key="_batch").value == second and on_screen(again) == on_second
    with services.session_scope(url) as s:  # the second batch finished: a new sign-in opens the list's first
        for m in services.mentions(s, second):
            if m["status"] not in services.FINAL_STATUSES:
                services.record_decision(s, m["id"], "zhang", "reject")
    assert app_as("zhang").selectbox(key="_batch").value == team["bid"]
    fresh = app_as("liu")  # liu has no decision yet: the first batch, as before
    assert fresh.selectbox(key="_batch").value == team["bid"]


def test_signing_out_in_one_browser_leaves_the_mention_the_other_browser_shows(team):
    """Seen in a browser: a coder signed in on two machines signed out on one, and the mention the other showed
    (claims are per user) went to a colleague while the coder was deciding it."""
    url = team["url"]
    with services.session_scope(url) as s:
        auth.create_session(s, "zhang")  # zhang's other browser, signed in with its cookie
    at, other = app_as("zhang"), app_as("zhang")
    held = on_screen(at)
    assert on_screen(other) == held
    next(b for b in at.button if b.label == "Sign out").click()
    run(at)
    with services.session_scope(url) as s:
        assert services.next_mention(s, team["bid"], "liu", claim=False)["id"] != held  # still zhang's
    other.button(key=f"accept_{held}").click()
    run(other)
    assert latest(url, held)["action"] == "accept" and on_screen(other) != held


def test_a_coder_disabled_while_their_page_is_open_saves_nothing(team):
    """Seen in a browser: an account disabled by an admin could still save the decision on its open page (the
    click's callback ran before the page re-checked who is signed in)."""
    url = team["url"]
    at = app_as("zhang")
    mid = on_screen(at)
    with services.session_scope(url) as s:
        auth.set_disabled(s, "root", "zhang", True)
    at.button(key=f"reject_{mid}").click()
    at.run()
    with services.session_scope(url) as s:
        assert services.mention(s, mid)["decision"] is None
        with pytest.raises(PermissionError, match="disabled"):
            services.record_decision(s, mid, "zhang", "reject")
        with pytest.raises(PermissionError, match="disabled"):
            services.add_synonym(s, team["vid"], "甲状腺病损切除术", "甲状腺肿物切除", "zhang")
