"""Dense recall: bi-encoder, training objectives, FAISS indexes, count head and sieve.

Approaches A (MTCG + count head), D (BI-HARDNCE) and E (batch-hard triplet
space + sieve) of methods.md. Imports are lazy so ``import termnorm.dense``
does not load torch until a dense component is used.

>>> enc = BiEncoder.from_folder(model_folder)                        # doctest: +SKIP
>>> metrics = train_biencoder(enc, vocab, train, objective="nce")    # doctest: +SKIP
>>> recaller = DenseRecaller(enc).fit(vocab, history=train)          # doctest: +SKIP
>>> recaller.recall_batch(["右侧甲状腺肿瘤切除术"], k=10)             # doctest: +SKIP
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "BiEncoder": "biencoder", "CountHead": "biencoder", "fit_count_head": "biencoder",
    "TermIndex": "index", "DenseRecaller": "index",
    "Sieve": "sieve", "SieveResult": "sieve", "calibrate_threshold": "sieve", "SIEVE_THRESHOLD": "sieve",
    "train_biencoder": "train", "evaluate_recall": "train", "BiEncoderTrainConfig": "train_prep",
    "MultiLabelBatchHardSoftMarginTripletLoss": "losses",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    mod = _EXPORTS.get(name)
    if mod is None:
        raise AttributeError(f"module 'termnorm.dense' has no attribute {name!r}")
    return getattr(importlib.import_module(f"termnorm.dense.{mod}"), name)
