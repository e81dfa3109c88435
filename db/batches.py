"""Batches of mentions and the coders' queue: creating and importing batches, their progress, the mentions,
and :func:`next_mention`, which serves and claims the next mention for a coder (:func:`claimed_by_others`
counts the mentions on colleagues' screens).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import timedelta, timezone

from sqlalchemy import case, func, insert, select, update
from sqlalchemy.orm import Session

from db import imports as dbio
from db.accounts import acting_user, audit
from db.models import Batch, Decision, Mention, Term, User, Vocabulary as VocabularyRow, utcnow
from termnorm.errors import DataFormatError
from termnorm.records import LabelledMention

# How long a mention served to one coder is kept from the others (next_mention); a decision ends it sooner.
CLAIM_MINUTES = 15

FINAL_STATUSES = ("decided", "auto_coded")  # counted as done by batch_progress / batches
OPEN_STATUSES = ("new", "suggested")  # the review queue proper
# mentions whose decision needs another look (retired / re-coded term, sent back by a lead): served first
REREVIEW = "rereview"
RETURN_HOURS = 48  # a decision a lead sent back waits this long for the coder who made it, then goes to anyone
SENT_BACK = "sent back by "  # how db.review.send_back's note begins

# the order coders are served in (a batch's queue_order): the file's; the least confident stored suggestion first
# (active learning); the most confident first (quick confirmations); the text most rows share first (a pre-coded
# history: coding its frequent strings first settles most rows soonest, as Usagi does)
ORDERS = ("file", "uncertainty", "confidence", "frequency")
ORDER_LABELS = {"file": "file order", "uncertainty": "least confident first (active learning)",
                "confidence": "most confident first", "frequency": "most frequent text first"}


# ================================================================ batches / mentions
def create_batch(s: Session, name: str, vocabulary_id: int, mentions: Sequence[str | LabelledMention],
                 username: str | None = None, source_file: str = "", commit: bool = True) -> int:
    """A batch of mentions in the given order (``position`` 1..n); returns its id.

    Items may be strings or LabelledMention (gold terms and source row kept).
    Raises DataFormatError(source, item number, problem) on an empty or too long mention.
    """
    if s.get(VocabularyRow, vocabulary_id) is None:
        raise KeyError(f"no vocabulary {vocabulary_id}")
    items = [m if isinstance(m, LabelledMention) else LabelledMention(str(m) if m is not None else "", [])
             for m in mentions]
    for i, m in enumerate(items, start=1):
        problem = dbio.validate_mention(m.text)
        if problem:
            raise DataFormatError(source_file or name, m.row or i, problem)
    user = acting_user(s, username) if username else None
    b = Batch(name=name, vocabulary_id=vocabulary_id, source_file=source_file,
              created_by_id=user.id if user else None)
    s.add(b)
    s.flush()
    now = utcnow()
    if items:
        s.execute(insert(Mention), [
            {"batch_id": b.id, "position": i, "text": m.text.strip(), "gold_terms": list(m.terms) or None,
             "source_row": m.row, "status": "new", "updated_at": now, "document": m.document or None}
            for i, m in enumerate(items, start=1)])
    if any(m.terms for m in items):  # labelled mentions take their side of the evaluation split (db.learning)
        from db import learning  # db.learning builds on db.services: a top-level import would be a cycle

        learning.assign_unassigned(s, vocabulary_id)
    audit(s, user, "create", "batch", b.id, {"name": name, "n_mentions": len(items), "source_file": source_file})
    if commit:  # else part of the caller's transaction (db.precoded)
        s.commit()
    return b.id


def import_mentions(s: Session, path, batch_name: str, vocabulary_id: int,
                    username: str | None = None, again: bool = False) -> dbio.ImportReport:
    """Import a CSV / XLSX / CHIP-CDN JSON file (a path or an uploaded file) as a new batch.

    Bad rows are reported (file, row, problem) and skipped; good rows are
    imported, with notices on what was cleaned and on gold terms the vocabulary
    lacks. No batch is created when no row is good. Never raises for bad content.
    A file whose good rows are the very mentions of a batch of the vocabulary (the same file imported
    twice: coders would code every mention twice) imports nothing and names that batch in
    ``duplicate_of``, unless ``again``.
    """
    read = dbio.read_mentions_report(path)
    _keep_gold_to_leads(s, read, username)
    if read.good and not again:
        earlier = same_mentions_batch(s, vocabulary_id, [m.text for m in read.good])
        if earlier is not None:
            return dbio.ImportReport(file=read.file, n_read=read.n_read, duplicate_of=earlier)
    notices = sorted(read.notices + _unknown_gold_notices(s, vocabulary_id, read.file, read.good),
                     key=lambda n: n.row or 0)
    report = dbio.ImportReport(file=read.file, errors=read.errors, notices=notices,
                               n_read=read.n_read, n_rejected=read.n_rejected, gold_from=read.gold_from,
                               sheets_left=read.sheets_left)
    if read.good:
        report.batch_id = create_batch(s, free_name(s, vocabulary_id, batch_name, report), vocabulary_id,
                                       read.good, username=username, source_file=read.file)
        report.n_imported = len(read.good)
        report.n_gold = sum(1 for m in read.good if m.terms)
    if report.errors or report.notices:
        user = acting_user(s, username) if username else None
        audit(s, user, "import_problems", "batch", report.batch_id,
              {"file": read.file, "n_read": report.n_read, "n_ok": report.n_imported,
               "n_rejected": report.n_rejected, "problems": [list(e) for e in report.errors[:200]],
               "notices": [list(n) for n in report.notices[:200]]})
        s.commit()
    return report


def _keep_gold_to_leads(s: Session, read: dbio.MentionsRead, username: str | None) -> None:
    """Gold terms in a file a coder or annotator imports are not taken as right answers: gold trains the engine and
    measures it, so a lead or an admin imports it. The mentions are imported to be coded, and a notice says so.
    Without sign-in (the one-coder demo), or without an account named (a script run by IT), the gold is kept."""
    from db import auth  # db.auth imports db.services, which imports this module

    if not username or not read.gold_from or not auth.auth_enabled():
        return
    user = s.scalar(select(User).where(User.username == username.strip()))
    if user is None or auth.has_role(user.role, "lead"):
        return
    n = sum(1 for m in read.good if m.terms)
    read.good = [replace(m, terms=[]) for m in read.good]
    read.notices.append(dbio.ImportProblem(
        read.file, None, f"the gold terms of {read.gold_from} ({n:,} row(s)) were not imported as right answers: "
                         "only a lead or an admin imports gold; the mentions are imported to be coded"))
    read.gold_from = ""


def free_name(s: Session, vocabulary_id: int, name: str, report: dbio.ImportReport) -> str:
    """``name``, or ``name (2)`` ... when the vocabulary has a batch of that name already (said in a notice)."""
    taken = set(s.scalars(select(Batch.name).where(Batch.vocabulary_id == vocabulary_id,
                                                   func.lower(Batch.name).like(f"{name.lower()}%"))))
    free, k = name, 1
    while free in taken:
        k += 1
        free = f"{name} ({k})"
    if free != name:
        report.notices.append(dbio.ImportProblem(report.file, None, f"a batch named {name!r} exists already: "
                                                                    f"this one is {free!r}"))
    return free


def same_mentions_batch(s: Session, vocabulary_id: int, texts: Sequence[str]) -> dict | None:
    """The latest batch of the vocabulary holding exactly ``texts`` in this order, as ``{"id", "name",
    "created_at", "n"}`` (``n`` its mentions); None if none. Only batches of the same size are read."""
    want = [t.strip() for t in texts]
    sized = s.scalars(select(Mention.batch_id).join(Batch, Batch.id == Mention.batch_id)
                      .where(Batch.vocabulary_id == vocabulary_id).group_by(Mention.batch_id)
                      .having(func.count() == len(want))).all()
    for bid in sorted(sized, reverse=True):
        if list(s.scalars(select(Mention.text).where(Mention.batch_id == bid).order_by(Mention.position))) == want:
            b = s.get(Batch, bid)
            return {"id": b.id, "name": b.name, "created_at": b.created_at, "n": len(want)}
    return None


def _unknown_gold_notices(s: Session, vocabulary_id: int, fname: str,
                          mentions: Sequence[LabelledMention]) -> list[dbio.ImportProblem]:
    """A notice per mention whose gold terms include names the vocabulary does not have."""
    if not any(m.terms for m in mentions):
        return []
    q = select(Term.name).where(Term.vocabulary_id == vocabulary_id)
    # a retired term is no longer an answer the engine gives (the column comes with migration 0004)
    retired = getattr(Term, "retired_edition", None)
    if retired is not None:
        q = q.where(retired.is_(None))
    names = set(s.scalars(q))
    vocab = s.get(VocabularyRow, vocabulary_id)
    vname = vocab.name if vocab is not None else str(vocabulary_id)
    out = []
    for m in mentions:
        unknown = [t for t in m.terms if t not in names]
        if unknown:
            listed = ", ".join(repr(t) for t in unknown)
            out.append(dbio.ImportProblem(fname, m.row, f"gold term{'s' if len(unknown) > 1 else ''} not in "
                                          f"vocabulary {vname}: {listed} (kept as given; the engine cannot "
                                          f"suggest {'them' if len(unknown) > 1 else 'it'})"))
    return out


def batches(s: Session, vocabulary_id: int | None = None) -> list[dict]:
    """Batches with their size and how many mentions are done (decided or auto-coded)."""
    counts = (select(Mention.batch_id, func.count().label("n"),
                     func.sum(case((Mention.status.in_(FINAL_STATUSES), 1), else_=0)).label("done"))
              .group_by(Mention.batch_id).subquery())
    q = (select(Batch.id, Batch.name, Batch.vocabulary_id, Batch.created_at, Batch.queue_order,
                func.coalesce(counts.c.n, 0), func.coalesce(counts.c.done, 0))
         .outerjoin(counts, counts.c.batch_id == Batch.id).order_by(Batch.id))
    if vocabulary_id is not None:
        q = q.where(Batch.vocabulary_id == vocabulary_id)
    return [{"id": i, "name": n, "vocabulary_id": v, "created_at": at, "queue_order": o, "n_mentions": k,
             "n_done": d} for i, n, v, at, o, k, d in s.execute(q)]


def queue_order(s: Session, batch_id: int) -> str:
    """The order the batch's coders are served in (:data:`ORDERS`)."""
    return s.scalar(select(Batch.queue_order).where(Batch.id == batch_id)) or "file"


