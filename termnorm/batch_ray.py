"""The batch job's coding pass as a Ray Data pipeline (``termnorm normalize --input ... --ray [ADDRESS]``).

The distinct strings not coded yet go to Ray as an Arrow table; ``map_batches`` runs them through a pool of
engine actors (one engine loaded per actor, ``--actors`` of them, each with ``--num-cpus`` / ``--num-gpus``); the
driver stores each result batch as it arrives, so an interrupted run keeps what was coded.
"""

from __future__ import annotations

import logging
import os


class EngineActor:
    """One engine per Ray actor; called with a batch of {"id", "text"} columns, returns {"id", "result", "worker"}."""

    def __init__(self, engine_options: dict, k: int, threads: int):
        import torch

        torch.set_num_threads(max(1, threads))
        from termnorm.batch import build_engine_from

        self.engine, self.k = build_engine_from(engine_options), k

    def __call__(self, batch: dict) -> dict:
        from termnorm.batch import code_strings

        texts = [str(t) for t in batch["text"]]
        return {"id": batch["id"], "result": code_strings(self.engine, texts, self.k),
                "worker": [os.getpid()] * len(texts)}


def start_ray(address: str | None, num_cpus: float | None = None):
    """Connect to the cluster at ``address``, or start a local Ray instance ("local")."""
    try:
        import ray
    except ImportError:
        raise SystemExit("--ray needs the ray package: pip install 'ray[data]'") from None
    if ray.is_initialized():
        return ray
    os.environ.setdefault("RAY_DEDUP_LOGS", "1")
    kwargs = dict(ignore_reinit_error=True, include_dashboard=False, log_to_driver=False)
    if address and address != "local":
        ray.init(address=address, **kwargs)
    else:
        # the actors' CPUs plus one for Ray Data's own tasks, at least the machine's cores
        ray.init(num_cpus=max(os.cpu_count() or 1, num_cpus or 0), **kwargs)
    ray.data.DataContext.get_current().enable_progress_bars = False
    logging.getLogger("ray.data").setLevel(logging.WARNING)  # the job draws its own progress bar
    return ray


def code_on_ray(job, db, bar) -> None:
    import pyarrow as pa

    opt = job.opt
    ray = start_ray(opt.ray, num_cpus=opt.actors * opt.num_cpus + 1)
    ids, texts = [], []
    for i, t in db.execute("SELECT id, text FROM mentions WHERE result IS NULL AND rows > 0 ORDER BY id"):
        ids.append(i)
        texts.append(t)
    table = pa.table({"id": pa.array(ids, pa.int64()), "text": pa.array(texts, pa.string())})
    del ids, texts
    # blocks cut here (no repartition task to compete with the actors for CPUs): a few per actor, so a slow
    # block does not leave the other actors idle, and results come back while the rest is coded
    step = max(opt.batch_size, -(-len(table) // (opt.actors * 8)))
    ds = ray.data.from_arrow([table.slice(s, step) for s in range(0, len(table), step)])
    ds = ds.map_batches(EngineActor, fn_constructor_kwargs=dict(engine_options=job.engine_options, k=opt.k,
                                                              threads=int(opt.num_cpus) or 1),
                        batch_size=opt.batch_size, batch_format="numpy", concurrency=opt.actors,
                        num_cpus=opt.num_cpus, num_gpus=opt.num_gpus or None)
    workers = set()
    for out in ds.iter_batches(batch_size=None, batch_format="numpy"):
        pairs = [(str(r), int(i)) for i, r in zip(out["id"], out["result"])]
        job._store(db, pairs)
        workers.update(int(w) for w in out["worker"])
        bar.update(len(pairs))
    job.stats["ray_actors_used"] = len(workers)
