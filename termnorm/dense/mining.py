"""Negative mining and batch composition for bi-encoder training.

* :func:`sample_hard_negatives` -- approach D's HD-sampling: from the current
  model's wrong predictions (top-K non-gold terms) draw negatives with
  probability proportional to ``exp(sim / tau)`` (Gumbel-top-n, vectorised);
  ``strategy="top"`` gives approach A's online negatives (the k nearest
  non-gold terms).
* :func:`calibrate_efn_beta` -- approach D's E-FN threshold: the lowest
  similarity beta above which the model's candidates are gold with precision
  >= alpha; candidates above beta are never used as negatives (they are
  likely unlabelled positives or hyper/hyponyms).
* :func:`related_by_code` -- a gold term's ancestors and descendants by code,
  to be kept out of its negatives (``--related-not-negative``).
* :func:`random_negatives` -- approach A's epoch-1 negatives.
* :func:`compose_batches` -- the conflict-free batch sampler for in-batch
  InfoNCE: no duplicate query or positive in a batch, no document in the batch
  that is gold for another query in it (a multi-term mention's other gold terms
  never become its negatives), and hard negative *queries* of a pair's term
  pulled into the same batch (approach D's term -> query hard negatives at no
  extra encoding cost).

sentence-transformers' ``mine_hard_negatives`` was considered: it needs the
``datasets`` package (not a dependency here), samples only "top" or uniformly
"random", and knows only the row's own positive, so it can neither sample
``exp(sim/tau)`` nor respect multi-term gold sets. The nearest-neighbour search
it would do is one FAISS call here.
"""

from __future__ import annotations

from collections import deque
from typing import Sequence

import numpy as np


def top_k_similar(queries: np.ndarray, corpus: np.ndarray, k: int, batch: int = 8192) -> tuple[np.ndarray, np.ndarray]:
    """Exact inner-product top-k of each query row over the corpus rows (FAISS IndexFlatIP).

    Returns ``(idx [n, k] int64, sims [n, k] float32)``, best first; -1 / -inf pad when k > corpus size.
    """
    import faiss

    n = len(queries)
    k_eff = min(k, len(corpus))
    idx = np.full((n, k), -1, dtype=np.int64)
    sims = np.full((n, k), -np.inf, dtype=np.float32)
    if n == 0 or k_eff == 0:
        return idx, sims
    index = faiss.IndexFlatIP(corpus.shape[1])
    index.add(np.ascontiguousarray(corpus, dtype=np.float32))
    for s in range(0, n, batch):
        d, i = index.search(np.ascontiguousarray(queries[s:s + batch], dtype=np.float32), k_eff)
        idx[s:s + batch, :k_eff] = i
        sims[s:s + batch, :k_eff] = d
    return idx, sims


def gold_mask(idx: np.ndarray, gold: Sequence[set[int] | frozenset[int]]) -> np.ndarray:
    """[n, k] bool: ``idx[i, j]`` is one of query i's gold ids (one Python pass over queries, not the vocabulary)."""
    out = np.zeros(idx.shape, dtype=bool)
    for i, g in enumerate(gold):
        if g:
            out[i] = np.isin(idx[i], np.fromiter(g, dtype=np.int64, count=len(g)))
    return out


def calibrate_efn_beta(sims: np.ndarray, is_gold: np.ndarray, alpha: float = 0.8, min_support: int = 5) -> float:
    """E-FN threshold (approach D): lowest beta such that candidates scoring >= beta are gold with precision >= alpha.

    ``sims`` / ``is_gold`` are the [n, k] candidate scores of held-out mentions and
    whether each candidate is gold. Precision is cumulative over candidates
    sorted by score; ``min_support`` candidates at least must lie above beta so a
    single lucky top hit does not set it. Returns +inf when no threshold
    reaches alpha (an untrained model: nothing is eliminated).
    """
    s = sims.ravel()
    g = is_gold.ravel()
    ok = np.isfinite(s)
    s, g = s[ok], g[ok]
    if len(s) == 0:
        return float("inf")
    order = np.argsort(-s, kind="stable")
    s, g = s[order], g[order]
    prec = np.cumsum(g) / np.arange(1, len(g) + 1)
    good = np.nonzero((prec >= alpha) & (np.arange(1, len(g) + 1) >= min_support))[0]
    if len(good) == 0:
        return float("inf")
    return float(s[good[-1]])


