"""A vocabulary of standard terms: names, codes, synonyms and hierarchy.

The unit the engine ranks is the *term name* (gold labels in CHIP-CDN and
Yidu-N7K are names). A name may carry several codes and a code several
names; each distinct name gets a stable integer ``term_id`` (its position in
``names``), so recall strategies can work on matrices indexed by term id.
Synonyms are extra surface forms of a term; they are searched but always
resolve to their term.

Codes have a *kind*, read from the file's structure: a **category** code has
other codes below it (``01.6`` above ``01.6x00``, ``C56`` above ``C56.x`` above
``C56xx02``, or a parent in the vocabulary's tree), a **leaf** has none. A name
given several codes (395 of the 9,468 Yidu-N7K names: ``01.6`` and ``01.6x00``
颅骨病损的切除术) is exported with its most specific code: a leaf before a
category, a code below another of the name's codes before that one, then file
order; an ICD-O morphology code only when the name has no other (:meth:`Vocabulary.export_code`;
``codes_of`` lists that code first).
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field

CODE_KINDS = ("leaf", "category")
# ICD-O morphology codes (M817000/3): ICD-10 clinical editions give 131 tumour names one beside their
# classification code (肝细胞癌: C22.0, C22.001, M817000/3). They describe another axis (histology), so a name is
# exported with a morphology code only when it has no other.
MORPHOLOGY = re.compile(r"^M\d{4,6}/\d")


@dataclass
class Vocabulary:
    name: str = "vocabulary"
    names: list[str] = field(default_factory=list)
    codes: dict[str, list[str]] = field(default_factory=dict)  # name -> codes
    synonyms: dict[str, list[str]] = field(default_factory=dict)  # name -> synonyms
    parent: dict[str, str] = field(default_factory=dict)  # code -> parent code
    code_names: dict[str, str] = field(default_factory=dict)  # code -> preferred name (incl. inner nodes)
    source: str = ""
    language: str = "zh"

    def __post_init__(self):
        self._index: dict[str, int] = {}
        self._by_code: dict[str, list[str]] = defaultdict(list)
        self._kinds: dict[str, str] | None = None  # code -> leaf / category, built on first use
        names, self.names = self.names, []
        for n in names:
            self.add_term(n, self.codes.get(n, []))

    # ---- building -------------------------------------------------------
    def add_term(self, name: str, codes=(), synonyms=()) -> int:
        """Add a name (or more codes / synonyms for an existing one); return its id."""
        name = name.strip()
        if not name:
            raise ValueError("empty term name")
        tid = self._index.get(name)
        if tid is None:
            tid = len(self.names)
            self._index[name] = tid
            self.names.append(name)
        cl = self.codes.setdefault(name, [])
        for c in codes:
            c = str(c).strip()
            if c and c not in cl:
                cl.append(c)
                self._by_code[c].append(name)
                self.code_names.setdefault(c, name)
                self._kinds = None
        for s in synonyms:
            self.add_synonym(name, s)
        return tid

    def add_synonym(self, name: str, synonym: str) -> bool:
        """Record ``synonym`` as another surface form of ``name``. Returns True if new."""
        if name not in self._index:
            raise KeyError(f"unknown term {name!r}")
        synonym = synonym.strip()
        if not synonym or synonym == name:
            return False
        lst = self.synonyms.setdefault(name, [])
        if synonym in lst:
            return False
        lst.append(synonym)
        return True

    # ---- lookup ---------------------------------------------------------
    def __len__(self) -> int:
        return len(self.names)

    def __contains__(self, name: str) -> bool:
        return name in self._index

    def index(self, name: str) -> int:
        return self._index[name]

    def get_id(self, name: str) -> int | None:
        return self._index.get(name)

    def codes_of(self, name: str) -> list[str]:
        """Every code of ``name``, the export code (:meth:`export_code`) first, the others in file order."""
        codes = self.codes.get(name, [])
        if len(codes) < 2:
            return list(codes)
        kinds = self.code_kinds()
        keys = {c: code_key(c) for c in codes}
        # depth among the name's own codes (C56xx02 lies below C56.x below C56); codes of different systems or
        # branches (a MeSH and an OMIM id; 13.2 and 13.3) are not compared, so they keep the file's order
        depth = {c: sum(1 for o in codes if keys[o] != keys[c] and keys[c].startswith(keys[o])) for c in codes}
        order = {c: i for i, c in enumerate(codes)}
        return sorted(codes, key=lambda c: (bool(MORPHOLOGY.match(c)), kinds.get(c) != "leaf", -depth[c], order[c]))

    def export_code(self, name: str) -> str | None:
        """The code written for ``name`` unless a coder picks another: its most specific code (None: no code)."""
        codes = self.codes_of(name)
        return codes[0] if codes else None

    def code_kind(self, code: str) -> str:
        """``leaf`` or ``category`` (see the module docstring)."""
        return self.code_kinds().get(code, "leaf")

    def code_kinds(self) -> dict[str, str]:
        """code -> ``leaf`` / ``category`` for every code the vocabulary knows (names' codes and inner codes)."""
        if getattr(self, "_kinds", None) is None:  # getattr: vocabularies pickled before kinds existed
            codes = set(self.code_names) | set(self.parent) | set(self.parent.values())
            for cl in self.codes.values():
                codes.update(cl)
            keys = sorted({code_key(c) for c in codes} - {""})
            # in sorted order every extension of a key follows it at once, so one look ahead suffices
            has_below = {k for k, nxt in zip(keys, keys[1:]) if nxt.startswith(k)}
            parents = set(self.parent.values())
            self._kinds = {c: "category" if c in parents or code_key(c) in has_below else "leaf" for c in codes}
        return self._kinds

    def names_of(self, code: str) -> list[str]:
        return list(self._by_code.get(code, []))

    def shared_codes(self) -> dict[str, list[str]]:
        """Codes given to more than one term (code -> names): each name is a term of its own, exported under the
        same code, which a hospital's list usually means as a synonym row or a typing error."""
        return {c: list(ns) for c, ns in self._by_code.items() if len(ns) > 1}

    def surface_forms(self) -> tuple[list[str], list[int]]:
        """Every searchable text (names then synonyms) with the term id it resolves to."""
        texts = list(self.names)
        ids = list(range(len(self.names)))
        for name, syns in self.synonyms.items():
            tid = self._index[name]
            for s in syns:
                texts.append(s)
                ids.append(tid)
        return texts, ids

    def ancestors(self, code: str) -> list[str]:
        """Parent chain of a code, nearest first (tree, else code prefixes)."""
        out = []
        seen = {code}
        cur = self.parent.get(code) or _prefix_parent(code, self.code_names)
        while cur and cur not in seen:
            out.append(cur)
            seen.add(cur)
            cur = self.parent.get(cur) or _prefix_parent(cur, self.code_names)
        return out

    def chapter(self, name: str) -> str:
        """A coarse category of a term for error breakdowns: the top ancestor code or code head."""
        codes = self.codes.get(name) or []
        if not codes:
            return "?"
        anc = self.ancestors(codes[0])
        if anc:
            return anc[-1]
        c = codes[0]
        return c.split(".")[0][:3]


def code_key(code: str) -> str:
    """What decides whether one code lies below another: the first code of a dagger/asterisk pair, letters and
    digits only, upper case (``01.6x00`` -> ``016X00``; ``A06.601+G07*`` -> ``A06601``).

    >>> code_key("01.6x00").startswith(code_key("01.6")), code_key("C56xx02").startswith(code_key("C56.x"))
    (True, True)
    """
    return re.sub(r"[^0-9A-Za-z]", "", str(code).split("+", 1)[0]).upper()


def _prefix_parent(code: str, known: dict[str, str]) -> str | None:
    """Nearest shorter code that exists in ``known`` (codes such as 45.7301 -> 45.73 -> 45.7 -> 45)."""
    c = code
    while len(c) > 1:
        c = c[:-1].rstrip(".+-x")
        if c in known and c != code:
            return c
    return None
