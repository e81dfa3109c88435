"""Keyword-attentive cross-encoder ranker (KAR, approach A of methods.md).

The ranker reads one (mention, candidate term) pair as

    [CLS] [PS] [PT] mention [SEP] candidate [SEP]

and outputs P(candidate is a gold term of the mention). The two added slot
tokens see only keywords: [PS] may attend only to body-site tokens (of both
texts), [PT] only to procedure-type tokens; [CLS] and the ordinary tokens
attend to every non-pad token. The final hidden states of [CLS], [PS] and [PT]
are averaged, then FFN + sigmoid, trained with binary cross-entropy
(see :mod:`termnorm.rank.train`). Approach A reports 91.47 exact-set accuracy
with KAR vs 90.1 with a plain cross-encoder in its place.

Input data (one row per pair; ``label`` only in training):

    | mention            | candidate        | label |
    |--------------------|------------------|-------|
    | 右侧甲状腺肿瘤切除术 | 甲状腺病损切除术   | 1     |
    | 右侧甲状腺肿瘤切除术 | 甲状腺探查术       | 0     |

The slot keyword kinds are configurable: ``slots=("site", "type")`` for
procedures, ``("site", "nature")`` for diagnoses (one slot token per kind, see
``SLOT_TOKENS``). ``keyword_attention=False`` gives the plain cross-encoder
``[CLS] mention [SEP] candidate [SEP]`` scored from [CLS] only, for the
ablation (approach B's ranker).

Relation to sentence-transformers: its ``CrossEncoder`` feeds the model the
tokenizer's 2-D padding mask and scores one pooled vector; KAR needs a
per-example [B, L, L] mask and the three-state pooling, so this module is the
small torch wrapper that ``CrossEncoder`` lacks, around any local Hugging Face
BERT-like folder (the multilingual-e5-small rebuild, or the tiny test encoder).

How the mask reaches the encoder (checked on transformers 5.23): BertModel
passes a 4-D mask through unchanged (``masking_utils._preprocess_mask_arguments``),
and the eager and sdpa attention functions both accept it: eager adds a float
mask to the scores, sdpa takes a boolean "may attend" mask. So we hand it a
[B, 1, L, L] mask of the right kind for the model's attention implementation.
transformers 4.x instead expands a 3-D 0/1 mask itself
(``get_extended_attention_mask``), which is what we pass there.
``tests/test_rank.py`` checks that the restriction really holds.
"""

from __future__ import annotations

import json
import pickle
import time
from collections import OrderedDict
from pathlib import Path
from typing import Protocol, Sequence

import numpy as np
import torch
from torch import nn

from termnorm.records import KEYWORD_KINDS, KeywordSpan

# One added token per keyword kind a slot can watch.
SLOT_TOKENS = {"site": "[PS]", "type": "[PT]", "nature": "[PN]", "approach": "[PA]", "laterality": "[PL]"}

# Mentions average ~12 characters and terms ~9 (methods.md); with 3 leading and
# 2 separator tokens 48 positions hold 99%+ of Yidu-N7K pairs untruncated and
# keep CPU latency low (attention cost grows with L^2, the rest with L).
DEFAULT_MAX_LENGTH = 48

_CONFIG_FILE = "ranker.json"
_HEAD_FILE = "head.pt"
_TAGGER_FILE = "tagger.pkl"
_ENCODER_DIR = "encoder"


class Tagger(Protocol):
    """What the ranker needs from ``termnorm.text.keywords.KeywordTagger``."""

    def tag(self, text: str) -> list[KeywordSpan]: ...


def _transformers_major() -> int:
    import transformers

    return int(transformers.__version__.split(".")[0])


# ---------------------------------------------------------------------------
# the mask


