"""Import / Export: bring mentions in as a batch, pre-compute suggestions, take decisions out.

Import accepts CSV, XLSX and CHIP-CDN JSON (``db.services.import_mentions``):
bad rows are listed (file, row, problem) and never block the good ones.
Pre-suggestion runs the serving engine over a whole batch in a background job
(``db.suggest_jobs``; progress in ``app_pages/_jobs.py``) and stores every
suggestion, so coders only read the database. Export gives the latest
decisions of a batch as CSV, XLSX, JSONL, CHIP-CDN JSON, a FHIR R5
ConceptMap or an OMOP SOURCE_TO_CONCEPT_MAP (``db.exports.export_batch``): the
file is built by "Prepare the export", then downloaded as ready bytes.
"""

import tempfile
from datetime import datetime
from pathlib import Path

import pandas as pd
import streamlit as st

from db import exports, precoded, services, suggest_jobs
from app_pages import _jobs, _ui
from termnorm.jobs import JobBusy, JobRunner

FORMATS = {  # label -> db.exports format
    "CSV": "csv",
    "XLSX": "xlsx",
    "JSONL": "jsonl",
    "CHIP-CDN json": "chip-cdn",
    "FHIR R5 ConceptMap": "fhir",
    "OMOP SOURCE_TO_CONCEPT_MAP": "omop",
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
def _problems_table(frame: pd.DataFrame) -> None:
    """Rejections or notices in full: a short list as a table whose text wraps (a data grid cut a notice naming
    the cells after 40 characters), a long one as a sortable grid with a wide text column."""
    frame["row"] = frame["row"].map(lambda r: "" if r is None or pd.isna(r) else str(int(r)))
    if len(frame) <= 30:
        st.table(frame.set_index("file"))
    else:
        st.dataframe(frame, hide_index=True, width="stretch",
                     column_config={frame.columns[-1]: st.column_config.TextColumn(width="large")})


def on_import(again: bool = False) -> None:
    """Import the chosen file; ``again``: also when a batch already holds its mentions (asked below)."""
    up = st.session_state.get("upload")
    if up is None:
        _ui.flash("error", "Choose a file first.")
        return
    if again and st.session_state.pop("import_again_for", None) != up.file_id:
        again = False  # the second click of a double click: the answer was used, the file is a duplicate again
    name = (st.session_state.get("batch_name") or "").strip() or Path(up.name).stem
    report = _import_precoded(up, name, again)
    if report is None:
        # the upload goes in as is (db.imports reads Streamlit's UploadedFile): every problem names the file
        with _ui.session() as s:
            report = services.import_mentions(s, up, name, ctx.vocabulary_id, username=ctx.username, again=again)
    st.session_state["import_report"] = report
    if report.duplicate_of is not None:  # "Import it again" answers for this very file, once
        st.session_state["import_again_for"] = up.file_id
    if report.batch_id is not None:
        st.session_state["batch_id"] = report.batch_id  # the sidebar switches to the new batch


def _import_precoded(up, name: str, again: bool):
    """A file ``termnorm normalize --output`` wrote goes in with its suggestions (db.precoded); else None."""
    suffix = Path(up.name).suffix.lower()
    if suffix not in (".csv", ".tsv", ".xlsx", ".jsonl", ".parquet"):
        return None
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"upload{suffix}"
        path.write_bytes(up.getvalue())
        if not precoded.is_precoded(path):
            return None
        bar = st.progress(0.0, text=f"Reading {up.name}")
        try:
            with _ui.session() as s:
                return precoded.import_precoded(
                    s, path, name, ctx.vocabulary_id, ctx.username, shown_name=up.name, again=again,
                    progress=lambda done, total: bar.progress(done / total, text=f"{done:,} / {total:,} suggestions"))
        finally:
            bar.empty()


st.subheader(f"Import mentions into {vocab_name}")
st.file_uploader("CSV, XLSX or CHIP-CDN JSON (a `mention`/`text`/`原始词` column; optional gold `terms`; optional "
                 "`document`/`note`/`病历`: the note each mention came from, whose abbreviations are read), or a "
                 "pre-coded file from `termnorm normalize --output` (CSV, TSV, XLSX, JSONL, Parquet: imported with "
                 "its suggestions, one mention per distinct text)",
                 type=["csv", "xlsx", "json", "txt", "tsv", "jsonl", "parquet"], key="upload")
c = st.columns([3, 1], vertical_alignment="bottom")
c[0].text_input("Batch name", key="batch_name", placeholder="default: the file name")
c[1].button("Import", type="primary", on_click=on_import, width="stretch")

report = st.session_state.get("import_report")
if report is not None:
    if report.batch_id is not None and report.n_mentions is not None:  # a pre-coded file: a mention per text
        st.success(f"{_ui.md(report.file)}: {report.n_imported:,} row(s) imported as {report.n_mentions:,} "
                   f"mention(s), one per distinct text, with the file's suggestions, in batch #{report.batch_id} "
                   "(served most frequent text first).")
    elif report.batch_id is not None:
        st.success(f"{_ui.md(report.file)}: {report.n_imported} mention(s) imported as batch #{report.batch_id}.")
    elif report.duplicate_of is not None:
        dup = report.duplicate_of
        st.warning(f"{_ui.md(report.file)}: nothing imported. Its {dup['n']:,} mention(s) are already batch "
                   f"#{dup['id']} “{_ui.md(dup['name'])}”, imported {dup['created_at']:%Y-%m-%d %H:%M} UTC: "
                   "importing the file again would have coders code every mention twice.",
                   icon=":material/content_copy:")
        up = st.session_state.get("upload")
        if up is not None and up.file_id == st.session_state.get("import_again_for"):
            st.button("Import it again as a new batch", on_click=on_import, args=(True,), key="import_again")
    else:
        why = "; ".join(e.problem for e in report.file_problems) or "every row was rejected (see the table below)"
        st.error(f"{_ui.md(report.file)}: nothing imported: {_ui.md(why)}")
    if report.sheets_left:
        st.warning(f"Not imported: sheet(s) {', '.join(map(repr, report.sheets_left))} of {_ui.md(report.file)} "
                   "also hold mentions. One sheet is read per import: save each as a file of its own and import "
                   "it.", icon=":material/tab:")
    if report.batch_id is not None and report.gold_from:
        st.info(f"Gold terms read from {_ui.md(report.gold_from)}: {report.n_gold:,} imported row(s) carry "
                "them. They are taken as right answers (training and evaluation data of the vocabulary); to code "
                "the rows afresh, import the file without that column.", icon=":material/verified:")
    c = st.columns(4)
    c[0].metric("Rows read", report.n_read)
    c[1].metric("Imported", report.n_imported)
    c[2].metric("Rejected", report.n_rejected)
    c[3].metric("Notices", len(report.notices))
    if report.rejected:
        st.warning(f"{report.n_rejected} row(s) rejected: fix them in the file and import those rows again.")
        _problems_table(pd.DataFrame([tuple(e) for e in report.rejected], columns=["file", "row", "problem"]))
    if report.notices:
        st.info(f"{len(report.notices)} notice(s): these rows were imported; each says what was changed "
                "or is unusual.")
        _problems_table(pd.DataFrame([tuple(n) for n in report.notices], columns=["file", "row", "notice"]))

# ---------------------------------------------------------------- pre-suggestion
# A background job (db.suggest_jobs), never this script: on a 50,000-row batch the engine runs for
# minutes, and coders on the same vocabulary must not wait for it.
def on_precompute(batch_id: int) -> None:
    try:
        job = suggest_jobs.start_precompute(ctx.url, batch_id, by=ctx.username, runner=JobRunner())
    except JobBusy as e:
        _ui.flash("error", f"Not started: {e}. Wait for it to finish or cancel it below.")
        return
    _ui.flash("toast", f"Pre-computing suggestions in the background (job {job}).")


st.subheader("Pre-compute suggestions")
current = next((b for b in batch_list if b["id"] == ctx.batch_id), None)
if current is not None:
    st.caption(f'Suggests, in the background, for every waiting mention of **{_ui.md(current["name"])}** (the '
               "sidebar batch) that has no suggestion of the serving model yet, and stores them, so coders only "
               "read the database. Coding goes on meanwhile; a cancelled run resumes where it stopped.")
    jobs_runner = JobRunner()
    busy = suggest_jobs.active(jobs_runner, ctx.vocabulary_id)
    st.button("Suggest for every waiting mention", key="suggest_all", on_click=on_precompute,
              args=(current["id"],), disabled=busy is not None,
              help="Runs as a background job: one suggestion job per vocabulary at a time.")
    if busy is not None:
        st.caption(f"A suggestion job is running for this vocabulary ({busy.get('title', busy['id'])}): "
                   "a new one can start when it ends.")
    _jobs.panel(jobs_runner, "suggest_job", result=_jobs.suggestion_outcome,
                lock=suggest_jobs.lock(ctx.vocabulary_id))  # this vocabulary's suggestion jobs only
    # ---------------------------------------------------------------- queue order
    def on_order(batch_id: int) -> None:
        with _ui.session() as s:
            order = st.session_state[f"queue_order_{batch_id}"]
            services.set_queue_order(s, batch_id, order, ctx.username)
        _ui.flash("toast", f"Coders of this batch are now served {services.ORDER_LABELS[order]}.")

    st.subheader("Queue order")
    c = st.columns([3, 1], vertical_alignment="bottom")
    c[0].selectbox(f'Coders of **{_ui.md(current["name"])}** are served', services.ORDERS,
                   index=services.ORDERS.index(current["queue_order"]), key=f"queue_order_{current['id']}",
                   format_func=services.ORDER_LABELS.get)
    c[1].button("Apply", key="queue_order_apply", on_click=on_order, args=(current["id"],), width="stretch")
else:
    st.caption("No batch yet.")

# ---------------------------------------------------------------- export
def export_options(batch_id: int, fmt: str) -> tuple:
    """What the prepared file depends on: a download is offered only while the form still says the same."""
    up = st.session_state.get("omop_concepts")
    upload = (getattr(up, "file_id", None) or (up.name, up.size)) if up is not None else None
    approved = True if fmt == "omop" else bool(st.session_state.get("export_approved"))
    omop = (st.session_state.get("omop_source", ""), st.session_state.get("omop_target", ""), upload)
    return batch_id, fmt, approved, omop if fmt == "omop" else None


def on_prepare(batch_id: int, fmt: str) -> None:
    # Built here, once, and handed to the download button as bytes: a data callable runs when the button is
    # clicked, and on a big batch the button spun for over a minute.
    st.session_state.pop("export_ready", None)
    omop = {}
    if fmt == "omop":
        omop = {"source_vocabulary_id": (st.session_state.get("omop_source") or "").strip() or None,
                "target_vocabulary_id": st.session_state.get("omop_target") or "",
                "concepts": st.session_state.get("omop_concepts")}
    try:
        with _ui.session() as s:
            out = exports.export_batch(s, batch_id, fmt, approved_only=bool(st.session_state.get("export_approved")),
                                       **omop)
    except (ValueError, KeyError) as e:
        _ui.flash("error", f"Export not prepared: {e}")
        return
    st.session_state["export_ready"] = {"options": export_options(batch_id, fmt), "export": out,
                                        "at": datetime.now().strftime("%H:%M:%S")}


def written(report: dict) -> int:
    """Decisions the prepared file holds: rows, or a ConceptMap's elements."""
    return report.get("rows", report.get("elements", 0))


def show_report(report: dict) -> None:
    only = " approved" if report.get("approved_only") else ""
    fmt = report["format"]
    if only and not written(report):
        st.warning("No approved decision in this batch yet: a lead approves decisions on the Review page.")
    if fmt == "omop":
        row = st.container(horizontal=True, wrap=True, gap="small")  # wraps where the labels would not fit
        row.metric("Rows written", report["rows"], width="stretch")
        row.metric("Decisions", report["decisions"], width="stretch")
        row.metric("Codes without concept_id", len(report["no_concept"]), width="stretch")
        row.metric("Mentions cut to 50 characters", len(report["cut"]), width="stretch")
        if report.get("not_related"):
            st.caption(f"{report['not_related']} mention(s) the coder marked not related to their terms: written with "
                       "target_concept_id 0 (no mapping), as rejections are.")
        if not report["concepts_given"] and written(report):  # with no row, the warning above says it all
            st.info("No CONCEPT.csv given: every target_concept_id is 0 (no matching concept).")
        elif report["no_concept"]:
            st.warning(f"{len(report['no_concept'])} code(s) have no concept of {report['target_vocabulary_id']} "
                       f"in CONCEPT.csv ({report['rows_without_concept']} row(s) with target_concept_id 0): "
                       + ", ".join(report["no_concept"][:50]))
        if report["cut"]:
            st.warning("source_code is varchar(50): these mentions were cut (the full text is in "
                       "source_code_description): " + "; ".join(report["cut"][:20]))
        if report["cut_description"]:
            st.warning(f"{len(report['cut_description'])} mention(s) longer than 255 characters were cut in "
                       "source_code_description too.")
        if report["same_source_code"]:
            st.warning(f"{len(report['same_source_code'])} source_code(s) are shared by different mentions "
                       "after the cut.")
    elif fmt == "fhir":
        st.caption(f"ConceptMap status **{report['status']}**: {report['elements']} mention(s) mapped, "
                   f"{report['no_map']} of them rejected (noMap); {report['left_out']} skip / flag decision(s) "
                   "left out (no mapping).")
    elif fmt == "chip-cdn":
        st.caption(f"{report['rows']}{only} decision(s) with terms; {report['left_out']} without terms or marked not "
                   "related left out (a training-data format).")
    else:
        # spreadsheet times carry no zone (Excel has none); JSON Lines writes +00:00
        st.caption(f"{report['rows']}{only} decision(s)." + (" Times (at, reviewed_at) are UTC."
                                                             if fmt in ("csv", "xlsx") else ""))
        if report.get("cut"):
            st.warning(f"{len(report['cut'])} cell(s) longer than Excel's 32,767 characters were cut in this XLSX: "
                       + ", ".join(report["cut"][:20]) + (" …" if len(report["cut"]) > 20 else "")
                       + ". CSV and JSONL keep them whole.", icon=":material/content_cut:")


st.subheader("Export decisions")
if batch_list:
    names = {b["id"]: f'{b["name"]} · #{b["id"]} ({b["n_mentions"]:,} mentions)' for b in batch_list}  # fixed labels
    ids = list(names)
    c = st.columns([3, 2, 2.4], vertical_alignment="bottom")
    # keyed by the sidebar batch, so the choice follows it when it changes
    export_id = c[0].selectbox("Batch", ids, format_func=names.get, key=f"export_batch_{ctx.batch_id}",
                               index=ids.index(ctx.batch_id) if ctx.batch_id in ids else 0)
    label = c[1].selectbox("Format", list(FORMATS), key="export_format")
    fmt = FORMATS[label]
    c[2].checkbox("Approved decisions only", key="export_approved", disabled=fmt == "omop",
                  help="Only decisions a lead approved (OMOP exports approved decisions only, always).")
    if fmt == "omop":
        c = st.columns([2, 2, 3], vertical_alignment="bottom")
        c[0].text_input("Source vocabulary_id", key="omop_source", max_chars=exports.OMOP_VOCABULARY_ID_LEN,
                        placeholder=exports.DEFAULT_SOURCE_VOCABULARY,
                        help="A short id naming these mentions as a source vocabulary (OMOP varchar(20)).")
        c[1].text_input("Target vocabulary_id", key="omop_target", max_chars=exports.OMOP_VOCABULARY_ID_LEN,
                        placeholder="e.g. ICD10CN / ICD9ProcCN",
                        help="The OMOP vocabulary_id of the exported codes, to look their concept_id up.")
        c[2].file_uploader("Athena CONCEPT.csv (optional)", type=["csv", "tsv", "txt"], key="omop_concepts",
                           help="From athena.ohdsi.org (download only the target vocabulary to keep it small). "
                                "Without it every target_concept_id is 0.")
    st.button("Prepare the export", key="export_prepare", on_click=on_prepare, args=(export_id, fmt))
    ready = st.session_state.get("export_ready")
    if ready is not None and ready["options"] == export_options(export_id, fmt):
        out = ready["export"]
        show_report(out.report)
        if written(out.report):
            st.download_button(f"Download {_ui.md(out.file_name)}", data=out.data, file_name=out.file_name,
                               mime=out.mime, key="export_download", type="primary", on_click="ignore",
                               help=f"Prepared at {ready['at']}: prepare again to include later decisions.")
        else:  # a header alone, or a ConceptMap without an element, is no export
            st.caption("Nothing to download: the file would hold no decision.")
    elif ready is not None:
        st.caption("The export options changed since the file was prepared: prepare it again.")
