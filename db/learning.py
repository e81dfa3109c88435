"""The learning loop's database side: the evaluation split, the first fit after an import, confidence in words.

* **The evaluation split** (issue 23, item 1). Labelled mentions (``Mention.gold_terms``: the labelled
  sets of ``termnorm load-data``, files imported with a gold column) are training data, except a
  held-out share that every model is measured on. The split is explicit: per vocabulary a ``share``
  (default 20%) and a ``seed``, stored in ``app_settings`` under ``eval_split:<vocabulary id>``, shown on
  the Training page and changed by a lead only (:func:`assign_split`, audited). Each labelled mention's
  side is stored in ``mentions.split``.

  The draw is a *systematic sample over the mentions ordered by code chapter*: distinct mention texts
  (normalized, so a text repeated across files is on one side only and never measured on its own
  training copy) are sorted by the chapter of their first gold term (``Vocabulary.chapter``) and, within
  a chapter, by a hash of (seed, text); every ``1/share``-th one from a seeded random start goes to the
  evaluation side. Each chapter thus gets its share of evaluation mentions (the floor or ceiling of
  ``share x its size``), so rare chapters are represented, and the draw depends only on the texts and the
  seed -- not on import order or database ids. Labelled mentions imported later
  (:func:`assign_unassigned`, called by ``db.services.create_batch``) are drawn the same way among
  themselves with the stored settings, a text already seen keeping its side, so earlier comparisons stay
  valid; changing the share or seed re-draws every mention (and makes versions measured before
  incomparable: the Training page asks for a confirmation).

  Mentions whose gold names are not all terms of the vocabulary's edition in force get no side: the
  engine can neither learn nor be measured on them.

* **The first fit**: :func:`start_first_fit_if_needed` starts retraining in the background
  (db.retrain's job) for a vocabulary that has labelled training mentions and no fitted version
  yet -- after ``termnorm load-data`` and after a vocabulary's first import of labelled mentions.

* **Confidence in words**: :func:`serving_bands`, the serving version's bands (termnorm.stats): those
  measured on held-out mentions when the version was fitted, else, from 50 of them on, those measured on the
  coders' own decisions on its suggestions (:func:`decision_bands`), so that the shipped model, which no fit
  measures, speaks in words after a morning's coding.
"""

from __future__ import annotations

import hashlib
import json
import math
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from db import accounts, auth, services
from db.models import SPLITS, Batch, Decision, Mention, Suggestion as SuggestionRow
from termnorm.text.normalize import normalize

TRAIN, EVAL = SPLITS
#: Default share of labelled mentions held out for evaluation: the usual 80/20; on Yidu-N7K's 5,000
#: labelled mentions that is 1,000 held out, ten times the gate's minimum (termnorm.gate.MIN_GATE_MENTIONS).
DEFAULT_SHARE = 0.2
DEFAULT_SEED = 0
#: Below 5% the held-out set of a small import misses the gate's minimum; above 50% more labels are
#: withheld from training than used.
MIN_SHARE, MAX_SHARE = 0.05, 0.5
SETTING_KEY = "eval_split:{}"


# ------------------------------------------------------------------------------------- settings
def split_settings(s: Session, vocabulary_id: int) -> dict:
    """The vocabulary's split settings: ``share``, ``seed``, who set them and when (defaults until a lead does)."""
    value = services.get_setting(s, SETTING_KEY.format(vocabulary_id))
    stored = value is not None
    value = value or {}
    return {"share": float(value.get("share", DEFAULT_SHARE)), "seed": int(value.get("seed", DEFAULT_SEED)),
            "set_by": value.get("set_by", ""), "set_at": value.get("set_at", ""), "stored": stored,
            "by_file": dict(value.get("by_file") or {})}


def _store_settings(s: Session, vocabulary_id: int, share: float, seed: int, by: str, **more) -> None:
    services.put_setting(s, SETTING_KEY.format(vocabulary_id),
                         {"share": share, "seed": seed, "set_by": by,
                          "set_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"), **more})


def check_share(share: float) -> float:
    share = float(share)
    if not MIN_SHARE <= share <= MAX_SHARE:
        raise ValueError(f"the evaluation share must lie in [{MIN_SHARE:.0%}, {MAX_SHARE:.0%}], not {share:.1%}")
    return share


# ------------------------------------------------------------------------------------- the draw
def _key(seed: int, text: str) -> int:
    return int(hashlib.sha1(f"{seed}\t{text}".encode("utf-8")).hexdigest()[:15], 16)


