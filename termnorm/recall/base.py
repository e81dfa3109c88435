"""The one interface every recall strategy implements.

A strategy is fitted once on a vocabulary (and, for history recall, on
already-coded mentions) and then answers *batches* of queries with vectorised
or sparse-matrix code: no Python loop over the vocabulary per query.
Each hit is ``(term_id, score)``; scores are the strategy's own, higher is
better, and are kept by the union for explanation and fusion.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from termnorm.records import LabelledMention
from termnorm.vocabulary import Vocabulary

Hits = list[tuple[int, float]]


class Recaller(ABC):
    name: str = "base"

    @abstractmethod
    def fit(self, vocab: Vocabulary, history: list[LabelledMention] | None = None) -> "Recaller":
        """Index the vocabulary (names and synonyms; history where relevant)."""

    @abstractmethod
    def recall_batch(self, queries: list[str], k: int) -> list[Hits]:
        """Top-k ``(term_id, score)`` per query, best first."""

    def recall(self, query: str, k: int) -> Hits:
        return self.recall_batch([query], k)[0]

    def add_coded_mention(self, mention: str, terms: list[str]) -> None:
        """Make a newly coded mention (or synonym) searchable at once. Default: nothing."""
