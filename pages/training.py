"""Training (for leads): what coders taught since the current model, retraining, versions, auto-accept.

Reads top to bottom like the screen: the new training signal by kind since
the current model; a button that retrains in a background job (its progress,
log and result survive page reloads: they are read from the job's folder,
termnorm.jobs); the model registry with each version's gold accuracy and the
gate's decision, promote and rollback (termnorm.registry); the auto-accept
threshold for a target precision with the batch's expected coverage, and the
action that auto-codes the batch while sending a random audit share back to
the coders (termnorm.active).
"""

import pandas as pd
import streamlit as st

from db import services
from pages import _ui
from termnorm import active, retrain
from termnorm.jobs import FINAL, JobBusy, JobRunner
from termnorm.registry import GATE_MARGIN, Gate, Registry

ctx = _ui.page("lead")

if ctx.vocabulary_id is None:
    st.info("No vocabulary yet: import one on the Import / Export page.")
    st.stop()

with _ui.session() as s:
    vocab_name = next(v["name"] for v in services.vocabularies(s) if v["id"] == ctx.vocabulary_id)
registry = Registry.for_vocabulary(vocab_name)
runner = JobRunner()
current = registry.current()

st.markdown(f"### Training · {_ui.esc(vocab_name)}")

# ---------------------------------------------------------------- training signal
st.markdown("#### New training signal since the current model")
with _ui.session() as s:
    new = retrain.new_pairs_since_current(s, ctx.vocabulary_id, registry)
cols = st.columns(5)
for col, (label, key) in zip(cols, [("accepted", "accepted"), ("corrected", "corrected"),
                                     ("rejected candidates", "rejected_candidate"), ("new synonyms", "synonym"),
                                     ("all pairs", "total")]):
    col.metric(label, new.get(key, 0))
st.caption(f"Current model: **{current['version']}**" if current else "No registered model yet: the first "
           "retraining creates version 1 (it becomes current, nothing to compare with).")

# ---------------------------------------------------------------- retraining job
st.markdown("#### Retrain")
margin = st.number_input("Gate margin (promote when new accuracy ≥ current − margin)", value=float(GATE_MARGIN),
                         min_value=-0.2, max_value=0.2, step=0.005, format="%.3f", key="gate_margin")


def _start() -> None:
    try:
        job = retrain.start_retrain_job(ctx.vocabulary_id, url=ctx.url, registry_root=registry.root,
                                        margin=float(st.session_state.get("gate_margin", 0.0)), by=ctx.username,
                                        runner=runner)
        _ui.flash("info", f"Retraining started (job {job}).")
    except JobBusy as e:
        _ui.flash("error", str(e))


busy = runner.active() is not None
st.button("Retrain now", type="primary", disabled=busy, on_click=_start, key="retrain",
          help="Refit on base data + every accepted / corrected mention, with confirmed and mined negatives; "
               "evaluate on gold; register; promote if the gate passes. Runs in the background.")


@st.fragment(run_every=2.0 if busy else None)
def job_panel() -> None:
    job = runner.latest()
    if job is None:
        st.caption("No retraining job has run yet.")
        return
    state = job["state"]
    st.progress(float(job.get("progress") or 0.0), text=f"**{job.get('title', '')}** · {state} · "
                                                        f"{job.get('message', '')}")
    if state not in FINAL:
        c = st.columns([1, 1, 4])
        if c[0].button("Cancel", key="cancel_job"):
            runner.cancel(job["id"])
            st.rerun(scope="app")
        c[1].button("Refresh", key="refresh_job")
        if job.get("device"):
            c[2].caption(f"device: {job['device']}")
    else:
        if busy:  # it finished while this fragment polled: redraw the page (button, versions)
            st.rerun(scope="app")
        if job.get("error"):
            st.error(job["error"])
        m = job.get("metrics") or {}
        if "version" in m:
            gate = m.get("gate") or {}
            (st.success if m.get("promoted") else st.warning)(
                f"{m['version']}: {gate.get('reason', '')} — accuracy {m.get('accuracy', 0):.4f}"
                + (f" vs current {m['baseline_accuracy']:.4f}" if m.get("baseline_accuracy") is not None else "")
                + f" (margin {gate.get('margin', 0):+.3f})")
            counts = m.get("counts") or {}
            rows = [(k.replace("_", " "), f"{v:.4g}" if isinstance(v, float) else str(v))
                    for k, v in counts.items() if isinstance(v, (int, float, str)) and v is not None]
            st.dataframe(pd.DataFrame(rows, columns=["what went in", "count"]), hide_index=True,
                         width="stretch")
    with st.expander("Job log"):
        st.code(runner.log(job["id"], tail=80) or "(empty)", language=None)


job_panel()

# ---------------------------------------------------------------- registry
st.markdown("#### Versions")
versions = registry.versions()
if not versions:
    st.caption("The registry is empty.")
