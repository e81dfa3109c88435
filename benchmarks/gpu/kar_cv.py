"""The GPU-trained keyword-attentive cross-encoder in the cross-validated GBM pipeline (issue 28), CPU side.

Three steps, the middle one on a GPU machine (``benchmarks/gpu/train_kar.py``)::

    python3 benchmarks/gpu/kar_cv.py collect --sets yidu,cdn     # CPU: candidates and the bundle
    python3 benchmarks/gpu/train_kar.py --bundle runs/gpu/bundle --out runs/gpu/out   # GPU, resumable
    python3 benchmarks/gpu/kar_cv.py fuse --sets yidu,cdn --scores runs/gpu/out       # CPU: CV + sign test

How the scores stay out-of-sample. ``benchmarks/cv.py`` cuts each set into five parts: P0 the official
held-out file (Yidu-N7K val, CHIP-CDN dev), P1-P4 quarters of the training file; outer fold k tests on
P_k and fits on the other four. The GPU trains one cross-encoder M_ab per pair of parts {a, b} (ten per
set), on the three other parts. In outer fold k a training mention of part j is scored by M_kj, which saw
neither it nor the fold's test mentions (what the GBM learns to trust is out-of-fold, as in
:mod:`termnorm.rank.crossfit`); a test mention of part k by the mean of the four M_kb, none of which saw
it. Outer fold 0 is thus the official split measured honestly: "Yidu-N7K val" and "CHIP-CDN dev".
A text found in several parts is scored only by the models that saw none of them.

``collect`` runs each outer fold's candidate generation exactly as ``benchmarks/cv.py`` does, with a
recording ranker in the engine, so the GPU scores every (mention, term) pair the pipeline will ask for;
it writes the bundle: the pairs, each mention's part and ordered candidates (hard negatives), the
vocabulary names (random negatives), the keyword tagger, and the pruned encoder.
``fuse`` runs the same folds again with the scores as the engine's ranker (score ``kar``): per fold one
candidate generation, two GBM fits -- ``shipped`` (the ``kar`` score removed) and ``kar_gpu`` -- and
writes ``benchmarks/results/gpu_kar_cv.json`` with the sign test (termnorm.stats.sign_test).
"""

from __future__ import annotations

import argparse
import gzip
import json
import pickle
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from itertools import combinations
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.cv import outer_fold  # noqa: E402

PARTS = 5
#: the ten pair models, in the order of the score matrix's columns
PAIRS = list(combinations(range(PARTS), 2))
HARD_KEEP = 30  # ordered candidates kept per mention for the hard negatives
#: the whole measurement, in order (the GPU step may run in slices: --resume)
STEPS = ["python3 benchmarks/gpu/kar_cv.py collect --sets yidu,cdn", "bash benchmarks/gpu/pack.sh",
         "python3 benchmarks/gpu/train_kar.py --bundle runs/gpu/bundle --out runs/gpu/out (on the GPU)",
         "python3 benchmarks/gpu/kar_cv.py fuse --sets yidu,cdn --scores runs/gpu/out"]


def part_map(name: str, data: Path):
    """(vocabulary, all mentions, {normalized text: sorted parts}, [(mention, part)])."""
    from benchmarks.accuracy import SETS
    from termnorm.loaders import load_labelled, load_vocabulary
    from termnorm.text.normalize import normalize

    vpath, trpath, tepath, _ = SETS[name]
    vocab = load_vocabulary(data / vpath)
    train, dev = load_labelled(data / trpath, vocab).mentions, load_labelled(data / tepath, vocab).mentions
    parts: dict[str, set[int]] = {}
    tagged = []
    for k in range(PARTS):
        _, test = outer_fold(train, dev, k)
        for m in test:
            parts.setdefault(normalize(m.text), set()).add(k)
            tagged.append((m, k))
    return vocab, train, dev, {t: sorted(p) for t, p in parts.items()}, tagged


class Recorder:
    """An engine ranker that scores nothing and remembers what it was asked (collect)."""

    def __init__(self):
        self.pairs: set[tuple[str, str]] = set()
        self.ordered: dict[str, list[str]] = {}

    def score(self, mentions, candidate_lists, **_):
        for m, cl in zip(mentions, candidate_lists):
            self.pairs.update((m, t) for t in cl)
            self.ordered.setdefault(m, list(cl[:HARD_KEEP]))
        return [np.zeros(len(cl), dtype=np.float32) for cl in candidate_lists]


