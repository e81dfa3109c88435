"""Cross-fitted keyword-attentive rankers: out-of-fold scores for the GBM's own training mentions.

The GBM ranker learns how far to trust the cross-encoder's probability (score
``kar``) from the K-fold candidates of the training mentions. A cross-encoder
trained on those same mentions scores them *in-sample* -- its gold terms near
1.0 -- and the GBM would learn to trust it far more than it deserves on new
mentions. ``termnorm train rank --folds K`` therefore trains K rankers, ranker
k without the mentions of fold k: a training mention is scored by the ranker
that never saw it, any other mention by the mean of the K probabilities. The
same idea as the surface-difference scorer's out-of-fold fit
(:mod:`termnorm.rank.surface`), at the price of K trainings on (K-1)/K of the
mentions each.

A mention's fold comes from a hash of its normalized text, so repeated mentions
share a fold and the assignment needs no stored seed.

Folder layout (``folds.json`` marks a cross-fitted ranker)::

    folds.json     {"format": "termnorm-crossfit/1", "folds": K, "fold_of": {normalized mention: k}}
    fold0/ ...     RankerModel folders (:meth:`termnorm.rank.kar.RankerModel.save`), ranker k trained
                   without the mentions of fold k
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from termnorm.text.normalize import normalize

FOLDS_FILE = "folds.json"
FORMAT = "termnorm-crossfit/1"


def fold_of_text(text: str, folds: int) -> int:
    """The fold of a mention: a stable hash of its normalized text (repeats share a fold), salted so it is
    independent of the gold hold-out's hash (termnorm.refit.in_holdout)."""
    digest = hashlib.sha1(("crossfit:" + normalize(text)).encode("utf-8")).digest()
    return int.from_bytes(digest[:4], "big") % folds


def outside_fold(mentions, fold_of: dict[str, int], k: int) -> list:
    """The mentions fold model ``k`` trains on: those whose (normalized) text is not in fold ``k``."""
    return [m for m in mentions if fold_of[normalize(m.text)] != k]


def ranker_saved(folder: Path) -> bool:
    """A complete ranker fold model (its head is written last)."""
    from termnorm.rank.kar import _HEAD_FILE

    return (folder / _HEAD_FILE).is_file()


class CrossFit:
    """K fold models and the fold of every training mention: what the cross-fitted ranker and bi-encoder
    (termnorm.dense.crossfit) share -- the fold bookkeeping and the folder (``folds.json`` + ``fold{k}/``).
    A subclass names its kind (``what``), the check of one complete fold folder (``saved``) and
    ``_load_model(folder, **kw)``."""

    what = "model"
    saved: Callable[[Path], bool]

    def __init__(self, models: Sequence, fold_of: dict[str, int]):
        if len(models) < 2:
            raise ValueError(f"a cross-fitted {self.what} needs at least 2 fold models")
        bad = {k for k in fold_of.values() if not 0 <= k < len(models)}
        if bad:
            raise ValueError(f"fold numbers {sorted(bad)} outside 0..{len(models) - 1}")
        self.models = list(models)
        self.fold_of = dict(fold_of)
        self.folder: Path | None = None

    @property
    def folds(self) -> int:
        return len(self.models)

    @property
    def device(self):
        return self.models[0].device

    def fold(self, text: str) -> int:
        """The fold whose model never saw ``text`` (-1: a mention no fold model was trained on)."""
        return self.fold_of.get(normalize(text), -1)

    def save(self, folder) -> Path:
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        for k, m in enumerate(self.models):
            m.save(folder / f"fold{k}")
        return write_fold_map(folder, self.folds, self.fold_of, self.saved)

    @classmethod
    def load(cls, folder, **kw):
        """The folder :meth:`save` (or ``termnorm train rank|recall --folds K``) wrote; ``kw`` goes to each
        fold model's loader."""
        folder = Path(folder)
        state = json.loads((folder / FOLDS_FILE).read_text(encoding="utf-8"))
        if state.get("format") != FORMAT:
            raise ValueError(f"{folder / FOLDS_FILE}: not a cross-fitted {cls.what} ({state.get('format')!r})")
        missing = missing_folds(folder, int(state["folds"]), cls.saved)
        if missing:
            raise FileNotFoundError(f"{folder}: fold model(s) {missing} missing")
        models = [cls._load_model(folder / f"fold{k}", **kw) for k in range(int(state["folds"]))]
        loaded = cls(models, {str(t): int(k) for t, k in state["fold_of"].items()})
        loaded.folder = folder  # as BiEncoder.folder: a run's saved index is beside it
        return loaded

    @classmethod
    def _load_model(cls, folder: Path, **kw):
        raise NotImplementedError


