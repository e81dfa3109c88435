"""Refitting the pipeline from training mentions: the learning loop's fitting step, with no database.

``fit_with_pairs`` refits the lexical pipeline (GBM pair scorer + count
classifier + confidence calibration, termnorm.gbm_ranker) on K-fold recall
candidates exactly like ``Engine.fit_lexical``, with the rows weighted by what
the training signal says:

* **confirmed hard negatives** -- shown candidates a coder did not choose:
  approach B's lesson that hard negatives matter more than model choice,
  confirmed by a person (weight ``CONFIRMED_WEIGHT``);
* **mined negatives with false-negative elimination** (approach D, E-FN):
  the current model scores every training candidate; its top-k non-gold
  candidates are hard negatives, *except* those scoring >= beta, where beta
  is the lowest score such that the current model's predictions above it are
  gold with precision >= alpha = 0.8 on mentions it has not been trained on.
  Such candidates are likely unlabelled positives (synonyms, hyper/hyponyms)
  and are left out (weight 0) -- unless a coder confirmed them as negatives.

``retrain_neural`` gives the neural parts of the next version (``dense/``:
a termnorm.dense bi-encoder; ``ranker/``: a termnorm.rank ranker), the cross-fitted ones fine-tuned from
their current weights; ``evaluate_on_gold`` measures an engine on held-out
mentions without answering them from its coded history.

What reads the training signal from the database, gates and registers the
result is the app's retraining service, db.retrain.
"""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

import numpy as np

from termnorm import reading
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
FIT_THREADS = 1  # the default of termnorm.settings' fit_threads, read at each use


def limited_threads(n: int | None = None):
    """Context manager capping OpenMP / BLAS threads (threadpoolctl) -- see FIT_THREADS."""
    from threadpoolctl import threadpool_limits

    # threadpoolctl only reaches runtimes already loaded: load scikit-learn's OpenMP one first
    import sklearn.ensemble  # noqa: F401

    from termnorm import settings

    return threadpool_limits(limits=n or settings.get().fit_threads)



def in_holdout(text: str, share: float = GOLD_SHARE) -> bool:
    """Stable membership of a mention in the held-out share (sha1 of the normalized text)."""
    h = int(hashlib.sha1(normalize(text).encode("utf-8")).hexdigest()[:8], 16)
    return h % 10_000 < share * 10_000


# ------------------------------------------------------------------------------------- evaluation on gold
def gold_sha256(gold: list[LabelledMention]) -> str:
    h = hashlib.sha256()
    for text, terms in sorted((normalize(m.text), tuple(sorted(m.terms))) for m in gold):
        h.update(text.encode("utf-8") + b"\t" + "##".join(terms).encode("utf-8") + b"\n")
    return h.hexdigest()


def without_history(engine, texts: set[str]):
    """A copy of ``engine`` that does not know the given (normalized) mention texts as coded history;
    ``engine`` itself when its history holds none of them.

    Shares the vocabulary, tagger and fitted models (ranker, surface scorer, neural stages, recall
    profile); only history recall and the sieve are rebuilt. Used so a gold mention that was coded
    earlier is not answered from memory when the gate measures the model.
    """
    # as coded: a history mention is stored as read in its note (termnorm.reading), ``written`` keeps what was coded
    kept = [m for m in engine.history if normalize(m.written or m.text) not in texts]
    return engine if len(kept) == len(engine.history) else engine.with_history(kept)


