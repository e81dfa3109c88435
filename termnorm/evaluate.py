"""Evaluation metrics for term normalization: pure functions over gold and predicted term sets.

Every function takes parallel lists, one entry per mention:

* ``gold``: the gold terms of each mention (any iterable of hashables, usually names);
* ``predicted``: the terms the system outputs (a set; order ignored);
* ``ranked``: the system's candidate list, best first (names or
  :class:`~termnorm.records.Candidate` objects, whose ``term`` is used).

The metrics are those the methods report: exact-set accuracy (Yidu-N7K /
CHIP 2019, approach A), micro P/R/F1 over (mention, term) pairs (CHIP-CDN's
official metric), Recall@k and NDCG@5 with binary relevance (approach D), and
the recall-stage measures (candidate recall, pair recall). :func:`evaluate_engine` runs an engine on
labelled mentions and computes them all.
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Any, Hashable, Iterable, Sequence

import numpy as np

from termnorm import reading

if TYPE_CHECKING:
    from termnorm.engine import Engine
    from termnorm.records import LabelledMention

Terms = Iterable[Hashable]


def _term(x: Any) -> Hashable:
    return getattr(x, "term", x)


def _set(terms: Terms) -> set:
    return {_term(t) for t in terms}


def _list(ranked: Iterable) -> list:
    return [_term(t) for t in ranked]


def _check(*lists: Sequence) -> int:
    n = len(lists[0])
    for other in lists[1:]:
        if len(other) != n:
            raise ValueError(f"lists of different lengths: {[len(x) for x in lists]}")
    return n


def _mean(values: list[float]) -> float:
    return float(np.mean(values)) if values else 0.0


def exact_set_accuracy(gold: Sequence[Terms], predicted: Sequence[Terms]) -> float:
    """Share of mentions whose predicted set equals the gold set."""
    _check(gold, predicted)
    return _mean([float(_set(g) == _set(p)) for g, p in zip(gold, predicted)])


def micro_prf(gold: Sequence[Terms], predicted: Sequence[Terms]) -> tuple[float, float, float]:
    """Micro precision, recall and F1 over (mention, term) pairs (the CHIP-CDN metric)."""
    _check(gold, predicted)
    tp = n_pred = n_gold = 0
    for g, p in zip(gold, predicted):
        g, p = _set(g), _set(p)
        tp += len(g & p)
        n_pred += len(p)
        n_gold += len(g)
    precision = tp / n_pred if n_pred else 0.0
    recall = tp / n_gold if n_gold else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return precision, recall, f1


def recall_at_k(gold: Sequence[Terms], ranked: Sequence[Sequence], k: int) -> float:
    """Share of mentions with *all* gold terms among the top ``k`` of the ranked list."""
    _check(gold, ranked)
    return _mean([float(_set(g) <= set(_list(r)[:k])) for g, r in zip(gold, ranked)])


def candidate_recall(gold: Sequence[Terms], ranked: Sequence[Iterable]) -> float:
    """Share of mentions with all gold terms somewhere in the (whole) candidate set."""
    _check(gold, ranked)
    return _mean([float(_set(g) <= _set(r)) for g, r in zip(gold, ranked)])


def pair_recall(gold: Sequence[Terms], ranked: Sequence[Iterable]) -> float:
    """Share of gold (mention, term) pairs whose term is among the mention's candidates."""
    _check(gold, ranked)
    hit = total = 0
    for g, r in zip(gold, ranked):
        g = _set(g)
        hit += len(g & _set(r))
        total += len(g)
    return hit / total if total else 0.0


def mean_candidates(ranked: Sequence[Iterable]) -> float:
    """Mean number of distinct candidates per mention."""
    return _mean([float(len(_set(r))) for r in ranked])


def ndcg_at_k(gold: Sequence[Terms], ranked: Sequence[Sequence], k: int = 5) -> float:
    """Mean NDCG@k with binary relevance: ``DCG = Σ_{i<k} rel_i / log2(i + 2)``, ideal = all gold first."""
    _check(gold, ranked)
    values = []
    for g, r in zip(gold, ranked):
        g = _set(g)
        if not g:
            continue
        seen: set = set()
        dcg = 0.0
        for i, t in enumerate(_list(r)[:k]):
            if t in g and t not in seen:  # a term listed twice earns once
                dcg += 1.0 / math.log2(i + 2)
            seen.add(t)
        ideal = sum(1.0 / math.log2(i + 2) for i in range(min(len(g), k)))
        values.append(dcg / ideal)
    return _mean(values)


