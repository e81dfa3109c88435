"""Synthetic mentions for terms no coder has used yet: the rewrites coders apply, run backwards.

Coders do not write terms as the vocabulary names them: 甲状腺病损切除术 is written 右侧甲状腺肿瘤切除术. From the
coded mentions of single terms this learns, per keyword the tagger finds, how coders rewrite it (病损 -> 肿瘤,
the keyword of one kind the term has and the mention has instead) and which keywords they add (a side: 左侧,
右侧), with how often each happens. A synthetic mention of a never-coded term is its name with those rewrites
drawn at the rates seen: a training example the ranker sees with the term as gold, so it learns to pick a
never-coded term that matches, not only the coded neighbour next to it. Synthetic mentions are never history
(no term becomes "coded" by them) and never train the per-term classifier.

Off by default (``Engine.ranker_training_data(synthetic=0.0)``): cross-validated it did not help. Yidu-N7K, 5,000
mentions (``benchmarks/cv.py --sets yidu --rows shipped,synthetic,synthetic_10``,
``benchmarks/results/cv_yidu_synthetic.json``): shipped 0.8800; a quarter as many synthetic mentions as training
ones 0.8762 (53 won, 72 lost, p = 0.11); a tenth 0.8792 (p = 0.78). On the never-coded mentions (515) 0.625,
0.625 and 0.629: the ranker learns to trust name-like mentions, which real never-coded mentions are not.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from termnorm.records import LabelledMention
from termnorm.text.normalize import normalize

#: Kinds whose keywords coders add to a mention that the term does not name.
ADDED_KINDS = ("laterality",)
#: A rewrite is used when seen at least this many times.
MIN_SEEN = 3


@dataclass
class SyntheticMention(LabelledMention):
    """A made-up mention (a training example only: never history, never the term classifier's)."""


class Rewrites:
    """Keyword rewrites coders make (term keyword -> mention keyword) and keywords they add, with their rates."""

    def __init__(self, tagger):
        self.tagger = tagger
        self.swap: dict[str, list[tuple[str, float]]] = {}  # term keyword -> [(mention keyword, rate)]
        self.added: list[tuple[str, float]] = []  # (keyword put first, rate per mention)

    def _kinds(self, text: str) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for s in self.tagger.tag(text):
            out.setdefault(s.kind, []).append(normalize(s.text))
        return out

    def fit(self, train: list[LabelledMention]) -> "Rewrites":
        swaps: Counter = Counter()
        seen: Counter = Counter()  # term keyword -> single-term mentions whose term has it
        added: Counter = Counter()
        n = 0
        for m in train:
            if len(m.terms) != 1:
                continue
            n += 1
            km, kt = self._kinds(m.text), self._kinds(m.terms[0])
            for kind, ts in kt.items():
                seen.update(set(ts))
                ms = km.get(kind, [])
                if len(ts) == 1 and len(ms) == 1 and ts[0] != ms[0]:
                    swaps[ts[0], ms[0]] += 1
            for kind in ADDED_KINDS:
                extra = [a for a in km.get(kind, []) if a not in kt.get(kind, [])]
                if len(extra) == 1:
                    added[extra[0]] += 1
        for (b, a), c in swaps.items():
            if c >= MIN_SEEN:
                self.swap.setdefault(b, []).append((a, c / seen[b]))
        self.added = [(a, c / max(1, n)) for a, c in added.items() if c >= MIN_SEEN]
        return self

    def mention_for(self, term: str, rng: np.random.Generator) -> str:
        """``term`` written as a coder might: each keyword with rewrites replaced at the rate seen (one of its
        rewrites, drawn by count), then at most one added keyword put first."""
        text = normalize(term)
        for kw in list(dict.fromkeys(normalize(s.text) for s in self.tagger.tag(term))):
            options = self.swap.get(kw)
            if not options or kw not in text:
                continue
            rates = np.array([r for _, r in options])
            if rng.random() < min(1.0, rates.sum()):
                text = text.replace(kw, options[int(rng.choice(len(options), p=rates / rates.sum()))][0], 1)
        if self.added:
            rates = np.array([r for _, r in self.added])
            if rng.random() < min(1.0, rates.sum()):
                text = self.added[int(rng.choice(len(self.added), p=rates / rates.sum()))][0] + text
        return text


def synthetic_mentions(engine, train: list[LabelledMention], share: float, seed: int = 0) -> list[SyntheticMention]:
    """``share`` × len(train) synthetic mentions of terms the training mentions never code (drawn uniformly,
    without repeats while there are enough)."""
    coded = {t for m in train for t in m.terms}
    never = [t for t in engine.vocabulary.names if t not in coded]
    n = min(len(never), int(round(share * len(train))))
    if n <= 0:
        return []
    rng = np.random.default_rng(seed)
    rewrites = Rewrites(engine.tagger).fit(train)
    picks = rng.choice(len(never), size=n, replace=False)
    return [SyntheticMention(rewrites.mention_for(never[i], rng), [never[i]]) for i in picks]
