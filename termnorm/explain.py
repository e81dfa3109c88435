"""Why a candidate was proposed, in words a coder can check: the evidence behind each row of the candidate table.

A candidate coders have used carries its history: how often it was coded and the coded mention most like this
one. A candidate no coder has used yet (the long tail: every term on a hospital's first day) can only have come
from the vocabulary itself, so its evidence says which: the name or synonym that matches, the keywords it shares
with the mention, the rewrites coders apply elsewhere that reconcile the rest (肿瘤 -> 病损, learned by the
surface-difference scorer), how often its category was coded (its siblings), and the dense encoder's closeness.

The counts are kept on the engine and brought up to date as coders decide (the history only grows between
rebuilds); nothing here changes a score.
"""

from __future__ import annotations

import threading
from collections import Counter

from termnorm.rank.hierarchy import categories
from termnorm.reading import same_keyword
from termnorm.text.normalize import normalize

#: Coded mentions of one term compared with the mention to find the most similar one (the latest ones).
NEAREST_OF = 300
#: How many shared keywords are named.
SHARED_SHOWN = 3
_LOCK = threading.Lock()


def _bigrams(s: str) -> set[str]:
    return {s[i:i + 2] for i in range(len(s) - 1)} or {s}


def _similarity(a: set[str], b: set[str]) -> float:
    return len(a & b) / max(1, len(a | b))


class _Counts:
    """Coded mentions per term and per category, and each term's coded texts, kept in step with the history."""

    def __init__(self):
        self.engine_id = None
        self.seen = 0
        self.history_id = None
        self.uses: Counter = Counter()
        self.category_uses: Counter = Counter()
        self.texts: dict[str, list[str]] = {}
        self.cat_cache: dict = {}

    def update(self, engine) -> "_Counts":
        with _LOCK:  # one app server draws several coders' pages at once on one engine
            self._update(engine)
        return self

    def _update(self, engine) -> None:
        history = engine.history
        if id(history) != self.history_id or len(history) < self.seen:  # a new history: count it again
            self.seen, self.history_id = 0, id(history)
            self.uses, self.category_uses, self.texts = Counter(), Counter(), {}
        for m in history[self.seen:]:
            for t in set(m.terms):
                self.uses[t] += 1
                self.texts.setdefault(t, []).append(m.text)
                cats = categories(engine.vocabulary, t, self.cat_cache)
                if cats:
                    self.category_uses[cats[0]] += 1
        self.seen = len(history)


def counts(engine) -> _Counts:
    """The engine's evidence counts (built on first use, never pickled: see Engine.__getstate__)."""
    got = engine.__dict__.get("_evidence_counts")
    if got is None or got.engine_id != id(engine):  # a copy (Engine.with_history) shares the dict: its own
        got = engine.__dict__["_evidence_counts"] = _Counts()
        got.engine_id = id(engine)
    return got.update(engine)


def _best_surface(engine, term: str, grams: set[str], text: str) -> str | None:
    """The synonym that matches the mention better than the name does, or the name/synonym written exactly."""
    forms = [term, *engine.vocabulary.synonyms.get(term, [])]
    for f in forms:
        if normalize(f) == text:
            return f"{'name' if f == term else 'synonym “' + f + '”'} as written"
    if len(forms) == 1:
        return None
    scored = [(_similarity(grams, _bigrams(normalize(f))), i) for i, f in enumerate(forms)]
    best, i = max(scored)
    return f"synonym “{forms[i]}”" if i and best > scored[0][0] else None


def _common_runs(a: str, b: str, shortest: int = 2) -> list[str]:
    """Runs of at least ``shortest`` characters the two texts share, longest first (difflib's matching blocks)."""
    from difflib import SequenceMatcher

    blocks = SequenceMatcher(None, a, b, autojunk=False).get_matching_blocks()
    return sorted((a[m.a:m.a + m.size] for m in blocks if m.size >= shortest), key=len, reverse=True)


def _shared(engine, text: str, read_spans, term: str) -> list[str]:
    """What the mention and the term share (their common keywords, then other common runs of text), then the
    learned rewrites that reconcile keywords of one kind they do not share."""
    mine = [(s.kind, normalize(s.text)) for s in read_spans]
    theirs = [(s.kind, normalize(s.text)) for s in engine.tag(term)]
    words = list(dict.fromkeys(t for k, t in mine if (k, t) in theirs))
    for run in _common_runs(text, normalize(term)):
        if not any(run in w or w in run for w in words):
            words.append(run)
    out = ["shares " + ", ".join(words[:SHARED_SHOWN])] if words else []
    for kind, a in mine:
        if a in words:
            continue
        for kind_b, b in theirs:
            if kind_b == kind and b != a and b not in words and same_keyword(engine, a, b):
                out.append(f"coders write {a} for {b}")
                break
    return out


def evidence(engine, read: str, candidates, read_spans=None) -> list[list[str]]:
    """Per candidate, short phrases saying why it is there (the module docstring). ``read`` is the mention as
    the engine read it (abbreviations spelled out), ``read_spans`` its keywords (tagged here if not given)."""
    c = counts(engine)
    text = normalize(read)
    grams = _bigrams(text)
    spans = engine.tag(read) if read_spans is None else read_spans
    out = []
    for cand in candidates:
        term = cand.term
        uses = c.uses.get(term, 0)
        why: list[str] = []
        if uses:
            why.append(f"coded {uses}×")
            near = max(c.texts[term][-NEAREST_OF:], key=lambda t: _similarity(grams, _bigrams(normalize(t))))
            why.append("as written before" if normalize(near) == text else f"like “{near}”")
        else:
            why.append("never coded")
        surface = _best_surface(engine, term, grams, text)
        if surface:
            why.append(surface)
        if not uses or not surface:
            why.extend(_shared(engine, text, spans, term))
        if not uses:
            cats = categories(engine.vocabulary, term, c.cat_cache)
            if cats and c.category_uses.get(cats[0]):
                why.append(f"category {cats[0]} coded {c.category_uses[cats[0]]}×")
            if cand.scores.get("dense", 0.0) > 0:
                why.append(f"close in meaning ({cand.scores['dense']:.2f})")
        out.append(why)
    return out
