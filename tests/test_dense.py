"""Dense recall: bi-encoder training objectives, mining, FAISS index, sieve, count head, persistence.

Real components throughout (sentence-transformers, FAISS, a tiny random BERT
built by ``termnorm.encoder.tiny``) on the embedded demo data; every model is
tiny so the whole file runs in well under a minute on 2 shared cores.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from termnorm.dense.biencoder import BiEncoder, clean_text, count_class, fit_count_head
from termnorm.dense.index import DenseRecaller, TermIndex
from termnorm.dense.mining import (
    calibrate_efn_beta,
    compose_batches,
    gold_mask,
    related_by_code,
    sample_hard_negatives,
    top_k_similar,
)
from termnorm.dense.sieve import Sieve, calibrate_threshold
from termnorm.dense.train import build_queries, evaluate_recall, main, train_biencoder
from termnorm.encoder.tiny import make_tiny_encoder
from termnorm.records import LabelledMention
from termnorm.vocabulary import Vocabulary

DEMO = Path(__file__).resolve().parents[1] / "assets" / "demo"


@pytest.fixture(scope="module", autouse=True)
def one_thread(one_torch_thread):
    yield


@pytest.fixture(scope="module")
def demo():
    vocab = Vocabulary(name="demo-procedures")
    with open(DEMO / "procedures.csv", encoding="utf-8") as f:
        for r in csv.DictReader(f):
            vocab.add_term(r["name"], [r["code"]], [s for s in (r["synonyms"] or "").split("|") if s])
    with open(DEMO / "mentions.csv", encoding="utf-8") as f:
        mentions = [LabelledMention(r["mention"], r["terms"].split("##"))
                    for r in csv.DictReader(f) if r["vocabulary"] == "procedures"]
    assert all(t in vocab for m in mentions for t in m.terms)
    return vocab, mentions


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory, demo):
    vocab, mentions = demo
    texts = vocab.names + [m.text for m in mentions] + [s for v in vocab.synonyms.values() for s in v]
    return make_tiny_encoder(tmp_path_factory.mktemp("tiny") / "bert", texts, hidden=32, layers=2)


def fresh(tiny_dir) -> BiEncoder:
    return BiEncoder.from_folder(tiny_dir, device="cpu")


# ---------------------------------------------------------------- objectives
@pytest.mark.parametrize("objective,data", [("nce", "labelled"), ("batch_hard", "both"),
                                            ("triplet_online", "labelled")])
def test_objective_improves_recall_on_training_slice(tiny_dir, demo, objective, data):
    vocab, mentions = demo
    train = mentions[:60]
    enc = fresh(tiny_dir)
    before = evaluate_recall(enc, vocab, train, ks=(10,))["recall@10"]
    m = train_biencoder(enc, vocab, train, objective=objective, epochs=2, batch_size=16, lr=2e-3, data=data, val=train,
                        progress=False, seed=1)
    assert m["epochs"][0]["recall@10"] == pytest.approx(before)  # epoch 0 evaluates the untrained model
    assert all(np.isfinite(e["loss"]) for e in m["epochs"])
    assert m["steps"] > 0 and m["steps_per_s"] > 0 and m["encode_strings_per_s"] > 0
    assert m["final"]["recall@10"] > before + 0.05, (before, m["final"])


def test_nce_loss_decreases_on_fixed_batches(tiny_dir, demo):
    vocab, mentions = demo
    m = train_biencoder(fresh(tiny_dir), vocab, mentions[:32], objective="nce", epochs=3, batch_size=16, lr=2e-3,
                        val=mentions[:32], progress=False, n_hard_queries=0)
    losses = [e["loss"] for e in m["epochs"]]
    assert losses[-1] < losses[0]


def test_a_sample_of_synonym_pairs_is_trained_and_mining_encodes_only_the_names_and_the_sample(tiny_dir, demo):
    vocab, _ = demo
    forms, _ = vocab.surface_forms()
    pairs = len(build_queries(vocab, [], "vocab").texts)
    assert pairs > 20
    enc = fresh(tiny_dir)
    encoded: list[int] = []
    terms = enc.encode_terms
    enc.encode_terms = lambda texts, *a, **k: encoded.append(len(texts)) or terms(texts, *a, **k)
    state: dict = {}
    m = train_biencoder(enc, vocab, [], objective="nce", data="vocab", epochs=1, batch_size=8, lr=2e-3,
                        max_queries=20, count_head=False, progress=False, state=state)
    assert m["n_queries"] == 20 and m["epochs"][0]["pairs"] == 20 and m["steps"] >= 2
    assert encoded == [len(vocab.names), len(forms)]  # mining reads the names; the saved index every form
    assert len(state["form_vecs"]) == len(forms)
    whole = train_biencoder(fresh(tiny_dir), vocab, [], objective="nce", data="vocab", epochs=1, batch_size=8,
                            max_steps=1, count_head=False, progress=False)
    assert whole["n_queries"] == pairs


def test_unknown_objective_or_empty_data_rejected(tiny_dir, demo):
    vocab, mentions = demo
    with pytest.raises(ValueError):
        train_biencoder(fresh(tiny_dir), vocab, mentions, objective="cosine", progress=False)
    bare = Vocabulary(names=list(vocab.names))  # no synonyms
    with pytest.raises(ValueError):
        train_biencoder(fresh(tiny_dir), bare, [], objective="nce", data="vocab", progress=False)


# ---------------------------------------------------------------- mining
def test_hard_negatives_never_gold_and_efn_removes_above_beta(tiny_dir, demo):
    vocab, mentions = demo
    enc = fresh(tiny_dir)
    q = build_queries(vocab, mentions, "labelled")
    assert any(len(g) > 1 for g in q.gold)  # multi-term mentions are in the slice
    idx, sims = top_k_similar(enc.encode_queries(q.texts), enc.encode_terms(vocab.names), 30)
    beta = float(np.quantile(sims[:, :5], 0.5))
    rng = np.random.default_rng(0)
    neg, eliminated = sample_hard_negatives(idx, sims, q.gold, 5, tau=0.05, beta=beta, rng=rng)
    is_gold = gold_mask(idx, q.gold)
    expect_elim = int(((sims >= beta) & ~is_gold).sum())
    assert eliminated == expect_elim > 0
    sim_of = {(i, int(t)): s for i in range(len(idx)) for t, s in zip(idx[i], sims[i])}
    for i, row in enumerate(neg):
        for t in row[row >= 0]:
            assert int(t) not in q.gold[i]
            assert sim_of[(i, int(t))] < beta
    # without E-FN the top strategy does pick candidates above beta: the filter is what removed them
    top, _ = sample_hard_negatives(idx, sims, q.gold, 5, strategy="top")
    assert any(sim_of[(i, int(t))] >= beta for i, row in enumerate(top) for t in row if t >= 0)
    assert not any(int(t) in q.gold[i] for i, row in enumerate(top) for t in row)


def test_a_gold_terms_ancestors_and_descendants_by_code_are_kept_out_of_its_hard_negatives(tiny_dir, demo):
    """On CHIP-CDN's ICD-10 list a near non-gold name can be the gold term one level up or down
    (A00 / A00.0 / A00.001): --related-not-negative keeps those out; siblings (A00.1) stay negatives."""
    codes = [["A00"], ["A00.0"], ["A00.001"], ["A00.1"], ["A01.0"], [], ["A0"]]
    gold = [{1}, {4}, {5}]
    idx = np.array([[1, 0, 2, 3, 4, -1], [0, 1, 4, 3, 6, 2], [0, 1, 2, 3, 4, 6]])
    related = related_by_code(idx, gold, codes)
    assert related.tolist() == [[False, True, True, False, False, False],   # A00 up, A00.001 down; A00.1, A01.0 not
                                [False, False, False, False, True, False],  # A0 holds A01.0; gold itself is not
                                [False] * 6]                                # a term without a code relates to none
    sims = np.linspace(1.0, 0.5, 6, dtype=np.float32)[None].repeat(3, 0)
    neg, _ = sample_hard_negatives(idx, sims, gold, 2, strategy="top", exclude=related)
    assert neg.tolist() == [[3, 4], [0, 1], [0, 1]]
    # the training loop takes the option: one epoch on the demo procedures (ICD-9-CM-3 codes) runs with it
    vocab, mentions = demo
    m = train_biencoder(fresh(tiny_dir), vocab, mentions[:32], objective="nce", epochs=1, batch_size=16, lr=2e-3,
                        progress=False, related_not_negative=True)
    assert m["steps"] > 0 and np.isfinite(m["epochs"][0]["loss"])


def test_calibrate_efn_beta_meets_precision():
    rng = np.random.default_rng(3)
    sims = rng.uniform(0, 1, size=(200, 10)).astype(np.float32)
    is_gold = rng.uniform(size=sims.shape) < sims ** 4  # higher similarity -> more often gold
    beta = calibrate_efn_beta(sims, is_gold, alpha=0.8)
    above = sims >= beta
    assert is_gold[above].mean() >= 0.8
    below = np.sort(sims[~above].ravel())[::-1]  # lowering beta to the next score breaks the target
    assert is_gold[sims >= below[0]].mean() < 0.8 or below[0] == beta
    assert calibrate_efn_beta(sims, np.zeros_like(is_gold), 0.8) == float("inf")


def test_compose_batches_conflict_free():
    rng = np.random.default_rng(0)
    n_q, n_t = 60, 40
    gold = [set(rng.choice(n_t, size=rng.integers(1, 3), replace=False).tolist()) for _ in range(n_q)]
    pq = np.array([q for q, g in enumerate(gold) for _ in g])
    pt = [t for g in gold for t in sorted(g)]
    docs = [[t] + [int(x) for x in rng.choice([y for y in range(n_t) if y not in gold[q]], 3)]
            for q, t in zip(pq, pt)]
    batches = compose_batches(pq, docs, gold, 8, rng, neighbours=[[int(rng.integers(len(pq)))] for _ in pq])
    assert sorted(i for b in batches for i in b) == list(range(len(pq)))
    for b in batches:
        assert len(b) <= 8 and len({pq[i] for i in b}) == len(b)
        for i in b:
            for j in b:
                if i != j:
                    assert not (set(docs[j]) & gold[pq[i]])


def test_compose_batches_leaves_out_the_tail_of_a_much_coded_term():
    """One term coded for 30 mentions, 40 others once each: a batch holds the term once, so after the mixed
    batches comes a tail of one-pair batches, the term's extras; min_size leaves those out of the epoch."""
    rng = np.random.default_rng(0)
    gold = [{0}] * 30 + [{t} for t in range(1, 41)]
    pq = np.arange(len(gold))
    docs = [[min(g)] for g in gold]
    every = compose_batches(pq, docs, gold, 8, rng)
    sizes = sorted(len(b) for b in every)
    assert sizes.count(1) >= 20 and max(sizes) == 8
    kept = compose_batches(pq, docs, gold, 8, np.random.default_rng(0), min_size=4)
    assert all(len(b) >= 4 for b in kept)
    pairs = [i for b in kept for i in b]
    assert set(range(30, 70)) <= set(pairs)  # every once-coded mention still trains
    assert 1 <= sum(pq[i] < 30 for i in pairs) <= 10  # the much-coded term once per batch it shares
    # nothing to keep at that size: every batch stays (a tiny training set)
    assert len(compose_batches(pq[:3], docs[:3], gold[:3], 8, rng, min_size=4)) == 3


