"""Training (for leads): the evaluation split, the background fit / retraining, versions and the gate's verdicts.

Reads top to bottom like the screen: which model serves the vocabulary and how
sure its words are; the evaluation split (labelled mentions on each side, the
share and seed a lead may change -- after a confirmation, since versions
measured on another split cannot be compared; db.learning); the new training
signal since the current model; a button that fits / retrains in a background
job of this vocabulary (progress, log and result survive page reloads: they
are read from the job's folder, termnorm.jobs); the versions with the gate's
verdict in words and its numbers (termnorm.registry: each candidate against
the model serving then, the shipped one included, on the same held-out
mentions with a paired sign test), Promote and Roll back (to any version that
served, the shipped one included). Auto-coding has its own page.
"""

import pandas as pd
import streamlit as st

from db import encoder_jobs, learning, services, suggest_jobs
from app_pages import _jobs, _ui
from db import retrain
from termnorm.demo import HISTORY_FROM
from termnorm.gate import GATE_MARGIN, MIN_GATE_MENTIONS, Gate
from termnorm.jobs import FINAL, JobBusy, JobRunner
from termnorm.registry import Registry

ctx = _ui.page("lead")

if ctx.vocabulary_id is None:
    st.info("No vocabulary yet: import one on the Import / Export page.")
    st.stop()

with _ui.session() as s:
    vocab_name = next(v["name"] for v in services.vocabularies(s) if v["id"] == ctx.vocabulary_id)
    learning.assign_unassigned(s, ctx.vocabulary_id, commit=True)  # labelled mentions stored before the split
    split = learning.split_summary(s, ctx.vocabulary_id)
registry = Registry.for_vocabulary(vocab_name)
runner = JobRunner()
JOBS = {"kind": "retrain", "vocabulary_id": ctx.vocabulary_id}  # this vocabulary's jobs only


def pct(x) -> str:
    return "–" if x is None else f"{x:.1%}"


#: The "What went in" rows in words (a user test read "positives base", "gold n" and "gold excluded" as jargon).
WENT_IN = {"positives_base": "mentions kept from the model it replaces", "positives_coded": "coders' decisions",
           "positives_labelled": "labelled mentions (imported with their terms)",
           "gold_excluded": "coded mentions kept out of training (they are measured on)",
           "gold_source": "measured on", "gold_n": "mentions measured on", "user_synonyms": "synonyms coders taught",
           "confirmed_negative_pairs": "terms coders turned down", "positive_rows": "right answers among the candidates",
           "confirmed_negatives_used": "turned-down terms among the candidates",
           "confirmed_negatives_not_recalled": "turned-down terms not among the candidates",
           "efn_eliminated": "candidates left out as likely right but unlabelled",
           "mined_hard_negatives": "hard wrong candidates (ranked high by the model it replaces)",
           "other_negatives": "other wrong candidates", "fit_seconds": "fitting time (s)"}


def measured_on(m: dict) -> str:
    """The serving version's held-out figure, unless too few mentions make it a number to ignore (a user test read
    "held-out accuracy 100.0% on 4 mentions" next to the gate's refusal for too few)."""
    n = int(m.get("n") or 0)
    if n >= MIN_GATE_MENTIONS:
        # distinct texts, each measured once: the split's count above is of labelled mentions (a user test read
        # "held out 787" beside "on 347 mentions")
        return f"held-out accuracy {pct(m.get('accuracy'))} on {n} distinct held-out texts"
    more = int((MIN_GATE_MENTIONS - n) / max(split["share"], 0.01) + 0.999)
    return (f"not measured yet: {n} held-out mention(s) of the {MIN_GATE_MENTIONS} the gate needs (about {more:,} "
            f"more decisions at the {split['share']:.0%} held out)")


# ---------------------------------------------------------------- what serves
st.markdown(f"### Training · {_ui.md(vocab_name)}")
serving = registry.serving()
if serving is None:
    with _ui.session() as s:
        n_coded = len(services.coded_mentions(s, ctx.vocabulary_id))
    st.caption("Serving: **the shipped model** (lexical pipeline, with the cold-start ranker where the vocabulary "
               f"has one; from {HISTORY_FROM} coded mentions on, the one that weighs the coders' history: "
               f"{n_coded:,} coded now). It is measured on the held-out mentions at the first fit; until then its "
               "confidence words are measured on the coders' answers to its suggestions, from 50 of them.")