class FoldScores:
    """An engine ranker answering from the GPU's score matrix for outer fold ``k`` (fuse)."""

    def __init__(self, index: dict[tuple[str, str], int], matrix: np.ndarray, parts: dict[str, list[int]], k: int):
        from termnorm.text.normalize import normalize

        self.index, self.matrix, self.parts, self.k, self._norm = index, matrix, parts, k, normalize
        self.missing = 0
        self.asked = 0

    def columns(self, text: str) -> list[int]:
        """The models allowed to score ``text`` in this fold (see the module docstring)."""
        seen = set(self.parts.get(self._norm(text), ()))
        k = self.k
        own = [j for j in seen if j != k]
        if not own:  # a test mention, or a text in no part: the four models without part k
            return [PAIRS.index(tuple(sorted((k, b)))) for b in range(PARTS) if b != k]
        clean = [j for j in own if seen <= {k, j}]
        return [PAIRS.index(tuple(sorted((k, j)))) for j in (clean or own)]

    def score(self, mentions, candidate_lists, **_):
        out = []
        for m, cl in zip(mentions, candidate_lists):
            cols = self.columns(m)
            row = np.full(len(cl), np.nan, dtype=np.float32)
            for i, t in enumerate(cl):
                r = self.index.get((m, t))
                self.asked += 1
                if r is None:
                    self.missing += 1
                    continue
                v = self.matrix[r, cols]
                v = v[~np.isnan(v)]
                row[i] = float(v.mean()) if len(v) else np.nan
            out.append(row)
        return out


def _engine(name: str, data: Path, vocab, train, ranker):
    from benchmarks.accuracy import SETS
    from termnorm.engine import Engine

    settings = SETS[name][3]
    return Engine(vocab, history=train, keyword_dir=data / "keywords" if name != "ncbi" else None,
                  recall_profile=settings["recall_profile"], max_candidates=settings["max_candidates"],
                  ranker=ranker)


def collect_fold(name: str, data: str, k: int, seed: int, out: str) -> str:
    """Outer fold ``k``'s candidate generation (as benchmarks/cv.py) with a Recorder; pickles what it saw."""
    from benchmarks.accuracy import SETS

    data = Path(data)
    vocab, train_all, dev, _, _ = part_map(name, data)
    train, test = outer_fold(train_all, dev, k)
    rec = Recorder()
    t0 = time.perf_counter()
    eng = _engine(name, data, vocab, train, rec)
    eng.ranker_training_data(train, seed=seed, term_classifier=SETS[name][3].get("term_classifier", True))
    texts = [m.text for m in test]
    for s in range(0, len(texts), 64):  # suggest_batch's chunks
        eng.recall_batch(texts[s:s + 64])
    path = Path(out) / f"{name}_fold{k}.pkl"
    path.write_bytes(pickle.dumps({"pairs": rec.pairs, "ordered": rec.ordered,
                                   "seconds": round(time.perf_counter() - t0, 1)}))
    return str(path)


def build_bundle(name: str, data: Path, collected: list[Path], bundle: Path) -> dict:
    """Merge the folds' recordings into ``bundle/{name}.json.gz`` and pickle the set's keyword tagger."""
    from termnorm.rank.train import keyword_tagger
    from termnorm.text.normalize import normalize

    vocab, _, _, parts, tagged = part_map(name, data)
    pairs: set[tuple[str, str]] = set()
    ordered: dict[str, list[str]] = {}
    for p in collected:
        rec = pickle.loads(p.read_bytes())
        pairs |= rec["pairs"]
        for t, cl in rec["ordered"].items():
            ordered.setdefault(t, cl)
    pair_list = sorted(pairs)
    # which models score a pair: every model that a fold may ask (FoldScores.columns), i.e. those of the
    # text's parts; texts in no part (none today: the engine asks about whole mentions) get all ten
    need = []
    for text, _ in pair_list:
        ps = parts.get(normalize(text), [])
        cols = sorted({i for i, (a, b) in enumerate(PAIRS) if a in ps or b in ps}) if ps else list(range(len(PAIRS)))
        need.append(cols)
    mentions = [{"text": m.text, "terms": list(m.terms), "part": k, "cands": ordered.get(m.text, [])}
                for m, k in tagged if m.terms]
    doc = {"set": name, "parts": PARTS, "pairs_models": PAIRS, "vocab": list(vocab.names), "mentions": mentions,
           "pairs": [list(p) for p in pair_list], "need": need}
    bundle.mkdir(parents=True, exist_ok=True)
    with gzip.open(bundle / f"{name}.json.gz", "wt", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False)
    (bundle / f"{name}_tagger.pkl").write_bytes(pickle.dumps(keyword_tagger(vocab, data / "keywords")))
    return {"set": name, "pairs": len(pair_list), "scorings": int(sum(len(n) for n in need)),
            "mentions": len(mentions)}


