"""The worker side of a background job: the process ``python -m termnorm.job_worker run <job folder>``.

:class:`termnorm.jobs.JobRunner` starts it in its own session; it reads ``job.json``, lowers its priority,
imports the target ("package.module:function"), calls it with the params and a :class:`JobContext`, and
records how it ended in ``status.json`` (done with the target's metrics, failed with the error, or
cancelled on SIGTERM) before it releases the job's lock. The runner's docstring describes the folder.
"""

from __future__ import annotations

import os
import signal
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

from termnorm.filestore import read_json, utc_now
from termnorm.jobs import NICENESS, JobRunner, process_start_ticks


class JobCancelled(BaseException):
    """Raised inside the worker when SIGTERM arrives (BaseException: not swallowed by ``except Exception``)."""


@dataclass
class JobContext:
    """Handed to a job's target: report progress, log lines, know the device."""

    runner: JobRunner
    job_id: str
    device: str | None = None

    def progress(self, fraction: float, message: str = "", **metrics) -> None:
        changes = {"progress": float(min(1.0, max(0.0, fraction))), "message": str(message)}
        if metrics:
            st = self.runner._read_status(self.job_id) or {}
            changes["metrics"] = {**(st.get("metrics") or {}), **metrics}
        self.runner.update(self.job_id, **changes)
        if message:
            self.log(f"[{fraction:5.1%}] {message}")

    def log(self, line: str) -> None:
        print(f"{time.strftime('%H:%M:%S')} {line}", flush=True)

    def set_device(self, device: str) -> None:
        self.device = device
        self.runner.update(self.job_id, device=device)


def _import_target(target: str):
    import importlib

    mod, _, fn = target.partition(":")
    return getattr(importlib.import_module(mod), fn)


def run_worker(folder) -> int:
    """The worker process body: run the job in ``folder`` and record how it ended."""
    folder = Path(folder)
    runner = JobRunner(folder.parent)
    spec = read_json(folder / "job.json")
    job_id = spec["id"]

    asked = []  # set once SIGTERM arrived: whatever the interrupted code raises then (a database driver
    # cut mid-query and failing its rollback, say) is the cancel's doing, not a failure of the job

    def on_term(signum, frame):
        if not asked:
            asked.append(signum)
            raise JobCancelled()

    signal.signal(signal.SIGTERM, on_term)
    try:  # the niceness asked for, not added to the starter's: a job started by a job (a promotion's
        # re-scoring) would otherwise run at 19 and make no headway on a busy machine
        os.nice(max(0, int(spec.get("niceness", NICENESS)) - os.nice(0)))
    except OSError:
        pass
    ctx = JobContext(runner, job_id)
    runner.update(job_id, state="running", started=utc_now(), pid=os.getpid(),
                  pid_start=process_start_ticks(os.getpid()), message="running")
    code = 0
    try:
        fn = _import_target(spec["target"])
        metrics = fn(dict(spec.get("params") or {}), ctx) or {}
        st = runner._read_status(job_id) or {}
        runner.update(job_id, state="done", progress=1.0, finished=utc_now(), message="done",
                      metrics={**(st.get("metrics") or {}), **metrics})
        ctx.log("done")
    except JobCancelled:
        runner.update(job_id, state="cancelled", finished=utc_now(), message="cancelled")
        ctx.log("cancelled")
        code = 143
    except BaseException as e:  # noqa: BLE001 - every failure must end in a final state
        tb = traceback.format_exc()
        print(tb, flush=True)
        if asked:
            runner.update(job_id, state="cancelled", finished=utc_now(), message="cancelled")
            ctx.log(f"cancelled (while stopping: {type(e).__name__}: {e})")
            code = 143
        else:
            runner.update(job_id, state="failed", finished=utc_now(), error=f"{type(e).__name__}: {e}",
                          message=f"failed: {type(e).__name__}: {e}"[:300])
            code = 1
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        runner._release(job_id)
    return code


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) == 2 and argv[0] == "run":
        return run_worker(argv[1])
    print("usage: python -m termnorm.job_worker run <job folder>", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
