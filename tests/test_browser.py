"""The coding page in a real browser: `streamlit run app.py` driven by Playwright in Debian's headless Chromium.

Playwright drives the Chromium of Debian's ``chromium`` package (tests/browser.py: no browser download; under
``CI=true`` a missing Chromium or Playwright is a failure, not a skip). A Streamlit page is drawn over a
websocket after the document loads, so the test waits for the elements it checks, never a fixed time.

Checks: the page loads and shows the first demo mention with keyword spans
(``kw kw-site`` ...) and ✓/✗ marks on candidates; a mention containing
``<img src=x onerror=...>`` and ``<script>`` is shown as text (no such
element in the DOM, the handler never ran). With ``TERMNORM_SCREENSHOTS=1``
the screenshot is copied to ``benchmarks/results/coding_page.png``.
"""

from __future__ import annotations

import os

import pytest
from browser import chromium_page, cut_short, screenshot, settle, streamlit_app

from termnorm.records import LabelledMention

#: a long note that defines PAF far down: the document box must open at the definition, not at the note's top
NOTE = "主诉：" + "反复心悸。" * 1000 + "既往诊断为阵发性心房颤动（PAF），长期口服华法林。" + "出院医嘱：" + "按时服药。" * 600
XSS = '<img src=x onerror="window.__pwned=1">右侧甲状腺肿块切除<script>window.__pwned=2</script>'
#: a batch name any coder may give, with Markdown in it: shown as typed wherever the name is
BATCH = "hostile :red[紧急] *粗体* [link](http://evil.example) $x^2$"
#: a coder's flag comment with Streamlit's colour directive and a link: shown as typed
FLAG = ":red[urgent] 10:30 [click](http://evil.example)"


@pytest.fixture
def server(tmp_path):
    """A seeded database (demo data + a batch whose first mention is hostile HTML) and a running app."""
    from db import services
    from app_pages import _ui

    url = f"sqlite:///{tmp_path / 'browser.sqlite3'}"
    services.init_db(url)
    with services.session_scope(url) as s:
        _ui.seed_demo(s)
        vid = services.vocabulary_id(s, "demo-procedures")
        xss_batch = services.create_batch(s, BATCH, vid, [XSS, "腹腔镜下胆囊切除术"])
        note_batch = services.create_batch(s, "long note", services.vocabulary_id(s, "demo-diagnoses"),
                                           [LabelledMention("PAF", [], i, document=NOTE) for i in (1, 2)])
        services.ensure_user(s, "zhao", "lead")  # flagged mentions are served to leads
        services.ensure_user(s, "li")
        flag_batch = services.create_batch(s, "asked", vid, ["甲状腺病损切除术"])
        services.record_decision(s, services.mentions(s, flag_batch)[0]["id"], "li", "flag", comment=FLAG)
    services.dispose(url)
    env = dict(os.environ, TERMNORM_DB_URL=url, TERMNORM_AUTH="off")  # sign-in: see tests/test_gold_browser.py
    with streamlit_app(env, log=tmp_path / "streamlit.log") as base:
        yield base, xss_batch, note_batch, flag_batch


@pytest.fixture
def page():
    with chromium_page(1400, 1300) as pg:
        yield pg


def test_coding_page_in_browser(server, page, tmp_path):
    from termnorm.engine import demo_mentions

    base, xss_batch, _, _ = server
    first = demo_mentions("procedures")[0].text

    # -- the coding page of the first demo batch: highlighted mention, candidates, actions
    page.goto(base + "/")
    page.locator(".tn-mention .kw").first.wait_for()
    page.locator("table.tn-cands").first.wait_for()
    settle(page)
    assert page.locator(".tn-mention").first.text_content() == first
    kinds = page.locator(".tn-mention span.kw").evaluate_all("es => es.map(e => e.className)")
    assert any("kw-site" in k for k in kinds) and any("kw-type" in k for k in kinds), kinds
    assert page.locator("table.tn-cands span.kw-match").count() > 0
    assert page.locator("table.tn-cands tr").count() > 2
    labels = page.locator("button").evaluate_all("bs => bs.map(b => b.innerText)")
    assert any("Save terms" in b for b in labels) and any("Accept suggestion" in b for b in labels)
    # every action's label whole, here and in a laptop's narrower window (fixed columns cut them: "1 equ…")
    for width in (1400, 1100):
        page.set_viewport_size({"width": width, "height": 1300})
        settle(page)
        assert cut_short(page, '[data-testid="stMain"] button') == [], width
    page.set_viewport_size({"width": 1400, "height": 1300})

    png = screenshot(page, tmp_path, "coding_page.png")
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20_000  # a drawn page, not a blank one

    # -- hostile HTML in a mention is shown as text, never parsed
    page.goto(f"{base}/?batch={xss_batch}")
    page.wait_for_function("t => (document.querySelector('.tn-mention') || {}).textContent === t", arg=XSS)
    settle(page)
    assert page.locator('img[src="x"]').count() == 0
    assert page.evaluate("[...document.querySelectorAll('script')].filter(s => s.text.includes('__pwned')).length") == 0
    assert page.evaluate("typeof window.__pwned") == "undefined"
    assert page.locator(".tn-mention span.kw-site").count() >= 1  # still highlighted
    title = page.locator("h3").filter(has_text="Coding ·")  # the batch's name reads as typed: no link, no colour
    assert title.inner_text().strip() == f"Coding · {BATCH}"
    links = title.locator("a").evaluate_all("as => as.map(a => [a.textContent, a.getAttribute('href')])")
    assert all(href.startswith("#") or text == href for text, href in links), links  # the heading's own anchor


