"""Vocabulary browser: find a term, see its codes, its place in the hierarchy and every synonym; teach
abbreviations.

Search is the engine's type-ahead, the same as the coding page's
(``engine.search_vocabulary`` -> termnorm.search: exact code, code prefix,
nearest code, name, synonym, abbreviation, then character TF-IDF / Jaccard),
each result tagged with how it was found. The hierarchy is the code's parent
chain (``Vocabulary.ancestors``: the vocabulary's tree, else code prefixes).
Synonyms come from the vocabulary file and from coders (who added them and
when, from the database). Abbreviations taught here are stored
(db.abbreviations) and searchable at once, on every page.
"""

import pandas as pd
import streamlit as st

from db import abbreviations, services
from app_pages import _ui
from termnorm.search import found_tag, nearest_note
from termnorm.text.normalize import normalize

ctx = _ui.context()
_ui.style()
_ui.show_flash()  # what teaching an abbreviation said on the previous run
st.title("Vocabulary")

if ctx.vocabulary_id is None:
    st.info("No vocabulary in the database yet.")
    st.stop()

holder = ctx.holder()
vocab = holder.engine.vocabulary


def on_teach() -> None:
    """Store the abbreviation, THEN teach the engine (as decisions do), so the engine never knows more than
    the database."""
    ss = st.session_state
    abbr, expansion = ss.get("abbr_text", "").strip(), ss.get("abbr_expansion", "").strip()
    if not abbr and not expansion:  # a blank form, e.g. the second click of a double click (the form clears)
        return
    with holder.lock:
        listed = expansion in holder.engine.searcher.expansions(abbr)  # the shipped list's pairs too
    if abbr and listed:
        _ui.flash("error", f"{abbr} → {expansion} is already known.")
        return
    try:
        with _ui.session() as s:
            new = abbreviations.add_abbreviation(s, ctx.vocabulary_id, abbr, expansion, ctx.username)
    except (ValueError, KeyError) as e:
        _ui.flash("error", str(e).strip("'\""))
        return
    if not new:
        _ui.flash("error", f"{abbr} → {expansion} is already known.")
        return
    with holder.lock:
        holder.engine.add_abbreviation(abbr, expansion)
        top = holder.engine.search_vocabulary(abbr, limit=1)
    named = any(expansion in n for n in vocab.names)
    _ui.flash("toast", f"{abbr} → {expansion} taught" + (f"; it now finds {top[0].term}" if top and named else ""))
    if not named:
        _ui.flash("warning", f"{abbr} → {expansion}: no name of {vocab.name} holds “{expansion}”, so a mention "
                             f"with {abbr} is read as words no term is named by. Check the spelling.")


def teach_section() -> None:
    """The "Teach an abbreviation" form and every abbreviation the search knows for this vocabulary."""
    st.subheader("Abbreviations")
    with st.form("teach_abbr", border=True, clear_on_submit=True):
        st.markdown("**Teach an abbreviation**")
        fc = st.columns([1, 3], vertical_alignment="bottom")
        fc[0].text_input("Abbreviation", key="abbr_text", max_chars=abbreviations.ABBREVIATION_LEN,
                         placeholder="e.g. LC")
        fc[1].text_input("Stands for", key="abbr_expansion", placeholder="e.g. 腹腔镜下胆囊切除术")
        st.form_submit_button("Teach", key="abbr_teach", type="primary", on_click=on_teach)
    with _ui.session() as s:
        taught = abbreviations.abbreviation_rows(s, ctx.vocabulary_id)
    with holder.lock:
        known = holder.engine.searcher.abbreviations()
    mine = {(normalize(r["abbreviation"]), r["expansion"]) for r in taught}
    listed = [{"abbreviation": a, "expansion": e, "scope": "", "source": "list", "added_by": "", "at": ""}
              for a, e in known if (normalize(a), e) not in mine]  # every cell filled: no "None" on the page
    rows = [{**r, "at": f"{r['at']:%Y-%m-%d %H:%M}" if r["at"] else ""} for r in taught] + listed
    if rows:
        st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch", height=min(38 + 35 * len(rows), 320),
                     key="abbr_table")
    else:
        st.caption("No abbreviation yet.")


def search_results(query: str) -> str | None:
    """The results table; the term picked in it (None: nothing found)."""
    results = holder.search(query, limit=20)
    retired = holder.retired.get(query.strip())  # a name or code the edition in force no longer has
    if retired:
        st.warning(retired, icon=":material/history:")
    if not results:
        st.caption("No term found.")
        return None
    note = nearest_note(query, results)  # "no code E11.900; codes under E11.90"
    if note:
        st.caption(note)
    st.dataframe(pd.DataFrame({"code": [c.code or "" for c in results],
                               "other codes": [", ".join(c.codes[1:]) for c in results],
                               "term": [c.term for c in results],
                               "found as": [found_tag(c) for c in results]}),
                 hide_index=True, width="stretch", height=min(38 + 35 * len(results), 320))
    # a retired name's results are other terms like it: none opens until picked (a user read the first as the
    # retired name's term); a renamed one's successor, found as its synonym, opens
    stands_in = not retired or getattr(results[0], "found", "") in ("name", "code", "synonym")
    if st.session_state.get("vocab_term_of") != query:  # a new search shows its first result, not the last pick
        st.session_state["vocab_term_of"] = query
        st.session_state["vocab_term"] = results[0].term if stands_in else None
    return st.selectbox("Term", [c.term for c in results], key="vocab_term",
                        placeholder="Pick a term like the retired one to open it")


q = st.text_input("Search terms, codes, synonyms or abbreviations", key="vocab_q", live=True, type="search",
                  placeholder="e.g. 甲状腺, 胆囊, 06.4, 06.31, PCI")
query = q.strip()
term = search_results(query) if query else None
if not query:
    st.caption(f"{len(vocab)} terms in {vocab.name}.")
if term is None:
    teach_section()
    st.stop()

spans = holder.tag(term)
_ui.markup(f'<div class="tn-mention" style="font-size:1.4rem">{_ui.highlight_html(term, spans)}</div>')
_ui.markup(_ui.legend_html(candidates=False))

left, right = st.columns(2)
with left:
    st.subheader("Codes and hierarchy")
    for code in vocab.codes_of(term) or ["(no code)"]:
        chain = list(reversed(vocab.ancestors(code))) if code != "(no code)" else []
        steps = [f'<span class="tn-code">{_ui.esc(c)}</span> {_ui.esc(vocab.code_names.get(c, ""))}'
                 for c in chain]
        steps.append(f'<b><span class="tn-code">{_ui.esc(code)}</span> {_ui.esc(term)}</b>')
        _ui.markup("<div>" + " &rsaquo; ".join(steps) + "</div>")
        if not chain:
            st.caption("No parent code in this vocabulary.")
    siblings = [n for c in vocab.codes_of(term) for n in vocab.names_of(c) if n != term]
    if siblings:
        st.caption("Other names with the same code: " + ", ".join(siblings))

with right:
    st.subheader("Synonyms")
    with _ui.session() as s:
        rows = services.term_synonyms(s, ctx.vocabulary_id, term)
    if rows:
        st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch")
    else:
        st.caption("No synonym yet. Coders add them from the coding queue.")

teach_section()
