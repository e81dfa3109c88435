"""Coding queue: one mention at a time, the engine's ranked candidates, one key to decide. Reads top to bottom like the
screen: batch progress, the mention with its keywords highlighted, what the engine proposes (how many terms, how
sure), the ranked candidates with every score and the keyword agreement, the terms to save (candidates, vocabulary
search), then the actions. Each decision is committed to the database (``db.services.record_decision``) before the
engine learns it and the queue moves on; suggestions for the next mentions are prepared after the page is drawn, so
the next one is a database read. The mention shown is claimed for this coder, so colleagues on the same batch are
shown other mentions (``db.services.next_mention``).
"""

import time
from datetime import timezone

import streamlit as st

from db import auth, learning, review, services
from app_pages import _guard, _markup, _typing, _ui
from termnorm import explain, reading, settings

SHOWN = _ui.SHOWN
PREPARE_AHEAD = _ui.PREPARE_AHEAD
# Which mention the browser shows, as the browser itself reports it: a hidden widget drawn last on the page
# holds the mention id; every click or key sends the browser's widget values, so a decision callback reads
# what was on screen when the key was pressed -- not what the server has drawn since. Seen in a browser: after
# a batch switch one X press reached the old mention's buttons and, 50 ms later, those of the new batch's
# first mention, still being drawn and never seen by its coder.
ON_SCREEN = "_on_screen"
# A decision less than this after its mention was fully drawn, or after the same browser's previous decision, is
# ignored: nobody reads a mention and decides in under 0.4 s (visual reaction time alone is ~0.25 s), while one
# key press reaching two pages' buttons, or the next page the instant it appears, does. Tests that click
# instantly set it to 0.
MIN_GAP_S = settings.get().min_dwell_s

SHORTCUTS = [("S", "save the terms in the box (accept if unchanged, else correct)"),
             ("A", "accept the engine's terms"), ("X", "reject: no candidate fits"), ("K", "skip"),
             ("1–5", "relationship"), ("Enter", "in the comment box: flag for a lead"),
             ("Esc", "leave a box, so the keys act again")]
# key, FHIR concept-map-relationship code, button label: "the mention ... the term(s)"
RELATIONSHIP_KEYS = [("1", "equivalent", "1 equivalent"), ("2", "source-is-narrower-than-target", "2 narrower"),
                     ("3", "source-is-broader-than-target", "3 broader"), ("4", "related-to", "4 related"),
                     ("5", "not-related-to", "5 not related")]

ctx = _ui.page()

if ctx.vocabulary_id is None or ctx.batch_id is None:
    st.info("No batch to code in this vocabulary yet: mentions come in as a batch on the Import / Export page (a lead "
            "or IT imports them). Other vocabularies are in the sidebar.")
    st.stop()

holder = ctx.holder()
# a lead or admin passing by only looks: the mention is claimed when they act on it; from then on they code in the
# batch (a user test's lead, shown the mention a coder was served next, had 44 of 94 presses refused)
CODING = "_leads_coding_in"  # the batches this lead has decided in, this session
user = _ui.current_user()
passing_by = bool(user) and auth.has_role(user["role"], "lead") and ctx.batch_id not in st.session_state.get(CODING, ())
with _ui.session_lock(), _ui.session() as s:
    batch = next(b for b in services.batches(s, ctx.vocabulary_id) if b["id"] == ctx.batch_id)
    done, total = services.batch_progress(s, ctx.batch_id)
    current = services.next_mention(s, ctx.batch_id, ctx.username, claim=not passing_by)
    others = services.claimed_by_others(s, ctx.batch_id, ctx.username)
    sug = holder.suggestion(s, current["id"], current["text"]) if current else None
    document = services.mention_documents(s, [current["id"]]).get(current["id"], "") if current else ""
    last = services.last_saved(s, ctx.batch_id, ctx.username)

