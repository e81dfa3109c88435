"""Accuracy of the full pipeline on Yidu-N7K val, CHIP-CDN dev and NCBI dev, with ablations.

    python3 benchmarks/accuracy.py [--data ../shared/data] [--sets yidu,cdn,ncbi] [--dense-yidu DIR]
                                   [--dense-cdn DIR] [--rows full,no_split,...] [--out benchmarks/results/accuracy.json]

``--rows`` measures only those rows (``full`` is always fitted: the ranker rows and ``no_fusion`` reuse
its candidates) and replaces them in the set's stored results, keeping the others; each row records the
command that measured it.

For each data set: the lexical pipeline (multi-strategy recall + history +
GBM ranker + count classifier + output rule, fitted on the training set) and
approach A's ablations, plus ours:

- ``full``        the pipeline as shipped for the set (settings in ``SETS``: recall profile, candidate budget,
                  and the metric the output rule is chosen for — CHIP-CDN is judged by micro-F1);
- ``dense``       ``full`` + the dense bi-encoder as one more recall strategy and ranker feature
                  (only with ``--dense-<set> DIR``, a folder written by ``termnorm train recall``), so
                  ``full`` is approach A's "no dense recall" when it is given;
- ``no_ranker``   recall order, top-1 (no learned ranking, no count);
- ``no_keywords`` the ranker without its keyword match / mismatch features (approach A's "no keyword
                  attention" for the lexical ranker; the cross-encoder's own mask ablation is in
                  ``termnorm.rank``);
- ``no_diff``     the ranker without the learned surface-difference scorer (termnorm.rank.surface);
- ``no_termclf``  the ranker without the per-term text classifier (termnorm.rank.termclf); for a set
                  whose setting leaves the classifier out (``term_classifier=False`` in ``SETS``; none
                  now) the row is ``with_termclf`` instead;
- ``no_fusion``   the ranker's top-1 only: no count prediction, no output rule;
- ``ensemble_3``, ``no_context``, ``no_part_count``  the ranker's own options (``--ensemble 3``,
                  ``--no-context-features``, ``--no-part-count``), refitted on the ``full`` row's candidates;
                  ``benchmarks/cv.py`` measures them on five times as many mentions;
- ``no_history``  history recall and the sieve removed;
- ``no_split``    multi-part mentions not split.

Prints a table and writes JSON.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._results import write_json  # noqa: E402

from termnorm.engine import Engine, evaluate_engine  # noqa: E402
from termnorm.evaluate import evaluate_predictions  # noqa: E402
from termnorm.loaders import load_labelled, load_vocabulary  # noqa: E402

#: vocabulary, train, test, then the shipped settings of the set
SETS = {
    "yidu": ("yidu-n7k/code.txt", "yidu-n7k/train.xlsx", "yidu-n7k/val.xlsx",
             dict(recall_profile="compact", max_candidates=None, rule_metric="accuracy")),
    "cdn": ("chip-cdn/icd10_beijing_clinical_v601.xlsx", "chip-cdn/train.json", "chip-cdn/dev.json",
            dict(recall_profile="deep", max_candidates=50, rule_metric="micro_f1")),
    "ncbi": ("ncbi-disease/medic_06Jul2012.txt", "ncbi-disease/NCBItrainset_corpus.txt",
             "ncbi-disease/NCBIdevelopset_corpus.txt",
             dict(recall_profile="wide", max_candidates=None, rule_metric="accuracy")),
}
#: rows that change only the GBM ranker's options (Engine.fit_ranker on the ``full`` row's candidates)
RANKER_ROWS = {"ensemble_3": dict(ensemble=3), "no_context": dict(context_features=False),
               "no_part_count": dict(part_count=False)}
KEYS = ["accuracy", "micro_f1", "recall_at_10", "candidate_recall", "mean_candidates", "count_accuracy",
        "mentions_per_second"]


ROWS = ("full", "dense", "no_ranker", "no_keywords", "no_diff", "no_termclf", "with_termclf", "no_fusion",
        *RANKER_ROWS, "no_history", "no_split")


def run_set(name: str, data: Path, ablations: bool, dense_dir: str | None = None,
            rows: tuple[str, ...] | None = None) -> dict:
    vpath, trpath, tepath, settings = SETS[name]
    kw = data / "keywords"
    out = {"settings": dict(settings)}

    def build(history=True, split=True, dense=None):
        vocab = load_vocabulary(data / vpath)
        train = load_labelled(data / trpath, vocab).mentions
        test = load_labelled(data / tepath, vocab).mentions
        eng = Engine(vocab, history=train if history else None, keyword_dir=kw if name != "ncbi" else None,
                     split=split, recall_profile=settings["recall_profile"],
                     max_candidates=settings["max_candidates"], dense=dense)
        return eng, train, test

    configs = [("full", {}, dict(ranker=True))]
    if dense_dir:
        from termnorm.dense.crossfit import load_dense

        configs.append(("dense", dict(dense=load_dense(dense_dir)),
                        dict(ranker=True)))
    if ablations:
        configs += [("no_ranker", {}, dict(ranker=False)),
                    ("no_keywords", {}, dict(ranker=True, keyword_features=False)),
                    ("no_diff", {}, dict(ranker=True, surface_diff=False)),
                    ("no_termclf", {}, dict(ranker=True, term_classifier=False))
                    if settings.get("term_classifier", True) else
                    ("with_termclf", {}, dict(ranker=True, term_classifier=True)),
                    ("no_history", dict(history=False), dict(ranker=True)),
                    ("no_split", dict(split=False), dict(ranker=True))]
    if rows is not None:
        configs = [c for c in configs if c[0] == "full" or c[0] in rows]
    wanted = (lambda row: rows is None or row in rows)
    for label, build_kw, how in configs:
        t0 = time.perf_counter()
        eng, train, test = build(**build_kw)
        if how["ranker"]:
            train = [m for m in train if m.terms]
            splits = eng.ranker_training_data(
                train, keyword_features=how.get("keyword_features", True), surface_diff=how.get("surface_diff", True),
                term_classifier=how.get("term_classifier", settings.get("term_classifier", True)))
            eng.fit_ranker(splits, rule_metric=settings["rule_metric"],
                           keyword_features=how.get("keyword_features", True))
        fit_s = time.perf_counter() - t0
        rep = _report(eng, test, how["ranker"], fit_s)
        out[label] = rep
        _show(name, label, rep)
        if label == "full" and ablations and wanted("no_fusion"):  # the same fitted ranker, its top-1 only
            sugs = eng.suggest_batch([m.text for m in test], k=10 ** 6)
            nf = evaluate_predictions([m.terms for m in test], [[s.candidates[0].term] if s.candidates else []
                                                                for s in sugs],
                                      [[c.term for c in s.candidates] for s in sugs])
            out["no_fusion"] = nf
            _show(name, "no_fusion", nf)
        if label == "full" and ablations:
            # the ranker's own options: refitted on the same candidates, scorer and classifier
            for row, options in RANKER_ROWS.items():
                if not wanted(row):
                    continue
                t0 = time.perf_counter()
                eng.fit_ranker(splits, rule_metric=settings["rule_metric"], **options)
                out[row] = _report(eng, test, True, time.perf_counter() - t0)
                _show(name, row, out[row])
    return out


def _report(eng, test, ranker: bool, fit_s: float) -> dict:
    rep = evaluate_engine(eng, test, stage="full" if ranker else "recall")
    rep.pop("errors", None)
    rep["setup_and_fit_seconds"] = round(fit_s, 1)
    if ranker:
        rep["output_rule"] = eng.meta.get("output_rule")
    return rep


def _show(name, label, rep):
    print(f"{name:5s} {label:11s} " + "  ".join(
        f"{k}={rep[k]:.4f}" if isinstance(rep.get(k), float) else f"{k}={rep.get(k)}" for k in KEYS), flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data"))
    ap.add_argument("--sets", default="yidu,cdn,ncbi")
    ap.add_argument("--no-ablations", action="store_true")
    for n in SETS:
        ap.add_argument(f"--dense-{n}", help=f"a trained bi-encoder for {n} (adds the 'dense' row)")
    ap.add_argument("--rows", help=f"measure only these rows and keep the set's other stored rows (of: {', '.join(ROWS)})")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "accuracy.json"))
    args = ap.parse_args(argv)
    rows = None if args.rows is None else tuple(args.rows.split(","))
    if rows is not None and (set(rows) - set(ROWS) or args.no_ablations):
        ap.error(f"--rows takes rows of {', '.join(ROWS)} (not with --no-ablations); got {args.rows}")
    data = Path(args.data)
    results = {"data": str(data), "machine": {"python": platform.python_version(), "platform": platform.platform()},
               "command": "python3 benchmarks/accuracy.py " + " ".join(argv or sys.argv[1:]), "results": {}}
    out = Path(args.out)
    measured = {}
    for name in args.sets.split(","):
        measured[name] = run_set(name, data, not args.no_ablations, getattr(args, f"dense_{name}"), rows)
        measured[name]["command"] = results["command"]
        for row in measured[name].values():
            if isinstance(row, dict) and "accuracy" in row:
                row["command"] = results["command"]
    # keep the sets measured by other runs (each set records its own command); read only now, so two
    # runs for different sets side by side do not overwrite each other's results
    if out.exists():
        results["results"] = json.loads(out.read_text(encoding="utf-8")).get("results", {})
    for name, res in measured.items():
        if rows is not None and name in results["results"]:  # replace the measured rows, keep the others
            res.pop("command")
            results["results"][name].update(res)
        else:
            results["results"][name] = res
    write_json(args.out, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