def set_queue_order(s: Session, batch_id: int, order: str, username: str | None = None, commit: bool = True) -> None:
    """Serve the batch's coders in ``order`` (:data:`ORDERS`) from their next mention on; audited."""
    if order not in ORDERS:
        raise ValueError(f"unknown order {order!r}; expected one of {', '.join(ORDERS)}")
    b = s.get(Batch, batch_id)
    if b is None:
        raise KeyError(f"no batch {batch_id}")
    before, b.queue_order = b.queue_order, order
    audit(s, acting_user(s, username) if username else None, "queue_order", "batch", batch_id,
          {"from": before, "to": order})
    if commit:
        s.commit()


def batch_progress(s: Session, batch_id: int) -> tuple[int, int]:
    """(mentions decided or auto-coded, all mentions) of a batch."""
    n, done = s.execute(select(func.count(), func.sum(case((Mention.status.in_(FINAL_STATUSES), 1), else_=0)))
                        .where(Mention.batch_id == batch_id)).one()
    return int(done or 0), int(n or 0)


def _mention_dict(m: Mention) -> dict:
    return {"id": m.id, "batch_id": m.batch_id, "position": m.position, "text": m.text, "status": m.status,
            "gold_terms": list(m.gold_terms or []), "source_row": m.source_row, "confidence": m.confidence}