head = st.columns([3, 2], vertical_alignment="bottom")
head[0].markdown(f"### Coding · {_ui.md(batch['name'])}")
head[1].progress(done / total if total else 0.0, text=f"**{done} / {total}** coded")
if last:  # read from the database on every draw: after a restart or a dropped connection it says what was kept
    at = (last["at"] if last["at"].tzinfo else last["at"].replace(tzinfo=timezone.utc)).astimezone()
    head[1].caption(f"Last saved: #{last['position']} {last['action']}"
                    + (" · " + _markup.md(" + ".join(_markup.with_codes(last["terms"], last["codes"])))
                       if last["terms"] else "")
                    + f" · {at:%H:%M:%S}", help="Your latest decision in this batch, as the database holds it.")

if current is None and others:
    with _ui.session() as s:
        returned = len(services.mentions(s, ctx.batch_id, status=services.REREVIEW))
    st.info(f"Nothing left for you here: the {others} mention(s) still open are on colleagues' screens. "
            f"A mention left undecided comes back to the queue after {services.CLAIM_MINUTES} minutes"
            + (f"; one a lead sent back, to the coder who decided it (to anyone after {services.RETURN_HOURS} "
               "hours)." if returned else "."))
    st.button("Check again", key="recheck")
    st.stop()
if current is None:
    with _ui.session() as s:
        flagged = len(services.mentions(s, ctx.batch_id, status="flagged"))
        returned = len(services.mentions(s, ctx.batch_id, status=services.REREVIEW))  # reserved for their coders
    if flagged or returned:  # a coder is not served flagged mentions, nor a colleague's sent back
        st.info("Nothing left for you in this batch: "
                + (f"{flagged} flagged mention(s) wait for a lead (a lead meets them in this queue). " if flagged
                   else "")
                + (f"{returned} mention(s) a lead sent back wait for the coders who decided them (anyone gets them "
                   f"after {services.RETURN_HOURS} hours). " if returned else "") + "The rest have a decision.")
    else:
        st.success("This batch is finished: every mention has a decision. Export it on the Import / Export page.")
    st.stop()
if others:
    head[1].caption(f"{others} other mention(s) on colleagues' screens now")

mid, text = current["id"], current["text"]
if not passing_by:
    st.session_state[_ui.HOLDING] = mid  # released if the coder signs out or switches batch (_ui.release_held)
st.session_state.setdefault(f"shown_at_{mid}", time.time())

# The terms box. What the coder sees in it is what Save saves: the widget's own value, read under the key it
# was drawn with. A change made on the server (Clear, a term added from the search, a synonym) bumps the box's
# version, so the widget is drawn under a new key from the new content; a click that was drawn with the old
# version (it reached the server before the new box was on screen) is refused instead of saving a box the
# coder never saw -- in the browser, Clear then Save within ~300 ms used to save the engine's terms.
def box_key(mention_id: int, version: int) -> str:
    return f"terms_{mention_id}" if version == 0 else f"terms_{mention_id}_v{version}"


box_version = st.session_state.setdefault(f"boxv_{mid}", 0)
sel_key = box_key(mid, box_version)
rel_key = f"rel_{mid}"  # the relationship the coder set (keys 1-5); unset: services.default_relationship


def box_terms(mention_id: int, version: int) -> list[str]:
    return list(st.session_state.get(box_key(mention_id, version)) or [])


def set_box(mention_id: int, terms: list[str]) -> None:
    """Server-side change of the box: drawn afresh under a new key at the next run."""
    st.session_state[f"boxinit_{mention_id}"] = list(dict.fromkeys(terms))
    st.session_state[f"boxv_{mention_id}"] = st.session_state.get(f"boxv_{mention_id}", 0) + 1


# ---------------------------------------------------------------- actions (callbacks run before the next draw)
# Every callback gets the mention id it was drawn for; the server refuses a decision for a mention that is not
# this coder's current claim (services.NotYourMention), so a late click never lands on the wrong mention.
def _forget(mention_id: int) -> None:
    for k in [k for k in st.session_state if isinstance(k, str)
              and (k.endswith(f"_{mention_id}") or k.startswith(f"terms_{mention_id}_v"))]:
        del st.session_state[k]


