"""Auto-coding (lead): accept the serving model's confident suggestions of a batch, at a threshold a lead can
defend, with an audit that keeps measuring it.

Top to bottom: the model version serving the sidebar's vocabulary, or why auto-coding is refused (it was never
measured on held-out mentions: the shipped model is, by the first retraining's gate); the target precision and minimum
support; the threshold: the lowest confidence whose precision has a 95% Clopper-Pearson lower bound at the
target on the version's held-out mentions (termnorm.active.choose_threshold); what auto-coding would do to the
sidebar's batch (a dry run of db.services.auto_code: the very rules the button applies); the audit share and
the button; the audit's measured precision with its interval. db.services.auto_code checks the lead role and
the model version again.
"""

import streamlit as st

from db import auto_coding, serving, services
from app_pages import _ui
from termnorm import active

REFUSAL = ("auto-coding needs the serving model measured on held-out mentions: fit or retrain it on the "
           "Training page")

ctx = _ui.page("lead")
if ctx.vocabulary_id is None:
    st.info("No vocabulary yet.")
    st.stop()

st.markdown("### Auto-coding")
st.caption("Accepts, without a coder, the suggestions whose confidence is at least the threshold below; a random "
           "share of them goes back to the coders as an audit, which measures the precision on real traffic.")


def refuse(why: str) -> None:
    st.warning(f"Auto-coding is refused: {REFUSAL} ({why}).", icon=":material/block:")
    st.stop()


# ---------------------------------------------------------------- the serving version and its held-out record
promoted = serving.serving_version(ctx.url, ctx.vocabulary_id)
with _ui.session() as s:
    registry = serving.registry(s, ctx.vocabulary_id)
record = registry.serving() if registry is not None else None  # the shipped model's once a retraining measured it
if record is None:
    refuse(f"{promoted} has no measurement on held-out mentions" if promoted else
           "the shipped model serves this vocabulary and has not been measured on held-out mentions yet: "
           "the first retraining measures it")
preds = registry.gold_predictions(promoted)
if not preds:
    refuse(f"{promoted or record['version']} has no predictions on held-out mentions stored")
# the name its suggestions are stored under: a promoted version's own, the shipped engine's model version
version = promoted or record.get("model_version", "")
engine_version = ctx.holder(wait=True).engine.model_version  # a version just promoted: once it is loaded
if engine_version != version:  # build_engine falls back to the shipped model for another vocabulary edition
    refuse(f"{version or record['version']} was measured but the app serves {engine_version}: it was made for "
           "another edition of the vocabulary")
measured = f" (the shipped model, as measured {record['measured'][:10]})" if promoted is None else ""
st.markdown(f"Serving model: **{_ui.md(version)}**{measured}, measured on **{len(preds)}** held-out mentions.")

# ---------------------------------------------------------------- the threshold
c = st.columns(3)
target = c[0].number_input("Target precision", 0.5, 0.999, active.TARGET_PRECISION, 0.005, format="%.3f",
                           key="ac_target", help="Exact-set precision the auto-coded mentions must reach.")
min_support = c[1].number_input("Minimum support", active.MIN_SUPPORT, 1_000_000, active.MIN_SUPPORT,
                                key="ac_min_support",
                                help="Held-out mentions at or above the threshold, at least. "
                                     f"Not below {active.MIN_SUPPORT}: a handful of mentions says little about "
                                     "the mix of cases a batch brings.")
audit_share = c[2].slider("Audit share sent back to coders", 0.01, 0.5, active.AUDIT_SHARE, 0.01, key="ac_audit")
choice = active.threshold_from_predictions(preds, float(target), int(min_support))
if choice.threshold is None:
    st.warning(choice.summary())
