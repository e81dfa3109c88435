"""The serving engine (db.serving): what every page, background job and gate suggests with."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from helpers import need

from db import serving, services
from termnorm.engine import cold_start_domain, demo_vocabulary
from termnorm.loaders import load_vocabulary
from termnorm.vocabulary import Vocabulary

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


def test_each_real_vocabulary_gets_the_cold_start_ranker_of_its_domain():
    assert cold_start_domain(load_vocabulary(need(DATA / "yidu-n7k" / "code.txt"))) == "procedures"
    assert cold_start_domain(load_vocabulary(need(DATA / "icd9cm3" / "icd9cm3_yibao_v2_tree.json"))) == "procedures"
    assert cold_start_domain(load_vocabulary(need(DATA / "chip-cdn" / "icd10_beijing_clinical_v601.xlsx"))) == \
        "diagnoses"
    assert cold_start_domain(load_vocabulary(need(DATA / "ncbi-disease" / "medic_06Jul2012.txt"))) is None  # English
    assert cold_start_domain(demo_vocabulary("procedures")) == "procedures"
    mixed = Vocabulary(name="hospital list")
    for i, code in enumerate(["A01", "06.31", "X-1", "Y-2", "Z-3"]):
        mixed.add_term(f"术语{i}", [code])
    assert cold_start_domain(mixed) is None  # no shape for most codes: recall order, no borrowed ranker


def test_a_real_vocabulary_is_served_ranked_before_any_retraining(db_url):
    """Seen in the app after load-data: Yidu-N7K was served in recall order (13 of 19 first suggestions right)."""
    vocab = load_vocabulary(need(DATA / "yidu-n7k" / "code.txt"), name="yidu")
    with services.session_scope(db_url) as s:
        vid = services.load_vocabulary(s, vocab, "yidu")
    assert serving.serving_version(db_url, vid) is None  # nothing retrained: the shipped model serves
    engine = serving.build_engine(db_url, vid)
    assert engine.model_version.startswith("pretrained:") and engine.has_ranker
    sug = engine.suggest("腹腔镜胆囊切除术")
    assert sug.chosen == ["腹腔镜下胆囊切除术"]


def test_the_vocabularys_encoder_serves_in_the_shipped_model_until_a_first_fit(db_url, tmp_path):
    """Day one on NCBI disease gains with a bi-encoder trained on the vocabulary's synonyms (recall order 0.750 ->
    0.768, benchmarks/results/day_one_ncbi.json), but the shipped model ignored the lead's setting until a first
    fit. A vocabulary of no cold-start domain is now served in recall order with it; setting or clearing it
    reaches the pages as a promotion does (built in the background while the engine before serves). A
    vocabulary with a cold-start ranker keeps that ranker, which was fitted without an encoder's score."""
    from db import learning
    from db.engine_holder import ServingSwitch
    from termnorm.dense import BiEncoder
    from termnorm.encoder.tiny import make_tiny_encoder

    vocab = Vocabulary(name="diseases")
    for i, name in enumerate(["Breast Neoplasms", "Ovarian Neoplasms", "Myotonic Dystrophy", "Colonic Neoplasms",
                              "Ataxia Telangiectasia", "Hemophilia A"]):
        vocab.add_term(name, [f"D00{i}"])
    BiEncoder.from_folder(make_tiny_encoder(tmp_path / "bert", vocab.names, hidden=32, layers=2),
                          device="cpu").save(tmp_path / "enc")
    with services.session_scope(db_url) as s:
        vid = services.load_vocabulary(s, vocab, "diseases")
        demo = services.load_vocabulary(s, demo_vocabulary("procedures"), "demo-procedures")
        services.ensure_user(s, "lead1", role="lead")
        for v in (vid, demo):
            learning.set_pipeline_settings(s, v, {"dense": str(tmp_path / "enc")}, "lead1")
    assert serving.build_engine(db_url, demo).model_version.startswith("pretrained:")
    switch = ServingSwitch(db_url, vid)
    engine = switch.get(serving.serving_key(db_url, vid)).engine
    assert engine.model_version.startswith("lexical+encoder-") and engine.dense is not None
    assert all("dense" in c.scores for c in engine.suggest("breast tumour").candidates)
    with services.session_scope(db_url) as s:
        learning.set_pipeline_settings(s, vid, {"dense": None}, "lead1")
    key = serving.serving_key(db_url, vid)
    assert not switch.builds_at_once(key) and switch.get(key).engine is engine  # nobody waits for the change
    assert switch.settled(120) and switch.get(key).engine.model_version == "lexical"
    assert switch.get(key).engine.dense is None
    # an encoder folder deleted after it was set: the engine before goes on serving, and the failed build is not
    # tried again at every page run (each try reads the whole vocabulary)
    shutil.copytree(tmp_path / "enc", tmp_path / "gone")
    with services.session_scope(db_url) as s:
        learning.set_pipeline_settings(s, vid, {"dense": str(tmp_path / "gone")}, "lead1")
    shutil.rmtree(tmp_path / "gone")
    key = serving.serving_key(db_url, vid)
    before = switch.get(key)
    assert switch.settled(120) and "gone" in switch.failed
    assert switch.get(key) is before and switch.pending is None  # not started again