GROUNDLESS_KEPT = 0.5  # a suggested term that shares nothing with the mention stays in the box from this ranker score
SKIPPED = "_skipped_last"  # the mention this coder skipped last, if their decision since was none
HEARD = "_decision_heard"  # set by a decision button's callback: its click reached this server session


@_ui.serialised  # the page's read of the queue below waits for a save in progress (_ui.session_lock)
def _decide(mention_id: int, action: str, terms=(), comment: str = "", codes=None) -> None:
    st.session_state[HEARD] = True
    comment = comment or (st.session_state.get(f"comment_{mention_id}") or "").strip()  # kept with any decision
    # what the browser had on screen when the click or key was sent: the echo of ON_SCREEN (drawn last below)
    if st.session_state.get(ON_SCREEN) != str(mention_id):
        _ui.flash("warning", "Ignored a click or key meant for a mention the browser was not showing yet: nothing "
                             "saved; press again if you meant it.")
        return
    drawn_at = st.session_state.get(f"drawn_at_{mention_id}")
    if drawn_at is None:  # a button of a page not (or no longer) fully drawn: the run before's, kept on screen
        _ui.flash("warning", f"Ignored a click or key on mention #{current['position']}'s buttons, pressed while the "
                             "page was being drawn: nothing saved; press again once it is still.")
        return
    shown_for = time.time() - drawn_at
    if shown_for < MIN_GAP_S:
        _ui.flash("warning", f"Ignored a click or key {shown_for:.2f} s after mention #{current['position']} "
                             "appeared: too soon to have read it. Nothing saved; press again if you meant it.")
        return
    since_last = _ui.claim_decision_slot(MIN_GAP_S)
    if since_last is not None:  # the one before may still be saving (a second script thread): not named here
        _ui.flash("warning", f"Ignored a second click or key, which reached the server {since_last:.2f} s after your "
                             "previous one: nothing more saved. “Last saved” at the top says what that one saved.")
        return
    # none set: the default record_decision gives, here too (a not-related default must not be taught as a coding)
    relationship = (st.session_state.get(rel_key) or services.default_relationship(terms, sent_back)) if terms \
        else None
    if passing_by:  # a lead pressing a decision means to code here: claimed from now on, even if this one is refused
        st.session_state[CODING] = {*st.session_state.get(CODING, ()), ctx.batch_id}
        with _ui.session() as s:
            if not services.claim(s, mention_id, ctx.username):
                _forget(mention_id)
                _ui.flash("warning", "Ignored: a colleague has this mention on screen, or it was decided meanwhile.")
                return
    try:
        _ui.decide(ctx, mention_id, text, action, terms, comment, shown=SHOWN, codes=codes,
                   relationship=relationship, screen=sug)
    except services.NotYourMention as e:
        _forget(mention_id)
        _ui.flash("warning", f"Ignored: {e}")
        return
    except (ValueError, KeyError, PermissionError) as e:  # PermissionError: the account was disabled meanwhile
        _ui.flash("error", f"Not saved: {e}")
        return
    _forget(mention_id)
    st.session_state[SKIPPED] = mention_id if action == "skip" else None
    said = "not related to" if relationship == services.NOT_RELATED else action  # not a coding of those terms
    _ui.flash("toast", f"#{current['position']} {said}" + (": " + " + ".join(terms) if terms else "")
              + (" · with your comment" if comment and action != "flag" else ""))


def _picked_codes(mention_id: int, terms: list[str]) -> dict[str, str]:
    picks = st.session_state.get(f"codes_{mention_id}", {})
    return {t: picks[t] for t in terms if picks.get(t)}


def _box_clicked(mention_id: int) -> bool:
    """Whether Clear or a search result's Add was clicked in the same request as Save: Streamlit merges clicks
    that arrive before the previous run began, and runs Save's callback first (page order), while the box in
    the browser still showed what Clear was meant to remove."""
    ss = st.session_state
    return bool(ss.get(f"clear_{mention_id}")) or any(
        ss.get(k) is True for k in list(ss) if isinstance(k, str) and k.startswith(f"pick_{mention_id}_"))


