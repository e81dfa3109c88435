"""The ``termnorm`` command line: the engine (normalize, evaluate, train, encoder), the app and its data (app,
load-data, create-admin, settings) and the systems around it (serve, api-token, backup). ``termnorm CMD --help``."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path


def _add_data_args(p, need_train=False):
    p.add_argument("--vocab", help="vocabulary file (xlsx / code.txt / tree json / MEDIC / csv); demo data when omitted")
    p.add_argument("--train", required=need_train, help="labelled mentions used as coded history and for training")
    p.add_argument("--model", help="a trained pipeline folder (termnorm train ...)")
    p.add_argument("--keywords", help="folder of keyword lists (procedure_sites.txt ...); optional")
    p.add_argument("--no-split", action="store_true", help="do not split multi-part mentions")
    p.add_argument("--history-extras", type=_history_extras, default=(),
                   help="more history strategies, comma-separated: 'key' (coded mentions equal up to side and "
                        "punctuation, score 'history_key'), 'analogy' (a coded neighbour's edit carried over to "
                        "its term, score 'history_analogy'); none by default")
    p.add_argument("--dense", help="a trained bi-encoder (the 'model' folder written by `termnorm train recall`)")
    p.add_argument("--ranker", help="a trained keyword-attentive ranker folder (`termnorm train rank`)")
    p.add_argument("--recall-profile", choices=["wide", "compact", "deep"], default="wide",
                   help="per-strategy candidate counts: wide (multi-term diagnoses, ~49 candidates on CHIP-CDN), "
                        "compact (procedures, ~28 on Yidu-N7K) or deep (twice wide, ~97 on CHIP-CDN: use with "
                        "--max-candidates so the fitted ranker keeps the best of them)")
    p.add_argument("--max-candidates", type=int, default=None,
                   help="keep only this many candidates per mention after the lexical ranker has ordered them")
    p.add_argument("--rule-metric", choices=["accuracy", "micro_f1"], default="accuracy",
                   help="what the output rule (how many terms) is chosen for when the ranker is fitted: "
                        "exact-set accuracy or pair micro-F1 (the CHIP-CDN metric)")
    p.add_argument("--no-surface-diff", action="store_true",
                   help="fit the ranker without the learned surface-difference scorer (score 'diff'; an ablation)")
    p.add_argument("--no-term-classifier", action="store_true",
                   help="fit the ranker without the per-term text classifier (score 'clf'; an ablation)")
    p.add_argument("--bag", type=_positive_int, default=1,
                   help="fit N rankers on different K-fold splits of the history and average them (steadier "
                        "accuracy across seeds; N times the fit time; benchmarks/seeds.py)")
    p.add_argument("--ensemble", type=_positive_int, default=None,
                   help="GBMs in the pair scorer, each on a random 70%% of the feature columns, averaged "
                        "(default 1: one GBM on every column; benchmarks/cv.py measures 3)")
    p.add_argument("--no-context-features", action="store_true",
                   help="fit the ranker without the list-context features (each score's best value among the "
                        "mention's candidates and the gap to it; an ablation)")
    p.add_argument("--no-part-count", action="store_true",
                   help="fit the count classifier without the part-coverage features (an ablation)")
    p.add_argument("--part-context", action="store_true",
                   help="give the pair scorer per-part context features: each candidate against the best "
                        "candidates of the mention part it names (termnorm.rank.parts; off by default)")
    p.add_argument("--name-scorer", action="store_true",
                   help="give the ranker one more score, 'name': a pair scorer fitted without coded history, "
                        "out of fold (termnorm.rank.name; off by default)")
    p.add_argument("--seed", type=int, default=0,
                   help="random seed of the ranker fit (history folds, held-out split, GBM state)")


def _ranker_options(args) -> dict:
    """The GBM ranker's own options of ``termnorm train lexical`` / ``termnorm evaluate``."""
    return dict(ensemble=args.ensemble, context_features=not args.no_context_features,
                part_count=not args.no_part_count, part_context=args.part_context, name_scorer=args.name_scorer)


