"""Dashboard numbers on a small hand-made decisions fixture (hand-computed values in the comments)."""

from __future__ import annotations

import math

import pandas as pd
import plotly.graph_objects as go
import pytest

from termnorm.coding_metrics import (
    Numbers,
    acceptance,
    acceptance_flags,
    audit_outcomes,
    auto_audit,
    coder_throughput,
    confused_pairs,
    count_confusion,
    error_examples,
    errors_by_chapter,
    fig_acceptance,
    fig_auto_audit,
    fig_confused_pairs,
    fig_count_confusion,
    fig_error_examples,
    fig_errors_treemap,
    fig_model_accuracy,
    fig_throughput,
    model_accuracy,
    vocabulary_levels,
    wilson_interval,
)
from termnorm.errors import DataFormatError
from termnorm.vocabulary import Vocabulary

SIX = ["A", "B", "C", "D", "E", "F"]
COLUMNS = ["decision_id", "mention_id", "mention", "user", "at", "seconds", "action", "suggested", "shown",
           "terms", "model_version", "predicted_count"]
# 2024-01-01 is a Monday. Flags (top1, top5, rejected) per answer decision in the last comment.
DECISIONS = pd.DataFrame([
    (1, 1, "甲状腺切除", "ann", "2024-01-01 09:00", 30, "accept", ["A"], SIX, ["A"], "v1", 1),  # T T F
    (2, 2, "阑尾切除", "ann", "2024-01-01 09:01", 40, "correct", ["A"], SIX, ["B"], "v1", 1),  # F T F; A→B
    (3, 3, "胆囊切除", "ann", "2024-01-01 09:03", 60, "correct", ["C"], "C##A##B##D##E##F", ["F"], "v1", 1),
    # ^ F is 6th shown: F F F; C→F
    (4, 4, "疝修补", "ann", "2024-01-01 10:00", 20, "reject", ["D"], ["D", "E"], [], "v1", 1),  # F F T
    (5, 5, "阑尾胆囊", "bob", "2024-01-02 14:00", 50, "correct", ["A"], ["A", "B", "C"], ["A", "B"], "v2", 1),  # F T F
    (6, 6, "双侧", "bob", "2024-01-02 14:02", 70, "accept", ["B", "C"], ["B", "C", "A"], ["B", "C"], "v2", 2),  # T T F
    (7, 7, "不清", "bob", "2024-01-08 08:00", 10, "skip", ["A"], ["A"], [], "v2", 1),  # not an answer
    (8, 8, "阑尾", "bob", "2024-01-08 08:05", 30, "correct", ["A"], ["A", "B"], ["B"], "v2", 1),  # F T F; A→B
    (9, 9, "自动", "system", "2024-01-08 09:00", 0, "auto", ["C"], ["C"], ["C"], "v2", 1),  # the engine itself
], columns=COLUMNS)


def test_acceptance_overall_and_flags():
    flags = acceptance_flags(DECISIONS)
    assert flags["decision_id"].tolist() == [1, 2, 3, 4, 5, 6, 8]
    assert flags["top1"].tolist() == [True, False, False, False, False, True, False]
    assert flags["topk"].tolist() == [True, True, False, False, True, True, True]
    assert flags["rejected_all"].tolist() == [False, False, False, True, False, False, False]
    res = acceptance(DECISIONS)
    assert isinstance(res, Numbers) and "top-5" in res.how
    # 7 answers: top-1 d1 d6 = 2/7; top-5 d1 d2 d5 d6 d8 = 5/7; rejected d4 = 1/7
    assert res.summary["n"] == 7
    assert res.summary["top1"] == pytest.approx(2 / 7)
    assert res.summary["topk"] == pytest.approx(5 / 7)
    assert res.summary["rejected_all"] == pytest.approx(1 / 7)
    # k = 6 brings d3's F into range: 6/7
    assert acceptance(DECISIONS, k=6).summary["topk"] == pytest.approx(6 / 7)



def test_an_accept_marked_not_related_counts_as_rejecting_all():
    """d1 accepted A, but the coder marked it not related to A (key 5): no final term, so not top-1 but rejected."""
    marked = DECISIONS.assign(relationship=["not-related-to"] + [""] * (len(DECISIONS) - 1))
    flags = acceptance_flags(marked)
    assert flags["top1"].tolist()[:2] == [False, False] and flags["rejected_all"].tolist()[0]
    assert acceptance(marked).summary["rejected_all"] == pytest.approx(2 / 7)
    assert acceptance(marked).summary["top1"] == pytest.approx(1 / 7)

