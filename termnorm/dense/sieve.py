"""Sieve-based search (approach E): coded mentions first, then vocabulary + coded mentions.

For each query:

1. **exact** -- its :func:`~termnorm.text.normalize.normalize` form equals a
   coded mention's: take that mention's terms (score 1.0);
2. **coded** -- else, the nearest coded mention (D-T search) has cosine >=
   ``threshold``: take its terms (score = that cosine);
3. **search** -- else, search vocabulary forms + coded mentions (OD-T) and
   return the top k terms.

Steps 1-2 answer with the *whole* term set of the coded mention, which is how
multi-term mentions seen before get all their terms. A new coded mention or
synonym (``add_coded_mention`` / ``add_synonym``) is just one more vector: it
takes effect on the next query, no retraining (approach E's key property).

``threshold``: approach E used cosine >= 0.95; :data:`SIEVE_THRESHOLD` keeps it,
with the held-out measurement next to its definition. Re-measure per encoder
and vocabulary with :func:`calibrate_threshold`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from termnorm.dense.index import DenseRecaller
from termnorm.recall.base import Hits
from termnorm.records import LabelledMention
from termnorm.text.normalize import normalize

# Approach E's published value (cosine >= 0.95 on D-T), kept after measuring it.
# Yidu-N7K, multilingual-e5-small after 21 NCE steps, train.xlsx (3,988 distinct
# mentions) as coded mentions, val.xlsx held out (987 mentions without an exact
# match), exact-set accuracy of the sieve answer:
#   no sieve 0.8075 | t=0.80 0.7862 | 0.86 0.7953 | 0.92 0.8065 | 0.95 0.8065
#   (492 sieved, precision 0.919) | 0.98 0.8075 | 0.995 0.8085 (118 sieved).
# Everything from 0.92 up is within 2 of 987 mentions (noise); lower thresholds
# hurt. 0.95 keeps the sieve's benefit -- the coded mention's *whole* term set --
# at 92% precision. Command: `python -m termnorm.dense.train --vocab code.txt
# --train train.xlsx --val val.xlsx --encoder e5-small --objective nce --epochs 1
# --lr 5e-5 --threads 1 --max-seconds 780 --calibrate-sieve --out DIR` (config.json "sieve").
SIEVE_THRESHOLD = 0.95


@dataclass
class SieveResult:
    """One query's sieve answer. ``source``: "exact", "coded" or "search"."""

    hits: Hits
    source: str
    matched: str | None = None  # the coded mention that answered (exact / coded)
    similarity: float | None = None  # cosine to the nearest coded mention
    sieved: list[int] = field(default_factory=list)  # term ids taken from the coded mention


class Sieve(DenseRecaller):
    """Approach E's sieve over a :class:`DenseRecaller`'s two indexes (score key ``"sieve"``)."""

    name = "sieve"

    def __init__(self, encoder, threshold: float = SIEVE_THRESHOLD, index_kind: str = "auto", batch_size: int = 256):
        super().__init__(encoder, index_kind=index_kind, use_history=True, batch_size=batch_size)
        self.threshold = float(threshold)

    def search_batch(self, queries: list[str], k: int) -> list[SieveResult]:
        self._need_fit()
        qvecs = self.encoder.encode_queries(queries, self.batch_size)
        od_ids, od_sc = self.search_vectors(qvecs, k)
        if len(self.mention_index):
            d_ids, d_sc = self.mention_index.search(qvecs, 1)
        else:
            d_ids = np.full((len(queries), 1), -1, dtype=np.int64)
            d_sc = np.full((len(queries), 1), -np.inf, dtype=np.float32)
        out = []
        for r, q in enumerate(queries):
            search_hits = [(int(t), float(s)) for t, s in zip(od_ids[r], od_sc[r]) if t >= 0]
            cid = self._coded_by_key.get(normalize(q))
            sim = float(d_sc[r, 0]) if d_ids[r, 0] >= 0 else None
            if cid is not None:
                out.append(self._sieved(cid, 1.0, "exact", search_hits, k, sim))
            elif sim is not None and sim >= self.threshold:
                out.append(self._sieved(int(d_ids[r, 0]), sim, "coded", search_hits, k, sim))
            else:
                out.append(SieveResult(search_hits, "search", similarity=sim))
        return out

    def _sieved(self, cid: int, score: float, source: str, search_hits: Hits, k: int, sim) -> SieveResult:
        terms = list(dict.fromkeys(self.coded_terms[cid]))
        hits = [(t, score) for t in terms] + [(t, s) for t, s in search_hits if t not in terms]
        return SieveResult(hits[:max(k, len(terms))], source, self.coded_texts[cid], sim, terms)

    def recall_batch(self, queries: list[str], k: int) -> list[Hits]:
        """Sieved terms first (score 1.0 exact / cosine), then the OD search to fill k."""
        return [r.hits for r in self.search_batch(queries, k)]


def calibrate_threshold(sieve: Sieve, heldout: list[LabelledMention], grid=None,
                        query_vecs: np.ndarray | None = None) -> dict:
    """Choose the D-T cosine threshold that maximises exact-set accuracy of the sieve on held-out mentions.

    ``query_vecs``: the held-out mentions' encodings if the caller has them.

    For every held-out mention that has no exact coded match: ``s`` = cosine to
    its nearest coded mention, ``coded_ok`` = that mention's term set equals the
    gold set, ``search_ok`` = the OD search's top-1 term is the whole gold set.
    For a threshold t the sieve is right on ``coded_ok`` where s >= t and on
    ``search_ok`` elsewhere; the best t over ``grid`` (default 0.80..0.995) wins
    (ties -> the higher, more conservative t). Returns the table and the choice.
    """
    sieve._need_fit()
    vocab = sieve.vocab
    keep = [i for i, m in enumerate(heldout) if normalize(m.text) not in sieve._coded_by_key]
    rows = [heldout[i] for i in keep]
    if not rows or not len(sieve.mention_index):
        return {"threshold": sieve.threshold, "n": 0, "table": []}
    if query_vecs is not None and len(query_vecs) == len(heldout):
        qvecs = query_vecs[keep]
    else:
        qvecs = sieve.encoder.encode_queries([m.text for m in rows], sieve.batch_size)
    d_ids, d_sc = sieve.mention_index.search(qvecs, 1)
    od_ids, _ = sieve.search_vectors(qvecs, 1)
    gold = [frozenset(t for t in (vocab.get_id(x) for x in m.terms) if t is not None) for m in rows]
    s = d_sc[:, 0]
    coded_ok = np.array([d_ids[i, 0] >= 0 and frozenset(sieve.coded_terms[d_ids[i, 0]]) == g
                         for i, g in enumerate(gold)])
    search_ok = np.array([frozenset([int(od_ids[i, 0])]) == g for i, g in enumerate(gold)])
    grid = np.round(np.arange(0.80, 0.9951, 0.005), 3) if grid is None else np.asarray(grid)
    table = []
    for t in grid:
        take = s >= t
        acc = float(np.where(take, coded_ok, search_ok).mean())
        prec = float(coded_ok[take].mean()) if take.any() else float("nan")
        table.append({"threshold": float(t), "accuracy": acc, "sieved": int(take.sum()), "sieve_precision": prec})
    best = max(table, key=lambda r: (r["accuracy"], r["threshold"]))
    return {"threshold": best["threshold"], "accuracy": best["accuracy"], "n": len(rows),
            "accuracy_without_sieve": float(search_ok.mean()), "table": table}
