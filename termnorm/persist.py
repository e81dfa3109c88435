"""Saving and loading an :class:`~termnorm.engine.Engine`: a pipeline folder (``config.json``,
``pipeline.joblib``, and ``dense/`` / ``ranker/`` for the neural stages) and the exported ranker alone
(``termnorm-ranker/1``: the fitted GBM ranker, count classifier, output rule and confidence, no text).
:meth:`Engine.save <termnorm.engine.Engine.save>`, :meth:`Engine.load <termnorm.engine.Engine.load>` and
:meth:`Engine.export_ranker <termnorm.engine.Engine.export_ranker>` call these."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from termnorm.engine import Engine


def export_ranker(engine: Engine, path) -> Path:
    """:meth:`termnorm.engine.Engine.export_ranker`."""
    import joblib

    if engine.lexranker is None:
        raise ValueError("no fitted ranker to export (fit_lexical first)")
    if getattr(engine, "name_scorer", None) is not None:
        raise ValueError("a ranker fitted with the name scorer needs it and cannot be exported alone: refit "
                         "without --name-scorer")
    r = engine.lexranker
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    joblib.dump({"format": "termnorm-ranker/1", "pair_model": r.pair_model, "count_model": r.count_model,
                 "score_keys": r.featurizer.score_keys, "theta": r.theta, "rule": r.rule,
                 "bag": getattr(r, "bag", 1), "confidence_model": engine.confidence_model,
                 "context": getattr(r.featurizer, "context", False),
                 "part_context": getattr(r.featurizer, "part_context", False),
                 "count_parts": getattr(r, "count_parts", False),
                 "diff_scorer": engine.diff_scorer,
                 "trained_on": engine.meta.get("trained_on", ""),
                 "model_version": engine.model_version}, path, compress=3)
    return path


def save(engine: Engine, folder) -> Path:
    """Write ``engine`` to a pipeline folder (made if missing); returns the folder."""
    import joblib

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    joblib.dump({"vocabulary": engine.vocabulary, "history": engine.history, "lexranker": engine.lexranker,
                 "confidence_model": engine.confidence_model, "split": engine.split,
                 "history_extras": engine.history_extras,
                 "keyword_dir": str(engine.keyword_dir) if engine.keyword_dir else None,
                 "recall_profile": engine.recall_profile, "max_candidates": engine.max_candidates,
                 "diff_scorer": engine.diff_scorer, "term_classifier": engine.term_classifier,
                 "prior": getattr(engine, "prior", None), "name_scorer": getattr(engine, "name_scorer", None),
                 "added_abbreviations": list(engine.added_abbreviations)},
                folder / "pipeline.joblib", compress=3)
    config = {"format": "termnorm-pipeline/1", "model_version": engine.model_version,
              "created": time.strftime("%Y-%m-%dT%H:%M:%S"), "vocabulary": engine.vocabulary.name,
              "vocabulary_source": engine.vocabulary.source, "n_terms": len(engine.vocabulary),
              "stages": ["lexical-recall", "history", "lexical-gbm-ranker", "count"], **engine.meta,
              "history_extras": list(engine.history_extras)}
    if engine.diff_scorer is not None:
        config["stages"].insert(-2, "surface-diff")
    if engine.term_classifier is not None:
        config["stages"].insert(-2, "term-classifier")
    if engine.dense is not None:
        engine.dense.save(folder / "dense")
        # the vocabulary's vectors beside it, written after it (termnorm.dense.index.saved_form_vectors): loading
        # the pipeline then takes them instead of encoding every form again (MEDIC: 6 minutes on a 2-core CPU)
        recaller = next((s for s in engine._vocab_strategies if s.name == "dense"), None)
        if recaller is not None and recaller.vocab_index is not None:
            recaller.vocab_index.save(folder / "index" / "vocabulary")
        config["stages"].insert(1, "dense-recall")
    if engine.ranker is not None:
        engine.ranker.save(folder / "ranker")
        config["stages"].insert(-1, "keyword-attentive-ranker")
    (folder / "config.json").write_text(json.dumps(config, ensure_ascii=False, indent=1), encoding="utf-8")
    return folder


def load(cls: type[Engine], folder) -> Engine:
    """An engine of class ``cls`` read from a pipeline folder written by :func:`save`."""
    import joblib

    folder = Path(folder)
    if not (folder / "config.json").exists():
        raise FileNotFoundError(f"{folder}: not a termnorm pipeline folder (no config.json)")
    state = joblib.load(folder / "pipeline.joblib")
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    dense = ranker = None
    if (folder / "dense").is_dir():
        from termnorm.dense.crossfit import load_dense

        dense = load_dense(folder / "dense")
    if (folder / "ranker").is_dir():
        from termnorm.rank.crossfit import load_ranker

        ranker = load_ranker(folder / "ranker")
    eng = cls(state["vocabulary"], history=state["history"], keyword_dir=state.get("keyword_dir"),
              split=state["split"], model_version=config["model_version"],
              recall_profile=state.get("recall_profile", "wide"), dense=dense, ranker=ranker,
              max_candidates=state.get("max_candidates"),
              history_extras=state.get("history_extras", ()))
    eng.lexranker = state["lexranker"]
    if eng.lexranker is not None:
        eng.lexranker.featurizer.tagger = eng.tagger
    eng.confidence_model = state["confidence_model"]
    eng.diff_scorer = state.get("diff_scorer")
    if eng.diff_scorer is not None:
        eng.diff_scorer.tagger = eng.tagger
    eng.term_classifier = state.get("term_classifier")
    eng.prior = state.get("prior")
    if eng.prior is not None:
        eng.prior.set_tagger(eng.tagger)
    eng.name_scorer = state.get("name_scorer")
    if eng.name_scorer is not None:
        eng.name_scorer.set_tagger(eng.tagger)
    eng.add_abbreviations(state.get("added_abbreviations", ()))
    eng.meta = config
    return eng