# ---------------------------------------------------------------- index
def test_term_index_matches_bruteforce_and_roundtrips(tmp_path):
    rng = np.random.default_rng(0)
    forms = rng.normal(size=(300, 16)).astype(np.float32)
    forms /= np.linalg.norm(forms, axis=1, keepdims=True)
    ids = rng.integers(0, 120, size=300)  # several forms per id
    q = rng.normal(size=(25, 16)).astype(np.float32)
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    index = TermIndex(16, "flat")
    index.add_vectors(forms[:200], ids[:200])
    index.add_vectors(forms[200:], ids[200:])  # incremental
    got_ids, got_sc = index.search(q, 10)
    sims = q @ forms.T
    best = np.full((25, 120), -np.inf)
    for j, t in enumerate(ids):
        best[:, t] = np.maximum(best[:, t], sims[:, j])
    want = np.argsort(-best, axis=1)[:, :10]
    np.testing.assert_array_equal(got_ids, want)
    np.testing.assert_allclose(got_sc, np.take_along_axis(best, want, 1), atol=1e-5)
    index.save(tmp_path / "idx")
    again = TermIndex.load(tmp_path / "idx")
    np.testing.assert_array_equal(again.search(q, 10)[0], got_ids)
    hnsw = TermIndex(16, "hnsw")
    hnsw.add_vectors(forms, ids)
    assert (hnsw.search(q, 10)[0][:, 0] == want[:, 0]).mean() > 0.9  # approximate, near-exact at this size


