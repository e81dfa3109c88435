"""Vocabulary search: what a coder types into the search box, found the way it was meant.

The search box of the coding page and of the Vocabulary page takes "a term,
a code or a synonym". Character similarity alone answers a code or an
abbreviation with unrelated names (``06.3100``, ``PCI`` -> ERCP), so
:class:`VocabularySearch` tries the readings of the query one after the
other and ranks by reading first (issue 22, item 5):

=================  ==========================================================  ===============
reading            what is found                                               score key
=================  ==========================================================  ===============
exact code         the names carrying the code (case and spaces ignored)       ``code``
code prefix        names with a code below it (``06.31`` -> ``06.3100``,        ``code_prefix``
                   ``06.3101``): leaves, then categories, each by code
nearest code       a code-like query nothing matches: the codes under its      ``code_nearest``
                   longest matching prefix (``E11.900`` -> under ``E11.90``),
                   then under shorter ones down to 3 code characters
name / synonym     the query equals a name or a synonym (after                 ``name`` /
                   :func:`~termnorm.text.normalize.normalize`)                  ``synonym``
in brackets        the query is the short form a name or synonym ends with in   ``bracketed``
                   brackets (``ERCP`` -> ``内镜逆行胰胆管造影[ERCP]``)
abbreviation       the query is an abbreviation (``PCI``): its expansions       ``abbreviation``
                   as names, inside names, then by similarity
written as         the query as the vocabulary spells its words (``胃癌`` ->     ``written_as``
                   ``胃恶性肿瘤``, :data:`WRITTEN_AS`), equal to a name or
                   synonym (its results first, then the readings below)
contained          names / synonyms that contain the query: those starting      ``name_contains``
                   with it first, then shorter before longer                   ``synonym_contains``
similar            the character TF-IDF / Jaccard union (the engine's          ``tfidf``,
                   ``_search_union``), what the search did before; only names   ``jaccard`` ...
                   holding half the query's words (:data:`MIN_SHARED`)
=================  ==========================================================  ===============

When a code reading finds anything, that is the whole answer: names that
merely share characters with the digits of a typed code are noise. A term
appears once, under its best reading. Each result is a
:class:`SearchHit` (a :class:`~termnorm.records.Candidate`) that also says how
it was found (``found``: a key of :data:`TAGS`) and through what (``via``: the
expansion of an abbreviation, the code prefix of a nearest code, the
synonym). ``codes`` lists the export code first (``Vocabulary.codes_of``).

A query is *code-like* when it matches :data:`CODE_LIKE`: an optional
letter, 1-6 digits, then an optional ``.``/``x`` part, ``/n``
morphology suffix and ``+``/``*`` dagger-asterisk tail (``06.31``, ``E11``,
``I10xx``, ``C56.x``, ``M8140``, ``M814000/3``, ``E11.221+N08.3*``). Only
code-like queries are read as code prefixes: abbreviations with digits
(``T2DM``) and Chinese text never are. An exact code is looked up for every
query. ``score`` orders the results (higher first); ``scores`` say how each was
found and how closely (1.0: exactly).

>>> from termnorm.vocabulary import Vocabulary
>>> v = Vocabulary()
>>> for code, name in [("06.3", "其他部分甲状腺切除术"), ("06.3100", "甲状腺病损切除术"),
...                    ("06.3101", "腔镜下甲状腺病损切除术"), ("06.3900", "其他部分甲状腺切除术")]:
...     _ = v.add_term(name, [code])
>>> s = VocabularySearch(v, abbreviations={"TT": "甲状腺病损切除术"})
>>> [(h.term, h.found) for h in s.search("06.31")]
[('甲状腺病损切除术', 'code_prefix'), ('腔镜下甲状腺病损切除术', 'code_prefix')]
>>> h = s.search("06.3199")[0]
>>> h.term, h.found, h.via, nearest_note("06.3199", [h])
('甲状腺病损切除术', 'code_nearest', '06.31', 'no code 06.3199; codes under 06.31')
>>> [(h.term, h.found, h.via, h.scores["abbreviation"] == 1.0) for h in s.search("TT", limit=2)]
[('甲状腺病损切除术', 'abbreviation', '甲状腺病损切除术', True), ('腔镜下甲状腺病损切除术', 'abbreviation', '甲状腺病损切除术', False)]
"""

from __future__ import annotations

