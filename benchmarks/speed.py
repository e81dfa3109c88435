"""Latency and throughput of the pipeline, on the CPU (and on a GPU when one is present).

    python3 benchmarks/speed.py [--data ../shared/data] [--n 200] [--ranker DIR | --ranker-encoder e5-small]
                                [--layers 6] [--out benchmarks/results/speed.json]

Measures, on Yidu-N7K val mentions with the Yidu-N7K lexical pipeline (fitted
on train):
- single-mention latency p50 / p95 of ``Engine.suggest`` (recall + GBM ranker + count),
- the same with the keyword-attentive cross-encoder re-ranking 20 candidates
  (a trained ranker folder, or an untrained one built from an encoder folder:
  the cost does not depend on the weights),
- batch throughput (mentions/s) of ``suggest_batch``.
Prints the figures and writes JSON with the device used.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._results import write_json  # noqa: E402

from termnorm.engine import Engine  # noqa: E402
from termnorm.loaders import load_labelled, load_vocabulary  # noqa: E402


def pct(xs, q):
    return round(float(np.percentile(np.asarray(xs) * 1000, q)), 1)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data"))
    ap.add_argument("--n", type=int, default=200, help="mentions for the single-mention latency")
    ap.add_argument("--ranker", help="a trained ranker folder")
    ap.add_argument("--ranker-encoder", help="build an untrained ranker from this encoder spec (e.g. e5-small)")
    ap.add_argument("--layers", type=int, default=6, help="encoder layers kept for --ranker-encoder")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "speed.json"))
    args = ap.parse_args(argv)
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    data = Path(args.data)
    vocab = load_vocabulary(data / "yidu-n7k" / "code.txt")
    train = load_labelled(data / "yidu-n7k" / "train.xlsx", vocab).mentions
    val = load_labelled(data / "yidu-n7k" / "val.xlsx", vocab).mentions
    eng = Engine(vocab, history=train, keyword_dir=data / "keywords", recall_profile="compact")
    eng.fit_lexical(train)
    texts = [m.text for m in val]
    device = "cuda" if torch.cuda.is_available() else "cpu"
    res = {"device": torch.cuda.get_device_name(0) if device == "cuda" else f"cpu ({os.cpu_count()} cores)",
           "torch_threads": torch.get_num_threads(), "python": platform.python_version(),
           "command": "python3 benchmarks/speed.py " + " ".join(argv or sys.argv[1:])}
    eng.suggest(texts[0])  # warm-up
    lat = []
    for t in texts[: args.n]:
        t0 = time.perf_counter()
        eng.suggest(t)
        lat.append(time.perf_counter() - t0)
    res["lexical_single"] = {"p50_ms": pct(lat, 50), "p95_ms": pct(lat, 95), "n": len(lat)}
    t0 = time.perf_counter()
    eng.suggest_batch(texts)
    res["lexical_batch_mentions_per_s"] = round(len(texts) / (time.perf_counter() - t0), 1)
    print(f"lexical pipeline: single p50 {res['lexical_single']['p50_ms']} ms, p95 {res['lexical_single']['p95_ms']} "
          f"ms; batch {res['lexical_batch_mentions_per_s']} mentions/s on {res['device']}", flush=True)

    ranker = None
    if args.ranker:
        from termnorm.rank.crossfit import load_ranker

        ranker = load_ranker(args.ranker)
    elif args.ranker_encoder:
        from termnorm.encoder.provider import resolve_encoder
        from termnorm.rank.kar import RankerModel

        ranker = RankerModel.from_encoder(resolve_encoder(args.ranker_encoder), eng.tagger, num_layers=args.layers)
    if ranker is not None:
        sugs = eng.suggest_batch(texts[: args.n])
        lat = []
        ranker.score([texts[0]], [[c.term for c in sugs[0].candidates[:20]]])
        for t, s in zip(texts[: args.n], sugs):
            cands = [c.term for c in s.candidates[:20]]
            t0 = time.perf_counter()
            eng.suggest(t)
            ranker.score([t], [cands])
            lat.append(time.perf_counter() - t0)
        res["with_ranker_20_candidates"] = {"p50_ms": pct(lat, 50), "p95_ms": pct(lat, 95), "n": len(lat),
                                            "layers": args.layers if args.ranker_encoder else None}
        pairs_m = [t for t, s in zip(texts, eng.suggest_batch(texts)) for _ in s.candidates[:20]]
        pairs_c = [c.term for s in eng.suggest_batch(texts) for c in s.candidates[:20]]
        t0 = time.perf_counter()
        ranker.score_pairs(pairs_m, pairs_c, 256)
        secs = time.perf_counter() - t0
        res["ranker_batch_mentions_per_s"] = round(len(texts) / secs, 1)
        print(f"with ranker (20 candidates): p50 {res['with_ranker_20_candidates']['p50_ms']} ms, p95 "
              f"{res['with_ranker_20_candidates']['p95_ms']} ms; ranker batch {res['ranker_batch_mentions_per_s']} "
              f"mentions/s", flush=True)
    write_json(args.out, res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
