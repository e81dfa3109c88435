"""Many coders at once: N simulated coders on one batch, on SQLite and on PostgreSQL.

Each coder is a process of its own with its own database connection and its own serving engine (what one app
instance per coder group holds: db.engine_holder.EngineHolder), going through the functions the coding page
calls: ``services.next_mention`` (claims the mention), ``EngineHolder.suggestion`` (the stored suggestion, or one
computed and stored now), a read of 0..``--think`` s (not timed: nobody decides unread; meanwhile the next
``PREPARE_AHEAD`` open mentions are suggested, as the page does after drawing), then
``services.record_decision(require_claim=True)`` (accept when the engine's answer is the gold one, else correct
with it), ``EngineHolder.learn``, and the next mention with its suggestion -- timed from the decision to the next
suggestion, what a coder waits for. Afterwards the database is checked:

* ``conflicts``: mentions with decisions by more than one coder (two coders served the same mention);
* ``lost``: decision ids a coder was given back that are not in the database;
* ``claims_left``: mentions still claimed after every coder finished (a decision releases its claim).

Rows ``{"backend", "coders", "decisions", "decisions_per_s", "p50_ms", "p95_ms", "conflicts", "lost",
"claims_left"}`` go to ``benchmarks/results/team_load.json``. Targets: 20 coders on PostgreSQL p95 <= 300 ms,
no conflict, nothing lost. The PostgreSQL server is a private one this script starts (tests/postgres.py: Debian's
server binaries), or ``--pg-url``.

    python3 benchmarks/team_load.py                 # N = 1, 5, 20 on both backends (a few minutes)
    python3 benchmarks/team_load.py --coders 1,5 --backends sqlite --decisions 5   # a quick look
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing as mp
import os
import random
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))  # tests/postgres.py: the private PostgreSQL server

from benchmarks._results import write_json  # noqa: E402

TARGET_P95_MS = 300.0


def _seed(url: str, mentions: int) -> tuple[int, int, dict[str, list[str]]]:
    """The demo procedures vocabulary and a batch of ``mentions`` rows made of its labelled mentions."""
    from db import services
    from termnorm.demo import demo_mentions, demo_vocabulary

    services.init_db(url)
    demo = demo_mentions("procedures")
    rows = [demo[i % len(demo)] for i in range(mentions)]
    # repeats get a bed number, so no two rows are the same text (the sieve would answer a repeat from memory)
    texts = [m.text if i < len(demo) else f"{m.text}（{i // len(demo) + 1}床）" for i, m in enumerate(rows)]
    with services.session_scope(url) as s:
        vid = services.load_vocabulary(s, demo_vocabulary("procedures"), "demo-procedures")
        bid = services.create_batch(s, "team load", vid, texts, username="lead")
    return vid, bid, {t: list(m.terms) for t, m in zip(texts, rows)}


def _coder(url: str, vid: int, bid: int, gold: dict, name: str, decisions: int, think: float, seed: int,
           start, out, holder=None) -> None:
    """One coder: ``decisions`` decisions, timing decision -> next suggestion; results to ``out``. A process
    builds its own serving engine; a thread (one app server) is handed the server's shared ``holder``."""
    from db import services
    from db.engine_holder import PREPARE_AHEAD, build_holder

    shared = holder is not None
    holder = holder or build_holder(url, vid)
    rng = random.Random(seed)
    with services.session_scope(url) as s:
        services.ensure_user(s, name)
    start.wait()  # every coder ready: they start together
    waits, ids, errors = [], [], []
    with services.session_scope(url) as s:
        cur = services.next_mention(s, bid, name)
        sug = holder.suggestion(s, cur["id"], cur["text"]) if cur else None
    while cur is not None and len(ids) < decisions:
        t_read = time.perf_counter() + rng.uniform(0, think)  # reading the mention; meanwhile, as the page does
        try:
            with services.session_scope(url) as s:  # after drawing it (_ui.prepare_in_background), the next ones
                holder.prepare(s, bid, cur["id"], PREPARE_AHEAD)
        except Exception as e:  # noqa: BLE001 - as in the app: a failed prepare only means computing on demand
            errors.append(f"prepare: {type(e).__name__}: {e}"[:200])
        time.sleep(max(0.0, t_read - time.perf_counter()))
        t0 = time.perf_counter()
        terms = gold[cur["text"]]
        try:
            with services.session_scope(url) as s:
                right = set(sug.chosen) == set(terms)
                ids.append(services.record_decision(s, cur["id"], name, "accept" if right else "correct",
                                                    [] if right else terms, require_claim=True))
                holder.learn(cur["text"], terms)
                cur = services.next_mention(s, bid, name)
                sug = holder.suggestion(s, cur["id"], cur["text"]) if cur else None
        except Exception as e:  # noqa: BLE001 - counted and reported, the run goes on
            errors.append(f"{type(e).__name__}: {e}"[:200])
            with services.session_scope(url) as s:
                cur = services.next_mention(s, bid, name)
                sug = holder.suggestion(s, cur["id"], cur["text"]) if cur else None
            continue
        waits.append((time.perf_counter() - t0) * 1000)
    with services.session_scope(url) as s:  # leaving: the mention on screen is not decided; release it
        if cur is not None:
            services.release_claim(s, cur["id"], name)
    out.put({"coder": name, "waits": waits, "ids": ids, "errors": errors})
    if not shared:  # a thread leaves the server's connection pool to the others
        services.dispose(url)


