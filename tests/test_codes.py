"""Codes are first-class: export codes on the real Yidu-N7K / CHIP-CDN files, decisions by term id with the code
exported, the claim guard against late clicks, the 0003 -> 0004 migration, vocabulary editions and the re-review
queue they feed, and the lead's review (approve / send back, no self-approval).

Everything runs on a real SQLite file with the real vocabulary files of ../shared/data where the test says so.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import need
from sqlalchemy import create_engine, select, text

from db import auth, editions, review
from db import models as M
from db import services as S
from termnorm.loaders import load_vocabulary
from termnorm.records import Candidate, Suggestion
from termnorm.vocabulary import Vocabulary

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data"
YIDU = DATA / "yidu-n7k" / "code.txt"
CDN = DATA / "chip-cdn" / "icd10_beijing_clinical_v601.xlsx"


@pytest.fixture(scope="module")
def yidu() -> Vocabulary:
    return load_vocabulary(need(YIDU))


def doubled(vocab: Vocabulary) -> dict[str, list[str]]:
    return {n: c for n, c in vocab.codes.items() if len(c) > 1}


# ------------------------------------------------------------------ export codes
def test_every_doubled_yidu_name_exports_its_leaf_code(yidu):
    names = doubled(yidu)
    assert len(names) == 395  # the file gives 395 of its 9,468 names a category and a leaf code (or two)
    no_leaf = []
    for name, codes in names.items():
        code = yidu.export_code(name)
        leaves = [c for c in codes if yidu.code_kind(c) == "leaf"]
        if leaves:
            assert code in leaves, (name, codes, code)
            # the leaf lies below the name's category code(s)
            assert all(yidu.code_kind(c) == "category" for c in codes if c not in leaves)
        else:
            no_leaf.append(name)
    assert yidu.export_code("输尿管导管插入术") == "59.8x00" and yidu.export_code("颅骨病损的切除术") == "01.6x00"
    assert yidu.code_kind("59.8") == "category" and yidu.code_kind("59.8x00") == "leaf"
    # five names carry two category codes and no leaf; they get the deeper one
    assert sorted(no_leaf) == sorted(["晶状体囊外摘出术", "口和面的其他手术", "喉和气管的其他手术", "肺和支气管的其他手术",
                                      "膈疝修补术"])
    assert yidu.export_code("口和面的其他手术") == "27.9"


def test_chip_cdn_exports_the_most_specific_code():
    v = load_vocabulary(need(CDN))
    assert v.codes_of("卵巢恶性肿瘤") == ["C56xx02", "C56.x", "C56"]
    assert v.code_kind("C56") == v.code_kind("C56.x") == "category"
    assert v.export_code("结核性膀胱炎") == "A18.128+N33.0*"  # dagger/asterisk pair: the etiology code decides
    # an ICD-O morphology code is exported only when the name has no classification code
    assert v.codes_of("肝细胞癌") == ["C22.001", "C22.0", "M817000/3"] and v.export_code("良性肿瘤") == "M800000/0"


def test_normalize_json_gives_the_export_code(tmp_path, yidu):
    r = subprocess.run([sys.executable, "-m", "termnorm.cli", "normalize", "--vocab", str(YIDU), "--json",
                        "输尿管导管插入术"], capture_output=True, text=True, timeout=600, cwd=REPO)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    top = {c["term"]: c for c in out["candidates"]}
    assert top["输尿管导管插入术"]["code"] == "59.8x00"
    assert top["输尿管导管插入术"]["codes"] == ["59.8x00", "59.8"]
    assert all(c["code"] == c["codes"][0] for c in out["candidates"])


# ------------------------------------------------------------------ the database keeps terms by id and the code exported
@pytest.fixture
def yidu_db(db_url, yidu):
    with S.session_scope(db_url) as s:
        vid = S.load_vocabulary(s, yidu, "yidu")
        auth.create_admin(s, "admin", "a-long-password")
        auth.create_user(s, "admin", "lead", "a-long-password", role="lead")
        auth.create_user(s, "admin", "lead2", "a-long-password", role="lead")
    return db_url, vid


def suggest(s, mids, vocab, names_per_mention):
    sugs = []
    for mid, names in zip(mids, names_per_mention):
        cands = [Candidate(vocab.index(n), n, 1.0 - i / 10, {"tfidf": 0.5}, vocab.codes_of(n))
                 for i, n in enumerate(names)]
        sugs.append(Suggestion(f"m{mid}", cands, 1, names[:1], 0.9 - 0.01 * len(sugs), [], "test-v1"))
    S.store_suggestions(s, mids, sugs)


def test_decisions_export_the_leaf_and_round_trip(yidu_db, yidu, tmp_path):
    url, vid = yidu_db
    names = list(doubled(yidu))[:40]
    with S.session_scope(url) as s:
        bid = S.create_batch(s, "b", vid, [f"{n}（右）" for n in names])
        mids = [m["id"] for m in S.mentions(s, bid)]
        suggest(s, mids, yidu, [[n] for n in names])
        for mid, n in zip(mids, names):
            S.record_decision(s, mid, "alice", "accept")
        rows = s.execute(select(M.Term.name, M.Term.code, M.Term.codes, M.Term.code_kinds)
                         .where(M.Term.vocabulary_id == vid, M.Term.name.in_(names))).all()
        assert all(code == codes[0] == yidu.export_code(n) and kinds[code] == yidu.code_kind(code)
                   for n, code, codes, kinds in rows)
        df = S.decisions_frame(s, bid)
        assert list(df["codes"]) == [[yidu.export_code(n)] for n in names]
        ids = {n: i for n, i in s.execute(select(M.Term.name, M.Term.id).where(M.Term.vocabulary_id == vid))}
        assert list(df["term_ids"]) == [[ids[n]] for n in names]
        assert set(df["relationship"]) == {"equivalent"} and set(df["review_status"]) == {"unchecked"}
        first = S.export_decisions(s, bid, "csv")
    # export -> import -> decide the same -> export: the same mentions, terms and codes
    path = tmp_path / "exported.csv"
    path.write_bytes(first)
    with S.session_scope(url) as s:
        S.ensure_user(s, "lead1", role="lead")  # a lead imports gold (a coder's file is imported to be coded)
        rep = S.import_mentions(s, path, "again", vid, username="lead1", again=True)  # the exported batch's mentions
        assert rep.batch_id and not rep.errors
        again = S.mentions(s, rep.batch_id)
        assert [m["text"] for m in again] == [f"{n}（右）" for n in names]
        suggest(s, [m["id"] for m in again], yidu, [[n] for n in names])
        for m in again:
            S.record_decision(s, m["id"], "alice", "correct", m["gold_terms"][:1] or None)
        second = S.decisions_frame(s, rep.batch_id)
    assert list(second["codes"]) == list(df["codes"]) and list(second["terms"]) == list(df["terms"])


def test_a_coder_picks_the_category_code_and_a_foreign_code_is_refused(yidu_db, yidu):
    url, vid = yidu_db
    with S.session_scope(url) as s:
        bid = S.create_batch(s, "b", vid, ["输尿管插管", "输尿管插管2"])
        mids = [m["id"] for m in S.mentions(s, bid)]
        suggest(s, mids, yidu, [["输尿管导管插入术"], ["输尿管导管插入术"]])
        with pytest.raises(ValueError, match="not a code of"):
            S.record_decision(s, mids[0], "alice", "accept", codes={"输尿管导管插入术": "01.6x00"})
        S.record_decision(s, mids[0], "alice", "accept", codes={"输尿管导管插入术": "59.8"})
        S.record_decision(s, mids[1], "alice", "accept", relationship="source-is-narrower-than-target")
        d0, d1 = (S.mention(s, m)["decision"] for m in mids)
        assert d0["codes"] == ["59.8"] and d1["codes"] == ["59.8x00"]
        assert d1["relationship"] == "source-is-narrower-than-target"
        with pytest.raises(ValueError, match="unknown relationship"):
            S.record_decision(s, mids[1], "alice", "accept", relationship="same-as")


def test_a_late_click_never_lands_on_another_mention(yidu_db, yidu):
    """The server side of the stale-click guard: only the coder's current claim can be decided."""
    url, vid = yidu_db
    with S.session_scope(url) as s:
        bid = S.create_batch(s, "b", vid, ["甲状腺切除", "胆囊切除", "阑尾切除"])
        mids = [m["id"] for m in S.mentions(s, bid)]
        suggest(s, mids, yidu, [["甲状腺全部切除术"], ["胆囊切除术"], ["阑尾切除术"]])
        first = S.next_mention(s, bid, "alice")
        assert first["id"] == mids[0]
        S.record_decision(s, mids[0], "alice", "accept", require_claim=True)
        second = S.next_mention(s, bid, "alice")
        assert second["id"] == mids[1]
        # the Accept click / A key of mention 1, arriving after mention 2 was drawn
        with pytest.raises(S.NotYourMention, match="already decided"):
            S.record_decision(s, mids[0], "alice", "accept", require_claim=True)
        # a mention never served to alice, now on bob's screen
        assert S.next_mention(s, bid, "bob")["id"] == mids[2]
        with pytest.raises(S.NotYourMention, match="bob's screen"):
            S.record_decision(s, mids[2], "alice", "accept", require_claim=True)
        assert [len(S.mention(s, m)["decisions"]) for m in mids] == [1, 0, 0]
        S.record_decision(s, mids[1], "alice", "accept", require_claim=True)  # the mention on screen: saved
        assert len(S.mention(s, mids[1])["decisions"]) == 1


