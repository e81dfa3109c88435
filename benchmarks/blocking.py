"""Does heavy work block coders? A coder's decision -> next suggestion, alone and while a lead pre-computes.

One simulated coder decides through the app's code path, the steps of
benchmarks/next_suggestion.py: ``services.record_decision`` -> the engine
learns (``EngineHolder.learn``) -> ``services.next_mention`` -> the stored or
computed suggestion (``EngineHolder.suggestion``), with the next
``_ui.PREPARE_AHEAD`` mentions prepared after each page, outside the wait.
It codes alone and while a pre-computing job
(``db.suggest_jobs.start_precompute``: its own process, niceness 10, its own
engine) suggests for a big batch of the *same vocabulary*, on the same
SQLite file, in the same run: the two alternate in rounds (the job is
cancelled and resumed between them), so a shared machine's changing load
falls on both alike; before each decision the coder reads for a random
0..1 s (not timed), so the decisions meet the job in every phase of its
work, its writes included. Reported: p50 / p95 of both phases, their
ratio (target: p95 during the job within 2x of coding alone), the job's
throughput, and the machine's load.

Full run: the CHIP-CDN vocabulary (ICD-10 北京临床版 v601, 37,645 terms), a
50,000-row batch made of the 10,000 official CHIP-CDN test mentions
(``unlabeled.json``) each also with four clinical qualifiers, and a coder
coding CHIP-CDN dev mentions with their gold terms. ``--quick``: the demo
procedures vocabulary and a 3,000-row batch (a smoke test, well under a minute).

    python3 benchmarks/blocking.py            # writes results/blocking.json (a few minutes)
    python3 benchmarks/blocking.py --quick    # writes results/blocking_quick.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks._results import write_json  # noqa: E402

DATA = REPO.parent / "shared" / "data"
CDN_VOCABULARY = "ICD-10 北京临床版 v601 (CHIP-CDN)"
#: Qualifiers a clinician writes around a diagnosis: each test mention appears as written and with four of
#: them, so the 50,000 rows are not 5 copies of the same 10,000 (the engine's history sieve would answer
#: an exact repeat of a coded text).
QUALIFIERS = ("", "待查", "（复诊）", "术后", "史")
TARGET_RATIO = 2.0


# ------------------------------------------------------------------------------------- setup
def setup_cdn(url: str, rows: int, n_coder: int) -> tuple[int, int, int, dict]:
    """The CHIP-CDN vocabulary, a coder batch of dev mentions with gold, and the big batch."""
    from db import services
    from termnorm.loaders import load_labelled, load_vocabulary

    vocab = load_vocabulary(DATA / "chip-cdn" / "icd10_beijing_clinical_v601.xlsx", name=CDN_VOCABULARY)
    dev = [m for m in load_labelled(DATA / "chip-cdn" / "dev.json", vocab).mentions
           if m.terms and all(t in vocab for t in m.terms)][:n_coder]
    tests = [x["text"].strip().lstrip("\ufeff") for x in json.loads((DATA / "chip-cdn" / "unlabeled.json")
                                                                   .read_text(encoding="utf-8"))]
    tests = [t for t in tests if t]
    big = [(t + q)[:500] for q in QUALIFIERS for t in tests][:rows]
    with services.session_scope(url) as s:
        vid = services.load_vocabulary(s, vocab, CDN_VOCABULARY)
        coder = services.create_batch(s, "coder: CHIP-CDN dev", vid, dev, source_file="chip-cdn/dev.json")
        job = services.create_batch(s, f"lead: {len(big):,} rows", vid, big, source_file="chip-cdn/unlabeled.json")
    return vid, coder, job, {m.text: list(m.terms) for m in dev}


def setup_demo(url: str, rows: int) -> tuple[int, int, int, dict]:
    """The demo procedures vocabulary, its demo batch (with gold) for the coder, and the big batch."""
    from db import services
    from app_pages import _ui
    from termnorm.engine import demo_mentions

    gold = {m.text: list(m.terms) for m in demo_mentions("procedures")}
    texts = list(gold)
    big = [texts[i % len(texts)] + QUALIFIERS[(i // len(texts)) % len(QUALIFIERS)] + f" {i // (5 * len(texts))}"
           for i in range(rows)]
    with services.session_scope(url) as s:
        _ui.seed_demo(s)
        vid = services.vocabulary_id(s, "demo-procedures")
        coder = services.batches(s, vid)[0]["id"]
        job = services.create_batch(s, f"lead: {len(big):,} rows", vid, big)
    return vid, coder, job, gold


# ------------------------------------------------------------------------------------- the coder
class Coder:
    """A coder on the coding page: decide, then wait for the next suggestion (timed), then prepare ahead."""

    def __init__(self, url: str, holder, batch: int, gold: dict, user: str = "coder"):
        from db import services
        from app_pages import _ui

        self.url, self.holder, self.batch, self.gold, self.user = url, holder, batch, gold, user
        with services.session_scope(url) as s:
            self.current = services.next_mention(s, batch, user)
            self.sug = holder.suggestion(s, self.current["id"], self.current["text"])
            holder.prepare(s, batch, self.current["id"], _ui.PREPARE_AHEAD)

    def decide(self) -> dict:
        """One decision; the seconds of each step until the next suggestion is on screen."""
        from db import services
        from app_pages import _ui

        with services.session_scope(self.url) as s:
            terms = self.gold[self.current["text"]]
            action = "accept" if set(terms) == set(self.sug.chosen) else "correct"
            t0 = time.perf_counter()
            services.record_decision(s, self.current["id"], self.user, action, terms, seconds=5.0, shown=_ui.SHOWN)
            t1 = time.perf_counter()
            self.holder.learn(self.current["text"], terms)
            t2 = time.perf_counter()
            self.current = services.next_mention(s, self.batch, self.user)
            t3 = time.perf_counter()
            self.sug = self.holder.suggestion(s, self.current["id"], self.current["text"])
            t4 = time.perf_counter()
            self.holder.prepare(s, self.batch, self.current["id"], _ui.PREPARE_AHEAD)  # after drawing: not waited
        return {"total": t4 - t0, "record_decision": t1 - t0, "learn": t2 - t1, "next_mention": t3 - t2,
                "suggestion": t4 - t3}

    def code(self, n: int, think, rng) -> list[dict]:
        """``n`` decisions, each after reading the screen for a random 0..``think`` seconds (not timed): a
        block then spans several of the job's chunks, its writes included, not one phase of it."""
        times = []
        for _ in range(n):
            time.sleep(rng.uniform(0, think))
            times.append(self.decide())
        return times