def keyword_attention_mask(attention_mask: torch.Tensor, slot_keywords: torch.Tensor,
                           slot_positions: Sequence[int]) -> torch.Tensor:
    """Per-example [B, L, L] boolean "query i may attend key j" mask of KAR.

    ``attention_mask`` [B, L] marks real (non-pad) tokens; ``slot_keywords``
    [B, S, L] marks, for slot s, the tokens that belong to a keyword of that
    slot's kind; ``slot_positions[s]`` is where slot s's token sits. Every row
    attends to all real tokens, except the slot rows, which attend only to their
    keyword tokens, or to themselves when the pair has no such keyword (an empty
    row would make the softmax undefined).
    """
    valid = attention_mask.bool()
    b, L = valid.shape
    keep = valid[:, None, :].expand(b, L, L).clone()
    for s, p in enumerate(slot_positions):
        kw = slot_keywords[:, s, :].bool() & valid
        empty = ~kw.any(dim=-1)
        kw[empty, p] = True
        keep[:, p, :] = kw
    return keep


def to_encoder_mask(keep: torch.Tensor, attn_implementation: str | None, dtype: torch.dtype) -> torch.Tensor:
    """Turn a [B, L, L] boolean mask into what the installed BertModel accepts."""
    if _transformers_major() < 5:
        return keep.long()  # 4.x: get_extended_attention_mask expands 3-D masks
    keep4 = keep[:, None, :, :]
    if attn_implementation == "eager":
        # eager attention adds the mask to the scores
        zero = torch.zeros((), dtype=dtype, device=keep.device)
        neg = torch.full((), torch.finfo(dtype).min, dtype=dtype, device=keep.device)
        return torch.where(keep4, zero, neg)
    return keep4  # sdpa (and flex) read a boolean mask: True = may attend


# ---------------------------------------------------------------------------
# the torch module


class KARModule(nn.Module):
    """Encoder + slot pooling + FFN head; returns one logit per pair."""

    def __init__(self, encoder: nn.Module, n_slots: int, keyword_attention: bool = True, dropout: float = 0.1):
        super().__init__()
        self.encoder = encoder
        self.n_slots = n_slots if keyword_attention else 0
        self.keyword_attention = keyword_attention
        h = encoder.config.hidden_size
        self.head = nn.Sequential(nn.Dropout(dropout), nn.Linear(h, h), nn.GELU(), nn.Dropout(dropout),
                                  nn.Linear(h, 1))

    def encoder_mask(self, attention_mask: torch.Tensor, slot_keywords: torch.Tensor | None) -> torch.Tensor:
        if not self.keyword_attention:
            return attention_mask
        keep = keyword_attention_mask(attention_mask, slot_keywords, range(1, 1 + self.n_slots))
        dtype = self.encoder.get_input_embeddings().weight.dtype
        return to_encoder_mask(keep, getattr(self.encoder.config, "_attn_implementation", None), dtype)

    def forward(self, input_ids, attention_mask, token_type_ids=None, slot_keywords=None) -> torch.Tensor:
        kwargs = {}
        if token_type_ids is not None:
            kwargs["token_type_ids"] = token_type_ids
        out = self.encoder(input_ids=input_ids, attention_mask=self.encoder_mask(attention_mask, slot_keywords),
                           **kwargs).last_hidden_state
        pooled = out[:, : 1 + self.n_slots].mean(dim=1)  # [CLS] (+ [PS], [PT]) averaged
        return self.head(pooled).squeeze(-1)


# ---------------------------------------------------------------------------
# the ranker


