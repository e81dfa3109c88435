"""Where models run: device choice, mixed precision, CPU threads.

Shared by every model of the engine (the bi-encoders of approaches A/C/D/E,
the cross-encoder rankers of A/B/C) so that a GPU is used when present and a
CPU run stays correct and reasonably fast.
"""

from __future__ import annotations

import contextlib
import os

#: Environment variables: ``TERMNORM_DEVICE`` forces a device ("cpu",
#: "cuda", "cuda:1"); ``TERMNORM_THREADS`` the CPU thread count.
DEVICE_ENV = "TERMNORM_DEVICE"
THREADS_ENV = "TERMNORM_THREADS"


def pick_device(prefer: str | None = None) -> str:
    """``prefer`` or ``$TERMNORM_DEVICE`` if given, else "cuda" when available, else "cpu"."""
    import torch

    from termnorm import settings

    choice = prefer or settings.get().device
    if choice:
        if choice.startswith("cuda") and not torch.cuda.is_available():
            raise RuntimeError(f"device {choice!r} requested but CUDA is not available")
        return choice
    return "cuda" if torch.cuda.is_available() else "cpu"


def autocast_dtype(device: str):
    """bf16 where the GPU supports it (no loss scaling needed), else fp16; None on CPU.

    CPU autocast to bf16 is left off: on the CPUs we run on it is slower than
    fp32 and changes embeddings enough to move recall results.
    """
    import torch

    if not str(device).startswith("cuda"):
        return None
    return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16


def autocast_context(device: str):
    """Mixed precision on CUDA (bf16 or fp16), a no-op context on CPU."""
    import torch

    dtype = autocast_dtype(device)
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type="cuda", dtype=dtype)


def grad_scaler(device: str):
    """A ``GradScaler`` enabled only for fp16 autocast (bf16 and fp32 need none)."""
    import torch

    enabled = autocast_dtype(device) == torch.float16
    return torch.amp.GradScaler("cuda", enabled=enabled)


def configure_cpu_threads(n: int | None = None) -> int:
    """Set torch's intra-op threads to ``n`` / ``$TERMNORM_THREADS`` / the usable cores.

    Usable cores = the process's CPU affinity (what a container or ``taskset``
    grants), not the host's core count: more threads than cores makes
    PyTorch's matmuls slower, not faster. Returns the number set.
    """
    import torch

    if n is None:
        from termnorm import settings

        if settings.get().threads > 0:
            n = settings.get().threads
        else:
            try:
                n = len(os.sched_getaffinity(0))
            except AttributeError:  # macOS / Windows
                n = os.cpu_count() or 1
    n = max(1, int(n))
    torch.set_num_threads(n)
    return n
