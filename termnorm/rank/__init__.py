"""Ranking: the keyword-attentive cross-encoder (approach A's KAR) and its training.

>>> from termnorm.rank import RankerModel, train_ranker          # doctest: +SKIP
>>> ranker = RankerModel.from_encoder(folder, tagger)             # doctest: +SKIP
>>> train_ranker(ranker, vocab, train, candidates_fn, epochs=2)   # doctest: +SKIP
>>> ranker.score(["右侧甲状腺肿瘤切除术"], [["甲状腺病损切除术", "甲状腺探查术"]])  # doctest: +SKIP
"""

from .fgm import FGM
from .kar import SLOT_TOKENS, KARModule, RankerModel, keyword_attention_mask

__all__ = ["FGM", "KARModule", "RankerModel", "RankerTrainConfig", "SLOT_TOKENS", "build_pairs",
           "keyword_attention_mask", "top1_accuracy", "train_ranker"]


def __getattr__(name):
    # imported lazily so that `python -m termnorm.rank.train` does not import its own module twice
    if name in ("RankerTrainConfig", "build_pairs", "top1_accuracy", "train_ranker"):
        from . import train

        return getattr(train, name)
    raise AttributeError(name)
