"""Fitting an :class:`~termnorm.engine.Engine`'s lexical ranker: K-fold recall candidates, the surface-difference
scorer and term classifier that score them, the GBM ranker + count classifier, the output rule and the
calibrated confidence (see termnorm.gbm_ranker).

The functions take the engine as their first argument and set its fitted parts (``lexranker``,
``confidence_model``, ``diff_scorer``, ``term_classifier``, ``meta``); :class:`~termnorm.engine.Engine`'s
``fit_*`` methods call them.
"""

from __future__ import annotations

import copy
import hashlib
import json
import time
from collections import Counter
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

import numpy as np
from threadpoolctl import threadpool_limits

from termnorm import reading
from termnorm.rank import document
from termnorm.rank.synthetic import SyntheticMention, synthetic_mentions
from termnorm.recall.strategies import history_strategies
from termnorm.records import LabelledMention
from termnorm.text.normalize import normalize

if TYPE_CHECKING:
    from termnorm.engine import Engine


@dataclass(frozen=True)
class GBMOptions:
    """The GBM ranker's own options of :meth:`Engine.fit_lexical <termnorm.engine.Engine.fit_lexical>`
    (``fit_lexical(train, rule_metric=..., ensemble=...)`` sets any of them by name)."""

    rule_metric: str = "accuracy"  # what the output rule is chosen for: "accuracy" (exact set) or "micro_f1"
    keyword_features: bool = True  # keyword match features (False: an ablation)
    ensemble: int | None = None  # GBMs in the pair scorer (None: termnorm.gbm_ranker.ENSEMBLE)
    context_features: bool = True  # list-context features (termnorm.gbm_ranker.CONTEXT_KEYS)
    part_count: bool = True  # the count classifier's part-coverage features (termnorm.gbm_ranker.part_features)
    part_context: bool = False  # per-part context features of the pair scorer (termnorm.rank.parts)
    # weight of the pair-scorer rows of a training mention whose gold term its K-fold history never coded (the
    # never-coded terms are a few percent of the rows and the GBM learns to prefer coded terms)
    novel_weight: float = 1.0
    # a history-free pair scorer's out-of-fold probability as one more score, "name" (termnorm.rank.name)
    name_scorer: bool = False
    # what the mention's document says of a candidate beyond the mention, "doc_words" (termnorm.rank.document)
    document_words: bool = False


#: the share of its K-fold history each part of a history-mixed fit sees (``with_history=HISTORY_MIX``, one part
#: each): a cold-start ranker that learns what history scores are worth with none, a few and many coded mentions
HISTORY_MIX = (0.0, 0.03, 0.1, 0.3, 1.0)
#: score of every candidate: log(1 + coded mentions the history holds). Only a history-mixed ranker reads it
#: (it tells "no history candidate: nothing is coded yet" from "no coded mention like this one")
HISTORY_SIZE = "history_size"


def history_size_scores(cand_lists, n: int) -> None:
    """Give every candidate score :data:`HISTORY_SIZE` for a history of ``n`` coded mentions."""
    v = float(np.log1p(n))
    for cl in cand_lists:
        for c in cl:
            c.scores[HISTORY_SIZE] = v


