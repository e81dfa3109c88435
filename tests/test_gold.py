"""Gold annotation, agreement, adjudication and the dashboard frames (db/gold.py, db/dashboard_data.py).

Real SQLite file, real demo vocabulary. The agreement numbers of the fixture
below are worked out by hand in its docstring and compared with what
``gold.task_agreement`` returns; the role rules are checked at the function
level (PermissionError), not through hidden buttons.
"""

from __future__ import annotations

import csv
import io
import math

import pytest
from sqlalchemy import inspect

from db import auth, dashboard_data, gold, services
from db import models as M
from termnorm import coding_metrics as dashboard
from termnorm.engine import demo_vocabulary
from termnorm.records import Candidate, Suggestion

A, B, C = "甲状腺病损切除术", "甲状腺大部切除术", "甲状腺全部切除术"
D = "腹腔镜下胆囊切除术"
LI = [A, A, B, B, C, A]  # li's answer for mentions 1..6
WANG = [A, A, B, A, C, C]  # wang's


pytestmark = pytest.mark.usefixtures("fast_bcrypt")


@pytest.fixture
def world(db_url):
    """Users of every role, the demo procedure vocabulary and a batch of 6 thyroid mentions."""
    with services.session_scope(db_url) as s:
        auth.create_admin(s, "root", "root-password")
        for name, role in (("lead1", "lead"), ("li", "annotator"), ("wang", "annotator"), ("zhao", "annotator"),
                           ("coder1", "coder")):
            auth.create_user(s, "root", name, f"{name}-password", role)
        vid = services.load_vocabulary(s, demo_vocabulary("procedures"), "demo-procedures")
        bid = services.create_batch(s, "thyroid", vid, [f"甲状腺手术{i}" for i in range(1, 7)])
        mids = [m["id"] for m in services.mentions(s, bid)]
    return {"url": db_url, "vocabulary_id": vid, "batch_id": bid, "mentions": mids}


def annotate_all(s, task_id, mids, answers: dict[str, list[str]]):
    for who, terms in answers.items():
        for mid, t in zip(mids, terms):
            gold.record_annotation(s, task_id, mid, who, [t] if isinstance(t, str) else t, seconds=12.0)


# ------------------------------------------------------------------ schema
def test_migration_0002_creates_the_gold_tables_as_the_models_describe_them(db_url):
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    # 0002 stays on the way to head (later migrations build on it, never replace it)
    chain = [r.revision for r in ScriptDirectory.from_config(Config(str(services.ALEMBIC_INI))).walk_revisions()]
    assert "0002" in chain and chain[-1] == "0001"
    insp = inspect(services.get_engine(db_url))
    for table in ("gold_tasks", "gold_assignments", "gold_annotations", "gold_labels"):
        assert {c["name"] for c in insp.get_columns(table)} == set(M.Base.metadata.tables[table].columns.keys())


# ------------------------------------------------------------------ tasks
def test_create_task_assigns_every_mention_to_two_annotators_in_rotation(world):
    with services.session_scope(world["url"]) as s:
        tid = gold.create_gold_task(s, "lead1", "thyroid gold", world["batch_id"], ["li", "wang", "zhao"])
        t = gold.gold_tasks(s, "lead1")[0]
        queues = {who: [m["mention_id"] for m in gold.annotation_queue(s, tid, who)] for who in ("li", "wang", "zhao")}
        audit = services.audit_frame(s)
    assert (t["id"], t["mode"], t["per_mention"], t["n_mentions"], t["n_assignments"]) == (tid, "blind", 2, 6, 12)
    assert t["annotators"] == ["li", "wang", "zhao"] and t["created_by"] == "lead1"
    # rotation: each of 3 annotators gets 2/3 of the 6 mentions, each pair shares 2 mentions
    assert {w: len(q) for w, q in queues.items()} == {"li": 4, "wang": 4, "zhao": 4}
    pairs = {(a, b): len(set(queues[a]) & set(queues[b]))
             for a, b in (("li", "wang"), ("li", "zhao"), ("wang", "zhao"))}
    assert set(pairs.values()) == {2}
    assert all(q == sorted(q) for q in queues.values())  # file order
    created = audit[audit.action == "create_gold_task"].iloc[0]
    assert created.user == "lead1" and created.details["n_mentions"] == 6


