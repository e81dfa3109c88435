"""``benchmarks/cv.py --against``: rows compared, mention by mention, with another run's row (another commit,
another encoder) on the same set and outer folds, by the sign test."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from termnorm.stats import sign_test


def _by_familiarity(right, ref, bucket) -> dict:
    """Accuracy per familiarity bucket (termnorm.evaluate.FAMILIARITY_BUCKETS: how often the training folds
    coded the mention's rarest gold term), with the sign test against ``shipped`` on that bucket's mentions."""
    from termnorm.evaluate import FAMILIARITY_BUCKETS

    out = {}
    for name, _, _ in FAMILIARITY_BUCKETS:
        sel = bucket == name
        if sel.any():
            out[name] = {"n": int(sel.sum()), "accuracy": round(float(right[sel].mean()), 4)}
            if ref is not None:
                out[name]["sign_test_p"] = sign_test(right[sel], ref[sel])["sign_test_p"]
    return out


def against(res: dict, other: dict, other_row: str = "shipped") -> dict:
    """Each row of ``res`` against ``other_row`` of ``other`` (the same set measured by another checkout, its
    ``answers`` on the same mentions in the same order): accuracy both, the sign test overall and by familiarity."""
    theirs = other["rows"][other_row].get("answers")
    if theirs and len(theirs) != res["mentions"]:  # some of its outer folds (--folds): their answers of those
        spans, at = {}, 0
        for f in other.get("folds", []):
            spans[f["fold"]], at = (at, at + f["test"]), at + f["test"]
        if at == len(theirs) and all(f["fold"] in spans for f in res["folds"]):
            theirs = "".join(theirs[slice(*spans[f["fold"]])] for f in res["folds"])
    if not theirs or len(theirs) != res["mentions"]:
        raise SystemExit(f"--against: its row {other_row!r} has no answers for these {res['mentions']} mentions "
                         "(measure it with this script, same set and folds)")
    ref = np.array([c == "1" for c in theirs])
    bucket = np.array(res["familiarity"], dtype=object)
    out = {}
    for row, r in res["rows"].items():
        right = np.array([c == "1" for c in r["answers"]])
        t = sign_test(right, ref)
        out[row] = {"accuracy": r["accuracy"], "against_accuracy": round(float(ref.mean()), 4),
                    "right_only_here": t["right_only_here"], "right_only_there": t["right_only_there"],
                    "sign_test_p": t["sign_test_p"], "by_familiarity": _by_familiarity(right, ref, bucket)}
    return out


def check_against(specs: list[str], sets: list[str], folds: list[int]) -> None:
    """Stop at once, naming the file and what it lacks, unless every ``FILE[:ROW]`` holds answers of ROW for
    each of ``sets`` on ``folds``: a CV run takes minutes to hours, and its comparison comes last."""
    for spec in specs:
        path, _, row = spec.partition(":")
        row = row or "shipped"
        try:
            results = json.loads(Path(path).read_text(encoding="utf-8"))["results"]
        except (OSError, ValueError, KeyError) as e:
            raise SystemExit(f"--against {spec}: not a result of this script ({type(e).__name__}: {e})")
        for name in sets:
            if name not in results:
                raise SystemExit(f"--against {spec}: it holds no results for set {name!r} "
                                 f"(it has {', '.join(results) or 'none'})")
            res = results[name]
            answers = res.get("rows", {}).get(row, {}).get("answers")
            if not answers:
                have = [r for r, v in res.get("rows", {}).items() if v.get("answers")]
                raise SystemExit(f"--against {spec}: set {name!r} has no answers of row {row!r} (rows with "
                                 f"answers: {', '.join(have) or 'none'}; measure it with this script)")
            theirs = {f["fold"] for f in res.get("folds", [])}
            if not set(folds) <= theirs:
                raise SystemExit(f"--against {spec}: set {name!r} was measured on outer folds {sorted(theirs)}, "
                                 f"not on all of {folds}")
