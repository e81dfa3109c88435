"""Learning curve of the coding loop on Yidu-N7K: accuracy vs coder decisions, uncertainty vs random order.

Simulated coders answer with the gold labels through the same code path as the
app: suggestions stored with ``db.services.store_suggestions``, each answer
recorded with ``db.services.record_decision`` on a real (temporary) SQLite
database (accept when the engine's set is right, else correct with the gold
set), then taught to the engine with ``Engine.add_coded_mention`` (the app's
``_ui.decide``); after each round the model is retrained from the database with
``db.retrain.retrain`` (registered, gated) and measured on Yidu val.

* start: a lexical pipeline fitted on ``--base`` (500) train mentions;
* rounds: ``--rounds`` x ``--per-round`` (5 x 200) decisions on the remaining
  train mentions, picked by ``termnorm.active`` uncertainty or at random;
* the registry's gate uses ``--gate-gold`` (300) further train mentions kept
  out of the pool; accuracy is exact-set accuracy on ``--val`` Yidu val mentions;
* the instant effect: share of corrected mentions whose next query (no
  retraining) returns exactly the corrected terms -- the contract says 100%.

Writes ``benchmarks/results/learning_curve.json`` and ``learning_curve.html``
(plotly; ``.png`` too when kaleido is installed). ``--cold-start`` measures the
loop from zero instead (:func:`run_cold`): the full vocabulary, no coded history,
the shipped cold-start model, the app's own retraining and gate after 100 / 300
/ 1,000 / 2,000 decisions, on Yidu-N7K and CHIP-CDN, uncertainty vs random
order -> ``learning_curve_cold.json``. Run with ``nice``:

    nice python3 benchmarks/learning_curve.py            # ~15 min on 2 shared cores
    nice python3 benchmarks/learning_curve.py --base 200 --rounds 2 --per-round 50 --val 200   # smoke
    nice python3 benchmarks/learning_curve.py --cold-start                 # from zero, both sets (hours)
    nice python3 benchmarks/learning_curve.py --cold-start --sets yidu --orders random --checkpoints 100 --val 200
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks._results import write_json  # noqa: E402
DATA = REPO / ".." / "shared" / "data"
RESULTS = REPO / "benchmarks" / "results"


def load_yidu(data: Path):
    from termnorm.loaders import load_labelled, load_vocabulary

    vocab = load_vocabulary(data / "yidu-n7k" / "code.txt")
    train = load_labelled(data / "yidu-n7k" / "train.xlsx", vocab).mentions
    val = load_labelled(data / "yidu-n7k" / "val.xlsx", vocab).mentions
    return vocab, train, val


def accuracy(engine, mentions) -> float:
    sugs = engine.suggest_batch([m.text for m in mentions])
    return float(np.mean([set(s.chosen) == set(m.terms) for s, m in zip(sugs, mentions)]))


def decide_as_coders(url: str, engine, picked, picked_sugs, gold_of, text_of, instant: bool = False):
    """The simulated coders, through the app's code path: store what they are shown, accept when the engine's set
    is the gold one, else correct with it, and teach the engine at once (as app_pages/_ui.decide does). With
    ``instant``, also ask the engine again for each corrected mention (no retraining) and count how many now
    get their corrected terms. Returns (corrections, corrected mentions re-asked, of those right)."""
    from db import services as S

    n_corr = n_inst = n_inst_ok = 0
    with S.session_scope(url) as s:
        S.store_suggestions(s, picked, picked_sugs)
        for mid, sug in zip(picked, picked_sugs):
            gold = gold_of[mid]
            right = set(sug.chosen) == set(gold)
            if right:
                S.record_decision(s, mid, "coder", "accept")
            else:
                S.record_decision(s, mid, "coder", "correct", gold)
                n_corr += 1
            engine.add_coded_mention(text_of[mid], gold)
            if instant and not right:  # instant effect: the very next query, no retraining
                n_inst += 1
                n_inst_ok += set(engine.suggest(text_of[mid]).chosen) == set(gold)
    return n_corr, n_inst, n_inst_ok


def run_order(order: str, args, vocab, base_folder: Path, pool, gate_gold, val, log) -> dict:
    """One simulated coding campaign (fresh database, registry and engine) with one ordering."""
    from db import services as S
    from termnorm import active
    from termnorm.engine import Engine
    from termnorm.registry import Gate, Registry
    from db.retrain import retrain
    from termnorm.refit import evaluate_on_gold

    work = Path(tempfile.mkdtemp(prefix=f"lc-{order}-"))
    url = f"sqlite:///{work / 'db.sqlite3'}"
    rng = np.random.default_rng(args.seed)
    try:
        S.init_db(url)
        with S.session_scope(url) as s:
            vid = S.load_vocabulary(s, vocab, "yidu-n7k")
            # mention texts only: the answers stay with the simulated coders (and out of the gold lookup)
            bid = S.create_batch(s, "pool", vid, [m.text for m in pool])
            rows = S.mentions(s, bid)
        gold_of = {r["id"]: m.terms for r, m in zip(rows, pool)}
        text_of = {r["id"]: r["text"] for r in rows}

        t = time.perf_counter()
        engine = Engine.load(base_folder)
        reg = Registry.for_vocabulary("yidu-n7k", work / "registry")
        m, p = evaluate_on_gold(engine, gate_gold)
        v1 = reg.register(engine, m, train={"max_pair_id": 0}, gold_predictions=p)
        reg.promote(v1)
        acc0 = accuracy(engine, val)
        log(f"[{order}] round 0: val accuracy {acc0:.4f} ({time.perf_counter() - t:.0f} s)")
        curve = [{"round": 0, "decisions": 0, "corrections": 0, "val_accuracy": acc0, "candidate_val_accuracy": acc0,
                  "version": v1, "promoted": True}]
        open_ids = [r["id"] for r in rows]
        decisions = corrections = 0
        instant_ok = instant_n = 0
        retrain_secs, rounds_info = [], []
        for rnd in range(1, args.rounds + 1):
            t_round = time.perf_counter()
            # ---- pick the round's mentions
            if order == "uncertainty":
                cand_ids = open_ids
                if args.pool_sample and len(cand_ids) > args.pool_sample:
                    cand_ids = sorted(rng.choice(cand_ids, size=args.pool_sample, replace=False).tolist())
                sugs = engine.suggest_batch([text_of[i] for i in cand_ids])
                idx = active.order_by_uncertainty(sugs)[: args.per_round]
                picked, picked_sugs = [cand_ids[i] for i in idx], [sugs[i] for i in idx]
            else:
                picked = sorted(rng.choice(open_ids, size=min(args.per_round, len(open_ids)), replace=False).tolist())
                picked_sugs = engine.suggest_batch([text_of[i] for i in picked])
            t_pick = time.perf_counter() - t_round
            n_corr, n_inst, n_inst_ok = decide_as_coders(url, engine, picked, picked_sugs, gold_of, text_of,
                                                         instant=True)
            picked_set = set(picked)
            open_ids = [i for i in open_ids if i not in picked_set]
            decisions += len(picked)
            corrections += n_corr
            instant_ok += n_inst_ok
            instant_n += n_inst
            # ---- retrain from the database, gate, measure
            res = retrain(vid, url=url, registry=reg, gold=gate_gold, gate=Gate(margin=args.margin), current=engine,
                          neural=False, seed=args.seed)
            retrain_secs.append(res.seconds["total"])
            cand_acc = accuracy(res.engine, val)
            if res.promoted:
                engine = res.engine
            val_acc = cand_acc if res.promoted else curve[-1]["val_accuracy"]
            # the corrected mentions after retraining (history of the new model)
            info = {"round": rnd, "decisions": decisions, "corrections": corrections, "val_accuracy": val_acc,
                    "candidate_val_accuracy": cand_acc, "version": res.version, "promoted": res.promoted,
                    "gate": res.gate, "gate_gold_accuracy": res.metrics.get("accuracy"),
                    "retrain_seconds": res.seconds, "pick_seconds": round(t_pick, 1),
                    "round_corrections": n_corr, "instant_ok": n_inst_ok, "instant_n": n_inst,
                    "counts": {k: v for k, v in res.counts.items() if not isinstance(v, dict)}}
            curve.append(info)
            rounds_info.append(info)
            log(f"[{order}] round {rnd}: {decisions} decisions ({corrections} corrections); instant "
                f"{n_inst_ok}/{n_inst}; retrain {res.seconds['total']:.0f} s; {res.version} "
                f"{'promoted' if res.promoted else 'rejected'} (gate {res.gate['candidate']:.4f} vs "
                f"{res.gate['current'] if res.gate['current'] is not None else float('nan'):.4f}); "
                f"val {cand_acc:.4f}; round {time.perf_counter() - t_round:.0f} s")
        return {"order": order, "curve": curve, "instant_ok": instant_ok, "instant_n": instant_n,
                "instant_share": instant_ok / instant_n if instant_n else None,
                "retrain_seconds_mean": float(np.mean(retrain_secs)) if retrain_secs else None,
                "retrain_seconds": retrain_secs}
    finally:
        S.dispose(url)
        shutil.rmtree(work, ignore_errors=True)


def decisions_to_reach(curve: list[dict], target: float, key: str = "val_accuracy") -> float | None:
    """Decisions needed to reach ``target`` val accuracy (linear interpolation between rounds)."""
    xs = [c["decisions"] for c in curve]
    ys = [c[key] for c in curve]
    if ys[0] >= target:
        return 0.0
    for (x0, y0), (x1, y1) in zip(zip(xs, ys), zip(xs[1:], ys[1:])):
        if y1 >= target > y0:
            return x0 + (target - y0) / (y1 - y0) * (x1 - x0)
    return None


def summarize(runs: list[dict]) -> dict:
    """Gain after 1,000 decisions per order, and the decisions the uncertainty order needs for random's gain.

    Two curves per order: ``val_accuracy`` of the model in use (the gate may keep the previous one) and
    ``candidate_val_accuracy`` of every retrained model (as if the gate always promoted).
    """
    by = {r["order"]: r for r in runs}
    summary: dict = {}
    for r in runs:
        c = r["curve"]
        at = next((p for p in c if p["decisions"] >= 1000), None)
        summary[r["order"]] = {
            "start_accuracy": c[0]["val_accuracy"], "final_accuracy": c[-1]["val_accuracy"],
            "final_candidate_accuracy": c[-1]["candidate_val_accuracy"],
            "decisions": c[-1]["decisions"], "corrections": c[-1]["corrections"],
            "gain_at_1000_decisions": None if at is None else at["val_accuracy"] - c[0]["val_accuracy"],
            "candidate_gain_at_1000_decisions": None if at is None else
            at["candidate_val_accuracy"] - c[0]["candidate_val_accuracy"],
            "rejected_by_gate": [p["version"] for p in c if not p["promoted"]],
            "instant_effect": r["instant_share"], "instant_n": r["instant_n"],
            "retrain_seconds_mean": r["retrain_seconds_mean"]}
    if "uncertainty" in by and "random" in by:
        for key, name in (("val_accuracy", "same_gain"), ("candidate_val_accuracy", "same_gain_candidates")):
            rc, uc = by["random"]["curve"], by["uncertainty"]["curve"]
            target = rc[-1][key]
            need = decisions_to_reach(uc, target, key)
            summary[name] = {
                "curve": key, "target_accuracy": target, "random_decisions": rc[-1]["decisions"],
                "uncertainty_decisions": need,
                "ratio_uncertainty_to_random": need / rc[-1]["decisions"] if need is not None else None,
                "note": "decisions the uncertainty order needs to reach the accuracy the random order reached "
                        "at the end (linear interpolation between rounds); < 1 = fewer decisions needed"}
    return summary


def plot(result: dict, out: Path) -> list[str]:
    import plotly.graph_objects as go

    fig = go.Figure()
    for run in result["runs"]:
        c = run["curve"]
        fig.add_trace(go.Scatter(x=[p["decisions"] for p in c], y=[p["val_accuracy"] for p in c],
                                 mode="lines+markers", name=f"{run['order']} order (current model)"))
        fig.add_trace(go.Scatter(x=[p["decisions"] for p in c], y=[p["candidate_val_accuracy"] for p in c],
                                 mode="markers", marker_symbol="x", name=f"{run['order']}: retrained candidate",
                                 showlegend=True, opacity=0.6))
    fig.update_layout(title=f"Yidu-N7K val exact-set accuracy vs coder decisions "
                            f"(base {result['settings']['base']} mentions, retrained after each round)",
                      xaxis_title="coder decisions fed (accept / correct)", yaxis_title="val exact-set accuracy",
                      template="plotly_white")
    written = []
    html = out / "learning_curve.html"
    fig.write_html(str(html), include_plotlyjs="cdn")
    written.append(str(html))
    try:
        import kaleido  # noqa: F401

        png = out / "learning_curve.png"
        fig.write_image(str(png), width=900, height=500)
        written.append(str(png))
    except Exception:  # kaleido missing or no browser for it: HTML only
        pass
    return written


# ====================================================================================== cold start
#: (vocabulary file, pool = the coders' mentions, held-out file, the set's metric) per set of --cold-start
COLD_SETS = {
    "yidu": ("yidu-n7k/code.txt", "yidu-n7k/train.xlsx", "yidu-n7k/val.xlsx", "accuracy"),
    "cdn": ("chip-cdn/icd10_beijing_clinical_v601.xlsx", "chip-cdn/train.json", "chip-cdn/dev.json", "micro_f1"),
}
COLD_CHECKPOINTS = (100, 300, 1000, 2000)


def measure(engine, mentions) -> dict:
    """Exact-set accuracy and micro-F1 (the CHIP-CDN metric) of ``engine`` on labelled ``mentions``."""
    from termnorm.evaluate import evaluate_predictions

    sugs = engine.suggest_batch([m.text for m in mentions])
    m = evaluate_predictions([x.terms for x in mentions], [x.chosen for x in sugs],
                             [[c.term for c in x.candidates] for x in sugs])
    return {"accuracy": float(m["accuracy"]), "micro_f1": float(m["micro_f1"])}


def run_cold(set_name: str, order: str, args, data: Path, log) -> dict:
    """One coding campaign from zero through the app's code path.

    A fresh database holds the full vocabulary and the set's pipeline settings (what ``termnorm load-data``
    stores); no coded history. Half of the official held-out file is a labelled batch on the held-out side
    of the evaluation split (the gate's mentions); the other half is never in the database and measures
    each serving model (so the numbers reported are not the ones the gate chose on). Round 0 is the shipped
    cold-start model (db.serving.build_engine with nothing fitted). Simulated coders answer the pool's
    mentions with their gold terms (store the suggestion shown, accept when right, else correct; the engine
    learns at once), and at each checkpoint the app's retraining runs (db.retrain.retrain: gated
    against the serving model on the held-out side, promoted or refused); the model measured is then the
    one serving, rebuilt from the database as the pages build it.
    """
    from db import learning, serving
    from db import services as S
    from db.loader import PIPELINES
    from termnorm import active
    from termnorm.loaders import load_labelled, load_vocabulary
    from termnorm.registry import Registry
    from db.retrain import retrain

    vfile, pool_file, held_file, metric = COLD_SETS[set_name]
    vocab = load_vocabulary(data / vfile, name=f"{set_name}-cold")
    def codable(mentions):  # a coder can only pick terms of the vocabulary (CHIP-CDN's files name a few others)
        return [m for m in mentions if m.terms and all(t in vocab for t in m.terms)]

    pool = codable(load_labelled(data / pool_file, vocab).mentions)
    held = codable(load_labelled(data / held_file, vocab).mentions)
    rng = np.random.default_rng(args.seed)
    pool = [pool[i] for i in rng.permutation(len(pool))]
    held = [held[i] for i in rng.permutation(len(held))]
    gate_half, report = held[: len(held) // 2], held[len(held) // 2:][: args.val]
    work = Path(tempfile.mkdtemp(prefix=f"lc-cold-{set_name}-{order}-"))
    url = f"sqlite:///{work / 'db.sqlite3'}"
    try:
        S.init_db(url)
        with S.session_scope(url) as s:
            vid = S.load_vocabulary(s, vocab, vocab.name)
            S.ensure_user(s, "lead", role="lead")
            settings = dict(PIPELINES.get(vfile, {}), prior=not args.no_prior)
            if settings.pop("keywords", False):
                settings["keyword_dir"] = str((data / "keywords").resolve())
            learning.set_pipeline_settings(s, vid, settings, "lead")
            gbid = S.create_batch(s, "held out (gate)", vid, gate_half, username="lead")
            learning.assign_by_file(s, vid, {gbid: "eval"}, "lead")
            pbid = S.create_batch(s, "pool", vid, [m.text for m in pool], username="lead")  # answers stay with coders
            rows = S.mentions(s, pbid)
        gold_of = {r["id"]: m.terms for r, m in zip(rows, pool)}
        text_of = {r["id"]: r["text"] for r in rows}
        reg = Registry.for_vocabulary(vocab.name, work / "registry")

        t = time.perf_counter()
        engine = serving.build_engine(url, vid, None, root=reg.root)  # the shipped cold-start model
        m0 = measure(engine, report)
        log(f"[{set_name}/{order}] round 0 ({engine.model_version}): {metric} {m0[metric]:.4f} "
            f"({time.perf_counter() - t:.0f} s)")
        curve = [{"decisions": 0, "version": engine.model_version, "promoted": True, **m0,
                  "candidate": dict(m0)}]
        open_ids = [r["id"] for r in rows]
        done = 0
        for target in [c for c in args.checkpoints if c <= len(open_ids)]:
            t_round = time.perf_counter()
            need = target - done
            if order == "uncertainty":
                cand = open_ids if len(open_ids) <= args.pool_sample else \
                    sorted(rng.choice(open_ids, size=args.pool_sample, replace=False).tolist())
                sugs = engine.suggest_batch([text_of[i] for i in cand])
                idx = active.order_by_uncertainty(sugs)[:need]
                picked, picked_sugs = [cand[i] for i in idx], [sugs[i] for i in idx]
            else:
                picked = sorted(rng.choice(open_ids, size=need, replace=False).tolist())
                picked_sugs = engine.suggest_batch([text_of[i] for i in picked])
            corrections, _, _ = decide_as_coders(url, engine, picked, picked_sugs, gold_of, text_of)
            picked_set = set(picked)
            open_ids = [i for i in open_ids if i not in picked_set]
            done = target
            res = retrain(vid, url=url, registry=reg, neural=False, seed=args.seed, by="lead")
            cand = measure(res.engine, report)
            engine = serving.build_engine(url, vid, reg.current_version(), root=reg.root)  # what the pages serve
            now = measure(engine, report)
            g = res.gate
            curve.append({"decisions": done, "corrections": corrections, "version": reg.current_version()
                          or reg.shipped_name(), "promoted": res.promoted, **now, "candidate": cand,
                          "gate": {k: g.get(k) for k in ("reason", "candidate", "current", "current_version",
                                                         "gold_n", "only_candidate", "only_current", "sign_p")},
                          "retrain_seconds": res.seconds.get("total"),
                          "round_seconds": round(time.perf_counter() - t_round, 1)})
            log(f"[{set_name}/{order}] {done} decisions ({corrections} corrections this round): candidate "
                f"{metric} {cand[metric]:.4f}, {'promoted' if res.promoted else 'refused'} "
                f"(gate {g.get('candidate') or 0:.4f} vs {g.get('current') or 0:.4f} on {g.get('gold_n')}); serving "
                f"{now[metric]:.4f}; round {time.perf_counter() - t_round:.0f} s")
        return {"set": set_name, "order": order, "metric": metric, "n_report": len(report), "n_gate": len(gate_half),
                "curve": curve}
    finally:
        S.dispose(url)
        shutil.rmtree(work, ignore_errors=True)


def summarize_cold(runs: list[dict]) -> dict:
    """Per set and order: the gain after 1,000 decisions in the set's metric (target +10 points) and whether
    any promoted round measured below the model it replaced (on the report half, which the gate never saw)."""
    out = {}
    for r in runs:
        c, metric = r["curve"], r["metric"]
        at = next((p for p in c if p["decisions"] == 1000), None)
        worse = [p["decisions"] for prev, p in zip(c, c[1:]) if p["promoted"] and p[metric] < prev[metric] - 1e-9]
        out[f"{r['set']}/{r['order']}"] = {
            "metric": metric, "start": c[0][metric], "at_1000": None if at is None else at[metric],
            "gain_at_1000_points": None if at is None else round(100 * (at[metric] - c[0][metric]), 1),
            "meets_plus_10": None if at is None else at[metric] - c[0][metric] >= 0.10,
            "final": c[-1][metric], "decisions": c[-1]["decisions"],
            "promoted_rounds": [p["decisions"] for p in c[1:] if p["promoted"]],
            "refused_rounds": [p["decisions"] for p in c[1:] if not p["promoted"]],
            "promoted_below_replaced": worse}
    return out


def main_cold(args) -> int:
    from termnorm.refit import limited_threads

    data = Path(args.data)
    t0 = time.perf_counter()

    def log(msg: str) -> None:
        print(f"{time.perf_counter() - t0:7.1f}s  {msg}", flush=True)

    runs = []
    with limited_threads():
        for set_name in [x.strip() for x in args.sets.split(",") if x.strip()]:
            for order in [o.strip() for o in args.orders.split(",") if o.strip()]:
                runs.append(run_cold(set_name, order, args, data, log))
    result = {"settings": vars(args), "runs": runs, "summary": summarize_cold(runs),
              "seconds": round(time.perf_counter() - t0, 1)}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / ("learning_curve_cold_no_prior.json" if args.no_prior else "learning_curve_cold.json"), result)
    print(json.dumps(result["summary"], ensure_ascii=False, indent=1, default=float))
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=str(DATA))
    ap.add_argument("--base", type=int, default=500, help="train mentions of the starting pipeline")
    ap.add_argument("--gate-gold", type=int, default=300, help="train mentions kept out as the registry's gold")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--per-round", type=int, default=200)
    ap.add_argument("--val", type=int, default=1000, help="Yidu val mentions measured (default all 1,000)")
    ap.add_argument("--pool-sample", type=int, default=0,
                    help="score only this many random open mentions per round for uncertainty (0 = all)")
    ap.add_argument("--orders", default="uncertainty,random")
    ap.add_argument("--margin", type=float, default=0.0, help="gate margin")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(RESULTS))
    ap.add_argument("--cold-start", action="store_true",
                    help="from zero through the app's code path (run_cold): the full vocabulary, no coded history, "
                         "the shipped cold-start model, checkpoints --checkpoints, sets --sets; writes "
                         "learning_curve_cold.json")
    ap.add_argument("--sets", default="yidu,cdn", help="--cold-start: sets among " + ", ".join(COLD_SETS))
    ap.add_argument("--checkpoints", default=",".join(map(str, COLD_CHECKPOINTS)),
                    help="--cold-start: decisions after which the app retrains")
    ap.add_argument("--no-prior", action="store_true",
                    help="--cold-start: retrain without the cold-start ranker's score as an input (termnorm.rank.prior)")
    args = ap.parse_args(argv)
    if args.cold_start:
        args.checkpoints = [int(x) for x in str(args.checkpoints).split(",") if x.strip()]
        args.pool_sample = args.pool_sample or 3000
        return main_cold(args)

    data = Path(args.data)
    if not (data / "yidu-n7k" / "train.xlsx").exists():
        print(f"no Yidu-N7K data under {data}", file=sys.stderr)
        return 2
    from termnorm.engine import Engine
    from termnorm.refit import limited_threads

    t0 = time.perf_counter()

    def log(msg: str) -> None:
        print(f"{time.perf_counter() - t0:7.1f}s  {msg}", flush=True)

    with limited_threads():
        vocab, train, val = load_yidu(data)
        keywords = data / "keywords"
        rng = np.random.default_rng(args.seed)
        order = rng.permutation(len(train))
        train = [train[i] for i in order]
        base, gate_gold = train[: args.base], train[args.base: args.base + args.gate_gold]
        pool = train[args.base + args.gate_gold:]
        val = val[: args.val]
        tmp = Path(tempfile.mkdtemp(prefix="lc-base-"))
        try:
            t = time.perf_counter()
            eng = Engine(vocab, history=base, keyword_dir=keywords)
            eng.fit_lexical(base, seed=args.seed)
            eng.save(tmp / "base")
            base_fit = time.perf_counter() - t
            log(f"base pipeline on {len(base)} mentions fitted in {base_fit:.0f} s; pool {len(pool)}, "
                f"gate gold {len(gate_gold)}, val {len(val)}")
            runs = [run_order(o.strip(), args, vocab, tmp / "base", pool, gate_gold, val, log)
                    for o in args.orders.split(",") if o.strip()]
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    summary = summarize(runs)
    result = {"settings": vars(args), "base_fit_seconds": round(base_fit, 1), "runs": runs, "summary": summary,
              "seconds": round(time.perf_counter() - t0, 1)}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "learning_curve.json", result)
    files = plot(result, out)
    print(json.dumps(summary, ensure_ascii=False, indent=1, default=float))
    log(f"plot written to {', '.join(files)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
