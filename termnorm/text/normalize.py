"""Text normalization: the canonical form every strategy matches on.

All five approaches of methods.md (A..E) compare a mention with term names;
before any of them, both sides go through the same :func:`normalize` so that
surface noise (full-width forms, case, punctuation variants, spacing, the
many ways to write a stage or type numeral) does not count as a difference.

Steps, in order (each one a precompiled ``str.translate`` table or regex):

1. Unicode Roman numerals (``Ⅰ``..``Ⅻ``, ``ⅰ``..``ⅻ``) become Arabic digits:
   they are always numerals, so no context is needed.
2. NFKC (full-width → half-width, ``①`` → ``1``, ``㎝`` → ``cm``), lower case.
3. Punctuation: Chinese/English variants of brackets (``【】〔〕[]{}``), quotes,
   dashes, middle dots, ``、`` → ``,``, ``。`` → ``.``, ``×``-like signs → ``×``;
   zero-width characters are dropped.
4. Whitespace: runs collapse to one space; a space next to a CJK character is
   removed (Chinese does not use spaces), a space between Latin words stays
   (English MEDIC / NCBI names keep their word boundaries).
5. Numerals in numeral contexts only, so that ``Ⅱ型``, ``II型``, ``ii型``,
   ``二型`` and ``2型`` all become ``2型``:

   * Chinese ``一``..``九十九`` after ``第`` or before ``型/期/度/级/类/区``
     (optionally with a sub-stage letter ``a``..``d``) or ``次`` (not ``次性``);
     never elsewhere, so ``一侧``, ``一般``, ``十二指肠``, ``二尖瓣``, ``三尖瓣``,
     ``一氧化碳``, ``单一型`` keep their characters.
   * ASCII Roman ``i``..``xii`` standing alone (no Latin letter touching it)
     before ``型/期/度/级/类/区/相`` (``iiia期`` → ``3a期``); two-or-more-letter
     Roman numerals also when touching a CJK character (``乳腺癌iv``,
     ``viii因子``), single letters not (``x线`` is an X-ray); and after the
     English words ``type/stage/grade/class/phase/factor`` and the lesion
     names ``cin/vin/ain/pin`` (``type ii`` → ``type 2``, ``cinii`` → ``cin2``).

:func:`normalize` is idempotent. :func:`normalize_with_offsets` gives the same
text plus, for every output character, the span of the original text it came
from, so keyword spans found in normalized text can be highlighted in the raw
mention. :func:`expand_abbreviations` optionally replaces whole ASCII tokens
(``copd`` → ``慢性阻塞性肺疾病``) from a table such as
``shared/data/keywords/abbreviations.json``.

Speed (``python3 -m termnorm.text.segment`` prints it): the 40,474 ICD-10
names normalize in 0.3-0.6 s on the shared 2-core box (the budget is 1 s).
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

# ---------------------------------------------------------------------------
# character classes
# ---------------------------------------------------------------------------
# Han ideographs (basic + ext. A + compatibility) plus kana: "CJK" for spacing.
_CJK = "\u2e80-\u2fff\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_CJK_RE = re.compile(f"[{_CJK}]")


def has_cjk(text: str) -> bool:
    """True when the text holds at least one CJK character."""
    return _CJK_RE.search(text) is not None


# ---------------------------------------------------------------------------
# step 1: Unicode Roman numerals (before NFKC turns Ⅱ into the ambiguous "II")
# ---------------------------------------------------------------------------
_UNICODE_ROMAN = {}
for _i, _cp in enumerate(range(0x2160, 0x216C)):  # Ⅰ..Ⅻ
    _UNICODE_ROMAN[_cp] = str(_i + 1)
for _i, _cp in enumerate(range(0x2170, 0x217C)):  # ⅰ..ⅻ
    _UNICODE_ROMAN[_cp] = str(_i + 1)

# ---------------------------------------------------------------------------
# step 3: punctuation (applied after NFKC, so full-width ASCII is already gone)
# ---------------------------------------------------------------------------
_PUNCT = {}


def _map(chars: str, to: str) -> None:
    for c in chars:
        _PUNCT[ord(c)] = to


_map("【〔〖〘〚［｛[{⁅〈《«", "(")
_map("】〕〗〙〛］｝]}⁆〉》»", ")")
_map("“”„‟〝〞〟「」『』＂", '"')
_map("‘’‚‛′`´", "'")
_map("‐‑‒–—―−─━－﹣⁃", "-")
_map("·・•‧∙⋅･", "·")
_map("×✕✖╳⨯", "×")
_map("、､﹑", ",")
_map("。｡", ".")
_map("\u200b\u200c\u200d\u2060\ufeff\u00ad", "")
# control characters (CHIP-CDN has "高血压\x04\x04冠心病") separate words like a space
_map("".join(chr(c) for c in range(32) if chr(c) not in "\t\n\r") + "\x7f", " ")
_map("к", "κ")  # Cyrillic ka written for kappa (IgGк型)

# ---------------------------------------------------------------------------
# step 4: whitespace
# ---------------------------------------------------------------------------
_WS_RE = re.compile(r"\s+")
_CJK_SPACE_RE = re.compile(f"(?<=[{_CJK}]) | (?=[{_CJK}])")

# ---------------------------------------------------------------------------
# step 5: numerals
# ---------------------------------------------------------------------------
_CN_DIGIT = {"一": 1, "二": 2, "三": 3, "四": 4, "五": 5, "六": 6, "七": 7, "八": 8, "九": 9}
_CN = "一二三四五六七八九十"
# Words a numeral context may *end* a word in: 单一型 ("single type"), 统一, 唯一,
# 同一期, 之一 ... the numeral there is not a count, so it is left alone.
_CN_NOT_AFTER = "单统唯同专逐划万千百之其"
# numeral contexts: 第N; N型/期/度/级/类/区 (optional sub-stage a-d); N次 but not N次性 (一次性 = disposable)
_CN_CONTEXT_RE = re.compile(
    f"(?<=第)([{_CN}]{{1,3}})"
    f"|(?<![{_CN_NOT_AFTER}{_CN}])([{_CN}]{{1,3}})(?=[a-d]?[型期度级类区]|次(?!性))"
)
_ROMAN_VALUE = {
    "i": 1, "ii": 2, "iii": 3, "iv": 4, "v": 5, "vi": 6,
    "vii": 7, "viii": 8, "ix": 9, "x": 10, "xi": 11, "xii": 12,
}
# longest alternatives first so "viii" is not read as "v" + "iii"
_ROMAN = "xii|xi|ix|x|viii|vii|vi|iv|v|iii|ii|i"
_ROMAN2 = "xii|xi|ix|viii|vii|vi|iv|iii|ii"  # two letters or more
_ROMAN_RE = re.compile(
    # (1) any Roman numeral before a stage/type word, optional sub-stage letter
    f"(?<![a-z])({_ROMAN})(?=[a-d]?[型期度级类区相])"
    # (2) a multi-letter Roman numeral touching a CJK character
    f"|(?<=[{_CJK}])({_ROMAN2})(?![a-z])"
    f"|(?<![a-z])({_ROMAN2})(?=[{_CJK}])"
    # (3) after an English staging word or a lesion name (cin ii, cinii, type ii)
    f"|(?<![a-z])(type|stage|grade|class|phase|factor|cin|vin|ain|pin)( ?)({_ROMAN})(?![a-z])"
)


def _cn_value(s: str) -> int | None:
    """Value of a Chinese numeral 一..九十九, None when not a well-formed numeral (e.g. 三四)."""
    if len(s) == 1:
        return 10 if s == "十" else _CN_DIGIT.get(s)
    if "十" not in s:
        return None
    head, _, tail = s.partition("十")
    if "十" in tail or (head and head not in _CN_DIGIT) or (tail and tail not in _CN_DIGIT):
        return None
    if len(s) == 3 and not (head and tail):
        return None
    return (_CN_DIGIT[head] if head else 1) * 10 + (_CN_DIGIT[tail] if tail else 0)


def _cn_repl(m: re.Match) -> str:
    s = m.group(0)
    v = _cn_value(s)
    return s if v is None else str(v)


def _roman_repl(m: re.Match) -> str:
    if m.group(4) is not None:
        return m.group(4) + m.group(5) + str(_ROMAN_VALUE[m.group(6)])
    return str(_ROMAN_VALUE[m.group(0)])


# ---------------------------------------------------------------------------
# the pipeline, written once and run on a plain string or a mapped string
# ---------------------------------------------------------------------------
class _Plain:
    __slots__ = ("s",)

    def __init__(self, s: str):
        self.s = s

    def translate(self, table):
        self.s = self.s.translate(table)

    def nfkc_lower(self):
        self.s = unicodedata.normalize("NFKC", self.s).lower()

    def sub(self, pattern: re.Pattern, repl):
        self.s = pattern.sub(repl, self.s)

    def strip(self):
        self.s = self.s.strip()


_NFKC_CACHE: dict[str, str] = {}


def _nfkc_lower_char(c: str) -> str:
    r = _NFKC_CACHE.get(c)
    if r is None:
        r = _NFKC_CACHE[c] = unicodedata.normalize("NFKC", c).lower()
    return r


class _Mapped:
    """A string with, per character, the [start, end) span of the original it came from."""

    __slots__ = ("chars", "starts", "ends")

    def __init__(self, s: str):
        self.chars = list(s)
        self.starts = list(range(len(s)))
        self.ends = list(range(1, len(s) + 1))

    @property
    def s(self) -> str:
        return "".join(self.chars)

    def _per_char(self, fn):
        rs = [fn(c) for c in self.chars]
        if all(len(r) == 1 for r in rs):  # the common case: one character for one, offsets unchanged
            self.chars = rs
            return
        chars, starts, ends = [], [], []
        for r, a, b in zip(rs, self.starts, self.ends):
            chars.extend(r)
            starts.extend([a] * len(r))
            ends.extend([b] * len(r))
        self.chars, self.starts, self.ends = chars, starts, ends

    def translate(self, table):
        s = self.s
        if s.translate(table) != s:
            self._per_char(lambda c: c.translate(table))

    def nfkc_lower(self):
        s = self.s
        if s.isascii():
            self.chars = list(s.lower())
        else:
            self._per_char(_nfkc_lower_char)

    def sub(self, pattern: re.Pattern, repl):
        s = self.s
        if pattern.search(s) is None:
            return
        chars, starts, ends = [], [], []
        pos = 0
        for m in pattern.finditer(s):
            a, b = m.span()
            chars.extend(self.chars[pos:a])
            starts.extend(self.starts[pos:a])
            ends.extend(self.ends[pos:a])
            r = repl if isinstance(repl, str) else repl(m)
            if r and b > a:
                # the replacement as a whole covers the whole matched original span
                for k in range(len(r)):
                    j = a + min(k, b - a - 1)
                    chars.append(r[k])
                    starts.append(self.starts[a] if k == 0 else self.starts[j])
                    ends.append(self.ends[b - 1] if k == len(r) - 1 else self.ends[j])
            pos = b
        chars.extend(self.chars[pos:])
        starts.extend(self.starts[pos:])
        ends.extend(self.ends[pos:])
        self.chars, self.starts, self.ends = chars, starts, ends

    def strip(self):
        i, j = 0, len(self.chars)
        while i < j and self.chars[i].isspace():
            i += 1
        while j > i and self.chars[j - 1].isspace():
            j -= 1
        self.chars, self.starts, self.ends = self.chars[i:j], self.starts[i:j], self.ends[i:j]


def _pipeline(w):
    w.translate(_UNICODE_ROMAN)
    w.nfkc_lower()
    w.translate(_PUNCT)
    w.sub(_WS_RE, " ")
    w.strip()
    w.sub(_CJK_SPACE_RE, "")
    w.sub(_CN_CONTEXT_RE, _cn_repl)
    w.sub(_ROMAN_RE, _roman_repl)
    return w


def char_bigrams(text: str) -> frozenset[str]:
    """The text's character bigrams (a one-character text: itself), what similar-mention checks compare.

    >>> sorted(char_bigrams("胆囊切除")), char_bigrams("x")
    (['切除', '囊切', '胆囊'], frozenset({'x'}))
    """
    return frozenset(text[i:i + 2] for i in range(len(text) - 1)) or frozenset([text])


def normalize(text: str) -> str:
    """Canonical form used for matching (see the module docstring for the steps).

    >>> normalize("Ⅱ型 糖尿病（待查）")
    '2型糖尿病(待查)'
    """
    if not text:
        return ""
    return _pipeline(_Plain(text)).s


@dataclass
class NormalizedText:
    """Normalized text plus, per character, the original span it came from.

    ``starts[i]``/``ends[i]``: the original characters ``[starts[i], ends[i])``
    produced normalized character ``i`` (a numeral such as ``二十一`` → ``21``
    maps its two digits onto the whole original numeral).
    """

    text: str
    original: str
    starts: list[int]
    ends: list[int]

    def to_original(self, start: int, end: int) -> tuple[int, int]:
        """Original ``[start, end)`` covering normalized ``[start, end)`` (``end > start``)."""
        if end <= start:
            p = self.starts[start] if start < len(self.starts) else len(self.original)
            return p, p
        return self.starts[start], self.ends[end - 1]


def normalize_with_offsets(text: str) -> NormalizedText:
    """:func:`normalize` plus the character mapping back to ``text``.

    Identical output to :func:`normalize`; per-character NFKC only differs
    from whole-string NFKC for combining sequences (e.g. ``e`` + U+0301), in
    which case the mapping falls back to proportional positions.
    """
    text = text or ""
    plain = normalize(text)
    if plain == text:  # common for vocabulary names: identity mapping
        n = len(text)
        return NormalizedText(plain, text, list(range(n)), list(range(1, n + 1)))
    m = _pipeline(_Mapped(text))
    if m.s == plain:
        return NormalizedText(plain, text, m.starts, m.ends)
    n, o = len(plain), max(len(text), 1)
    starts = [min(i * o // max(n, 1), o - 1) for i in range(n)]
    return NormalizedText(plain, text, starts, [s + 1 for s in starts])


# ---------------------------------------------------------------------------
# abbreviations
# ---------------------------------------------------------------------------
_ASCII_TOKEN_RE = re.compile(r"[a-z][a-z0-9]*")


class Abbreviations:
    """A compiled abbreviation table (keys and values normalized once).

    Only keys that are ASCII tokens are used (``copd``, ``ca``, ``vinii``);
    they match whole tokens only: ``ca`` is expanded in ``胃ca`` but not
    inside ``ca125`` or ``cancer``. ``require_cjk`` (default True) expands
    only in texts that contain Chinese (or consist of short forms alone:
    ``ercp+est``), because a table for Chinese clinical text holds English words
    (``as``, ``hunt``, ``sweet``) that must stay untouched in English text.
    """

    def __init__(self, table: dict[str, str], require_cjk: bool = True):
        self.table: dict[str, str] = {}
        for k, v in table.items():
            nk, nv = normalize(str(k)), normalize(str(v))
            if nk and nv and _ASCII_TOKEN_RE.fullmatch(nk):
                self.table[nk] = nv
        self.require_cjk = require_cjk

    def expand(self, text: str) -> str:
        """Replace whole ASCII tokens of a *normalized* text by their expansion. A bracketed token right after
        its own expansion is dropped, and a character the expansion ends with is not said twice:

        >>> Abbreviations({"tha": "全髋关节置换术"}).expand("右全髋关节置换术(tha)")
        '右全髋关节置换术'
        >>> Abbreviations({"tha": "全髋关节置换术"}).expand("右tha术后")
        '右全髋关节置换术后'

        With ``require_cjk``, a text without Chinese is expanded only when each of its words is a short form
        (``ercp+est``; an English phrase keeps its words):

        >>> short = Abbreviations({"ercp": "内镜逆行胰胆管造影", "est": "乳头切开术"}, require_cjk=True)
        >>> short.expand("ercp+est"), short.expand("ercp in adults")
        ('内镜逆行胰胆管造影+乳头切开术', 'ercp in adults')
        """
        if not self.table or (self.require_cjk and not has_cjk(text) and text not in self.table
                                and not self.only_short_forms(text)):
            return text
        text = _BRACKETED_RE.sub(lambda m: "" if m.group(1) in self.table and text[:m.start()].endswith(
            self.table[m.group(1)]) else m.group(0), text)
        # tokens are maximal [a-z0-9] runs starting with a letter: "ca125" is one token
        return _TOKEN_RE.sub(self._spell, text)

    def only_short_forms(self, text: str) -> bool:
        """Whether every word of ``text`` (maximal ``[a-z0-9]`` runs from a letter) is a known short form."""
        words = _TOKEN_RE.findall(text)
        return bool(words) and all(w in self.table for w in words)

    def _spell(self, m: re.Match) -> str:
        long = self.table.get(m.group(0))
        if long is None:
            return m.group(0)
        after = m.string[m.end():m.end() + 1]  # stays in the text: only the short form is replaced
        return said_once(long, after)[:-len(after)] if after else long


_TOKEN_RE = re.compile(r"(?<![a-z0-9])[a-z][a-z0-9]*(?![a-z0-9])")
_BRACKETED_RE = re.compile(r"\(\s*([a-z][a-z0-9]*)\s*\)")
#: A Chinese character after a short form that its long form ending in it already says (TLH术: 全子宫切除术)
SAID_TWICE = "术症炎瘤癌"


def said_once(long: str, after: str) -> str:
    """``long`` (a short form spelled out) followed by ``after`` (the character written after the short form),
    that character not said twice: said_once("全子宫切除术", "术") == "全子宫切除术"."""
    return long if after and after in SAID_TWICE and long.endswith(after) else long + after
_COMPILED: dict[int, tuple[dict, int, Abbreviations]] = {}


def expand_abbreviations(text: str, table: "dict[str, str] | Abbreviations") -> str:
    """Expand whole-token ASCII abbreviations in a normalized text.

    ``table`` is a plain dict (``{"copd": "慢性阻塞性肺疾病"}``, compiled once
    and cached) or an :class:`Abbreviations`.

    >>> expand_abbreviations("copd急性加重", {"copd": "慢性阻塞性肺疾病"})
    '慢性阻塞性肺疾病急性加重'
    """
    if not isinstance(table, Abbreviations):
        hit = _COMPILED.get(id(table))
        if hit is None or hit[0] is not table or hit[1] != len(table):
            hit = (table, len(table), Abbreviations(table))
            _COMPILED[id(table)] = hit  # keeps a reference so the id is not reused
        table = hit[2]
    return table.expand(text)
