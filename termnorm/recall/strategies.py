"""The recall strategies an :class:`~termnorm.engine.Engine` unites: the lexical ones over the vocabulary
(fitted once and shared) and the history ones over coded mentions (rebuilt per K-fold split and per
history), plus the keyword folder's abbreviation table the union expands."""

from __future__ import annotations

from pathlib import Path

from termnorm.records import LabelledMention
from termnorm.vocabulary import Vocabulary

#: History strategies that can be added to char TF-IDF and Jaccard (``Engine(history_extras=...)``,
#: ``--history-extras key,analogy``): ``"key"`` coded mentions equal up to side and punctuation
#: (:class:`termnorm.recall.history.CodedKeyRecaller`), ``"analogy"`` a coded neighbour's edit carried over
#: to its term (:class:`termnorm.recall.analogy.AnalogyRecaller`); each becomes a ranker feature. Off by
#: default: cross-validated over the 5,000 Yidu-N7K mentions both together gave 0.880 against 0.879
#: without (sign test p = 0.57; ``benchmarks/results/cv_extras.json``, README).
HISTORY_EXTRAS = ("key", "analogy")


def build_vocab_strategies(vocabulary: Vocabulary, tagger=None, keyword_dir=None) -> list:
    """The lexical strategies over the vocabulary, fitted once (history recall is separate).

    The same set ``benchmarks/recall.py`` measures: exact (also with approach
    words stripped), names contained in the mention, char TF-IDF, char
    Jaccard, word BM25 over jieba tokens.
    """
    from termnorm.recall.bm25 import BM25Recaller
    from termnorm.recall.exact import ContainedNameRecaller, ExactRecaller
    from termnorm.recall.jaccard import JaccardRecaller
    from termnorm.recall.tfidf import CharTfidfRecaller

    words = list(tagger.words()) if tagger is not None and hasattr(tagger, "words") else []
    approach = list(tagger.words("approach")) if tagger is not None and hasattr(tagger, "words") else []
    strategies = [ExactRecaller(strip_words=approach), ContainedNameRecaller(), CharTfidfRecaller(),
                  JaccardRecaller(), BM25Recaller(user_words=words)]
    return [s.fit(vocabulary) for s in strategies]


def check_history_extras(extras) -> tuple[str, ...]:
    """``extras`` without repeats, in order; ValueError naming any that :data:`HISTORY_EXTRAS` lacks."""
    extras = tuple(dict.fromkeys(extras))
    unknown = [e for e in extras if e not in HISTORY_EXTRAS]
    if unknown:
        raise ValueError(f"unknown history strategies {unknown}; known: {', '.join(HISTORY_EXTRAS)}")
    return extras


def history_strategies(vocabulary: Vocabulary, history: list[LabelledMention],
                       extras=()) -> list:
    """History recall over coded mentions: char TF-IDF and char Jaccard (approach B's third strategy), and
    the ``extras`` named in :data:`HISTORY_EXTRAS`."""
    from termnorm.recall.analogy import AnalogyRecaller
    from termnorm.recall.history import CodedKeyRecaller, HistoryRecaller

    kinds = {"key": CodedKeyRecaller, "analogy": AnalogyRecaller}
    out = [HistoryRecaller(), HistoryRecaller(similarity="jaccard")] + [kinds[e]() for e in extras]
    return [r.fit(vocabulary, history) for r in out]


def keyword_abbreviations(keyword_dir, language: str) -> dict | None:
    """Abbreviation expansions (copd -> 慢性阻塞性肺疾病) from a keyword folder, if it has them."""
    if not keyword_dir or language != "zh":
        return None
    p = Path(keyword_dir) / "abbreviations.json"
    if not p.exists():
        return None
    from termnorm.loaders import load_keywords

    return load_keywords(keyword_dir).get("abbreviations") or None