def fit_lexical(engine: Engine, train: list[LabelledMention], folds: int = 4, progress: bool = False,
                seed: int = 0, with_history: bool = True, *, surface_diff: bool = True, bag: int = 1,
                term_classifier: bool = True, gbm: GBMOptions | None = None) -> dict:
    """:meth:`termnorm.engine.Engine.fit_lexical` (its docstring tells the options)."""
    from termnorm.gbm_ranker import RULE_METRICS

    gbm = gbm or GBMOptions()
    if gbm.rule_metric not in RULE_METRICS:
        raise ValueError(f"rule metric must be one of {RULE_METRICS}, not {gbm.rule_metric!r}")
    if bag < 1:
        raise ValueError(f"bag must be at least 1, not {bag}")
    if gbm.ensemble is not None and gbm.ensemble < 1:
        raise ValueError(f"ensemble must be at least 1, not {gbm.ensemble}")
    train = reading.read_labelled(engine, [m for m in train if m.terms])
    splits = engine.ranker_training_data(train, folds=folds, seed=seed, bag=bag, with_history=with_history,
                                         surface_diff=surface_diff, keyword_features=gbm.keyword_features,
                                         term_classifier=term_classifier, progress=progress)
    engine.fit_ranker(splits, seed=seed, progress=progress, **asdict(gbm))
    # the version names the data *and* the fit's options: rankers fitted on one set with different
    # options (the cold-start export, an ablation) must not share a name in the stored suggestions
    options = dict(folds=folds, seed=seed, with_history=with_history, rule_metric=gbm.rule_metric,
                   keyword_features=gbm.keyword_features, surface_diff=surface_diff, bag=bag,
                   term_classifier=term_classifier, ensemble=engine.meta["ranker_ensemble"],
                   context_features=gbm.context_features, part_count=gbm.part_count, split=engine.split)
    for opt in ("part_context", "name_scorer"):  # only when on: the versions of earlier fits stay as they were
        if getattr(gbm, opt):
            options[opt] = True
    train_sha = hash_mentions(train)
    digest = hashlib.sha256((train_sha + json.dumps(options, sort_keys=True)).encode())
    engine.model_version = "lexical-gbm-" + digest.hexdigest()[:8]
    engine.meta.update(train_size=len(train), train_sha256=train_sha, fit_options=options)
    return engine.meta


def ranker_training_data(engine: Engine, train: list[LabelledMention], folds: int = 4, seed: int = 0,
                         bag: int = 1, with_history: bool = True, surface_diff: bool = True,
                         keyword_features: bool = True, term_classifier: bool = True,
                         progress: bool = False, synthetic: float = 0.0, held_terms: float = 0.0) -> list[tuple]:
    """:meth:`termnorm.engine.Engine.ranker_training_data`."""
    train = reading.read_labelled(engine, [m for m in train if m.terms])
    real = train
    if synthetic:
        train = train + synthetic_mentions(engine, train, synthetic, seed)
    splits, scorer, surface_s = [], None, 0.0
    for r in range(bag):
        rng = np.random.default_rng(seed + r)
        fold_of = _hold_terms_out(train, rng.integers(0, folds, len(train)), held_terms, folds, rng)
        order, cand_lists, hcounts = engine.kfold_candidates(train, fold_of, with_history, progress,
                                                             term_classifier=term_classifier)
        mentions = [train[i].text for i in order]
        golds = [train[i].terms for i in order]
        engine.fit_surface(mentions, cand_lists, golds, enabled=surface_diff, progress=progress,
                           keywords=keyword_features)
        scorer = scorer if r else engine.diff_scorer
        surface_s += engine.meta.get("surface_diff_seconds", 0.0)
        # the rng draws the held-out mentions of the output rule (fit_ranker copies it per fit)
        splits.append((mentions, cand_lists, golds, [engine._n_parts(m) for m in mentions], hcounts, rng,
                       _fold_familiarity(train, fold_of, order)))
    engine.diff_scorer = scorer
    engine.meta["history_mix"] = list(with_history) if isinstance(with_history, tuple) else None
    if surface_diff:
        engine.meta["surface_diff_seconds"] = round(surface_s, 2)
    engine.fit_term_classifier(real, enabled=term_classifier and with_history)
    if getattr(engine, "family_features", False) and with_history:  # inference's: every coded training mention
        from termnorm.rank.family import FamilyPrior

        engine.family_prior = FamilyPrior(engine.vocabulary).fit(real)
    return splits


