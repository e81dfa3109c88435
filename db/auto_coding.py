"""Auto-coding on the database: confident suggestions accepted unreviewed, and the audit that keeps measuring them.

* :func:`auto_code` accepts a batch's stored suggestions of the serving model version at or above a
  confidence threshold (a lead only; the threshold is chosen by termnorm.active.choose_threshold);
* :func:`auto_code_with_audit` does so and sends a random share (termnorm.active.audit_sample) back to the
  coders' queue, in one transaction;
* :func:`audit_results`: the precision of auto-coding measured by that audit, with its Clopper-Pearson
  interval (termnorm.active.precision_interval).
"""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from db import accounts
from db.batches import CLAIM_MINUTES, OPEN_STATUSES
from db.decisions import default_relationship, supersede_and_pairs
from db.models import AuditLog, Batch, Decision, Mention, Suggestion as SuggestionRow, utcnow
from db.vocabularies import term_rows
from termnorm.active import AUDIT_SHARE, CONFIDENCE_LEVEL, audit_sample, precision_interval

AUDIT_ACTION = "audit_sample"
#: Audited mention ids per query of :func:`audit_results` (SQLite allows 32,766 bound parameters).
_ID_CHUNK = 10_000


def auto_code(s: Session, batch_id: int, min_confidence: float, username: str, *, model_version: str,
              dry_run: bool = False, commit: bool = True) -> dict:
    """Accept the batch's stored suggestions of the serving model version with confidence >= ``min_confidence``.

    The rules hold here, whatever a page shows:

    * ``username`` must be a lead or above (db.auth.require: PermissionError, nothing written);
    * only mentions still open (new / suggested), and not those sent back as an audit sample (their latest
      decision is the auto-code itself: they wait for a coder), nor those on a coder's screen now (claimed
      less than CLAIM_MINUTES ago: the coder's decision would otherwise be refused as "already decided");
    * only a latest stored suggestion made by ``model_version``, the version serving the vocabulary: the
      threshold was measured on its held-out mentions, and another version's confidence is on another
      scale. Those mentions are counted (``skipped_version``: re-score them first) and never touched;
    * a suggestion with no chosen term, or a term retired by a newer vocabulary edition, is skipped
      (``skipped_terms``).

    Each accepted mention gets an ``auto`` decision (status ``auto_coded``, review status ``auto``) with
    the suggestion's terms, their codes and the edition in force. No training pairs: the engine's own
    guesses are not confirmed labels. ``dry_run``: count only (the page's preview, by the same rules);
    ``commit=False``: the caller commits (:func:`auto_code_with_audit`). Returns the counts
    ``open``, ``unsuggested``, ``awaiting_audit``, ``on_screen``, ``skipped_version``, ``below_threshold``,
    ``skipped_terms``, ``auto_coded`` and the auto-coded ``mention_ids``.
    """
    from db import auth  # db.auth imports db.services: a top-level import would be a cycle

    user = auth.require(s, username, "lead")
    threshold = float(min_confidence)
    if not 0.0 <= threshold <= 1.0:
        raise ValueError(f"min_confidence must lie in [0, 1], not {min_confidence!r}")
    if not model_version:
        raise ValueError("model_version is required: the serving version's name (only its suggestions are auto-coded)")
    batch = s.get(Batch, batch_id)
    if batch is None:
        raise KeyError(f"no batch {batch_id}")
    latest = (select(SuggestionRow.mention_id, func.max(SuggestionRow.id).label("sid"))
              .group_by(SuggestionRow.mention_id).subquery())
    in_audit = Mention.id.in_(select(Decision.mention_id).where(Decision.is_latest, Decision.action == "auto"))
    on_screen = Mention.claimed_by.is_not(None) & (Mention.claimed_at >= utcnow() - timedelta(minutes=CLAIM_MINUTES))
    base = (select(Mention.id).select_from(Mention).outerjoin(latest, latest.c.mention_id == Mention.id)
            .outerjoin(SuggestionRow, SuggestionRow.id == latest.c.sid)
            .where(Mention.batch_id == batch_id, Mention.status.in_(OPEN_STATUSES)))
    out = dict.fromkeys(("open", "unsuggested", "awaiting_audit", "on_screen", "skipped_version", "below_threshold",
                         "skipped_terms", "auto_coded"), 0)
    for _, sid, version, conf, audit, shown in s.execute(base.add_columns(
            SuggestionRow.id, SuggestionRow.model_version, SuggestionRow.confidence, in_audit, on_screen)):
        out["open"] += 1
        key = ("awaiting_audit" if audit else "on_screen" if shown else "unsuggested" if sid is None
               else "skipped_version" if version != model_version
               else "below_threshold" if conf < threshold else None)
        if key:
            out[key] += 1
    rows = s.execute(base.with_only_columns(Mention, SuggestionRow)
                     .where(SuggestionRow.model_version == model_version, SuggestionRow.confidence >= threshold,
                            ~in_audit, ~on_screen).order_by(Mention.position)).all()  # file order on every backend
    terms = term_rows(s, batch.vocabulary_id, {t for _, sug in rows for t in sug.chosen})
    ids = []
    for m, sug in rows:
        if not sug.chosen or any(t not in terms for t in sug.chosen):  # empty, or a term since retired
            out["skipped_terms"] += 1
            continue
        ids.append(m.id)
        if dry_run:
            continue
        d = Decision(mention_id=m.id, user_id=user.id, suggestion_id=sug.id, action="auto", terms=list(sug.chosen),
                     term_ids=[terms[t].id for t in sug.chosen], codes=[terms[t].code for t in sug.chosen],
                     edition=batch.vocabulary.edition, relationship=default_relationship(sug.chosen),
                     review_status="auto", comment="", seconds=0.0, model_version=sug.model_version,
                     is_latest=True)
        s.add(d)
        s.flush()
        supersede_and_pairs(s, m, d, batch.vocabulary_id, [], [])
        m.status = "auto_coded"
    out["auto_coded"] = len(ids)
    if not dry_run:
        accounts.audit(s, user, "auto_code", "batch", batch_id,
                       {"min_confidence": threshold, "model_version": model_version, **out})
        if commit:
            s.commit()
    return {**out, "mention_ids": ids}


