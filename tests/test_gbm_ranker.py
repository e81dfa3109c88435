"""The GBM ranker's list-context features, part-coverage count features and subspace ensemble."""

from __future__ import annotations

import numpy as np
import pytest

from termnorm.engine import Engine
from termnorm.gbm_ranker import (CONTEXT_KEYS, ENSEMBLE, N_PART_FEATURES, PairFeaturizer, SubspaceEnsemble,
                              count_features, part_features)
from termnorm.records import Candidate
from termnorm.text.split import split_mention


def cand(tid: int, term: str, **scores) -> Candidate:
    return Candidate(tid, term, 0.0, dict(scores), [])


def test_context_features_are_the_list_best_and_the_gap_to_it():
    keys = ["clf", "history", "jaccard"]
    cands = [cand(0, "甲状腺病损切除术", clf=0.2, history=0.9),
             cand(1, "甲状腺全部切除术", clf=0.7, jaccard=0.5),
             cand(2, "甲状腺探查术", history=0.4, jaccard=0.6)]
    on = PairFeaturizer(keys, context=True)
    off = PairFeaturizer(keys, context=False)
    X, Y = on.transform("双侧甲状腺全切除", cands), off.transform("双侧甲状腺全切除", cands)
    assert X.shape[1] == Y.shape[1] + 2 * len(keys) == on.n_features
    assert np.array_equal(X[:, :Y.shape[1]], Y)  # the other features do not move
    ctx = X[:, on.context_columns]
    # every key here is a context key: best per key (same for each row), then each row's gap to it
    assert set(keys) <= set(CONTEXT_KEYS)
    assert np.allclose(ctx[:, :3], [[0.7, 0.9, 0.6]] * 3)
    assert np.allclose(ctx[:, 3:], [[0.2 - 0.7, 0.0, 0.0 - 0.6], [0.0, 0.0 - 0.9, 0.5 - 0.6], [-0.7, 0.4 - 0.9, 0.0]])
    # keys that are not context keys get no columns; a featurizer pickled before the option has none
    assert PairFeaturizer(["exact", "bm25"]).context_columns == slice(2 * 2 + 14 + 9, 2 * 2 + 14 + 9)
    old = PairFeaturizer(keys)
    del old.context
    assert old.n_features == off.n_features