import re
import unicodedata
from bisect import bisect_left
from dataclasses import dataclass
from typing import Iterable, Mapping

from termnorm.records import Candidate
from termnorm.text.normalize import Abbreviations, normalize
from termnorm.typed_codes import MIN_NEAREST, code_head, code_text, is_code_like  # noqa: F401 (their old home)
from termnorm.vocabulary import Vocabulary, code_key

#: Words clinicians write one way and Chinese ICD names another (胃癌 for 胃恶性肿瘤: character similarity ranks 腺癌
#: first). Hand-written: no package holds Chinese clinical spelling variants; the search alone reads them (the
#: engine learns its own rewrites from coded mentions, termnorm.rank.surface).
WRITTEN_AS = {"癌": "恶性肿瘤"}

#: A Latin short form in brackets at the end of a name or synonym: the vocabulary's own abbreviation of the whole term
#: (``[ERCP]``, ``（Epi-LASIK）``); one inside a name (脑室外引流[EVD]装置置换术) names a part of it, not the term.
BRACKETED = re.compile(r"[(（\[【]\s*([A-Za-z][A-Za-z0-9+/.\- ]{1,19}?)\s*[)）\]】]\s*$")

#: How a result was found (``SearchHit.found``) -> the short tag the pages show, best reading first.
TAGS = {"code": "code", "code_prefix": "code prefix", "code_nearest": "nearest code", "name": "name",
        "synonym": "synonym", "bracketed": "in brackets", "abbreviation": "abbreviation", "written_as": "written as",
        "name_contains": "in name", "synonym_contains": "in synonym", "similar": "similar"}
_SEP = "\n"  # joins the normalized surface forms into one string to search; normalize never leaves one


@dataclass
class SearchHit(Candidate):
    """A search result: a :class:`~termnorm.records.Candidate` plus how it was found.

    ``found``: a key of :data:`TAGS`; ``via``: the abbreviation's expansion, the nearest code prefix
    or the synonym that matched ("" otherwise); ``relation``: see :func:`found_tag`.
    """

    found: str = "similar"
    via: str = ""
    relation: str = ""  # "holds" / "like" ``via``: not the abbreviation's reading itself, a name near it


def nearest_note(query: str, hits: list[Candidate]) -> str | None:
    """"no code X; codes under Y" when the first result is a nearest-code fallback; "no code X in this
    vocabulary" when a code-like query found no code at all (what follows only resembles it); else None."""
    found = getattr(hits[0], "found", "") if hits else ""
    if found == "code_nearest":
        return f"no code {query.strip()}; codes under {hits[0].via}"
    if is_code_like(query) and found not in ("code", "code_prefix"):
        return f"no code {query.strip()} in this vocabulary" + ("; the names below only resemble it" if hits else "")
    return None


def found_tag(hit: Candidate) -> str:
    """The short tag the pages show for how a result was found (:data:`TAGS`; an abbreviation with its
    expansion: ``abbreviation → 经皮冠状动脉介入治疗``). A later result of the reading says it only holds the
    expansion or is like it (``like 腹腔镜下胆囊切除术 (abbreviation)``): a user read "LC: abbreviation →
    腹腔镜下胆囊切除术" on 腹腔镜下阑尾切除术 as what LC stands for."""
    found = getattr(hit, "found", "similar")
    via = getattr(hit, "via", "")
    tag = TAGS.get(found, found)
    if found == "written_as" and via:
        return f"{tag} {via}"
    if found != "abbreviation" or not via:
        return tag
    relation = getattr(hit, "relation", "")
    return f"{relation} {via} ({tag})" if relation else f"{tag} → {via}"


#: Readings that name a term outright when they score 1.0 (an abbreviation: its expansion is a name or synonym).
NAMING = ("code", "name", "synonym", "bracketed", "written_as", "abbreviation")