def summary(times: list[dict]) -> dict:
    """p50 / p95 / max of the wait and of each step, in milliseconds."""
    ms = lambda k, q: round(float(np.percentile([t[k] * 1000 for t in times], q)), 2)  # noqa: E731
    parts = ("record_decision", "learn", "next_mention", "suggestion")
    return {"n": len(times), "p50_ms": ms("total", 50), "p95_ms": ms("total", 95), "max_ms": ms("total", 100),
            "parts_p50_ms": {k: ms(k, 50) for k in parts}, "parts_p95_ms": {k: ms(k, 95) for k in parts}}


# ------------------------------------------------------------------------------------- the machine
def cpu_seconds(pid: int) -> float | None:
    """utime + stime of a process (Linux /proc), to say how much CPU the job took meanwhile."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


# ------------------------------------------------------------------------------------- the run
class Lead:
    """The lead's pre-computing job over the big batch: started, watched, cancelled and resumed."""

    def __init__(self, url: str, batch: int, runner, args):
        self.url, self.batch, self.runner, self.args = url, batch, runner, args
        self.job = None
        self.running_throughout = True
        self.cpu = 0.0
        self.wall = 0.0

    def start(self) -> dict:
        """Start (or resume) the job and return once it is suggesting (its engine built)."""
        from db import suggest_jobs

        self.job = suggest_jobs.start_precompute(self.url, self.batch, by="lead", runner=self.runner,
                                                 chunk=self.args.chunk, write=self.args.write,
                                                 niceness=self.args.niceness)
        st = self.runner.status(self.job)
        while st["state"] == "queued" or (st["state"] == "running" and not (st.get("metrics") or {}).get("done")):
            time.sleep(0.1)
            st = self.runner.status(self.job)
        if st["state"] != "running":
            raise RuntimeError(f"the job is not running: {st}")
        self._t = time.perf_counter(), cpu_seconds(st["pid"]), st["pid"]
        return st

    def check(self) -> dict:
        """Its status after a block of decisions; the CPU it took meanwhile is added up."""
        st = self.runner.status(self.job)
        self.running_throughout &= st["state"] == "running"
        t0, c0, pid = self._t
        c1 = cpu_seconds(pid)
        if c0 is not None and c1 is not None:
            self.cpu += c1 - c0
            self.wall += time.perf_counter() - t0
        return st