class RankerModel:
    """A trained (or untrained) KAR ranker with its tokenizer and keyword tagger.

    Knobs: ``slots`` (keyword kinds the slot tokens watch, default site and
    procedure type as in approach A), ``keyword_attention`` (False: plain
    cross-encoder for the ablation), ``max_length`` (see DEFAULT_MAX_LENGTH).
    Build with :meth:`from_encoder`, train with
    :func:`termnorm.rank.train.train_ranker`, score with :meth:`score`.
    """

    def __init__(self, module: KARModule, tokenizer, tagger: Tagger | None = None,
                 slots: Sequence[str] = ("site", "type"), keyword_attention: bool = True,
                 max_length: int = DEFAULT_MAX_LENGTH, device: str | torch.device | None = None,
                 cache_size: int = 200_000):
        if keyword_attention and tagger is None:
            raise ValueError("keyword_attention=True needs a keyword tagger (an object with tag(text))")
        _check_slots(slots)
        if not getattr(tokenizer, "is_fast", False):
            raise ValueError("KAR needs a fast tokenizer (offset mapping) for keyword positions")
        self.module = module
        self.tokenizer = tokenizer
        self.tagger = tagger
        self.slots = tuple(slots)
        self.keyword_attention = keyword_attention
        self.max_length = max_length
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self.module.to(self.device)
        self.quantized = False
        self._cache: OrderedDict[str, tuple[list[int], np.ndarray]] = OrderedDict()
        self._cache_size = cache_size
        self._slot_ids = [tokenizer.convert_tokens_to_ids(SLOT_TOKENS[s]) for s in self.slots] \
            if keyword_attention else []
        self._cls = tokenizer.cls_token_id if tokenizer.cls_token_id is not None else tokenizer.bos_token_id
        self._sep = tokenizer.sep_token_id if tokenizer.sep_token_id is not None else tokenizer.eos_token_id
        self._pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        self._use_types = getattr(module.encoder.config, "type_vocab_size", 1) > 1

    # ---- construction ----------------------------------------------------
    @classmethod
    def from_encoder(cls, encoder_dir, tagger: Tagger | None = None, *, slots: Sequence[str] = ("site", "type"),
                     keyword_attention: bool = True, max_length: int = DEFAULT_MAX_LENGTH,
                     num_layers: int | None = None, attn_implementation: str | None = None,
                     dropout: float = 0.1, seed: int = 0, device=None) -> "RankerModel":
        """A fresh ranker on a local encoder folder (head randomly initialised).

        ``num_layers`` keeps only the first N transformer layers: approach A
        measured 8 of 12 layers costing 0.3 recall points for 1.4x speed.
        """
        from transformers import AutoTokenizer

        _check_slots(slots)
        torch.manual_seed(seed)
        tok = AutoTokenizer.from_pretrained(str(encoder_dir), use_fast=True)
        kw = {"attn_implementation": attn_implementation} if attn_implementation else {}
        enc = _load_encoder(encoder_dir, **kw)
        if num_layers is not None:
            _keep_first_layers(enc, num_layers)
        if keyword_attention:
            _add_slot_tokens(tok, enc, [SLOT_TOKENS[s] for s in slots])
        module = KARModule(enc, len(slots), keyword_attention, dropout)
        return cls(module, tok, tagger, slots, keyword_attention, max_length, device)

    # ---- encoding -------------------------------------------------------
    def _encode_texts(self, texts: Sequence[str]) -> list[tuple[list[int], np.ndarray]]:
        """Token ids and a [S, n_tokens] keyword-slot flag matrix per text (cached)."""
        todo = [t for t in dict.fromkeys(texts) if t not in self._cache]
        if todo:
            enc = self.tokenizer(list(todo), add_special_tokens=False, return_offsets_mapping=True)
            for t, ids, offs in zip(todo, enc["input_ids"], enc["offset_mapping"]):
                flags = np.zeros((len(self.slots), len(ids)), dtype=bool)
                if self.keyword_attention and ids:
                    flags = _keyword_flags(self.tagger.tag(t), offs, self.slots)
                self._cache[t] = (list(ids), flags)
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return [self._cache[t] for t in texts]

    def encode_pairs(self, mentions: Sequence[str], candidates: Sequence[str]) -> dict[str, torch.Tensor]:
        """Batch tensors for pairs: input_ids, attention_mask, token_type_ids, slot_keywords (numpy arrays
        filled row by row, a tensor each at the end: a tensor per row made building a batch the GPU's bound)."""
        m_enc, c_enc = self._encode_texts(mentions), self._encode_texts(candidates)
        n_lead = 1 + len(self._slot_ids)
        lens = [_trimmed(len(mi), len(ci), self.max_length - n_lead - 2) for (mi, _), (ci, _) in zip(m_enc, c_enc)]
        ends = np.array([n_lead + 2 + lm + lc for lm, lc in lens], dtype=np.int64)
        b, L = len(lens), int(ends.max())
        ids = np.full((b, L), self._pad, dtype=np.int64)
        types = np.zeros((b, L), dtype=np.int64)
        kw = np.zeros((b, len(self.slots), L), dtype=bool)
        ids[:, 0], ids[:, 1:n_lead] = self._cls, self._slot_ids
        for i, ((mi, mf), (ci, cf), (lm, lc)) in enumerate(zip(m_enc, c_enc, lens)):
            a = n_lead + lm  # the first [SEP]; the candidate's tokens and the last [SEP] are of type 1
            ids[i, n_lead:a], ids[i, a + 1:a + 1 + lc], ids[i, [a, a + 1 + lc]] = mi[:lm], ci[:lc], self._sep
            kw[i, :, n_lead:a], kw[i, :, a + 1:a + 1 + lc] = mf[:, :lm], cf[:, :lc]
            types[i, a + 1:a + 2 + lc] = self._use_types
        out = {"input_ids": torch.from_numpy(ids), "token_type_ids": torch.from_numpy(types),
               "attention_mask": torch.from_numpy((np.arange(L)[None, :] < ends[:, None]).astype(np.int64))}
        if self.keyword_attention:
            out["slot_keywords"] = torch.from_numpy(kw)
        return out

    # ---- scoring --------------------------------------------------------
    def logits(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        batch = {k: v.to(self.device) for k, v in batch.items()}
        return self.module(**batch)

    def score_pairs(self, mentions: Sequence[str], candidates: Sequence[str], batch_size: int = 64,
                    workers: int = 0) -> np.ndarray:
        """P(match) for each (mention, candidate) pair. ``workers`` > 0: that many processes build the batches
        (encode_pairs is Python per pair; on a GPU it, not the forward pass, sets the pace)."""
        out = np.zeros(len(mentions), dtype=np.float32)
        if not len(mentions):
            return out
        # batches of similar length waste less compute on padding
        order = np.argsort([len(m) + len(c) for m, c in zip(mentions, candidates)], kind="stable")
        groups = [order[i:i + batch_size] for i in range(0, len(order), batch_size)]

        def encoded(i):
            return groups[i], self.encode_pairs([mentions[j] for j in groups[i]], [candidates[j] for j in groups[i]])

        batches = map(encoded, range(len(groups))) if not workers else torch.utils.data.DataLoader(
            _Indexed(encoded, len(groups)), batch_size=None, num_workers=workers, prefetch_factor=4)
        was_training = self.module.training
        self.module.eval()
        with torch.inference_mode(), _autocast(self.device):
            for idx, batch in batches:
                out[np.asarray(idx)] = torch.sigmoid(self.logits(batch).float()).cpu().numpy()  # a tensor from a worker
        self.module.train(was_training)
        return out

    def score(self, mentions: Sequence[str], candidate_lists: Sequence[Sequence[str]],
              batch_size: int = 64, workers: int = 0) -> list[np.ndarray]:
        """P(match) of every candidate of every mention, one array per mention (``workers``: score_pairs')."""
        flat_m = [m for m, cs in zip(mentions, candidate_lists) for _ in cs]
        flat_c = [c for cs in candidate_lists for c in cs]
        probs = self.score_pairs(flat_m, flat_c, batch_size, workers)
        out, i = [], 0
        for cs in candidate_lists:
            out.append(probs[i:i + len(cs)])
            i += len(cs)
        return out

    # ---- speed ---------------------------------------------------------
    def quantize(self, which: str = "attention") -> "RankerModel":
        """Dynamic int8 quantisation of Linear layers (CPU inference only).

        ``which="attention"`` (default) quantises only the attention
        projections (query, key, value, attention output); ``"all"`` every
        Linear. Measured on the e5-small ranker (8 layers, 60 Yidu-N7K val
        mentions x 20 candidates): attention-only keeps the probabilities
        (correlation 0.996 with fp32, CPU time 190 vs 248 ms per 20 pairs); all
        layers break them (correlation 0.15, val top-1 0.47 -> 0.10), because
        the FFN inputs carry outlier features (max |x| 20-32 vs mean 0.1-0.5)
        that a per-tensor int8 scale cannot hold -- the known BERT FFN-outlier
        problem (Bondarenko et al., EMNLP 2021).
        """
        if self.device.type != "cpu":
            raise ValueError("dynamic int8 quantisation runs on CPU only")
        if which not in ("attention", "all"):
            raise ValueError(f"which must be 'attention' or 'all', got {which!r}")
        import warnings

        from torch.ao.quantization import default_dynamic_qconfig, quantize_dynamic

        self.module.eval()
        if which == "all":
            spec = {nn.Linear}
        else:
            ends = ("query", "key", "value", "attention.output.dense")
            spec = {n: default_dynamic_qconfig for n, m in self.module.named_modules()
                    if isinstance(m, nn.Linear) and n.endswith(ends)}
        with warnings.catch_warnings():  # torch 2.13 deprecates quantized tensors in favour of torchao
            warnings.filterwarnings("ignore", message=".*quantize_per_tensor.*deprecated", category=UserWarning)
            warnings.filterwarnings("ignore", message=".*torch.ao.quantization is deprecated",
                                    category=DeprecationWarning)
            self.module = quantize_dynamic(self.module, spec, dtype=torch.qint8)
        self.quantized = True
        return self

    def latency(self, mention: str, candidates: Sequence[str], repeats: int = 30, warmup: int = 3) -> dict:
        """Wall time (ms) to re-rank one mention's candidates: p50, p95, mean."""
        for _ in range(warmup):
            self.score_pairs([mention] * len(candidates), list(candidates))
        times, cpu = [], []
        for _ in range(repeats):
            self._cache.clear()  # include tokenisation and keyword tagging
            t0, c0 = time.perf_counter(), time.process_time()
            self.score_pairs([mention] * len(candidates), list(candidates))
            times.append((time.perf_counter() - t0) * 1000)
            cpu.append((time.process_time() - c0) * 1000)
        t = np.array(times)
        # cpu_ms: CPU time of this process (all threads); on a busy shared machine the wall
        # time can be several times the cost on an idle one, the CPU time is not
        return {"p50_ms": float(np.percentile(t, 50)), "p95_ms": float(np.percentile(t, 95)),
                "mean_ms": float(t.mean()), "cpu_p50_ms": float(np.percentile(cpu, 50)),
                "threads": torch.get_num_threads(), "n_candidates": len(candidates), "repeats": repeats}

    # ---- persistence ----------------------------------------------------
    def save(self, folder) -> Path:
        """Write encoder + tokenizer, head, settings and the tagger to ``folder``."""
        if self.quantized:
            raise ValueError("save the float model before quantising (quantise again after load)")
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        self.module.encoder.save_pretrained(folder / _ENCODER_DIR)
        self.tokenizer.save_pretrained(folder / _ENCODER_DIR)
        torch.save(self.module.head.state_dict(), folder / _HEAD_FILE)
        cfg = {"slots": list(self.slots), "keyword_attention": self.keyword_attention,
               "max_length": self.max_length, "n_slots": len(self.slots),
               "dropout": float(self.module.head[0].p)}
        (folder / _CONFIG_FILE).write_text(json.dumps(cfg, indent=2), encoding="utf-8")
        if self.tagger is not None:
            try:
                (folder / _TAGGER_FILE).write_bytes(pickle.dumps(self.tagger))
            except (pickle.PicklingError, TypeError, AttributeError):
                pass  # load() then needs the tagger passed in
        return folder

    @classmethod
    def load(cls, folder, tagger: Tagger | None = None, device=None, quantize: bool | str = False) -> "RankerModel":
        """Inverse of :meth:`save`; ``tagger`` overrides the stored one; ``quantize``: True or
        ``"attention"`` / ``"all"`` (see :meth:`quantize`)."""
        from transformers import AutoTokenizer

        folder = Path(folder)
        cfg = json.loads((folder / _CONFIG_FILE).read_text(encoding="utf-8"))
        tok = AutoTokenizer.from_pretrained(str(folder / _ENCODER_DIR), use_fast=True)
        enc = _load_encoder(folder / _ENCODER_DIR)
        module = KARModule(enc, cfg["n_slots"], cfg["keyword_attention"], cfg.get("dropout", 0.1))
        module.head.load_state_dict(torch.load(folder / _HEAD_FILE, map_location="cpu"))
        if tagger is None and cfg["keyword_attention"] and (folder / _TAGGER_FILE).exists():
            tagger = pickle.loads((folder / _TAGGER_FILE).read_bytes())
        model = cls(module, tok, tagger, cfg["slots"], cfg["keyword_attention"], cfg["max_length"], device)
        model.module.eval()
        if quantize:
            return model.quantize("attention" if quantize is True else quantize)
        return model


# ---------------------------------------------------------------------------
# helpers


class _Indexed(torch.utils.data.Dataset):
    """``fn(0) .. fn(n - 1)`` as a dataset (DataLoader workers are forked: ``fn`` needs no pickling)."""

    def __init__(self, fn, n: int):
        self.fn, self.n = fn, n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i):
        return self.fn(i)


