"""The background job runner with real worker processes: start, progress, one at a time, cancel, crash."""

from __future__ import annotations

import json
import os
import signal
import time

import pytest

from termnorm.jobs import FINAL, JobBusy, JobRunner, pid_alive

SLEEP = "termnorm.jobs:sleep_job"


@pytest.fixture
def runner(tmp_path):
    r = JobRunner(tmp_path / "jobs")
    yield r
    for st in r.jobs():  # never leave a worker behind
        if st["state"] not in FINAL:
            r.cancel(st["id"], grace_s=1)


def wait_for(pred, timeout=20.0):
    end = time.time() + timeout
    while time.time() < end:
        v = pred()
        if v:
            return v
        time.sleep(0.05)
    raise AssertionError("condition not reached")


def test_job_runs_reports_progress_and_finishes(runner):
    job = runner.start(SLEEP, {"seconds": 1.5, "steps": 6})
    seen = set()

    def progressed():
        st = runner.status(job)
        seen.add(round(st["progress"], 3))
        return st["state"] in FINAL

    wait_for(progressed)
    st = runner.status(job)
    assert st["state"] == "done" and st["progress"] == 1.0
    assert st["metrics"] == {"steps": 6}
    assert any(0 < p < 1 for p in seen), seen  # intermediate progress was visible to a reader
    assert "step 6/6" in runner.log(job)
    assert runner.active() is None and not runner.lock_path.exists()
    wait_for(lambda: not pid_alive(st["pid"], st["pid_start"]))  # the worker exits right after reporting
    # the status file is always complete JSON (written atomically)
    assert json.loads((runner.folder(job) / "status.json").read_text())["state"] == "done"


def test_one_job_at_a_time(runner):
    job = runner.start(SLEEP, {"seconds": 20, "steps": 20})
    with pytest.raises(JobBusy):
        runner.start(SLEEP, {"seconds": 1})
    assert runner.active()["id"] == job
    runner.cancel(job, grace_s=2)
    job2 = runner.start(SLEEP, {"seconds": 0.2, "steps": 1})  # the lock is free again
    assert runner.wait(job2, 20)["state"] == "done"


def test_cancel_terminates_the_process_group(runner):
    job = runner.start(SLEEP, {"seconds": 30, "steps": 30})
    st = wait_for(lambda: (s := runner.status(job))["state"] == "running" and s["progress"] > 0 and s)
    pid, start = st["pid"], st["pid_start"]
    t0 = time.time()
    st = runner.cancel(job)
    assert st["state"] == "cancelled" and time.time() - t0 < 10
    assert not pid_alive(pid, start)
    assert runner.active() is None and not runner.lock_path.exists()
    assert runner.status(job)["state"] == "cancelled"  # a late progress report cannot resurrect it


def test_crash_leaves_a_clean_failed_state(runner):
    job = runner.start(SLEEP, {"seconds": 30, "steps": 30})
    st = wait_for(lambda: (s := runner.status(job))["state"] == "running" and s)
    os.kill(st["pid"], signal.SIGKILL)  # no chance to report
    wait_for(lambda: not pid_alive(st["pid"], st["pid_start"]))
    assert runner.lock_path.exists()  # the dead worker could not release it ...
    st = runner.status(job)
    assert st["state"] == "failed" and "died" in st["error"]
    assert runner.active() is None and not runner.lock_path.exists()  # ... the next reader did
    job2 = runner.start(SLEEP, {"seconds": 0.2, "steps": 1})
    assert runner.wait(job2, 20)["state"] == "done"


def test_stale_lock_of_a_dead_job_is_recovered(runner):
    job = runner.start(SLEEP, {"seconds": 0.2, "steps": 1})
    st = runner.wait(job, 20)
    wait_for(lambda: not pid_alive(st["pid"], st["pid_start"]))
    # simulate a machine restart mid-job: status still says running, the pid is gone, the lock remains
    runner.update(job, state="running")  # final states are sticky ...
    st_path = runner.folder(job) / "status.json"
    st = json.loads(st_path.read_text())
    st.update(state="running", finished=None)
    st_path.write_text(json.dumps(st))  # ... so rewrite the file as a crash would have left it
    runner.lock_path.write_text(json.dumps({"job_id": job}))
    job2 = runner.start(SLEEP, {"seconds": 0.2, "steps": 1})
    assert runner.status(job)["state"] == "failed"
    assert runner.wait(job2, 20)["state"] == "done"


def test_failing_job_records_the_error_and_releases_the_lock(runner):
    job = runner.start(SLEEP, {"seconds": 0.4, "steps": 4, "fail_at": 2})
    st = runner.wait(job, 20)
    assert st["state"] == "failed" and "asked to fail at step 2" in st["error"]
    assert "RuntimeError" in runner.log(job)
    assert 0 < st["progress"] < 1
    assert runner.active() is None


def test_bad_target_is_refused(runner):
    with pytest.raises(ValueError):
        runner.start("termnorm.jobs.sleep_job", {})
    job = runner.start("termnorm.jobs:no_such_function", {})
    st = runner.wait(job, 20)
    assert st["state"] == "failed" and "no_such_function" in st["error"]
