"""Decisions in a real browser: `streamlit run app.py` driven by Playwright in Debian's Chromium (no browser download).

What a coder and a lead do with the mouse and the keyboard, checked in the database rows it writes:

* **late clicks never land on the wrong mention** -- Accept, then the ``A`` key pressed again and again while the
  next mention is being drawn: Streamlit keeps the previous mention's buttons (and their shortcuts) live for a
  moment, and each of those presses used to write a second ``accept`` on the mention already decided. Every
  mention must end with at most one decision, and the page says a late click was ignored;
* **Clear the box, then Save at once** saves nothing (an empty box), never the engine's terms;
* **the relationship set with one key** (``3`` = the mention is broader than its term) and **the exported code
  switched with one click** (the category ``06.4`` instead of the leaf ``06.4x00``) are what the decision stores;
* **the lead's review queue**: the Review page shows the coder's decisions, "Approve all shown" approves them.

With ``TERMNORM_SCREENSHOTS=1`` the screenshots go to ``benchmarks/results/``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from browser import (
    REPO,
    chromium_page,
    cut_short,
    free_port,
    health_url,
    settle,
    start_streamlit,
    stop,
    wait_http,
)


@pytest.fixture
def app(tmp_path):
    """Demo data, a coder's and a lead's name, one small batch with a two-code term; the app on a free port."""
    yield from _app(tmp_path)


@pytest.fixture
def slow_app(tmp_path):
    """The same with a 3-second dwell rule (a decision sooner than that after a mention appears is refused)."""
    yield from _app(tmp_path, TERMNORM_MIN_DWELL_S="3")


def _app(tmp_path, **env_more):
    from db import services
    from app_pages import _ui

    url = f"sqlite:///{tmp_path / 'decisions.sqlite3'}"
    services.init_db(url)
    with services.session_scope(url) as s:
        first = _ui.seed_demo(s)[0]
        services.ensure_user(s, "lead", role="lead")  # no password: with TERMNORM_AUTH=off the typed name signs in
        vid = services.vocabulary_id(s, "demo-procedures")
        codes_batch = services.create_batch(s, "two codes", vid, ["甲状腺全部切除", "胆囊切除"])
    services.dispose(url)
    port = free_port()
    env = dict(os.environ, TERMNORM_DB_URL=url, TERMNORM_AUTH="off")
    env.pop("TERMNORM_MIN_DWELL_S", None)  # the coding page's own guard against a decision nobody could have read
    env.update(env_more)
    proc = start_streamlit(port, env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_http(health_url(port), 60, proc)
        yield {"base": f"http://127.0.0.1:{port}", "url": url, "codes_batch": codes_batch, "first_batch": first,
               "pid": proc.pid}
    finally:
        stop(proc)
        services.dispose(url)


@pytest.fixture
def page():
    with chromium_page(1400, 1600) as pg:
        yield pg


def button(pg, key: str):
    """The button keyed ``key`` once Streamlit has dropped any copy of it from the run before."""
    loc = pg.locator(f".st-key-{key} button[data-testid^='stBaseButton']")
    pg.wait_for_function(f"document.querySelectorAll(\".st-key-{key} button[data-testid^='stBaseButton']\").length === 1")
    return loc


def on_screen(pg) -> int:
    """The id of the mention on screen (its terms box is keyed terms_<id>)."""
    cls = pg.locator("[class*='st-key-terms_']").first.get_attribute("class")
    return int(re.search(r"st-key-terms_(\d+)", cls).group(1))


def decisions(url: str) -> list[dict]:
    from db import services

    with services.session_scope(url) as s:
        return services.decisions_frame(s, history=True).to_dict(orient="records")


def quiet(pg, url: str) -> None:
    """Until a burst of keys has had all its effect: settled, and one second later still the same mention on
    screen and the same decisions. Seen once in a CI clone run: the burst's last press (mention 6 on screen,
    a legitimate accept) was processed after the page had looked idle for half a second, so the test took
    mention 6 for undecided and then found its accept after Clear + Save."""
    for _ in range(10):
        settle(pg)
        before = (on_screen(pg), len(decisions(url)))
        pg.wait_for_timeout(1000)
        settle(pg)
        if (on_screen(pg), len(decisions(url))) == before:
            return


def leave_box_and_press(pg, app, key: str) -> None:
    """Esc out of the box being typed in, then ``key`` once the dwell rule allows it, and wait for its effect."""
    pg.keyboard.press("Escape")
    pg.wait_for_function("document.activeElement === document.body")
    pg.wait_for_timeout(600)  # past the dwell rule (MIN_GAP_S)
    pg.keyboard.press(key)
    quiet(pg, app["url"])


def shot(pg, tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    pg.screenshot(path=str(path), full_page=True)
    assert path.stat().st_size > 20_000
    if os.environ.get("TERMNORM_SCREENSHOTS") == "1":
        shutil.copyfile(path, REPO / "benchmarks" / "results" / name)


def test_late_clicks_and_keys_never_decide_another_mention(app, page, tmp_path):
    page.goto(app["base"] + "/")
    page.wait_for_selector("table.tn-cands")
    settle(page)
    first = on_screen(page)
    for _ in range(3):  # three rounds: Accept, then the A key hammered while the next mention is drawn
        button(page, f"accept_{on_screen(page)}").click()
        for _ in range(6):
            page.keyboard.press("a")
            page.wait_for_timeout(60)
        quiet(page, app["url"])
    rows = decisions(app["url"])
    per_mention = {}
    for r in rows:
        per_mention.setdefault(r["mention_id"], []).append(r["action"])
    assert rows and first in per_mention
    assert all(len(a) == 1 for a in per_mention.values()), per_mention  # nothing decided twice
    assert all(a == ["accept"] for a in per_mention.values())
    assert len(per_mention) >= 3  # the burst did decide the mentions that were on screen
    assert on_screen(page) not in per_mention  # the mention on screen now is undecided

    # Clear the box, then Save at once: an empty box, so nothing is saved (never the engine's terms)
    current = on_screen(page)
    button(page, f"clear_{current}").click()
    button(page, f"save_{current}").click()
    settle(page)
    # on failure, say what was saved and when (once seen in CI: a decision for the mention on screen here)
    late = [r for r in decisions(app["url"]) if r["mention_id"] == current]
    assert not late, late
    assert on_screen(page) == current
    shot(page, tmp_path, "coding_late_clicks.png")


# a click on Skip, then -- the instant the page marks the run before's elements stale, as Streamlit does when the
# next run begins -- a click on the same Skip button still on screen, and the K key
_PRESS_WHILE_DRAWN = """mid => new Promise(done => {
  const skip = () => document.querySelector(`.st-key-skip_${mid} button`);
  const seen = new MutationObserver(() => {
    if (!document.querySelector('[data-testid="stMain"] [data-stale="true"] button')) return;
    seen.disconnect();
    skip().click();
    document.body.dispatchEvent(new KeyboardEvent('keydown', {key: 'k', code: 'KeyK', bubbles: true}));
    const note = document.querySelector('[data-testid="tn-not-yet"]');
    done(note && note.style.display !== 'none' ? note.textContent : null);
  });
  seen.observe(document.body, {subtree: true, attributes: true, attributeFilter: ['data-stale']});
  skip().click();
})"""


def test_a_press_while_the_page_is_drawn_is_refused_in_words(app, page):
    """A helper's browser run under load: Skip clicked about 1 s after the next mention's text showed was refused,
    as "still being drawn (a repeated press?)" or by the browser's guard without a word. Streamlit keeps the run
    before's buttons live until their new copies come, so the click had reached the previous mention's Skip. A
    press while the page is drawn is now dropped in the browser and said there; the next one, once the page is
    still, is taken."""
    page.goto(app["base"] + "/")
    page.wait_for_selector("table.tn-cands")
    settle(page)
    first = on_screen(page)
    page.wait_for_timeout(600)  # past the dwell rule (MIN_GAP_S)
    note = page.evaluate(_PRESS_WHILE_DRAWN, first)
    assert note and "still being drawn" in note and "press again once the page is still, if you meant it" in note, note
    settle(page)
    second = on_screen(page)
    assert second != first
    assert [(r["mention_id"], r["action"]) for r in decisions(app["url"])] == [(first, "skip")]
    # the server had nothing to refuse: no click reached it for a page not drawn
    assert not page.get_by_text(re.compile("Ignored a click")).count()
    page.wait_for_timeout(600)
    page.keyboard.press("k")
    quiet(page, app["url"])
    assert [(r["mention_id"], r["action"]) for r in decisions(app["url"])] == [(first, "skip"), (second, "skip")]


def first_mention_still(app, pg):
    """The home page's first mention, past the dwell rule (MIN_GAP_S), and the browser guard's note."""
    pg.goto(app["base"] + "/")
    pg.wait_for_selector("table.tn-cands")
    settle(pg)
    first = on_screen(pg)
    pg.wait_for_timeout(600)
    return first, pg.locator("[data-testid='tn-not-yet']")


def test_a_press_the_server_does_not_answer_is_said_and_can_be_repeated(app, page):
    """A browser test lost a Skip twice while another engine was being built: no run began, nothing on the page,
    and the skip was saved only with the coder's next click, minutes later. A press the server has not answered
    within 3 s is now said on the page (here the server is paused: SIGSTOP); once it answers, the press counts
    once."""
    import signal

    first, note = first_mention_still(app, page)
    os.kill(app["pid"], signal.SIGSTOP)
    try:
        button(page, f"skip_{first}").click()
        page.wait_for_timeout(1500)
        assert not note.is_visible()  # not before its time: a busy server may take a second or two
        page.wait_for_function("document.querySelector(\"[data-testid='tn-not-yet']\")?.style.display === 'block'",
                               timeout=5000)
        assert "has not reached the server" in note.inner_text() and "press again" in note.inner_text()
    finally:
        os.kill(app["pid"], signal.SIGCONT)
    quiet(page, app["url"])
    assert [(r["mention_id"], r["action"]) for r in decisions(app["url"])] == [(first, "skip")]
    # the next press is answered; should it not be (once in five runs while this was written: the rerun request
    # never started a run, cause not found), the page says so and the press made again is taken
    page.wait_for_timeout(600)
    second = on_screen(page)
    button(page, f"skip_{second}").click()
    for _ in range(100):
        if len(decisions(app["url"])) == 2:
            break
        if note.is_visible() and "has not reached the server" in note.inner_text():
            button(page, f"skip_{second}").click()
        page.wait_for_timeout(200)
    quiet(page, app["url"])
    assert [(r["mention_id"], r["action"]) for r in decisions(app["url"])] == [(first, "skip"), (second, "skip")]


def two_presses_behind_a_held_save(app, pg, press, press_again) -> None:
    """Both presses made while the server is paused (SIGSTOP: queued, as under load); once it resumes, the first
    one's save waits 2 s at the database: another connection holds SQLite's write lock (readers do not wait)."""
    import signal
    import sqlite3

    writer = sqlite3.connect(app["url"].removeprefix("sqlite:///"), isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")
    try:
        os.kill(app["pid"], signal.SIGSTOP)
        try:
            press()
            press_again()
        finally:
            os.kill(app["pid"], signal.SIGCONT)
        pg.wait_for_timeout(2000)  # both runs have begun; the first one's save waits on the lock
    finally:
        writer.execute("ROLLBACK")
        writer.close()


def test_a_press_queued_behind_a_save_does_not_redraw_the_mention_it_decided(app, page):
    """Streamlit's fast reruns start a new script thread for a press that arrives while the run before is still
    saving. That run read the queue before the save was committed and drew the mention just skipped again (seen
    once in the test above). Here the first save is held at the database: another connection holds SQLite's
    write lock while both presses reach the server. The page must move on, with one decision."""
    first, note = first_mention_still(app, page)

    def press() -> None:
        button(page, f"skip_{first}").click()
        page.wait_for_function("document.querySelector(\"[data-testid='tn-not-yet']\")?.style.display === 'block'",
                               timeout=6000)

    guard_said = []

    def press_again() -> None:  # as the note says
        button(page, f"skip_{first}").click()
        page.wait_for_timeout(300)
        guard_said.append(note.inner_text() if note.is_visible() else "")

    two_presses_behind_a_held_save(app, page, press, press_again)
    quiet(page, app["url"])
    assert [(r["mention_id"], r["action"]) for r in decisions(app["url"])] == [(first, "skip")]
    assert on_screen(page) != first
    assert not note.is_visible() or "has not reached" not in note.inner_text()
    # the press made again is said in words: dropped by the browser's guard (the paused run's page went stale), or
    # refused by the server as already decided or as a second press. Which one depends on timing: a CI run saw no
    # refusal from the server (the guard's note is gone 2.5 s after it shows, so it is read at the press)
    said = page.locator("[data-testid='stAlert']").all_inner_texts()
    assert "Not taken" in guard_said[0] or any("already decided" in t or "Ignored a second click" in t
                                               for t in said), (guard_said, said)


def test_an_annotators_save_queued_behind_a_save_does_not_redraw_the_mention_answered(app, page):
    """The same on the Annotate page: a second Save that reaches the server while the first is held at the
    database waits for it, and the page then shows the next mention of the gold task with one answer saved."""
    from db import gold, services

    with services.session_scope(app["url"]) as s:
        for name in ("ann", "bea"):
            services.ensure_user(s, name, role="annotator")
        task = gold.create_gold_task(s, "lead", "blind", app["codes_batch"], ["ann", "bea"])
        first, second = [m["mention_id"] for m in gold.annotation_queue(s, task, "ann")]
    page.goto(app["base"] + "/?coder=ann")  # an annotator's home page
    save = page.locator(f".st-key-an_save_{task}_{first} button")
    save.wait_for()
    settle(page)
    page.locator(f".st-key-an_q_{task}_{first} input").fill("胆囊")
    page.locator(f".st-key-an_add_{task}_{first}_0 button").click()
    settle(page)
    two_presses_behind_a_held_save(app, page, lambda: (save.click(), page.wait_for_timeout(500)), save.click)
    page.locator(f".st-key-an_save_{task}_{second} button").wait_for(timeout=15000)
    settle(page)
    assert page.locator(f".st-key-an_save_{task}_{first} button").count() == 0
    with services.session_scope(app["url"]) as s:
        answered = [m["terms"] is not None for m in gold.annotation_queue(s, task, "ann")]
    assert answered == [True, False]


def test_the_only_mention_left_skipped_comes_back_at_its_top_with_the_reason(app, page):
    """A user test skipped the only mention left with the Skip button, below the candidates: the same mention came
    back scrolled as it was, the note saying why out of sight, as if nothing had happened."""
    from db import services

    with services.session_scope(app["url"]) as s:
        first, other = [m["id"] for m in services.mentions(s, app["codes_batch"])]
        assert services.claim(s, other, "dana")  # a colleague holds the other one
    page.set_viewport_size({"width": 1400, "height": 700})
    page.goto(f"{app['base']}/?batch={app['codes_batch']}")
    page.wait_for_selector("table.tn-cands")
    settle(page)
    assert on_screen(page) == first
    page.wait_for_timeout(600)  # past the dwell rule (MIN_GAP_S)
    button(page, f"skip_{first}").scroll_into_view_if_needed()
    main = "document.querySelector('[data-testid=\"stMain\"]')"
    assert page.evaluate(f"{main}.scrollTop") > 0
    button(page, f"skip_{first}").click()
    note = page.locator("[data-testid='stAlert']", has_text="only one left for you")
    note.wait_for(timeout=15000)
    settle(page)
    page.wait_for_function(f"{main}.scrollTop === 0", timeout=5000)
    assert on_screen(page) == first and note.is_visible() and note.bounding_box()["y"] < 700
    assert [(r["mention_id"], r["action"]) for r in decisions(app["url"])] == [(first, "skip")]


def test_relationship_by_key_and_code_switch_by_click(app, page, tmp_path):
    page.goto(f"{app['base']}/?batch={app['codes_batch']}")
    page.wait_for_selector("table.tn-cands")
    settle(page)
    mid = on_screen(page)
    assert "甲状腺全部切除术" in page.locator("[class*='st-key-terms_']").first.inner_text()
    switch = page.locator(f"[class*='st-key-code_{mid}_']")
    # the leaf is exported by default; one click: the category code
    assert switch.locator("[role=radio][aria-checked=true]").inner_text() == "06.4x00 · leaf"
    switch.locator("[role=radio]", has_text="06.4 · category").click()
    settle(page)
    assert switch.locator("[role=radio][aria-checked=true]").inner_text() == "06.4 · category"
    # one key: the relationship (3 = the mention is broader than its term)
    page.evaluate("document.activeElement && document.activeElement.blur()")  # no input focused: shortcuts apply
    page.keyboard.press("3")
    settle(page)
    assert button(page, f"rel_source-is-broader-than-target_{mid}").get_attribute("data-testid") == \
        "stBaseButton-primary"
    shot(page, tmp_path, "coding_relationship_code.png")
    page.keyboard.press("s")
    settle(page)
    d = next(r for r in decisions(app["url"]) if r["mention_id"] == mid)
    assert d["terms"] == ["甲状腺全部切除术"] and d["codes"] == ["06.4"]
    assert d["relationship"] == "source-is-broader-than-target" and d["review_status"] == "unchecked"


def test_enter_after_typing_in_the_terms_box_adds_one_term_not_every_match(app, page, tmp_path):
    """Streamlit's multiselect offers "Select N matches" first when the typed text matches several options: Enter
    put every 甲状腺 term in the box, and the mistaken decision was learned at once. The boxes turn it off."""
    page.goto(f"{app['base']}/?batch={app['codes_batch']}")
    page.wait_for_selector("table.tn-cands")
    settle(page)
    mid = on_screen(page)
    box = page.locator(f"[class*='st-key-terms_{mid}']").first  # redrawn as terms_<id>_v1 when the server reads it

    def in_box() -> list[str]:
        return [t for t in box.inner_text().splitlines()[1:] if t.strip()]  # under the label: one line per term

    before = in_box()
    page.locator(f".st-key-terms_{mid} input").click()
    page.keyboard.type("甲状腺")
    page.wait_for_selector("[role='option']")
    offered = page.locator("[role='option']").all_inner_texts()
    assert len(offered) > 1 and not any("match" in o.lower() for o in offered), offered
    page.keyboard.press("Enter")
    settle(page)
    after = in_box()
    assert len(after) == len(before) + 1 and after[:len(before)] == before, (before, after)
    assert after[-1] == offered[0], (after, offered)  # the option the list showed first
    # Esc leaves the box, and the next key saves what it holds (a user test's keys went on typing into it)
    leave_box_and_press(page, app, "s")
    saved = [r for r in decisions(app["url"]) if r["mention_id"] == mid]
    assert len(saved) == 1 and sorted(saved[0]["terms"]) == sorted(after), (saved, after)


def test_a_term_typed_into_the_terms_box_by_code_or_synonym_and_other_text_goes_to_the_search(app, page, tmp_path):
    """The box offered only the engine's candidates: a user test typed 脑池穿刺, a term of the vocabulary no candidate
    held, and read "No results". Now a typed code or synonym puts its term in the box (a typed code is the one
    exported); other text is never saved as a term: it moves to the vocabulary search below, with a message under
    the box, and the coder adds a result from there. Enter takes what was typed: a second user test typed the name
    of a term already in the box and got another term holding it, and a second Enter added the list's first
    option."""
    page.goto(f"{app['base']}/?batch={app['codes_batch']}")
    page.wait_for_selector("table.tn-cands")
    settle(page)
    mid = on_screen(page)

    def in_box() -> list[str]:
        box = page.locator(f"[class*='st-key-terms_{mid}']").first
        return [t for t in box.inner_text().splitlines()[1:] if t.strip()]

    def type_in_box(text: str, enters: int = 1, click: bool = True) -> None:
        if click:
            page.locator(f"[class*='st-key-terms_{mid}'] input").first.click()
        page.keyboard.type(text)
        page.wait_for_selector("[role='option']")
        for _ in range(enters):
            page.keyboard.press("Enter")
        settle(page)

    before = in_box()
    assert before == ["甲状腺全部切除术"], before
    # its name again: the list offers 腔镜下甲状腺全部切除术 first, and Enter must not take it; a second Enter neither
    type_in_box("甲状腺全部切除术", enters=2)
    assert in_box() == before, in_box()
    assert page.locator(f"[class*='st-key-terms_{mid}'] input").first.input_value() == ""  # the text went
    type_in_box("51.2300", enters=2)  # a code: 腹腔镜下胆囊切除术; the second Enter adds nothing
    # beside the untouched suggestion: said so (a team test saved a typed code with the wrong suggestion still in)
    assert page.get_by_text("Added beside the suggested 甲状腺全部切除术: remove it (×)").count() == 1
    # the box keeps the keys: a user test's next code went to the page's shortcuts once the box was redrawn;
    # and text typed while the server reads the entry before is kept (a third user test's "51.2300" became ".2300")
    page.keyboard.type("06.4")  # the category code of the term in the box: the code it exports
    page.wait_for_selector("[role='option']")
    page.keyboard.press("Enter")
    page.keyboard.type("ERCP", delay=40)  # a synonym: 内镜逆行胰胆管造影[ERCP], typed while the server reads 06.4
    page.wait_for_timeout(1500)  # the server's answer to 06.4 has redrawn the box
    assert page.locator(f"[class*='st-key-terms_{mid}'] input").first.input_value() == "ERCP"
    page.keyboard.press("Enter")
    settle(page)
    assert not decisions(app["url"])
    switch = page.locator(f"[class*='st-key-code_{mid}_']")
    assert switch.locator("[role=radio][aria-checked=true]").inner_text() == "06.4 · category"
    assert in_box() == [*before, "腹腔镜下胆囊切除术", "内镜逆行胰胆管造影[ERCP]"], in_box()
    assert page.get_by_text("“ERCP” (synonym) → 内镜逆行胰胆管造影[ERCP]").count() == 1  # said under the box
    assert page.locator(".tn-code", has_text="51.2300").count() >= 1  # the code row of the term typed by its code
    type_in_box("胆囊切除术后")  # no term's name, code or synonym, and no candidate holds it
    assert in_box() == [*before, "腹腔镜下胆囊切除术", "内镜逆行胰胆管造影[ERCP]"], in_box()
    assert page.get_by_text("“胆囊切除术后” names no term of this vocabulary by itself").count() == 1
    search = page.locator(f".st-key-q_{mid} input")
    assert search.input_value() == "胆囊切除术后"
    found = page.locator(f"[class*='st-key-pick_{mid}_0'] button")
    found.wait_for()
    shot(page, tmp_path, "coding_typed_terms.png")
    found.click()  # the first result (胆囊切除术, the name it holds)
    settle(page)
    boxed = in_box()
    assert len(boxed) == 4 and boxed[:3] == [*before, "腹腔镜下胆囊切除术", "内镜逆行胰胆管造影[ERCP]"], boxed
    page.evaluate("document.activeElement && document.activeElement.blur()")  # off the Add button: keys apply
    page.wait_for_timeout(600)  # past the dwell rule (MIN_GAP_S)
    page.keyboard.press("s")
    quiet(page, app["url"])
    saved = [r for r in decisions(app["url"]) if r["mention_id"] == mid]
    assert len(saved) == 1 and saved[0]["terms"] == boxed, (saved, boxed)
    assert saved[0]["codes"][:3] == ["06.4", "51.2300", "51.1000"] and saved[0]["action"] == "correct"


def test_a_comment_typed_before_a_decision_key_is_kept_and_enter_in_it_flags(app, page, tmp_path):
    """A user test typed a note for the lead, pressed Esc and then A: the decision was saved without it (the box
    was a form, whose text reached the server only with its own Flag button)."""
    page.goto(f"{app['base']}/?batch={app['codes_batch']}")
    page.wait_for_selector("table.tn-cands")
    settle(page)
    first = on_screen(page)
    page.locator(f".st-key-comment_{first} input").click()
    page.keyboard.type("与病历核对过")
    leave_box_and_press(page, app, "a")
    saved = [r for r in decisions(app["url"]) if r["mention_id"] == first]
    assert [(d["action"], d["comment"]) for d in saved] == [("accept", "与病历核对过")], saved
    # the next mention: Enter in the comment box flags it for a lead, with the comment
    second = on_screen(page)
    assert second != first and not page.locator(f".st-key-comment_{second} input").input_value()
    page.locator(f".st-key-comment_{second} input").click()
    page.keyboard.type("两个部位？")
    page.keyboard.press("Enter")
    page.get_by_text("Nothing left for you").wait_for()  # its last mention: the batch is done
    flagged = [r for r in decisions(app["url"]) if r["mention_id"] == second]
    assert [(d["action"], d["comment"]) for d in flagged] == [("flag", "两个部位？")], flagged


def test_lead_approves_the_shown_decisions(app, page, tmp_path):
    from db import services

    with services.session_scope(app["url"]) as s:
        bid = next(b["id"] for b in services.batches(s) if b["name"] == "demo procedures")
        for m in services.mentions(s, bid)[:4]:
            sug = services.latest_suggestion(s, m["id"])
            if sug is None:
                from app_pages import _ui

                holder = _ui.build_holder(app["url"], services.vocabulary_id(s, "demo-procedures"))
                sug = holder.suggest_and_store(s, [m["id"]], [m["text"]])[0]
            services.record_decision(s, m["id"], "coder", "accept")
    open_as_lead(app, page, "Review")  # in the same session: a new page load forgets the typed name
    page.wait_for_selector("text=decision(s) match")
    settle(page)
    assert "4" in page.locator("text=decision(s) match").first.inner_text()
    shot(page, tmp_path, "review_page.png")
    page.get_by_text("I have checked all 4 decisions shown").click()
    settle(page)
    approve = button(page, "rv_approve_all")
    assert approve.inner_text() == "Approve all 4 shown"
    for width in (1400, 1100):  # a laptop's window: the actions and the status filter's two chips are not cut
        page.set_viewport_size({"width": width, "height": 1600})
        settle(page)
        assert cut_short(page, "[data-testid=stMain] [data-testid=stButton]") == []
        assert cut_short(page, "[data-testid=stMain] [data-testid=stMultiSelect]") == []
    approve.click()
    settle(page)
    rows = [r for r in decisions(app["url"]) if r["is_latest"]]
    assert [r["review_status"] for r in rows] == ["approved"] * 4
    assert {r["reviewed_by"] for r in rows} == {"lead"}
    assert page.locator("text=0 decision(s) match").count() == 1  # the unchecked filter is empty now


def open_as_lead(app, page, link: str) -> None:
    """Type the lead's name on the coding page, then follow the sidebar's ``link`` in the same session."""
    page.goto(app["base"] + "/")
    page.wait_for_selector("table.tn-cands")
    name = page.get_by_label("Your name")
    name.fill("lead")
    name.press("Enter")
    settle(page)
    page.get_by_role("link", name=link).click()


def upload_edition_as_lead(app, page, edition: Path) -> None:
    """Open the Editions page as the lead and choose ``edition`` in its file box (not imported yet)."""
    open_as_lead(app, page, "Editions")
    page.wait_for_selector("text=Import a new edition")
    page.locator(".st-key-ed_file input[type=file]").set_input_files(str(edition))


def test_lead_uploads_a_new_edition_and_the_coder_meets_the_rereview_first(app, page, tmp_path):
    """The Editions page's upload (AppTest cannot upload files): one term retired, one renamed."""
    from db import services

    with services.session_scope(app["url"]) as s:
        vid = services.vocabulary_id(s, "demo-procedures")
        vocab = services.vocabulary_from_db(s, vid)
        mids = [m["id"] for m in services.mentions(s, app["codes_batch"])]
        holder = __import__("app_pages._ui", fromlist=["_ui"]).build_holder(app["url"], vid)
        sugs = holder.suggest_and_store(s, mids, ["甲状腺全部切除", "胆囊切除"])
        for mid in mids:
            services.record_decision(s, mid, "coder", "accept")
    retired, renamed = sugs[0].chosen[0], sugs[1].chosen[0]
    lines = ["code,name"] + [f"{c},{n + '（2027）' if n == renamed else n}" for n in vocab.names if n != retired
                             for c in vocab.codes[n]]
    edition = tmp_path / "procedures-2027.csv"
    edition.write_text("\n".join(lines) + "\n", encoding="utf-8")

    upload_edition_as_lead(app, page, edition)
    page.get_by_label("Edition label").fill("2027")
    page.get_by_label("Edition label").press("Enter")
    settle(page)
    button(page, "ed_import").click()
    page.wait_for_selector("text=Edition in force: 2")
    settle(page)
    shot(page, tmp_path, "editions_page.png")
    with services.session_scope(app["url"]) as s:
        assert [m["status"] for m in services.mentions(s, app["codes_batch"])] == ["rereview", "rereview"]
        reasons = [services.mention(s, m)["decision"]["review_note"] for m in mids]
    assert f"{retired} was retired in edition 2 (2027)" in reasons[0]
    assert f"{renamed} was renamed {renamed}（2027） in edition 2 (2027)" in reasons[1]


