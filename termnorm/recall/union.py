"""The union of several recall strategies (approach B), with multi-part mentions recalled part by part."""

from __future__ import annotations

from typing import Mapping, Sequence

from termnorm.recall.base import Hits, Recaller
from termnorm.records import Candidate, LabelledMention
from termnorm.text.normalize import normalize
from termnorm.vocabulary import Vocabulary

from termnorm.text.normalize import Abbreviations
from termnorm.text import short_forms
from termnorm.text.split import KnownTerms, split_mention

PART, ABBR = "_part", "_abbr"

#: Candidates per strategy key and mention. ``<name>`` is the whole mention,
#: ``<name>_part`` each part of a split mention, ``<name>_abbr`` the mention
#: with abbreviations expanded. Chosen by ``python3 benchmarks/recall.py
#: --tune`` (greedy: raise the k that buys the most recall per added
#: candidate, on 1,000 CHIP-CDN *train* mentions with the other 5,000 as
#: history, until the mean candidate count reaches 50: candidate recall 0.900,
#: pair recall 0.937 there; on CHIP-CDN dev 0.894 / 0.936 at 48.7 candidates).
#: The Yidu-N7K setting (budget 30) is ``TUNED_K["yidu"]`` in ``benchmarks/recall.py``.
DEFAULT_K = {
    "exact": 1, "exact_abbr": 1, "exact_part": 2,
    "contained": 6, "contained_abbr": 2, "contained_part": 1,
    "tfidf": 22, "tfidf_abbr": 13, "tfidf_part": 2,
    "jaccard": 13, "jaccard_abbr": 2, "jaccard_part": 4,
    "bm25": 6, "bm25_abbr": 2, "bm25_part": 1,
    "history": 13, "history_abbr": 27, "history_part": 5,
    "history_jaccard": 16, "history_jaccard_abbr": 0, "history_jaccard_part": 9,
    "history_key": 3, "history_key_abbr": 0, "history_key_part": 2,
    "history_analogy": 3, "history_analogy_abbr": 0, "history_analogy_part": 1,
}
#: A smaller profile for vocabularies of single-concept mentions such as
#: Yidu-N7K procedures (budget 30 candidates; from ``benchmarks/recall.py
#: --tune`` on held-out train mentions: val candidate recall 0.985 at 27.7).
COMPACT_K = {
    "exact": 2, "exact_abbr": 0, "exact_part": 1,
    "contained": 1, "contained_abbr": 0, "contained_part": 1,
    "tfidf": 17, "tfidf_abbr": 0, "tfidf_part": 0,
    "jaccard": 15, "jaccard_abbr": 0, "jaccard_part": 18,
    "bm25": 1, "bm25_abbr": 0, "bm25_part": 0,
    "history": 3, "history_abbr": 1, "history_part": 10,
    "history_jaccard": 4, "history_jaccard_abbr": 0, "history_jaccard_part": 0,
    "history_key": 3, "history_key_abbr": 0, "history_key_part": 2,
    "history_analogy": 3, "history_analogy_abbr": 0, "history_analogy_part": 1,
}
#: Twice every k of DEFAULT_K (~97 candidates on CHIP-CDN dev): the first stage of a cascade in which
#: the fitted lexical ranker orders them and ``Engine(max_candidates=50)`` keeps its top 50 (measured by
#: ``python3 benchmarks/recall.py``, row ``cascade``).
DEEP_K = {key: 2 * k for key, k in DEFAULT_K.items()}
#: Named k profiles: "wide" for multi-term diagnosis mentions (CHIP-CDN),
#: "compact" for procedure mentions (Yidu-N7K), "deep" for a ranker-cut cascade.
K_PROFILES = {"wide": DEFAULT_K, "compact": COMPACT_K, "deep": DEEP_K}

#: k of a strategy the table above does not name (e.g. a dense recaller):
#: whole mention 10, abbreviation-expanded like the whole, parts 0.
OTHER_K = 10

#: Reciprocal-rank constant of :func:`combined_score`. Measured on Yidu-N7K
#: val / CHIP-CDN dev union candidates (recall@5 / recall@10): C=1
#: 0.914/0.953 and 0.566/0.713; C=10 0.810/0.956 and 0.484/0.653; C=60 (the
#: usual RRF constant) 0.808/0.955 and 0.469/0.636.
RRF_C = 1


