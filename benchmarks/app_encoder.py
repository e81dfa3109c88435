"""The vocabulary's encoder in the app, end to end on NCBI disease: what a lead's two fits give on the held-out file.

A fresh data directory (a temporary one unless ``--data-dir``) gets NCBI disease as ``termnorm load-data`` loads it
(MEDIC, the train file as coded decisions, the dev file held out); the app's retraining (db.retrain, as the
Training page runs it) fits v1 without an encoder; the lead sets the vocabulary's encoder (pipeline setting
``dense``, db.learning); the next retraining fits v2 with it, and the gate measures v2 against v1 on the same
held-out mentions with the sign test. Both versions' figures, the gate's words and the seconds of each step go to
``benchmarks/results/app_encoder_ncbi.json``.

    python3 benchmarks/app_encoder.py --encoder runs/ncbi_top2/model     # about 10 minutes on 2 cores

The encoder is one trained on MEDIC's names and synonyms alone (``termnorm train recall --data vocab``,
docs/benchmarks.md), or the Training page's own job. The held-out mentions are the dev file's distinct texts, as
the app measures them (a text is measured once).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._results import write_json  # noqa: E402

VOCABULARY = "MEDIC 2012-07-06 (NCBI disease)"


def fit(vid: int, label: str) -> dict:
    from db import retrain
    from termnorm.registry import Gate

    t0 = time.perf_counter()
    res = retrain.retrain(vid, gate=Gate(), progress=lambda f, m: print(f"  {label} [{f:5.1%}] {m}", flush=True))
    print(f"{label}: {res.version} accuracy {res.metrics['accuracy']:.4f} on {res.metrics['n']}; {res.gate['reason']}")
    return {"version": res.version, "promoted": res.promoted, "metrics": res.metrics, "baseline": res.baseline,
            "gate": res.gate, "neural": res.counts.get("neural"), "seconds": res.seconds,
            "wall_s": round(time.perf_counter() - t0, 1)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--encoder", required=True, help="a bi-encoder folder (termnorm train recall --out DIR)")
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data"), help="the folder holding ncbi-disease/")
    ap.add_argument("--data-dir", help="the app's data directory (default: a temporary one, removed after)")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "app_encoder_ncbi.json"))
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = Path(args.data_dir or tmp)
        only = data_dir / "sets"  # load-data reads every set of its folder: give it NCBI disease alone
        only.mkdir(parents=True, exist_ok=True)
        if not (only / "ncbi-disease").exists():
            (only / "ncbi-disease").symlink_to(Path(args.data).resolve() / "ncbi-disease")
        os.environ.update(TERMNORM_DATA_DIR=str(data_dir), TERMNORM_JOBS=str(data_dir / "jobs"))
        os.environ.pop("TERMNORM_DB_URL", None)
        os.environ.pop("TERMNORM_MODELS", None)
        from db import learning, loader, services

        t0 = time.perf_counter()
        loader.load(only, progress=False)
        load_s = round(time.perf_counter() - t0, 1)
        with services.session_scope(None) as s:
            vid = services.vocabulary_id(s, VOCABULARY)
            services.ensure_user(s, "lead", role="lead")
        without = fit(vid, "without an encoder")
        with services.session_scope(None) as s:
            learning.set_pipeline_settings(s, vid, {"dense": args.encoder}, "lead")
            encoder = learning.pipeline_settings(s, vid)["dense"]
        with_enc = fit(vid, "with the encoder")
    g = with_enc["gate"]
    print(f"with against without, on the same {g['gold_n']} held-out mentions: right only with {g['only_candidate']}, "
          f"only without {g['only_current']}, sign test p = {g['sign_p']:.4f}")
    write_json(args.out, {"command": "python3 benchmarks/" + " ".join([Path(__file__).name, *(argv or sys.argv[1:])]),
                          "encoder": encoder, "load_seconds": load_s, "without": without, "with": with_enc})
    return 0


if __name__ == "__main__":
    sys.exit(main())
