"""Vocabularies, their terms and synonyms in the database, and the engine's Vocabulary rebuilt from them.

:func:`load_vocabulary` stores a termnorm Vocabulary (idempotent by name; :func:`create_vocabulary` is a
lead's new one, refused under a name taken), :func:`vocabulary_from_db` rebuilds
it with the users' synonyms; :func:`term_ids` / :func:`term_rows` look terms of the edition in force up by
name; :func:`add_synonym` stores a user's synonym with its positive training pair, and :func:`user_synonyms`
gives them back to the engine.
"""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import func, insert, select
from sqlalchemy.orm import Session

from db.accounts import acting_user, audit
from db.models import (
    Synonym,
    Term,
    TrainingPair,
    User,
    Vocabulary as VocabularyRow,
    VocabularyEdition,
)
from termnorm.vocabulary import Vocabulary


# ================================================================ vocabularies
def load_vocabulary(s: Session, vocab: Vocabulary, name: str) -> int:
    """Store ``vocab`` under ``name`` and return its id; idempotent by name (adds only what is new)."""
    row = s.scalar(select(VocabularyRow).where(VocabularyRow.name == name))
    inner = {c: n for c, n in vocab.code_names.items() if n not in vocab or c not in vocab.codes.get(n, [])}
    hierarchy = {"parent": dict(vocab.parent), "code_names": inner}
    new = row is None
    if new:
        row = VocabularyRow(name=name, source=vocab.source or "", language=vocab.language or "zh",
                            hierarchy=hierarchy, edition=1)
        s.add(row)
        s.flush()
        s.add(VocabularyEdition(vocabulary_id=row.id, number=1, label="", source_file=vocab.source or "",
                                diff={"counts": {"added": len(vocab)}, "first": True}))
    elif hierarchy["parent"] and not (row.hierarchy or {}).get("parent"):
        row.hierarchy = hierarchy
    known = dict(s.execute(select(Term.name, Term.id).where(Term.vocabulary_id == row.id)).all())
    fresh = [dict(term_code_fields(vocab, n), vocabulary_id=row.id, position=i, name=n, added_edition=row.edition)
             for i, n in enumerate(vocab.names) if n not in known]
    if fresh:
        s.execute(insert(Term), fresh)
        known = dict(s.execute(select(Term.name, Term.id).where(Term.vocabulary_id == row.id)).all())
    have = {tuple(r) for r in s.execute(select(Synonym.term_id, Synonym.text).join(Term, Term.id == Synonym.term_id)
                                        .where(Term.vocabulary_id == row.id))}
    syns = [{"term_id": known[n], "text": t, "source": "vocabulary"}
            for n, lst in vocab.synonyms.items() if n in known for t in dict.fromkeys(lst)
            if (known[n], t) not in have]
    if syns:
        s.execute(insert(Synonym), syns)
    if new or fresh or syns:
        audit(s, None, "load" if new else "extend", "vocabulary", row.id,
              {"name": name, "new_terms": len(fresh), "new_synonyms": len(syns)})
    s.commit()
    return row.id


def term_code_fields(vocab: Vocabulary, name: str) -> dict:
    """A term's code columns: the export code, every code (export code first) and each code's kind."""
    codes = vocab.codes_of(name)
    return {"code": codes[0] if codes else None, "codes": codes,
            "code_kinds": {c: vocab.code_kind(c) for c in codes}}


ACTIVE = Term.retired_edition.is_(None)  # terms of the edition in force


def vocabularies(s: Session) -> list[dict]:
    """Vocabularies with their number of terms in the edition in force and that edition's number."""
    n_terms = (select(Term.vocabulary_id, func.count().label("n")).where(ACTIVE).group_by(Term.vocabulary_id)
               .subquery())
    q = (select(VocabularyRow.id, VocabularyRow.name, func.coalesce(n_terms.c.n, 0), VocabularyRow.edition,
                VocabularyRow.system_uri)
         .outerjoin(n_terms, n_terms.c.vocabulary_id == VocabularyRow.id).order_by(VocabularyRow.id))
    return [{"id": i, "name": n, "n_terms": k, "edition": e, "system_uri": u} for i, n, k, e, u in s.execute(q)]