# ------------------------------------------------------------------ migration 0003 -> 0004
def test_migration_fills_export_codes_and_keeps_every_decision(tmp_path, yidu):
    from alembic import command
    from alembic.config import Config

    url = f"sqlite:///{tmp_path / 'old.sqlite3'}"
    cfg = Config(str(S.ALEMBIC_INI))
    cfg.set_main_option("sqlalchemy.url", url)
    cfg.attributes["configure_logger"] = False
    os.environ["TERMNORM_DB_URL"] = url  # env.py reads it first on the command-line path
    try:
        command.upgrade(cfg, "0003")
        eng = create_engine(url)
        names = ["输尿管导管插入术", "颅骨病损的切除术", "阑尾切除术"]
        with eng.begin() as c:  # the 0003 schema, written as the app of that time wrote it: first code in `code`
            c.execute(text("INSERT INTO users (id, username, role, created_at) VALUES (1, 'alice', 'coder', "
                           "'2026-01-01')"))
            c.execute(text("INSERT INTO vocabularies (id, name, source, language, hierarchy, created_at) VALUES "
                           "(1, 'yidu', 'code.txt', 'zh', '{}', '2026-01-01')"))
            for i, n in enumerate(names):
                codes = yidu.codes[n]  # file order: the category first
                c.execute(text("INSERT INTO terms (id, vocabulary_id, position, name, code, codes) VALUES "
                               "(:i, 1, :i, :n, :c, :cs)"), {"i": i + 1, "n": n, "c": codes[0],
                                                            "cs": json.dumps(codes)})
            c.execute(text("INSERT INTO batches (id, name, vocabulary_id, source_file, created_at) VALUES "
                           "(1, 'b', 1, '', '2026-01-01')"))
            for i in range(4):
                c.execute(text("INSERT INTO mentions (id, batch_id, position, text, status, updated_at) VALUES "
                               "(:i, 1, :i, :t, 'decided', '2026-01-01')"), {"i": i + 1, "t": f"m{i}"})
            decisions = [(1, "accept", [names[0]]), (2, "correct", [names[1], names[2]]), (3, "reject", []),
                         (4, "auto", [names[2]])]
            for mid, action, terms in decisions:
                c.execute(text("INSERT INTO decisions (mention_id, user_id, at, action, terms, comment, seconds, "
                               "is_latest) VALUES (:m, 1, '2026-01-01', :a, :t, '', 1.0, 1)"),
                          {"m": mid, "a": action, "t": json.dumps(terms, ensure_ascii=False)})
            c.execute(text("INSERT INTO training_pairs (vocabulary_id, mention_id, decision_id, mention_text, term, "
                           "label, kind, active, created_at) VALUES (1, 1, 1, 'm0', :t, 1, 'accepted', 1, "
                           "'2026-01-01')"), {"t": names[0]})
        eng.dispose()
    finally:
        os.environ.pop("TERMNORM_DB_URL", None)
    # the app's own path (foreign keys enforced on its connections): copying the mentions table that the
    # decisions point at used to fail here with "FOREIGN KEY constraint failed" and leave a half-copied table
    S.init_db(url)
    with S.session_scope(url) as s:
        terms = {t.name: t for t in s.scalars(select(M.Term))}
        assert terms[names[0]].code == "59.8x00" and terms[names[0]].codes == ["59.8x00", "59.8"]
        assert terms[names[0]].code_kinds == {"59.8x00": "leaf", "59.8": "category"}
        df = S.decisions_frame(s, 1)
        assert list(df["action"]) == ["accept", "correct", "reject", "auto"]
        assert list(df["codes"]) == [["59.8x00"], ["01.6x00", terms[names[2]].code], [], [terms[names[2]].code]]
        assert list(df["term_ids"]) == [[terms[names[0]].id], [terms[names[1]].id, terms[names[2]].id], [],
                                        [terms[names[2]].id]]
        assert list(df["relationship"]) == ["equivalent", "source-is-broader-than-target", "", "equivalent"]
        assert list(df["review_status"]) == ["unchecked", "unchecked", "unchecked", "auto"]
        assert set(df["edition"]) == {1} and set(df["edition_label"]) == {""}
        assert s.scalar(select(M.TrainingPair.term_id)) == terms[names[0]].id
        assert [e["number"] for e in editions.editions(s, 1)] == [1]
        m = s.get(M.Mention, 1)
        m.status = "rereview"  # the widened status constraint accepts the new status
        s.commit()