def draw_split(chapter_of: dict[str, str], share: float, seed: int) -> dict[str, str]:
    """Side of each text (``chapter_of``: normalized text -> chapter): a systematic sample of ``share`` over
    the texts ordered by chapter, then by a hash of (seed, text), from a seeded random start."""
    order = sorted(chapter_of, key=lambda t: (chapter_of[t], _key(seed, t)))
    start = _key(seed, "\x00start") / 16 ** 15  # in [0, 1)
    return {t: EVAL if math.floor((i + 1) * share + start) > math.floor(i * share + start) else TRAIN
            for i, t in enumerate(order)}


def _labelled_rows(s: Session, vocabulary_id: int) -> list[tuple]:
    """(mention id, text, gold terms, split) of every labelled mention of the vocabulary's batches."""
    q = (select(Mention.id, Mention.text, Mention.gold_terms, Mention.split).join(Batch, Batch.id == Mention.batch_id)
         .where(Batch.vocabulary_id == vocabulary_id).order_by(Mention.id))
    return [r for r in s.execute(q) if r[2]]  # JSON null and [] are both "not labelled"


def _usable(s: Session, vocabulary_id: int, rows: list[tuple]):
    """The rows whose gold names are all terms of the edition in force, and the chapter of each one's text."""
    vocab = services.vocabulary_from_db(s, vocabulary_id)
    ok = [r for r in rows if all(t in vocab for t in r[2])]
    chapter_of: dict[str, str] = {}
    for _, text, terms, _ in ok:
        chapter_of.setdefault(normalize(text), vocab.chapter(terms[0]))
    return ok, chapter_of


def _write_sides(s: Session, sides: dict[int, str | None]) -> None:
    for side in (TRAIN, EVAL, None):
        ids = [i for i, v in sides.items() if v == side]
        for k in range(0, len(ids), 500):  # SQLite's bound-parameter limit
            s.execute(update(Mention).where(Mention.id.in_(ids[k:k + 500])).values(split=side)
                      .execution_options(synchronize_session=False))


def assign_unassigned(s: Session, vocabulary_id: int, commit: bool = False) -> dict:
    """Give a side to labelled mentions that have none (new imports, a database upgraded to 0005) with the
    stored settings (stored as the defaults if a lead never set them); a text already on a side keeps it.
    Returns how many went to each side. ``db.services.create_batch`` calls it before its commit."""
    rows = _labelled_rows(s, vocabulary_id)
    todo = [r for r in rows if r[3] is None]
    out = {TRAIN: 0, EVAL: 0}
    if not todo:
        return out
    settings = split_settings(s, vocabulary_id)
    if not settings["stored"]:
        _store_settings(s, vocabulary_id, settings["share"], settings["seed"], "default")
    known = {normalize(r[1]): r[3] for r in rows if r[3] is not None}
    usable, chapter_of = _usable(s, vocabulary_id, todo)
    fresh = draw_split({t: c for t, c in chapter_of.items() if t not in known}, settings["share"], settings["seed"])
    sides = {r[0]: known.get(normalize(r[1])) or fresh[normalize(r[1])] for r in usable}
    _write_sides(s, sides)
    for side in sides.values():
        out[side] += 1
    if commit:
        s.commit()
    return out


def assign_split(s: Session, vocabulary_id: int, share: float, seed: int, username: str) -> dict:
    """Set the vocabulary's split (lead or admin, audited) and re-draw every labelled mention's side.

    Versions measured on the previous split cannot be compared with later ones: the gate re-measures the
    serving model on the new held-out mentions at the next retraining. Returns :func:`split_summary`.
    """
    user = auth.require(s, username, "lead")
    share, seed = check_share(share), int(seed)
    before = split_summary(s, vocabulary_id)
    rows = _labelled_rows(s, vocabulary_id)
    usable, chapter_of = _usable(s, vocabulary_id, rows)
    drawn = draw_split(chapter_of, share, seed)
    sides: dict[int, str | None] = {r[0]: None for r in rows}
    sides.update({r[0]: drawn[normalize(r[1])] for r in usable})
    _write_sides(s, sides)
    _store_settings(s, vocabulary_id, share, seed, user.username)
    after = split_summary(s, vocabulary_id)
    accounts.audit(s, user, "set_eval_split", "vocabulary", vocabulary_id,
                   {"old": {k: before[k] for k in ("share", "seed", TRAIN, EVAL)},
                    "new": {k: after[k] for k in ("share", "seed", TRAIN, EVAL)}})
    s.commit()
    return after


