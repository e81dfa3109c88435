"""Inter-annotator agreement for term-set annotations (gold data building).

Each annotator gives a *set* of standard terms per mention (a mention may need
several terms, approach E's count decision); an annotator may leave a mention
out. This module measures how far independent coders agree, so the lead can
tell whether the gold data is trustworthy before scoring the engine
(approach A..E) against it.

Input, as a small table (one row per annotation; what the DB helper produces
from the gold / decisions tables)::

    mention_id | annotator | terms
    -----------+-----------+----------------------------------
    17         | li        | ["甲状腺部分切除术"]
    17         | wang      | "甲状腺部分切除术##颈部淋巴结清扫术"
    18         | li        | ("阑尾切除术",)

``terms`` is a list / tuple / set, or a string of names joined by ``##`` (the
CHIP-CDN convention). ``None`` / NaN means *not annotated* (missing); an empty
list or ``""`` means the annotator answered "no term fits" (the empty set is a
category like any other). If an annotator annotated a mention twice, the last
row wins (as ``Decision.is_latest`` does in the database).

Measures (all treat an answer set as one categorical label, ``frozenset`` →
category, unless said otherwise):

* :func:`exact_set_agreement` -- observed share of identical sets;
* :func:`cohen_kappa` -- Cohen (1960) κ for two annotators, set = category
  (``sklearn.metrics.cohen_kappa_score``);
* :func:`cohen_kappa_terms` -- per-term binary κ: each (mention, term) over the
  union of terms proposed for the mention is one chosen / not-chosen item;
  gives partial credit when sets overlap;
* :func:`fleiss_kappa` / :func:`fleiss_kappa_sets` -- Fleiss (1971) κ, many
  annotators, a constant number per item;
* :func:`krippendorff_alpha` -- Krippendorff's α (nominal), any number of
  annotators, missing values allowed (computed by the ``krippendorff`` PyPI
  package, coincidence-matrix method of Krippendorff 2011);
* :func:`agreement_report` -- all of the above for a task, per annotator pair
  and overall; :func:`disagreements` -- the mentions to adjudicate.
"""

from __future__ import annotations

import itertools
import math
import warnings
from collections import Counter
from typing import Any, Hashable, Iterable, Mapping

import numpy as np
import pandas as pd
from sklearn.metrics import cohen_kappa_score

from termnorm.errors import DataFormatError

SEPARATOR = "##"  # CHIP-CDN / Yidu-N7K join several names with "##"
ANNOTATION_COLUMNS = ("mention_id", "annotator", "terms")


# ---------------------------------------------------------------- parsing helpers

def is_missing(value: Any) -> bool:
    """True for ``None`` and float NaN / ``pd.NA`` (an annotation that was not given)."""
    if value is None or value is pd.NA or value is pd.NaT:
        return True
    return isinstance(value, float) and math.isnan(value)


def term_set(value: Any, *, source: str = "annotations", row: int | None = None) -> frozenset[str] | None:
    """One annotation as a frozenset of stripped names, or ``None`` when missing.

    Strings are split on ``##``; lists, tuples, sets and numpy arrays are taken
    element-wise. Any other type raises :class:`DataFormatError` naming
    ``source`` and ``row``.
    """
    if is_missing(value):
        return None
    if isinstance(value, str):
        parts = value.split(SEPARATOR)
    elif isinstance(value, (list, tuple, set, frozenset, np.ndarray, pd.Series)):
        parts = list(value)
    else:
        raise DataFormatError(source, row, f"terms must be a list or a '##'-joined string, got {type(value).__name__}")
    out = set()
    for p in parts:
        if not isinstance(p, str):
            raise DataFormatError(source, row, f"a term must be a string, got {type(p).__name__}: {p!r}")
        p = p.strip()
        if p:
            out.add(p)
    return frozenset(out)


def set_label(terms: Iterable[str]) -> str:
    """A frozenset's canonical category label: names sorted and joined with ``##`` ("" = the empty set)."""
    return SEPARATOR.join(sorted(terms))


def _as_series(a: Any, name: str) -> pd.Series:
    """A mapping / Series mention -> terms as a Series of frozensets, missing annotations dropped."""
    if isinstance(a, pd.Series):
        items = a.items()
    elif isinstance(a, Mapping):
        items = a.items()
    else:
        raise TypeError(f"{name} must be a mapping or Series mention_id -> terms, got {type(a).__name__}")
    data = {}
    for i, (k, v) in enumerate(items, start=1):
        s = term_set(v, source=name, row=i)
        if s is not None:
            data[k] = s
    return pd.Series(data, dtype=object)


