"""Bi-encoders trained at full length on a GPU as the ``dense`` row of ``benchmarks/cv.py`` (issues 26, 28).

Three steps, the middle one on a GPU machine::

    python3 benchmarks/gpu/dense_cv.py collect --sets cdn,yidu           # CPU: the bundle
    python3 benchmarks/gpu/dense_cv.py train --bundle runs/gpu_dense/bundle --out runs/gpu_dense/out   # GPU
    python3 benchmarks/cv.py --sets cdn --rows dense --dense 'runs/gpu_dense/out/cdn_fold{k}.npz' \\
        --against benchmarks/results/cv_cdn_dense.json --against benchmarks/results/cv_cdn_dense.json:dense \\
        --out benchmarks/results/cv_cdn_dense_gpu.json                  # CPU: the CV row and sign tests

Each outer fold of ``cv.py`` gets its own encoder, trained on that fold's training mentions only (as the CPU
``dense`` row's), so no test mention is ever seen in training. A GPU lends minutes and sends back a few small
files, so what comes back is not the encoders but their answers: per fold a table (termnorm.dense.table) of
the top terms :class:`termnorm.dense.index.DenseRecaller` finds for every text the recall union will ask the
dense strategy about, at the union's k. ``cv.py`` then recalls exactly what the live encoder would have.

``collect`` writes, per set, ``{set}_dense.pkl.gz``: the vocabulary and each fold's training mentions as
the CPU run loads them, and the query texts: every mention of the set read in its document
(termnorm.reading.in_document) and the variants the union recalls beside it (abbreviations spelled out, the
parts of a split mention: ``UnionRecaller.variants``). If the pipeline ever asks for a text outside them,
the table refuses it and the CV stops, so a gap cannot pass for a weak encoder. It also builds the pruned
e5-small rebuild (kar_cv.py's ``build_encoder``). ``train`` trains termnorm.dense.train's NCE recipe (hard
negative terms mined from the model's own index; ``--objective`` picks batch-hard or online triplet) per set
and fold, then writes ``OUT/{set}_fold{k}.npz``
and ``OUT/{set}_fold{k}.json`` (steps, seconds, loss, the GPU). A fold with its table is skipped, so a
later run continues (resumable fold by fold); ``--budget-min`` stops before a fold that would not finish.
``--data vocab`` trains on the vocabulary's synonym -> name pairs alone (SapBERT's idea; NCBI disease's MEDIC):
such an encoder never sees a mention, so one, trained once per call, writes every fold's table.
It needs torch, transformers, sentence-transformers and faiss (``benchmarks/gpu/pack.sh`` carries faiss).
"""

from __future__ import annotations

import argparse
import copy
import gzip
import json
import pickle
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from termnorm.recall.history import add_history_terms  # noqa: E402


def served_vocabulary(vocab, fold_train: list) -> tuple:
    """A copy of ``vocab`` as the engine serves it in a fold: the fold's coded names it lacks added last
    (Engine's ``add_history_terms``), so a table answers for them; and those names."""
    served = copy.deepcopy(vocab)
    return served, add_history_terms(served, fold_train)


def query_texts(engine, mentions) -> list[str]:
    """Every text the recall union asks its vocabulary strategies about for ``mentions`` (read in their
    documents as the CV run reads them, then the union's variants), once each, in first-seen order."""
    from termnorm.reading import in_document

    seen: dict[str, None] = {}
    for m in mentions:
        read = in_document(engine, m.text, getattr(m, "document", ""))
        for t in (read, *(v for v, _ in engine.union.variants(read))):
            seen.setdefault(t, None)
    return list(seen)


def collect_set(name: str, data: Path, bundle: Path) -> dict:
    from benchmarks.accuracy import SETS
    from benchmarks.cv import outer_fold
    from termnorm.engine import Engine
    from termnorm.loaders import load_labelled, load_vocabulary

    vpath, trpath, tepath, settings = SETS[name]
    vocab = load_vocabulary(data / vpath)
    train, dev = load_labelled(data / trpath, vocab).mentions, load_labelled(data / tepath, vocab).mentions
    eng = Engine(vocab, history=[], keyword_dir=data / "keywords" if name != "ncbi" else None,
                 recall_profile=settings["recall_profile"], max_candidates=settings["max_candidates"])
    from termnorm.recall.union import OTHER_K

    doc = {"set": name, "vocab": vocab, "k": OTHER_K, "queries": query_texts(eng, [*train, *dev]),
           "folds": {k: outer_fold(train, dev, k)[0] for k in range(5)}}
    with gzip.open(bundle / f"{name}_dense.pkl.gz", "wb") as f:
        pickle.dump(doc, f)
    return {"set": name, "queries": len(doc["queries"]), "mentions": len(train) + len(dev),
            "fold_train": {k: len(v) for k, v in doc["folds"].items()}}


