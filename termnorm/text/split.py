"""Splitting multi-part mentions ("糖尿病反复低血糖;骨质疏松;高血压").

Multi-implication (methods.md, "What makes the task hard"): more than half of
CHIP-CDN mentions need several terms. Approach D trains on multi-term queries
split into pairs; at prediction time the engine recalls the whole mention
*and* each part, and the number of parts is one signal for how many terms to
output (approach A predicts that count with a classifier head).

:func:`split_mention` returns the normalized parts (``[whole]`` when there is
nothing to split). Where it cuts:

* separators: ``; , 、 。 ! ? : + / \\ |``, control characters, line breaks
  (``+`` not between digits nor in ``(+)``: 孕35+5周),
  circled / list numbers (``①``, ``1.``, ``2、``), a ``.`` not between digits
  (``头痛.头晕`` splits, ``1.5cm`` does not), whitespace next to a CJK
  character (a space between Latin words is not a separator); ``/`` only
  between CJK characters. An English-only mention splits only on ``;`` and ``+`` (distributing English
  coordinations, breast and ovarian cancer → breast cancer + ovarian cancer, was measured and left out:
  NCBI disease cross-validated 0.9174 without, 0.9157 with, sign test p = 0.33), and with
  :data:`ENGLISH_LISTS` its lists of three or more findings sharing a head (:func:`english_list`).
* after ``待查 待诊 查因`` (月经增多原因待查|宫内节育环嵌顿);
* connectors ``伴有 合并 并发 以及 伴 并 及 和 与 或`` inside a part, when both
  sides have ≥ 2 characters (``MIN_SIDE``), the connector is not inside a
  protected word (并发症, 合并症, 不伴, 累及, 侵及, 饱和 … ``PROTECTED``) nor
  inside a known term (``known_terms``, e.g. the vocabulary: 糖尿病伴有肾的并发症
  stays whole), and — for the coordinating ``及 和 与 以及 或`` only — the left side
  does not end in a body site (``肌肉和肌腱损伤``, ``胃及部分肠管扩张`` name one
  thing at two sites; checked with a :class:`~termnorm.text.keywords.KeywordTagger`).
* nothing inside brackets is a separator: ``碎石术(肾盂\\输尿管)`` is one part;
* a part equal to a known term is not cut further; 1-character leftovers are
  glued to the next part (``左、右肾结石`` → ``左右肾结石``); parts without a
  letter or CJK character are dropped; duplicates are removed.

Count signal (``python3 -m termnorm.text.split``, vocabulary names as known
terms): on CHIP-CDN train the number of parts equals the number of gold terms
for 50.7 % of the 6,000 mentions (always-1: 45.6 %); 30 % of multi-term
mentions are split at all — CHIP-CDN gold often adds a general term
(乳腺癌 → 乳腺恶性肿瘤 + 癌) that no splitter can see. On Yidu-N7K train:
91.7 % (always-1: 95.0 %), 83 % of multi-term mentions split, 7 % of
single-term ones split (右甲状腺全切除术+左甲状腺次全切除术 is one combined
term). So the count is a feature for the fusion, not the answer.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Collection, Iterable

from termnorm.text.normalize import has_cjk, normalize

MIN_SIDE = 2  # characters each side of a connector must keep: "双肺炎并" does not split off "并"
CONNECTORS = ("伴有", "合并", "并发", "以及", "伴", "并", "及", "和", "与", "或")
COORDINATING = {"及", "和", "与", "以及", "或"}  # may join two sites of one finding
# "still to be confirmed" markers end a finding: 月经增多原因待查|宫内节育环嵌顿 (kept on the left)
CUT_AFTER = ("原因待查", "待查", "待诊", "查因")
PROTECTED = (
    "并发症 合并症 不伴有 未伴有 无伴有 不伴 未伴 无伴 伴随 并指 并趾 并殖 累及 侵及 波及 涉及 危及 殃及 顾及 及时 "
    "饱和 中和 缓和 和缓 调和 温和 柔和 参与 给与 与否"
).split()

_CJK = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
# list markers: ①..⑳, "1." "2、" "3)" not inside a number or a Latin token (t2.n0, 19.9)
_CIRCLED_RE = re.compile("[\u2460-\u2473\u2776-\u277f]")  # ①..⑳ ❶..❿ (NFKC would make them digits)
_MARKER_RE = re.compile(r"(?<![\d.a-zA-Z/\\+\-~*×^])\(?\d{1,2}[.、)](?![\d.])")  # not 腰4/5、
# separators inside (...) are masked (private-use characters) so 激光碎石术(肾盂\输尿管) stays one part
_PAREN_RE = re.compile(r"\([^()]*\)")
_SEP_CHARS = ";,、。!?:|\\/+. \u3000"
_MASK = {ord(c): chr(0xE000 + i) for i, c in enumerate(_SEP_CHARS)}
_UNMASK = {0xE000 + i: c for i, c in enumerate(_SEP_CHARS)}
_SEP_RE = re.compile(
    r"[;,、。!?:|\\\x00-\x1f\u3000]+"
    r"|(?<![\d(])\++(?![\d)])"  # not 孕35+5周, not (+)
    r"|(?<!\d)\.|\.(?!\d)"
    f"|(?<=[{_CJK}])/|/(?=[{_CJK}])"
    f"|(?<=[{_CJK}])\\s+|\\s+(?=[{_CJK}])"
)
_EN_SEP_RE = re.compile(r"[;+]+")
_EN_LIST_RE = re.compile(r"\s*,?\s+(?:and/or|and|or)\s+")
#: distribute English lists of three or more findings sharing a head (:func:`english_list`); the two-finding
#: coordination (breast and ovarian cancer) is never split: NCBI codes it as one syndrome as often as two
ENGLISH_LISTS = False
_BRACKETS = {ord(c): "(" for c in "【〔〖［｛[{"} | {ord(c): ")" for c in "】〕〗］｝]}"}
_CONNECTOR_RE = re.compile("|".join(CONNECTORS))
_CUT_RE = re.compile("(?P<after>" + "|".join(CUT_AFTER) + ")|" + "|".join(CONNECTORS))
_PROTECTED_RE = re.compile("|".join(sorted(PROTECTED, key=len, reverse=True)))
_EDGE = " \"'-.·~*#_"
_HAS_WORD = re.compile(f"[{_CJK}a-z]")

_BUILTIN_TAGGER = None


def _default_tagger():
    global _BUILTIN_TAGGER
    if _BUILTIN_TAGGER is None:
        from termnorm.text.keywords import KeywordTagger

        _BUILTIN_TAGGER = KeywordTagger.builtin()
    return _BUILTIN_TAGGER


class KnownTerms:
    """Vocabulary terms that hold a connector, indexed for the "inside a known term" test."""

    def __init__(self, terms: Iterable[str]):
        self.whole: set[str] = set()
        self.by_connector: dict[str, list[tuple[int, str]]] = {}
        for t in terms:
            n = normalize(t)
            if not n:
                continue
            self.whole.add(n)
            for m in _CONNECTOR_RE.finditer(n):
                self.by_connector.setdefault(m.group(0)[0], []).append((m.start(), n))

    def covers(self, text: str, pos: int) -> bool:
        """True when a known term occurs in ``text`` over position ``pos`` (a connector's first char)."""
        for off, term in self.by_connector.get(text[pos], ()):
            a = pos - off
            if a >= 0 and text.startswith(term, a):
                return True
        return False


def split_mention(text: str, known_terms: "Collection[str] | KnownTerms | None" = None,
                  tagger=None) -> list[str]:
    """Normalized parts of a possibly multi-part mention; ``[normalize(text)]`` if none.

    ``known_terms``: vocabulary names (or a prebuilt :class:`KnownTerms`, faster
    when called many times) whose occurrences are never cut. ``tagger``: a
    :class:`~termnorm.text.keywords.KeywordTagger` for the site test of
    coordinating connectors (the built-in lists when None).

    >>> split_mention("腹腔镜胆囊切除术+术中胆道造影")
    ['腹腔镜胆囊切除术', '术中胆道造影']
    >>> split_mention("慢性萎缩性胃炎并肠化生")
    ['慢性萎缩性胃炎', '肠化生']
    """
    whole = normalize(text)
    if not whole:
        return []
    if known_terms is not None and not isinstance(known_terms, KnownTerms):
        known_terms = KnownTerms(known_terms)
    if known_terms is not None and whole in known_terms.whole:
        return [whole]
    raw = unicodedata.normalize("NFKC", _CIRCLED_RE.sub(";", text)).translate(_BRACKETS)
    raw = _MARKER_RE.sub(";", raw)
    raw = _PAREN_RE.sub(lambda m: m.group(0).translate(_MASK), raw)
    if has_cjk(raw):
        pieces = _SEP_RE.split(raw)
    else:
        pieces = _EN_SEP_RE.split(raw)
    pieces = [q.translate(_UNMASK) for q in pieces if q]
    tagger = tagger or _default_tagger()
    parts: list[str] = []
    for piece in pieces:
        p = _strip(normalize(piece))
        if p:
            parts.extend(_split_connectors(p, known_terms, tagger) if has_cjk(p) or not ENGLISH_LISTS
                         else english_list(p, known_terms))
    parts = _tidy(parts)
    return parts if len(parts) > 1 else [whole]


def _split_connectors(p: str, known: KnownTerms | None, tagger) -> list[str]:
    if known is not None and p in known.whole:
        return [p]
    hits = list(_CUT_RE.finditer(p))
    if not hits:
        return [p]
    protected = bytearray(len(p))
    for m in _PROTECTED_RE.finditer(p):
        protected[m.start():m.end()] = b"\x01" * (m.end() - m.start())
    site_ends = None
    out, last = [], 0
    for m in hits:
        a, b = m.span()
        if m.group("after"):
            if b - last >= MIN_SIDE and len(p) - b >= MIN_SIDE:
                out.append(p[last:b])
                last = b
            continue
        if any(protected[a:b]) or a - last < MIN_SIDE or len(p) - b < MIN_SIDE:
            continue
        if known is not None and known.covers(p, a):
            continue
        if m.group(0) in COORDINATING:
            if site_ends is None:
                site_ends = {s.end for s in tagger.tag_normalized(p) if s.kind == "site"}
            if a in site_ends:
                continue
        out.append(p[last:a])
        last = b
    out.append(p[last:])
    return out


def english_list(p: str, known: KnownTerms | None = None) -> list[str]:
    """The findings of an English list of three or more sharing a head (``p`` normalized), the head given to
    each: ``brain, breast, and prostate cancer`` → brain cancer, breast cancer, prostate cancer. Each earlier
    item is one or two words (adjectives, ``basal cell``); a list with a shared start instead (``contractures
    of the elbows, spine and hips``) names one finding in NCBI's coding as often as several: left whole, as is a
    known term and anything else."""
    if known is not None and p in known.whole:
        return [p]
    segments = _EN_LIST_RE.split(p)
    if len(segments) != 2 or "," in segments[1]:
        return [p]
    earlier = [c.split() for c in segments[0].split(",")]
    last = segments[1].split()
    if len(earlier) < 2 or len(last) < 2 or any(not 1 <= len(c) <= 2 for c in earlier):
        return [p]
    return [" ".join(c if c[-1] == last[-1] else c + last[1:]) for c in earlier] + [" ".join(last)]


def _strip(q: str) -> str:
    """Edge punctuation off, and a bracket only when it has no partner in the part."""
    while True:
        q0 = q
        q = q.strip(_EDGE)
        if q.startswith("(") and ")" not in q:
            q = q[1:]
        if q.endswith(")") and "(" not in q:
            q = q[:-1]
        if q.startswith("(") and q.endswith(")") and q.count("(") == 1:
            q = q[1:-1]
        if q == q0:
            return q


def _tidy(parts: list[str]) -> list[str]:
    parts = [_strip(q) for q in parts]
    parts = [q for q in parts if q and _HAS_WORD.search(q)]
    merged: list[str] = []
    carry = ""
    for q in parts:
        q = carry + q
        carry = ""
        if len(q) == 1:
            carry = q  # a lone character (左、右…) belongs to what follows
            continue
        merged.append(q)
    if carry:
        if merged:
            merged[-1] = merged[-1] + carry
        else:
            merged.append(carry)
    seen, out = set(), []
    for q in merged:
        if q not in seen:
            seen.add(q)
            out.append(q)
    return out


def _count_agreement(data_dir: str) -> None:
    """How often the number of parts equals the number of gold terms (CHIP-CDN / Yidu-N7K train)."""
    import json
    from pathlib import Path

    import pandas as pd

    d = Path(data_dir)
    cdn = json.loads((d / "chip-cdn" / "train.json").read_text(encoding="utf-8"))
    icd = [str(x) for x in pd.read_excel(d / "chip-cdn" / "icd10_beijing_clinical_v601.xlsx", header=None)[1]]
    yt = pd.read_excel(d / "yidu-n7k" / "train.xlsx")
    yidu = [ln.split("\t", 1)[1] for ln in (d / "yidu-n7k" / "code.txt").read_text(encoding="utf-8").splitlines()
            if "\t" in ln]
    sets = {
        "CHIP-CDN train": ([(m["text"], len(m["normalized_result"].split("##"))) for m in cdn], icd),
        "Yidu-N7K train": ([(str(a), len(str(b).split("##"))) for a, b in zip(yt["原始词"], yt["标准词"])], yidu),
    }
    for label, (items, vocab) in sets.items():
        known = KnownTerms(vocab)
        res = [(len(split_mention(t, known)), g) for t, g in items]
        n = len(res)
        multi = [p for p, g in res if g > 1]
        single = [p for p, g in res if g == 1]
        print(f"{label} ({n:,} mentions, vocabulary names as known terms): parts == gold count "
              f"{sum(p == g for p, g in res) / n:.3f} (always-1 baseline {len(single) / n:.3f}); "
              f"gold > 1 split {sum(p > 1 for p in multi) / max(1, len(multi)):.3f}; "
              f"gold == 1 kept whole {sum(p == 1 for p in single) / max(1, len(single)):.3f}")


if __name__ == "__main__":  # python3 -m termnorm.text.split [shared/data folder]
    import sys
    from pathlib import Path

    _default = Path(__file__).resolve().parents[2] / ".." / "shared" / "data"
    _count_agreement(sys.argv[1] if len(sys.argv) > 1 else str(_default))