def test_dense_recaller_incremental_add_and_persistence(tiny_dir, demo, tmp_path):
    vocab, mentions = demo
    enc = fresh(tiny_dir)
    rec = DenseRecaller(enc).fit(vocab, history=mentions[:10])
    new = "甲状腺胆囊联合怪异手术"
    target = vocab.names[7]
    assert rec.recall(new, 1)[0][1] < 0.999  # nothing identical before the add
    rec.add_coded_mention(new, [target])
    hits = rec.recall(new, 5)
    assert hits[0][0] == vocab.index(target) and hits[0][1] == pytest.approx(1.0, abs=1e-5)
    rec.add_synonym(vocab.names[3], "某某自造同义词")
    assert rec.recall("某某自造同义词", 3)[0][0] == 3
    rec.save(tmp_path / "rec")
    enc.save(tmp_path / "enc")
    back = DenseRecaller.load(tmp_path / "rec", BiEncoder.load(tmp_path / "enc", device="cpu"), vocab)
    for a, b in zip(back.recall_batch([new, mentions[0].text], 5), rec.recall_batch([new, mentions[0].text], 5)):
        assert [t for t, _ in a] == [t for t, _ in b]
        np.testing.assert_allclose([s for _, s in a], [s for _, s in b], atol=1e-6)


# ---------------------------------------------------------------- sieve
def test_sieve_exact_threshold_and_add(tiny_dir, demo):
    vocab, mentions = demo
    enc = fresh(tiny_dir)
    multi = next(m for m in mentions if len(m.terms) > 1)
    sieve = Sieve(enc, threshold=0.95).fit(vocab, history=[multi])
    r = sieve.search_batch([" " + multi.text.replace("+", "＋") + " "], 5)[0]  # NFKC / spaces: same normal form
    assert r.source == "exact" and [vocab.names[t] for t in r.sieved] == multi.terms
    assert [t for t, _ in r.hits[:len(multi.terms)]] == [vocab.index(t) for t in multi.terms]

    near = multi.text + "术后"
    s = float((enc.encode_queries([near]) @ enc.encode_queries([multi.text]).T)[0, 0])
    sieve.threshold = s - 1e-4
    r = sieve.search_batch([near], 5)[0]
    assert r.source == "coded" and r.matched == multi.text and r.similarity == pytest.approx(s, abs=1e-5)
    sieve.threshold = min(s + 1e-4, 1.0 + 1e-3)
    assert sieve.search_batch([near], 5)[0].source == "search"

    other = mentions[0]
    assert sieve.search_batch([other.text], 5)[0].source in ("search", "coded")
    sieve.add_coded_mention(other.text, other.terms)  # no retraining: next query sees it
    r = sieve.search_batch([other.text], 5)[0]
    assert r.source == "exact" and [vocab.names[t] for t in r.sieved] == other.terms


