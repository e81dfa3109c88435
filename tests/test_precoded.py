"""A pre-coded file (termnorm normalize --input/--output, the real engine) imported into the app as a batch with
its own suggestions, and the batch's queue orders; on SQLite and PostgreSQL."""

from __future__ import annotations

import csv
import json
import subprocess
import sys

import pandas as pd
import pytest
from sqlalchemy import func, select

from db import precoded, services as S
from db.models import Mention
from termnorm.batch import BatchOptions, PrecodeJob
from termnorm.engine import Engine, demo_mentions, demo_vocabulary
from tests.helpers import REPO


@pytest.fixture(scope="module")
def precoded_file(tmp_path_factory):
    """40 demo mentions, mention i on 40 - i rows (so frequency orders them), one empty row, pre-coded."""
    d = tmp_path_factory.mktemp("precoded")
    texts = [m.text for m in demo_mentions()[:40]]
    rows = [(f"r{i}-{j}", t) for i, t in enumerate(texts) for j in range(40 - i)]
    rows.insert(5, ("empty", ""))
    with open(d / "history.csv", "w", encoding="utf-8", newline="") as f:
        w = csv.writer(f)
        w.writerow(["record_id", "mention"])
        w.writerows(rows)
    PrecodeJob(d / "history.csv", d / "precoded.csv", {}, BatchOptions(keep=["record_id"], progress=False)).run()
    return d / "precoded.csv", texts


@pytest.fixture
def db(url):
    S.init_db(url)
    with S.session_scope(url) as s:
        yield s, S.load_vocabulary(s, demo_vocabulary("procedures"), "procedures")
    S.dispose(url)


def test_a_precoded_file_becomes_a_batch_with_its_own_suggestions(db, precoded_file, tmp_path):
    s, vid = db
    path, texts = precoded_file
    out = pd.read_csv(path, dtype=str, keep_default_na=False)
    # one row of the file names a term this vocabulary lacks (coded against another edition)
    bad_at = out.index[out["mention"] == texts[3]][0]
    cands = json.loads(out.at[bad_at, "candidates"])
    cands.append(["不存在的术语", "99.9999", 0.001])
    out.loc[out["mention"] == texts[3], "candidates"] = json.dumps(cands, ensure_ascii=False)
    out.loc[len(out)] = {**{c: "" for c in out.columns}, "row": "999", "mention": "  "}  # a blank mention
    edited = tmp_path / "precoded.csv"
    out.to_csv(edited, index=False)
    assert precoded.is_precoded(edited) and not precoded.is_precoded(REPO / "assets" / "demo" / "mentions.csv")
    # JSON lines have no header: a plain mention file (mention + document, as the Import page takes) is not one
    plain = tmp_path / "notes.jsonl"
    plain.write_text(json.dumps({"mention": "PCI术后", "document": "经皮冠状动脉介入治疗（PCI）"}) + "\n", encoding="utf-8")
    as_jsonl = tmp_path / "precoded.jsonl"
    as_jsonl.write_text(json.dumps({c: out.iloc[0][c] for c in out.columns}, ensure_ascii=False) + "\n", encoding="utf-8")
    assert not precoded.is_precoded(plain) and precoded.is_precoded(as_jsonl)
    # an empty upload is no pre-coded file: the Import page said "every row was rejected" with nothing to show
    empty = tmp_path / "empty.csv"
    empty.write_bytes(b"")
    header_only = tmp_path / "header.csv"
    out.head(0).to_csv(header_only, index=False)
    assert not precoded.is_precoded(empty) and precoded.is_precoded(header_only)
    assert S.import_mentions(s, empty, "e", vid).summary().endswith("; empty file")

    report = precoded.import_precoded(s, edited, "history 2025", vid, shown_name="precoded.csv")
    assert report.batch_id is not None and report.n_mentions == len(texts)
    assert report.n_read == len(out) and report.n_rejected == 1 and report.n_imported == len(out) - 1
    assert report.rejected[0].row == len(out) + 1  # the file's line (header = 1)
    assert any("不存在的术语" in n.problem for n in report.notices)
    ms = S.mentions(s, report.batch_id)
    assert [m["text"] for m in ms] == texts  # one mention per distinct text, in the file's order
    freq = dict(s.execute(select(Mention.text, Mention.frequency).where(Mention.batch_id == report.batch_id)).all())
    assert freq == {t: 40 - i for i, t in enumerate(texts)}
    # the stored suggestion is the file's (no engine ran): chosen terms, confidence, candidates with codes
    first = out.drop_duplicates("mention").set_index("mention")
    for m in ms[:10]:
        sug = S.latest_suggestion(s, m["id"])
        row = first.loc[m["text"]]
        assert sug.chosen == row["chosen_terms"].split(" ## ") and abs(sug.confidence - float(row["confidence"])) < 1e-9
        assert sug.model_version == "precoded:" + row["model_version"]
        assert [(c.term, c.code) for c in sug.candidates] == [
            (t, code) for t, code, _ in json.loads(row["candidates"]) if t != "不存在的术语"]
        assert m["status"] == "suggested"
    # and how the pre-computing engine read each text, which exports give beside the decision (LC → 腹腔镜下胆囊切除术)
    read = {m["text"]: S.latest_suggestion(s, m["id"]).spelled_out for m in ms}
    assert read == {t: first.loc[t, "spelled_out"] for t in texts} and sum(map(bool, read.values())) >= 3
    # served most frequent text first; a lead switches the order, the queue follows
    assert S.batches(s, vid)[-1]["queue_order"] == "frequency"
    assert S.next_mention(s, report.batch_id, "ann", claim=False)["text"] == texts[0]
    conf = {m["text"]: S.latest_suggestion(s, m["id"]).confidence for m in ms}
    S.set_queue_order(s, report.batch_id, "confidence")
    # what the page prepares ahead (db.engine_holder) follows the same order
    assert S.mentions(s, report.batch_id, order=S.queue_order(s, report.batch_id), limit=1)[0]["text"] == max(
        conf, key=conf.get)
    assert S.next_mention(s, report.batch_id, "ann", claim=False)["text"] == max(conf, key=conf.get)
    S.set_queue_order(s, report.batch_id, "uncertainty")
    assert S.next_mention(s, report.batch_id, "ann", claim=False)["text"] == min(conf, key=conf.get)
    with pytest.raises(ValueError, match="unknown order"):
        S.set_queue_order(s, report.batch_id, "random")
    # a file written before the reading column imports as before, every text read as written
    out.drop(columns="spelled_out").to_csv(tmp_path / "older.csv", index=False)
    # its texts are those of the batch above: not imported twice unless asked
    assert precoded.import_precoded(s, tmp_path / "older.csv", "older", vid).duplicate_of["id"] == report.batch_id
    older = precoded.import_precoded(s, tmp_path / "older.csv", "older", vid, again=True)
    assert older.n_mentions == len(texts) and older.n_rejected == 1  # the blank mention, as above
    assert {S.latest_suggestion(s, m["id"]).spelled_out for m in S.mentions(s, older.batch_id)} == {""}


