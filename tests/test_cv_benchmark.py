"""benchmarks/cv.py: the outer folds' training files a per-fold dense bi-encoder is trained from; and
benchmarks/history_extras.py's counts."""

import sys
from collections import Counter
from pathlib import Path

import pytest

from tests.helpers import tiny_yidu

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
sys.path.insert(0, str(ROOT))


def test_the_dense_row_needs_its_per_fold_encoders(tmp_path, capsys):
    from benchmarks.cv import _load_dense, main

    with pytest.raises(SystemExit) as e:
        main(["--rows", "shipped,dense", "--out", str(tmp_path / "cv.json")])
    assert e.value.code == 2
    assert "row dense needs --dense" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--rows", "shipped,dense_crossfit", "--dense", "x{k}", "--out", str(tmp_path / "cv.json")])
    assert "row dense_crossfit needs --dense-crossfit" in capsys.readouterr().err
    with pytest.raises(SystemExit, match=r"no bi-encoder folder .*fold3 for outer fold 3"):
        _load_dense(str(tmp_path / "fold{k}"), 3)
    assert not (tmp_path / "cv.json").exists()


def test_against_files_are_checked_before_any_fold_is_fitted(tmp_path):
    """A run's comparison comes after its folds (minutes to hours): a file that cannot answer it stops the run
    first, naming the file and what it lacks."""
    import json

    from benchmarks.cv import main
    from termnorm.errors import DataFormatError

    def result(path, sets):
        path.write_text(json.dumps({"results": sets}), encoding="utf-8")
        return str(path)

    good = result(tmp_path / "good.json", {"yidu": {"rows": {"shipped": {"answers": "101"}, "dense": {}},
                                                    "folds": [{"fold": 0}, {"fold": 1}]}})
    base = ["--data", str(tmp_path / "no-data-here"), "--sets", "yidu", "--rows", "dense", "--dense", "x{k}",
            "--out", str(tmp_path / "cv.json")]
    for spec, problem in [
        (str(tmp_path / "missing.json"), "not a result of this script"),
        (result(tmp_path / "other.json", {"cdn": {}}), "no results for set 'yidu' .it has cdn"),
        (f"{good}:dense", "no answers of row 'dense' .rows with answers: shipped"),
        (good, r"measured on outer folds \[0, 1\], not on all of \[0, 1, 2\]"),
    ]:
        with pytest.raises(SystemExit, match=problem):
            main([*base, "--folds", "0,1,2", "--against", spec])
    # the good file passes the check; the run then stops on the missing data, not on --against
    with pytest.raises(DataFormatError, match="code.txt: file not found"):
        main([*base, "--folds", "0", "--jobs", "1", "--against", good])
    assert not (tmp_path / "cv.json").exists()


@pytest.mark.parametrize("name, files", [
    ("yidu", ("yidu-n7k/code.txt", "yidu-n7k/train.xlsx", "yidu-n7k/val.xlsx")),
    # CHIP-CDN holds mentions with control characters, which a worksheet refuses
    ("cdn", ("chip-cdn/icd10_beijing_clinical_v601.xlsx", "chip-cdn/train.json", "chip-cdn/dev.json")),
])
def test_written_fold_files_hold_each_folds_training_mentions_and_none_of_its_test(tmp_path, name, files):
    from benchmarks.cv import outer_fold, write_folds
    from termnorm.loaders import load_labelled, load_vocabulary

    if not all((DATA / f).is_file() for f in files):
        pytest.skip("shared data absent")
    paths = write_folds(name, str(DATA), str(tmp_path))
    assert [p.relative_to(tmp_path).as_posix() for p in paths] == [f"fold{k}/train.json" for k in range(5)]
    vocab = load_vocabulary(DATA / files[0])
    train = load_labelled(DATA / files[1], vocab).mentions
    dev = load_labelled(DATA / files[2], vocab).mentions
    for k, path in enumerate(paths):
        want, test = outer_fold(train, dev, k)
        got = load_labelled(path, vocab).mentions
        assert [(m.text, list(m.terms)) for m in got] == [(m.text, list(m.terms)) for m in want]
        # together with the fold's test mentions the file is every labelled mention exactly once
        assert Counter(m.text for m in got) + Counter(m.text for m in test) == Counter(
            m.text for m in train + dev)
        assert any(len(m.terms) > 1 for m in got)  # multi-term mentions survive the ## join


