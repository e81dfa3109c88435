"""Train the dense-recall bi-encoder; ``python -m termnorm.dense.train`` writes a model folder.

Three objectives, selectable so a benchmark can compare them (methods.md):

=================  ==========================================================  ==========================
objective          what one step optimises                                     negatives
=================  ==========================================================  ==========================
``"nce"``          symmetric in-batch InfoNCE, mention->term and term->mention  HD-sampled from the previous
(approach D)       (sentence-transformers ``MultipleNegativesRankingLoss``,    model's wrong predictions,
                   both directions, per-direction softmax, scale 20 = tau     P ∝ exp(sim/tau); epoch 0
                   0.05) + 3 hard negative terms per mention                   from the untrained model;
                                                                                E-FN drops those >= beta
``"batch_hard"``   batch-hard soft-margin triplet over names, synonyms and     hardest in-batch (online)
(approach E)       coded mentions labelled with their term(s)
``"triplet_online"`` ``TripletLoss`` (Euclidean, margin 1), 4 negatives per    random in epoch 1, then the
(approach A)       mention                                                     4 nearest non-gold terms
=================  ==========================================================  ==========================

``data``: ``"labelled"`` (mention -> gold term pairs), ``"vocab"`` (synonym ->
name pairs; names + synonyms for batch_hard) or ``"both"``. For batch_hard,
``"labelled"`` also includes the names of the terms the mentions use (the
search target), and ``"both"`` repeats the mentions so |D|/|O| ≈ 1/3
(approach E's mixing ratio).

The count head (1 / 2 / >=3 terms, approach A) is trained *jointly*: its cross-entropy on the mention embeddings of
each batch is added to the objective's loss (approach A's "triplet + CE"), which the hand-written loop below makes
trivial. After training the head is *refitted* on the final mention embeddings (cheap: they are encoded for the
final evaluation anyway), because a CPU-budget run of a few dozen steps leaves the joint head at the majority
class. With ``data="vocab"`` there are no mentions in the batches, so the head is only fitted afterwards on frozen
embeddings of the labelled mentions (:func:`~termnorm.dense.biencoder.fit_count_head`).

Why a hand-written loop rather than ``SentenceTransformerTrainer``: the trainer needs ``datasets`` +
``accelerate`` (not dependencies here), and every objective here re-mines negatives or rebuilds batches
each epoch; the loop calls the sentence-transformers losses' ``compute_loss_from_embeddings`` directly.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
from torch import nn
from tqdm.auto import tqdm

from termnorm.dense.biencoder import BiEncoder, autocast_for, count_class, count_features, fit_count_head
from termnorm.dense.biencoder import fit_count_head_vectors
from termnorm.dense.mining import compose_batches, label_batches, random_negatives, related_by_code
from termnorm.dense.mining import sample_hard_negatives, top_k_similar
from termnorm.dense.top_layers import TopLayerTrainer
from termnorm.dense.train_prep import (
    DATA,
    IGNORE,
    OBJECTIVES,
    BiEncoderTrainConfig,
    Queries,
    batch_hard_items,
    build_queries,
    check_choices,
    efn_beta,
    evaluate_recall,
    fill_random,
    gold_ids,
    hard_query_neighbours,
    query_term_pairs,
    sample_queries,
)
from termnorm.encoder.wheels import sha256_file
from termnorm.records import LabelledMention
from termnorm.vocabulary import Vocabulary

# the data preparation and the config moved to termnorm.dense.train_prep; importable from here as before
__all__ = ["DATA", "IGNORE", "OBJECTIVES", "BiEncoderTrainConfig", "Queries", "build_queries", "evaluate_recall",
           "gold_ids", "main", "train_biencoder"]


# --------------------------------------------------------------------------- training
def train_biencoder(model: BiEncoder, vocab: Vocabulary, train: Sequence[LabelledMention],
                    config: BiEncoderTrainConfig | None = None, *, val: Sequence[LabelledMention] | None = None,
                    state: dict | None = None, **overrides) -> dict:
    """Fine-tune ``model`` in place with one objective (see the module docstring); returns metrics.

    ``config``: the knobs and why their defaults (:class:`~termnorm.dense.train_prep.BiEncoderTrainConfig`);
    ``overrides`` set any of its fields by name (``train_biencoder(model, vocab, train, objective="nce",
    epochs=1)``). ``val``: labelled mentions for recall@k per epoch and E-FN's beta.
    ``state`` -- if a dict is given, it receives the final model's encodings
    (``form_vecs`` aligned with ``vocab.surface_forms()``, ``mention_vecs``
    {text: vector} of the training mentions, ``val_vecs``) so that building the
    index afterwards does not encode everything again.
    """
    c = replace(config or BiEncoderTrainConfig(), **overrides)
    check_choices(c.objective, c.data)
    t_start = time.perf_counter()
    rng = np.random.default_rng(c.seed)
    torch.manual_seed(c.seed)
    train = list(train)
    efn_val: list[LabelledMention] | None = list(val) if val else None
    if c.objective == "nce" and c.efn and efn_val is None and c.data != "vocab" and len(train) >= 20:
        perm = rng.permutation(len(train))
        n_hold = max(2, len(train) // 10)
        efn_val = [train[i] for i in perm[:n_hold]]
        train = [train[i] for i in perm[n_hold:]]
    queries = sample_queries(build_queries(vocab, train, c.data), c.max_queries, rng)
    if c.objective in ("nce", "triplet_online") and not queries.texts:
        raise ValueError(f"no training pairs: data={c.data!r} gives no mentions or synonyms with known terms")

    device, static = model.device, model.is_static  # static: a bag of word pieces (BiEncoder.static_from_folder)
    emb_params = model.word_embeddings().weight.numel()
    freeze = c.freeze_embeddings
    if freeze is None:
        freeze = device.type == "cpu" and emb_params > 1_000_000 and not static
    model.freeze_word_embeddings(bool(freeze))
    enc = TopLayerTrainer(model, c.train_top) if c.train_top else model  # what the steps embed with
    joint_count = c.count_head and c.data != "vocab" and not static  # static: its head is fitted after
    head = model.ensure_count_head() if joint_count else None

    if c.objective == "nce":
        from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss

        loss_fn = MultipleNegativesRankingLoss(model.model, scale=1.0 / c.tau,
                                               directions=("query_to_doc", "doc_to_query"),
                                               partition_mode="per_direction")
    elif c.objective == "triplet_online":
        from sentence_transformers.sentence_transformer.losses import TripletDistanceMetric, TripletLoss

        loss_fn = TripletLoss(model.model, distance_metric=TripletDistanceMetric.EUCLIDEAN,
                              triplet_margin=c.triplet_margin)
    else:
        from termnorm.dense.losses import MultiLabelBatchHardSoftMarginTripletLoss

        loss_fn = MultiLabelBatchHardSoftMarginTripletLoss(model.model)

    params = [p for p in model.model.parameters() if p.requires_grad]
    groups = [{"params": params, "lr": c.lr}]
    if head is not None:  # a fresh 3-way head learns nothing at the encoder's 2e-5 in a few epochs
        groups.append({"params": list(head.parameters()), "lr": max(c.lr, c.head_lr)})
        params = params + groups[-1]["params"]
    if static:  # a step reads a few hundred of 250k pieces: update those rows, not the whole table
        model.word_embeddings().sparse = True
        opt = torch.optim.SparseAdam(groups)
    else:
        opt = torch.optim.AdamW(groups, weight_decay=c.weight_decay)
    from termnorm.encoder.device import grad_scaler

    scaler = grad_scaler(str(device))
    names = vocab.names
    form_texts, form_ids = vocab.surface_forms()
    n_names = len(names)

    # batch_hard items are fixed: (text, side, labels, count)
    bh_items = batch_hard_items(vocab, train, queries, c.data) if c.objective == "batch_hard" else None

    metrics: dict = {"objective": c.objective, "data": c.data, "epochs": [], "batch_size": c.batch_size, "lr": c.lr,
                     "freeze_embeddings": bool(freeze), "n_queries": len(queries.texts),
                     "count_head": "joint" if joint_count else ("separate" if c.count_head else None),
                     "train_top": c.train_top}
    steps_total_est = None
    scheduler = None
    step = 0
    train_seconds = 0.0
    encode_stats = [0, 0.0]  # strings, seconds
    stop = False

    def encode_state(with_queries: bool, all_forms: bool):
        """Encode the vocabulary's forms (or its names alone: mining reads no more) and the training / val queries."""
        t0 = time.perf_counter()
        fv = enc.encode_terms(form_texts if all_forms else form_texts[:n_names])
        qv = enc.encode_queries(queries.texts) if (queries.texts and with_queries) else None
        vv = enc.encode_queries([m.text for m in efn_val]) if efn_val else None
        encode_stats[0] += len(fv) + (len(qv) if qv is not None else 0) + (len(efn_val) if efn_val else 0)
        encode_stats[1] += time.perf_counter() - t0
        return fv, qv, vv

    for epoch in range(c.epochs + 1):  # the extra pass only evaluates the final model
        last = epoch == c.epochs or stop
        need_state = last or c.objective == "nce" or (c.objective == "triplet_online" and epoch > 0) or val
        fv = qv = vv = None
        ep: dict = {"epoch": epoch}
        if need_state:
            # the last pass needs the anchors only for the count head refit and the history index: synonyms
            # (data "vocab") feed neither, and 64k MEDIC synonyms take minutes to encode on a CPU
            fv, qv, vv = encode_state((last and c.data != "vocab") or (not last and c.objective != "batch_hard"),
                                      last or bool(val))  # recall@k and the saved index need every form
            if val:
                ep.update(evaluate_recall(model, vocab, val, c.eval_ks, form_vecs=fv, query_vecs=vv))
        if last:
            metrics["final"] = {k: v for k, v in ep.items() if k != "epoch"}
            if state is not None:
                state.update({"form_vecs": fv, "val_vecs": vv if val else None,
                              "mention_vecs": dict(zip(queries.texts, qv)) if qv is not None else {}})
            break

        # ---- per-epoch examples -----------------------------------------------------------------
        if c.objective == "nce":
            a = min(c.alpha + c.alpha_step * epoch, 0.99)
            beta = efn_beta(vv, [set(gold_ids(vocab, m.terms)) for m in efn_val], fv[:n_names], a) \
                if (c.efn and efn_val) else float("inf")
            idx, sims = top_k_similar(qv, fv[:n_names], c.top_k_mine)
            related = related_by_code(idx, queries.gold, [vocab.codes.get(n, ()) for n in vocab.names]) \
                if c.related_not_negative else None
            neg, eliminated = sample_hard_negatives(idx, sims, queries.gold, c.n_hard_terms, tau=c.tau, beta=beta,
                                                    strategy="softmax", rng=rng, exclude=related)
            neg = fill_random(neg, n_names, queries.gold, rng)
            pair_q, pair_t = query_term_pairs(queries)
            neighbours = hard_query_neighbours(pair_q, pair_t, qv, fv[:n_names], queries.gold, c.n_hard_queries,
                                                c.tau, beta, rng, c.top_k_mine)
            pair_docs = [[int(t)] + [int(x) for x in neg[q]] for q, t in zip(pair_q, pair_t)]
            batches = compose_batches(pair_q, pair_docs, queries.gold, c.batch_size, rng, neighbours, c.min_batch)
            ep.update({"alpha": a, "beta": beta if math.isfinite(beta) else None,
                       "efn_eliminated": eliminated, "pairs": len(pair_q)})
        elif c.objective == "triplet_online":
            if epoch == 0:
                neg = random_negatives(n_names, queries.gold, c.n_triplet_negatives, rng)
            else:
                idx, sims = top_k_similar(qv, fv[:n_names], c.n_triplet_negatives + 20)
                neg, _ = sample_hard_negatives(idx, sims, queries.gold, c.n_triplet_negatives, strategy="top", rng=rng)
                neg = fill_random(neg, n_names, queries.gold, rng)
            pair_q, pair_t = query_term_pairs(queries)
            rows = [(q, t, int(n)) for q, t in zip(pair_q, pair_t) for n in neg[q]]
            order = rng.permutation(len(rows))
            rows = [rows[i] for i in order]
            batches = [rows[s:s + c.batch_size] for s in range(0, len(rows), c.batch_size)]
        else:
            batches = label_batches([it[2][0] for it in bh_items], c.batch_size, c.max_per_label, rng)
        if steps_total_est is None:
            steps_total_est = max(1, len(batches) * c.epochs)
            if c.max_steps is not None:
                steps_total_est = max(1, min(c.max_steps, steps_total_est))
            from transformers import get_linear_schedule_with_warmup

            scheduler = get_linear_schedule_with_warmup(opt, int(c.warmup_ratio * steps_total_est), steps_total_est)

        # ---- steps --------------------------------------------------------------------------------
        model.model.train()
        if head is not None:
            head.train()
        losses = []
        t_ep = time.perf_counter()
        bar = tqdm(batches, desc=f"{c.objective} epoch {epoch + 1}/{c.epochs}", disable=not c.progress, leave=False)
        for b in bar:
            with autocast_for(device):
                if c.objective == "nce":
                    loss, anchors, a_emb = _nce_step(enc, loss_fn, queries, names, pair_q, pair_t, neg, b)
                elif c.objective == "triplet_online":
                    loss, anchors, a_emb = _triplet_step(enc, loss_fn, queries, names, b)
                else:
                    loss, anchors, a_emb = _batch_hard_step(enc, loss_fn, bh_items, b)
                if head is not None and anchors:
                    y = torch.tensor([c for _, c in anchors], device=device)
                    if (y != IGNORE).any():
                        f = torch.from_numpy(count_features([t for t, _ in anchors])).to(device)
                        loss = loss + c.count_weight * nn.functional.cross_entropy(head(a_emb, f), y,
                                                                                 ignore_index=IGNORE)
            opt.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()  # scaling only for fp16 autocast; a pass-through on CPU / bf16
            scaler.unscale_(opt)
            if not static:  # sparse gradients have no norm in torch; Adam's steps are bounded anyway
                torch.nn.utils.clip_grad_norm_(params, c.max_grad_norm)
            scaler.step(opt)
            scaler.update()
            scheduler.step()
            step += 1
            losses.append(float(loss.detach()))
            bar.set_postfix(loss=f"{np.mean(losses[-20:]):.4f}")
            if (c.max_steps is not None and step >= c.max_steps) or \
                    (c.time_budget_s is not None and time.perf_counter() - t_start > c.time_budget_s):
                stop = True
                break
        bar.close()
        dt = time.perf_counter() - t_ep
        train_seconds += dt
        ep.update({"loss": float(np.mean(losses)) if losses else float("nan"),
                   "first_loss": losses[0] if losses else None,
                   "steps": len(losses), "seconds": round(dt, 2)})
        metrics["epochs"].append(ep)
        if c.progress:
            shown = {k: (round(v, 4) if isinstance(v, float) else v) for k, v in ep.items()}
            print(f"[dense] {shown}", file=sys.stderr)

    model.model.eval()
    if c.count_head and not joint_count and train:
        metrics["count_train_accuracy"] = fit_count_head(model, [m for m in train if gold_ids(vocab, m.terms)])
    elif joint_count and c.refit_count_head and qv is not None:
        # the joint CE shapes the embedding (approach A's multi-task loss); the head itself is refitted on the
        # final embeddings, which a short CPU run leaves far better than its jointly trained weights
        keep = [i for i, c in enumerate(queries.count) if c != IGNORE]
        metrics["count_train_accuracy"] = fit_count_head_vectors(
            model, [queries.texts[i] for i in keep], qv[keep], [queries.count[i] for i in keep])
        metrics["count_head"] = "joint+refit"
    if c.count_head and val:
        counts, _ = model.predict_count([m.text for m in val])
        gold_c = np.array([count_class(len(m.terms)) + 1 for m in val])
        metrics["final"]["count_accuracy"] = float((counts == gold_c).mean())
    metrics.update({"steps": step, "train_seconds": round(train_seconds, 2),
                    "steps_per_s": step / train_seconds if train_seconds > 0 else None,
                    "encode_strings_per_s": encode_stats[0] / encode_stats[1] if encode_stats[1] > 0 else None,
                    "total_seconds": round(time.perf_counter() - t_start, 2), "stopped_early": stop,
                    "lower_layers_run": getattr(enc, "computed", None),
                    "device": str(device)})
    return metrics


