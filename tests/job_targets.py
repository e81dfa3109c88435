"""Job targets for the tests of the background job runner (termnorm.jobs), and the way their workers find them.

A worker is a separate process (termnorm.job_worker) that imports its target by name: the tests start
``job_targets:sleep_job`` (:data:`SLEEP`) with this folder on the worker's ``PYTHONPATH``
(:func:`workers_import_tests`; the runner puts the repository root in front of it).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

TESTS = Path(__file__).resolve().parent
#: The target of :func:`sleep_job`, as JobRunner.start takes it.
SLEEP = "job_targets:sleep_job"


def workers_import_tests(monkeypatch) -> None:
    """Put this folder on the ``PYTHONPATH`` that job workers inherit (for the test that uses ``monkeypatch``)."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(TESTS), *filter(None, [os.environ.get("PYTHONPATH")])]))


def sleep_job(params: dict, ctx) -> dict:
    """A job that only waits, in ``steps`` steps of ``seconds / steps``; ``fail_at`` (a step number) raises an
    error there; ``broken_stop`` turns the cancel's interruption into another error, as a database driver cut
    mid-query does when its rollback fails. ``ctx``: the worker's termnorm.job_worker.JobContext."""
    steps = int(params.get("steps", 10))
    pause = float(params.get("seconds", 1.0)) / max(1, steps)
    try:
        return _sleep_steps(params, ctx, steps, pause)
    except BaseException as e:
        if params.get("broken_stop"):
            raise RuntimeError("the connection was lost while rolling back") from e
        raise


def _sleep_steps(params: dict, ctx, steps: int, pause: float) -> dict:
    for i in range(steps):
        if params.get("fail_at") is not None and i == int(params["fail_at"]):
            raise RuntimeError(f"asked to fail at step {i}")
        time.sleep(pause)
        ctx.progress((i + 1) / steps, f"step {i + 1}/{steps}")
    return {"steps": steps}