def evaluate_on_gold(engine, gold: list[LabelledMention], k: int = 50, progress=None) -> tuple[dict, list[dict]]:
    """Full-pipeline metrics on ``gold`` (termnorm.evaluate) and one prediction record per mention, each mention
    read in its document as the coding page reads it.

    Metrics carry ``n`` and ``gold_sha256`` so the gate compares like with like.
    """
    from termnorm.active import uncertainty
    from termnorm.evaluate import evaluate_predictions

    if not gold:
        return {"n": 0, "gold_sha256": gold_sha256([])}, []
    engine = without_history(engine, {normalize(m.text) for m in gold})
    t0 = time.perf_counter()
    # read in their notes, as the coding page reads them
    sugs = engine.suggest_batch([m.text for m in gold], k=k, progress=progress, documents=[m.document for m in gold])
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
    from termnorm.fitting import fit_confidence, hash_mentions as _hash_mentions
    from termnorm.fitting import ranker_keys
    from termnorm.gbm_ranker import ENSEMBLE, LexicalRanker, PairFeaturizer
    from termnorm.rank.name import with_name_scores

    say = progress or (lambda f, m: None)
    confirmed_negatives = confirmed_negatives or {}
    # read in their documents, as serving reads a mention (termnorm.reading); what the coder saw keys the
    # confirmed negatives and the held-out texts
    pos = reading.read_labelled(engine, [m for m in train if m.terms])
    known = {normalize(m.written or m.text) for m in pos}
    reject_only = [LabelledMention(t, []) for t in confirmed_negatives if normalize(t) not in known]
    items = pos + reject_only
    if len(pos) < MIN_TRAIN:
        raise ValueError(f"too few coded mentions to train on: {len(pos)} < {MIN_TRAIN}")
    t0 = time.perf_counter()
    say(0.0, f"recall candidates for {len(items)} training mentions ({folds} folds)")
    cand_lists, hcounts = _kfold_candidates(engine, items, folds, seed)
    texts = [m.text for m in items]
    written = [m.written or m.text for m in items]
    golds = [list(m.terms) for m in items]
    say(0.4, "fitting the surface-difference scorer")
    engine.fit_surface(texts, cand_lists, golds, enabled=engine.meta.get("surface_diff", True))
    engine.fit_term_classifier(pos, enabled=engine.meta.get("term_classifier", True))
    n_parts = [engine._n_parts(t) for t in texts]
    engine.name_scorer = None  # the engine's setting carries over (termnorm.rank.name): refitted, out of fold
    if engine.meta.get("name_scorer"):
        (_, cand_lists, *_), engine.name_scorer = with_name_scores((texts, cand_lists, golds, n_parts),
                                                                   engine.tagger, True, seed)
    t_recall = time.perf_counter() - t0

    cur_rank = getattr(current, "lexranker", None)
    if cur_rank is not None:
        say(0.45, "scoring candidates with the current model (mining, E-FN)")
        cur_scores = cur_rank.score(texts, cand_lists, n_parts)
        if heldout_texts is not None:
            heldout = [normalize(t) in heldout_texts for t in written]
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
        neg = norm_neg.get(normalize(written[i]), set())
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
    keys = ranker_keys(cand_lists, False, bool(engine.meta.get("document_words")))
    # the engine's ranker settings (termnorm train lexical) carry over; pipelines fitted before a setting
    # existed get today's default
    feat = PairFeaturizer(keys, tagger=engine.tagger, context=engine.meta.get("context_features", True),
                          part_context=engine.meta.get("part_context", False))
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
    fit_confidence(engine, [texts[i] for i in lab], [cand_lists[i] for i in lab], [golds[i] for i in lab],
                   [n_parts[i] for i in lab], [hcounts[i] for i in lab])
    engine.model_version = "lexical-gbm-" + _hash_mentions(pos)[:8]
    report = dict(counts, beta=beta if np.isfinite(beta) else None, alpha=alpha, top_k=top_k,
                  efn_heldout_mentions=n_held, recall_seconds=round(t_recall, 2),
                  fit_seconds=round(time.perf_counter() - t1, 2))
    engine.meta.update(train_size=len(pos), train_sha256=_hash_mentions(pos), score_keys=keys, ranker_bag=1,
                       ranker_ensemble=ranker_kw["ensemble"], context_features=feat.context,
                       part_context=feat.part_context, name_scorer=engine.name_scorer is not None,
                       part_count=ranker_kw["count_parts"],
                       fit_seconds=report["fit_seconds"], learning_loop=report)
    say(1.0, "fitted")
    return report