def test_a_lead_adds_the_hospital_s_own_vocabulary_and_every_bad_row_is_named(app, page, tmp_path):
    """A user test found no way to add a hospital's own list as a vocabulary of its own (only as a new edition of the
    demo one, still named "demo-procedures" in every export), a refusal naming only the first bad row, and two
    names under one code passed in silence."""
    from db import editions, services

    bad = tmp_path / "本院手术.csv"
    bad.write_text("编码,名称\nH01,甲状腺切除\nH02,\nH03,胆囊切除\n,阑尾切除\n", encoding="utf-8")

    def create(path: Path, name: str) -> None:
        fold = page.locator("[data-testid=stExpander] details", has_text="Add another vocabulary")
        if fold.get_attribute("open") is None:
            page.get_by_text("Add another vocabulary").click()
        page.locator(".st-key-nv_file input[type=file]").set_input_files(str(path))
        page.get_by_label("Its name").fill(name)
        page.get_by_label("Its name").press("Enter")
        settle(page)
        button(page, "nv_create").click()

    open_as_lead(app, page, "Editions")
    create(bad, "本院手术操作")
    page.wait_for_selector("text=row 3: missing name (column '名称'); also row 5: missing code (column '编码')")
    said = next(a for a in page.locator("[data-testid=stAlert]").all_inner_texts() if "missing name" in a)
    assert said.count("本院手术.csv") == 1 and "本院手术.csv: not imported: row 3:" in said, said
    with services.session_scope(app["url"]) as s:
        assert services.vocabulary_id(s, "本院手术操作") is None
    good = tmp_path / "本院手术2.csv"
    good.write_text("编码,名称,同义词\nH01,甲状腺切除,甲切\nH02,胆囊切除,\nH02,胆囊摘除,\n", encoding="utf-8")
    create(good, "本院手术操作")
    page.wait_for_selector("text=1 code(s) are given to more than one name")
    settle(page)
    assert any("H02: 胆囊切除 / 胆囊摘除" in a for a in page.locator("[data-testid=stAlert]").all_inner_texts())
    # the sidebar has opened it, and its own name is what exports will say
    page.wait_for_selector("text=Editions · 本院手术操作")
    assert "No batch for this vocabulary yet" in page.locator("[data-testid=stSidebar]").inner_text()
    shot(page, tmp_path, "new_vocabulary.png")
    with services.session_scope(app["url"]) as s:
        vid = services.vocabulary_id(s, "本院手术操作")
        vocab = services.vocabulary_from_db(s, vid)
        assert sorted(vocab.names) == ["甲状腺切除", "胆囊切除", "胆囊摘除"] and vocab.synonyms["甲状腺切除"] == ["甲切"]
        made = services.audit_frame(s).query("object == 'vocabulary' and action == 'create'")
        assert made["user"].tolist() == ["lead"] and made["object_id"].tolist() == [vid]
        assert [e["imported_by"] for e in editions.editions(s, vid)] == ["lead"]
    # the same name again is a new edition, not a second vocabulary
    create(good, "本院手术操作")
    page.wait_for_selector("text=a vocabulary named '本院手术操作' exists already")
    with services.session_scope(app["url"]) as s:  # the name as it is spelt, whatever case was typed
        with pytest.raises(ValueError, match="named 'demo-procedures' exists already"):
            services.create_vocabulary(s, vocab, "DEMO-Procedures", "lead")