def test_calibrate_threshold_prefers_sieving_near_duplicates(tiny_dir, demo):
    vocab, mentions = demo
    multi = [m for m in mentions if len(m.terms) > 1][:8]
    sieve = Sieve(fresh(tiny_dir)).fit(vocab, history=multi)
    heldout = [LabelledMention(m.text + "术", m.terms) for m in multi]  # near-duplicates, multi-term gold
    res = calibrate_threshold(sieve, heldout)
    assert res["n"] == len(heldout) and res["accuracy_without_sieve"] == 0.0  # top-1 search can't give 2 terms
    assert res["accuracy"] > 0.5 and res["threshold"] < 1.0
    assert res["accuracy"] == max(r["accuracy"] for r in res["table"])


# ---------------------------------------------------------------- persistence, count head, prefixes
def test_save_load_roundtrip_identical(tiny_dir, demo, tmp_path):
    vocab, mentions = demo
    enc = fresh(tiny_dir)
    fit_count_head(enc, mentions[:40], epochs=5)
    texts = [m.text for m in mentions[:20]]
    enc.save(tmp_path / "m")
    back = BiEncoder.load(tmp_path / "m", device="cpu")
    np.testing.assert_array_equal(back.encode_queries(texts), enc.encode_queries(texts))
    np.testing.assert_array_equal(back.encode_terms(vocab.names[:20]), enc.encode_terms(vocab.names[:20]))
    np.testing.assert_allclose(back.predict_count(texts)[1], enc.predict_count(texts)[1], atol=1e-6)
    assert BiEncoder.from_folder(tmp_path / "m", device="cpu").query_prefix == enc.query_prefix


def test_count_head_learns_separable_toy(tiny_dir):
    enc = fresh(tiny_dir)
    sites = ["甲状腺", "胆囊", "阑尾", "乳房", "胃", "肝", "脾", "肾"]
    ops = ["切除术", "探查术", "修补术"]
    toy = []
    for i, s in enumerate(sites):
        a, b, c = ops[i % 3], ops[(i + 1) % 3], ops[(i + 2) % 3]
        toy += [LabelledMention(s + a, ["x"]), LabelledMention(f"{s}{a}+{s}{b}", ["x", "y"]),
                LabelledMention(f"{s}{a}+{s}{b}+{s}{c}", ["x", "y", "z"])]
    assert fit_count_head(enc, toy[:18], epochs=150) == 1.0
    counts, prob = enc.predict_count([m.text for m in toy[18:]])
    assert list(counts) == [count_class(len(m.terms)) + 1 for m in toy[18:]]
    assert prob.shape == (6, 3) and np.allclose(prob.sum(1), 1.0, atol=1e-5)


def test_prefix_auto_follows_folder(tiny_dir, tmp_path):
    assert fresh(tiny_dir).query_prefix == ""
    e5 = tmp_path / "multilingual-e5-tiny"
    shutil.copytree(tiny_dir, e5)
    enc = BiEncoder.from_folder(e5, device="cpu")
    assert (enc.query_prefix, enc.passage_prefix) == ("query: ", "passage: ")
    assert BiEncoder.from_folder(e5, device="cpu", query_prefix="", passage_prefix="").query_prefix == ""


# ---------------------------------------------------------------- CLI entry point
def test_main_writes_model_index_and_config(tiny_dir, tmp_path):
    out = tmp_path / "run"
    rc = main(["--vocab", str(DEMO / "procedures.csv"), "--train", str(DEMO / "mentions.csv"),
               "--val", str(DEMO / "mentions.csv"), "--encoder", str(tiny_dir), "--objective", "nce",
               "--epochs", "1", "--max-steps", "3", "--batch-size", "8", "--no-progress", "--out", str(out)])
    assert rc == 0
    cfg = json.loads((out / "config.json").read_text(encoding="utf-8"))
    assert len(cfg["data"]["train"]["sha256"]) == 64 and cfg["encoder"]["folder"] == str(Path(tiny_dir).resolve())
    assert cfg["metrics"]["steps"] == 3 and "recall@10" in cfg["metrics"]["final"]
    enc = BiEncoder.load(out / "model", device="cpu")
    # the run folder itself loads too (what `termnorm evaluate --dense` and the benchmarks are given)
    probe = ["甲状腺病损切除术", "阑尾切除术"]
    assert np.allclose(BiEncoder.load(out, device="cpu").encode_queries(probe), enc.encode_queries(probe))
    from termnorm.loaders import load_vocabulary

    vocab = load_vocabulary(DEMO / "procedures.csv")
    rec = DenseRecaller.load(out / "index", enc, vocab)
    assert len(rec.recall("甲状腺病损切除术", 5)) == 5
    # a pipeline built with this encoder takes the forms' vectors from the saved index instead of encoding them
    encoded = DenseRecaller(enc).fit(vocab, form_vecs=enc.encode_terms(vocab.surface_forms()[0]))
    enc.encode_terms = lambda *a, **k: pytest.fail("the vocabulary was encoded again")
    reused = DenseRecaller(enc).fit(vocab)
    for got, want in zip(reused.recall_batch(probe, 5), encoded.recall_batch(probe, 5)):
        assert [t for t, _ in got] == [t for t, _ in want] and np.allclose([x for _, x in got], [x for _, x in want])
    # a model written after its index is encoded afresh
    later = (out / "index" / "vocabulary" / "index.json").stat().st_mtime + 10
    os.utime(out / "model" / "delta.safetensors", (later, later))
    with pytest.raises(pytest.fail.Exception, match="encoded again"):
        DenseRecaller(enc).fit(vocab)