# --------------------------------------------------------------------------- step helpers
def _nce_step(model, loss_fn, queries, names, pair_q, pair_t, neg, b):
    qi = pair_q[b]
    a_texts = [queries.texts[q] for q in qi]
    a = model.embed(a_texts, model.query_prefix)
    doc_ids = [int(t) for t in pair_t[b]] + [int(x) for j in range(neg.shape[1]) for x in neg[qi, j]]
    d = model.embed([names[t] for t in doc_ids], model.passage_prefix)
    cols = list(torch.split(d, len(b)))  # [positives, neg_1, ..., neg_n]
    loss = loss_fn.compute_loss_from_embeddings([a] + cols, None)
    return loss, list(zip(a_texts, [queries.count[q] for q in qi])), a


def _triplet_step(model, loss_fn, queries, names, rows):
    a_texts = [queries.texts[q] for q, _, _ in rows]
    a = model.embed(a_texts, model.query_prefix)
    d = model.embed([names[t] for _, t, _ in rows] + [names[n] for _, _, n in rows], model.passage_prefix)
    p, n = torch.split(d, len(rows))
    loss = loss_fn.compute_loss_from_embeddings([a, p, n], None)
    return loss, list(zip(a_texts, [queries.count[q] for q, _, _ in rows])), a


def _batch_hard_step(model, loss_fn, items, b):
    rows = [items[i] for i in b]
    qpos = [i for i, r in enumerate(rows) if r[1] == "query"]
    ppos = [i for i, r in enumerate(rows) if r[1] == "passage"]
    parts, order = [], []
    if qpos:
        parts.append(model.embed([rows[i][0] for i in qpos], model.query_prefix))
        order += qpos
    if ppos:
        parts.append(model.embed([rows[i][0] for i in ppos], model.passage_prefix))
        order += ppos
    emb = torch.cat(parts)[torch.argsort(torch.tensor(order))]
    width = max(len(r[2]) for r in rows)
    labels = torch.full((len(rows), width), -1, dtype=torch.long)
    for i, r in enumerate(rows):
        labels[i, :len(r[2])] = torch.tensor(r[2])
    loss = loss_fn.compute_loss_from_embeddings([emb], labels.to(emb.device))
    anchors = [(rows[i][0], rows[i][3]) for i in qpos]
    a_emb = emb[qpos] if qpos else emb[:0]
    return loss, anchors, a_emb


