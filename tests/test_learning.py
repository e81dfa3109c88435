"""The learning loop on real data (issue 23, items 1-2): the evaluation split (stratified, fixed by a seed, a
lead's to change, audited, given to new labelled imports), ``termnorm load-data`` (what it loads and skips, no
training mention left open, the background fit), a promotion every page sees, rollback to the shipped model,
and confidence in words."""

from __future__ import annotations

import math
import re
from collections import Counter
from pathlib import Path

import pytest
from conftest import fresh_url
from job_targets import SLEEP, workers_import_tests
from streamlit.testing.v1 import AppTest

from db import learning, loader, services as S, serving
from db import retrain as R
from termnorm import refit as F
from termnorm.engine import Engine, demo_mentions, demo_vocabulary
from termnorm.jobs import JobRunner, lock_key
from termnorm.records import LabelledMention
from termnorm.registry import Registry
from termnorm.text.normalize import normalize

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data"
VOCAB = "demo-procedures"
needs_data = pytest.mark.skipif(not (DATA / "yidu-n7k" / "val.xlsx").is_file(), reason="shared data absent")


@pytest.fixture
def url(backend, tmp_path, request, monkeypatch):
    u = fresh_url(backend, tmp_path, request)  # a fresh database of each backend (conftest)
    monkeypatch.setenv("TERMNORM_DB_URL", u)
    monkeypatch.setenv("TERMNORM_MODELS", str(tmp_path / "models"))
    monkeypatch.setenv("TERMNORM_JOBS", str(tmp_path / "jobs"))
    monkeypatch.setenv("TERMNORM_DEVICE", "cpu")  # the worker need not import torch to find out
    monkeypatch.setenv("TERMNORM_FIT_THREADS", "1")
    yield u
    S.dispose(u)


@pytest.fixture
def demo(url):
    """The demo procedures with every mention labelled (one batch) and a lead."""
    with S.session_scope(url) as s:
        vid = S.load_vocabulary(s, demo_vocabulary("procedures"), VOCAB)
        S.ensure_user(s, "lead1", role="lead")
        S.ensure_user(s, "coder1", role="coder")
        bid = S.create_batch(s, "labelled", vid, demo_mentions("procedures"))
    return {"url": url, "vid": vid, "bid": bid}


def sides(url: str, vid: int) -> dict[str, str]:
    with S.session_scope(url) as s:
        return {normalize(m["text"]): m["split"] for m in learning.labelled_mentions(s, vid)}


# ------------------------------------------------------------------------------------- the split
def test_the_draw_is_stratified_by_chapter_and_fixed_by_the_seed():
    chapters = {f"t{i}": "ABCDE"[i % 5] if i < 950 else "Z" for i in range(1000)}  # 50 in the rare chapter Z
    a = learning.draw_split(chapters, 0.2, seed=7)
    assert a == learning.draw_split(dict(reversed(chapters.items())), 0.2, seed=7)  # order does not matter
    assert a != learning.draw_split(chapters, 0.2, seed=8)
    assert sum(v == "eval" for v in a.values()) == 200
    per = Counter(chapters[t] for t, v in a.items() if v == "eval")
    size = Counter(chapters.values())
    for ch, n in size.items():  # every chapter gets its share, to within one mention
        assert math.floor(0.2 * n) <= per[ch] <= math.ceil(0.2 * n), (ch, per[ch], n)