def test_a_truncated_edition_asks_before_it_retires_the_vocabulary(app, page, tmp_path):
    """A user test: a one-row file on the Editions page retired 207 of 208 terms at one click. The page now says
    what the file would retire and imports it only from a second, explicit button."""
    from db import editions, services

    with services.session_scope(app["url"]) as s:
        vid = services.vocabulary_id(s, "demo-procedures")
        vocab = services.vocabulary_from_db(s, vid)
    keep = vocab.names[0]
    edition = tmp_path / "procedures-cut.csv"
    edition.write_text(f"code,name\n{vocab.codes[keep][0]},{keep}\n", encoding="utf-8")
    upload_edition_as_lead(app, page, edition)
    settle(page)
    button(page, "ed_import").click()
    retired = len(vocab) - 1
    page.wait_for_selector(f"text=would retire {retired} of the {len(vocab)} terms in force")
    settle(page)
    shot(page, tmp_path, "editions_confirm.png")
    with services.session_scope(app["url"]) as s:
        assert len(services.vocabulary_from_db(s, vid)) == len(vocab) and len(editions.editions(s, vid)) == 1
    button(page, "ed_import_confirm").click()
    page.wait_for_selector("text=Edition in force: 2")
    with services.session_scope(app["url"]) as s:
        assert services.vocabulary_from_db(s, vid).names == [keep]
        assert editions.editions(s, vid)[-1]["counts"]["retired"] == retired


