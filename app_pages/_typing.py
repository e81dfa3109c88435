"""Typing into a terms box (the coding page's, the annotator's, the lead's gold box): what the server makes of the
text (:func:`typed_terms`), what it says under the box and the page script of the box's keys (:func:`after_terms_box`).

The boxes are ``st.multiselect(accept_new_options=True)``, so that a term no candidate holds can be typed, not only
searched: a user test typed 脑池穿刺, a term of the vocabulary, and read "No results".
"""

from __future__ import annotations

import streamlit as st

from app_pages._markup import _installed_once, md

#: What a terms box's placeholder says of typing into it.
TYPE_A_TERM = "type a term, its code, a synonym or an abbreviation"
TYPED_NOTES = "_typed_notes"  # what typed_terms has to say under the box (after_terms_box)


def typed_terms(holder, values: list[str], search_key: str, options: list[str] = (),
                codes: dict | None = None) -> list[str]:
    """A terms box's values once a coder typed into it (Enter sends the typed text unless it is an option's very
    name: :data:`_TYPED_KEYS`). A term of the vocabulary stays. A text that names one term outright (its name, a
    code, a synonym, an abbreviation: termnorm.search.named_term) becomes that term, and a typed code of it is the
    code it exports (into ``codes``, term -> code). Other text is, as the box's list shows it, the first of
    ``options`` not in the box holding it; and if none does, it goes to the vocabulary search below
    (``search_key``, the key of a text input), whose results show what it may be. Nothing typed is saved as a term;
    each reading is said (:func:`after_terms_box`). ``holder``: the page's db.engine_holder.EngineHolder."""
    from termnorm.search import TAGS, code_text, found_tag, named_term, naming

    vocab = holder.engine.vocabulary
    out, notes = [], st.session_state.setdefault(TYPED_NOTES, [])
    for value in values:
        if value in vocab:
            out.append(value)
            continue
        hits = holder.search(value, limit=5)
        hit = named_term(hits)
        text = value.strip().lower()  # the box's list: the options holding it, those starting with it first
        held = sorted((o for o in options if text and text in o.lower() and o not in values),
                      key=lambda o: not o.lower().startswith(text))
        held += [o for o in values if text and text in o.lower() and o in vocab]  # then those in the box (no change)
        if hit is not None:
            term, how = hit.term, TAGS.get(hit.found, hit.found) if hit.via == hit.term else found_tag(hit)
            typed = [c for c in vocab.codes_of(term) if code_text(c) == code_text(value)]
            if hit.found == "code" and codes is not None and typed:
                codes[term] = typed[0]
        elif held:
            term, how = held[0], "the first option holding it"
        else:
            st.session_state[search_key] = value
            several = [h.term for h in naming(hits)]
            notes.append(("warning", f"“{value}” names {len(several)} terms ({'; '.join(several)}): it is in the "
                                     "vocabulary search below; Add the one meant from there." if len(several) > 1 else
                                     f"“{value}” names no term of this vocabulary by itself (a name, a code, a "
                                     "synonym or an abbreviation of one term): it is in the vocabulary search below; "
                                     "Add the right term from there."))
            continue
        notes.append(("info", f"“{value}” ({how}) → {term}" + (": already in the box" if term in out else "")))
        out.append(term)
    return list(dict.fromkeys(out))


def after_terms_box() -> None:
    """Under a terms box: what :func:`typed_terms` said of the text typed into it (a user test found its message
    at the page's top, a screen above the box), and the page script of the box's keys (:data:`_TYPED_KEYS`)."""
    from app_pages._ui import page_script

    for kind, message in st.session_state.pop(TYPED_NOTES, []):
        (st.warning if kind == "warning" else st.caption)(md(message))
    page_script(_installed_once(_TYPED_KEYS, "__tnTyped"), "typed")


