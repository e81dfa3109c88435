"""What bi-encoder training is set up with (:mod:`termnorm.dense.train` runs the loop): the knobs
(:class:`BiEncoderTrainConfig`), the training anchors and their gold terms, the (mention, term) pairs and
negatives each epoch draws, the batch-hard rows, and recall@k of a model (:func:`evaluate_recall`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from termnorm.dense.biencoder import BiEncoder, count_class
from termnorm.dense.index import TermIndex
from termnorm.dense.mining import (
    calibrate_efn_beta,
    gold_mask,
    random_negatives,
    sample_hard_negatives,
    top_k_similar,
)
from termnorm.records import LabelledMention
from termnorm.text.normalize import normalize
from termnorm.vocabulary import Vocabulary

OBJECTIVES = ("nce", "batch_hard", "triplet_online")
DATA = ("labelled", "vocab", "both")
IGNORE = -100


@dataclass(frozen=True)
class BiEncoderTrainConfig:
    """The knobs of :func:`termnorm.dense.train.train_biencoder` (``train_biencoder(..., **overrides)`` sets any
    of them by name). Why the defaults:

    * ``lr=2e-5`` AdamW -- approach A's setting (approach E: Adam 3e-5).
    * ``batch_size=32`` -- the CPU-affordable batch (methods.md measured 32-pair
      steps); approach E's 1,500 and approach C's 50 need a GPU.
    * ``tau=0.05`` -- approach C's best temperature 1/20; used both as the InfoNCE
      temperature (scale 20) and for HD-sampling ``exp(sim/tau)``.
    * ``n_hard_terms=3`` / ``n_hard_queries=10`` -- approach D's best numbers.
      Hard negative queries are realised by pulling the pairs of those queries
      into the same batch (``mining.compose_batches``), so they cost no extra
      encoding; a batch of 32 thus holds ~3 clusters of confusable mentions.
    * ``alpha=0.8``, raised by ``alpha_step`` per epoch (capped at 0.99) --
      approach D's E-FN precision target. beta is calibrated on ``val``
      (or on a 10% hold-out of ``train`` when ``val`` is None, kept out of training).
    * ``count_weight=1`` -- approach A's loss = triplet + CE; ``head_lr=1e-3`` for
      the freshly initialised count head (the encoder keeps ``lr``).
    * ``refit_count_head=True`` -- after training, refit the head on the final
      mention embeddings (Yidu-N7K val count accuracy 0.977 refitted vs 0.95 =
      the majority class for the jointly trained head after a 21-step CPU run).
    * ``n_triplet_negatives=4``, ``triplet_margin=1`` -- approach A.
    * ``freeze_embeddings=None`` -- auto: freeze the word-embedding table when it
      has > 1M parameters and training runs on CPU (e5-small's 96M-parameter
      table makes a step 7x slower unfrozen, methods.md).
    * ``time_budget_s`` / ``max_steps`` -- stop early (CPU runs); the final
      evaluation still happens.
    """

    objective: str = "nce"  # one of OBJECTIVES (termnorm.dense.train's docstring)
    epochs: int = 3  # passes over the training pairs (one more pass only evaluates)
    batch_size: int = 32  # pairs (or batch-hard rows) per step
    lr: float = 2e-5  # AdamW learning rate of the encoder
    data: str = "labelled"  # one of DATA: mention pairs, synonym pairs, or both
    freeze_embeddings: bool | None = None  # freeze the word-embedding table (None: auto, see above)
    count_head: bool = True  # train the count head (1 / 2 / >=3 terms) jointly or afterwards
    count_weight: float = 1.0  # weight of the count head's cross-entropy in the loss
    head_lr: float = 1e-3  # learning rate of the count head (at least ``lr``)
    refit_count_head: bool = True  # refit the joint head on the final mention embeddings
    n_hard_terms: int = 3  # nce: hard negative terms per mention
    n_hard_queries: int = 10  # nce: hard negative mentions per term, pulled into the same batch
    # nce: batches of fewer pairs are left out of the epoch (compose_batches' tail, only the most coded terms)
    min_batch: int = 1
    related_not_negative: bool = False  # nce: a gold term's ancestors / descendants by code are no hard negative
    top_k_mine: int = 50  # nce: nearest neighbours the hard negatives are sampled from
    tau: float = 0.05  # nce: InfoNCE temperature and HD-sampling temperature
    alpha: float = 0.8  # nce: E-FN precision target of the first epoch
    alpha_step: float = 0.05  # nce: raise of alpha per epoch (capped at 0.99)
    efn: bool = True  # nce: drop likely false negatives (E-FN, approach D)
    n_triplet_negatives: int = 4  # triplet_online: negatives per mention
    triplet_margin: float = 1.0  # triplet_online: Euclidean triplet margin
    max_per_label: int = 4  # batch_hard: rows of one term per batch
    warmup_ratio: float = 0.1  # share of the steps with linear warm-up
    weight_decay: float = 0.01  # AdamW weight decay
    max_grad_norm: float = 1.0  # gradient clipping norm
    time_budget_s: float | None = None  # stop training after this many seconds (then evaluate)
    max_steps: int | None = None  # stop training after this many steps (then evaluate)
    train_top: int | None = None  # train only the top N layers, the lower ones cached (termnorm.dense.top_layers)
    max_queries: int | None = None  # a random sample of this many queries, drawn before mining (see sample_queries)
    eval_ks: Sequence[int] = (1, 10, 20)  # recall@k reported on ``val``
    seed: int = 0  # numpy and torch seed
    progress: bool = True  # progress bars and a line per epoch on stderr


# --------------------------------------------------------------------------- data
@dataclass
class Queries:
    """Unique training anchors (mentions / synonyms) with their gold term ids."""

    texts: list[str]
    gold: list[set[int]]
    count: list[int]  # count class for the head, IGNORE for synonyms


def gold_ids(vocab: Vocabulary, terms: Sequence[str]) -> list[int]:
    return [t for t in (vocab.get_id(x) for x in terms) if t is not None]


def build_queries(vocab: Vocabulary, train: Sequence[LabelledMention], data: str) -> Queries:
    """Mentions merged by normalized text (gold = union), plus synonyms -> their term when data includes the vocab."""
    by_key: dict[str, int] = {}
    q = Queries([], [], [])

    def put(text: str, ids: list[int], count: int):
        key = normalize(text)
        if not key or not ids:
            return
        i = by_key.get(key)
        if i is None:
            by_key[key] = len(q.texts)
            q.texts.append(text)
            q.gold.append(set(ids))
            q.count.append(count)
        else:
            q.gold[i].update(ids)
            if count != IGNORE:
                q.count[i] = count_class(len(q.gold[i]))

    if data in ("labelled", "both"):
        for m in train:
            ids = gold_ids(vocab, m.terms)
            put(m.text, ids, count_class(len(ids)))
    if data in ("vocab", "both"):
        for name, syns in vocab.synonyms.items():
            for s in syns:
                put(s, [vocab.index(name)], IGNORE)
    return q


def sample_queries(q: Queries, n: int | None, rng: np.random.Generator) -> Queries:
    """A random ``n`` of the queries (all when ``n`` is None or not smaller), in their order.

    A time-budgeted run reaches a sixth of MEDIC's 64,199 synonym pairs; sampling them first spares encoding
    the rest for hard-negative mining, so the budget goes to steps and the schedule spans what is trained.
    """
    if n is None or n >= len(q.texts):
        return q
    keep = np.sort(rng.choice(len(q.texts), size=n, replace=False))
    return Queries([q.texts[i] for i in keep], [q.gold[i] for i in keep], [q.count[i] for i in keep])


def check_choices(objective: str, data: str) -> None:
    """ValueError unless ``objective`` is one of OBJECTIVES and ``data`` one of DATA."""
    if objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {OBJECTIVES}, not {objective!r}")
    if data not in DATA:
        raise ValueError(f"data must be one of {DATA}, not {data!r}")


# --------------------------------------------------------------------------- evaluation
def evaluate_recall(encoder: BiEncoder, vocab: Vocabulary, mentions: Sequence[LabelledMention],
                    ks: Sequence[int] = (1, 10, 20), form_vecs: np.ndarray | None = None,
                    query_vecs: np.ndarray | None = None) -> dict:
    """recall@k = share of mentions whose *whole* gold set is in the top k terms (data/README.md's definition).

    Terms are scored by their best surface form (names + synonyms). A gold name
    missing from the vocabulary makes its mention a miss.
    """
    texts, ids = vocab.surface_forms()
    if form_vecs is None:
        form_vecs = encoder.encode_terms(texts)
    index = TermIndex(encoder.dim, "flat")
    index.add_vectors(form_vecs, ids)
    if query_vecs is None:
        query_vecs = encoder.encode_queries([m.text for m in mentions])
    kmax = max(ks)
    top, _ = index.search(query_vecs, kmax)
    out = {"n": len(mentions)}
    for k in ks:
        hit = 0
        for m, row in zip(mentions, top[:, :k]):
            g = [vocab.get_id(t) for t in m.terms]
            hit += bool(g) and all(t is not None and t in row for t in g)
        out[f"recall@{k}"] = hit / max(len(mentions), 1)
    return out


def efn_beta(qvecs: np.ndarray, gold: list[set[int]], name_vecs: np.ndarray, alpha: float, k: int = 10) -> float:
    """E-FN's beta: the similarity above which a non-gold top-k term is taken for a false negative."""
    idx, sims = top_k_similar(qvecs, name_vecs, k)
    return calibrate_efn_beta(sims, gold_mask(idx, gold), alpha)


# --------------------------------------------------------------------------- pairs and negatives
def query_term_pairs(q: Queries) -> tuple[np.ndarray, np.ndarray]:
    """Multi-term mentions split into (mention, term) pairs (approach D)."""
    pq, pt = [], []
    for i, g in enumerate(q.gold):
        for t in sorted(g):
            pq.append(i)
            pt.append(t)
    return np.asarray(pq, dtype=np.int64), np.asarray(pt, dtype=np.int64)


def fill_random(neg: np.ndarray, n_items: int, gold: list[set[int]], rng) -> np.ndarray:
    """Replace -1 (too few mined candidates) with random non-gold ids."""
    miss = neg < 0
    if miss.any():
        rnd = random_negatives(n_items, gold, neg.shape[1], rng)
        neg = np.where(miss, rnd, neg)
    return neg


def hard_query_neighbours(pair_q, pair_t, qv, tv, gold, n, tau, beta, rng, k) -> list[list[int]] | None:
    """Per pair: pairs of the hard negative queries of its term (HD-sampled, E-FN filtered)."""
    if n <= 0 or len(pair_q) == 0:
        return None
    terms = np.unique(pair_t)
    term_gold: dict[int, set[int]] = {int(t): set() for t in terms}
    for q, g in enumerate(gold):
        for t in g:
            if t in term_gold:
                term_gold[t].add(q)
    idx, sims = top_k_similar(tv[terms], qv, k)
    hq, _ = sample_hard_negatives(idx, sims, [term_gold[int(t)] for t in terms], n, tau=tau, beta=beta,
                                  strategy="softmax", rng=rng)
    row_of_term = {int(t): i for i, t in enumerate(terms)}
    first_pair: dict[int, list[int]] = {}
    for i, q in enumerate(pair_q):
        first_pair.setdefault(int(q), []).append(i)
    out = []
    for t in pair_t:
        qs = [int(x) for x in hq[row_of_term[int(t)]] if x >= 0]
        out.append([first_pair[q][rng.integers(len(first_pair[q]))] for q in qs])
    return out


def batch_hard_items(vocab: Vocabulary, train, queries: Queries, data: str) -> list[tuple[str, str, list[int], int]]:
    """(text, side, term ids, count class) rows for approach E's batch-hard training."""
    items: list[tuple[str, str, list[int], int]] = []
    mentions = [(t, "query", sorted(g), c) for t, g, c in zip(queries.texts, queries.gold, queries.count)
                if c != IGNORE]
    if data in ("vocab", "both"):
        texts, ids = vocab.surface_forms()
        items += [(t, "passage", [i], IGNORE) for t, i in zip(texts, ids)]
    elif data == "labelled":
        used = sorted({t for _, _, g, _ in mentions for t in g})
        items += [(vocab.names[t], "passage", [t], IGNORE) for t in used]
    if data in ("labelled", "both") and mentions:
        reps = 1 if data == "labelled" else max(1, round(len(items) / (3 * len(mentions))))  # |D|/|O| ≈ 1/3
        items += mentions * reps
    if not items:
        raise ValueError("no batch-hard training texts")
    return items