def test_a_bookmarked_lead_page_opens_for_the_named_lead(app, page, tmp_path):
    """A user test, sign-in off: reloading the Editions page (its address names the lead, ?coder=lead) said "Page
    not found" and opened the coding queue, because the first run of the new session took the user for "coder"."""
    page.goto(app["base"] + "/editions?coder=lead")
    page.wait_for_selector("text=Import a new edition")
    settle(page)
    assert page.get_by_text("Page not found").count() == 0
    page.reload()
    page.wait_for_selector("text=Import a new edition")
    assert page.get_by_role("link", name="Editions").count() == 1


def test_a_key_pressed_while_another_batch_opens_decides_nothing_unseen(app, page, tmp_path):
    """Seen in a browser: switching batch and pressing X within 0.2 s rejected the new batch's first mention,
    which its coder never saw (the key reached the buttons of the page being drawn)."""
    from db import services

    page.goto(app["base"] + "/")
    page.wait_for_selector("table.tn-cands")
    settle(page)
    # the browser's half of the dwell rule is in the page (app_pages/_guard.py), set to MIN_GAP_S
    assert page.evaluate("window.__tnDwell && window.__tnDwell.ms") == 400
    for delay in (50, 100, 150, 200):
        page.locator("[data-testid=stSidebar] input[aria-label='Batch']").click()
        page.get_by_role("option", name=re.compile("two codes")).click()
        page.evaluate("document.activeElement && document.activeElement.blur()")  # keys go to the page
        page.wait_for_timeout(delay)
        page.keyboard.press("x")
        settle(page)
        with services.session_scope(app["url"]) as s:
            new = [m["id"] for m in services.mentions(s, app["codes_batch"])]
        assert not {r["mention_id"] for r in decisions(app["url"])} & set(new)
        # back to the first batch for the next try (the bare address would open "two codes", where the coder's
        # screen holds a mention: db.batches.last_batch)
        page.goto(app["base"] + f"/?batch={app['first_batch']}")
        page.wait_for_selector("table.tn-cands")
        settle(page)