def _hold_terms_out(train: list[LabelledMention], fold_of, share: float, folds: int, rng):
    """``fold_of`` with every mention of randomly drawn terms coded twice or more put in one fold, until they are
    ``share`` of the mentions: their K-fold history never codes their term, so the ranker learns from real
    mentions of never-coded terms (a term coded once is never coded in its mention's K-fold history anyway)."""
    if share <= 0:
        return fold_of
    by_term: dict[str, list[int]] = {}
    for i, m in enumerate(train):
        for t in dict.fromkeys(m.terms):
            by_term.setdefault(t, []).append(i)
    terms = sorted(t for t, ix in by_term.items() if len(ix) > 1)
    moved: set[int] = set()
    for j in rng.permutation(len(terms)):
        if len(moved) >= share * len(train):
            break
        f = rng.integers(0, folds)
        for i in by_term[terms[j]]:
            if i not in moved:
                fold_of[i] = f
                moved.add(i)
    return fold_of


def _fold_familiarity(train: list[LabelledMention], fold_of, order: list[int]) -> list[int]:
    """Per mention of ``order``: how often the other folds' mentions code its rarest gold term (what its
    candidates' history scores could know)."""
    total, own = Counter(), {int(f): Counter() for f in fold_of}
    for m, g in zip(train, fold_of):
        if m.terms and not isinstance(m, SyntheticMention):
            total.update(set(m.terms))
            own[int(g)].update(set(m.terms))
    return [min((total[t] - own[int(fold_of[i])][t] for t in train[i].terms), default=0) for i in order]


def ranker_keys(cand_lists, history_size: bool, document_words: bool) -> list[str]:
    """The score keys a ranker reads: every key the candidates carry, less :data:`HISTORY_SIZE` (near-constant
    unless the fit mixed history sizes) and ``doc_words`` (termnorm.rank.document) unless asked for."""
    return sorted({k for cl in cand_lists for c in cl for k in c.scores}
                  - (set() if history_size else {HISTORY_SIZE}) - (set() if document_words else {document.KEY}))


def fit_ranker(engine: Engine, splits: list[tuple], seed: int = 0, progress: bool = False, **options) -> dict:
    """:meth:`termnorm.engine.Engine.fit_ranker` (``options``: the fields of :class:`GBMOptions`)."""
    from termnorm.gbm_ranker import ENSEMBLE, LexicalRanker, PairFeaturizer
    from termnorm.rank.name import with_name_scores

    o = GBMOptions(**options)
    ensemble = ENSEMBLE if o.ensemble is None else int(o.ensemble)
    if ensemble < 1:
        raise ValueError(f"ensemble must be at least 1, not {ensemble}")
    ranker_kw = dict(ensemble=ensemble, count_parts=o.part_count)
    engine.name_scorer = None
    if o.name_scorer:
        named = [with_name_scores(sp, engine.tagger, o.keyword_features, seed + r) for r, sp in enumerate(splits)]
        splits, engine.name_scorer = [sp for sp, _ in named], named[0][1]
    keys = ranker_keys((cl for sp in splits for cl in sp[1]), bool(engine.meta.get("history_mix")), o.document_words)
    feat = PairFeaturizer(keys, tagger=engine.tagger, keywords=o.keyword_features, context=o.context_features,
                          part_context=o.part_context)
    t0 = time.perf_counter()
    first = (*splits[0][:5], copy.deepcopy(splits[0][5]))  # refits on the same splits stay identical
    weights = [_novel_weights(sp, o.novel_weight) for sp in splits]
    with threadpool_limits(limits=fit_threads(), user_api="openmp"):
        _fit_ranker(engine, feat, *first, seed, o.rule_metric, ranker_kw, weights[0])
        if len(splits) > 1:
            it = splits[1:]
            if progress:
                from tqdm import tqdm
                it = tqdm(it, desc="bagged rankers")
            members = [engine.lexranker] + [LexicalRanker(feat, seed=seed + r, **ranker_kw).fit(*sp[:5], w)
                                            for r, (sp, w) in enumerate(zip(it, weights[1:]), start=1)]
            engine.lexranker = LexicalRanker.bagged(members)
    engine.meta.update(score_keys=keys, ranker_bag=len(splits), ranker_ensemble=ensemble,
                       context_features=bool(o.context_features), part_count=bool(o.part_count),
                       part_context=bool(o.part_context), name_scorer=bool(o.name_scorer),
                       document_words=bool(o.document_words), novel_weight=float(o.novel_weight),
                       fit_seconds=round(time.perf_counter() - t0, 2))
    return engine.meta