def _history_extras(text: str) -> tuple[str, ...]:
    from termnorm.engine import check_history_extras

    try:
        return check_history_extras(n.strip() for n in text.split(",") if n.strip())
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _positive_int(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {n}")
    return n


def build_engine(args, progress=True):
    from termnorm.engine import Engine

    if args.model:
        return Engine.load(args.model, progress=progress)
    if not args.vocab:
        return Engine.from_demo()
    from termnorm.loaders import load_labelled, load_vocabulary

    vocab = load_vocabulary(args.vocab)
    history = load_labelled(args.train, vocab).mentions if args.train else None
    dense = ranker = None
    if getattr(args, "dense", None):
        from termnorm.dense.crossfit import load_dense

        dense = load_dense(args.dense)
    if getattr(args, "ranker", None):
        from termnorm.rank.crossfit import load_ranker

        ranker = load_ranker(args.ranker)
    eng = Engine(vocab, history=history, keyword_dir=args.keywords, split=not args.no_split,
                 recall_profile=args.recall_profile, dense=dense, ranker=ranker,
                 max_candidates=getattr(args, "max_candidates", None),
                 history_extras=getattr(args, "history_extras", ()))
    return eng


def _read_document(path: str) -> str:
    """The note given with --document (UTF-8 text; '-' reads standard input)."""
    if path == "-":
        return sys.stdin.read()
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise SystemExit(f"--document {path}: cannot read it as UTF-8 text ({e})")


def cmd_normalize(args) -> int:
    if args.input or args.output:
        return _normalize_file(args)
    if not args.text:
        print("give mentions to normalize, or --input FILE --output FILE", file=sys.stderr)
        return 2
    eng = build_engine(args, progress=False)
    document = _read_document(args.document) if args.document else ""
    for text in args.text:
        sug = eng.suggest_batch([text], k=args.k or 10, documents=[document])[0]
        if args.json:
            print(json.dumps(_suggestion_json(sug), ensure_ascii=False, indent=1))
            continue
        print(f"mention: {text}" + (f"   (read as: {sug.spelled_out})" if sug.spelled_out else ""))
        if sug.keywords:
            print("keywords: " + "  ".join(f"{k.text}[{k.kind}]" for k in sug.keywords))
        print(f"predicted count: {sug.predicted_count}   confidence: {sug.confidence:.3f}   model: {sug.model_version}")
        print("chosen: " + " ## ".join(sug.chosen))
        print(f"{'#':>3} {'score':>6}  {'code':<12} term   [strategy scores]")
        for i, c in enumerate(sug.candidates, 1):
            parts = " ".join(f"{k}={v:.2f}" for k, v in sorted(c.scores.items()))
            mark = "*" if c.term in sug.chosen else " "
            print(f"{i:>3}{mark}{c.score:6.3f}  {c.code or '':<12} {c.term}   [{parts}]")
        print()
    return 0


def _normalize_file(args) -> int:
    from termnorm.batch import ENGINE_OPTIONS, PATH_OPTIONS, BatchOptions, PrecodeJob, summary

    if not (args.input and args.output):
        print("batch pre-coding needs both --input FILE and --output FILE", file=sys.stderr)
        return 2
    engine_options = {k: getattr(args, k) for k in ENGINE_OPTIONS}
    engine_options["history_extras"] = list(args.history_extras)
    # absolute paths: the work folder's settings and Ray's actors must not depend on the current folder
    engine_options.update({k: str(Path(v).resolve()) for k, v in engine_options.items() if k in PATH_OPTIONS and v})
    opt = BatchOptions(column=args.column, keep=args.keep or [], document=args.document_column,
                       header=not args.no_header, k=args.k or 5,
                       batch_size=args.batch_size, restart=args.restart, progress=not args.quiet, ray=args.ray,
                       actors=args.actors, num_cpus=args.num_cpus, num_gpus=args.num_gpus)
    try:
        stats = PrecodeJob(args.input, args.output, engine_options, opt).run()
    except KeyboardInterrupt:
        print(f"\ninterrupted: what was coded is kept in {args.output}.work/; run the same command again to go on",
              file=sys.stderr)
        return 130
    print(summary(stats, args.output))
    return 0


def _suggestion_json(s):
    from termnorm.records import suggestion_dict

    return suggestion_dict(s)


def cmd_evaluate(args) -> int:
    from termnorm.engine import evaluate_engine
    from termnorm.loaders import load_labelled

    t0 = time.perf_counter()
    eng = build_engine(args)
    if args.stage == "full" and not eng.has_ranker:
        if not args.train:
            print("--stage full needs --train (to fit the lexical ranker) or --model", file=sys.stderr)
            return 2
        eng.fit_lexical(load_labelled(args.train, eng.vocabulary).mentions, progress=True,
                        rule_metric=args.rule_metric, surface_diff=not args.no_surface_diff,
                        term_classifier=not args.no_term_classifier, bag=args.bag, seed=args.seed,
                        **_ranker_options(args))
    test = load_labelled(args.test, eng.vocabulary)
    if test.missing:
        print(f"note: {len(test.missing)} gold names of {args.test} are not in the vocabulary "
              f"(first: row {test.missing[0][0]} {test.missing[0][1]!r}); those mentions cannot be fully right")
    mentions = test.mentions[: args.limit] if args.limit else test.mentions
    report = evaluate_engine(eng, mentions, stage=args.stage, k=args.k, progress=True)
    report["setup_seconds"] = round(time.perf_counter() - t0 - report["seconds"], 2)
    report.update(vocab=args.vocab or "demo", train=args.train, test=args.test, stage=args.stage,
                  model_version=eng.model_version, missing_gold_names=len(test.missing),
                  model=eng.meta)
    errors = report.pop("errors", None)
    keys = ["n", "accuracy", "micro_precision", "micro_recall", "micro_f1", "recall_at_1", "recall_at_10",
            "recall_at_20", "candidate_recall", "pair_recall", "mean_candidates", "ndcg_at_5", "count_accuracy",
            "mentions_per_second"]
    width = max(len(k) for k in keys)
    for k in keys:
        if k in report and report[k] is not None:
            v = report[k]
            print(f"{k:<{width}}  {v:.4f}" if isinstance(v, float) else f"{k:<{width}}  {v}")
    if eng.history:
        print("accuracy by how many coded mentions carry the rarest gold term (all gold among the candidates): "
              + ", ".join(f"{name} {b['accuracy']:.3f} ({b['candidate_recall']:.3f}, n={b['n']})"
                          for name, b in report["by_familiarity"].items() if b["n"]))
    if args.report:
        Path(args.report).parent.mkdir(parents=True, exist_ok=True)
        out = dict(report)
        if errors is not None and args.errors:
            out["errors"] = errors
        Path(args.report).write_text(json.dumps(out, ensure_ascii=False, indent=1), encoding="utf-8")
        print(f"report written to {args.report}")
    return 0


def cmd_train(args) -> int:
    if args.what == "lexical":
        from termnorm.loaders import load_labelled

        lp = argparse.ArgumentParser(prog="termnorm train lexical",
                                     description="fit the lexical GBM ranker + count classifier and save the pipeline")
        _add_data_args(lp, need_train=True)
        lp.add_argument("--out", default="models/lexical")
        lp.add_argument("--export-ranker", help="also write the vocabulary-independent ranker alone here "
                                                "(used by the demo: assets/models/*_ranker.joblib)")
        lp.add_argument("--cold-start", action="store_true",
                        help="fit without history recall features (a ranker for a vocabulary with no coded mentions); "
                             "the demo's rankers add --no-context-features: list-context features depend on the "
                             "vocabulary's candidate lists and cost 7 points on the demo diagnoses (README)")
        lp.add_argument("--history-mix", action="store_true",
                        help="with --cold-start: fit with history features, each K-fold part seeing a different share "
                             "of the others as its coded history (none to all), so the shipped ranker weighs a "
                             "team's first decisions (benchmarks/cold_history.py); no term classifier")
        args = lp.parse_args(args.rest)
        if args.history_mix and not args.cold_start:
            lp.error("--history-mix is a way of fitting a --cold-start ranker: add --cold-start")
        with_history, folds = not args.cold_start, 4
        if args.history_mix:
            from termnorm.fitting import HISTORY_MIX

            with_history, folds, args.no_term_classifier = HISTORY_MIX, len(HISTORY_MIX), True
        if args.cold_start:
            history_path, args.train = args.train, None  # the engine gets no history at all
            eng = build_engine(args)
            args.train = history_path
        else:
            eng = build_engine(args)
        eng.meta["trained_on"] = str(args.train)
        eng.fit_lexical(load_labelled(args.train, eng.vocabulary).mentions, folds=folds, progress=True,
                        with_history=with_history, rule_metric=args.rule_metric,
                        surface_diff=not args.no_surface_diff, term_classifier=not args.no_term_classifier,
                        bag=args.bag, seed=args.seed, **_ranker_options(args))
        path = eng.save(args.out)
        print(f"saved lexical pipeline to {path}")
        if args.export_ranker:
            print(f"exported the ranker alone to {eng.export_ranker(args.export_ranker)}")
        return 0
    if args.what == "retrain":
        from db.retrain import main as retrain_main

        return retrain_main(args.rest) or 0
    if args.what == "recall":
        from termnorm.dense.train import main as dense_main

        return dense_main(args.rest) or 0
    if args.what == "rank":
        from termnorm.rank.train import main as rank_main

        return rank_main(args.rest) or 0
    return 2


def cmd_encoder(args) -> int:
    from termnorm.encoder.build import cli_build

    if not args.rest or args.rest[0] != "build":
        print("usage: termnorm encoder build [--cache DIR] [--add-chars-from FILE...] [--prune-to FILE...] "
              "[--out DIR] [--verify] (see termnorm encoder build --help)", file=sys.stderr)
        return 2
    return cli_build(args.rest[1:]) or 0


def cmd_settings(args) -> int:
    from termnorm import settings

    try:
        print(settings.table() if args.table else settings.describe())
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


def cmd_app(args) -> int:
    import os

    from termnorm.demo import app_root

    root = app_root()
    env = dict(os.environ)
    if args.db:
        env["TERMNORM_DB_URL"] = args.db
    argv = [sys.executable, "-m", "streamlit", "run", str(root / "app.py"), "--server.headless", "true",
            "--server.port", str(args.port), *_streamlit_flags(root),
            *(["--server.address", args.address] if args.address else [])]
    # the server replaces this process (not a child of it): a service manager's SIGTERM reaches Streamlit itself,
    # where a child would be left running
    os.execve(sys.executable, argv, env)
    return 0  # not reached


def _streamlit_flags(root: Path) -> list[str]:
    """The app's .streamlit/config.toml as command-line flags: Streamlit reads that file from the working
    directory only, and ``termnorm app`` may be started anywhere (or from an installed package)."""
    import tomllib

    path = root / ".streamlit" / "config.toml"
    if not path.is_file():
        return []
    with open(path, "rb") as f:
        conf = tomllib.load(f)
    return [x for section, opts in conf.items() for key, value in opts.items()
            for x in (f"--{section}.{key}", str(value).lower() if isinstance(value, bool) else str(value))]


def cmd_load_data(args) -> int:
    """Load the folder; then fit each vocabulary that received labelled mentions in the background (the
    retraining job, gated against the shipped model) unless ``--no-fit``; ``--wait`` follows the jobs."""
    from db import learning, services
    from db.loader import load

    res = load(args.folder, db_url=args.db, limit=args.limit)
    if res.code or not res.labelled:
        return res.code
    names = {vid: name for name, vid in res.vocabularies.items()}
    if args.no_fit:
        print("--no-fit: no model fitted; retrain each vocabulary on the Training page when ready")
        return 0
    url = services.database_url(args.db)
    jobs = {}
    for vid in res.labelled:
        job = learning.start_first_fit_if_needed(url, vid, by="import")
        print(f"{names[vid]}: " + (f"fitting the full pipeline in the background (job {job}); the Training page "
                                   "shows its progress" if job else "no fit started (a version is already "
                                   "fitted, too few labelled training mentions, or a retraining job is running)"))
        if job:
            jobs[job] = names[vid]
    if args.wait:
        for job, name in jobs.items():
            _wait_for_job(job, name)
    return 0


def _wait_for_job(job_id: str, name: str) -> dict:
    """Follow a background job with a line per progress message; print the gate's verdict."""
    from termnorm.jobs import FINAL, JobRunner

    runner, last = JobRunner(), None
    while True:
        st = runner.status(job_id) or {}
        line = f"  [{float(st.get('progress') or 0):5.1%}] {st.get('message', '')}"
        if line != last:
            print(f"{name}:{line}", flush=True)
            last = line
        if st.get("state") in FINAL:
            break
        time.sleep(2.0)
    m = st.get("metrics") or {}
    if st.get("state") != "done":
        print(f"{name}: job {st.get('state')}: {st.get('error') or ''} (log: {runner.folder(job_id) / 'job.log'})")
    elif "gate" in m:
        print(f"{name}: {m['version']} {'promoted' if m['promoted'] else 'not promoted'}: {m['gate'].get('reason', '')}")
    return st


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="termnorm", description=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)

    p = sub.add_parser("normalize", help="rank standard terms for mentions")
    p.add_argument("text", nargs="*")
    p.add_argument("--k", type=int, default=None, help="candidates per mention (default 10; 5 in a batch file)")
    p.add_argument("--json", action="store_true")
    p.add_argument("--document", metavar="FILE", help="the note the mentions come from (UTF-8 text; '-' for standard "
                   "input): the abbreviations it defines are read, 阵发性心房颤动（PAF） makes PAF 阵发性心房颤动")
    b = p.add_argument_group("batch pre-coding of a file (streamed, distinct strings coded once, resumable)")
    b.add_argument("--input", help="mentions to pre-code: .csv .tsv .txt .jsonl .xlsx .parquet (the column named "
                                   "'mention', else --column, else the first)")
    b.add_argument("--output", help="where to write every row with its result (.csv .tsv .jsonl .xlsx .parquet); "
                                    "OUTPUT.work/ keeps the coded strings so a re-run continues")
    b.add_argument("--column", help="the mention column's name (its number with --no-header)")
    b.add_argument("--keep", type=lambda s: [c.strip() for c in s.split(",") if c.strip()],
                   help="input columns copied to the output, comma-separated (e.g. record_id,visit_date)")
    b.add_argument("--document-column", metavar="NAME",
                   help="the column (field) holding each row's note: mentions are coded as read in it (the "
                        "abbreviations it defines spelled out); rows whose notes read a mention alike share a coding")
    b.add_argument("--no-header", action="store_true", help="a CSV / TSV / XLSX input has no header row")
    b.add_argument("--batch-size", type=_positive_int, default=256, help="mentions per engine call (default 256)")
    b.add_argument("--restart", action="store_true", help="forget what OUTPUT.work/ holds and code everything again")
    b.add_argument("--quiet", action="store_true", help="no progress bars")
    b.add_argument("--ray", nargs="?", const="local", metavar="ADDRESS",
                   help="code on Ray Data engine actors: a local Ray instance, or the cluster at ADDRESS "
                        "(ray://host:10001 or auto)")
    b.add_argument("--actors", type=_positive_int, default=2, help="engine actors with --ray (default 2)")
    b.add_argument("--num-cpus", type=float, default=1.0, help="CPUs per engine actor (default 1)")
    b.add_argument("--num-gpus", type=float, default=0.0, help="GPUs per engine actor (default 0)")
    _add_data_args(p)
    p.set_defaults(func=cmd_normalize)

    p = sub.add_parser("evaluate", help="evaluate recall or the full pipeline on a labelled file")
    _add_data_args(p)
    p.add_argument("--test", required=True)
    p.add_argument("--stage", choices=["recall", "full"], default="recall")
    p.add_argument("--report", help="write the metrics as JSON here")
    p.add_argument("--errors", action="store_true", help="include the per-mention error table in the JSON")
    p.add_argument("--k", type=int, default=20, help="candidates shown per mention (recall@k)")
    p.add_argument("--limit", type=int, help="only the first N test mentions")
    p.set_defaults(func=cmd_evaluate)

    p = sub.add_parser("train", help="train a pipeline part: lexical | recall | rank | retrain (from the app's decisions)")
    p.add_argument("what", choices=["lexical", "recall", "rank", "retrain"])
    p.add_argument("rest", nargs=argparse.REMAINDER, help="the options of the part (see termnorm train PART --help)")
    p.set_defaults(func=cmd_train)

    p = sub.add_parser("encoder", help="build the offline encoder: termnorm encoder build [--cache DIR]")
    p.add_argument("rest", nargs=argparse.REMAINDER)
    p.set_defaults(func=cmd_encoder)

    p = sub.add_parser("app", help="start the coding app")
    p.add_argument("--db", help="SQLAlchemy URL (default: $TERMNORM_DB_URL, else termnorm.sqlite3 in the data directory: termnorm settings)")
    p.add_argument("--port", type=int, default=8501)
    p.add_argument("--address", help="address to listen on (e.g. 127.0.0.1 behind the hospital's TLS proxy; "
                                     "default: every interface)")
    p.set_defaults(func=cmd_app)

    p = sub.add_parser("load-data", help="load real vocabularies and mention sets from a folder such as ../shared/data")
    p.add_argument("folder")
    p.add_argument("--db")
    p.add_argument("--limit", type=int, help="mentions per set")
    p.add_argument("--no-fit", action="store_true",
                   help="do not fit the full pipeline in the background after loading labelled mentions")
    p.add_argument("--wait", action="store_true", help="wait for the background fits, printing their progress")
    p.set_defaults(func=cmd_load_data)

    from termnorm.cli_admin import add_create_admin_arguments, add_server_commands, cmd_create_admin

    p = sub.add_parser("settings", help="the settings in force (environment, termnorm.toml) and the table of all")
    p.add_argument("--table", action="store_true", help="print every setting as a Markdown table")
    p.set_defaults(func=cmd_settings)
    p = sub.add_parser("create-admin", help="create the first admin of the review app")
    add_create_admin_arguments(p)
    p.set_defaults(func=cmd_create_admin)
    add_server_commands(sub)

    args = ap.parse_args(argv)
    try:
        return args.func(args)
    except Exception as e:  # a clear message instead of a traceback for data errors
        from termnorm.errors import DataFormatError

        if isinstance(e, (DataFormatError, FileNotFoundError)):
            print(f"error: {e}", file=sys.stderr)
            return 2
        raise


if __name__ == "__main__":
    sys.exit(main())
