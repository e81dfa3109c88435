"""Retraining from the coders' decisions and labelled mentions: the learning loop's training step in the app.

What goes in (all read from the database through db.services / db.learning,
counted and reported):

* **positives** -- mentions whose latest decision accepted or corrected
  terms (``coded_mentions``), labelled mentions on the *training* side of the
  vocabulary's evaluation split (db.learning: their gold terms, whether or not
  a coder decided them -- a coder's decision on the same mention wins), on top
  of the current model's own training mentions (its history); a coder's answer
  replaces an older label of the same mention text;
* **confirmed hard negatives** -- shown candidates a coder did not choose
  (TrainingPair label 0, kind ``rejected_candidate``): Approach B's lesson
  that hard negatives matter more than model choice, confirmed by a person;
* **mined negatives with false-negative elimination** (Approach D, E-FN):
  the current model scores every training candidate; its top-k non-gold
  candidates are hard negatives, *except* those scoring >= beta, where beta
  is the lowest score such that the current model's predictions above it are
  gold with precision >= alpha = 0.8 on mentions it has not been trained on
  (the new coded mentions). Such candidates are likely unlabelled positives
  (synonyms, hyper/hyponyms) and are left out (weight 0) -- unless a coder
  confirmed them as negatives;
* **synonyms** added by coders are part of the vocabulary (and so of every
  recall strategy) through ``vocabulary_from_db``.

The lexical pipeline is refit by termnorm.refit (GBM pair scorer + count classifier +
confidence calibration, termnorm.gbm_ranker) on K-fold recall candidates exactly
like ``Engine.fit_lexical``, with the rows weighted as above. When the
current version folder holds neural parts (``dense/``: a termnorm.dense
bi-encoder; ``ranker/``: a termnorm.rank ranker), the new version serves them too, and its ranker is fitted
on their scores; cross-fitted ones are first fine-tuned from their current weights
(termnorm.refit.retrain_neural). The vocabulary's pipeline setting ``dense`` (db.learning), when it names
an encoder the serving version was not built from, gives the encoder instead (:func:`encoder_choice`).
The result is evaluated on the held-out ("gold") set,
registered (termnorm.registry) and promoted only if the gate passes against
the model serving now -- the shipped model included, built as the app builds
it (db.serving.build_engine) and measured on the same mentions with the same
history exclusion (issue 23, item 2).

Held-out set: the lead's gold set (db.gold: double-annotated, agreed or
adjudicated labels) plus labelled mentions on the *evaluation* side of the
split; when these are fewer than ``MIN_GOLD`` (a vocabulary coded from scratch,
with no labelled file), a stable 20% of the coded mentions is added (chosen by
a hash of the text, so the same mention is always on the same side). Held-out
mentions never enter training or the evaluated model's history.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field, fields, replace

from termnorm.records import LabelledMention
from termnorm.refit import (ALPHA, GOLD_SHARE, NEURAL_BUDGET_S, TOP_K_MINE, evaluate_on_gold, fit_with_pairs,
                            in_holdout, jsonable, limited_threads, neural_parts, retrain_neural)
from termnorm.text.normalize import normalize

from db import learning, services
from db.gold import gold_frame
from db.models import PAIR_KINDS

#: Labelled mentions in the database needed to gate on them alone (below: coded mentions are held out too).
#: Under 30, one mention moves exact-set accuracy by more than 3 points: the gate would mostly measure noise.
MIN_GOLD = 30

# ------------------------------------------------------------------------------------- training data
@dataclass
class TrainingData:
    """Everything a retrain uses, read from the database."""

    vocabulary: object  # termnorm.vocabulary.Vocabulary (with user synonyms)
    vocabulary_name: str
    coded: list[LabelledMention]  # positives: coded (latest decision per text) + labelled training side, gold excluded
    gold: list[LabelledMention]
    gold_source: str
    confirmed_negatives: dict[str, list[str]]  # mention text -> terms a coder rejected (latest decision)
    synonyms: list[tuple[str, str]]  # (term, synonym) added by coders
    pair_counts: dict[str, int]  # active training pairs by kind
    new_pair_counts: dict[str, int]  # ... created after ``since_pair_id``
    max_pair_id: int
    gold_excluded: int = 0  # coded mentions left out because they are gold
    new_texts: set[str] = field(default_factory=set)  # normalized mention texts with pairs after since_pair_id
    labelled_train: int = 0  # of ``coded``: labelled training-side mentions no coder decided
    max_labelled_id: int = 0  # the newest labelled mention read (new_labelled_since_current counts after it)



def pair_counts(s, vocabulary_id: int, since_pair_id: int = 0) -> dict[str, int]:
    """Active training pairs by kind (accepted, corrected, rejected_candidate, synonym) with id > since_pair_id."""

    df = services.training_pairs_frame(s, vocabulary_id)
    if since_pair_id:
        df = df[df["id"] > since_pair_id]
    vc = df["kind"].value_counts().to_dict() if len(df) else {}
    out = {k: int(vc.get(k, 0)) for k in PAIR_KINDS}
    out["total"] = int(len(df))
    return out


def gold_from_db(s, vocabulary_id: int, labelled: list[dict] | None = None) -> list[LabelledMention]:
    """The vocabulary's held-out mentions: the lead's gold set (db.gold GoldLabel rows: agreed or adjudicated
    double annotation) first, then labelled mentions on the evaluation side of the split (db.learning).

    One per normalized text (the gold set wins); labels with no term ("nothing fits") or with names
    outside the vocabulary are left out: the engine always outputs terms of the vocabulary.
    """

    names = set(services.vocabulary_from_db(s, vocabulary_id).names)
    out: dict[str, LabelledMention] = {}

    def put(text: str, terms, document: str = "") -> None:
        terms = list(terms or [])
        if terms and all(t in names for t in terms):
            out.setdefault(normalize(text), LabelledMention(text, terms, document=document))

    for text, terms in gold_frame(s, vocabulary_id=vocabulary_id)[["mention", "terms"]].itertuples(index=False):
        put(text, terms)
    for m in labelled if labelled is not None else learning.labelled_mentions(s, vocabulary_id):
        if m["split"] == learning.EVAL:
            put(m["text"], m["gold_terms"], m.get("document", ""))
    return list(out.values())


def labelled_training(labelled: list[dict], names, taken: set[str]) -> list[LabelledMention]:
    """Labelled training-side mentions as positives, one per normalized text not in ``taken`` (the coded
    ones: a coder's answer for the same text wins). A mention a coder accepted, corrected or rejected is
    left to that decision (accepted / corrected ones are coded mentions; a rejection says none fits)."""

    out: dict[str, LabelledMention] = {}
    for m in labelled:
        key = normalize(m["text"])
        if (m["split"] != learning.TRAIN or m["decision"] in ("accept", "correct", "reject") or key in taken
                or not all(t in names for t in m["gold_terms"])):
            continue
        out.setdefault(key, LabelledMention(m["text"], list(m["gold_terms"]), document=m.get("document", "")))
    return list(out.values())


def training_data_from_db(s, vocabulary_id: int, *, gold: list[LabelledMention] | None = None,
                          since_pair_id: int = 0, gold_share: float = GOLD_SHARE,
                          min_gold: int = MIN_GOLD) -> TrainingData:
    """Read coded and labelled training mentions, confirmed negatives, synonyms and the held-out set of a
    vocabulary (the split's sides as stored: db.learning.assign_unassigned gives new labelled mentions theirs)."""

    vocab = services.vocabulary_from_db(s, vocabulary_id)
    name = next(v["name"] for v in services.vocabularies(s) if v["id"] == vocabulary_id)
    labelled = learning.labelled_mentions(s, vocabulary_id)
    decided = services.coded_mentions(s, vocabulary_id)
    extra = labelled_training(labelled, set(vocab.names), {normalize(m.text) for m in decided})
    coded = decided + extra
    if gold is not None:
        gold_source = "given"
    else:
        gold = gold_from_db(s, vocabulary_id, labelled)
        settings = learning.split_settings(s, vocabulary_id)
        gold_source = (f"{len(gold)} held-out mentions (gold set + evaluation side of the split: "
                       f"{settings['share']:.0%}, seed {settings['seed']})")
        if len(gold) < min_gold:
            have = {normalize(m.text) for m in gold}
            held = [m for m in coded if in_holdout(m.text, gold_share) and normalize(m.text) not in have]
            gold = gold + held
            gold_source += f" + {gold_share:.0%} of coded mentions held out ({len(held)})"
    gold_texts = {normalize(m.text) for m in gold}
    kept = [m for m in coded if normalize(m.text) not in gold_texts]
    df = services.training_pairs_frame(s, vocabulary_id)
    neg: dict[str, list[str]] = {}
    for text, term in df.loc[df["kind"] == "rejected_candidate", ["mention", "term"]].itertuples(index=False):
        if normalize(text) not in gold_texts:
            lst = neg.setdefault(text, [])
            if term not in lst:
                lst.append(term)
    new_texts = {normalize(t) for t in df.loc[df["id"] > since_pair_id, "mention"]}
    extra_texts = {normalize(m.text) for m in extra}
    return TrainingData(vocab, name, kept, list(gold), gold_source, neg, services.user_synonyms(s, vocabulary_id),
                        pair_counts(s, vocabulary_id), pair_counts(s, vocabulary_id, since_pair_id),
                        int(df["id"].max()) if len(df) else 0, len(coded) - len(kept), new_texts,
                        sum(normalize(m.text) in extra_texts for m in kept),
                        max((m["id"] for m in labelled), default=0))


def new_pairs_since_current(s, vocabulary_id: int, registry) -> dict[str, int]:
    """Training pairs by kind created after the current registered version read its data (all if none)."""
    cur = registry.current()
    since = int(((cur or {}).get("train") or {}).get("max_pair_id", 0) or 0)
    return pair_counts(s, vocabulary_id, since)


def new_labelled_since_current(s, vocabulary_id: int, registry) -> int:
    """Labelled mentions on the training side that no coder decided (an imported file's gold terms), stored after
    the current registered version read its data (all if none, or if it predates the count): they train the next
    version although no decision made a training pair of them (a user test read 0 new signal after such an import)."""
    cur = registry.current()
    since = int(((cur or {}).get("train") or {}).get("max_labelled_id", 0) or 0)
    return learning.undecided_training_since(s, vocabulary_id, since)


# ------------------------------------------------------------------------------------- the whole step
@dataclass
class RetrainResult:
    version: str
    promoted: bool
    gate: dict
    metrics: dict  # the new version on the held-out mentions
    baseline: dict | None  # the model serving before (shipped included) on the same mentions
    counts: dict  # how many of each kind went in
    seconds: dict = field(default_factory=dict)
    parent: str | None = None
    engine: object = field(default=None, repr=False, compare=False)  # the new Engine (not serialised)

    def to_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "engine"}


@dataclass(frozen=True)
class RetrainOptions:
    """The knobs of one retraining (``retrain(..., **overrides)`` sets any of them by name)."""

    keyword_dir: str | None = None  # keyword lists; None: the current model's, or the vocabulary's pipeline setting
    alpha: float = ALPHA  # E-FN precision target (termnorm.refit)
    top_k: int = TOP_K_MINE  # top-k of the current model mined for hard negatives
    neural: bool = True  # fine-tune the current version's cross-fitted neural parts when it has any
    neural_budget_s: float = NEURAL_BUDGET_S  # seconds per neural part
    seed: int = 0


def retrain(vocabulary_id: int, *, url: str | None = None, registry=None, gold: list[LabelledMention] | None = None,
            gate=None, base: list[LabelledMention] | None = None, current=None, options: RetrainOptions | None = None,
            by: str = "", progress=None, **overrides) -> RetrainResult:
    """Build training data from the database, refit, evaluate on the held-out mentions, register and gate
    against the model serving now.

    ``registry``: a termnorm.registry.Registry (default: the vocabulary's lineage
    in the data directory's model registry); ``current``: the serving Engine if already in
    memory (else the current version is loaded from the registry, and the model
    serving is built as the app builds it: db.serving.build_engine, the shipped
    one when no version is current); ``base``: training mentions to start
    from when the registry has no current version; ``options`` / ``overrides``:
    :class:`RetrainOptions`; ``progress(fraction, message)``.
    """
    opts = replace(options or RetrainOptions(), **overrides)
    with limited_threads():
        return _retrain(vocabulary_id, url, registry, gold, gate, base, current, opts, by, progress)


def _retrain(vocabulary_id, url, registry, gold, gate, base, current, opts: RetrainOptions, by,
             progress) -> RetrainResult:
    from termnorm.engine import PRETRAINED, Engine, cold_start_domain
    from termnorm.registry import Gate, Registry

    keyword_dir, alpha, top_k, seed = opts.keyword_dir, opts.alpha, opts.top_k, opts.seed
    neural, neural_budget_s = opts.neural, opts.neural_budget_s

    say = progress or (lambda f, m: None)
    t0 = time.perf_counter()
    secs: dict[str, float] = {}
    say(0.01, "reading the training signal from the database")
    serving_given = current
    with services.session_scope(url) as s:
        learning.assign_unassigned(s, vocabulary_id, commit=True)  # labelled mentions stored before the split
        name = next(v["name"] for v in services.vocabularies(s) if v["id"] == vocabulary_id)
        registry = registry or Registry.for_vocabulary(name)
        cur_rec = registry.current()
        since = int(((cur_rec or {}).get("train") or {}).get("max_pair_id", 0) or 0)
        data = training_data_from_db(s, vocabulary_id, gold=gold, since_pair_id=since)
        settings = learning.pipeline_settings(s, vocabulary_id)
    secs["read"] = round(time.perf_counter() - t0, 2)

    parent = cur_rec["version"] if cur_rec else None
    if current is None and parent is not None:
        say(0.03, f"loading the current model {parent}")
        current = registry.load(parent)
    gold_texts = {normalize(m.text) for m in data.gold}
    coded_texts = {normalize(m.text) for m in data.coded}
    base_src = current.history if current is not None else (base or [])
    vocab = data.vocabulary
    kept_base = [m for m in base_src if normalize(m.text) not in gold_texts and normalize(m.text) not in coded_texts
                 and m.terms and all(t in vocab for t in m.terms)]
    train = kept_base + [m for m in data.coded if all(t in vocab for t in m.terms)]

    t1 = time.perf_counter()
    say(0.06, f"building the engine on {len(train)} coded mentions")
    # the fitted pipeline's settings carry over; a first fit (the shipped model serves) takes the vocabulary's
    # pipeline settings (db.learning: termnorm load-data sets those the README measures for each set)
    fitted = current is not None and parent is not None
    kw = keyword_dir if keyword_dir is not None else (current.keyword_dir if fitted else settings["keyword_dir"])
    profile = current.recall_profile if fitted else settings["recall_profile"]
    max_candidates = current.max_candidates if fitted else settings["max_candidates"]
    split = getattr(current, "split", True)
    # the keyword tagger depends only on the vocabulary and the keyword lists: reuse the current one
    # when neither changed (building it for a 10k-term vocabulary costs seconds)
    same = (current is not None and not data.synonyms and kw == current.keyword_dir
            and list(current.vocabulary.names) == list(vocab.names))
    # the neural parts first (termnorm.refit.retrain_neural): the ranker below is fitted on the scores of the
    # encoder and cross-encoder the new version will serve with
    cur_folder = registry.path(parent) if parent else None
    dense_from, origin = encoder_choice(settings.get("dense"), cur_rec if fitted else None)
    parts, neural_report = {}, {}
    if neural_parts(cur_folder) or dense_from:
        t2 = time.perf_counter()
        say(0.07, "neural parts: " + ", ".join(neural_parts(cur_folder) or ["the vocabulary's encoder"]))
        parts, neural_report = retrain_neural(cur_folder, vocab, train, current.tagger if same else None,
                                              neural_budget_s, fine_tune=neural, dense_from=dense_from)
        secs["neural"] = round(time.perf_counter() - t2, 2)
    if "dense" in neural_report:
        neural_report["dense"]["origin"] = origin
    engine = Engine(vocab, history=train, keyword_dir=kw, split=split, tagger=current.tagger if same else None,
                    history_extras=getattr(current, "history_extras", ()), recall_profile=profile,
                    max_candidates=max_candidates, dense=parts.get("dense"), ranker=parts.get("ranker"))
    engine.meta["output_rule_metric"] = (current.meta.get("output_rule_metric", "accuracy") if fitted
                                         else settings["output_rule_metric"])
    # the cold-start ranker's probability as one more input (termnorm.rank.prior): the first fits learn from a
    # few hundred decisions only, and without it start from scratch below the model they would replace
    if (getattr(current, "prior", None) is not None) if fitted else settings.get("prior", True):
        domain = cold_start_domain(vocab)
        if domain is not None:
            engine.use_prior(PRETRAINED[domain])
    secs["engine"] = round(time.perf_counter() - t1, 2)

    t1 = time.perf_counter()
    # held out for the current model = mentions decided after it read the database (an engine kept in
    # memory has already been taught them through add_coded_mention, so its history cannot tell)
    fit_report = fit_with_pairs(engine, train, data.confirmed_negatives, current, alpha=alpha, top_k=top_k,
                                seed=seed, heldout_texts=data.new_texts if cur_rec else None,
                                progress=lambda f, m: say(0.1 + 0.55 * f, m))
    secs["fit"] = round(time.perf_counter() - t1, 2)

    t1 = time.perf_counter()
    say(0.8, f"evaluating the new model on {len(data.gold)} held-out mentions")
    metrics, preds = evaluate_on_gold(engine, data.gold)
    # what serves now is measured again every time (its history has grown since it was last measured), on the
    # same mentions with the same history exclusion (evaluate_on_gold), as the app builds it
    serving_engine = serving_given if serving_given is not None else _serving_engine(url, vocabulary_id, parent,
                                                                                       registry.root)
    say(0.87, f"evaluating the model serving now ({parent or 'the shipped model'}) on the same mentions")
    baseline, base_preds = evaluate_on_gold(serving_engine, data.gold)
    if parent is None:
        registry.record_shipped(baseline, base_preds, model_version=str(serving_engine.model_version),
                                notes="the model served before any fitted version: db.serving.shipped_engine")
    secs["evaluate"] = round(time.perf_counter() - t1, 2)

    counts = {"positives_base": len(kept_base), "positives_coded": len(data.coded) - data.labelled_train,
              "positives_labelled": data.labelled_train, "gold_excluded": data.gold_excluded,
              "gold_source": data.gold_source, "gold_n": len(data.gold), "pairs_active": data.pair_counts,
              "pairs_new": data.new_pair_counts, "user_synonyms": len(data.synonyms),
              "confirmed_negative_pairs": sum(len(v) for v in data.confirmed_negatives.values()), **fit_report}
    if neural_report:
        counts["neural"] = neural_report
    say(0.93, "registering the new version")
    secs["total"] = round(time.perf_counter() - t0, 2)
    version = registry.register(engine, metrics, parent=parent, pairs=counts,
                                train={"max_pair_id": data.max_pair_id, "max_labelled_id": data.max_labelled_id,
                                       "seconds": secs, "n_train": len(train),
                                       "by": by}, gold_predictions=preds)
    gate = gate or Gate()
    res = registry.promote(version, gate, baseline=baseline, baseline_predictions=base_preds, by=by)
    say(1.0, res.summary())
    return RetrainResult(version, res.promoted, asdict(res), metrics, baseline, counts, secs, parent, engine)


def encoder_choice(setting: str | None, current_record: dict | None) -> tuple[object, str | None]:
    """Which bi-encoder the next version's dense recall uses, as ``(dense_from, origin)`` for
    termnorm.refit.retrain_neural: the vocabulary's pipeline setting ``dense`` (an encoder folder) when the fitted
    version serving now was not built from it (a first fit, a new setting); the serving version's own encoder,
    fine-tuned or not, when it was (``None``: the version folder's); none (``False``) when the setting that
    gave the serving version its encoder was cleared. ``origin`` is the setting the encoder came from, recorded
    in the new version's counts (``neural.dense.origin``) for the next retraining to compare with."""
    dense = (((current_record or {}).get("pairs") or {}).get("neural") or {}).get("dense") or {}
    had = dense.get("origin")
    if setting and setting != had:
        return setting, setting
    if not setting and had:
        return False, None
    return None, had


def _serving_engine(url, vocabulary_id: int, version: str | None, root):
    """The engine the app serves for ``version`` (None: the shipped model), built from the database."""
    from db import serving

    return serving.build_engine(url, vocabulary_id, version, root=root)


# ------------------------------------------------------------------------------------- as a background job
JOB_TARGET = "db.retrain:retrain_job"


def retrain_job(params: dict, ctx) -> dict:
    """termnorm.jobs target: ``retrain`` with params url, vocabulary_id, registry_root, margin, by, neural,
    purpose ("retrain", or "first fit" after an import of labelled mentions: the same step)."""
    from termnorm.jobs import detect_device
    from termnorm.registry import Gate, Registry

    ctx.set_device(detect_device())
    registry = None
    if params.get("registry_root"):

        with services.session_scope(params.get("url")) as s:
            name = next(v["name"] for v in services.vocabularies(s) if v["id"] == int(params["vocabulary_id"]))
        registry = Registry.for_vocabulary(name, params["registry_root"])
    res = retrain(int(params["vocabulary_id"]), url=params.get("url"), registry=registry,
                  gate=Gate(margin=float(params.get("margin", 0.0))), neural=bool(params.get("neural", True)),
                  by=str(params.get("by", "")), progress=ctx.progress)
    out = {"version": res.version, "promoted": res.promoted, "gate": res.gate,
           "accuracy": res.metrics.get("accuracy"), "baseline_accuracy": (res.baseline or {}).get("accuracy"),
           "baseline_version": res.gate.get("current_version"), "counts": res.counts, "seconds": res.seconds,
           "parent": res.parent, "purpose": params.get("purpose", "retrain"),
           "vocabulary_id": int(params["vocabulary_id"])}
    ctx.log(f"{res.version}: {res.gate.get('reason')} (promoted={res.promoted})")
    if res.promoted:  # no open mention keeps the retired version's suggestion, whether or not a lead watches
        from db.suggest_jobs import start_rescore  # the job runs with the app's database: db is at hand here

        out["rescore_job"] = start_rescore(params.get("url"), int(params["vocabulary_id"]), by=str(params.get("by", "")),
                                           registry_root=params.get("registry_root"))
        ctx.log(f"re-scoring the open mentions with {res.version}: job {out['rescore_job']}")
    return jsonable(out)


def start_retrain_job(vocabulary_id: int, *, url: str | None = None, registry_root=None, margin: float = 0.0,
                      by: str = "", neural: bool = True, runner=None, purpose: str = "retrain") -> str:
    """Start retraining as a background job (one per vocabulary at a time: lock ``retrain:<id>``, tagged
    kind "retrain" and the vocabulary id); returns the job id (raises jobs.JobBusy)."""
    from termnorm.jobs import JobRunner, lock_key
    from termnorm.registry import default_root

    runner = runner or JobRunner()
    params = {"url": services.database_url(url), "vocabulary_id": int(vocabulary_id),
              "registry_root": str(registry_root or default_root()), "margin": float(margin), "by": by,
              "neural": neural, "purpose": purpose}
    with services.session_scope(url) as s:
        name = next((v["name"] for v in services.vocabularies(s) if v["id"] == int(vocabulary_id)), vocabulary_id)
    return runner.start(JOB_TARGET, params, title=f"{purpose} · {name}", lock=lock_key("retrain", vocabulary_id),
                        tags={"kind": "retrain", "vocabulary_id": int(vocabulary_id), "purpose": purpose})


def main(argv=None) -> int:
    """``python -m db.retrain --vocabulary NAME [--db URL] [--margin M]``: retrain in the foreground."""
    import argparse
    import json

    from termnorm.registry import Gate

    ap = argparse.ArgumentParser(prog="python -m db.retrain", description=main.__doc__)
    ap.add_argument("--vocabulary", required=True, help="vocabulary name in the database")
    ap.add_argument("--db", help="SQLAlchemy URL (default: $TERMNORM_DB_URL, else termnorm.sqlite3 in the data directory)")
    ap.add_argument("--margin", type=float, default=0.0, help="gate margin (default 0: not worse than current)")
    ap.add_argument("--no-neural", action="store_true", help="do not fine-tune cross-fitted dense / ranker parts")
    args = ap.parse_args(argv)
    with services.session_scope(args.db) as s:
        vid = services.vocabulary_id(s, args.vocabulary)
    if vid is None:
        print(f"error: no vocabulary {args.vocabulary!r} in the database", flush=True)
        return 2
    res = retrain(vid, url=args.db, gate=Gate(margin=args.margin), neural=not args.no_neural,
                  progress=lambda f, m: print(f"[{f:5.1%}] {m}", flush=True))
    print(json.dumps(jsonable(res.to_dict()), ensure_ascii=False, indent=1))
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main())