def mention(s: Session, mention_id: int) -> dict:
    """A mention with its batch / vocabulary, latest decision and decision history (oldest first)."""
    m = s.get(Mention, mention_id)
    if m is None:
        raise KeyError(f"no mention {mention_id}")
    out = _mention_dict(m)
    out["vocabulary_id"] = m.batch.vocabulary_id
    out["batch"] = m.batch.name
    out["document"] = m.document or ""
    hist = s.execute(select(Decision, User.username).join(User, User.id == Decision.user_id)
                     .where(Decision.mention_id == mention_id).order_by(Decision.id)).all()
    out["decisions"] = [{"id": d.id, "user": u, "at": d.at, "action": d.action, "terms": list(d.terms),
                         "codes": list(d.codes or []), "term_ids": list(d.term_ids or []),
                         "relationship": d.relationship, "review_status": d.review_status,
                         "review_note": d.review_note, "edition": d.edition,
                         "comment": d.comment, "seconds": d.seconds, "model_version": d.model_version,
                         "is_latest": d.is_latest} for d, u in hist]
    out["decision"] = next((d for d in out["decisions"] if d["is_latest"]), None)
    return out


def mention_documents(s: Session, mention_ids: Sequence[int]) -> dict[int, str]:
    """mention id -> the text it was found in, for those of ``mention_ids`` imported with one (the engine reads
    their abbreviations in it; the lists of mentions leave documents out: they may be long notes)."""
    if not mention_ids:
        return {}
    rows = s.execute(select(Mention.id, Mention.document).where(Mention.id.in_(list(mention_ids)),
                                                                Mention.document.is_not(None)))
    return {i: d for i, d in rows if d}