else:
    m = serving.get("metrics") or {}
    bands = serving.get("confidence_bands") or {}
    words = ", ".join(f"“{b['word']}” from confidence {_ui.confidence_text(b['min_confidence'])} "
                      f"({b['precision']:.0%} right, {b['support']} mentions)" for b in bands.get("bands", []))
    st.caption(f"Serving: **{serving['version']}** · {measured_on(m)} · confidence words: "
               f"{words or 'none reached (every suggestion reads “unsure”)'}"
               if bands.get("measured") else
               f"Serving: **{serving['version']}** · {measured_on(m)} · confidence words not measured yet (too few "
               "held-out mentions)")

# ---------------------------------------------------------------- the evaluation split
st.markdown("#### Evaluation split")
c = st.columns(4)
# labelled mentions only: a user test read "held out 0" beside "7 held-out mentions" (coded ones, held out by hash)
c[0].metric("labelled: training side", f"{split['train']:,}", help=f"{split['train_texts']:,} distinct texts")
c[1].metric("labelled: held out", f"{split['eval']:,}", help=f"{split['eval_texts']:,} distinct texts; models are "
            "also measured on the gold set and, while these are too few, on a hashed share of the coded mentions")
c[2].metric("share · seed", f"{split['share']:.0%} · {split['seed']}")
c[3].metric("no side", f"{split['unassigned']:,}", help="labelled mentions whose gold names are not terms of the "
            "vocabulary: nothing to learn from or measure on")
by = f" by {split['set_by']}" if split["set_by"] else ""
seed_set = f"set{by} {split['set_at']}" if split["set_at"] else "the default"  # not "set by default"
if split["by_file"]:
    files = "; ".join(f"{_ui.md(b)}: {'held out' if side == 'eval' else 'training'}"
                      for b, side in split["by_file"].items())
    st.caption(f"Labelled mentions follow the official split of their files ({files}; set{by} {split['set_at']}): "
               "the cold-start ranker was fitted on such training files, so measuring on them would flatter it. "
               f"Every model is measured on the held-out side plus the gold set; the gate needs {MIN_GATE_MENTIONS} "
               "held-out mentions. Re-drawing below replaces it with a share drawn by code chapter.")
else:
    st.caption(f"Labelled mentions are training data except a held-out share, drawn by code chapter so rare "
               f"chapters are represented, fixed by the seed ({seed_set}). Every model "
               f"is measured on the held-out side plus the gold set; the gate needs {MIN_GATE_MENTIONS} held-out "
               "mentions.")
if split["labelled"] and split["eval_texts"] < MIN_GATE_MENTIONS:
    st.warning(f"Only {split['eval_texts']} distinct held-out texts: below the gate's {MIN_GATE_MENTIONS}, every "
               "candidate will be refused unless the gold set adds more. Widen the share or add labelled mentions.")
with st.expander("Change the split"):
    c = st.columns(3)
    share = c[0].number_input("Held-out share (%)", learning.MIN_SHARE * 100, learning.MAX_SHARE * 100,
                              split["share"] * 100, 1.0, key="split_share")
    seed = c[1].number_input("Seed", 0, 10 ** 6, split["seed"], key="split_seed")
    sure = c[2].checkbox("Re-draw: versions measured before cannot be compared with later ones", key="split_sure")
    if st.button("Change the split", disabled=not sure, key="split_change"):
        try:
            with _ui.session() as s:
                new = learning.assign_split(s, ctx.vocabulary_id, share / 100, int(seed), ctx.username)
            _ui.flash("info", f"Split re-drawn: {new['train']:,} training, {new['eval']:,} held out "
                              f"({new['share']:.0%}, seed {new['seed']}).")
            st.rerun()
        except (PermissionError, ValueError) as e:
            st.error(str(e))
    with _ui.session() as s:
        chapters = learning.chapters_by_side(s, ctx.vocabulary_id)
    if chapters:
        st.dataframe(pd.DataFrame([{"chapter": k, **v} for k, v in sorted(chapters.items())]), hide_index=True,
                     width="stretch", height=240)

# ---------------------------------------------------------------- training signal
st.markdown("#### New training signal since the current model")
with _ui.session() as s:
    new = retrain.new_pairs_since_current(s, ctx.vocabulary_id, registry)
    new["labelled"] = retrain.new_labelled_since_current(s, ctx.vocabulary_id, registry)