def test_summary_scores_each_fold_and_counts_the_mentions_only_one_row_gets_right():
    from benchmarks.cv import summarize

    def fold(k, shipped, other):
        # rows: (right per mention, tp, predicted pairs, gold pairs)
        return {"fold": k, "train": 10, "test": len(shipped[0]), "candidates_seconds": 1.0,
                "rows": {name: {"right": r, "tp": tp, "n_pred": p, "n_gold": g, "seconds": 1.0}
                         for name, (r, tp, p, g) in (("shipped", shipped), ("ensemble_3", other))}}

    res = summarize([fold(1, ([True, False, False], 2, 4, 4), ([True, True, False], 3, 4, 4)),
                     fold(0, ([True, True], 2, 2, 3), ([False, True], 1, 2, 3))])
    assert [f["fold"] for f in res["folds"]] == [0, 1] and res["mentions"] == 5
    row = res["rows"]["ensemble_3"]
    assert row["per_fold_accuracy"] == {0: 0.5, 1: round(2 / 3, 4)}
    assert row["per_fold_micro_f1"] == {0: 0.4, 1: 0.75}  # 2·1/(2+3), 2·3/(4+4)
    assert row["micro_f1"] == round(2 * 4 / (6 + 7), 4)
    assert (row["right_only_here"], row["right_only_in_shipped"]) == (1, 1)
    assert row["pairwise"] == {"shipped": {"right_only_here": 1, "right_only_there": 1, "sign_test_p": 1.0}}
    assert res["rows"]["shipped"]["pairwise"]["ensemble_3"]["right_only_there"] == 1
    assert res["rows"]["shipped"]["per_fold_micro_f1"] == {0: 0.8, 1: 0.5}
    # each row's answers, in fold order, compared with another run's (another commit's) by --against
    assert res["rows"]["shipped"]["answers"] == "11100" and res["rows"]["ensemble_3"]["answers"] == "01110"
    from benchmarks.cv import against

    vs = against(res, res, "ensemble_3")
    assert (vs["shipped"]["right_only_here"], vs["shipped"]["right_only_there"]) == (1, 1)
    assert vs["ensemble_3"]["right_only_here"] == vs["ensemble_3"]["right_only_there"] == 0
    with pytest.raises(SystemExit, match="no answers"):
        against(res, {"rows": {"shipped": {"accuracy": 0.5}}})
    # a run of some outer folds (--folds 1) against a run of all: their answers of fold 1 alone
    one = summarize([fold(1, ([True, False, False], 2, 4, 4), ([True, True, False], 3, 4, 4))])
    vs = against(one, res, "ensemble_3")
    assert (vs["shipped"]["right_only_here"], vs["shipped"]["right_only_there"]) == (0, 1)


def test_history_extras_benchmark_counts_what_each_strategy_proposes():
    from benchmarks.history_extras import measure
    from termnorm.records import LabelledMention
    from termnorm.vocabulary import Vocabulary

    v = Vocabulary(name="t")
    for name in ["肩脱位闭合性复位术", "髋脱位闭合性复位术", "甲状腺病损切除术", "单侧甲状腺叶切除术"]:
        v.add_term(name)
    history = [LabelledMention("右肩关节脱位手法整复术", ["肩脱位闭合性复位术"]),
               LabelledMention("左侧甲状腺肿物切除", ["甲状腺病损切除术"]),
               LabelledMention("甲状腺肿物切除术", ["甲状腺病损切除术"]),
               LabelledMention("右甲状腺肿物切除术", ["单侧甲状腺叶切除术"])]
    queries = [LabelledMention("右髋关节脱位手法整复术", ["髋脱位闭合性复位术"]),  # analogy, right
               LabelledMention("甲状腺肿物切除术", ["单侧甲状腺叶切除术"]),  # equal text; key majority wrong
               LabelledMention("左甲状腺肿物切除", ["甲状腺病损切除术"])]  # equal key, majority right
    r = measure(v, history, queries)
    assert (r["queries"], r["history"], r["exact"]) == (3, 4, 1)
    assert r["key"] == {"queries": 2, "gold_is_majority_set": 1}
    assert {k: r["analogy"][k] for k in ("queries", "best_is_gold", "some_is_gold")} == \
        {"queries": 1, "best_is_gold": 1, "some_is_gold": 1}