def _order_keys(order: str) -> list:
    """Sort keys of a queue order (:data:`ORDERS`) before the file position: mentions lacking the value last."""
    if order == "uncertainty":
        return [Mention.confidence.is_(None), Mention.confidence]
    if order == "confidence":
        return [Mention.confidence.is_(None), Mention.confidence.desc()]
    if order == "frequency":
        return [Mention.frequency.is_(None), Mention.frequency.desc()]
    return []


def mentions(s: Session, batch_id: int, status: str | Sequence[str] | None = None,
             limit: int | None = None, order: str = "file") -> list[dict]:
    """Mentions of a batch in ``order`` (file order by default), optionally only those with the given
    status(es), at most ``limit``."""
    q = select(Mention).where(Mention.batch_id == batch_id).order_by(*_order_keys(order), Mention.position)
    if status is not None:
        q = q.where(Mention.status.in_([status] if isinstance(status, str) else list(status)))
    if limit is not None:
        q = q.limit(int(limit))
    return [_mention_dict(m) for m in s.scalars(q)]


#: Claim attempts of one next_mention call, and how far down the free mentions a retry looks.
CLAIM_ATTEMPTS, CLAIM_SPREAD = 60, 12


def next_mention(s: Session, batch_id: int, username: str, order: str | None = None,
                 claim: bool = True) -> dict | None:
    """The mention to review next, or None when the batch is finished.

    Mentions sent to re-review first (their decision's term was retired or
    re-coded by a new vocabulary edition, or a lead sent it back); then the
    first mention in file order without a final decision (status new or
    suggested); then the skipped ones, the longest untouched first (skipping one
    again sends it to the back), so skipping never loses a mention. Flagged
    mentions wait for a lead: they are queued only for users with role lead /
    admin, before the skipped ones (a team test's lead pressed K six times on the
    one skipped mention and never reached the flagged one). Because the queue is
    derived from the committed statuses, a restarted app resumes where the
    coder was. ``order`` (default: the batch's ``queue_order``) changes the
    order within each of those groups (:data:`ORDERS`): ``"uncertainty"``
    serves the least confident stored suggestion first (active learning),
    ``"confidence"`` the most confident, ``"frequency"`` the text most source
    rows share; mentions without that value come last, in file order.

    A decision a lead sent back is served to the coder who made it; to others only after :data:`RETURN_HOURS`.
    Coders sharing a batch get different mentions: the mention served is
    *claimed* for ``username`` (committed), and mentions other coders claimed
    less than :data:`CLAIM_MINUTES` ago are passed over. A coder's own claimed
    mention comes first, so the screen does not change under them; a decision
    releases the claim, and an abandoned screen's claim lapses. ``claim=False``
    only looks (nothing written, other coders' claims still respected).
    """
    if order is None:
        order = queue_order(s, batch_id)
    if order not in ORDERS:
        raise ValueError(f"unknown order {order!r}; expected one of {', '.join(ORDERS)}")
    me = s.execute(select(User.id, User.role).where(User.username == username)).first()
    lead = bool(me and me.role in ("lead", "admin"))
    later = ("skipped", "flagged") if lead else ("skipped",)
    for attempt in range(CLAIM_ATTEMPTS):  # another coder may claim the same mention between our read and write
        now = utcnow()
        cutoff = now - timedelta(minutes=CLAIM_MINUTES)
        mine = (Mention.claimed_by == username) & (Mention.claimed_at >= cutoff)
        free = Mention.claimed_by.is_(None) | (Mention.claimed_by == username) | (Mention.claimed_at < cutoff)
        # a decision a lead sent back goes back to its coder (a user test's lead note reached another coder) until
        # RETURN_HOURS have passed, so an absent coder's work does not wait for ever
        free &= ~select(Decision.id).where(
            Decision.mention_id == Mention.id, Decision.is_latest, Decision.review_status == "needs_rereview",
            Decision.review_note.startswith(SENT_BACK), Decision.reviewed_at >= now - timedelta(hours=RETURN_HOURS),
            Decision.user_id != (me.id if me else -1)).exists()
        tier = case((Mention.status == REREVIEW, 0), (Mention.status.in_(OPEN_STATUSES), 1),
                    (Mention.status == "skipped", 3 if lead else 2), else_=2 if lead else 3)
        # skipped mentions come round in turn, the longest untouched first: in file order a coder skipping the
        # first of the skipped ones was served it again and again, the others out of reach
        turn = case((Mention.status.in_(("skipped", "flagged")), Mention.updated_at), else_=None)
        keys = [case((mine, 0), else_=1), tier, turn, *_order_keys(order)]
        q = (select(Mention.id, Mention.text, Mention.position, Mention.status, Mention.claimed_by,
                    Mention.claimed_at, Mention.frequency)
             .where(Mention.batch_id == batch_id, Mention.status.in_((REREVIEW,) + OPEN_STATUSES + later), free)
             .order_by(*keys, Mention.position).limit(1))
        # after a lost race, the next free mentions in turn: twenty coders asking at once would otherwise all
        # race for the same first one (benchmarks/team_load.py: some were told the batch was finished)
        skip = attempt % CLAIM_SPREAD
        r = s.execute(q.offset(skip)).first()
        if r is None:
            if skip == 0:
                return None  # nothing free at all
            continue
        out = {"id": r.id, "text": r.text, "position": r.position, "status": r.status, "frequency": r.frequency}
        fresh = now - timedelta(minutes=CLAIM_MINUTES / 2)
        if not claim or (r.claimed_by == username and _aware(r.claimed_at) >= fresh):
            return out  # looking only, or our own claim is recent: no write on every redraw
        try:
            # still free AND still open: a colleague may have decided it since the read (their decision frees
            # the claim), and claiming it then would serve a decided mention (benchmarks/team_load.py, 20 coders)
            won = s.execute(update(Mention).where(Mention.id == r.id, free,
                                                  Mention.status.in_((REREVIEW,) + OPEN_STATUSES + later))
                            .values(claimed_by=username, claimed_at=now)).rowcount
            if won:  # one claim per coder and batch: the mention left behind is free again
                s.execute(update(Mention).where(Mention.batch_id == batch_id, Mention.id != r.id,
                                                Mention.claimed_by == username)
                          .values(claimed_by=None, claimed_at=None))
            s.commit()
        except BaseException:
            s.rollback()
            raise
        if won:
            return out
    return None


