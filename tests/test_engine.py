"""The engine facade end to end: lexical pipeline on the demo data, neural stages plugged in, save / load."""

from __future__ import annotations

import numpy as np
import pytest

from termnorm.engine import Engine, evaluate_engine


def test_lexical_ranker_beats_recall_order(demo):
    vocab, mentions = demo
    train, test = mentions[::2], mentions[1::2]
    eng = Engine(vocab, history=train)
    before = evaluate_engine(eng, test, stage="recall")
    eng.fit_lexical(train)
    after = evaluate_engine(eng, test, stage="full")
    assert eng.has_ranker and eng.meta["output_rule"][0] in {"count", "count+threshold", "threshold"}
    # the GBM ranker + count rule must do better than the union's own order on held-out mentions
    assert after["accuracy"] > before["accuracy"]
    assert 0.0 <= after["count_accuracy"] <= 1.0


def test_correction_takes_effect_at_once_even_with_a_ranker(demo):
    vocab, mentions = demo
    eng = Engine(vocab, history=mentions[:40])
    eng.fit_lexical(mentions[:40])
    m = mentions[60]
    wrong = [t for t in vocab.names if t not in m.terms][:2]
    eng.add_coded_mention(m.text, wrong)
    sug = eng.suggest(m.text)
    assert sug.chosen == wrong and sug.predicted_count == 2
    assert [c.term for c in sug.candidates[:2]] == wrong


def test_save_load_roundtrip(demo, tmp_path):
    vocab, mentions = demo
    eng = Engine(vocab, history=mentions[:50])
    eng.fit_lexical(mentions[:50])
    eng.save(tmp_path / "m")
    again = Engine.load(tmp_path / "m")
    texts = [m.text for m in mentions[50:70]]
    a, b = eng.suggest_batch(texts), again.suggest_batch(texts)
    assert [s.chosen for s in a] == [s.chosen for s in b]
    assert [round(s.confidence, 6) for s in a] == [round(s.confidence, 6) for s in b]
    assert again.model_version == eng.model_version


def test_extra_history_strategies_are_ranker_features_kept_out_of_fold_and_saved(demo, tmp_path):
    from termnorm.engine import HISTORY_EXTRAS
    from termnorm.records import LabelledMention

    vocab, mentions = demo
    coded = mentions[0]  # 右侧甲状腺肿块切除 -> 甲状腺病损切除术
    mirrored = coded.text.replace("右侧", "左侧")
    assert mirrored != coded.text
    # coders see both sides: the other side of a few coded mentions, so the ranker meets equal keys
    train = mentions[:60] + [LabelledMention(m.text.replace("右", "左"), m.terms)
                             for m in mentions[20:60] if "右" in m.text]
    assert Engine(vocab, history=train).history_extras == ()  # off by default
    eng = Engine(vocab, history=train, history_extras=HISTORY_EXTRAS)
    assert eng.history_extras == ("key", "analogy")
    eng.fit_lexical(train)
    assert [r.name for r in eng._history_recallers][2:] == ["history_key", "history_analogy"]
    assert "history_key" in eng.meta["score_keys"]
    cands = {c.term: c for c in eng.recall_batch([mirrored])[0]}
    assert cands[coded.terms[0]].scores["history_key"] == 1.0
    # the training candidates were recalled with K-fold history: a mention's own key never scores it
    _, cand_lists, _ = eng.kfold_candidates([coded], [0])
    assert all("history_key" not in c.scores for c in cand_lists[0])
    eng.save(tmp_path / "m")
    again = Engine.load(tmp_path / "m")
    assert again.history_extras == HISTORY_EXTRAS and again.suggest(mirrored).chosen == eng.suggest(mirrored).chosen
    # without the key: no such strategy, no such feature, and that is saved too
    off = Engine(vocab, history=train, history_extras=("analogy",))
    off.fit_lexical(train)
    assert not any(k.startswith("history_key") for k in off.meta["score_keys"])
    assert "history_key" not in {k for c in off.recall_batch([mirrored])[0] for k in c.scores}
    off.save(tmp_path / "off")
    assert Engine.load(tmp_path / "off").history_extras == ("analogy",)
    with pytest.raises(ValueError, match="unknown history strategies"):
        Engine(vocab, history=train, history_extras=("key", "knn"))