def test_sample_is_reproducible_and_in_file_order(world):
    with services.session_scope(world["url"]) as s:
        t1 = gold.create_gold_task(s, "lead1", "sample a", world["batch_id"], ["li", "wang"], sample=3, seed=7)
        t2 = gold.create_gold_task(s, "lead1", "sample b", world["batch_id"], ["li", "wang"], sample=3, seed=7)
        q1 = [m["mention_id"] for m in gold.annotation_queue(s, t1, "li")]
        q2 = [m["mention_id"] for m in gold.annotation_queue(s, t2, "li")]
        assert gold.task(s, t1)["sample_size"] == 3
    assert len(q1) == 3 and q1 == q2 and q1 == sorted(q1) and set(q1) <= set(world["mentions"])


def test_task_creation_is_validated(world):
    with services.session_scope(world["url"]) as s:
        with pytest.raises(ValueError, match="not an enabled annotator"):
            gold.create_gold_task(s, "lead1", "x", world["batch_id"], ["li", "coder1"])  # a coder cannot annotate
        with pytest.raises(ValueError, match="2 to 2"):
            gold.create_gold_task(s, "lead1", "x", world["batch_id"], ["li", "wang"], per_mention=3)
        with pytest.raises(ValueError, match="mode"):
            gold.create_gold_task(s, "lead1", "x", world["batch_id"], ["li", "wang"], mode="peek")
        with pytest.raises(KeyError):
            gold.create_gold_task(s, "lead1", "x", 999, ["li", "wang"])
        # a double click on Create made two alike tasks: the second of one name and batch is refused
        first = gold.create_gold_task(s, "lead1", "thyroid, May", world["batch_id"], ["li", "wang"])
        with pytest.raises(ValueError, match=f"gold task #{first} of this batch is named 'thyroid, May' already"):
            gold.create_gold_task(s, "lead1", " thyroid, May ", world["batch_id"], ["li", "wang"])


# ------------------------------------------------------------------ roles, at the function level
def test_coders_and_annotators_cannot_do_lead_actions(world):
    with services.session_scope(world["url"]) as s:
        tid = gold.create_gold_task(s, "lead1", "t", world["batch_id"], ["li", "wang"])
        annotate_all(s, tid, world["mentions"], {"li": LI, "wang": WANG})
        for who in ("coder1", "li", "nobody"):
            for call in (lambda: gold.create_gold_task(s, who, "t2", world["batch_id"], ["li", "wang"]),
                         lambda: gold.adjudicate(s, who, tid, world["mentions"][3], [A]),
                         lambda: gold.task_agreement(s, who, tid),
                         lambda: gold.annotations_frame(s, who, tid),
                         lambda: gold.disagreement_queue(s, who, tid),
                         lambda: gold.gold_labels(s, who),
                         lambda: gold.export_gold(s, who, tid),
                         lambda: gold.gold_tasks(s, who),
                         lambda: dashboard_data.load_dashboard(s, who, world["vocabulary_id"])):
                with pytest.raises(PermissionError):
                    call()
        # a coder cannot annotate, an annotator only what they are assigned
        with pytest.raises(PermissionError):
            gold.record_annotation(s, tid, world["mentions"][0], "coder1", [A])
        with pytest.raises(PermissionError, match="not assigned"):
            gold.record_annotation(s, tid, world["mentions"][0], "zhao", [A])
        auth.set_disabled(s, "root", "lead1")
        with pytest.raises(PermissionError, match="disabled"):
            gold.adjudicate(s, "lead1", tid, world["mentions"][3], [A])
        assert gold.gold_labels(s, "root")["source"].value_counts().to_dict() == {"agreed": 4}  # nothing slipped in


# ------------------------------------------------------------------ agreement, by hand
def test_agreement_numbers_match_hand_computation(world):
    """li / wang over 6 mentions (categories = term sets): li A A B B C A, wang A A B A C C.

    p_o = 4/6 (mentions 1, 2, 3, 5 agree).
    Cohen: li A3 B2 C1, wang A3 B1 C2 -> p_e = (3·3 + 2·1 + 1·2)/36 = 13/36;
           κ = (24/36 − 13/36)/(1 − 13/36) = 11/23.
    Fleiss (n = 2 raters): p_A = 6/12, p_B = 3/12, p_C = 3/12 -> P̄_e = 1/4 + 1/16 + 1/16 = 3/8;
           P̄ = 4/6; κ = (2/3 − 3/8)/(1 − 3/8) = 7/15.
    Krippendorff α (nominal): n = 12 values, n_A = 6, n_B = 3, n_C = 3, Σ o_cc = 2·4 = 8;
           α = ((n−1)·8 − Σ n_c(n_c−1)) / (n(n−1) − Σ n_c(n_c−1)) = (88 − 42)/(132 − 42) = 23/45.
    """
    with services.session_scope(world["url"]) as s:
        tid = gold.create_gold_task(s, "lead1", "t", world["batch_id"], ["li", "wang"])
        annotate_all(s, tid, world["mentions"], {"li": LI, "wang": WANG})
        overall, pairs = gold.task_agreement(s, "lead1", tid)
    assert overall["n_mentions"] == 6 and overall["n_annotators"] == 2
    assert overall["exact_agreement"] == pytest.approx(4 / 6)
    assert overall["fleiss_kappa"] == pytest.approx(7 / 15)
    assert overall["krippendorff_alpha"] == pytest.approx(23 / 45)
    assert overall["mean_pair_kappa"] == pytest.approx(11 / 23)
    row = pairs.iloc[0]
    assert (row.annotator_a, row.annotator_b, row.n_common) == ("li", "wang", 6)
    assert row.kappa == pytest.approx(11 / 23) and row.exact_agreement == pytest.approx(4 / 6)


