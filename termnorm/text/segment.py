"""Word segmentation: jieba with a medical user dictionary.

Approach B (methods.md) recalls with TF-IDF over *segmented words* of the
vocabulary terms; jieba's general dictionary splits medical words badly
(甲状腺 → 甲状 + 腺), so each :class:`Segmenter` adds a user dictionary:
the keyword lists (sites, types, approaches …, see
:mod:`termnorm.text.keywords`) and the recurring pieces of the vocabulary's
names (:func:`vocabulary_pieces`).

Each instance owns its own ``jieba.Tokenizer`` so instances never pollute
each other (or the global ``jieba`` module). jieba's dictionary load (1-2 s
from its marshal cache on the shared 2-core box) is paid once per process:
later instances copy the loaded prefix dictionary (~0.1 s). jieba's own log
lines are silenced. ``python3 -m termnorm.text.segment`` prints the timings
(normalize / tagger / tag / jieba load / segmenter build / cut 1,000 mentions).

Input is normalized text (:func:`termnorm.text.normalize.normalize`); the
segmenter does not normalize again.
"""

from __future__ import annotations

import logging
import re
import threading
from collections import Counter
from typing import Iterable

import jieba

from termnorm.text.builtin_keywords import QUALIFIER_WORDS
from termnorm.text.normalize import normalize

# A user word's frequency. jieba picks the path maximising the product of
# freq/total (total ≈ 6e7 for its dictionary); at 1e5 a user word (log-prob
# ≈ -6.4) beats any split into two ordinary words (each ≤ ~-8 except a few
# function words), so user words stay whole, while among user words the path
# with fewer pieces still wins.
USER_WORD_FREQ = 100_000
# Vocabulary pieces are less sure to be words than keywords: at 2,000 (a common
# word in jieba's dictionary) they keep their stretch whole against jieba's
# character-level splits but lose to a keyword or a frequent word overlapping them.
PIECE_FREQ = 2_000

_BASE: jieba.Tokenizer | None = None
_BASE_LOCK = threading.Lock()
_WORD_OK = re.compile(r"[\u4e00-\u9fd5a-z0-9+#&._%\-]{2,}")  # what jieba's cutter keeps in one block


def _base_tokenizer() -> jieba.Tokenizer:
    """jieba's default dictionary, loaded once per process, quietly."""
    global _BASE
    with _BASE_LOCK:
        if _BASE is None:
            jieba.setLogLevel(logging.WARNING)  # no "Building prefix dict ..." on stderr
            tk = jieba.Tokenizer()
            tk.initialize()
            _BASE = tk
        return _BASE


class Segmenter:
    """jieba with a user dictionary built from vocabulary pieces and keywords.

    ``words``: user words (normalized here; single characters and words
    jieba cannot keep in one block are skipped). ``keywords``: a
    :class:`~termnorm.text.keywords.KeywordTagger` (its :meth:`words`) or an
    iterable of words, added the same way. ``hmm``: jieba's HMM guesses
    unknown words; off by default so that an unknown stretch is cut the same
    way (into single characters) in a mention and in a term name, which is
    what lexical recall needs.

    >>> Segmenter(["甲状腺", "病损", "切除术"]).cut("甲状腺病损切除术")
    ['甲状腺', '病损', '切除术']
    """

    def __init__(self, words: Iterable[str] = (), keywords=None, hmm: bool = False):
        self.hmm = hmm
        base = _base_tokenizer()
        tk = jieba.Tokenizer()
        tk.FREQ = dict(base.FREQ)
        tk.total = base.total
        tk.initialized = True
        self._tk = tk
        self.user_words: list[tuple[str, int]] = []  # (word, frequency) in the order added
        if keywords is not None:
            if hasattr(keywords, "words"):  # a KeywordTagger: its keywords and blockers (未特指 …)
                self.add_words(keywords.words())
                self.add_words(getattr(keywords, "blockers", list)())
            else:
                self.add_words(keywords)
        self.add_words(words)

    def add_words(self, words: Iterable[str], freq: int = USER_WORD_FREQ) -> int:
        """Add user words at frequency ``freq`` (never lowering one); returns how many changed."""
        tk, freq_of = self._tk, self._tk.FREQ
        added = 0
        for w in words:
            w = normalize(w)
            old = freq_of.get(w, 0)
            if not _WORD_OK.fullmatch(w) or old >= freq:
                continue
            # what jieba's add_word does, without its per-word overhead
            freq_of[w] = freq
            tk.total += freq - old
            for k in range(1, len(w)):
                freq_of.setdefault(w[:k], 0)
            self.user_words.append((w, freq))
            added += 1
        return added

    @classmethod
    def from_vocabulary(cls, vocab, tagger=None, min_count: int = 2, hmm: bool = False) -> "Segmenter":
        """Segmenter whose user dictionary is ``tagger``'s keywords plus :func:`vocabulary_pieces`."""
        if tagger is None:
            from termnorm.text.keywords import KeywordTagger

            tagger = KeywordTagger.from_vocabulary(vocab)
        names = vocab.names if hasattr(vocab, "names") else list(vocab)
        seg = cls(keywords=tagger, hmm=hmm)
        seg.add_words(vocabulary_pieces(names, tagger, min_count), PIECE_FREQ)
        return seg

    def cut(self, text: str) -> list[str]:
        """Words of a normalized text (whitespace tokens dropped)."""
        return [w for w in self._tk.cut(text, HMM=self.hmm) if not w.isspace()]

    def cut_batch(self, texts: Iterable[str]) -> list[list[str]]:
        cut, hmm = self._tk.cut, self.hmm
        return [[w for w in cut(t, HMM=hmm) if not w.isspace()] for t in texts]

    # jieba.Tokenizer holds a lock and cannot be pickled: keep the words, rebuild on load
    def __getstate__(self):
        return {"user_words": self.user_words, "hmm": self.hmm}

    def __setstate__(self, state):
        self.__init__(hmm=state["hmm"])
        for w, f in state["user_words"]:
            self.add_words([w], f)