def train_fold(doc: dict, k: int, args, encoder: Path, shared: dict | None = None) -> dict:
    """Outer fold ``k``'s encoder, trained on its training mentions; its table written; the report.
    With ``--data vocab`` the encoder trained for the first fold is kept in ``shared`` and serves the others."""
    import torch

    from termnorm.dense.biencoder import BiEncoder
    from termnorm.dense.index import DenseRecaller
    from termnorm.dense.table import write_table
    from termnorm.dense.train import train_biencoder
    from termnorm.dense.train_prep import BiEncoderTrainConfig

    t0 = time.perf_counter()
    vocab = doc["vocab"]
    shared = {} if shared is None else shared
    if "model" not in shared:
        model = BiEncoder.from_folder(encoder, device=args.device, max_seq_length=args.max_seq_length)
        config = BiEncoderTrainConfig(objective=args.objective, epochs=args.epochs, batch_size=args.batch_size,
                                      lr=args.lr, max_steps=args.max_steps, n_hard_terms=args.hard_terms,
                                      seed=args.seed, min_batch=args.min_batch, data=args.data,
                                      count_head=args.data != "vocab", progress=False)
        state: dict = {}
        metrics = train_biencoder(model, vocab, doc["folds"][k], config, state=state)
        shared.update(model=model, state=state, metrics=metrics, fold=k)
    model, state, metrics = shared["model"], shared["state"], shared["metrics"]
    t1 = time.perf_counter()
    served, added = served_vocabulary(vocab, doc["folds"][k])
    recaller = DenseRecaller(model, use_history=False).fit(served, form_vecs=None if added else state.get("form_vecs"))
    hits = recaller.recall_batch(doc["queries"], doc["k"])
    out = Path(args.out)
    if args.save_models:
        model.save(out / f"{doc['set']}_fold{k}_model")
    write_table(out / f"{doc['set']}_fold{k}.npz", doc["queries"], hits, served.names, doc["k"])
    from benchmarks.gpu.train_kar import gpu_name

    report = {"set": doc["set"], "fold": k, "gpu": gpu_name(), "train_mentions": len(doc["folds"][k]),
              "trained_for_fold": shared["fold"],  # another fold's: the --data vocab encoder serves them all
              "steps": metrics.get("steps"), "train_seconds": round(t1 - t0, 1),
              "table_seconds": round(time.perf_counter() - t1, 1), "queries": len(doc["queries"]),
              "names_added_from_history": len(added),
              "torch": torch.__version__, "settings": {a: v for a, v in vars(args).items()
                                                       if a not in ("bundle", "out", "cmd")},
              "final": metrics.get("final"),
              # where a fold's time goes: steps against encoding for mining
              "timing": {"step_seconds": metrics.get("train_seconds"), "steps_per_s": metrics.get("steps_per_s"),
                         "encode_strings_per_s": metrics.get("encode_strings_per_s")},
              "epochs": metrics.get("epochs")}
    (out / f"{doc['set']}_fold{k}.json").write_text(json.dumps(report, ensure_ascii=False, indent=1, default=str),
                                                    encoding="utf-8")
    return report


def train(args) -> int:
    t_start, slowest = time.perf_counter(), 0.0
    bundle, out = Path(args.bundle), Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    encoder = Path(args.encoder) if args.encoder else bundle / "encoder"
    for name in args.sets.split(","):
        with gzip.open(bundle / f"{name}_dense.pkl.gz", "rb") as f:
            doc = pickle.load(f)
        shared: dict | None = {} if args.data == "vocab" else None  # one encoder for every fold
        for k in [int(x) for x in args.folds.split(",")]:
            if (out / f"{name}_fold{k}.npz").is_file():
                continue
            left = args.budget_min * 60 - (time.perf_counter() - t_start)
            if left < 1.2 * slowest:
                print(f"{name}: fold {k} would not finish in the {left:.0f} s left; run the same command again")
                return 0
            t0 = time.perf_counter()
            print(json.dumps(train_fold(doc, k, args, encoder, shared), ensure_ascii=False, default=str), flush=True)
            slowest = max(slowest, time.perf_counter() - t0)
    print(f"all done in {time.perf_counter() - t_start:.0f} s")
    return 0