def test_labelled_mentions_get_a_side_when_imported_and_a_lead_can_change_the_split(demo):
    url, vid = demo["url"], demo["vid"]
    first = sides(url, vid)
    assert set(first.values()) == {"train", "eval"}
    n_eval = sum(v == "eval" for v in first.values())
    assert abs(n_eval - 0.2 * len(first)) <= 1
    with S.session_scope(url) as s:
        assert learning.split_settings(s, vid)["set_by"] == "default"  # shown as the defaults
        with pytest.raises(PermissionError):
            learning.assign_split(s, vid, 0.3, 1, "coder1")  # a lead's decision
        with pytest.raises(ValueError, match="must lie in"):
            learning.assign_split(s, vid, 0.9, 1, "lead1")
    assert sides(url, vid) == first  # nothing changed

    with S.session_scope(url) as s:
        out = learning.assign_split(s, vid, 0.3, 1, "lead1")
        audit = S.audit_frame(s)
    assert out["share"] == 0.3 and out["seed"] == 1 and out["set_by"] == "lead1"
    second = sides(url, vid)
    assert second != first and abs(sum(v == "eval" for v in second.values()) - 0.3 * len(second)) <= 1
    row = audit[audit["action"] == "set_eval_split"].iloc[0]
    assert row["user"] == "lead1" and row["details"]["old"]["share"] == 0.2 and row["details"]["new"]["seed"] == 1

    with S.session_scope(url) as s:  # the same settings again: the same sides (fixed by the seed)
        learning.assign_split(s, vid, 0.3, 1, "lead1")
    assert sides(url, vid) == second

    # a later import: its labelled mentions are drawn with the stored settings; a known text keeps its side,
    # a mention whose gold name the vocabulary lacks gets none
    names = demo_vocabulary("procedures").names
    fresh = [LabelledMention(m.text, [names[i]]) for i, m in enumerate(demo_mentions("diagnoses")[:40])]
    known = demo_mentions("procedures")[3]
    with S.session_scope(url) as s:
        b2 = S.create_batch(s, "later", vid, [known, *fresh, LabelledMention("外星手术", ["不存在的术语"])])
        rows = {m["text"]: m for m in learning.labelled_mentions(s, vid)}
        later = [m for m in S.mentions(s, b2)]
        summary = learning.split_summary(s, vid)
    assert rows[known.text]["split"] == second[normalize(known.text)]
    assert all(m["text"] in rows for m in later[:-1]) and "外星手术" not in rows
    assert summary["unassigned"] == 1 and summary["train"] + summary["eval"] == summary["labelled"] - 1
    new_eval = sum(rows[m["text"]]["split"] == "eval" for m in later[1:-1])
    assert abs(new_eval - 0.3 * 40) <= 1


def test_labelled_training_mentions_train_and_a_coders_decision_wins(demo):
    url, vid, bid = demo["url"], demo["vid"], demo["bid"]
    with S.session_scope(url) as s:
        learning.assign_split(s, vid, 0.3, 0, "lead1")  # >= MIN_GOLD held out: no hashed share of coded ones
        ms = S.mentions(s, bid)
        side = {r["id"]: r["split"] for r in learning.labelled_mentions(s, vid)}
        train = [m for m in ms if side[m["id"]] == "train"]
        held = [m for m in ms if side[m["id"]] == "eval"]
        vocab = demo_vocabulary("procedures")
        S.record_decision(s, train[0]["id"], "coder1", "correct", [vocab.names[0]])  # a coder's answer wins
        S.record_decision(s, train[1]["id"], "coder1", "reject")  # "none fits": its label is not used
        S.record_decision(s, held[0]["id"], "coder1", "accept", held[0]["gold_terms"])  # held out stays out
        data = R.training_data_from_db(s, vid)
    got = {m.text: m.terms for m in data.coded}
    assert got[train[0]["text"]] == [vocab.names[0]] and train[1]["text"] not in got
    assert all(got[m["text"]] == m["gold_terms"] for m in train[2:])
    assert {m.text for m in data.gold} == {m["text"] for m in held} and held[0]["text"] not in got
    assert data.labelled_train == len(train) - 2 and "evaluation side of the split" in data.gold_source