else:
    m = st.columns(4)
    m[0].metric("Threshold (confidence ≥)", f"{choice.threshold:.4f}")
    m[1].metric("Precision on held-out", f"{choice.precision:.1%}",
                help=f"{choice.level:.0%} Clopper-Pearson interval {choice.lower:.1%}–{choice.upper:.1%}")
    m[2].metric(f"Lower {choice.level:.0%} bound", f"{choice.lower:.1%}",
                help=f"the rule: at least the target {choice.target:.1%}")
    m[3].metric("Coverage on held-out", f"{choice.coverage:.1%}", help=f"{choice.support} of {choice.n} mentions")
    st.success(choice.summary())


# ---------------------------------------------------------------- the batch
def on_auto_code(batch_id: int, threshold: float, share: float) -> None:
    try:
        with _ui.session() as s:
            out = auto_coding.auto_code_with_audit(s, batch_id, threshold, ctx.username, share, model_version=version)
    except (PermissionError, ValueError, KeyError) as e:
        _ui.flash("error", f"Nothing auto-coded: {e}")
        return
    st.session_state["ac_done"] = (f"Auto-coded {out['auto_coded']} mention(s) with {version}; "
                                   f"{len(out['audit'])} of them went back to the coders as the audit.")


def batch_preview(threshold: float) -> None:
    with _ui.session() as s:
        p = services.auto_code(s, ctx.batch_id, threshold, ctx.username, model_version=version, dry_run=True)
    serving_sugs = p["open"] - p["unsuggested"] - p["awaiting_audit"] - p["skipped_version"]
    st.markdown(f"This batch: **{p['open']}** open mention(s); {serving_sugs} with a suggestion of {version}, "
                f"{p['unsuggested']} not suggested yet, {p['awaiting_audit']} audit mention(s) waiting for a coder. "
                f"**{p['auto_coded']}** would be auto-coded (confidence ≥ {threshold:.4f})"
                + (f"; {p['skipped_terms']} suggestion(s) without a term or with a retired term stay with the "
                   "coders." if p["skipped_terms"] else "."))
    if p["skipped_version"]:
        st.warning(f"{p['skipped_version']} open mention(s) carry a suggestion of another model version: its "
                   f"confidence is not on {version}'s scale, so they are never auto-coded. Re-score them with the "
                   "serving model first (Import / Export → Pre-compute suggestions).")
    st.button(f"Auto-code {p['auto_coded']} mention(s)", type="primary", disabled=p["auto_coded"] == 0,
              key="ac_go", on_click=on_auto_code, args=(ctx.batch_id, threshold, float(audit_share)))


if "ac_done" in st.session_state:
    st.success(st.session_state.pop("ac_done"))
if ctx.batch_id is None:
    st.info("No batch chosen in the sidebar.")
elif choice.threshold is not None:
    batch_preview(choice.threshold)


# ---------------------------------------------------------------- the audit
def audit_report(label: str, res: dict) -> None:
    if not res["audited"]:
        st.caption(f"{label}: nothing audited yet.")
        return
    if not res["decided"]:
        st.caption(f"{label}: {res['audited']} audited mention(s) sent back; no coder has re-decided one yet.")
        return
    st.markdown(f"{label}: **{res['precision']:.1%}** measured precision ({res['level']:.0%} interval "
                f"{res['lower']:.1%}–{res['upper']:.1%}): {res['agreed']} of {res['decided']} re-decided "
                f"mention(s) kept the auto-coded terms ({res['audited']} audited).")
    if res["upper"] < target:
        st.error(f"The audit puts precision below the target {target:.1%} even at the high end: stop auto-coding "
                 "with this model, or raise the target.")
    elif res["lower"] < target:
        st.caption("The interval still straddles the target: more audited mentions must be re-decided to tell.")


st.markdown("#### Audit")
with _ui.session() as s:
    everywhere = auto_coding.audit_results(s, model_version=version)
    here = auto_coding.audit_results(s, ctx.batch_id, model_version=version) if ctx.batch_id is not None else None
if here is not None:
    audit_report("This batch", here)
audit_report(f"Every batch auto-coded by {version}", everywhere)
