"""The engine facade: recall -> rank -> fuse behind one object the CLI and the app call.

``Engine`` owns a vocabulary, the keyword tagger, the multi-strategy recall union (lexical strategies + history
of coded mentions, and the dense bi-encoder when a trained model is given), a ranker (the lexical GBM ranker, or
the keyword-attentive cross-encoder) and the output rule that decides how many terms a mention needs. Coded
mentions and synonyms added at run time take effect on the next query without retraining (approach E's sieve:
an exact normalized match of an already-coded mention returns its terms).

This module builds the engine, serves mentions and learns coded ones; fitting its ranker is :mod:`termnorm.fitting`,
saving and loading :mod:`termnorm.persist`, the demo assets :mod:`termnorm.demo` (all importable from here).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np

from termnorm import fitting, index_cache, persist, reading
from termnorm.rank import hierarchy
from termnorm.demo import (
    ASSETS,
    DEMO_ABBREVIATIONS,
    DOMAIN_CODES,
    PRETRAINED,
    cold_start_domain,
    demo_abbreviations,
    demo_mentions,
    demo_vocabulary,
)
from termnorm.evaluate import evaluate_engine
from termnorm.fitting import GBMOptions, fit_confidence, hash_mentions
from termnorm.recall.strategies import (
    HISTORY_EXTRAS,
    build_vocab_strategies,
    check_history_extras,
    history_strategies,
    keyword_abbreviations,
)
from termnorm.records import Candidate, KeywordSpan, LabelledMention, Suggestion
from termnorm.text.normalize import normalize
from termnorm.vocabulary import Vocabulary

__all__ = ["ASSETS", "DEMO_ABBREVIATIONS", "DOMAIN_CODES", "HISTORY_EXTRAS", "PRETRAINED", "SIEVE_CONFIDENCE",
           "Engine", "GBMOptions", "build_vocab_strategies", "check_history_extras", "cold_start_domain",
           "demo_abbreviations", "demo_mentions", "demo_vocabulary", "evaluate_engine", "fit_confidence",
           "hash_mentions", "history_strategies"]

# Confidence given to an exact normalized match of an already-coded mention
# (the sieve's first stage). On Yidu-N7K, a val mention whose normalized text
# equals a train mention has the same gold set in the large majority of
# cases; the calibrated model below replaces this when a ranker is fitted.
SIEVE_CONFIDENCE = 0.97



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
        self.abbreviations = keyword_abbreviations(keyword_dir, vocabulary.language)
        self.history: list[LabelledMention] = reading.read_labelled(self, history or [])
        self.recall_profile = recall_profile
        # the candidate set a mention ends with: the union (a "deep" profile recalls ~100) ordered by the
        # lexical ranker and cut here, so the ranker's top picks, not the union's, fill the budget
        self.max_candidates = max_candidates
        # gold names of coded mentions that the vocabulary lacks are terms the
        # hospital uses: make them candidates (CHIP-CDN dev: 100 -> 22 unreachable mentions)
        self.added_terms = add_history_terms(vocabulary, self.history)
        self._sieve, self._sieve_read = reading.sieve_of(self.history)

        def build():  # the tagger mines the vocabulary as given, before coded history added terms to it
            added = set(self.added_terms)
            tg = tagger or KeywordTagger.from_vocabulary([n for n in vocabulary.names if n not in added],
                                                         keyword_dir=keyword_dir)
            return tg, build_vocab_strategies(vocabulary, tg, keyword_dir)

        self.tagger, self._vocab_strategies = (build() if tagger is not None else index_cache.tagger_and_strategies(
            vocabulary, keyword_dir, build, extra=self.added_terms))
        # optional neural stages: the dense bi-encoder is one more recall strategy (score key "dense"),
        # the keyword-attentive cross-encoder scores every candidate (key "kar"); both feed the fusion
        self.dense, self.ranker = dense, ranker
        if dense is not None:
            from termnorm.dense.index import DenseRecaller, Recaller

            # coded mentions are searched by the history strategies and the sieve; indexing them here too
            # would leak each training mention into its own K-fold candidates. A Recaller (a DenseTable) is one.
            self._vocab_strategies.append(dense.fit(vocabulary) if isinstance(dense, Recaller)
                                          else DenseRecaller(dense, use_history=False).fit(vocabulary))
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
        self.name_scorer = None  # termnorm.rank.name: a history-free pair scorer, score "name" (fitted with the ranker)
        self.meta: dict = {}
        # abbreviations added at run time (the demo list, coders' ones): vocabulary search only -- the recall
        # union keeps the keyword folder's table, since its "_abbr" keys are features of a fitted ranker
        self.added_abbreviations: list[tuple[str, str]] = []
        self._search = None  # termnorm.search.VocabularySearch, built on the first search, never pickled

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_search"] = None  # its index is rebuilt from the vocabulary in well under a second
        state.pop("_evidence_counts", None)  # termnorm.explain: recounted from the history on first use
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
        """Write the fitted GBM ranker, count classifier, output rule and confidence model alone
        (:func:`termnorm.persist.export_ranker`).

        Their features are vocabulary-independent (strategy scores and ranks, overlap, keyword
        match), so a ranker fitted on one data set of a domain serves another vocabulary of that
        domain before it has coded mentions of its own. No training text is stored.
        """
        return persist.export_ranker(self, path)

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
    def recall_batch(self, mentions: list[str], union=None, originals=None) -> list[list[Candidate]]:
        """Candidates of ``mentions`` (as the engine reads them); the sieve looks up ``originals`` (as typed)."""
        cands = (union or self.union).recall_batch(list(mentions))
        for m, cl in zip(originals or mentions, cands):
            hit = self._sieve.get(normalize(m))
            if hit:
                self._boost_sieve(cl, hit)
        fitting.history_size_scores(cands, len(self.history))
        if self.term_classifier is not None:
            self.term_classifier.annotate(mentions, cands)
        if self.diff_scorer is not None:
            self.diff_scorer.annotate(mentions, cands)
        self._kar_scores(mentions, cands)
        self._prior_scores(mentions, cands)
        self._category_scores(cands)
        if getattr(self, "name_scorer", None) is not None:  # getattr: engines pickled before it existed
            self.name_scorer.annotate(mentions, cands, [self._n_parts(m) for m in mentions])
        return cands

    def _prior_scores(self, mentions, cand_lists) -> None:
        """Score "prior" (termnorm.rank.prior) when the engine has one."""
        if getattr(self, "prior", None) is not None:  # getattr: engines pickled before priors existed
            self.prior.annotate(list(mentions), cand_lists, [self._n_parts(m) for m in mentions])

    def _category_scores(self, cand_lists) -> None:
        """Scores "category1/2" (termnorm.rank.hierarchy) when switched on (``category_features``; off: measured) and
        "family_*" (termnorm.rank.family) when a family prior is fitted (``family_features``; off: measured)."""
        if getattr(self, "category_features", False):
            hierarchy.annotate(self.vocabulary, cand_lists, self.__dict__.setdefault("_categories", {}))
        if getattr(self, "family_prior", None) is not None:  # getattr: engines pickled before it existed
            self.family_prior.annotate(cand_lists)

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
                    seed: int = 0, with_history: bool | tuple = True, *, surface_diff: bool = True, bag: int = 1,
                    term_classifier: bool = True, gbm: GBMOptions | None = None, **gbm_options) -> dict:
        """Fit the GBM ranker + count classifier on K-fold recall candidates (see termnorm.gbm_ranker,
        termnorm.fitting).

        ``with_history=False``: no history recall or sieve features; shares (termnorm.fitting.HISTORY_MIX, with
        ``folds=len(shares)``, ``term_classifier=False``): part f sees shares[f] of its K-fold history (shipped).
        ``surface_diff=False`` fits no surface-difference scorer (termnorm.rank.surface; an ablation).
        ``term_classifier=False`` fits no per-term text classifier (termnorm.rank.termclf; an ablation);
        without history there is none either (it learns from coded mentions).
        ``bag`` > 1 fits that many rankers on different K-fold splits of the history (seeds ``seed``,
        ``seed`` + 1, ...) and averages their probabilities (termnorm.gbm_ranker.LexicalRanker.bagged): a
        single ranker's accuracy depends on which coded mentions each training mention could find, the
        mean less so. The first member chooses the output rule and calibrates the confidence; the
        surface-difference scorer of the first split serves at inference. ``bag`` times the fit time.

        The GBM ranker's own options (:class:`termnorm.fitting.GBMOptions`), as ``gbm`` or by name
        (``gbm_options`` override ``gbm``'s):
        ``rule_metric`` is what the output rule is chosen for on held-out training mentions:
        exact-set ``"accuracy"`` or pair ``"micro_f1"`` (the CHIP-CDN metric).
        ``keyword_features=False`` leaves out the keyword match features (an ablation).
        ``ensemble``: GBMs in the pair scorer, each on a random 70% of the feature columns, averaged
        (default :data:`termnorm.gbm_ranker.ENSEMBLE`, 1: one GBM on every column).
        ``context_features=False`` leaves out the list-context features (termnorm.gbm_ranker.CONTEXT_KEYS),
        ``part_count=False`` the count classifier's part-coverage features (termnorm.gbm_ranker.part_features);
        ``part_context=True`` adds the per-part context features (termnorm.rank.parts; off by default).
        """
        return fitting.fit_lexical(self, train, folds, progress, seed, with_history, surface_diff=surface_diff,
                                   bag=bag, term_classifier=term_classifier,
                                   gbm=replace(gbm or GBMOptions(), **gbm_options))

    def ranker_training_data(self, train: list[LabelledMention], folds: int = 4, seed: int = 0, bag: int = 1,
                             with_history: bool = True, surface_diff: bool = True, keyword_features: bool = True,
                             term_classifier: bool = True, progress: bool = False,
                             synthetic: float = 0.0, held_terms: float = 0.0) -> list[tuple]:
        """The first half of :meth:`fit_lexical`: the ranker's training candidates, one K-fold split of the
        history per ``bag`` member, each ``(mentions, candidate lists, golds, parts, sieve hits, rng, familiarity)``.

        Fits what scores those candidates and serves at inference: the surface-difference scorer (its
        out-of-fold scores written into the candidates; the first split's scorer is kept) and the term
        classifier. :meth:`fit_ranker` then fits the GBM on the splits, as often as wanted (the
        cross-validation benchmark fits several ranker settings on one set of candidates). ``synthetic`` /
        ``held_terms``: termnorm.rank.synthetic's share of made-up mentions / fitting._hold_terms_out's share."""
        return fitting.ranker_training_data(self, train, folds, seed, bag, with_history, surface_diff,
                                            keyword_features, term_classifier, progress, synthetic, held_terms)

    def fit_ranker(self, splits: list[tuple], seed: int = 0, progress: bool = False, **options) -> dict:
        """The second half of :meth:`fit_lexical`: the GBM ranker, count classifier, output rule and
        confidence on splits of :meth:`ranker_training_data` (``options`` by name: those of GBMOptions)."""
        return fitting.fit_ranker(self, splits, seed, progress=progress, **options)

    def fit_surface(self, mentions, cand_lists, golds, enabled: bool = True, progress: bool = False,
                    keywords: bool = True) -> None:
        """Fit the surface-difference scorer on K-fold candidates and write its *out-of-fold* scores into
        them (key "diff"), so the ranker trains on scores like those it will see; ``enabled=False`` drops it,
        ``keywords=False`` fits it without keyword-level features."""
        fitting.fit_surface(self, mentions, cand_lists, golds, enabled, progress, keywords)

    def fit_term_classifier(self, train: list[LabelledMention], enabled: bool = True) -> None:
        """Fit the per-term text classifier used at inference on every training mention (the K-fold
        candidates got theirs from the other folds); ``enabled=False`` drops it."""
        fitting.fit_term_classifier(self, train, enabled)

    def with_history(self, history: list[LabelledMention]) -> "Engine":
        """A copy that answers from other coded mentions (history recall and sieve rebuilt); the vocabulary,
        its strategies and every fitted model are shared."""
        import copy

        eng = copy.copy(self)
        eng.history = reading.read_labelled(self, history)
        eng._sieve, eng._sieve_read = reading.sieve_of(eng.history)
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
        return fitting.kfold_candidates(self, items, fold_of, with_history, progress, term_classifier)

    # ---- serving ---------------------------------------------------------------
    def _rank_and_choose(self, mentions, cand_lists, n_parts, hcounts):
        """-> list of (sorted candidates, chosen terms, count, confidence features).

        The sorted candidates are copies carrying the ranker's probability (``scores["ranker"]``, ``score``);
        the given ones are left as they were. Training candidates are ranked here too (the held-out probe
        that calibrates the confidence) and fitted again afterwards (the final fit, refits of
        :meth:`fit_ranker` on the same splits), where a written ``ranker`` score would become a feature
        leaking the probe's predictions."""
        from termnorm.gbm_ranker import choose

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
    def suggest_batch(self, mentions, k: int = 20, progress=None, documents=None) -> list[Suggestion]:
        """Suggestions for ``mentions``; ``documents`` (one per mention, "" for none) are the texts they were
        found in, whose abbreviations are read (:func:`termnorm.reading.suggest_batch`)."""
        return reading.suggest_batch(self, list(mentions), k, progress, documents)

    def same_keyword(self, mention_keyword: str, term_keyword: str) -> bool:
        """Whether coders treat the two keywords as the same (:func:`termnorm.reading.same_keyword`)."""
        return reading.same_keyword(self, mention_keyword, term_keyword)

    def spelled_out(self, mention: str) -> str:
        """The mention as the engine reads it (:func:`termnorm.reading.spelled_out`)."""
        return reading.spelled_out(self, mention)

    def _finish(self, mentions, cand_lists, k, originals=None) -> list[Suggestion]:
        res = []
        originals = list(originals or mentions)
        if self.lexranker is not None:
            n_parts = [self._n_parts(m) for m in mentions]
            hcounts = [len(self._sieve.get(normalize(m), [])) for m in originals]
            for m, (ranked, chosen, x, feats, cp), read in zip(
                    originals, self._rank_and_choose(mentions, cand_lists, n_parts, hcounts), mentions):
                conf = (float(self.confidence_model.predict_proba([feats])[0, 1])
                        if self.confidence_model is not None else feats[0])
                hit = self._sieve.get(normalize(m))
                if hit:  # a coded mention's decision wins over the ranker (takes effect at once)
                    ranked.sort(key=lambda c: -c.scores.get("sieve", 0.0))
                    chosen, x, conf = list(hit), len(hit), max(conf, SIEVE_CONFIDENCE)
                res.append(Suggestion(m, ranked[:k], x, chosen, conf, self.tag(m), self.model_version,
                                      self._parts(m), read if read != m else ""))
            return res
        for m, cands, read in zip(originals, cand_lists, mentions):
            hit = self._sieve.get(normalize(m))
            ranked = sorted(cands, key=lambda c: (-c.scores.get("sieve", 0.0), -c.score))
            if hit:
                chosen, conf = list(hit), SIEVE_CONFIDENCE
            else:
                chosen, conf = [c.term for c in ranked[:1]], _uncalibrated_confidence(ranked)
            res.append(Suggestion(m, ranked[:k], len(chosen), chosen, min(1.0, conf), self.tag(m),
                                  self.model_version, self._parts(m), read if read != m else ""))
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
        """The vocabulary search over ``_search_union``, the keyword folder's and the added abbreviations."""
        if getattr(self, "_search", None) is None:
            from termnorm.search import VocabularySearch

            pairs = [*(self.abbreviations or {}).items(), *getattr(self, "added_abbreviations", [])]
            self._search = VocabularySearch(self.vocabulary, self._search_union, abbreviations=pairs)
        return self._search

    def warm_search(self) -> None:
        """Build the type-ahead index now (400,000 names: ~5 s), not on a coder's first keystroke."""
        self.searcher._ensure_index()

    def add_abbreviation(self, abbreviation: str, expansion: str) -> bool:
        """The search finds ``expansion`` when ``abbreviation`` is typed, at once; True if new (ValueError if empty)."""
        abbreviation, expansion = (abbreviation or "").strip(), (expansion or "").strip()
        if not self.searcher.add_abbreviation(abbreviation, expansion):
            return False
        self.added_abbreviations.append((abbreviation, expansion))
        return True

    def use_demo_abbreviations(self) -> int:
        """The built-in Chinese clinical abbreviations for a Chinese vocabulary (termnorm.demo.demo_abbreviations):
        a demo's engine also reads mentions with them, another's search alone (not measured on its mentions)."""
        demo = self.vocabulary.name.removeprefix("demo-") in PRETRAINED
        return self.add_abbreviations(demo_abbreviations(self.vocabulary.names), search_only=not demo)

    def add_abbreviations(self, table, search_only: bool = False) -> int:
        """:meth:`add_abbreviation` per ``{abbreviation: expansion}`` or pair (``search_only``: the search's alone)."""
        from termnorm.search import abbreviation_pairs

        add = self.searcher.add_abbreviation if search_only else self.add_abbreviation
        return sum(add(a, e) for a, e in abbreviation_pairs(table))

    def add_coded_mention(self, mention: str, terms: list[str], written: str = "") -> None:
        """A coder's decision: the same mention now returns these terms, similar ones get them as candidates.
        ``written``: the mention as written when ``mention`` is its reading in a note; a reading does not
        replace what a mention coded as written answers (termnorm.reading.sieve_of)."""
        terms = [t for t in terms if t in self.vocabulary]
        if not terms:
            return
        reading.into_sieve(self, normalize(mention), terms, written)
        self.history.append(LabelledMention(mention, list(terms), written=written))
        for r in self._history_recallers:
            r.add_coded_mention(mention, list(terms))

    def add_synonym(self, term: str, synonym: str) -> None:
        if self.vocabulary.add_synonym(term, synonym):
            for s in self._vocab_strategies:
                s.add_coded_mention(synonym, [term])
            if getattr(self, "_search", None) is not None:
                self._search.add_synonym(term, synonym)
            self.__dict__.pop("_surface_set", None)  # termnorm.reading.surfaces: rebuilt with the new synonym
        self._sieve.setdefault(normalize(synonym), [term])

    # ---- persistence ------------------------------------------------------------
    def save(self, folder) -> Path:
        """Write the pipeline folder (:func:`termnorm.persist.save`); returns it."""
        return persist.save(self, folder)

    @classmethod
    def load(cls, folder, progress: bool = False) -> "Engine":
        """An engine read from a pipeline folder written by :meth:`save` (:func:`termnorm.persist.load`)."""
        return persist.load(cls, folder)


def _uncalibrated_confidence(ranked: list[Candidate]) -> float:
    """Without a fitted ranker there is no calibrated confidence: report at most 0.5, less the closer
    the runner-up, so such answers are never auto-accepted and sort first in uncertainty order."""
    if not ranked:
        return 0.0
    top = max(ranked[0].score, 1e-9)
    second = ranked[1].score if len(ranked) > 1 else 0.0
    return round(0.5 * top / (top + max(second, 0.0)), 4)