def _select_output_rule(feat, texts, cand_lists, golds, n_parts, hcounts, weights, count_mask, seed: int,
                        held_share: float = 0.2, metric: str = "accuracy", ranker_kw: dict | None = None):
    """The output rule (termnorm.gbm_ranker.select_rule) chosen as Engine.fit_lexical does: a probe ranker
    fitted on 80% of the mentions, the rule with the best ``metric`` on the other 20%.
    (None, {}) when this lexrank has no rule selection."""
    from termnorm.gbm_ranker import LexicalRanker, select_rule

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
def neural_parts(folder: Path | None) -> list[str]:
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
        return jsonable(fit(model, train, budget_s))
    for m in train:
        model.fold_of.setdefault(normalize(m.text), fold_of_text(m.text, model.folds))
    share = budget_s / model.folds if budget_s else None
    return {"folds": [jsonable(fit(sub, outside_fold(train, model.fold_of, k), share))
                      for k, sub in enumerate(model.models)]}


def retrain_neural(current_folder: Path | None, vocabulary, train: list[LabelledMention], tagger=None,
                   budget_s: float = NEURAL_BUDGET_S, progress: bool = False, fine_tune: bool = True,
                   dense_from=None) -> tuple[dict, dict]:
    """The neural parts the next version serves, made before its ranker is fitted so that the GBM learns the
    scores of the parts that will serve: those of ``current_folder`` (``dense/``: a termnorm.dense bi-encoder;
    ``ranker/``: a termnorm.rank ranker) and, where it has no encoder, the encoder folder ``dense_from`` (a
    vocabulary's pipeline setting, e.g. one trained on its synonyms: ``termnorm train recall --data vocab``),
    which replaces the folder's own encoder when given; ``dense_from=False``: no encoder.

    With ``fine_tune`` a cross-fitted part (termnorm.rank.crossfit) learns from ``train`` fold by fold from its
    current weights, each fold model without its own fold (``dense/`` by termnorm.dense.train_biencoder, approach
    D's NCE; ``ranker/`` by termnorm.rank.train_ranker on the lexical union's candidates). A single model is kept
    as it is: fine-tuned on the coded mentions, it would score its own training mentions when the ranker is
    fitted over its scores, and the ranker would learn to trust it more than it deserves on new mentions.
    Returns ``(parts, report)``: ``parts`` holds ``"dense"`` / ``"ranker"`` for ``Engine(dense=, ranker=)``.
    """
    from termnorm.rank.crossfit import CrossFit

    parts, report = {}, {}
    folder = Path(current_folder) if current_folder is not None else None
    dense_dir = dense_from if dense_from is not None else (
        folder / "dense" if folder is not None and (folder / "dense").is_dir() else None)
    if dense_dir:
        from termnorm.dense import train_biencoder
        from termnorm.dense.crossfit import load_dense

        enc = parts["dense"] = load_dense(dense_dir)
        report["dense"] = {"from": str(dense_dir), "device": str(enc.device)}
        if fine_tune and isinstance(enc, CrossFit):
            report["dense"].update(_fine_tune(enc, train, budget_s, lambda sub, items, budget: (
                train_biencoder(sub, vocabulary, items, objective="nce", epochs=1, time_budget_s=budget,
                                progress=progress))))
        else:
            report["dense"]["kept"] = _KEPT if fine_tune else "fine-tuning off"
    if folder is not None and (folder / "ranker").is_dir():
        from termnorm.rank import train_ranker
        from termnorm.rank.crossfit import load_ranker
        from termnorm.rank.train import recall_candidates_fn

        model = parts["ranker"] = load_ranker(folder / "ranker", tagger=tagger)
        report["ranker"] = {"from": str(folder / "ranker"), "device": str(model.device)}
        if fine_tune and isinstance(model, CrossFit):
            fn = recall_candidates_fn(vocabulary)
            report["ranker"].update(_fine_tune(model, train, budget_s, lambda sub, items, budget: (
                train_ranker(sub, vocabulary, items, fn, epochs=1, time_budget_s=budget, progress=progress))))
        else:
            report["ranker"]["kept"] = _KEPT if fine_tune else "fine-tuning off"
    return parts, report


_KEPT = "a single model, not cross-fitted: kept as it is (fine-tuned on the coded mentions it would score them)"


def jsonable(d: dict) -> dict:
    import json

    from termnorm.filestore import json_default as _json_default

    return json.loads(json.dumps(d, default=_json_default))