def test_a_batch_picked_in_the_sidebar_hands_the_keys_to_its_first_mention(app, page, tmp_path):
    """A user test: after a pick in the sidebar's list the focus stayed in it, and K (skip) did nothing."""
    from db import services

    page.goto(app["base"] + f"/?batch={app['first_batch']}")
    page.wait_for_selector("table.tn-cands")
    settle(page)
    first = on_screen(page)
    with services.session_scope(app["url"]) as s:
        new = [m["id"] for m in services.mentions(s, app["codes_batch"])]
    # the batch on screen picked again (the mention stays), then another batch (a new mention): K skips each
    for batch, mention in ((re.compile("demo procedures"), first), (re.compile("two codes"), new[0])):
        page.locator("[data-testid=stSidebar] input[aria-label='Batch']").click()
        page.get_by_role("option", name=batch).click()
        settle(page)
        page.wait_for_function("document.activeElement === document.body")  # the list let go of the keyboard
        assert on_screen(page) == mention
        page.wait_for_timeout(600)  # past the dwell rule (MIN_GAP_S)
        page.keyboard.press("k")
        quiet(page, app["url"])
    assert [(r["mention_id"], r["action"]) for r in decisions(app["url"])] == [(first, "skip"), (new[0], "skip")]


def test_a_key_pressed_twice_keeps_the_coder_on_the_batch(app, page, tmp_path):
    """A user test: A pressed twice with no gap moved the coder to the vocabulary's first batch (3 times in 8 on
    a busy machine), and decisions went there. The likely cause, reasoned and not reproduced here: the sidebar's
    label held the live count and Streamlit keeps a choice by its label, so a press sent during the redraw
    carried a label no option had. Labels are now fixed (name · #id); this asserts the behaviour."""
    from db import services

    with services.session_scope(app["url"]) as s:
        vid = services.vocabulary_id(s, "demo-procedures")
        bid = services.create_batch(s, "ward 8", vid, ["胆囊切除术", "阑尾切除术", "甲状腺肿物切除", "疝修补术",
                                                       "腹腔镜胆囊切除", "扁桃体切除", "LC", "肾结石碎石"])
        ours = {m["id"] for m in services.mentions(s, bid)}
    page.goto(f"{app['base']}/?batch={bid}")
    page.wait_for_selector("table.tn-cands")
    settle(page)
    for _ in range(5):
        page.keyboard.press("a")
        page.keyboard.press("a")  # no gap
        settle(page)
        assert f"batch={bid}" in page.url
        assert page.locator("[data-testid=stSidebar] input[aria-label='Batch']").input_value() == f"ward 8 · #{bid}"
    decided = {r["mention_id"] for r in decisions(app["url"])}
    assert decided and decided <= ours  # every decision in the batch on screen


