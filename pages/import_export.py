"""Import / Export: bring mentions in as a batch, pre-compute suggestions, take decisions out.

Import accepts CSV, XLSX and CHIP-CDN JSON (``db.services.import_mentions``):
bad rows are listed (file, row, problem) and never block the good ones.
Pre-suggestion runs the engine over a whole batch (``engine.suggest_batch``)
and stores every suggestion, so coders only read the database. Export gives
the latest decisions of a batch as CSV, XLSX, JSONL, CHIP-CDN JSON or a FHIR
R5 ConceptMap (``db.services.export_decisions``).
"""

from pathlib import Path

import pandas as pd
import streamlit as st

from db import services
from pages import _ui

FORMATS = {  # label -> (services format, file suffix, MIME type)
    "CSV": ("csv", "csv", "text/csv"),
    "XLSX": ("xlsx", "xlsx", "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"),
    "JSONL": ("jsonl", "jsonl", "application/jsonl"),
    "CHIP-CDN json": ("chip-cdn", "json", "application/json"),
    "FHIR R5 ConceptMap": ("fhir", "fhir.json", "application/fhir+json"),
}

ctx = _ui.page()
st.title("Import / Export")

if ctx.vocabulary_id is None:
    st.info("No vocabulary in the database yet.")
    st.stop()

with _ui.session() as s:
    vocab_name = next((v["name"] for v in services.vocabularies(s) if v["id"] == ctx.vocabulary_id), "?")
    batch_list = services.batches(s, ctx.vocabulary_id)


# ---------------------------------------------------------------- import
def on_import() -> None:
    up = st.session_state.get("upload")
    if up is None:
        _ui.flash("error", "Choose a file first.")
        return
    name = (st.session_state.get("batch_name") or "").strip() or Path(up.name).stem
    # the upload goes in as is (db.io reads Streamlit's UploadedFile): every problem names the original file
    with _ui.session() as s:
        report = services.import_mentions(s, up, name, ctx.vocabulary_id, username=ctx.username)
    st.session_state["import_report"] = report
    if report.batch_id is not None:
        st.session_state["batch_id"] = report.batch_id  # the sidebar switches to the new batch


st.subheader(f"Import mentions into {vocab_name}")
st.file_uploader("CSV, XLSX or CHIP-CDN JSON (a `mention`/`text`/`原始词` column; optional gold `terms`)",
                 type=["csv", "xlsx", "json", "txt", "tsv"], key="upload")
c = st.columns([3, 1], vertical_alignment="bottom")
c[0].text_input("Batch name", key="batch_name", placeholder="default: the file name")
c[1].button("Import", type="primary", on_click=on_import, width="stretch")

report = st.session_state.get("import_report")
if report is not None:
    if report.batch_id is not None:
        st.success(f"{report.file}: {report.n_ok} mention(s) imported as batch #{report.batch_id}.")
    else:
        st.error(f"{report.file}: nothing imported.")
    if report.errors:
        st.warning(f"{len(report.errors)} problem(s): these rows were left out.")
        st.dataframe(pd.DataFrame([tuple(e) for e in report.errors], columns=["file", "row", "problem"]),
                     hide_index=True, width="stretch")

# ---------------------------------------------------------------- pre-suggestion
st.subheader("Pre-compute suggestions")
current = next((b for b in batch_list if b["id"] == ctx.batch_id), None)
if current is not None:
    st.caption(f'Runs the engine once over the waiting mentions of **{_ui.esc(current["name"])}** (the sidebar '
               "batch) and stores every suggestion, so coders only read the database.")
    if st.button("Suggest for every waiting mention", key="suggest_all"):
        with _ui.session() as s:
            waiting = services.mentions(s, current["id"], status=services.OPEN_STATUSES)
            bar = st.progress(0.0, text="suggesting…")

            def progress(done: int, total: int) -> None:
                bar.progress(done / total if total else 1.0, text=f"suggesting… {done} / {total}")

            ctx.holder().suggest_and_store(s, [m["id"] for m in waiting], [m["text"] for m in waiting],
                                           progress=progress)
        bar.progress(1.0, text=f"{len(waiting)} suggestion(s) stored")
else:
    st.caption("No batch yet.")

# ---------------------------------------------------------------- export
st.subheader("Export decisions")
if batch_list:
    names = {b["id"]: f'{b["name"]} ({b["n_done"]}/{b["n_mentions"]} coded)' for b in batch_list}
    ids = list(names)
    c = st.columns([3, 2, 2], vertical_alignment="bottom")
    # keyed by the sidebar batch, so the choice follows it when it changes
    export_id = c[0].selectbox("Batch", ids, format_func=names.get, key=f"export_batch_{ctx.batch_id}",
                               index=ids.index(ctx.batch_id) if ctx.batch_id in ids else 0)
    label = c[1].selectbox("Format", list(FORMATS), key="export_format")
    fmt, suffix, mime = FORMATS[label]
    batch_name = next(b["name"] for b in batch_list if b["id"] == export_id)

    def export_bytes(batch_id: int = export_id, fmt: str = fmt) -> bytes:
        with _ui.session() as s:  # built only when clicked (a callable is evaluated on download)
            return services.export_decisions(s, batch_id, fmt)

    c[2].download_button(f"Download {label}", data=export_bytes, mime=mime, width="stretch",
                         file_name=f"{batch_name.replace(' ', '_')}.{suffix}", type="primary")
