"""HTML of the coding screens: keyword highlights, candidate tables, confidence badges, escaping.

Pure functions from the engine's records (mention, candidates, keyword spans) to HTML strings; no Streamlit
call and no database. The highlight shows the keywords that decide a code (approach A's KAR attends to the
procedure *site* and *type*; docs/methods.md): every mention and candidate text is HTML-escaped first and only
then wrapped in ``<span class="kw kw-<kind>">`` tags, so a mention such as ``<img src=x onerror=...>`` is
displayed as text. ``md`` escapes user text for Streamlit's Markdown.
"""

from __future__ import annotations

import html
import json
import re
from itertools import zip_longest

from termnorm.records import KEYWORD_KINDS, Candidate, KeywordSpan
from termnorm.text.keywords import DECISIVE_KINDS, keyword_key

# Kinds whose disagreement between mention and candidate is shown as a mismatch:
# the body site and the procedure / disease type decide the code, while approach,
# laterality and nature "usually do not" (methods.md, "What makes the task hard").
MISMATCH_KINDS = DECISIVE_KINDS

KIND_LABELS = {"site": "site 部位", "type": "type 类型", "approach": "approach 入路",
               "laterality": "laterality 侧别", "nature": "nature 性质"}

CSS = """
<style>
.kw{border-radius:4px;padding:0 2px;margin:0 1px;border-bottom:2px solid transparent}
.kw-site{background:#dbeafe;border-color:#2563eb;color:#1e3a8a}
.kw-type{background:#ffedd5;border-color:#ea580c;color:#7c2d12}
.kw-approach{background:#ede9fe;border-color:#7c3aed;color:#4c1d95}
.kw-laterality{background:#ccfbf1;border-color:#0d9488;color:#134e4a}
.kw-nature{background:#fce7f3;border-color:#db2777;color:#831843}
.kw-match::after{content:"✓";color:#15803d;font-weight:700;font-size:.75em;margin-left:1px;vertical-align:super}
.kw-mismatch{outline:2px dashed #dc2626;outline-offset:0}
.kw-mismatch::after{content:"✗";color:#dc2626;font-weight:700;font-size:.75em;margin-left:1px;vertical-align:super}
.tn-mention{font-size:1.9rem;line-height:2.6rem;padding:.6rem 1rem;border:1px solid #e5e7eb;
  border-left:6px solid #2563eb;
  border-radius:8px;background:#fafafa;word-break:break-all}
.tn-legend{font-size:.8rem;color:#4b5563}
.tn-legend .kw{font-size:.8rem}
.tn-badge{display:inline-block;border-radius:999px;padding:1px 10px;font-size:.85rem;font-weight:600;margin-right:6px}
.tn-sure{background:#dcfce7;color:#166534}
.tn-likely{background:#e0f2fe;color:#075985}
.tn-unsure{background:#fef3c7;color:#92400e}
.tn-grey{background:#f3f4f6;color:#374151}
.tn-chosen{display:inline-block;border:1px solid #16a34a;background:#f0fdf4;border-radius:6px;padding:2px 8px;
  margin:2px 4px 2px 0}
table.tn-cands{border-collapse:collapse;width:100%;font-size:.95rem}
table.tn-cands th{text-align:left;font-weight:600;color:#6b7280;font-size:.78rem;
  border-bottom:1px solid #e5e7eb;padding:4px 6px}
table.tn-cands td{border-bottom:1px solid #f3f4f6;padding:5px 6px;vertical-align:middle}
table.tn-cands tr.tn-pick td{background:#f0fdf4}
table.tn-cands tr.tn-pick td:first-child{border-left:4px solid #16a34a}
.tn-code{font-family:ui-monospace,monospace;color:#374151;font-size:.85rem}
.tn-bar{display:inline-block;height:8px;border-radius:4px;background:#2563eb;vertical-align:middle;margin-right:6px}
.tn-part{display:inline-block;background:#f3f4f6;border-radius:4px;padding:0 5px;margin:1px 2px;
  font-size:.78rem;color:#374151}
.tn-miss{color:#9ca3af;font-size:.78rem}
.tn-why{color:#6b7280;font-size:.76rem;margin-top:.1rem}
.tn-new{color:#92400e;background:#fef3c7;border-radius:3px;padding:0 .25rem}
.tn-keys{font-size:.8rem;color:#6b7280}
.st-key-_on_screen{display:none}
[data-testid="stSidebar"] [data-testid="stSelectbox"] input{font-size:.78rem !important}
[class*="st-key-tn_script_"]{display:none}
.tn-keys kbd{border:1px solid #d1d5db;border-bottom-width:2px;border-radius:4px;padding:0 4px;font-size:.8rem;background:#fff}
</style>
"""


