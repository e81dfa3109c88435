"""A cross-validation run's rows compared on subsets of the test mentions: multi-part or not, one or more gold terms.

    python3 benchmarks/cv_split.py benchmarks/results/cv_cdn_parts.json --set cdn --row part_context
            [--data ../shared/data] [--out benchmarks/results/cv_cdn_parts_split.json]

``benchmarks/cv.py`` stores, per row, which test mentions it got right (``answers``, in the order of outer
folds 0-4). Here those mentions are rebuilt (:func:`benchmarks.cv.outer_fold`) and cut by the splitter
(``termnorm.text.split.split_mention``: one part or several) and by the number of gold terms. Per subset:
exact-set accuracy of ``shipped`` and of ``--row``, the mentions only one of them gets right, and the sign test
on those. A cut chosen after seeing a run is a lead for the next experiment, not a result.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.accuracy import SETS  # noqa: E402
from benchmarks.cv import outer_fold  # noqa: E402
from termnorm.loaders import load_labelled, load_vocabulary  # noqa: E402
from termnorm.stats import sign_test  # noqa: E402
from termnorm.text.split import split_mention  # noqa: E402

CUTS = {
    "multi-part": lambda m: len(split_mention(m.text)) > 1,
    "one part": lambda m: len(split_mention(m.text)) <= 1,
    "several gold terms": lambda m: len(m.terms) > 1,
    "one gold term": lambda m: len(m.terms) <= 1,
}


def split(run: dict, name: str, row: str, data: Path) -> dict:
    vpath, trpath, tepath, _ = SETS[name]
    vocab = load_vocabulary(data / vpath)
    train, dev = load_labelled(data / trpath, vocab).mentions, load_labelled(data / tepath, vocab).mentions
    res = run["results"][name]
    folds = [f["fold"] for f in res["folds"]]
    tests = [m for k in folds for m in outer_fold(train, dev, k)[1]]
    a, b = res["rows"]["shipped"]["answers"], res["rows"][row]["answers"]
    if not (len(a) == len(b) == len(tests)):
        raise SystemExit(f"{name}: {len(tests)} test mentions rebuilt, the run has {len(a)} answers")
    out = {}
    for cut, keep in CUTS.items():
        idx = [i for i, m in enumerate(tests) if keep(m)]
        here, there = [b[i] == "1" for i in idx], [a[i] == "1" for i in idx]
        t = sign_test(here, there)
        out[cut] = dict(n=len(idx), shipped=round(sum(there) / max(1, len(idx)), 4),
                        row=round(sum(here) / max(1, len(idx)), 4), right_only_row=t["right_only_here"],
                        right_only_shipped=t["right_only_there"], sign_test_p=t["sign_test_p"])
    return out


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", help="a benchmarks/cv.py JSON with the rows 'shipped' and --row")
    ap.add_argument("--set", required=True, choices=sorted(SETS))
    ap.add_argument("--row", required=True)
    ap.add_argument("--data", default=str(REPO.parent / "shared" / "data"))
    ap.add_argument("--out")
    args = ap.parse_args(argv)
    result = dict(command="python3 benchmarks/cv_split.py " + " ".join(sys.argv[1:] if argv is None else argv),
                  run=args.run, row=args.row,
                  cuts=split(json.loads(Path(args.run).read_text(encoding="utf-8")), args.set, args.row,
                             Path(args.data)))
    for cut, r in result["cuts"].items():
        print(f"{cut:20s} n={r['n']:5d}  shipped {r['shipped']:.4f}  {args.row} {r['row']:.4f}  "
              f"{r['right_only_row']} / {r['right_only_shipped']}, p = {r['sign_test_p']}")
    if args.out:
        Path(args.out).write_text(json.dumps(result, ensure_ascii=False, indent=1), encoding="utf-8")
        print(f"written to {args.out}")
    return result


if __name__ == "__main__":
    main()
