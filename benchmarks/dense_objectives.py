"""The three dense-recall objectives side by side, under one training budget.

    python3 benchmarks/dense_objectives.py [--data ../shared/data] [--steps 40] [--threads 1]
                                           [--max-val 500] [--out benchmarks/results/dense_objectives.json]

Trains the bi-encoder (e5-small rebuilt offline by ``termnorm encoder build``)
on Yidu-N7K train once per objective of ``termnorm.dense.train`` — ``nce``
(approach D: symmetric in-batch InfoNCE + mined hard negatives + E-FN),
``batch_hard`` (approach E: batch-hard soft-margin triplet) and
``triplet_online`` (approach A: triplet with per-epoch negative sampling) —
each for the same number of optimizer steps (batch 32; wall-clock time is
reported but depends on what else the machine runs), then reports
recall@1/10/20 of the term index on Yidu-N7K val, count-head accuracy, steps
done and seconds. Every run is the CLI itself (``python -m
termnorm.dense.train``) in a subprocess, so the figures are what a user gets.
Prints a table and writes JSON (the models go to a temporary folder).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._results import write_json  # noqa: E402
OBJECTIVES = ("nce", "batch_hard", "triplet_online")


def run_one(objective: str, data: Path, args, work: Path) -> dict:
    out = work / objective
    cmd = [sys.executable, "-m", "termnorm.dense.train",
           "--vocab", str(data / "yidu-n7k/code.txt"), "--train", str(data / "yidu-n7k/train.xlsx"),
           "--val", str(data / "yidu-n7k/val.xlsx"), "--encoder", args.encoder, "--objective", objective,
           "--epochs", str(args.epochs), "--lr", str(args.lr), "--threads", str(args.threads),
           "--max-steps", str(args.steps), "--max-val", str(args.max_val), "--no-progress", "--out", str(out)]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{objective}: training failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    m = json.loads((out / "config.json").read_text(encoding="utf-8"))["metrics"]
    first = m["epochs"][0] if m.get("epochs") else {}
    return {"objective": objective, "final": m.get("final"), "steps": m.get("steps"),
            "train_seconds": m.get("train_seconds"), "wall_seconds": round(wall, 1),
            "stopped_early": m.get("stopped_early"), "device": m.get("device"),
            "epoch0_eval": {k: first.get(k) for k in ("recall@1", "recall@10", "recall@20") if k in first},
            "command": " ".join(cmd[1:]).replace(str(out), "OUT")}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data"))
    ap.add_argument("--encoder", default="e5-small")
    ap.add_argument("--objectives", default=",".join(OBJECTIVES))
    ap.add_argument("--steps", type=int, default=40, help="training budget per objective (optimizer steps)")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--lr", type=float, default=5e-5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--max-val", type=int, default=500)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "dense_objectives.json"))
    args = ap.parse_args(argv)
    data = Path(args.data)
    results = {"data": str(data), "machine": {"python": platform.python_version(), "platform": platform.platform(),
                                              "cpus": os.cpu_count()},
               "command": "python3 benchmarks/dense_objectives.py " + " ".join(argv or sys.argv[1:]),
               "budget_steps": args.steps, "threads": args.threads, "runs": []}
    with tempfile.TemporaryDirectory(prefix="termnorm-dense-") as tmp:
        for obj in args.objectives.split(","):
            r = run_one(obj, data, args, Path(tmp))
            results["runs"].append(r)
            f = r["final"] or {}
            print(f"{obj:15s} steps={r['steps']:4d} train_s={r['train_seconds']:7.1f}  "
                  + "  ".join(f"{k}={f[k]:.3f}" for k in ("recall@1", "recall@10", "recall@20", "count_accuracy")
                              if k in f), flush=True)
    write_json(args.out, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