def recall(args) -> int:
    """Each table's recall@1 / @10 alone, on its outer fold's test mentions and on as many of its training
    mentions (``--encoder``: also that model's, live, on the same test mentions): an encoder that training left
    worse than it found shows here before any CV is run."""
    from benchmarks.accuracy import SETS
    from benchmarks.cv import outer_fold
    from termnorm.dense.table import DenseTable
    from termnorm.loaders import load_labelled, load_vocabulary

    report = []
    for name in args.sets.split(","):
        vpath, trpath, tepath, _ = SETS[name]
        vocab = load_vocabulary(Path(args.data) / vpath)
        train = load_labelled(Path(args.data) / trpath, vocab).mentions
        dev = load_labelled(Path(args.data) / tepath, vocab).mentions
        for k in [int(x) for x in args.folds.split(",")]:
            path = Path(args.out) / f"{name}_fold{k}.npz"
            if not path.is_file():
                continue
            fold_train, test = outer_fold(train, dev, k)
            table = DenseTable(path)
            served, _ = served_vocabulary(vocab, fold_train)
            table.fit(served)
            seen = fold_train[:: max(1, len(fold_train) // len(test))][:len(test)]
            row = {"set": name, "fold": k, "test": _recall_at(table, served, test),
                   "training": _recall_at(table, served, seen)}
            if args.encoder:
                from termnorm.dense.biencoder import BiEncoder
                from termnorm.dense.index import DenseRecaller

                live = DenseRecaller(BiEncoder.from_folder(Path(args.encoder), device="cpu"), use_history=False)
                row["encoder_test"] = _recall_at(live.fit(served), served, test)
            print(json.dumps(row), flush=True)
            report.append(row)
    if args.json:
        Path(args.json).write_text(json.dumps({"command": "python3 benchmarks/gpu/dense_cv.py " + " ".join(
            sys.argv[1:]), "folds": report}, indent=1) + "\n", encoding="utf-8")
    return 0


def _recall_at(recaller, vocab, mentions) -> dict:
    """Recall@1 and @10 of ``recaller`` alone: a mention counts when a gold term is among its top hits."""
    hits = recaller.recall_batch([m.text for m in mentions], 10)
    gold = [{vocab.get_id(t) for t in m.terms} - {None} for m in mentions]
    n = sum(1 for g in gold if g)
    at = {a: sum(bool(g & {i for i, _ in h[:a]}) for g, h in zip(gold, hits) if g) for a in (1, 10)}
    return {"mentions": n, "recall@1": round(at[1] / max(1, n), 4), "recall@10": round(at[10] / max(1, n), 4)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("collect", help="CPU: the bundle (vocabulary, folds, query texts, pruned encoder)")
    c.add_argument("--data", default=str(ROOT.parent / "shared" / "data"))
    c.add_argument("--sets", default="cdn,yidu")
    c.add_argument("--work", default="runs/gpu_dense")
    c.add_argument("--no-encoder", action="store_true", help="skip building the pruned encoder")
    t = sub.add_parser("train", help="GPU: one encoder per outer fold and its table (resumable)")
    t.add_argument("--bundle", required=True)
    t.add_argument("--out", required=True)
    t.add_argument("--encoder", help="a model folder instead of the bundle's encoder/")
    t.add_argument("--sets", default="cdn,yidu")
    t.add_argument("--folds", default="0,1,2,3,4")
    t.add_argument("--budget-min", type=float, default=9.0, help="stop before a fold that would not finish")
    t.add_argument("--objective", default="nce", choices=("nce", "batch_hard", "triplet_online"),
                   help="termnorm.dense.train's objective (OUT per objective: the tables carry no name of it)")
    t.add_argument("--data", default="labelled", choices=("labelled", "vocab", "both"),
                   help="what the encoder learns from: the fold's mentions, the vocabulary's synonyms (one encoder "
                        "for every fold), or both")
    t.add_argument("--epochs", type=int, default=3)
    t.add_argument("--batch-size", type=int, default=64)
    t.add_argument("--lr", type=float, default=2e-5)
    t.add_argument("--hard-terms", type=int, default=3)
    t.add_argument("--min-batch", type=int, default=16,
                   help="leave out batches of fewer pairs (the most coded terms' tail; 1: keep every batch, as "
                        "the first H200 run did)")
    t.add_argument("--max-seq-length", type=int, default=64)
    t.add_argument("--max-steps", type=int, help="smoke runs: stop each fold's training after N steps")
    t.add_argument("--device", help="cpu / cuda (default: cuda when present)")
    t.add_argument("--save-models", action="store_true", help="also keep each fold's encoder in OUT")
    t.add_argument("--seed", type=int, default=0)
    r = sub.add_parser("recall", help="CPU: each table's recall alone (test and training mentions)")
    r.add_argument("--data", default=str(ROOT.parent / "shared" / "data"))
    r.add_argument("--out", required=True, help="the folder of the tables")
    r.add_argument("--sets", default="cdn,yidu")
    r.add_argument("--folds", default="0,1,2,3,4")
    r.add_argument("--encoder", help="also this model folder's recall, live (the untrained encoder: bundle/encoder)")
    r.add_argument("--json", help="write the figures here")
    args = ap.parse_args(argv)
    if args.cmd == "train":
        return train(args)
    if args.cmd == "recall":
        return recall(args)
    bundle = Path(args.work) / "bundle"
    bundle.mkdir(parents=True, exist_ok=True)
    sets = args.sets.split(",")
    for name in sets:
        print(json.dumps(collect_set(name, Path(args.data), bundle)), flush=True)
    if not args.no_encoder:
        from benchmarks.gpu.kar_cv import build_encoder

        print("encoder:", build_encoder(sets, Path(args.data), bundle))
    return 0


if __name__ == "__main__":
    sys.exit(main())