def esc(text: str) -> str:
    """HTML-escape (quotes too) and flatten newlines, so text can sit inside one-line HTML blocks."""
    return html.escape(" ".join(str(text).splitlines()), quote=True)


def distinct(labels: dict) -> dict:
    """``labels`` with every label two or more keys share followed by `` · #key``. Streamlit keeps a select
    box's choice by its label, so options labelled alike are one option: a second batch named like the first
    (a monthly file imported under its file name) could not be picked, and a decision's rerun moved the coder
    to it."""
    from collections import Counter

    count = Counter(labels.values())
    return {k: f"{v} · #{k}" if count[v] > 1 else v for k, v in labels.items()}


def _agree(m: KeywordSpan, t: KeywordSpan, same) -> bool:
    """A mention keyword and a term keyword of one kind mean the same: same text (:func:`keyword_key`), or a
    rewrite coders make (``same``: the engine's learned equivalences, Engine.same_keyword: 肿瘤 -> 病损)."""
    return m.kind == t.kind and (keyword_key(m) == keyword_key(t) or (same is not None and same(m.text, t.text)))


#: Whether nested site keywords agree (:func:`_nested_sites`); benchmarks/keyword_marks.py measures both
NESTED_SITES_AGREE = True


def _nested_sites(m: KeywordSpan, t: KeywordSpan) -> bool:
    """Two site keywords one of which holds the other (乳 / 乳房, 宫颈 / 子宫颈, 脑室 / 侧脑室): the same place
    named more or less exactly, not a different one. Types are not read so: 次全切除术 holds 全切除术."""
    a, b = keyword_key(m), keyword_key(t)
    return NESTED_SITES_AGREE and m.kind == t.kind == "site" and (a in b or b in a)


def compare_keywords(mention_spans: list[KeywordSpan], term_spans: list[KeywordSpan],
                     same=None) -> list[str | None]:
    """Per keyword of a candidate term: ``"match"``, ``"mismatch"`` or None (nothing to compare).

    A keyword matches when the mention has a keyword of the same kind that agrees with it (:func:`_agree`); it
    mismatches when the mention has keywords of that kind, none agreeing or nested in it (:func:`_nested_sites`:
    neither mark), and the kind is one of :data:`MISMATCH_KINDS` (a different site or type usually means a
    different code).
    """
    out: list[str | None] = []
    for t in term_spans:
        kin = [m for m in mention_spans if m.kind == t.kind]
        if any(_agree(m, t, same) for m in kin):
            out.append("match")
        elif not kin or any(_nested_sites(m, t) for m in kin):
            out.append(None)
        else:
            out.append("mismatch" if t.kind in MISMATCH_KINDS else None)
    return out


def missing_keywords(mention_spans: list[KeywordSpan], term_spans: list[KeywordSpan],
                     same=None, dropped=None) -> list[KeywordSpan]:
    """Site / type keywords of the mention that the candidate lacks (shown greyed after the term): no keyword
    of the term agrees with them (:func:`_agree`) or holds them (肿瘤 in 恶性肿瘤: the term says more, which
    the red mark on its keyword shows), and coders do not leave them out of their terms (``dropped``:
    termnorm.explain.dropped, 大脑 of 大脑开颅…脑膜瘤切除术 is detail no procedure term codes)."""
    seen, out = set(), []
    for m in mention_spans:
        key = (m.kind, keyword_key(m))
        held = any(t.kind == m.kind and keyword_key(m) in keyword_key(t) or _nested_sites(m, t) for t in term_spans)
        if m.kind in MISMATCH_KINDS and key not in seen and not held and not any(_agree(m, t, same)
                                                                                 for t in term_spans):
            seen.add(key)
            if dropped is None or not dropped(m):
                out.append(m)
    return out