def test_part_context_compares_a_candidate_with_the_best_of_the_part_it_names():
    """脾切除+胆囊切除术: 全脾切除术 (never coded) is measured against the 脾 part's candidates, not against
    胆囊切除术, the exact match of the other part; 切除 is in both parts and assigns nothing."""
    from termnorm.rank.parts import PART_KEYS, assign, distinctive_parts, part_context, width

    m = "脾切除+胆囊切除术"
    parts = distinctive_parts(m, 2)
    assert parts == [frozenset("脾"), frozenset("胆囊")]
    assert distinctive_parts(m, 1) == [] and distinctive_parts("脾切除术", 2) == []  # one part
    # one term for both parts (nothing of its own in the first): the parts' own characters
    assert distinctive_parts("右甲状腺全切+左甲状腺次全切除术", 2) == [frozenset("甲状腺全切"), frozenset("甲状腺次全切除")]
    assert assign("全脾切除术", parts) == (0, 1.0) and assign("胆囊病损切除术", parts) == (1, 1.0)
    assert assign("切除术", parts) == (-1, 0.0)

    keys = ["history", "jaccard_part", "exact"]  # exact is no part key: no columns
    cands = [cand(0, "胆囊切除术", jaccard_part=1.0, exact=1.0), cand(1, "全脾切除术", history=0.55, jaccard_part=0.6),
             cand(2, "切除术", jaccard_part=0.3), cand(3, "腹腔镜下胆囊切除术", history=0.45, jaccard_part=0.7)]
    on, off = PairFeaturizer(keys, part_context=True), PairFeaturizer(keys)
    X, Y = on.transform(m, cands, n_parts=2), off.transform(m, cands, n_parts=2)
    assert set(keys) & set(PART_KEYS) == {"history", "jaccard_part"}
    assert X.shape[1] == Y.shape[1] + width(2) == on.n_features and np.array_equal(X[:, :Y.shape[1]], Y)
    pc = X[:, Y.shape[1]:]
    # cover, crowd (share of the candidates naming the same part), best history / jaccard_part, the gaps
    assert np.allclose(pc, [[1, 0.5, 0.45, 1.0, -0.45, 0.0],
                            [1, 0.25, 0.55, 0.6, 0.0, 0.0],
                            [0, 0.25, 0.0, 0.3, 0.0, 0.0],
                            [1, 0.5, 0.45, 1.0, 0.0, -0.3]])
    # 全脾切除术's part match (0.6) trails the other part's exact match (1.0) by 0.4; within its own part it leads
    S = np.array([[c.scores.get(k, 0.0) for k in ("history", "jaccard_part")] for c in cands], dtype=np.float32)
    assert np.array_equal(part_context(m, [c.term for c in cands], S, 2), pc)
    # one part (an engine that does not split): zeros, the list-context features describe that list
    assert not part_context(m, [c.term for c in cands], S, 1).any() and not on.transform(m, cands)[:, Y.shape[1]:].any()
    old = PairFeaturizer(keys)
    del old.part_context  # a featurizer pickled before the option
    assert old.n_features == off.n_features and np.array_equal(old.transform(m, cands, n_parts=2), Y)
    # off (the default), scoring never loads termnorm.rank (its package imports torch)
    import subprocess
    import sys

    code = ("import sys; from termnorm.gbm_ranker import PairFeaturizer; from termnorm.records import Candidate; "
            "PairFeaturizer(['history']).transform('脾切除+胆囊切除术', [Candidate(0, '全脾切除术', 0.0, {}, [])], 2); "
            "sys.exit('termnorm.rank' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], timeout=120).returncode == 0


def test_part_context_is_recorded_and_survives_save_load_export_and_the_learning_loop(demo, tmp_path):
    vocab, mentions = demo
    texts = [m.text for m in mentions[60:]]
    eng = Engine(vocab, history=mentions[:60])
    eng.fit_lexical(mentions[:60], part_context=True)
    assert eng.lexranker.featurizer.part_context and eng.meta["part_context"]
    assert eng.meta["fit_options"]["part_context"] is True
    plain = Engine(vocab, history=mentions[:60])
    plain.fit_lexical(mentions[:60])
    assert "part_context" not in plain.meta["fit_options"] and plain.model_version != eng.model_version
    want = [(s.chosen, [c.term for c in s.candidates]) for s in eng.suggest_batch(texts)]
    loaded = Engine.load(eng.save(tmp_path / "m"))
    assert [(s.chosen, [c.term for c in s.candidates]) for s in loaded.suggest_batch(texts)] == want
    eng.export_ranker(tmp_path / "r.joblib")
    cold = Engine(vocab, history=mentions[:60])
    assert cold.use_pretrained_ranker(tmp_path / "r.joblib") and cold.lexranker.featurizer.part_context
    cold.term_classifier = eng.term_classifier
    assert [(s.chosen, [c.term for c in s.candidates]) for s in cold.suggest_batch(texts)] == want
    # the learning loop's refit (db.retrain) keeps the engine's setting
    from termnorm.refit import fit_with_pairs

    fit_with_pairs(loaded, mentions[:70])
    assert loaded.lexranker.featurizer.part_context and loaded.meta["part_context"]
    assert loaded.lexranker.featurizer.n_features == eng.lexranker.featurizer.n_features


def test_part_features_tell_one_term_per_part_from_one_term_for_both():
    probs = np.array([0.9, 0.6, 0.1])
    per_part = part_features("尿道憩室切除+尿道成形术",
                             [cand(0, "尿道成形术"), cand(1, "尿道病损切除术"), cand(2, "尿道扩张")], probs)
    both = part_features("右甲状腺全切+左甲状腺次全切除术",
                         [cand(0, "单侧甲状腺切除伴他叶部分切除术"), cand(1, "甲状腺全部切除术"),
                          cand(2, "甲状腺探查术")], probs)
    # the top term names the second part only (a third of the first part's characters), the runner-up
    # the first part: they name different parts, and together they cover two thirds of the worst part
    assert per_part[4] == 1.0 and per_part[0] == pytest.approx(1 / 3) and per_part[2] == pytest.approx(2 / 3)
    # a combined term covers most of both parts by itself, and the runner-up names the same part
    assert both[4] == 0.0 and both[0] > 0.7 > per_part[0]
    assert per_part[6] == pytest.approx(0.6) and both[6] == 0.0  # runner-up's probability if another part
    # one part, or fewer than two candidates: nothing to say
    assert not part_features("尿道成形术", [cand(0, "尿道成形术"), cand(1, "尿道扩张")], probs[:2]).any()
    assert not part_features("尿道憩室切除+尿道成形术", [cand(0, "尿道成形术")], probs[:1]).any()
    # an engine that does not split (n_parts 1) gets no part features either
    assert not part_features("尿道憩室切除+尿道成形术",
                             [cand(0, "尿道成形术"), cand(1, "尿道病损切除术"), cand(2, "尿道扩张")], probs, 1).any()
    base = count_features("尿道憩室切除+尿道成形术", probs, 2, 0)
    full = count_features("尿道憩室切除+尿道成形术", probs, 2, 0,
                          [cand(0, "尿道成形术"), cand(1, "尿道病损切除术"), cand(2, "尿道扩张")], parts=True)
    assert np.array_equal(full[:len(base)], base) and np.array_equal(full[len(base):], per_part)


def test_subspace_ensemble_averages_members_on_their_own_columns(demo):
    vocab, mentions = demo
    eng = Engine(vocab, history=mentions[:60])
    eng.fit_lexical(mentions[:60], ensemble=3)
    r = eng.lexranker
    assert eng.meta["ranker_ensemble"] == 3 and eng.meta["context_features"] and eng.meta["part_count"]
    model = r.pair_model
    assert isinstance(model, SubspaceEnsemble) and len(model.estimators) == 3
    d = r.featurizer.n_features
    width = int(round(0.7 * d))
    assert all(len(c) == width and len(set(c.tolist())) == width for c in model.columns)
    assert len({tuple(c.tolist()) for c in model.columns}) == 3  # each member its own subset
    texts = [m.text for m in mentions[60:80]]
    cand_lists = eng.recall_batch(texts)
    n_parts = [eng._n_parts(t) for t in texts]
    X = np.vstack([r.featurizer.transform(t, c, p) for t, c, p in zip(texts, cand_lists, n_parts) if c])
    each = [e.predict_proba(X[:, c])[:, 1] for e, c in zip(model.estimators, model.columns)]
    assert np.allclose(np.concatenate(r.score(texts, cand_lists, n_parts)), np.mean(each, axis=0))
    # members disagree somewhere (otherwise the ensemble would be one model three times)
    assert max(np.abs(each[0] - e).max() for e in each[1:]) > 1e-6
    with pytest.raises(ValueError, match="ensemble must be at least 1"):
        eng.fit_lexical(mentions[:60], ensemble=0)


def test_options_are_recorded_and_survive_save_load_and_export(demo, tmp_path):
    vocab, mentions = demo
    texts = [m.text for m in mentions[60:90]]
    eng = Engine(vocab, history=mentions[:60])
    eng.fit_lexical(mentions[:60], context_features=False, part_count=False)
    r = eng.lexranker
    assert ENSEMBLE == 1 and r.ensemble == 1 and not isinstance(r.pair_model, SubspaceEnsemble)
    assert r.count_parts is False and r.featurizer.context is False
    assert r.featurizer.context_columns.stop == r.featurizer.context_columns.start
    assert (eng.meta["ranker_ensemble"], eng.meta["context_features"], eng.meta["part_count"]) == (1, False, False)
    want = [s.chosen for s in eng.suggest_batch(texts)]
    assert [s.chosen for s in Engine.load(eng.save(tmp_path / "m")).suggest_batch(texts)] == want

    full = Engine(vocab, history=mentions[:60])
    full.fit_lexical(mentions[:60], ensemble=2)
    assert isinstance(full.lexranker.pair_model, SubspaceEnsemble) and len(full.lexranker.pair_model.estimators) == 2
    assert full.meta["context_features"] and full.meta["part_count"]
    # same data, other options: another model version (stored suggestions say which ranker made them)
    assert eng.model_version != full.model_version and eng.model_version.startswith("lexical-gbm-")
    assert (eng.meta["fit_options"]["context_features"], full.meta["fit_options"]["ensemble"]) == (False, 2)
    again = Engine(vocab, history=mentions[:60])
    again.fit_lexical(mentions[:60], context_features=False, part_count=False)
    assert again.model_version == eng.model_version
    want = [(s.chosen, [c.term for c in s.candidates]) for s in full.suggest_batch(texts)]
    full.export_ranker(tmp_path / "r.joblib")
    cold = Engine(vocab, history=mentions[:60])
    assert cold.use_pretrained_ranker(tmp_path / "r.joblib")
    assert cold.lexranker.featurizer.context and cold.lexranker.count_parts
    cold.term_classifier = full.term_classifier  # the export carries the ranker, not the classifier
    assert [(s.chosen, [c.term for c in s.candidates]) for s in cold.suggest_batch(texts)] == want


def test_fit_ranker_leaves_its_training_candidates_alone(demo):
    """Refits on one set of candidates (benchmarks/cv.py rows) must see the same features each time: the
    confidence calibration once wrote the probe's probability into them as a 'ranker' score."""
    vocab, mentions = demo
    eng = Engine(vocab, history=mentions[:80])
    splits = eng.ranker_training_data(mentions[:80])
    before = [[(c.term_id, c.score, dict(c.scores)) for c in cl] for cl in splits[0][1]]
    answers = []
    for _ in range(2):
        eng.fit_ranker(splits)
        assert "ranker" not in eng.meta["score_keys"]
        answers.append(([s.chosen for s in eng.suggest_batch([m.text for m in mentions[80:]])],
                        eng.meta["output_rule"]))
    assert [[(c.term_id, c.score, dict(c.scores)) for c in cl] for cl in splits[0][1]] == before
    assert answers[0] == answers[1]


def test_each_training_mention_knows_how_often_the_other_folds_code_its_rarest_gold_term():
    from termnorm.fitting import _fold_familiarity
    from termnorm.records import LabelledMention as LM

    train = [LM("a1", ["A"]), LM("a2", ["A"]), LM("ab", ["A", "B"]), LM("c", ["C"]), LM("a3", ["A"])]
    fold_of = [0, 1, 0, 1, 2]
    # a1 (fold 0): A in folds 1-2 twice; ab (fold 0): B nowhere else; c: C only in its own fold
    assert _fold_familiarity(train, fold_of, [0, 2, 3, 4, 1]) == [2, 0, 0, 3, 3]


def test_a_history_mixed_fit_gives_each_part_its_share_of_the_other_parts_as_history(demo):
    """with_history=shares (termnorm.fitting.HISTORY_MIX): part f recalls from shares[f] of the other parts'
    mentions, so the ranker sees history scores from none to all; True gives every part all of them."""
    vocab, mentions = demo
    train = mentions[:80]
    fold_of = np.arange(len(train)) % 3
    eng = Engine(vocab)

    def history_found(shares):
        order, cand_lists, _ = eng.kfold_candidates(train, fold_of, with_history=shares, term_classifier=False)
        found = {f: 0 for f in range(3)}
        for i, cl in zip(order, cand_lists):
            found[int(fold_of[i])] += sum(1 for c in cl if c.scores.get("history", 0) > 0)
        return found

    mixed, full = history_found((0.0, 0.3, 1.0)), history_found(True)
    assert mixed[0] == 0 < mixed[1] < full[1] and mixed[2] == full[2] > 0
    assert full[0] > 0


def test_novel_weight_weighs_the_rows_of_mentions_whose_gold_the_history_never_coded(demo):
    """GBMOptions.novel_weight: the pair scorer's rows of a training mention whose gold term its K-fold
    history never coded get that weight, the others 1; the fitted ranker differs and says so in its meta."""
    from termnorm.fitting import _novel_weights

    vocab, mentions = demo
    eng = Engine(vocab, history=mentions[:80])
    splits = eng.ranker_training_data(mentions[:80])
    fam = splits[0][6]
    assert len(fam) == len(splits[0][0]) and 0 < sum(f == 0 for f in fam) < len(fam)
    w = _novel_weights(splits[0], 4.0)
    assert [set(x) for x in w] == [{4.0 if f == 0 else 1.0} if len(x) else set() for x, f in zip(w, fam)]
    assert _novel_weights(splits[0], 1.0) is None
    texts = [m.text for m in mentions[80:]]
    probs = []
    for weight in (1.0, 4.0):
        eng.fit_ranker(splits, novel_weight=weight)
        assert eng.meta["novel_weight"] == weight
        probs.append(np.concatenate([[c.score for c in s.candidates] for s in eng.suggest_batch(texts)]))
    assert not np.allclose(probs[0], probs[1])


def test_subspace_ensemble_members_get_the_sample_weights():
    """Each member is fitted on its own columns with the rows' weights (coder-confirmed negatives are
    weighted in the learning loop); heavier rows move the ensemble's probabilities."""
    from sklearn.base import clone
    from sklearn.ensemble import HistGradientBoostingClassifier

    rng = np.random.default_rng(0)
    X = rng.normal(size=(400, 10))
    y = (X[:, 0] + X[:, 1] + rng.normal(scale=1.0, size=400) > 0).astype(int)
    w = np.where(y == 1, 4.0, 1.0)
    gbm = HistGradientBoostingClassifier(max_iter=30, random_state=0)
    ens = SubspaceEnsemble(gbm, 3, share=0.5, seed=7).fit(X, y, sample_weight=w)
    assert len(ens.estimators) == 3 and all(len(c) == 5 for c in ens.columns)
    for j, (member, cols) in enumerate(zip(ens.estimators, ens.columns)):
        alone = clone(gbm).set_params(random_state=7 + j).fit(X[:, cols], y, sample_weight=w)
        assert np.allclose(member.predict_proba(X[:, cols]), alone.predict_proba(X[:, cols]))
    unweighted = SubspaceEnsemble(gbm, 3, share=0.5, seed=7).fit(X, y)
    assert [c.tolist() for c in unweighted.columns] == [c.tolist() for c in ens.columns]
    # positives weighted 4x: the mean probability of the positive class goes up
    assert ens.predict_proba(X)[:, 1].mean() > unweighted.predict_proba(X)[:, 1].mean() + 0.05


def test_an_engine_that_does_not_split_counts_without_part_features(demo):
    vocab, mentions = demo
    eng = Engine(vocab, history=mentions[:60], split=False)
    eng.fit_lexical(mentions[:60])
    texts = [m.text for m in mentions if len(split_mention(m.text)) >= 2]
    assert texts, "the demo set has multi-part mentions"
    cand_lists = eng.recall_batch(texts)
    probs = eng.lexranker.score(texts, cand_lists, [1] * len(texts))
    CX = eng.lexranker._count_matrix(texts, probs, [1] * len(texts), [0] * len(texts), cand_lists)
    assert eng.lexranker.count_parts and CX.shape[1] == len(count_features(texts[0], probs[0], 1, 0)) + N_PART_FEATURES
    assert not CX[:, -N_PART_FEATURES:].any()
    # the same mentions as a splitting engine sees them: the part features say something
    assert np.array([part_features(t, c, p, 2) for t, c, p in zip(texts, cand_lists, probs)]).any()
