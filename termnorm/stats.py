"""Paired comparison of two models on the same mentions, and confidence bands calibrated on held-out mentions.

* :func:`sign_test` -- mentions only one of two models gets right and the
  two-sided sign test on them (an exact binomial test with p = 1/2; mentions
  both get right or both get wrong say nothing about which model is better).
  benchmarks/cv.py and the registry's gate (termnorm.gate.Gate) use it.
* :func:`confidence_bands` -- the words a coder reads instead of a raw
  probability ("sure" / "likely" / "unsure"), each band's lowest confidence
  chosen on a model's held-out predictions.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

#: The bands, best first: a suggestion is in a band when its confidence is at or above the band's threshold,
#: the lowest confidence whose held-out suggestions at or above it were right with at least this precision.
#: 0.95: "sure" should mean about one mistake in twenty; 0.80: "likely" one in five -- below it a coder should
#: read the candidates rather than the suggestion.
BANDS = (("sure", 0.95), ("likely", 0.80))
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

    Returns ``{"measured": bool, "n": held-out mentions, "bands": [{"word", "min_confidence", "precision",
    "support"}], "below": BELOW}``: scanning from the most confident down, a band's threshold is the lowest
    confidence at which the suggestions at or above it reach the band's precision with at least
    ``min_support`` of them (a band no threshold reaches is left out: every suggestion reads lower).
    """
    n = len(predictions)
    out = {"measured": n >= min_mentions, "n": n, "bands": [], "below": BELOW}
    if not out["measured"]:
        return out
    conf = np.array([float(p["confidence"]) for p in predictions])
    right = np.array([bool(p["correct"]) for p in predictions])
    order = np.argsort(-conf, kind="stable")
    conf, right = conf[order], right[order]
    precision = np.cumsum(right) / np.arange(1, n + 1)
    # only the last of equal confidences is a valid cut: "at or above c" takes every tie of c
    last_of_tie = np.append(conf[1:] != conf[:-1], True)
    for word, target in bands:
        ok = np.flatnonzero(last_of_tie & (precision >= target) & (np.arange(1, n + 1) >= min_support))
        if len(ok):
            i = int(ok[-1])
            out["bands"].append({"word": word, "target": target, "min_confidence": round(float(conf[i]), 6),
                                 "precision": round(float(precision[i]), 4), "support": i + 1})
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