def answered_part(parts: list[list[KeywordSpan]], term_spans: list[KeywordSpan], same=None) -> list[KeywordSpan]:
    """The keywords of the part of a multi-part mention that a term answers: the part with the most keywords
    agreeing with the term's (the first of equals; none when no part shares one). 胆囊切除术 answers 胆囊切除术 of
    脾切除+胆囊切除术 and lacks nothing: 脾 is the other part's, answered by another term."""
    best, score = [], 0
    for spans in parts:
        n = sum(1 for t in term_spans if any(_agree(m, t, same) or _nested_sites(m, t) for m in spans))
        if n > score:
            best, score = spans, n
    return best


def highlight_html(text: str, spans: list[KeywordSpan], marks: list[str | None] | None = None) -> str:
    """``text`` escaped, with each keyword span wrapped in ``<span class="kw kw-<kind> [kw-match|kw-mismatch]">``.

    Overlapping or out-of-range spans are skipped (the first, longest wins).
    """
    order = sorted(range(len(spans)), key=lambda i: (spans[i].start, -spans[i].end))
    out, pos = [], 0
    for i in order:
        sp = spans[i]
        if sp.start < pos or sp.end > len(text) or sp.start >= sp.end:
            continue
        kind = sp.kind if sp.kind in KEYWORD_KINDS else "other"
        mark = marks[i] if marks else None
        cls = f"kw kw-{kind}" + (f" kw-{mark}" if mark else "")
        title = kind + (f" ({mark})" if mark else "")
        out.append(esc(text[pos:sp.start]))
        out.append(f'<span class="{cls}" title="{title}">{esc(text[sp.start:sp.end])}</span>')
        pos = sp.end
    out.append(esc(text[pos:]))
    return "".join(out)


def legend_html(candidates: bool = True, kinds=None) -> str:
    """Colour key of the keyword kinds (``kinds``: those on the page, e.g. no "approach" on a diagnosis; None: every
    kind), and of the ✓ / ✗ marks when candidates are compared. Empty when no kind is on the page (an English
    vocabulary without keyword lists: a user test read an empty "Keywords: · in candidates:")."""
    if kinds is not None and not set(kinds) & set(KEYWORD_KINDS):
        return ""
    chips = " ".join(f'<span class="kw kw-{k}">{esc(KIND_LABELS[k])}</span>' for k in KEYWORD_KINDS
                     if kinds is None or k in kinds)
    marks = (' &nbsp;·&nbsp; in candidates: <span class="kw kw-site kw-match">same as mention</span> '
             '<span class="kw kw-site kw-mismatch">different site / type</span>') if candidates else ""
    return f'<div class="tn-legend">Keywords: {chips}{marks}</div>'


def confidence_text(conf: float) -> str:
    """A confidence as written for people: two decimals, four from 0.99 up, where a model's bands often start (a
    team test read "sure from 1.00" and "likely from 1.00" side by side)."""
    return f"{conf:.2f}" if conf < 0.99 else f"{conf:.4f}"


def confidence_badge(conf: float, bands: dict | None = None) -> str:
    """How sure the suggestion is, in the words of the serving version's bands (termnorm.stats, calibrated on
    its held-out mentions, or on the coders' decisions on its suggestions: ``bands["on"]``): "sure · 96%" /
    "likely · 85%" give the share of the band's measured suggestions that were right (termnorm.stats.BANDS); "unsure" in
    amber; grey "not measured yet" before any measurement. A raw probability is never the headline: a ranker's
    scores need not read as chances."""
    from termnorm.stats import BANDS, band_of

    band, shown = band_of(conf, bands), confidence_text(conf)
    if band is None:
        return (f'<span class="tn-badge tn-grey" title="the serving model was not measured yet, on held-out mentions '
                f'nor on 50 coders\' decisions on its suggestions: model confidence {shown}">confidence not '
                "measured yet</span>")
    word, on = band["word"], esc(bands.get("on", "held-out mentions"))
    if "precision" not in band:
        why = ("below every band measured" if bands.get("bands") else  # no band to be below (a user test's title)
               f"no confidence level was right {min(t for _, t in BANDS):.0%} of the time")
        return (f'<span class="tn-badge tn-unsure" title="{why} on {bands["n"]} {on}: model confidence '
                f'{shown}">{esc(word)}</span>')
    return (f'<span class="tn-badge tn-{esc(word)}" title="{band["precision"]:.0%} of the {band["support"]} '
            f'suggestions in this band were right, and at least {band.get("target", 0):.0%} at each of its confidence '
            f'levels, measured on {on} (model confidence {shown})">{esc(word)} · {band["precision"]:.0%}</span>')