#: The keys of a terms box, in the browser (hand-written: Streamlit's multiselect has no setting for any of it).
#: * Enter takes what was typed: the option whose name it is, else the text itself ("Add: …"), which the server
#:   reads (:func:`typed_terms`). A user test typed 胆囊切除术, a term, and Enter gave 腹腔镜下胆囊切除术, the first
#:   option holding it. Enter on an empty box adds nothing (a second Enter added the list's first option), unless the
#:   coder moved to an option with the arrows; nor does the name of a term already in the box. Enter while an input
#:   method composes is the input method's.
#: * Text typed while the server reads the previous entry is kept: its answer redraws the box, which empties the
#:   input (a user test typing a code every 0.1 s saw "51.2300" arrive as ".2300", and "ESWL" as "L", which then
#:   took an option holding it). Keys pressed while "Add: …" is being reached wait for it.
_TYPED_KEYS = """
(function () {
  if (window.__tnTyped) return;
  window.__tnTyped = true;
  const BOX = '[class*="st-key-terms_"], [class*="st-key-an_terms_"], [class*="st-key-adj_terms_"]';
  const setText = (input, text) => {  // React reads an input's value through its setter
    Object.getOwnPropertyDescriptor(HTMLInputElement.prototype, 'value').set.call(input, text);
    input.dispatchEvent(new Event('input', {bubbles: true}));
  };
  let moved = false, typed = '', adding = false, left = 0;
  const inBox = (t) => t && t.tagName === 'INPUT' && t.closest && t.closest(BOX);
  document.addEventListener('input', (e) => { if (inBox(e.target)) { moved = false; typed = e.target.value; } }, true);
  // a redraw may take the focus away and back at once; a coder who left the box comes back to an empty one
  document.addEventListener('focusin', (e) => {
    if (inBox(e.target)) { moved = false; if (Date.now() - left > 1000) typed = ''; }
  }, true);
  document.addEventListener('focusout', (e) => { if (inBox(e.target)) left = Date.now(); }, true);
  document.addEventListener('pointerdown', (e) => { if (e.target.closest?.('[role="option"]')) typed = ''; }, true);
  setInterval(() => {  // emptied, not by the coder: put it back (the redraw sets no event to listen to)
    const t = document.activeElement;
    if (typed && inBox(t) && t.value === '' && !adding) setText(t, typed);
  }, 50);
  document.addEventListener('keydown', (e) => {
    const t = e.target;
    if (!inBox(t) || e.isComposing || e.keyCode === 229) return;
    if (typed && t.value === '' && !adding) setText(t, typed);  // emptied since the last tick: first put it back
    if (adding && e.key.length === 1 && !e.ctrlKey && !e.metaKey) {  // waits for "Add: …" (below)
      e.preventDefault();
      typed += e.key;
      return;
    }
    if (e.key === 'ArrowDown' || e.key === 'ArrowUp') moved = true;
    if (e.key === 'Escape') { moved = false; typed = ''; }  // the list closes: a later Enter must not take it
    if (e.key !== 'Enter') return;
    if (adding) { e.preventDefault(); e.stopImmediatePropagation(); return; }  // not the highlighted option
    const text = t.value.trim();
    typed = '';
    if (moved) { moved = false; return; }
    const name = (label) => label.split('·')[0].trim();  // the annotate and adjudicate boxes add " · codes"
    const options = () => [...document.querySelectorAll('[role="option"]')];
    const boxed = [...t.closest(BOX).querySelectorAll('[data-tag]')]
      .some((c) => name(c.getAttribute('aria-label') || '') === text);
    const exact = text && !boxed && options().find((o) => name(o.innerText) === text);
    const list = document.querySelector('[role="listbox"]');
    if (text && !boxed && !exact && !list) return;  // no list open: the box's own Enter
    e.preventDefault();
    e.stopImmediatePropagation();
    const add = () => options().find((o) => o.innerText.trim().startsWith('Add:'));
    if (boxed) {
      setText(t, '');
    } else if (exact) {
      exact.click();
    } else if (text && add()) {
      add().click();
    } else if (text) {  // "Add: …" is the list's last option, drawn only once scrolled to (the list is virtual)
      adding = true;
      list.scrollTop = list.scrollHeight;
      setTimeout(() => { add()?.click(); adding = false; }, 80);
    }
  }, true);
})();
"""