def sample_hard_negatives(idx: np.ndarray, sims: np.ndarray, gold: Sequence[set[int]], n: int, *,
                          tau: float = 0.05, beta: float = float("inf"), strategy: str = "softmax",
                          rng: np.random.Generator | None = None, exclude: np.ndarray | None = None
                          ) -> tuple[np.ndarray, int]:
    """Pick ``n`` negatives per query among its mined candidates; returns ``(neg [q, n] int64 (-1 pad), eliminated)``.

    Candidates that are gold, in ``exclude`` (same shape bool) or score >= ``beta``
    (E-FN) are never chosen; ``eliminated`` counts the non-gold ones E-FN removed.
    ``strategy="softmax"``: draw without replacement with P ∝ exp(sim / tau)
    (Gumbel-top-n trick: argmax of sim/tau + Gumbel noise); ``"top"``: the n highest.
    tau = 0.05 is the in-batch InfoNCE temperature (scale 20), so sampling is as
    peaked as the loss itself.
    """
    rng = rng or np.random.default_rng(0)
    bad = gold_mask(idx, gold) | (idx < 0) | ~np.isfinite(sims)
    if exclude is not None:
        bad |= exclude
    efn = (sims >= beta) & ~bad
    eliminated = int(efn.sum())
    bad |= efn
    if strategy == "softmax":
        keys = sims.astype(np.float64) / tau + rng.gumbel(size=sims.shape)
    elif strategy == "top":
        keys = sims.astype(np.float64).copy()
    else:
        raise ValueError(f"unknown strategy {strategy!r}")
    keys[bad] = -np.inf
    m = min(n, idx.shape[1])
    order = np.argsort(-keys, axis=1, kind="stable")[:, :m]
    picked = np.take_along_axis(idx, order, 1)
    picked[np.take_along_axis(keys, order, 1) == -np.inf] = -1
    out = np.full((len(idx), n), -1, dtype=np.int64)
    out[:, :m] = picked
    return out, eliminated


def related_by_code(idx: np.ndarray, gold: Sequence[set[int]], codes_of: Sequence[Sequence[str]]) -> np.ndarray:
    """[n, k] bool: candidate ``idx[i, j]`` is an ancestor or descendant of one of query i's gold terms by code
    (one :func:`termnorm.vocabulary.code_key` a prefix of the other: ICD's A00 / A00.0 / A00.901; a sibling
    A00.1 is not). Such a term can be right at another level of detail, so it is not taught as a negative."""
    from termnorm.vocabulary import code_key

    keys: dict[int, list[str]] = {}

    def keys_of(t: int) -> list[str]:
        if t not in keys:
            keys[t] = [code_key(c) for c in codes_of[t]]
        return keys[t]

    out = np.zeros(idx.shape, dtype=bool)
    for i, g in enumerate(gold):
        mine = [k for t in g for k in keys_of(t)]
        if not mine:
            continue
        for j, t in enumerate(idx[i]):
            if t >= 0 and t not in g:
                out[i, j] = any(a.startswith(b) or b.startswith(a) for a in keys_of(int(t)) for b in mine)
    return out


def random_negatives(n_items: int, gold: Sequence[set[int]], n: int,
                     rng: np.random.Generator | None = None) -> np.ndarray:
    """``n`` uniformly random non-gold ids in [0, n_items) per query (approach A, epoch 1)."""
    rng = rng or np.random.default_rng(0)
    out = rng.integers(0, n_items, size=(len(gold), n))
    bad = gold_mask(out, gold)
    while bad.any():  # redraw the few collisions with a gold id
        out[bad] = rng.integers(0, n_items, size=int(bad.sum()))
        bad = gold_mask(out, gold)
    return out