def _co_annotated(a: Any, b: Any) -> tuple[pd.Series, pd.Series]:
    sa, sb = _as_series(a, "a"), _as_series(b, "b")
    common = sa.index.intersection(sb.index)
    return sa.loc[common], sb.loc[common]


def annotation_matrix(annotations: Any, source: str = "annotations") -> pd.DataFrame:
    """Mentions × annotators table of frozensets (``None`` where not annotated).

    ``annotations`` is either a long DataFrame with columns ``mention_id``,
    ``annotator``, ``terms`` (one row per annotation; the last row of a
    duplicated (mention, annotator) wins), or a mapping annotator -> mapping
    mention_id -> terms. Mentions keep first-seen order.
    """
    if isinstance(annotations, pd.DataFrame):
        missing = [c for c in ANNOTATION_COLUMNS if c not in annotations.columns]
        if missing:
            raise DataFormatError(source, None, f"missing column(s) {', '.join(missing)}; "
                                                f"expected {', '.join(ANNOTATION_COLUMNS)}")
        cells: dict[Hashable, dict[Hashable, frozenset | None]] = {}
        mentions: dict[Hashable, None] = {}
        for i, (m, who, terms) in enumerate(zip(annotations["mention_id"], annotations["annotator"],
                                                annotations["terms"]), start=1):
            if is_missing(m) or is_missing(who):
                raise DataFormatError(source, i, "mention_id and annotator must be given")
            mentions.setdefault(m, None)
            cells.setdefault(who, {})[m] = term_set(terms, source=source, row=i)
    elif isinstance(annotations, Mapping):
        cells, mentions = {}, {}
        for who, per in annotations.items():
            s = per.items() if isinstance(per, (Mapping, pd.Series)) else None
            if s is None:
                raise DataFormatError(source, None, f"annotator {who!r}: expected a mapping mention_id -> terms")
            cells[who] = {}
            for i, (m, terms) in enumerate(s, start=1):
                mentions.setdefault(m, None)
                cells[who][m] = term_set(terms, source=f"{source}[{who!r}]", row=i)
    else:
        raise TypeError("annotations must be a DataFrame (mention_id, annotator, terms) or a mapping "
                        "annotator -> {mention_id: terms}")
    index = list(mentions)
    frame = pd.DataFrame({who: [per.get(m) for m in index] for who, per in cells.items()}, index=index, dtype=object)
    frame.index.name = "mention_id"
    frame.columns.name = "annotator"
    return frame


# ---------------------------------------------------------------- two annotators

def exact_set_agreement(a: Any, b: Any) -> float:
    """Share of co-annotated mentions on which ``a`` and ``b`` gave identical sets (NaN if none co-annotated).

    ``a`` / ``b``: mapping or Series mention_id -> terms (list or '##' string;
    None / NaN = not annotated, ignored).
    """
    sa, sb = _co_annotated(a, b)
    if len(sa) == 0:
        return float("nan")
    return float(np.mean([x == y for x, y in zip(sa, sb)]))


def _kappa(y1: list, y2: list) -> float:
    if not y1:
        return float("nan")
    with warnings.catch_warnings():
        # One shared category makes κ 0/0: sklearn warns and returns NaN (replace_undefined_by); we document NaN.
        warnings.simplefilter("ignore")
        return float(cohen_kappa_score(y1, y2))


def cohen_kappa(a: Any, b: Any) -> float:
    """Cohen's κ for two annotators, each mention's answer set being one category.

    κ = (p_o − p_e) / (1 − p_e), p_o = share of co-annotated mentions with the
    same set, p_e = Σ_c p_a(c)·p_b(c) over set-categories c (Cohen 1960),
    computed by ``sklearn.metrics.cohen_kappa_score`` on the canonical
    labels (:func:`set_label`). Only co-annotated mentions count. Strict: two
    sets sharing all but one term count as full disagreement (see
    :func:`cohen_kappa_terms` for partial credit). NaN when undefined (no
    co-annotated mention, or both used one single category so p_e = 1).
    """
    sa, sb = _co_annotated(a, b)
    return _kappa([set_label(x) for x in sa], [set_label(y) for y in sb])


