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