# --------------------------------------------------------------------------- CLI
def resolve_encoder_folder(spec: str) -> Path:
    """A local model folder as is; anything else through ``termnorm.encoder.provider.resolve_encoder``."""
    p = Path(spec)
    if p.is_dir():
        return p
    from termnorm.encoder.provider import resolve_encoder  # written by the encoder work

    return Path(resolve_encoder(spec))


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m termnorm.dense.train", description=__doc__.splitlines()[0])
    ap.add_argument("--vocab", required=True, help="vocabulary file (code.txt, v601 xlsx, csv ...)")
    ap.add_argument("--train", help="labelled mentions (xlsx 原始词/标准词, CHIP json ...); optional with --data "
                                    "vocab (a vocabulary's own synonyms, day one: no coded mention needed)")
    ap.add_argument("--val", help="labelled validation mentions (recall@k per epoch, E-FN beta)")
    ap.add_argument("--encoder", required=True, help="model folder or encoder spec for resolve_encoder")
    ap.add_argument("--objective", choices=OBJECTIVES, default="nce")
    ap.add_argument("--data", choices=DATA, default="labelled")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--lr", type=float, default=2e-5)
    ap.add_argument("--max-seq-length", type=int, default=32)
    ap.add_argument("--freeze-embeddings", choices=("auto", "yes", "no"), default="auto")
    ap.add_argument("--no-count-head", action="store_true")
    ap.add_argument("--max-seconds", type=float, help="training time budget (stops early, still evaluates)")
    ap.add_argument("--max-steps", type=int)
    ap.add_argument("--max-train", type=int, help="use only the first N training mentions")
    ap.add_argument("--max-queries", type=int, help="train on a random N of the queries (synonyms, mentions)")
    ap.add_argument("--device", help="cpu / cuda (default: cuda when present)")
    ap.add_argument("--threads", type=int, help="CPU threads for torch (1 is fastest on a busy shared machine)")
    ap.add_argument("--layers", type=int, help="keep only the first N encoder layers (speed, approach A)")
    ap.add_argument("--static", action="store_true", help="a bag of the encoder's word pieces (no attention)")
    ap.add_argument("--train-top", type=int, help="train only the top N layers; the lower ones' output is "
                    "computed once per text and cached (CPU speed: termnorm.dense.top_layers)")
    ap.add_argument("--hard-terms", type=int, default=3, help="nce: hard negative terms per mention")
    ap.add_argument("--hard-queries", type=int, default=10, help="nce: hard negative mentions per term")
    ap.add_argument("--related-not-negative", action="store_true",
                    help="nce: a gold term's ancestors and descendants by code are never its hard negatives")
    ap.add_argument("--max-val", type=int, help="use only the first N validation mentions")
    ap.add_argument("--calibrate-sieve", action="store_true", help="pick the sieve threshold on --val")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-progress", action="store_true")
    ap.add_argument("--folds", type=int, default=1,
                    help="K >= 2: cross-fit K bi-encoders, each without one fold of the mentions "
                         "(termnorm.dense.crossfit), so a pipeline fitted on the same mentions (termnorm train "
                         "lexical --dense) sees out-of-fold dense scores; each is validated on its own held-out "
                         "fold unless --val is given")
    ap.add_argument("--fold", type=int,
                    help="with --folds: train only this fold's model (run the folds side by side, one process "
                         "per core or GPU; the last to finish writes the fold map)")
    ap.add_argument("--out", required=True, help="output folder")
    args = ap.parse_args(argv)
    bad = (f"--fold needs --folds K >= 2 and must be in 0..K-1 (got --fold {args.fold} --folds {args.folds})"
           if args.fold is not None and (args.folds < 2 or not 0 <= args.fold < args.folds) else
           "--train is needed unless the encoder learns from the vocabulary alone (--data vocab, no --folds)"
           if not args.train and (args.data != "vocab" or args.folds >= 2) else None)
    if bad:
        print(bad, file=sys.stderr)
        return 2

    from termnorm.loaders import load_labelled, load_vocabulary

    t0 = time.perf_counter()
    vocab = load_vocabulary(args.vocab)
    train = load_labelled(args.train, vocab).mentions if args.train else []
    if args.max_train:
        train = train[: args.max_train]
    val = load_labelled(args.val, vocab).mentions if args.val else None
    if val and args.max_val:
        val = val[: args.max_val]
    if args.threads:
        from termnorm.encoder.device import configure_cpu_threads

        configure_cpu_threads(args.threads)
    folder = resolve_encoder_folder(args.encoder)
    out = Path(args.out)
    if args.folds < 2:
        _train_one(args, folder, vocab, train, val, out, t0)
        return 0
    from termnorm.dense.crossfit import dense_saved
    from termnorm.rank.crossfit import train_folds

    def one_fold(mentions, held, fold_out):  # validated on its own held-out fold unless --val is given
        fold_val = val if val is not None else (held[: args.max_val] if args.max_val else held)
        _train_one(args, folder, vocab, mentions, fold_val, fold_out, time.perf_counter())

    train_folds(train, args.folds, args.fold, out, one_fold, complete=dense_saved, what="bi-encoder")
    return 0