def test_the_next_mention_opens_at_its_top_and_a_redraw_keeps_both_scroll_and_dwell(slow_app):
    """A coder decides at the candidate table, half-way down a short screen: the next mention must open at the
    top (a Streamlit rerun kept the scroll, so it opened half-way down). Setting the relationship by key redraws
    the same mention: the page stays where it is, and the dwell rule still counts from when the mention
    appeared (it restarted, and the Accept pressed next was refused as too soon to have read it)."""
    main = "document.querySelector('[data-testid=\"stMain\"]')"
    with chromium_page(1400, 700) as pg:
        pg.goto(slow_app["base"] + "/")
        pg.wait_for_selector("table.tn-cands")
        settle(pg)
        first = on_screen(pg)
        pg.wait_for_timeout(3200)  # longer than the dwell rule
        pg.evaluate(f"() => {main}.scrollTo(0, 100000)")
        down = pg.evaluate(f"() => {main}.scrollTop")
        assert down > 300  # the screen is short enough to scroll
        pg.keyboard.press("3")
        settle(pg)
        assert on_screen(pg) == first and pg.evaluate(f"() => {main}.scrollTop") == down
        button(pg, f"accept_{first}").click()
        pg.wait_for_function(f"!document.querySelector('.st-key-terms_{first}')")
        settle(pg)
        assert [(r["mention_id"], r["action"], r["relationship"]) for r in decisions(slow_app["url"])] == [
            (first, "accept", "source-is-broader-than-target")]
        pg.wait_for_function(f"() => {main}.scrollTop === 0")
        assert pg.locator(".tn-mention").first.is_visible()