# ------------------------------------------------------------------------------------- load-data
@needs_data
def test_load_data_says_what_it_skips_leaves_no_training_mention_open_and_gives_the_loop_training_data(url, capsys):
    res = loader.load(DATA, url, limit=150, progress=False)
    out = capsys.readouterr().out
    assert res.code == 0 and len(res.vocabularies) == 4 and len(res.labelled) == 3  # NCBI / MEDIC included
    assert "skipped chip-cdn/unlabeled.json: mentions without labels" in out
    assert "skipped symptoms:" in out and "skipped keywords:" in out
    chip = res.vocabularies["ICD-10 北京临床版 v601 (CHIP-CDN)"]
    with S.session_scope(url) as s:
        for vid in res.labelled:
            for b in S.batches(s, vid):
                if b["name"].endswith("(coded)"):  # no training mention waits in the coding queue
                    assert S.mentions(s, b["id"], status=S.OPEN_STATUSES) == []
        cb = next(b for b in S.batches(s, chip) if b["name"].endswith("(coded)"))
        rejected = S.decisions_frame(s, cb["id"]).query("action == 'reject'")
        yidu = res.vocabularies["ICD-9-2017 协和临床版 (Yidu-N7K)"]
        data = R.training_data_from_db(s, yidu)
        summary = learning.split_summary(s, yidu)
        pipeline = {vid: learning.pipeline_settings(s, vid) for vid in (yidu, chip)}
        from db import abbreviations
        listed = dict(abbreviations.abbreviations(s, yidu))
    assert len(rejected) == res.rejected_missing["CHIP-CDN train (coded)"] > 0
    assert all(c.startswith(loader.MISSING_COMMENT) for c in rejected["comment"])
    assert f"{len(rejected)} with gold names not in the vocabulary" in out
    # the labelled sets are training data now (the old "too few coded mentions to train on: 1 < 8"), split as
    # their files are: the train file trains, val is held out (the cold-start ranker learnt from train files)
    assert summary["by_file"] == {"Yidu-N7K val": "eval", "Yidu-N7K train (coded)": "train"}
    assert summary["train"] == summary["eval"] == 150
    assert "the official one of the files, 150 training and 150 held-out" in out
    assert len(data.coded) >= 140 and len(data.gold) == 150 and not ({m.text for m in data.coded}
                                                                      & {m.text for m in data.gold})
    # each set's pipeline settings, as the README measures them, and the abbreviation list for search
    assert pipeline[yidu]["recall_profile"] == "compact" and pipeline[yidu]["keyword_dir"].endswith("keywords")
    assert (pipeline[chip]["recall_profile"], pipeline[chip]["max_candidates"],
            pipeline[chip]["output_rule_metric"]) == ("deep", 50, "micro_f1")
    assert listed["pci"] == "经皮冠状动脉介入治疗" and len(listed) >= 150


@needs_data
def test_load_data_fits_in_the_background_and_the_promoted_model_beats_the_shipped_one(deployment_url, tmp_path,
                                                                                      capsys):
    """The real path: ``termnorm load-data`` (NCBI disease / MEDIC: English, so the shipped model is the lexical
    pipeline without a cold-start ranker) -> the first fit as the app's background job (a real subprocess) ->
    gated against the shipped model on the held-out split -> promoted, serving, with confidence words."""
    from termnorm.cli import main

    url = deployment_url
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "ncbi-disease").symlink_to(DATA / "ncbi-disease")  # the shared files, read in place
    # 2,000 rows: 808 coded mentions, enough for the fitted model to beat recall order by more than a few mentions
    assert main(["load-data", str(folder), "--db", url, "--limit", "2000", "--wait"]) == 0
    out = capsys.readouterr().out
    assert "fitting the full pipeline in the background" in out and " promoted: better" in out
    with S.session_scope(url) as s:
        vid = S.vocabulary_id(s, "MEDIC 2012-07-06 (NCBI disease)")
    with S.session_scope(url) as s:
        reg = serving.registry(s, vid)
    v1 = reg.current_version()
    assert v1 == f"{reg.name}-v1" and serving.serving_version(url, vid) == v1
    g = reg.get(v1)["gate"]
    assert g["promoted"] and g["current_version"] == reg.shipped_name() and g["gold_n"] >= 100
    assert g["candidate"] > g["current"] and g["only_candidate"] > g["only_current"]
    assert reg.get(reg.shipped_name())["metrics"]["accuracy"] == pytest.approx(g["current"])
    assert reg.confidence_bands()["measured"] and learning.serving_bands(url, vid) == reg.confidence_bands()
    pairs = reg.get(v1)["pairs"]  # the train file's mentions, decided by the import user, trained it
    assert F.MIN_TRAIN <= pairs["positives_coded"] + pairs["positives_labelled"]
    assert serving.build_engine(url, vid, v1).model_version == v1  # what every page now serves
    assert learning.start_first_fit_if_needed(url, vid, "import") is None  # fitted: nothing to start


# ------------------------------------------------------------------------------------- promotion and rollback
def _coding_page(vid: int, bid: int) -> AppTest:
    at = AppTest.from_file(str(REPO / "app_pages" / "coding_queue.py"), default_timeout=90)
    at.session_state["username"] = "coder1"
    at.session_state["vocabulary_id"] = vid
    at.session_state["batch_id"] = bid
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def _markup(at: AppTest) -> str:
    return "\n".join(m.value for m in at.markdown)