def vocabulary_pieces(names: Iterable[str], tagger, min_count: int = 2) -> list[str]:
    """Recurring pieces of term names for the user dictionary.

    Each normalized name is cut at its keywords (``tagger.tag_normalized``)
    and at qualifier / connector words (``builtin_keywords.QUALIFIER_WORDS``:
    的, 和, 伴, 其他 …); the stretches of 2..8 CJK characters left that recur in
    at least ``min_count`` names are returned (e.g. 游离体, 半月节 between a
    site and a type); a leading 性/型 (the end of an adjective) is dropped.
    Keywords themselves come in through ``keywords=``.
    ``min_count`` 2: a stretch seen once is as likely a one-off phrase as a word.
    """
    counts: Counter = Counter()
    for name in names:
        n = normalize(name)
        pos = 0
        gaps = []
        for sp in tagger.tag_normalized(n):
            gaps.append(n[pos:sp.start])
            pos = sp.end
        gaps.append(n[pos:])
        for g in gaps:
            for run in _CJK_RUN.findall(_QUALIFIER_RE.sub(" ", g)):
                run = run.lstrip("性型")  # the end of an adjective (沙门菌|性阿米巴): not the piece's start
                if 2 <= len(run) <= 8:
                    counts[run] += 1
    return [w for w, c in counts.items() if c >= min_count]


_CJK_RUN = re.compile("[\u4e00-\u9fd5]+")
_QUALIFIER_RE = re.compile("|".join(sorted(map(re.escape, QUALIFIER_WORDS), key=len, reverse=True)))


def _timings(data_dir: str) -> None:
    """Start-up and throughput of the text layer on the shared data (see the module docstrings)."""
    import json
    import time
    from pathlib import Path

    import pandas as pd

    from termnorm.text.keywords import KeywordTagger

    d = Path(data_dir)
    names = [str(x).strip() for x in pd.read_excel(d / "chip-cdn" / "icd10_beijing_clinical_v601.xlsx",
                                                   header=None)[1].tolist()]
    mentions = [m["text"] for m in json.loads((d / "chip-cdn" / "train.json").read_text(encoding="utf-8"))][:1000]

    def clock(label, fn):
        t = time.perf_counter()
        out = fn()
        print(f"{label}: {time.perf_counter() - t:.2f} s")
        return out

    clock(f"normalize {len(names):,} ICD-10 names", lambda: [normalize(x) for x in names])
    tagger = clock("KeywordTagger.from_vocabulary (built-in + keyword files + mined)",
                   lambda: KeywordTagger.from_vocabulary(names, keyword_dir=d / "keywords"))
    print(f"  {tagger!r}; mined {sum(s == 'mined' for s in tagger.sources.values())}")
    clock(f"tag {len(names):,} names (offsets into the original)", lambda: tagger.tag_batch(names))
    clock("jieba dictionary load (once per process)", _base_tokenizer)
    seg = clock("Segmenter.from_vocabulary (vocabulary pieces + user words)",
                lambda: Segmenter.from_vocabulary(names, tagger))
    print(f"  {len(seg.user_words):,} user words")
    clock("Segmenter(keywords=tagger), second in process", lambda: Segmenter(keywords=tagger))
    clock(f"normalize + cut {len(mentions):,} CHIP-CDN mentions", lambda: seg.cut_batch([normalize(m) for m in mentions]))


if __name__ == "__main__":  # python3 -m termnorm.text.segment [shared/data folder]
    import sys
    from pathlib import Path

    _default = Path(__file__).resolve().parents[2] / ".." / "shared" / "data"
    _timings(sys.argv[1] if len(sys.argv) > 1 else str(_default))
