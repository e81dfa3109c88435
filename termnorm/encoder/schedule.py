"""A linear warm-up / linear decay learning-rate schedule whose length a time budget can shorten.

transformers' ``get_linear_schedule_with_warmup`` fixes its length before the first step. A CPU run bounded
by a time budget (``--max-seconds``) stops long before the pass it was sized for: MEDIC's 64,199 synonym pairs
are 2,007 steps of 32, a 30-minute CPU run does about 300, so the schedule's 10% warm-up (200 steps) took
two thirds of the run and the rate never came down. Here, once the first steps of an epoch are timed, the
length becomes the steps the budget has left room for (never more than it was), so the run warms up and
decays within its budget. Written on torch's ``LambdaLR``; no library sizes a schedule by time.
"""
from __future__ import annotations

import time

from torch.optim.lr_scheduler import LambdaLR

#: steps of an epoch timed before its length is refitted to the budget
PROBE_STEPS = 5


class BudgetedLinearSchedule:
    """``step()`` after each optimiser step, as any scheduler; ``fit_budget`` after each step of a budgeted run."""

    def __init__(self, optimizer, total_steps: int, warmup_ratio: float):
        self.total = max(1, int(total_steps))
        self.warmup_ratio = float(warmup_ratio)
        self.refits: list[int] = []  # the lengths the budget set, in order (for the run's metrics)
        self._lambda = LambdaLR(optimizer, self.factor)

    def factor(self, step: int) -> float:
        """The learning rate's multiplier at ``step``: as transformers' linear schedule of length ``total``."""
        warm = int(self.warmup_ratio * self.total)
        if step < warm:
            return step / max(1, warm)
        return max(0.0, (self.total - step) / max(1, self.total - warm))

    def step(self) -> None:
        self._lambda.step()

    def get_last_lr(self) -> list[float]:
        return self._lambda.get_last_lr()

    def fit_budget(self, done: int, epoch_steps: int, epoch_started: float, run_started: float,
                   budget_s: float | None) -> None:
        """After the epoch's ``PROBE_STEPS``-th step (``epoch_steps``; ``done`` steps in all) of a run with a
        budget, shorten the schedule to the steps the time left allows at the pace so far."""
        if budget_s is None or epoch_steps != PROBE_STEPS:
            return
        now = time.perf_counter()
        per_step = (now - epoch_started) / epoch_steps
        left = budget_s - (now - run_started)
        fits = done + max(0, int(left / per_step)) if per_step > 0 else self.total
        if fits < self.total:
            self.total = max(done + 1, fits)
            self.refits.append(self.total)
