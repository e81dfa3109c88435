"""The engine facade: recall -> rank -> fuse behind one object the CLI and the app call.

``Engine`` owns a vocabulary, the keyword tagger, the multi-strategy recall
union (lexical strategies + history of coded mentions, and the dense
bi-encoder when a trained model is given), a ranker (the lexical GBM ranker,
or the keyword-attentive cross-encoder) and the output rule that decides how
many terms a mention needs. Coded mentions and synonyms added at run time
take effect on the next query without retraining (approach E's sieve: an
exact normalized match of an already-coded mention returns its terms).
"""

from __future__ import annotations

import csv
import hashlib
import json
import re
import time
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

from termnorm.records import Candidate, KeywordSpan, LabelledMention, Suggestion
from termnorm.text.normalize import normalize
from termnorm.vocabulary import Vocabulary

ASSETS = Path(__file__).resolve().parent.parent / "assets" / "demo"
#: Rankers fitted on public data of each demo domain (``termnorm train lexical --export-ranker``):
#: procedures on Yidu-N7K train, diagnoses on CHIP-CDN train. Only model trees, no text.
PRETRAINED = {"procedures": ASSETS.parent / "models" / "procedures_ranker.joblib",
              "diagnoses": ASSETS.parent / "models" / "diagnoses_ranker.joblib"}
#: Abbreviations of common procedures and diagnoses written for the demo vocabularies (vocabulary search).
DEMO_ABBREVIATIONS = ASSETS / "abbreviations.json"

# Confidence given to an exact normalized match of an already-coded mention
# (the sieve's first stage). On Yidu-N7K, a val mention whose normalized text
# equals a train mention has the same gold set in the large majority of
# cases; the calibrated model below replaces this when a ranker is fitted.
SIEVE_CONFIDENCE = 0.97


#: Code shapes of each cold-start ranker's domain: ICD-9-CM-3 procedure codes (``06.4x00``, ``51.23``,
#: ``00.0200x001``) and ICD-10
#: diagnosis codes (``E11.901``, ``C56xx02``). A vocabulary is given a domain's ranker when most of its codes
#: have that shape (Chinese vocabularies only: the rankers learnt Chinese surface differences).
DOMAIN_CODES = {"procedures": re.compile(r"^\d{2}(\.\d[\dx]*)?$"),
                "diagnoses": re.compile(r"^[A-Z]\d{2}([.x]|$)")}