def run(backend: str, url: str, coders: int, decisions: int, think: float, seed: int,
        mode: str = "processes") -> dict:
    """``mode`` "processes": a process, connection and engine per coder (the heaviest case: every process
    suggests and learns for itself); "server": one app server, as ``termnorm app`` runs -- each coder a thread
    (a Streamlit session) with its own connection, all sharing the server's engine holder."""
    import queue
    import threading

    from sqlalchemy import func, select

    from db import services
    from db.models import Decision, Mention

    vid, bid, gold = _seed(url, coders * decisions + 20)
    services.dispose(url)
    if mode == "server":
        from db.engine_holder import build_holder

        holder = build_holder(url, vid)
        start, out = threading.Event(), queue.Queue()
        procs = [threading.Thread(target=_coder, args=(url, vid, bid, gold, f"coder{i}", decisions, think, seed + i,
                                                       start, out, holder)) for i in range(coders)]
    else:
        ctx = mp.get_context("spawn")
        start, out = ctx.Event(), ctx.Queue()
        procs = [ctx.Process(target=_coder, args=(url, vid, bid, gold, f"coder{i}", decisions, think, seed + i,
                                                  start, out)) for i in range(coders)]
    for p in procs:
        p.start()
    time.sleep(1.0)
    # all built their engines? wait until each has made its user (cheap proxy: the users table)
    deadline = time.time() + 600
    while time.time() < deadline:
        with services.session_scope(url) as s:
            if len(services.users(s)) >= coders:
                break
        time.sleep(0.5)
    time.sleep(2.0)  # the last engine built after its user row
    t0 = time.perf_counter()
    start.set()
    results = [out.get(timeout=1800) for _ in procs]
    wall = time.perf_counter() - t0
    for p in procs:
        p.join(60)
    waits = [w for r in results for w in r["waits"]]
    acked = [i for r in results for i in r["ids"]]
    with services.session_scope(url) as s:
        stored = set(s.scalars(select(Decision.id).where(Decision.id.in_(acked))).all()) if acked else set()
        multi = s.execute(select(Decision.mention_id).group_by(Decision.mention_id)
                          .having(func.count(func.distinct(Decision.user_id)) > 1)).all()
        claimed = s.scalar(select(func.count()).select_from(Mention).where(Mention.batch_id == bid,
                                                                           Mention.claimed_by.is_not(None)))
    services.dispose(url)
    row = {"backend": backend, "mode": mode, "coders": coders, "decisions": len(acked),
           "decisions_per_s": round(len(acked) / wall, 2),
           "p50_ms": round(float(np.percentile(waits, 50)), 1) if waits else None,
           "p95_ms": round(float(np.percentile(waits, 95)), 1) if waits else None,
           "conflicts": len(multi), "lost": len(set(acked) - stored), "claims_left": int(claimed or 0),
           "errors": [e for r in results for e in r["errors"]][:10], "wall_s": round(wall, 1)}
    print(f"{backend:10s} {mode:9s} {coders:3d} coders: {row['decisions']} decisions, {row['decisions_per_s']}/s, "
          f"p50 {row['p50_ms']} ms, p95 {row['p95_ms']} ms, conflicts {row['conflicts']}, lost {row['lost']}, "
          f"claims left {row['claims_left']}, errors {len(row['errors'])}", flush=True)
    return row


@contextlib.contextmanager
def _databases(backends: list[str], pg_url: str | None):
    """A function backend -> fresh database URL for each run (PostgreSQL: a private server unless given)."""
    tmp = Path(tempfile.mkdtemp(prefix="team-load-"))
    n = iter(range(10_000))
    with contextlib.ExitStack() as stack:
        server = None
        if "postgresql" in backends:
            import postgres

            server = pg_url or stack.enter_context(postgres.postgres_server())

        def fresh(backend: str) -> str:
            if backend == "sqlite":
                return f"sqlite:///{tmp / f'team{next(n)}.sqlite3'}"
            import postgres

            return postgres.fresh_database(server, f"team{next(n)}")
        yield fresh


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--coders", default="1,5,20")
    ap.add_argument("--backends", default="sqlite,postgresql")
    ap.add_argument("--decisions", type=int, default=12, help="decisions per coder")
    ap.add_argument("--think", type=float, default=2.0, help="a coder reads 0..THINK s before deciding")
    ap.add_argument("--modes", default="server,processes",
                    help="server: one app server, coders as its sessions (threads) sharing its engine; processes: "
                         "a process and engine per coder")
    ap.add_argument("--pg-url", help="an existing PostgreSQL server (its databases are created here)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(REPO / "benchmarks" / "results"))
    args = ap.parse_args(argv)
    os.environ.setdefault("TERMNORM_DATA_DIR", tempfile.mkdtemp(prefix="team-load-data-"))
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    rows = []
    with _databases(backends, args.pg_url) as fresh:
        for mode in args.modes.split(","):
            for backend in backends:
                for n in [int(x) for x in args.coders.split(",")]:
                    rows.append(run(backend, fresh(backend), n, args.decisions, args.think, args.seed, mode))
    # the target is for the deployment the README describes: one app server
    pg20 = [r for r in rows if r["backend"] == "postgresql" and r["coders"] == 20 and r["mode"] == "server"]
    result = {"settings": vars(args), "rows": rows, "target_p95_ms": TARGET_P95_MS,
              "meets_target": bool(pg20) and all(r["p95_ms"] <= TARGET_P95_MS and not r["conflicts"] and not r["lost"]
                                                 for r in pg20),
              "machine": {"cpus": os.cpu_count(), "load_1min": os.getloadavg()[0]}}
    write_json(Path(args.out) / "team_load.json", result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