def run(args, tmp: Path) -> dict:
    from db import services
    from app_pages import _ui
    from termnorm.jobs import JobRunner

    os.environ["TERMNORM_MODELS"] = str(tmp / "models")  # the shipped model serves, for coder and job alike
    url = f"sqlite:///{tmp / 'blocking.sqlite3'}"
    services.init_db(url)
    t = time.perf_counter()
    if args.quick:
        vid, coder_batch, job_batch, gold = setup_demo(url, args.rows)
        vocabulary = "demo-procedures (the demo vocabulary)"
    else:
        vid, coder_batch, job_batch, gold = setup_cdn(url, args.rows, 2 * args.n + args.warmup + 10)
        vocabulary = f"{CDN_VOCABULARY} (real, 37,645 terms)"
    setup_s = time.perf_counter() - t
    holder = _ui.build_holder(url, vid)  # the app's engine of the vocabulary (db.serving.build_engine)
    coder = Coder(url, holder, coder_batch, gold)
    for _ in range(args.warmup):  # first calls load jieba / warm caches: not part of either phase
        coder.decide()
    lead = Lead(url, job_batch, JobRunner(tmp / "jobs"), args)
    # Alone and during alternate in rounds (the job cancelled and resumed between them), so both phases
    # meet the same background load of a shared machine.
    alone, during, loads = [], [], []
    k = max(1, args.n // args.rounds)
    rng = random.Random(0)
    try:
        for r in range(args.rounds):
            loads.append({"alone": load()})
            alone += coder.code(k, args.think, rng)
            lead.start()
            loads[-1]["during"] = load()
            during += coder.code(k, args.think, rng)
            st = lead.check()
            print(f"round {r + 1}/{args.rounds}: alone p50 {summary(alone)['p50_ms']:.1f} ms, during p50 "
                  f"{summary(during)['p50_ms']:.1f} ms (job at {st['metrics'].get('done', 0):,} / "
                  f"{st['metrics'].get('total', 0):,})")
            if r < args.rounds - 1 or args.quick:
                lead.runner.cancel(lead.job)
        loads.append({"after": load()})
        st = lead.runner.status(lead.job)
        if not args.quick:  # the last run goes on to the end: its rate is the job's throughput
            st = lead.runner.wait(lead.job, timeout=args.job_timeout, poll=1.0)
    finally:  # never leave the worker running after the benchmark
        if lead.job and lead.runner.status(lead.job)["state"] not in ("done", "failed", "cancelled"):
            lead.runner.cancel(lead.job)
    m = st.get("metrics") or {}
    services.dispose(url)
    a, d = summary(alone), summary(during)
    ratio = lambda key: round(d[key] / a[key], 2) if a[key] else None  # noqa: E731
    return {
        "what": "a coder's decision -> next suggestion ready (record_decision + learn + next_mention + "
                "suggestion), coding alone vs while a pre-computing job suggests for a big batch of the same "
                "vocabulary (rounds alternate, the job resumed each time)",
        "vocabulary": vocabulary, "batch_rows": args.rows, "n_decisions": len(alone) + len(during),
        "rounds": args.rounds, "warmup_decisions": args.warmup,
        "think_s": f"uniform 0..{args.think:g} s before each decision (not timed)",
        "coder_model_version": holder.engine.model_version,
        "database": "one SQLite file, WAL, synchronous=FULL",
        "alone": a, "during_job": d, "ratio_p50": ratio("p50_ms"), "ratio_p95": ratio("p95_ms"),
        "target": f"p95 during the job <= {TARGET_RATIO:g}x p95 alone",
        "meets_target": bool(a["p95_ms"] and d["p95_ms"] <= TARGET_RATIO * a["p95_ms"]),
        "job": {"state": st["state"], "done": m.get("done"), "total": m.get("total"), "stored": m.get("stored"),
                "seconds": m.get("seconds"), "mentions_per_s": round(m["rate"], 1) if m.get("rate") else None,
                "rate_is": "the last run, to the end" if st["state"] == "done" else "the last run, until cancelled",
                "chunk": args.chunk, "write": args.write, "niceness": args.niceness,
                "model_version": m.get("model_version"),
                "running_throughout": lead.running_throughout,
                "cpu_share_while_coding": round(lead.cpu / lead.wall, 2) if lead.wall else None},
        "setup_seconds": round(setup_s, 1),
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform(),
                    "loadavg_1_5_15": loads},
        "command": "python3 benchmarks/blocking.py" + (" --quick" if args.quick else ""),
    }


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="demo vocabulary, small batch, few decisions (< 1 min)")
    ap.add_argument("-n", type=int, default=None, help="decisions timed per phase (default 80; quick 10)")
    ap.add_argument("--rows", type=int, default=None, help="rows of the pre-computed batch (50,000; quick 5,000)")
    ap.add_argument("--chunk", type=int, default=None, help="mentions per job chunk (db.suggest_jobs.CHUNK)")
    ap.add_argument("--write", type=int, default=None, help="mentions per write transaction (db.suggest_jobs.WRITE)")
    ap.add_argument("--rounds", type=int, default=None, help="alone / during rounds (default 8; quick 2)")
    ap.add_argument("--niceness", type=int, default=None, help="the job's niceness (db.suggest_jobs.NICENESS)")
    ap.add_argument("--think", type=float, default=None, help="max seconds a coder reads before deciding "
                                                                 "(default 1.0; quick 0.2)")
    ap.add_argument("--warmup", type=int, default=None, help="untimed decisions first (default 3; quick 2)")
    ap.add_argument("--job-timeout", type=float, default=1800, help="seconds to wait for the job to finish")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    from db import suggest_jobs

    args.n = args.n or (10 if args.quick else 80)
    args.rounds = args.rounds or (2 if args.quick else 8)
    args.think = args.think if args.think is not None else (0.2 if args.quick else 1.0)
    args.warmup = args.warmup if args.warmup is not None else (2 if args.quick else 3)
    args.rows = args.rows or (3_000 if args.quick else 50_000)
    args.chunk = args.chunk or suggest_jobs.CHUNK
    args.write = args.write or suggest_jobs.WRITE
    args.niceness = suggest_jobs.NICENESS if args.niceness is None else args.niceness
    out = Path(args.out or REPO / "benchmarks" / "results" / ("blocking_quick.json" if args.quick
                                                              else "blocking.json"))
    with tempfile.TemporaryDirectory() as tmp:
        result = run(args, Path(tmp))
    j = result["job"]
    print(f"ratio p50 {result['ratio_p50']}x, p95 {result['ratio_p95']}x (target <= {TARGET_RATIO:g}x: "
          f"{'met' if result['meets_target'] else 'NOT met'}); job {j['mentions_per_s']} mentions/s "
          f"({j['state']}, {j['done']:,} / {j['total']:,}); job CPU share while coding {j['cpu_share_while_coding']}")
    write_json(out, result)
    return result


if __name__ == "__main__":
    main()
