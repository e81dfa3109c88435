"""Keyword tagging: body site, type, approach, laterality and disease nature.

Approach A's keyword-attentive ranker (KAR, methods.md) lets a slot token
attend only to the *procedure-site* / *procedure-type* tokens of a pair;
this module finds those keywords. A :class:`KeywordTagger` holds one lexicon
``normalized word -> kind`` (kinds: ``records.KEYWORD_KINDS``) built from
three sources, in decreasing priority when a word has several kinds:

1. the hand-written lists of :mod:`termnorm.text.builtin_keywords`
   (always available, also for the embedded demo);
2. keyword files in a folder (``procedure_sites.txt``, ``procedure_types.txt``,
   ``procedure_approaches.txt``, optionally ``*lateralit*.txt`` / ``*nature*.txt``;
   one word per line or ``word<TAB>frequency``), read by :func:`read_keyword_dir`;
3. keywords *mined from the vocabulary itself* (:func:`mine_keywords`), so a
   vocabulary that comes with no keyword list still gets sites and types.

Tagging is longest-cover matching over a character trie of the normalized text; the
spans are reported in offsets of the ORIGINAL text (via
:func:`termnorm.text.normalize.normalize_with_offsets`), so the app can
highlight the mention as typed: ``span.text == text[span.start:span.end]``.
:meth:`KeywordTagger.tag_normalized` gives spans of an already-normalized text.

Example::

    >>> t = KeywordTagger.builtin()
    >>> [(s.kind, s.text) for s in t.tag("右侧甲状腺肿瘤切除术")]
    [('laterality', '右侧'), ('site', '甲状腺'), ('type', '肿瘤'), ('type', '切除术')]

Speed (``python3 -m termnorm.text.segment``, shared 2-core box at load ~9):
building the tagger for the 40,474 ICD-10 names (built-in + keyword files +
mining) takes 1.5-2 s, tagging all of them 2-2.7 s.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from pathlib import Path
from typing import Iterable, Mapping

from termnorm.errors import DataFormatError
from termnorm.records import KEYWORD_KINDS, KeywordSpan
from termnorm.text.builtin_keywords import BLOCKER_WORDS, BUILTIN_KEYWORDS, PRIORITY, QUALIFIER_WORDS
from termnorm.text.normalize import normalize, normalize_with_offsets

_END = ""  # trie key marking "a keyword ends here" (never a real character)
_BLOCK = ""  # the "kind" of a blocker word: matched, competes for characters, never reported
_CJK_HEAD = re.compile("[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+")
_CJK_TAIL = re.compile("[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+$")
_CORE_END = re.compile(r"[(,;:\"\[]")

# ---------------------------------------------------------------------------
# keyword files
# ---------------------------------------------------------------------------
_FILE_KINDS = (("lateral", "laterality"), ("nature", "nature"), ("approach", "approach"),
               ("site", "site"), ("type", "type"))


#: The keyword kinds that decide a code: the body site and the procedure / disease type (methods.md)
DECISIVE_KINDS = ("site", "type")


def keyword_key(span: KeywordSpan) -> str:
    """What two keywords must share to be "the same": normalized text, a
    type without its trailing 术 (mentions write 切除 / 探查 / 清扫 where terms write 切除术 / 探查术 / 清扫术)."""
    text = normalize(span.text)
    return text.removesuffix("术") or text if span.kind == "type" else text


def read_keyword_dir(folder) -> dict[str, list[str]]:
    """Keyword words per kind from the ``*.txt`` files of a folder.

    The kind comes from the file name (``procedure_sites.txt`` -> ``site``,
    ``procedure_types.txt`` -> ``type``, ``procedure_approaches.txt`` ->
    ``approach``; ``lateral`` / ``nature`` likewise); other files are ignored.
    Each non-empty line is ``word`` or ``word<TAB>frequency`` (``#`` starts a
    comment line). Raises :class:`DataFormatError` naming file and row.
    """
    d = Path(folder)
    if not d.is_dir():
        raise DataFormatError(d, None, "keyword folder not found")
    out: dict[str, list[str]] = {k: [] for k in KEYWORD_KINDS}
    for path in sorted(d.glob("*.txt")):
        kind = next((k for key, k in _FILE_KINDS if key in path.name.lower()), None)
        if kind is None:
            continue
        try:
            lines = path.read_text(encoding="utf-8-sig").splitlines()
        except UnicodeDecodeError as e:
            raise DataFormatError(path, None, f"not UTF-8 text ({e.reason})") from None
        for row, line in enumerate(lines, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            cells = line.split("\t")
            if len(cells) > 2 or (len(cells) == 2 and not cells[1].strip().isdigit()):
                raise DataFormatError(path, row, f"expected 'word' or 'word<TAB>frequency', found {line!r}")
            out[kind].append(cells[0].strip())
    return out


# ---------------------------------------------------------------------------
# mining keywords from the vocabulary
# ---------------------------------------------------------------------------
# A tail ending like this is a procedure type, otherwise a disease type;
# both are kind "type" (the issue: procedure type / disease type), the split
# is only reported by mine_keywords(..., detail=True).
PROCEDURE_TAIL_ENDS = ("术", "法", "疗", "治疗", "造影", "检查", "置换", "修补", "成形", "切除", "活检",
                       "监测", "测定", "注射", "输注", "引流", "造口", "植入", "置入", "移植", "吻合",
                       "固定", "缝合", "切开", "探查", "穿刺", "去除", "取出", "照射", "显像", "扫描")
# A head ending like this names a disease / procedure (糖尿病, 肺炎), not a site.
_TYPE_LAST_CHARS = set("病炎癌瘤症征伤术疝瘘痛")


def default_min_support(n_names: int) -> int:
    """Minimum number of names a mined head/tail must start/end.

    ``max(3, n // 2500)``: 16 for the 40,474 ICD-10 names, 4 for the 9,867
    Yidu-N7K names, 3 for small vocabularies (below 3 the branching test,
    ≥ 3 distinct neighbours, already decides). Measured on Yidu-N7K against
    ``procedure_types.txt`` (mined tails ending in 术 that the file also
    lists — a lower bound on precision, the file is not exhaustive):
    support 3: 65 tails, 62 %; 4: 54, 72 %; 6: 40, 80 %; 10: 26, 92 %.
    On ICD-10, support 40 loses real words (哮喘, 气胸, 坐骨, 呼吸道) and 8
    adds ~210 words of which most are real (低血压, 心房颤动, 股浅动脉) but
    some are not (病史, 跌倒, 未进行操作); n // 2500 sits between.
    """
    return max(3, n_names // 2500)


def mine_keywords(names: Iterable[str], known: Mapping[str, str] | None = None, *,
                  min_support: int | None = None, min_n: int = 2, max_n: int = 6,
                  min_branch: int = 3, max_share: float = 0.75, site_end_support: int = 3) -> dict[str, str]:
    """Frequent heads (sites …) and tails (types) of term names; ``{word: kind}``.

    ``known`` (``{word: kind}``, e.g. the built-in lists) seeds the rules below
    and is never returned. Rule (accessor-variety style), on the leading and
    trailing CJK run of each distinct normalized name cut at its first
    ``( , ; : "``:

    * candidates: prefixes (heads) and suffixes (tails) of n = ``min_n`` .. ``max_n``
      characters;
    * **support**: the candidate starts (ends) at least ``min_support`` names
      (:func:`default_min_support` when None);
    * **branching**: the characters that follow a head (precede a tail),
      counting "name ends here" as one, take at least ``min_branch`` (3)
      distinct values — a real word is followed by many different things;
    * **containment**: no single following (preceding) character accounts for
      more than ``max_share`` (0.75) of the occurrences — else the longer
      string is the unit (甲状 is ~always followed by 腺: keep 甲状腺, drop 甲状);
    * no qualifier or connector (``builtin_keywords.QUALIFIER_WORDS``: 其他, 未特指,
      的, 伴, 和 …) inside;
    * **minimal tails**: a tail is dropped when a proper suffix of it (≥ 2 chars)
      is a known type or another accepted tail, or when it is 2 characters
      ending in a 1-character type (管切除术 ⊃ 切除术, 性肺炎 ⊃ 肺炎, 体炎 = 体 + 炎):
      the mined type is the shortest unit, the rest belongs to the site; a tail
      never starts with 性 (the end of an adjective: 性心脏病) and a procedure
      tail ending in 术 has ≥ 3 characters (a 2-character verb + 术, like every
      entry of procedure_types.txt: 入术 / 切术 are pieces of 置入术 / 电切术);
    * **minimal heads**: a head is dropped when a proper prefix (≥ 2 chars) is
      a known word or a kept head (甲状腺功能 ⊃ 甲状腺, 急性下壁 ⊃ 急性);
    * **composition**: a word that splits completely into ≥ 2 known / kept words
      is dropped (病损切除术 = 病损 + 切除术, 右侧甲状腺 = 右侧 + 甲状腺).

    Kinds: tails -> ``type`` (a procedure type when ending in 术/法/疗/治疗/造影/
    检查 …, ``PROCEDURE_TAIL_ENDS``, a disease type otherwise). Heads ->
    ``approach`` when starting with 经 or containing 镜 / ending in 入路,
    ``nature`` when ending in 性, ``type`` when ending in a known type or in
    one of 病炎癌瘤症征伤术疝瘘痛, ``site`` when its last character ends at
    least ``site_end_support`` (3) known sites (部 骨 腺 管 膜 脉 …; every head
    when ``known`` has no site at all); other heads (产科, 意外, 烟草 — ICD-10
    chapters of causes) are not keywords.
    A word that is both a head and a tail is classified as a head.
    """
    known = dict(known or {})
    cores = set()
    for name in names:
        n = normalize(name)
        core = _CORE_END.split(n, 1)[0]
        if core:
            cores.add(core)
    # Count the prefixes (suffixes) of n = min_n .. max_n + 1 characters of the
    # leading (trailing) CJK run; the continuations of a head p are then the
    # counted prefixes p + c, plus "the run ends here" (ends[p]). Plain dict
    # counting: this loop is the whole cost (~0.4 s for 40k names).
    heads: dict = defaultdict(int)
    tails: dict = defaultdict(int)
    head_ends: dict = defaultdict(int)
    tail_ends: dict = defaultdict(int)
    top = max_n + 1
    for core in cores:
        m = _CJK_HEAD.match(core)
        if m:
            w = m.group(0)
            for k in range(min_n, min(top, len(w)) + 1):
                heads[w[:k]] += 1
            if len(w) <= max_n:
                head_ends[w] += 1
        m = _CJK_TAIL.search(core)
        if m:
            w = m.group(0)
            for k in range(min_n, min(top, len(w)) + 1):
                tails[w[-k:]] += 1
            if len(w) <= max_n:
                tail_ends[w] += 1
    ms = default_min_support(len(cores)) if min_support is None else min_support

    def accepted(counts: dict, ends: dict, head: bool) -> set[str]:
        spread: dict[str, list[int]] = defaultdict(list)
        for w, k in counts.items():
            if len(w) > min_n:
                p = w[:-1] if head else w[1:]
                if counts[p] >= ms:
                    spread[p].append(k)
        for w, k in ends.items():
            if counts[w] >= ms:
                spread[w].append(k)
        return {w for w, ks in spread.items()
                if len(w) <= max_n and len(ks) >= min_branch and max(ks) <= max_share * counts[w]
                and _clean_word(w)}

    head_set, tail_set = accepted(heads, head_ends, True), accepted(tails, tail_ends, False)
    known_types = {w for w, k in known.items() if k == "type"}
    site_ends = Counter(w[-1] for w, k in known.items() if k == "site")

    cand: dict[str, str] = {}
    # heads, shortest first so that a kept head can make its extensions redundant
    for w in sorted(head_set, key=lambda x: (len(x), x)):
        if any(w[:i] in known or w[:i] in cand for i in range(2, len(w))):
            continue  # minimal heads
        if w.startswith("经") or "镜" in w or w.endswith("入路"):
            cand[w] = "approach"
        elif w.endswith("性"):
            cand[w] = "nature"
        elif w[-1] in _TYPE_LAST_CHARS or any(w[i:] in known_types for i in range(1, len(w))):
            cand[w] = "type"
        elif site_ends[w[-1]] >= site_end_support or not site_ends:
            cand[w] = "site"  # with no known site at all, every other head is taken as a site
    types = known_types | tail_set
    for w in tail_set:
        if w in head_set:
            continue
        if any(w[i:] in types for i in range(1, len(w) - 1)) or (len(w) == 2 and w[1] in known_types):
            continue  # minimal tails
        if w[0] == "性" or (w[-1] == "术" and len(w) < 3):
            continue  # 性心脏病 is the end of an adjective; 入术 / 切术 are pieces of 置入术 / 电切术
        cand[w] = "type"
    # composition check, shortest first so accepted short words can explain longer ones
    lex = set(known)
    out: dict[str, str] = {}
    for w in sorted(cand, key=lambda x: (len(x), x)):
        if w in known:
            continue
        if not _composed(w, lex):
            out[w] = cand[w]
            lex.add(w)
    return out


_QUAL_INSIDE = tuple(QUALIFIER_WORDS)


def _clean_word(w: str) -> bool:
    return not any(q in w for q in _QUAL_INSIDE)


def _composed(w: str, lex: set[str]) -> bool:
    """True when ``w`` splits into >= 2 pieces that are all in ``lex``."""
    n = len(w)
    reach = [True] + [False] * n  # reach[i]: w[:i] splits into known pieces
    for i in range(n):
        if reach[i]:
            for j in range(i + 1, n + 1):
                if j - i < n and w[i:j] in lex:  # a piece is never the whole word
                    reach[j] = True
    return reach[n]


# ---------------------------------------------------------------------------
# the tagger
# ---------------------------------------------------------------------------
class KeywordTagger:
    """Longest-match keyword tagger over a ``normalized word -> kind`` lexicon.

    Build it with :meth:`builtin`, :meth:`from_keyword_dir` or
    :meth:`from_vocabulary` (built-in + files + mined); ``sources`` records
    where each word came from (``builtin`` / ``file`` / ``mined``).

    Overlaps: every match at every position is a candidate; the chosen
    non-overlapping set covers the most characters, then has the fewest
    single-character keywords, then the fewest keywords, then puts the
    single-character ones last (a small dynamic programme per text). So 十二指肠 beats 指 + 肠, 骨折 beats 骨, 经腹腔镜
    beats 经腹 + 腔镜, 甲状腺 + 肿瘤 beats 甲状腺肿 + 瘤
    and 乳腺 + 癌 beats 乳 + 腺癌.
    """

    def __init__(self, lexicon: Mapping[str, str] | None = None, sources: Mapping[str, str] | None = None,
                 blockers: Iterable[str] = ()):
        self._lex: dict[str, str] = {}
        self._blockers: set[str] = set()
        self.sources: dict[str, str] = {}
        self._trie: dict = {}
        for w, k in (lexicon or {}).items():
            self.add(w, k, (sources or {}).get(w, "custom"))
        for w in blockers:
            self.add_blocker(w)

    def add_blocker(self, word: str) -> None:
        """A word matched like a keyword but never reported (未特指 hides the site 指)."""
        w = normalize(word)
        if w and w not in self._lex:
            self._blockers.add(w)
            self._insert(w, _BLOCK)

    def _insert(self, w: str, kind: str) -> None:
        node = self._trie
        for ch in w:
            node = node.setdefault(ch, {})
        node[_END] = kind

    # ---- building ---------------------------------------------------------
    def add(self, word: str, kind: str, source: str = "custom", override: bool = True) -> bool:
        """Add a keyword (normalized here); returns False if kept unchanged."""
        if kind not in KEYWORD_KINDS:
            raise ValueError(f"unknown keyword kind {kind!r} (expected one of {KEYWORD_KINDS})")
        w = normalize(word)
        if not w:
            return False
        if w in self._lex and not override:
            return False
        self._lex[w] = kind
        self.sources[w] = source
        self._blockers.discard(w)
        self._insert(w, kind)
        return True

    def add_words(self, words: Mapping[str, Iterable[str]], source: str, override: bool = False) -> None:
        """Add ``{kind: [words]}``; kinds earlier in ``builtin_keywords.PRIORITY`` win ties."""
        for kind in sorted(words, key=lambda k: PRIORITY.index(k) if k in PRIORITY else len(PRIORITY)):
            if kind not in KEYWORD_KINDS:
                continue
            for w in words[kind]:
                self.add(w, kind, source, override=override)

    @classmethod
    def builtin(cls) -> "KeywordTagger":
        """Only the hand-written lists (works with no data at all)."""
        t = cls(blockers=BLOCKER_WORDS)
        t.add_words(BUILTIN_KEYWORDS, "builtin")
        return t

    @classmethod
    def from_keyword_dir(cls, keyword_dir, include_builtin: bool = True) -> "KeywordTagger":
        """Built-in lists plus the keyword files of a folder (built-in wins conflicts)."""
        t = cls.builtin() if include_builtin else cls(blockers=BLOCKER_WORDS)
        t.add_words(read_keyword_dir(keyword_dir), "file")
        return t

    @classmethod
    def from_vocabulary(cls, vocab, keyword_dir=None, include_builtin: bool = True,
                        min_support: int | None = None) -> "KeywordTagger":
        """Built-in lists + keyword files (if ``keyword_dir``) + keywords mined from ``vocab``.

        ``vocab`` is a :class:`termnorm.vocabulary.Vocabulary` or a list of
        names. Mined words never override built-in or file words.
        """
        t = cls.from_keyword_dir(keyword_dir, include_builtin) if keyword_dir else (
            cls.builtin() if include_builtin else cls(blockers=BLOCKER_WORDS))
        names = vocab.names if hasattr(vocab, "names") else list(vocab)
        for w, k in mine_keywords(names, t._lex, min_support=min_support).items():
            t.add(w, k, "mined", override=False)
        return t

    # ---- lookup -----------------------------------------------------------
    def __len__(self) -> int:
        return len(self._lex)

    def words(self, kind: str | None = None) -> list[str]:
        """All keywords (normalized), or those of one kind; e.g. for a segmenter's user dictionary."""
        return [w for w, k in self._lex.items() if kind is None or k == kind]

    def blockers(self) -> list[str]:
        """Words matched but never reported (未特指, 指数 …); also worth keeping whole when segmenting."""
        return sorted(self._blockers)

    def kind_of(self, word: str) -> str | None:
        return self._lex.get(normalize(word))

    # ---- tagging ----------------------------------------------------------
    def _matches(self, text: str) -> list[tuple[int, int, str]]:
        trie = self._trie
        at: dict[int, list[tuple[int, str]]] = {}
        n = len(text)
        for i in range(n):
            node = trie.get(text[i])
            j = i
            while node is not None:
                j += 1
                kind = node.get(_END)
                if kind is not None:
                    at.setdefault(i, []).append((j, kind))
                if j >= n:
                    break
                node = node.get(text[j])
        if not at:
            return []
        # fast path: one match per start and no overlaps -> nothing to choose
        simple, last = [], 0
        for i in sorted(at):
            ms = at[i]
            if len(ms) > 1 or i < last:
                break
            last = ms[0][0]
            if ms[0][1]:
                simple.append((i, last, ms[0][1]))
        else:
            return simple
        # Best non-overlapping choice by dynamic programming over positions,
        # score = (characters covered, -single-character keywords, -keywords,
        # sum of the start positions of single-character keywords):
        # 甲状腺|肿瘤 beats 甲状腺肿|瘤 (same cover, no single character),
        # 经腹腔镜 beats 经腹|腔镜 (same cover, fewer pieces), 十二指肠 beats 指|肠,
        # 乳腺|癌 beats 乳|腺癌 (a lone character is more often the type suffix).
        best: list = [None] * (n + 1)
        back: list = [None] * (n + 1)
        best[0] = (0, 0, 0, 0)
        for i in range(n):
            s = best[i]
            if s is None:
                continue
            if best[i + 1] is None or s > best[i + 1]:
                best[i + 1], back[i + 1] = s, (i, None)
            for j, kind in at.get(i, ()):
                one = j - i == 1
                t = (s[0] + j - i, s[1] - one, s[2] - 1, s[3] + (i if one else 0))
                if best[j] is None or t > best[j]:
                    best[j], back[j] = t, (i, kind)
        out = []
        j = n
        while j > 0:
            i, kind = back[j]
            if kind:  # None: skipped character; _BLOCK: a blocker word
                out.append((i, j, kind))
            j = i
        out.reverse()
        return out

    def tag_normalized(self, text: str) -> list[KeywordSpan]:
        """Spans of an already-normalized text (offsets into ``text`` itself)."""
        return [KeywordSpan(a, b, k, text[a:b]) for a, b, k in self._matches(text)]

    def tag(self, text: str) -> list[KeywordSpan]:
        """Keyword spans with offsets into the ORIGINAL ``text`` (``span.text == text[start:end]``)."""
        nt = normalize_with_offsets(text)
        out = []
        for a, b, k in self._matches(nt.text):
            s, e = nt.to_original(a, b)
            out.append(KeywordSpan(s, e, k, text[s:e]))
        return out

    def tag_batch(self, texts: Iterable[str], progress: bool = False) -> list[list[KeywordSpan]]:
        from tqdm.auto import tqdm

        return [self.tag(t) for t in tqdm(texts, desc="tagging", disable=not progress)]

    def keywords_of(self, text: str, kind: str) -> list[str]:
        """The normalized keywords of one kind in ``text``, in order (e.g. the sites)."""
        nt = normalize(text)
        return [nt[a:b] for a, b, k in self._matches(nt) if k == kind]

    def __repr__(self) -> str:
        c = Counter(self._lex.values())
        return f"KeywordTagger({len(self)} words: " + ", ".join(f"{k}={c[k]}" for k in KEYWORD_KINDS) + ")"
