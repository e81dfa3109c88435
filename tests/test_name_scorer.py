"""The name scorer (termnorm.rank.name): a history-free pair scorer stacked into the GBM ranker as score "name"."""

from __future__ import annotations

import numpy as np
import pytest

from termnorm.engine import Engine
from termnorm.rank.name import KEY, NameScorer, name_keys, with_name_scores


def test_the_name_scorer_reads_only_scores_that_no_coded_mention_taught():
    keys = ["bm25", "clf", "contained_part", "dense", "diff", "history", "history_jaccard_part", "kar", "name",
            "prior", "sieve", "category1", "tfidf"]
    assert name_keys(keys) == ["bm25", "contained_part", "dense", "diff", "kar", "tfidf"]


def test_training_mentions_get_scores_from_a_model_that_never_saw_them(demo):
    vocab, mentions = demo
    eng = Engine(vocab, history=mentions[:80])
    split = eng.ranker_training_data(mentions[:80])[0]
    texts, cands, golds, parts = split[:4]
    named, scorer = with_name_scores(split, eng.tagger, True, seed=0)
    assert all(KEY not in c.scores for cl in cands for c in cl)  # the split itself is left alone
    oof = [np.array([c.scores[KEY] for c in cl]) for cl in named[1]]
    # one fold by hand: a scorer fitted on the other folds' mentions gives the held mentions the same scores
    fold = np.random.default_rng(0).integers(0, 4, len(texts))
    inside, held = np.flatnonzero(fold != 1), np.flatnonzero(fold == 1)
    assert len(held) >= 5
    by_hand = NameScorer(seed=0)
    by_hand.fit_out_of_fold(*([x[i] for i in inside] for x in (texts, cands, golds, parts)), tagger=eng.tagger)
    probs = _scores(by_hand, [texts[i] for i in held], [named[1][i] for i in held], [parts[i] for i in held])
    for i, p in zip(held, probs):
        assert np.allclose(oof[i], p)
    # the scorer kept for serving saw every mention: on them it is surer of the gold than out of fold
    served = _scores(scorer, texts, named[1], parts)
    gold_p = lambda ps: np.mean([p[j] for p, cl, g in zip(ps, cands, golds)  # noqa: E731
                                 for j, c in enumerate(cl) if c.term in g])
    assert gold_p(served) > gold_p(oof)


def _scores(scorer, texts, cand_lists, parts) -> list[list[float]]:
    """``scorer``'s probabilities for the candidates (annotating copies, so the lists keep their scores)."""
    from dataclasses import replace

    copies = [[replace(c, scores=dict(c.scores)) for c in cl] for cl in cand_lists]
    scorer.annotate(texts, copies, parts)
    return [[c.scores[KEY] for c in cl] for cl in copies]


def test_name_scorer_option_is_recorded_served_and_survives_save_load(demo, tmp_path):
    vocab, mentions = demo
    texts = [m.text for m in mentions[80:]]
    eng = Engine(vocab, history=mentions[:80])
    eng.fit_lexical(mentions[:80], name_scorer=True)
    assert KEY in eng.meta["score_keys"] and eng.meta["name_scorer"] and eng.meta["fit_options"]["name_scorer"]
    assert not {"history", "clf", "sieve"} & set(eng.name_scorer.featurizer.score_keys)
    sugs = eng.suggest_batch(texts)
    assert all(KEY in c.scores for s in sugs for c in s.candidates)
    plain = Engine(vocab, history=mentions[:80])
    plain.fit_lexical(mentions[:80])
    assert plain.name_scorer is None and KEY not in plain.meta["score_keys"]
    assert "name_scorer" not in plain.meta["fit_options"] and plain.model_version != eng.model_version
    loaded = Engine.load(eng.save(tmp_path / "m"))
    again = loaded.suggest_batch(texts)
    assert [(s.chosen, [(c.term, c.scores[KEY]) for c in s.candidates]) for s in again] == \
        [(s.chosen, [(c.term, c.scores[KEY]) for c in s.candidates]) for s in sugs]
    with pytest.raises(ValueError, match="name scorer"):  # the exported ranker alone would miss its score
        eng.export_ranker(tmp_path / "r.joblib")
    # the learning loop's refit (db.retrain) keeps the setting, with a scorer of its own fitted on its mentions
    from termnorm.refit import fit_with_pairs

    served = loaded.name_scorer
    fit_with_pairs(loaded, mentions[:90])
    assert loaded.meta["name_scorer"] and KEY in loaded.lexranker.featurizer.score_keys
    assert loaded.name_scorer is not None and loaded.name_scorer is not served
    assert all(KEY in c.scores for s in loaded.suggest_batch(texts[10:]) for c in s.candidates)
    # a refit without the option on the same engine drops the scorer
    eng.fit_lexical(mentions[:80])
    assert eng.name_scorer is None and all(KEY not in c.scores for s in eng.suggest_batch(texts[:3])
                                           for c in s.candidates)
