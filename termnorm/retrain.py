"""Retraining from the coders' decisions and labelled mentions: the learning loop's training step.

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

The lexical pipeline is refit (GBM pair scorer + count classifier +
confidence calibration, termnorm.lexrank) on K-fold recall candidates exactly
like ``Engine.fit_lexical``, with the rows weighted as above. When the
current version folder holds neural parts (``dense/``: a termnorm.dense
BiEncoder; ``ranker/``: a termnorm.rank RankerModel) they are fine-tuned from
their current weights with their own training functions and saved into the
new version. The result is evaluated on the held-out ("gold") set,
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

import hashlib
import os
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import numpy as np

from termnorm.records import LabelledMention
from termnorm.text.normalize import normalize

#: Approach D's E-FN precision target: candidates the current model scores above beta are right
#: with precision >= ALPHA, so a non-gold one there is more likely unlabelled than wrong.
ALPHA = 0.8
#: Top-k of the current model whose non-gold candidates are mined as hard negatives (approach A's k_c = 10).
TOP_K_MINE = 10
#: beta needs this many held-out mentions (not seen by the current model); with fewer, nothing is
#: eliminated (approach D: an uncalibrated model's beta is +inf). 20 mentions x top-10 = 200 scored
#: candidates, enough for calibrate_efn_beta's min_support of 5 above beta to mean something.
MIN_HELDOUT = 20
#: Labelled mentions in the database needed to gate on them alone (below: coded mentions are held out too).
#: Under 30, one mention moves exact-set accuracy by more than 3 points: the gate would mostly measure noise.
MIN_GOLD = 30
#: Share of coded mentions held out as gold when the database has too few labelled mentions.
GOLD_SHARE = 0.2
#: Fewer training mentions than this cannot fill 4 folds with both classes: retraining refuses.
MIN_TRAIN = 8
#: Sample weight of a coder-confirmed negative row. 1.0 = as trusted as any labelled row; their
#: special treatment is exemption from E-FN (not tuned: no measurement favoured a larger weight).
CONFIRMED_WEIGHT = 1.0
#: Neural fine-tuning time budget per part (seconds); CPU-friendly default.
NEURAL_BUDGET_S = 600.0
#: OpenMP threads for the GBM (scikit-learn's HistGradientBoosting) while retraining / evaluating
#: ($TERMNORM_FIT_THREADS overrides). Measured on the shared 2-core machine (load ~8): Engine.fit_lexical
#: on 60 demo mentions took 71 s with OpenMP's default 2 threads and 3.2 s with 1 (idle-spinning
#: threads fight for busy cores); on 500 Yidu-N7K mentions 67 s vs 12 s, and suggesting for 300
#: mentions 24 s vs 2.7 s. Raise it on a dedicated many-core machine.
FIT_THREADS = int(os.environ.get("TERMNORM_FIT_THREADS", "1"))


def limited_threads(n: int | None = None):
    """Context manager capping OpenMP / BLAS threads (threadpoolctl) -- see FIT_THREADS."""
    from threadpoolctl import threadpool_limits

    # threadpoolctl only reaches runtimes already loaded: load scikit-learn's OpenMP one first
    import sklearn.ensemble  # noqa: F401

    return threadpool_limits(limits=n or FIT_THREADS)


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


def pair_counts(s, vocabulary_id: int, since_pair_id: int = 0) -> dict[str, int]:
    """Active training pairs by kind (accepted, corrected, rejected_candidate, synonym) with id > since_pair_id."""
    from db import services
    from db.models import PAIR_KINDS

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
    from db import learning, services
    from db.gold import _gold_frame  # the lead's gold set (no acting user: the gate is not a person)

    names = set(services.vocabulary_from_db(s, vocabulary_id).names)
    out: dict[str, LabelledMention] = {}

    def put(text: str, terms) -> None:
        terms = list(terms or [])
        if terms and all(t in names for t in terms):
            out.setdefault(normalize(text), LabelledMention(text, terms))

    for text, terms in _gold_frame(s, vocabulary_id=vocabulary_id)[["mention", "terms"]].itertuples(index=False):
        put(text, terms)
    for m in labelled if labelled is not None else learning.labelled_mentions(s, vocabulary_id):
        if m["split"] == learning.EVAL:
            put(m["text"], m["gold_terms"])
    return list(out.values())


def labelled_training(labelled: list[dict], names, taken: set[str]) -> list[LabelledMention]:
    """Labelled training-side mentions as positives, one per normalized text not in ``taken`` (the coded
    ones: a coder's answer for the same text wins). A mention a coder accepted, corrected or rejected is
    left to that decision (accepted / corrected ones are coded mentions; a rejection says none fits)."""
    from db import learning

    out: dict[str, LabelledMention] = {}
    for m in labelled:
        key = normalize(m["text"])
        if (m["split"] != learning.TRAIN or m["decision"] in ("accept", "correct", "reject") or key in taken
                or not all(t in names for t in m["gold_terms"])):
            continue
        out.setdefault(key, LabelledMention(m["text"], list(m["gold_terms"])))
    return list(out.values())


def in_holdout(text: str, share: float = GOLD_SHARE) -> bool:
    """Stable membership of a mention in the held-out share (sha1 of the normalized text)."""
    h = int(hashlib.sha1(normalize(text).encode("utf-8")).hexdigest()[:8], 16)
    return h % 10_000 < share * 10_000


def training_data_from_db(s, vocabulary_id: int, *, gold: list[LabelledMention] | None = None,
                          since_pair_id: int = 0, gold_share: float = GOLD_SHARE,
                          min_gold: int = MIN_GOLD) -> TrainingData:
    """Read coded and labelled training mentions, confirmed negatives, synonyms and the held-out set of a
    vocabulary (the split's sides as stored: db.learning.assign_unassigned gives new labelled mentions theirs)."""
    from db import learning, services

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
                        sum(normalize(m.text) in extra_texts for m in kept))


def new_pairs_since_current(s, vocabulary_id: int, registry) -> dict[str, int]:
    """Training pairs by kind created after the current registered version read its data (all if none)."""
    cur = registry.current()
    since = int(((cur or {}).get("train") or {}).get("max_pair_id", 0) or 0)
    return pair_counts(s, vocabulary_id, since)


# ------------------------------------------------------------------------------------- evaluation on gold
def gold_sha256(gold: list[LabelledMention]) -> str:
    h = hashlib.sha256()
    for text, terms in sorted((normalize(m.text), tuple(sorted(m.terms))) for m in gold):
        h.update(text.encode("utf-8") + b"\t" + "##".join(terms).encode("utf-8") + b"\n")
    return h.hexdigest()


def without_history(engine, texts: set[str]):
    """A copy of ``engine`` that does not know the given (normalized) mention texts as coded history.

    Shares the vocabulary, tagger and fitted models (ranker, surface scorer, neural stages, recall
    profile); only history recall and the sieve are rebuilt. Used so a gold mention that was coded
    earlier is not answered from memory when the gate measures the model.
    """
    return engine.with_history([m for m in engine.history if normalize(m.text) not in texts])


def evaluate_on_gold(engine, gold: list[LabelledMention], k: int = 50, progress=None) -> tuple[dict, list[dict]]:
    """Full-pipeline metrics on ``gold`` (termnorm.evaluate) and one prediction record per mention.

    Metrics carry ``n`` and ``gold_sha256`` so the gate compares like with like.
    """
    from termnorm.active import uncertainty
    from termnorm.evaluate import evaluate_predictions

    if not gold:
        return {"n": 0, "gold_sha256": gold_sha256([])}, []
    texts = {normalize(m.text) for m in gold}
    if any(normalize(m.text) in texts for m in engine.history):
        engine = without_history(engine, texts)
    t0 = time.perf_counter()
    sugs = engine.suggest_batch([m.text for m in gold], k=k, progress=progress)
    secs = time.perf_counter() - t0
    golds = [m.terms for m in gold]
    metrics = evaluate_predictions(golds, [s.chosen for s in sugs], [[c.term for c in s.candidates] for s in sugs],
                                   predicted_counts=[s.predicted_count for s in sugs])
    metrics.update(n=len(gold), gold_sha256=gold_sha256(gold), seconds=round(secs, 2))
    preds = [{"mention": m.text, "gold": list(m.terms), "chosen": list(s.chosen),
              "confidence": float(s.confidence), "correct": set(s.chosen) == set(m.terms),
              "uncertainty": uncertainty(s)} for m, s in zip(gold, sugs)]
    return metrics, preds


# ------------------------------------------------------------------------------------- fitting
def _kfold_candidates(engine, items: list[LabelledMention], folds: int, seed: int):
    """Recall candidates per training mention (in ``items`` order) with K-fold history, exactly as
    Engine.fit_lexical builds them, so a retrained ranker sees the features it is used with."""
    fold_of = np.random.default_rng(seed).integers(0, folds, len(items))
    order, got, hits = engine.kfold_candidates(items, fold_of,
                                               term_classifier=engine.meta.get("term_classifier", True))
    cand_lists: list = [None] * len(items)
    hcounts = [0] * len(items)
    for i, cands, h in zip(order, got, hits):
        cand_lists[i], hcounts[i] = cands, h
    return cand_lists, hcounts


def efn_beta(scores: list[np.ndarray], cand_lists, golds, heldout: list[bool], alpha: float = ALPHA,
             top_k: int = TOP_K_MINE, min_heldout: int = MIN_HELDOUT) -> tuple[float, int]:
    """Approach D's beta from the current model's top-k scores on held-out mentions; (+inf, n) if too few."""
    from termnorm.dense.mining import calibrate_efn_beta

    idx = [i for i, h in enumerate(heldout) if h and golds[i]]
    if len(idx) < min_heldout:
        return float("inf"), len(idx)
    sims, is_gold = [], []
    for i in idx:
        sc = scores[i]
        top = np.argsort(-sc, kind="stable")[:top_k]
        g = set(golds[i])
        sims.append(sc[top])
        is_gold.append(np.array([cand_lists[i][j].term in g for j in top], dtype=bool))
    if not sims:
        return float("inf"), len(idx)
    return calibrate_efn_beta(np.concatenate(sims), np.concatenate(is_gold), alpha), len(idx)


def fit_with_pairs(engine, train: list[LabelledMention], confirmed_negatives: dict[str, list[str]] | None = None,
                   current=None, *, alpha: float = ALPHA, top_k: int = TOP_K_MINE, folds: int = 4, seed: int = 0,
                   confirmed_weight: float = CONFIRMED_WEIGHT, heldout_texts: set[str] | None = None,
                   progress=None) -> dict:
    """Fit ``engine``'s lexical ranker on ``train`` plus confirmed and mined negatives; returns the counts.

    ``train``: positives (mention, gold terms); ``confirmed_negatives``:
    mention text -> terms a coder rejected (mentions without positives only
    contribute those rows); ``current``: the engine being replaced, whose
    scores mine hard negatives and set approach D's beta; ``heldout_texts``: normalized texts of
    mentions the current model was not trained on (default: those not in its history) -- beta is
    calibrated on them. One ranker is fitted (no ``bag``: termnorm train lexical --bag is a CLI fit).
    """
    from termnorm.engine import _hash_mentions
    from termnorm.lexrank import ENSEMBLE, LexicalRanker, PairFeaturizer

    say = progress or (lambda f, m: None)
    confirmed_negatives = confirmed_negatives or {}
    pos = [m for m in train if m.terms]
    known = {normalize(m.text) for m in pos}
    reject_only = [LabelledMention(t, []) for t in confirmed_negatives if normalize(t) not in known]
    items = pos + reject_only
    if len(pos) < MIN_TRAIN:
        raise ValueError(f"too few coded mentions to train on: {len(pos)} < {MIN_TRAIN}")
    t0 = time.perf_counter()
    say(0.0, f"recall candidates for {len(items)} training mentions ({folds} folds)")
    cand_lists, hcounts = _kfold_candidates(engine, items, folds, seed)
    texts = [m.text for m in items]
    golds = [list(m.terms) for m in items]
    say(0.4, "fitting the surface-difference scorer")
    engine.fit_surface(texts, cand_lists, golds, enabled=engine.meta.get("surface_diff", True))
    engine.fit_term_classifier(pos, enabled=engine.meta.get("term_classifier", True))
    n_parts = [engine._n_parts(t) for t in texts]
    t_recall = time.perf_counter() - t0

    cur_rank = getattr(current, "lexranker", None)
    if cur_rank is not None:
        say(0.45, "scoring candidates with the current model (mining, E-FN)")
        cur_scores = cur_rank.score(texts, cand_lists, n_parts)
        if heldout_texts is not None:
            heldout = [normalize(t) in heldout_texts for t in texts]
        else:
            seen = {normalize(m.text) for m in getattr(current, "history", [])}
            heldout = [normalize(t) not in seen for t in texts]
        beta, n_held = efn_beta(cur_scores, cand_lists, golds, heldout, alpha, top_k)
    else:
        cur_scores, beta, n_held = None, float("inf"), 0

    counts = dict(positive_rows=0, positive_mentions=len(pos), reject_only_mentions=len(reject_only),
                  confirmed_negatives_used=0, confirmed_negatives_not_recalled=0, mined_hard_negatives=0,
                  efn_eliminated=0, other_negatives=0)
    norm_neg = {normalize(t): set(v) for t, v in confirmed_negatives.items()}
    weights = []
    for i, (cands, gold) in enumerate(zip(cand_lists, golds)):
        g = set(gold)
        neg = norm_neg.get(normalize(texts[i]), set())
        w = np.ones(len(cands))
        top = set()
        if cur_scores is not None and len(cands):
            top = set(np.argsort(-cur_scores[i], kind="stable")[:top_k].tolist())
        terms = {c.term for c in cands}
        counts["confirmed_negatives_not_recalled"] += len(neg - terms)
        for j, c in enumerate(cands):
            if c.term in g:
                counts["positive_rows"] += 1
            elif c.term in neg:
                w[j] = confirmed_weight
                counts["confirmed_negatives_used"] += 1
            elif not g:
                w[j] = 0.0  # a rejected-only mention: its other candidates are unlabelled
            elif cur_scores is not None and cur_scores[i][j] >= beta:
                w[j] = 0.0  # E-FN: likely an unlabelled positive
                counts["efn_eliminated"] += 1
            elif j in top:
                counts["mined_hard_negatives"] += 1
            else:
                counts["other_negatives"] += 1
        weights.append(w)

    say(0.5, "fitting the GBM ranker and count classifier")
    t1 = time.perf_counter()
    keys = sorted({k for cl in cand_lists for c in cl for k in c.scores})
    # the engine's ranker settings (termnorm train lexical) carry over; pipelines fitted before a setting
    # existed get today's default
    feat = PairFeaturizer(keys, tagger=engine.tagger, context=engine.meta.get("context_features", True))
    ranker_kw = dict(ensemble=engine.meta.get("ranker_ensemble", ENSEMBLE),
                     count_parts=engine.meta.get("part_count", True))
    count_mask = [bool(g) for g in golds]
    metric = engine.meta.get("output_rule_metric", "accuracy")
    rule, rule_scores = _select_output_rule(feat, texts, cand_lists, golds, n_parts, hcounts, weights, count_mask,
                                            seed, metric=metric, ranker_kw=ranker_kw)
    engine.lexranker = LexicalRanker(feat, seed=seed, **ranker_kw).fit(texts, cand_lists, golds, n_parts, hcounts,
                                                                       weights=weights, count_mask=count_mask)
    if rule is not None:
        engine.lexranker.rule = rule
        engine.meta.update(output_rule=list(rule), output_rule_metric=metric, output_rule_heldout=rule_scores)
    say(0.85, "calibrating confidence")
    lab = [i for i, g in enumerate(golds) if g]
    engine._fit_confidence([texts[i] for i in lab], [cand_lists[i] for i in lab], [golds[i] for i in lab],
                           [n_parts[i] for i in lab], [hcounts[i] for i in lab])
    engine.model_version = "lexical-gbm-" + _hash_mentions(pos)[:8]
    report = dict(counts, beta=beta if np.isfinite(beta) else None, alpha=alpha, top_k=top_k,
                  efn_heldout_mentions=n_held, recall_seconds=round(t_recall, 2),
                  fit_seconds=round(time.perf_counter() - t1, 2))
    engine.meta.update(train_size=len(pos), train_sha256=_hash_mentions(pos), score_keys=keys, ranker_bag=1,
                       ranker_ensemble=ranker_kw["ensemble"], context_features=feat.context,
                       part_count=ranker_kw["count_parts"],
                       fit_seconds=report["fit_seconds"], learning_loop=report)
    say(1.0, "fitted")
    return report


def _select_output_rule(feat, texts, cand_lists, golds, n_parts, hcounts, weights, count_mask, seed: int,
                        held_share: float = 0.2, metric: str = "accuracy", ranker_kw: dict | None = None):
    """The output rule (termnorm.lexrank.select_rule) chosen as Engine.fit_lexical does: a probe ranker
    fitted on 80% of the mentions, the rule with the best ``metric`` on the other 20%.
    (None, {}) when this lexrank has no rule selection."""
    try:
        from termnorm.lexrank import LexicalRanker, select_rule
    except ImportError:
        return None, {}
    rng = np.random.default_rng(seed + 1)
    held = rng.random(len(texts)) < held_share
    fit_i = [i for i in range(len(texts)) if not held[i]]
    out_i = [i for i in range(len(texts)) if held[i] and golds[i]]
    if len(out_i) < 2 or len(fit_i) < MIN_TRAIN:
        return None, {}

    def pick(xs, idx):
        return [xs[i] for i in idx]

    probe = LexicalRanker(feat, seed=seed, **(ranker_kw or {})).fit(
        *(pick(a, fit_i) for a in (texts, cand_lists, golds, n_parts, hcounts)),
        weights=pick(weights, fit_i), count_mask=pick(count_mask, fit_i))
    hp = probe.score(pick(texts, out_i), pick(cand_lists, out_i), pick(n_parts, out_i))
    hc = probe.count_probs(pick(texts, out_i), hp, pick(n_parts, out_i), pick(hcounts, out_i),
                           pick(cand_lists, out_i))
    return select_rule(pick(cand_lists, out_i), hp, hc, pick(golds, out_i), metric=metric)


# ------------------------------------------------------------------------------------- neural parts
def _neural_parts(folder: Path | None) -> list[str]:
    if folder is None:
        return []
    return [p for p in ("dense", "ranker") if (folder / p).is_dir()]


def _fine_tune(model, train: list[LabelledMention], budget_s, fit) -> dict:
    """One fine-tuning pass, ``fit(model, mentions, budget_s) -> report``.

    A cross-fitted model (termnorm.rank.crossfit.CrossFit) learns fold by fold, each fold model without its own fold,
    new mentions included (they join the fold their hash gives), so the GBM refitted over it still sees
    out-of-fold scores for every training mention; the time budget is shared between the folds.
    """
    from termnorm.rank.crossfit import CrossFit, fold_of_text, outside_fold

    if not isinstance(model, CrossFit):
        return _jsonable(fit(model, train, budget_s))
    for m in train:
        model.fold_of.setdefault(normalize(m.text), fold_of_text(m.text, model.folds))
    share = budget_s / model.folds if budget_s else None
    return {"folds": [_jsonable(fit(sub, outside_fold(train, model.fold_of, k), share))
                      for k, sub in enumerate(model.models)]}


def retrain_neural(current_folder: Path, vocabulary, train: list[LabelledMention], tagger=None,
                   budget_s: float = NEURAL_BUDGET_S, progress: bool = False):
    """Fine-tune the neural parts found in ``current_folder`` from their current weights.

    ``dense/`` -> termnorm.dense.train_biencoder (approach D's NCE with its own
    E-FN), ``ranker/`` -> termnorm.rank.train_ranker on the lexical union's
    candidates. Returns ``(writer(folder), report)``: the writer saves the
    fine-tuned parts into a new version folder (pass it to Registry.register).
    """
    parts, report = {}, {}
    if (current_folder / "dense").is_dir():
        from termnorm.dense import train_biencoder
        from termnorm.dense.crossfit import load_dense

        enc = load_dense(current_folder / "dense")
        report["dense"] = _fine_tune(enc, train, budget_s, lambda sub, items, budget: (
            train_biencoder(sub, vocabulary, items, objective="nce", epochs=1, time_budget_s=budget,
                            progress=progress)))
        report["dense"]["device"] = str(enc.device)
        parts["dense"] = enc
    if (current_folder / "ranker").is_dir():
        from termnorm.rank import train_ranker
        from termnorm.rank.crossfit import load_ranker
        from termnorm.rank.train import recall_candidates_fn

        model = load_ranker(current_folder / "ranker", tagger=tagger)
        fn = recall_candidates_fn(vocabulary)
        report["ranker"] = _fine_tune(model, train, budget_s, lambda sub, items, budget: (
            train_ranker(sub, vocabulary, items, fn, epochs=1, time_budget_s=budget, progress=progress)))
        report["ranker"]["device"] = str(model.device)
        parts["ranker"] = model

    def writer(folder: Path) -> None:
        for name, part in parts.items():
            part.save(Path(folder) / name)

    return writer, report


def _jsonable(d: dict) -> dict:
    import json

    from termnorm.registry import _json_default

    return json.loads(json.dumps(d, default=_json_default))


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


def retrain(vocabulary_id: int, *, url: str | None = None, registry=None, gold: list[LabelledMention] | None = None,
            gate=None, base: list[LabelledMention] | None = None, current=None, keyword_dir=None,
            alpha: float = ALPHA, top_k: int = TOP_K_MINE, neural: bool = True,
            neural_budget_s: float = NEURAL_BUDGET_S, seed: int = 0, by: str = "", progress=None) -> RetrainResult:
    """Build training data from the database, refit, evaluate on the held-out mentions, register and gate
    against the model serving now.

    ``registry``: a termnorm.registry.Registry (default: the vocabulary's lineage
    under ``$TERMNORM_MODELS``); ``current``: the serving Engine if already in
    memory (else the current version is loaded from the registry, and the model
    serving is built as the app builds it: db.serving.build_engine, the shipped
    one when no version is current); ``base``: training mentions to start
    from when the registry has no current version; ``progress(fraction, message)``.
    """
    with limited_threads():
        return _retrain(vocabulary_id, url=url, registry=registry, gold=gold, gate=gate, base=base, current=current,
                        keyword_dir=keyword_dir, alpha=alpha, top_k=top_k, neural=neural,
                        neural_budget_s=neural_budget_s, seed=seed, by=by, progress=progress)


def _retrain(vocabulary_id, *, url, registry, gold, gate, base, current, keyword_dir, alpha, top_k, neural,
             neural_budget_s, seed, by, progress) -> RetrainResult:
    from db import learning, services
    from termnorm.engine import PRETRAINED, Engine, cold_start_domain
    from termnorm.registry import Gate, Registry

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
    engine = Engine(vocab, history=train, keyword_dir=kw, split=split, tagger=current.tagger if same else None,
                    history_extras=getattr(current, "history_extras", ()), recall_profile=profile,
                    max_candidates=max_candidates)
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

    writer, neural_report = None, {}
    cur_folder = registry.path(parent) if parent else None
    if neural and _neural_parts(cur_folder):
        t1 = time.perf_counter()
        say(0.66, f"fine-tuning neural parts: {', '.join(_neural_parts(cur_folder))}")
        writer, neural_report = retrain_neural(cur_folder, vocab, train, engine.tagger, neural_budget_s)
        secs["neural"] = round(time.perf_counter() - t1, 2)

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
                                train={"max_pair_id": data.max_pair_id, "seconds": secs, "n_train": len(train),
                                       "by": by}, gold_predictions=preds, extra_writer=writer)
    gate = gate or Gate()
    res = registry.promote(version, gate, baseline=baseline, baseline_predictions=base_preds, by=by)
    say(1.0, res.summary())
    return RetrainResult(version, res.promoted, asdict(res), metrics, baseline, counts, secs, parent, engine)


