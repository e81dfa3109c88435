"""The lead's review of coders' decisions: the mapping status of each decision, approve or send back.

Mapping teams keep a status per mapping (OHDSI Usagi: unchecked / approved /
flagged; Snap2SNOMED adds a re-review state). Here every decision has one
(``db.models.REVIEW_STATUSES``): a coder's decision starts ``unchecked``, a
flag ``flagged``, the lead's bulk auto-coding ``auto``; a lead **approves** it
or **sends it back** (``needs_rereview`` with the reason; its mention returns to
the coding queue, served first). Approval is a lead's act and never a
coder's own: nobody approves a decision they made unless an admin has allowed
self-approval (``allow_self_approval``: small teams where the lead also codes).
Every change is written to the audit log with who and why.
"""

from __future__ import annotations

from collections.abc import Iterable

import pandas as pd
from sqlalchemy import select
from sqlalchemy.orm import Session

from db import accounts, auth, serving, services
from db.models import REVIEW_STATUSES, Decision, Mention, utcnow

SELF_APPROVAL = "allow_self_approval"
#: What can be approved: a mapping (accept / correct / auto) or a rejection ("no term of the vocabulary
#: fits": approved, it is exported as unmapped -- FHIR noMap, OMOP concept 0). A flag or skip is a question, not
#: an answer: the lead codes the mention or sends it back.
APPROVABLE = ("accept", "correct", "auto", "reject")
REVIEWABLE = ("unchecked", "auto", "flagged", "needs_rereview")


# ---------------------------------------------------------------------------------- settings
def setting(s: Session, key: str, default=None):
    return services.get_setting(s, key, default)


def set_setting(s: Session, key: str, value, username: str) -> None:
    """Admin only (PermissionError); audited with the old and the new value."""
    user = auth.require(s, username, "admin")
    old = services.get_setting(s, key)
    services.put_setting(s, key, value)
    accounts.audit(s, user, "set_setting", "app_setting", None, {"key": key, "old": old, "new": value})
    s.commit()


# ---------------------------------------------------------------------------------- the queue
def review_frame(s: Session, *, vocabulary_id: int | None = None, batch_id: int | None = None,
                 coders: Iterable[str] | None = None, statuses: Iterable[str] | None = None,
                 min_confidence: float | None = None, max_confidence: float | None = None) -> pd.DataFrame:
    """Latest decisions with their mapping status, filtered by vocabulary, batch, coder, status and the
    confidence of the suggestion they answered (a decision made without one passes a confidence filter
    only when no bound is set)."""
    df = services.decisions_frame(s, batch_id)
    if vocabulary_id is not None and len(df):
        names = {v["id"]: v["name"] for v in services.vocabularies(s)}
        df = df[df["vocabulary"] == names.get(vocabulary_id)]
    if coders:
        df = df[df["user"].isin(list(coders))]
    if statuses:
        bad = set(statuses) - set(REVIEW_STATUSES)
        if bad:
            raise ValueError(f"unknown status {sorted(bad)[0]!r}; expected one of {', '.join(REVIEW_STATUSES)}")
        df = df[df["review_status"].isin(list(statuses))]
    if min_confidence is not None:
        df = df[df["confidence"].notna() & (df["confidence"] >= float(min_confidence))]
    if max_confidence is not None:
        df = df[df["confidence"].notna() & (df["confidence"] <= float(max_confidence))]
    return df.reset_index(drop=True)


def approve(s: Session, decision_ids: Iterable[int], username: str, note: str = "") -> dict:
    """Approve decisions (lead or admin: PermissionError otherwise).

    Refused, each with its reason, and left unchanged: a decision that is not the mention's latest, one
    without terms (flag / skip / reject), one already approved, one in re-review (sent back, or broken by a new
    edition: approving it would drop the note and leave the mention queued), and one made by ``username``
    unless self-approval is allowed. Returns ``{"approved": [ids], "refused": [(id, reason)]}``; one commit for
    all. The decisions are locked while they are checked, so two leads acting at once are taken in turn.
    """
    lead = auth.require(s, username, "lead")
    self_ok = bool(setting(s, SELF_APPROVAL, False))
    approved, refused = [], []
    now = utcnow()
    for d in _decisions(s, decision_ids, refused):
        if not d.is_latest:
            refused.append((d.id, "a later decision on this mention replaced it"))
        elif d.action not in APPROVABLE:
            refused.append((d.id, f"a {d.action} is not an answer to approve: code the mention or send it back"))
        elif d.review_status == "approved":
            refused.append((d.id, "already approved"))
        elif d.review_status == "needs_rereview":  # a page loaded before another lead sent it back, or an edition
            refused.append((d.id, f"in re-review ({d.review_note or 'no note'}): the coder decides it again first"))
        elif d.user_id == lead.id and not self_ok:
            refused.append((d.id, "your own decision: another lead approves it (an admin can allow self-approval)"))
        else:
            d.review_status, d.reviewed_by_id, d.reviewed_at, d.review_note = "approved", lead.id, now, note.strip()
            approved.append(d.id)
    accounts.audit(s, lead, "approve", "decision", None,
                   {"approved": approved, "refused": [list(r) for r in refused], "note": note.strip()})
    s.commit()
    return {"approved": approved, "refused": refused}


def send_back(s: Session, decision_ids: Iterable[int], username: str, note: str) -> dict:
    """Send decisions back to the coders with ``note`` (required): status ``needs_rereview``, the mention
    re-queued first. Lead or admin only. Returns ``{"sent_back": [ids], "refused": [(id, reason)]}``."""
    note = (note or "").strip()
    if not note:
        raise ValueError("say why it goes back: the coder reads the note on the coding page")
    lead = auth.require(s, username, "lead")
    sent, refused = [], []
    now = utcnow()
    for d in _decisions(s, decision_ids, refused):
        if not d.is_latest:
            refused.append((d.id, "a later decision on this mention replaced it"))
            continue
        d.review_status, d.reviewed_by_id, d.reviewed_at = "needs_rereview", lead.id, now
        d.review_note = f"{services.SENT_BACK}{lead.username}: {note}"  # db.batches.next_mention reads it
        m = s.get(Mention, d.mention_id)
        m.status = services.REREVIEW
        m.claimed_by = m.claimed_at = None
        sent.append(d.id)
    # the engines learnt these decisions (sieve, history recall) and cannot unlearn them: rebuild them
    for vid in {s.get(Mention, d.mention_id).batch.vocabulary_id for d in _decisions(s, sent, [])}:
        serving.bump_history_epoch(s, vid)
    accounts.audit(s, lead, "send_back", "decision", None,
                   {"sent_back": sent, "refused": [list(r) for r in refused], "note": note})
    s.commit()
    return {"sent_back": sent, "refused": refused}


def _decisions(s: Session, ids: Iterable[int], refused: list) -> list[Decision]:
    ids = [int(i) for i in dict.fromkeys(ids)]
    found = {d.id: d for d in s.scalars(select(Decision).where(Decision.id.in_(ids)).with_for_update())} if ids else {}
    refused.extend((i, "no such decision") for i in ids if i not in found)
    return [found[i] for i in ids if i in found]


def rereview_reason(s: Session, mention_id: int) -> str | None:
    """Why a mention is in the re-review queue (its latest decision's note), None if it is not."""
    m = s.get(Mention, mention_id)
    if m is None or m.status != services.REREVIEW:
        return None
    d = s.scalar(select(Decision).where(Decision.mention_id == mention_id, Decision.is_latest).limit(1))
    return (d.review_note or "sent to re-review") if d is not None else "sent to re-review"