else:
    def _gate_text(v: dict) -> str:
        g = v.get("gate")
        if not g:
            return ""
        if g.get("current") is None:
            return g.get("reason", "")
        return (f"{'✓' if g['promoted'] else '✗'} {g['candidate']:.4f} vs {g['current']:.4f} "
                f"(margin {g['margin']:+.3f}){' forced' if g.get('forced') else ''}")

    table = pd.DataFrame([{
        "version": v["version"], "current": "●" if v["is_current"] else "", "created": v["created"],
        "parent": v.get("parent") or "", "gold accuracy": v["metrics"].get("accuracy"),
        "gold F1": v["metrics"].get("micro_f1"), "gold n": v["metrics"].get("n"), "gate": _gate_text(v),
        "status": v.get("status", ""), "trained on": (v.get("train") or {}).get("n_train"),
        "coded": (v.get("pairs") or {}).get("positives_coded"),
        "confirmed neg.": (v.get("pairs") or {}).get("confirmed_negatives_used"),
        "E-FN left out": (v.get("pairs") or {}).get("efn_eliminated")} for v in reversed(versions)])
    st.dataframe(table, hide_index=True, width="stretch")
    names = [v["version"] for v in reversed(versions)]
    pick = st.selectbox("Version", names, key="pick_version")
    c = st.columns([1, 1, 2])
    force = c[2].checkbox("Force (skip the gate)", key="force_promote")
    if c[0].button("Promote", key="promote"):
        res = registry.promote(pick, Gate(margin=float(margin)), force=force, by=ctx.username)
        _ui.engine_holder.clear()
        (st.success if res.promoted else st.warning)(res.summary())
    cur_no = next((v["number"] for v in versions if v["is_current"]), None)
    pick_no = next(v["number"] for v in versions if v["version"] == pick)
    if c[1].button("Roll back", key="rollback", disabled=cur_no is None or pick_no >= cur_no):
        registry.rollback(pick, by=ctx.username, reason="rolled back on the training page")
        _ui.engine_holder.clear()
        st.success(f"{pick} is current again.")
    with st.expander("Registry history"):
        st.dataframe(pd.DataFrame([{"at": e["at"], "action": e["action"], "version": e["version"],
                                    "from": e.get("from") or "", "by": e.get("by", ""),
                                    "gate": (e.get("gate") or {}).get("reason", e.get("reason", ""))}
                                   for e in reversed(registry.history())]), hide_index=True,
                     width="stretch")

# ---------------------------------------------------------------- auto-accept
st.markdown("#### Auto-accept")
current = registry.current()
preds = registry.gold_predictions()
if not preds:
    st.caption("Auto-accept needs the current model's answers on gold: retrain to create a version.")
    st.stop()
c = st.columns(3)
target = c[0].number_input("Target precision", 0.5, 0.999, active.TARGET_PRECISION, 0.005, format="%.3f",
                           key="target_precision")
min_support = c[1].number_input("Min. gold mentions above it", 1, 10_000, min(active.MIN_SUPPORT, len(preds)),
                                key="min_support")
audit_share = c[2].slider("Audit share sent back to coders", 0.0, 0.5, active.AUDIT_SHARE, 0.01,
                          key="audit_share")
choice = active.threshold_from_predictions(preds, float(target), int(min_support))
st.write(f"On {choice.n} gold mentions of **{current['version']}**: {choice.summary()}")
if choice.threshold is None or ctx.batch_id is None:
    st.stop()
with _ui.session() as s:
    open_ms = services.mentions(s, ctx.batch_id, status=services.OPEN_STATUSES)
    audit = active.audit_results(s, ctx.batch_id)
confs = [m["confidence"] for m in open_ms if m["confidence"] is not None]
n_hit = sum(x >= choice.threshold for x in confs)
st.write(f"This batch: {len(open_ms)} open mentions, {len(confs)} with a stored suggestion; **{n_hit}** have "
         f"confidence ≥ {choice.threshold:.4f} (expected coverage {active.coverage_at(confs, choice.threshold):.0%} "
         f"of suggested mentions).")
engine_version = ctx.holder().engine.model_version
calibrated = engine_version == current["version"]
if not calibrated:
    st.warning(f"The app's engine is **{engine_version}**, not {current['version']}: its confidences are not "
               "the ones this threshold was calibrated on.")
ok = calibrated or st.checkbox("Auto-code anyway", key="auto_anyway")
if st.button("Auto-code this batch", disabled=not ok or n_hit == 0, key="auto_code"):
    with _ui.session() as s:
        out = active.auto_code_with_audit(s, ctx.batch_id, choice.threshold, ctx.username, float(audit_share))
    st.success(f"Auto-coded {out['auto_coded']} mentions; {len(out['audit'])} sent back to coders as an audit.")
if audit["audited"]:
    prec = "–" if audit["precision"] is None else f"{audit['precision']:.1%}"
    st.caption(f"Audit so far: {audit['decided']} of {audit['audited']} audited mentions re-decided, "
               f"{audit['agreed']} agreed with the auto-code (measured precision {prec}).")