def cold_start_domain(vocab: Vocabulary, sample: int = 500) -> str | None:
    """The :data:`PRETRAINED` domain whose code shape most of the vocabulary's codes have (None: neither).

    Served before any retraining, the cold-start ranker lifts exact-set accuracy without a coded history
    from recall order 0.458 to 0.772 on the first 400 Yidu-N7K val mentions and from 0.148 to 0.295 on
    the first 400 CHIP-CDN dev mentions (measured while writing this; see the learning-curve benchmark).
    """
    if vocab.name.startswith("demo-") and vocab.name.removeprefix("demo-") in PRETRAINED:
        return vocab.name.removeprefix("demo-")
    if vocab.language != "zh":
        return None
    codes = [c for n in vocab.names[:: max(1, len(vocab.names) // sample)] for c in vocab.codes.get(n, [])[:1]]
    if not codes:
        return None
    share = {d: sum(bool(p.match(c)) for c in codes) / len(codes) for d, p in DOMAIN_CODES.items()}
    best = max(share, key=share.get)
    return best if share[best] >= 0.8 else None


def demo_vocabulary(which: str = "procedures") -> Vocabulary:
    v = Vocabulary(name=f"demo-{which}", source=str(ASSETS / f"{which}.csv"))
    with open(ASSETS / f"{which}.csv", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            syn = [s for s in (row.get("synonyms") or "").split("|") if s.strip()]
            v.add_term(row["name"], [row["code"]], syn)
    return v


def demo_abbreviations(vocabulary_name: str | None = None) -> dict[str, str]:
    """The demo abbreviation list (:data:`DEMO_ABBREVIATIONS`); {} when ``vocabulary_name`` is given and is not
    a demo vocabulary's (``demo-procedures``, ``demo-diagnoses``), so callers need not check."""
    if vocabulary_name is not None and vocabulary_name.removeprefix("demo-") not in PRETRAINED:
        return {}
    from termnorm.io import load_keywords

    return load_keywords(ASSETS)["abbreviations"]


def demo_mentions(which: str | None = None) -> list[LabelledMention]:
    out = []
    with open(ASSETS / "mentions.csv", encoding="utf-8") as f:
        for i, row in enumerate(csv.DictReader(f), start=2):
            if which and row.get("vocabulary") != which:
                continue
            out.append(LabelledMention(row["mention"], [t for t in row["terms"].split("##") if t], i))
    return out


#: History strategies that can be added to char TF-IDF and Jaccard (``Engine(history_extras=...)``,
#: ``--history-extras key,analogy``): ``"key"`` coded mentions equal up to side and punctuation
#: (:class:`termnorm.recall.history.CodedKeyRecaller`), ``"analogy"`` a coded neighbour's edit carried over
#: to its term (:class:`termnorm.recall.analogy.AnalogyRecaller`); each becomes a ranker feature. Off by
#: default: cross-validated over the 5,000 Yidu-N7K mentions both together gave 0.880 against 0.879
#: without (sign test p = 0.57; ``benchmarks/results/cv_extras.json``, README).
HISTORY_EXTRAS = ("key", "analogy")


class Engine:
    def __init__(self, vocabulary: Vocabulary, history: list[LabelledMention] | None = None,
                 keyword_dir=None, split: bool = True, model_version: str = "lexical", tagger=None,
                 recall_profile: str = "wide", dense=None, ranker=None, max_candidates: int | None = None,
                 history_extras=()):
        from termnorm.recall.history import add_history_terms
        from termnorm.text.keywords import KeywordTagger

        self.vocabulary = vocabulary
        self.model_version = model_version
        self.split = split
        # history strategies beyond the TF-IDF and Jaccard ones (names of HISTORY_EXTRAS)
        self.history_extras = check_history_extras(history_extras)
        self.keyword_dir = keyword_dir
        self.abbreviations = _abbreviations(keyword_dir, vocabulary.language)
        self.tagger = tagger or KeywordTagger.from_vocabulary(vocabulary, keyword_dir=keyword_dir)
        self.history: list[LabelledMention] = list(history or [])
        self.recall_profile = recall_profile
        # the candidate set a mention ends with: the union (a "deep" profile recalls ~100) ordered by the
        # lexical ranker and cut here, so the ranker's top picks, not the union's, fill the budget
        self.max_candidates = max_candidates
        # gold names of coded mentions that the vocabulary lacks are terms the
        # hospital uses: make them candidates (CHIP-CDN dev: 100 -> 22 unreachable mentions)
        self.added_terms = add_history_terms(vocabulary, self.history)
        self._sieve: dict[str, list[str]] = {}
        for m in self.history:
            self._sieve[normalize(m.text)] = list(m.terms)
        self._vocab_strategies = build_vocab_strategies(vocabulary, self.tagger, keyword_dir)
        # optional neural stages: the dense bi-encoder is one more recall strategy (score key "dense"),
        # the keyword-attentive cross-encoder scores every candidate (key "kar"); both feed the fusion
        self.dense, self.ranker = dense, ranker
        if dense is not None:
            from termnorm.dense.index import DenseRecaller

            # coded mentions are searched by the history strategies and the sieve; indexing them here too
            # would leak each training mention into its own K-fold candidates
            self._vocab_strategies.append(DenseRecaller(dense, use_history=False).fit(vocabulary))
        self._history_recallers = history_strategies(vocabulary, self.history, self.history_extras)
        self.union = self._union([*self._vocab_strategies, *self._history_recallers], split=split)
        self._search_union = self._union(self._vocab_strategies, split=False)
        self.lexranker = None
        self.confidence_model = None
        # learned mention/term difference scorer (termnorm.rank.surface), score key "diff"; fitted with the ranker
        self.diff_scorer = None
        # per-term text classifier over the coded mentions (termnorm.rank.termclf), score key "clf"
        self.term_classifier = None
        self.prior = None  # termnorm.rank.prior: the cold-start ranker's score as an input (use_prior)
        self.meta: dict = {}
        # abbreviations added at run time (the demo list, coders' ones): vocabulary search only -- the recall
        # union keeps the keyword folder's table, since its "_abbr" keys are features of a fitted ranker
        self.added_abbreviations: list[tuple[str, str]] = []
        self._search = None  # termnorm.search.VocabularySearch, built on the first search, never pickled

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_search"] = None  # its index is rebuilt from the vocabulary in well under a second
        return state

    # ---- construction ---------------------------------------------------
    @classmethod
    def from_demo(cls, which: str = "procedures") -> "Engine":
        """The demo vocabulary with the pretrained ranker of its domain (assets/models/), when present."""
        eng = cls(demo_vocabulary(which))
        eng.use_pretrained_ranker(PRETRAINED.get(which))
        eng.use_demo_abbreviations()
        return eng

    # ---- a ranker pretrained elsewhere ----------------------------------------------------
    def export_ranker(self, path) -> Path:
        """Write the fitted GBM ranker, count classifier, output rule and confidence model alone.

        Their features are vocabulary-independent (strategy scores and ranks, overlap, keyword
        match), so a ranker fitted on one data set of a domain serves another vocabulary of that
        domain before it has coded mentions of its own. No training text is stored.
        """
        import joblib

        if self.lexranker is None:
            raise ValueError("no fitted ranker to export (fit_lexical first)")
        r = self.lexranker
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        joblib.dump({"format": "termnorm-ranker/1", "pair_model": r.pair_model, "count_model": r.count_model,
                     "score_keys": r.featurizer.score_keys, "theta": r.theta, "rule": r.rule,
                     "bag": getattr(r, "bag", 1), "confidence_model": self.confidence_model,
                     "context": getattr(r.featurizer, "context", False),
                     "count_parts": getattr(r, "count_parts", False),
                     "diff_scorer": self.diff_scorer,
                     "trained_on": self.meta.get("trained_on", ""),
                     "model_version": self.model_version}, path, compress=3)
        return path

    def use_pretrained_ranker(self, path) -> bool:
        """Load a ranker written by :meth:`export_ranker`; False (and the untrained pipeline) if absent or
        unreadable (e.g. written by an incompatible scikit-learn)."""
        from termnorm.rank.prior import load_exported_ranker

        loaded = load_exported_ranker(path, self.tagger)
        if loaded is None:
            return False
        self.lexranker, self.confidence_model = loaded["ranker"], loaded["confidence_model"]
        self.diff_scorer = loaded["diff_scorer"]
        state = loaded["state"]
        self.model_version = f"pretrained:{state.get('model_version', Path(path).stem)}"
        self.meta.update(pretrained_ranker=str(path), trained_on=state.get("trained_on", ""))
        return True

    def use_prior(self, path) -> bool:
        """Give every candidate score ``prior``, the exported cold-start ranker's probability (termnorm.rank.prior),
        for a ranker fitted afterwards to learn on top of it; False if the file cannot be read."""
        from termnorm.rank.prior import PriorScorer

        try:
            self.prior = PriorScorer(path, self.tagger)
        except FileNotFoundError:
            return False
        self.meta["prior"] = self.prior.path
        return True

    def _union(self, strategies, split: bool):
        """A union over already-fitted strategies (the vocabulary ones are fitted once and shared)."""
        from termnorm.recall.union import K_PROFILES, UnionRecaller

        u = UnionRecaller(strategies, K_PROFILES[self.recall_profile], split=split, abbreviations=self.abbreviations)
        return u.fit(self.vocabulary, fit_strategies=False)

    @property
    def has_ranker(self) -> bool:
        return self.lexranker is not None

    # ---- recall -----------------------------------------------------------
    def recall_batch(self, mentions: list[str], union=None) -> list[list[Candidate]]:
        cands = (union or self.union).recall_batch(list(mentions))
        for m, cl in zip(mentions, cands):
            hit = self._sieve.get(normalize(m))
            if hit:
                self._boost_sieve(cl, hit)
        if self.term_classifier is not None:
            self.term_classifier.annotate(mentions, cands)
        if self.diff_scorer is not None:
            self.diff_scorer.annotate(mentions, cands)
        self._kar_scores(mentions, cands)
        self._prior_scores(mentions, cands)
        return cands

    def _prior_scores(self, mentions, cand_lists) -> None:
        """Score "prior" (termnorm.rank.prior) when the engine has one."""
        if getattr(self, "prior", None) is not None:  # getattr: engines pickled before priors existed
            self.prior.annotate(list(mentions), cand_lists, [self._n_parts(m) for m in mentions])

    def _kar_scores(self, mentions, cand_lists) -> None:
        """The keyword-attentive ranker's P(match) for every candidate, kept as score "kar"."""
        if self.ranker is None:
            return
        probs = self.ranker.score(list(mentions), [[c.term for c in cl] for cl in cand_lists])
        for cl, ps in zip(cand_lists, probs):
            for c, p in zip(cl, ps):
                c.scores["kar"] = float(p)

    def _boost_sieve(self, cands: list[Candidate], terms: list[str]) -> None:
        have = {c.term: c for c in cands}
        for t in terms:
            c = have.get(t)
            if c is None:
                tid = self.vocabulary.get_id(t)
                if tid is None:
                    continue
                c = Candidate(tid, t, 0.0, {}, self.vocabulary.codes_of(t))
                cands.append(c)
            c.scores["sieve"] = 1.0

    def _n_parts(self, mention: str) -> int:
        if not self.split:
            return 1
        from termnorm.text.split import split_mention

        return max(1, len(split_mention(mention)))

    # ---- lexical ranking ----------------------------------------------------
    def fit_lexical(self, train: list[LabelledMention], folds: int = 4, progress: bool = False,
                    seed: int = 0, with_history: bool = True, rule_metric: str = "accuracy",
                    keyword_features: bool = True, surface_diff: bool = True, bag: int = 1,
                    term_classifier: bool = True, ensemble: int | None = None, context_features: bool = True,
                    part_count: bool = True) -> dict:
        """Fit the GBM ranker + count classifier on K-fold recall candidates (see termnorm.lexrank).

        ``with_history=False`` fits a cold-start ranker that never sees history recall or sieve
        features: the one to ship for a vocabulary that has no coded mentions yet (the demo).
        ``rule_metric`` is what the output rule is chosen for on held-out training mentions:
        exact-set ``"accuracy"`` or pair ``"micro_f1"`` (the CHIP-CDN metric).
        ``keyword_features=False`` leaves out the keyword match features (an ablation).
        ``surface_diff=False`` fits no surface-difference scorer (termnorm.rank.surface; an ablation).
        ``term_classifier=False`` fits no per-term text classifier (termnorm.rank.termclf; an ablation);
        without history there is none either (it learns from coded mentions).
        ``bag`` > 1 fits that many rankers on different K-fold splits of the history (seeds ``seed``,
        ``seed`` + 1, ...) and averages their probabilities (termnorm.lexrank.LexicalRanker.bagged): a
        single ranker's accuracy depends on which coded mentions each training mention could find, the
        mean less so. The first member chooses the output rule and calibrates the confidence; the
        surface-difference scorer of the first split serves at inference. ``bag`` times the fit time.
        ``ensemble``: GBMs in the pair scorer, each on a random 70% of the feature columns, averaged
        (default :data:`termnorm.lexrank.ENSEMBLE`, 1: one GBM on every column).
        ``context_features=False`` leaves out the list-context features (termnorm.lexrank.CONTEXT_KEYS),
        ``part_count=False`` the count classifier's part-coverage features (termnorm.lexrank.part_features).
        """
        from termnorm.lexrank import RULE_METRICS

        if rule_metric not in RULE_METRICS:
            raise ValueError(f"rule metric must be one of {RULE_METRICS}, not {rule_metric!r}")
        if bag < 1:
            raise ValueError(f"bag must be at least 1, not {bag}")
        if ensemble is not None and ensemble < 1:
            raise ValueError(f"ensemble must be at least 1, not {ensemble}")
        train = [m for m in train if m.terms]
        splits = self.ranker_training_data(train, folds=folds, seed=seed, bag=bag, with_history=with_history,
                                           surface_diff=surface_diff, keyword_features=keyword_features,
                                           term_classifier=term_classifier, progress=progress)
        self.fit_ranker(splits, seed=seed, rule_metric=rule_metric, keyword_features=keyword_features,
                        ensemble=ensemble, context_features=context_features, part_count=part_count,
                        progress=progress)
        # the version names the data *and* the fit's options: rankers fitted on one set with different
        # options (the cold-start export, an ablation) must not share a name in the stored suggestions
        options = dict(folds=folds, seed=seed, with_history=with_history, rule_metric=rule_metric,
                       keyword_features=keyword_features, surface_diff=surface_diff, bag=bag,
                       term_classifier=term_classifier, ensemble=self.meta["ranker_ensemble"],
                       context_features=context_features, part_count=part_count, split=self.split)
        train_sha = _hash_mentions(train)
        digest = hashlib.sha256((train_sha + json.dumps(options, sort_keys=True)).encode())
        self.model_version = "lexical-gbm-" + digest.hexdigest()[:8]
        self.meta.update(train_size=len(train), train_sha256=train_sha, fit_options=options)
        return self.meta

    def ranker_training_data(self, train: list[LabelledMention], folds: int = 4, seed: int = 0, bag: int = 1,
                             with_history: bool = True, surface_diff: bool = True, keyword_features: bool = True,
                             term_classifier: bool = True, progress: bool = False) -> list[tuple]:
        """The first half of :meth:`fit_lexical`: the ranker's training candidates, one K-fold split of the
        history per ``bag`` member, each ``(mentions, candidate lists, golds, parts, sieve hits, rng)``.

        Fits what scores those candidates and serves at inference: the surface-difference scorer (its
        out-of-fold scores written into the candidates; the first split's scorer is kept) and the term
        classifier. :meth:`fit_ranker` then fits the GBM on the splits, as often as wanted (the
        cross-validation benchmark fits several ranker settings on one set of candidates).
        """
        train = [m for m in train if m.terms]
        splits, scorer, surface_s = [], None, 0.0
        for r in range(bag):
            rng = np.random.default_rng(seed + r)
            fold_of = rng.integers(0, folds, len(train))
            order, cand_lists, hcounts = self.kfold_candidates(train, fold_of, with_history, progress,
                                                               term_classifier=term_classifier)
            mentions = [train[i].text for i in order]
            golds = [train[i].terms for i in order]
            self.fit_surface(mentions, cand_lists, golds, enabled=surface_diff, progress=progress,
                             keywords=keyword_features)
            scorer = scorer if r else self.diff_scorer
            surface_s += self.meta.get("surface_diff_seconds", 0.0)
            # the rng draws the held-out mentions of the output rule (fit_ranker copies it per fit)
            splits.append((mentions, cand_lists, golds, [self._n_parts(m) for m in mentions], hcounts, rng))
        self.diff_scorer = scorer
        if surface_diff:
            self.meta["surface_diff_seconds"] = round(surface_s, 2)
        self.fit_term_classifier(train, enabled=term_classifier and with_history)
        return splits

    def fit_ranker(self, splits: list[tuple], seed: int = 0, rule_metric: str = "accuracy",
                   keyword_features: bool = True, ensemble: int | None = None, context_features: bool = True,
                   part_count: bool = True, progress: bool = False) -> dict:
        """The second half of :meth:`fit_lexical`: the GBM ranker, count classifier, output rule and
        confidence on splits of :meth:`ranker_training_data` (options as there)."""
        import copy

        from termnorm.lexrank import ENSEMBLE, LexicalRanker, PairFeaturizer

        ensemble = ENSEMBLE if ensemble is None else int(ensemble)
        if ensemble < 1:
            raise ValueError(f"ensemble must be at least 1, not {ensemble}")
        ranker_kw = dict(ensemble=ensemble, count_parts=part_count)
        keys = sorted({k for sp in splits for cl in sp[1] for c in cl for k in c.scores})
        feat = PairFeaturizer(keys, tagger=self.tagger, keywords=keyword_features, context=context_features)
        t0 = time.perf_counter()
        first = (*splits[0][:5], copy.deepcopy(splits[0][5]))  # refits on the same splits stay identical
        with threadpool_limits(limits=_fit_threads(), user_api="openmp"):
            self._fit_ranker(feat, *first, seed, rule_metric, ranker_kw)
            if len(splits) > 1:
                it = splits[1:]
                if progress:
                    from tqdm import tqdm
                    it = tqdm(it, desc="bagged rankers")
                members = [self.lexranker] + [LexicalRanker(feat, seed=seed + r, **ranker_kw).fit(*sp[:5])
                                              for r, sp in enumerate(it, start=1)]
                self.lexranker = LexicalRanker.bagged(members)
        self.meta.update(score_keys=keys, ranker_bag=len(splits), ranker_ensemble=ensemble,
                         context_features=bool(context_features), part_count=bool(part_count),
                         fit_seconds=round(time.perf_counter() - t0, 2))
        return self.meta

    def fit_surface(self, mentions, cand_lists, golds, enabled: bool = True, progress: bool = False,
                    keywords: bool = True) -> None:
        """Fit the surface-difference scorer on K-fold candidates and write its *out-of-fold* scores into
        them (key "diff"), so the ranker trains on scores like those it will see; ``enabled=False`` drops it,
        ``keywords=False`` fits it without keyword-level features."""
        from termnorm.rank.surface import SurfaceDiffScorer

        self.meta["surface_diff"] = bool(enabled)
        if not enabled:
            self.diff_scorer = None
            return
        t0 = time.perf_counter()
        scorer = SurfaceDiffScorer(tagger=self.tagger, keywords=keywords)
        scorer.annotate(mentions, cand_lists, scorer.fit_out_of_fold(mentions, cand_lists, golds, progress=progress))
        self.diff_scorer = scorer if scorer.fitted else None
        self.meta["surface_diff_seconds"] = round(time.perf_counter() - t0, 2)

    def fit_term_classifier(self, train: list[LabelledMention], enabled: bool = True) -> None:
        """Fit the per-term text classifier used at inference on every training mention (the K-fold
        candidates got theirs from the other folds); ``enabled=False`` drops it."""
        from termnorm.rank.termclf import TermClassifier

        self.meta["term_classifier"] = bool(enabled)
        if not enabled:
            self.term_classifier = None
            return
        t0 = time.perf_counter()
        clf = TermClassifier(self.vocabulary).fit(train)
        self.term_classifier = clf if clf.fitted else None
        self.meta["term_classifier_seconds"] = round(time.perf_counter() - t0, 2)

    def with_history(self, history: list[LabelledMention]) -> "Engine":
        """A copy that answers from other coded mentions (history recall and sieve rebuilt); the vocabulary,
        its strategies and every fitted model are shared."""
        import copy

        eng = copy.copy(self)
        eng.history = list(history)
        eng._sieve = {normalize(m.text): list(m.terms) for m in eng.history}
        eng._history_recallers = history_strategies(self.vocabulary, eng.history, self.history_extras)
        eng.union = eng._union([*self._vocab_strategies, *eng._history_recallers], split=self.split)
        eng.meta = dict(self.meta)
        eng.added_abbreviations = list(self.added_abbreviations)
        return eng

    def kfold_candidates(self, items: list[LabelledMention], fold_of, with_history: bool = True,
                         progress: bool = False, term_classifier: bool = True):
        """Recall candidates for training mentions with K-fold history: the history recall and sieve
        of fold f are built from the other folds, so a training mention never finds itself.

        With ``term_classifier`` (and history) each fold's candidates also get score "clf" from a
        per-term classifier fitted on the other folds (termnorm.rank.termclf).

        Returns ``(order, candidate lists, sieve hit counts)`` in fold order, ``order`` holding the
        indices into ``items``. Mentions without terms (e.g. only rejected candidates) are
        recalled but never serve as history.
        """
        order, cand_lists, hcounts = [], [], []
        it = sorted(set(int(f) for f in fold_of))
        if progress:
            from tqdm import tqdm
            it = tqdm(it, desc="recall for ranker training (folds)")
        for f in it:
            inside = [i for i, g in enumerate(fold_of) if g == f]
            outside = [m for m, g in zip(items, fold_of) if g != f and m.terms]
            hist = history_strategies(self.vocabulary, outside, self.history_extras) if with_history else []
            union = self._union([*self._vocab_strategies, *hist], split=self.split)
            sieve = {normalize(m.text): m.terms for m in outside} if with_history else {}
            texts = [items[i].text for i in inside]
            cl = union.recall_batch(texts)
            if with_history and term_classifier:
                from termnorm.rank.termclf import TermClassifier

                TermClassifier(self.vocabulary).fit(outside).annotate(texts, cl)
            for i, cands in zip(inside, cl):
                hit = sieve.get(normalize(items[i].text))
                if hit:
                    self._boost_sieve(cands, hit)
                order.append(i)
                cand_lists.append(cands)
                hcounts.append(len(hit) if hit else 0)
            self._kar_scores(texts, cl)
            self._prior_scores(texts, cl)
        return order, cand_lists, hcounts

    def _fit_ranker(self, feat, mentions, cand_lists, golds, n_parts, hcounts, rng, seed,
                    rule_metric: str = "accuracy", ranker_kw: dict | None = None) -> None:
        """Choose the output rule and calibrate the confidence on 20% of the mentions held out from a
        first fit (in-sample probabilities would make both optimistic), then fit on everything."""
        from termnorm.lexrank import LexicalRanker, select_rule

        held = rng.random(len(mentions)) < 0.2
        sel = lambda xs, keep: [x for x, h in zip(xs, held) if h == keep]  # noqa: E731
        ranker_kw = ranker_kw or {}
        probe = LexicalRanker(feat, seed=seed, **ranker_kw).fit(
            *(sel(a, False) for a in (mentions, cand_lists, golds, n_parts, hcounts)))
        hp = probe.score(sel(mentions, True), sel(cand_lists, True), sel(n_parts, True))
        hc = probe.count_probs(sel(mentions, True), hp, sel(n_parts, True), sel(hcounts, True),
                               sel(cand_lists, True))
        rule, rule_scores = select_rule(sel(cand_lists, True), hp, hc, sel(golds, True), metric=rule_metric)
        probe.rule = rule
        self.lexranker = probe
        self._fit_confidence(*(sel(a, True) for a in (mentions, cand_lists, golds, n_parts, hcounts)))
        self.lexranker = LexicalRanker(feat, seed=seed, **ranker_kw).fit(mentions, cand_lists, golds, n_parts,
                                                                         hcounts)
        self.lexranker.rule = rule
        self.meta.update(output_rule=list(rule), output_rule_metric=rule_metric, output_rule_heldout=rule_scores)

    def _fit_confidence(self, mentions, cand_lists, golds, n_parts, hcounts) -> None:
        """Platt-style calibration of P(whole answer right) on held-out predictions."""
        from sklearn.linear_model import LogisticRegression

        preds = self._rank_and_choose(mentions, cand_lists, n_parts, hcounts)
        X = np.array([p[3] for p in preds])
        y = np.array([set(p[1]) == set(g) for p, g in zip(preds, golds)], dtype=int)
        if len(set(y)) > 1:
            self.confidence_model = LogisticRegression(max_iter=1000).fit(X, y)

    def _rank_and_choose(self, mentions, cand_lists, n_parts, hcounts):
        """-> list of (sorted candidates, chosen terms, count, confidence features).

        The sorted candidates are copies carrying the ranker's probability (``scores["ranker"]``, ``score``);
        the given ones are left as they were. Training candidates are ranked here too (the held-out probe
        that calibrates the confidence) and fitted again afterwards (the final fit, refits of
        :meth:`fit_ranker` on the same splits), where a written ``ranker`` score would become a feature
        leaking the probe's predictions."""
        from dataclasses import replace

        from termnorm.lexrank import choose

        probs = self.lexranker.score(mentions, cand_lists, n_parts)
        cps = self.lexranker.count_probs(mentions, probs, n_parts, hcounts, cand_lists)
        out = []
        for m, cands, p, cp, hc in zip(mentions, cand_lists, probs, cps, hcounts):
            order = np.argsort(-p, kind="stable") if len(p) else np.zeros(0, dtype=int)
            if self.max_candidates:
                order = order[:self.max_candidates]
            ps = p[order] if len(p) else p
            ranked = [replace(cands[i], score=float(s), scores={**cands[i].scores, "ranker": float(s)})
                      for i, s in zip(order, ps)]
            chosen = choose(ranked, ps, cp, self.lexranker.theta, getattr(self.lexranker, "rule", ("count", 0.5)))
            x = len(chosen)
            last = ps[x - 1] if x and len(ps) >= x else 0.0
            nxt = ps[x] if len(ps) > x else 0.0
            feats = [float(last), float(last - nxt), float(cp.max()), float(hc > 0), float(ps[0]) if len(ps) else 0.0]
            out.append((ranked, chosen, x, feats, cp))
        return out

    # ---- the public API ---------------------------------------------------------
    def suggest_batch(self, mentions, k: int = 20, progress=None) -> list[Suggestion]:
        mentions = list(mentions)
        out: list[Suggestion] = []
        step = 64
        for s in range(0, len(mentions), step):
            chunk = mentions[s:s + step]
            cand_lists = self.recall_batch(chunk)
            out.extend(self._finish(chunk, cand_lists, k))
            if progress:
                progress(min(len(mentions), s + step), len(mentions))
        return out

    def _finish(self, mentions, cand_lists, k) -> list[Suggestion]:
        res = []
        if self.lexranker is not None:
            n_parts = [self._n_parts(m) for m in mentions]
            hcounts = [len(self._sieve.get(normalize(m), [])) for m in mentions]
            for m, (ranked, chosen, x, feats, cp) in zip(
                    mentions, self._rank_and_choose(mentions, cand_lists, n_parts, hcounts)):
                conf = (float(self.confidence_model.predict_proba([feats])[0, 1])
                        if self.confidence_model is not None else feats[0])
                hit = self._sieve.get(normalize(m))
                if hit:  # a coded mention's decision wins over the ranker (takes effect at once)
                    ranked.sort(key=lambda c: -c.scores.get("sieve", 0.0))
                    chosen, x, conf = list(hit), len(hit), max(conf, SIEVE_CONFIDENCE)
                res.append(Suggestion(m, ranked[:k], x, chosen, conf, self.tag(m), self.model_version,
                                      self._parts(m)))
            return res
        for m, cands in zip(mentions, cand_lists):
            hit = self._sieve.get(normalize(m))
            ranked = sorted(cands, key=lambda c: (-c.scores.get("sieve", 0.0), -c.score))
            if hit:
                chosen, conf = list(hit), SIEVE_CONFIDENCE
            else:
                chosen, conf = [c.term for c in ranked[:1]], _uncalibrated_confidence(ranked)
            res.append(Suggestion(m, ranked[:k], len(chosen), chosen, min(1.0, conf), self.tag(m),
                                  self.model_version, self._parts(m)))
        return res

    def _parts(self, mention: str) -> list[str]:
        if not self.split:
            return []
        from termnorm.text.split import split_mention

        parts = split_mention(mention)
        return parts if len(parts) > 1 else []

    def suggest(self, mention: str, k: int = 20) -> Suggestion:
        return self.suggest_batch([mention], k)[0]

    def tag(self, text: str) -> list[KeywordSpan]:
        return self.tagger.tag(text)

    def search_vocabulary(self, query: str, limit: int = 20) -> list[Candidate]:
        """Type-ahead search: codes, code prefixes, names, synonyms, abbreviations, then char TF-IDF /
        Jaccard (:class:`termnorm.search.VocabularySearch`; results are its ``SearchHit``)."""
        return self.searcher.search(query, limit)

    @property
    def searcher(self):
        """The vocabulary search, built on first use over the vocabulary, ``_search_union`` and the keyword
        folder's abbreviations plus :attr:`added_abbreviations`."""
        if getattr(self, "_search", None) is None:
            from termnorm.search import VocabularySearch

            pairs = [*(self.abbreviations or {}).items(), *getattr(self, "added_abbreviations", [])]
            self._search = VocabularySearch(self.vocabulary, self._search_union, abbreviations=pairs)
        return self._search

    def add_abbreviation(self, abbreviation: str, expansion: str) -> bool:
        """Vocabulary search finds ``expansion`` when ``abbreviation`` is typed, at once. True if new;
        ValueError if either is empty."""
        abbreviation, expansion = (abbreviation or "").strip(), (expansion or "").strip()
        if not self.searcher.add_abbreviation(abbreviation, expansion):
            return False
        self.added_abbreviations.append((abbreviation, expansion))
        return True

    def use_demo_abbreviations(self) -> int:
        """Give a demo vocabulary's engine the demo abbreviation list (:data:`DEMO_ABBREVIATIONS`); any other
        engine is left as it is. Returns how many were new."""
        return self.add_abbreviations(demo_abbreviations(self.vocabulary.name))

    def add_abbreviations(self, table) -> int:
        """:meth:`add_abbreviation` for each ``{abbreviation: expansion}`` (or pair); returns how many were new."""
        from termnorm.search import abbreviation_pairs

        return sum(self.add_abbreviation(a, e) for a, e in abbreviation_pairs(table))

    def add_coded_mention(self, mention: str, terms: list[str]) -> None:
        """A coder's decision: the same mention now returns these terms, similar ones get them as candidates."""
        terms = [t for t in terms if t in self.vocabulary]
        if not terms:
            return
        self._sieve[normalize(mention)] = list(terms)
        self.history.append(LabelledMention(mention, list(terms)))
        for r in self._history_recallers:
            r.add_coded_mention(mention, list(terms))

    def add_synonym(self, term: str, synonym: str) -> None:
        if self.vocabulary.add_synonym(term, synonym):
            for s in self._vocab_strategies:
                s.add_coded_mention(synonym, [term])
            if getattr(self, "_search", None) is not None:
                self._search.add_synonym(term, synonym)
        self._sieve.setdefault(normalize(synonym), [term])

    # ---- persistence ------------------------------------------------------------
    def save(self, folder) -> Path:
        import joblib

        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        joblib.dump({"vocabulary": self.vocabulary, "history": self.history, "lexranker": self.lexranker,
                     "confidence_model": self.confidence_model, "split": self.split,
                     "history_extras": self.history_extras,
                     "keyword_dir": str(self.keyword_dir) if self.keyword_dir else None,
                     "recall_profile": self.recall_profile, "max_candidates": self.max_candidates,
                     "diff_scorer": self.diff_scorer, "term_classifier": self.term_classifier,
                     "prior": getattr(self, "prior", None),
                     "added_abbreviations": list(self.added_abbreviations)},
                    folder / "pipeline.joblib", compress=3)
        config = {"format": "termnorm-pipeline/1", "model_version": self.model_version,
                  "created": time.strftime("%Y-%m-%dT%H:%M:%S"), "vocabulary": self.vocabulary.name,
                  "vocabulary_source": self.vocabulary.source, "n_terms": len(self.vocabulary),
                  "stages": ["lexical-recall", "history", "lexical-gbm-ranker", "count"], **self.meta,
                  "history_extras": list(self.history_extras)}
        if self.diff_scorer is not None:
            config["stages"].insert(-2, "surface-diff")
        if self.term_classifier is not None:
            config["stages"].insert(-2, "term-classifier")
        if self.dense is not None:
            self.dense.save(folder / "dense")
            config["stages"].insert(1, "dense-recall")
        if self.ranker is not None:
            self.ranker.save(folder / "ranker")
            config["stages"].insert(-1, "keyword-attentive-ranker")
        (folder / "config.json").write_text(json.dumps(config, ensure_ascii=False, indent=1), encoding="utf-8")
        return folder

    @classmethod
    def load(cls, folder, progress: bool = False) -> "Engine":
        import joblib

        folder = Path(folder)
        if not (folder / "config.json").exists():
            raise FileNotFoundError(f"{folder}: not a termnorm pipeline folder (no config.json)")
        state = joblib.load(folder / "pipeline.joblib")
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        dense = ranker = None
        if (folder / "dense").is_dir():
            from termnorm.dense.crossfit import load_dense

            dense = load_dense(folder / "dense")
        if (folder / "ranker").is_dir():
            from termnorm.rank.crossfit import load_ranker

            ranker = load_ranker(folder / "ranker")
        eng = cls(state["vocabulary"], history=state["history"], keyword_dir=state.get("keyword_dir"),
                  split=state["split"], model_version=config["model_version"],
                  recall_profile=state.get("recall_profile", "wide"), dense=dense, ranker=ranker,
                  max_candidates=state.get("max_candidates"),
                  history_extras=state.get("history_extras", ()))
        eng.lexranker = state["lexranker"]
        if eng.lexranker is not None:
            eng.lexranker.featurizer.tagger = eng.tagger
        eng.confidence_model = state["confidence_model"]
        eng.diff_scorer = state.get("diff_scorer")
        if eng.diff_scorer is not None:
            eng.diff_scorer.tagger = eng.tagger
        eng.term_classifier = state.get("term_classifier")
        eng.prior = state.get("prior")
        if eng.prior is not None:
            eng.prior.set_tagger(eng.tagger)
        eng.add_abbreviations(state.get("added_abbreviations", ()))
        eng.meta = config
        return eng


def _uncalibrated_confidence(ranked: list[Candidate]) -> float:
    """Without a fitted ranker there is no calibrated confidence: report at most 0.5, less the closer
    the runner-up, so such answers are never auto-accepted and sort first in uncertainty order."""
    if not ranked:
        return 0.0
    top = max(ranked[0].score, 1e-9)
    second = ranked[1].score if len(ranked) > 1 else 0.0
    return round(0.5 * top / (top + max(second, 0.0)), 4)


def _fit_threads() -> int:
    """OpenMP threads for the GBM fits: 1 by default (measured on 2 shared cores: fitting on 60
    demo mentions 71 s with default threads vs 3.2 s with one); ``TERMNORM_FIT_THREADS`` overrides."""
    from termnorm import settings

    return settings.get().fit_threads


def build_vocab_strategies(vocabulary: Vocabulary, tagger=None, keyword_dir=None) -> list:
    """The lexical strategies over the vocabulary, fitted once (history recall is separate).

    The same set ``benchmarks/recall.py`` measures: exact (also with approach
    words stripped), names contained in the mention, char TF-IDF, char
    Jaccard, word BM25 over jieba tokens.
    """
    from termnorm.recall.bm25 import BM25Recaller
    from termnorm.recall.exact import ContainedNameRecaller, ExactRecaller
    from termnorm.recall.jaccard import JaccardRecaller
    from termnorm.recall.tfidf import CharTfidfRecaller

    words = list(tagger.words()) if tagger is not None and hasattr(tagger, "words") else []
    approach = list(tagger.words("approach")) if tagger is not None and hasattr(tagger, "words") else []
    strategies = [ExactRecaller(strip_words=approach), ContainedNameRecaller(), CharTfidfRecaller(),
                  JaccardRecaller(), BM25Recaller(user_words=words)]
    return [s.fit(vocabulary) for s in strategies]


def check_history_extras(extras) -> tuple[str, ...]:
    """``extras`` without repeats, in order; ValueError naming any that :data:`HISTORY_EXTRAS` lacks."""
    extras = tuple(dict.fromkeys(extras))
    unknown = [e for e in extras if e not in HISTORY_EXTRAS]
    if unknown:
        raise ValueError(f"unknown history strategies {unknown}; known: {', '.join(HISTORY_EXTRAS)}")
    return extras


def history_strategies(vocabulary: Vocabulary, history: list[LabelledMention],
                       extras=()) -> list:
    """History recall over coded mentions: char TF-IDF and char Jaccard (approach B's third strategy), and
    the ``extras`` named in :data:`HISTORY_EXTRAS`."""
    from termnorm.recall.analogy import AnalogyRecaller
    from termnorm.recall.history import CodedKeyRecaller, HistoryRecaller

    kinds = {"key": CodedKeyRecaller, "analogy": AnalogyRecaller}
    out = [HistoryRecaller(), HistoryRecaller(similarity="jaccard")] + [kinds[e]() for e in extras]
    return [r.fit(vocabulary, history) for r in out]


def _abbreviations(keyword_dir, language: str) -> dict | None:
    """Abbreviation expansions (copd -> 慢性阻塞性肺疾病) from a keyword folder, if it has them."""
    if not keyword_dir or language != "zh":
        return None
    p = Path(keyword_dir) / "abbreviations.json"
    if not p.exists():
        return None
    from termnorm.io import load_keywords

    return load_keywords(keyword_dir).get("abbreviations") or None


def _hash_mentions(ms: list[LabelledMention]) -> str:
    h = hashlib.sha256()
    for m in ms:
        h.update(m.text.encode())
        h.update(b"\t")
        h.update("##".join(m.terms).encode())
        h.update(b"\n")
    return h.hexdigest()


def evaluate_engine(engine: Engine, mentions: list[LabelledMention], stage: str = "recall", k: int = 20,
                    progress: bool = False) -> dict:
    """Run recall (or the full pipeline) on labelled mentions and compute every metric."""
    from termnorm.evaluate import accuracy_by_familiarity, error_table, evaluate_predictions

    texts = [m.text for m in mentions]
    gold = [m.terms for m in mentions]
    bar = None
    if progress:
        from tqdm import tqdm
        bar = tqdm(total=len(texts), desc=f"{stage} on {len(texts)} mentions")
    t0 = time.perf_counter()
    if stage == "recall":
        cand_lists = []
        for s in range(0, len(texts), 256):
            cand_lists.extend(engine.recall_batch(texts[s:s + 256]))
            if bar:
                bar.update(len(texts[s:s + 256]))
        for cl in cand_lists:
            cl.sort(key=lambda c: -c.score)
        ranked = [[c.term for c in cl] for cl in cand_lists]
        predicted = [r[:1] for r in ranked]
        counts = None
    else:
        def cb(done, total):
            if bar:
                bar.n = done
                bar.refresh()
        sugs = engine.suggest_batch(texts, k=10 ** 6, progress=cb)
        ranked = [[c.term for c in s.candidates] for s in sugs]
        predicted = [s.chosen for s in sugs]
        counts = [s.predicted_count for s in sugs]
    secs = time.perf_counter() - t0
    if bar:
        bar.close()
    rep = evaluate_predictions(gold, predicted, ranked, predicted_counts=counts)
    rep["by_familiarity"] = accuracy_by_familiarity((m.terms for m in engine.history), gold, predicted)
    rep["errors"] = error_table(texts, gold, predicted, as_frame=False)
    rep["seconds"] = round(secs, 3)
    rep["mentions_per_second"] = round(len(texts) / secs, 1) if secs > 0 else None
    return rep