def test_termnorm_import_precoded_from_the_command_line(precoded_file, tmp_path):
    path, texts = precoded_file
    url = f"sqlite:///{tmp_path / 'app.sqlite3'}"
    S.init_db(url)
    with S.session_scope(url) as s:
        S.load_vocabulary(s, demo_vocabulary("procedures"), "procedures")
    S.dispose(url)
    run = [sys.executable, "-m", "termnorm.cli", "import-precoded", str(path), "--db", url]
    p = subprocess.run(run + ["--vocabulary", "nope"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert p.returncode == 2 and "no vocabulary 'nope'" in p.stderr and "procedures" in p.stderr
    p = subprocess.run(run + ["--vocabulary", "procedures", "--batch", "h"], cwd=REPO, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    # the empty row never reached the pre-coded file (the batch job listed it in precoded.csv.bad_rows.csv)
    assert f"{sum(40 - i for i in range(40))} rows read" in p.stdout and "0 rejected" in p.stdout
    assert "hold 40 distinct texts" in p.stdout
    with S.session_scope(url) as s:
        b = S.batches(s)[-1]
        assert (b["name"], b["n_mentions"], b["queue_order"]) == ("h", 40, "frequency")
    S.dispose(url)
    p = subprocess.run(run + ["--vocabulary", "procedures"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert p.returncode == 2 and f"batch #{b['id']} 'h' holds its 40 mentions already" in p.stderr
    p = subprocess.run(run + ["--vocabulary", "procedures", "--batch", "h", "--again"], cwd=REPO, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0 and "a batch named 'h' exists already: this one is 'h (2)'" in p.stdout, p.stderr
    # a user test: a missing file was "not a pre-coded file", and a file pre-coded against the procedures was
    # imported into the diagnoses with a notice per row
    missing = [a if a != str(path) else str(tmp_path / "nonexist.parquet") for a in run]
    p = subprocess.run(missing + ["--vocabulary", "procedures"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert p.returncode == 2 and "nonexist.parquet" in p.stderr and "no such file" in p.stderr, p.stderr
    with S.session_scope(url) as s:
        S.load_vocabulary(s, demo_vocabulary("diagnoses"), "diagnoses")
        n_batches = len(S.batches(s))
    S.dispose(url)
    p = subprocess.run(run + ["--vocabulary", "diagnoses"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert p.returncode == 2 and "pre-coded against another vocabulary" in p.stderr and "of the 40 suggested" in \
        p.stderr, p.stderr
    with S.session_scope(url) as s:
        assert len(S.batches(s)) == n_batches  # nothing imported
    S.dispose(url)


def test_the_coding_page_serves_the_files_suggestion_and_a_failed_import_leaves_nothing(db, precoded_file,
                                                                                       monkeypatch):
    from db.engine_holder import EngineHolder
    from db.models import Batch, Suggestion as SuggestionRow

    s, vid = db
    path, texts = precoded_file
    report = precoded.import_precoded(s, path, "h", vid)
    holder = EngineHolder(Engine.from_demo(), vid)
    ms = S.mentions(s, report.batch_id)
    before = s.scalar(select(func.count()).select_from(SuggestionRow))
    assert holder.prepare(s, report.batch_id, ms[0]["id"], 3) == 0  # nothing to prepare: the file's are there
    sug = holder.suggestion(s, ms[0]["id"], ms[0]["text"])
    assert sug.model_version.startswith("precoded:") and len(sug.candidates) == 5
    assert s.scalar(select(func.count()).select_from(SuggestionRow)) == before
    # a coder teaches the engine a similar mention: that one is suggested again (the decision takes effect)
    holder.learn(ms[0]["text"] + "术", ["甲状腺病损切除术"])
    assert not holder.suggestion(s, ms[0]["id"], ms[0]["text"]).model_version.startswith("precoded:")

    # a run stopped half-way (a reload, a second click: Streamlit stops the script) leaves no batch behind
    n_batches = len(S.batches(s, vid))

    def stop(done, total):
        raise KeyboardInterrupt("the page was reloaded")

    monkeypatch.setattr(precoded, "STORE_CHUNK", 10)  # several chunks: the stop comes after the first
    with pytest.raises(KeyboardInterrupt):
        precoded.import_precoded(s, path, "stopped", vid, progress=stop, again=True)  # batch "h" holds its texts
    assert len(S.batches(s, vid)) == n_batches and s.scalar(select(Batch.id).where(Batch.name == "stopped")) is None
    # the same name again gets a number, said in a notice
    again = precoded.import_precoded(s, path, "h", vid, again=True)
    assert S.batches(s, vid)[-1]["name"] == "h (2)" and any("exists already" in n.problem for n in again.notices)


def test_unusable_suggestion_cells_are_notices_not_crashes(db, precoded_file, tmp_path):
    s, vid = db
    path, texts = precoded_file
    out = pd.read_csv(path, dtype=str, keep_default_na=False).drop_duplicates("mention").head(6).reset_index(drop=True)
    out.loc[0, "candidates"] = "5"
    out.loc[1, "candidates"] = json.dumps([["甲状腺病损切除术", "06.3100", "abc"]], ensure_ascii=False)
    out.loc[2, "candidates"] = json.dumps([[None, 3, "x"]])
    out.loc[3, "confidence"] = "nan"
    out.loc[4, "confidence"] = "7.5"
    out.loc[5, "predicted_count"] = ""
    bad = tmp_path / "bad.csv"
    out.to_csv(bad, index=False)
    report = precoded.import_precoded(s, bad, "bad", vid)
    assert report.batch_id is not None and report.n_mentions == 6
    unusable = sorted(n.row for n in report.notices if "not usable" in n.problem)
    assert unusable == [2, 3, 4, 5, 6], report.notices
    ms = S.mentions(s, report.batch_id)
    assert [S.latest_suggestion(s, m["id"]) is None for m in ms] == [True] * 5 + [False]
    last = S.latest_suggestion(s, ms[5]["id"])
    assert last.predicted_count == len(last.chosen) >= 1  # an empty count: the chosen terms' number
    plain = precoded.import_precoded(s, REPO / "assets" / "demo" / "mentions.csv", "plain", vid)
    assert plain.batch_id is None and "not a pre-coded file" in plain.file_problems[0].problem
