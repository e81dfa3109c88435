"""What the mention's document says of a candidate beyond the mention: score ``doc_words``.

A mention found in a document (a PubTator abstract, a clinical note imported with its text) is often shorter than
what the document says of it. NCBI disease codes *hereditary breast cancer* as the hereditary breast and ovarian
cancer syndrome in abstracts about families with both cancers, and as Breast Neoplasms elsewhere; the mention's own
words cannot tell them apart. For each candidate, over its name and synonyms: the share of the words the form adds
to the mention (words of neither the mention nor a short stop list) that the document holds, the best form's;
0 where no form adds a word or the mention has no document. Latin words are compared lower-cased with a plural
``s`` dropped, Chinese text as character bigrams.

The ranker's training candidates of a mention with a document get the score; the GBM ranker reads it only when
fitted with ``document_words`` (:class:`termnorm.fitting.GBMOptions`; off by default), and only such a ranker's
candidates get it at inference. Measured by ``python3 benchmarks/cv.py --sets ncbi --rows shipped,doc_words``:
not supported (docs/benchmarks.md). Written here: no library scores a term against a text's words.
"""

from __future__ import annotations

import re
from functools import lru_cache

KEY = "doc_words"
#: words that say nothing of which concept a form names
STOP = frozenset("a an and as at by for from in into of on or the to with without nos not other type unspecified "
                 "disease diseases disorder disorders syndrome".split())
_LATIN = re.compile(r"[a-z0-9]+")
_HAN = re.compile(r"[\u4e00-\u9fff]+")


def text_words(text: str) -> frozenset[str]:
    """Lower-cased Latin words (a plural ``s`` dropped, stop words left out) and Chinese character bigrams."""
    out = {w[:-1] if len(w) > 3 and w.endswith("s") else w for w in _LATIN.findall(text.lower())} - STOP
    for run in _HAN.findall(text):
        out.update(run[i:i + 2] for i in range(len(run) - 1))
    return frozenset(out)


#: the words of term forms and mentions, cached (a vocabulary's forms recur in every candidate list)
words = lru_cache(maxsize=300_000)(text_words)


def score(forms, mention_words: frozenset[str], document_words: frozenset[str]) -> float:
    best = 0.0
    for form in forms:
        extra = words(form) - mention_words
        if extra:
            best = max(best, len(extra & document_words) / len(extra))
    return best


def annotate(vocabulary, mentions, documents, cand_lists) -> None:
    """Write :data:`KEY` into every candidate of each mention that has a document (``documents``: one per
    mention, "" or None for none)."""
    seen: dict[str, frozenset[str]] = {}
    for mention, doc, cands in zip(mentions, documents, cand_lists):
        if not doc or not cands:
            continue
        if doc not in seen:
            seen[doc] = text_words(doc)
        mw = words(mention)
        for c in cands:
            c.scores[KEY] = score((c.term, *vocabulary.synonyms.get(c.term, ())), mw, seen[doc])
