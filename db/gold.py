"""Gold data: independent double annotation, agreement, adjudication (the lead's gold set).

The engine's published numbers (approaches A..E of methods.md) are exact-set
accuracy and micro-F1 against gold terms. For a hospital's own mentions that
gold has to be built, and it is only worth measuring against when independent
coders agree on it. A lead therefore:

1. creates a **gold task** from a batch -- every mention or a random sample of
   N -- each mention going to ``per_mention`` (default 2) of the chosen
   annotators, in rotation so that every annotator and every pair get about
   the same share (:func:`create_gold_task`);
2. annotators answer independently (:func:`record_annotation`), in ``blind``
   mode (no engine suggestion shown: a shown suggestion anchors annotators and
   inflates both agreement and the engine's measured accuracy) or ``assisted``
   mode (ranked candidates shown, faster);
3. a mention on which every assigned annotator gave the same set goes to the
   gold set at once (``GoldLabel.source = "agreed"``); the others wait in the
   adjudication queue (:func:`disagreement_queue`) until a lead decides
   (:func:`adjudicate`, ``source = "adjudicated"``);
4. agreement per annotator pair and per task (Cohen's κ, Fleiss' κ,
   Krippendorff's α, exact-set agreement) comes from
   :func:`termnorm.agreement.agreement_report` (:func:`task_agreement`).

Gold annotations are *not* coding decisions: they write no Decision and no
training pair and never reach the engine's history, so the gold set stays
held out from what the engine learns.

Role checks (db.auth): lead for creating tasks, seeing other people's
annotations, agreement and adjudicating; annotator (or above) *and* an
assignment for annotating. Violations raise PermissionError.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import pandas as pd
from sqlalchemy import and_, func, select, update
from sqlalchemy.orm import Session

from db import accounts, auth, decisions, vocabularies
from db import exports
from db.models import (GOLD_MODES, AuditLog, Batch, GoldAnnotation, GoldAssignment, GoldLabel, GoldTask, Mention,
                       Term, User, utcnow)
from termnorm import agreement

# Each mention goes to two annotators unless the lead asks for more: two is the least that measures
# agreement (Cohen's κ) and the usual design of double annotation with adjudication (e.g. the CHIP-CDN
# and Yidu-N7K gold sets were coded by more than one coder and disagreements settled by an expert).
DEFAULT_PER_MENTION = 2
GOLD_EXPORT_FORMATS = ("csv", "xlsx", "jsonl", "chip-cdn")


# ================================================================ helpers
def _task(s: Session, task_id: int) -> GoldTask:
    t = s.get(GoldTask, task_id)
    if t is None:
        raise KeyError(f"no gold task {task_id}")
    return t


def _clean_terms(terms) -> list[str]:
    return decisions.clean_terms(terms)


def _check_terms(s: Session, task: GoldTask, terms: list[str]) -> None:
    known = vocabularies.term_ids(s, task.batch.vocabulary_id, terms)
    unknown = [t for t in terms if t not in known]
    if unknown:
        raise ValueError(f"not terms of the task's vocabulary: {', '.join(unknown)}")


def _assigned(s: Session, task_id: int, mention_id: int) -> list[tuple[int, str]]:
    """(user id, username) of the annotators assigned to a mention of a task, by username."""
    q = (select(User.id, User.username).join(GoldAssignment, GoldAssignment.user_id == User.id)
         .where(GoldAssignment.task_id == task_id, GoldAssignment.mention_id == mention_id)
         .order_by(User.username))
    return [tuple(r) for r in s.execute(q)]


def _latest_sets(s: Session, task_id: int, mention_id: int) -> dict[int, list[str]]:
    q = select(GoldAnnotation.user_id, GoldAnnotation.terms).where(
        GoldAnnotation.task_id == task_id, GoldAnnotation.mention_id == mention_id, GoldAnnotation.is_latest)
    return {u: list(t) for u, t in s.execute(q)}


def _label(s: Session, task_id: int, mention_id: int) -> GoldLabel | None:
    return s.scalar(select(GoldLabel).where(GoldLabel.task_id == task_id, GoldLabel.mention_id == mention_id))


def _audit(s: Session, user: User | None, action: str, object_type: str, object_id: int | None,
           details: dict) -> None:
    accounts.audit(s, user, action, object_type, object_id, details)


# ================================================================ tasks (lead)
def create_gold_task(s: Session, acting_user: str, name: str, batch_id: int, annotators: Sequence[str], *,
                     per_mention: int = DEFAULT_PER_MENTION, mode: str = "blind", sample: int | None = None,
                     seed: int = 0, mention_ids: Sequence[int] | None = None) -> int:
    """Create a gold task (lead only) and return its id.

    ``annotators``: usernames with role annotator or above (enabled). Each
    mention goes to ``per_mention`` of them (2 <= per_mention <= number of
    annotators) in rotation: mention i gets annotators i·p, i·p+1, ...
    (mod n), so each annotator gets ~p/n of the mentions and each pair the
    same share. Mentions: ``mention_ids`` if given (must belong to the
    batch), else every mention of the batch, or a random ``sample`` of N
    drawn with ``random.Random(seed)`` (reproducible); kept in file order.
    ``mode``: ``blind`` (no suggestion shown) or ``assisted``.
    """
    actor = auth.require(s, acting_user, "lead")
    name = (name or "").strip()
    if not name:
        raise ValueError("a gold task needs a name")
    if mode not in GOLD_MODES:
        raise ValueError(f"unknown mode {mode!r}; expected one of {', '.join(GOLD_MODES)}")
    batch = s.get(Batch, batch_id)
    if batch is None:
        raise KeyError(f"no batch {batch_id}")
    same = s.scalar(select(GoldTask.id).where(GoldTask.batch_id == batch_id, GoldTask.name == name).limit(1))
    if same is not None:  # a double click made two alike tasks, and annotators were sent to do the work twice
        raise ValueError(f"gold task #{same} of this batch is named {name!r} already: give the new one another name")
    names = list(dict.fromkeys(a.strip() for a in annotators if a and a.strip()))
    users = {u.username: u for u in s.scalars(select(User).where(User.username.in_(names)))}
    bad = [a for a in names if a not in users or users[a].disabled_at is not None
           or not auth.has_role(users[a].role, "annotator")]
    if bad:
        raise ValueError(f"not an enabled annotator (role annotator, lead or admin): {', '.join(bad)}")
    per_mention = int(per_mention)
    if not 2 <= per_mention <= len(names):
        raise ValueError(f"each mention needs 2 to {len(names)} annotators (got {per_mention}); "
                         f"agreement needs at least two")
    rows = s.execute(select(Mention.id, Mention.position).where(Mention.batch_id == batch_id)
                     .order_by(Mention.position)).all()
    ids = [r.id for r in rows]
    if mention_ids is not None:
        wanted = set(int(i) for i in mention_ids)
        missing = wanted - set(ids)
        if missing:
            raise ValueError(f"mentions not in batch {batch_id}: {sorted(missing)[:5]}")
        ids = [i for i in ids if i in wanted]
    if sample is not None and 0 < int(sample) < len(ids):
        picked = set(random.Random(seed).sample(ids, int(sample)))
        ids = [i for i in ids if i in picked]  # file order, not draw order
    if not ids:
        raise ValueError("the gold task would have no mention")
    task = GoldTask(name=name, batch_id=batch_id, mode=mode, annotators_per_mention=per_mention,
                    sample_size=int(sample) if sample else None, seed=seed if sample else None,
                    created_by_id=actor.id)
    s.add(task)
    s.flush()
    n = len(names)
    assignments = [{"task_id": task.id, "mention_id": mid, "user_id": users[names[(i * per_mention + j) % n]].id}
                   for i, mid in enumerate(ids) for j in range(per_mention)]
    s.execute(GoldAssignment.__table__.insert(), assignments)
    _audit(s, actor, "create_gold_task", "gold_task", task.id,
           {"name": name, "batch_id": batch_id, "mode": mode, "per_mention": per_mention, "annotators": names,
            "n_mentions": len(ids), "sample": sample, "seed": seed if sample else None})
    s.commit()
    return task.id


def task(s: Session, task_id: int) -> dict:
    """A task's settings (anyone signed in may read them: the annotate page needs the mode)."""
    t = _task(s, task_id)
    n = s.scalar(select(func.count(func.distinct(GoldAssignment.mention_id))).where(GoldAssignment.task_id == t.id))
    names = list(s.scalars(select(User.username).join(GoldAssignment, GoldAssignment.user_id == User.id)
                           .where(GoldAssignment.task_id == t.id).distinct().order_by(User.username)))
    creator = s.get(User, t.created_by_id) if t.created_by_id else None
    return {"id": t.id, "name": t.name, "batch_id": t.batch_id, "batch": t.batch.name,
            "vocabulary_id": t.batch.vocabulary_id, "mode": t.mode, "per_mention": t.annotators_per_mention,
            "sample_size": t.sample_size, "seed": t.seed, "n_mentions": int(n or 0), "annotators": names,
            "created_by": creator.username if creator else "", "created_at": t.created_at}


