"""Vocabulary browser: find a term, see its codes, its place in the hierarchy and every synonym.

Search is the engine's type-ahead (``engine.search_vocabulary``: exact,
character TF-IDF and Jaccard over names and synonyms). The hierarchy is the
code's parent chain (``Vocabulary.ancestors``: the vocabulary's tree, else
code prefixes). Synonyms come from the vocabulary file and from coders
(who added them and when, from the database).
"""

import pandas as pd
import streamlit as st

from db import services
from pages import _ui

ctx = _ui.context()
_ui.style()
st.title("Vocabulary")

if ctx.vocabulary_id is None:
    st.info("No vocabulary in the database yet.")
    st.stop()

holder = ctx.holder()
vocab = holder.engine.vocabulary

q = st.text_input("Search terms, codes or synonyms", key="vocab_q", live=True, type="search",
                  placeholder="e.g. 甲状腺, 胆囊, 06.4")
query = q.strip()
if not query:
    st.caption(f"{len(vocab)} terms in {vocab.name}.")
    st.stop()

results = holder.search(query, limit=20)
# a code typed as such (06.4x00, I10) finds its names directly
by_code = [n for n in vocab.names_of(query) if n not in {c.term for c in results}]
terms = by_code + [c.term for c in results]
if not terms:
    st.caption("No term found.")
    st.stop()

st.dataframe(pd.DataFrame({"code": [", ".join(vocab.codes_of(t)) for t in terms], "term": terms}),
             hide_index=True, width="stretch", height=min(38 + 35 * len(terms), 320))

term = st.selectbox("Term", terms, key="vocab_term")
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
