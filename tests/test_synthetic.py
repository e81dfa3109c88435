"""Synthetic mentions of never-coded terms (termnorm.rank.synthetic): measured and off by default, kept so
``benchmarks/cv.py --rows shipped,synthetic`` reproduces the measurement. Real engine, real demo data."""

import numpy as np

from termnorm.engine import Engine, demo_mentions
from termnorm.rank.synthetic import Rewrites, SyntheticMention, synthetic_mentions
from termnorm.records import LabelledMention


def test_rewrites_are_learned_and_run_backwards_on_never_coded_names():
    eng = Engine.from_demo("procedures")
    # a rewrite is learned where the mention and the term have one keyword of a kind each (seen 3+ times)
    coded = [LabelledMention(f"{side}甲状腺肿瘤", ["甲状腺病损"]) for side in ("左侧", "左侧", "左侧", "右侧", "")]
    rw = Rewrites(eng.tagger).fit(coded)
    assert rw.swap == {"病损": [("肿瘤", 1.0)]} and rw.added == [("左侧", 0.6)]
    made = [rw.mention_for("胆囊病损", np.random.default_rng(seed)) for seed in range(20)]
    assert set(made) == {"胆囊肿瘤", "左侧胆囊肿瘤"}

    train = [m for m in demo_mentions() if m.terms]
    made = synthetic_mentions(eng, train, 0.25)
    used = {t for m in train for t in m.terms}
    assert len(made) == round(0.25 * len(train)) and all(isinstance(m, SyntheticMention) for m in made)
    assert not {m.terms[0] for m in made} & used and len({m.terms[0] for m in made}) == len(made)


def test_a_synthetic_mention_is_never_history():
    eng = Engine.from_demo("procedures")
    real = LabelledMention("甲状腺肿物切除", ["甲状腺病损切除术"])
    fake = SyntheticMention("甲状腺肿物切除", ["甲状腺全部切除术"])
    _, _, hits = eng.kfold_candidates([real, fake], np.array([0, 1]))
    assert hits == [0, 1]  # the real one does not find the made-up one (never history); the reverse is fine
    _, _, hits = eng.kfold_candidates([real, LabelledMention("甲状腺肿物切除", ["甲状腺全部切除术"])],
                                      np.array([0, 1]))
    assert hits == [1, 1]  # two real mentions do find each other (the sieve)
