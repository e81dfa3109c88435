"""Coding metrics: the lead's dashboard numbers, pure functions over tidy DataFrames, and their Plotly figures.

No database and no Streamlit here: db.dashboard_data turns the tables
suggestions / decisions / gold into the frames described below (the
decisions frame is ``db.services.decisions_frame`` plus a ``shown`` column),
the Dashboards page (app_pages/dashboards.py) calls these functions and shows
``Numbers.table`` with ``Numbers.how`` as caption, or a ``fig_*`` figure
whose hover repeats it.

Modules: :mod:`.frames` (the :class:`Numbers` every function returns, the
constants, reading the frames), :mod:`.suggestions` (how the engine's
suggestions fare: acceptance, accuracy on gold, errors, confused terms,
count prediction, error examples), :mod:`.coders` (coder throughput, audits
of auto-coded mentions), :mod:`.figures` (Plotly figures of those numbers).
Everything public is importable from the package itself.

They measure the engine the methods describe (recall → rank → fuse with a
count decision, approaches A..E of methods.md) as coders meet it: how often
its chosen set is taken as is (top-1), how often the answer was among the
shown candidates (top-k), exact-set accuracy and micro-F1 on gold (the
Yidu-N7K and CHIP-CDN metrics, via :mod:`termnorm.evaluate`), where errors
fall in the vocabulary, which terms get confused, how well the count head
predicts the number of terms, coder throughput, and audits of auto-coded
mentions.

The decisions frame (one row per decision; lists may also be ``##`` strings)::

    column         | type            | meaning
    ---------------+-----------------+---------------------------------------------------
    mention_id     | int             | the mention decided
    mention        | str             | its text (error examples only)
    action         | str             | accept / correct / reject / skip / flag / auto
    terms          | list[str]       | the coder's final terms ([] for reject / skip)
    suggested      | list[str]       | the engine's chosen set in the suggestion answered
    shown          | list[str]       | ranked candidate names shown, best first
                   |                 | (optional: falls back to ``suggested``)
    predicted_count| int             | the engine's predicted count (optional: len(suggested))
    model_version  | str             | model version of the suggestion answered
    user           | str             | coder
    at             | datetime        | when decided (UTC; naive values are read as UTC)
    seconds        | float           | time the coder spent on the mention (0 = unknown)
    gold_terms     | list[str]       | gold terms when the mention is in a gold set

Only ``accept`` / ``correct`` / ``reject`` decisions say something about the
suggestion (:data:`ANSWER_ACTIONS`); skip and flag do not, ``auto`` is the
engine itself.
"""

from termnorm.coding_metrics.coders import audit_outcomes, auto_audit, coder_throughput, wilson_interval
from termnorm.coding_metrics.figures import (
    fig_acceptance,
    fig_auto_audit,
    fig_confused_pairs,
    fig_count_confusion,
    fig_error_examples,
    fig_errors_treemap,
    fig_model_accuracy,
    fig_throughput,
)
from termnorm.coding_metrics.frames import (
    ANSWER_ACTIONS,
    CONFIDENCE,
    HUMAN_ACTIONS,
    IDLE_GAP_MINUTES,
    PERIODS,
    TOP_K,
    Numbers,
)
from termnorm.coding_metrics.suggestions import (
    acceptance,
    acceptance_flags,
    confused_pairs,
    count_confusion,
    error_examples,
    error_terms,
    errors_by_chapter,
    model_accuracy,
    vocabulary_levels,
)

__all__ = [
    "ANSWER_ACTIONS", "CONFIDENCE", "HUMAN_ACTIONS", "IDLE_GAP_MINUTES", "PERIODS", "TOP_K", "Numbers",
    "acceptance", "acceptance_flags", "audit_outcomes", "auto_audit", "coder_throughput", "confused_pairs",
    "count_confusion", "error_examples", "error_terms", "errors_by_chapter", "fig_acceptance", "fig_auto_audit",
    "fig_confused_pairs", "fig_count_confusion", "fig_error_examples", "fig_errors_treemap", "fig_model_accuracy",
    "fig_throughput", "model_accuracy", "vocabulary_levels", "wilson_interval",
]