def on_save(mention_id: int, version: int) -> None:
    st.session_state[HEARD] = True
    if version != st.session_state.get(f"boxv_{mention_id}", 0) or _box_clicked(mention_id):
        _ui.flash("warning", "Not saved: the terms box changed before your click arrived (cleared, or a term "
                             "added). Check the box and save again.")
        return
    terms = box_terms(mention_id, version)
    if not terms:
        _ui.flash("error", "Pick at least one term (or use Reject / Skip / Flag).")
        return
    action = "accept" if set(terms) == set(sug.chosen) else "correct"
    _decide(mention_id, action, terms, codes=_picked_codes(mention_id, terms))


def on_accept(mention_id: int) -> None:
    _decide(mention_id, "accept", list(sug.chosen), codes=_picked_codes(mention_id, list(sug.chosen)))


def on_flag(mention_id: int) -> None:
    comment = (st.session_state.get(f"comment_{mention_id}") or "").strip()
    if not comment:
        _ui.flash("error", "A flag needs a comment for the lead.")
        return
    _decide(mention_id, "flag", comment=comment)


def on_pick(term: str, term_codes: list[str], mention_id: int = mid, version: int = box_version) -> None:
    if version != st.session_state.get(f"boxv_{mention_id}", 0):
        return  # a search result drawn beside an older box: adding to the new one would surprise the coder
    chosen = box_terms(mention_id, version)
    if term not in chosen:
        set_box(mention_id, chosen + [term])


def on_typed(mention_id: int, version: int, shown: list[str], suggested: list[str]) -> None:
    """Text typed into the terms box: the term it names, a code typed the one exported (_typing.typed_terms). The box
    keeps its key (set_box would draw a new one): a user test's box lost the focus, and the next code typed, PTCA,
    went to the page's keys, where A accepted the suggestion. A term typed beside the untouched ``suggested`` ones
    is said to be beside them: a team test typed the right code and saved it with the wrong suggestion still in."""
    terms, vocab = box_terms(mention_id, version), holder.engine.vocabulary
    if version != st.session_state.get(f"boxv_{mention_id}", 0) or all(t in vocab for t in terms):
        return
    typed_codes = {}
    now = _typing.typed_terms(holder, terms, f"q_{mention_id}", shown, typed_codes)
    st.session_state[box_key(mention_id, version)] = now
    if suggested and [t for t in terms if t in vocab] == suggested and len(now) > len(suggested):
        st.session_state.setdefault(_typing.TYPED_NOTES, []).append((
            "warning", f"Added beside the suggested {'、'.join(suggested)}: remove "
                       f"{'it' if len(suggested) == 1 else 'them'} (×) if what you typed replaces "
                       f"{'it' if len(suggested) == 1 else 'them'}."))
    for term, code in typed_codes.items():
        st.session_state.setdefault(f"codes_{mention_id}", {})[term] = code
        st.session_state[f"code_{mention_id}_{vocab.index(term)}"] = code  # its switch, if already drawn


def on_code(mention_id: int, term: str) -> None:
    picked = st.session_state.get(f"code_{mention_id}_{holder.engine.vocabulary.index(term)}")
    if picked:
        st.session_state.setdefault(f"codes_{mention_id}", {})[term] = picked


def on_relationship(mention_id: int, relationship: str) -> None:
    st.session_state[f"rel_{mention_id}"] = relationship


def on_synonym(mention_id: int) -> None:
    term = st.session_state.get(f"syn_term_{mention_id}")
    synonym = (st.session_state.get(f"syn_text_{mention_id}") or "").strip()
    try:
        with _ui.session() as s:
            added = services.add_synonym(s, ctx.vocabulary_id, term, synonym, ctx.username)
    except (ValueError, KeyError, PermissionError) as e:
        _ui.flash("error", f"Synonym not added: {e}")
        return
    holder.learn_synonym(term, synonym)
    # the mention's own suggestion is now stale (holder.is_stale); offer the taught term at once
    set_box(mention_id, [term])
    _ui.flash("toast", f"Synonym {'added' if added else 'already known'}: {synonym} → {term}")


