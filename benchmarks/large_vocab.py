"""Large vocabularies: 40k, 150k and 400k names -- build time, peak memory, one mention's suggestion, type-ahead
search, and the dense index (FAISS flat against HNSW).

The names come from the real files, in this order: ICD-10 Beijing clinical v601 (CHIP-CDN, 37,645 names), the
ICD-9-CM-3 tree (13,687), Yidu-N7K code.txt (9,468), MEDIC with its synonyms (11,915 names, 64,322 synonyms);
a name already present is not added twice. That is about 137k names (terms and synonyms count alike: both are
searched and recalled). The rest is made by a documented, deterministic composition of the real Chinese names:
each qualifier of ``QUALIFIERS`` in turn (a side before the name, a course after it, as hospitals' own lists
write them) over every Chinese name in file order, coded ``<code>-q<k>``. A size takes the first N names.

Each size runs in a process of its own (peak memory is that process's maximum resident set) and measures:

* ``build_s``: the engine built on the vocabulary (``Engine(vocab, keyword_dir=...)`` with the shipped diagnoses
  ranker, at every size) plus its type-ahead searcher, first query included (indexes built lazily are counted);
  ``restart_build_s``: the same again, as after a restart, with the indexes the first build cached
  (termnorm.index_cache) in a fresh data directory;
* ``suggest_p50_ms`` / ``suggest_p95_ms``: ``engine.suggest`` one mention at a time, 100 Yidu-N7K val and 100
  CHIP-CDN dev mentions;
* ``typeahead_p95_ms``: ``engine.search_vocabulary(q, 20)`` (the app's search box) for every prefix of 1..6
  characters of 100 of those mentions (as a coder types);
* ``dense_*``: the names' vectors (the e5-small encoder of ``termnorm encoder build``, encoded once for the
  largest size and cached in runs/large_vocab/) in termnorm's TermIndex as ``flat`` (exact) and ``hnsw``: build
  seconds, per-query latency p95 over the 200 mentions' vectors, and ``dense_recall_at_20``: the share of the
  exact index's top 20 that HNSW also returns.

    python3 benchmarks/large_vocab.py                   # 40k, 150k, 400k (encoding 400k names: the long part)
    python3 benchmarks/large_vocab.py --sizes 40000 --no-dense
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
DATA = REPO.parent / "shared" / "data"
SOURCES = ["chip-cdn/icd10_beijing_clinical_v601.xlsx", "icd9cm3/icd9cm3_yibao_v2_tree.json", "yidu-n7k/code.txt",
           "ncbi-disease/medic_06Jul2012.txt"]
QUALIFIERS = [("左侧", ""), ("右侧", ""), ("双侧", ""), ("", "（复发）"), ("", "（术后）"), ("", "（急性）"),
              ("", "（慢性）"), ("", "（初发）")]
WORK = REPO / "runs" / "large_vocab"


def _chinese(text: str) -> bool:
    return any("\u4e00" <= ch <= "\u9fff" for ch in text)


def vocabulary_of(n_names: int):
    """The first ``n_names`` names (terms and synonyms) of the pool described above, as a Vocabulary."""
    from termnorm.loaders import load_vocabulary
    from termnorm.vocabulary import Vocabulary

    v, count, seen, chinese = Vocabulary(name=f"large-{n_names}"), 0, set(), []
    for src in SOURCES:
        part = load_vocabulary(DATA / src)
        for name in part.names:
            if count >= n_names:
                return v
            if name in seen:
                continue
            codes = list(part.codes.get(name, []))
            syns = [s for s in part.synonyms.get(name, []) if s not in seen][:max(0, n_names - count - 1)]
            v.add_term(name, codes, syns)
            seen.update([name, *syns])
            count += 1 + len(syns)
            if _chinese(name):
                chinese.append((name, codes))
    for k, (before, after) in enumerate(QUALIFIERS, start=1):
        for name, codes in chinese:
            if count >= n_names:
                return v
            composed = f"{before}{name}{after}"
            if composed not in seen:
                seen.add(composed)
                v.add_term(composed, [f"{c}-q{k}" for c in codes[:1]])
                count += 1
    raise SystemExit(f"the pool holds {count:,} names, fewer than {n_names:,}")


def mentions() -> list[str]:
    import pandas as pd

    yidu = pd.read_excel(DATA / "yidu-n7k" / "val.xlsx", dtype=str)["原始词"].dropna().tolist()[:100]
    cdn = [r["text"] for r in json.loads((DATA / "chip-cdn" / "dev.json").read_text(encoding="utf-8"))][:100]
    return yidu + cdn


def pct(xs, q) -> float:
    return round(float(np.percentile(np.asarray(xs) * 1000, q)), 2)


def one_size(n: int, dense: bool) -> dict:
    from termnorm.engine import PRETRAINED, Engine

    t0 = time.perf_counter()
    vocab = vocabulary_of(n)
    load_s = time.perf_counter() - t0
    names = len(vocab) + sum(len(s) for s in vocab.synonyms.values())
    import copy

    def build(v):
        t0 = time.perf_counter()
        eng = Engine(v, keyword_dir=DATA / "keywords")
        eng.use_pretrained_ranker(PRETRAINED["diagnoses"])
        eng.suggest("甲状腺病损切除术")
        eng.search_vocabulary("甲状腺")
        return eng, time.perf_counter() - t0

    fresh = copy.deepcopy(vocab)
    eng, build_s = build(vocab)
    del eng
    eng, cached_s = build(fresh)  # a restart: the indexes come from the cache the first build wrote
    ms = mentions()
    times = []
    for m in ms:
        t = time.perf_counter()
        eng.suggest(m)
        times.append(time.perf_counter() - t)
    ta = []
    for m in ms[::2]:
        for j in range(1, min(len(m), 6) + 1):
            t = time.perf_counter()
            eng.search_vocabulary(m[:j], 20)
            ta.append(time.perf_counter() - t)
    row = {"names": names, "terms": len(vocab), "load_s": round(load_s, 1), "build_s": round(build_s, 1),
           "restart_build_s": round(cached_s, 1),
           "suggest_p50_ms": pct(times, 50), "suggest_p95_ms": pct(times, 95), "typeahead_p50_ms": pct(ta, 50),
           "typeahead_p95_ms": pct(ta, 95), "typeahead_queries": len(ta)}
    if dense:
        row.update(dense_figures(vocab, ms))
    row["peak_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    return row


def name_vectors(vocab) -> tuple[np.ndarray, np.ndarray]:
    """Vectors of every name and synonym of ``vocab`` (term ids beside them), cached per name text."""
    texts, ids = [], []
    for i, name in enumerate(vocab.names):
        for t in [name, *vocab.synonyms.get(name, [])]:
            texts.append(t)
            ids.append(i)
    WORK.mkdir(parents=True, exist_ok=True)
    cache = WORK / "vectors.npz"
    known: dict[str, int] = {}
    vecs = np.zeros((0, 384), dtype=np.float32)
    if cache.exists():
        z = np.load(cache, allow_pickle=False)
        vecs, known = z["vecs"], {t: j for j, t in enumerate(z["texts"].tolist())}
    todo = [t for t in dict.fromkeys(texts) if t not in known]
    enc = encoder()
    if todo:
        new = enc.encode_terms(todo, progress=True).astype(np.float32)
        all_texts = list(known) + todo
        vecs = np.concatenate([vecs, new]) if len(vecs) else new
        np.savez(cache, vecs=vecs, texts=np.array(all_texts))
        known = {t: j for j, t in enumerate(all_texts)}
    return vecs[[known[t] for t in texts]], np.asarray(ids), enc


def encoder():
    from termnorm.dense.biencoder import BiEncoder
    from termnorm.encoder.build import build_e5_small

    return BiEncoder.from_folder(build_e5_small(progress=False))


def dense_figures(vocab, ms) -> dict:
    from termnorm.dense.index import TermIndex

    vecs, ids, enc = name_vectors(vocab)
    q = enc.encode_queries(ms).astype(np.float32)
    out, tops = {}, {}
    for kind in ("flat", "hnsw"):
        t0 = time.perf_counter()
        idx = TermIndex(vecs.shape[1], kind)
        idx.add_vectors(vecs, ids)
        out[f"dense_{kind}_build_s"] = round(time.perf_counter() - t0, 1)
        lat, res = [], []
        for v in q:
            t = time.perf_counter()
            found, _ = idx.search(v[None, :], 20)
            lat.append(time.perf_counter() - t)
            res.append({int(i) for i in found[0] if i >= 0})
        out[f"dense_{kind}_p95_ms"] = pct(lat, 95)
        tops[kind] = res
    out["dense_recall_at_20"] = round(float(np.mean([len(a & b) / max(1, len(a))
                                                     for a, b in zip(tops["flat"], tops["hnsw"])])), 4)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="40000,150000,400000")
    ap.add_argument("--no-dense", action="store_true", help="skip the dense index figures (no encoding)")
    ap.add_argument("--one", type=int, help=argparse.SUPPRESS)  # one size, in this process (run by the others)
    ap.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "large_vocab.json"))
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one_size(args.one, not args.no_dense)))
        return
    rows = []
    for n in map(int, args.sizes.split(",")):
        cmd = [sys.executable, __file__, "--one", str(n)] + (["--no-dense"] if args.no_dense else [])
        data = WORK / f"data-{n}"  # a fresh data directory: the first build finds no cached index
        shutil.rmtree(data, ignore_errors=True)
        env = {**os.environ, "TOKENIZERS_PARALLELISM": "false", "TERMNORM_DATA_DIR": str(data)}
        p = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if p.returncode:
            raise SystemExit(f"size {n}: failed\n{p.stderr[-3000:]}")
        row = json.loads(p.stdout.strip().splitlines()[-1])
        print(row, flush=True)
        rows.append(row)
    from benchmarks._results import write_json

    write_json(args.out, {"command": "python3 " + " ".join(sys.argv), "machine": f"{os.cpu_count()} cores, no GPU",
                          "targets_at_400k": {"typeahead_p95_ms": 100, "suggest_p95": "<= 2x the 40k value",
                                              "build_s": 300, "peak_mb": 8192},
                          "rows": rows})


if __name__ == "__main__":
    main()
