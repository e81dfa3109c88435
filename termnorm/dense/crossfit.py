"""Cross-fitted bi-encoders: out-of-fold dense scores for the GBM's own training mentions.

A bi-encoder trained on the labelled mentions puts their gold terms near the
top of its ranking with a cosine it will never reach on a new mention. The GBM
ranker learns how far to trust the dense score (``dense``) from the K-fold
candidates of those same mentions, so it would learn to trust an in-sample
cosine. ``termnorm train recall --folds K`` therefore trains K bi-encoders,
encoder k without the mentions of fold k (the fold of a mention is the hash of
:func:`termnorm.rank.crossfit.fold_of_text`, as for the cross-fitted
cross-encoder): a training mention is searched with the encoder that never saw
it, any other mention with all K.

:class:`CrossFitBiEncoder` does this inside one FAISS index. A surface form is
the concatenation of its K encodings, each scaled by 1/sqrt(K) (a unit row); a
new mention is the concatenation of its K query encodings, also scaled by
1/sqrt(K), so the inner product is the *mean* of the K cosines; a training
mention of fold k has only slot k filled, scaled by sqrt(K), so the inner
product is encoder k's cosine alone. The dense recall strategy, its index and
the engine use it like a single :class:`~termnorm.dense.biencoder.BiEncoder`.

Folder layout (``folds.json`` marks it, the format of the cross-fitted ranker)::

    folds.json     {"format": "termnorm-crossfit/1", "folds": K, "fold_of": {normalized mention: k}}
    fold0/ ...     BiEncoder folders (:meth:`BiEncoder.save`), encoder k trained without fold k
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from termnorm.dense.biencoder import CONFIG_NAME, BiEncoder
from termnorm.rank.crossfit import FOLDS_FILE, CrossFit


def dense_saved(folder: Path) -> bool:
    """A complete fold model: a :meth:`BiEncoder.save` folder, or a ``termnorm train recall`` output folder
    (its ``config.json`` is written last)."""
    return (folder / CONFIG_NAME).is_file() or ((folder / "config.json").is_file()
                                                and (folder / "model" / CONFIG_NAME).is_file())


class CrossFitBiEncoder(CrossFit):
    """K bi-encoders, each blind to one fold of the training mentions; encodes like one :class:`BiEncoder`
    of dimension K x d (see the module docstring for the scaling)."""

    what = "bi-encoder"
    saved = staticmethod(dense_saved)

    def __init__(self, models: Sequence[BiEncoder], fold_of: dict[str, int]):
        super().__init__(models, fold_of)
        dims = {m.dim for m in self.models}
        if len(dims) != 1:
            raise ValueError(f"the fold models disagree on the embedding size: {sorted(dims)}")

    @property
    def dim(self) -> int:
        return self.folds * self.models[0].dim

    @property
    def source(self) -> str:
        return self.models[0].source

    @property
    def count_head(self):
        return self.models[0].count_head

    # ---- encoding ---------------------------------------------------------------
    def encode_terms(self, texts: Sequence[str], batch_size: int = 256, progress: bool = False) -> np.ndarray:
        """Vocabulary forms: the K encodings side by side, each scaled by 1/sqrt(K) (unit rows)."""
        parts = [m.encode_terms(texts, batch_size, progress) for m in self.models]
        return np.ascontiguousarray(np.hstack(parts) / np.sqrt(self.folds), dtype=np.float32)

    def encode_queries(self, texts: Sequence[str], batch_size: int = 256, progress: bool = False) -> np.ndarray:
        """Mentions: all K slots (/sqrt(K), inner product with a form = mean cosine) for a new mention; only
        the blind encoder's slot (x sqrt(K), inner product = its cosine) for a training mention."""
        texts = list(texts)
        K, d = self.folds, self.models[0].dim
        out = np.zeros((len(texts), K * d), dtype=np.float32)
        folds = np.array([self.fold(t) for t in texts], dtype=np.int64)
        for k, m in enumerate(self.models):
            rows = np.flatnonzero((folds < 0) | (folds == k))
            if len(rows) == 0:
                continue
            vecs = m.encode_queries([texts[i] for i in rows], batch_size, progress)
            scale = np.where(folds[rows] == k, np.sqrt(K), 1 / np.sqrt(K)).astype(np.float32)
            out[rows, k * d:(k + 1) * d] = vecs * scale[:, None]
        return out

    def predict_count(self, mentions: Sequence[str], batch_size: int = 256) -> tuple[np.ndarray, np.ndarray]:
        """Count head: the blind encoder's for a training mention, the mean of the K for any other."""
        mentions = list(mentions)
        folds = np.array([self.fold(t) for t in mentions], dtype=np.int64)
        prob = np.zeros((len(mentions), 3), dtype=np.float64)
        for k, m in enumerate(self.models):  # each encoder only on the mentions it scores
            rows = np.flatnonzero((folds < 0) | (folds == k))
            if len(rows):
                p = m.predict_count([mentions[i] for i in rows], batch_size)[1]
                prob[rows] += p * np.where(folds[rows] == k, 1.0, 1 / self.folds)[:, None]
        return prob.argmax(1) + 1, prob

    @classmethod
    def _load_model(cls, folder: Path, **kw):
        return BiEncoder.load(folder, **kw)


def load_dense(folder, device: str | None = None):
    """A dense folder written by ``termnorm train recall``: cross-fitted (``folds.json``) or one bi-encoder."""
    folder = Path(folder)
    if (folder / FOLDS_FILE).is_file():
        return CrossFitBiEncoder.load(folder, device=device)
    return BiEncoder.load(folder, device=device)