counts = st.container(horizontal=True, wrap=True, gap="small")  # wraps, rather than cut labels short (1,100 px)
for label, key in [("accepted", "accepted"), ("corrected", "corrected"), ("rejected candidates", "rejected_candidate"),
                   ("new synonyms", "synonym"), ("all pairs", "total"), ("labelled mentions", "labelled")]:
    counts.metric(label, new.get(key, 0), width="stretch", help="imported with their gold terms, on the training "
                  "side; no decision made them, so they are not pairs" if key == "labelled" else
                  "training pairs (mention, term): a decision with two terms makes two")

# ---------------------------------------------------------------- retraining job
fitted = [v for v in registry.versions() if not v.get("shipped")]
st.markdown("#### Retrain" if fitted else "#### Fit the full pipeline")
margin = st.number_input("Gate margin: 0 = the new model must not be worse than the serving one; −0.02 = it must "
                         "gain 2 points; +0.02 = it may lose up to 2 points", value=float(GATE_MARGIN),
                         min_value=-0.2, max_value=0.2, step=0.005, format="%.3f", key="gate_margin")


def _rescore() -> None:
    """Every open mention suggested again by the serving version, in the background (db.suggest_jobs)."""
    try:
        suggest_jobs.start_rescore(ctx.url, ctx.vocabulary_id, by=ctx.username, registry_root=registry.root)
    except JobBusy as e:
        _ui.flash("error", f"Re-scoring not started: {e}")


def _start() -> None:
    try:
        job = retrain.start_retrain_job(ctx.vocabulary_id, url=ctx.url, registry_root=registry.root,
                                        margin=float(st.session_state.get("gate_margin", 0.0)), by=ctx.username,
                                        runner=runner, purpose="retrain" if fitted else "first fit")
        _ui.flash("info", f"Started in the background (job {job}).")
    except JobBusy as e:
        _ui.flash("error", str(e))


ENCODER_SAID = "_encoder_said"  # the panel's last message, shown inside it (a user test missed one at the top)
ENCODER_OPEN = "_encoder_open"  # the panel stays open once used in this session (Enter or Cancel folded it)


def _keep_open() -> None:
    st.session_state[ENCODER_OPEN] = True


def _set_encoder(clear: bool = False) -> None:
    # the box's text as sent with the click: a button's args are fixed at the draw before (a user test typed a
    # folder, clicked, and had the one typed before set)
    folder = None if clear else (st.session_state.get("dense_folder") or "").strip()
    _keep_open()
    try:
        if not clear and not folder:
            raise ValueError("type the full path of the encoder's folder first")
        if folder and not folder.startswith("/"):  # relative to where the server started, which a lead cannot know
            raise ValueError(f"{folder}: give the full path of the folder on the server, starting with /")
        with _ui.session() as s:
            learning.set_pipeline_settings(s, ctx.vocabulary_id, {"dense": folder}, ctx.username)
        now = serving is None and not _shipped_ranked()  # the shipped model in recall order takes it at once
        st.session_state[ENCODER_SAID] = ("success", ("The next fit uses this encoder." if folder else
                                                      "The next fit has no encoder.") + (
            " The shipped model serving now is reloaded " + ("with" if folder else "without") + " it in the "
            "background (about half a minute); coders keep working meanwhile." if now else ""))
    except (PermissionError, ValueError) as e:
        st.session_state[ENCODER_SAID] = ("error", f"Encoder not set: {e}")


def _shipped_ranked() -> bool:
    """Whether the shipped model serving this vocabulary has a cold-start ranker (then it takes no encoder)."""
    held = _ui.serving_switch(ctx.url, ctx.vocabulary_id).holder
    return held is not None and held.engine.model_version.startswith("pretrained:")


def _train_encoder() -> None:
    _keep_open()
    try:
        job = encoder_jobs.start_encoder_job(ctx.url, ctx.vocabulary_id, ctx.username, runner=runner)
        st.session_state[ENCODER_SAID] = ("success", f"Encoder training started in the background (job {job}).")
    except (JobBusy, PermissionError) as e:
        st.session_state[ENCODER_SAID] = ("error", f"Encoder training not started: {e}")


with _ui.session() as s:
    encoder = learning.pipeline_settings(s, ctx.vocabulary_id)["dense"]