def named_term(hits: list[Candidate]) -> Candidate | None:
    """The one term a search's ``hits`` say the query names outright (:data:`NAMING`; or a code prefix only one term
    sits under), else None (none, or several: a code several names carry). A terms box takes typed text as it.

    >>> from termnorm.vocabulary import Vocabulary
    >>> v = Vocabulary()
    >>> for code, name in [("06.4", "甲状腺全部切除术"), ("06.3100", "甲状腺病损切除术"), ("06.3100", "腔镜下甲状腺病损切除术")]:
    ...     _ = v.add_term(name, [code])
    >>> s = VocabularySearch(v, abbreviations={"TT": "甲状腺全部切除术"})
    >>> [getattr(named_term(s.search(q, 5)), "term", None) for q in ("06.4", "TT", "甲状腺全部切除术 ", "06.31", "06.3100")]
    ['甲状腺全部切除术', '甲状腺全部切除术', '甲状腺全部切除术', None, None]
    """
    named = naming(hits)
    sole = not named and len(hits) == 1 and getattr(hits[0], "found", "") == "code_prefix"  # the one term under it
    return hits[0] if sole else named[0] if len(named) == 1 else None


def naming(hits: list[Candidate]) -> list[Candidate]:
    """The hits whose reading names their term outright (:data:`NAMING`, scoring 1.0), one per term: several when
    the query names several terms (``TURP``: the leaf ending in (TURP) and the category its expansion names)."""
    named = {h.term: h for h in hits if getattr(h, "found", "") in NAMING and not getattr(h, "relation", "")
             and h.scores.get(h.found) == 1.0}
    return list(named.values())


def abbreviation_pairs(table) -> list[tuple[str, str]]:
    """(abbreviation, expansion) pairs from ``{abbr: expansion or [expansions]}`` or from pairs."""
    if table is None:
        return []
    items = table.items() if isinstance(table, Mapping) else table
    out = []
    for abbr, exp in items:
        for e in ([exp] if isinstance(exp, str) else exp):
            out.append((abbr, e))
    return out


_WORDS = re.compile(r"[a-z]+|[^\W\d_a-z]")


def _found(word: str, form: str) -> bool:
    """A query's word in a normalized form: as it is, or (3 letters or more) by most of its letter trigrams."""
    if word in form or len(word) < 3:
        return word in form
    grams = {word[i:i + 3] for i in range(len(word) - 2)}
    return 2 * sum(g in form for g in grams) > len(grams)


#: a similar-reading result must hold at least this share of the query's words (:meth:`VocabularySearch.shares`):
#: a typo keeps most of them (甲壮腺病损切除术), a string of keys or a word from elsewhere few (asdfgh, 你好世界)
MIN_SHARED = 0.5