def gold_tasks(s: Session, acting_user: str, batch_id: int | None = None,
               vocabulary_id: int | None = None) -> list[dict]:
    """Every task (lead only) with its progress.

    Extra keys: ``n_assignments``, ``n_annotated`` (assignments answered),
    ``n_complete`` (mentions every assignee answered), ``n_agreed``,
    ``n_adjudicated``, ``n_to_adjudicate`` (complete mentions with differing
    sets and no adjudicated label).
    """
    auth.require(s, acting_user, "lead")
    q = select(GoldTask.id).join(Batch, Batch.id == GoldTask.batch_id).order_by(GoldTask.id)
    if batch_id is not None:
        q = q.where(GoldTask.batch_id == batch_id)
    if vocabulary_id is not None:
        q = q.where(Batch.vocabulary_id == vocabulary_id)
    out = []
    for tid in s.scalars(q).all():
        d = task(s, tid)
        d.update(_progress(s, tid))
        out.append(d)
    return out


def _label_sources(s: Session, task_id: int) -> dict[int, str]:
    """mention id -> how its gold label came (agreed / adjudicated), for the task's labelled mentions."""
    return dict(s.execute(select(GoldLabel.mention_id, GoldLabel.source).where(GoldLabel.task_id == task_id)).all())


def _progress(s: Session, task_id: int) -> dict:
    ann = (select(GoldAnnotation.mention_id, GoldAnnotation.user_id)
           .where(GoldAnnotation.task_id == task_id, GoldAnnotation.is_latest).subquery())
    per = s.execute(
        select(GoldAssignment.mention_id, func.count(), func.count(ann.c.user_id))
        .outerjoin(ann, and_(ann.c.mention_id == GoldAssignment.mention_id, ann.c.user_id == GoldAssignment.user_id))
        .where(GoldAssignment.task_id == task_id).group_by(GoldAssignment.mention_id)).all()
    complete = {m for m, n, k in per if n == k}
    labels = _label_sources(s, task_id)
    agreed = sum(1 for src in labels.values() if src == "agreed")
    adjudicated = sum(1 for src in labels.values() if src == "adjudicated")
    # a complete mention without an agreed label is a disagreement; it is open until adjudicated
    to_adjudicate = sum(1 for m in complete if m not in labels)
    return {"n_assignments": sum(n for _, n, _ in per), "n_annotated": sum(k for _, _, k in per),
            "n_complete": len(complete), "n_agreed": agreed, "n_adjudicated": adjudicated,
            "n_to_adjudicate": to_adjudicate, "n_gold": len(labels)}