# ------------------------------------------------------------------ editions
def derived_edition(vocab: Vocabulary, rng: random.Random) -> tuple[Vocabulary, dict]:
    """A new edition of a real vocabulary: some names dropped, some renamed (same codes), some re-coded."""
    names = list(vocab.names)
    picked = rng.sample(names, 60)
    drop, rename, recode = set(picked[:20]), set(picked[20:40]), set(picked[40:60])
    new = Vocabulary(name=vocab.name)
    for n in names:
        if n in drop:
            continue
        codes = vocab.codes[n]
        if n in recode:
            codes = [c + "9" for c in codes]  # every code of the name changes
        new.add_term(n + "（新）" if n in rename else n, codes)
    new.add_term("全新的手术名称", ["99.9999"])
    return new, {"drop": drop, "rename": rename, "recode": recode}


def test_a_new_edition_flags_exactly_the_affected_decisions(yidu_db, yidu):
    url, vid = yidu_db
    rng = random.Random(7)
    new, changes = derived_edition(yidu, rng)
    affected_names = changes["drop"] | changes["rename"] | changes["recode"]
    safe = rng.sample([n for n in yidu.names if n not in affected_names], 40)
    targets = sorted(affected_names) + safe  # 100 decisions: 60 on changed terms, 40 on untouched ones
    with S.session_scope(url) as s:
        bid = S.create_batch(s, "b", vid, [f"提及{i}" for i in range(len(targets) + 1)])
        mids = [m["id"] for m in S.mentions(s, bid)]
        suggest(s, mids[:-1], yidu, [[t] for t in targets])
        for mid, t in zip(mids, targets):
            S.record_decision(s, mid, "alice", "accept")
        S.record_decision(s, mids[0], "alice", "correct", [safe[0]])  # superseded: only the latest counts
        with pytest.raises(PermissionError):
            editions.import_edition(s, vid, new, "2026", "alice", source_file="code-2026.txt")
        out = editions.import_edition(s, vid, new, "2026", "lead", source_file="code-2026.txt")
        assert out["number"] == 2 and out["counts"] == {"added": 1, "retired": 20, "renamed": 20,
                                                         "code_changed": 20, "rereview": 59}
        flagged = {m["id"] for m in S.mentions(s, bid, status="rereview")}
        expected = {mid for mid, t in zip(mids, targets) if t in affected_names} - {mids[0]}
        assert flagged == expected
        df = S.decisions_frame(s, bid).set_index("mention_id")
        for mid, t in zip(mids, targets):
            if mid == mids[0]:
                continue
            row = df.loc[mid]
            if t in changes["drop"]:
                assert row.review_status == "needs_rereview" and "retired in edition 2 (2026)" in row.review_note
            elif t in changes["rename"]:
                assert f"renamed {t}（新）" in row.review_note
            elif t in changes["recode"]:
                assert "is gone in edition 2" in row.review_note
            else:
                assert row.review_status == "unchecked" and row.review_note == ""
        # the edition in force: retired names out of the engine's vocabulary, the new one in, codes updated
        v2 = S.vocabulary_from_db(s, vid)
        assert not (changes["drop"] | changes["rename"]) & set(v2.names)
        assert "全新的手术名称" in v2 and all(f"{n}（新）" in v2 for n in changes["rename"])
        r = next(iter(changes["recode"]))
        assert v2.codes_of(r) == new.codes_of(r)
        old = s.scalar(select(M.Term).where(M.Term.name == next(iter(changes["rename"]))))
        assert old.retired_edition == 2 and s.get(M.Term, old.replaced_by_id).name == old.name + "（新）"
        # a decision on a retired term is refused; the re-review queue comes first; a new decision clears it
        with pytest.raises(ValueError, match="edition in force"):
            S.record_decision(s, mids[1], "alice", "correct", [sorted(changes["drop"])[0]])
        first = S.next_mention(s, bid, "alice")
        assert first["id"] in flagged and first["status"] == "rereview"
        assert review.rereview_reason(s, first["id"])
        replacement = next(n for n in new.names if n not in yidu)
        S.record_decision(s, first["id"], "alice", "correct", [replacement])
        d = S.mention(s, first["id"])["decision"]
        assert d["edition"] == 2 and d["review_status"] == "unchecked"
        assert S.mention(s, first["id"])["status"] == "decided"
        # exports say the edition of each code
        df = S.decisions_frame(s, bid).set_index("mention_id")
        # ...as a number in every row, with the label the lead gave it beside (not one or the other)
        assert (df.loc[first["id"]].edition, df.loc[first["id"]].edition_label) == (2, "2026")
        assert (df.loc[mids[-2]].edition, df.loc[mids[-2]].edition_label) == (1, "")
        lines = [json.loads(x) for x in S.export_decisions(s, bid, "jsonl").decode().splitlines()]
        assert {(r["edition"], r["edition_label"]) for r in lines} == {(1, ""), (2, "2026")}
        # the same file again (a double click on Import) changes nothing and says so
        with pytest.raises(ValueError, match="same names and codes as edition 2"):
            editions.import_edition(s, vid, new, "2026", "lead", source_file="code-2026.txt")
        # the audit log says who imported what
        entry = s.scalar(select(M.AuditLog).where(M.AuditLog.action == "import_edition"))
        assert entry.username == "lead" and entry.details["rereview"] == 59


