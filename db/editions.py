"""Vocabulary editions: import a new edition beside the one in force, see what changed, re-review what it broke.

Which of our mappings did the new ICD edition break? is the most common
request of mapping teams (OHDSI Usagi issue 6, CaRROT-Mapper issue 624).
Re-importing a vocabulary file only *adds* names (``services.load_vocabulary``);
:func:`import_edition` instead makes the file the edition in force:

* **added** -- names new in the file (a name retired earlier and back again is
  restored);
* **retired** -- names of the edition in force that the file lacks; the term
  row stays (decisions point at it) with ``retired_edition`` set;
* **renamed** -- a retired name whose code now belongs to an added name (the
  code stays, the wording changed); the old term's ``replaced_by_id`` points at
  the new one;
* **code changed** -- names in both whose set of codes differs (a code
  removed, added or moved; its export code may change with it).

Every latest decision (accept / correct / auto) that points at a retired or
renamed term, or whose exported code is no longer a code of its term, goes to
the **re-review queue**: its mapping status becomes ``needs_rereview`` with the
reason in ``review_note``, and its mention status ``rereview``, which the coding
queue serves first (``services.next_mention``), suggested from the new edition
(stored suggestions of the old edition are recomputed: ``services.latest_suggestion``).
Nothing else is touched: a decision whose term and code survive keeps its
status. Exports say which edition each decision's codes belong to.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from sqlalchemy import func, insert, select
from sqlalchemy.orm import Session

from db import accounts, auth, services
from db.models import Batch, Decision, Mention, Synonym, Term, Vocabulary as VocabularyRow, VocabularyEdition
from termnorm.vocabulary import Vocabulary

#: Names listed per kind of change in the stored diff (the counts are always complete): enough for a lead
#: to read, bounded so a whole-vocabulary change does not make one row of megabytes.
DIFF_LIST_LIMIT = 2000
#: Decisions whose term was changed by an edition are mapped again: these actions carry terms.
MAPPED_ACTIONS = ("accept", "correct", "auto")
#: An edition retiring more than this share of the terms in force (and more than a handful) is imported only
#: when the lead confirms that number: a truncated or wrong file must not retire a vocabulary in one click.
CONFIRM_RETIRED_SHARE = 0.2


class RetirementNeedsConfirmation(ValueError):
    """The new edition would retire many terms: :func:`import_edition` again with ``confirm_retired=retired``."""

    def __init__(self, source: str, retired: int, in_force: int):
        self.retired, self.in_force = retired, in_force
        super().__init__(f"{source} would retire {retired} of the {in_force} terms in force "
                         f"({100 * retired // in_force}%); a truncated or wrong file? Nothing imported: confirm to "
                         "import it")


@dataclass
class EditionDiff:
    """What changed between the edition in force and a new file (names; codes in file order)."""

    added: list[str] = field(default_factory=list)
    retired: list[str] = field(default_factory=list)
    renamed: list[tuple[str, str]] = field(default_factory=list)  # (old name, new name)
    code_changed: list[tuple[str, list[str], list[str]]] = field(default_factory=list)  # (name, old, new)

    def counts(self) -> dict[str, int]:
        return {"added": len(self.added), "retired": len(self.retired), "renamed": len(self.renamed),
                "code_changed": len(self.code_changed)}


def diff_editions(old: dict[str, list[str]], new: Vocabulary) -> EditionDiff:
    """Compare the edition in force (name -> codes) with a new vocabulary.

    A retired name and an added name sharing a code are a rename (the pair sharing the most codes first; each
    name in at most one rename); retired names that are renamed are listed under ``renamed`` only.

    >>> new = Vocabulary(); _ = new.add_term("胆囊切除术", ["51.22"]); _ = new.add_term("腹腔镜胆囊切除术", ["51.23"])
    >>> d = diff_editions({"胆囊切除术": ["51.2200"], "腹腔镜下胆囊切除术": ["51.23"], "阑尾切除术": ["47.09"]}, new)
    >>> d.renamed, d.retired, d.added, d.code_changed
    ([('腹腔镜下胆囊切除术', '腹腔镜胆囊切除术')], ['阑尾切除术'], [], [('胆囊切除术', ['51.2200'], ['51.22'])])
    """
    gone = [n for n in old if n not in new]
    added = [n for n in new.names if n not in old]
    pairs = []
    for o in gone:
        for n in added:
            shared = len(set(old[o]) & set(new.codes.get(n, [])))
            if shared:
                pairs.append((-shared, o, n))
    renamed, used_old, used_new = [], set(), set()
    for _, o, n in sorted(pairs, key=lambda p: p[0]):  # stable: file order among equal overlaps
        if o not in used_old and n not in used_new:
            renamed.append((o, n))
            used_old.add(o)
            used_new.add(n)
    changed = [(n, list(old[n]), list(new.codes.get(n, []))) for n in old
               if n in new and set(old[n]) != set(new.codes.get(n, []))]
    return EditionDiff(added=[n for n in added if n not in used_new], retired=[o for o in gone if o not in used_old],
                       renamed=renamed, code_changed=changed)


def import_edition(s: Session, vocabulary_id: int, vocab: Vocabulary, label: str, username: str,
                   source_file: str = "", confirm_retired: int | None = None) -> dict:
    """Make ``vocab`` the edition in force of the vocabulary and send the decisions it broke to re-review.

    An edition that would retire more than :data:`CONFIRM_RETIRED_SHARE` of the terms in force raises
    :class:`RetirementNeedsConfirmation` unless ``confirm_retired`` is that number of terms.
    Lead or admin only (PermissionError). One transaction: the terms, the edition row with its diff, the
    flagged decisions and the audit entry are committed together. Returns the edition as :func:`editions`
    lists it, plus ``rereview`` (how many decisions were sent to re-review).
    """
    user = auth.require(s, username, "lead")
    row = s.get(VocabularyRow, vocabulary_id)
    if row is None:
        raise KeyError(f"no vocabulary {vocabulary_id}")
    if len(vocab) == 0:
        raise ValueError(f"{source_file or 'the new edition'}: no term in the file: nothing imported")
    try:
        terms = {t.name: t for t in s.scalars(select(Term).where(Term.vocabulary_id == vocabulary_id))}
        old = {n: list(t.codes or []) for n, t in terms.items() if t.retired_edition is None}
        diff = diff_editions(old, vocab)
        if not any(diff.counts().values()):  # e.g. the same file imported twice (a double click)
            raise ValueError(f"{source_file or 'the file'} holds the same names and codes as edition {row.edition}, "
                             "the edition in force: nothing imported")
        retired = len(diff.retired)
        if retired > max(5, CONFIRM_RETIRED_SHARE * len(old)) and confirm_retired != retired:
            raise RetirementNeedsConfirmation(source_file or "the new edition", retired, len(old))
        number = row.edition + 1
        _apply(s, row, terms, vocab, diff, number)
        reasons = _broken_decisions(s, vocabulary_id, terms, vocab, diff, number, label)
        for d, mention, why in reasons:
            d.review_status = "needs_rereview"
            d.review_note = why
            mention.status = services.REREVIEW
            mention.claimed_by = mention.claimed_at = None
        summary = {**diff.counts(), "rereview": len(reasons)}
        stored = {"counts": summary, "changes": {k: v[:DIFF_LIST_LIMIT] for k, v in asdict(diff).items()}}
        ed = VocabularyEdition(vocabulary_id=vocabulary_id, number=number, label=(label or "").strip(),
                               source_file=source_file, imported_by_id=user.id, diff=stored)
        s.add(ed)
        row.edition = number
        row.source = source_file or row.source
        s.flush()
        accounts.audit(s, user, "import_edition", "vocabulary", vocabulary_id,
                       {"edition": number, "label": ed.label, "source_file": source_file, **summary,
                        "rereview_decisions": [d.id for d, _, _ in reasons][:DIFF_LIST_LIMIT]})
        s.commit()
    except BaseException:
        s.rollback()
        raise
    return next(e for e in editions(s, vocabulary_id) if e["number"] == number) | {"rereview": len(reasons)}


def _apply(s: Session, row: VocabularyRow, terms: dict[str, Term], vocab: Vocabulary, diff: EditionDiff,
           number: int) -> None:
    """Write the new edition's terms: add / restore, retire (with the rename's successor), re-code."""
    position = (s.scalar(select(func.max(Term.position)).where(Term.vocabulary_id == row.id)) or 0) + 1
    new_rows = []
    for name in vocab.names:
        fields = services.term_code_fields(vocab, name)
        t = terms.get(name)
        if t is None:
            new_rows.append(dict(fields, vocabulary_id=row.id, position=position, name=name, added_edition=number))
            position += 1
            continue
        if t.retired_edition is not None:  # back in this edition
            t.retired_edition, t.replaced_by_id = None, None
        if (t.code, list(t.codes or []), dict(t.code_kinds or {})) != (fields["code"], fields["codes"],
                                                                       fields["code_kinds"]):
            t.code, t.codes, t.code_kinds = fields["code"], fields["codes"], fields["code_kinds"]
    if new_rows:
        s.execute(insert(Term), new_rows)
    ids = dict(s.execute(select(Term.name, Term.id).where(Term.vocabulary_id == row.id)).all())
    successor = dict(diff.renamed)
    for name in list(diff.retired) + list(successor):
        t = terms[name]
        t.retired_edition = number
        t.replaced_by_id = ids.get(successor.get(name))
    have = {tuple(r) for r in s.execute(select(Synonym.term_id, Synonym.text).join(Term, Term.id == Synonym.term_id)
                                        .where(Term.vocabulary_id == row.id))}
    named = [(n, t) for n, lst in vocab.synonyms.items() for t in dict.fromkeys(lst)]
    # a renamed term keeps its old name as a synonym: coders type the name they know, and search finds it first
    named += [(new, old) for old, new in diff.renamed]
    syns = [{"term_id": ids[n], "text": t, "source": "vocabulary"} for n, t in dict.fromkeys(named)
            if (ids[n], t) not in have]
    if syns:
        s.execute(insert(Synonym), syns)
    inner = {c: n for c, n in vocab.code_names.items() if n not in vocab or c not in vocab.codes.get(n, [])}
    row.hierarchy = {"parent": dict(vocab.parent), "code_names": inner}
    s.flush()


def _broken_decisions(s: Session, vocabulary_id: int, terms: dict[str, Term], vocab: Vocabulary, diff: EditionDiff,
                      number: int, label: str) -> list[tuple[Decision, Mention, str]]:
    """Latest mapped decisions that point at a retired / renamed term or export a code its term lost, with why.
    A decision marked not related to its terms maps nothing, so no edition can break it."""
    edition = f"edition {number}" + (f" ({label.strip()})" if (label or "").strip() else "")
    why_term = {o: f"{o} was renamed {n} in {edition}" for o, n in diff.renamed}
    why_term |= {o: f"{o} was retired in {edition}" for o in diff.retired}
    changed = {n for n, _, _ in diff.code_changed}
    by_id = {t.id: t for t in terms.values()}
    q = (select(Decision, Mention).join(Mention, Mention.id == Decision.mention_id)
         .join(Batch, Batch.id == Mention.batch_id)
         .where(Batch.vocabulary_id == vocabulary_id, Decision.is_latest, Decision.action.in_(MAPPED_ACTIONS),
                services.MAPS))
    out = []
    for d, m in s.execute(q):
        names = _decision_names(d, by_id)
        codes = list(d.codes or [])
        reasons = []
        for i, name in enumerate(names):
            if name in why_term:
                reasons.append(why_term[name])
            elif name in changed:
                code = codes[i] if i < len(codes) and codes[i] else None
                now = vocab.codes_of(name)
                if code is not None and code not in now:
                    reasons.append(f"code {code} of {name} is gone in {edition} (its codes now: "
                                   f"{', '.join(now) or 'none'})")
        if reasons:
            out.append((d, m, "; ".join(reasons)))
    return out


def _decision_names(d: Decision, by_id: dict[int, Term]) -> list[str]:
    """The decision's terms by id where it has them (a renamed term keeps its id), else by name."""
    ids = list(d.term_ids or [])
    return [by_id[ids[i]].name if i < len(ids) and ids[i] in by_id else t for i, t in enumerate(d.terms)]


def editions(s: Session, vocabulary_id: int) -> list[dict]:
    """The vocabulary's editions, oldest first: number, label, file, when, by whom, change counts."""
    from db.models import User

    q = (select(VocabularyEdition, User.username).outerjoin(User, User.id == VocabularyEdition.imported_by_id)
         .where(VocabularyEdition.vocabulary_id == vocabulary_id).order_by(VocabularyEdition.number))
    return [{"number": e.number, "label": e.label, "source_file": e.source_file, "imported_at": e.imported_at,
             "imported_by": u or "", "counts": dict((e.diff or {}).get("counts", {})),
             "changes": dict((e.diff or {}).get("changes", {}))} for e, u in s.execute(q)]