# ================================================================ annotating (annotator)
def my_tasks(s: Session, username: str) -> list[dict]:
    """The tasks ``username`` has mentions to annotate in, with ``n_assigned`` and ``n_done``."""
    u = auth.require(s, username, "annotator")
    done = (select(GoldAnnotation.task_id, GoldAnnotation.mention_id)
            .where(GoldAnnotation.user_id == u.id, GoldAnnotation.is_latest).subquery())
    q = (select(GoldAssignment.task_id, func.count(), func.count(done.c.mention_id))
         .outerjoin(done, and_(done.c.task_id == GoldAssignment.task_id,
                               done.c.mention_id == GoldAssignment.mention_id))
         .where(GoldAssignment.user_id == u.id).group_by(GoldAssignment.task_id).order_by(GoldAssignment.task_id))
    out = []
    for tid, n, k in s.execute(q).all():
        d = task(s, tid)
        d.update(n_assigned=int(n), n_done=int(k))
        out.append(d)
    return out


def annotation_queue(s: Session, task_id: int, username: str) -> list[dict]:
    """``username``'s mentions of the task in file order: mention_id, text, position, terms (their own latest
    answer, None if not yet), comment, final (adjudicated: the answer can no longer change), agreed (every
    assignee gave this answer: it is gold until one of them revises it). Only the user's own answers."""
    u = auth.require(s, username, "annotator")
    own = (select(GoldAnnotation.mention_id, GoldAnnotation.terms, GoldAnnotation.comment)
           .where(GoldAnnotation.task_id == task_id, GoldAnnotation.user_id == u.id, GoldAnnotation.is_latest)
           .subquery())
    q = (select(Mention.id, Mention.text, Mention.position, own.c.terms, own.c.comment)
         .join(GoldAssignment, GoldAssignment.mention_id == Mention.id)
         .outerjoin(own, own.c.mention_id == Mention.id)
         .where(GoldAssignment.task_id == task_id, GoldAssignment.user_id == u.id).order_by(Mention.position))
    labels = _label_sources(s, task_id)
    return [{"mention_id": m, "text": t, "position": p, "terms": None if terms is None else list(terms),
             "comment": c or "", "final": labels.get(m) == "adjudicated", "agreed": labels.get(m) == "agreed"}
            for m, t, p, terms, c in s.execute(q)]