def test_a_decision_marked_not_related_to_a_retired_term_is_not_sent_to_rereview(yidu_db, yidu):
    """Seen in a browser: 'not related to X' went to re-review when X was retired, though it maps nothing."""
    url, vid = yidu_db
    new, changes = derived_edition(yidu, random.Random(3))
    gone, renamed = sorted(changes["drop"])[0], sorted(changes["rename"])[0]
    with S.session_scope(url) as s:
        bid = S.create_batch(s, "b", vid, ["提及甲", "提及乙", "提及丙"])
        mids = [m["id"] for m in S.mentions(s, bid)]
        S.record_decision(s, mids[0], "alice", "correct", [gone])
        S.record_decision(s, mids[1], "alice", "correct", [gone], relationship=S.NOT_RELATED)
        S.record_decision(s, mids[2], "alice", "correct", [renamed], relationship=S.NOT_RELATED)
        out = editions.import_edition(s, vid, new, "2026", "lead", source_file="code-2026.txt")
        assert out["rereview"] == 1 and [m["id"] for m in S.mentions(s, bid, status="rereview")] == [mids[0]]
        assert S.mention(s, mids[1])["decision"]["review_status"] == "unchecked"


def test_an_edition_retiring_most_terms_is_imported_only_when_that_number_is_confirmed(yidu_db, yidu):
    """Seen in a browser: a one-row file retired 207 of 208 terms in one click. Now it is refused, nothing changed,
    until the lead confirms the number it retires; a file retiring a few terms needs no confirmation."""
    url, vid = yidu_db
    truncated = Vocabulary()
    for n in yidu.names[:100]:  # a file cut short: 100 of the 9,468 names
        truncated.add_term(n, yidu.codes[n])
    with S.session_scope(url) as s:
        before = len(S.vocabulary_from_db(s, vid))
        for confirm in (None, 10):  # not confirmed; a number that is not what it retires
            with pytest.raises(editions.RetirementNeedsConfirmation, match=r"would retire 9368 of the 9468 terms"):
                editions.import_edition(s, vid, truncated, "", "lead", source_file="code-cut.txt",
                                        confirm_retired=confirm)
        assert len(S.vocabulary_from_db(s, vid)) == before and editions.editions(s, vid)[-1]["number"] == 1
        out = editions.import_edition(s, vid, truncated, "", "lead", source_file="code-cut.txt",
                                      confirm_retired=9368)
        assert out["number"] == 2 and out["counts"]["retired"] == 9368
        assert len(S.vocabulary_from_db(s, vid)) == 100
        small = Vocabulary()
        for n in yidu.names[:97]:  # three retired: no question asked
            small.add_term(n, yidu.codes[n])
        assert editions.import_edition(s, vid, small, "", "lead")["counts"]["retired"] == 3


