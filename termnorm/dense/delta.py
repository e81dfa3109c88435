"""Save a fine-tuned bi-encoder as the weights it changed, against the base model folder it was trained from.

Why: a fine-tuned multilingual-e5-small folder is 466 MB, though 96 M of its 118 M parameters are the word-piece
table training leaves frozen, and the synonym encoder trained on its top 2 layers changes 3.5 M of them. Saved as
the tensors that differ from the base it is 14 MB, so a hospital keeps one per vocabulary and every registry
version its own. Written by hand because sentence-transformers and transformers save whole models only (a
``peft`` adapter would change what is trained, not how it is kept).

The base is named by the sha256 of its weights file, checked on load, so a delta is never read against other
weights: first the folder it was saved from, then (for the built-in encoder) ``termnorm encoder build``'s
rebuild, which is deterministic and so hashes the same on every machine.
"""

from __future__ import annotations

import hashlib
from functools import lru_cache
from pathlib import Path

import torch

DELTA_NAME = "delta.safetensors"
WEIGHTS_NAME = "model.safetensors"


@lru_cache(maxsize=16)
def _sha256(path: str, size: int, mtime_ns: int) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def file_sha256(path: Path) -> str:
    """The file's sha256, hashed once per (path, size, mtime) in a process: a 466 MB file takes about a second."""
    st = Path(path).stat()
    return _sha256(str(Path(path).resolve()), st.st_size, st.st_mtime_ns)


def _layers(encoder):
    return encoder.model.transformers_model.encoder.layer


def base_of(encoder) -> dict | None:
    """What a delta of ``encoder`` is measured against, or None where there is no plain base folder (a static bag
    of pieces, an encoder whose source folder is gone or holds no ``model.safetensors``)."""
    if encoder.is_static or not encoder.source:
        return None
    folder = Path(encoder.source)
    if not (folder / WEIGHTS_NAME).is_file() or not hasattr(encoder.model.transformers_model, "encoder"):
        return None
    return {"folder": str(folder), "name": folder.name, "sha256": file_sha256(folder / WEIGHTS_NAME),
            "layers": len(_layers(encoder))}


def save_delta(encoder, directory: Path, base: dict) -> int:
    """Write the tensors of ``encoder`` that differ from its base's into ``directory``; returns how many."""
    from safetensors.torch import load_file, save_file

    ref = load_file(str(Path(base["folder"]) / WEIGHTS_NAME))
    changed = {}
    for key, value in encoder.model.transformers_model.state_dict().items():
        was = ref.get(key)
        value = value.detach().cpu()
        if was is None or was.shape != value.shape or not torch.equal(was.to(value.dtype), value):
            changed[key] = value.clone().contiguous()
    save_file(changed, str(Path(directory) / DELTA_NAME))
    return len(changed)


def find_base(base: dict) -> Path:
    """The base folder of a delta: the one it was saved from, else the built-in encoder's rebuild; its weights
    must hash as recorded."""
    from termnorm.encoder.build import E5_SMALL_NAME

    tried = []
    candidates = [Path(base["folder"])]
    if base.get("name") == E5_SMALL_NAME:
        from termnorm.encoder.provider import resolve_encoder

        candidates.append(lambda: Path(resolve_encoder("e5-small", progress=False)))
    for cand in candidates:
        folder = cand() if callable(cand) else cand
        weights = folder / WEIGHTS_NAME
        if weights.is_file():
            if file_sha256(weights) == base["sha256"]:
                return folder
            tried.append(f"{folder} (other weights)")
        else:
            tried.append(f"{folder} (missing)")
    raise FileNotFoundError(
        f"this encoder is saved as its changes to the base encoder {base.get('name')!r} (weights sha256 "
        f"{base['sha256'][:12]}…), which is not here: tried {', '.join(tried)}. Put that model folder back, or "
        "for the built-in encoder run `termnorm encoder build`.")


def load_delta(directory: Path, cfg: dict, device: str | None):
    """A :class:`termnorm.dense.biencoder.BiEncoder` rebuilt from its base folder and the saved changes."""
    from safetensors.torch import load_file

    from termnorm.dense.biencoder import BiEncoder

    base = cfg["base"]
    enc = BiEncoder.from_folder(find_base(base), device=device, max_seq_length=int(cfg.get("max_seq_length", 32)),
                                query_prefix=cfg.get("query_prefix", ""), passage_prefix=cfg.get("passage_prefix", ""),
                                layers=base.get("layers"))
    hf = enc.model.transformers_model
    _, unexpected = hf.load_state_dict(load_file(str(Path(directory) / DELTA_NAME)), strict=False)
    if unexpected:
        raise ValueError(f"{directory}: the saved changes name weights the base encoder lacks: {unexpected[:3]}")
    return enc