# ---------------------------------------------------------------- the mention
status = {"skipped": " · skipped before", services.REREVIEW: " · re-review",
          "flagged": " · flagged for a lead"}.get(current.get("status"), "")
rows = f" · {current['frequency']:,} source rows share this text" if current.get("frequency") else ""
st.caption(f"Mention #{current['position']} of {total}{status}{rows}")
# skipped and served again (a lead met it, unexplained): said, and the page scrolls to its top, where the note is
showing = f"{mid}@{st.session_state.get('_last_decision_at')}" if st.session_state.get(SKIPPED) == mid else mid
if showing != mid:
    st.info("You skipped this mention, and it is the only one left for you in this batch: the others are decided or "
            "wait for colleagues or a lead. It comes back until someone decides it.", icon=":material/redo:")
if current.get("status") == "flagged":  # served to leads: the coder's question comes with it
    with _ui.session() as s:
        flag = services.mention(s, mid)["decision"] or {}
    st.info(f"**Flagged by {_ui.md(flag.get('user', '?'))}:** {_ui.md(flag.get('comment') or '(no comment)')}",
            icon=":material/flag:")
before = sent_back = None  # the decision sent to re-review, if this mention is back for that; its (terms, relationship)
if current.get("status") == services.REREVIEW:
    with _ui.session() as s:
        before = services.mention(s, mid)["decision"]
        why = review.rereview_reason(s, mid)
    sent_back = (before["terms"], before["relationship"]) if before else None
    was = " · ".join(_markup.with_codes(before["terms"], before["codes"])) if before and before["terms"] else "—"
    said_rel = {code: label[2:] for _, code, label in RELATIONSHIP_KEYS}.get((before or {}).get("relationship"))
    if said_rel and before["relationship"] != services.default_relationship(before["terms"]):
        was += f" ({said_rel})"  # kept as the default below while the box holds those terms
    st.warning(f"**Re-review:** {_ui.md(why)}. Coded before: {_ui.md(was)}. The suggestions below come from the "
               "serving model on the vocabulary edition in force.", icon=":material/history:")
_ui.markup(f'<div class="tn-mention">{_ui.highlight_html(text, sug.keywords)}</div>')
# how the engine read the mention: in its document (abbreviations it defines), then the abbreviation lists
in_doc = reading.in_document(holder.engine, text, document)
spelled = holder.engine.spelled_out(in_doc)
used = reading.definitions_in(holder.engine, text, document)
if spelled != text:
    why = ("; ".join(f"{_ui.esc(a)} = {_ui.esc(b)}" for a, b in used) + " in the document") if used \
        else "abbreviation spelled out"
    _ui.markup(f'<div class="tn-keys" data-testid="tn-spelled-out">read as: <b>{_ui.esc(spelled)}</b> '
               f"({why})</div>")
also = reading.recall_reading(holder.engine, spelled)
if also:  # the abbreviation lists and the built-in Chinese short forms: recalled as written and spelled out
    _ui.markup(f'<div class="tn-keys" data-testid="tn-also-read">also read as: <b>{_ui.esc(also)}</b> '
               "(short forms spelled out)</div>")
if document:
    with st.expander(f"The document mention #{current['position']} was found in"):  # closed for each mention
        marks = [text, *(x for pair in used for x in pair)]
        turns = f"whole_doc_turns_{mid}"  # each turn of the switch is a new view: the box scrolls to the definition
        whole = len(document) > _markup.DOCUMENT_WINDOW and st.toggle(
            f"Show the whole document ({len(document):,} characters)", key=f"whole_doc_{mid}",
            on_change=lambda k=turns: st.session_state.__setitem__(k, st.session_state.get(k, 0) + 1))
        _ui.markup(_markup.document_html(document, marks, limit=len(document) if whole else _markup.DOCUMENT_WINDOW,
                                         focus=used[0][1] if used else None,
                                         view=f"{mid}:{st.session_state.get(turns, 0)}"))