def count_accuracy(gold: Sequence[Terms], predicted_counts: Sequence[int]) -> float:
    """Share of mentions whose predicted number of terms equals the number of gold terms."""
    _check(gold, predicted_counts)
    return _mean([float(len(_set(g)) == int(c)) for g, c in zip(gold, predicted_counts)])


def error_kind(gold: Terms, predicted: Terms) -> str:
    """What went wrong for one mention.

    ``correct``; ``missing term`` (predicted ⊊ gold); ``extra term``
    (predicted ⊋ gold); ``wrong term`` (same number of terms, different
    terms); ``wrong count`` (a different number and neither a subset nor a
    superset).
    """
    g, p = _set(gold), _set(predicted)
    if g == p:
        return "correct"
    if p < g:
        return "missing term"
    if p > g:
        return "extra term"
    if len(p) == len(g):
        return "wrong term"
    return "wrong count"


#: Buckets of :func:`accuracy_by_familiarity`: how many coded mentions carry the mention's rarest gold term.
FAMILIARITY_BUCKETS = (("unseen", 0, 0), ("1-2", 1, 2), ("3-9", 3, 9), ("10+", 10, None))


def accuracy_by_familiarity(history_terms: Iterable[Terms], gold: Sequence[Terms],
                            predicted: Sequence[Terms], ranked: Sequence[Sequence] | None = None) -> dict[str, dict]:
    """Exact-set accuracy by how familiar the gold is to the coded history.

    A mention's bucket (:data:`FAMILIARITY_BUCKETS`) is the number of coded mentions (``history_terms``,
    one term collection per coded mention) that carry its *rarest* gold term: ``unseen`` means a term
    no coder has used yet, which only the vocabulary-side strategies and the learned scorers can find.
    Per bucket: ``n`` mentions and their ``accuracy`` (None for an empty bucket); with ``ranked`` (each
    mention's candidates) also ``candidate_recall``, the share whose gold terms are all among them: a miss
    outside them is recall's to fix, one inside them the ranker's.

    >>> accuracy_by_familiarity([["a"], ["a"], ["b"]], [["a"], ["c"], ["a", "b"]], [["a"], ["a"], ["a", "b"]])["unseen"]
    {'n': 1, 'accuracy': 0.0}
    """
    _check(gold, predicted)
    hits: dict[str, list[bool]] = {name: [] for name, _, _ in FAMILIARITY_BUCKETS}
    found: dict[str, list[bool]] = {name: [] for name, _, _ in FAMILIARITY_BUCKETS}
    for i, (name, g, p) in enumerate(zip(familiarity_buckets(history_terms, gold), gold, predicted)):
        if name:
            hits[name].append(_set(g) == _set(p))
            if ranked is not None:
                found[name].append(_set(g) <= _set(ranked[i]))
    out = {name: {"n": len(h), "accuracy": _mean(h) if h else None} for name, h in hits.items()}
    if ranked is not None:
        for name, f in found.items():
            out[name]["candidate_recall"] = _mean(f) if f else None
    return out


def familiarity_buckets(history_terms: Iterable[Terms], gold: Sequence[Terms]) -> list[str | None]:
    """Each mention's :data:`FAMILIARITY_BUCKETS` name (None for a mention without gold terms).

    >>> familiarity_buckets([["a"], ["a"], ["b"]], [["a"], ["c"], ["a", "b"], []])
    ['1-2', 'unseen', '1-2', None]
    """
    seen: dict[Hashable, int] = {}
    for terms in history_terms:
        for t in _set(terms):
            seen[t] = seen.get(t, 0) + 1
    out: list[str | None] = []
    for g in gold:
        g = _set(g)
        times = min((seen.get(t, 0) for t in g), default=None)
        out.append(None if times is None else
                   next(n for n, lo, hi in FAMILIARITY_BUCKETS if lo <= times and (hi is None or times <= hi)))
    return out


