"""Cross-validated accuracy of the ranker settings: 5,000 test mentions instead of 1,000.

    python3 benchmarks/cv.py [--data ../shared/data] [--sets yidu] [--folds 0,1,2,3,4] [--jobs 2]
                             [--seed 0] [--rows shipped,ensemble_3,...] [--out benchmarks/results/cv.json]
    python3 benchmarks/cv.py --rows shipped,no_keywords,no_diff,no_termclf --out benchmarks/results/cv_ablations.json
    python3 benchmarks/cv.py --rows shipped,no_split --update --out benchmarks/results/cv_ablations.json
    python3 benchmarks/cv.py --sets ncbi --rows shipped,no_termclf --out benchmarks/results/cv_ncbi.json
    python3 benchmarks/cv.py --sets cdn --rows shipped,ensemble_3 --out benchmarks/results/cv_cdn.json
    python3 benchmarks/cv.py --rows shipped,bag_3 --out benchmarks/results/cv_bag.json
    python3 benchmarks/cv.py --write-folds runs/cv_folds      # each outer fold's training file, for the row
    python3 benchmarks/cv.py --sets cdn --keep-folds runs/cv_kept   # a run cut short resumes at its next fold
    python3 benchmarks/cv.py --rows shipped,dense --dense 'runs/cv_dense/fold{k}' --out benchmarks/results/cv_dense.json
    python3 benchmarks/cv.py --rows shipped,dense,dense_crossfit --dense 'runs/cv_dense/fold{k}' \
                             --dense-crossfit 'runs/cv_dense_cf/fold{k}' --out benchmarks/results/cv_dense_cf.json

``--update`` replaces the measured rows in ``--out`` and keeps its other rows, provided the file's
``shipped`` row is the one just measured (same accuracy per fold); otherwise it stops without writing.

``--against FILE`` compares every row with another run's ``shipped`` row (``FILE:ROW`` for another row),
mention by mention (each row stores its ``answers``); give it more than once for several. With ``--against``
the rows may leave ``shipped`` out: a row whose candidates differ (``dense``) is then measured alone and
compared with the other run's rows, which saves refitting ``shipped`` when only an encoder changed.
To compare two commits, run this script in a checkout of the older one first (a copy of this file where that
commit's lacks ``answers``)::

    git worktree add ../before <commit> && cp benchmarks/cv.py ../before/benchmarks/
    (cd ../before && python3 benchmarks/cv.py --sets ncbi --rows shipped --out /tmp/before.json)
    python3 benchmarks/cv.py --sets ncbi --rows shipped --against /tmp/before.json --out ...

Why: on the 1,000 Yidu-N7K val mentions one accuracy figure has a sampling
error of about one point (sqrt(0.88 * 0.12 / 1000)), and two ranker
settings that score alike still disagree on ~3% of the mentions, so a
single val run cannot tell a +0.5 point change from noise. Here every
labelled mention of the set is a test mention once:

- outer fold 0 is the official split (train -> val / dev);
- outer folds 1-4 each hold out a quarter of the training file (a fixed
  permutation) and train on the rest of it *plus* the val / dev file,

so each fold trains on as many coded mentions as the official split. Per
outer fold the recall candidates, surface-difference scorer and term
classifier are fitted once (``Engine.ranker_training_data``); every row
then fits its own ranker on them (``Engine.fit_ranker``). Rows run by default (``--rows``):

- ``shipped``        the defaults (``termnorm train lexical``): list-context features, part-coverage
                     count features, one GBM;
- ``ensemble_3``     the pair scorer a random-subspace ensemble of 3 GBMs (``--ensemble 3``);
- ``no_context``     without the list-context features (``--no-context-features``);
- ``no_part_count``  without the count classifier's part-coverage features (``--no-part-count``);
- ``before``         neither feature set: the ranker as it was before them.

Rows that change only the ranker's options, also on the shared candidates (not run by default):
- ``novel_2``, ``novel_4``  the pair scorer's rows of a training mention whose gold term its K-fold history
                     never coded weigh 2 or 4 (``GBMOptions.novel_weight``); ``dense_novel_2``, ``dense_novel_4``
                     the same with the dense row's bi-encoder (that row's candidates), as ``dense_doc_words``
                     and ``dense_ensemble_3`` are ``doc_words`` and ``ensemble_3``;
- ``part_context``   per-part context features in the pair scorer (``--part-context``, termnorm.rank.parts);
- ``name``           a history-free pair scorer's out-of-fold probability as one more score (termnorm.rank.name);
- ``doc_words``      score ``doc_words``: what the mention's document says of a candidate (termnorm.rank.document).

Rows that change what the candidates carry refit those per outer fold too
(one more ``ranker_training_data`` each, about as long as the fold's first):

- ``no_keywords``    no keyword features in the ranker or the surface scorer (approach A's ablation);
- ``no_diff``        without the surface-difference scorer;
- ``no_termclf``     without the per-term text classifier;
- ``with_termclf``   with it, for a set whose setting leaves it out (how NCBI's was decided);
- ``no_split``       multi-part mentions not split (``Engine(split=False)``);
- ``category``       with the hierarchy scores (termnorm.rank.hierarchy: the best history score among the other
                     candidates of the candidate's code category; off, measured); ``family`` the family priors
                     (termnorm.rank.family: how often coders use the code's family);
- ``synthetic``      a quarter as many made-up mentions of never-coded terms as training mentions join the
                     ranker's training examples (termnorm.rank.synthetic: coders' keyword rewrites run
                     backwards); ``synthetic_10`` a tenth;
- ``held_15``, ``held_30``  15% / 30% of the training mentions, all those of randomly drawn terms coded twice
                     or more, in one K-fold part per term: real mentions of terms their K-fold history never
                     coded, for the ranker to learn from (``Engine.ranker_training_data(held_terms=...)``);
- ``english_lists``  English lists of 3+ findings sharing a head split (termnorm.text.split.english_list);
                     ``dense_english_lists`` with the dense row's bi-encoder;
- ``short_forms``    the built-in Chinese short forms read by the recall (上感 → 上呼吸道感染; termnorm.text.short_forms);
- ``no_documents``   mentions read without their documents (a PubTator set's abstracts: the abbreviations
                     they define are not spelled out, termnorm.context);
- ``coded_key``      history recall by coded key too (``--history-extras key``: recall.history.CodedKeyRecaller);
- ``history_extras`` that and analogy recall (``--history-extras key,analogy``: recall.analogy.AnalogyRecaller);
- ``bag_3``          three rankers on three K-fold splits of the history, probabilities averaged
                     (``--bag 3``; three times the candidates' fit);
- ``dense``          a dense bi-encoder as one more recall strategy (``termnorm evaluate --dense``): each
                     outer fold needs its own, trained on that fold's training mentions only (``--dense``
                     names the folders, ``{k}`` the fold; ``--write-folds DIR`` writes the training files
                     to train them from, ``DIR/fold{k}/train.json``), or a table of a GPU-trained encoder's
                     answers per fold (``--dense 'runs/gpu_dense/out/cdn_fold{k}.npz'``,
                     ``benchmarks/gpu/dense_cv.py``).
- ``dense_crossfit`` the same with a cross-fitted bi-encoder per outer fold (``termnorm train recall --folds
                     K``, :mod:`termnorm.dense.crossfit`; ``--dense-crossfit`` names the folders): the
                     fold's training mentions get out-of-fold dense scores;
- ``dense_scores``   the dense row's bi-encoder (or table) scoring the other strategies' candidates and
                     proposing none of its own (``score_only``, termnorm.recall.union).

For each row: pooled exact-set accuracy and micro-F1, per-fold accuracy, accuracy by familiarity (how often
the fold's training mentions coded the test mention's rarest gold term: never, 1-2, 3-9, 10+ times), and
against ``shipped`` the mentions only one of the two gets right with a two-sided sign test
(termnorm.stats.sign_test) on them; the same against every other row in the JSON (``pairwise``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing
import platform
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._results import write_json  # noqa: E402
from benchmarks.cv_against import _by_familiarity, against, check_against  # noqa: E402
from termnorm.filestore import write_json_atomic  # noqa: E402
from termnorm.stats import sign_test  # noqa: E402

#: the rows: keyword arguments of Engine.fit_ranker (and, for DATA_OPTIONS, of Engine.ranker_training_data)
ROWS = {
    "shipped": {},
    "ensemble_3": dict(ensemble=3),
    "no_context": dict(context_features=False),
    "no_part_count": dict(part_count=False),
    "before": dict(context_features=False, part_count=False),
    "no_keywords": dict(keyword_features=False),
    "no_diff": dict(surface_diff=False),
    "no_termclf": dict(term_classifier=False),
    "with_termclf": dict(term_classifier=True),
    "no_split": dict(split=False),
    "no_documents": dict(documents=False),
    "category": dict(category_features=True), "family": dict(family_features=True),
    "synthetic": dict(synthetic=0.25),
    "synthetic_10": dict(synthetic=0.1),
    "held_15": dict(held_terms=0.15),
    "held_30": dict(held_terms=0.3),
    "dense": dict(dense="dense"),
    "dense_crossfit": dict(dense="crossfit"),
    "dense_scores": dict(dense="dense", dense_score_only=True),
    "bag_3": dict(bag=3),
    "coded_key": dict(history_extras=("key",)),
    "history_extras": dict(history_extras=("key", "analogy")),
    "novel_2": dict(novel_weight=2.0),
    "novel_4": dict(novel_weight=4.0),
    "part_context": dict(part_context=True),
    "name": dict(name_scorer=True),
    "doc_words": dict(document_words=True),
    "dense_novel_2": dict(dense="dense", novel_weight=2.0), "dense_novel_4": dict(dense="dense", novel_weight=4.0),
    "dense_doc_words": dict(dense="dense", document_words=True), "dense_ensemble_3": dict(dense="dense", ensemble=3),
    "english_lists": dict(english_lists=True),
    "dense_english_lists": dict(dense="dense", english_lists=True),
    "short_forms": dict(short_forms=True),
}
DEFAULT_ROWS = ("shipped", "ensemble_3", "no_context", "no_part_count", "before")
#: options of the ranker's training data (what the candidates carry, how many history splits): a row with
#: any of them gets its own ``ranker_training_data``
DATA_OPTIONS = ("keyword_features", "surface_diff", "term_classifier", "split", "dense", "bag", "history_extras",
                "documents", "category_features", "synthetic", "held_terms", "dense_score_only", "english_lists",
                "short_forms", "family_features")
#: the data options that build the engine or its mentions, not ranker_training_data's
BUILD_OPTIONS = ("split", "dense", "history_extras", "documents", "category_features", "dense_score_only",
                 "english_lists", "short_forms", "family_features")
#: the permutation of the training file that cuts outer folds 1-4
SPLIT_SEED = 2026


def outer_fold(train: list, dev: list, k: int) -> tuple[list, list]:
    """(training mentions, test mentions) of outer fold ``k``: 0 the official split, 1-4 a quarter of the
    training file held out, the rest of it and the dev file trained on."""
    if k == 0:
        return list(train), list(dev)
    quarter = np.random.default_rng(SPLIT_SEED).permutation(len(train)) % 4
    return ([m for m, q in zip(train, quarter) if q != k - 1] + list(dev),
            [m for m, q in zip(train, quarter) if q == k - 1])


def write_folds(name: str, data: str, out: str) -> list[Path]:
    """Each outer fold's training mentions as ``out/fold{k}/train.json`` (CHIP-CDN's JSON: ``text`` and
    ``normalized_result``, terms joined by ``##``; JSON keeps any character, where a worksheet refuses control
    characters): what a fold's dense bi-encoder is trained on (``python -m termnorm.dense.train --train``)."""
    from benchmarks.accuracy import SETS
    from termnorm.loaders import load_labelled, load_vocabulary

    vpath, trpath, tepath, _ = SETS[name]
    data = Path(data)
    vocab = load_vocabulary(data / vpath)
    train, dev = load_labelled(data / trpath, vocab).mentions, load_labelled(data / tepath, vocab).mentions
    paths = []
    for k in range(5):
        fold_train, _ = outer_fold(train, dev, k)
        path = Path(out) / f"fold{k}" / "train.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        rows = [{"text": m.text, "normalized_result": "##".join(m.terms)} for m in fold_train]
        path.write_text(json.dumps(rows, ensure_ascii=False, indent=0), encoding="utf-8")
        paths.append(path)
    return paths