def next_annotation(s: Session, task_id: int, username: str) -> dict | None:
    """The first mention of the queue the user has not answered yet, or None when done."""
    return next((m for m in annotation_queue(s, task_id, username) if m["terms"] is None), None)


def record_annotation(s: Session, task_id: int, mention_id: int, username: str, terms: Sequence[str] = (),
                      comment: str = "", seconds: float = 0.0) -> int:
    """Store ``username``'s answer for a mention of a task; returns the annotation id.

    The user must be an enabled annotator (or above) *assigned* to this
    mention (else PermissionError). ``terms``: names of the batch's
    vocabulary (ValueError otherwise); empty = "no term fits". A new answer
    supersedes the user's previous one. When every assignee has answered and
    all sets are equal the mention gets an ``agreed`` gold label; if a later
    change breaks the agreement, that label is withdrawn. Once a lead has
    adjudicated the mention, answers are final (ValueError): a revision would
    change the agreement figures and not the gold.
    """
    u = auth.require(s, username, "annotator")
    t = _task(s, task_id)
    assignees = _assigned(s, task_id, mention_id)
    if u.id not in {i for i, _ in assignees}:
        raise PermissionError(f"{u.username!r} is not assigned mention {mention_id} of gold task {task_id}")
    terms = _clean_terms(terms)
    _check_terms(s, t, terms)
    label = _label(s, task_id, mention_id)
    if label is not None and label.source == "adjudicated":  # the answers it settled stay as they were
        pos = s.get(Mention, mention_id).position
        raise ValueError(f"#{pos} was adjudicated by the lead: its gold answer is final and yours can no longer change")
    try:
        s.execute(update(GoldAnnotation).where(GoldAnnotation.task_id == task_id,
                                               GoldAnnotation.mention_id == mention_id,
                                               GoldAnnotation.user_id == u.id, GoldAnnotation.is_latest)
                  .values(is_latest=False))
        a = GoldAnnotation(task_id=task_id, mention_id=mention_id, user_id=u.id, terms=terms,
                           comment=(comment or "").strip(), seconds=max(0.0, float(seconds or 0.0)), is_latest=True)
        s.add(a)
        s.flush()
        _audit(s, u, "annotate", "mention", mention_id, {"task_id": task_id, "annotation_id": a.id, "terms": terms})
        _settle(s, task_id, mention_id, [i for i, _ in assignees], label)
        s.commit()
    except BaseException:
        s.rollback()
        raise
    return a.id