served = ((((serving or {}).get("pairs") or {}).get("neural") or {}).get("dense") or {})
training_one = runner.active(kind=encoder_jobs.KIND, vocabulary_id=ctx.vocabulary_id) is not None
said = st.session_state.pop(ENCODER_SAID, None)
with st.expander("Encoder for dense recall: " + ("set" if encoder else "none") + (" · training one" if training_one
                                                                                  else ""),
                 expanded=bool(said) or st.session_state.get(ENCODER_OPEN, False)):
    if said:
        (st.error if said[0] == "error" else st.success)(_ui.md(said[1]))
    try:
        what = learning.describe_encoder(encoder) if encoder else ""
    except ValueError as e:  # moved or deleted since it was set
        what = f"⚠ {e}"
    st.caption("A bi-encoder finds terms by meaning, not by shared words: one trained on this vocabulary's own names "
               "and synonyms, no coded mention needed, reaches terms no coder has used yet. The button below runs "
               f"`termnorm train recall --vocab FILE --encoder e5-small {' '.join(encoder_jobs.RECIPE)} --max-seconds "
               f"{encoder_jobs.MAX_SECONDS:.0f} --out DIR` on the vocabulary as the database holds it (at most 30 "
               "minutes on 2 CPU cores); a data team may run it, or another recipe, and give the folder here. The "
               "next fit fits the ranker on the encoder's scores and serves with it, measured and gated like any fit.")
    st.markdown(f"Set: `{encoder}` · {what}" if encoder else "Set: none.")
    switch = _ui.serving_switch(ctx.url, ctx.vocabulary_id)
    if switch.holder is not None:  # a changed setting starts reloading the engine now, not at a coder's next page
        _ui.serving_holder(ctx.url, ctx.vocabulary_id)
    shipped = switch.holder.engine.model_version if serving is None and switch.holder else ""
    st.markdown("The version serving now: " + (f"with the encoder from `{served.get('origin') or served.get('from')}`"
                                               if served else "no encoder.") if serving is not None else
                "Serving now: the shipped model, " + (
                    "in recall order with an encoder." if shipped.startswith("lexical+encoder-") else
                    "with its cold-start ranker (it takes an encoder from the first fit on)."
                    if shipped.startswith("pretrained:") else "no encoder.")
                + (" Being reloaded with the setting above; coders are served the one before meanwhile."
                   if switch.pending is not None else ""))
    st.text_input("Encoder folder (its full path on the server)", value=encoder or "", key="dense_folder",
                  placeholder="/srv/termnorm/encoders/synonyms", on_change=_keep_open)
    c = st.columns(3)
    c[0].button("Use at the next fit", key="dense_set", on_click=_set_encoder)
    c[1].button("Fit without an encoder", key="dense_clear", disabled=not encoder, on_click=_set_encoder,
                args=(True,))
    n_syn = encoder_jobs.n_synonyms(ctx.url, ctx.vocabulary_id)
    c[2].button("Train one on this vocabulary's synonyms", key="dense_train", disabled=not n_syn or training_one,
                on_click=_train_encoder, help=f"{n_syn:,} synonyms, coders' included; in the background, at most 30 "
                "minutes on 2 CPU cores; when it is done the next fit uses it" if n_syn else
                "this vocabulary has no synonyms to learn from")
    _jobs.panel(runner, "encoder_job", kind=encoder_jobs.KIND, vocabulary_id=ctx.vocabulary_id,
                empty="No encoder trained on this page yet.")

busy = runner.active(**JOBS) is not None
st.button("Retrain now" if fitted else "Fit now", type="primary", disabled=busy, on_click=_start, key="retrain",
          help="Fit on the training side of the split, coded mentions and confirmed negatives; measure on the "
               "held-out mentions against the model serving now; register; promote if the gate passes. Runs in "
               "the background.")


def _verdict(gate: dict) -> str:
    """The gate's decision in one line (its reason holds the figures)."""
    if not gate:
        return ""
    head = "✓ promoted" if gate.get("promoted") else "✗ refused"
    return f"{head}{' (forced)' if gate.get('forced') else ''}: {gate.get('reason', '')}"


@st.fragment(run_every=2.0 if busy else None)
def job_panel() -> None:
    job = runner.latest(**JOBS)
    if job is None:
        st.caption("No fit or retraining job has run from the app for this vocabulary yet" + (
            "; the versions below were fitted outside it (`python -m db.retrain`)." if fitted else "."))
        return
    state = job["state"]
    said = job.get("message", "")
    st.progress(float(job.get("progress") or 0.0), text=f"**{job.get('title', '')}** · {state}"
                + (f" · {said}" if said and said != state else ""))  # not "done · done"
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
            (st.success if m.get("promoted") else st.warning)(f"{m['version']} {_verdict(m.get('gate') or {})}")
            counts = m.get("counts") or {}
            rows = [(WENT_IN.get(k, k.replace("_", " ")), f"{v:.4g}" if isinstance(v, float) else str(v))
                    for k, v in counts.items() if isinstance(v, (int, float, str)) and v is not None]
            with st.expander("What went in"):
                st.dataframe(pd.DataFrame(rows, columns=["what went in", "count"]), hide_index=True,
                             width="stretch")
    with st.expander("Job log"):
        st.code(runner.log(job["id"], tail=80) or "(empty)", language=None)


