"""Batch pre-coding throughput: ``termnorm normalize --input --output`` over a million rows, in one process and on
a local Ray with 1 and 2 engine actors.

The input is made from the real Yidu-N7K mentions (train + val, 5,000 strings) by deterministic rules (seed 0),
as a hospital's procedure history looks: each distinct string is a real mention, or one with its side written
out (左侧/右侧/双侧 before it), its brackets full-width, a trailing 术 added or dropped, or two real mentions
joined by "+" (a multi-part entry), until ``--distinct`` strings exist; the first ``--distinct`` rows hold each
string once, the rest are drawn with Zipf-like frequencies (weight 1/rank) so frequent strings repeat, as they do
in records; then the rows are shuffled. (The job trims surrounding spaces, so two of the 100,000 strings are one
mention to it: it counts 99,999.)

Every mode runs the CLI as a subprocess with ``--restart`` (nothing cached) on the same trained pipeline
(``--model``, default runs/yidu-lexical: ``termnorm train lexical`` on Yidu-N7K train), timed end to end (engine
load, scan, coding, writing). Peak memory is the largest sum of resident memory over the run's process tree (the
CLI, and with Ray its raylet, workers and actors), sampled every 0.5 s. The outputs of the modes are compared row
for row. Rows go to ``benchmarks/results/batch.json``.

    termnorm train lexical --vocab ../shared/data/yidu-n7k/code.txt --train ../shared/data/yidu-n7k/train.xlsx \\
        --keywords ../shared/data/keywords --out runs/yidu-lexical
    python3 benchmarks/batch.py                                  # 1M rows, 100k distinct: about 25 minutes
    python3 benchmarks/batch.py --rows 20000 --distinct 2000     # a quick look
"""

from __future__ import annotations

import argparse
import csv
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
DATA = REPO.parent / "shared" / "data" / "yidu-n7k"
SIDES = ("左侧", "右侧", "双侧")


def real_mentions() -> list[str]:
    import pandas as pd

    seen, out = set(), []
    for name in ("train.xlsx", "val.xlsx"):
        for m in pd.read_excel(DATA / name, dtype=str)["原始词"].fillna(""):
            m = m.strip()
            if m and m not in seen:
                seen.add(m)
                out.append(m)
    return out


def variants(m: str, rng) -> list[str]:
    out = [m]
    if not m.startswith(SIDES + ("左", "右", "双")):
        out.append(SIDES[int(rng.integers(3))] + m)
    if "(" in m or ")" in m:
        out.append(m.replace("(", "（").replace(")", "）"))
    out.append(m[:-1] if m.endswith("术") else m + "术")
    return out


def distinct_strings(n: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    base = real_mentions()
    seen: dict[str, None] = {}
    for m in base:
        for v in variants(m, rng):
            seen.setdefault(v, None)
    while len(seen) < n:  # multi-part entries: two real mentions joined by "+"
        a, b = rng.integers(len(base), size=2)
        if a != b:
            seen.setdefault(f"{base[a]}+{base[b]}", None)
    return list(seen)[:n]


def write_input(path: Path, n_rows: int, n_distinct: int, seed: int = 0) -> None:
    strings = distinct_strings(n_distinct, seed)
    rng = np.random.default_rng(seed + 1)
    weights = 1.0 / np.arange(1, n_distinct + 1)
    extra = rng.choice(n_distinct, size=max(0, n_rows - n_distinct), p=weights / weights.sum())
    order = np.concatenate([np.arange(min(n_rows, n_distinct)), extra])
    rng.shuffle(order)
    with open(path, "w", encoding="utf-8", newline="") as f:
        w = csv.writer(f)
        w.writerow(["record_id", "mention"])
        w.writerows((f"R{i:07d}", strings[j]) for i, j in enumerate(order))


def tree_rss_mb(pid: int) -> float:
    """Resident memory of ``pid`` and all its descendants (a /proc walk: Linux only, no psutil dependency)."""
    kids: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{d}/statm") as f:
                rss[int(d)] = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError, IndexError):
            continue
        kids.setdefault(ppid, []).append(int(d))
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        total += rss.get(p, 0)
        todo.extend(kids.get(p, []))
    return total / 2**20


def run_mode(name: str, args, src: Path, out: Path) -> dict:
    cmd = [sys.executable, "-m", "termnorm.cli", "normalize", "--input", str(src), "--output", str(out),
           "--model", str(args.model), "--keep", "record_id", "--restart", "--quiet"]
    if name.startswith("ray"):
        cmd += ["--ray", "--actors", name[3:]]
    peak, stop = [0.0], threading.Event()
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def sample():
        while not stop.is_set():
            peak[0] = max(peak[0], tree_rss_mb(proc.pid))
            stop.wait(0.5)

    threading.Thread(target=sample, daemon=True).start()
    stdout, stderr = proc.communicate()
    seconds = time.perf_counter() - t0
    stop.set()
    if proc.returncode:
        raise SystemExit(f"{name} failed:\n{stderr[-3000:]}")
    print(stdout.strip())
    distinct = int(re.search(r"\(([\d,]+) distinct", stdout).group(1).replace(",", ""))  # the job's own count
    return {"mode": name, "seconds": round(seconds, 1), "rows_per_s": round(args.rows / seconds, 1),
            "distinct": distinct, "distinct_per_s": round(distinct / seconds, 1), "peak_mb": round(peak[0], 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--distinct", type=int, default=100_000)
    ap.add_argument("--modes", default="single,ray1,ray2", help="single, rayN (N engine actors), comma-separated")
    ap.add_argument("--model", type=Path, default=REPO / "runs" / "yidu-lexical")
    ap.add_argument("--work", type=Path, default=REPO / "runs" / "batch")
    ap.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "batch.json"))
    args = ap.parse_args()
    if not (args.model / "pipeline.joblib").exists():
        raise SystemExit(f"{args.model}: train it first (see this script's help)")
    args.work.mkdir(parents=True, exist_ok=True)
    src = args.work / f"input_{args.rows}_{args.distinct}.csv"
    if not src.exists():
        t0 = time.perf_counter()
        write_input(src, args.rows, args.distinct)
        print(f"{src}: {args.rows:,} rows, {args.distinct:,} distinct ({time.perf_counter() - t0:.0f} s to make)")
    import pyarrow.parquet as pq

    rows, first = [], None
    for mode in args.modes.split(","):
        out = args.work / f"out_{mode}.parquet"
        r = run_mode(mode, args, src, out)
        table = pq.read_table(out)
        r["rows_written"] = table.num_rows
        if first is None:
            first = table
        r["same_output_as_" + args.modes.split(",")[0]] = bool(table.equals(first))
        print(r)
        rows.append(r)
    from benchmarks._results import write_json

    write_json(args.out, {"command": "python3 " + " ".join(sys.argv), "machine": f"{os.cpu_count()} cores, no GPU",
                          "model": str(args.model.relative_to(REPO)) if args.model.is_relative_to(REPO) else
                          str(args.model), "rows": args.rows, "distinct": args.distinct, "results": rows})


if __name__ == "__main__":
    main()
