"""Read and write a Hugging Face model folder the encoder steps edit.

Input/output: a folder with ``config.json``, weights, ``tokenizer.json`` (a
fast tokenizer: Unigram/sentencepiece or WordPiece, the ``tokenizers``
JSON format) and termnorm's manifest ``termnorm_build.json`` (format
version, sources, sha256 and size of every file, derivation steps). Shared
by the build (:mod:`.build`) and the tokenizer edits (:mod:`.tokenizer`):
JSON writing, tokenizer.json access, model loading (offline only), saving
weights over a memory-mapped file safely, and the manifest bookkeeping.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

from termnorm.encoder.wheels import E5_SMALL_NAME, sha256_file

MANIFEST_NAME = "termnorm_build.json"
#: Bumped when the written folder layout changes (a cached folder of another
#: format version is rebuilt).
BUILD_FORMAT = 1


def _make_readable(folder: Path) -> None:
    # mkdtemp / safetensors create owner-only files; a cache is shared.
    folder.chmod(0o755)
    for p in folder.iterdir():
        p.chmod(0o644)


def _write_json(path: Path, obj) -> None:
    path.write_text(json.dumps(obj, ensure_ascii=False, indent=2, sort_keys=True) + "\n",
                    encoding="utf-8")


# --------------------------------------------------------------------------
# shared helpers for editing a model folder
# --------------------------------------------------------------------------
def _read_tokenizer_json(folder: Path) -> dict:
    path = folder / "tokenizer.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: a fast tokenizer (tokenizer.json) is required")
    return json.loads(path.read_text(encoding="utf-8"))


def _write_tokenizer_json(path: Path, tj: dict) -> None:
    path.write_text(json.dumps(tj, ensure_ascii=False), encoding="utf-8")


def _model_pieces(tj: dict) -> list[str]:
    """Pieces of the tokenizer's model, in id order (Unigram or WordPiece)."""
    model = tj["model"]
    if model["type"] == "Unigram":
        return [p for p, _ in model["vocab"]]
    if model["type"] == "WordPiece":
        inv = sorted(model["vocab"].items(), key=lambda kv: kv[1])
        if [i for _, i in inv] != list(range(len(inv))):
            raise ValueError("WordPiece vocabulary ids are not 0..n-1")
        return [p for p, _ in inv]
    raise NotImplementedError(f"{model['type']} tokenizers are not supported "
                              "(Unigram/sentencepiece and WordPiece are)")


def _check_added_tokens_inside(tj: dict) -> None:
    n = len(_model_pieces(tj))
    beyond = [t["content"] for t in tj.get("added_tokens", []) if t["id"] >= n]
    if beyond:
        raise NotImplementedError(f"added tokens beyond the model vocabulary ({beyond[:5]}): "
                                  "appending pieces would shift their ids")


def _load_backend(folder: Path):
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(folder / "tokenizer.json"))


def _normalizer(backend):
    norm = backend.normalizer
    return norm.normalize_str if norm is not None else (lambda s: s)


def _load_model(folder: Path):
    from transformers import AutoModel

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    return AutoModel.from_pretrained(str(folder), local_files_only=True)


def _save_model_into(model, folder: Path) -> None:
    """save_pretrained into a temporary folder, then move the files in.

    Writing over the safetensors file the model was memory-mapped from would
    corrupt it mid-write; ``os.replace`` gives the new file a new inode.
    """
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder.parent, prefix=f".{folder.name}-") as tmp:
        model.save_pretrained(tmp)
        for stale in ("pytorch_model.bin", "model.safetensors.index.json"):
            if (folder / stale).exists():
                (folder / stale).unlink()
        for p in Path(tmp).iterdir():
            os.replace(p, folder / p.name)


def _refresh_manifest(folder: Path, step: dict, derived_from: Path | None = None) -> None:
    """Record a derivation step and the new file hashes in termnorm_build.json."""
    path = folder / MANIFEST_NAME
    try:
        m = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        m = {"format": BUILD_FORMAT}
    if derived_from is not None:
        m["derived_from"] = str(derived_from)
    m.setdefault("derived_from", m.get("derived_from", "unknown"))
    m["steps"] = [*m.get("steps", []), step]
    m["files"] = {p.name: {"sha256": sha256_file(p), "size": p.stat().st_size}
                  for p in sorted(folder.iterdir()) if p.is_file() and p.name != MANIFEST_NAME}
    _write_json(path, m)


def copy_encoder(src: str | Path, dst: str | Path) -> Path:
    """Copy a model folder (e.g. the cached e5 build) to edit it in place."""
    src, dst = Path(src), Path(dst)
    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(src, dst)
    if (dst / MANIFEST_NAME).exists():
        m = json.loads((dst / MANIFEST_NAME).read_text(encoding="utf-8"))
        m["derived_from"] = str(src)
        _write_json(dst / MANIFEST_NAME, m)
    return dst


def _refuse_cached_base(folder: Path) -> None:
    try:
        m = json.loads((folder / MANIFEST_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    if m.get("model") == E5_SMALL_NAME and "derived_from" not in m:
        raise ValueError(f"{folder} is the pristine e5 build (its checksums are pinned); "
                         "copy it first with copy_encoder(src, dst) and edit the copy")
