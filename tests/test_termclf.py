"""The per-term text classifier (termnorm.rank.termclf): what it learns from coded mentions, out-of-fold
scores for the ranker's training candidates, and its place in the engine (score "clf", saved, ablation)."""

from __future__ import annotations

import numpy as np
import pytest

from termnorm.engine import Engine
from termnorm.rank.termclf import TermClassifier
from termnorm.records import Candidate, LabelledMention
from termnorm.vocabulary import Vocabulary

SITES = ["左侧", "右侧", "双侧", "单侧", "左", "右", "双", "(左)", "(右)", "【左】"]
TERMS = ["甲状腺病损切除术", "甲状腺全部切除术", "前哨淋巴结活组织检查", "单侧单纯乳房切除术", "脾切除术"]


@pytest.fixture(scope="module")
def vocab():
    return Vocabulary(names=TERMS)


def cands(vocab, *terms):
    return [Candidate(vocab.get_id(t), t, 0.0, {}, []) for t in terms]


def coded():
    """Coders' convention: a thyroid 肿物 is a 病损 excision, 全切 a total one; 乳房切除+SLNB needs two terms."""
    out = []
    for s in SITES:
        out.append(LabelledMention(f"{s}甲状腺肿物切除术", ["甲状腺病损切除术"]))
        out.append(LabelledMention(f"{s}甲状腺全切术", ["甲状腺全部切除术"]))
        out.append(LabelledMention(f"{s}乳房切除+前哨淋巴结活检", ["单侧单纯乳房切除术", "前哨淋巴结活组织检查"]))
    return out


def test_it_learns_which_words_point_to_which_sibling(vocab):
    clf = TermClassifier(vocab).fit(coded())
    assert clf.fitted and clf.n_mentions == 3 * len(SITES)
    tumour, total = cands(vocab, "甲状腺病损切除术", "甲状腺全部切除术"), cands(vocab, "甲状腺病损切除术", "甲状腺全部切除术")
    clf.annotate(["甲状腺肿物切除", "甲状腺全切"], [tumour, total])
    assert tumour[0].scores["clf"] > 0.5 > tumour[1].scores["clf"]
    assert total[1].scores["clf"] > 0.5 > total[0].scores["clf"]
    # one mention, two terms: both get a high score (one-vs-rest, not a softmax over terms)
    both = cands(vocab, "单侧单纯乳房切除术", "前哨淋巴结活组织检查", "甲状腺病损切除术")
    clf.annotate(["乳房切除术+前哨淋巴结活检术"], [both])
    assert min(c.scores["clf"] for c in both[:2]) > 0.5 > both[2].scores["clf"]


def test_a_term_no_coder_used_scores_zero_and_weights_are_sparse(vocab):
    clf = TermClassifier(vocab).fit(coded())
    never = cands(vocab, "脾切除术")
    clf.annotate(["脾切除术"], [never])
    assert never[0].scores["clf"] == 0.0
    n_grams, n_terms = clf.weights.shape
    assert n_terms == 4 and clf.weights.nnz < n_grams * n_terms  # pruned, not dense


def test_too_little_to_learn_from_leaves_candidates_alone(vocab):
    clf = TermClassifier(vocab).fit([LabelledMention("甲状腺肿物切除术", ["甲状腺病损切除术"]),
                                     LabelledMention("甲状腺肿物切除", ["甲状腺病损切除术"]),
                                     LabelledMention("不在词表里", ["没有这个术语"])])
    assert not clf.fitted  # one known term only: nothing to tell apart
    cl = cands(vocab, "甲状腺病损切除术")
    clf.annotate(["甲状腺肿物切除"], [cl])
    assert "clf" not in cl[0].scores


# ------------------------------------------------------------------ in the engine
def test_kfold_candidates_get_out_of_fold_scores(demo):
    """A training mention's own label never scores its candidates: a term only it names scores 0."""
    vocab, mentions = demo
    items = mentions[:60]
    counts = {}
    for m in items:
        for t in m.terms:
            counts[t] = counts.get(t, 0) + 1
    eng = Engine(vocab, history=items)
    order, cand_lists, _ = eng.kfold_candidates(items, [i % 3 for i in range(len(items))])
    checked = 0
    for i, cl in zip(order, cand_lists):
        assert all("clf" in c.scores for c in cl)
        for c in cl:
            if c.term in items[i].terms and counts[c.term] == 1:
                assert c.scores["clf"] == 0.0
                checked += 1
    assert checked > 0
    _, off, _ = eng.kfold_candidates(items, [i % 3 for i in range(len(items))], term_classifier=False)
    assert not any("clf" in c.scores for cl in off for c in cl)


def test_engine_fits_it_uses_it_saves_it(demo, tmp_path):
    vocab, mentions = demo
    eng = Engine(vocab, history=mentions[:60])
    eng.fit_lexical(mentions[:60])
    assert eng.term_classifier is not None and eng.meta["term_classifier"] is True
    assert "clf" in eng.meta["score_keys"]
    cl = eng.recall_batch([mentions[70].text])[0]
    assert any(c.scores["clf"] > 0 for c in cl)
    again = Engine.load(eng.save(tmp_path / "m"))
    assert "term-classifier" in again.meta["stages"]
    texts = [m.text for m in mentions[60:80]]
    a, b = eng.recall_batch(texts), again.recall_batch(texts)
    np.testing.assert_allclose([c.scores["clf"] for cl in a for c in cl], [c.scores["clf"] for cl in b for c in cl])


def test_the_ablation_and_the_cold_start_ranker_fit_none(demo):
    vocab, mentions = demo
    off = Engine(vocab, history=mentions[:60])
    off.fit_lexical(mentions[:60], term_classifier=False)
    assert off.term_classifier is None and off.meta["term_classifier"] is False
    assert "clf" not in off.meta["score_keys"]
    cold = Engine(vocab)
    cold.fit_lexical(mentions[:60], with_history=False)
    assert cold.term_classifier is None and "clf" not in cold.meta["score_keys"]


def test_a_refit_gives_the_same_weights(vocab):
    a, b = TermClassifier(vocab).fit(coded()), TermClassifier(vocab).fit(coded())
    assert (a.weights != b.weights).nnz == 0 and np.array_equal(a.bias, b.bias)