def test_kept_folds_are_taken_by_the_next_run_and_refitted_when_what_measured_them_changed(tmp_path, monkeypatch):
    """A CV run cut short keeps its finished outer folds (--keep-folds); the next run takes them instead of
    fitting them again, and gives the same figures; a kept fold of other rows, seed or code is not taken. A row
    measured alone (--against, no shipped row) gives the same answers and is compared with the first run's rows."""
    import json
    from concurrent.futures import ThreadPoolExecutor

    import benchmarks.cv as cv

    data = tiny_yidu(tmp_path / "data")
    kept = tmp_path / "kept"
    base = ["--data", str(data), "--sets", "yidu", "--folds", "0,1", "--jobs", "1", "--rows", "shipped,novel_2",
            "--keep-folds", str(kept)]
    assert cv.main([*base, "--out", str(tmp_path / "a.json")]) == 0
    assert sorted(p.name for p in kept.iterdir()) == ["yidu_fold0.json", "yidu_fold1.json"]
    first = json.loads((tmp_path / "a.json").read_text(encoding="utf-8"))["results"]["yidu"]
    (kept / "yidu_fold1.json").unlink()  # as if the run had been killed before fold 1 finished

    fitted = []
    real = cv.run_fold

    def counted(name, data, k, *a):
        fitted.append(k)
        return real(name, data, k, *a)

    monkeypatch.setattr(cv, "run_fold", counted)
    # threads, not processes: the count is seen only in this process
    monkeypatch.setattr(cv, "ProcessPoolExecutor", lambda max_workers, mp_context=None: ThreadPoolExecutor(max_workers))
    assert cv.main([*base, "--out", str(tmp_path / "b.json")]) == 0
    assert fitted == [1]  # fold 0 was taken from the kept file
    again = json.loads((tmp_path / "b.json").read_text(encoding="utf-8"))["results"]["yidu"]
    assert again["rows"]["shipped"]["answers"] == first["rows"]["shipped"]["answers"]
    assert again["rows"]["novel_2"]["per_fold_accuracy"] == first["rows"]["novel_2"]["per_fold_accuracy"]

    # what measured a kept fold is part of it: another seed, other rows, encoder or code fit it again
    args = cv.argparse.Namespace(seed=0, data=str(data))
    key = cv._fold_key(args, "yidu", 0, ("shipped", "novel_2"), {"dense": None, "crossfit": None})
    assert cv.FoldKeep(str(kept), "yidu", 0, key).load()["rows"]["shipped"]["right"]
    # an encoder folder of the same name trained again has another modification time
    for change in ({"seed": 1}, {"rows": ["shipped"]}, {"code": "another commit"},
                   {"dense": {"dense": [str(tmp_path / "enc0"), 1.0]}}):
        assert cv.FoldKeep(str(kept), "yidu", 0, {**key, **change}).load() is None, change

    # a row measured alone (no shipped row: the encoder-only case) against the first run's rows, mention by mention
    with pytest.raises(SystemExit) as e:
        cv.main([*base[:-4], "--rows", "novel_2", "--out", str(tmp_path / "c.json")])
    assert e.value.code == 2  # without --against the rows start with shipped
    alone = [*base[:-4], "--rows", "novel_2", "--against", str(tmp_path / "a.json"),
             "--against", f"{tmp_path / 'a.json'}:novel_2", "--out", str(tmp_path / "c.json")]
    assert cv.main(alone) == 0
    res = json.loads((tmp_path / "c.json").read_text(encoding="utf-8"))["results"]["yidu"]
    assert list(res["rows"]) == ["novel_2"] and "sign_test_p" not in res["rows"]["novel_2"]
    assert res["rows"]["novel_2"]["answers"] == first["rows"]["novel_2"]["answers"]
    vs_shipped, vs_itself = res["against"]
    assert (vs_shipped["row"], vs_itself["row"]) == ("shipped", "novel_2")
    assert (vs_shipped["rows"]["novel_2"]["right_only_here"], vs_shipped["rows"]["novel_2"]["right_only_there"]) == \
        (first["rows"]["novel_2"]["right_only_here"], first["rows"]["novel_2"]["right_only_in_shipped"])
    assert vs_itself["rows"]["novel_2"]["right_only_here"] == vs_itself["rows"]["novel_2"]["right_only_there"] == 0