def split_summary(s: Session, vocabulary_id: int) -> dict:
    """The split as a lead sees it: settings, labelled mentions on each side (and distinct texts), those with
    no side (gold names not in the vocabulary), and the chapters each side covers."""
    settings = split_settings(s, vocabulary_id)
    rows = _labelled_rows(s, vocabulary_id)
    out = dict(settings, labelled=len(rows), unassigned=sum(r[3] is None for r in rows))
    for side in SPLITS:
        mine = [r for r in rows if r[3] == side]
        out[side] = len(mine)
        out[f"{side}_texts"] = len({normalize(r[1]) for r in mine})
    return out


def chapters_by_side(s: Session, vocabulary_id: int) -> dict[str, dict[str, int]]:
    """Chapter -> {train, eval} labelled mentions (the stratification a lead can check)."""
    vocab = services.vocabulary_from_db(s, vocabulary_id)
    out: dict[str, dict[str, int]] = {}
    for _, _, terms, side in _labelled_rows(s, vocabulary_id):
        if side is not None and terms[0] in vocab:
            row = out.setdefault(vocab.chapter(terms[0]), {TRAIN: 0, EVAL: 0})
            row[side] += 1
    return out


def labelled_mentions(s: Session, vocabulary_id: int, documents: bool = True) -> list[dict]:
    """Labelled mentions with a side: id, text, gold terms, split, the action of the latest decision on the
    mention (None if undecided) and its document ("" if none) -- what db.retrain reads its training and
    evaluation sets from."""
    rows = [r for r in _labelled_rows(s, vocabulary_id) if r[3] is not None]
    latest = dict(s.execute(select(Decision.mention_id, Decision.action).join(Mention, Mention.id == Decision.mention_id)
                            .join(Batch, Batch.id == Mention.batch_id)
                            .where(Batch.vocabulary_id == vocabulary_id, Decision.is_latest)).all())
    docs = services.mention_documents(s, [r[0] for r in rows]) if documents else {}
    return [{"id": i, "text": t, "gold_terms": list(g), "split": sp, "decision": latest.get(i),
             "document": docs.get(i, "")} for i, t, g, sp in rows]


def undecided_training_since(s: Session, vocabulary_id: int, since_id: int) -> int:
    """How many labelled training-side mentions stored after mention ``since_id`` no coder decided: one query that
    reads gold terms only (the Training page asks on every draw; labelled_mentions reads texts and decisions)."""
    decided = select(Decision.id).where(Decision.mention_id == Mention.id).exists()
    q = (select(Mention.gold_terms).join(Batch, Batch.id == Mention.batch_id)
         .where(Batch.vocabulary_id == vocabulary_id, Mention.id > since_id, Mention.split == TRAIN, ~decided))
    return sum(1 for (gold,) in s.execute(q) if gold)  # JSON null and [] are both "not labelled"


def assign_by_file(s: Session, vocabulary_id: int, sides: dict[int, str], username: str) -> dict:
    """Put each given batch's labelled mentions on the given side (``{batch id: "train" | "eval"}``): the
    official split of a research set (its train file trains, its dev / val file measures) instead of a draw.

    ``termnorm load-data`` uses it: the cold-start rankers shipped with termnorm were fitted on those train
    files, so a held-out share drawn from them would let the shipped model score on mentions it learnt from
    (CHIP-CDN: 0.427 on held-out train mentions against 0.328 on dev) and the gate would compare against an
    inflated baseline. The settings record it (``by_file``); a lead can still re-draw (:func:`assign_split`).
    """
    rows = [r for r in _labelled_rows(s, vocabulary_id)]
    batch_of = dict(s.execute(select(Mention.id, Mention.batch_id).where(Mention.id.in_([r[0] for r in rows]))).all()) \
        if rows else {}
    usable, _ = _usable(s, vocabulary_id, rows)
    chosen = {r[0]: sides[batch_of[r[0]]] for r in usable if batch_of.get(r[0]) in sides}
    _write_sides(s, chosen)
    n_eval = sum(v == EVAL for v in chosen.values())
    names = dict(s.execute(select(Batch.id, Batch.name).where(Batch.id.in_(list(sides)))).all())
    _store_settings(s, vocabulary_id, round(n_eval / len(chosen), 4) if chosen else DEFAULT_SHARE, DEFAULT_SEED,
                    username, by_file={names.get(b, str(b)): side for b, side in sides.items()})
    s.commit()
    return split_summary(s, vocabulary_id)