def cohen_kappa_terms(a: Any, b: Any, universe: Any = None) -> float:
    """Per-term binary Cohen's κ.

    For each co-annotated mention, the items are the (mention, term) pairs
    over the union of the terms proposed for it -- by ``a``, by ``b``, and by
    ``universe`` (optional mapping mention_id -> terms, e.g. every annotator's
    terms or the candidates shown). Each item is labelled chosen (1) / not
    chosen (0) by each annotator and κ is computed over all items by
    ``sklearn.metrics.cohen_kappa_score``.

    Why a ``universe``: with only a's and b's own terms every item is chosen
    by at least one of them, so no (0, 0) agreement exists and κ is pulled
    down; :func:`agreement_report` passes the union over all annotators. A
    mention both left empty yields no item.
    """
    sa, sb = _co_annotated(a, b)
    extra = _as_series(universe, "universe") if universe is not None else pd.Series(dtype=object)
    y1: list[int] = []
    y2: list[int] = []
    for m, x, y in zip(sa.index, sa, sb):
        items = x | y
        if m in extra.index:
            items = items | extra[m]
        for t in sorted(items):
            y1.append(int(t in x))
            y2.append(int(t in y))
    return _kappa(y1, y2)


# ---------------------------------------------------------------- many annotators

def fleiss_kappa(table: Any) -> float:
    """Fleiss' κ from an items × categories table of counts (Fleiss 1971).

    ``table[i, j]`` = number of raters who put item ``i`` in category ``j``;
    every row must sum to the same number of raters n ≥ 2 (Fleiss' κ assumes
    a constant n: a ragged table raises ValueError -- use
    :func:`krippendorff_alpha` for missing ratings).

    p_j = Σ_i n_ij / (N n);  P_i = (Σ_j n_ij² − n) / (n (n − 1));
    P̄ = mean_i P_i;  P̄_e = Σ_j p_j²;  κ = (P̄ − P̄_e) / (1 − P̄_e).
    NaN when P̄_e = 1 (all ratings in one category).
    """
    t = np.asarray(table.to_numpy() if isinstance(table, pd.DataFrame) else table, dtype=float)
    if t.ndim != 2 or t.shape[0] == 0:
        raise ValueError("fleiss_kappa needs a non-empty 2-D items × categories table")
    if (t < 0).any():
        raise ValueError("fleiss_kappa: counts must be non-negative")
    n_per_item = t.sum(axis=1)
    n = n_per_item[0]
    if not np.all(n_per_item == n):
        bad = int(np.flatnonzero(n_per_item != n)[0])
        raise ValueError(f"fleiss_kappa assumes the same number of raters per item: item 0 has {n:g}, "
                         f"item {bad} has {n_per_item[bad]:g} (use krippendorff_alpha for missing ratings)")
    if n < 2:
        raise ValueError("fleiss_kappa needs at least 2 raters per item")
    n_items = t.shape[0]
    p_j = t.sum(axis=0) / (n_items * n)
    p_i = (np.square(t).sum(axis=1) - n) / (n * (n - 1))
    p_bar, p_e = p_i.mean(), np.square(p_j).sum()
    if np.isclose(p_e, 1.0):
        return float("nan")
    return float((p_bar - p_e) / (1 - p_e))


def fleiss_table(annotations: Any, n_raters: int | None = None) -> pd.DataFrame:
    """Items × set-categories count table for :func:`fleiss_kappa`.

    Only mentions annotated by exactly ``n_raters`` annotators are kept
    (default: the number of annotators in ``annotations``, i.e. the mentions
    with the full rater count). Columns are :func:`set_label` strings.
    """
    mat = annotation_matrix(annotations)
    n_raters = mat.shape[1] if n_raters is None else int(n_raters)
    rows = {}
    for m, answers in mat.iterrows():
        given = [set_label(x) for x in answers if x is not None]
        if len(given) == n_raters:
            rows[m] = Counter(given)
    table = pd.DataFrame.from_dict(rows, orient="index").fillna(0).astype(int)
    table.index.name = "mention_id"
    return table.reindex(sorted(table.columns), axis=1)


def fleiss_kappa_sets(annotations: Any, n_raters: int | None = None) -> float:
    """Fleiss' κ on set-valued annotations (category = frozenset), on the mentions with the full rater count.

    See :func:`fleiss_table` for the item selection; NaN if no mention has
    ``n_raters`` annotations.
    """
    table = fleiss_table(annotations, n_raters)
    if table.empty:
        return float("nan")
    return fleiss_kappa(table)