def test_the_search_box_answers_while_the_coder_types(server, page):
    """No Enter and no pause: each keystroke reruns the search fragment, so the results follow the typing; Add puts
    the found term in the terms box."""
    base, _, _, _ = server
    page.goto(base + "/")
    box = page.get_by_label("Search the vocabulary")
    box.wait_for()
    settle(page)
    rows_js = ("const b = document.querySelector('input[aria-label=\"Search the vocabulary\"]'); "
               "const rows = [...document.querySelectorAll('.tn-code')].filter(e => b.compareDocumentPosition(e) & "
               "Node.DOCUMENT_POSITION_FOLLOWING).map(e => e.parentElement.innerText);")
    box.press_sequentially("胆囊切除", delay=60)  # typed, never committed with Enter or a blur
    # the rows of 胆 or 胆囊切 may show first while the last keystrokes' reruns are on their way (a loaded machine)
    page.wait_for_function(f"() => {{ {rows_js} return rows.some(t => t.includes('腹腔镜下胆囊切除术')) && "
                           "rows.slice(0, 3).every(t => t.includes('胆囊')); }")
    rows = page.evaluate(f"() => {{ {rows_js} return rows; }}")
    assert len(rows) == 10 and all("胆囊" in r for r in rows[:3]), rows
    box.press_sequentially("术", delay=60)
    page.wait_for_function(f"() => {{ {rows_js} return rows.length > 0 && rows[0].includes('胆囊切除术') && "
                           "!rows.some(t => t.includes('椎板切除减压术')); }")  # 胆囊切除术's own results
    settle(page)
    page.get_by_role("button", name="Add", exact=True).first.click()
    page.wait_for_function("[...document.querySelectorAll('[data-testid=\"stMultiSelect\"]')].some(t => "
                           "t.innerText.includes('胆囊切除术'))")  # the terms box now holds it


def test_the_document_box_opens_at_the_definition_the_engine_used(server, page, tmp_path):
    """PAF is defined 5,000 characters into its note: opened, the box shows the definition (it opened at the
    note's top, so the coder scrolled to find it); shown whole, it scrolls there again; a coder's own scroll stays
    until the switch is turned again or the next mention, from the same note, opens (Streamlit redraws both in
    the box's old element, which kept the coder's scroll: found by trying it as a coder)."""
    base, _, note_batch, _ = server
    page.goto(f"{base}/?batch={note_batch}")
    page.locator("[data-testid=tn-spelled-out]").wait_for()
    settle(page)
    in_view = ("() => { const b = document.querySelector('[data-testid=tn-document]'); const m = b && "
               "b.querySelector('mark.tn-focus'); if (!m || !b.getClientRects().length) return false; "
               "const r = m.getBoundingClientRect(); "  # on top where it is drawn: not clipped, not covered
               "return b.scrollTop > 0 && m.contains(document.elementFromPoint(r.left + 2, (r.top + r.bottom) / 2)); }")
    page.get_by_text("The document mention #1 was found in").click()
    top = "document.querySelector('[data-testid=tn-document]').scrollTop"
    page.wait_for_function(in_view)
    assert page.locator("mark.tn-focus").text_content() == "阵发性心房颤动"
    windowed = page.evaluate(top)  # a quarter of the 4,000-character window lies above the definition
    screenshot(page, tmp_path, "document_box.png")
    page.get_by_text("Show the whole document").click()
    page.wait_for_function("() => !document.body.innerText.includes('characters before')")
    page.wait_for_function(in_view)
    assert page.evaluate(top) > windowed  # the whole note: all 5,000 characters before it
    page.evaluate(top + " = 0")
    page.wait_for_timeout(600)  # four turns of the box's timer: it must not pull the coder back
    assert page.evaluate(top) == 0
    for shown_whole in (False, True):  # the switch turned off and on again: each a new view of the note
        page.get_by_text("Show the whole document").click()
        windowed_js = "true" if not shown_whole else "false"
        page.wait_for_function(f"() => document.body.innerText.includes('characters before') === {windowed_js}")
        page.wait_for_function(in_view)
        page.evaluate(top + " = 0")
    page.locator("[class*='st-key-accept_'] button").first.click()  # the next mention, from the same note
    page.get_by_text("The document mention #2 was found in").click()
    page.wait_for_function(in_view)


def test_a_flag_comment_reads_as_the_coder_typed_it(server, page):
    """Seen in a browser: ':red[…]' in a flag comment showed as '[…]' (Streamlit's colour directive ran)."""
    base, _, _, flag_batch = server
    page.goto(f"{base}/?batch={flag_batch}&coder=zhao")
    box = page.locator("[data-testid=stAlert]").filter(has_text="Flagged by")
    box.wait_for()
    settle(page)
    assert box.inner_text().strip().endswith(f"Flagged by li: {FLAG}")  # after the icon's name
    # no link hides where it goes: the bare address (GFM links it) is the only one, and reads as its target
    links = box.locator("a").evaluate_all("as => as.map(a => [a.textContent, a.getAttribute('href')])")
    assert links == [["http://evil.example", "http://evil.example"]], links