def _load_dense(pattern: str, k: int, score_only: bool = False):
    """Outer fold ``k``'s bi-encoder or table; ``score_only``: it scores the other strategies' candidates and
    proposes none (termnorm.recall.union, ``score_only``)."""
    got = _load_dense_of(pattern, k)
    if score_only:
        from termnorm.dense.index import DenseRecaller, Recaller

        got = got if isinstance(got, Recaller) else DenseRecaller(got, use_history=False)
        got.score_only = True
    return got


def _load_dense_of(pattern: str, k: int):
    from termnorm.dense.crossfit import load_dense

    d = Path(pattern.format(k=k))
    if not d.exists():
        raise SystemExit(f"--dense: no bi-encoder folder {d} for outer fold {k}")
    if d.is_file():  # a table of a GPU-trained encoder's answers (benchmarks/gpu/dense_cv.py)
        from termnorm.dense.table import DenseTable

        return DenseTable(d)
    return load_dense(d)


def run_fold(name: str, data: str, k: int, seed: int, rows: tuple[str, ...] = DEFAULT_ROWS,
             dense: dict[str, str] | None = None) -> dict:
    """Fit the candidates once and every row's ranker on outer fold ``k``; per row, per test mention:
    right or not, and the pair counts of micro-F1."""
    from benchmarks.accuracy import SETS
    from termnorm.engine import Engine
    from termnorm.evaluate import familiarity_buckets
    from termnorm.loaders import load_labelled, load_vocabulary
    from termnorm.text import short_forms
    from termnorm.text import split as split_module

    vpath, trpath, tepath, settings = SETS[name]
    data = Path(data)
    vocab = load_vocabulary(data / vpath)
    train, test = outer_fold(load_labelled(data / trpath, vocab).mentions,
                             load_labelled(data / tepath, vocab).mentions, k)
    defaults = {"term_classifier": settings.get("term_classifier", True)}
    out = {"fold": k, "train": len(train), "test": len(test), "rows": {},
           "familiarity": familiarity_buckets((m.terms for m in train), [m.terms for m in test])}
    texts = [m.text for m in test]
    # rows grouped by their training data: the plain rows share one fit of the candidates
    groups: dict[tuple, list[str]] = {}
    for row in rows:
        data_kw = {**defaults, **{o: v for o, v in ROWS[row].items() if o in DATA_OPTIONS}}
        groups.setdefault(tuple(sorted(data_kw.items())), []).append(row)
    switches = (split_module.ENGLISH_LISTS, short_forms.ENABLED)  # read by split_mention, the recall: restored
    for data_kw, group in groups.items():
        t0 = time.perf_counter()
        split_module.ENGLISH_LISTS = dict(data_kw).get("english_lists", switches[0])
        short_forms.ENABLED = dict(data_kw).get("short_forms", switches[1])
        g_train, g_test = train, test
        if not dict(data_kw).get("documents", True):
            g_train, g_test = ([replace(m, document="") for m in ms] for ms in (train, test))
        eng = Engine(vocab, history=g_train, keyword_dir=data / "keywords" if name != "ncbi" else None,
                     recall_profile=settings["recall_profile"], max_candidates=settings["max_candidates"],
                     split=dict(data_kw).get("split", True),
                     history_extras=dict(data_kw).get("history_extras", ()),
                     dense=_load_dense(dense[dict(data_kw)["dense"]], k, dict(data_kw).get("dense_score_only", False))
                     if dict(data_kw).get("dense") else None)
        eng.category_features, eng.family_features = (dict(data_kw).get(f"{o}_features", False)
                                                       for o in ("category", "family"))
        out.update({"dense_unindexed": eng.dense.unindexed} if hasattr(eng.dense, "unindexed") else {})
        splits = eng.ranker_training_data(g_train, seed=seed,
                                          **{o: v for o, v in data_kw if o not in BUILD_OPTIONS})
        if "candidates_seconds" not in out:
            out["candidates_seconds"] = round(time.perf_counter() - t0, 1)
        for row in group:
            _fit_and_score(eng, splits, row, seed, settings, texts, g_test, out, dict(data_kw))
    split_module.ENGLISH_LISTS, short_forms.ENABLED = switches
    return out