def fit_surface(engine: Engine, mentions, cand_lists, golds, enabled: bool = True, progress: bool = False,
                keywords: bool = True) -> None:
    """:meth:`termnorm.engine.Engine.fit_surface`."""
    from termnorm.rank.surface import SurfaceDiffScorer

    engine.meta["surface_diff"] = bool(enabled)
    if not enabled:
        engine.diff_scorer = None
        return
    t0 = time.perf_counter()
    scorer = SurfaceDiffScorer(tagger=engine.tagger, keywords=keywords)
    scorer.annotate(mentions, cand_lists, scorer.fit_out_of_fold(mentions, cand_lists, golds, progress=progress))
    engine.diff_scorer = scorer if scorer.fitted else None
    engine.meta["surface_diff_seconds"] = round(time.perf_counter() - t0, 2)


def fit_term_classifier(engine: Engine, train: list[LabelledMention], enabled: bool = True) -> None:
    """:meth:`termnorm.engine.Engine.fit_term_classifier`."""
    from termnorm.rank.termclf import TermClassifier

    engine.meta["term_classifier"] = bool(enabled)
    if not enabled:
        engine.term_classifier = None
        return
    t0 = time.perf_counter()
    clf = TermClassifier(engine.vocabulary).fit(reading.read_labelled(engine, train))
    engine.term_classifier = clf if clf.fitted else None
    engine.meta["term_classifier_seconds"] = round(time.perf_counter() - t0, 2)


def kfold_candidates(engine: Engine, items: list[LabelledMention], fold_of, with_history: bool = True,
                     progress: bool = False, term_classifier: bool = True):
    """:meth:`termnorm.engine.Engine.kfold_candidates`."""
    from termnorm.rank.family import FamilyPrior

    order, cand_lists, hcounts = [], [], []
    family = getattr(engine, "family_features", False) and with_history  # per fold, on the other folds' mentions
    engine.family_prior, family_cache = None, {}
    shares = with_history if isinstance(with_history, tuple) else None
    with_history = bool(with_history)
    it = sorted(set(int(f) for f in fold_of))
    if progress:
        from tqdm import tqdm
        it = tqdm(it, desc="recall for ranker training (folds)")
    for f in it:
        inside = [i for i, g in enumerate(fold_of) if g == f]
        outside = [m for m, g in zip(items, fold_of) if g != f and m.terms and not isinstance(m, SyntheticMention)]
        if shares:  # this fold sees a random share of its K-fold history (a coding team's first weeks to years)
            keep = np.random.default_rng(f).random(len(outside)) < shares[f % len(shares)]
            outside = [m for m, k in zip(outside, keep) if k]
        hist = history_strategies(engine.vocabulary, outside, engine.history_extras) if with_history else []
        union = engine._union([*engine._vocab_strategies, *hist], split=engine.split)
        sieve = {normalize(m.text): m.terms for m in outside} if with_history else {}
        texts = [items[i].text for i in inside]
        cl = union.recall_batch(texts)
        if with_history:
            history_size_scores(cl, len(outside))
        if with_history and term_classifier:
            from termnorm.rank.termclf import TermClassifier

            TermClassifier(engine.vocabulary).fit(outside).annotate(texts, cl)
        for i, cands in zip(inside, cl):
            hit = sieve.get(normalize(items[i].text))
            if hit:
                engine._boost_sieve(cands, hit)
            order.append(i)
            cand_lists.append(cands)
            hcounts.append(len(hit) if hit else 0)
        engine._kar_scores(texts, cl)
        engine._prior_scores(texts, cl)
        engine.family_prior = FamilyPrior(engine.vocabulary, family_cache).fit(outside) if family else None
        engine._category_scores(cl)
        document.annotate(engine.vocabulary, texts, [getattr(items[i], "document", "") for i in inside], cl)
    return order, cand_lists, hcounts