def test_a_stored_suggestion_of_the_old_edition_is_not_served(yidu_db, yidu):
    url, vid = yidu_db
    new, changes = derived_edition(yidu, random.Random(3))
    gone = sorted(changes["drop"])[0]
    with S.session_scope(url) as s:
        bid = S.create_batch(s, "b", vid, ["x"])
        mid = S.mentions(s, bid)[0]["id"]
        suggest(s, [mid], yidu, [[gone]])
        assert S.latest_suggestion(s, mid, edition=1).chosen == [gone]
        editions.import_edition(s, vid, new, "", "lead")
        assert S.latest_suggestion(s, mid, edition=2) is None  # the page suggests again from edition 2
        with pytest.raises(ValueError, match="edition in force"):
            S.record_decision(s, mid, "alice", "accept")  # the old suggestion's term is retired


# ------------------------------------------------------------------ the lead's review
def test_a_decision_sent_back_is_not_approved_from_a_page_loaded_before(yidu_db, yidu):
    """Two leads on one Review page: one sent a decision back, the other's stale page approved it -- the note was
    wiped, the export said approved, and the mention stayed queued for re-review."""
    url, vid = yidu_db
    with S.session_scope(url) as s:
        bid = S.create_batch(s, "b", vid, ["a"])
        mid = S.mentions(s, bid)[0]["id"]
        suggest(s, [mid], yidu, [["胆囊切除术"]])
        S.record_decision(s, mid, "alice", "accept")
        did = int(review.review_frame(s, batch_id=bid)["decision_id"].iloc[0])
        assert review.send_back(s, [did], "lead", "check the side")["sent_back"] == [did]
        out = review.approve(s, [did], "admin")  # the other lead's page still lists it as unchecked
        assert out["approved"] == [] and "in re-review" in dict(out["refused"])[did]
        assert "check the side" in dict(out["refused"])[did]
        row = review.review_frame(s, batch_id=bid).iloc[0]
        assert row["review_status"] == "needs_rereview" and "check the side" in review.rereview_reason(s, mid)
        assert S.next_mention(s, bid, "alice")["id"] == mid
        # decided again, it is approvable
        S.record_decision(s, mid, "alice", "correct", ["胆囊切除术"])
        again = int(review.review_frame(s, batch_id=bid)["decision_id"].iloc[0])
        assert review.approve(s, [again], "admin")["approved"] == [again]


