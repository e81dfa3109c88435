"""Paired comparison of two models on the same mentions, and confidence bands calibrated on held-out mentions.

* :func:`sign_test` -- mentions only one of two models gets right and the
  two-sided sign test on them (an exact binomial test with p = 1/2; mentions
  both get right or both get wrong say nothing about which model is better).
  benchmarks/cv.py and the registry's gate (termnorm.gate.Gate) use it.
* :func:`confidence_bands` -- the words a coder reads instead of a raw
  probability ("sure" / "likely" / "unsure"), each band's lowest confidence
  chosen on a model's held-out predictions (isotonic: a band's every
  confidence level was right that often, not only its average).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

#: The bands, best first. A suggestion is in a band when the held-out suggestions *as confident as it* were right
#: with at least this precision: the chance of being right at each confidence is the isotonic regression of
#: right / wrong on confidence (:func:`confidence_bands`), not the precision of everything above it. A user test on
#: Yidu-N7K read "likely · 87%" on suggestions of confidence 0.06, right half the time: the 774 far more confident
#: ones carried them. 0.95: "sure" should mean about one mistake in twenty; 0.80: "likely" one in five -- below it
#: a coder should read the candidates rather than the suggestion.
BANDS = (("sure", 0.95), ("likely", 0.80))
#: How the bands were set (stored with them): bands a version recorded before carry none and are set again from its
#: held-out predictions when read (termnorm.registry.Registry.confidence_bands).
BANDS_METHOD = "isotonic"
#: The word below every band.
BELOW = "unsure"
#: Held-out predictions needed before any band is stated: with fewer, the precision of a band of 20 mentions
#: moves by 5 points per mention and the words would promise what was not measured ("not measured yet").
MIN_BAND_MENTIONS = 50
#: Held-out suggestions a band must hold at or above its threshold: a threshold that only 3 mentions reach
#: "measures" 100% precision by luck.
MIN_BAND_SUPPORT = 20


def sign_test(a: Sequence[bool], b: Sequence[bool]) -> dict:
    """Mentions right only in ``a`` / only in ``b`` (same mentions, same order) and the two-sided sign test p."""
    from scipy.stats import binomtest

    a, b = np.asarray(a, dtype=bool), np.asarray(b, dtype=bool)
    if a.shape != b.shape:
        raise ValueError(f"paired results differ in length: {a.shape} vs {b.shape}")
    up, down = int((a & ~b).sum()), int((~a & b).sum())
    return {"right_only_here": up, "right_only_there": down,
            "sign_test_p": round(float(binomtest(up, up + down).pvalue), 4) if up + down else 1.0}


def confidence_bands(predictions: Sequence[dict], bands=BANDS, min_mentions: int = MIN_BAND_MENTIONS,
                     min_support: int = MIN_BAND_SUPPORT) -> dict:
    """Bands from held-out predictions (dicts with ``confidence`` and ``correct``).

    Returns ``{"measured": bool, "n": held-out mentions, "bands": [{"word", "target", "min_confidence",
    "precision", "support"}], "below": BELOW}``. The chance of being right at each confidence is the isotonic
    regression of right / wrong on confidence (scikit-learn's, ties pooled); a band's threshold is the lowest
    confidence whose chance reaches the band's precision, and it holds the suggestions from there up to the band
    above. ``precision`` / ``support``: the share right and how many of the held-out suggestions in the band; a
    band holding fewer than ``min_support`` is left out (its suggestions read as the band below).
    """
    from sklearn.isotonic import IsotonicRegression

    n = len(predictions)
    out = {"measured": n >= min_mentions, "n": n, "bands": [], "below": BELOW, "method": BANDS_METHOD}
    if not out["measured"]:
        return out
    conf = np.array([float(p["confidence"]) for p in predictions])
    right = np.array([bool(p["correct"]) for p in predictions], dtype=float)
    chance = IsotonicRegression(increasing=True, out_of_bounds="clip").fit(conf, right).predict(conf)
    upper = np.inf
    for word, target in bands:
        reached = (chance >= target - 1e-9) & (conf < upper)
        if not reached.any():
            continue
        low = float(conf[reached].min())
        inside = (conf >= low) & (conf < upper)
        if inside.sum() < min_support:
            continue
        out["bands"].append({"word": word, "target": target, "min_confidence": round(low, 6),
                             "precision": round(float(right[inside].mean()), 4), "support": int(inside.sum())})
        upper = low
    return out


def band_of(confidence: float, bands: dict | None) -> dict | None:
    """The band of a confidence (a :func:`confidence_bands` entry, or ``{"word": "unsure"}`` below them all);
    None when the bands were not measured."""
    if not bands or not bands.get("measured"):
        return None
    for b in bands.get("bands", []):
        if confidence >= b["min_confidence"]:
            return b
    return {"word": bands.get("below", BELOW)}