def test_from_300_coded_mentions_the_shipped_model_weighs_the_coders_history(db_url):
    """Before any retraining a vocabulary is served the history-free cold-start ranker; the decision that brings
    its coded history to HISTORY_FROM switches the engine in place to the ranker fitted with history features
    (benchmarks/cold_history.py: better from 300 on, on both sets), so one coder's correction now steers a similar
    mention. Seen on Yidu-N7K: after 右侧侧脑室穿刺外引流术 was coded 脑池穿刺 (the vocabulary's convention),
    右侧脑室穿刺外引流术 still got 颅内穿刺引流术 until a retrained model was promoted."""
    from db.engine_holder import build_holder
    from termnorm.demo import HISTORY_FROM, HISTORY_RANKERS, PRETRAINED
    from termnorm.loaders import load_labelled

    vocab = load_vocabulary(need(DATA / "yidu-n7k" / "code.txt"), name="yidu")
    train = load_labelled(need(DATA / "yidu-n7k" / "train.xlsx"), vocab).mentions
    coded = [m for m in train if "脑" not in m.text][:HISTORY_FROM - 1]  # none says how 脑室 drains are coded
    with services.session_scope(db_url) as s:
        vid = services.load_vocabulary(s, vocab, "yidu")
        services.ensure_user(s, "cora", role="coder")
        texts = [m.text for m in coded] + ["右侧侧脑室穿刺外引流术", "右侧脑室穿刺外引流术"]
        bid = services.create_batch(s, "ward 3", vid, texts, username="cora")
        ids = [m["id"] for m in services.mentions(s, bid)]
        for mid, m in zip(ids, coded):
            services.record_decision(s, mid, "cora", "correct", m.terms)
    holder = build_holder(db_url, vid)
    assert holder.engine.meta["pretrained_ranker"] == str(PRETRAINED["procedures"])
    with services.session_scope(db_url) as s:
        before = holder.suggestion(s, ids[-1], "右侧脑室穿刺外引流术")  # stored, as a coder's page does
        services.record_decision(s, ids[-2], "cora", "correct", ["脑池穿刺"])
    holder.learn("右侧侧脑室穿刺外引流术", ["脑池穿刺"])  # the decision that makes HISTORY_FROM
    assert holder.engine.meta["pretrained_ranker"] == str(HISTORY_RANKERS["procedures"])
    assert holder.engine.model_version != before.model_version
    with services.session_scope(db_url) as s:
        after = holder.suggestion(s, ids[-1], "右侧脑室穿刺外引流术")  # not the stored one of the other ranker
    assert "脑池穿刺" not in before.chosen and after.model_version == holder.engine.model_version
    assert after.chosen == ["脑池穿刺"] and after.confidence > 0.8, (after.chosen, after.confidence)
    rebuilt = serving.build_engine(db_url, vid)  # another process, a background job: the same ranker
    assert rebuilt.meta["pretrained_ranker"] == str(HISTORY_RANKERS["procedures"])
    assert not serving.follow_history(rebuilt)  # already there


def test_each_domain_ships_a_history_free_ranker_and_one_that_reads_history():
    """docs/benchmarks.md: the history-free ranker serves before HISTORY_FROM coded mentions and is the prior of
    retrained models; the history-mixed one reads history recall and the history's size."""
    from termnorm.demo import HISTORY_RANKERS, PRETRAINED
    from termnorm.rank.prior import load_exported_ranker

    for domain in ("procedures", "diagnoses"):
        free = load_exported_ranker(PRETRAINED[domain], None)["state"]["score_keys"]
        mixed = load_exported_ranker(HISTORY_RANKERS[domain], None)["state"]["score_keys"]
        assert not [k for k in free if k.startswith(("history", "sieve"))] and "tfidf" in free
        assert {"history", "history_jaccard", "history_size"} <= set(mixed) and "clf" not in mixed
        assert serving.shipped_ranker(domain, 299) == PRETRAINED[domain]
        assert serving.shipped_ranker(domain, 300) == HISTORY_RANKERS[domain]