def create_vocabulary(s: Session, vocab: Vocabulary, name: str, username: str) -> int:
    """A vocabulary of its own from a file (a hospital's list), by a lead or admin, audited; its id. Refused when
    the name is taken: a new file of a known vocabulary is a new edition of it (db.editions)."""
    from db import auth

    user = auth.require(s, username, "lead")
    name = " ".join((name or "").split())
    if not name or len(name) > 200:
        raise ValueError("give the vocabulary a name (at most 200 characters)")
    taken = s.scalar(select(VocabularyRow.name).where(func.lower(VocabularyRow.name) == name.lower()))
    if taken is not None:  # its own spelling: a user test typed "hospdx" for HospDx
        raise ValueError(f"a vocabulary named {taken!r} exists already; a new file of it is a new edition "
                         "(Editions page, with that vocabulary picked)")
    vid = load_vocabulary(s, vocab, name)
    first = s.scalar(select(VocabularyEdition).where(VocabularyEdition.vocabulary_id == vid))
    first.imported_by_id = user.id  # the Editions page's "by"
    audit(s, user, "create", "vocabulary", vid, {"name": name, "terms": len(vocab), "file": vocab.source or ""})
    s.commit()
    return vid


def set_system_uri(s: Session, vocabulary_id: int, uri: str, username: str) -> None:
    """The code system URI exports name for the vocabulary ("" = a urn:termnorm one); lead or admin, audited."""
    from db import auth

    user = auth.require(s, username, "lead")
    uri = (uri or "").strip()
    if uri and (len(uri) > 500 or any(c.isspace() for c in uri) or ":" not in uri):
        raise ValueError(f"{uri!r} is not a URI (e.g. http://hl7.org/fhir/sid/icd-10-cn)")
    row = s.get(VocabularyRow, vocabulary_id)
    if row is None:
        raise KeyError(f"no vocabulary {vocabulary_id}")
    audit(s, user, "set_system_uri", "vocabulary", vocabulary_id, {"old": row.system_uri, "new": uri})
    row.system_uri = uri
    s.commit()


def vocabulary_id(s: Session, name: str) -> int | None:
    """The vocabulary a person names: its exact name, its id, or the one name that holds what was typed in any case
    (``yidu-n7k`` for "ICD-9-2017 协和临床版 (Yidu-N7K)", as `termnorm load-data` names it); None if none or several."""
    found = s.scalar(select(VocabularyRow.id).where(VocabularyRow.name == name))
    if found is not None or not (name or "").strip():
        return found
    rows = s.execute(select(VocabularyRow.id, VocabularyRow.name)).all()
    if name.strip().isdigit() and int(name) in {i for i, _ in rows}:
        return int(name)
    held = [i for i, n in rows if name.strip().casefold() in n.casefold()]
    return held[0] if len(held) == 1 else None


def vocabulary_from_db(s: Session, vocabulary_id: int) -> Vocabulary:
    """Rebuild a termnorm Vocabulary (terms, codes, hierarchy, vocabulary *and* user synonyms)."""
    row = s.get(VocabularyRow, vocabulary_id)
    if row is None:
        raise KeyError(f"no vocabulary {vocabulary_id}")
    v = Vocabulary(name=row.name, source=row.source, language=row.language)
    for name, codes in s.execute(select(Term.name, Term.codes).where(Term.vocabulary_id == vocabulary_id, ACTIVE)
                                 .order_by(Term.position, Term.id)):
        v.add_term(name, codes)
    for name, text in s.execute(select(Term.name, Synonym.text).join(Synonym, Synonym.term_id == Term.id)
                                .where(Term.vocabulary_id == vocabulary_id, ACTIVE).order_by(Synonym.id)):
        v.add_synonym(name, text)
    h = row.hierarchy or {}
    v.parent.update(h.get("parent", {}))
    for c, n in h.get("code_names", {}).items():
        v.code_names.setdefault(c, n)
    return v


def term_ids(s: Session, vocabulary_id: int, names: Iterable[str]) -> dict[str, int]:
    """Term ids of the names that are terms of the edition in force."""
    return {name: t.id for name, t in term_rows(s, vocabulary_id, names).items()}


def term_rows(s: Session, vocabulary_id: int, names: Iterable[str], active: bool = True) -> dict[str, Term]:
    """The Term rows of the names, by name (``active``: only terms of the edition in force)."""
    names = list(names)
    if not names:
        return {}
    q = select(Term).where(Term.vocabulary_id == vocabulary_id, Term.name.in_(names))
    return {t.name: t for t in s.scalars(q.where(ACTIVE) if active else q)}


