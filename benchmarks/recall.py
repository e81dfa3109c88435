"""Recall benchmark: each lexical strategy and their union on Yidu-N7K val and CHIP-CDN dev.

Prints a table and writes JSON (``--out``, default
``benchmarks/results/recall.json``):

* per strategy: recall@1/5/10/20/50 (all gold terms in the top k), pair
  recall@50, fit time, recall time for the evaluation batch;
* union (the tuned per-key ks): recall@1/5/10/20, candidate recall (all gold
  terms among the candidates), pair recall, mean candidate count, NDCG@5,
  fit time, recall time and throughput (mentions/s, variants and jieba included);
* the ceiling: mentions with a gold name absent from the vocabulary (CHIP-CDN:
  the v601 file alone, and v601 plus the train gold names, which the
  benchmark adds with :func:`termnorm.recall.history.add_history_terms`).

* the cascade (CHIP-CDN, ``--cascade``, on by default there): the ``deep`` union
  (every k doubled, ~97 candidates) ordered by the lexical GBM ranker fitted
  on train with K-fold history (``Engine(recall_profile="deep",
  max_candidates=50)``), cut at 50 per mention — the candidate set a mention
  ends with when the pipeline ships with ``--recall-profile deep
  --max-candidates 50``. Adds ~4 min (the ranker fit).

``--tune`` re-derives the union's per-key ks: strategies run once with large
ks on 1,000 *train* mentions (history = the other train mentions), then a
greedy search raises, step by step, the key whose extra candidates buy the
most recall (candidate recall + 0.5 x pair recall) until the mean candidate
count reaches the budget (Yidu-N7K 30, CHIP-CDN 50). Evaluation data is never
used for tuning.

    python3 benchmarks/recall.py                 # both datasets, ~6 min on 2 cores (cascade included)
    python3 benchmarks/recall.py --tune          # also re-tune the ks (~+1 min)
    python3 benchmarks/recall.py --datasets yidu --limit 200
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._results import write_json  # noqa: E402

from termnorm.evaluate import candidate_recall, evaluate_predictions, pair_recall, recall_at_k  # noqa: E402
from termnorm.loaders import load_keywords, load_labelled, load_vocabulary  # noqa: E402
from termnorm.recall.bm25 import BM25Recaller  # noqa: E402
from termnorm.recall.exact import ContainedNameRecaller, ExactRecaller  # noqa: E402
from termnorm.recall.history import HistoryRecaller, add_history_terms  # noqa: E402
from termnorm.recall.jaccard import JaccardRecaller  # noqa: E402
from termnorm.recall.tfidf import CharTfidfRecaller  # noqa: E402
from termnorm.recall.union import COMPACT_K, DEFAULT_K, UnionRecaller  # noqa: E402

DATA = ROOT / ".." / "shared" / "data"

#: Mean-candidate budgets of the recall targets (Yidu-N7K: >= 98% of val
#: mentions with all gold terms among <= 30 candidates; CHIP-CDN: >= 90%
#: among <= 50, pair recall >= 95%).
BUDGET = {"yidu": 30, "cdn": 50}

#: Per-key ks, from ``--tune`` (see the module docstring). CHIP-CDN's are the
#: union's DEFAULT_K.
TUNED_K = {"yidu": dict(COMPACT_K), "cdn": dict(DEFAULT_K)}

KMAX_MAIN, KMAX_VARIANT = 100, 30  # what the tuner computes once, then simulates below
STEPS = (1, 2, 3, 5, 8, 12)


def load_dataset(name: str, data: Path) -> dict:
    """Vocabulary, history (train) and evaluation mentions of one dataset."""
    if name == "yidu":
        vocab = load_vocabulary(data / "yidu-n7k" / "code.txt")
        history = load_labelled(data / "yidu-n7k" / "train.xlsx").mentions
        evaluation = load_labelled(data / "yidu-n7k" / "val.xlsx").mentions
        vocab_path = data / "yidu-n7k" / "code.txt"
    elif name == "cdn":
        vocab_path = data / "chip-cdn" / "icd10_beijing_clinical_v601.xlsx"
        vocab = load_vocabulary(vocab_path)
        history = load_labelled(data / "chip-cdn" / "train.json").mentions
        evaluation = load_labelled(data / "chip-cdn" / "dev.json").mentions
    else:
        raise ValueError(name)
    unreachable_vocab = sum(any(t not in vocab for t in m.terms) for m in evaluation)
    added = add_history_terms(vocab, history)
    unreachable = sum(any(t not in vocab for t in m.terms) for m in evaluation)
    return {"vocab": vocab, "vocab_path": vocab_path, "history": history, "eval": evaluation,
            "ceiling": {"n": len(evaluation), "unreachable_vocab_only": unreachable_vocab,
                        "history_terms_added": len(added), "unreachable": unreachable,
                        "candidate_recall_ceiling": 1 - unreachable / len(evaluation)}}


def build_strategies(keywords: dict) -> list:
    words = keywords.get("site", []) + keywords.get("type", []) + keywords.get("approach", [])
    return [ExactRecaller(strip_words=keywords.get("approach", [])), ContainedNameRecaller(),
            CharTfidfRecaller(), JaccardRecaller(), BM25Recaller(user_words=words), HistoryRecaller(),
            HistoryRecaller(similarity="jaccard")]


# ---------------------------------------------------------------------------
# tuning
# ---------------------------------------------------------------------------
def _simulate(hits: list[dict], gold: list[set], cfg: dict) -> tuple[float, float, float]:
    ok = pair = total = ncand = 0
    for per_key, g in zip(hits, gold):
        cands: set = set()
        for key, kk in cfg.items():
            if kk:
                for h in per_key.get(key, ()):
                    cands.update(h[:kk])
        ok += g <= cands
        pair += len(g & cands)
        total += len(g)
        ncand += len(cands)
    n = len(gold)
    return ok / n, pair / max(total, 1), ncand / n


def tune(name: str, data: Path, keywords: dict, n_queries: int = 1000, seed: int = 0) -> dict:
    """Greedy per-key ks on held-out *train* mentions (see the module docstring)."""
    ds = load_dataset(name, data)
    train = list(ds["history"])
    random.Random(seed).shuffle(train)
    queries, history = train[:n_queries], train[n_queries:]
    # a fresh vocabulary extended with the tuning history only
    vocab = load_vocabulary(ds["vocab_path"])
    add_history_terms(vocab, history)
    union = UnionRecaller(build_strategies(keywords), abbreviations=keywords.get("abbreviations")).fit(vocab, history)
    big = {}
    for key in union.k:
        big[key] = KMAX_MAIN if not key.endswith(("_part", "_abbr")) else KMAX_VARIANT
    raw = union.key_hits([m.text for m in queries], big)
    hits = [{key: [[t for t, _ in h] for h in lists] for key, lists in per_key.items()} for per_key in raw]
    gold = [{vocab.get_id(t) for t in m.terms} for m in queries]
    cfg = {key: 0 for key in big}
    cur = _simulate(hits, gold, cfg)
    budget = BUDGET[name]
    while True:
        best = None
        for key in cfg:
            for step in STEPS:
                if cfg[key] + step > big[key]:
                    continue
                trial = dict(cfg, **{key: cfg[key] + step})
                r = _simulate(hits, gold, trial)
                if r[2] > budget:
                    continue
                gain = (r[0] - cur[0]) + 0.5 * (r[1] - cur[1])
                ratio = gain / max(r[2] - cur[2], 1e-3)
                if best is None or ratio > best[0]:
                    best = (ratio, trial, r)
        if best is None or best[0] <= 0:
            break
        _, cfg, cur = best
    print(f"[tune {name}] on {len(queries)} train mentions: candidate recall {cur[0]:.3f}, "
          f"pair recall {cur[1]:.3f}, mean candidates {cur[2]:.1f}")
    print(f"[tune {name}] k = {json.dumps(cfg)}")
    return {"k": cfg, "candidate_recall": cur[0], "pair_recall": cur[1], "mean_candidates": cur[2]}


# ---------------------------------------------------------------------------
# evaluation
# ---------------------------------------------------------------------------
def run_dataset(name: str, data: Path, keywords: dict, k: dict, limit: int | None = None) -> dict:
    ds = load_dataset(name, data)
    vocab, history, evaluation = ds["vocab"], ds["history"], ds["eval"]
    if limit:
        evaluation = evaluation[:limit]
    queries = [m.text for m in evaluation]
    gold = [m.terms for m in evaluation]
    result = {"vocabulary_terms": len(vocab), "history_mentions": len(history), "ceiling": ds["ceiling"],
              "strategies": {}}
    strategies = build_strategies(keywords)
    for s in strategies:
        t0 = time.perf_counter()
        s.fit(vocab, history)
        fit_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        hits = s.recall_batch(queries, 50)
        recall_s = time.perf_counter() - t0
        ranked = [[vocab.names[t] for t, _ in h] for h in hits]
        row = {f"recall_at_{kk}": recall_at_k(gold, ranked, kk) for kk in (1, 5, 10, 20, 50)}
        row.update(pair_recall_at_50=pair_recall(gold, ranked), fit_s=fit_s, recall_s=recall_s)
        result["strategies"][s.name] = row
    # the union re-uses the fitted strategies; its own fit adds the splitter's known-term index
    t0 = time.perf_counter()
    union = UnionRecaller(strategies, k, abbreviations=keywords.get("abbreviations"))
    union.fit(vocab, history, fit_strategies=False)
    union_fit_extra = time.perf_counter() - t0
    t0 = time.perf_counter()
    cands = union.recall_batch(queries)
    recall_s = time.perf_counter() - t0
    ranked = [[c.term for c in cs] for cs in cands]
    top1 = [r[:1] for r in ranked]
    metrics = evaluate_predictions(gold, top1, ranked)
    metrics = {key: v for key, v in metrics.items() if key not in ("micro_precision", "micro_recall", "count_accuracy")}
    metrics["top1_accuracy"] = metrics.pop("accuracy")
    metrics["top1_micro_f1"] = metrics.pop("micro_f1")
    fit_total = sum(r["fit_s"] for r in result["strategies"].values()) + union_fit_extra
    # the same candidates cut at BUDGET per mention by the combined score (a hard cap, not a mean)
    metrics[f"candidate_recall_cap_{BUDGET[name]}"] = candidate_recall(gold, [r[:BUDGET[name]] for r in ranked])
    metrics[f"pair_recall_cap_{BUDGET[name]}"] = pair_recall(gold, [r[:BUDGET[name]] for r in ranked])
    metrics["max_candidates"] = max(map(len, ranked), default=0)
    metrics.update(fit_s=fit_total, recall_s=recall_s, mentions_per_s=len(queries) / recall_s, k=k)
    result["union"] = metrics
    return result


def run_cascade(name: str, data: Path, budget: int, limit: int | None = None) -> dict:
    """The deep union cut at ``budget`` per mention by the fitted lexical ranker (see the module docstring)."""
    from termnorm.engine import Engine

    ds = load_dataset(name, data)
    evaluation = ds["eval"][:limit] if limit else ds["eval"]
    vocab = load_vocabulary(ds["vocab_path"])  # the engine adds the history's gold names itself
    t0 = time.perf_counter()
    eng = Engine(vocab, history=ds["history"], keyword_dir=data / "keywords", recall_profile="deep",
                 max_candidates=budget)
    deep = eng.recall_batch([m.text for m in evaluation])
    eng.fit_lexical(ds["history"])
    fit_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    sugs = eng.suggest_batch([m.text for m in evaluation], k=10 ** 6)
    secs = time.perf_counter() - t0
    gold = [m.terms for m in evaluation]
    ranked = [[c.term for c in s.candidates] for s in sugs]
    deep_ranked = [[c.term for c in cl] for cl in deep]
    return {"budget": budget, "candidate_recall": candidate_recall(gold, ranked), "pair_recall": pair_recall(gold, ranked),
            "mean_candidates": sum(map(len, ranked)) / len(ranked), "max_candidates": max(map(len, ranked)),
            "before_cut": {"candidate_recall": candidate_recall(gold, deep_ranked),
                           "pair_recall": pair_recall(gold, deep_ranked),
                           "mean_candidates": sum(map(len, deep_ranked)) / len(deep_ranked)},
            "fit_s": round(fit_s, 1), "recall_and_rank_s": round(secs, 2),
            "mentions_per_s": round(len(evaluation) / secs, 1)}


def print_table(name: str, res: dict) -> None:
    c = res["ceiling"]
    print(f"\n== {name}: {res['vocabulary_terms']} terms, {res['history_mentions']} history mentions, "
          f"{c['n']} mentions; unreachable {c['unreachable']} (vocabulary file alone: "
          f"{c['unreachable_vocab_only']}), candidate-recall ceiling {c['candidate_recall_ceiling']:.3f}")
    print(f"{'strategy':<16} {'R@1':>6} {'R@5':>6} {'R@10':>6} {'R@20':>6} {'R@50':>6} {'pair@50':>8} "
          f"{'fit s':>6} {'recall s':>8}")
    for s, r in res["strategies"].items():
        print(f"{s:<16} {r['recall_at_1']:6.3f} {r['recall_at_5']:6.3f} {r['recall_at_10']:6.3f} "
              f"{r['recall_at_20']:6.3f} {r['recall_at_50']:6.3f} {r['pair_recall_at_50']:8.3f} "
              f"{r['fit_s']:6.2f} {r['recall_s']:8.2f}")
    u = res["union"]
    print(f"{'union':<16} {u['recall_at_1']:6.3f} {u['recall_at_5']:6.3f} {u['recall_at_10']:6.3f} "
          f"{u['recall_at_20']:6.3f}   cand {u['candidate_recall']:.3f} pair {u['pair_recall']:.3f} "
          f"mean cand {u['mean_candidates']:.1f} (max {u['max_candidates']}) ndcg@5 {u['ndcg_at_5']:.3f}")
    b = [key for key in u if key.startswith("candidate_recall_cap_")][0]
    print(f"union cut at {b.rsplit('_', 1)[1]} per mention: candidate recall {u[b]:.3f}, "
          f"pair recall {u[b.replace('candidate', 'pair')]:.3f}")
    print(f"union: fit {u['fit_s']:.2f} s (all strategies), recall {u['recall_s']:.2f} s for {c['n']} mentions "
          f"= {u['mentions_per_s']:.0f} mentions/s")
    if "cascade" in res:
        q = res["cascade"]
        b = q["before_cut"]
        print(f"cascade: deep union cand {b['candidate_recall']:.3f} pair {b['pair_recall']:.3f} at "
              f"{b['mean_candidates']:.1f} -> ranker's top {q['budget']}: cand {q['candidate_recall']:.3f} "
              f"pair {q['pair_recall']:.3f} at {q['mean_candidates']:.1f} (max {q['max_candidates']}); "
              f"fit {q['fit_s']:.0f} s, recall + rank {q['mentions_per_s']:.0f} mentions/s")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--datasets", default="yidu,cdn")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "recall.json")
    ap.add_argument("--tune", action="store_true", help="re-derive the per-key ks on train mentions first")
    ap.add_argument("--limit", type=int, default=None, help="evaluate on the first N mentions only")
    ap.add_argument("--cascade", default="cdn",
                    help="datasets that also get the ranker-cut cascade row ('' for none; default cdn)")
    args = ap.parse_args(argv)
    if not (args.data / "yidu-n7k").is_dir():
        print(f"data folder not found: {args.data}", file=sys.stderr)
        return 2
    keywords = load_keywords(args.data / "keywords")
    out = {"data": str(args.data.resolve()), "results": {}}
    for name in args.datasets.split(","):
        k = TUNED_K[name]
        if args.tune:
            out.setdefault("tuning", {})[name] = t = tune(name, args.data, keywords)
            k = t["k"]
        res = run_dataset(name, args.data, keywords, k, args.limit)
        if name in args.cascade.split(","):
            res["cascade"] = run_cascade(name, args.data, BUDGET[name], args.limit)
        print_table(name, res)
        out["results"][name] = res
    write_json(args.out, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