def test_analogy_recall_finds_a_term_no_other_strategy_ranks_and_learns_at_once(demo):
    """A coded neighbour differing in the body site: its term with the site swapped is proposed."""

    vocab, mentions = demo
    eng = Engine(vocab, history=mentions[:60], history_extras=("analogy",))
    q = "右侧尺骨骨折切开复位内固定术"
    assert {"桡骨骨折切开复位内固定术", "尺骨骨折切开复位内固定术"} <= set(vocab.names)
    before = {c.term: c.scores for c in eng.recall_batch([q])[0]}
    assert "history_analogy" not in before.get("尺骨骨折切开复位内固定术", {})
    eng.add_coded_mention("右侧桡骨骨折切开复位钢板内固定术", ["桡骨骨折切开复位内固定术"])
    after = {c.term: c.scores for c in eng.recall_batch([q])[0]}
    assert after["尺骨骨折切开复位内固定术"]["history_analogy"] > 0.5
    assert "history_analogy" not in after["桡骨骨折切开复位内固定术"]


def test_neural_stages_feed_the_fusion(demo, tmp_path):
    """A tiny dense bi-encoder and a tiny keyword-attentive ranker plug into the same engine."""
    import torch

    torch.set_num_threads(1)
    from termnorm.dense.biencoder import BiEncoder
    from termnorm.encoder.tiny import make_tiny_encoder
    from termnorm.rank.kar import RankerModel

    vocab, mentions = demo
    folder = make_tiny_encoder(tmp_path / "enc", vocab.names + [m.text for m in mentions])
    dense = BiEncoder.from_folder(folder, device="cpu")
    eng0 = Engine(vocab)
    ranker = RankerModel.from_encoder(folder, eng0.tagger, device="cpu") if "device" in \
        RankerModel.from_encoder.__code__.co_varnames else RankerModel.from_encoder(folder, eng0.tagger)
    eng = Engine(vocab, history=mentions[:30], dense=dense, ranker=ranker)
    sug = eng.suggest(mentions[40].text)
    keys = {k for c in sug.candidates for k in c.scores}
    assert "dense" in keys and "kar" in keys
    eng.fit_lexical(mentions[:30])
    assert "dense" in eng.meta["score_keys"] and "kar" in eng.meta["score_keys"]
    eng.save(tmp_path / "neural")
    again = Engine.load(tmp_path / "neural")
    assert again.dense is not None and again.ranker is not None
    t = [m.text for m in mentions[40:45]]
    assert [s.chosen for s in eng.suggest_batch(t)] == [s.chosen for s in again.suggest_batch(t)]


def test_cross_fitted_ranker_gives_training_mentions_out_of_fold_scores(demo, tmp_path):
    """The GBM learns how far to trust "kar" from the training mentions' K-fold candidates: each is scored
    by the fold model blind to it; new mentions by the mean; the pipeline folder keeps the folds."""
    import torch

    torch.set_num_threads(1)
    from termnorm.encoder.tiny import make_tiny_encoder
    from termnorm.rank.crossfit import CrossFitRanker, fold_of_text
    from termnorm.rank.kar import RankerModel
    from termnorm.text.normalize import normalize

    vocab, mentions = demo
    train = mentions[:30]
    folder = make_tiny_encoder(tmp_path / "enc", vocab.names + [m.text for m in mentions])
    tagger = Engine(vocab).tagger
    models = [RankerModel.from_encoder(folder, tagger, seed=k, device="cpu") for k in (0, 1)]
    fold_of = {normalize(m.text): fold_of_text(m.text, 2) for m in train}
    eng = Engine(vocab, history=train, ranker=CrossFitRanker(models, fold_of))
    items = [m for m in train if m.terms]
    order, cand_lists, _ = eng.kfold_candidates(items, [i % 2 for i in range(len(items))])
    for i, cl in zip(order, cand_lists):
        text = items[i].text
        k = fold_of[normalize(text)]
        want = models[k].score([text], [[c.term for c in cl]])[0]
        np.testing.assert_allclose([c.scores["kar"] for c in cl], want, rtol=1e-5)
    new = mentions[45].text
    assert normalize(new) not in fold_of
    cl = eng.recall_batch([new])[0]
    terms = [[c.term for c in cl]]
    mean = (models[0].score([new], terms)[0] + models[1].score([new], terms)[0]) / 2
    np.testing.assert_allclose([c.scores["kar"] for c in cl], mean, rtol=1e-5)
    eng.fit_lexical(train)
    assert "kar" in eng.meta["score_keys"]
    again = Engine.load(eng.save(tmp_path / "crossfit"))
    assert isinstance(again.ranker, CrossFitRanker) and again.ranker.fold_of == fold_of
    t = [m.text for m in mentions[40:45]]
    assert [s.chosen for s in eng.suggest_batch(t)] == [s.chosen for s in again.suggest_batch(t)]