def _train_one(args, folder: Path, vocab, train, val, out: Path, t0: float) -> None:
    """Train one bi-encoder on ``train`` and write ``out``: model/, index/ and config.json (last)."""
    model = BiEncoder.static_from_folder(folder, args.device) if args.static else \
        BiEncoder.from_folder(folder, device=args.device, max_seq_length=args.max_seq_length, layers=args.layers)
    freeze = {"auto": None, "yes": True, "no": False}[args.freeze_embeddings]
    state: dict = {}
    config = BiEncoderTrainConfig(objective=args.objective, epochs=args.epochs, batch_size=args.batch_size,
                                  lr=args.lr, data=args.data, freeze_embeddings=freeze,
                                  count_head=not args.no_count_head, time_budget_s=args.max_seconds,
                                  max_steps=args.max_steps, max_queries=args.max_queries, seed=args.seed,
                                  progress=not args.no_progress, n_hard_terms=args.hard_terms,
                                  n_hard_queries=args.hard_queries, related_not_negative=args.related_not_negative,
                                  train_top=args.train_top)
    metrics = train_biencoder(model, vocab, train, config, val=val, state=state)
    model.save(out / "model")
    from termnorm.dense.sieve import Sieve, calibrate_threshold

    t_idx = time.perf_counter()
    # a Sieve is a DenseRecaller with the sieve on top: one index folder serves both
    recaller = Sieve(model).fit(vocab, train, progress=not args.no_progress, form_vecs=state.get("form_vecs"),
                                mention_vecs=state.get("mention_vecs"))
    recaller.save(out / "index")
    metrics["index_seconds"] = round(time.perf_counter() - t_idx, 2)
    sieve_info = None
    if args.calibrate_sieve and val:
        sieve_info = calibrate_threshold(recaller, val, query_vecs=state.get("val_vecs"))
    config = {
        "kind": "termnorm.dense",
        "encoder": {"spec": args.encoder, "folder": str(folder.resolve()),
                    "query_prefix": model.query_prefix, "passage_prefix": model.passage_prefix},
        "data": {k: {"path": str(Path(p).resolve()), "sha256": sha256_file(p)}
                 for k, p in (("vocab", args.vocab), ("train", args.train), ("val", args.val)) if p},
        "n_train_mentions": len(train),
        "n_val_mentions": len(val) if val else 0,
        "params": {k: v for k, v in vars(args).items() if k not in ("vocab", "train", "val", "out", "encoder")},
        "metrics": metrics,
        "sieve": sieve_info,
        "model": "model", "index": "index",
        "seconds": round(time.perf_counter() - t0, 1),
    }
    (out / "config.json").write_text(json.dumps(config, ensure_ascii=False, indent=2, default=_json_default),
                                     encoding="utf-8")
    print(json.dumps({"out": str(out), "final": metrics.get("final"), "steps_per_s": metrics.get("steps_per_s"),
                      "encode_strings_per_s": metrics.get("encode_strings_per_s"),
                      "sieve_threshold": sieve_info and sieve_info.get("threshold")},
                     ensure_ascii=False, default=_json_default))


def _json_default(o):
    if isinstance(o, (np.floating, np.integer)):
        return o.item()
    return str(o)


if __name__ == "__main__":
    sys.exit(main())
