"""How fast the normalization API answers: one ``POST /normalize`` per mention, over HTTP, as an ETL calls it.

``termnorm serve`` (uvicorn, one process) runs on a loopback port over a fresh SQLite database holding the
vocabulary; a token from ``termnorm api-token``; after 20 warm-up calls, each of ``--calls`` mentions is sent
alone (the lexical pipeline with the shipped cold-start ranker: what a vocabulary serves before any retraining)
and the wall time of the whole HTTP round trip is recorded. Also one call with 100 mentions (throughput).
Target: p95 of one call <= 50 ms on this 2-core machine.

    python3 benchmarks/api_latency.py            # Yidu-N7K code.txt (9,468 terms), Yidu-N7K val mentions
    python3 benchmarks/api_latency.py --demo     # the demo procedures vocabulary and mentions (no shared data)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks._results import write_json  # noqa: E402

DATA = REPO.parent / "shared" / "data"
TARGET_P95_MS = 50.0


def _setup(url: str, demo: bool) -> tuple[str, list[str]]:
    from db import services
    from termnorm.demo import demo_mentions, demo_vocabulary
    from termnorm.loaders import load_labelled, load_vocabulary

    services.init_db(url)
    with services.session_scope(url) as s:
        if demo:
            vocab, name = demo_vocabulary("procedures"), "demo-procedures"
            texts = [m.text for m in demo_mentions("procedures")]
        else:
            vocab, name = load_vocabulary(DATA / "yidu-n7k" / "code.txt"), "yidu-n7k"
            texts = [m.text for m in load_labelled(DATA / "yidu-n7k" / "val.xlsx").mentions]
        services.load_vocabulary(s, vocab, name)
        services.ensure_user(s, "etl", role="coder")
    return name, texts


def _post(base: str, token: str, body: dict) -> dict:
    req = urllib.request.Request(base + "/normalize", data=json.dumps(body, ensure_ascii=False).encode("utf-8"),
                                 headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as r:
        return json.loads(r.read())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--demo", action="store_true", help="the demo vocabulary instead of Yidu-N7K")
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--out", default=str(REPO / "benchmarks" / "results"))
    args = ap.parse_args(argv)

    tmp = Path(tempfile.mkdtemp(prefix="api-latency-"))
    url = f"sqlite:///{tmp / 'db.sqlite3'}"
    name, texts = _setup(url, args.demo)
    env = dict(os.environ, TERMNORM_DB_URL=url, TERMNORM_DATA_DIR=str(tmp / "data"),
               PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    token = subprocess.run([sys.executable, "-m", "termnorm.cli", "api-token", "etl"], env=env, check=True,
                           capture_output=True, text=True).stdout.strip()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    base = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen([sys.executable, "-m", "termnorm.cli", "serve", "--port", str(port)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        t_start = time.perf_counter()
        while True:
            try:
                urllib.request.urlopen(base + "/health", timeout=2).read()
                break
            except OSError:
                if proc.poll() is not None or time.perf_counter() - t_start > 180:
                    raise RuntimeError("the API did not start")
                time.sleep(0.2)
        t0 = time.perf_counter()
        _post(base, token, {"mentions": [texts[0]], "vocabulary": name})  # builds the serving engine
        first_s = time.perf_counter() - t0
        for t in texts[1:21]:
            _post(base, token, {"mentions": [t], "vocabulary": name})
        ms = []
        picks = [texts[21 + i % max(1, len(texts) - 21)] for i in range(args.calls)]
        for t in picks:
            t0 = time.perf_counter()
            out = _post(base, token, {"mentions": [t], "vocabulary": name})
            ms.append((time.perf_counter() - t0) * 1000)
            assert out["results"][0]["candidates"], t
        batch = texts[:100]
        t0 = time.perf_counter()
        _post(base, token, {"mentions": batch, "vocabulary": name})
        batch_s = time.perf_counter() - t0
    finally:
        proc.terminate()
        proc.wait(20)
    p50, p95 = (round(float(np.percentile(ms, q)), 1) for q in (50, 95))
    result = {"vocabulary": name, "calls": len(ms), "p50_ms": p50, "p95_ms": p95, "target_p95_ms": TARGET_P95_MS,
              "meets_target": p95 <= TARGET_P95_MS, "first_call_s": round(first_s, 2),
              "batch_100_mentions_s": round(batch_s, 2), "batch_mentions_per_s": round(len(batch) / batch_s, 1),
              "machine": {"cpus": os.cpu_count(), "load_1min": os.getloadavg()[0], "python": platform.python_version()}}
    print(f"{name}: one mention per call p50 {p50} ms, p95 {p95} ms (target p95 <= {TARGET_P95_MS:.0f} ms); "
          f"100 mentions in one call {batch_s:.2f} s ({result['batch_mentions_per_s']} mentions/s); "
          f"first call (engine built) {first_s:.1f} s; load {result['machine']['load_1min']:.1f}")
    write_json(Path(args.out) / ("api_latency_demo.json" if args.demo else "api_latency.json"), result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
