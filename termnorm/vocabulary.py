"""A vocabulary of standard terms: names, codes, synonyms and hierarchy.

The unit the engine ranks is the *term name* (gold labels in CHIP-CDN and
Yidu-N7K are names). A name may carry several codes and a code several
names; each distinct name gets a stable integer ``term_id`` (its position in
``names``), so recall strategies can work on matrices indexed by term id.
Synonyms are extra surface forms of a term; they are searched but always
resolve to their term.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field


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
        return list(self.codes.get(name, []))

    def names_of(self, code: str) -> list[str]:
        return list(self._by_code.get(code, []))

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


def _prefix_parent(code: str, known: dict[str, str]) -> str | None:
    """Nearest shorter code that exists in ``known`` (codes such as 45.7301 -> 45.73 -> 45.7 -> 45)."""
    c = code
    while len(c) > 1:
        c = c[:-1].rstrip(".+-x")
        if c in known and c != code:
            return c
    return None
