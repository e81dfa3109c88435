"""How the engine's suggestions fare with coders and on gold: acceptance (top-1 / top-k / rejected), accuracy
per model version, missed terms by vocabulary chapter, confused term pairs, count prediction, error examples.

Frames as in the package docstring (termnorm.coding_metrics); every function returns :class:`Numbers`.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
import pandas as pd

from termnorm.agreement import SEPARATOR
from termnorm.coding_metrics.frames import TOP_K, Numbers, _answers, _group_key, _lists, _need, _times
from termnorm.evaluate import error_kind, evaluate_predictions


# ---------------------------------------------------------------- acceptance of suggestions

#: the FHIR relationship of terms a coder says the mention is not (db.decisions.NOT_RELATED)
NOT_RELATED = "not-related-to"


def acceptance_flags(decisions: pd.DataFrame, k: int = TOP_K) -> pd.DataFrame:
    """Per answer decision: ``top1``, ``topk``, ``rejected_all`` booleans (see :func:`acceptance`).

    Returns the answer rows (accept / correct / reject with a suggestion)
    with the three flags added.
    """
    _need(decisions, ("terms", "suggested"), "decisions")
    d = _answers(decisions).copy()
    # terms a coder marked "not related" (FHIR not-related-to) are what the mention is not: no final term, a rejection
    unrelated = (d["relationship"] == NOT_RELATED).tolist() if "relationship" in d.columns else [False] * len(d)
    final = [frozenset() if u else frozenset(x) for x, u in zip(_lists(d, "terms", "decisions"), unrelated)]
    chosen = _lists(d, "suggested", "decisions")
    shown = _lists(d, "shown", "decisions") if "shown" in d.columns else [list(c) for c in chosen]
    shown = [s if s else c for s, c in zip(shown, chosen)]
    has = [bool(s) or bool(c) for s, c in zip(shown, chosen)]  # no suggestion answered: nothing to judge
    # top-1: the coder kept exactly the engine's chosen set (or, with no chosen set, its top candidate)
    d["top1"] = [bool(f) and f == (frozenset(c) if c else frozenset(s[:1])) for f, c, s in zip(final, chosen, shown)]
    d["topk"] = [bool(f) and f <= frozenset(s[:k]) for f, s in zip(final, shown)]
    d["rejected_all"] = [not (f & frozenset(s)) for f, s in zip(final, shown)]
    return d.loc[np.asarray(has, dtype=bool)]


def acceptance(decisions: pd.DataFrame, by: str | None = None, k: int = TOP_K) -> Numbers:
    """Share of suggestions accepted at top-1, within top-``k``, or all rejected; overall or by group.

    ``by``: None (overall), ``"day"`` / ``"week"`` (UTC, weeks start on
    Monday, from ``at``) or a column such as ``"model_version"`` or ``"user"``.

    Over the accept / correct / reject decisions answering a suggestion:

    * top-1 = the final set equals the engine's chosen set (``suggested``; if
      empty, the top shown candidate);
    * top-k = the final set is non-empty and every final term is among the
      top ``k`` shown candidates;
    * rejected all = no final term is among the shown candidates (a
      ``reject`` counts here, and so do terms marked not related).

    Table columns: the group, ``n``, ``n_top1``, ``n_topk``, ``n_rejected``,
    ``top1``, ``topk``, ``rejected_all`` (shares of ``n``).
    """
    flags = acceptance_flags(decisions, k)
    name, key = _group_key(flags, by)
    g = pd.DataFrame({name: key, "top1": flags["top1"], "topk": flags["topk"],
                      "rejected_all": flags["rejected_all"]}).groupby(name, sort=True)
    table = pd.DataFrame({"n": g.size(), "n_top1": g["top1"].sum(), "n_topk": g["topk"].sum(),
                          "n_rejected": g["rejected_all"].sum()}).reset_index()
    for share, count in (("top1", "n_top1"), ("topk", "n_topk"), ("rejected_all", "n_rejected")):
        table[share] = table[count] / table["n"]
    n = len(flags)
    summary = {"n": n, **{c: float(flags[c].mean()) if n else float("nan") for c in ("top1", "topk", "rejected_all")},
               "k": k}
    source = "shown candidates" if "shown" in decisions.columns else "engine's chosen terms (no shown list)"
    how = (f"Over {n} accept/correct/reject decisions{' per ' + name if by else ''}: top-1 = final set equals the "
           f"engine's chosen set; top-{k} = every final term among the top {k} {source}; "
           f"rejected = no final term among the {source}")
    return Numbers(table, how, summary)


# ---------------------------------------------------------------- accuracy on gold

def model_accuracy(frame: pd.DataFrame, gold_col: str = "gold_terms", predicted_col: str = "suggested",
                   ranked_col: str | None = None, count_col: str | None = None,
                   by: str = "model_version") -> Numbers:
    """Exact-set accuracy and micro-F1 of each model version on gold mentions.

    ``frame``: one row per (model version, gold mention) with ``gold_col``
    (gold terms; rows with none are skipped), ``predicted_col`` (the engine's
    chosen set), optional ``ranked_col`` (ranked candidates: adds Recall@k,
    NDCG@5) and ``count_col`` (predicted count), and ``by``. The decisions
    frame works as is (``gold_terms`` vs ``suggested``).

    Metrics from :func:`termnorm.evaluate.evaluate_predictions`: accuracy =
    share of mentions whose predicted set equals the gold set (Yidu-N7K),
    micro P/R/F1 over (mention, term) pairs (CHIP-CDN). Table: ``by``, ``n``,
    ``accuracy``, ``micro_precision``, ``micro_recall``, ``micro_f1``,
    ``count_accuracy`` (+ ranked metrics when ``ranked_col`` is given).
    """
    _need(frame, [gold_col, predicted_col, by], "gold predictions")
    gold_all = _lists(frame, gold_col, "gold predictions")
    keep = np.array([bool(g) for g in gold_all], dtype=bool)
    f = frame[keep]
    gold = [g for g, k in zip(gold_all, keep) if k]
    pred = _lists(f, predicted_col, "gold predictions")
    ranked = _lists(f, ranked_col, "gold predictions") if ranked_col else None
    counts = [int(c) for c in f[count_col]] if count_col else None
    rows = []
    for version, idx in f.groupby(f[by].fillna("(none)"), sort=True).indices.items():
        res = evaluate_predictions([gold[i] for i in idx], [pred[i] for i in idx],
                                   [ranked[i] for i in idx] if ranked is not None else None,
                                   [counts[i] for i in idx] if counts is not None else None)
        rows.append({by: version, **res})
    cols = [by, "n", "accuracy", "micro_precision", "micro_recall", "micro_f1", "count_accuracy"]
    table = pd.DataFrame(rows)
    table = table[[c for c in cols if c in table.columns] + [c for c in table.columns if c not in cols]] \
        if rows else pd.DataFrame(columns=cols)
    if len(table):
        table["n"] = table["n"].astype(int)
    n_none = int((~keep).sum())  # "no term fits" gold: an engine always proposes a term, so it is left out, said
    how = (f"Per {by}, on {len(gold)} mentions with gold terms: accuracy = share whose predicted set equals the gold "
           f"set; micro-F1 over (mention, term) pairs"
           + (f". {n_none} whose gold is \"no term fits\" left out: the engine always proposes a term" if n_none
              else ""))
    best = table.sort_values("accuracy", ascending=False).iloc[0][by] if len(table) else None
    return Numbers(table, how, {"n": len(gold), "best": best})


# ---------------------------------------------------------------- errors by vocabulary part

def vocabulary_levels(vocab) -> tuple[Callable[[str], str], Callable[[str], str]]:
    """``(chapter_of, category_of)`` for :func:`errors_by_chapter` from a :class:`~termnorm.vocabulary.Vocabulary`.

    Chapter = ``vocab.chapter(name)`` (top ancestor of the first code, else its
    head); category = the ancestor just below the chapter (ICD 类目), else the
    code itself. Labels read "code name" when the code has a name; "?" for
    terms without a code.
    """

    def label(code: str) -> str:
        n = vocab.code_names.get(code)
        return f"{code} {n}" if n and n != code else code

    def chapter_of(name: str) -> str:
        c = vocab.chapter(name)
        return c if c == "?" else label(c)

    def category_of(name: str) -> str:
        codes = vocab.codes_of(name)
        if not codes:
            return "?"
        chain = [codes[0], *vocab.ancestors(codes[0])]  # nearest first, chapter last
        return label(chain[-2] if len(chain) >= 2 else chain[0])

    return chapter_of, category_of


def error_terms(frame: pd.DataFrame, expected_col: str = "terms", predicted_col: str = "suggested") -> pd.DataFrame:
    """One row per missed expected term: ``mention_id`` (if present), ``term``, ``predicted`` (## joined).

    A missed term is an expected (coder's / gold) term that the engine's set
    did not contain, on answer decisions whose sets differ.
    """
    _need(frame, [expected_col, predicted_col], "errors")
    f = _answers(frame)
    exp = _lists(f, expected_col, "errors")
    pred = _lists(f, predicted_col, "errors")
    ids = f["mention_id"].tolist() if "mention_id" in f.columns else list(range(len(f)))
    rows = [{"mention_id": m, "term": t, "predicted": SEPARATOR.join(p)}
            for m, e, p in zip(ids, exp, pred) for t in e if t not in set(p)]
    return pd.DataFrame(rows, columns=["mention_id", "term", "predicted"])


def errors_by_chapter(frame: pd.DataFrame, chapter_of: Callable[[str], str],
                      category_of: Callable[[str], str] | None = None, expected_col: str = "terms",
                      predicted_col: str = "suggested") -> Numbers:
    """Missed terms counted by vocabulary chapter → category (for a treemap).

    Each expected term (``expected_col``: the coder's final terms, or
    ``gold_terms``) absent from the engine's set (``predicted_col``) is one
    error, attributed to the part of the vocabulary the right answer lives
    in -- where the engine is weak. ``chapter_of`` / ``category_of`` map a
    term name to a label (see :func:`vocabulary_levels`); without
    ``category_of`` the term itself is the leaf.

    Table: ``chapter``, ``category``, ``count``, sorted by count descending.
    """
    missed = error_terms(frame, expected_col, predicted_col)
    category_of = category_of or (lambda t: t)
    # one call per distinct term, not per error
    terms = missed["term"].unique().tolist()
    chap = {t: str(chapter_of(t)) for t in terms}
    cat = {t: str(category_of(t)) for t in terms}
    t = pd.DataFrame({"chapter": missed["term"].map(chap), "category": missed["term"].map(cat)})
    table = (t.groupby(["chapter", "category"]).size().rename("count").reset_index()
             .sort_values(["count", "chapter", "category"], ascending=[False, True, True]).reset_index(drop=True))
    n_mentions = missed["mention_id"].nunique()
    which = {"terms": "coded", "gold_terms": "gold"}.get(expected_col, expected_col)
    how = (f"{len(missed)} {which} terms missing from the engine's set ({predicted_col}) in {n_mentions} "
           f"mentions, counted by the chapter and category of the missed term")
    return Numbers(table, how, {"n_errors": len(missed), "n_mentions": int(n_mentions)})


# ---------------------------------------------------------------- confused term pairs

def confused_pairs(decisions: pd.DataFrame, top: int | None = 20) -> Numbers:
    """The (engine's top term → coder's term) pairs most often seen when the coder overrode the engine.

    For each accept / correct decision whose final set does not contain the
    engine's top term (first of ``suggested``, else of ``shown``), every
    final term makes one pair (top term, final term). Table: ``engine_term``,
    ``coder_term``, ``count`` (descending), at most ``top`` rows.
    """
    _need(decisions, ("terms", "suggested"), "decisions")
    d = _answers(decisions)
    final = _lists(d, "terms", "decisions")
    chosen = _lists(d, "suggested", "decisions")
    shown = _lists(d, "shown", "decisions") if "shown" in d.columns else [[] for _ in chosen]
    pairs = []
    for f, c, s in zip(final, chosen, shown):
        head = (c or s or [None])[0]
        if head is None or not f or head in f:
            continue
        pairs.extend((head, t) for t in f)
    table = pd.DataFrame(pairs, columns=["engine_term", "coder_term"])
    table = (table.groupby(["engine_term", "coder_term"]).size().rename("count").reset_index()
             .sort_values(["count", "engine_term", "coder_term"], ascending=[False, True, True])
             .reset_index(drop=True))
    n_total = int(table["count"].sum())
    if top is not None:
        table = table.head(top)
    how = ("Accept/correct decisions whose final terms leave out the engine's top term: one count per "
           "(engine top term, coder term) pair")
    return Numbers(table, how, {"n_pairs": n_total, "n_distinct": len(table)})


# ---------------------------------------------------------------- count prediction

def count_confusion(decisions: pd.DataFrame, max_count: int | None = None) -> Numbers:
    """Predicted number of terms vs the coder's final number (confusion matrix).

    Over accept / correct decisions (final set non-empty): predicted =
    ``predicted_count`` if the column exists, else the size of ``suggested``.
    Counts above ``max_count`` are pooled into ``max_count`` (None: no
    pooling). Table: square matrix, index ``predicted`` count, columns
    ``final`` count. Summary: ``n``, ``count_accuracy`` (diagonal share),
    ``over`` / ``under`` (predicted more / fewer than final).
    """
    _need(decisions, ("terms",), "decisions")
    d = _answers(decisions)
    final = np.array([len(x) for x in _lists(d, "terms", "decisions")], dtype=int)
    if "predicted_count" in d.columns:
        pred = pd.to_numeric(d["predicted_count"], errors="coerce").fillna(0).astype(int).to_numpy()
    else:
        _need(d, ("suggested",), "decisions")
        pred = np.array([len(x) for x in _lists(d, "suggested", "decisions")], dtype=int)
    keep = final > 0
    final, pred = final[keep], pred[keep]
    if max_count is not None:
        final, pred = np.minimum(final, max_count), np.minimum(pred, max_count)
    values = sorted(set(final) | set(pred)) or [1]
    levels = list(range(min(values), max(values) + 1))
    table = (pd.crosstab(pd.Series(pred, name="predicted"), pd.Series(final, name="final"))
             .reindex(index=levels, columns=levels, fill_value=0))
    n = int(len(final))
    summary = {"n": n,
               "count_accuracy": float(np.mean(pred == final)) if n else float("nan"),
               "over": float(np.mean(pred > final)) if n else float("nan"),
               "under": float(np.mean(pred < final)) if n else float("nan")}
    src = "predicted_count" if "predicted_count" in d.columns else "size of the engine's chosen set"
    how = (f"{n} accept/correct decisions: rows = engine's predicted number of terms ({src}), columns = number of "
           f"terms the coder kept" + (f"; counts ≥ {max_count} pooled" if max_count is not None else ""))
    return Numbers(table, how, summary)


# ---------------------------------------------------------------- error examples

def error_examples(frame: pd.DataFrame, *, expected_col: str = "terms", predicted_col: str = "suggested",
                   model_version: str | Sequence[str] | None = None, user: str | Sequence[str] | None = None,
                   kind: str | Sequence[str] | None = None, chapter: str | Sequence[str] | None = None,
                   chapter_of: Callable[[str], str] | None = None, contains: str | None = None,
                   include_correct: bool = False, limit: int | None = None) -> Numbers:
    """A filterable table of the engine's errors (answer decisions, or gold rows with ``expected_col="gold_terms"``).

    Each row gets ``kind`` from :func:`termnorm.evaluate.error_kind` (wrong
    term, missing term, extra term, wrong count; ``correct`` rows only with
    ``include_correct``) and, with ``chapter_of``, the ``chapter`` of its
    first expected term. Filters (a value or a list of values):
    ``model_version``, ``user``, ``kind``, ``chapter``; ``contains`` keeps
    mentions whose text contains it. Columns: ``mention_id``, ``mention``,
    ``expected``, ``predicted`` (``##`` joined), ``kind``, ``chapter``,
    ``model_version``, ``user``, ``at`` (those present). Newest first if
    ``at`` is present.
    """
    _need(frame, [expected_col, predicted_col], "errors")
    f = _answers(frame).copy()
    exp = _lists(f, expected_col, "errors")
    pred = _lists(f, predicted_col, "errors")
    f["expected"] = [SEPARATOR.join(e) for e in exp]
    f["predicted"] = [SEPARATOR.join(p) for p in pred]
    f["kind"] = [error_kind(e, p) for e, p in zip(exp, pred)]
    if chapter_of is not None:
        f["chapter"] = [str(chapter_of(e[0])) if e else "?" for e in exp]
    n_total = int((f["kind"] != "correct").sum())
    if not include_correct:
        f = f[f["kind"] != "correct"]

    def pick(col: str, value):
        nonlocal f
        if value is None or col not in f.columns:
            return
        values = [value] if isinstance(value, str) else list(value)
        f = f[f[col].isin(values)]

    pick("model_version", model_version)
    pick("user", user)
    pick("kind", kind)
    pick("chapter", chapter)
    if contains and "mention" in f.columns:
        f = f[f["mention"].astype(str).str.contains(contains, regex=False)]
    if "at" in f.columns:
        f = f.assign(_t=_times(f)).sort_values("_t", ascending=False, kind="stable")
    if limit is not None:
        f = f.head(limit)
    cols = [c for c in ("mention_id", "mention", "expected", "predicted", "kind", "chapter", "model_version", "user",
                        "at") if c in f.columns]
    filters = {k: v for k, v in dict(model_version=model_version, user=user, kind=kind, chapter=chapter,
                                     contains=contains).items() if v is not None}
    how = (f"{expected_col} vs the engine's {predicted_col} on accept/correct/reject decisions; kind = how the sets "
           f"differ; {len(f)} of {n_total} errors shown" + (f" (filters: {filters})" if filters else ""))
    return Numbers(f[cols].reset_index(drop=True), how, {"n_errors": n_total, "n_shown": len(f)})