# each candidate tagged once, for the colour key and the tables
term_spans = {c.term: holder.tag(c.term) for c in sug.candidates}
# the key of the colours on this page only (a user test read "approach 入路" in the key of a diagnosis)
_ui.markup(_ui.legend_html(kinds={sp.kind for sp in sug.keywords}
                           | {sp.kind for spans in term_spans.values() for sp in spans}))

# ---------------------------------------------------------------- what the engine proposes
# the marks compare the terms with the mention as the engine read it (卵巢Ca术后: 恶性肿瘤, not Ca)
read_kw = holder.tag(also or spelled) if (also or spelled) != text else sug.keywords
why = explain.evidence(holder.engine, spelled, sug.candidates, read_kw)  # what each candidate rests on
# terms that share nothing with the mention (a string of digits, a word of no procedure) are shown, not put in
# the box: Save on a box the coder did not fill must not record a guess (the evidence's "shares nothing")
# -- each such term of a multi-term answer too (a user test: 硅管置入术, an eye procedure, in the box for the 扩张 of
# 输尿管镜检查+扩张+置双J管术)
# -- unless the ranker is sure of it all the same (GROUNDLESS_KEPT: 化疗 of 乳腺癌术后+化疗 shares no run of text with
# 化学治疗, its right term, in a second user test)
groundless = [c.term for c, w in zip(sug.candidates, why) if c.term in sug.chosen and explain.NOTHING in w
              and c.scores.get("ranker", 0.0) < GROUNDLESS_KEPT]
boxed = [t for t in sug.chosen if t not in groundless]
if sel_key not in st.session_state:
    st.session_state[sel_key] = list(st.session_state.get(f"boxinit_{mid}", boxed))
chosen_html = "".join(f'<span class="tn-chosen">{_ui.esc(t)}</span>' for t in sug.chosen) or "—"
bands = learning.serving_bands(ctx.url, ctx.vocabulary_id, model_version=sug.model_version)  # the badge's words
count = f"{sug.predicted_count} term" + ("s" if sug.predicted_count != 1 else "")
_ui.markup(f'<div style="margin:.6rem 0"><span class="tn-badge tn-grey">needs {count}</span>'
           f"{_ui.confidence_badge(sug.confidence, bands)}"
           f'<span class="tn-keys">model: {_ui.model_label(sug.model_version)}</span></div>'
           f'<div style="margin-bottom:.4rem">Suggested: {chosen_html}'
           + (' <span class="tn-keys" data-testid="tn-groundless">— shares nothing with the mention: not put in the '
              "terms box (search the vocabulary, or reject)</span>" if groundless and not boxed else "")
           + (' <span class="tn-keys" data-testid="tn-groundless">— ' + _ui.esc(" · ".join(groundless))
              + (" shares" if len(groundless) == 1 else " share") + " nothing with the mention: not put in the terms "
              "box</span>" if groundless and boxed else "") + "</div>")

same = holder.engine.same_keyword  # a keyword is marked missing / different only where coders would not write it so
# a multi-part mention's marks compare each term with the part it answers; detail coders drop is not "lacking"
mark_kw = dict(same=same, parts=[holder.tag(holder.engine.spelled_out(p)) for p in sug.parts],
               dropped=explain.counts(holder.engine).dropped)
_ui.markup(_ui.candidate_table_html(sug.candidates[:SHOWN], read_kw, sug.chosen, term_spans.__getitem__, why=why,
                                    **mark_kw))
if len(sug.candidates) > SHOWN:
    with st.expander(f"{len(sug.candidates) - SHOWN} more candidates"):
        _ui.markup(_ui.candidate_table_html(sug.candidates[SHOWN:], read_kw, sug.chosen, term_spans.__getitem__,
                                            start=SHOWN + 1, why=why[SHOWN:],
                                            top=max(c.score for c in sug.candidates), **mark_kw))

