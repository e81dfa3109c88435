"""The learning-rate schedule a time budget shortens (termnorm.encoder.schedule), alone and in a budgeted
bi-encoder run: real torch optimisers, transformers' schedule as the reference, the tiny real BERT."""

from __future__ import annotations

import csv
import time
from pathlib import Path

import pytest
import torch
from transformers import get_linear_schedule_with_warmup

from termnorm.dense.biencoder import BiEncoder
from termnorm.dense.train import train_biencoder
from termnorm.encoder.schedule import PROBE_STEPS, BudgetedLinearSchedule
from termnorm.encoder.tiny import make_tiny_encoder
from termnorm.records import LabelledMention
from termnorm.vocabulary import Vocabulary

DEMO = Path(__file__).resolve().parents[1] / "assets" / "demo"


def _opt(lr=1e-3):
    return torch.optim.AdamW([torch.nn.Parameter(torch.zeros(3))], lr=lr)


def _rates(sched, opt, steps):
    out = []
    for _ in range(steps):
        out.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return out


def test_without_a_budget_it_is_transformers_linear_schedule_step_for_step():
    ours, theirs = _opt(), _opt()
    mine = BudgetedLinearSchedule(ours, 40, 0.1)
    ref = get_linear_schedule_with_warmup(theirs, 4, 40)
    assert _rates(mine, ours, 45) == pytest.approx(_rates(ref, theirs, 45))
    assert mine.refits == []


def test_a_budget_shortens_the_schedule_to_the_steps_the_time_left_allows():
    opt = _opt()
    sched = BudgetedLinearSchedule(opt, 2007, 0.1)  # MEDIC's synonym pass; warm-up 200 steps
    now = time.perf_counter()
    # the epoch's first 5 steps took 5 s (1 s a step) and the run has used 100 s of a 400 s budget: 300 s left
    sched.fit_budget(PROBE_STEPS, PROBE_STEPS, now - 5.0, now - 100.0, 400.0)
    assert 300 <= sched.total <= PROBE_STEPS + 300 and sched.refits == [sched.total]
    assert sched.factor(int(0.1 * sched.total)) == pytest.approx(1.0)  # warm-up over within the budget
    assert sched.factor(sched.total) == 0.0  # and decayed to nothing by its end
    # only the probe step refits, a roomier budget never lengthens it, and no budget changes nothing
    before = sched.total
    sched.fit_budget(PROBE_STEPS + 1, PROBE_STEPS + 1, now - 1.0, now - 1.0, 10.0)
    sched.fit_budget(PROBE_STEPS, PROBE_STEPS, now - 0.001, now, 10 ** 6)
    sched.fit_budget(PROBE_STEPS, PROBE_STEPS, now - 100.0, now - 100.0, None)
    assert sched.total == before and len(sched.refits) == 1


def test_a_budget_already_spent_leaves_one_more_step():
    sched = BudgetedLinearSchedule(_opt(), 500, 0.1)
    now = time.perf_counter()
    sched.fit_budget(PROBE_STEPS, PROBE_STEPS, now - 5.0, now - 60.0, 30.0)
    assert sched.total == PROBE_STEPS + 1


def test_a_budgeted_bi_encoder_run_sizes_its_schedule_to_the_budget(tmp_path, one_torch_thread):
    vocab = Vocabulary(name="demo-procedures")
    with open(DEMO / "procedures.csv", encoding="utf-8") as f:
        for r in csv.DictReader(f):
            vocab.add_term(r["name"], [r["code"]], [s for s in (r["synonyms"] or "").split("|") if s])
    with open(DEMO / "mentions.csv", encoding="utf-8") as f:
        mentions = [LabelledMention(r["mention"], r["terms"].split("##"))
                    for r in csv.DictReader(f) if r["vocabulary"] == "procedures"]
    texts = vocab.names + [m.text for m in mentions]
    enc = BiEncoder.from_folder(make_tiny_encoder(tmp_path / "bert", texts, hidden=32, layers=2), device="cpu")
    unbounded = train_biencoder(enc, vocab, mentions[:40], objective="nce", epochs=1, batch_size=4, lr=1e-3,
                                progress=False, efn=False)
    assert unbounded["schedule_steps"] == unbounded["steps"]  # no budget: the schedule is the pass
    full = 400 * unbounded["steps"]
    m = train_biencoder(enc, vocab, mentions[:40], objective="nce", epochs=400, batch_size=4, lr=1e-3,
                        progress=False, efn=False, time_budget_s=3.0)
    assert m["stopped_early"] and m["steps"] < full
    assert PROBE_STEPS < m["schedule_steps"] < full, m  # sized to what 3 s allow, not to 400 passes
