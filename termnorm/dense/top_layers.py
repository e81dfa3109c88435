"""Train only the top layers of a transformer bi-encoder, reading the lower layers' output from a cache.

Why: on the 2-core CPU the synonym encoder's limit is speed. All 12 layers of e5-small forward and back
get through a sixth of one pass over MEDIC's 64,199 synonym pairs in 30 minutes (docs/benchmarks.md).
With the lower layers frozen, a text's output of them never changes: it is computed once (no gradient,
kept in half precision) and a step runs only the top ``k`` layers forward and back. After training the
model is whole again: the top layers' new weights sit in the same model, so it is saved and loaded as
any other. Written by hand because sentence-transformers trains the whole stack or freezes parameters
but still runs every layer each step.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch


class TopLayerTrainer:
    """``embed`` as :meth:`BiEncoder.embed`, with every layer below the top ``top`` frozen and cached."""

    def __init__(self, model, top: int):
        st = model.model
        hf = None if model.is_static else st.transformers_model
        layers = getattr(getattr(hf, "encoder", None), "layer", None)
        if layers is None:  # a static bag of pieces has no layers
            raise ValueError("top-layer training needs a BERT-like encoder (model.encoder.layer)")
        if not 1 <= top < len(layers):
            raise ValueError(f"top must be in 1..{len(layers) - 1} for a {len(layers)}-layer encoder, got {top}")
        self.model, self.hf, self.top = model, hf, int(top)
        self.split = len(layers) - self.top
        self.query_prefix, self.passage_prefix = model.query_prefix, model.passage_prefix
        trainable = {id(p) for layer in layers[self.split:] for p in layer.parameters()}
        for p in st.parameters():
            p.requires_grad_(id(p) in trainable)
        self._cache: dict[str, torch.Tensor] = {}  # prefixed text -> [tokens, dim] output of the lower layers
        self.computed = 0  # texts whose lower layers were run (a cache miss each)

    def _fill(self, texts: list[str]) -> None:
        """Run the lower layers once for the texts not cached yet (eval mode, no gradient)."""
        todo = list(dict.fromkeys(t for t in texts if t not in self._cache))
        if not todo:
            return
        st, was_training = self.model.model, self.hf.training
        self.hf.eval()
        with torch.no_grad():
            for s in range(0, len(todo), 256):
                chunk = todo[s:s + 256]
                feats = st.preprocess(chunk)
                ids, mask = feats["input_ids"].to(self.model.device), feats["attention_mask"].to(self.model.device)
                extra = {"token_type_ids": feats["token_type_ids"].to(self.model.device)} \
                    if "token_type_ids" in feats else {}
                h = self._layers(self.hf.embeddings(input_ids=ids, **extra), mask, self.hf.encoder.layer[:self.split])
                for i, t in enumerate(chunk):
                    self._cache[t] = h[i, : int(mask[i].sum())].to(torch.float16).cpu()
        self.computed += len(todo)
        self.hf.train(was_training)

    def _layers(self, h: torch.Tensor, mask: torch.Tensor, layers) -> torch.Tensor:
        """``layers`` of the encoder over hidden states ``h`` with padding ``mask``, as the model's forward does."""
        from transformers.masking_utils import create_bidirectional_mask

        att = create_bidirectional_mask(config=self.hf.config, inputs_embeds=h, attention_mask=mask)
        for layer in layers:
            out = layer(h, attention_mask=att)
            h = out[0] if isinstance(out, tuple) else out
        return h

    def embed(self, texts: Sequence[str], prefix: str = "") -> torch.Tensor:
        """Differentiable mean-pooled embeddings (not normalised), equal to the whole model's in eval mode."""
        keys = self.model._prep(texts, prefix)
        self._fill(keys)
        rows = [self._cache[k] for k in keys]
        dev = self.model.device
        h = torch.nn.utils.rnn.pad_sequence(rows, batch_first=True).float().to(dev)
        mask = (torch.arange(h.shape[1]) < torch.tensor([len(r) for r in rows])[:, None]).long().to(dev)
        h = self._layers(h, mask, self.hf.encoder.layer[self.split:])
        m = mask.unsqueeze(-1).to(h.dtype)
        return (h * m).sum(1) / m.sum(1).clamp(min=1e-9)

    def encode(self, texts: Sequence[str], prefix: str = "", batch_size: int = 256) -> np.ndarray:
        """Unit vectors as :meth:`BiEncoder.encode` gives, from the cache: mining and the final index read the
        same lower-layer outputs the steps do, so no text runs the lower layers twice."""
        if len(texts) == 0:
            return np.zeros((0, self.model.dim), dtype=np.float32)
        was_training = self.hf.training
        self.hf.eval()
        order = np.argsort([len(t) for t in texts], kind="stable")  # batches of like lengths pad little
        out = np.zeros((len(texts), self.model.dim), dtype=np.float32)
        with torch.no_grad():
            for s in range(0, len(texts), batch_size):
                rows = order[s:s + batch_size]
                v = self.embed([texts[i] for i in rows], prefix)
                out[rows] = torch.nn.functional.normalize(v.float(), dim=-1).cpu().numpy()
        self.hf.train(was_training)
        return out

    def encode_queries(self, texts: Sequence[str], batch_size: int = 256, progress: bool = False) -> np.ndarray:
        return self.encode(texts, self.query_prefix, batch_size)

    def encode_terms(self, texts: Sequence[str], batch_size: int = 256, progress: bool = False) -> np.ndarray:
        return self.encode(texts, self.passage_prefix, batch_size)