# ================================================================ synonyms
def add_synonym(s: Session, vocabulary_id: int, term: str, synonym: str, username: str) -> bool:
    """Store ``synonym`` of ``term`` (by ``username``) plus a positive training pair of kind ``synonym``.

    Returns False (and writes nothing) if the synonym is already known. Raises
    KeyError for a term not in the vocabulary, ValueError for an empty synonym.
    """
    synonym = (synonym or "").strip()
    term = (term or "").strip()
    if not synonym or synonym == term:
        raise ValueError("a synonym must be a non-empty text different from the term")
    term_id = term_ids(s, vocabulary_id, [term]).get(term)
    if term_id is None:
        raise KeyError(f"{term!r} is not a term of vocabulary {vocabulary_id}")
    if s.scalar(select(Synonym.id).where(Synonym.term_id == term_id, Synonym.text == synonym)) is not None:
        return False
    user = acting_user(s, username)
    syn = Synonym(term_id=term_id, text=synonym, source="user", added_by_id=user.id)
    s.add(syn)
    s.flush()
    s.add(TrainingPair(vocabulary_id=vocabulary_id, synonym_id=syn.id, mention_text=synonym, term=term, label=1,
                       kind="synonym", active=True))
    audit(s, user, "add_synonym", "term", term_id, {"term": term, "synonym": synonym})
    s.commit()
    return True


def user_synonyms(s: Session, vocabulary_id: int) -> list[tuple[str, str]]:
    """(term, synonym) pairs added by users, oldest first (replay into engine.add_synonym at start-up)."""
    q = (select(Term.name, Synonym.text).join(Synonym, Synonym.term_id == Term.id)
         .where(Term.vocabulary_id == vocabulary_id, Synonym.source == "user").order_by(Synonym.id))
    return [tuple(r) for r in s.execute(q)]


def term_synonyms(s: Session, vocabulary_id: int, term: str) -> list[dict]:
    """Every synonym of one term with its source (vocabulary / user), who added it and when."""
    q = (select(Synonym.text, Synonym.source, User.username, Synonym.created_at)
         .join(Term, Term.id == Synonym.term_id).outerjoin(User, User.id == Synonym.added_by_id)
         .where(Term.vocabulary_id == vocabulary_id, Term.name == term).order_by(Synonym.id))
    return [{"synonym": t, "source": src, "added_by": u or "", "at": at} for t, src, u, at in s.execute(q)]


def retired_notes(s: Session, vocabulary_id: int) -> dict[str, str]:
    """What to tell a coder who searches a retired name or one of its codes: key (name or code) -> "单侧甲状腺叶切除术
    (06.2x00) was retired in edition 2 (2027)", or "... was renamed in edition 2 (2027): now 甲状腺病损局部切除术".
    Codes a term in force still has are left out (the search finds them)."""
    from db.models import VocabularyEdition

    labels = dict(s.execute(select(VocabularyEdition.number, VocabularyEdition.label)
                            .where(VocabularyEdition.vocabulary_id == vocabulary_id)).all())
    live = {c for (codes,) in s.execute(select(Term.codes).where(Term.vocabulary_id == vocabulary_id, ACTIVE))
            for c in codes or ()}
    successors = {i: n for i, n in s.execute(select(Term.id, Term.name).where(
        Term.id.in_(select(Term.replaced_by_id).where(Term.vocabulary_id == vocabulary_id))))}
    out: dict[str, str] = {}
    for t in s.scalars(select(Term).where(Term.vocabulary_id == vocabulary_id, Term.retired_edition.is_not(None))):
        label = (labels.get(t.retired_edition) or "").strip()
        renamed = successors.get(t.replaced_by_id)
        note = (f"{t.name} ({', '.join(t.codes or []) or 'no code'}) was {'renamed' if renamed else 'retired'} in "
                f"edition {t.retired_edition}" + (f" ({label})" if label and label != str(t.retired_edition) else "")
                + (f": now {renamed}" if renamed else ""))
        for key in [t.name, *(c for c in t.codes or () if c not in live)]:
            out.setdefault(key, note)
    return out