def _check_slots(slots: Sequence[str]) -> None:
    for s in slots:
        if s not in KEYWORD_KINDS:
            raise ValueError(f"unknown keyword kind {s!r}; expected one of {KEYWORD_KINDS}")
    if len(set(slots)) != len(slots):
        raise ValueError(f"slots must be distinct, got {tuple(slots)}")


def _trimmed(lm: int, lc: int, budget: int) -> tuple[int, int]:
    """Token counts kept of a mention and a candidate: the longer one (the mention on a tie) trimmed from its end
    a token at a time until both fit ``budget``."""
    excess, d, short = lm + lc - budget, abs(lm - lc), min(lm, lc)
    if excess <= 0:
        return lm, lc
    if excess <= d:
        return (lm - excess, lc) if lm >= lc else (lm, lc - excess)
    return short - (excess - d + 1) // 2, short - (excess - d) // 2


def _keyword_flags(spans: Sequence[KeywordSpan], offsets, slots: Sequence[str]) -> np.ndarray:
    """[S, n_tokens]: token overlaps a keyword span of slot s's kind (char offsets)."""
    offs = np.asarray(offsets, dtype=np.int64).reshape(-1, 2)
    flags = np.zeros((len(slots), len(offs)), dtype=bool)
    for span in spans:
        if span.kind not in slots:
            continue
        s = slots.index(span.kind)
        flags[s] |= (offs[:, 0] < span.end) & (offs[:, 1] > span.start) & (offs[:, 1] > offs[:, 0])
    return flags


