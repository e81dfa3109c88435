"""The app's serving engine (db.engine_holder): which prepared suggestions a decision makes stale."""

from __future__ import annotations

from db import services
from db.engine_holder import build_holder
from termnorm.engine import demo_vocabulary

TEXTS = ["右侧甲状腺肿瘤切除术", "左侧甲状腺肿物切除", "腹腔镜胆囊切除术", "经皮肾镜碎石术", "阑尾切除"]


def test_a_decision_redoes_the_prepared_suggestions_of_similar_mentions_only(db_url):
    with services.session_scope(db_url) as s:
        vid = services.load_vocabulary(s, demo_vocabulary("procedures"), "demo-procedures")
        bid = services.create_batch(s, "b", vid, TEXTS)
        ids = [m["id"] for m in services.mentions(s, bid)]
    holder = build_holder(db_url, vid)
    with services.session_scope(db_url) as s:
        assert holder.prepare(s, bid, ids[0], 4) == 4  # nothing stored yet
        assert holder.prepare(s, bid, ids[0], 4) == 0  # all fresh
    # a coder codes a thyroid mention elsewhere: only the similar thyroid mention is redone
    holder.learn("甲状腺肿物切除术", ["甲状腺病损切除术"])
    assert holder.changed_since(0, "左侧甲状腺肿物切除") and not holder.changed_since(0, "经皮肾镜碎石术")
    with services.session_scope(db_url) as s:
        assert holder.prepare(s, bid, ids[0], 4) == 1
        assert holder.prepare(s, bid, ids[0], 4) == 0
    # the same text as an upcoming mention: its stored suggestion is stale until recomputed (the sieve answers)
    holder.learn("经皮肾镜碎石术", ["经皮肾镜取石术"])
    assert holder.is_stale(ids[3], "经皮肾镜碎石术")
    with services.session_scope(db_url) as s:
        assert holder.suggestion(s, ids[3], "经皮肾镜碎石术").chosen == ["经皮肾镜取石术"]
        assert not holder.is_stale(ids[3], "经皮肾镜碎石术")
    # the mention on screen follows a similar decision too: its suggestion is redone when it is shown again
    with services.session_scope(db_url) as s:
        shown = holder.suggestion(s, ids[4], "阑尾切除")
        assert "history" not in shown.candidates[0].scores
    holder.learn("腹腔镜下阑尾切除", ["腹腔镜下阑尾切除术"])
    with services.session_scope(db_url) as s:
        again = holder.suggestion(s, ids[4], "阑尾切除")
        assert any(c.scores.get("history", 0) > 0 for c in again.candidates if c.term == "腹腔镜下阑尾切除术")
        assert holder.suggestion(s, ids[4], "阑尾切除") == again  # and then served as stored
