"""Why a candidate was proposed, in words a coder can check: the evidence behind each row of the candidate table.

A candidate coders have used carries its history: how often it was coded and the coded mention most like this
one. A candidate no coder has used yet (the long tail: every term on a hospital's first day) can only have come
from the vocabulary itself, so its evidence says which: the name or synonym that matches, the keywords it shares
with the mention, the rewrites coders apply elsewhere that reconcile the rest (肿瘤 -> 病损, learned by the
surface-difference scorer), how often its category was coded (its siblings), and the dense encoder's closeness.

The counts are kept on the engine and brought up to date as coders decide (the history only grows between
rebuilds); nothing here changes a score. They also say which keywords of a mention coders leave out of the terms
they choose (:func:`dropped`), so the candidate table does not mark a term as lacking detail no term codes.
"""

from __future__ import annotations

import re
import threading
from collections import Counter

from termnorm.rank.hierarchy import categories
from termnorm.text.keywords import DECISIVE_KINDS, keyword_key
from termnorm.text.normalize import char_bigrams, normalize

#: Coded mentions of one term compared with the mention to find the most similar one (the latest ones).
NEAREST_OF = 300
#: The character-bigram overlap (Jaccard) from which the closest coded mention is named ("like …").
LIKE = 0.2
#: How many shared keywords are named.
SHARED_SHOWN = 3
#: The learned rewrite weight (termnorm.rank.surface) from which a pair of keywords is named: far above the keyword
#: marks' termnorm.reading.SAME_KEYWORD_WEIGHT, since a named pair must read as right to a coder (肿物 -> 病损 3.2,
#: 电切术 -> 切除术 2.0, 肿瘤 -> 病损 1.7 on the demo model; 肿物 -> 活组织检查 1.5, a coding habit, not a synonym).
REWRITE_SHOWN = 1.5
#: The evidence of a candidate with none: no coded mention like this one, nothing of its name in the mention.
NOTHING = "shares nothing with the mention"
#: A site or type keyword of a mention that coders leave out of the terms they choose, with nothing of its kind in
#: its place, in at least this share of the coded mentions holding it (and in DROPPED_MIN_CODED of them at least)
#: is detail the vocabulary does not code (大脑 in 大脑开颅、右额叶脑膜瘤切除术 -> 脑膜病损切除术): the candidate table
#: does not mark a term as lacking it (benchmarks/keyword_marks.py measures the marks).
DROPPED_SHARE = 0.5
DROPPED_MIN_CODED = 3
_LOCK = threading.Lock()


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
        self.kw_coded: Counter = Counter()  # (kind, keyword_key) -> coded mentions holding it
        self.kw_dropped: Counter = Counter()  # ... whose terms leave it out with nothing of its kind instead
        self.term_keys: dict[str, set] = {}

    def update(self, engine) -> "_Counts":
        with _LOCK:  # one app server draws several coders' pages at once on one engine
            self._update(engine)
        return self

    def _update(self, engine) -> None:
        history = engine.history
        if id(history) != self.history_id or len(history) < self.seen:  # a new history: count it again
            self.seen, self.history_id = 0, id(history)
            self.uses, self.category_uses, self.texts = Counter(), Counter(), {}
            self.kw_coded, self.kw_dropped = Counter(), Counter()
        for m in history[self.seen:]:
            self._count_drops(engine, m)
            for t in set(m.terms):
                self.uses[t] += 1
                self.texts.setdefault(t, []).append(m.text)
                cats = categories(engine.vocabulary, t, self.cat_cache)
                if cats:
                    self.category_uses[cats[0]] += 1
        self.seen = len(history)

    def _count_drops(self, engine, m) -> None:
        text = normalize(m.text)
        terms = [normalize(t) for t in m.terms]
        keys = set().union(*(self._keys(engine, t) for t in m.terms)) if m.terms else set()
        new_kinds = {kind for kind, key in keys if key not in text}  # a keyword the terms bring: a rewrite
        for kind, key in {(s.kind, keyword_key(s)) for s in engine.tag(m.text) if s.kind in DECISIVE_KINDS}:
            self.kw_coded[kind, key] += 1
            if kind not in new_kinds and not any(key in t for t in terms):
                self.kw_dropped[kind, key] += 1

    def dropped(self, span) -> bool:
        """Whether coders leave the mention keyword ``span`` out of their terms (:data:`DROPPED_SHARE`), as
        counted at the last update (a page takes the counts once and asks for each keyword of its table)."""
        key = (span.kind, keyword_key(span))
        n = self.kw_coded.get(key, 0)
        return n >= DROPPED_MIN_CODED and self.kw_dropped.get(key, 0) >= DROPPED_SHARE * n

    def _keys(self, engine, term: str) -> set:
        got = self.term_keys.get(term)
        if got is None:
            got = {(s.kind, keyword_key(s)) for s in engine.tag(term) if s.kind in DECISIVE_KINDS}
            self.term_keys[term] = got
        return got