def compose_batches(pair_query: np.ndarray, pair_docs: Sequence[Sequence[int]], query_gold: Sequence[set[int]],
                    batch_size: int, rng: np.random.Generator | None = None,
                    neighbours: Sequence[Sequence[int]] | None = None, min_size: int = 1) -> list[list[int]]:
    """Group training pairs into conflict-free batches for in-batch InfoNCE.

    ``pair_query[i]`` is pair i's query id, ``pair_docs[i]`` its documents
    (positive term first, then hard negative terms), ``query_gold[q]`` query q's
    gold term ids. A pair joins a batch only if its query is not already there,
    its positive is no document there, none of its documents is gold for a query
    there, and no document there is gold for its query -- so every in-batch
    negative is a true negative in both directions (sentence-transformers'
    NO_DUPLICATES batch sampler does the first two checks only).
    ``neighbours[i]`` are pairs to pull into pair i's batch right after it
    (pairs whose queries are hard negative queries of i's term).
    Pairs are visited in :func:`spread_order` of their positive term: a term
    coded for 60 mentions can only have one of them per batch, and visiting in
    plain random order leaves those for a tail of tiny batches.
    ``min_size`` leaves out batches of fewer pairs (unless that leaves none): the tail holds only a few terms'
    extra pairs, one per step. On CHIP-CDN at batch 64 most of an epoch's batches are that tail, and the one GPU
    run that trained on all of them left the encoder below the untrained one (docs/gpu.md).
    """
    rng = rng or np.random.default_rng(0)
    n = len(pair_query)
    assigned = np.zeros(n, dtype=bool)
    queue = deque(spread_order([d[0] for d in pair_docs], rng).tolist())
    batches: list[list[int]] = []
    while queue:
        batch: list[int] = []
        used_q: set[int] = set()
        docs: set[int] = set()
        golds: set[int] = set()

        def fits(i: int) -> bool:
            q = int(pair_query[i])
            d = pair_docs[i]
            return (q not in used_q and d[0] not in docs and not (query_gold[q] & docs)
                    and not any(x in golds for x in d))

        def add(i: int) -> None:
            q = int(pair_query[i])
            batch.append(i)
            assigned[i] = True
            used_q.add(q)
            docs.update(int(x) for x in pair_docs[i])
            golds.update(query_gold[q])

        deferred: list[int] = []
        while queue and len(batch) < batch_size:
            i = queue.popleft()
            if assigned[i]:
                continue
            if not fits(i):
                deferred.append(i)
                continue
            add(i)
            for j in (neighbours[i] if neighbours is not None else ()):
                if len(batch) >= batch_size:
                    break
                if not assigned[j] and fits(j):
                    add(j)
        queue.extendleft(reversed(deferred))  # retried first in the next batch
        if batch:
            batches.append(batch)
    kept = [b for b in batches if len(b) >= min_size]
    return kept or batches


def spread_order(groups: Sequence[int], rng: np.random.Generator) -> np.ndarray:
    """A random order in which each group's items are spread evenly over the whole sequence.

    Item j of a group of size g (random rank r) gets the key (r + U(0,1)) / g:
    stratified positions, so a big group is not bunched anywhere.
    """
    groups = np.asarray(groups)
    n = len(groups)
    perm = rng.permutation(n)
    _, inv, counts = np.unique(groups[perm], return_inverse=True, return_counts=True)
    order_in_group = np.argsort(inv, kind="stable")
    rank = np.empty(n, dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    rank[order_in_group] = np.arange(n) - np.repeat(starts, counts)
    keys = (rank + rng.uniform(size=n)) / counts[inv]
    return perm[np.argsort(keys, kind="stable")]


def label_batches(primary: Sequence[int], batch_size: int, max_per_label: int = 4,
                  rng: np.random.Generator | None = None) -> list[list[int]]:
    """Batches for batch-hard triplet training (approach E): texts of one concept kept together.

    Random batches over ~10k concepts almost never hold two texts of one concept,
    so the hardest positive would always be missing. Texts are grouped by their
    (first) label, groups are shuffled and cut into chunks of ``max_per_label``,
    and chunks fill the batches.
    """
    rng = rng or np.random.default_rng(0)
    primary = np.asarray(primary)
    order = rng.permutation(len(primary))
    groups: dict[int, list[int]] = {}
    for i in order:
        groups.setdefault(int(primary[i]), []).append(int(i))
    chunks = [g[s:s + max_per_label] for g in groups.values() for s in range(0, len(g), max_per_label)]
    chunks = [chunks[i] for i in rng.permutation(len(chunks))]
    batches, cur = [], []
    for c in chunks:
        if len(cur) + len(c) > batch_size and cur:
            batches.append(cur)
            cur = []
        cur.extend(c)
    if cur:
        batches.append(cur)
    return batches