def test_acceptance_by_model_and_over_time():
    t = acceptance(DECISIONS, by="model_version").table.set_index("model_version")
    # v1 = d1..d4: top1 1/4, top5 2/4, rejected 1/4 ; v2 = d5 d6 d8: 1/3, 3/3, 0
    assert t.loc["v1", ["n", "n_top1", "n_topk", "n_rejected"]].tolist() == [4, 1, 2, 1]
    assert t.loc["v2", "top1"] == pytest.approx(1 / 3) and t.loc["v2", "topk"] == 1.0
    assert t.loc["v2", "rejected_all"] == 0.0
    w = acceptance(DECISIONS, by="week").table
    # week of Mon 2024-01-01: d1..d6 (top1 2/6, top5 4/6, rejected 1/6); week of 2024-01-08: d8 (0, 1, 0)
    assert [str(x.date()) for x in w["week"]] == ["2024-01-01", "2024-01-08"]
    assert w["n"].tolist() == [6, 1]
    assert w["top1"].tolist() == pytest.approx([2 / 6, 0.0])
    assert w["topk"].tolist() == pytest.approx([4 / 6, 1.0])
    d = acceptance(DECISIONS, by="day").table
    assert d["n"].tolist() == [4, 2, 1]


def test_acceptance_without_shown_falls_back_to_the_chosen_set():
    res = acceptance(DECISIONS.drop(columns="shown"))
    # shown := suggested. top5: d1 (A⊆{A}), d6 ({B,C}) = 2/7; rejected: d2 d3 d4 d8 (no final term in suggested) = 4/7
    assert res.summary["topk"] == pytest.approx(2 / 7)
    assert res.summary["rejected_all"] == pytest.approx(4 / 7)
    assert "no shown list" in res.how


# Gold predictions per model version (one row per model × mention).
GOLD = pd.DataFrame([
    ("v1", ["A"], ["A"]), ("v1", ["B"], ["A"]), ("v1", ["A", "B"], "B##A"), ("v1", ["C"], ["C", "D"]),
    ("v2", ["A"], ["A"]), ("v2", ["B"], ["B"]), ("v2", ["A", "B"], ["A"]), ("v2", ["C"], ["C"]),
    ("v2", [], ["Z"]),  # no gold: skipped
], columns=["model_version", "gold_terms", "suggested"])


def test_model_accuracy_by_hand():
    res = model_accuracy(GOLD)
    t = res.table.set_index("model_version")
    # v1: exact m1 m3 -> 2/4; tp 1+0+2+1 = 4, predicted 6, gold 5: P 2/3, R 4/5, F1 = (16/15)/(22/15) = 8/11
    assert t.loc["v1", "n"] == 4
    assert t.loc["v1", "accuracy"] == pytest.approx(0.5)
    assert t.loc["v1", "micro_f1"] == pytest.approx(8 / 11)
    # v2: exact m1 m2 m4 -> 3/4; tp 4, predicted 4, gold 5: P 1, R .8, F1 = 1.6/1.8 = 8/9
    assert t.loc["v2", "accuracy"] == pytest.approx(0.75)
    assert t.loc["v2", "micro_f1"] == pytest.approx(8 / 9)
    assert res.summary == {"n": 8, "best": "v2"}
    assert '1 whose gold is "no term fits" left out' in res.how  # the skipped row is said, not silently dropped
    assert "left out" not in model_accuracy(GOLD[GOLD["gold_terms"].map(len) > 0]).how


def test_errors_by_chapter_and_vocabulary_levels():
    chapters = {"A": "ch1", "B": "ch1", "C": "ch2", "F": "ch2"}
    categories = {"A": "cat1a", "B": "cat1b", "C": "cat2c", "F": "cat2f"}
    res = errors_by_chapter(DECISIONS, chapters.get, categories.get)
    # coder terms not in the engine's set: d2 B, d3 F, d5 B, d8 B (d4 reject has none)
    assert res.table.values.tolist() == [["ch1", "cat1b", 3], ["ch2", "cat2f", 1]]
    assert res.summary == {"n_errors": 4, "n_mentions": 4}

    v = Vocabulary(name="procedures")
    v.add_term("阑尾切除术", ["47.0901"])
    v.add_term("无编码术语")
    v.code_names.update({"47.0": "阑尾切除", "47": "阑尾手术"})
    chapter_of, category_of = vocabulary_levels(v)
    # 47.0901 -> 47.0 -> 47 by code prefixes: chapter 47, category 47.0
    assert chapter_of("阑尾切除术") == "47 阑尾手术" and category_of("阑尾切除术") == "47.0 阑尾切除"
    assert chapter_of("无编码术语") == "?" and category_of("无编码术语") == "?"


