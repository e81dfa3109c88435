"""The few small records passed between the engine's parts.

Recall -> Rank -> Fuse exchange :class:`Candidate` lists; loaders produce
:class:`LabelledMention`; the app receives :class:`Suggestion`.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class LabelledMention:
    """A mention with its gold standard term names (one or more)."""

    text: str
    terms: list[str]
    row: int | None = None  # 1-based row / item in the source file
    document: str = ""  # the text the mention was found in (a PubTator title + abstract), "" if none
    written: str = ""  # the mention as written when ``text`` is its reading in ``document`` (termnorm.reading)


@dataclass
class LabelledSet:
    """A labelled file: its mentions plus gold names not found in the vocabulary."""

    path: str
    mentions: list[LabelledMention]
    # (row, gold name) pairs whose name is not in the vocabulary they were checked against
    missing: list[tuple[int | None, str]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.mentions)


@dataclass(frozen=True)
class KeywordSpan:
    """A keyword found in a text. ``kind`` is one of KEYWORD_KINDS."""

    start: int
    end: int
    kind: str
    text: str


KEYWORD_KINDS = ("site", "type", "approach", "laterality", "nature")
# 500 characters is ~4x the longest real mention (122 characters over the 22,000 CHIP-CDN + Yidu-N7K mentions,
# median 10): a longer "mention" is a pasted paragraph or a wrong column, and would make a useless coding task.
# The one limit of every way in (import, termnorm normalize --input, the API) and of the database's mention text.
MAX_MENTION_CHARS = 500


@dataclass
class Candidate:
    """One candidate standard term for a mention.

    ``scores`` keeps every strategy's own score (``exact``, ``tfidf``, ``bm25``,
    ``jaccard``, ``history``, ``dense``, ``ranker`` ...) for explanation and
    fusion; ``score`` is the final (fused) score used for ordering.
    """

    term_id: int
    term: str
    score: float = 0.0
    scores: dict[str, float] = field(default_factory=dict)
    codes: list[str] = field(default_factory=list)  # Vocabulary.codes_of order: the export code first

    @property
    def code(self) -> str | None:
        """The code exported for this term unless a coder picks another (its most specific code)."""
        return self.codes[0] if self.codes else None


@dataclass
class Suggestion:
    """What the engine proposes for one mention."""

    mention: str
    candidates: list[Candidate]  # ranked, best first
    predicted_count: int  # how many terms the mention needs
    chosen: list[str]  # the terms the engine would output
    confidence: float  # calibrated probability that ``chosen`` is exactly right
    keywords: list[KeywordSpan] = field(default_factory=list)
    model_version: str = "lexical"
    parts: list[str] = field(default_factory=list)  # split parts of a multi-part mention
    spelled_out: str = ""  # the mention with its abbreviations spelled out, as the engine read it ("" if none)


def suggestion_dict(s: Suggestion) -> dict:
    """A suggestion as JSON-ready data (``termnorm normalize --json``, the API's /normalize)."""
    return {
        "mention": s.mention, "spelled_out": s.spelled_out, "chosen": list(s.chosen), "predicted_count": s.predicted_count,
        "confidence": float(s.confidence), "model_version": s.model_version,
        "keywords": [dict(start=k.start, end=k.end, kind=k.kind, text=k.text) for k in s.keywords],
        "candidates": [dict(term=c.term, code=c.code, codes=list(c.codes), score=float(c.score),
                            scores={k: float(v) for k, v in c.scores.items()}) for c in s.candidates],
    }