def test_main_learns_a_vocabularys_synonyms_without_any_coded_mention(tiny_dir, tmp_path, capsys):
    """Day one: --data vocab needs no labelled file; any other data still asks for one, by name."""
    args = ["--vocab", str(DEMO / "procedures.csv"), "--encoder", str(tiny_dir), "--objective", "nce", "--epochs",
            "1", "--max-steps", "3", "--batch-size", "8", "--no-progress", "--train-top", "1", "--out"]
    assert main(args + [str(tmp_path / "bad")]) == 2 and "--train is needed" in capsys.readouterr().err
    assert main(args + [str(tmp_path / "run"), "--data", "vocab", "--no-count-head"]) == 0
    cfg = json.loads((tmp_path / "run" / "config.json").read_text(encoding="utf-8"))
    assert cfg["n_train_mentions"] == 0 and cfg["metrics"]["steps"] == 3 and "train" not in cfg["data"]
    assert sorted(p.name for p in (tmp_path / "run" / "model").iterdir()) == ["delta.safetensors",
                                                                              "termnorm_biencoder.json"]
    from termnorm.loaders import load_vocabulary

    rec = DenseRecaller.load(tmp_path / "run" / "index", BiEncoder.load(tmp_path / "run", device="cpu"),
                             load_vocabulary(DEMO / "procedures.csv"))
    assert len(rec.recall("阑尾切除术", 5)) == 5


# ---------------------------------------------------------------- cross-fitted bi-encoders
def test_main_folds_writes_a_cross_fitted_encoder_whose_scores_are_out_of_fold(tiny_dir, demo, tmp_path):
    """`--folds 2` trains two encoders, each without one hash fold; the folder loads as one encoder whose
    index scores a training mention with its blind encoder's cosine and a new mention with the mean."""
    from termnorm.dense.crossfit import CrossFitBiEncoder, load_dense
    from termnorm.rank.crossfit import fold_of_text
    from termnorm.text.normalize import normalize

    vocab, mentions = demo
    out = tmp_path / "cf"
    common = ["--vocab", str(DEMO / "procedures.csv"), "--train", str(DEMO / "mentions.csv"),
              "--encoder", str(tiny_dir), "--objective", "nce", "--epochs", "1", "--max-steps", "2",
              "--batch-size", "8", "--lr", "1e-3", "--no-progress", "--folds", "2", "--out", str(out)]
    assert main(common + ["--fold", "1"]) == 0
    assert not (out / "folds.json").exists()  # fold 0 still to train: not usable yet
    with pytest.raises(FileNotFoundError):
        CrossFitBiEncoder.load(out)
    assert main(common + ["--fold", "0"]) == 0  # the last fold to finish writes the fold map
    enc = load_dense(out, device="cpu")
    assert isinstance(enc, CrossFitBiEncoder) and enc.folds == 2 and enc.dim == 2 * enc.models[0].dim
    texts = [r["mention"] for r in csv.DictReader(open(DEMO / "mentions.csv", encoding="utf-8"))]
    assert set(enc.fold_of) == {normalize(t) for t in texts}
    assert all(enc.fold_of[normalize(t)] == fold_of_text(t, 2) for t in texts)
    for k in range(2):  # each encoder was validated on the fold it never saw
        cfg = json.loads((out / f"fold{k}" / "config.json").read_text(encoding="utf-8"))
        assert cfg["n_val_mentions"] == sum(fold_of_text(t, 2) == k for t in texts)
        assert cfg["n_train_mentions"] + cfg["n_val_mentions"] == len(texts)
    # the two fold encoders differ (trained on different mentions)
    names = vocab.names[:30]
    t0, t1 = enc.models[0].encode_terms(names), enc.models[1].encode_terms(names)
    assert not np.allclose(t0, t1)
    forms = enc.encode_terms(names)
    assert np.allclose(np.linalg.norm(forms, axis=1), 1.0, atol=1e-5)
    seen = [m.text for m in mentions[:12]]
    new = ["右侧甲状腺全切除术后探查", "腹腔镜下胆囊切除+阑尾切除"]
    assert all(normalize(t) not in enc.fold_of for t in new)
    got = enc.encode_queries(seen + new) @ forms.T
    for i, t in enumerate(seen):  # a training mention: its blind encoder's cosine alone
        k = fold_of_text(t, 2)
        blind = enc.models[k].encode_queries([t]) @ (t0 if k == 0 else t1).T
        np.testing.assert_allclose(got[i], blind[0], atol=1e-5)
    for j, t in enumerate(new):  # a new mention: the mean of the two cosines
        mean = (enc.models[0].encode_queries([t]) @ t0.T + enc.models[1].encode_queries([t]) @ t1.T) / 2
        np.testing.assert_allclose(got[len(seen) + j], mean[0], atol=1e-5)
    counts, prob = enc.predict_count(seen + new)
    assert prob.shape == (len(seen) + len(new), 3) and set(counts) <= {1, 2, 3}
    for i, t in enumerate(seen):  # the count head too: the blind encoder's for a training mention
        np.testing.assert_allclose(prob[i], enc.models[fold_of_text(t, 2)].predict_count([t])[1][0], atol=1e-5)
    for j, t in enumerate(new):  # and the mean of the two for a new one
        mean = (enc.models[0].predict_count([t])[1][0] + enc.models[1].predict_count([t])[1][0]) / 2
        np.testing.assert_allclose(prob[len(seen) + j], mean, atol=1e-5)