def model_label(version: str | None, html: bool = True) -> str:
    """A model version as coders read it: the shipped model (``pretrained:lexical-gbm-40cee01c``; as HTML its id
    in the tooltip) or the fitted version's own name (``yidu-n7k-v3``)."""
    version = version or "?"
    if version.startswith("pretrained:"):
        label = "the shipped model (not yet fitted on this hospital's decisions)"
    elif version == "lexical" or version.startswith("lexical+encoder-"):  # a vocabulary of no cold-start domain
        label = ("the shipped model in recall order" + (", with the vocabulary's encoder" if "+" in version else "")
                 + " (not yet fitted on this hospital's decisions)")
    else:
        return esc(version) if html else version
    return f'<span title="{esc(version)}">{esc(label)}</span>' if html else label


#: Candidate scores that are not a recall strategy's and stay out of the "found by" column: the fused
#: ranker probability (its own column), the surface scorer's log-odds (a ranker input, any sign) and the
#: term classifier's score (a ranker input given to every candidate, 0 for terms never coded), and how many
#: mentions the history holds (termnorm.fitting.HISTORY_SIZE, the same for every candidate).
NOT_RECALL_SCORES = frozenset({"ranker", "diff", "clf", "history_size"})


def code_cell(codes: list[str]) -> str:
    """The code exported (bold: the first, the most specific) and, greyed, the term's other codes."""
    if not codes:
        return ""
    rest = f' <span class="tn-miss" title="other codes of this term">{esc(", ".join(codes[1:]))}</span>' \
        if len(codes) > 1 else ""
    return f'<b title="exported code">{esc(codes[0])}</b>{rest}'


def candidate_table_html(cands: list[Candidate], mention_spans: list[KeywordSpan], chosen: list[str],
                         tag, start: int = 1, same=None, why: list[list[str]] | None = None,
                         top: float | None = None, parts: list[list[KeywordSpan]] | None = None,
                         dropped=None) -> str:
    """The ranked candidates as one HTML table: rank, code, highlighted term, fused score and its parts; under
    each term, when ``why`` is given, the evidence for it (termnorm.explain: a never-coded term's is marked). A
    score bar is the fused score when scores are probabilities (a full bar is 1.0, so a 0.00 best is no bar), else
    drawn against ``top`` (the best score of the whole list, when these are its later rows). The keyword marks
    compare a term with the mention, or with the part it answers when ``parts`` (each part's keywords) are given
    (:func:`answered_part`); ``same`` / ``dropped``: see :func:`missing_keywords`."""
    if not cands:
        return '<div class="tn-legend">No candidate.</div>'
    top = max(1.0, top or max((c.score for c in cands), default=1.0))
    ranked = any("ranker" in c.scores for c in cands)  # the lexical-only engine has no ranker column
    rows = []
    for r, c in enumerate(cands, start=start):
        spans = tag(c.term)
        kw = (answered_part(parts, spans, same) if parts and len(parts) > 1 else []) or mention_spans
        marks = compare_keywords(kw, spans, same)
        if kw is not mention_spans:  # a keyword the mention names in another part is not "different" (a user test:
            # 阴茎 of 阴茎皮条法尿道成形术 was red against the 尿道成形术 of 阴茎矫直术+尿道成形术)
            whole = compare_keywords(mention_spans, spans, same)
            marks = [None if m == "mismatch" and w != "mismatch" else m for m, w in zip(marks, whole)]
        term = highlight_html(c.term, spans, marks)
        miss = missing_keywords(kw, spans, same, dropped)
        if miss:
            term += ' <span class="tn-miss">lacks ' + ", ".join(esc(s.text) for s in miss) + "</span>"
        if why:
            term += '<div class="tn-why">' + " · ".join(
                f'<span class="tn-new">{esc(w)}</span>' if w == "never coded" else esc(w)
                for w in why[r - start]) + "</div>"
        found_by = "".join(f'<span class="tn-part">{esc(k)} {v:.2f}</span>'
                           for k, v in sorted(c.scores.items()) if k not in NOT_RECALL_SCORES)
        ranker = (f'<td>{c.scores["ranker"]:.2f}</td>' if "ranker" in c.scores else "<td>–</td>") if ranked else ""
        width = max(2, int(60 * max(0.0, c.score) / top))
        cls = ' class="tn-pick"' if c.term in chosen else ""
        # the engine puts what this very text was coded as first, whatever its fused score (termnorm.engine's sieve)
        first = ('<div class="tn-why" title="This mention\'s text was coded as this term before: a coder\'s '
                 'decision comes first, above higher fused scores.">first: coded as written</div>'
                 if c.scores.get("sieve") else "")
        rows.append(f'<tr{cls}><td>{r}</td><td class="tn-code">{code_cell(c.codes)}</td><td>{term}</td>'
                    f'<td><span class="tn-bar" style="width:{width}px"></span>{c.score:.2f}{first}</td>'
                    f"<td>{found_by}</td>{ranker}</tr>")
    head = ("<tr><th>#</th><th>code</th><th>term</th><th>fused score</th><th>found by (recall scores)</th>"
            + ("<th>ranker</th>" if ranked else "") + "</tr>")
    return f'<table class="tn-cands">{head}{"".join(rows)}</table>'