def _serving_engine(url, vocabulary_id: int, version: str | None, root):
    """The engine the app serves for ``version`` (None: the shipped model), built from the database."""
    from db import serving

    return serving.build_engine(url, vocabulary_id, version, root=root)


# ------------------------------------------------------------------------------------- as a background job
JOB_TARGET = "termnorm.retrain:retrain_job"


def retrain_job(params: dict, ctx) -> dict:
    """termnorm.jobs target: ``retrain`` with params url, vocabulary_id, registry_root, margin, by, neural,
    purpose ("retrain", or "first fit" after an import of labelled mentions: the same step)."""
    from termnorm.jobs import detect_device
    from termnorm.registry import Gate, Registry

    ctx.set_device(detect_device())
    registry = None
    if params.get("registry_root"):
        from db import services

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
    return _jsonable(out)


def start_retrain_job(vocabulary_id: int, *, url: str | None = None, registry_root=None, margin: float = 0.0,
                      by: str = "", neural: bool = True, runner=None, purpose: str = "retrain") -> str:
    """Start retraining as a background job (one per vocabulary at a time: lock ``retrain:<id>``, tagged
    kind "retrain" and the vocabulary id); returns the job id (raises jobs.JobBusy)."""
    from db import services
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
    """``python -m termnorm.retrain --vocabulary NAME [--db URL] [--margin M]``: retrain in the foreground."""
    import argparse
    import json

    from db import services
    from termnorm.registry import Gate

    ap = argparse.ArgumentParser(prog="python -m termnorm.retrain", description=main.__doc__)
    ap.add_argument("--vocabulary", required=True, help="vocabulary name in the database")
    ap.add_argument("--db", help="SQLAlchemy URL (default $TERMNORM_DB_URL or db/termnorm.sqlite3)")
    ap.add_argument("--margin", type=float, default=0.0, help="gate margin (default 0: not worse than current)")
    ap.add_argument("--no-neural", action="store_true", help="do not fine-tune dense / ranker parts")
    args = ap.parse_args(argv)
    with services.session_scope(args.db) as s:
        vid = services.vocabulary_id(s, args.vocabulary)
    if vid is None:
        print(f"error: no vocabulary {args.vocabulary!r} in the database", flush=True)
        return 2
    res = retrain(vid, url=args.db, gate=Gate(margin=args.margin), neural=not args.no_neural,
                  progress=lambda f, m: print(f"[{f:5.1%}] {m}", flush=True))
    print(json.dumps(_jsonable(res.to_dict()), ensure_ascii=False, indent=1))
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main())