# ------------------------------------------------------------------------------------- pipeline settings
PIPELINE_KEY = "pipeline:{}"
#: What a fit of the vocabulary's pipeline uses when no fitted version says otherwise (db.retrain): the
#: keyword lists' folder, the recall profile and candidate cut, the metric the output rule is chosen for, and
#: whether the cold-start ranker's score is an input (termnorm.rank.prior), and the bi-encoder folder of dense
#: recall (``dense``: e.g. one trained on the vocabulary's synonyms, ``termnorm train recall --data vocab``; the
#: next fit uses it, db.retrain.encoder_choice).
PIPELINE_DEFAULTS = {"keyword_dir": None, "recall_profile": "wide", "max_candidates": None,
                     "output_rule_metric": "accuracy", "prior": True, "dense": None}


def pipeline_settings(s: Session, vocabulary_id: int) -> dict:
    return dict(PIPELINE_DEFAULTS, **(services.get_setting(s, PIPELINE_KEY.format(vocabulary_id)) or {}))


def set_pipeline_settings(s: Session, vocabulary_id: int, settings: dict, username: str) -> None:
    """Store the vocabulary's pipeline settings (keys of PIPELINE_DEFAULTS; lead or admin, audited)."""
    user = auth.require(s, username, "lead")
    unknown = set(settings) - set(PIPELINE_DEFAULTS)
    if unknown:
        raise ValueError(f"unknown pipeline setting {sorted(unknown)[0]!r}; expected {', '.join(PIPELINE_DEFAULTS)}")
    if settings.get("dense"):  # stored as the model folder, so one encoder is named one way
        settings = dict(settings, dense=str(_encoder_folder(Path(settings["dense"]).expanduser().resolve())))
    value = dict(pipeline_settings(s, vocabulary_id), **settings)
    services.put_setting(s, PIPELINE_KEY.format(vocabulary_id), value)
    accounts.audit(s, user, "set_pipeline_settings", "vocabulary", vocabulary_id, {"settings": value})
    s.commit()


def _encoder_folder(path: Path) -> Path:
    """The folder a bi-encoder loads from: ``path`` itself (a model folder, or a cross-fitted one) or its
    ``model/`` (a ``termnorm train recall`` output). ValueError naming the folder and what is missing. The
    file names are termnorm.dense's (BiEncoder.load), repeated here: importing it would import torch."""
    if not path.is_dir():
        raise ValueError(f"{path}: {'a file, not a folder' if path.exists() else 'no such folder'}")
    for folder in (path, path / "model"):
        if (folder / "termnorm_biencoder.json").is_file() or (folder == path and (path / "folds.json").is_file()):
            return folder
    raise ValueError(f"{path}: not a bi-encoder folder (no termnorm_biencoder.json in it or in model/): "
                     "give the --out folder of termnorm train recall or its model/ folder")


def describe_encoder(folder: str) -> str:
    """What the bi-encoder folder ``folder`` holds, read from its files without loading it (the pages do not
    import torch): a ``termnorm train recall`` output or model folder, or a cross-fitted one (``folds.json``).
    ValueError naming the folder and what is missing."""
    path = Path(folder)
    model = _encoder_folder(path)
    if model == path and (path / "folds.json").is_file():
        return f"cross-fitted bi-encoder, {len(json.loads((path / 'folds.json').read_text())['fold_of'])} mentions"
    run = model.parent / "config.json"
    cfg = json.loads(run.read_text(encoding="utf-8")) if run.is_file() else {}
    if cfg.get("kind") != "termnorm.dense":  # the model folder's parent is not its training run
        cfg = {}
    params = cfg.get("params") or {}
    trained = ("the vocabulary's names and synonyms" if params.get("data") == "vocab" else
               f"{cfg['n_train_mentions']:,} labelled mentions" if "n_train_mentions" in cfg else "unknown data")
    if "n_train_mentions" in cfg and params.get("data") != "vocab":  # one encoder (a cross-fitted one returned above)
        trained += (" (not cross-fitted: if those are this vocabulary's coded mentions, its scores on them are "
                    "in-sample and the ranker fitted over them trusts it too much; train it with --folds 5)")
    return f"bi-encoder trained on {trained}"


# ------------------------------------------------------------------------------------- the first fit
def fitted_versions(url: str | None, vocabulary_id: int, registry_root=None) -> list[str]:
    """Registered versions of the vocabulary's lineage, the shipped one left out."""
    from db import serving

    with services.session_scope(url) as s:
        reg = serving.registry(s, vocabulary_id, registry_root)
    return [v["version"] for v in reg.versions() if not v.get("shipped")] if reg is not None else []