# ---------------------------------------------------------------- the terms to save, with the code each exports
vocab = holder.engine.vocabulary
in_box = list(st.session_state[sel_key])
picked_codes = st.session_state.get(f"codes_{mid}", {})


def export_code(term: str) -> str:
    return picked_codes.get(term) or vocab.export_code(term) or ""


options = list(dict.fromkeys([c.term for c in sug.candidates] + in_box))
# the chips show names only: a label that changes with the code picked below would no longer match the value
# the browser holds for the widget
st.multiselect("Terms for this mention", options, key=sel_key, on_change=on_typed,
               args=(mid, box_version, options, boxed),
               placeholder=f"Pick terms, or {_typing.TYPE_A_TERM}; or search the vocabulary below",
               accept_new_options=True,  # a term no candidate holds, typed (_typing.typed_terms reads it)
               select_all=False)  # no 'Select N matches': Enter after typing must not add every match
_typing.after_terms_box()
if before and before["terms"] and in_box and sorted(in_box) == sorted(before["terms"]):
    # the engine may well suggest the same again (its own reading; the send-back took the decision out of its
    # memory): a user test nearly saved the questioned answer again with one key
    st.warning("The box holds the terms coded before, the ones sent to re-review: change them, or save them again "
               "only if the reason above is answered.", icon=":material/replay:")
if in_box:
    st.markdown('<div class="tn-keys">Code exported for each term (the most specific by default; one click '
                "switches between a term's leaf and category codes)</div>", unsafe_allow_html=True)
for term in in_box:
    term_codes = vocab.codes_of(term)
    row = st.columns([2, 5], vertical_alignment="center")
    row[0].markdown(f"{_ui.md(term)}")
    if len(term_codes) > 1:
        key = f"code_{mid}_{vocab.index(term)}"  # ASCII: the key is also the element's CSS class
        st.session_state.setdefault(key, export_code(term))
        row[1].segmented_control(f"Code exported for {term}", term_codes, key=key, on_change=on_code,
                                 args=(mid, term), format_func=lambda c: f"{c} · {vocab.code_kind(c)}",
                                 label_visibility="collapsed")
    else:
        row[1].markdown(f'<span class="tn-code"><b>{_ui.esc(export_code(term) or "no code")}</b></span>',
                        unsafe_allow_html=True)

rel = st.session_state.get(rel_key)
default_rel = services.default_relationship(in_box, sent_back)  # a re-review's very terms keep their relationship
# rows that wrap where the labels would not fit: fixed columns cut them short on a laptop window ("1 equ…")
rc = st.container(horizontal=True, wrap=True, vertical_alignment="center", gap="small")
rc.markdown('<div class="tn-keys" title="FHIR concept-map-relationship: equivalent, source-is-narrower-than-'
            'target, source-is-broader-than-target, related-to, not-related-to">Relationship of the mention to '
            'its term(s) <span class="tn-miss">(· = the default)</span></div>', unsafe_allow_html=True, width=190)
for key_, code, label in RELATIONSHIP_KEYS:
    on = (rel or default_rel) == code
    rc.button(f"{label}" + (" ·" if on and not rel else ""), shortcut=key_, key=f"rel_{code}_{mid}",
              on_click=on_relationship, args=(mid, code), type="primary" if on else "secondary", width="stretch")

acts = st.container(horizontal=True, wrap=True, vertical_alignment="center", gap="small")
pressed = [acts.button("Save terms", type="primary", shortcut="S", on_click=on_save, args=(mid, box_version),
                       key=f"save_{mid}", width="stretch"),
           acts.button("Accept suggestion", shortcut="A", on_click=on_accept, args=(mid,), key=f"accept_{mid}",
                       width="stretch", disabled=not sug.chosen),
           acts.button("Reject: none fits", shortcut="X", on_click=_decide, args=(mid, "reject"),
                       key=f"reject_{mid}", width="stretch"),
           acts.button("Skip", shortcut="K", on_click=_decide, args=(mid, "skip"), key=f"skip_{mid}",
                       width="stretch")]