def test_a_catch_up_reads_only_the_decisions_made_since_the_one_before(db_url):
    """The API caught up by reading the whole coded history again whenever anything was audited (about 1 s on
    NCBI's 5,000 coded mentions, at most every 5 s while a team codes). Given the newest decision it had read, it
    reads only those made since; a whole read still teaches what that one skipped."""
    vocab = demo_vocabulary()
    with services.session_scope(db_url) as s:
        vid = services.load_vocabulary(s, vocab, "demo")
        bid = services.create_batch(s, "ward 9", vid, ["阑尾切除伴腹腔引流", "右侧甲状腺次全切"])
        first, second = [m["id"] for m in services.mentions(s, bid)]
    engine = serving.build_engine(db_url, vid)
    with services.session_scope(db_url) as s:
        services.record_decision(s, first, "cora", "correct", [vocab.names[0]])
    mark = serving.decision_mark(db_url)
    with services.session_scope(db_url) as s:
        services.record_decision(s, second, "cora", "correct", [vocab.names[1]])
    assert serving.decision_mark(db_url) > mark
    assert serving.catch_up(engine, db_url, vid, after_decision=mark) == ["右侧甲状腺次全切"]
    assert serving.catch_up(engine, db_url, vid, after_decision=serving.decision_mark(db_url)) == []
    assert serving.catch_up(engine, db_url, vid) == ["阑尾切除伴腹腔引流"]  # the whole history: the one skipped


def test_the_api_learns_a_decision_committed_after_a_newer_one_was_read(deployment_url, monkeypatch):
    """On PostgreSQL two coders' decisions commit in any order: one numbered below the newest can commit after the
    API read the newest, and no later mark says so. The API catches up once more after every change, from the mark
    one catch-up back, so it learns that decision though nobody decides anything after it."""
    import threading

    from sqlalchemy.orm import Session

    from db import http_api

    if not deployment_url.startswith("postgresql"):
        pytest.skip("PostgreSQL narrowed out of this run (TERMNORM_TEST_BACKENDS): SQLite has one writer at a time")
    monkeypatch.setenv("TERMNORM_DB_URL", deployment_url)
    monkeypatch.setattr(http_api, "FRESH_S", 0.0)
    vocab = demo_vocabulary()
    texts = ["阑尾切除伴腹腔引流", "右侧甲状腺次全切", "胆囊切除加胆道探查"]
    with services.session_scope(deployment_url) as s:
        vid = services.load_vocabulary(s, vocab, "demo")
        mids = [m["id"] for m in services.mentions(s, services.create_batch(s, "ward 9", vid, texts))]
    engines = http_api._Engines()
    holder = engines.get(vid)[1]
    with services.session_scope(deployment_url) as s:
        services.record_decision(s, mids[0], "cora", "correct", [vocab.names[0]])
    engines.get(vid), engines.get(vid)  # the change, and the catch-up once more after it: settled
    flushed, release = threading.Event(), threading.Event()
    real_commit = Session.commit

    def late_commit(self):  # the first coder's transaction is flushed (its ids taken), and commits when released
        if threading.current_thread().name == "late":
            self.flush()
            flushed.set()
            assert release.wait(60)
        real_commit(self)

    monkeypatch.setattr(Session, "commit", late_commit)

    def late():
        with services.session_scope(deployment_url) as s:
            services.record_decision(s, mids[1], "dora", "correct", [vocab.names[1]])

    first = threading.Thread(target=late, name="late")
    first.start()
    assert flushed.wait(60)
    with services.session_scope(deployment_url) as s:  # the second coder's, numbered after it, commits first
        services.record_decision(s, mids[2], "cora", "correct", [vocab.names[2]])
    engines.get(vid)
    assert holder.engine.suggest_batch([texts[2]])[0].chosen == [vocab.names[2]]
    assert holder.engine.suggest_batch([texts[1]])[0].chosen != [vocab.names[1]]  # not committed when read
    release.set()
    first.join(60)
    assert not first.is_alive()
    engines.get(vid)  # nothing decided since: the audit mark is the one read before
    assert holder.engine.suggest_batch([texts[1]])[0].chosen == [vocab.names[1]]