def first_fit_needed(url: str | None, vocabulary_id: int, registry_root=None) -> bool:
    """No version fitted yet, and labelled training mentions to fit on (termnorm.refit.MIN_TRAIN)."""
    from termnorm.refit import MIN_TRAIN

    if fitted_versions(url, vocabulary_id, registry_root):
        return False
    with services.session_scope(url) as s:
        assign_unassigned(s, vocabulary_id, commit=True)
        n = split_summary(s, vocabulary_id)[TRAIN]
    return n >= MIN_TRAIN


def start_first_fit_if_needed(url: str | None, vocabulary_id: int, by: str, *, runner=None,
                              registry_root=None) -> str | None:
    """Start fitting the full pipeline in the background (the retraining job: gated against the shipped
    model, promoted if it passes) when :func:`first_fit_needed`; returns the job id, or None when not
    needed or when a retraining job of this vocabulary is already running (it does the same)."""
    from termnorm.jobs import JobBusy
    from db.retrain import start_retrain_job

    if not first_fit_needed(url, vocabulary_id, registry_root):
        return None
    try:
        return start_retrain_job(vocabulary_id, url=url, registry_root=registry_root, by=by, runner=runner,
                                 purpose="first fit")
    except JobBusy:
        return None


# ------------------------------------------------------------------------------------- confidence in words
#: What bands measured on decisions say they were measured on (``bands["on"]``; unset: held-out mentions).
ON_DECISIONS = "coders' decisions on this model's suggestions"
#: Seconds :func:`serving_bands` reuses the bands measured on decisions (the coding page asks for every mention;
#: a minute's decisions move them by little).
DECISION_BANDS_TTL_S = 60.0
_bands_cache: dict = {}
_bands_lock = threading.Lock()


def decision_bands(s: Session, vocabulary_id: int, model_version: str) -> dict:
    """Confidence bands (termnorm.stats.confidence_bands) of ``model_version`` measured on the coders' decisions:
    each mention's latest decision by a coder (accept, correct or reject) on a suggestion of that version, right
    when the dashboards count it accepted at top-1 (termnorm.coding_metrics.acceptance_flags: the suggested terms
    kept exactly, not called not related). Each suggestion was made before its decision, so these are held-out
    predictions; ``on`` says what they were measured on."""
    import pandas as pd

    from termnorm.coding_metrics.frames import ANSWER_ACTIONS
    from termnorm.coding_metrics.suggestions import acceptance_flags
    from termnorm.stats import confidence_bands

    rows = s.execute(select(SuggestionRow.confidence, SuggestionRow.chosen.label("suggested"), Decision.action,
                            Decision.terms, Decision.relationship)
                     .join(Decision, Decision.suggestion_id == SuggestionRow.id)
                     .join(Mention, Mention.id == Decision.mention_id).join(Batch, Batch.id == Mention.batch_id)
                     .where(Batch.vocabulary_id == vocabulary_id, Decision.is_latest.is_(True),
                            Decision.action.in_(ANSWER_ACTIONS), SuggestionRow.model_version == model_version)).all()
    flags = acceptance_flags(pd.DataFrame(rows, columns=["confidence", "suggested", "action", "terms",
                                                         "relationship"]))
    predictions = [{"confidence": c, "correct": bool(t)} for c, t in zip(flags["confidence"], flags["top1"])]
    return dict(confidence_bands(predictions), on=ON_DECISIONS)


def serving_bands(url: str | None, vocabulary_id: int, registry_root=None, model_version: str | None = None) \
        -> dict | None:
    """The confidence bands of the version serving the vocabulary: measured on held-out mentions when it was
    fitted; else, given the ``model_version`` its suggestions carry, those of :func:`decision_bands` once 50
    decisions measure them (kept :data:`DECISION_BANDS_TTL_S`); None: not measured."""
    from db import serving

    with services.session_scope(url) as s:
        reg = serving.registry(s, vocabulary_id, registry_root)
        held_out = reg.confidence_bands() if reg is not None else None
        if (held_out and held_out.get("measured")) or not model_version:
            return held_out
        key = (url, vocabulary_id, model_version)
        with _bands_lock:
            at, bands = _bands_cache.get(key, (-math.inf, None))
        if time.monotonic() - at > DECISION_BANDS_TTL_S:
            bands = decision_bands(s, vocabulary_id, model_version)
            with _bands_lock:  # entries past their time go as a new one comes: versions do not pile up
                now = time.monotonic()
                for stale in [k for k, (t, _) in _bands_cache.items() if now - t > DECISION_BANDS_TTL_S]:
                    del _bands_cache[stale]
                _bands_cache[key] = (now, bands)
    return bands if bands["measured"] else held_out
