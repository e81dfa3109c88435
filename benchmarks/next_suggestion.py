"""Time from a coder's decision to the next suggestion being ready on the coding page.

What the page does after a click, in order (app_pages/coding_queue.py):
``db.services.record_decision`` (committed, fsync'ed) -> the engine learns
the coded mention (accept / correct) -> ``next_mention`` -> the next
mention's suggestion (a database read when it was prepared ahead and is not
stale, else the engine runs). Preparing the next mentions happens after the
page is drawn, while the coder reads, so it is not part of the wait.

The simulated coder answers the 20 first demo procedure mentions with their
gold terms (accept when the engine got them, else correct). Two runs on
fresh SQLite files: ``prepared`` (the app's behaviour, _ui.PREPARE_AHEAD
mentions prepared after each page) and ``on_demand`` (no preparation: the
engine runs for every next mention), for comparison.

    python3 benchmarks/next_suggestion.py            # prints a table, writes results/next_suggestion.json
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks._results import write_json  # noqa: E402

from db import services  # noqa: E402
from app_pages import _ui  # noqa: E402
from termnorm.engine import demo_mentions  # noqa: E402


def run(n: int, prepare: bool, folder: Path) -> dict:
    url = f"sqlite:///{folder / ('prepared' if prepare else 'on_demand')}.sqlite3"
    services.init_db(url)
    with services.session_scope(url) as s:
        _ui.seed_demo(s)
        vid = services.vocabulary_id(s, "demo-procedures")
        batch = services.batches(s, vid)[0]["id"]
    holder = _ui.build_holder(url, vid)
    gold = {m.text: m.terms for m in demo_mentions("procedures")}
    user = "benchmark"
    totals, parts = [], {"record_decision": [], "learn": [], "next_mention": [], "suggestion": []}
    recomputed = 0
    with services.session_scope(url) as s:
        current = services.next_mention(s, batch, user)
        sug = holder.suggestion(s, current["id"], current["text"])
        if prepare:
            holder.prepare(s, batch, current["id"], _ui.PREPARE_AHEAD)
        for _ in range(n):
            terms = gold[current["text"]]
            action = "accept" if set(terms) == set(sug.chosen) else "correct"
            t0 = time.perf_counter()
            services.record_decision(s, current["id"], user, action, terms, seconds=5.0, shown=_ui.SHOWN)
            t1 = time.perf_counter()
            holder.learn(current["text"], terms)
            t2 = time.perf_counter()
            current = services.next_mention(s, batch, user)
            t3 = time.perf_counter()
            stored = services.latest_suggestion(s, current["id"])
            fresh = stored is not None and not holder.is_stale(current["id"], current["text"])
            sug = holder.suggestion(s, current["id"], current["text"])
            t4 = time.perf_counter()
            recomputed += not fresh
            totals.append(t4 - t0)
            for k, a, b in (("record_decision", t0, t1), ("learn", t1, t2), ("next_mention", t2, t3),
                            ("suggestion", t3, t4)):
                parts[k].append(b - a)
            if prepare:  # after the page is drawn: not part of the wait
                holder.prepare(s, batch, current["id"], _ui.PREPARE_AHEAD)
    services.dispose(url)
    ms = lambda xs, q: round(float(np.percentile(np.array(xs) * 1000, q)), 2)  # noqa: E731
    return {"p50_ms": ms(totals, 50), "p95_ms": ms(totals, 95), "max_ms": ms(totals, 100),
            "suggestions_computed_while_waiting": recomputed,
            "parts_p50_ms": {k: ms(v, 50) for k, v in parts.items()},
            "parts_p95_ms": {k: ms(v, 95) for k, v in parts.items()},
            "model_version": holder.engine.model_version}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-n", type=int, default=20, help="decisions timed (default 20)")
    ap.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "next_suggestion.json"))
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        from termnorm.engine import Engine

        Engine.from_demo("procedures").suggest("甲状腺切除术")  # loads jieba once, outside the timing
        result = {"what": "decision -> next suggestion ready (record_decision + learn + next_mention + "
                          "suggestion)", "n_decisions": args.n, "vocabulary": "demo-procedures",
                  "database": "SQLite file, WAL, synchronous=FULL",
                  "prepared": run(args.n, True, Path(tmp)), "on_demand": run(args.n, False, Path(tmp)),
                  "machine": {"python": platform.python_version(), "cpus": os.cpu_count(),
                              "platform": platform.platform()},
                  "command": "python3 benchmarks/next_suggestion.py"}
    print(f"{'':12}{'p50 ms':>9}{'p95 ms':>9}{'computed':>10}   parts p50 (ms)")
    for k in ("prepared", "on_demand"):
        r = result[k]
        print(f"{k:12}{r['p50_ms']:9.1f}{r['p95_ms']:9.1f}{r['suggestions_computed_while_waiting']:10d}   "
              + ", ".join(f"{p} {v:.1f}" for p, v in r["parts_p50_ms"].items()))
    out = Path(args.out)
    write_json(out, result)
    return result


if __name__ == "__main__":
    main()
