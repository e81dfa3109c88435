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


@pytest.fixture(autouse=True)
def instant_clicks(monkeypatch):
    """AppTest clicks a button the instant a page is drawn; the coding page ignores decisions that come sooner
    than a person could read the mention (pages/coding_queue.py MIN_DWELL_S). The browser tests set it back."""
    monkeypatch.setenv("TERMNORM_MIN_DWELL_S", "0")


@pytest.fixture
def url(tmp_path):
    """A fresh SQLite file for the database layer (its engine is disposed afterwards)."""
    from db import services

    u = f"sqlite:///{tmp_path / 'termnorm.sqlite3'}"
    yield u
    services.dispose(u)


@pytest.fixture
def db_url(url):
    """The fresh SQLite file, migrated to the newest schema (Alembic)."""
    from db import services

    services.init_db(url)
    return url


@pytest.fixture
def fast_bcrypt(monkeypatch):
    """bcrypt's minimum cost: tests check behaviour, not the work factor (production: auth.BCRYPT_ROUNDS)."""
    monkeypatch.setenv("TERMNORM_BCRYPT_ROUNDS", "4")