def test_review_approve_send_back_and_no_self_approval(yidu_db, yidu):
    url, vid = yidu_db
    names = ["甲状腺全部切除术", "胆囊切除术", "阑尾切除术", "输尿管导管插入术"]
    with S.session_scope(url) as s:
        bid = S.create_batch(s, "b", vid, ["a", "b", "c", "d", "e"])
        mids = [m["id"] for m in S.mentions(s, bid)]
        suggest(s, mids[:4], yidu, [[n] for n in names])
        S.record_decision(s, mids[0], "alice", "accept")
        S.record_decision(s, mids[1], "bob", "accept")
        S.record_decision(s, mids[2], "lead", "accept")
        S.record_decision(s, mids[3], "alice", "flag", comment="unclear")
        frame = review.review_frame(s, batch_id=bid, coders=["alice"])
        assert set(frame["mention_id"]) == {mids[0], mids[3]}
        assert list(review.review_frame(s, batch_id=bid, statuses=["flagged"])["mention_id"]) == [mids[3]]
        ids = list(review.review_frame(s, batch_id=bid)["decision_id"])
        with pytest.raises(PermissionError):
            review.approve(s, ids, "alice")
        out = review.approve(s, ids, "lead")
        reasons = dict(out["refused"])
        by_mention = dict(zip(review.review_frame(s, batch_id=bid)["mention_id"], ids))
        assert sorted(out["approved"]) == sorted([by_mention[mids[0]], by_mention[mids[1]]])
        assert "your own decision" in reasons[by_mention[mids[2]]]
        assert "not an answer to approve" in reasons[by_mention[mids[3]]]
        # an admin allows self-approval: now the lead's own decision can be approved
        with pytest.raises(PermissionError):
            review.set_setting(s, review.SELF_APPROVAL, True, "lead")
        review.set_setting(s, review.SELF_APPROVAL, True, "admin")
        assert review.approve(s, [by_mention[mids[2]]], "lead")["approved"] == [by_mention[mids[2]]]
        # send back: needs a reason, re-queues the mention first, the coder sees the reason
        with pytest.raises(ValueError, match="say why"):
            review.send_back(s, [by_mention[mids[1]]], "lead", " ")
        review.send_back(s, [by_mention[mids[1]]], "lead", "the laterality is missing")
        assert S.next_mention(s, bid, "bob")["id"] == mids[1]
        assert "the laterality is missing" in review.rereview_reason(s, mids[1])
        statuses = dict(zip(*[review.review_frame(s, batch_id=bid)[c] for c in ("mention_id", "review_status")]))
        assert statuses == {mids[0]: "approved", mids[1]: "needs_rereview", mids[2]: "approved",
                            mids[3]: "flagged"}
        reviewed_by = review.review_frame(s, batch_id=bid).set_index("mention_id")["reviewed_by"]
        assert reviewed_by[mids[0]] == "lead"
