"""Shared test fixtures."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def one_torch_thread():
    """Tiny models on a shared 2-core machine: torch's OpenMP threads spin against other jobs and thread
    hand-offs cost more than they save (measured 10-20x slower with 2 threads)."""
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)
