"""Reading a mention in its document: the abbreviations the document defines, spelled out.

A mention such as "FED" or "G6PD deficiency" names a disease only through the text around it: the abstract
says "fish-eye disease (FED)" once and then writes "FED". :func:`defined_abbreviations` finds those
definitions with the Schwartz–Hearst algorithm (the ``abbreviations`` package: a short form in brackets after
its long form, the short form's characters found in order in the long form's words), and
:func:`read_in_document` writes the mention as the document means it:

* a mention that *is* a defined short form becomes its long form ("FED" -> "fish-eye disease");
* a defined short form inside a mention is replaced ("G6PD deficiency" -> "glucose-6-phosphate dehydrogenase
  deficiency");
* a bracketed short form after its definition is dropped ("adenomatous polyposis coli (APC) tumour" ->
  "adenomatous polyposis coli tumour").

Chinese notes define a Latin short form after a Chinese long form (经皮冠状动脉介入治疗（PCI）); PCI术后 is then
read as 经皮冠状动脉介入治疗术后.

The engine reads coded mentions the same way (termnorm.reading.read_labelled), so the history built from
documents and the mentions suggested from them agree. A mention without a document is read as it is.
"""

from __future__ import annotations

import logging
import re
from functools import lru_cache

from termnorm.text.normalize import said_once

#: Short forms longer than this are not abbreviations (the package accepts up to ten words).
MAX_SHORT = 12
#: A Chinese long form before a bracketed Latin short form: 慢性阻塞性肺疾病（COPD）
#: (the run may hold digits and Latin letters: 1型糖尿病（DM1）, 急性非ST段抬高型心肌梗死（NSTEMI）; it ends in a Chinese
#: character, so an English definition in a Chinese note is Schwartz–Hearst's)
_CJK = "\u3400-\u4dbf\u4e00-\u9fff"
_CJK_DEFINITION = re.compile(rf"([{_CJK}0-9A-Za-z\u2160-\u216b-]{{1,29}}[{_CJK}])\s*[(（]\s*([A-Za-z][A-Za-z0-9-]{{1,11}})\s*[)）]")
#: Characters after which a Chinese long form starts when the vocabulary does not know it (诊断为…, 行…, 因…)
_CJK_CUES = "为行因患有示于及和与并伴"
_ASCII_WORD = "A-Za-z0-9_"


@lru_cache(maxsize=4096)
def _latin_definitions(document: str) -> dict[str, str]:
    """Schwartz–Hearst's pairs of ``document`` (the costly part, cached per document)."""
    from abbreviations import schwartz_hearst

    quiet = logging.getLogger().manager.disable
    logging.disable(logging.WARNING)  # the package logs every sentence it cannot parse
    try:
        text = _LAST_ITEM.sub(r"(\2)", document.replace("（", "(").replace("）", ")"))
        pairs = schwartz_hearst.extract_abbreviation_definition_pairs(doc_text=text, most_common_definition=True)
    finally:
        logging.disable(quiet)
    out = {s: " ".join(long.split()) for s, long in pairs.items() if 2 <= len(s) <= MAX_SHORT and len(long) > len(s)}
    for short, long in _initials_definitions(text).items():
        # Schwartz-Hearst keeps the shortest long form that spells the short form, even inside a word:
        # "attenuated adenomatous polyposis coli (AAPC)" gives AAPC = "adenomatous polyposis coli"
        if short not in out or long.lower().endswith(" " + out[short].lower()):
            out[short] = long
    for short, long in list(out.items()):
        for part, spelled in _hyphen_parts(short, long):
            out.setdefault(part, spelled)
    return out


def _hyphen_parts(short: str, long: str) -> list[tuple[str, str]]:
    """The parts of a hyphenated short form, each with its part of the long form: "HPT-JT" defined as
    "hyperparathyroidism-jaw tumor syndrome" also defines HPT (hyperparathyroidism) and JT (jaw tumor), which
    the abstract then writes alone. A part of two letters or more, one capital at least, whose long part is one
    word with its first letter or starts with words whose initials spell it; else nothing."""
    shorts, longs = short.split("-"), long.split("-")
    if len(shorts) < 2 or len(shorts) != len(longs):
        return []
    out = []
    for s, lp in zip(shorts, longs):
        words = lp.split()
        if not words or len(s) < 2 or not s.isalpha() or s.islower():
            continue
        if len(words) == 1 and words[0][0].lower() == s[0].lower() and len(words[0]) > len(s):
            out.append((s, words[0]))
        elif "".join(w[0] for w in words[:len(s)]).lower() == s.lower():
            out.append((s, " ".join(words[:len(s)])))
    return out


#: A bracket whose last item is a short form (two capitals at least): "(Krabbe disease; AO-GLD)" is read as
#: "(AO-GLD)", the only form Schwartz-Hearst knows
_LAST_ITEM = re.compile(r"[(]([^()]*?[;,]\s*)([A-Za-z0-9-]*[A-Z][A-Za-z0-9-]*[A-Z][A-Za-z0-9-]*)\s*[)]")
_BRACKET_SHORT = re.compile(r"[(]\s*([A-Za-z][A-Za-z0-9-]{1,11})\s*[)]")