def counts(engine) -> _Counts:
    """The engine's evidence counts (built on first use, never pickled: see Engine.__getstate__)."""
    got = engine.__dict__.get("_evidence_counts")
    if got is None or got.engine_id != id(engine):  # a copy (Engine.with_history) shares the dict: its own
        got = engine.__dict__["_evidence_counts"] = _Counts()
        got.engine_id = id(engine)
    return got.update(engine)


def dropped(engine, span) -> bool:
    """Whether coders leave the mention keyword ``span`` out of the terms they choose (:meth:`_Counts.dropped`)."""
    return counts(engine).dropped(span)


def _best_surface(engine, term: str, grams: set[str], text: str) -> str | None:
    """The synonym that matches the mention better than the name does, or the name/synonym written exactly."""
    forms = [term, *engine.vocabulary.synonyms.get(term, [])]
    for f in forms:
        if normalize(f) == text:
            return f"{'name' if f == term else 'synonym “' + f + '”'} as written"
    if len(forms) == 1:
        return None
    scored = [(_similarity(grams, char_bigrams(normalize(f))), i) for i, f in enumerate(forms)]
    best, i = max(scored)
    return f"synonym “{forms[i]}”" if i and best > scored[0][0] else None


def _common_runs(a: str, b: str, shortest: int = 2) -> list[tuple[int, int]]:
    """(start in ``b``, length) of the runs of at least ``shortest`` characters the two texts share, longest
    first (difflib's matching blocks)."""
    from difflib import SequenceMatcher

    blocks = SequenceMatcher(None, a, b, autojunk=False).get_matching_blocks()
    return sorted(((m.b, m.size) for m in blocks if m.size >= shortest), key=lambda r: -r[1])


_LATIN_WORD = re.compile(r"[a-z0-9]+")


def _word_char(c: str) -> bool:
    return c.isascii() and c.isalnum()


def _whole_words(norm: str, at: int, end: int) -> tuple[int, int]:
    """The run ``norm[at:end]`` without a Latin word cut at either end (a user test read "shares e Deficiency",
    "shares uco" on MEDIC); Chinese runs are kept, any character being a word there."""
    if 0 < at < end and _word_char(norm[at - 1]) and _word_char(norm[at]):
        while at < end and _word_char(norm[at]):
            at += 1
    if at < end < len(norm) and _word_char(norm[end]) and _word_char(norm[end - 1]):
        while end > at and _word_char(norm[end - 1]):
            end -= 1
    while at < end and norm[at] in " -,/":
        at += 1
    while end > at and norm[end - 1] in " -,/":
        end -= 1
    return at, end