def test_cross_fitted_encoder_in_the_engine_and_its_save_load(tiny_dir, demo, tmp_path, monkeypatch):
    """The engine takes a cross-fitted encoder as its dense recaller (FAISS over the concatenated forms),
    saves it with the pipeline and its vocabulary's vectors, and reloads the same recall without encoding."""
    from termnorm.dense.crossfit import CrossFitBiEncoder, load_dense
    from termnorm.engine import Engine
    from termnorm.rank.crossfit import fold_of_text
    from termnorm.text.normalize import normalize

    vocab, mentions = demo
    history = mentions[:40]
    enc = CrossFitBiEncoder([fresh(tiny_dir), fresh(tiny_dir)],
                            {normalize(m.text): fold_of_text(m.text, 2) for m in history})
    with pytest.raises(ValueError):
        CrossFitBiEncoder([fresh(tiny_dir)], {})
    eng = Engine(vocab, history=history, dense=enc, recall_profile="compact")
    probe = [m.text for m in mentions[40:50]]
    before = eng.recall_batch(probe)
    assert any("dense" in c.scores for cands in before for c in cands)
    eng.fit_lexical(history, seed=0)
    folder = eng.save(tmp_path / "pipe")
    assert (folder / "dense" / "folds.json").is_file()
    # the vocabulary's vectors are saved with the pipeline and read back, not encoded again
    with monkeypatch.context() as mp:
        mp.setattr(CrossFitBiEncoder, "encode_terms", lambda *a, **k: pytest.fail("the vocabulary was encoded again"))
        back = Engine.load(folder)
    assert isinstance(back.dense, CrossFitBiEncoder) and back.dense.fold_of == enc.fold_of
    again = back.recall_batch(probe)
    for a, b in zip(before, again):
        assert [c.term_id for c in a] == [c.term_id for c in b]
        assert [c.scores.get("dense") for c in a] == pytest.approx([c.scores.get("dense") for c in b])
    assert isinstance(load_dense(folder / "dense", device="cpu"), CrossFitBiEncoder)


def test_a_pipeline_with_one_encoder_reloads_its_vocabulary_vectors_unless_the_model_is_newer(tiny_dir, demo,
                                                                                              tmp_path, monkeypatch):
    from termnorm.engine import Engine

    vocab, mentions = demo
    eng = Engine(vocab, history=mentions[:40], dense=fresh(tiny_dir), recall_profile="compact")
    eng.fit_lexical(mentions[:40], seed=0)
    folder = eng.save(tmp_path / "pipe")
    probe = [m.text for m in mentions[40:50]]
    want = eng.recall_batch(probe)
    monkeypatch.setattr(BiEncoder, "encode_terms", lambda *a, **k: pytest.fail("the vocabulary was encoded again"))
    for a, b in zip(want, Engine.load(folder).recall_batch(probe)):
        assert [(c.term_id, c.scores.get("dense")) for c in a] == [(c.term_id, pytest.approx(c.scores.get("dense")))
                                                                     for c in b]
    later = (folder / "index" / "vocabulary" / "index.json").stat().st_mtime + 10
    os.utime(next((folder / "dense").iterdir()), (later, later))  # a model written after the vectors
    with pytest.raises(pytest.fail.Exception, match="encoded again"):
        Engine.load(folder)


def test_app_retraining_fine_tunes_a_cross_fitted_encoder_fold_by_fold(tiny_dir, demo, tmp_path):
    """retrain.retrain_neural (the Training page's neural step) goes on training each fold encoder without
    its own fold; the new mentions join the fold their hash gives."""
    from termnorm.dense.crossfit import CrossFitBiEncoder, load_dense
    from termnorm.rank.crossfit import fold_of_text
    from termnorm.refit import retrain_neural
    from termnorm.text.normalize import normalize

    vocab, mentions = demo
    old, new = mentions[:20], mentions[20:60]
    enc = CrossFitBiEncoder([fresh(tiny_dir), fresh(tiny_dir)],
                            {normalize(m.text): fold_of_text(m.text, 2) for m in old})
    enc.save(tmp_path / "v1" / "dense")
    parts, report = retrain_neural(tmp_path / "v1", vocab, old + new, budget_s=None)
    parts["dense"].save(tmp_path / "v2" / "dense")
    before, after = load_dense(tmp_path / "v1" / "dense", "cpu"), load_dense(tmp_path / "v2" / "dense", "cpu")
    assert isinstance(after, CrossFitBiEncoder)
    assert after.fold_of == {normalize(m.text): fold_of_text(m.text, 2) for m in old + new}
    assert len(report["dense"]["folds"]) == 2
    probe = vocab.names[:10]
    for k in (0, 1):
        assert report["dense"]["folds"][k]["steps"] > 0
        assert not np.allclose(before.models[k].encode_terms(probe), after.models[k].encode_terms(probe))