def _fit_and_score(eng, splits, row, seed, settings, texts, test, out, data_kw) -> None:
    """Fit ``row``'s ranker on ``splits`` and record, per test mention, whether its answer is right."""
    kw = {o: v for o, v in ROWS[row].items() if o not in DATA_OPTIONS}
    kw["keyword_features"] = data_kw.get("keyword_features", True)
    t1 = time.perf_counter()
    eng.fit_ranker(splits, seed=seed, rule_metric=settings["rule_metric"], **kw)
    sugs = eng.suggest_batch(texts, documents=[m.document for m in test])
    right, tp, n_pred, n_gold = [], 0, 0, 0
    for s, m in zip(sugs, test):
        chosen, gold = set(s.chosen), set(m.terms)
        right.append(chosen == gold)
        tp += len(chosen & gold)
        n_pred += len(chosen)
        n_gold += len(gold)
    out["rows"][row] = {"right": right, "tp": tp, "n_pred": n_pred, "n_gold": n_gold,
                        "seconds": round(time.perf_counter() - t1, 1)}


def _micro_f1(tp: int, n_pred: int, n_gold: int) -> float:
    """Micro-F1 from pair counts (termnorm.evaluate.micro_prf's F1, which needs the term sets): 2·tp / (pred + gold)."""
    return round(2 * tp / max(1, n_pred + n_gold), 4)


