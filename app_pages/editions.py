"""Editions (lead): bring in a new edition of the vocabulary and see which mappings it broke.

Top to bottom: the edition in force and the code system URI written into
exports; the editions imported so far with what each changed; the upload of a
new edition (db.editions.import_edition: added / retired / renamed / code
changed, and every decision pointing at a retired or re-coded term sent to the
re-review queue with the reason); the changes of the chosen edition, name by
name. Coders meet the re-review mentions first in their coding queue; leads
follow them on the Review page (status needs_rereview).
"""

import tempfile
from pathlib import Path

import pandas as pd
import streamlit as st

from db import editions, services
from app_pages import _ui
from termnorm.errors import DataFormatError
from termnorm.loaders import load_vocabulary

ctx = _ui.page("lead")
SHOWN_SHARED = 5  # codes named one by one in the warning about a code given to several terms


def _read_upload(up):
    """The uploaded vocabulary file read by termnorm.loaders (a path: the format is sniffed from its name), or None
    after an error message naming the file and its rows."""
    suffix = Path(up.name).suffix or ".txt"
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"vocabulary{suffix}"
        path.write_bytes(up.getvalue())
        try:
            read = load_vocabulary(path)
        except (DataFormatError, ValueError, OSError) as e:
            # the loader names the file too: "NAME: problem" or "NAME, row 7: problem"
            why = str(e).replace(str(path), up.name).removeprefix(up.name).removeprefix(":").removeprefix(",")
            _ui.flash("error", f"{up.name}: not imported: {why.strip()}")
            return None
    read.source = up.name
    return read


def _warn_shared_codes(vocab, file_name: str) -> None:
    shared = vocab.shared_codes()
    if shared:
        named = "; ".join(f"{c}: {' / '.join(ns)}" for c, ns in list(shared.items())[:SHOWN_SHARED])
        _ui.flash("warning", f"{file_name}: {len(shared)} code(s) are given to more than one name, so those terms "
                             f"export the same code ({named}{' …' if len(shared) > SHOWN_SHARED else ''}). If one is "
                             "another name of the other, put it in a synonyms column and import the file again.")


def on_new_vocabulary() -> None:
    up, name = st.session_state.get("nv_file"), (st.session_state.get("nv_name") or "").strip()
    if up is None or not name:
        _ui.flash("error", "Choose the vocabulary's file and give it a name first.")
        return
    new = _read_upload(up)
    if new is None:
        return
    try:
        with _ui.session() as s:
            vid = services.create_vocabulary(s, new, name, ctx.username)
    except (ValueError, PermissionError) as e:
        _ui.flash("error", f"{up.name}: not imported: {e}")
        return
    _warn_shared_codes(new, up.name)
    _ui.release_held()  # the mention left on another vocabulary's screen goes back to its queue
    st.session_state["vocabulary_id"], st.session_state["batch_id"] = vid, None  # the sidebar opens it
    for k in ("nv_file", "nv_name"):
        st.session_state.pop(k, None)
    _ui.flash("toast", f"Vocabulary {name} created: {len(new)} terms. Import its first batch on Import / Export.")


def new_vocabulary_form() -> None:
    with st.expander("Add another vocabulary: a list of its own (the hospital's codes), not a new edition of this one",
                     # open while a file waits (the page's messages above it re-mount it, closed by default)
                     expanded=ctx.vocabulary_id is None or st.session_state.get("nv_file") is not None):
        c = st.columns([3, 2, 1], vertical_alignment="bottom")
        c[0].file_uploader("Vocabulary file (code.txt, xlsx, CSV with code, name [, synonyms, parent] columns, ICD "
                           "tree JSON, MEDIC)", type=["txt", "tsv", "csv", "xlsx", "json"], key="nv_file")
        c[1].text_input("Its name", key="nv_name", max_chars=200, placeholder="e.g. 本院手术操作 2027")
        c[2].button("Create", type="primary", on_click=on_new_vocabulary, key="nv_create", width="stretch")


if ctx.vocabulary_id is None:
    st.info("No vocabulary yet: add one below.")
    new_vocabulary_form()
    st.stop()

with _ui.session() as s:
    vocab = next(v for v in services.vocabularies(s) if v["id"] == ctx.vocabulary_id)
    history = editions.editions(s, ctx.vocabulary_id)

current = history[-1] if history else None
st.markdown(f"### Editions · {_ui.md(vocab['name'])}")
st.write(f"Edition in force: **{vocab['edition']}**" + (f" ({_ui.md(current['label'])})" if current and current["label"]
                                                         else "") + f" · {vocab['n_terms']} term" + ("" if vocab["n_terms"] == 1 else "s"))


# ---------------------------------------------------------------- code system URI
def on_uri() -> None:
    try:
        with _ui.session() as s:
            services.set_system_uri(s, ctx.vocabulary_id, st.session_state.get("ed_uri", ""), ctx.username)
    except (ValueError, PermissionError) as e:
        _ui.flash("error", f"Not changed: {e}")
        return
    _ui.flash("toast", "Code system URI saved")


