"""The engine that serves a vocabulary: the one every page, background job and gate uses.

One function builds it from the database alone (no Streamlit), so the app's
cached engine (``app_pages/_ui.py``), a background job in its own process
(pre-computing suggestions, re-scoring after a promotion) and the retraining
gate all suggest with the same model:

* the **promoted version** of the vocabulary's registry lineage
  (termnorm.registry), with the database's decisions replayed into its sieve
  and history, so nothing coded since it was trained is lost -- unless a newer
  vocabulary edition has come in since it was trained (its terms differ from
  the edition in force);
* else the **shipped model**: the lexical pipeline over the vocabulary and the
  coded history, with the cold-start ranker fitted on public data of its
  domain (``termnorm.engine.PRETRAINED``): procedures for ICD-9-CM-3 style
  codes, diagnoses for ICD-10 style codes (``cold_start_domain``); from
  ``HISTORY_FROM`` coded mentions on, the domain's ranker fitted with history
  features (``shipped_ranker``), switched to in place by the decision that
  reaches it (``follow_history``).

User synonyms, the demo abbreviation list and coders' abbreviations are added
to either.
"""

from __future__ import annotations

import hashlib

from db import abbreviations, services
from termnorm import reading
from termnorm.demo import HISTORY_FROM, HISTORY_RANKERS
from termnorm.engine import PRETRAINED, Engine, cold_start_domain
from termnorm.text.normalize import normalize


def vocabulary_name(s, vocabulary_id: int) -> str | None:
    return next((v["name"] for v in services.vocabularies(s) if v["id"] == vocabulary_id), None)


def registry(s, vocabulary_id: int, root=None):
    """The vocabulary's registry lineage (None for an unknown vocabulary)."""
    from termnorm.registry import Registry

    name = vocabulary_name(s, vocabulary_id)
    return Registry.for_vocabulary(name, root) if name else None


def serving_version(url: str | None, vocabulary_id: int, root=None) -> str | None:
    """The promoted model version of a vocabulary (None: the shipped model serves)."""
    with services.session_scope(url) as s:
        reg = registry(s, vocabulary_id, root)
    return reg.current_version() if reg is not None else None


def edition(url: str | None, vocabulary_id: int) -> int | None:
    """The vocabulary's edition in force."""
    with services.session_scope(url) as s:
        return next((v["edition"] for v in services.vocabularies(s) if v["id"] == vocabulary_id), None)


def history_epoch(url: str | None, vocabulary_id: int) -> int:
    """Bumped whenever coded history the engines learnt is withdrawn (a lead sent decisions back): engines built
    before it are rebuilt, since an engine cannot unlearn a coded mention (its sieve would still answer it)."""
    with services.session_scope(url) as s:
        return int(services.get_setting(s, f"history_epoch:{vocabulary_id}", 0))


def serving_key(url: str | None, vocabulary_id: int) -> tuple:
    """What the vocabulary's serving engine is built from, as the database says now: (promoted version, edition,
    history epoch, the shipped model's encoder) -- the key of db.engine_holder.ServingSwitch."""
    from db.learning import PIPELINE_KEY

    with services.session_scope(url) as s:  # one session: every page run reads it
        reg = registry(s, vocabulary_id)
        ed = next((v["edition"] for v in services.vocabularies(s) if v["id"] == vocabulary_id), None)
        epoch = int(services.get_setting(s, f"history_epoch:{vocabulary_id}", 0))
        encoder = (services.get_setting(s, PIPELINE_KEY.format(vocabulary_id)) or {}).get("dense") or None
    version = reg.current_version() if reg is not None else None
    return version, ed, epoch, None if version else encoder


def bump_history_epoch(s, vocabulary_id: int) -> None:
    """Part of the caller's transaction (it commits)."""
    key = f"history_epoch:{vocabulary_id}"
    services.put_setting(s, key, int(services.get_setting(s, key, 0)) + 1)


def shipped_engine(vocab, history, encoder: str | None = None) -> Engine:
    """The model a vocabulary has before any retraining: the lexical pipeline with the cold-start ranker of its
    domain (procedures / diagnoses, fitted on public data of the domain: termnorm.engine.cold_start_domain).
    A vocabulary of neither domain is served in recall order, with the bi-encoder ``encoder`` (the lead's
    setting, e.g. one trained on its synonyms) among the recall strategies when set: on NCBI disease that
    lifted day one from 0.750 to 0.768 (benchmarks/results/day_one_ncbi.json). A cold-start ranker was
    fitted without an encoder's score, so it does not get one."""
    domain = cold_start_domain(vocab)
    if domain is None and encoder:
        from termnorm.dense.crossfit import load_dense  # torch: only for a vocabulary that has an encoder

        return Engine(vocab, history=history, dense=load_dense(encoder), model_version=shipped_version(encoder))
    engine = Engine(vocab, history=history)
    if domain is not None:
        engine.use_pretrained_ranker(shipped_ranker(domain, len(history)))
    return engine


def shipped_version(encoder: str) -> str:
    """The model version of the recall order with ``encoder``: named by the folder, so suggestions stored without
    it, or with another, are computed again."""
    return f"lexical+encoder-{hashlib.sha1(str(encoder).encode()).hexdigest()[:8]}"


