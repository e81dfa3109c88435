"""Active learning around the coders: what to review first, what to accept unreviewed, what to audit.

* **Uncertainty** of a suggestion (review the least certain first, so each
  correction teaches the most): the *margin* between the last chosen answer
  and the best rejected one (for a one-term answer: the top two fused
  scores; approach A's fusion outputs the top x by fused score, so this gap
  is what separates the output from the next candidate), combined with the
  *count* uncertainty ``1 - max P(count)`` when the engine exposes the count
  probabilities (approach A's count head), else ``1 - confidence``.
* **Auto-accept threshold**: the lowest confidence t such that suggestions
  with confidence >= t were exactly right on the gold set with precision >=
  the target (default 0.98), over at least ``min_support`` mentions.
* **Audit sample**: a random share (default 10%) of auto-coded mentions goes
  back to the coders' queue, so the auto-coded precision keeps being
  measured on real traffic (:func:`audit_results`).

The pure functions need nothing but Suggestions; the two database functions
(:func:`auto_code_with_audit`, :func:`audit_results`) use db.services and the
existing tables, imported lazily (the engine itself never imports db/).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from termnorm.records import Suggestion

#: Default target precision of auto-accepted suggestions (the lead can change it on the page).
TARGET_PRECISION = 0.98
#: At least this many gold mentions must lie at or above a threshold before its precision is trusted:
#: with 50 mentions one error already moves precision by 2 points, i.e. the target's whole error
#: budget at 0.98; fewer would let a single lucky run of right answers set the threshold.
MIN_SUPPORT = 50
#: Share of auto-coded mentions routed back to coders as a random audit.
AUDIT_SHARE = 0.10


# ------------------------------------------------------------------------------------- uncertainty
def _count_probs(sug: Suggestion):
    cp = getattr(sug, "count_probs", None)
    if cp is None:
        return None
    cp = np.asarray(cp, dtype=float).ravel()
    return cp if cp.size and np.isfinite(cp).all() and cp.sum() > 0 else None


def uncertainty_parts(sug: Suggestion) -> dict:
    """The parts of :func:`uncertainty`: ``margin`` (0..1), ``count`` uncertainty (or None) and
    ``confidence`` uncertainty, plus which of the two second parts was used."""
    scores = sorted((float(c.score) for c in sug.candidates), reverse=True)
    x = max(1, len(sug.chosen) or int(sug.predicted_count or 1))
    if not scores:
        margin = 0.0
    else:
        last = scores[min(x, len(scores)) - 1]
        nxt = scores[x] if len(scores) > x else 0.0
        margin = float(np.clip(last - nxt, 0.0, 1.0))
    cp = _count_probs(sug)
    count_unc = None if cp is None else float(1.0 - cp.max() / cp.sum())
    conf_unc = float(np.clip(1.0 - float(sug.confidence), 0.0, 1.0))
    return {"margin": margin, "count": count_unc, "confidence": conf_unc,
            "second": "count" if count_unc is not None else "confidence"}


def uncertainty(sug: Suggestion) -> float:
    """0 (certain) .. 1 (no idea): ``1 - margin * (1 - u2)``, u2 = count uncertainty, else 1 - confidence.

    The product is "probability-like": the answer is certain only when the
    chosen set is clearly separated from the next candidate *and* the count
    (or, without count probabilities, the calibrated whole-answer confidence)
    is certain. A suggestion with no candidate is maximally uncertain.
    """
    p = uncertainty_parts(sug)
    u2 = p["count"] if p["count"] is not None else p["confidence"]
    if not sug.candidates:
        return 1.0
    return float(np.clip(1.0 - p["margin"] * (1.0 - u2), 0.0, 1.0))


def order_by_uncertainty(suggestions: Sequence[Suggestion]) -> list[int]:
    """Indices of ``suggestions``, most uncertain first (ties keep the input order, e.g. file order)."""
    u = np.array([uncertainty(s) for s in suggestions], dtype=float)
    return [int(i) for i in np.argsort(-u, kind="stable")]


# ------------------------------------------------------------------------------------- auto-accept threshold
@dataclass
class ThresholdChoice:
    """The chosen auto-accept threshold and what it means on the gold set."""

    threshold: float | None  # None: no threshold reaches the target with enough support
    target: float
    precision: float | None  # precision of gold suggestions with confidence >= threshold
    coverage: float  # share of gold mentions that would be auto-accepted
    support: int  # how many gold mentions lie at or above the threshold
    n: int  # gold mentions considered
    min_support: int

    def summary(self) -> str:
        if self.threshold is None:
            return (f"no threshold reaches precision {self.target:.1%} with >= {self.min_support} of "
                    f"{self.n} gold mentions: auto-coding is not advised")
        return (f"confidence >= {self.threshold:.4f}: precision {self.precision:.1%} on {self.support} gold "
                f"mentions, coverage {self.coverage:.1%} of {self.n}")


def choose_threshold(confidences: Sequence[float], correct: Sequence[bool], target: float = TARGET_PRECISION,
                     min_support: int = MIN_SUPPORT) -> ThresholdChoice:
    """The lowest t with precision(confidence >= t) >= ``target`` over >= ``min_support`` mentions.

    Candidates for t are the observed confidences (a threshold between two
    observed values selects the same mentions as the next observed value).
    Ties: every mention with confidence exactly t is included. Precision is not
    monotone in t, so every candidate is checked (vectorised over the sorted list).
    """
    conf = np.asarray(confidences, dtype=float)
    ok = np.asarray(correct, dtype=bool)
    if conf.shape != ok.shape:
        raise ValueError("confidences and correct differ in length")
    n = int(conf.size)
    if n == 0:
        return ThresholdChoice(None, target, None, 0.0, 0, 0, min_support)
    order = np.argsort(-conf, kind="stable")
    c, y = conf[order], ok[order]
    # the group of equal confidences ends at the last index with that value: cumulative counts there
    ends = np.r_[np.nonzero(np.diff(c))[0], n - 1]
    support = ends + 1
    prec = np.cumsum(y)[ends] / support
    good = np.nonzero((prec >= target) & (support >= min_support))[0]
    if len(good) == 0:
        return ThresholdChoice(None, target, None, 0.0, 0, n, min_support)
    g = good[-1]  # the lowest threshold = the longest qualifying prefix
    return ThresholdChoice(float(c[ends[g]]), target, float(prec[g]), float(support[g] / n), int(support[g]), n,
                           min_support)


def threshold_from_predictions(predictions: Sequence[dict], target: float = TARGET_PRECISION,
                               min_support: int = MIN_SUPPORT) -> ThresholdChoice:
    """:func:`choose_threshold` on a registry version's gold predictions (dicts with confidence, correct)."""
    return choose_threshold([p["confidence"] for p in predictions], [bool(p["correct"]) for p in predictions],
                            target, min_support)