def test_a_file_imported_twice_asks_and_a_double_click_on_the_answer_imports_it_once(app, page, tmp_path):
    """The same file imported again made a second batch (coders coded every mention twice). Double clicks on
    Import and on "Import it again" leave one batch each (once, by hand, the answer's double click made two: the
    page now takes an answer once; the race does not reproduce at will)."""
    from db import services

    csv_file = tmp_path / "ward7.csv"
    csv_file.write_text("mention\n胆囊切除\n阑尾切除\n甲状腺全切\n", encoding="utf-8")
    open_as_lead(app, page, "Import / Export")
    page.wait_for_selector("input[type=file]", state="attached")

    def batches() -> list[str]:
        with services.session_scope(app["url"]) as s:
            return [b["name"] for b in services.batches(s) if b["name"].startswith("ward7")]

    for _ in range(2):
        page.locator("input[type=file]").set_input_files(str(csv_file))
        settle(page)
        page.get_by_role("button", name="Import", exact=True).dblclick()  # a double click imports once too
        settle(page)
    page.wait_for_selector("text=nothing imported")
    assert batches() == ["ward7"]
    button(page, "import_again").dblclick()
    # the second click may land on the answer's button: then the page names batch "ward7 (2)" as the duplicate
    page.wait_for_function("() => document.body.innerText.includes('ward7 (2)')"
                           " || document.body.innerText.includes('imported as batch')")
    settle(page)
    page.wait_for_timeout(1000)
    settle(page)
    assert batches() == ["ward7", "ward7 (2)"]



