"""Inter-annotator agreement against hand-computed values (arithmetic in the comments)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import cohen_kappa_score

from termnorm.agreement import (
    agreement_report,
    annotation_matrix,
    cohen_kappa,
    cohen_kappa_terms,
    disagreements,
    exact_set_agreement,
    fleiss_kappa,
    fleiss_kappa_sets,
    fleiss_table,
    krippendorff_alpha,
    set_label,
    term_set,
)
from termnorm.errors import DataFormatError

# Two annotators, categories A = {t1}, B = {t2}, C = {t1, t2}; m11 only by a, m12 only by b (missing -> ignored).
# Spellings differ on purpose: a list, a '##' string in another order, a tuple all mean the same set.
A, B, C = ["t1"], "t2", "t2##t1"
PAIR_A = {1: A, 2: A, 3: B, 4: C, 5: A, 6: B, 7: ("t1", "t2"), 8: A, 9: B, 10: A, 11: A, 12: None}
PAIR_B = {1: A, 2: A, 3: B, 4: A, 5: A, 6: C, 7: C, 8: B, 9: B, 10: A, 12: B}


def test_term_set_parsing():
    assert term_set("a ## b##") == frozenset({"a", "b"})
    assert term_set(["b", "a", "a"]) == frozenset({"a", "b"})
    assert term_set(None) is None and term_set(float("nan")) is None
    assert term_set([]) == frozenset() and term_set("") == frozenset()  # "no term fits" is an answer
    with pytest.raises(DataFormatError) as e:
        term_set(3, source="gold.csv", row=7)
    assert e.value.path == "gold.csv" and e.value.row == 7


def test_exact_set_agreement_and_cohen_kappa_by_hand():
    # co-annotated: m1..m10. Same set on m1 m2 m3 m5 m7 m9 m10 -> p_o = 7/10.
    assert exact_set_agreement(PAIR_A, PAIR_B) == pytest.approx(0.7)
    # marginals a: A 5 (m1 m2 m5 m8 m10), B 3 (m3 m6 m9), C 2 (m4 m7)
    #           b: A 5 (m1 m2 m4 m5 m10), B 3 (m3 m8 m9), C 2 (m6 m7)
    # p_e = .5*.5 + .3*.3 + .2*.2 = .38 ; kappa = (.7 - .38) / (1 - .38) = .32 / .62
    assert cohen_kappa(PAIR_A, PAIR_B) == pytest.approx(0.32 / 0.62)
    # cross-check against sklearn on hand-written labels for m1..m10
    la = ["A", "A", "B", "C", "A", "B", "C", "A", "B", "A"]
    lb = ["A", "A", "B", "A", "A", "C", "C", "B", "B", "A"]
    assert cohen_kappa(PAIR_A, PAIR_B) == pytest.approx(cohen_kappa_score(la, lb))
    # a Series input gives the same
    assert cohen_kappa(pd.Series(PAIR_A), pd.Series(PAIR_B)) == pytest.approx(0.32 / 0.62)


def test_cohen_kappa_undefined_and_empty():
    # both used one single category: p_e = 1, kappa is 0/0 -> NaN (documented), exact agreement 1
    assert math.isnan(cohen_kappa({1: "x", 2: "x"}, {1: "x", 2: "x"}))
    assert exact_set_agreement({1: "x", 2: "x"}, {1: "x", 2: "x"}) == 1.0
    assert math.isnan(exact_set_agreement({1: "x"}, {2: "x"}))  # nothing co-annotated


def test_cohen_kappa_terms_by_hand():
    # Items = (mention, term) over a ∪ b: 14 items; (1,1) x10, (1,0) m4t2 m8t1, (0,1) m6t1 m8t2, (0,0) none.
    # p_o = 10/14; ones: a 12/14, b 12/14 -> p_e = (144 + 4)/196; kappa = (140 - 148) / (196 - 148) = -1/6
    assert cohen_kappa_terms(PAIR_A, PAIR_B) == pytest.approx(-1 / 6)
    # With a universe {t1, t2, t3} per mention: 30 items, 16 of them (0,0).
    # p_o = 26/30; ones 12/30 each -> p_e = (144 + 324)/900 = .52; kappa = (26/30 - .52)/.48 = 13/18
    universe = {m: ["t1", "t2", "t3"] for m in range(1, 11)}
    assert cohen_kappa_terms(PAIR_A, PAIR_B, universe=universe) == pytest.approx(13 / 18)


# Wikipedia "Fleiss' kappa" worked example: 10 items, 14 raters, 5 categories.
WIKI = np.array([[0, 0, 0, 0, 14], [0, 2, 6, 4, 2], [0, 0, 3, 5, 6], [0, 3, 9, 2, 0], [2, 2, 8, 1, 1],
                 [7, 7, 0, 0, 0], [3, 2, 6, 3, 0], [2, 5, 3, 2, 2], [6, 5, 2, 1, 0], [0, 2, 2, 3, 7]])
# column sums 20 28 39 21 32 (= 140): P_e = (400 + 784 + 1521 + 441 + 1024) / 140² = 4170 / 19600
# P_i numerators Σ n_ij² - 14: 182 46 56 80 60 84 44 32 52 52 = 688, over 14*13 = 182 -> P̄ = 688 / 1820
WIKI_KAPPA = (688 / 1820 - 4170 / 19600) / (1 - 4170 / 19600)  # = 0.2099...


def test_fleiss_kappa_wikipedia_example():
    assert WIKI_KAPPA == pytest.approx(0.210, abs=5e-4)
    assert fleiss_kappa(WIKI) == pytest.approx(WIKI_KAPPA, rel=1e-9)
    assert fleiss_kappa(pd.DataFrame(WIKI)) == pytest.approx(WIKI_KAPPA, rel=1e-9)


def test_fleiss_kappa_rejects_varying_rater_counts():
    ragged = WIKI.copy()
    ragged[3, 0] += 1  # item 3 now has 15 ratings
    with pytest.raises(ValueError, match="same number of raters"):
        fleiss_kappa(ragged)
    with pytest.raises(ValueError):
        fleiss_kappa(np.array([[1, 0], [0, 1]]))  # one rater per item


def test_fleiss_kappa_sets_builds_the_table_from_sets():
    # The same 10 × 14 ratings written as set annotations: category j -> the set {"c<j>"}, rater r -> "r<r>".
    ann: dict[str, dict] = {f"r{r}": {} for r in range(14)}
    for item, counts in enumerate(WIKI):
        labels = [f"c{j}" for j, c in enumerate(counts) for _ in range(c)]
        for r, lab in enumerate(labels):
            ann[f"r{r}"][item] = [lab]
    # an 11th mention rated by 13 raters only: left out (not the full rater count)
    for r in range(13):
        ann[f"r{r}"][99] = ["c0"]
    assert len(fleiss_table(ann)) == 10
    assert fleiss_kappa_sets(ann) == pytest.approx(WIKI_KAPPA, rel=1e-9)


# Krippendorff (2011) "Computing Krippendorff's alpha-reliability", nominal data with missing values:
# 4 observers × 12 units ('.' = missing).
KRIPP = {
    "A": [1, 2, 3, 3, 2, 1, 4, 1, 2, None, None, None],
    "B": [1, 2, 3, 3, 2, 2, 4, 1, 2, 5, None, 3],
    "C": [None, 3, 3, 3, 2, 3, 4, 2, 2, 5, 1, None],
    "D": [1, 2, 3, 3, 2, 4, 4, 1, 2, 5, 1, None],
}
# Coincidences (each unit adds its ordered value pairs / (m_u - 1); unit 12 has one value: unpairable):
#  o11 = 3 (u1) + 2 (u8) + 2 (u11) = 7; o22 = 2 (u2) + 4 (u5) + 4 (u9) = 10; o33 = 4 + 4 = 8; o44 = 4; o55 = 3
#  Σ o_cc = 32; n_c = 9, 13, 10, 5, 3; n = 40; Σ n_c(n_c - 1) = 72 + 156 + 90 + 20 + 6 = 344
#  alpha = (39 * 32 - 344) / (40 * 39 - 344) = 904 / 1216 = 0.7434
KRIPP_ALPHA = 904 / 1216


def test_krippendorff_alpha_textbook_example():
    ann = {who: {u: (None if v is None else [f"v{v}"]) for u, v in enumerate(vals, 1)} for who, vals in KRIPP.items()}
    assert KRIPP_ALPHA == pytest.approx(0.743, abs=5e-4)
    assert krippendorff_alpha(ann) == pytest.approx(KRIPP_ALPHA, rel=1e-9)
    # numeric values at the nominal level give the same; the long DataFrame form too
    numeric = {who: {u: v for u, v in enumerate(vals, 1) if v is not None} for who, vals in KRIPP.items()}
    assert krippendorff_alpha(numeric, level="nominal") == pytest.approx(KRIPP_ALPHA, rel=1e-9)
    long = pd.DataFrame([{"mention_id": u, "annotator": who, "terms": f"v{v}"}
                         for who, vals in KRIPP.items() for u, v in enumerate(vals, 1) if v is not None])
    assert krippendorff_alpha(long) == pytest.approx(KRIPP_ALPHA, rel=1e-9)


def test_krippendorff_alpha_undefined_cases():
    assert math.isnan(krippendorff_alpha({"a": {1: "x", 2: "x"}, "b": {1: "x", 2: "x"}}))  # one value only
    assert math.isnan(krippendorff_alpha({"a": {1: "x"}, "b": {2: "y"}}))  # no pairable unit
    with pytest.raises(ValueError):
        krippendorff_alpha({"a": {1: "x"}}, level="fuzzy")


# A 3-annotator task: m1 all {a}; m2 {a,b},{a,b},{a}; m3 {b},{c},- ; m4 all {c}; m5 only x {b}.
TASK = pd.DataFrame(
    [(1, "x", "a"), (1, "y", ["a"]), (1, "z", "a"),
     (2, "x", "a##b"), (2, "y", ["b", "a"]), (2, "z", "a"),
     (3, "x", "b"), (3, "y", "c"),
     (4, "x", "c"), (4, "y", "c"), (4, "z", "c"),
     (5, "x", "b")],
    columns=["mention_id", "annotator", "terms"])


def test_agreement_report_by_hand():
    overall, pairs = agreement_report(TASK)
    assert overall["n_mentions"] == 5 and overall["n_annotators"] == 3 and overall["n_annotations"] == 12
    assert overall["n_multi"] == 4
    assert overall["exact_agreement"] == pytest.approx(0.5)  # m1 and m4 of m1..m4
    # Fleiss on m1 m2 m4 (3 raters): counts {a}: 3,1,0 ; {a,b}: 0,2,0 ; {c}: 0,0,3
    # p = 4/9, 2/9, 3/9 -> P_e = 29/81; P_i = 1, (4+1-3)/6 = 1/3, 1 -> P̄ = 7/9; kappa = (63-29)/(81-29) = 34/52
    assert overall["fleiss_n_items"] == 3
    assert overall["fleiss_kappa"] == pytest.approx(34 / 52)
    # Krippendorff: o(a,a)=3, o(ab,ab)=1, o(a,ab)=o(ab,a)=1, o(b,c)=o(c,b)=1, o(c,c)=3; n_c: a 4, ab 2, b 1, c 4
    # n = 11; Σ o_cc = 7; Σ n_c(n_c-1) = 12 + 2 + 0 + 12 = 26; alpha = (10*7 - 26) / (11*10 - 26) = 44/84
    assert overall["krippendorff_alpha"] == pytest.approx(44 / 84)
    p = pairs.set_index(["annotator_a", "annotator_b"])
    assert p.loc[("x", "y"), "n_common"] == 4 and p.loc[("x", "z"), "n_common"] == 3
    # x-y on m1..m4: agree 3/4; marginals x .25 each of a, ab, b, c; y a .25, ab .25, c .5
    # p_e = .0625 + .0625 + .125 = .25 -> kappa = (.75 - .25)/.75 = 2/3
    assert p.loc[("x", "y"), "exact_agreement"] == pytest.approx(0.75)
    assert p.loc[("x", "y"), "kappa"] == pytest.approx(2 / 3)
    # x-z on m1 m2 m4: agree 2/3; p_e = 1/3*2/3 + 1/3*1/3 = 1/3 -> kappa = (2/3 - 1/3)/(2/3) = .5 ; y-z the same
    assert p.loc[("x", "z"), "kappa"] == pytest.approx(0.5) and p.loc[("y", "z"), "kappa"] == pytest.approx(0.5)
    assert overall["mean_pair_kappa"] == pytest.approx((2 / 3 + 0.5 + 0.5) / 3)
    # per-term x-y, universe = all annotators' terms: m1 a(1,1); m2 a(1,1) b(1,1); m3 b(1,0) c(0,1); m4 c(1,1)
    # p_o = 4/6, ones 5/6 each -> p_e = 26/36; kappa = (24 - 26)/(36 - 26) = -0.2
    assert p.loc[("x", "y"), "kappa_terms"] == pytest.approx(-0.2)
    assert set(overall["how"]) >= {"fleiss_kappa", "krippendorff_alpha", "kappa", "exact_agreement"}


def test_disagreements_side_by_side():
    df = TASK.assign(mention=TASK["mention_id"].map(lambda m: f"text {m}"))
    d = disagreements(df)
    assert d["mention_id"].tolist() == [2, 3]
    m2, m3 = d.iloc[0], d.iloc[1]
    assert m2["mention"] == "text 2" and m2["x"] == "a##b" and m2["z"] == "a"
    assert m2["majority"] == "a##b" and m2["common"] == "a" and m2["any"] == "a##b"
    assert m3["z"] is None and m3["majority"] is None and m3["common"] == "" and m3["any"] == "b##c"
    assert disagreements(TASK[TASK["mention_id"] == 1]).empty


def test_annotation_matrix_last_row_wins_and_bad_input():
    df = pd.DataFrame([(1, "x", "a"), (1, "x", "b"), (1, "y", "b")], columns=["mention_id", "annotator", "terms"])
    mat = annotation_matrix(df)
    assert mat.loc[1, "x"] == frozenset({"b"})
    assert exact_set_agreement(mat["x"], mat["y"]) == 1.0
    with pytest.raises(DataFormatError, match="missing column"):
        agreement_report(df.drop(columns="terms"))
    bad = pd.DataFrame([(1, "x", "a"), (2, "x", 5)], columns=["mention_id", "annotator", "terms"])
    with pytest.raises(DataFormatError) as e:
        agreement_report(bad, source="gold.xlsx")
    assert e.value.row == 2 and e.value.path == "gold.xlsx"
    assert set_label(frozenset({"b", "a"})) == "a##b"


def test_krippendorff_alpha_levels_match_the_package_documentation():
    # The krippendorff package's docstring example (3 coders × 15 units): nominal 0.691358, interval 0.810845.
    nan = None
    rows = [[nan, nan, nan, nan, nan, 3, 4, 1, 2, 1, 1, 3, 3, nan, 3],
            [1, nan, 2, 1, 3, 3, 4, 3, nan, nan, nan, nan, nan, nan, nan],
            [nan, nan, 2, 1, 3, 4, 4, nan, 2, 1, 1, 3, 3, nan, 4]]
    ann = {f"c{i}": {u: v for u, v in enumerate(r) if v is not None} for i, r in enumerate(rows)}
    assert krippendorff_alpha(ann) == pytest.approx(0.691358, abs=1e-6)
    assert krippendorff_alpha(ann, level="interval") == pytest.approx(0.810845, abs=1e-6)