def coverage_at(confidences: Sequence[float], threshold: float | None) -> float:
    """Share of ``confidences`` >= ``threshold`` (the expected share auto-coded in a batch)."""
    conf = np.asarray(confidences, dtype=float)
    if threshold is None or conf.size == 0:
        return 0.0
    return float((conf >= threshold).mean())


def audit_sample(ids: Sequence[int], share: float = AUDIT_SHARE, seed: int | None = None) -> list[int]:
    """A random ``share`` of ``ids`` (at least one when ids is not empty and share > 0), in input order."""
    ids = list(ids)
    if not ids or share <= 0:
        return []
    k = min(len(ids), max(1, int(round(share * len(ids)))))
    rng = np.random.default_rng(seed)
    pick = set(rng.choice(len(ids), size=k, replace=False).tolist())
    return [x for i, x in enumerate(ids) if i in pick]


# ------------------------------------------------------------------------------------- database side
AUDIT_ACTION = "audit_sample"


def auto_code_with_audit(s, batch_id: int, min_confidence: float, username: str, audit_share: float = AUDIT_SHARE,
                         seed: int | None = None) -> dict:
    """Auto-code the batch (db.services.auto_code) and send a random audit share back to the coders.

    The audited mentions keep their ``auto`` decision (so the audit can
    compare it with the coder's answer) but get status ``suggested`` again, so
    they reappear in every coder's queue; the next coder decision supersedes the
    auto one. An audit-log entry lists them. Returns
    ``{"auto_coded": n, "audit": [mention ids], "kept": n - len(audit)}``.
    """
    from sqlalchemy import select

    from db import services
    from db.models import AuditLog, Mention

    before = {m["id"] for m in services.mentions(s, batch_id, status="auto_coded")}
    n = services.auto_code(s, batch_id, min_confidence, username)
    after = [m["id"] for m in services.mentions(s, batch_id, status="auto_coded") if m["id"] not in before]
    audit = audit_sample(after, audit_share, seed)
    if audit:
        user = services.ensure_user(s, username)
        for m in s.scalars(select(Mention).where(Mention.id.in_(audit))):
            m.status = "suggested"
        s.add(AuditLog(user_id=user.id, username=user.username, action=AUDIT_ACTION, object_type="batch",
                       object_id=batch_id, details={"mention_ids": audit, "share": float(audit_share),
                                                    "min_confidence": float(min_confidence), "auto_coded": n}))
        s.commit()
    return {"auto_coded": n, "audit": audit, "kept": n - len(audit)}


def audit_results(s, batch_id: int | None = None) -> dict:
    """Precision of auto-coding measured by the audit: of audited mentions a coder has since decided,
    how many got exactly the auto-coded terms. Returns ``{"audited", "decided", "agreed", "precision"}``."""
    from sqlalchemy import select

    from db.models import AuditLog, Decision

    q = select(AuditLog.details, AuditLog.object_id).where(AuditLog.action == AUDIT_ACTION)
    if batch_id is not None:
        q = q.where(AuditLog.object_type == "batch", AuditLog.object_id == batch_id)
    ids = sorted({int(i) for det, _ in s.execute(q) for i in (det or {}).get("mention_ids", [])})
    decided = agreed = 0
    for mid in ids:
        ds = s.scalars(select(Decision).where(Decision.mention_id == mid).order_by(Decision.id)).all()
        auto = next((d for d in reversed(ds) if d.action == "auto"), None)
        later = [d for d in ds if auto is not None and d.id > auto.id and d.action in ("accept", "correct", "reject")]
        if auto is None or not later:
            continue
        decided += 1
        agreed += set(later[-1].terms) == set(auto.terms) and later[-1].action != "reject"
    return {"audited": len(ids), "decided": decided, "agreed": agreed,
            "precision": agreed / decided if decided else None}