job_panel()

# ---------------------------------------------------------------- versions
st.markdown("#### Versions")
versions = registry.versions()
shipped = registry.shipped_name()
if not any(v.get("shipped") for v in versions):  # not measured yet, but it serves and can be rolled back to
    versions.insert(0, {"version": shipped, "number": 0, "shipped": True, "metrics": {}, "status": "shipped",
                        "is_current": registry.current_version() is None, "created": ""})


def _cell(x, fmt: str = "") -> str:
    """A table cell as text, "" when not measured: a column of numbers with gaps showed "None" in them."""
    return "" if x is None else format(x, fmt)


def _row(v: dict) -> dict:
    g, m = v.get("gate") or {}, v.get("metrics") or {}
    return {"version": v["version"] + (" (shipped)" if v.get("shipped") else ""),
            "serving": "●" if v["is_current"] else "", "created": v.get("created") or "",
            "held-out accuracy": _cell(m.get("accuracy"), ".3f"), "held-out n": _cell(m.get("n")),
            "compared with": g.get("current_version") or "", "its accuracy": _cell(g.get("current"), ".3f"),
            "right only with this": _cell(g.get("only_candidate")),
            "right only with the other": _cell(g.get("only_current")),
            "sign test p": _cell(g.get("sign_p"), ".3g"), "gate": (_verdict(g).split(":")[0] if g else ""),
            "status": v.get("status") or "", "trained on": _cell((v.get("train") or {}).get("n_train")),
            "encoder": "✓" if ((v.get("pairs") or {}).get("neural") or {}).get("dense") else ""}


st.dataframe(pd.DataFrame([_row(v) for v in reversed(versions)]), hide_index=True, width="stretch",
             column_config={"its accuracy": st.column_config.TextColumn(
                 help="The version compared with, measured again by the gate on the same held-out mentions with the "
                      "coded history of that day: it may differ a little from that version's own row, measured "
                      "when it was fitted.")})
names = [v["version"] for v in reversed(versions)]
pick = st.selectbox("Version", names, key="pick_version")
rec = next(v for v in versions if v["version"] == pick)
if rec.get("gate"):
    (st.info if rec["gate"].get("promoted") else st.warning)(_verdict(rec["gate"]))
c = st.columns([1, 1, 2])
force = c[2].checkbox("Force (skip the gate)", key="force_promote")
if c[0].button("Promote", key="promote", disabled=bool(rec.get("shipped")) or rec["is_current"],
               help="Gate this version against the model serving now (its stored held-out results)."):
    res = registry.promote(pick, Gate(margin=float(margin)), force=force, by=ctx.username)
    _ui.flash("info" if res.promoted else "warning", f"{pick} {res.summary()}")
    if res.promoted:
        _rescore()
    st.rerun()  # the table above was drawn before the change
if c[1].button("Roll back", key="rollback", disabled=rec["is_current"],
               help="Serve this version again (any version that served, the shipped one included); no gate."):
    try:
        registry.rollback(pick, by=ctx.username, reason="rolled back on the training page")
        _ui.flash("info", f"{pick} serves again; coders get its suggestions at their next mention.")
        _rescore()
        st.rerun()
    except ValueError as e:
        st.warning(str(e))
with st.expander("Registry history"):
    st.dataframe(pd.DataFrame([{"at": e["at"], "action": e["action"], "version": e["version"],
                                "from": e.get("from") or "", "by": e.get("by", ""),
                                "gate": (e.get("gate") or {}).get("reason", e.get("reason", ""))}
                               for e in reversed(registry.history())],
                              columns=["at", "action", "version", "from", "by", "gate"]),
                 hide_index=True, width="stretch")

st.markdown("#### Re-scoring the open mentions")
st.caption("After a promotion or a rollback every open mention is suggested again by the serving version in the "
           "background, so no coder is shown a retired version's suggestion.")
_jobs.panel(runner, "rescore_job", result=_jobs.suggestion_outcome, lock=suggest_jobs.lock(ctx.vocabulary_id))

st.caption("Auto-coding (accepting confident suggestions of the serving version, with an audit sample) is on the "
           "**Auto-coding** page.")
