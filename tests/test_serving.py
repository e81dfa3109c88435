"""The serving engine (db.serving): what every page, background job and gate suggests with."""

from __future__ import annotations

from pathlib import Path

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


def test_one_coder_s_correction_steers_a_similar_mention_before_any_retraining(db_url):
    """The shipped cold-start ranker is fitted with history features (``--history-mix``), so a team's first
    decisions count for similar mentions, not only for the same text (the sieve). Seen on Yidu-N7K: after a coder
    coded 右侧侧脑室穿刺外引流术 as 脑池穿刺 (the vocabulary's convention), 右侧脑室穿刺外引流术 still got
    颅内穿刺引流术 from a ranker fitted without history features, until a retrained model was promoted."""
    vocab = load_vocabulary(need(DATA / "yidu-n7k" / "code.txt"), name="yidu")
    with services.session_scope(db_url) as s:
        vid = services.load_vocabulary(s, vocab, "yidu")
        services.ensure_user(s, "cora", role="coder")
        bid = services.create_batch(s, "ward 3", vid, ["右侧侧脑室穿刺外引流术"], username="cora")
        before = serving.build_engine(db_url, vid).suggest("右侧脑室穿刺外引流术")
        services.record_decision(s, services.mentions(s, bid)[0]["id"], "cora", "correct", ["脑池穿刺"])
    assert "脑池穿刺" not in before.chosen  # day one, nothing coded: the convention is unknown
    after = serving.build_engine(db_url, vid)
    assert after.model_version.startswith("pretrained:")  # still the shipped model: nothing was retrained
    sug = after.suggest("右侧脑室穿刺外引流术")
    assert sug.chosen == ["脑池穿刺"] and sug.confidence > 0.8



def test_the_shipped_rankers_read_history_and_their_priors_do_not():
    """Each domain ships two exported rankers (docs/benchmarks.md): the serving one, fitted with --history-mix,
    reads history recall and the history's size; the prior of retrained models, fitted without."""
    from termnorm.demo import PRETRAINED, PRIORS
    from termnorm.rank.prior import load_exported_ranker

    for domain in ("procedures", "diagnoses"):
        serving_keys = load_exported_ranker(PRETRAINED[domain], None)["state"]["score_keys"]
        prior_keys = load_exported_ranker(PRIORS[domain], None)["state"]["score_keys"]
        assert {"history", "history_jaccard", "history_size"} <= set(serving_keys)
        assert not [k for k in prior_keys if k.startswith(("history", "sieve"))] and "tfidf" in prior_keys
