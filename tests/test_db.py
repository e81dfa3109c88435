"""The review database on a real SQLite file: schema, decisions, durability, queue, history."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest
from sqlalchemy import create_engine, func, inspect, select, text, update

from db import decisions as D
from db import models as M
from db import services as S
from termnorm.records import Candidate, KeywordSpan, LabelledMention, Suggestion
from termnorm.vocabulary import Vocabulary

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "assets" / "demo"


def demo_vocabulary() -> Vocabulary:
    """The demo procedure vocabulary if present, else a small hand-made one."""
    v = Vocabulary(name="procedures")
    path = DEMO / "procedures.csv"
    if path.exists():
        with open(path, encoding="utf-8") as f:
            for row in csv.DictReader(f):
                v.add_term(row["name"], [row["code"]], [x for x in (row.get("synonyms") or "").split("|") if x])
    for name, code in [("甲状腺病损切除术", "06.3100"), ("腔镜下甲状腺病损切除术", "06.3101"),
                       ("甲状腺大部切除术", "06.3900"), ("甲状腺全部切除术", "06.4x00"),
                       ("胆囊切除术", "51.2200"), ("腹腔镜下胆囊切除术", "51.2300"),
                       ("部分胆囊切除术", "51.2100"), ("阑尾切除术", "47.0900")]:
        if name not in v:
            v.add_term(name, [code])
    return v


def suggestion_for(mention: str, vocab: Vocabulary, names: list[str], chosen: int = 1,
                   confidence: float = 0.6, version: str = "test-v1") -> Suggestion:
    cands = [Candidate(vocab.index(n), n, 1.0 - 0.1 * i, {"tfidf": 0.9 - 0.1 * i, "dense": 0.5 + i / 100},
                       vocab.codes_of(n)) for i, n in enumerate(names)]
    return Suggestion(mention, cands, chosen, names[:chosen], confidence,
                      [KeywordSpan(0, 2, "site", mention[:2])], version)


FAMILY = ["甲状腺病损切除术", "腔镜下甲状腺病损切除术", "甲状腺大部切除术", "甲状腺全部切除术", "胆囊切除术",
          "腹腔镜下胆囊切除术", "部分胆囊切除术"]
MENTIONS = ["右侧甲状腺肿块切除", "腔镜下右甲状腺结节切除术", "甲状腺次全切除术", "LC", "阑尾切除"]


@pytest.fixture
def setup(url):
    """A migrated database with the demo vocabulary and one batch of MENTIONS (with suggestions)."""
    vocab = demo_vocabulary()
    S.init_db(url)
    with S.session_scope(url) as s:
        vid = S.load_vocabulary(s, vocab, "procedures")
        bid = S.create_batch(s, "batch-1", vid, MENTIONS, username="lead1")
        ids = [m["id"] for m in S.mentions(s, bid)]
        S.store_suggestions(s, ids, [suggestion_for(t, vocab, FAMILY) for t in MENTIONS])
    return {"url": url, "vocab": vocab, "vid": vid, "bid": bid, "ids": ids}


def pairs(s, mention_id, active=True):
    q = select(M.TrainingPair.term, M.TrainingPair.label, M.TrainingPair.kind).where(
        M.TrainingPair.mention_id == mention_id, M.TrainingPair.active == active)
    return sorted(tuple(r) for r in s.execute(q))


# ------------------------------------------------------------------ schema
def test_migrations_create_the_schema(url):
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext
    from alembic.script import ScriptDirectory
    from alembic.config import Config

    eng = S.init_db(url)
    head = ScriptDirectory.from_config(Config(str(S.ALEMBIC_INI))).get_current_head()
    with eng.connect() as c:
        assert c.execute(text("SELECT version_num FROM alembic_version")).scalar_one() == head >= "0001"
        if c.dialect.name == "sqlite":
            assert c.execute(text("PRAGMA journal_mode")).scalar_one() == "wal"
            assert c.execute(text("PRAGMA synchronous")).scalar_one() == 2  # FULL
            assert c.execute(text("PRAGMA foreign_keys")).scalar_one() == 1
        else:  # PostgreSQL: every commit waits for the write-ahead log to reach the disk
            assert c.execute(text("SHOW synchronous_commit")).scalar_one() == "on"
        # the migration and the models describe the same schema (no drift)
        assert compare_metadata(MigrationContext.configure(c), M.Base.metadata) == []
    insp = inspect(eng)
    assert set(M.Base.metadata.tables) <= set(insp.get_table_names())
    assert {"ix_mentions_queue", "ix_decisions_mention_latest"} <= {
        i["name"] for t in ("mentions", "decisions") for i in insp.get_indexes(t)}
    # a second init (another Streamlit session, an app restart) is harmless
    S.dispose(url)
    S.init_db(url)


def test_migration_0010_tells_the_stored_api_tokens_from_browser_sessions(url):
    """An API token set as the app's cookie signed in to the web app: tokens now have a kind. Rows stored
    before: one issued for more than a week was an API token (browser sessions last hours)."""
    from datetime import datetime, timedelta, timezone

    from alembic import command
    from alembic.config import Config

    from db import auth

    cfg = Config(str(S.ALEMBIC_INI))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    cfg.attributes["configure_logger"] = False
    command.upgrade(cfg, "0009")
    eng = create_engine(url)
    now = datetime.now(timezone.utc)
    with eng.begin() as c:
        c.execute(text("INSERT INTO users (username, role, created_at) VALUES ('etl', 'coder', :t)"), {"t": now})
        uid = c.execute(text("SELECT id FROM users WHERE username = 'etl'")).scalar_one()
        for i, hours in ((1, 12), (2, 24 * 365)):
            c.execute(text("INSERT INTO user_sessions (user_id, token_sha256, created_at, expires_at) "
                           "VALUES (:u, :h, :t, :e)"), {"u": uid, "h": f"{i:064d}", "t": now,
                                                        "e": now + timedelta(hours=hours)})
    eng.dispose()
    S.init_db(url)  # what the app does at its next start: upgrade head
    with S.session_scope(url) as s:
        kinds = dict(s.execute(select(M.UserSession.token_sha256, M.UserSession.kind)).all())
        assert kinds == {f"{1:064d}": "web", f"{2:064d}": "api"}
        web, api = auth.create_session(s, "etl"), auth.create_api_token(s, "etl")
        assert auth.session_user(s, web)["username"] == "etl" and auth.session_user(s, api) is None
        assert auth.session_user(s, api, kind="api")["username"] == "etl" and auth.session_user(s, web, kind="api") \
            is None


def test_services_starting_at_once_on_an_empty_database_all_get_the_schema(url):
    """The app and the API started at boot on a new database: one failed with a duplicate alembic_version
    (pg_type_typname_nsp_index) while the other created it. The upgrade now waits for the other's."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    code = f"from db import services as S; S.init_db({url!r}); print('ok')"
    procs = [subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(4)]
    outs = [p.communicate(timeout=180) for p in procs]
    assert [p.returncode for p in procs] == [0] * 4, [err[-600:] for _, err in outs]
    eng = create_engine(url)
    with eng.connect() as c:
        assert c.execute(text("SELECT count(*) FROM alembic_version")).scalar_one() == 1
    eng.dispose()


