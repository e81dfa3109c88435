"""A tiny randomly initialised BERT with a character vocabulary.

Used by tests and smoke runs to train real (but tiny) models in seconds. It is
a normal Hugging Face model folder, so every code path that accepts a local
model folder (the real multilingual-e5-small rebuild included) accepts it.
"""

from __future__ import annotations

from pathlib import Path

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def make_tiny_encoder(path, texts, hidden: int = 32, layers: int = 2, heads: int = 2,
                      max_position: int = 128, seed: int = 0) -> Path:
    """Write a tiny BERT (char-level WordPiece vocab from ``texts``) to ``path``."""
    import torch
    from transformers import BertConfig, BertModel, BertTokenizerFast

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    chars = sorted({c for t in texts for c in t.lower() if not c.isspace()})
    ascii_ = [chr(i) for i in range(33, 127) if chr(i).lower() == chr(i)]
    vocab = SPECIALS + sorted(set(chars) | set(ascii_))
    (path / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    tok = BertTokenizerFast(str(path / "vocab.txt"), do_lower_case=True,  # positional: v4 vocab_file, v5 vocab
                            tokenize_chinese_chars=True)
    tok.save_pretrained(path)
    torch.manual_seed(seed)
    cfg = BertConfig(vocab_size=len(vocab), hidden_size=hidden, num_hidden_layers=layers,
                     num_attention_heads=heads, intermediate_size=hidden * 4,
                     max_position_embeddings=max_position)
    BertModel(cfg).save_pretrained(path)
    return path