#: In the page: when each mention's text first showed (ms since the epoch), seen by a MutationObserver (a poll of its
#: own ran late under load and so measured the text as shown later than it was).
_SEEN = """() => { window.__seen = {}; const look = () => {
  const t = document.querySelector('[data-testid="stMain"] .tn-mention');
  if (t && !(t.textContent in window.__seen)) window.__seen[t.textContent] = Date.now(); };
  look(); new MutationObserver(look).observe(document.body, {subtree: true, childList: true, characterData: true}); }"""


@pytest.fixture
def dwell_app(tmp_path):
    """The same with a 1-second dwell rule."""
    yield from _app(tmp_path, TERMNORM_MIN_DWELL_S="1")


def test_a_held_key_decides_no_mention_sooner_than_the_dwell_after_it_showed(dwell_app, page):
    """A coder holding A (a press every 100 ms) on a slow machine: every decision must come at least the dwell
    (1 s here) after its mention's text showed. The server times the dwell from when it drew the page, up to a second
    before the browser shows it, so the browser's guard must drop the presses; it polled for the change every 20 ms,
    and a user test found accepts committed 17-180 ms after the next mention's text showed."""
    from termnorm.text.normalize import normalize

    app = dwell_app
    page.goto(app["base"] + "/")
    page.wait_for_selector("table.tn-cands")
    settle(page)
    page.evaluate(_SEEN)
    # a slow machine: the page's thread runs 4 times slower, so drawing a mention is a long task during which the
    # held key's presses queue (Chromium's own CPU throttling, as its developer tools offer it)
    page.context.new_cdp_session(page).send("Emulation.setCPUThrottlingRate", {"rate": 4})
    page.wait_for_timeout(1500)
    for _ in range(80):
        page.keyboard.press("a")
        page.wait_for_timeout(100)
    quiet(page, app["url"])
    seen = {normalize(k): v / 1000 for k, v in page.evaluate("() => window.__seen").items()}
    rows = decisions(app["url"])
    assert len(rows) >= 3
    for r in rows:
        shown = seen[normalize(r["mention"])]
        assert r["at"].timestamp() - shown >= 1.0, (r["mention"], r["at"].timestamp() - shown)
