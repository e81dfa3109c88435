"""Coders' decisions and the training signal they give the engine.

:func:`record_decision` writes a decision, its training pairs, the mention's new status and an audit entry
in one transaction. Accepted and corrected terms are positives; the shown candidates a coder did not choose
are *confirmed* hard negatives (Approach B: hard negatives matter more than model choice; Approach D:
unconfirmed top-k negatives hurt without false-negative elimination -- these are confirmed by a person).
Accepted / corrected mentions return to the engine as coded history (Approach B history recall, Approach E
sieve) through :func:`coded_mentions`; :func:`training_pairs_frame` gives the pairs for retraining.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
from sqlalchemy import insert, or_, select, update
from sqlalchemy.orm import Session

from db.accounts import acting_user, audit
from db.batches import REREVIEW
from db.models import (
    DECISION_ACTIONS,
    RELATIONSHIPS,
    Batch,
    Decision,
    Mention,
    Term,
    TrainingPair,
    User,
    utcnow,
)
from db.suggestions import shown_suggestion_row
from db.vocabularies import term_ids, term_rows
from termnorm.coding_metrics.suggestions import NOT_RELATED
from termnorm.records import LabelledMention, Suggestion

# How many of a suggestion's ranked candidates the review screen shows. Those not
# chosen on "correct" and all of them on "reject" become confirmed hard negatives;
# candidates below were never seen, so they say nothing. 5 = the deployed setting
# of Approach D ("show the top 5, the user confirms"); the app passes ``shown=``
# to record_decision when it shows another number.
SHOWN_CANDIDATES = 5

STATUS_AFTER = {"accept": "decided", "correct": "decided", "reject": "decided",
                "skip": "skipped", "flag": "flagged", "auto": "auto_coded"}
REVIEW_AFTER = {"flag": "flagged", "auto": "auto"}  # the mapping status a new decision starts with, else unchecked
# The relationship a decision gets unless the coder sets another (README, "Mapping status and relationship"):
# one term -- the coder states the mention *is* that concept; several -- the mention means more than any one
# of them, so each target is narrower than the mention; no term (reject) -- no relationship (FHIR noMap).
SINGLE_RELATIONSHIP = "equivalent"
PART_RELATIONSHIP = "source-is-broader-than-target"
# NOT_RELATED (termnorm.coding_metrics): the coder states the mention is *not* the terms it names (key 5): a FHIR
# statement kept for the record, never a mapping -- no positive training pair (the terms are negatives), no coded
# history, not exported as a code. MAPS: the SQL condition a decision with terms must meet to count as coding them.
MAPS = or_(Decision.relationship.is_(None), Decision.relationship != NOT_RELATED)


class NotYourMention(ValueError):
    """An action for a mention that is not (or no longer) on this coder's screen: a stale click or key press
    after the next mention was drawn, or a mention a colleague has claimed since. Nothing is written."""


def default_relationship(terms: Sequence[str], sent_back: tuple[Sequence[str], str | None] | None = None) -> str | None:
    """The FHIR relationship of a mention to ``terms`` when the coder sets none (see PART_RELATIONSHIP).

    ``sent_back``: the (terms, relationship) of the decision a re-review answers; the very terms again keep its
    relationship (a user test saw "narrower" turn into "equivalent" on a save that changed nothing)."""
    if sent_back is not None and sent_back[1] and terms and sorted(terms) == sorted(sent_back[0] or []):
        return sent_back[1]
    return None if not terms else SINGLE_RELATIONSHIP if len(terms) == 1 else PART_RELATIONSHIP


# ================================================================ decisions
def clean_terms(terms) -> list[str]:
    """``terms`` (one string or several) stripped, without empty ones and repeats, in their order."""
    if isinstance(terms, str):
        terms = [terms]
    out: list[str] = []
    for t in terms or ():
        t = str(t).strip()
        if t and t not in out:
            out.append(t)
    return out


def record_decision(s: Session, mention_id: int, username: str, action: str, terms: Sequence[str] = (),
                    comment: str = "", seconds: float = 0.0, *, shown: int | None = None,
                    codes: dict[str, str] | None = None, relationship: str | None = None,
                    require_claim: bool = False, screen: Suggestion | None = None) -> int:
    """Record a coder's decision atomically and durably; returns the decision id.

    One transaction writes the Decision, its TrainingPairs, the mention's new
    status and an AuditLog entry, and commits (fsync'ed) before returning; on
    any error nothing is written.

    * ``accept``  -- ``terms`` (default: the suggestion's chosen terms) become
      positives (kind ``accepted``);
    * ``correct`` -- ``terms`` (required) become positives (``corrected``); the
      shown candidates not chosen become hard negatives (``rejected_candidate``);
    * ``reject``  -- none of the shown candidates fits: all of them become hard
      negatives; no terms;
    * ``skip`` / ``flag`` -- only the comment is kept (no training pairs). A skip of a flagged mention (a lead
      passing it) records no decision: the flag stays in force, and the mention goes behind the other flagged ones.

    ``shown`` = how many top candidates the screen displayed (default
    SHOWN_CANDIDATES). A new decision on a mention supersedes the previous one
    (its ``is_latest`` and its training pairs' ``active`` are cleared; the
    history stays).

    Terms must be terms of the vocabulary's edition in force; the decision keeps
    each one's id and the code to export: ``codes[term]`` when the coder picked
    one (it must be a code of that term), else the term's export code (the most
    specific). ``relationship`` is a FHIR concept-map-relationship code
    (default :func:`default_relationship`). ``require_claim`` (the coding page):
    refuse with :class:`NotYourMention` unless the mention is the one this coder
    has claimed -- a click or key press that reaches the server after the next
    mention was drawn must not land on the previous one. ``screen``: the suggestion the coding page showed; the
    decision is of it (its stored row, version and shown candidates), not of one a background job or another
    process stored for the mention while it was on screen (the newest by default).
    """
    if action not in DECISION_ACTIONS or action == "auto":
        raise ValueError(f"unknown action {action!r}; expected accept, correct, reject, skip or flag")
    terms = clean_terms(terms)
    if relationship is not None and relationship not in RELATIONSHIPS:
        raise ValueError(f"unknown relationship {relationship!r}; expected one of {', '.join(RELATIONSHIPS)}")
    try:
        if require_claim:
            # The claim ends here, in one conditional UPDATE: the first write of the transaction, so two
            # deciders of one mention are serialised by the database (SQLite's write lock, a row lock on
            # PostgreSQL) and the second finds the claim gone. Streamlit may run a late click's callback in a
            # second script thread while the first one is still writing: a read-then-check would let both in.
            released = s.execute(update(Mention).where(Mention.id == mention_id,
                                                       Mention.claimed_by == (username or "").strip())
                                 .values(claimed_by=None, claimed_at=None)).rowcount
            if not released:
                m = s.get(Mention, mention_id)
                if m is None:
                    raise KeyError(f"no mention {mention_id}")
                raise NotYourMention(_not_yours(s, m))
        # serialises decisions on PostgreSQL; NO KEY UPDATE (the key is never changed), so it does not wait on the
        # KEY SHARE locks that storing a suggestion for this mention takes, which deadlocked a decision with
        # another coder's prepare step (benchmarks/team_load.py: the row lock each wanted from the other)
        m = s.get(Mention, mention_id, with_for_update={"key_share": True})
        if m is None:
            raise KeyError(f"no mention {mention_id}")
        vocab_id = m.batch.vocabulary_id
        user = acting_user(s, username)
        if action == "skip" and m.status == "flagged":  # a lead passing a coder's question: it stays asked, by its
            m.updated_at, m.claimed_by, m.claimed_at = utcnow(), None, None  # coder (a team test's skip erased it)
            audit(s, user, "skip", "mention", m.id, {"previous_status": "flagged", "kept": "the flag"})
            s.commit()
            return s.scalar(select(Decision.id).where(Decision.mention_id == m.id, Decision.is_latest))
        sug = shown_suggestion_row(s, mention_id, screen)
        if action == "accept" and not terms:
            if sug is None or not sug.chosen:
                raise ValueError("accept needs terms: this mention has no suggestion to accept")
            terms = list(sug.chosen)
        if action == "correct" and not terms:
            raise ValueError("correct needs the chosen terms")
        if action == "reject" and terms:
            raise ValueError("reject takes no terms (use correct to give the right ones)")
        rows = term_rows(s, vocab_id, terms) if action in ("accept", "correct") else {}
        unknown = [t for t in terms if t not in rows] if action in ("accept", "correct") else []
        if unknown:
            raise ValueError(f"not terms of the batch's vocabulary (edition in force): {', '.join(unknown)}")
        chosen_codes = [_chosen_code(rows[t], (codes or {}).get(t)) for t in terms] if rows else []
        n_shown = SHOWN_CANDIDATES if shown is None else max(0, int(shown))
        on_screen = screen.candidates if screen else sug.candidates if sug else []  # what the coder saw
        shown_terms = list(dict.fromkeys(c.term for c in on_screen[:n_shown]))
        previous_status = m.status
        asked = (s.scalar(select(Decision).where(Decision.mention_id == m.id, Decision.is_latest).limit(1))
                 if previous_status == REREVIEW else None)
        d = Decision(mention_id=m.id, user_id=user.id, suggestion_id=sug.id if sug else None, action=action,
                     terms=terms, term_ids=[rows[t].id for t in terms] if rows else [], codes=chosen_codes,
                     edition=m.batch.vocabulary.edition,
                     relationship=(relationship or default_relationship(
                         terms, (asked.terms, asked.relationship) if asked else None)) if rows else None,
                     review_status=REVIEW_AFTER.get(action, "unchecked"), review_note=_answering(asked, terms),
                     comment=(comment or "").strip(), seconds=max(0.0, float(seconds or 0.0)),
                     model_version=screen.model_version if screen else sug.model_version if sug else None,
                     is_latest=True)
        s.add(d)
        s.flush()
        pairs = supersede_and_pairs(s, m, d, vocab_id, terms, shown_terms)
        m.status = STATUS_AFTER[action]
        m.claimed_by = m.claimed_at = None  # decided (or skipped): back to the queue's rules
        audit(s, user, action, "mention", m.id,
              {"decision_id": d.id, "terms": terms, "codes": chosen_codes, "relationship": d.relationship,
               "comment": d.comment, "previous_status": previous_status,
               "model_version": d.model_version, "positives": sum(p["label"] for p in pairs),
               "hard_negatives": sum(1 - p["label"] for p in pairs)})
        s.commit()
    except BaseException:
        s.rollback()
        raise
    return d.id


#: how the review note of a decision answering a re-review starts (the Review page marks its status with it)
REREVIEW_ANSWER = "answers the re-review"


def _answering(asked: Decision | None, terms: list[str]) -> str:
    """The review note of a decision that answers a re-review (``asked``: the decision sent back, None if none):
    what was asked, and whether the terms changed. A user test saw a disputed code saved again unchanged with one
    key, and the lead's table showed it as any new decision."""
    if asked is None:
        return ""
    was = " + ".join(asked.terms or []) or asked.action
    same = bool(terms) and sorted(terms) == sorted(asked.terms or [])
    return (f"{REREVIEW_ANSWER} ({asked.review_note or 'sent to re-review'}): "
            + ("the same terms again" if same else f"was {was}"))


def _chosen_code(term: Term, picked: str | None) -> str | None:
    """The code exported for ``term``: the coder's pick (one of the term's codes) or the term's export code."""
    if picked is None or picked == "":
        return term.code
    if picked not in (term.codes or []):
        raise ValueError(f"{picked!r} is not a code of {term.name!r} (its codes: {', '.join(term.codes or [])})")
    return picked


def _not_yours(s: Session, m: Mention) -> str:
    """Why an action on ``m`` is refused: what the coder should know about the mention now."""
    latest = s.scalar(select(Decision).where(Decision.mention_id == m.id, Decision.is_latest).limit(1))
    if m.claimed_by:
        return f"mention #{m.position} is now on {m.claimed_by}'s screen: nothing saved"
    if latest is not None:
        return (f"mention #{m.position} was already decided ({latest.action} by {latest.user.username}): "
                "nothing saved for it; the page shows the next mention")
    return f"mention #{m.position} is not on your screen any more: nothing saved"


def supersede_and_pairs(s: Session, m: Mention, d: Decision, vocab_id: int, terms: list[str],
                        shown_terms: list[str]) -> list[dict]:
    # "the latest wins": older decisions and their pairs stay for history but stop counting.
    # Updating rows *other than* the new one after inserting it stays right when two coders
    # decide the same mention at once (SQLite serialises the two write transactions).
    s.execute(update(Decision).where(Decision.mention_id == m.id, Decision.id != d.id, Decision.is_latest)
              .values(is_latest=False))
    s.execute(update(TrainingPair).where(TrainingPair.mention_id == m.id, TrainingPair.decision_id != d.id,
                                         TrainingPair.active).values(active=False))
    kind = {"accept": "accepted", "correct": "corrected"}.get(d.action)
    pairs = [(t, 1, kind) for t in terms] if kind else []
    if d.relationship == NOT_RELATED:  # the terms named are what the mention is not
        pairs = [(t, 0, "rejected_candidate") for t in terms]
    elif d.action == "correct":
        pairs += [(t, 0, "rejected_candidate") for t in shown_terms if t not in terms]
    elif d.action == "reject":
        pairs += [(t, 0, "rejected_candidate") for t in shown_terms]
    ids = term_ids(s, vocab_id, [t for t, _, _ in pairs])
    rows = [{"vocabulary_id": vocab_id, "mention_id": m.id, "decision_id": d.id, "mention_text": m.text,
             "term": t, "term_id": ids.get(t), "label": lab, "kind": k, "active": True,
             "created_at": d.at or utcnow()}
            for t, lab, k in pairs]
    if rows:
        s.execute(insert(TrainingPair), rows)
    return rows


# ================================================================ history / training pairs for the engine
def last_saved(s: Session, batch_id: int, username: str) -> dict | None:
    """The user's latest decision in the batch, as the database holds it (position, action, terms, the code kept
    for each, at): what the coding page shows as "last saved", so a coder whose screen went away mid-save (a
    restart, a dropped connection) reads what was kept rather than guessing."""
    row = s.execute(select(Mention.position, Decision.action, Decision.terms, Decision.codes, Decision.at)
                    .join(Mention, Mention.id == Decision.mention_id).join(User, User.id == Decision.user_id)
                    .where(Mention.batch_id == batch_id, User.username == username)
                    .order_by(Decision.at.desc(), Decision.id.desc()).limit(1)).first()
    if row is None:
        return None
    return {"position": row.position, "action": row.action, "terms": list(row.terms or []),
            "codes": list(row.codes or []), "at": row.at}


def coded_mentions(s: Session, vocabulary_id: int, after: int = 0) -> list[LabelledMention]:
    """Mentions whose latest decision accepted or corrected terms: the engine's coded history.

    One per distinct mention text and document (the most recent decision wins; the engine reads a mention
    in its document, termnorm.reading). Auto-coded
    mentions are left out: feeding the engine its own unconfirmed output back as
    history would only reinforce its mistakes. So are decisions sent to
    re-review: their term was retired or re-coded, or a lead questioned them
    (the engine would otherwise put a retired term back among its terms:
    ``Engine`` adds the coded history's names to the vocabulary), and decisions stating the mention is not
    related to their terms (:data:`NOT_RELATED`). ``after``: only decisions with a greater id (those made since a
    catch-up that read up to it).
    """
    q = (select(Mention.text, Decision.terms, Mention.source_row, Mention.document)
         .join(Decision, Decision.mention_id == Mention.id).join(Batch, Batch.id == Mention.batch_id)
         .where(Batch.vocabulary_id == vocabulary_id, Decision.is_latest,
                Decision.action.in_(("accept", "correct")), Decision.review_status != "needs_rereview", MAPS,
                Decision.id > after)
         .order_by(Decision.id))
    latest: dict[tuple, LabelledMention] = {}
    for text, terms, row, document in s.execute(q):  # a text per document: FED is not FED in another note
        latest.pop((text, document), None)
        latest[(text, document)] = LabelledMention(text, list(terms), row, document=document or "")
    return list(latest.values())


def training_pairs_frame(s: Session, vocabulary_id: int | None = None, active_only: bool = True) -> pd.DataFrame:
    """Confirmed (mention, term, label, kind) pairs for retraining the engine."""
    q = select(TrainingPair).order_by(TrainingPair.id)
    if vocabulary_id is not None:
        q = q.where(TrainingPair.vocabulary_id == vocabulary_id)
    if active_only:
        q = q.where(TrainingPair.active)
    cols = ["id", "vocabulary_id", "mention_id", "decision_id", "mention", "term", "label", "kind", "active",
            "created_at"]
    return pd.DataFrame([[p.id, p.vocabulary_id, p.mention_id, p.decision_id, p.mention_text, p.term, p.label,
                          p.kind, p.active, p.created_at] for p in s.scalars(q)], columns=cols)