def _settle(s: Session, task_id: int, mention_id: int, assignee_ids: list[int], label) -> None:
    """Agreed gold when every assignee answered with the same set; withdraw a stale agreed ``label``."""
    answers = _latest_sets(s, task_id, mention_id)
    sets = [frozenset(answers[i]) for i in assignee_ids if i in answers]
    agreed = len(sets) == len(assignee_ids) and len(set(sets)) == 1
    if label is not None and label.source == "adjudicated":
        return
    if agreed:
        terms = answers[assignee_ids[0]]
        if label is None:
            label = GoldLabel(task_id=task_id, mention_id=mention_id, terms=terms, source="agreed", by_id=None)
            s.add(label)
        else:
            label.terms, label.at = terms, utcnow()
        s.flush()
        _audit(s, None, "gold_agreed", "mention", mention_id, {"task_id": task_id, "terms": terms})
    elif label is not None:
        _audit(s, None, "gold_withdrawn", "mention", mention_id, {"task_id": task_id, "terms": list(label.terms)})
        s.delete(label)


# ================================================================ agreement and adjudication (lead)
ANNOTATION_COLUMNS = ["mention_id", "position", "mention", "annotator", "terms", "comment", "seconds", "at"]


def annotations_frame(s: Session, acting_user: str, task_id: int, complete_only: bool = False) -> pd.DataFrame:
    """Every latest annotation of a task (lead only), in file order: the input of termnorm.agreement.

    ``complete_only``: only mentions every assignee has answered.
    """
    auth.require(s, acting_user, "lead")
    _task(s, task_id)
    q = (select(GoldAnnotation.mention_id, Mention.position, Mention.text, User.username, GoldAnnotation.terms,
                GoldAnnotation.comment, GoldAnnotation.seconds, GoldAnnotation.at)
         .join(Mention, Mention.id == GoldAnnotation.mention_id).join(User, User.id == GoldAnnotation.user_id)
         .where(GoldAnnotation.task_id == task_id, GoldAnnotation.is_latest)
         .order_by(Mention.position, User.username))
    df = pd.DataFrame([[m, p, t, u, list(terms), c, sec, at] for m, p, t, u, terms, c, sec, at in s.execute(q)],
                      columns=ANNOTATION_COLUMNS)
    if complete_only and len(df):
        n_assigned = dict(s.execute(select(GoldAssignment.mention_id, func.count())
                                    .where(GoldAssignment.task_id == task_id)
                                    .group_by(GoldAssignment.mention_id)).all())
        n_given = df.groupby("mention_id")["annotator"].transform("size")
        df = df[n_given.to_numpy() == df["mention_id"].map(n_assigned).to_numpy()].reset_index(drop=True)
    return df


def task_agreement(s: Session, acting_user: str, task_id: int) -> tuple[dict, pd.DataFrame]:
    """Agreement of a task (lead only): ``termnorm.agreement.agreement_report`` on its latest annotations.

    Returns (overall dict: n_mentions, exact_agreement, fleiss_kappa,
    krippendorff_alpha, mean_pair_kappa, ..., how), and the per-pair table
    (annotator_a, annotator_b, n_common, exact_agreement, kappa, kappa_terms).
    """
    df = annotations_frame(s, acting_user, task_id)
    if df.empty:
        nan = float("nan")
        overall = {"n_mentions": 0, "n_annotators": 0, "n_annotations": 0, "n_multi": 0, "exact_agreement": nan,
                   "fleiss_kappa": nan, "fleiss_n_items": 0, "krippendorff_alpha": nan, "mean_pair_kappa": nan,
                   "how": {}}
        return overall, pd.DataFrame(columns=["annotator_a", "annotator_b", "n_common", "exact_agreement",
                                              "kappa", "kappa_terms"])
    return agreement.agreement_report(df[["mention_id", "annotator", "terms", "mention"]],
                                      source=f"gold task {task_id}")