def summarize(folds: list[dict]) -> dict:
    folds = sorted(folds, key=lambda f: f["fold"])
    # without a shipped row (rows compared with another run's by --against) the in-run sign tests are left out
    shipped = "shipped" in folds[0]["rows"]
    ref = np.concatenate([f["rows"]["shipped"]["right"] for f in folds]) if shipped else None
    bucket = np.concatenate([np.array(f.get("familiarity") or [None] * f["test"], dtype=object) for f in folds])
    rows = {}
    right_of = {row: np.concatenate([f["rows"][row]["right"] for f in folds]) for row in folds[0]["rows"]}
    for row in folds[0]["rows"]:
        right = right_of[row]
        tp = sum(f["rows"][row]["tp"] for f in folds)
        pred = sum(f["rows"][row]["n_pred"] for f in folds)
        gold = sum(f["rows"][row]["n_gold"] for f in folds)
        vs_shipped = sign_test(right, ref) if shipped else {}
        rows[row] = {
            "accuracy": round(float(right.mean()), 4), "micro_f1": _micro_f1(tp, pred, gold),
            "per_fold_accuracy": {f["fold"]: round(float(np.mean(f["rows"][row]["right"])), 4) for f in folds},
            "per_fold_micro_f1": {f["fold"]: _micro_f1(*(f["rows"][row][c] for c in ("tp", "n_pred", "n_gold")))
                                  for f in folds},
            **({"right_only_here": vs_shipped["right_only_here"],
                "right_only_in_shipped": vs_shipped["right_only_there"],
                "sign_test_p": vs_shipped["sign_test_p"]} if shipped else {}),
            "ranker_fit_and_predict_seconds": round(sum(f["rows"][row]["seconds"] for f in folds), 1),
            "by_familiarity": _by_familiarity(right, ref, bucket),
            "pairwise": {other: sign_test(right, r) for other, r in right_of.items() if other != row},
            # per test mention in fold order, 1 right: what --against compares across commits
            "answers": "".join("1" if x else "0" for x in right)}
    return {"mentions": int(sum(f["test"] for f in folds)), "rows": rows, "familiarity": [str(b) for b in bucket],
            "folds": [{k: v for k, v in f.items() if k not in ("rows", "familiarity")} for f in folds]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data"))
    ap.add_argument("--sets", default="yidu")
    ap.add_argument("--folds", default="0,1,2,3,4", help="outer folds to run (0 = the official split)")
    ap.add_argument("--jobs", type=int, default=2, help="outer folds fitted side by side (one process each)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rows", default=",".join(DEFAULT_ROWS),
                    help=f"rows to measure, 'shipped' first or, with --against, left out (of: {', '.join(ROWS)})")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "cv.json"))
    ap.add_argument("--dense", help="row dense: the bi-encoder folder of each outer fold, '{k}' for the fold")
    ap.add_argument("--dense-crossfit",
                    help="row dense_crossfit: the cross-fitted bi-encoder folder of each outer fold ('{k}')")
    ap.add_argument("--write-folds", metavar="DIR",
                    help="only write each outer fold's training file to DIR/fold{k}/train.json and stop")
    ap.add_argument("--update", action="store_true",
                    help="keep --out's other rows (its shipped row must match the one measured now)")
    ap.add_argument("--keep-folds", metavar="DIR",
                    help="write each outer fold's answers to DIR as it finishes, and take a fold from DIR instead "
                         "of fitting it again when the set, rows, seed, encoders, data and code are the same")
    ap.add_argument("--against", metavar="FILE[:ROW]", action="append", default=[],
                    help="also compare every row with ROW (default shipped) of FILE, an earlier result of this "
                         "script on the same set (another commit: see the module docstring), sign test; repeatable")
    args = ap.parse_args(argv)
    from tqdm import tqdm

    if args.write_folds:
        for name in args.sets.split(","):
            for path in write_folds(name, args.data, args.write_folds):
                print(path)
        return 0
    folds = [int(k) for k in args.folds.split(",")]
    bad = [k for k in folds if not 0 <= k <= 4]
    if bad:
        ap.error(f"outer folds are 0-4, got {bad}")
    rows = tuple(args.rows.split(","))
    unknown = [r for r in rows if r not in ROWS]
    if unknown or (rows[0] != "shipped" and not args.against) or "shipped" in rows[1:]:
        ap.error(f"--rows: 'shipped' first (or left out with --against), then any of {', '.join(ROWS)}; "
                 f"got {args.rows}")
    if args.update and rows[0] != "shipped":
        ap.error("--update keeps a file's other rows only beside the same shipped row: measure 'shipped' too")
    if any(ROWS[r].get("dense") == "dense" for r in rows) and not args.dense:
        ap.error("row dense needs --dense (the bi-encoder folder of each outer fold, '{k}' for the fold)")
    if "dense_crossfit" in rows and not args.dense_crossfit:
        ap.error("row dense_crossfit needs --dense-crossfit (the cross-fitted folder of each outer fold, '{k}')")
    check_against(args.against, args.sets.split(","), folds)  # before the hours of fitting, not after
    results = {"command": "python3 benchmarks/cv.py " + " ".join(argv if argv is not None else sys.argv[1:]),
               "machine": {"python": platform.python_version(), "platform": platform.platform()},
               "rows": {k: ROWS[k] or "defaults" for k in rows}, "results": {}}
    t0 = time.perf_counter()
    for name in args.sets.split(","):
        dense = {"dense": args.dense, "crossfit": args.dense_crossfit}
        kept = {k: FoldKeep(args.keep_folds, name, k, _fold_key(args, name, k, rows, dense))
                for k in folds} if args.keep_folds else {}
        done = [f for f in (kept[k].load() for k in kept) if f is not None]
        todo = [k for k in folds if k not in {f["fold"] for f in done}]
        if done:
            print(f"{name}: outer folds {sorted(f['fold'] for f in done)} taken from {args.keep_folds}", flush=True)
        # spawned, not forked: a fork of a process whose torch threads already ran can stall in the child
        spawn = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=max(1, args.jobs), mp_context=spawn) as pool:
            jobs = [pool.submit(run_fold, name, args.data, k, args.seed, rows, dense) for k in todo]
            for j in tqdm(as_completed(jobs), total=len(jobs), desc=f"{name}: outer folds"):
                done.append(j.result())
                if args.keep_folds:
                    kept[done[-1]["fold"]].save(done[-1])
        res = results["results"][name] = summarize(done)
        print(f"{name}: {res['mentions']} test mentions over folds {folds}")
        print(f"  {'row':14s} {'accuracy':>8s} {'micro-F1':>8s}  only here / only shipped   sign test p   per fold"
              "   by familiarity (unseen, 1-2, 3-9, 10+)")
        for row, r in res["rows"].items():
            vs = (f"{r['right_only_here']:9d} / {r['right_only_in_shipped']:<12d} {r['sign_test_p']:9.4f}"
                  if "sign_test_p" in r else f"{'(no shipped row)':>34s}")
            print(f"  {row:14s} {r['accuracy']:8.4f} {r['micro_f1']:8.4f}  {vs}   "
                  + " ".join(f"{v:.3f}" for v in r["per_fold_accuracy"].values())
                  + "   micro-F1 " + " ".join(f"{v:.3f}" for v in r["per_fold_micro_f1"].values())
                  + "   " + " ".join(f"{b}: {v['accuracy']:.3f} (n={v['n']}, p={v.get('sign_test_p', 1):.3f})"
                                     for b, v in r["by_familiarity"].items()), flush=True)
        for spec in args.against:
            path, _, other_row = spec.partition(":")
            other = json.loads(Path(path).read_text(encoding="utf-8"))["results"][name]
            other_row = other_row or "shipped"
            vs_other = {"file": path, "row": other_row, "rows": against(res, other, other_row)}
            # one --against as before (a dict); several as a list
            res["against"] = vs_other if len(args.against) == 1 else [*res.get("against", []), vs_other]
            for row, a in vs_other["rows"].items():
                print(f"  {row} against {path}:{other_row}: {a['accuracy']:.4f} vs "
                      f"{a['against_accuracy']:.4f}, right only here {a['right_only_here']}, only there "
                      f"{a['right_only_there']}, sign test p {a['sign_test_p']:.4f}; "
                      + " ".join(f"{b}: {v['accuracy']:.3f} (p={v['sign_test_p']:.3f})"
                                 for b, v in a["by_familiarity"].items()))
        others = [row for row in res["rows"] if row != "shipped"]
        for i, a in enumerate(others):
            for b in others[i + 1:]:
                pw = res["rows"][a]["pairwise"][b]
                print(f"  {a} against {b}: right only in {a} {pw['right_only_here']}, only in {b} "
                      f"{pw['right_only_there']}, sign test p {pw['sign_test_p']:.4f}")
    results["seconds"] = round(time.perf_counter() - t0, 1)
    if args.update and Path(args.out).exists():
        results = _merge(json.loads(Path(args.out).read_text(encoding="utf-8")), results)
    write_json(args.out, results)
    return 0


