"""A vocabulary's own bi-encoder, trained in the background from the Training page (issue 26, item 2: day one).

The job writes the vocabulary as the database holds it (terms, codes and synonyms, coders' synonyms included) to
``vocabulary.csv`` in the encoder's folder, one synonym a row, and trains on it with ``termnorm train recall --data
vocab`` (termnorm.dense.train.main) with the recipe docs/benchmarks.md measured on MEDIC: e5-small's top 2 layers,
32,000 synonym pairs, at most 30 minutes on 2 CPU cores, no coded mention needed. The folder is
``encoders/<vocabulary id>-<time>`` in the data directory; when the job is done, the vocabulary's pipeline setting
``dense`` names it (db.learning), so the next fit uses it (db.retrain.encoder_choice).

Written around main rather than calling its parts: the job is the command a data team would run, with the database
as the vocabulary file, so the folder and its ``config.json`` (data, sha256, recipe) are the same either way. A
synonym holding ``|`` or ``;`` is read back as its parts, since the CSV loader splits cells on them (101 of MEDIC's
64,322 synonyms).
"""

from __future__ import annotations

import csv
import shutil
import threading
import time
from pathlib import Path

from db import accounts, auth, learning, services

JOB_TARGET = "db.encoder_jobs:train_job"
KIND = "encoder"
#: The recipe of docs/benchmarks.md ("Keeping a fine-tuned encoder small, and training it on day one").
RECIPE = ("--objective", "nce", "--data", "vocab", "--epochs", "1", "--no-count-head", "--train-top", "2",
          "--max-queries", "32000")
MAX_SECONDS = 1800.0


def n_synonyms(url: str | None, vocabulary_id: int) -> int:
    """The synonyms of the edition in force, coders' included: what the encoder learns from."""
    from sqlalchemy import func, select

    from db.models import Synonym, Term
    from db.vocabularies import ACTIVE

    with services.session_scope(url) as s:
        return int(s.scalar(select(func.count()).select_from(Synonym).join(Term, Synonym.term_id == Term.id)
                            .where(Term.vocabulary_id == int(vocabulary_id), ACTIVE)) or 0)


#: the loader splits a synonyms cell on these (termnorm.loaders: several in one cell); inside one synonym (101 of
#: MEDIC's 64,322 hold one) they are written as the nearest punctuation it keeps whole
_KEPT_WHOLE = str.maketrans({"|": "/", "｜": "／", ";": ",", "；": "，"})


def write_vocabulary_csv(vocabulary, path: Path) -> int:
    """``code,name,synonyms``, a row per (term, code) and per synonym (rows of one name merge on loading);
    returns the rows written."""
    rows = 0
    with open(path, "w", encoding="utf-8", newline="") as f:
        w = csv.writer(f)
        w.writerow(["code", "name", "synonyms"])
        for name in vocabulary.names:
            codes = vocabulary.codes.get(name) or [""]
            for code in codes:
                w.writerow([code, name, ""])
            for syn in vocabulary.synonyms.get(name, []):
                w.writerow([codes[0], name, syn.translate(_KEPT_WHOLE)])
            rows += len(codes) + len(vocabulary.synonyms.get(name, []))
    return rows


def start_encoder_job(url: str | None, vocabulary_id: int, by: str, *, encoder: str = "e5-small",
                      max_seconds: float = MAX_SECONDS, extra: tuple[str, ...] = (), runner=None) -> str:
    """Start the job (one per vocabulary at a time: JobBusy otherwise); only a lead may, as for the setting it
    changes. ``encoder``: ``e5-small`` (built by ``termnorm encoder build``) or a model folder; ``extra``: more
    arguments of ``termnorm train recall``."""
    from termnorm import settings
    from termnorm.jobs import JobRunner, lock_key

    out = settings.get().data_dir / "encoders" / f"{int(vocabulary_id)}-{time.strftime('%Y%m%d-%H%M%S')}"
    params = {"url": url, "vocabulary_id": int(vocabulary_id), "by": by, "encoder": encoder, "out": str(out),
              "max_seconds": float(max_seconds), "extra": list(extra)}
    with services.session_scope(url) as s:
        user = auth.require(s, by, "lead")
        name = next((v["name"] for v in services.vocabularies(s) if v["id"] == int(vocabulary_id)), vocabulary_id)
        job = (runner or JobRunner()).start(JOB_TARGET, params, title=f"encoder · {name}",
                                            lock=lock_key(KIND, vocabulary_id),
                                            tags={"kind": KIND, "vocabulary_id": int(vocabulary_id)})
        accounts.audit(s, user, "train_encoder", "vocabulary", int(vocabulary_id),
                       {"job": job, "folder": str(out / "run"), "encoder": encoder})
        s.commit()
    return job


def train_job(params: dict, ctx) -> dict:
    """termnorm.jobs target. Progress is the time spent against the budget: main reports its steps to the log."""
    from termnorm.jobs import detect_device

    ctx.set_device(detect_device())
    url, vid, budget = params.get("url"), int(params["vocabulary_id"]), float(params["max_seconds"])
    out = Path(params["out"])
    out.mkdir(parents=True, exist_ok=True)
    metrics = None
    try:
        metrics = _train_into(out, params, ctx, url, vid, budget)
    finally:
        if metrics is None:  # failed or cancelled: its folder (the vocabulary file, a half-trained model) serves none
            shutil.rmtree(out, ignore_errors=True)
    return metrics


def _train_into(out: Path, params: dict, ctx, url, vid: int, budget: float) -> dict:
    from termnorm.dense.train import main

    with services.session_scope(url) as s:
        vocab = services.vocabulary_from_db(s, vid)
    rows = write_vocabulary_csv(vocab, out / "vocabulary.csv")
    ctx.log(f"{len(vocab):,} terms, {sum(len(v) for v in vocab.synonyms.values()):,} synonyms: {rows:,} rows")
    done, t0 = threading.Event(), time.perf_counter()

    def tick() -> None:  # the bar only: ctx.progress would also log a line every 5 s
        while not done.wait(5.0):
            spent = time.perf_counter() - t0
            ctx.runner.update(ctx.job_id, progress=min(0.95, spent / budget),
                              message=f"training: {spent / 60:.0f} of at most {budget / 60:.0f} min")

    threading.Thread(target=tick, daemon=True).start()
    try:
        rc = main(["--vocab", str(out / "vocabulary.csv"), "--encoder", str(params["encoder"]), *RECIPE,
                   "--max-seconds", str(budget), "--no-progress", "--out", str(out / "run"), *params["extra"]])
    finally:
        done.set()
    if rc != 0:
        raise RuntimeError(f"termnorm train recall stopped with status {rc}: see the log")
    with services.session_scope(url) as s:
        learning.set_pipeline_settings(s, vid, {"dense": str(out / "run")}, str(params["by"]))
    ctx.log(f"the next fit uses {out / 'run'}")
    return {"encoder": str(out / "run"), "seconds": round(time.perf_counter() - t0, 1), "rows": rows}