def disagreement_queue(s: Session, acting_user: str, task_id: int, open_only: bool = False) -> pd.DataFrame:
    """Mentions every assignee answered, with differing sets, side by side (lead only).

    termnorm.agreement.disagreements columns (mention_id, mention, one column
    per annotator with ``##``-joined terms or None, n_annotators, n_distinct,
    common, any, majority) plus ``gold`` (the adjudicated terms, ``##``
    joined, or None) and ``position``. ``open_only``: not yet adjudicated.
    Most contested first, then file order.
    """
    df = annotations_frame(s, acting_user, task_id, complete_only=True)
    if df.empty:
        return pd.DataFrame(columns=["mention_id", "position", "mention", "n_annotators", "n_distinct", "common", "any",
                                     "majority", "gold"])
    out = agreement.disagreements(df[["mention_id", "annotator", "terms", "mention"]], source=f"gold task {task_id}")
    labels = {m: (src, terms) for m, src, terms in s.execute(
        select(GoldLabel.mention_id, GoldLabel.source, GoldLabel.terms).where(GoldLabel.task_id == task_id))}
    out["gold"] = [agreement.set_label(labels[m][1]) if labels.get(m, ("",))[0] == "adjudicated" else None
                   for m in out["mention_id"]]
    pos = dict(zip(df["mention_id"], df["position"]))
    out.insert(1, "position", out["mention_id"].map(pos))
    if open_only:
        out = out[out["gold"].isna()]
    out = out.astype(object).where(out.notna(), None)  # None (not NaN) where not annotated / not adjudicated
    return out.reset_index(drop=True)


#: ``adjudicate(seen=...)`` when the caller does not say what gold it saw
ANY_GOLD = object()


def adjudicate(s: Session, acting_user: str, task_id: int, mention_id: int, terms: Sequence[str],
               comment: str = "", seen=ANY_GOLD) -> int:
    """The lead's final answer for a mention of a task (lead only); returns the gold label id.

    Replaces any label of the mention in this task (agreed or adjudicated;
    the audit log keeps the previous terms). ``terms`` must be names of the
    batch's vocabulary; empty = no term fits (such a mention is then left out
    of accuracy). ``seen``: the gold terms the lead's page showed (None: no gold
    yet); a label that changed since (another lead adjudicated it) is not
    overwritten: ValueError naming who answered what.
    """
    actor = auth.require(s, acting_user, "lead")
    t = _task(s, task_id)
    if not _assigned(s, task_id, mention_id):
        raise KeyError(f"mention {mention_id} is not in gold task {task_id}")
    terms = _clean_terms(terms)
    _check_terms(s, t, terms)
    label = _label(s, task_id, mention_id)
    if seen is not ANY_GOLD and (None if label is None else sorted(label.terms)) != (
            None if seen is None else sorted(seen)):
        by = s.get(User, label.by_id).username if label is not None and label.by_id else "an annotator"
        now = " + ".join(label.terms) if label is not None and label.terms else "no term fits"
        raise ValueError(f"{by} adjudicated this mention since your page was drawn ({now}): nothing saved; look "
                         "at it again and save if you still disagree")
    previous = None if label is None else {"terms": list(label.terms), "source": label.source}
    if label is None:
        label = GoldLabel(task_id=task_id, mention_id=mention_id)
        s.add(label)
    label.terms, label.source, label.by_id, label.comment, label.at = (terms, "adjudicated", actor.id,
                                                                       (comment or "").strip(), utcnow())
    s.flush()
    _audit(s, actor, "adjudicate", "mention", mention_id,
           {"task_id": task_id, "gold_label_id": label.id, "terms": terms, "previous": previous,
            "comment": label.comment})
    s.commit()
    return label.id