def _initials_definitions(document: str) -> dict[str, str]:
    """Short forms whose every letter starts one of the words right before their bracket ("attenuated
    adenomatous polyposis coli (AAPC)"): the long form Schwartz-Hearst cuts short. Hyphens part words."""
    out: dict[str, str] = {}
    for m in _BRACKET_SHORT.finditer(document):
        short = m.group(1)
        letters = [c.lower() for c in short if c.isalpha()]
        if len(letters) < 2 or not any(c.isupper() for c in short):
            continue
        before = document[max(0, m.start() - 200):m.start()]  # a window, not the whole text before each bracket
        words = list(re.finditer(r"[A-Za-z][A-Za-z0-9']*", before))
        if len(words) < len(letters):
            continue
        span = words[-len(letters):]
        gap = before[span[0].start():]
        if [w.group()[0].lower() for w in span] != letters or re.search(r"[.;:()\[\]]", gap):
            continue
        out.setdefault(short, " ".join(gap.split()))
    return out


def defined_abbreviations(document: str, known: frozenset[str] | None = None) -> dict[str, str]:
    """``{short form: long form}`` defined in ``document``: Schwartz–Hearst for Latin long forms ("fish-eye
    disease (FED)" -> FED: fish-eye disease; the most frequent definition of a short form defined twice), and
    a Chinese long form before a bracketed Latin short form (经皮冠状动脉介入治疗（PCI） -> PCI). Where the
    Chinese long form starts is not marked: the longest end of the Chinese run that is in ``known`` (the
    vocabulary's names and synonyms, normalized), else what follows the last of :data:`_CJK_CUES`. Only the
    Schwartz–Hearst part is cached (per document): a cache keyed by ``known`` would keep every vocabulary's
    set alive."""
    if not document or not any(b in document for b in "(（"):
        return {}
    out = dict(_latin_definitions(document))
    for m in _CJK_DEFINITION.finditer(document):
        if m.group(1) in out.values():  # Schwartz–Hearst found it already
            continue
        long = _chinese_long_form(m.group(1), known)
        if long:
            out.setdefault(m.group(2), long)
    return out


def _chinese_long_form(run: str, known: frozenset[str] | None) -> str | None:
    if known:
        from termnorm.text.normalize import normalize

        for i in range(len(run) - 1):  # the longest known end first
            if normalize(run[i:]) in known:
                return run[i:]
    cut = max(run.rfind(c) for c in _CJK_CUES)
    tail = run[cut + 1:]
    return tail if 2 <= len(tail) <= 20 and re.search(f"[{_CJK}]", tail) else None


def _patterns(document: str, known: frozenset[str] | None = None, chinese: bool | None = None):
    pairs = defined_abbreviations(document, known)
    if chinese is not None:  # a Chinese vocabulary cannot match an English long form, nor the reverse
        pairs = {a: b for a, b in pairs.items() if bool(re.search(f"[{_CJK}]", b)) == chinese}
    if not pairs:
        return None
    alt = "|".join(re.escape(s) for s in sorted(pairs, key=len, reverse=True))
    w = _ASCII_WORD  # 卵巢Ca, TTP复发: a short form ends where the Latin letters do
    return (pairs, re.compile(rf"\s*[(（]\s*({alt})\s*[)）]"),
            re.compile(rf"(?<![{w}-])({alt})(?![{w}])(\s+([{w}]+))?([{_CJK}]?)"))


def _whole(mention: str, pairs: dict[str, str]) -> str | None:
    """The short form the whole mention is, in any case ("paf" for the note's PAF), else None."""
    key = mention.strip()
    if key in pairs:
        return key
    return next((s for s in pairs if s.lower() == key.lower()), None)


def _spell(m: re.Match, pairs: dict[str, str]) -> str:
    """One short form spelled out; the word after it dropped when the long form ends with it already
    ("HPT-JT syndrome" -> "hyperparathyroidism-jaw tumor syndrome"; TLH术 -> 腹腔镜经腹全子宫切除术, not 术术)."""
    long = pairs[m.group(1)]
    after = m.group(2) or ""
    if m.group(3) and long.split()[-1].lower() == m.group(3).lower():
        after = ""
    return said_once(long, m.group(4)) if not after else long + after + m.group(4)


def read_in_document(mention: str, document: str | None, known: frozenset[str] | None = None,
                     chinese: bool | None = None) -> str:
    """``mention`` with the short forms ``document`` defines spelled out (the module docstring's rules);
    ``mention`` itself when there are none. ``known``: as for :func:`defined_abbreviations`; ``chinese``: only
    Chinese (True) or only other (False) long forms, for a vocabulary in that script (None: any)."""
    found = _patterns(document, known, chinese) if document else None
    if found is None:
        return mention
    pairs, bracketed, token = found
    key = _whole(mention, pairs)
    if key:
        return pairs[key]
    text = bracketed.sub("", mention)
    text = token.sub(lambda m: _spell(m, pairs), text)
    return " ".join(text.split()) if text != mention else mention


def definitions_used(mention: str, document: str | None, known: frozenset[str] | None = None,
                     chinese: bool | None = None) -> list[tuple[str, str]]:
    """The ``(short form, long form)`` pairs of ``document`` that :func:`read_in_document` applies to
    ``mention`` (what the coding page shows beside the reading)."""
    found = _patterns(document, known, chinese) if document else None
    if found is None:
        return []
    pairs, _, token = found
    key = _whole(mention, pairs)
    if key:
        return [(key, pairs[key])]
    return list(dict.fromkeys((m.group(1), pairs[m.group(1)]) for m in token.finditer(mention)))