# ---------------------------------------------------------------- a bag of word pieces
def test_a_static_encoder_trains_only_the_pieces_it_reads_and_reloads_as_a_model_folder(tiny_dir, demo, tmp_path):
    vocab, mentions = demo
    out = tmp_path / "static"
    assert main(["--vocab", str(DEMO / "procedures.csv"), "--train", str(DEMO / "mentions.csv"),
                 "--encoder", str(tiny_dir), "--static", "--objective", "nce", "--data", "vocab", "--epochs", "4",
                 "--batch-size", "8", "--lr", "0.05", "--no-count-head", "--no-progress", "--out", str(out)]) == 0
    untrained = BiEncoder.static_from_folder(tiny_dir, device="cpu")
    enc = BiEncoder.load(out / "model", device="cpu")
    assert enc.is_static and not fresh(tiny_dir).is_static and enc.query_prefix == enc.passage_prefix == ""
    cfg = json.loads((out / "config.json").read_text(encoding="utf-8"))
    assert cfg["metrics"]["steps"] > 4 and not cfg["metrics"]["freeze_embeddings"]
    # started from the transformer's own input table; SparseAdam moved the rows of pieces in the pairs, no other
    start = BiEncoder.from_folder(tiny_dir, device="cpu").word_embeddings().weight.detach()
    assert torch.equal(untrained.word_embeddings().weight.detach(), start)
    moved = (enc.word_embeddings().weight.detach() != start).any(1).nonzero().flatten().tolist()
    tok = untrained.model[0].tokenizer
    read = {i for t in build_queries(vocab, [], "vocab").texts + vocab.names
            for i in tok.encode(clean_text(t), add_special_tokens=False).ids}  # NFKC: ， reads as ,
    assert moved and set(moved) <= read
    # the synonyms it was trained on now find their terms more often
    syns, own = zip(*[(s, vocab.names.index(n)) for n, ss in vocab.synonyms.items() for s in ss])

    def own_name_first(e: BiEncoder) -> float:
        return float(((e.encode_queries(list(syns)) @ e.encode_terms(vocab.names).T).argmax(1) == own).mean())

    assert own_name_first(enc) > own_name_first(untrained) + 0.05, (own_name_first(untrained), own_name_first(enc))
    probe = ["甲状腺病损切除术", "阑尾切除术"]
    assert np.allclose(BiEncoder.load(out, device="cpu").encode_queries(probe), enc.encode_queries(probe))
    from termnorm.loaders import load_vocabulary

    index = DenseRecaller.load(out / "index", enc, load_vocabulary(DEMO / "procedures.csv"))
    assert len(index.recall(probe[0], 5)) == 5


def test_training_only_the_top_layer_runs_the_lower_ones_once_per_text_and_saves_a_whole_model(tiny_dir, demo,
                                                                                                tmp_path):
    from termnorm.dense.top_layers import TopLayerTrainer

    vocab, mentions = demo
    train = mentions[:60]
    probe = ["甲状腺病损切除术", "阑尾切除术", "LC"]
    enc = fresh(tiny_dir)
    start = {n: p.detach().clone() for n, p in enc.model.named_parameters()}
    with pytest.raises(ValueError, match="top must be in 1..1"):
        TopLayerTrainer(fresh(tiny_dir), 2)
    enc.model.eval()
    with torch.no_grad():  # the cached lower layer and the top one embed as the whole model does
        assert torch.allclose(TopLayerTrainer(fresh(tiny_dir), 1).embed(probe, enc.query_prefix),
                              enc.embed(probe, enc.query_prefix), atol=1e-3)
    before = evaluate_recall(enc, vocab, train, ks=(10,))["recall@10"]
    state: dict = {}
    m = train_biencoder(enc, vocab, train, objective="nce", epochs=4, batch_size=16, lr=5e-3, val=train,
                        progress=False, seed=1, train_top=1, state=state)
    assert m["train_top"] == 1 and m["steps"] > 3
    assert m["final"]["recall@10"] > before + 0.05, (before, m["final"])
    # four passes and five encodings for mining and recall, yet each text's lower layer ran once
    forms = vocab.surface_forms()[0]
    assert 0 < m["lower_layers_run"] <= len({m_.text for m_ in train}) + len(forms)
    # the vectors the index is built from are the trained model's own
    assert np.allclose(state["form_vecs"], enc.encode_terms(forms), atol=1e-3)
    moved = {n for n, p in enc.model.named_parameters() if not torch.equal(p.detach(), start[n])}
    assert moved and all(".layer.1." in n for n in moved), sorted(moved)
    enc.save(tmp_path / "model")
    # saved as the changed weights: the top layer's, against the base folder it was trained from
    assert not (tmp_path / "model" / "model.safetensors").exists()
    from safetensors import safe_open

    with safe_open(str(tmp_path / "model" / "delta.safetensors"), framework="pt") as f:
        assert {k for k in f.keys() if "position_ids" not in k} == {n.split(".", 2)[2] for n in moved}
    again = BiEncoder.load(tmp_path / "model", device="cpu")
    assert np.allclose(again.encode_queries(probe), enc.encode_queries(probe), atol=1e-5)
    assert not np.allclose(fresh(tiny_dir).encode_queries(probe), enc.encode_queries(probe), atol=1e-3)