def error_table(mentions: Sequence[str], gold: Sequence[Terms], predicted: Sequence[Terms], as_frame: bool = True):
    """One row per mention: mention, gold, predicted, correct, kind (see :func:`error_kind`).

    Returns a pandas DataFrame (``as_frame=True``) or a list of dicts. Terms
    are listed sorted, joined with ``##`` as in the CHIP-CDN files.
    """
    _check(mentions, gold, predicted)
    rows = []
    for m, g, p in zip(mentions, gold, predicted):
        kind = error_kind(g, p)
        rows.append({"mention": m, "gold": "##".join(sorted(map(str, _set(g)))),
                     "predicted": "##".join(sorted(map(str, _set(p)))),
                     "correct": kind == "correct", "kind": kind})
    if not as_frame:
        return rows
    import pandas as pd

    return pd.DataFrame(rows, columns=["mention", "gold", "predicted", "correct", "kind"])


def evaluate_predictions(gold: Sequence[Terms], predicted_sets: Sequence[Terms] | None,
                         ranked_lists: Sequence[Sequence] | None,
                         predicted_counts: Sequence[int] | None = None) -> dict[str, float]:
    """All metrics at once.

    ``predicted_sets`` may be None (recall-only evaluation: the set metrics are
    then left out); ``ranked_lists`` may be None (set-only evaluation).
    ``predicted_counts`` defaults to the size of each predicted set.

    Keys: ``n``, ``accuracy``, ``micro_precision``, ``micro_recall``,
    ``micro_f1``, ``count_accuracy``, ``recall_at_1/5/10/20``,
    ``candidate_recall``, ``pair_recall``, ``mean_candidates``, ``ndcg_at_5``.
    """
    out: dict[str, float] = {"n": len(gold)}
    if predicted_sets is not None:
        _check(gold, predicted_sets)
        p, r, f = micro_prf(gold, predicted_sets)
        out.update(accuracy=exact_set_accuracy(gold, predicted_sets), micro_precision=p, micro_recall=r, micro_f1=f)
        counts = predicted_counts if predicted_counts is not None else [len(_set(s)) for s in predicted_sets]
        out["count_accuracy"] = count_accuracy(gold, counts)
    elif predicted_counts is not None:
        out["count_accuracy"] = count_accuracy(gold, predicted_counts)
    if ranked_lists is not None:
        _check(gold, ranked_lists)
        for k in (1, 5, 10, 20):
            out[f"recall_at_{k}"] = recall_at_k(gold, ranked_lists, k)
        out.update(candidate_recall=candidate_recall(gold, ranked_lists), pair_recall=pair_recall(gold, ranked_lists),
                   mean_candidates=mean_candidates(ranked_lists), ndcg_at_5=ndcg_at_k(gold, ranked_lists, 5))
    return out


def evaluate_engine(engine: Engine, mentions: list[LabelledMention], stage: str = "recall", k: int = 20,
                    progress: bool = False) -> dict:
    """Run recall (or the full pipeline) on labelled mentions and compute every metric (a mention with its
    document is read in it, termnorm.reading.in_document)."""
    texts = [m.text for m in mentions]
    documents = [getattr(m, "document", "") for m in mentions]
    gold = [m.terms for m in mentions]
    bar = None
    if progress:
        from tqdm import tqdm
        bar = tqdm(total=len(texts), desc=f"{stage} on {len(texts)} mentions")
    t0 = time.perf_counter()
    if stage == "recall":
        cand_lists = []
        for s in range(0, len(texts), 256):
            cand_lists.extend(engine.recall_batch([reading.in_document(engine, t, d) for t, d in
                                                   zip(texts[s:s + 256], documents[s:s + 256])]))
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
        sugs = engine.suggest_batch(texts, k=10 ** 6, progress=cb, documents=documents)
        ranked = [[c.term for c in s.candidates] for s in sugs]
        predicted = [s.chosen for s in sugs]
        counts = [s.predicted_count for s in sugs]
    secs = time.perf_counter() - t0
    if bar:
        bar.close()
    rep = evaluate_predictions(gold, predicted, ranked, predicted_counts=counts)
    rep["by_familiarity"] = accuracy_by_familiarity((m.terms for m in engine.history), gold, predicted, ranked)
    rep["errors"] = error_table(texts, gold, predicted, as_frame=False)
    rep["seconds"] = round(secs, 3)
    rep["mentions_per_second"] = round(len(texts) / secs, 1) if secs > 0 else None
    return rep