def _add_slot_tokens(tokenizer, encoder, tokens: list[str]) -> None:
    """Add the slot tokens; their embedding rows start as copies of [CLS]'s."""
    new = [t for t in tokens if t not in tokenizer.get_vocab()]
    if not new:
        return
    tokenizer.add_tokens(new, special_tokens=True)
    old_n = encoder.get_input_embeddings().weight.shape[0]
    if len(tokenizer) > old_n:  # never shrinks: only grows here
        try:  # rows are overwritten below, so skip the costly mean/covariance init
            encoder.resize_token_embeddings(len(tokenizer), mean_resizing=False)
        except TypeError:
            encoder.resize_token_embeddings(len(tokenizer))
    cls_id = tokenizer.cls_token_id if tokenizer.cls_token_id is not None else tokenizer.bos_token_id
    emb = encoder.get_input_embeddings().weight
    with torch.no_grad():
        for t in new:
            emb[tokenizer.convert_tokens_to_ids(t)] = emb[cls_id]


def _keep_first_layers(encoder, n: int) -> None:
    layers = encoder.encoder.layer
    if not 1 <= n <= len(layers):
        raise ValueError(f"num_layers must be in 1..{len(layers)}, got {n}")
    encoder.encoder.layer = nn.ModuleList(list(layers)[:n])
    encoder.config.num_hidden_layers = n


def _load_encoder(folder, **kwargs):
    """AutoModel without its pooler (unused here), load reports silenced."""
    from transformers import AutoModel
    from transformers.utils import logging as hf_logging

    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # "pooler UNEXPECTED" is expected: we drop it
    try:
        try:
            return AutoModel.from_pretrained(str(folder), add_pooling_layer=False, **kwargs)
        except TypeError:
            return AutoModel.from_pretrained(str(folder), **kwargs)
    finally:
        hf_logging.set_verbosity(level)


def _autocast(device: torch.device):
    """Mixed precision on CUDA (bf16 where supported); a no-op on CPU."""
    if device.type == "cuda":
        dt = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        return torch.autocast("cuda", dtype=dt)
    return torch.autocast("cpu", enabled=False)