def _aware(t):
    """SQLite hands timestamps back without their zone; they are stored in UTC."""
    return t if t is None or t.tzinfo is not None else t.replace(tzinfo=timezone.utc)


def claimed_by_others(s: Session, batch_id: int, username: str) -> int:
    """How many open mentions of the batch other coders have on their screens now."""
    cutoff = utcnow() - timedelta(minutes=CLAIM_MINUTES)
    return s.scalar(select(func.count()).select_from(Mention).where(
        Mention.batch_id == batch_id, Mention.claimed_by.is_not(None), Mention.claimed_by != username,
        Mention.claimed_at >= cutoff, Mention.status.not_in(FINAL_STATUSES))) or 0


def last_batch(s: Session, username: str) -> dict | None:
    """Where the user was last at work: the batch of their latest decision or live claim, whichever came later
    (``{"id", "vocabulary_id"}``), while it has mentions left to decide; else None. A new sign-in opens it rather
    than the first batch of the list (a finished one would only say so)."""
    cutoff = utcnow() - timedelta(minutes=CLAIM_MINUTES)
    held = s.execute(select(Mention.batch_id, Mention.claimed_at)
                     .where(Mention.claimed_by == username, Mention.claimed_at >= cutoff)
                     .order_by(Mention.claimed_at.desc()).limit(1)).first()
    decided = s.execute(select(Mention.batch_id, Decision.at).join(Decision, Decision.mention_id == Mention.id)
                        .join(User, User.id == Decision.user_id).where(User.username == username)
                        .order_by(Decision.at.desc(), Decision.id.desc()).limit(1)).first()
    found = [r for r in (held, decided) if r is not None]
    if not found:
        return None
    batch_id = max(found, key=lambda r: _aware(r[1]))[0]
    if s.scalar(select(Mention.id).where(Mention.batch_id == batch_id, Mention.status.not_in(FINAL_STATUSES))
                .limit(1)) is None:
        return None
    return {"id": batch_id, "vocabulary_id": s.scalar(select(Batch.vocabulary_id).where(Batch.id == batch_id))}


