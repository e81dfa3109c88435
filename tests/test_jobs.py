"""The background job runner with real worker processes: start, progress, one job per lock key, cancel, crash."""

from __future__ import annotations

import json
import os
import signal
import time

import pytest
from helpers import wait_for
from job_targets import SLEEP, workers_import_tests

from termnorm.jobs import FINAL, JobBusy, JobRunner, lock_key, pid_alive


@pytest.fixture
def runner(tmp_path, monkeypatch):
    workers_import_tests(monkeypatch)
    r = JobRunner(tmp_path / "jobs")
    yield r
    for st in r.jobs():  # never leave a worker behind
        if st["state"] not in FINAL:
            r.cancel(st["id"], grace_s=1)


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


def test_an_error_raised_while_stopping_is_still_a_cancel(runner):
    job = runner.start(SLEEP, {"seconds": 30, "steps": 30, "broken_stop": True})
    wait_for(lambda: runner.status(job)["progress"] > 0)
    st = runner.cancel(job)
    assert st["state"] == "cancelled" and not st["error"]
    assert "cancelled (while stopping: RuntimeError: the connection was lost" in runner.log(job)


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
        runner.start("job_targets.sleep_job", {})
    job = runner.start("termnorm.jobs:no_such_function", {})
    st = runner.wait(job, 20)
    assert st["state"] == "failed" and "no_such_function" in st["error"]


# ------------------------------------------------------------------ one job per lock key
def test_jobs_of_different_keys_run_side_by_side_and_the_same_key_is_busy(runner):
    retrain = runner.start(SLEEP, {"seconds": 20, "steps": 20}, lock=lock_key("retrain", 1),
                           tags={"kind": "retrain", "vocabulary_id": 1})
    suggest = runner.start(SLEEP, {"seconds": 20, "steps": 20}, lock=lock_key("suggest", 2),
                           tags={"kind": "precompute", "vocabulary_id": 2})
    wait_for(lambda: all(runner.status(j)["state"] == "running" for j in (retrain, suggest)))
    with pytest.raises(JobBusy, match="retrain:1"):
        runner.start(SLEEP, {"seconds": 1}, lock="retrain:1", tags={"kind": "retrain", "vocabulary_id": 1})
    legacy = runner.start(SLEEP, {"seconds": 20, "steps": 20})  # no key: the default lock, free as before
    with pytest.raises(JobBusy):
        runner.start(SLEEP, {"seconds": 1})
    assert {j["id"] for j in runner.running()} == {retrain, suggest, legacy}
    assert runner.active(vocabulary_id=1)["id"] == retrain
    assert runner.active(kind="precompute", vocabulary_id=1) is None
    assert runner.active(lock="suggest:2")["id"] == suggest
    runner.cancel(retrain, grace_s=2)
    assert runner.status(suggest)["state"] == "running"  # cancelling one key leaves the others alone
    assert not runner.lock_file("retrain:1").exists() and runner.lock_file("suggest:2").exists()
    again = runner.start(SLEEP, {"seconds": 0.2, "steps": 1}, lock="retrain:1",
                         tags={"kind": "retrain", "vocabulary_id": 1})
    assert runner.wait(again, 20)["state"] == "done"
    for j in (suggest, legacy):
        runner.cancel(j, grace_s=2)
    assert runner.running() == [] and runner.active() is None


def test_listing_is_filtered_by_vocabulary_and_kind(runner):
    """The Training page of vocabulary 1 must not show vocabulary 2's failed job."""
    ok = runner.start(SLEEP, {"seconds": 0.1, "steps": 1}, lock="retrain:1",
                      tags={"kind": "retrain", "vocabulary_id": 1})
    runner.wait(ok, 20)
    failed = runner.start(SLEEP, {"seconds": 0.2, "steps": 2, "fail_at": 1}, lock="retrain:2",
                          tags={"kind": "retrain", "vocabulary_id": 2})
    runner.wait(failed, 20)
    pre = runner.start(SLEEP, {"seconds": 0.1, "steps": 1}, lock="suggest:1",
                       tags={"kind": "precompute", "vocabulary_id": 1})
    runner.wait(pre, 20)
    assert runner.latest()["id"] == pre  # unfiltered: any job, as before
    assert runner.latest(kind="retrain", vocabulary_id=1)["id"] == ok
    assert runner.latest(kind="retrain", vocabulary_id="2")["state"] == "failed"  # ids compare as text
    assert runner.latest(vocabulary_id=1)["id"] == pre
    assert runner.latest(kind=("precompute", "rescore"), vocabulary_id=1)["id"] == pre
    assert runner.latest(kind="retrain", vocabulary_id=3) is None
    assert [j["id"] for j in runner.jobs(vocabulary_id=1)] == [pre, ok]
    st = runner.status(pre)
    assert st["lock"] == "suggest:1" and st["tags"] == {"kind": "precompute", "vocabulary_id": 1}


def test_a_crashed_job_frees_only_its_own_key(runner):
    a = runner.start(SLEEP, {"seconds": 30, "steps": 30}, lock="suggest:1")
    b = runner.start(SLEEP, {"seconds": 30, "steps": 30}, lock="suggest:2")
    st = wait_for(lambda: (s := runner.status(a))["state"] == "running" and s)
    os.kill(st["pid"], signal.SIGKILL)
    wait_for(lambda: not pid_alive(st["pid"], st["pid_start"]))
    assert [j["id"] for j in runner.running()] == [b]  # the reader recovered a's stale lock
    assert runner.status(a)["state"] == "failed" and not runner.lock_file("suggest:1").exists()
    with pytest.raises(JobBusy):
        runner.start(SLEEP, {"seconds": 1}, lock="suggest:2")
    runner.cancel(b, grace_s=2)


def test_a_job_started_by_a_job_runs_at_the_same_niceness(runner):
    """A promotion's re-scoring is started from the retraining job (niceness 10): it runs at 10, not 19."""
    import subprocess
    import sys

    code = ("import os, sys; os.nice(10); from termnorm.jobs import JobRunner; "
            "print(JobRunner(sys.argv[1]).start('job_targets:sleep_job', {'seconds': 20, 'steps': 20}))")
    job = subprocess.run([sys.executable, "-c", code, str(runner.root)], capture_output=True, text=True,
                         check=True).stdout.strip()
    st = wait_for(lambda: (s := runner.status(job))["state"] == "running" and s)
    nice = int(open(f"/proc/{st['pid']}/stat").read().rsplit(")", 1)[1].split()[16])
    assert nice == 10
    runner.cancel(job, grace_s=2)