def _code_version() -> str:
    """A digest of the engine's and the benchmarks' Python files as they are on disk: a kept fold is reused only
    by the same code (a commit of docs or results in between does not matter; an uncommitted edit does)."""
    h = hashlib.sha1()
    for f in sorted([*(ROOT / "termnorm").rglob("*.py"), *(ROOT / "benchmarks").rglob("*.py")]):
        h.update(f.relative_to(ROOT).as_posix().encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def _fold_key(args, name: str, k: int, rows: tuple[str, ...], dense: dict) -> dict:
    # an encoder folder trained again (same name, new files) changes its modification time
    folders = {kind: str(Path(pattern.format(k=k)).resolve()) for kind, pattern in dense.items() if pattern}
    return {"set": name, "fold": k, "seed": args.seed, "rows": list(rows),
            "dense": {kind: [f, Path(f).stat().st_mtime if Path(f).exists() else None] for kind, f in folders.items()},
            "data": str(Path(args.data).resolve()), "code": _code_version()}


class FoldKeep:
    """One outer fold's result in ``DIR/{set}_fold{k}.json`` with what it was measured with (``key``): a run cut
    short (a session's end, kill -9) keeps its finished folds, and the next run with the same key takes them."""

    def __init__(self, folder: str, name: str, k: int, key: dict):
        self.path, self.key = Path(folder) / f"{name}_fold{k}.json", key

    def load(self) -> dict | None:
        try:
            kept = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return kept["fold"] if kept.get("key") == self.key else None

    def save(self, fold: dict) -> None:
        write_json_atomic(self.path, {"key": self.key, "fold": fold})


def _merge(old: dict, new: dict) -> dict:
    """``old`` with ``new``'s rows replacing its own; both must share the shipped row (else SystemExit)."""
    for name, res in new["results"].items():
        before = old.get("results", {}).get(name)
        if before is None:
            old.setdefault("results", {})[name] = res
            continue
        a, b = before["rows"]["shipped"], res["rows"]["shipped"]
        if (a["accuracy"], a["per_fold_accuracy"]) != (b["accuracy"], {str(k): v for k, v in
                                                                       b["per_fold_accuracy"].items()}):
            raise SystemExit(f"--update: the stored shipped row ({a['accuracy']}) is not the one measured now "
                             f"({b['accuracy']}); re-run every row instead")
        for row, r in res["rows"].items():
            r["command"] = new["command"]
            before["rows"][row] = r
    old["rows"] = {**old.get("rows", {}), **new["rows"]}
    old.setdefault("updates", []).append({"command": new["command"], "seconds": new["seconds"]})
    return old


if __name__ == "__main__":
    sys.exit(main())