class CrossFitRanker(CrossFit):
    """K rankers, each blind to one fold; scores like :meth:`RankerModel.score`.

    ``fold_of`` maps a normalized training mention to its fold; a mention found there is scored by the
    ranker trained without that fold (out of fold), any other by the mean of all K rankers.
    """

    what = "ranker"
    saved = staticmethod(ranker_saved)

    def score(self, mentions: Sequence[str], candidate_lists: Sequence[Sequence[str]],
              batch_size: int = 64) -> list[np.ndarray]:
        """P(match) of every candidate of every mention, one array per mention."""
        out: list[np.ndarray | None] = [None] * len(mentions)
        groups: dict[int, list[int]] = defaultdict(list)
        for i, m in enumerate(mentions):
            groups[self.fold(m)].append(i)
        for k, idx in groups.items():
            ms = [mentions[i] for i in idx]
            cl = [candidate_lists[i] for i in idx]
            if k >= 0:
                probs = self.models[k].score(ms, cl, batch_size)
            else:
                per_model = [mod.score(ms, cl, batch_size) for mod in self.models]
                probs = [np.mean(np.stack(ps), axis=0) for ps in zip(*per_model)]
            for i, p in zip(idx, probs):
                out[i] = p
        return out  # type: ignore[return-value]

    @classmethod
    def load(cls, folder, tagger=None, device=None, quantize: bool | str = False) -> "CrossFitRanker":
        return super().load(folder, tagger=tagger, device=device, quantize=quantize)

    @classmethod
    def _load_model(cls, folder: Path, **kw):
        from termnorm.rank.kar import RankerModel

        return RankerModel.load(folder, **kw)


def missing_folds(folder, folds: int, complete: Callable[[Path], bool] = ranker_saved) -> list[int]:
    """The folds whose model is not (completely) saved in ``folder`` yet (``complete``: the check of one
    fold folder; a ranker's by default, termnorm.dense.crossfit passes the bi-encoder's)."""
    return [k for k in range(folds) if not complete(Path(folder) / f"fold{k}")]


def write_fold_map(folder, folds: int, fold_of: dict[str, int],
                   complete: Callable[[Path], bool] = ranker_saved) -> Path:
    """Write ``folds.json`` beside the fold models ``fold0/`` ... (already saved there)."""
    folder = Path(folder)
    missing = missing_folds(folder, folds, complete)
    if missing:
        raise FileNotFoundError(f"{folder}: fold model(s) {missing} missing")
    (folder / FOLDS_FILE).write_text(json.dumps({"format": FORMAT, "folds": folds, "fold_of": fold_of},
                                                ensure_ascii=False), encoding="utf-8")
    return folder


def train_folds(train, folds: int, only: int | None, out, train_one: Callable,
                complete: Callable[[Path], bool] = ranker_saved, what: str = "ranker") -> None:
    """The cross-fitting loop of ``termnorm train rank|recall --folds K [--fold k]``: model k trained by
    ``train_one(mentions outside fold k, mentions of fold k, out/fold{k})``, all K or only fold ``only``;
    the run that finds every fold model complete writes the fold map."""
    out = Path(out)
    fold_of = {normalize(m.text): fold_of_text(m.text, folds) for m in train}
    for k in range(folds) if only is None else [only]:
        held = [m for m in train if fold_of[normalize(m.text)] == k]
        print(f"fold {k + 1}/{folds}: training without the {len(held)} mentions of this fold", flush=True)
        train_one(outside_fold(train, fold_of, k), held, out / f"fold{k}")
    missing = missing_folds(out, folds, complete)
    if missing:  # --fold: the run that finishes the last fold writes the fold map
        print(f"fold model(s) {missing} still to train (--fold); {out} is not usable until they are")
        return
    write_fold_map(out, folds, fold_of, complete)
    print(f"cross-fitted {what} ({folds} folds) written to {out}")


def load_ranker(folder, tagger=None, device=None, quantize: bool | str = False):
    """A ranker folder written by ``termnorm train rank``: cross-fitted (``folds.json``) or a single model."""
    folder = Path(folder)
    if (folder / FOLDS_FILE).is_file():
        return CrossFitRanker.load(folder, tagger=tagger, device=device, quantize=quantize)
    from termnorm.rank.kar import RankerModel

    return RankerModel.load(folder, tagger=tagger, device=device, quantize=quantize)
