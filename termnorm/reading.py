"""How the engine reads a mention beside its recall: abbreviations spelled out, keywords coders treat as the same.

* :func:`spelled_out` -- abbreviations added at run time (the demo list, coders' ones) written out before the
  engine reads the mention (卵巢Ca -> 卵巢恶性肿瘤); the keyword folder's table is the recall's own (its
  ``_abbr`` keys are features of a fitted ranker), so it is left to the recall.
* :func:`in_document` / :func:`read_labelled` -- a mention read in its document (termnorm.context: the
  abbreviations the document defines spelled out, FED -> fish-eye disease), unless the mention as written is
  a name or synonym of the vocabulary (SJS is one in MEDIC; its spelled-out form is another concept's
  synonym). Coded mentions are read the same way, so history and suggestions agree.
* :func:`same_keyword` -- whether a keyword of the mention and one of a term mean the same to coders: equal, or
  a rewrite the surface-difference scorer (termnorm.rank.surface) learned from their decisions with a weight of
  at least :data:`SAME_KEYWORD_WEIGHT` (肿瘤 -> 病损). The app marks a keyword as missing or different only
  when it is not (``benchmarks/keyword_marks.py`` measures how often correct answers still get a mark).
"""

from __future__ import annotations

from dataclasses import replace

from termnorm.context import definitions_used, read_in_document
from termnorm.rank import document as doc_words
from termnorm.text.normalize import Abbreviations, normalize

#: The learned rewrite weight from which a mention's keyword and a term's count as the same.
SAME_KEYWORD_WEIGHT = 0.5


def same_keyword(engine, mention_keyword: str, term_keyword: str) -> bool:
    a, b = normalize(mention_keyword), normalize(term_keyword)
    d = getattr(engine, "diff_scorer", None)
    return a == b or (d is not None and d.rewrite_weight(a, b) >= SAME_KEYWORD_WEIGHT)


def spelled_out(engine, mention: str) -> str:
    """``mention`` with the run-time abbreviations written out, or ``mention`` itself when it has none."""
    added = getattr(engine, "added_abbreviations", None)
    if not added:
        return mention
    cached = getattr(engine, "_spell", None)
    if cached is None or cached[0] != len(added):  # rebuilt when a coder teaches one more
        own = {normalize(a) for a in (engine.abbreviations or {})}
        cached = engine._spell = (len(added), Abbreviations({a: e for a, e in added if normalize(a) not in own}))
    n = normalize(mention)
    expanded = cached[1].expand(n)
    return mention if expanded == n else expanded


def recall_reading(engine, mention: str) -> str | None:
    """How the recall also reads ``mention``: with the keyword folder's abbreviations and the built-in Chinese
    short forms spelled out (晚孕(上感) -> 晚期妊娠(上呼吸道感染), termnorm.text.short_forms); None when it has
    none. The coding page shows it beside the mention."""
    from termnorm.recall.union import ABBR

    union = getattr(engine, "union", None)
    got = [text for text, key in union.variants(mention) if key == ABBR] if union is not None else []
    return got[0] if got else None


def surfaces(engine) -> frozenset[str]:
    """The vocabulary's names and synonyms, normalized (built once per engine)."""
    got = getattr(engine, "_surface_set", None)
    if got is None:
        got = engine._surface_set = frozenset(normalize(t) for t in engine.vocabulary.surface_forms()[0])
    return got


def in_document(engine, mention: str, document: str | None) -> str:
    """``mention`` read in ``document`` (the module docstring); ``mention`` itself without one."""
    if not document:
        return mention
    known = surfaces(engine)
    return mention if normalize(mention) in known else read_in_document(mention, document, known, chinese(engine))


def definitions_in(engine, mention: str, document: str | None) -> list[tuple[str, str]]:
    """The document's definitions :func:`in_document` applied to ``mention`` (the coding page shows them)."""
    if not document or normalize(mention) in surfaces(engine):
        return []
    return definitions_used(mention, document, surfaces(engine), chinese(engine))


def chinese(engine) -> bool | None:
    """Whether the vocabulary is Chinese (only Chinese long forms are read), not (only others), or unknown."""
    lang = getattr(engine.vocabulary, "language", None)
    return True if lang == "zh" else False if lang == "en" else None


def read_labelled(engine, mentions) -> list:
    """Labelled mentions with their texts read in their documents (the same objects where nothing changes)."""
    out = []
    for m in mentions:
        read = in_document(engine, m.text, getattr(m, "document", ""))
        out.append(m if read == m.text else replace(m, text=read, written=m.written or m.text))
    return out


def sieve_of(history) -> tuple[dict[str, list[str]], set[str]]:
    """The sieve's exact answers, ``{normalized coded text: terms}``, and the texts only readings answer. The
    latest coding of a text wins, and a mention coded as written wins over one read in its document: an "AAPC"
    read as "adenomatous polyposis coli" and coded *attenuated* FAP must not answer the 20 mentions coders
    wrote that way and coded FAP."""
    out: dict[str, list[str]] = {}
    written: set[str] = set()
    for m in [*(m for m in history if m.written), *(m for m in history if not m.written)]:
        key = normalize(m.text)
        out[key] = list(m.terms)
        if not m.written:
            written.add(key)
    return out, set(out) - written


def into_sieve(engine, key: str, terms: list[str], written: str = "") -> None:
    """One decision into ``engine``'s sieve (Engine.add_coded_mention): a mention coded as written always, a
    reading (``written``: the mention as written) only where no mention coded as written answers ``key``."""
    read_keys = engine.__dict__.setdefault("_sieve_read", set())  # engines saved before it: none
    if not written:
        engine._sieve[key] = list(terms)
        read_keys.discard(key)
    elif key not in engine._sieve or key in read_keys:
        engine._sieve[key] = list(terms)
        read_keys.add(key)


def suggest_batch(engine, mentions: list[str], k: int, progress, documents) -> list:
    """:meth:`termnorm.engine.Engine.suggest_batch`: each mention read in its document, then with the run-time
    abbreviations spelled out, in groups of 64. The document's reading is what the sieve looks up (coded
    mentions from documents are stored read); the suggestion keeps the mention as written, its keywords
    marked on it, and says how it was read (``spelled_out``)."""
    documents = list(documents) if documents is not None else [""] * len(mentions)
    out: list = []
    step = 64
    for s in range(0, len(mentions), step):
        chunk = mentions[s:s + step]
        in_doc = [in_document(engine, m, d) for m, d in zip(chunk, documents[s:s + step])]
        read = [engine.spelled_out(m) for m in in_doc]
        cands = engine.recall_batch(read, originals=in_doc)
        if engine.lexranker is not None and doc_words.KEY in engine.lexranker.featurizer.score_keys:
            doc_words.annotate(engine.vocabulary, read, documents[s:s + step], cands)
        sugs = engine._finish(read, cands, k, originals=in_doc)
        for sug, m, d in zip(sugs, chunk, in_doc):
            if d != m:
                sug.spelled_out = sug.spelled_out or d
                sug.mention, sug.keywords = m, engine.tag(m)
        out.extend(sugs)
        if progress:
            progress(min(len(mentions), s + step), len(mentions))
    return out
