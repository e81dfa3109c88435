"""Throughput and latency of the neural stages (issue 28, item 4): dense recall of 20 terms, the keyword-attentive
cross-encoder re-ranking them, the count head, for batches of 1, 64 and 1,024 mentions, on a GPU or the CPU.

    python3 benchmarks/gpu/throughput.py --bundle /tmp/bundle-gpu_dense --out OUT.json  # on the GPU machine,
                                                                        # after benchmarks/gpu/device_run.sh
    python3 benchmarks/gpu/throughput.py --bundle runs/gpu_dense/bundle --device cpu --batches 1 --mentions 400 \\
        [--int8] --out OUT.json                                         # one mention at a time on the CPU

(benchmarks/results/gpu_throughput.json gathers both, with the commands as run.)

It reads dense_cv.py's bundle (``{set}_dense.pkl.gz``: the vocabulary and the query texts; ``encoder/``, the
pruned e5-small rebuild) and builds both models on that encoder at full depth (12 layers), so the timings are
those of the trained models' shapes: speed depends on the architecture and the text lengths, not on the weights.
The mentions are the set's query texts in their stored order; each configuration first warms up on texts it then
does not time, and starts from an empty tokenisation cache (the vocabulary's names are cached as they come, as a
serving process would). The lexical strategies and the GBM are CPU stages, measured by benchmarks/speed.py.
"""

from __future__ import annotations

import argparse
import gzip
import json
import pickle
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

def build(args):
    """The dense recaller fitted on the set's vocabulary, the cross-encoder, the texts; and their set-up times."""
    import torch

    from benchmarks.gpu.train_kar import SLOTS
    from termnorm.dense.biencoder import BiEncoder
    from termnorm.dense.index import DenseRecaller
    from termnorm.rank.kar import RankerModel
    from termnorm.rank.train import keyword_tagger

    if args.threads:
        torch.set_num_threads(args.threads)
    bundle = Path(args.bundle)
    with gzip.open(bundle / f"{args.set}_dense.pkl.gz", "rb") as f:
        doc = pickle.load(f)
    t0 = time.perf_counter()
    encoder = Path(args.encoder) if args.encoder else bundle / "encoder"
    bi = BiEncoder.from_folder(encoder, device=args.device, max_seq_length=args.max_seq_length)
    bi.ensure_count_head()  # untrained, the trained one's shape
    recaller = DenseRecaller(bi, use_history=False).fit(doc["vocab"])
    t1 = time.perf_counter()
    tagger_file = bundle / f"{args.set}_tagger.pkl"
    if not tagger_file.is_file():  # as kar_cv.py collect writes it: the set's keyword files and the built-in words
        keywords = Path(args.data) / "keywords"
        tagger_file.write_bytes(pickle.dumps(keyword_tagger(doc["vocab"], keywords if keywords.is_dir() else None)))
    tagger = pickle.loads(tagger_file.read_bytes())
    kar = RankerModel.from_encoder(encoder, tagger, slots=SLOTS[args.set], device=args.device)
    if args.int8:
        kar.quantize("attention")
    setup = {"index_seconds": round(t1 - t0, 1), "terms": len(doc["vocab"].names),
             "forms_indexed": len(recaller.vocab_index), "reranker_seconds": round(time.perf_counter() - t1, 1)}
    return doc, bi, recaller, kar, setup


def run_batches(parts, texts: list[str], size: int, k: int, pair_batch: int, workers: int = 0) -> dict:
    """Every text through recall -> re-rank -> count in batches of ``size``; per-stage and per-batch seconds."""
    import torch

    bi, recaller, kar, vocab = parts
    sync = torch.cuda.synchronize if bi.device.type == "cuda" else (lambda: None)
    stages = {"recall": 0.0, "rerank": 0.0, "count": 0.0}
    per_batch, n_pairs = [], 0
    for i in range(0, len(texts), size):
        chunk = texts[i:i + size]
        t0 = time.perf_counter()
        hits = recaller.recall_batch(chunk, k)
        t1 = time.perf_counter()
        n_pairs += sum(map(len, hits))
        # the engine's call (Engine's "kar" score); workers > 0: processes build the pair batches
        kar.score(chunk, [[vocab.names[t] for t, _ in h] for h in hits], pair_batch, workers if size >= 64 else 0)
        sync()
        t2 = time.perf_counter()
        bi.predict_count(chunk)
        sync()
        t3 = time.perf_counter()
        for name, dt in zip(stages, (t1 - t0, t2 - t1, t3 - t2)):
            stages[name] += dt
        per_batch.append(t3 - t0)
    total = sum(per_batch)
    ms = np.array(per_batch) * 1000
    return {"batch": size, "mentions": len(texts), "batches": len(per_batch), "pairs": n_pairs,
            "mentions_per_s": round(len(texts) / total, 1), "seconds": round(total, 2),
            "stage_seconds": {s: round(v, 3) for s, v in stages.items()},
            "batch_ms_p50": round(float(np.percentile(ms, 50)), 1),
            "batch_ms_p95": round(float(np.percentile(ms, 95)), 1)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bundle", required=True, help="dense_cv.py collect's bundle folder")
    ap.add_argument("--encoder", help="a model folder instead of the bundle's encoder/")
    ap.add_argument("--set", default="cdn")
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data"), help="where keywords/ is (CPU side)")
    ap.add_argument("--out", required=True, help="the JSON to write")
    ap.add_argument("--device", help="cpu / cuda (default: cuda when present)")
    ap.add_argument("--batches", default="1,64,1024", help="mentions per call")
    ap.add_argument("--mentions", type=int, default=4096, help="mentions timed per batch size (1: a tenth)")
    ap.add_argument("--k", type=int, default=20, help="terms recalled and re-ranked per mention")
    ap.add_argument("--pair-batch", type=int, default=512, help="(mention, term) pairs per forward pass")
    ap.add_argument("--workers", type=int, default=0, help="processes building the re-ranker's batches (batch >= 64)")
    ap.add_argument("--max-seq-length", type=int, default=64)
    ap.add_argument("--int8", action="store_true", help="CPU: the re-ranker's attention in int8 (RankerModel.quantize)")
    ap.add_argument("--threads", type=int, help="torch threads (CPU)")
    args = ap.parse_args(argv)
    import torch

    from benchmarks.gpu.train_kar import gpu_name

    doc, bi, recaller, kar, setup = build(args)
    texts = doc["queries"]
    rows = []
    for size in [int(b) for b in args.batches.split(",")]:
        n = max(size, args.mentions // (10 if size == 1 else 1))
        warm, timed = texts[:max(size, 32)], texts[len(texts) // 2:][:n]
        kar._cache.clear()
        run_batches((bi, recaller, kar, doc["vocab"]), warm, size, args.k, args.pair_batch, args.workers)
        kar._cache.clear()
        row = run_batches((bi, recaller, kar, doc["vocab"]), timed, size, args.k, args.pair_batch, args.workers)
        print(json.dumps(row), flush=True)
        rows.append(row)
    report = {"command": "python3 benchmarks/gpu/throughput.py " + " ".join(sys.argv[1:] if argv is None else argv),
              "device": str(bi.device), "gpu": gpu_name(), "torch": torch.__version__,
              "threads": torch.get_num_threads(), "workers": args.workers, "set": args.set, "k": args.k,
              "int8": args.int8,
              "layers": kar.module.encoder.config.num_hidden_layers, "setup": setup, "rows": rows}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
