"""Dense recall from a table: a bi-encoder's top terms for every query text a run will ask, computed where the
encoder was trained (a lent GPU machine, ``benchmarks/gpu/dense_cv.py``) and looked up where the pipeline runs.

A GPU machine lends minutes and sends back at most a few small files: a fine-tuned encoder per outer fold does
not fit through that, its answers do. The table holds, per query text, the ``(term id, cosine)`` hits of
:class:`termnorm.dense.index.DenseRecaller` at the ``k`` the recall union asks a dense strategy for
(``termnorm.recall.union.OTHER_K``), so the engine recalls exactly what the live encoder would have. A text
the table lacks is an error, never an empty answer: an incomplete collection must not pass for a weak encoder.

File (``numpy.savez_compressed``): ``format``, ``k``, ``ids`` / ``scores`` ``[n, k]`` (-1 pads),
``queries`` and ``names`` as NUL-joined UTF-8 (``names``: the vocabulary's names by term id, checked on
use so a table is never read against another vocabulary). The engine adds to its vocabulary the gold names
of coded mentions that it lacks (``termnorm.recall.history.add_history_terms``), after the names it was built
from; a table written before those were added is read against them, and ``unindexed`` says how many names
at the end it can never answer with (a live encoder would have indexed them too).
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from termnorm.recall.base import Hits, Recaller
from termnorm.records import LabelledMention
from termnorm.vocabulary import Vocabulary

FORMAT = "termnorm-dense-table/1"


def _join(texts: Sequence[str]) -> np.ndarray:
    return np.frombuffer("\0".join(texts).encode("utf-8"), dtype=np.uint8)


def _split(raw: np.ndarray) -> list[str]:
    return raw.tobytes().decode("utf-8").split("\0") if raw.size else []


def write_table(path, queries: Sequence[str], hits: Sequence[Hits], names: Sequence[str], k: int) -> Path:
    """Write the hits of ``queries`` (each at most ``k``) for the vocabulary whose names by id are ``names``."""
    if any("\0" in q for q in queries):
        raise ValueError("a query text holds a NUL character")
    ids = np.full((len(queries), k), -1, dtype=np.int32)
    scores = np.zeros((len(queries), k), dtype=np.float32)
    for r, h in enumerate(hits):
        for c, (t, s) in enumerate(h[:k]):
            ids[r, c], scores[r, c] = t, s
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".part.npz")
    np.savez_compressed(tmp, format=np.array(FORMAT), k=np.array(k), ids=ids, scores=scores,
                        queries=_join(list(queries)), names=_join(list(names)))
    tmp.replace(path)  # written whole or not at all: a killed run leaves no table that looks complete
    return path


class DenseTable(Recaller):
    """Dense recall (score key ``"dense"``) answered from a table written by :func:`write_table`; given to
    ``Engine(dense=...)`` in place of a bi-encoder, it is the engine's dense strategy itself."""

    name = "dense"

    def __init__(self, path):
        self.path = Path(path)
        with np.load(self.path) as z:
            if str(z["format"]) != FORMAT:
                raise ValueError(f"{self.path}: not a dense table ({str(z['format'])!r})")
            self.k, self.ids, self.scores = int(z["k"]), z["ids"], z["scores"]
            self.queries, self.names = _split(z["queries"]), _split(z["names"])
        self.row = {q: r for r, q in enumerate(self.queries)}
        self.unindexed = 0

    def fit(self, vocab: Vocabulary, history: list[LabelledMention] | None = None) -> "DenseTable":
        names = list(vocab.names)
        if names[:len(self.names)] != self.names:
            raise ValueError(f"{self.path}: written for another vocabulary ({len(self.names)} names, "
                             f"this one has {len(vocab.names)}, or they differ in order)")
        self.unindexed = len(names) - len(self.names)  # names added after the table's: never recalled here
        return self

    def recall_batch(self, queries: list[str], k: int) -> list[Hits]:
        if k > self.k:
            raise ValueError(f"{self.path}: asked for {k} hits a query, the table holds {self.k}")
        missing = [q for q in queries if q not in self.row]
        if missing:
            raise KeyError(f"{self.path}: {len(missing)} of {len(queries)} query texts are not in the table "
                           f"(first {missing[0]!r}); collect the queries again (benchmarks/gpu/dense_cv.py)")
        rows = [self.row[q] for q in queries]
        return [[(int(i), float(s)) for i, s in zip(self.ids[r, :k], self.scores[r, :k]) if i >= 0] for r in rows]