def combined_score(ranks: Mapping[str, int], scores: Mapping[str, float]) -> float:
    """Ordering score of a candidate: reciprocal-rank fusion plus the exact bonus.

    ``Σ_key 1 / (RRF_C + rank_key)`` over every strategy key (``tfidf``,
    ``tfidf_part`` ...) that proposed the term, rank 0-based; an exact match
    (``scores["exact"]``, 1.0 or 0.9 after laterality removal) is added on top
    so it comes first. Ranks rather than a weighted sum of scores because the
    strategies' scores live on different scales (cosine, Jaccard, unbounded
    BM25); terms several strategies agree on rise.
    """
    return sum(map(_reciprocal_rank, ranks.values())) + scores.get("exact", 0.0)


def _owner(key: str) -> str:
    """The strategy name of a score key (``tfidf_part`` -> ``tfidf``)."""
    return key.removesuffix(PART).removesuffix(ABBR)


_RR_TABLE = tuple(1.0 / (RRF_C + r) for r in range(1024))


def _reciprocal_rank(r: int) -> float:
    return _RR_TABLE[r] if r < 1024 else 1.0 / (RRF_C + r)


class UnionRecaller(Recaller):
    """Run several strategies and keep every term any of them proposes, with every score.

    Approach B recalls with the union of Jaccard, word TF-IDF and history
    recall, top-10 each (recall@10 0.82 / 0.55 / 0.52 alone, **0.983
    together**). Here the strategies are any
    :class:`~termnorm.recall.base.Recaller`, each with its own k
    (``k_per_strategy``, keyed by the strategy's ``name``). A
    :class:`~termnorm.records.Candidate` keeps each strategy's own score in
    ``Candidate.scores`` (``exact``, ``contained``, ``tfidf``, ``bm25``,
    ``jaccard``, ``history``, ``history_jaccard``) for explanation and for the
    fusion downstream;
    ``score`` is :func:`combined_score`, used to order the list and to cut it
    at ``max_candidates``.

    Multi-part mentions ("腹腔镜胆囊切除术+术中胆道造影"; >50% of CHIP-CDN rows
    need several terms) are split with :func:`termnorm.text.split.split_mention`
    (vocabulary names are never cut) and each part is recalled too; a part's
    hits keep their own keys (``tfidf_part`` ...: the best score over the
    parts). With ``abbreviations`` (``data/keywords/abbreviations.json``:
    copd -> 慢性阻塞性肺疾病) a mention holding an abbreviation is also
    recalled in expanded form (keys ``<strategy>_abbr``).

    Input table (one row per mention in, a list of candidates out):

    =============================  =====================================================
    query                           candidates (term, scores)
    =============================  =====================================================
    ``腹腔镜胆囊切除术+胆道造影``     胆囊切除术 {tfidf: .71, jaccard: .6, tfidf_part: .9}
                                    胆道造影 {tfidf_part: .8, history: .7} ...
    =============================  =====================================================

    Relation to siblings: it is a :class:`~termnorm.recall.base.Recaller`
    itself (``fit`` fits every strategy, ``add_coded_mention`` reaches all),
    but ``recall_batch`` returns candidates, not ``(term_id, score)`` pairs.

    Example::

        strategies = [ExactRecaller(), CharTfidfRecaller(), JaccardRecaller(), HistoryRecaller()]
        union = UnionRecaller(strategies).fit(vocab, history=train)
        union.recall_batch(["右侧甲状腺肿瘤切除术"])[0][0].scores   # {'tfidf': ..., 'jaccard': ...}
    """

    name = "union"

    def __init__(self, strategies: Sequence[Recaller], k_per_strategy: Mapping[str, int] | None = None,
                 split: bool = True, abbreviations: Mapping[str, str] | None = None,
                 max_candidates: int | None = None):
        self.strategies = list(strategies)
        names = [s.name for s in self.strategies]
        if len(set(names)) != len(names):
            raise ValueError(f"strategy names must be distinct: {names}")
        table = dict(DEFAULT_K if k_per_strategy is None else k_per_strategy)
        self.k: dict[str, int] = {}
        for n in names:
            main = table.get(n, OTHER_K)
            self.k[n] = main
            self.k[n + ABBR] = table.get(n + ABBR, main)
            self.k[n + PART] = table.get(n + PART, 0)
        self.split = split
        self.abbreviations = Abbreviations(dict(abbreviations)) if abbreviations else None
        self.max_candidates = max_candidates

    def fit(self, vocab: Vocabulary, history: list[LabelledMention] | None = None,
            fit_strategies: bool = True) -> "UnionRecaller":
        """Fit every strategy (``fit_strategies=False``: they are already fitted on ``vocab``)."""
        self.vocab = vocab
        # names are never cut by the splitter (糖尿病伴有肾的并发症 stays whole)
        self._known = KnownTerms(vocab.names) if self.split else None
        if fit_strategies:
            for s in self.strategies:
                s.fit(vocab, history)
        return self

    def add_coded_mention(self, mention: str, terms: list[str]) -> None:
        for s in self.strategies:
            s.add_coded_mention(mention, terms)

    # ------------------------------------------------------------------
    def variants(self, query: str) -> list[tuple[str, str]]:
        """``(text, key suffix)`` to recall besides the query itself: expanded form, parts."""
        out: list[tuple[str, str]] = []
        short = self.short_forms()
        n = expanded = normalize(query)
        if self.abbreviations is not None:
            expanded = self.abbreviations.expand(n)
        if expanded != n:
            out.append((expanded, ABBR))
        if self.split:
            parts = split_mention(query, self._known)
            if len(parts) > 1:
                out.extend((p, PART) for p in parts)
        if short is not None:  # the short forms: the whole and, split, each part spelled out (冠心病;高血压)
            spelled = short.expand(expanded)
            if spelled != expanded:
                out = [v for v in out if v[1] != ABBR] + [(spelled, ABBR)]
                parts = split_mention(spelled, self._known) if self.split else []
                if len(parts) > 1:
                    had = {p for p, key in out if key == PART}
                    out.extend((p, PART) for p in parts if p not in had)
        return out

    def short_forms(self):
        """The built-in Chinese short forms (termnorm.text.short_forms), guarded by this vocabulary's names;
        None for another language, before :meth:`fit`, or with ``short_forms.ENABLED`` off."""
        vocab = getattr(self, "vocab", None)
        if not short_forms.ENABLED or vocab is None or getattr(vocab, "language", None) != "zh":
            return None
        got = self.__dict__.get("_short_forms")
        if got is None or got[0] is not vocab:  # built once per vocabulary (0.5 s for 40,000 names)
            got = self._short_forms = (vocab, short_forms.ShortForms(vocab.names))
        return got[1]

    def key_hits(self, queries: list[str], k: Mapping[str, int] | None = None) -> list[dict[str, list[Hits]]]:
        """Every strategy key's hit lists per query: ``{"tfidf": [hits], "tfidf_part": [hits, hits], ...}``.

        ``k`` overrides the per-key ks (the tuner asks for large ks once and
        simulates smaller ones). Each strategy answers two batches: the
        queries, and all variants of all queries together.
        """
        k = {**self.k, **(k or {})}
        variants = [self.variants(q) for q in queries]
        flat = [t for vs in variants for t, _ in vs]
        owner = [(qi, suffix) for qi, vs in enumerate(variants) for _, suffix in vs]
        out: list[dict[str, list[Hits]]] = [{} for _ in queries]
        for s in self.strategies:
            kq = k.get(s.name, 0)
            if kq > 0:
                for qi, hits in enumerate(s.recall_batch(queries, kq)):
                    out[qi][s.name] = [hits]
            kv = max(k.get(s.name + PART, 0), k.get(s.name + ABBR, 0))
            if flat and kv > 0:
                for (qi, suffix), hits in zip(owner, s.recall_batch(flat, kv)):
                    kk = k.get(s.name + suffix, 0)
                    if kk > 0:
                        out[qi].setdefault(s.name + suffix, []).append(hits[:kk])
        return out

    def recall_batch(self, queries: list[str], k: int | None = None) -> list[list[Candidate]]:
        """Candidates per query, ordered by :func:`combined_score`; cut at ``k`` (else ``max_candidates``)."""
        limit = k if k is not None else self.max_candidates
        out: list[list[Candidate]] = []
        # a strategy marked ``score_only`` scores the others' candidates and proposes none (nor ranks any)
        only = {s.name for s in self.strategies if getattr(s, "score_only", False)}
        for per_key in self.key_hits(queries):
            bucket: dict[int, tuple[dict[str, float], dict[str, int]]] = {}
            for key, lists in sorted(per_key.items(), key=lambda kv: _owner(kv[0]) in only):
                for hits in lists:
                    for rank, (tid, score) in enumerate(hits):
                        if _owner(key) in only:
                            if tid in bucket and score > bucket[tid][0].get(key, float("-inf")):
                                bucket[tid][0][key] = float(score)
                            continue
                        scores, ranks = bucket.setdefault(tid, ({}, {}))
                        if score > scores.get(key, float("-inf")):
                            scores[key] = float(score)
                        if rank < ranks.get(key, 1 << 30):
                            ranks[key] = rank
            names = self.vocab.names
            cands = [Candidate(term_id=tid, term=names[tid], score=combined_score(ranks, scores),
                               scores=scores, codes=self.vocab.codes_of(names[tid]))
                     for tid, (scores, ranks) in bucket.items()]
            cands.sort(key=lambda c: (-c.score, c.term_id))
            out.append(cands[:limit] if limit is not None else cands)
        return out