def test_cv_split_cuts_a_runs_answers_into_subsets_that_add_up_to_the_run(tmp_path):
    """benchmarks/cv_split.py rebuilds a real run's test mentions (outer folds 0 and 1 of the demo in Yidu-N7K's
    layout) and compares two rows on subsets: complementary cuts add up to the run's own counts."""
    import json

    import benchmarks.cv as cv
    from benchmarks.cv_split import main as cv_split

    data = tiny_yidu(tmp_path / "data")
    run = tmp_path / "run.json"
    assert cv.main(["--data", str(data), "--sets", "yidu", "--folds", "0,1", "--jobs", "1",
                    "--rows", "shipped,part_context", "--out", str(run)]) == 0
    res = json.loads(run.read_text(encoding="utf-8"))["results"]["yidu"]
    out = tmp_path / "split.json"
    cuts = cv_split([str(run), "--set", "yidu", "--row", "part_context", "--data", str(data),
                     "--out", str(out)])["cuts"]
    assert json.loads(out.read_text(encoding="utf-8"))["cuts"] == cuts
    row = res["rows"]["part_context"]
    for a, b in (("multi-part", "one part"), ("several gold terms", "one gold term")):
        assert cuts[a]["n"] + cuts[b]["n"] == res["mentions"] and cuts[a]["n"] > 0 and cuts[b]["n"] > 0
        assert cuts[a]["right_only_row"] + cuts[b]["right_only_row"] == row["right_only_here"]
        assert cuts[a]["right_only_shipped"] + cuts[b]["right_only_shipped"] == row["right_only_in_shipped"]
        right = cuts[a]["shipped"] * cuts[a]["n"] + cuts[b]["shipped"] * cuts[b]["n"]
        assert right == pytest.approx(res["rows"]["shipped"]["accuracy"] * res["mentions"], abs=0.01)
    # mention by mention: the run's answers joined to the mentions of folds 0 then 1
    from termnorm.loaders import load_labelled, load_vocabulary

    vocab = load_vocabulary(data / "yidu-n7k" / "code.txt")
    train, dev = (load_labelled(data / "yidu-n7k" / f, vocab).mentions for f in ("train.xlsx", "val.xlsx"))
    several = [len(m.terms) > 1 for k in (0, 1) for m in cv.outer_fold(train, dev, k)[1]]
    got = [x == "1" for x, s in zip(res["rows"]["shipped"]["answers"], several) if s]
    assert cuts["several gold terms"]["shipped"] == round(sum(got) / len(got), 4)
    import pandas as pd

    other = tiny_yidu(tmp_path / "other")  # a dev file cut short: the run's answers no longer line up
    val = other / "yidu-n7k" / "val.xlsx"
    pd.read_excel(val, dtype=str)[:5].to_excel(val, index=False)
    with pytest.raises(SystemExit, match="test mentions rebuilt"):
        cv_split([str(run), "--set", "yidu", "--row", "part_context", "--data", str(other)])


def test_the_switch_bound_reports_both_engines_as_their_own_benchmarks_do(tmp_path):
    """benchmarks/switch_bound.py: its pipeline is cv.py's shipped row on the official split, its day-one engine
    day_one.py's; the oracle is right wherever either is, the switch takes one of the two answers."""
    import json

    from benchmarks import cv, day_one, switch_bound

    data = tiny_yidu(tmp_path / "data")
    assert switch_bound.main(["--data", str(data), "--sets", "yidu", "--out", str(tmp_path / "sb.json")]) == 0
    got = json.loads((tmp_path / "sb.json").read_text())["results"]["yidu"]["by_familiarity"]
    fold0 = cv.run_fold("yidu", str(data), 0, 0, rows=("shipped",))
    assert got["all"]["n"] == fold0["test"]
    assert got["all"]["pipeline"] == round(sum(fold0["rows"]["shipped"]["right"]) / fold0["test"], 4)
    assert day_one.main(["--data", str(data), "--sets", "yidu", "--out", str(tmp_path / "d1.json")]) == 0
    from termnorm.text import short_forms

    assert short_forms.ENABLED is False  # its row with the short forms leaves the process's switch as it was
    d1 = json.loads((tmp_path / "d1.json").read_text())["results"]["yidu"]
    assert d1["mentions"] == got["all"]["n"]
    assert got["all"]["day_one"] == d1["shipped_cold_start"]["accuracy"]
    assert sum(v["n"] for b, v in got.items() if b != "all") == got["all"]["n"]
    for v in got.values():
        assert max(v["pipeline"], v["day_one"]) <= v["oracle"]
        assert abs(v["oracle"] - v["pipeline"] - v["right_only_day_one"] / v["n"]) <= 1e-4
        both_right = v["pipeline"] - v["right_only_pipeline"] / v["n"]
        assert both_right - 1e-4 <= v["switch_novel"] <= v["oracle"]
    assert got["all"]["right_only_pipeline"] + got["all"]["right_only_day_one"] > 0  # the two engines differ