def build_encoder(sets: list[str], data: Path, bundle: Path) -> Path:
    """The e5-small rebuild pruned to the sets' vocabularies and mentions (``termnorm encoder build``),
    copied into the bundle with its weights in bf16 (half the size to carry; trained in fp32 there)."""
    import torch
    from safetensors.torch import load_file, save_file

    from benchmarks.accuracy import SETS

    files = [str(data / f) for s in sets for f in SETS[s][:3]]
    out = bundle / "encoder"
    if not (out / "model.safetensors").is_file():
        from termnorm.encoder.build import cli_build

        if cli_build(["--no-progress", "--add-chars-from", *files, "--prune-to", *files, "--out", str(out)]):
            raise SystemExit("termnorm encoder build failed")
        weights = load_file(str(out / "model.safetensors"))
        save_file({k: v.to(torch.bfloat16) if v.is_floating_point() else v for k, v in weights.items()},
                  str(out / "model.safetensors"), metadata={"format": "pt"})
    return out


def complete_folds(done) -> list[int]:
    """The outer folds whose four models (those without part k) are all trained."""
    return [k for k in range(PARTS) if all(done[PAIRS.index(tuple(sorted((k, b))))] for b in range(PARTS) if b != k)]


def fuse_fold(name: str, data: str, k: int, seed: int, scores: str) -> dict:
    """Outer fold ``k``: one candidate generation with the GPU scores, then the shipped GBM (``kar`` removed)
    and the GBM with ``kar``; per row, per test mention, right or not (benchmarks/cv.py's record)."""
    import copy

    from benchmarks.accuracy import SETS
    from benchmarks.cv import _fit_and_score

    data = Path(data)
    vocab, train_all, dev, parts, _ = part_map(name, data)
    train, test = outer_fold(train_all, dev, k)
    doc = np.load(Path(scores) / f"{name}_scores.npz", allow_pickle=False)
    with gzip.open(Path(scores).parent / "bundle" / f"{name}.json.gz", "rt", encoding="utf-8") as f:
        pair_list = json.load(f)["pairs"]
    index = {(a, b): i for i, (a, b) in enumerate(pair_list)}
    table = FoldScores(index, doc["scores"].astype(np.float32), parts, k)
    settings = SETS[name][3]
    t0 = time.perf_counter()
    eng = _engine(name, data, vocab, train, table)
    splits = eng.ranker_training_data(train, seed=seed, term_classifier=settings.get("term_classifier", True))
    out = {"fold": k, "train": len(train), "test": len(test), "candidates_seconds": round(time.perf_counter() - t0, 1),
           "rows": {}}
    texts = [m.text for m in test]
    plain = copy.deepcopy(splits)
    for sp in plain:
        for cl in sp[1]:
            for c in cl:
                c.scores.pop("kar", None)
    eng.ranker = table
    _fit_and_score(eng, splits, "shipped", seed, settings, texts, test, out, {})
    out["rows"]["kar_gpu"] = out["rows"].pop("shipped")
    eng.ranker = None  # the shipped pipeline: no "kar" score anywhere
    _fit_and_score(eng, plain, "shipped", seed, settings, texts, test, out, {})
    out["rows"] = {"shipped": out["rows"]["shipped"], "kar_gpu": out["rows"]["kar_gpu"]}
    out["kar_pairs_asked"], out["kar_pairs_missing"] = table.asked, table.missing
    return out


