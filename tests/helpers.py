"""Small helpers the test modules share (pytest puts this folder on the path)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data"


def need(path: Path) -> Path:
    """``path`` of the shared research data; a skip without it, a failure under CI (which must have it)."""
    if not path.exists():
        if os.environ.get("CI") == "true":
            pytest.fail(f"{path} is missing: CI must have ../shared/data")
        pytest.skip(f"{path} not present")
    return path


def rerun(at):
    """Run a streamlit AppTest and fail on any exception the page raised."""
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def wait_for(pred, timeout: float = 60.0, poll: float = 0.05):
    """``pred()``'s first true value within ``timeout`` seconds (AssertionError otherwise)."""
    end = time.time() + timeout
    while time.time() < end:
        v = pred()
        if v:
            return v
        time.sleep(poll)
    raise AssertionError("condition not reached")