class VocabularySearch:
    """Ranked type-ahead search over a vocabulary's codes, names, synonyms and abbreviations.

    ``union_recaller``: the fuzzy last reading, a fitted :class:`~termnorm.recall.union.UnionRecaller`
    (the engine passes its ``_search_union``); None builds char TF-IDF + Jaccard on first need.
    ``abbreviations``: ``{abbreviation: expansion}`` (the keyword folder's ``abbreviations.json``)
    or ``(abbreviation, expansion)`` pairs; more are taught with :meth:`add_abbreviation`.

    The code index is a sorted list of code keys searched with ``bisect``: a prefix range is two
    look-ups, and a search library (a trie, sqlite FTS) would add a dependency for ~10k-40k short
    keys that Python's own sort and bisect already answer in microseconds. The vocabulary is
    indexed on the first search and again when it has grown (``len(vocabulary)``); synonyms added
    later must come through :meth:`add_synonym` (``Engine.add_synonym`` does).
    """

    def __init__(self, vocabulary: Vocabulary, union_recaller=None, abbreviations=None):
        self.vocabulary = vocabulary
        self.union = union_recaller
        self._abbr: dict[str, list[str]] = {}  # normalized abbreviation -> expansions as written
        self._written: dict[str, str] = {}  # normalized abbreviation -> as first written (PCI, not pci)
        self._spelling: Abbreviations | None = None  # the table spelled_out reads (built when first needed)
        for a, e in abbreviation_pairs(abbreviations):
            self.add_abbreviation(a, e)
        self._indexed = -1  # len(vocabulary) when indexed

    # ---- teaching --------------------------------------------------------
    def add_abbreviation(self, abbreviation: str, expansion: str) -> bool:
        """Search ``expansion`` when ``abbreviation`` is typed (any case). True if new; ValueError if empty."""
        key, expansion = normalize(abbreviation or ""), (expansion or "").strip()
        if not key or not expansion:
            raise ValueError("an abbreviation and its expansion must be non-empty")
        if key == normalize(expansion) or expansion in self._abbr.get(key, ()):
            return False  # an abbreviation that stands for itself ("＋" -> "+") would only repeat the query
        self._abbr.setdefault(key, []).append(expansion)
        self._written.setdefault(key, abbreviation.strip())
        self._spelling = None
        return True

    def expansions(self, query: str) -> list[str]:
        """What ``query`` stands for when it is a known abbreviation (else [])."""
        return list(self._abbr.get(normalize(query), ()))

    def spelled_out(self, query: str) -> list[str]:
        """The query with the abbreviations inside it spelled out (``卵巢Ca`` -> ``卵巢恶性肿瘤``, each by its first
        expansion); [] when it holds none."""
        if getattr(self, "_spelling", None) is None:  # getattr: searches pickled before it existed
            self._spelling = Abbreviations({k: v[0] for k, v in self._abbr.items()})
        q = normalize(query)
        spelled = self._spelling.expand(q)
        return [spelled] if spelled != q else []

    def abbreviations(self) -> list[tuple[str, str]]:
        """Every (abbreviation as first written, expansion) pair known."""
        return [(self._written[a], e) for a, es in self._abbr.items() for e in es]

    def add_synonym(self, term: str, synonym: str) -> None:
        """Make a synonym added to the vocabulary after indexing searchable."""
        if self._indexed < 0 or term not in self.vocabulary:
            return
        tid, norm = self.vocabulary.index(term), normalize(synonym)
        if norm and (tid, True) not in {(t, s) for t, s, _ in self._exact.get(norm, ())}:
            self._exact.setdefault(norm, []).append((tid, True, synonym))
            self._extra_forms.append((norm, tid, True, synonym))
            self._index_bracket(tid, True, synonym)

    # ---- index -----------------------------------------------------------
    def _ensure_index(self) -> None:
        if self._indexed == len(self.vocabulary):
            return
        v = self.vocabulary
        self._by_code: dict[str, list[str]] = {}  # code_text -> codes as written
        entries = set()
        for cl in v.codes.values():
            for c in cl:
                self._by_code.setdefault(code_text(c), [])
                if c not in self._by_code[code_text(c)]:
                    self._by_code[code_text(c)].append(c)
                k = code_key(c)
                if k:
                    entries.add((k, c))
        self._keys = sorted(entries)
        self._kinds = v.code_kinds()
        # exact names / synonyms and one joined string of every normalized surface form for "contains"
        self._exact: dict[str, list[tuple[int, bool, str]]] = {}
        forms = [(normalize(n), i, False, n) for i, n in enumerate(v.names)]
        for name, syns in v.synonyms.items():
            tid = v.index(name)
            forms.extend((normalize(s), tid, True, s) for s in syns)
        self._brackets: dict[str, list[tuple[int, bool, str]]] = {}  # normalized short form -> forms ending with it
        for norm, tid, is_syn, text in forms:
            if norm:
                self._exact.setdefault(norm, []).append((tid, is_syn, text))
                self._index_bracket(tid, is_syn, text)
        self._forms = forms
        self._extra_forms: list[tuple[str, int, bool, str]] = []
        self._joined = _SEP.join(f[0] for f in forms)
        starts, pos = [], 0
        for f in forms:
            starts.append(pos)
            pos += len(f[0]) + 1
        self._starts = starts
        self._indexed = len(v)

    def _index_bracket(self, tid: int, is_syn: bool, text: str) -> None:
        m = BRACKETED.search(text)
        forms = self._brackets.setdefault(normalize(m.group(1)), []) if m else None
        if forms is not None and (tid, is_syn, text) not in forms:
            forms.append((tid, is_syn, text))

    def _fuzzy(self):
        if self.union is None:
            from termnorm.recall.jaccard import JaccardRecaller
            from termnorm.recall.tfidf import CharTfidfRecaller
            from termnorm.recall.union import UnionRecaller

            self.union = UnionRecaller([CharTfidfRecaller(), JaccardRecaller()], split=False).fit(self.vocabulary)
        return self.union

    # ---- readings (each returns (term name, score, via) in rank order) ---------------
    def _names_of_codes(self, codes: Iterable[str]) -> list[str]:
        out = []
        for c in codes:
            out.extend(self.vocabulary.names_of(c))
        return out

    def exact_code(self, query: str) -> list[tuple[str, float, str]]:
        """Names carrying the code typed (case-insensitive)."""
        return [(n, 1.0, "") for n in self._names_of_codes(self._by_code.get(code_text(query), ()))]

    def _under(self, key: str) -> list[tuple[str, str]]:
        """(key, code) of every code whose key starts with ``key``: leaves first, each part by code."""
        lo = bisect_left(self._keys, (key,))
        hi = bisect_left(self._keys, (key + "\x7f",))  # keys are [0-9A-Z]: \x7f sorts after all of them
        below = self._keys[lo:hi]
        leaves = [e for e in below if self._kinds.get(e[1]) != "category"]
        return leaves + [e for e in below if self._kinds.get(e[1]) == "category"]

    def code_prefix(self, query: str) -> list[tuple[str, float, str]]:
        """Names with a code below the typed code or spelled like it (``A06.601+G07*`` for ``A06.601``), for
        code-like queries; ``code_prefix`` scores the share of the code typed."""
        if not is_code_like(query):
            return []
        qk = code_key(code_text(query))
        if not qk:
            return []
        return [(n, len(qk) / len(k), "") for k, c in self._under(qk) for n in self.vocabulary.names_of(c)]

    def nearest_code(self, query: str, limit: int) -> list[tuple[str, float, str]]:
        """For a code-like query that matches nothing: codes under its longest matching prefix, then under
        shorter ones (down to :data:`MIN_NEAREST` key characters) until ``limit`` names."""
        if not is_code_like(query):
            return []
        qk = code_key(code_text(query))
        out, seen = [], set()
        for n in range(len(qk) - 1, MIN_NEAREST - 1, -1):
            under = self._under(qk[:n])
            if not under:
                continue
            via = code_head(unicodedata.normalize("NFKC", query).strip(), n)
            for _, c in under:
                for name in self.vocabulary.names_of(c):
                    if name not in seen:
                        seen.add(name)
                        out.append((name, n / len(qk), via))
            if len(out) >= limit:
                break
        return out

    def exact_text(self, text: str, synonyms: bool) -> list[tuple[str, float, str]]:
        """Names (``synonyms=False``) or synonyms equal to ``text`` after normalization."""
        names = self.vocabulary.names
        return [(names[tid], 1.0, t if synonyms else "") for tid, is_syn, t in self._exact.get(normalize(text), ())
                if is_syn == synonyms]

    def bracketed(self, text: str) -> list[tuple[str, float, str]]:
        """Names whose name or synonym ends with ``text`` in brackets (:data:`BRACKETED`), names first."""
        found = sorted(self._brackets.get(normalize(text), ()), key=lambda f: f[1])
        return [(self.vocabulary.names[tid], 1.0, form if is_syn else "") for tid, is_syn, form in found]

    def contained(self, text: str) -> list[tuple[str, float, str, bool, bool]]:
        """Surface forms that contain ``text`` (normalized): (name, length ratio, synonym, is synonym, starts with)."""
        q = normalize(text)
        if not q or _SEP in q:
            return []
        hits, i = [], self._joined.find(q)
        while i >= 0:
            hits.append(self._forms[bisect_left(self._starts, i + 1) - 1])
            i = self._joined.find(q, i + 1)
        hits.extend(f for f in self._extra_forms if q in f[0])
        names = self.vocabulary.names
        out = [(names[tid], len(q) / len(norm), form if is_syn else "", is_syn, norm.startswith(q))
               for norm, tid, is_syn, form in hits]
        # a name that starts with the query is its fuller form (心房颤动 -> 心房颤动[心房纤颤]), one that ends with
        # it a kind of it (阵发性心房颤动): starts first, then shorter, names before synonyms
        out.sort(key=lambda h: (not h[4], -h[1], h[3]))
        return out

    def similar(self, queries: list[str]) -> list[list[Candidate]]:
        """The fuzzy union's candidates per query, those containing the query first (the old search)."""
        out = []
        for q, cands in zip(queries, self._fuzzy().recall_batch(list(queries))):
            nq = normalize(q)
            cands.sort(key=lambda c: (-(nq in normalize(c.term)), -c.score))
            out.append(cands)
        return out

    # ---- the search ----------------------------------------------------------------
    def search(self, query: str, limit: int = 20) -> list[SearchHit]:
        """The ranked results (see the module docstring), at most ``limit``; [] for a blank query."""
        if not (query or "").strip() or limit <= 0:
            return []
        self._ensure_index()
        hits: dict[str, SearchHit] = {}

        def add(found: str, rows, extra=None, relation: str = "") -> bool:
            """Keep each term's first (best) reading; True once ``limit`` terms are found. ``relation``: of an
            abbreviation's rows near its reading, unless one is the first result (SearchHit.relation)."""
            for row in rows:
                name, score, via = row[0], row[1], row[2]
                if name not in hits:
                    scores = {found: float(score), **(extra or {})}
                    near = relation if hits else ""  # the first result is the reading's answer
                    hits[name] = SearchHit(self.vocabulary.index(name), name, 0.0, scores,
                                           self.vocabulary.codes_of(name), found, via, near)
                if len(hits) >= limit:
                    return True
            return False

        if not add("code", self.exact_code(query)):
            add("code_prefix", self.code_prefix(query))
        if not hits:
            add("code_nearest", self.nearest_code(query, limit))
        if hits:  # a typed code is meant as one: names similar to its digits would only be noise
            return self._ranked(hits)
        if add("name", self.exact_text(query, False)) or add("synonym", self.exact_text(query, True)) or \
                add("bracketed", self.bracketed(query)):
            return self._ranked(hits)
        expansions = self.expansions(query) or self.spelled_out(query)  # PCI; 卵巢Ca, read as 卵巢恶性肿瘤
        if expansions and self._abbreviation(expansions, add):
            return self._ranked(hits)
        for variant in self.written_as(query):
            if add("written_as", [(n, sc, variant) for n, sc, _ in self.exact_text(variant, False)
                                  + self.exact_text(variant, True)]):
                return self._ranked(hits)
        contained = self.contained(query)
        if add("name_contains", [h for h in contained if not h[3]]) or \
                add("synonym_contains", [h for h in contained if h[3]]):
            return self._ranked(hits)
        words = set(_WORDS.findall(normalize(query).lower()))  # read once: shares() runs on each similar name
        for c in self.similar([query])[0]:
            if self.shares(words, c.term) >= MIN_SHARED and add("similar", [(c.term, c.score, "")], c.scores):
                break
        return self._ranked(hits)

    @staticmethod
    def written_as(query: str) -> list[str]:
        """The query with the words of :data:`WRITTEN_AS` spelled the vocabulary's way; [] when it holds none."""
        q = spelled = normalize(query)
        for word, written in WRITTEN_AS.items():
            if written not in spelled:
                spelled = spelled.replace(word, written)
        return [spelled] if spelled != q else []

    def shares(self, words: set[str], name: str) -> float:
        """The share of the query's ``words`` found in the name or one of its synonyms, where a word is a Chinese
        character or a run of Latin letters (digits and signs aside; :data:`_WORDS` of the normalized query); a
        run is found when it is in the form, or for runs of 3 letters or more, when most of its letter trigrams
        are (diabetis in diabetes). Character n-grams alone also match a query nothing like a term (asdfgh ->
        内镜下胃黏膜下剥离术[ESD])."""
        if not words:
            return 1.0
        best = 0.0
        for form in (name, *self.vocabulary.synonyms.get(name, ())):
            f = normalize(form).lower()
            best = max(best, sum(_found(w, f) for w in words) / len(words))
        return best

    def _abbreviation(self, expansions: list[str], add) -> bool:
        """Each expansion as a name or synonym, inside names, then by similarity (all of them above the raw
        letters' containment and similarity). ``abbreviation`` scores 1 exact, the length ratio inside a name,
        half the union's score relative to its best for similar ones."""
        for e in expansions:
            if add("abbreviation", [(n, s, e) for n, s, _ in self.exact_text(e, False) + self.exact_text(e, True)]):
                return True
        for e in expansions:
            if add("abbreviation", [(n, 0.5 + 0.5 * ratio, e) for n, ratio, *_ in self.contained(e)], None, "holds"):
                return True
        for e, cands in zip(expansions, self.similar(expansions)):
            top = max((c.score for c in cands), default=1.0) or 1.0
            for c in cands:
                if add("abbreviation", [(c.term, 0.5 * c.score / top, e)], c.scores, "like"):
                    return True
        return False

    @staticmethod
    def _ranked(hits: dict[str, SearchHit]) -> list[SearchHit]:
        """Insertion order is rank order; ``score`` is set so that it sorts the same way (higher = better)."""
        out = list(hits.values())
        n = len(out)
        for i, h in enumerate(out):
            h.score = float(n - i)
        return out