def alone_top1(bundle: Path, scores: Path, name: str) -> dict:
    """The cross-encoder alone: per mention, out-of-fold (mean of the four models without its part), is the
    best-scored of its candidates a gold term? Multi-term mentions count as misses unless noted."""
    with gzip.open(bundle / f"{name}.json.gz", "rt", encoding="utf-8") as f:
        doc = json.load(f)
    matrix = np.load(scores / f"{name}_scores.npz")["scores"].astype(np.float32)
    rows: dict[str, list[int]] = {}
    for i, (m, _) in enumerate(doc["pairs"]):
        rows.setdefault(m, []).append(i)
    hit = single = single_hit = 0
    for m in doc["mentions"]:
        idx = rows.get(m["text"], [])
        if not idx:
            continue
        cols = [PAIRS.index(tuple(sorted((m["part"], b)))) for b in range(PARTS) if b != m["part"]]
        best = doc["pairs"][idx[int(np.nanargmax(np.nanmean(matrix[idx][:, cols], axis=1)))]][1]
        ok = best in set(m["terms"])
        hit += ok and len(m["terms"]) == 1
        if len(m["terms"]) == 1:
            single, single_hit = single + 1, single_hit + ok
    n = len(doc["mentions"])
    return {"mentions": n, "top1_all": round(hit / n, 4), "single_term_mentions": single,
            "top1_single_term": round(single_hit / max(1, single), 4)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("step", choices=["collect", "fuse", "alone"],
                    help="alone: the cross-encoder's own top-1 from the scores, added to --out")
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data"))
    ap.add_argument("--sets", default="yidu,cdn")
    ap.add_argument("--work", default=str(ROOT / "runs" / "gpu"), help="bundle/ and collect/ are written here")
    ap.add_argument("--scores", help="fuse: the folder train_kar.py wrote ({set}_scores.npz)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "gpu_kar_cv.json"))
    args = ap.parse_args(argv)
    data, work = Path(args.data), Path(args.work)
    sets = args.sets.split(",")
    if args.step == "collect":
        (work / "collect").mkdir(parents=True, exist_ok=True)
        build_encoder(sets, data, work / "bundle")
        for name in sets:
            with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
                jobs = [pool.submit(collect_fold, name, str(data), k, args.seed, str(work / "collect"))
                        for k in range(PARTS)]
                paths = [Path(j.result()) for j in jobs]
            print(json.dumps(build_bundle(name, data, paths, work / "bundle")), flush=True)
        return 0
    if args.step == "alone":
        out = Path(args.out)
        doc = json.loads(out.read_text(encoding="utf-8"))
        for name in sets:
            got = alone_top1(work / "bundle", Path(args.scores or work / "out"), name)
            doc["results"][name]["kar_alone"] = got
            print(name, json.dumps(got))
        out.write_text(json.dumps(doc, indent=1, ensure_ascii=False), encoding="utf-8")
        return 0
    return fuse(args, sets)


def fuse(args, sets) -> int:
    from benchmarks._results import write_json
    from benchmarks.cv import summarize

    scores = Path(args.scores or Path(args.work) / "out")
    results = {"command": "python3 benchmarks/gpu/kar_cv.py " + " ".join(sys.argv[1:]), "steps": STEPS,
               "results": {}}
    for name in sets:
        if not (scores / f"{name}_scores.npz").is_file():
            print(f"{name}: no {scores / (name + '_scores.npz')}: train_kar.py has not scored this set")
            continue
        folds = complete_folds(np.load(scores / f"{name}_scores.npz")["done"])
        if not folds:
            print(f"{name}: no outer fold has all four of its models yet (train_kar.py --resume goes on)")
            continue
        with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            jobs = [pool.submit(fuse_fold, name, args.data, k, args.seed, str(scores)) for k in folds]
            done = [j.result() for j in jobs]
        res = summarize(done)
        res["outer_folds"] = folds
        res["kar_pairs_asked"] = sum(f["kar_pairs_asked"] for f in done)
        res["kar_pairs_missing"] = sum(f["kar_pairs_missing"] for f in done)
        train_log = scores / f"{name}_train.json"
        if train_log.is_file():
            res["training"] = json.loads(train_log.read_text(encoding="utf-8"))
        results["results"][name] = res
        for row, r in res["rows"].items():
            print(f"{name} {row:10s} accuracy {r['accuracy']:.4f} micro-F1 {r['micro_f1']:.4f} "
                  f"only here {r['right_only_here']} / only shipped {r['right_only_in_shipped']} "
                  f"p={r['sign_test_p']:.4g} per fold {r['per_fold_accuracy']} micro-F1 {r['per_fold_micro_f1']}",
                  flush=True)
    write_json(Path(args.out), results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