def test_a_promotion_reaches_the_coding_page_and_rolling_back_to_the_shipped_model_is_one_click(demo, monkeypatch):
    from app_pages import _ui

    monkeypatch.setenv("TERMNORM_AUTH", "off")
    url, vid = demo["url"], demo["vid"]
    ms = demo_mentions("procedures")
    with S.session_scope(url) as s:
        bid = S.create_batch(s, "to code", vid, [m.text for m in ms[:5]])
    reg = Registry.for_vocabulary(VOCAB)
    shipped_version = serving.build_engine(url, vid, None).model_version
    at = _coding_page(vid, bid)
    # the shipped model in words, its id in the tooltip
    assert shipped_version.startswith("pretrained:") and "confidence not measured yet" in _markup(at)
    assert f'model: <span title="{shipped_version}">the shipped model (not yet fitted on this hospital' in _markup(at)

    with F.limited_threads():
        eng = Engine(demo_vocabulary("procedures"), history=ms[:60])
        eng.fit_lexical(ms[:60])
        metrics, preds = F.evaluate_on_gold(eng, ms[60:])
    v1 = reg.register(eng, metrics, gold_predictions=preds)
    reg.promote(v1, force=True, by="lead1")  # the demo's 59 held-out mentions are below the gate's minimum
    assert serving.serving_version(url, vid) == v1
    _coding_page(vid, bid)  # the coder goes on with the model before while v1 loads in the background
    assert _ui.serving_switch(url, vid).settled(120)
    at = _coding_page(vid, bid)
    page = _markup(at)
    assert f"model: {v1}<" in page and "confidence not measured yet" not in page
    assert any(w in page for w in ("sure · ", "likely · ", ">unsure<"))  # words, not a bare percentage

    # another vocabulary's failed job is not this page's business
    workers_import_tests(monkeypatch)
    runner = JobRunner()
    other = runner.start(SLEEP, {"steps": 1, "fail_at": 0}, title="retrain · another",
                         lock=lock_key("retrain", vid + 1), tags={"kind": "retrain", "vocabulary_id": vid + 1})
    assert runner.wait(other, timeout=60)["state"] == "failed"

    # the lead's one click: Roll back with the shipped version picked, on the Training page
    tp = AppTest.from_file(str(REPO / "app_pages" / "training.py"), default_timeout=90)
    tp.session_state["username"] = "lead1"
    tp.session_state["vocabulary_id"] = vid
    tp.run()
    assert not tp.exception, [e.value for e in tp.exception]
    assert not tp.error and any("No fit or retraining job has run from the app for this vocabulary" in c.value
                                for c in tp.caption)
    assert tp.button(key="rollback").disabled  # the newest row, v1, is picked first: it serves
    tp.selectbox(key="pick_version").set_value(reg.shipped_name())
    tp.run()
    assert not tp.button(key="rollback").disabled and tp.button(key="promote").disabled
    tp.button(key="rollback").click()
    tp.run()
    assert not tp.exception, [e.value for e in tp.exception]
    assert reg.current_version() is None and serving.serving_version(url, vid) is None
    assert reg.history()[-1]["action"] == "rollback" and reg.history()[-1]["by"] == "lead1"
    serving_line = next(c.value for c in tp.caption if c.value.startswith("Serving:"))
    assert "the shipped model" in serving_line and "from 300 coded mentions on" in serving_line
    with S.session_scope(url) as s:
        assert f"{len(S.coded_mentions(s, vid)):,} coded now" in serving_line
    _coding_page(vid, bid)
    assert _ui.serving_switch(url, vid).settled(120)
    assert f'model: <span title="{shipped_version}">the shipped model' in _markup(_coding_page(vid, bid))


def test_the_badge_speaks_in_words():
    from app_pages import _ui
    from termnorm.stats import confidence_bands

    preds = [{"confidence": 0.9, "correct": True}] * 60 + [{"confidence": 0.3, "correct": i % 2 == 0}
                                                           for i in range(40)]
    bands = confidence_bands(preds)
    assert "sure · 100%" in _ui.confidence_badge(0.95, bands) and "tn-sure" in _ui.confidence_badge(0.95, bands)
    assert ">unsure<" in _ui.confidence_badge(0.2, bands)
    assert "not measured yet" in _ui.confidence_badge(0.95, None)
    # near 1 the decimals that tell bands apart are shown (a team test read two bands "from confidence 1.00")
    assert [_ui.confidence_text(c) for c in (0.5, 0.987, 0.99963)] == ["0.50", "0.99", "0.9996"]
    assert "model confidence 0.9996" in _ui.confidence_badge(0.99963, bands)
    assert "%" not in _ui.confidence_badge(0.2, bands).split(">")[1]  # no bare percentage on the badge
    assert "below every band measured on 100 held-out mentions" in _ui.confidence_badge(0.2, bands)
    none_reached = confidence_bands([{"confidence": 0.9, "correct": i % 2 == 0} for i in range(60)])
    assert "no confidence level was right 80% of the time on 60" in _ui.confidence_badge(0.95, none_reached)


