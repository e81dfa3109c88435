"""What each candidate rests on (termnorm.explain), on the demo procedures engine as the app ships it."""

import pickle

from termnorm import explain
from termnorm.engine import Engine


def _why(eng, mention):
    sug = eng.suggest(mention)
    return {c.term: w for c, w in zip(sug.candidates, explain.evidence(eng, mention, sug.candidates))}, sug


def test_never_coded_then_taught_then_coded():
    eng = Engine.from_demo("procedures")
    why, sug = _why(eng, "甲状腺肿物切除")
    term = next(t for t in why if "甲状腺" in t)
    assert why[term][0] == "never coded" and any(w.startswith("shares ") and "甲状腺" in w for w in why[term])

    eng.add_synonym(term, "甲状腺肿物切除")  # a coder teaches the wording as a synonym
    why, _ = _why(eng, "甲状腺肿物切除")
    assert why[term][:2] == ["never coded", "synonym “甲状腺肿物切除” as written"]

    eng.add_coded_mention("右侧甲状腺肿物切除", [term])
    eng.add_coded_mention("甲状腺肿物切除", [term])
    why, _ = _why(eng, "甲状腺肿物切除")
    assert why[term][:2] == ["coded 2×", "as written before"]
    why, _ = _why(eng, "左侧甲状腺肿物切除")
    assert why[term][:2] == ["coded 2×", "like “右侧甲状腺肿物切除”"]

    state = pickle.loads(pickle.dumps(eng)).__dict__
    assert "_evidence_counts" not in state and "_evidence_counts" in eng.__dict__


def test_a_new_history_is_counted_afresh():
    eng = Engine.from_demo("procedures")
    sug = eng.suggest("胆囊切除")
    term = sug.candidates[0].term
    eng.add_coded_mention("胆囊切除", [term])
    assert explain.evidence(eng, "胆囊切除", sug.candidates[:1])[0][0] == "coded 1×"
    other = eng.with_history([])  # a copy answering from other coded mentions
    assert explain.evidence(other, "胆囊切除", sug.candidates[:1])[0][0] == "never coded"
    assert explain.evidence(eng, "胆囊切除", sug.candidates[:1])[0][0] == "coded 1×"
    assert eng.__dict__["_evidence_counts"] is not other.__dict__["_evidence_counts"]