def test_a_fine_tuned_encoder_is_saved_as_its_changes_and_refuses_another_base(tiny_dir, demo, tmp_path):
    """A compact save holds only the weights that differ from the base folder, reloads to the same vectors (count
    head included), and names the missing base clearly when its weights are not the ones it was trained from."""
    import shutil

    vocab, mentions = demo
    base = tmp_path / "base"
    shutil.copytree(tiny_dir, base)
    enc = BiEncoder.from_folder(base, device="cpu")
    with torch.no_grad():
        enc.model.transformers_model.encoder.layer[1].output.dense.weight.add_(0.05)
    fit_count_head(enc, mentions[:40], epochs=5)
    texts = [m.text for m in mentions[:20]]
    enc.save(tmp_path / "compact")
    enc.save(tmp_path / "whole", compact=False)
    size = {k: sum(p.stat().st_size for p in (tmp_path / k).rglob("*") if p.is_file()) for k in ("compact", "whole")}
    assert size["compact"] < size["whole"] / 4, size
    back = BiEncoder.load(tmp_path / "compact", device="cpu")
    np.testing.assert_array_equal(back.encode_queries(texts), enc.encode_queries(texts))
    np.testing.assert_array_equal(back.encode_terms(vocab.names[:20]), BiEncoder.load(
        tmp_path / "whole", device="cpu").encode_terms(vocab.names[:20]))
    np.testing.assert_allclose(back.predict_count(texts)[1], enc.predict_count(texts)[1], atol=1e-6)
    # a reloaded compact model saves compact again, against the same base
    back.save(tmp_path / "again")
    assert (tmp_path / "again" / "delta.safetensors").is_file()
    # other weights in the base folder: refused with the base's name, never read against them
    other = BiEncoder.from_folder(base, device="cpu")
    with torch.no_grad():
        other.model.transformers_model.embeddings.word_embeddings.weight.mul_(2)
    other.model.transformers_model.save_pretrained(str(base))
    with pytest.raises(FileNotFoundError, match="base encoder 'base'.*other weights"):
        BiEncoder.load(tmp_path / "compact", device="cpu")


def test_the_dense_recall_benchmark_gives_the_trainings_own_figure_from_the_saved_index(tiny_dir, tmp_path, capsys):
    """benchmarks/dense_recall.py: a model trained without --val is measured afterwards; with --val given to the
    training too, both figures come from the same vectors and agree."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("dense_recall", DEMO.parents[1] / "benchmarks" / "dense_recall.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    with open(DEMO / "mentions.csv", encoding="utf-8") as f:
        rows = [r for r in csv.DictReader(f) if r["vocabulary"] == "procedures"][:40]
    val = tmp_path / "val.csv"
    with open(val, "w", encoding="utf-8", newline="") as f:
        w = csv.DictWriter(f, ["mention", "terms"])
        w.writeheader()
        w.writerows({"mention": r["mention"], "terms": r["terms"]} for r in rows)
    vocab = str(DEMO / "procedures.csv")
    out = tmp_path / "run"
    assert main(["--vocab", vocab, "--train", str(val), "--val", str(val), "--encoder", str(tiny_dir), "--data",
                 "vocab", "--epochs", "1", "--batch-size", "8", "--lr", "5e-3", "--no-count-head", "--train-top", "1",
                 "--max-steps", "6", "--no-progress", "--device", "cpu", "--out", str(out)]) == 0
    trained = json.loads((out / "config.json").read_text(encoding="utf-8"))["metrics"]["final"]
    got = bench.main(["--model", str(out / "model"), "--vocab", vocab, "--mentions", str(val), "--ks", "1,10",
                      "--device", "cpu", "--out", str(tmp_path / "recall.json")])
    assert got["forms_from_saved_index"] and got["n"] == len(rows) == trained["n"]
    assert (got["recall@1"], got["recall@10"]) == (trained["recall@1"], trained["recall@10"])
    assert json.loads((tmp_path / "recall.json").read_text(encoding="utf-8"))["recall@10"] == got["recall@10"]
    assert "recall@1=" in capsys.readouterr().out
    shutil.rmtree(out / "index")  # no index beside the model: the forms are encoded, to the same figures
    again = bench.main(["--model", str(out / "model"), "--vocab", vocab, "--mentions", str(val), "--ks", "1,10",
                        "--device", "cpu"])
    assert not again["forms_from_saved_index"] and again["recall@10"] == pytest.approx(got["recall@10"], abs=0.03)