def test_the_shipped_model_speaks_in_words_measured_on_the_coders_decisions(demo, monkeypatch):
    """No fit measures the shipped model, so every suggestion read "confidence not measured yet" however many
    mentions were coded. From 50 coders' answers on its suggestions on, the words are measured on them: right when
    the coder kept exactly the suggested terms; skips and flags say nothing."""
    from db.engine_holder import build_holder
    from termnorm.stats import confidence_bands

    monkeypatch.setenv("TERMNORM_AUTH", "off")
    monkeypatch.setattr(learning, "DECISION_BANDS_TTL_S", 0.0)  # measured afresh at each call
    url, vid = demo["url"], demo["vid"]
    ms = demo_mentions("procedures")[:74]
    with S.session_scope(url) as s:
        bid = S.create_batch(s, "to code", vid, [m.text for m in ms])
        mids = [m["id"] for m in S.mentions(s, bid)]
    holder = build_holder(url, vid)
    version = holder.engine.model_version
    expected = []
    for i, (mid, m) in enumerate(zip(mids, ms)):
        if i == 49:  # 49 answers: not measured yet, and no held-out measurement either
            assert learning.serving_bands(url, vid, model_version=version) is None
        with S.session_scope(url) as s:
            sug = holder.suggestion(s, mid, m.text)
            if i >= 72:  # a skip and a flag: no answer on the suggestion
                S.record_decision(s, mid, "coder1", "skip" if i == 72 else "flag", comment="?")
                continue
            right = set(sug.chosen) == set(m.terms)
            S.record_decision(s, mid, "coder1", "accept" if right else "correct", m.terms)
            expected.append({"confidence": sug.confidence, "correct": right})
    assert 0 < sum(p["correct"] for p in expected) < len(expected)  # some suggestions were wrong
    bands = learning.serving_bands(url, vid, model_version=version)
    assert bands == dict(confidence_bands(expected), on=learning.ON_DECISIONS) and bands["n"] == 72
    assert learning.serving_bands(url, vid, model_version="another-version") is None  # per version
    with S.session_scope(url) as s:  # a reject is an answer: the suggestion was wrong
        S.record_decision(s, mids[73], "coder1", "reject")
    again = learning.serving_bands(url, vid, model_version=version)
    assert again["n"] == 73 and confidence_bands(expected + [{"confidence": sug.confidence, "correct": False}]) \
        == {k: v for k, v in again.items() if k != "on"}
    # the coding page's badge: in words, and its tooltip says what they were measured on
    with S.session_scope(url) as s:
        page_batch = S.create_batch(s, "next", vid, [demo_mentions("procedures")[80].text])
    page = _markup(_coding_page(vid, page_batch))
    badge = re.search(r'<span class="tn-badge tn-(sure|likely|unsure)" title="([^"]*)"', page)
    assert badge and "confidence not measured yet" not in page, page[:2000]
    assert "73 coders&#x27; decisions on this model&#x27;s suggestions" in badge.group(2) \
        or "measured on coders&#x27; decisions" in badge.group(2), badge.group(2)


def test_an_encoder_trained_on_labelled_mentions_without_folds_is_described_with_a_warning(tmp_path):
    """Set on the Training page, an encoder a data team trained on this hospital's coded mentions without folds
    scores those mentions in-sample at the next fit; the panel said only "N labelled mentions"."""
    import json

    def run(name: str, data: str, n: int) -> str:
        (tmp_path / name / "model").mkdir(parents=True)
        (tmp_path / name / "model" / "termnorm_biencoder.json").write_text("{}")
        (tmp_path / name / "config.json").write_text(json.dumps(
            {"kind": "termnorm.dense", "n_train_mentions": n, "params": {"data": data, "folds": 1}}))
        return learning.describe_encoder(str(tmp_path / name))

    said = run("labelled", "labelled", 4200)
    assert said.startswith("bi-encoder trained on 4,200 labelled mentions") and "not cross-fitted" in said
    assert "--folds" in said and "in-sample" in said
    assert run("vocab", "vocab", 60000) == "bi-encoder trained on the vocabulary's names and synonyms"
