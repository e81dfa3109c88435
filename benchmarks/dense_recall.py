"""Recall@k of a saved bi-encoder alone (no lexical recall, no ranker) on labelled mentions.

The figure ``termnorm.dense.train --val`` prints after training, for a model trained without ``--val`` (then
mining encodes the vocabulary's names only) or trained elsewhere. The forms' vectors come from the index saved
beside the model folder when it holds this vocabulary's forms (``run/index/vocabulary``); else they are encoded.

    python3 benchmarks/dense_recall.py --model runs/ncbi_top4b/model \
        --vocab ../shared/data/ncbi-disease/medic_06Jul2012.txt \
        --mentions ../shared/data/ncbi-disease/NCBIdevelopset_corpus.txt --out benchmarks/results/dense_recall.json
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._results import write_json  # noqa: E402

from termnorm.dense.biencoder import BiEncoder  # noqa: E402
from termnorm.dense.index import saved_form_vectors  # noqa: E402
from termnorm.dense.train_prep import evaluate_recall  # noqa: E402
from termnorm.loaders import load_labelled, load_vocabulary  # noqa: E402


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="a bi-encoder's model folder (termnorm.dense.train's out/model)")
    ap.add_argument("--vocab", required=True, help="vocabulary file")
    ap.add_argument("--mentions", required=True, help="labelled mentions (dev / val set)")
    ap.add_argument("--ks", default="1,10,20", help="comma-separated k of recall@k")
    ap.add_argument("--device", help="cpu / cuda (default: cuda when present)")
    ap.add_argument("--out", help="JSON file for the figures")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    vocab = load_vocabulary(args.vocab)
    mentions = load_labelled(args.mentions, vocab).mentions
    encoder = BiEncoder.from_folder(args.model, device=args.device)
    texts, ids = vocab.surface_forms()
    form_vecs = saved_form_vectors(encoder, texts, ids)
    ks = [int(k) for k in args.ks.split(",")]
    result = {"command": "python3 benchmarks/dense_recall.py " + " ".join(sys.argv[1:] if argv is None else argv),
              "model": args.model, "forms": len(texts), "forms_from_saved_index": form_vecs is not None,
              **evaluate_recall(encoder, vocab, mentions, ks, form_vecs=form_vecs)}
    result["seconds"] = round(time.perf_counter() - t0, 1)
    print(" ".join(f"{k}={v:.4f}" if isinstance(v, float) else f"{k}={v}" for k, v in result.items()
                   if k != "command"))
    if args.out:
        write_json(args.out, result)
    return result


if __name__ == "__main__":
    main()