GOLD_COLUMNS = ["task_id", "task", "batch_id", "mention_id", "position", "mention", "terms", "codes", "source", "by",
                "at", "comment"]  # codes: each term's export code, in the terms' order


def gold_labels(s: Session, acting_user: str, task_id: int | None = None,
                vocabulary_id: int | None = None) -> pd.DataFrame:
    """The gold set (lead only): one row per (task, mention) label, in task / file order."""
    auth.require(s, acting_user, "lead")
    return gold_frame(s, task_id, vocabulary_id)


def gold_frame(s: Session, task_id: int | None = None, vocabulary_id: int | None = None) -> pd.DataFrame:
    q = (select(GoldLabel.task_id, GoldTask.name, GoldTask.batch_id, GoldLabel.mention_id, Mention.position,
                Mention.text, GoldLabel.terms, GoldLabel.source, User.username, GoldLabel.at, GoldLabel.comment,
                Batch.vocabulary_id)
         .join(GoldTask, GoldTask.id == GoldLabel.task_id).join(Mention, Mention.id == GoldLabel.mention_id)
         .join(Batch, Batch.id == GoldTask.batch_id).outerjoin(User, User.id == GoldLabel.by_id)
         .order_by(GoldLabel.task_id, Mention.position))
    if task_id is not None:
        q = q.where(GoldLabel.task_id == task_id)
    if vocabulary_id is not None:
        q = q.where(Batch.vocabulary_id == vocabulary_id)
    found = s.execute(q).all()
    names = {t for r in found for t in r[6]}
    code = {(v, n): c for v, n, c in s.execute(select(Term.vocabulary_id, Term.name, Term.code).where(
        Term.vocabulary_id.in_({r[11] for r in found}), Term.name.in_(names)))} if names else {}
    rows = [[*r[:6], list(r[6]), [code.get((r[11], t)) or "" for t in r[6]], r[7], r[8] or "", r[9], r[10]]
            for r in found]
    return pd.DataFrame(rows, columns=GOLD_COLUMNS)


def export_gold(s: Session, acting_user: str, task_id: int | None, fmt: str = "csv") -> tuple[bytes, int]:
    """The gold set as csv / xlsx / jsonl / chip-cdn (``[{"text", "normalized_result"}]``, the format
    ``termnorm evaluate --test`` reads), and how many labels the file leaves out: "no term fits", which
    CHIP-CDN cannot say -- lead only."""
    if fmt not in GOLD_EXPORT_FORMATS:
        raise ValueError(f"unknown gold export format {fmt!r}; expected one of {', '.join(GOLD_EXPORT_FORMATS)}")
    df = gold_labels(s, acting_user, task_id)
    left_out = int((df["terms"].map(len) == 0).sum()) if fmt == "chip-cdn" else 0
    return exports.export_frame(df, fmt, title="termnorm gold", map_id="termnorm-gold"), left_out


def audit_entries(s: Session, acting_user: str, task_id: int) -> pd.DataFrame:
    """Who did what on a task (lead only): create, annotate, agreed, withdrawn, adjudicate; oldest first."""
    auth.require(s, acting_user, "lead")
    rows = s.scalars(select(AuditLog).where(AuditLog.action.in_(
        ("create_gold_task", "annotate", "gold_agreed", "gold_withdrawn", "adjudicate"))).order_by(AuditLog.id))
    out = [{"at": a.at, "user": a.username, "action": a.action, "object_id": a.object_id,
            "terms": (a.details or {}).get("terms")} for a in rows
           if (a.object_type == "gold_task" and a.object_id == task_id) or (a.details or {}).get("task_id") == task_id]
    return pd.DataFrame(out, columns=["at", "user", "action", "object_id", "terms"])