_MARKDOWN = re.compile(r"([\\`*_{}\[\]()<>#+\-.!|~$:])")  # ":" too: :red[x] is Streamlit colour


def with_codes(terms: list[str], codes: list[str]) -> list[str]:
    """Each term with the code a decision kept for it, as the coding page names a decision: 胆囊切除术 (51.2200)."""
    return [f"{t} ({c})" if c else t for t, c in zip_longest(terms, codes[:len(terms)], fillvalue="")]


def md(text) -> str:
    r"""``text`` with Markdown's special characters escaped, for user text inside st.markdown / st.warning /
    st.toast: a lead's note ``[click](http://evil.example)`` must stay text, not become a live link.

    >>> print(md("see [x](http://e.x) *now*"))
    see \[x\]\(http\://e\.x\) \*now\*
    """
    return _MARKDOWN.sub(r"\\\1", " ".join(str(text).splitlines()))


def scroll_to_top_html(mention_id: int) -> str:
    """A page script's HTML (_ui.page_script) that scrolls the page (Streamlit's ``stMain``) to the top once per mention
    shown: a rerun keeps the scroll, so after a save at the candidate table the next mention opened half-way
    down. The same mention drawn again (a term picked) keeps where the coder is."""
    return ("<script>const w = window.parent; if (w.__tnTop !== " + json.dumps(str(mention_id)) + ") {"
            " w.__tnTop = " + json.dumps(str(mention_id)) + ";"
            " const m = w.document.querySelector('[data-testid=\"stMain\"]'); if (m) m.scrollTo(0, 0); }</script>")


#: characters of a long document shown around the mention at first (the coding page offers the whole of it)
DOCUMENT_WINDOW = 4000