def _numeric_label(v: Any) -> Any:
    if isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool) and not is_missing(v):
        return [repr(float(v))] if isinstance(v, (float, np.floating)) else [str(int(v))]
    return v


def krippendorff_alpha(annotations: Any, level: str = "nominal") -> float:
    """Krippendorff's α with missing values (coincidence-matrix method, Krippendorff 2011).

    ``annotations`` as for :func:`annotation_matrix`. With ``level="nominal"``
    each answer set is one category. ``"ordinal"``, ``"interval"`` and
    ``"ratio"`` are accepted for numeric single values only (annotations such
    as ``{mention: 3}``; a set of one numeric string also works).

    α = 1 − D_o / D_e; for nominal data
    α = ((n − 1) Σ_c o_cc − Σ_c n_c (n_c − 1)) / (n (n − 1) − Σ_c n_c (n_c − 1)),
    o = coincidence matrix over pairable values (units with ≥ 2 values),
    n_c its marginals, n = Σ_c n_c. Computed by the ``krippendorff`` package
    (PyPI, numpy only). NaN when undefined (fewer than two distinct values
    among pairable units, or no pairable unit).
    """
    import krippendorff  # a small numpy-only dependency (PyPI "krippendorff")

    if level not in ("nominal", "ordinal", "interval", "ratio"):
        raise ValueError(f"unknown level {level!r}; expected nominal, ordinal, interval or ratio")
    # numeric ratings ({mention: 3}) become one-element sets labelled "3" (their value is read back below)
    if isinstance(annotations, Mapping):
        annotations = {w: {m: _numeric_label(v) for m, v in dict(per).items()} for w, per in annotations.items()}
    elif isinstance(annotations, pd.DataFrame) and "terms" in annotations.columns:
        annotations = annotations.assign(terms=annotations["terms"].map(_numeric_label))
    mat = annotation_matrix(annotations)
    labels = sorted({set_label(x) for x in mat.to_numpy().ravel() if x is not None})
    if level == "nominal":
        code = {lab: i for i, lab in enumerate(labels)}
    else:
        try:
            code = {lab: float(lab) for lab in labels}
        except ValueError as exc:
            raise ValueError(f"level={level!r} needs numeric single values: {exc}") from None
    data = np.array([[np.nan if x is None else code[set_label(x)] for x in mat[who]] for who in mat.columns],
                    dtype=float).reshape(mat.shape[1], mat.shape[0])
    pairable = (~np.isnan(data)).sum(axis=0) >= 2
    if pairable.sum() == 0 or len({v for v in data[:, pairable].ravel() if not np.isnan(v)}) < 2:
        return float("nan")
    return float(krippendorff.alpha(reliability_data=data, level_of_measurement=level))


# ---------------------------------------------------------------- task report