def test_agreed_mentions_go_to_gold_and_disagreements_wait_for_the_lead(world):
    mids = world["mentions"]
    with services.session_scope(world["url"]) as s:
        tid = gold.create_gold_task(s, "lead1", "t", world["batch_id"], ["li", "wang"])
        annotate_all(s, tid, mids[:3], {"li": LI[:3]})  # only one annotator so far: nothing is gold
        assert gold.gold_labels(s, "lead1").empty
        assert gold.next_annotation(s, tid, "li")["mention_id"] == mids[3]
        annotate_all(s, tid, mids[3:], {"li": LI[3:]})
        annotate_all(s, tid, mids, {"wang": WANG})
        assert gold.next_annotation(s, tid, "li") is None

        labels = gold.gold_labels(s, "lead1", tid)
        assert labels[["mention_id", "source"]].values.tolist() == [[m, "agreed"] for m in (mids[0], mids[1], mids[2],
                                                                                             mids[4])]
        assert labels["terms"].tolist() == [[A], [A], [B], [C]] and set(labels["by"]) == {""}
        queue = gold.disagreement_queue(s, "lead1", tid)
        assert queue["mention_id"].tolist() == [mids[3], mids[5]]
        assert queue[["li", "wang"]].values.tolist() == [[B, A], [A, C]]
        assert queue["gold"].isna().all()
        t = gold.gold_tasks(s, "lead1")[0]
        assert (t["n_annotated"], t["n_complete"], t["n_agreed"], t["n_to_adjudicate"]) == (12, 6, 4, 2)

        # the lead decides the two disagreements (one with two terms)
        gold.adjudicate(s, "lead1", tid, mids[3], [B], comment="次全 = 大部")
        gold.adjudicate(s, "lead1", tid, mids[5], [A, D])
        with pytest.raises(ValueError, match="not terms"):
            gold.adjudicate(s, "lead1", tid, mids[5], ["not a term"])
        labels = gold.gold_labels(s, "lead1", tid).set_index("mention_id")
        assert labels.loc[mids[3], ["source", "by", "comment"]].tolist() == ["adjudicated", "lead1", "次全 = 大部"]
        assert labels.loc[mids[5], "terms"] == [A, D]
        assert gold.disagreement_queue(s, "lead1", tid, open_only=True).empty
        assert gold.disagreement_queue(s, "lead1", tid)["gold"].tolist() == [B, f"{A}##{D}"]
        assert gold.gold_tasks(s, "lead1")[0]["n_to_adjudicate"] == 0

        # a changed answer that breaks an agreement withdraws the agreed label; an adjudicated mention's answers
        # are final: a revision was stored and counted in the agreement, the page saying "saved"
        gold.record_annotation(s, tid, mids[0], "wang", [B])
        with pytest.raises(ValueError, match="adjudicated by the lead"):
            gold.record_annotation(s, tid, mids[3], "wang", [C])
        labels = gold.gold_labels(s, "lead1", tid).set_index("mention_id")
        assert mids[0] not in labels.index and labels.loc[mids[3], "source"] == "adjudicated"
        queue = gold.annotation_queue(s, tid, "wang")
        assert queue[0]["terms"] == [B] and queue[3]["terms"] == [A]  # the latest answer; the final one unchanged
        assert [m["final"] for m in queue] == [False, False, False, True, False, True]
        log = gold.audit_entries(s, "lead1", tid)
        assert log["action"].value_counts().to_dict() == {"annotate": 13, "gold_agreed": 4, "adjudicate": 2,
                                                          "gold_withdrawn": 1, "create_gold_task": 1}
        # CHIP-CDN export: what `termnorm evaluate --test` reads
        import json
        data, left_out = gold.export_gold(s, "lead1", tid, "chip-cdn")
        items = json.loads(data)
        assert {"text": "甲状腺手术6", "normalized_result": f"{A}##{D}"} in items and len(items) == 5
        assert left_out == 0
        # "no term fits" is gold the CHIP-CDN file cannot hold: counted out; the CSV keeps it, with each term's code
        gold.adjudicate(s, "lead1", tid, mids[0], [])
        data, left_out = gold.export_gold(s, "lead1", tid, "chip-cdn")
        assert len(json.loads(data)) == 5 and left_out == 1
        data, left_out = gold.export_gold(s, "lead1", tid, "csv")
        rows = {r["mention"]: r for r in csv.DictReader(io.StringIO(data.decode("utf-8-sig")))}
        assert (rows["甲状腺手术1"]["terms"], rows["甲状腺手术1"]["codes"], left_out) == ("", "", 0)
        assert (rows["甲状腺手术6"]["terms"], rows["甲状腺手术6"]["codes"]) == (f"{A}##{D}", "06.3100##51.2300")