def shipped_encoder(url: str | None, vocabulary_id: int) -> str | None:
    """The bi-encoder the shipped model of the vocabulary serves with (its pipeline setting ``dense``, db.learning);
    None if none is set. Part of the serving key: setting one reaches the pages as a promotion does."""
    from db.learning import PIPELINE_KEY

    with services.session_scope(url) as s:
        return (services.get_setting(s, PIPELINE_KEY.format(vocabulary_id)) or {}).get("dense") or None


def shipped_ranker(domain: str, coded: int):
    """The cold-start ranker of ``domain`` for a vocabulary with ``coded`` coded mentions: the one fitted with
    history features from :data:`termnorm.demo.HISTORY_FROM` on, the history-free one before."""
    return HISTORY_RANKERS[domain] if coded >= HISTORY_FROM else PRETRAINED[domain]


def follow_history(engine: Engine) -> bool:
    """Switch a shipped engine whose coded history has just reached :data:`termnorm.demo.HISTORY_FROM` to the
    history ranker of its domain, in place (a rebuild would reload the vocabulary's index); True if it did.
    Its model version changes with it, so suggestions stored by the other ranker are recomputed."""
    served = engine.meta.get("pretrained_ranker")
    domain = next((d for d, p in PRETRAINED.items() if str(p) == served), None)
    if domain is None or not engine.model_version.startswith("pretrained:") or len(engine.history) < HISTORY_FROM:
        return False
    return engine.use_pretrained_ranker(HISTORY_RANKERS[domain])


def build_engine(url: str | None, vocabulary_id: int, version: str | None = None, root=None) -> Engine:
    """The engine of ``version`` (None: the shipped model) for a stored vocabulary, fed with the database."""
    with services.session_scope(url) as s:
        history = services.coded_mentions(s, vocabulary_id)
        synonyms = services.user_synonyms(s, vocabulary_id)
        reg = registry(s, vocabulary_id, root) if version else None
        vocab = services.vocabulary_from_db(s, vocabulary_id)
    engine = reg.load(version) if reg is not None else None
    if engine is not None and set(engine.vocabulary.names) != set(vocab.names):
        engine = None  # trained on another edition of the vocabulary
    if engine is None:
        engine = shipped_engine(vocab, history, shipped_encoder(url, vocabulary_id))
    else:
        learn_history(engine, history)
    engine.use_demo_abbreviations()  # the built-in list (assets/demo/abbreviations.json) for a Chinese vocabulary
    _learn_vocabulary(engine, synonyms, url, vocabulary_id)
    return engine


def _learn_vocabulary(engine: Engine, synonyms, url: str | None, vocabulary_id: int) -> list[str]:
    """The coders' synonyms (mostly in the vocabulary already: this also puts them in the sieve) and
    abbreviations (Vocabulary page); the synonyms new to the engine's vocabulary."""
    new = []
    for term, syn in synonyms:
        if term in engine.vocabulary:
            if syn not in engine.vocabulary.synonyms.get(term, []):
                new.append(syn)
            engine.add_synonym(term, syn)
    engine.add_abbreviations(abbreviations.for_engine(url, vocabulary_id))
    return new


def learn_history(engine: Engine, history) -> list[str]:
    """Teach ``engine`` the coded mentions of ``history`` it does not answer as coded yet; the texts taught."""
    known = {normalize(m.text): list(m.terms) for m in engine.history}  # stored as read in their notes
    taught = []
    for m in history:
        read = reading.in_document(engine, m.text, m.document)
        if known.get(normalize(read)) != list(m.terms):
            engine.add_coded_mention(read, m.terms, written=m.text if read != m.text else "")
            taught.append(m.text)
    return taught


def audit_mark(url: str | None) -> int:
    """The newest audit entry's id: it changes with every decision, synonym and abbreviation (all audited), so an
    engine in another process knows when to catch up (:func:`catch_up`)."""
    from db.models import AuditLog

    return _newest_id(url, AuditLog.id)


def decision_mark(url: str | None) -> int:
    """The newest decision's id: a later :func:`catch_up` given it reads only the decisions made since."""
    from db.models import Decision

    return _newest_id(url, Decision.id)


def _newest_id(url: str | None, column) -> int:
    from sqlalchemy import func, select

    with services.session_scope(url) as s:
        return int(s.scalar(select(func.max(column))) or 0)


def catch_up(engine: Engine, url: str | None, vocabulary_id: int, after_decision: int = 0) -> list[str]:
    """What coders taught while ``engine`` was being built (decisions, synonyms, abbreviations), from the
    database; the mention texts and synonyms it learnt. ``after_decision``: read only the decisions made after
    that one (:func:`decision_mark`, taken before an earlier catch-up), not the whole coded history again."""
    with services.session_scope(url) as s:
        history = services.coded_mentions(s, vocabulary_id, after=after_decision)
        synonyms = services.user_synonyms(s, vocabulary_id)
    return learn_history(engine, history) + _learn_vocabulary(engine, synonyms, url, vocabulary_id)