def _shared(engine, text: str, read_spans, term: str) -> list[str]:
    """What the name shares with the mention: runs of text of three characters or more, or of two holding a
    keyword of both (as the term writes them), then shared keywords inside no run; and the learned rewrites
    that pair the keywords of one kind left over (the strongest pairs first, each keyword once)."""
    mine = [(s.kind, normalize(s.text)) for s in read_spans]
    term_spans = engine.tag(term)
    theirs = [(s.kind, normalize(s.text)) for s in term_spans]
    both = list(dict.fromkeys(t for k, t in mine if (k, t) in theirs))
    norm = normalize(term)
    same_places = len(term) == len(norm)
    shown = term if same_places else norm  # the term's own letters where normalizing kept positions
    words = []
    for at, end in _common_runs(text, norm):
        end += at
        if same_places:  # no scrap of a keyword at either end (侧甲状腺 of 单侧甲状腺 is 甲状腺; 切除 of 切除术 stays)
            for sp in term_spans:
                if sp.start < at < sp.end and 2 * (sp.end - at) <= sp.end - sp.start:
                    at = sp.end
                if sp.start < end < sp.end and 2 * (end - sp.start) <= sp.end - sp.start:
                    end = sp.start
        at, end = _whole_words(norm, at, end)
        run = norm[at:end]
        if len(run) >= 3 or (len(run) >= 2 and any(k in run for k in both)):
            words.append(shown[at:end])
    # Latin words shared out of order too (Anemia, Hemolytic, Congenital Nonspherocytic for "nonspherocytic
    # hemolytic anemia": one alignment of runs finds one of the three)
    have, taken = set(_LATIN_WORD.findall(text)), {x for w in words for x in _LATIN_WORD.findall(normalize(w))}
    words += [shown[m.start():m.end()] for m in _LATIN_WORD.finditer(norm)
              if len(m.group()) >= 3 and m.group() in have and m.group() not in taken]
    words += [k for k in both if len(k) >= 2 and not any(k in normalize(w) for w in words)]
    out = ["shares " + ", ".join(words[:SHARED_SHOWN])] if words else []
    covered = {normalize(w) for w in words}
    left_m = [(k, a) for k, a in mine if not any(a in w for w in covered)]
    left_t = [(k, b) for k, b in theirs if not any(b in w for w in covered)]
    d = getattr(engine, "diff_scorer", None)
    pairs = sorted(((d.rewrite_weight(a, b), a, b) for ka, a in left_m for kb, b in left_t
                    if ka == kb and a != b), reverse=True) if d is not None else []
    used, rewrites = set(), []
    for w, a, b in pairs:
        # one character is too little to name a rewrite on (a user test read "learned: 面 → 全部" for 左膝人工关节表面
        # 置换术: 面 of 表面 tagged as the face)
        if w >= REWRITE_SHOWN and a not in used and b not in used and min(len(a), len(b)) >= 2:
            used |= {a, b}
            rewrites.append(f"{a} → {b}")
    if rewrites:
        out.append("learned: " + ", ".join(rewrites))
    return out


def evidence(engine, read: str, candidates, read_spans=None) -> list[list[str]]:
    """Per candidate, short phrases saying why it is there (the module docstring). ``read`` is the mention as
    the engine read it (abbreviations spelled out), ``read_spans`` its keywords (tagged here if not given)."""
    c = counts(engine)
    text = normalize(read)
    grams = char_bigrams(text)
    spans = engine.tag(read) if read_spans is None else read_spans
    out = []
    for cand in candidates:
        term = cand.term
        uses = c.uses.get(term, 0)
        why: list[str] = []
        if uses:
            why.append(f"coded {uses}×")
            sim, near = max((_similarity(grams, char_bigrams(normalize(t))), t) for t in c.texts[term][-NEAREST_OF:])
            if normalize(near) == text:
                why.append("as written before")
            elif sim >= LIKE:
                why.append(f"like “{near}”")
        elif c.seen:  # with nothing coded yet every term is never coded: saying so on each row says nothing
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
        if not [w for w in why if not w.startswith(("coded ", "never coded"))] \
                and not grams & char_bigrams(normalize(term)):
            why.append(NOTHING)  # a count alone read as a reason to pick it
        out.append(why)
    return out