def agreement_report(df: pd.DataFrame, source: str = "annotations") -> tuple[dict, pd.DataFrame]:
    """Agreement of one annotation task: overall numbers (dict) and one row per annotator pair (DataFrame).

    ``df``: columns ``mention_id``, ``annotator``, ``terms`` (see the module
    docstring); call once per task (e.g. per batch: ``df.groupby("batch")``).

    Pair table columns: ``annotator_a``, ``annotator_b``, ``n_common``
    (co-annotated mentions), ``exact_agreement``, ``kappa`` (set = category),
    ``kappa_terms`` (per-term binary, universe = every annotator's terms for
    the mention).

    Overall keys: ``n_mentions``, ``n_annotators``, ``n_annotations``,
    ``n_multi`` (mentions with ≥ 2 annotations), ``exact_agreement`` (share of
    those where every annotator gave the same set), ``fleiss_kappa`` and
    ``fleiss_n_items`` (mentions with the full rater count),
    ``krippendorff_alpha`` (nominal, all mentions, missing allowed),
    ``mean_pair_kappa`` (mean of the pairs' κ, pairs with a defined κ), and
    ``how`` (a dict of one-line explanations for the UI).
    """
    mat = annotation_matrix(df, source)
    annotators = list(mat.columns)
    union = {m: frozenset().union(*[x for x in row if x is not None]) for m, row in mat.iterrows()}
    pairs = []
    for a, b in itertools.combinations(annotators, 2):
        ca, cb = mat[a].dropna(), mat[b].dropna()
        common = ca.index.intersection(cb.index)
        pairs.append({"annotator_a": a, "annotator_b": b, "n_common": int(len(common)),
                      "exact_agreement": exact_set_agreement(ca, cb), "kappa": cohen_kappa(ca, cb),
                      "kappa_terms": cohen_kappa_terms(ca, cb, universe=union)})
    pair_frame = pd.DataFrame(pairs, columns=["annotator_a", "annotator_b", "n_common", "exact_agreement",
                                              "kappa", "kappa_terms"])
    n_given = mat.notna().sum(axis=1)
    multi = mat[n_given >= 2]
    same = [len({x for x in row if x is not None}) == 1 for _, row in multi.iterrows()]
    table = fleiss_table(mat.to_dict()) if len(annotators) >= 2 else pd.DataFrame()
    defined = pair_frame["kappa"].dropna()
    overall = {
        "n_mentions": int(len(mat)),
        "n_annotators": len(annotators),
        "n_annotations": int(n_given.sum()),
        "n_multi": int(len(multi)),
        "exact_agreement": float(np.mean(same)) if same else float("nan"),
        "fleiss_kappa": fleiss_kappa(table) if not table.empty else float("nan"),
        "fleiss_n_items": int(len(table)),
        "krippendorff_alpha": krippendorff_alpha(mat.to_dict()) if len(annotators) >= 2 else float("nan"),
        "mean_pair_kappa": float(defined.mean()) if len(defined) else float("nan"),
        "how": {
            "exact_agreement": "share of mentions with ≥2 annotations where every annotator gave the same term set",
            "fleiss_kappa": f"Fleiss κ, term set = category, on the {len(table)} mentions annotated by all "
                            f"{len(annotators)} annotators",
            "krippendorff_alpha": "Krippendorff α (nominal, term set = category), every mention with ≥2 "
                                  "annotations, missing annotations allowed",
            "kappa": "Cohen κ per annotator pair on co-annotated mentions, term set = category (sklearn)",
            "kappa_terms": "Cohen κ per pair over (mention, term) items, term ∈ union of all annotators' terms, "
                           "chosen / not chosen",
        },
    }
    return overall, pair_frame


def disagreements(df: pd.DataFrame, mention_text: Mapping | None = None, source: str = "annotations") -> pd.DataFrame:
    """Mentions on which annotators differ, side by side (the adjudication queue).

    ``df`` as for :func:`agreement_report`; if it has a ``mention`` column (or
    ``mention_text`` maps mention_id -> text) the text is shown. One row per
    mention with ≥ 2 annotations and ≥ 2 distinct sets, columns:
    ``mention_id``, ``mention``, one column per annotator (terms joined by
    ``##``, None where not annotated), ``n_annotators``, ``n_distinct``,
    ``common`` (terms every annotator chose), ``any`` (terms anyone chose),
    ``majority`` (the set chosen by a strict majority, else None). Sorted by
    ``n_distinct`` descending (the most contested first), then mention order.
    """
    mat = annotation_matrix(df, source)
    texts: dict = dict(mention_text or {})
    if isinstance(df, pd.DataFrame) and "mention" in df.columns and not texts:
        texts = dict(zip(df["mention_id"], df["mention"]))
    rows = []
    for order, (m, answers) in enumerate(mat.iterrows()):
        given = [x for x in answers if x is not None]
        if len(given) < 2 or len(set(given)) < 2:
            continue
        counts = Counter(given)
        top, top_n = counts.most_common(1)[0]
        row = {"mention_id": m, "mention": texts.get(m)}
        row.update({who: (None if x is None else set_label(x)) for who, x in answers.items()})
        row.update(n_annotators=len(given), n_distinct=len(counts),
                   common=set_label(frozenset.intersection(*given)), any=set_label(frozenset.union(*given)),
                   majority=set_label(top) if top_n * 2 > len(given) else None, _order=order)
        rows.append(row)
    columns = ["mention_id", "mention", *mat.columns, "n_annotators", "n_distinct", "common", "any", "majority"]
    if not rows:
        return pd.DataFrame(columns=columns)
    out = pd.DataFrame(rows).sort_values(["n_distinct", "_order"], ascending=[False, True])[columns]
    out = out.astype(object).where(out.notna(), None)  # None (not NaN) where not annotated / no majority
    return out.reset_index(drop=True)