def auto_code_with_audit(s: Session, batch_id: int, min_confidence: float, username: str,
                         audit_share: float = AUDIT_SHARE, seed: int | None = None, *, model_version: str) -> dict:
    """Auto-code the batch (:func:`auto_code`: a lead, the serving ``model_version`` only) and send a random
    audit share back to the coders, in one transaction.

    The audited mentions keep their ``auto`` decision (so the audit can
    compare it with the coder's answer) but get status ``suggested`` again, so
    they reappear in every coder's queue; the next coder decision supersedes the
    auto one. An audit-log entry lists them. Returns auto_code's counts plus
    ``audit`` (mention ids) and ``kept`` (auto-coded and not audited).
    """
    from db import auth  # db.auth imports db.services: a top-level import would be a cycle

    # one commit for both: a crash in between would leave auto-codes that no audit ever samples
    res = auto_code(s, batch_id, min_confidence, username, model_version=model_version, commit=False)
    audit = audit_sample(res["mention_ids"], audit_share, seed)
    if audit:
        user = auth.require(s, username, "lead")
        for m in s.scalars(select(Mention).where(Mention.id.in_(audit))):
            m.status = "suggested"
        s.add(AuditLog(user_id=user.id, username=user.username, action=AUDIT_ACTION, object_type="batch",
                       object_id=batch_id, details={"mention_ids": audit, "share": float(audit_share),
                                                    "min_confidence": float(min_confidence),
                                                    "model_version": model_version,
                                                    "auto_coded": res["auto_coded"]}))
    s.commit()
    return {**res, "audit": audit, "kept": res["auto_coded"] - len(audit)}


def _audit_verdict(decisions: list, model_version: str | None) -> str:
    """One audited mention's outcome from its decisions (oldest first): ``other`` (its last auto-code is not of
    ``model_version``), ``open`` (no coder has re-decided it), else ``agreed`` / ``disagreed``: whether the
    coder's latest answer (accept / correct / reject) kept exactly the auto-coded terms."""
    auto = next((d for d in reversed(decisions) if d.action == "auto"), None)
    if auto is None or (model_version is not None and auto.model_version != model_version):
        return "other"
    later = [d for d in decisions if d.id > auto.id and d.action in ("accept", "correct", "reject")]
    if not later:
        return "open"
    kept = later[-1].action != "reject" and set(later[-1].terms) == set(auto.terms)
    return "agreed" if kept else "disagreed"


def audit_results(s: Session, batch_id: int | None = None, model_version: str | None = None,
                  level: float = CONFIDENCE_LEVEL) -> dict:
    """Precision of auto-coding measured by the audit: of audited mentions a coder has since decided, how
    many kept exactly the auto-coded terms, with its Clopper-Pearson interval (termnorm.active.precision_interval).

    ``model_version``: only mentions auto-coded by that version (another version's audit says nothing about
    this one). Two queries: the audit-log entries, then the audited mentions' decisions. Returns
    ``{"audited", "decided", "agreed", "precision", "lower", "upper", "level"}`` (None without a decided one).
    """
    q = select(AuditLog.details).where(AuditLog.action == AUDIT_ACTION)
    if batch_id is not None:
        q = q.where(AuditLog.object_type == "batch", AuditLog.object_id == batch_id)
    ids = sorted({int(i) for det in s.scalars(q) for i in (det or {}).get("mention_ids", [])})
    by_mention: dict[int, list] = {}
    for k in range(0, len(ids), _ID_CHUNK):
        rows = s.execute(select(Decision.mention_id, Decision.id, Decision.action, Decision.terms,
                                Decision.model_version)
                         .where(Decision.mention_id.in_(ids[k:k + _ID_CHUNK])).order_by(Decision.id))
        for r in rows:
            by_mention.setdefault(r.mention_id, []).append(r)
    verdicts = [_audit_verdict(by_mention.get(mid, []), model_version) for mid in ids]
    audited = sum(v != "other" for v in verdicts)
    decided = sum(v in ("agreed", "disagreed") for v in verdicts)
    agreed = verdicts.count("agreed")
    lower, upper = precision_interval(agreed, decided, level) if decided else (None, None)
    return {"audited": audited, "decided": decided, "agreed": agreed,
            "precision": agreed / decided if decided else None, "lower": lower, "upper": upper, "level": level}