def _novel_weights(split: tuple, novel_weight: float) -> list | None:
    """Row weights of :class:`LexicalRanker` for a split: ``novel_weight`` on the candidates of the mentions
    whose gold term the split's history never coded (None when the weight is 1 or the split predates it)."""
    if novel_weight == 1.0 or len(split) < 7:
        return None
    return [np.full(len(cl), novel_weight if fam == 0 else 1.0) for cl, fam in zip(split[1], split[6])]


def _fit_ranker(engine: Engine, feat, mentions, cand_lists, golds, n_parts, hcounts, rng, seed,
                rule_metric: str = "accuracy", ranker_kw: dict | None = None, weights: list | None = None) -> None:
    """Choose the output rule and calibrate the confidence on 20% of the mentions held out from a
    first fit (in-sample probabilities would make both optimistic), then fit on everything."""
    from termnorm.gbm_ranker import LexicalRanker, select_rule

    held = rng.random(len(mentions)) < 0.2
    sel = lambda xs, keep: [x for x, h in zip(xs, held) if h == keep]  # noqa: E731
    ranker_kw = ranker_kw or {}
    probe = LexicalRanker(feat, seed=seed, **ranker_kw).fit(
        *(sel(a, False) for a in (mentions, cand_lists, golds, n_parts, hcounts)),
        None if weights is None else sel(weights, False))
    hp = probe.score(sel(mentions, True), sel(cand_lists, True), sel(n_parts, True))
    hc = probe.count_probs(sel(mentions, True), hp, sel(n_parts, True), sel(hcounts, True),
                           sel(cand_lists, True))
    rule, rule_scores = select_rule(sel(cand_lists, True), hp, hc, sel(golds, True), metric=rule_metric)
    probe.rule = rule
    engine.lexranker = probe
    fit_confidence(engine, *(sel(a, True) for a in (mentions, cand_lists, golds, n_parts, hcounts)))
    engine.lexranker = LexicalRanker(feat, seed=seed, **ranker_kw).fit(mentions, cand_lists, golds, n_parts,
                                                                       hcounts, weights)
    engine.lexranker.rule = rule
    engine.meta.update(output_rule=list(rule), output_rule_metric=rule_metric, output_rule_heldout=rule_scores)


def fit_confidence(engine: Engine, mentions, cand_lists, golds, n_parts, hcounts) -> None:
    """Platt-style calibration of P(whole answer right) on held-out predictions of the engine's fitted
    ranker: sets ``engine.confidence_model`` (left as it was when every prediction is right, or every one
    wrong)."""
    from sklearn.linear_model import LogisticRegression

    preds = engine._rank_and_choose(mentions, cand_lists, n_parts, hcounts)
    X = np.array([p[3] for p in preds])
    y = np.array([set(p[1]) == set(g) for p, g in zip(preds, golds)], dtype=int)
    if len(set(y)) > 1:
        engine.confidence_model = LogisticRegression(max_iter=1000).fit(X, y)


def fit_threads() -> int:
    """OpenMP threads for the GBM fits: 1 by default (measured on 2 shared cores: fitting on 60
    demo mentions 71 s with default threads vs 3.2 s with one); ``TERMNORM_FIT_THREADS`` overrides."""
    from termnorm import settings

    return settings.get().fit_threads


def hash_mentions(ms: list[LabelledMention]) -> str:
    """SHA-256 over the mentions' texts and gold terms, in order (names a fit's training data)."""
    h = hashlib.sha256()
    for m in ms:
        h.update(m.text.encode())
        h.update(b"\t")
        h.update("##".join(m.terms).encode())
        h.update(b"\n")
    return h.hexdigest()