def test_confused_pairs_and_count_confusion():
    res = confused_pairs(DECISIONS)
    assert res.table.values.tolist() == [["A", "B", 2], ["C", "F", 1]]  # d2 + d8; d3 (d5 kept A: no pair)
    c = count_confusion(DECISIONS)
    # accept/correct with terms: d1 (1,1) d2 (1,1) d3 (1,1) d5 (1,2) d6 (2,2) d8 (1,1)
    assert c.table.values.tolist() == [[4, 1], [0, 1]]
    assert c.table.index.tolist() == [1, 2] and c.table.columns.tolist() == [1, 2]
    assert c.summary["count_accuracy"] == pytest.approx(5 / 6)
    assert c.summary["under"] == pytest.approx(1 / 6) and c.summary["over"] == 0.0
    # without predicted_count: the size of the chosen set (same here)
    assert count_confusion(DECISIONS.drop(columns="predicted_count")).table.values.tolist() == [[4, 1], [0, 1]]


def test_coder_throughput_by_hand():
    t = coder_throughput(DECISIONS).table.set_index("user")
    assert "system" not in t.index  # auto decisions are not a coder's
    # ann: 09:00 09:01 09:03 | 57 min gap | 10:00 -> sessions 180 s + 30 s and 0 s + 20 s = 230 s
    assert t.loc["ann", "n_sessions"] == 2
    assert t.loc["ann", "active_hours"] == pytest.approx(230 / 3600)
    assert t.loc["ann", "decisions_per_hour"] == pytest.approx(4 * 3600 / 230)
    assert t.loc["ann", "median_seconds"] == pytest.approx(35.0)  # median of 30 40 60 20
    # bob: (120 s + 50 s) + (300 s + 10 s) = 480 s for 4 decisions (skip included) -> 30/h; median(50 70 10 30) = 40
    assert t.loc["bob", "decisions_per_hour"] == pytest.approx(30.0)
    assert t.loc["bob", "median_seconds"] == pytest.approx(40.0)


HISTORY = pd.DataFrame([
    (1, 10, "auto", ["A"], "2024-01-01 08:00", "v2"), (2, 10, "accept", ["A"], "2024-01-02 08:00", "v2"),  # ok
    (3, 11, "auto", ["A"], "2024-01-01 08:00", "v2"), (4, 11, "correct", ["B"], "2024-01-02 08:00", "v2"),  # no
    (5, 12, "auto", ["C"], "2024-01-01 08:00", "v2"), (6, 12, "skip", [], "2024-01-02 08:00", "v2"),
    (7, 12, "accept", ["C"], "2024-01-03 08:00", "v2"),  # skip ignored, then confirmed
    (8, 13, "auto", ["D"], "2024-01-01 08:00", "v1"),  # never audited
    (9, 14, "accept", ["A"], "2024-01-01 08:00", "v1"),  # never auto-coded
    (10, 15, "auto", ["E"], "2024-01-01 08:00", "v1"), (11, 15, "reject", [], "2024-01-02 08:00", "v1"),  # no
], columns=["decision_id", "mention_id", "action", "terms", "at", "model_version"])


def test_wilson_interval_by_hand():
    # 8/10: z² = 3.8415; centre (.8 + .19207)/1.38415 = .71674; half 1.41601 * sqrt(.016 + .0096) = .22658
    lo, hi = wilson_interval(8, 10)
    assert (lo, hi) == pytest.approx((0.4902, 0.9433), abs=1e-4)
    assert all(math.isnan(x) for x in wilson_interval(0, 0))


def test_auto_audit_by_hand():
    out = audit_outcomes(HISTORY)
    assert out["mention_id"].tolist() == [10, 11, 12, 15]
    assert out["confirmed"].tolist() == [True, False, True, False]
    res = auto_audit(HISTORY)
    # 2 of 4: centre .5; half = 1.95996/1.96037 * sqrt(.0625 + 3.8415/64) = .34996 -> [.1500, .8500]
    assert res.summary["n_audited"] == 4 and res.summary["share"] == 0.5
    assert (res.summary["ci_low"], res.summary["ci_high"]) == pytest.approx((0.1500, 0.8500), abs=1e-4)
    t = res.table.set_index("model_version")
    assert t.loc["v2", ["n_audited", "n_confirmed"]].tolist() == [3, 2] and t.loc["v1", "share"] == 0.0
    # an outcomes frame with a ready `confirmed` column is taken as is
    assert auto_audit(out, by=None).summary["n_confirmed"] == 2