def release_claim(s: Session, mention_id: int | None, username: str) -> bool:
    """The coder leaves a mention undecided (signs out, switches batch): their claim on it (``None``: on every
    mention, in every batch, as at sign-out) is dropped at once instead of lapsing after CLAIM_MINUTES
    (committed). False when they held no such claim."""
    q = update(Mention).where(Mention.claimed_by == username)
    n = s.execute((q if mention_id is None else q.where(Mention.id == mention_id))
                  .values(claimed_by=None, claimed_at=None)).rowcount
    s.commit()
    return bool(n)


def claims(s: Session, batch_id: int | Sequence[int]) -> list[dict]:
    """Who holds which open mention of the batch (or of each of several batches: one query) now, a lead's view,
    oldest claim first."""
    cutoff = utcnow() - timedelta(minutes=CLAIM_MINUTES)
    ids = [batch_id] if isinstance(batch_id, int) else list(batch_id)
    q = (select(Mention.id, Mention.batch_id, Mention.position, Mention.text, Mention.claimed_by, Mention.claimed_at)
         .where(Mention.batch_id.in_(ids), Mention.claimed_by.is_not(None), Mention.claimed_at >= cutoff,
                Mention.status.not_in(FINAL_STATUSES)).order_by(Mention.claimed_at))
    return [{"mention_id": i, "batch_id": b, "position": p, "text": t, "coder": c, "since": _aware(at)}
            for i, b, p, t, c, at in s.execute(q)]


def release_claims(s: Session, lead: str, batch_id: int, coder: str | None = None) -> int:
    """A lead frees the open mentions of a batch held by ``coder`` (None: by anyone), e.g. a coder who left for
    the day; audited; returns how many were released."""
    from db import auth

    user = auth.require(s, lead, "lead")
    q = update(Mention).where(Mention.batch_id == batch_id, Mention.claimed_by.is_not(None),
                              Mention.status.not_in(FINAL_STATUSES))
    if coder is not None:
        q = q.where(Mention.claimed_by == coder)
    n = s.execute(q.values(claimed_by=None, claimed_at=None)).rowcount
    audit(s, user, "release_claims", "batch", batch_id, {"coder": coder, "released": n})
    s.commit()
    return int(n or 0)


def claim(s: Session, mention_id: int, username: str) -> bool:
    """Claim one open mention for ``username`` now (committed): free, already theirs, or a lapsed claim. False
    when a colleague holds it or it has a final decision -- so a lead who was only looking, then acts, takes
    the mention the way a coder's page load does, and a second click after the decision is refused."""
    now = utcnow()
    cutoff = now - timedelta(minutes=CLAIM_MINUTES)
    free = Mention.claimed_by.is_(None) | (Mention.claimed_by == username) | (Mention.claimed_at < cutoff)
    n = s.execute(update(Mention).where(Mention.id == mention_id, Mention.status.not_in(FINAL_STATUSES), free)
                  .values(claimed_by=username, claimed_at=now)).rowcount
    s.commit()
    return bool(n)