def document_html(document: str, marks: list[str], limit: int = DOCUMENT_WINDOW, focus: str | None = None,
                  view: str = "") -> str:
    """The text a mention was found in, escaped, with ``marks`` (the mention, the definitions it uses) in
    ``<mark>`` (a Latin mark only as a whole word: AF is not marked inside PAF). A longer document is shown as
    the ``limit`` characters around ``focus`` (the definition: it may sit deep in a long note), else around the
    first mark, saying how much is left out before and after. The first mark of ``focus`` has the class
    ``tn-focus``: the box scrolls to it once per ``view`` (:func:`focus_scroll_html`), a name for this showing
    of the box (the mention, how often its whole-document switch was turned)."""
    import re

    marks = sorted({m for m in marks if m and m.strip()}, key=len, reverse=True)
    pat = re.compile("|".join(rf"(?<![A-Za-z0-9]){re.escape(m)}(?![A-Za-z0-9])" if re.match(r"[A-Za-z0-9]", m)
                              else re.escape(m) for m in marks)) if marks else None
    start = 0
    if len(document) > limit:
        at_focus = document.find(focus) if focus else -1
        first = pat.search(document) if pat and at_focus < 0 else None
        where = at_focus if at_focus >= 0 else first.start() if first else 0
        start = max(0, min(len(document) - limit, where - limit // 4))
    shown = document[start:start + limit]
    out, at, focused = [], 0, False
    for hit in (pat.finditer(shown) if pat else ()):
        first = not focused and hit.group(0) == focus  # the definition the box scrolls to (_FOCUS_SCROLL)
        focused = focused or first
        out += [html.escape(shown[at:hit.start()]),
                '<mark class="tn-focus">' if first else "<mark>", f"{html.escape(hit.group(0))}</mark>"]
        at = hit.end()
    body = "".join(out) + html.escape(shown[at:])
    before, after = start, len(document) - start - len(shown)
    head = f'<div class="tn-keys">… {before:,} characters before</div>' if before else ""
    tail = f'<div class="tn-keys">… {after:,} more characters</div>' if after else ""
    box = "white-space:pre-wrap;max-height:16rem;overflow-y:auto"  # scrolls: the candidates stay in view
    return (f'{head}<div class="tn-document" data-testid="tn-document" data-view="{html.escape(view)}" '
            f'style="{box}">{body}</div>{tail}')


#: The document box (document_html) opens scrolled to its definition, wherever the box is drawn: in the app's
#: document (added once, like app_pages/_guard.py), a timer finds a box with a focus mark whose view (data-view) it
#: has not yet scrolled and scrolls the box, not the page, to put the mark a third of the way down; until the
#: view changes, the coder's own scrolling stays. The view is kept as an attribute, not taken from the element:
#: Streamlit redraws the next mention's box, or the box of a switch turned back on, in the element it had.
_FOCUS_SCROLL = """
(function () {
  if (window.__tnFocus) return;
  window.__tnFocus = setInterval(() => {
    document.querySelectorAll('[data-testid="tn-document"]').forEach((box) => {
      const m = box.querySelector('mark.tn-focus');
      if (!m || !box.getClientRects().length) return;
      const seen = box.dataset.view + ':' + box.textContent.length + ':' + m.textContent;
      if (box.dataset.tnFocus === seen) return;
      box.dataset.tnFocus = seen;
      box.scrollTop += m.getBoundingClientRect().top - box.getBoundingClientRect().top - box.clientHeight / 3;
    });
  }, 150);
})();
"""


def _installed_once(code: str, flag: str) -> str:
    """A page script's HTML (_ui.page_script) adding ``code`` to the app's document (same origin) unless the
    document's ``window[flag]`` says it is there (the code sets it)."""
    return ("<script>const d = window.parent.document; if (!window.parent." + flag + ") {"
            " const s = d.createElement('script'); s.textContent = " + json.dumps(code) + ";"
            " d.head.appendChild(s); }</script>")


def focus_scroll_html() -> str:
    """A page script's HTML installing :data:`_FOCUS_SCROLL` in the app's document."""
    return _installed_once(_FOCUS_SCROLL, "__tnFocus")


#: Enter in the coding page's comment box flags the mention (the box is not a form: see coding_queue.py).
#: The keyboard back to the shortcut keys: Esc in a box of the main area (the terms box, the search, the comment)
#: leaves it (a user test picked a term, pressed Esc, and its next keys, "2" and "S", went on typing into the box);
#: a sidebar list (vocabulary, batch) lets go once its pick closes it (K typed into the list did nothing, whether
#: or not the pick changed the mention on screen).
_KEYS_BACK = """
(function () {
  if (window.__tnKeys) return;
  window.__tnKeys = true;
  document.addEventListener('keydown', (e) => {
    const t = e.target;
    if (!t || (t.tagName !== 'INPUT' && t.tagName !== 'TEXTAREA')) return;
    // Enter in the coding page's comment box presses Flag, after the box has sent its text (its own Enter handler)
    const box = e.key === 'Enter' && t.closest('[class*="st-key-comment_"]');
    const flag = box && box.parentElement.closest('[data-testid="stHorizontalBlock"]')
      ?.querySelector('[class*="st-key-flag_"] button');
    if (flag) setTimeout(() => flag.click(), 0);
    if (e.key !== 'Escape') return;
    if (t.closest('[data-testid="stMain"]')) setTimeout(() => t.blur(), 0);  // after the box closes its list
  }, true);
  new MutationObserver((changes) => changes.forEach((c) => {
    const t = c.target;
    if (c.oldValue === 'true' && t.getAttribute('aria-expanded') === 'false' && t.getAttribute('role') === 'combobox'
        && t.closest('[data-testid="stSidebar"]') && document.activeElement === t) setTimeout(() => t.blur(), 0);
  })).observe(document.body, {subtree: true, attributes: true, attributeFilter: ['aria-expanded'],
                              attributeOldValue: true});
})();
"""


def keys_back_html() -> str:
    """A page script's HTML installing :data:`_KEYS_BACK` in the app's document."""
    return _installed_once(_KEYS_BACK, "__tnKeys")