def test_error_examples_filters():
    res = error_examples(DECISIONS)
    # kinds: d2 d3 d8 wrong term; d4 ([] vs [D]) extra term; d5 ([A,B] vs [A]) missing term -> 5 errors
    assert res.summary["n_errors"] == 5
    assert res.table["mention_id"].tolist() == [8, 5, 4, 3, 2]  # newest first
    assert error_examples(DECISIONS, kind="wrong term").table["mention_id"].tolist() == [8, 3, 2]
    assert error_examples(DECISIONS, model_version="v2").table["mention_id"].tolist() == [8, 5]
    assert error_examples(DECISIONS, contains="阑尾").table["mention_id"].tolist() == [8, 5, 2]
    ch = error_examples(DECISIONS, chapter_of={"A": "ch1", "B": "ch1", "F": "ch2"}.get, chapter="ch2")
    assert ch.table["mention_id"].tolist() == [3]
    assert len(error_examples(DECISIONS, include_correct=True, limit=100).table) == 7
    row = error_examples(DECISIONS, user="ann", kind="missing term")
    assert row.table.empty and "filters" in row.how


def test_bad_frames_raise_data_format_error():
    with pytest.raises(DataFormatError, match="missing column"):
        acceptance(DECISIONS.drop(columns="terms"))
    bad = DECISIONS.copy()
    bad.at[1, "terms"] = 42
    with pytest.raises(DataFormatError) as e:
        acceptance(bad)
    assert e.value.row == 2


def _hover_has(fig: go.Figure, text: str) -> bool:
    return all(text in (tr.hovertemplate or "") for tr in fig.data)


def test_figures_have_the_expected_traces_and_hover():
    weekly = fig_acceptance(acceptance(DECISIONS, by="week"))
    assert [tr.type for tr in weekly.data] == ["scatter"] * 3 and "lines" in weekly.data[0].mode
    assert {tr.name for tr in weekly.data} == {"accepted at top-1", "within top-5", "rejected all"}
    assert _hover_has(weekly, "top-1 = final set equals")
    per_model = fig_acceptance(acceptance(DECISIONS, by="model_version"))
    assert [tr.type for tr in per_model.data] == ["bar"] * 3 and list(per_model.data[0].x) == ["v1", "v2"]

    acc = fig_model_accuracy(model_accuracy(GOLD))
    assert {tr.name for tr in acc.data} == {"accuracy", "micro_f1"} and _hover_has(acc, "micro-F1")

    tree = fig_errors_treemap(errors_by_chapter(DECISIONS, {"B": "ch1", "F": "ch2"}.get))
    assert tree.data[0].type == "treemap" and {"ch1", "ch2", "B", "F"} <= set(tree.data[0].labels)

    heat = fig_count_confusion(count_confusion(DECISIONS))
    assert heat.data[0].type == "heatmap" and heat.data[0].z.tolist() == [[4, 1], [0, 1]]

    pairs = fig_confused_pairs(confused_pairs(DECISIONS))
    assert pairs.data[0].orientation == "h" and list(pairs.data[0].y) == ["C → F", "A → B"]
    assert pairs.layout.xaxis.dtick == 1 and pairs.layout.xaxis.tickformat == "d"  # counts: no "0.5" ticks

    thr = fig_throughput(coder_throughput(DECISIONS))
    assert list(thr.data[0].x) == ["ann", "bob"] and _hover_has(thr, "session")

    audit = fig_auto_audit(auto_audit(HISTORY))
    assert audit.data[0].type == "bar" and audit.data[0].error_y.array is not None
    assert _hover_has(audit, "Wilson")

    table = fig_error_examples(error_examples(DECISIONS))
    assert table.data[0].type == "table" and table.layout.meta["how"].startswith("terms vs")


def test_a_time_chart_of_one_day_has_day_ticks_and_the_treemap_opens_on_chapters():
    """Seen in a browser: one day of data gave sub-millisecond ticks; the treemap's two levels of small boxes
    left no label readable."""
    one_day = pd.DataFrame({"action": ["accept", "correct"], "terms": [["a"], ["b"]], "suggested": [["a"], ["c"]],
                            "shown": [["a", "b"], ["c", "b"]],
                            "at": pd.to_datetime(["2026-11-25 10:00", "2026-11-25 11:30"], utc=True)})
    fig = fig_acceptance(acceptance(one_day, by="day"))
    lo, hi = (pd.Timestamp(x) for x in fig.layout.xaxis.range)
    assert hi - lo == pd.Timedelta(days=1) and fig.layout.xaxis.dtick == 86_400_000
    assert fig.layout.xaxis.tickformat == "%Y-%m-%d"
    weeks = fig_acceptance(acceptance(one_day, by="week"))
    lo, hi = (pd.Timestamp(x) for x in weeks.layout.xaxis.range)
    assert hi - lo == pd.Timedelta(days=7)
    errs = Numbers(pd.DataFrame({"chapter": ["51 胆", "51 胆", "06 甲"], "category": ["51.2", "51.5", "06.3"],
                                      "count": [3, 1, 2]}), "how", {})
    tree = fig_errors_treemap(errs)
    assert tree.data[0].maxdepth == 2 and "%{value} missed" in tree.data[0].texttemplate  # not "1 errors"