# a press whose callback never ran: the server restarted under the page, its new session knew no button (user test)
if any(pressed) and not st.session_state.pop(HEARD, False):
    st.warning("Your click or key came as the app was restarting and was not received: nothing saved. Press it "
               "again.", icon=":material/refresh:")
st.session_state.pop(HEARD, None)
acts.button("Clear the box", on_click=set_box, args=(mid, []), key=f"clear_{mid}", width="stretch",
             type="tertiary")

st.markdown('<div class="tn-keys">Keys: ' + " · ".join(f"<kbd>{k}</kbd> {what}" for k, what in SHORTCUTS)
            + "</div>", unsafe_allow_html=True)

# not a form: a comment typed in a form reached the server only with the form's own button, so a user test's
# comment was lost without a word when the coder then pressed A or Save. Enter still flags (_markup.KEYS_BACK).
fc = st.columns([5, 1], vertical_alignment="bottom")
fc[0].text_input("Comment", key=f"comment_{mid}",
                 placeholder="For the lead: kept with the decision; Enter flags the mention for a lead")
fc[1].button("Flag", on_click=on_flag, args=(mid,), key=f"flag_{mid}", width="stretch")


# ---------------------------------------------------------------- vocabulary search (reruns only itself while typing)
@st.fragment
def search_box() -> None:
    _ui.vocabulary_search(holder, f"q_{mid}", f"pick_{mid}", on_pick)

search_box()

with st.expander("Teach a synonym: this mention (or part of it) is another name of a term"):
    syn_terms = list(dict.fromkeys(list(st.session_state[sel_key]) + [c.term for c in sug.candidates]))
    sc = st.columns([3, 3, 1], vertical_alignment="bottom")
    sc[0].selectbox("Term", syn_terms, key=f"syn_term_{mid}")
    sc[1].text_input("Synonym", value=text, key=f"syn_text_{mid}")
    sc[2].button("Add synonym", on_click=on_synonym, args=(mid,), key=f"syn_add_{mid}", width="stretch")


# the mention on screen, echoed back with every click or key (ON_SCREEN); drawn last (a browser that has it has the
# whole page), hidden (_ui.CSS). Set here: a run cut short by a click leaves neither it nor drawn_at, which is when the
# mention first appeared (a relationship key redraws it; the dwell must not restart, or Save is refused "too soon")
st.session_state.setdefault(f"drawn_at_{mid}", time.time())
st.session_state[ON_SCREEN] = str(mid)
st.text_input("mention on screen", key=ON_SCREEN, label_visibility="collapsed")
if MIN_GAP_S > 0:  # the same rule in the browser, where the key press happens (app_pages/_guard.py)
    _ui.page_script(_guard.dwell_guard_html(MIN_GAP_S, keys="saxk12345"), "dwell")  # the shortcuts above
_ui.page_script(_markup.scroll_to_top_html(showing), "top")  # a new mention (or one skipped again) opens at its top
_ui.page_script(_markup.keys_back_html(), "keys")  # Esc, or a sidebar list's pick, gives the keys back
if document:  # its document box opens at the definition the engine used (deep in a long note)
    _ui.page_script(_markup.focus_scroll_html(), "focus")

# ---------------------------------------------------------------- prepare the next mentions (page already drawn)
prepared_key = "_prepared"
if st.session_state.get(prepared_key) != (mid, holder.revision):
    st.session_state[prepared_key] = (mid, holder.revision)
    # in a thread of its own: the script run ends with the page drawn, so the coder's next click is handled at
    # once (a run busy suggesting is interrupted only at its next Streamlit call) and drawn_at is when the
    # browser got the page
    _ui.prepare_in_background(holder, ctx.url, ctx.batch_id, mid, PREPARE_AHEAD)