def test_deep_recall_cut_by_the_ranker_keeps_its_best(demo, tmp_path):
    """The cascade: a deep union ordered by the fitted ranker, cut at max_candidates; saved and loaded."""
    vocab, mentions = demo
    train, test = mentions[::2], mentions[1::2]
    wide = Engine(vocab, history=train, recall_profile="wide")
    deep = Engine(vocab, history=train, recall_profile="deep", max_candidates=8)
    n_wide = [len(c) for c in wide.recall_batch([m.text for m in test])]
    n_deep = [len(c) for c in deep.recall_batch([m.text for m in test])]
    assert sum(n_deep) > sum(n_wide)  # the deep profile recalls more before the cut
    deep.fit_lexical(train)
    sugs = deep.suggest_batch([m.text for m in test], k=10 ** 6)
    assert max(len(s.candidates) for s in sugs) == 8
    for s in sugs:  # the kept ones are the ranker's best, in its order, and the answer is among them
        probs = [c.scores["ranker"] for c in s.candidates]
        assert probs == sorted(probs, reverse=True)
        assert set(s.chosen) <= {c.term for c in s.candidates} or s.confidence >= 0.97
    again = Engine.load(deep.save(tmp_path / "deep"))
    assert again.max_candidates == 8 and again.recall_profile == "deep"
    assert [s.chosen for s in again.suggest_batch([m.text for m in test[:10]])] == [s.chosen for s in sugs[:10]]


def test_rule_metric_and_keyword_ablation_are_recorded(demo):
    vocab, mentions = demo
    eng = Engine(vocab, history=mentions[:60])
    eng.fit_lexical(mentions[:60], rule_metric="micro_f1", keyword_features=False)
    assert eng.meta["output_rule_metric"] == "micro_f1"
    assert eng.lexranker.featurizer.keywords is False
    feats = eng.lexranker.featurizer.transform("右侧甲状腺肿瘤切除术", eng.recall_batch(["右侧甲状腺肿瘤切除术"])[0])
    assert not feats[:, eng.lexranker.featurizer.keyword_columns].any()  # keyword match / mismatch stay empty
    with pytest.raises(ValueError, match="rule metric"):
        eng.fit_lexical(mentions[:60], rule_metric="f2")


def test_bagged_ranker_averages_its_members_and_survives_save_load(demo, tmp_path):
    vocab, mentions = demo
    single = Engine(vocab, history=mentions[:60])
    single.fit_lexical(mentions[:60], seed=7)
    eng = Engine(vocab, history=mentions[:60])
    eng.fit_lexical(mentions[:60], seed=7, bag=3)
    r = eng.lexranker
    members = r.pair_model.models
    assert eng.meta["ranker_bag"] == 3 and r.bag == 3 and len(members) == 3
    assert eng.meta["output_rule"] == single.meta["output_rule"]  # the first member (same seed) chose it
    texts = [m.text for m in mentions[60:80]]
    cand_lists = eng.recall_batch(texts)
    n_parts = [eng._n_parts(t) for t in texts]
    got = np.concatenate(r.score(texts, cand_lists, n_parts))
    X = np.vstack([r.featurizer.transform(t, c, p) for t, c, p in zip(texts, cand_lists, n_parts) if c])
    each = [m.predict_proba(X)[:, 1] for m in members]
    assert np.allclose(got, np.mean(each, axis=0))
    # members were fitted on different history splits, so they disagree somewhere
    assert max(np.abs(each[0] - e).max() for e in each[1:]) > 1e-6
    eng.save(tmp_path / "m")
    again = Engine.load(tmp_path / "m")
    assert [s.chosen for s in again.suggest_batch(texts)] == [s.chosen for s in eng.suggest_batch(texts)]
    eng.export_ranker(tmp_path / "r.joblib")
    cold = Engine(vocab)
    assert cold.use_pretrained_ranker(tmp_path / "r.joblib") and cold.lexranker.bag == 3
    with pytest.raises(ValueError, match="bag must be at least 1"):
        eng.fit_lexical(mentions[:60], bag=0)
