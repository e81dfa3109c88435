"""Measure what pruning buys: training-step and inference speed of an encoder.

Input: a model folder (the e5 build, a pruned or char-extended copy) and
mention / term strings. Output: median wall and CPU seconds of one
bi-encoder training step (approach D's symmetric in-batch InfoNCE), and
strings encoded per wall / CPU second -- the numbers quoted for pruning in
methods.md.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Sequence

import numpy as np

from termnorm.encoder.folder import _load_model


def time_training_step(folder: str | Path, mentions: Sequence[str], terms: Sequence[str], *,
                       steps: int = 3, batch: int = 32, freeze_embeddings: bool = False,
                       max_length: int = 32) -> dict[str, float]:
    """Median wall and CPU seconds of one bi-encoder training step.

    One step = ``batch`` (mention, term) pairs through the shared encoder
    (E5 prefixes, mean pooling), symmetric in-batch InfoNCE (approach D,
    scale 20), backward, AdamW update -- with the word-embedding table
    trainable unless ``freeze_embeddings``. One warm-up step is not timed.
    CPU seconds (``time.process_time``) are the figure to compare on a
    shared machine, where wall time mostly measures the neighbours.
    """
    import torch

    from transformers import AutoTokenizer

    from termnorm.encoder.provider import pool_hidden

    folder = Path(folder)
    tok = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    model = _load_model(folder).train()
    model.get_input_embeddings().weight.requires_grad_(not freeze_embeddings)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=2e-5)
    wall, cpu = [], []
    for s in range(steps + 1):
        lo = (s * batch) % max(1, len(mentions) - batch)
        m = tok(["query: " + t for t in mentions[lo:lo + batch]], padding=True, truncation=True,
                max_length=max_length, return_tensors="pt")
        t = tok(["passage: " + t for t in terms[lo:lo + batch]], padding=True, truncation=True,
                max_length=max_length, return_tensors="pt")
        w0, c0 = time.perf_counter(), time.process_time()
        em = pool_hidden(model(input_ids=m.input_ids, attention_mask=m.attention_mask)
                         .last_hidden_state, m.attention_mask)
        et = pool_hidden(model(input_ids=t.input_ids, attention_mask=t.attention_mask)
                         .last_hidden_state, t.attention_mask)
        em, et = torch.nn.functional.normalize(em, dim=-1), torch.nn.functional.normalize(et, dim=-1)
        sim = 20.0 * em @ et.T
        labels = torch.arange(len(sim))
        loss = (torch.nn.functional.cross_entropy(sim, labels)
                + torch.nn.functional.cross_entropy(sim.T, labels)) / 2
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if s:
            wall.append(time.perf_counter() - w0)
            cpu.append(time.process_time() - c0)
    return {"wall_s": float(np.median(wall)), "cpu_s": float(np.median(cpu))}


def time_inference(folder: str | Path, texts: Sequence[str], batch_size: int = 64) -> dict[str, float]:
    """Strings per wall second and per CPU second of :func:`provider.encode`."""
    from termnorm.encoder.provider import encode, load_encoder

    tok, model = load_encoder(folder, progress=False)
    encode(texts[:batch_size], tok, model)  # warm-up
    w0, c0 = time.perf_counter(), time.process_time()
    encode(texts, tok, model, batch_size=batch_size)
    return {"per_wall_s": len(texts) / (time.perf_counter() - w0),
            "per_cpu_s": len(texts) / (time.process_time() - c0)}
