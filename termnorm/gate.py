"""The quality gate: may a newly trained model replace the one serving now?

The registry (termnorm.registry) asks it on every promotion: the candidate and the serving model are
compared on the same held-out mentions -- exact-set accuracy, the task's metric in methods.md -- with a
paired sign test on the mentions only one of them got right (:func:`paired_results`). :class:`Gate` says
why it promotes or refuses; :class:`GateResult` is what the registry stores with the version.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from termnorm.filestore import utc_now

#: The gate's metric: exact-set accuracy on gold (a mention counts only when the
#: predicted set equals the gold set -- the Yidu-N7K / CHIP 2019 metric).
GATE_METRIC = "accuracy"
#: Default margin 0.0: a candidate is promoted when candidate >= current - margin,
#: i.e. "not worse". A lead may allow a small loss (margin > 0) to accept a model
#: trained on much more data, or demand a gain (margin < 0).
GATE_MARGIN = 0.0
#: Held-out mentions the gate needs to compare two models at all. A model truly 10 points worse (about a
#: fifth of the mentions answered differently, three to one against it) is measured "not worse" by chance
#: 14% of the time on 30 mentions, 7% on 50 and 1.3% on 100 (binomial model of the discordant mentions):
#: 100 keeps that risk near 1%, and one mention then moves accuracy by one point, not three.
MIN_GATE_MENTIONS = 100
#: Significance level of the paired sign test: a candidate significantly worse than the serving model is
#: refused even where the margin allows a loss.
SIGN_TEST_ALPHA = 0.05


@dataclass
class GateResult:
    """The gate's decision, stored with the candidate version and in the event log.

    ``candidate`` / ``current``: the metric of each on the same ``gold_n`` held-out mentions;
    ``only_candidate`` / ``only_current``: mentions only that model got right; ``sign_p``: the two-sided
    sign test on them (termnorm.stats.sign_test); ``reason``: the verdict in plain words.
    """

    promoted: bool
    metric: str
    candidate: float | None
    current: float | None
    margin: float
    reason: str
    current_version: str | None = None
    gold_n: int | None = None
    gold_sha256: str | None = None
    forced: bool = False
    at: str = field(default_factory=utc_now)
    only_candidate: int | None = None
    only_current: int | None = None
    sign_p: float | None = None
    min_n: int = MIN_GATE_MENTIONS
    alpha: float = SIGN_TEST_ALPHA

    def summary(self) -> str:
        verb = "promoted" if self.promoted else "refused"
        return f"{verb}{' (forced)' if self.forced else ''}: {self.reason}"


def margin_words(margin: float) -> str:
    """What a gate margin asks for, in words (a negative margin demands a gain, a positive one allows a loss)."""
    if margin > 0:
        return f"the gate allows a loss of up to {margin:.4f} (margin {margin:+.4f})"
    if margin < 0:
        return f"the gate asks for a gain of at least {-margin:.4f} (margin {margin:+.4f})"
    return "the gate asks for no loss (margin 0)"


def paired_results(candidate: list[dict], current: list[dict]) -> dict | None:
    """Right / wrong of two models on the mentions both were measured on (``mention``, ``correct`` records),
    and the sign test on them; None when either side has no records."""
    from termnorm.stats import sign_test

    if not candidate or not current:
        return None
    cur = {p["mention"]: bool(p["correct"]) for p in current}
    both = [(bool(p["correct"]), cur[p["mention"]]) for p in candidate if p["mention"] in cur]
    if not both:
        return None
    st = sign_test([a for a, _ in both], [b for _, b in both])
    return {"n": len(both), "only_candidate": st["right_only_here"], "only_current": st["right_only_there"],
            "sign_p": st["sign_test_p"]}


@dataclass
class Gate:
    """Promote a candidate over the model serving now only when, on the same held-out mentions,

    1. there are at least ``min_n`` of them (:data:`MIN_GATE_MENTIONS`; below it the gate refuses and says so),
    2. ``candidate >= serving - margin`` (default margin 0: "not worse"), and
    3. the paired sign test does not find the candidate significantly worse (p < ``alpha`` with more mentions
       right only with the serving model) -- the check that still binds when a lead allows a loss (margin > 0).

    Why "not worse" and not "significantly better": each retrain adds what coders taught since, so a
    candidate that measures level with the serving model is the one to serve (it also knows the newest
    codes); demanding significance would stall the loop for hundreds of decisions at a time (a 2-point
    gain on 1,000 held-out mentions is rarely significant), while the minimum number of mentions keeps
    the chance that a clearly worse model passes near 1%. A lead who wants a proven gain sets a negative
    margin. The sign test is reported either way.

    ``metric`` is a key of the metrics dict (``termnorm.evaluate.evaluate_predictions``); default exact-set
    accuracy. ``paired`` (``paired_results``) carries the per-mention comparison.
    """

    margin: float = GATE_MARGIN
    metric: str = GATE_METRIC
    min_n: int = MIN_GATE_MENTIONS
    alpha: float = SIGN_TEST_ALPHA

    def decide(self, candidate: dict, current: dict | None, current_version: str | None = None,
               paired: dict | None = None) -> GateResult:
        cand = candidate.get(self.metric)
        cur = (current or {}).get(self.metric)
        res = GateResult(False, self.metric, _float(cand), _float(cur), self.margin, "", current_version,
                         candidate.get("n"), candidate.get("gold_sha256"), min_n=self.min_n, alpha=self.alpha)
        if paired:
            res.only_candidate, res.only_current, res.sign_p = (paired["only_candidate"], paired["only_current"],
                                                                paired["sign_p"])
        res.reason = self._refusal(res, current) or ""
        if current is None and not res.reason:
            res.promoted, res.reason = True, "first version: no measured model serves to compare with"
        elif not res.reason:
            res.promoted, res.reason = self._compare(res)
        return res

    def _refusal(self, res: GateResult, current: dict | None) -> str | None:
        """Why the two models cannot be compared (None: they can)."""
        if res.candidate is None:
            return f"candidate has no {self.metric} on the held-out mentions"
        if current is None:
            return None
        if res.current is None:
            return f"the serving model has no {self.metric} on the held-out mentions"
        if current.get("gold_sha256") != res.gold_sha256:
            return "the serving model was measured on other held-out mentions: re-evaluate it (baseline=)"
        if (res.gold_n or 0) < self.min_n:
            return (f"too few held-out mentions to compare: {res.gold_n or 0} < {self.min_n} (below that a "
                    f"clearly worse model passes too often by chance); they grow as coders decide (a share of "
                    f"the coded mentions is held out), with a gold task, or with labelled mentions")
        return None

    def _compare(self, res: GateResult) -> tuple[bool, str]:
        who = res.current_version or "the serving model"
        delta = res.candidate - res.current
        not_worse = res.candidate >= res.current - self.margin - 1e-12
        sig_worse = (res.sign_p is not None and res.only_current > res.only_candidate and res.sign_p < self.alpha)
        head = (f"{self.metric} {res.candidate:.4f} vs {res.current:.4f} for {who} on {res.gold_n} held-out "
                f"mentions ({delta:+.4f}); {margin_words(self.margin)}")
        if res.sign_p is not None:
            sig = "significant" if res.sign_p < self.alpha else "not significant"
            head += (f"; {res.only_candidate} mentions right only with the candidate, {res.only_current} only with "
                     f"{who}, sign test p = {res.sign_p:.4f} ({sig} at {self.alpha:g})")
        else:
            head += "; no per-mention results: sign test not run"
        if not not_worse:
            return False, "worse than the gate allows: " + head
        if sig_worse:
            return False, "significantly worse by the sign test: " + head
        return True, ("better: " if delta > 0 else "not worse: ") + head


def _float(x) -> float | None:
    return None if x is None else float(x)