u = st.columns([4, 1], vertical_alignment="bottom")
u[0].text_input("Code system URI written into exports (FHIR group.target)", value=vocab["system_uri"],
                key="ed_uri", placeholder=services.code_system(vocab["name"]),
                help="e.g. http://hl7.org/fhir/sid/icd-10-cn for an official edition; left empty, a "
                     "urn:termnorm:vocabulary: URI is used (no official system is claimed for a local edition)")
u[1].button("Save URI", on_click=on_uri, key="ed_uri_save", width="stretch")

# ---------------------------------------------------------------- the editions so far
if history:
    st.dataframe(pd.DataFrame([{
        "edition": e["number"], "label": e["label"], "file": Path(e["source_file"]).name, "imported": e["imported_at"],
        "by": e["imported_by"], **{k: e["counts"].get(k, 0) for k in
                                   ("added", "retired", "renamed", "code_changed", "rereview")}}
        for e in reversed(history)]), hide_index=True, width="stretch")


# ---------------------------------------------------------------- a new edition
def on_import(confirm_retired: int | None = None) -> None:
    st.session_state.pop("ed_confirm", None)
    up = st.session_state.get("ed_file")
    if up is None:
        _ui.flash("error", "Choose the new edition's file first.")
        return
    new = _read_upload(up)
    if new is None:
        return
    new.name = vocab["name"]
    try:
        with _ui.session() as s:
            out = editions.import_edition(s, ctx.vocabulary_id, new, st.session_state.get("ed_label", ""),
                                          ctx.username, source_file=up.name, confirm_retired=confirm_retired)
    except editions.RetirementNeedsConfirmation as e:  # asked below, for this very file
        st.session_state["ed_confirm"] = {"file_id": up.file_id, "retired": e.retired, "message": str(e)}
        return
    except (ValueError, PermissionError, KeyError) as e:
        _ui.flash("error", f"{up.name}: not imported: {e}")
        return
    _warn_shared_codes(new, up.name)
    st.session_state["ed_show"] = out["number"]
    c = out["counts"]
    _ui.flash("toast", f"Edition {out['number']} in force: {c['added']} added, {c['retired']} retired, "
                       f"{c['renamed']} renamed, {c['code_changed']} re-coded; {out['rereview']} decision(s) "
                       "sent to re-review")


with st.container(border=True):
    st.markdown("**Import a new edition** (the file replaces the edition in force; nothing is deleted: retired "
                "terms stay for the decisions that point at them)")
    c = st.columns([3, 2, 1], vertical_alignment="bottom")
    c[0].file_uploader("Vocabulary file (code.txt, xlsx, CSV code,name, ICD tree JSON, MEDIC)",
                       type=["txt", "tsv", "csv", "xlsx", "json"], key="ed_file")
    c[1].text_input("Edition label", key="ed_label", placeholder="e.g. v602, 2027")
    c[2].button("Import", type="primary", on_click=on_import, key="ed_import", width="stretch")
    ask, up = st.session_state.get("ed_confirm"), st.session_state.get("ed_file")
    if ask and up is not None and ask["file_id"] == up.file_id:
        st.warning(_ui.md(ask["message"]), icon=":material/warning:")
        st.button(f"Import it and retire {ask['retired']} terms", on_click=on_import, args=(ask["retired"],),
                  key="ed_import_confirm")

# ---------------------------------------------------------------- what an edition changed
later = [e for e in history if e["number"] > 1]
if later:
    numbers = [e["number"] for e in reversed(later)]
    pick = st.selectbox("Changes of edition", numbers, key="ed_show",
                        format_func=lambda n: f"{n}" + next((f" ({e['label']})" for e in later
                                                            if e["number"] == n and e["label"]), ""))
    shown = next(e for e in later if e["number"] == pick)
    ch, counts = shown["changes"], shown["counts"]

    def tab(label: str, kind: str) -> str:  # the edition's count: its stored list keeps editions.DIFF_LIST_LIMIT
        n, listed = counts.get(kind, len(ch.get(kind, []))), len(ch.get(kind, []))
        return f"{label} ({n:,}" + (f"; the first {listed:,} listed)" if listed < n else ")")

    tabs = st.tabs([tab("renamed", "renamed"), tab("retired", "retired"), tab("code changed", "code_changed"),
                    tab("added", "added")])
    tabs[0].dataframe(pd.DataFrame(ch.get("renamed", []), columns=["old name", "new name"]), hide_index=True,
                      width="stretch")
    tabs[1].dataframe(pd.DataFrame({"retired name": ch.get("retired", [])}), hide_index=True, width="stretch")
    tabs[2].dataframe(pd.DataFrame([(n, ", ".join(o), ", ".join(w)) for n, o, w in ch.get("code_changed", [])],
                                   columns=["name", "codes before", "codes now"]), hide_index=True, width="stretch")
    tabs[3].dataframe(pd.DataFrame({"added name": ch.get("added", [])}), hide_index=True, width="stretch")
    st.caption("Decisions sent to re-review are on the Review page (status needs_rereview) and come first in "
               "the coding queue.")

new_vocabulary_form()