def test_annotations_are_checked_and_private(world):
    mids = world["mentions"]
    with services.session_scope(world["url"]) as s:
        tid = gold.create_gold_task(s, "lead1", "t", world["batch_id"], ["li", "wang"], mode="assisted")
        with pytest.raises(ValueError, match="not terms"):
            gold.record_annotation(s, tid, mids[0], "li", ["no such term"])
        gold.record_annotation(s, tid, mids[0], "li", [])  # "no term fits" is an answer
        gold.record_annotation(s, tid, mids[0], "wang", [A])
        # wang's queue shows only wang's own answers
        assert [m["terms"] for m in gold.annotation_queue(s, tid, "wang")][:2] == [[A], None]
        assert [m["terms"] for m in gold.annotation_queue(s, tid, "li")][:1] == [[]]
        assert gold.my_tasks(s, "li")[0]["mode"] == "assisted"
        assert (gold.my_tasks(s, "li")[0]["n_done"], gold.my_tasks(s, "li")[0]["n_assigned"]) == (1, 6)
        # annotation writes neither decisions nor training pairs: gold stays out of the engine's history
        assert services.decisions_frame(s).empty and services.training_pairs_frame(s).empty
        assert services.coded_mentions(s, world["vocabulary_id"]) == []


# ------------------------------------------------------------------ dashboard frames
def sug(mention: str, ranked: list[str], chosen: list[str], version: str, count: int | None = None) -> Suggestion:
    cands = [Candidate(i, t, 1.0 - 0.1 * i, {"bm25": 1.0 - 0.1 * i}, []) for i, t in enumerate(ranked)]
    return Suggestion(mention=mention, candidates=cands, predicted_count=count or len(chosen), chosen=chosen,
                      confidence=0.5, keywords=[], model_version=version)