def test_alembic_ini_works_from_the_command_line(tmp_path):
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    db = tmp_path / "cli.sqlite3"
    env = dict(os.environ, TERMNORM_DB_URL=f"sqlite:///{db}")
    r = subprocess.run([sys.executable, "-m", "alembic", "-c", str(REPO / "db" / "alembic.ini"), "upgrade", "head"],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    eng = create_engine(f"sqlite:///{db}")
    with eng.connect() as c:
        head = ScriptDirectory.from_config(Config(str(S.ALEMBIC_INI))).get_current_head()
        assert c.execute(text("SELECT version_num FROM alembic_version")).scalar_one() == head
    assert "decisions" in inspect(eng).get_table_names()
    eng.dispose()


def test_load_vocabulary_is_idempotent_and_extends(url):
    vocab = demo_vocabulary()
    S.init_db(url)
    with S.session_scope(url) as s:
        vid = S.load_vocabulary(s, vocab, "procedures")
        assert S.load_vocabulary(s, vocab, "procedures") == vid
        assert S.vocabularies(s) == [{"id": vid, "name": "procedures", "n_terms": len(vocab), "edition": 1,
                                      "system_uri": ""}]
        vocab.add_term("新加的术式", ["99.9999"])
        assert S.load_vocabulary(s, vocab, "procedures") == vid
        assert S.vocabularies(s)[0]["n_terms"] == len(vocab)
        back = S.vocabulary_from_db(s, vid)
        assert back.names == vocab.names
        assert back.codes_of("甲状腺病损切除术") == vocab.codes_of("甲状腺病损切除术")
        assert back.synonyms == {k: v for k, v in vocab.synonyms.items() if v}


# ------------------------------------------------------------------ suggestions
def test_store_and_read_back_suggestions(setup):
    with S.session_scope(setup["url"]) as s:
        mid = setup["ids"][0]
        sug = S.latest_suggestion(s, mid)
        assert [c.term for c in sug.candidates] == FAMILY
        assert sug.candidates[1].scores == pytest.approx({"tfidf": 0.8, "dense": 0.51})
        assert sug.candidates[0].codes == setup["vocab"].codes_of(FAMILY[0])
        assert sug.keywords == [KeywordSpan(0, 2, "site", MENTIONS[0][:2])]
        assert (sug.model_version, sug.chosen, sug.mention) == ("test-v1", FAMILY[:1], MENTIONS[0])
        # a newer suggestion (new model) wins
        S.store_suggestion(s, mid, suggestion_for(MENTIONS[0], setup["vocab"], FAMILY[::-1], 2, 0.9, "test-v2"))
        sug2 = S.latest_suggestion(s, mid)
        assert (sug2.model_version, sug2.chosen, sug2.confidence) == ("test-v2", FAMILY[::-1][:2], 0.9)
        assert S.mention(s, mid)["status"] == "suggested"
        assert S.latest_suggestion(s, setup["ids"][0] + 1000) is None


# ------------------------------------------------------------------ decisions
def test_accept_writes_decision_positive_pairs_audit_and_status(setup):
    with S.session_scope(setup["url"]) as s:
        mid = setup["ids"][0]
        did = S.record_decision(s, mid, "alice", "accept", seconds=4.5)
        d = s.get(M.Decision, did)
        assert (d.action, d.terms, d.model_version, d.seconds, d.is_latest) == ("accept", FAMILY[:1], "test-v1", 4.5,
                                                                                  True)
        assert d.user.username == "alice" and d.suggestion_id is not None
        assert pairs(s, mid) == [(FAMILY[0], 1, "accepted")]
        assert S.mention(s, mid)["status"] == "decided"
        audit = s.scalars(select(M.AuditLog).where(M.AuditLog.action == "accept")).all()
        assert len(audit) == 1 and audit[0].object_id == mid and audit[0].details["decision_id"] == did
        assert audit[0].username == "alice"


def test_correct_turns_shown_unchosen_candidates_into_hard_negatives(setup):
    with S.session_scope(setup["url"]) as s:
        mid = setup["ids"][1]
        chosen = [FAMILY[1], "阑尾切除术"]  # a shown candidate plus a term found by search
        S.record_decision(s, mid, "alice", "correct", chosen, comment="two terms", shown=4)
        expected = sorted([(FAMILY[1], 1, "corrected"), ("阑尾切除术", 1, "corrected")]
                          + [(t, 0, "rejected_candidate") for t in FAMILY[:4] if t not in chosen])
        assert pairs(s, mid) == expected
        # default: the SHOWN_CANDIDATES top candidates were shown
        S.record_decision(s, mid, "alice", "correct", [FAMILY[2]])
        negs = [t for t, lab, _ in pairs(s, mid) if lab == 0]
        assert sorted(negs) == sorted(t for t in FAMILY[:S.SHOWN_CANDIDATES] if t != FAMILY[2])


def test_reject_makes_all_shown_candidates_negatives(setup):
    with S.session_scope(setup["url"]) as s:
        mid = setup["ids"][2]
        with pytest.raises(ValueError):
            S.record_decision(s, mid, "alice", "reject", [FAMILY[0]])
        S.record_decision(s, mid, "alice", "reject", comment="none fits", shown=3)
        assert pairs(s, mid) == sorted((t, 0, "rejected_candidate") for t in FAMILY[:3])
        m = S.mention(s, mid)
        assert m["status"] == "decided" and m["decision"]["comment"] == "none fits" and m["decision"]["terms"] == []


def test_skip_and_flag_keep_comments_and_shape_the_queue(setup):
    url, ids, bid = setup["url"], setup["ids"], setup["bid"]
    with S.session_scope(url) as s:
        S.ensure_user(s, "boss", role="lead")
        assert S.next_mention(s, bid, "alice")["id"] == ids[0]
        S.record_decision(s, ids[0], "alice", "skip", comment="ask the surgeon")
        S.record_decision(s, ids[1], "alice", "flag", comment="code looks outdated")
        assert pairs(s, ids[0]) == [] and pairs(s, ids[1]) == []
        assert [S.mention(s, i)["status"] for i in ids[:2]] == ["skipped", "flagged"]
        assert S.mention(s, ids[0])["decision"]["comment"] == "ask the surgeon"
        # open mentions first, in file order; the skipped one after them; flagged only for a lead
        assert S.next_mention(s, bid, "alice")["id"] == ids[2]
        for i in ids[2:]:
            S.record_decision(s, i, "alice", "accept")
        # a lead is served the flagged one before the skipped one (a team test's lead skipped the skipped one six
        # times and never reached the flagged one)
        assert S.next_mention(s, bid, "boss", claim=False)["id"] == ids[1]
        # a lead passing it (K) keeps the coder's question: still flagged, alice's flag still the decision in force
        S.record_decision(s, ids[1], "boss", "skip")
        m = S.mention(s, ids[1])
        assert m["status"] == "flagged" and (m["decision"]["user"], m["decision"]["comment"]) == ("alice",
                                                                                              "code looks outdated")
        assert S.next_mention(s, bid, "alice")["id"] == ids[0]
        S.record_decision(s, ids[0], "alice", "accept")
        assert S.next_mention(s, bid, "alice") is None
        assert S.next_mention(s, bid, "boss")["id"] == ids[1]
        S.record_decision(s, ids[1], "boss", "correct", [FAMILY[1]])
        assert S.next_mention(s, bid, "boss") is None
        assert S.batch_progress(s, bid) == (len(ids), len(ids))


def test_skipped_mentions_come_round_in_turn(setup):
    """Once only skipped mentions are left, skipping the one served serves the next: in file order the first
    came back every time and the others could not be reached (a coder's browser test)."""
    url, ids, bid = setup["url"], setup["ids"], setup["bid"]
    with S.session_scope(url) as s:
        for i in ids:
            assert S.next_mention(s, bid, "alice")["id"] == i
            S.record_decision(s, i, "alice", "skip")
        served = []
        for _ in range(len(ids) + 1):
            served.append(S.next_mention(s, bid, "alice")["id"])
            S.record_decision(s, served[-1], "alice", "skip")
        assert served == [*ids, ids[0]]


def test_a_retried_suggestion_write_keeps_what_the_caller_wrote_before(setup, monkeypatch):
    """store_suggestions retries a PostgreSQL deadlock after a rollback; the rollback took along the caller's
    uncommitted writes of the same session (a comment, a status). They are committed first now."""
    from sqlalchemy.exc import OperationalError

    from db import suggestions as sug_mod
    from db.models import Mention
    from termnorm.engine import Engine

    url, ids = setup["url"], setup["ids"]
    real, calls = sug_mod._store, []

    def deadlock_once(*a, **kw):
        calls.append(1)
        if len(calls) == 1:
            orig = type("Deadlock", (Exception,), {"sqlstate": "40P01"})("deadlock detected")
            raise OperationalError("INSERT ...", {}, orig)
        return real(*a, **kw)

    monkeypatch.setattr(sug_mod, "_store", deadlock_once)
    monkeypatch.setattr(sug_mod.time, "sleep", lambda _: None)
    with S.session_scope(url) as s:
        s.get(Mention, ids[0]).status = "flagged"  # the caller's own write, not committed yet
        S.store_suggestions(s, [ids[1]], [Engine.from_demo().suggest("胆囊切除术")])
    assert len(calls) == 2
    with S.session_scope(url) as s:
        assert S.mention(s, ids[0])["status"] == "flagged" and S.latest_suggestion(s, ids[1]) is not None


def test_coders_sharing_a_batch_get_different_mentions(setup):
    from datetime import timedelta

    url, ids, bid = setup["url"], setup["ids"], setup["bid"]
    with S.session_scope(url) as s:
        a = S.next_mention(s, bid, "alice")["id"]
        assert S.next_mention(s, bid, "alice")["id"] == a  # a redraw keeps the same mention
        b = S.next_mention(s, bid, "bob")["id"]
        assert (a, b) == (ids[0], ids[1])
        assert S.claimed_by_others(s, bid, "carol") == 2 and S.claimed_by_others(s, bid, "alice") == 1
        assert S.next_mention(s, bid, "carol", claim=False)["id"] == ids[2]
        assert S.claimed_by_others(s, bid, "alice") == 1  # looking claims nothing
        # bob decides before alice: alice's screen stays on her mention, bob moves past it
        S.record_decision(s, b, "bob", "accept")
        assert S.next_mention(s, bid, "alice")["id"] == a
        assert S.next_mention(s, bid, "bob")["id"] == ids[2]
    # the claims are committed: a new session (another coder's browser tab) sees them
    with S.session_scope(url) as s:
        assert S.next_mention(s, bid, "carol")["id"] == ids[3]
        # alice leaves her screen: after CLAIM_MINUTES her mention is free for others
        s.execute(update(M.Mention).where(M.Mention.id == a)
                  .values(claimed_at=M.utcnow() - timedelta(minutes=S.CLAIM_MINUTES + 1)))
        s.commit()
        S.record_decision(s, ids[3], "carol", "accept")
        assert S.next_mention(s, bid, "carol")["id"] == a
        # skipping releases the claim: the mention is at the back of the queue, for anyone
        S.record_decision(s, a, "carol", "skip")
        assert S.mention(s, a)["status"] == "skipped"
        assert S.next_mention(s, bid, "carol")["id"] == ids[4]
        S.record_decision(s, ids[4], "carol", "accept")
        assert S.next_mention(s, bid, "alice")["id"] == a
        # one claim per coder and batch
        claimed = s.execute(select(M.Mention.id).where(M.Mention.claimed_by == "carol")).scalars().all()
        assert claimed == []
        assert s.execute(select(M.Mention.id).where(M.Mention.claimed_by == "bob")).scalars().all() == [ids[2]]


def test_repeated_decision_latest_wins_and_history_is_kept(setup):
    with S.session_scope(setup["url"]) as s:
        mid = setup["ids"][0]
        first = S.record_decision(s, mid, "alice", "accept")
        second = S.record_decision(s, mid, "bob", "correct", [FAMILY[2]], shown=2)
        assert not s.get(M.Decision, first).is_latest and s.get(M.Decision, second).is_latest
        assert pairs(s, mid, active=False) == [(FAMILY[0], 1, "accepted")]
        assert pairs(s, mid) == sorted([(FAMILY[2], 1, "corrected"), (FAMILY[0], 0, "rejected_candidate"),
                                        (FAMILY[1], 0, "rejected_candidate")])
        assert [d["action"] for d in S.mention(s, mid)["decisions"]] == ["accept", "correct"]
        df = S.decisions_frame(s, setup["bid"])
        assert len(df) == 1 and df.iloc[0]["terms"] == [FAMILY[2]] and df.iloc[0]["user"] == "bob"
        assert len(S.decisions_frame(s, setup["bid"], history=True)) == 2
        # each coder's own latest decision in the batch, though bob's replaced alice's
        assert {u: (d["position"], d["action"], d["terms"]) for u in ("alice", "bob")
                for d in [S.last_saved(s, setup["bid"], u)]} == {"alice": (1, "accept", [FAMILY[0]]),
                                                                  "bob": (1, "correct", [FAMILY[2]])}
        assert S.coded_mentions(s, setup["vid"]) == [LabelledMention(MENTIONS[0], [FAMILY[2]], None)]


def test_a_page_of_decisions_is_read_from_the_database_as_the_whole_frame_would_cut_it(setup):
    with S.session_scope(setup["url"]) as s:
        for mid in setup["ids"]:
            S.record_decision(s, mid, "alice", "accept")
        S.record_decision(s, setup["ids"][1], "bob", "reject")
        for history in (False, True):
            whole = S.decisions_frame(s, setup["bid"], history=history)
            assert S.decisions_count(s, setup["bid"], history=history) == len(whole) == len(MENTIONS) + history
            pages = [S.decisions_frame(s, setup["bid"], history=history, offset=o, limit=2)
                     for o in range(0, len(whole), 2)]
            assert [len(p) for p in pages] == [min(2, len(whole) - o) for o in range(0, len(whole), 2)]
            assert pd.concat(pages)["decision_id"].tolist() == whole["decision_id"].tolist()
        one = S.decisions_frame(s, setup["bid"], history=True, mention=MENTIONS[1])
        assert one["action"].tolist() == ["accept", "reject"] and set(one["mention"]) == {MENTIONS[1]}
        assert S.decisions_count(s, setup["bid"], history=True, mention=MENTIONS[1]) == 2
        assert S.decisions_count(s, None, mention="no such mention") == 0
        assert S.decisions_frame(s, None, mention="no such mention").empty


def test_decision_is_atomic(setup, monkeypatch):
    url, mid = setup["url"], setup["ids"][0]

    real_audit = D.audit

    def broken_audit(s, user, action, *a, **k):
        # fail at the very end of record_decision: the decision and its pairs are already flushed
        if action == "correct":
            raise RuntimeError("disk full")
        return real_audit(s, user, action, *a, **k)

    with S.session_scope(url) as s:
        monkeypatch.setattr(D, "audit", broken_audit)
        with pytest.raises(RuntimeError):
            S.record_decision(s, mid, "carol", "correct", [FAMILY[3]])
        monkeypatch.undo()
    with S.session_scope(url) as s:  # nothing of the failed decision reached the database
        assert s.scalar(select(func.count()).select_from(M.Decision)) == 0
        assert s.scalar(select(func.count()).select_from(M.TrainingPair)) == 0
        assert s.scalar(select(M.User.id).where(M.User.username == "carol")) is None
        assert S.mention(s, mid)["status"] == "suggested"
        S.record_decision(s, mid, "carol", "correct", [FAMILY[3]])  # the session is still usable
        assert S.mention(s, mid)["status"] == "decided"


def test_invalid_decisions_are_refused(setup):
    with S.session_scope(setup["url"]) as s:
        mid = setup["ids"][0]
        with pytest.raises(ValueError):
            S.record_decision(s, mid, "alice", "approve")
        with pytest.raises(ValueError):
            S.record_decision(s, mid, "alice", "correct", [])
        with pytest.raises(ValueError, match="not terms"):
            S.record_decision(s, mid, "alice", "correct", ["不存在的术语"])
        with pytest.raises(KeyError):
            S.record_decision(s, 10**6, "alice", "accept", [FAMILY[0]])
        bid2 = S.create_batch(s, "no suggestions", setup["vid"], ["某手术"])
        with pytest.raises(ValueError, match="no suggestion"):
            S.record_decision(s, S.mentions(s, bid2)[0]["id"], "alice", "accept")
        assert s.scalar(select(func.count()).select_from(M.Decision)) == 0


RESTART_SCRIPT = textwrap.dedent("""
    import os, sys
    sys.path.insert(0, {repo!r})
    from db import services as S
    url = {url!r}
    with S.session_scope(url) as s:
        ids = [m["id"] for m in S.mentions(s, {bid})]
        S.record_decision(s, ids[0], "alice", "accept", seconds=2.0)
        S.record_decision(s, ids[1], "alice", "correct", [{term!r}])
        S.record_decision(s, ids[2], "alice", "skip", comment="later")
        os._exit(0)  # hard exit: no commit hook, no close, no engine dispose
""")


def test_decisions_survive_a_hard_exit_and_the_queue_resumes(setup):
    url, ids, bid = setup["url"], setup["ids"], setup["bid"]
    S.dispose(url)  # release this process's connections, as a stopped app would
    script = RESTART_SCRIPT.format(repo=str(REPO), url=url, bid=bid, term=FAMILY[2])
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    # a fresh engine and session on the same file = the restarted app
    with S.session_scope(url) as s:
        df = S.decisions_frame(s, bid)
        assert list(df["action"]) == ["accept", "correct", "skip"]
        assert list(df["terms"]) == [FAMILY[:1], [FAMILY[2]], []]
        assert S.mention(s, ids[2])["decision"]["comment"] == "later"
        nxt = S.next_mention(s, bid, "alice")
        assert (nxt["id"], nxt["position"]) == (ids[3], 4)
        assert S.batch_progress(s, bid) == (2, len(ids))
        assert len(S.training_pairs_frame(s, setup["vid"])) > 2
        # what the coding page says was kept ("Last saved"), read back after the hard exit
        last = S.last_saved(s, bid, "alice")
        assert (last["position"], last["action"], last["terms"]) == (3, "skip", [])
        assert S.last_saved(s, bid, "bob") is None


def test_uncertainty_order(setup):
    url, ids, bid, vocab = setup["url"], setup["ids"], setup["bid"], setup["vocab"]
    confidences = [0.9, 0.2, 0.7, 0.05]
    with S.session_scope(url) as s:
        S.store_suggestions(s, ids[:4], [suggestion_for(MENTIONS[i], vocab, FAMILY, confidence=c)
                                         for i, c in enumerate(confidences)])
        bid2 = S.create_batch(s, "b2", setup["vid"], ["甲状腺", "胆囊"])
        assert S.next_mention(s, bid, "alice", order="uncertainty")["id"] == ids[3]
        S.record_decision(s, ids[3], "alice", "accept")
        assert S.next_mention(s, bid, "alice", order="uncertainty")["id"] == ids[1]
        assert S.next_mention(s, bid, "bob")["id"] == ids[0]  # file order unchanged (ids[1] is alice's)
        # mentions without a suggestion come after the scored ones
        m2 = S.mentions(s, bid2)
        S.store_suggestion(s, m2[1]["id"], suggestion_for("胆囊", vocab, FAMILY[4:], confidence=0.99))
        assert S.next_mention(s, bid2, "alice", order="uncertainty")["id"] == m2[1]["id"]
        with pytest.raises(ValueError):
            S.next_mention(s, bid, "alice", order="random")


def test_auto_code_confident_suggestions(setup, fast_bcrypt):
    from db import auth

    url, ids, bid, vocab = setup["url"], setup["ids"], setup["bid"], setup["vocab"]
    with S.session_scope(url) as s:
        auth.create_admin(s, "root", "root-password")
        auth.set_role(s, "root", "lead1", "lead")  # auto-coding is a lead's (db.auth.require)
        S.store_suggestions(s, ids[:2], [suggestion_for(MENTIONS[0], vocab, FAMILY, confidence=0.97),
                                         suggestion_for(MENTIONS[1], vocab, FAMILY, confidence=0.96)])
        S.record_decision(s, ids[1], "alice", "skip")  # not waiting any more: untouched
        out = S.auto_code(s, bid, 0.95, "lead1", model_version="test-v1")
        assert (out["auto_coded"], out["mention_ids"]) == (1, [ids[0]])
        assert S.mention(s, ids[0])["status"] == "auto_coded"
        assert S.mention(s, ids[0])["decision"]["action"] == "auto"
        assert pairs(s, ids[0]) == []  # the engine's own guess is not a label
        assert S.coded_mentions(s, setup["vid"]) == []
        assert S.batch_progress(s, bid) == (1, len(ids))
        assert [b["n_done"] for b in S.batches(s)] == [1]


def test_synonyms_and_coded_mentions_round_trip(setup):
    url, vid, ids = setup["url"], setup["vid"], setup["ids"]
    with S.session_scope(url) as s:
        assert S.add_synonym(s, vid, "胆囊切除术", "胆囊摘除", "alice") is True
        assert S.add_synonym(s, vid, "胆囊切除术", "胆囊摘除", "bob") is False
        with pytest.raises(KeyError):
            S.add_synonym(s, vid, "不存在", "x", "alice")
        with pytest.raises(ValueError):
            S.add_synonym(s, vid, "胆囊切除术", " ", "alice")
        S.record_decision(s, ids[3], "alice", "correct", ["腹腔镜下胆囊切除术"])
        S.record_decision(s, ids[4], "alice", "correct", ["阑尾切除术"])
        S.record_decision(s, ids[0], "alice", "reject")
    S.dispose(url)
    with S.session_scope(url) as s:
        assert S.user_synonyms(s, vid) == [("胆囊切除术", "胆囊摘除")]
        rows = S.term_synonyms(s, vid, "胆囊切除术")
        assert rows[-1]["synonym"] == "胆囊摘除" and rows[-1]["source"] == "user" and rows[-1]["added_by"] == "alice"
        assert [r["synonym"] for r in rows[:-1]] == setup["vocab"].synonyms.get("胆囊切除术", [])
        syn = s.execute(select(M.TrainingPair.mention_text, M.TrainingPair.term, M.TrainingPair.label)
                        .where(M.TrainingPair.kind == "synonym")).all()
        assert [tuple(r) for r in syn] == [("胆囊摘除", "胆囊切除术", 1)]
        coded = S.coded_mentions(s, vid)
        assert all(isinstance(m, LabelledMention) for m in coded)
        assert [(m.text, m.terms) for m in coded] == [("LC", ["腹腔镜下胆囊切除术"]), ("阑尾切除", ["阑尾切除术"])]
        v = S.vocabulary_from_db(s, vid)
        assert "胆囊摘除" in v.synonyms["胆囊切除术"]
        texts, tids = v.surface_forms()
        assert tids[texts.index("胆囊摘除")] == v.index("胆囊切除术")
        assert S.batches(s)[0] | {"created_at": None} == {"id": setup["bid"], "name": "batch-1", "vocabulary_id": vid,
                                                          "created_at": None, "queue_order": "file",
                                                          "n_mentions": 5, "n_done": 3}


def test_storing_a_suggestion_never_reopens_a_mention_decided_meanwhile(setup):
    """A background job or the coding page's prepare thread suggests beside the coders: a mention read as new
    before a coder decided it must stay decided when the suggestion is stored."""
    url, vocab = setup["url"], setup["vocab"]
    with S.session_scope(url) as s:
        bid = S.create_batch(s, "fresh", setup["vid"], ["甲状腺肿块切除"])
        mid = S.mentions(s, bid)[0]["id"]
    with S.session_scope(url) as job, S.session_scope(url) as coder:
        seen = job.get(M.Mention, mid)  # the job's session read it before the decision (and holds it)
        assert seen.status == "new"
        S.store_suggestions(coder, [mid], [suggestion_for("甲状腺肿块切除", vocab, FAMILY)])
        S.record_decision(coder, mid, "alice", "accept")
        S.store_suggestions(job, [mid], [suggestion_for("甲状腺肿块切除", vocab, FAMILY, version="test-v2")])
    with S.session_scope(url) as s:
        assert S.mention(s, mid)["status"] == "decided"
