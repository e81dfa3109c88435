"""Train the keyword-attentive cross-encoder at full length on a GPU, resumably, and score the CV's pairs.

Reads the bundle of ``benchmarks/gpu/kar_cv.py collect`` (``{set}.json.gz``, ``{set}_tagger.pkl``,
``encoder/``) and trains, per set, the ten pair models M_ab of kar_cv.py (each on the three CV parts
other than a and b): all 12 layers of the e5-small rebuild, word embeddings trained too, bf16 autocast,
hard negatives from the pipeline's own candidates (:func:`termnorm.rank.train.train_ranker`). Each
model then scores the pairs its folds will ask for.

Resumable: a model is the unit of work (well under a minute on an H100/H200). After each one,
``OUT/{set}_scores.npz`` (the score matrix, a column per model, NaN where a model does not score a pair,
and which models are done) and ``OUT/{set}_train.json`` (per model: steps, seconds, losses, the GPU)
are rewritten; a run given ``--resume DIR`` (an earlier run's OUT) starts from them and trains only the
missing models. ``--budget-min`` stops before a model that would not finish in time. So a hospital's
GPU (or ours, in 10-minute slices) continues where the last run stopped::

    python3 benchmarks/gpu/train_kar.py --bundle runs/gpu/bundle --out runs/gpu/out --budget-min 9
    python3 benchmarks/gpu/train_kar.py --bundle runs/gpu/bundle --out runs/gpu/out2 --resume runs/gpu/out

It needs torch, transformers and tqdm (no faiss, jieba or LightGBM: the candidates come in the bundle).
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

#: slot keyword kinds per set (procedures: site and type; diagnoses: site and nature, kar.py)
SLOTS = {"yidu": ("site", "type"), "cdn": ("site", "nature")}


def load_bundle(bundle: Path, name: str) -> dict:
    with gzip.open(bundle / f"{name}.json.gz", "rt", encoding="utf-8") as f:
        doc = json.load(f)
    doc["tagger"] = pickle.loads((bundle / f"{name}_tagger.pkl").read_bytes())
    return doc


def gpu_name() -> str:
    import torch

    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"


def train_one(doc: dict, col: int, args, encoder: Path) -> tuple[np.ndarray, np.ndarray, dict]:
    """Pair model ``col``: trained without parts a and b; scores of the pairs that need it."""
    from termnorm.rank.kar import RankerModel
    from termnorm.rank.train import RankerTrainConfig, train_ranker
    from termnorm.records import LabelledMention
    from termnorm.vocabulary import Vocabulary

    a, b = doc["pairs_models"][col]
    ms = [m for m in doc["mentions"] if m["part"] not in (a, b)]
    train = [LabelledMention(m["text"], m["terms"]) for m in ms]
    cands = {m["text"]: m["cands"] for m in ms}
    vocab = Vocabulary(name=doc["set"], names=doc["vocab"])
    t0 = time.perf_counter()
    model = RankerModel.from_encoder(encoder, doc["tagger"], slots=SLOTS.get(doc["set"], ("site", "type")),
                                     max_length=args.max_length, seed=args.seed + col)
    config = RankerTrainConfig(epochs=args.epochs, batch_size=args.batch_size, lr=args.lr, head_lr=args.head_lr,
                               n_hard=args.n_hard, n_random=args.n_random, pos_repeat=args.pos_repeat,
                               freeze_embeddings=False, seed=args.seed + col, progress=False,
                               max_steps=args.max_steps)
    hist = train_ranker(model, vocab, train, lambda texts: [cands.get(t, []) for t in texts], config)
    t1 = time.perf_counter()
    rows = np.array([i for i, need in enumerate(doc["need"]) if col in need], dtype=np.int64)[:args.score_limit]
    pairs = doc["pairs"]
    probs = model.score_pairs([pairs[i][0] for i in rows], [pairs[i][1] for i in rows], args.score_batch,
                              workers=args.workers)
    t2 = time.perf_counter()
    report = {"model": col, "without_parts": [a, b], "train_mentions": len(train), "steps": hist["steps"],
              "pairs_per_epoch": hist["pairs_per_epoch"], "loss_per_epoch": [round(x, 4) for x in hist["loss"]],
              "train_seconds": round(t1 - t0, 1), "scored_pairs": int(len(rows)),
              "score_seconds": round(t2 - t1, 1), "pairs_per_second": round(len(rows) / max(t2 - t1, 1e-9))}
    return rows, probs, report


def save(out: Path, name: str, scores: np.ndarray, done: np.ndarray, log: dict) -> None:
    tmp = out / f"{name}_scores.tmp.npz"
    np.savez_compressed(tmp, scores=scores, done=done)
    tmp.replace(out / f"{name}_scores.npz")
    (out / f"{name}_train.json").write_text(json.dumps(log, indent=1, ensure_ascii=False), encoding="utf-8")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bundle", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--resume", help="an earlier run's --out: its finished models are kept")
    ap.add_argument("--sets", default="yidu,cdn")
    ap.add_argument("--budget-min", type=float, default=9.0, help="stop before a model that would not finish")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--head-lr", type=float, default=1e-3)
    ap.add_argument("--n-hard", type=int, default=8)
    ap.add_argument("--n-random", type=int, default=4)
    ap.add_argument("--pos-repeat", type=int, default=4)
    ap.add_argument("--max-length", type=int, default=64)
    ap.add_argument("--score-batch", type=int, default=1024)
    ap.add_argument("--workers", type=int, default=8, help="processes building the scoring batches")
    ap.add_argument("--models", help="only these pair models (comma-separated columns; a quick check)")
    ap.add_argument("--max-steps", type=int, help="smoke runs: stop training each model after N steps")
    ap.add_argument("--score-limit", type=int, help="smoke runs: score only the first N pairs of each model")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    t_start = time.perf_counter()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    bundle = Path(args.bundle)
    encoder = bundle / "encoder"
    slowest = 0.0
    for name in args.sets.split(","):
        doc = load_bundle(bundle, name)
        n_models = len(doc["pairs_models"])
        scores = np.full((len(doc["pairs"]), n_models), np.nan, dtype=np.float16)
        done = np.zeros(n_models, dtype=bool)
        log = {"set": name, "gpu": gpu_name(), "command": "python3 benchmarks/gpu/train_kar.py " + " ".join(
            argv if argv is not None else sys.argv[1:]), "settings": {k: v for k, v in vars(args).items()
                                                                    if k not in ("bundle", "out", "resume")},
               "models": []}
        if args.resume and (Path(args.resume) / f"{name}_scores.npz").is_file():
            old = np.load(Path(args.resume) / f"{name}_scores.npz")
            scores, done = old["scores"].copy(), old["done"].copy()
            old_log = Path(args.resume) / f"{name}_train.json"
            if old_log.is_file():
                log["models"] = json.loads(old_log.read_text(encoding="utf-8"))["models"]
        todo = [c for c in range(n_models) if not done[c]]
        if args.models:
            todo = [c for c in todo if c in {int(x) for x in args.models.split(",")}]
        for col in todo:
            left = args.budget_min * 60 - (time.perf_counter() - t_start)
            if left < 1.2 * slowest:
                print(f"{name}: model {col} would not finish in the {left:.0f} s left; resume with --resume {out}")
                save(out, name, scores, done, log)
                return 0
            t0 = time.perf_counter()
            rows, probs, report = train_one(doc, col, args, encoder)
            scores[rows, col] = probs.astype(np.float16)
            done[col] = True
            log["models"].append(report)
            save(out, name, scores, done, log)
            slowest = max(slowest, time.perf_counter() - t0)
            print(json.dumps({"set": name, **report}), flush=True)
        save(out, name, scores, done, log)
    print(f"all done in {time.perf_counter() - t_start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