def test_dashboard_frames_and_numbers_by_hand(world):
    """4 decisions on suggestions of model v1 and gold from a task; every number below is counted by hand.

    m1 accept [A]                         top-1 yes, top-5 yes, rejected no
    m2 correct to [C] (rank 3 of shown)   top-1 no,  top-5 yes, rejected no
    m3 reject                             top-1 no,  top-5 no,  rejected yes
    m4 correct to [D] (not shown)         top-1 no,  top-5 no,  rejected yes
    -> top-1 1/4, top-5 2/4, rejected 2/4.
    Gold (agreed by li and wang): m1 A, m2 C, m3 B, m4 D, m5 C, m6 A.
    v1 chose A, A, A, A, C, B   -> right on m1, m5            accuracy 2/6
    v2 chose A, C, B, B, C, A   -> right on m1, m2, m3, m5, m6 accuracy 5/6
    """
    mids = world["mentions"]
    shown = [A, B, C, "甲状腺部分切除术", "甲状腺病损射频消融术"]
    ranked = shown + [D]
    with services.session_scope(world["url"]) as s:
        texts = [services.mention(s, m)["text"] for m in mids]
        v1 = [A, A, A, A, C, B]
        v2 = [A, C, B, B, C, A]
        services.store_suggestions(s, mids, [sug(t, ranked, [c], "v1", count=1 + (i == 1)) for i, (t, c)
                                             in enumerate(zip(texts, v1))])
        services.record_decision(s, mids[0], "coder1", "accept", seconds=10)
        services.record_decision(s, mids[1], "coder1", "correct", [C], seconds=30)
        services.record_decision(s, mids[2], "coder1", "reject", seconds=20)
        services.record_decision(s, mids[3], "coder1", "correct", [D], seconds=40)
        services.store_suggestions(s, mids, [sug(t, ranked, [c], "v2") for t, c in zip(texts, v2)])
        tid = gold.create_gold_task(s, "lead1", "t", world["batch_id"], ["li", "wang"])
        gold_sets = [A, C, B, D, C, A]
        annotate_all(s, tid, mids, {"li": gold_sets, "wang": gold_sets})

        dec = dashboard_data.decisions_frame(s, vocabulary_id=world["vocabulary_id"])
        assert dec["shown"].tolist() == [shown] * 4  # the top SHOWN_CANDIDATES names, best first
        assert dec["predicted_count"].tolist() == [1, 2, 1, 1]
        acc = dashboard.acceptance(dec).summary
        assert (acc["n"], acc["top1"], acc["topk"], acc["rejected_all"]) == (4, 0.25, 0.5, 0.5)

        g = dashboard_data.gold_predictions(s, world["vocabulary_id"])
        assert len(g) == 12 and set(g["model_version"]) == {"v1", "v2"} and set(g["gold_source"]) == {"agreed"}
        assert g[g.model_version == "v2"]["ranked"].iloc[0] == ranked
        table = dashboard.model_accuracy(g, ranked_col="ranked", count_col="predicted_count").table
        assert table.set_index("model_version")["accuracy"].to_dict() == pytest.approx({"v1": 2 / 6, "v2": 5 / 6})
        # the coders' accept/correct of m1, m2, m4 came before v2's suggestions: flagged as seen
        seen = g[g.model_version == "v2"].set_index("mention_id")["seen_in_history"]
        assert seen.to_dict() == {mids[0]: True, mids[1]: True, mids[2]: False, mids[3]: True, mids[4]: False,
                                  mids[5]: False}
        assert not g[g.model_version == "v1"]["seen_in_history"].any()

        assert dashboard_data.unscored_gold(s, "v3", world["vocabulary_id"]) == [
            {"mention_id": m, "text": t} for m, t in zip(mids, texts)]
        assert dashboard_data.unscored_gold(s, "v2", world["vocabulary_id"]) == []

        data = dashboard_data.load_dashboard(s, "lead1", world["vocabulary_id"])
        assert len(data.decisions) == 4 and len(data.history) == 4 and len(data.gold) == 12
        errors = dashboard.errors_by_chapter(data.decisions, data.chapter_of, data.category_of)
        assert errors.summary["n_errors"] == 2  # C (m2) and D (m4) missing from v1's sets
        assert dashboard.count_confusion(data.decisions).summary["count_accuracy"] == pytest.approx(2 / 3)
        assert math.isclose(dashboard.coder_throughput(data.history).table["median_seconds"].iloc[0], 25.0)


def test_file_gold_is_optional_and_gold_labels_win(world):
    with services.session_scope(world["url"]) as s:
        from termnorm.records import LabelledMention

        bid = services.create_batch(s, "labelled", world["vocabulary_id"],
                                    [LabelledMention("甲状腺全切", [C]), LabelledMention("LC", [D])])
        m1, m2 = [m["id"] for m in services.mentions(s, bid)]
        services.store_suggestions(s, [m1, m2], [sug("甲状腺全切", [C], [C], "v1"), sug("LC", [A], [A], "v1")])
        assert dashboard_data.gold_predictions(s, world["vocabulary_id"]).empty
        other = services.create_batch(s, "unlabelled", world["vocabulary_id"], ["甲状腺全切"])
        assert dashboard_data.file_gold_count(s, world["vocabulary_id"]) == 2
        assert [dashboard_data.file_gold_count(s, world["vocabulary_id"], b) for b in (bid, other)] == [2, 0]
        assert dashboard_data.file_gold_count(s, world["vocabulary_id"] + 1000) == 0
        g = dashboard_data.gold_predictions(s, world["vocabulary_id"], include_file_gold=True)
        assert g[["mention_id", "gold_source"]].values.tolist() == [[m1, "file"], [m2, "file"]]
        tid = gold.create_gold_task(s, "lead1", "t", bid, ["li", "wang"])
        annotate_all(s, tid, [m2], {"li": [A], "wang": [A]})  # the team decided otherwise for "LC"
        g = dashboard_data.gold_predictions(s, world["vocabulary_id"], include_file_gold=True).set_index("mention_id")
        assert g.loc[m2, "gold_source"] == "agreed" and g.loc[m2, "gold_terms"] == [A]
