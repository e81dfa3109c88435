"""The sign-in, gold and lead pages with Streamlit's AppTest: real pages, real engine, a real SQLite file.

Sign-in is ON here (the default). Tests sign in through the sign-in form once,
and elsewhere programmatically by putting the user name in
``session_state["auth_user"]`` -- which only server code can do. Numbers shown
on the pages (κ, α, acceptance rates, accuracy) are compared with values
worked out by hand on small fixtures; the end-to-end test plays a new lead on
30 demo mentions.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from helpers import demo_team, rerun as run
from job_targets import SLEEP, workers_import_tests
from streamlit.testing.v1 import AppTest

from db import auth, dashboard_data, gold, services, suggest_jobs
from app_pages import _ui
from termnorm.engine import demo_mentions
from termnorm.jobs import JobRunner
from termnorm.records import Candidate, Suggestion

REPO = Path(__file__).resolve().parents[1]
APP = str(REPO / "app.py")
PAGES = REPO / "app_pages"
TIMEOUT = 60
A, B, C = "甲状腺病损切除术", "甲状腺大部切除术", "甲状腺全部切除术"
D = "腹腔镜下胆囊切除术"
LI = [A, A, B, B, C, A]
WANG = [A, A, B, A, C, C]
USERS = (("lead1", "lead"), ("li", "annotator"), ("wang", "annotator"), ("coder1", "coder"))


@pytest.fixture
def world(url, tmp_path, monkeypatch):
    """Sign-in on; an admin, a lead, two annotators, a coder; the demo data; a 6-mention thyroid batch.
    ``url``: a fresh database of each backend (conftest)."""
    monkeypatch.setenv("TERMNORM_JOBS", str(tmp_path / "jobs"))  # scoring on gold runs as a background job
    # the demo procedures and their whole batch, as _ui.seed_demo makes them (the diagnoses are not needed here)
    vid, _ = demo_team(url, monkeypatch, USERS, n_mentions=None, models_dir=tmp_path / "models")
    with services.session_scope(url) as s:
        bid = services.create_batch(s, "thyroid", vid, [f"甲状腺手术{i}" for i in range(1, 7)])
        mids = [m["id"] for m in services.mentions(s, bid)]
    yield {"url": url, "vocabulary_id": vid, "batch_id": bid, "mentions": mids}
    services.dispose(url)


def app_as(user: str | None, page: str | None = None, **state) -> AppTest:
    """The whole app (app.py: sidebar + navigation) signed in as ``user``, optionally on ``page``."""
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    if user:
        at.session_state["auth_user"] = user
    for k, v in state.items():
        at.session_state[k] = v
    run(at)
    if page:
        at.switch_page(f"app_pages/{page}")
        run(at)
    return at


def page_as(user: str | None, page: str, **state) -> AppTest:
    """One page script on its own, as AppTest runs a page after switch_page (app.py's sidebar is not drawn,
    so the page falls back to the first vocabulary unless ``vocabulary_id`` is given)."""
    at = AppTest.from_file(str(PAGES / page), default_timeout=TIMEOUT)
    if user:
        at.session_state["auth_user"] = user
    for k, v in state.items():
        at.session_state[k] = v
    return run(at)


def press(at: AppTest, widget) -> AppTest:
    widget.click()
    return run(at)


def metric(at: AppTest, label_start: str) -> str:
    found = [m.value for m in at.metric if m.label.startswith(label_start)]
    assert len(found) == 1, [m.label for m in at.metric]
    return found[0]


def delta(at: AppTest, label_start: str) -> str:
    return next(m.delta for m in at.metric if m.label.startswith(label_start))


def button(at: AppTest, label: str):
    found = [b for b in at.button if b.label == label]
    assert found, [b.label for b in at.button]
    return found[0]


def annotate(url, task_id, mids, answers: dict[str, list]):
    with services.session_scope(url) as s:
        for who, terms in answers.items():
            for mid, t in zip(mids, terms):
                gold.record_annotation(s, task_id, mid, who, [t] if isinstance(t, str) else list(t), seconds=9.0)


# ------------------------------------------------------------------ sign-in and roles
def test_sign_in_form_then_role_pages_then_sign_out(world):
    at = app_as(None)
    assert [p.value for p in at.text_input] == ["", ""]  # user name, password: nothing else is drawn
    assert not at.sidebar.selectbox and not at.metric
    at.text_input(key="sign_in_user").set_value("lead1")
    at.text_input(key="sign_in_password").set_value("wrong-password")
    press(at, button(at, "Sign in"))
    assert at.error and "Wrong user name or password" in at.error[0].value
    assert "auth_user" not in at.session_state
    at.text_input(key="sign_in_password").set_value("lead1-password")
    press(at, button(at, "Sign in"))
    assert at.session_state["auth_user"] == "lead1" and at.session_state["username"] == "lead1"
    # (AppTest keeps running the sign-in page after its st.rerun(); a browser reloads app.py: start afresh)
    at = app_as("lead1")
    assert "**lead1** · lead" in [m.value for m in at.sidebar.markdown]
    assert not at.sidebar.text_input  # no typed name: the signed-in user decides
    press(at, button(at, "Sign out"))
    assert "auth_user" not in at.session_state and "username" not in at.session_state
    with services.session_scope(world["url"]) as s:
        log = services.audit_frame(s)
    assert {"sign_in", "sign_in_failed", "sign_out"} <= set(log[log.user == "lead1"].action)


def test_first_run_explains_create_admin(tmp_path, monkeypatch):
    url = f"sqlite:///{tmp_path / 'empty.sqlite3'}"
    monkeypatch.setenv("TERMNORM_DB_URL", url)
    monkeypatch.delenv("TERMNORM_AUTH", raising=False)
    at = app_as(None)
    assert any("termnorm create-admin" in i.value for i in at.info)
    services.dispose(url)


def test_with_sign_in_off_a_typed_name_gets_no_protected_account(world, monkeypatch):
    monkeypatch.setenv("TERMNORM_AUTH", "off")  # tests / offline demo only
    assert page_as(None, "admin_users.py", username="root").warning[0].value == "Please sign in."
    assert "is a coder" in page_as(None, "dashboards.py", username="visitor").error[0].value
    with services.session_scope(world["url"]) as s:
        assert auth.user(s, "visitor") == {**auth.user(s, "visitor"), "role": "coder", "has_password": False}
    assert page_as("root", "admin_users.py").dataframe  # signing in still works


def test_a_coder_cannot_open_lead_pages(world):
    for page in ("gold_tasks.py", "adjudicate.py", "dashboards.py", "admin_users.py", "annotate.py"):
        at = page_as("coder1", page)
        assert at.error and "is a coder" in at.error[0].value, page
        assert not at.metric and not at.dataframe and not at.multiselect and not at.button, page
        assert page_as(None, page).warning[0].value == "Please sign in.", page
    assert "is a lead" in page_as("lead1", "admin_users.py").error[0].value  # a lead is not an admin either
    # asked for by its address in the whole app, a lead's page says it is not the coder's (it opened the coding
    # queue without a word), and the navigation still offers only the coder's pages
    at = app_as("coder1", "review.py")
    assert at.error and "This page is for the lead role and above; coder1 is a coder." in at.error[0].value
    assert not at.dataframe and "Review" not in [b.label for b in at.button]


# ------------------------------------------------------------------ gold tasks page
def test_gold_tasks_page_creates_a_task_and_shows_hand_computed_agreement(world):
    at = page_as("lead1", "gold_tasks.py", vocabulary_id=world["vocabulary_id"])
    at.text_input(key="gt_name").set_value("thyroid gold")
    at.selectbox(key="gt_batch").set_value(world["batch_id"])
    at.multiselect(key="gt_annotators").set_value(["li", "wang"])
    press(at, button(at, "Create gold task"))
    press(at, button(at, "Create gold task"))  # a double click: one task, and no "not created" beside "created"
    assert not at.error, [e.value for e in at.error]
    with services.session_scope(world["url"]) as s:
        (t,) = gold.gold_tasks(s, "lead1", batch_id=world["batch_id"])
    assert (t["name"], t["mode"], t["n_mentions"], t["annotators"], t["created_by"]) == (
        "thyroid gold", "blind", 6, ["li", "wang"], "lead1")

    annotate(world["url"], t["id"], world["mentions"], {"li": LI, "wang": WANG})
    run(at)
    # by hand (tests/test_gold.py): p_o = 4/6, Cohen κ = 11/23, Fleiss κ = 7/15, Krippendorff α = 23/45
    assert metric(at, "Exact-set agreement") == "0.667"
    assert metric(at, "Cohen's κ") == f"{11 / 23:.3f}" == "0.478"
    assert metric(at, "Fleiss' κ") == f"{7 / 15:.3f}" == "0.467"
    assert metric(at, "Krippendorff's α") == f"{23 / 45:.3f}" == "0.511"
    pairs = at.dataframe[1].value
    assert pairs.iloc[0]["kappa"] == pytest.approx(11 / 23)
    assert "2 mentions wait for adjudication" in at.warning[0].value
    assert all(m.help for m in at.metric)  # every number says how it was computed
    assert not any("leaves out" in c.value for c in at.caption)
    with services.session_scope(world["url"]) as s:  # a "no term fits" gold: the CHIP-CDN file says it leaves it out
        gold.adjudicate(s, "lead1", t["id"], world["mentions"][3], [])
    run(at)
    assert any("CHIP-CDN file leaves out the 1 mention whose gold is \"no term fits\"" in c.value for c in at.caption)


# ------------------------------------------------------------------ annotate page
def test_annotate_blind_search_add_save(world):
    with services.session_scope(world["url"]) as s:
        tid = gold.create_gold_task(s, "lead1", "blind", world["batch_id"], ["li", "wang"])
    at = page_as("li", "annotate.py")
    assert "0 / 6" in at.get("progress")[0].proto.text
    assert not any("tn-cands" in m.value for m in at.markdown)  # blind: no candidate table
    assert any("Blind task" in c.value for c in at.caption)
    mid = world["mentions"][0]
    at.text_input(key=f"an_q_{tid}_{mid}").set_value("甲状腺大部")
    run(at)
    press(at, at.button(key=f"an_add_{tid}_{mid}_0"))
    assert at.multiselect(key=f"an_terms_{tid}_{mid}").value == [B]
    press(at, at.button(key=f"an_save_{tid}_{mid}"))
    with services.session_scope(world["url"]) as s:
        q = gold.annotation_queue(s, tid, "li")
    assert q[0]["terms"] == [B] and q[1]["terms"] is None
    assert "1 / 6" in at.get("progress")[0].proto.text
    # the next mention is on screen; "No term fits" saves an empty answer
    press(at, at.button(key=f"an_none_{tid}_{world['mentions'][1]}"))
    with services.session_scope(world["url"]) as s:
        assert gold.annotation_queue(s, tid, "li")[1]["terms"] == []


def test_an_adjudicated_answer_is_shown_final_and_cannot_be_revised(world):
    """After the lead adjudicated #4 an annotator could still revise it: the page said saved, the gold stayed, and
    the agreement figures moved."""
    mids = world["mentions"]
    with services.session_scope(world["url"]) as s:
        tid = gold.create_gold_task(s, "lead1", "t", world["batch_id"], ["li", "wang"])
    annotate(world["url"], tid, mids, {"li": LI, "wang": WANG})
    with services.session_scope(world["url"]) as s:
        gold.adjudicate(s, "lead1", tid, mids[3], [B])
    at = page_as("li", "annotate.py")
    table = at.dataframe[0].value
    assert table["gold"].tolist() == ["agreed", "agreed", "agreed", "✓ final (adjudicated)", "agreed", ""]
    pick = at.selectbox(key=f"an_pick_{tid}")
    assert len(pick.options) == 5 and not any(o.startswith("#4 ") for o in pick.options)


def test_revising_an_agreed_answer_says_it_withdraws_the_gold(world):
    """li revised #1, which both annotators had answered alike: the page said "saved" and nothing else, and the
    mention's gold answer was gone, waiting for the lead."""
    mids = world["mentions"]
    with services.session_scope(world["url"]) as s:
        tid = gold.create_gold_task(s, "lead1", "t", world["batch_id"], ["li", "wang"])
    annotate(world["url"], tid, mids, {"li": LI, "wang": WANG})
    at = page_as("li", "annotate.py")
    at.selectbox(key=f"an_pick_{tid}").set_value(mids[0])
    press(at, at.button(key=f"an_revise_btn_{tid}"))
    assert any("it is gold" in w.value for w in at.warning)
    at.text_input(key=f"an_q_{tid}_{mids[0]}").set_value("甲状腺大部")
    run(at)
    press(at, at.button(key=f"an_add_{tid}_{mids[0]}_0"))
    at.multiselect(key=f"an_terms_{tid}_{mids[0]}").set_value([B])
    press(at, at.button(key=f"an_save_{tid}_{mids[0]}"))
    said = [w.value for w in at.warning]
    assert any("#1 saved" in w and "gold answer is withdrawn" in w for w in said), said
    with services.session_scope(world["url"]) as s:
        assert mids[0] not in set(gold.gold_labels(s, "lead1", tid)["mention_id"])
    # revising an agreed answer to the same terms keeps the gold and says nothing more
    at = page_as("li", "annotate.py")
    at.selectbox(key=f"an_pick_{tid}").set_value(mids[1])
    press(at, at.button(key=f"an_revise_btn_{tid}"))
    press(at, at.button(key=f"an_save_{tid}_{mids[1]}"))
    assert not any("withdrawn" in w.value for w in at.warning) and any("#2 saved" in t.value for t in at.toast)
    with services.session_scope(world["url"]) as s:
        assert mids[1] in set(gold.gold_labels(s, "lead1", tid)["mention_id"])


def test_annotate_assisted_shows_candidates_without_preselection(world):
    with services.session_scope(world["url"]) as s:
        gold.create_gold_task(s, "lead1", "assisted", world["batch_id"], ["li", "wang"], mode="assisted")
    at = page_as("wang", "annotate.py")
    assert any("tn-cands" in m.value for m in at.markdown)
    sel = [m for m in at.multiselect if m.key.startswith("an_terms_")][0]
    assert sel.value == [] and len(sel.options) >= 1


# ------------------------------------------------------------------ adjudication page
def test_adjudicate_side_by_side_and_save(world):
    mids = world["mentions"]
    with services.session_scope(world["url"]) as s:
        tid = gold.create_gold_task(s, "lead1", "t", world["batch_id"], ["li", "wang"])
    annotate(world["url"], tid, mids, {"li": LI, "wang": WANG})
    at = page_as("lead1", "adjudicate.py", vocabulary_id=world["vocabulary_id"])
    assert metric(at, "To adjudicate") == "2" and metric(at, "Agreed") == "4"
    assert metric(at, "Cohen's κ") == "0.478" and metric(at, "Krippendorff's α") == "0.511"
    # the most contested first, file order: mention 4 (li B, wang A)
    assert at.selectbox(key=f"adj_pick_{tid}").value == mids[3]
    labels = [b.label for b in at.button]
    assert "Use li's answer" in labels and "Use wang's answer" in labels
    press(at, button(at, "Use li's answer"))
    assert at.multiselect(key=f"adj_terms_{tid}_{mids[3]}").value == [B]
    press(at, at.button(key=f"adj_save_{tid}_{mids[3]}"))
    assert metric(at, "To adjudicate") == "1" and at.selectbox(key=f"adj_pick_{tid}").value == mids[5]
    with services.session_scope(world["url"]) as s:
        labels = gold.gold_labels(s, "lead1", tid).set_index("mention_id")
    assert labels.loc[mids[3], "terms"] == [B] and labels.loc[mids[3], ["source", "by"]].tolist() == [
        "adjudicated", "lead1"]
    overview = at.dataframe[-1].value
    assert overview["gold"].tolist() == [B, "— open —"]


def test_using_an_answer_of_no_term_fits_ticks_the_box(world):
    """A user test pressed "Use ann2's answer" on ann2's "no term fits": the box stayed unticked and Save refused."""
    mids = world["mentions"]
    with services.session_scope(world["url"]) as s:
        tid = gold.create_gold_task(s, "lead1", "t", world["batch_id"], ["li", "wang"])
    annotate(world["url"], tid, mids, {"li": LI[:3] + [[]] + LI[4:], "wang": WANG})
    at = page_as("lead1", "adjudicate.py", vocabulary_id=world["vocabulary_id"])
    at.selectbox(key=f"adj_pick_{tid}").set_value(mids[3])
    run(at)
    press(at, button(at, "Use li's answer"))
    assert at.checkbox(key=f"adj_none_{tid}_{mids[3]}").value is True
    assert at.multiselect(key=f"adj_terms_{tid}_{mids[3]}").value == []
    press(at, button(at, "Use wang's answer"))  # and back: a term, the box unticked
    assert at.checkbox(key=f"adj_none_{tid}_{mids[3]}").value is False
    press(at, button(at, "Use li's answer"))
    press(at, at.button(key=f"adj_save_{tid}_{mids[3]}"))
    with services.session_scope(world["url"]) as s:
        g = gold.gold_labels(s, "lead1", tid).set_index("mention_id")
    assert list(g.loc[mids[3], "terms"]) == [] and g.loc[mids[3], "by"] == "lead1"


def test_an_annotator_lands_on_annotate_and_claims_no_coding_mention(world):
    """A user test: annotators signing in landed on the coding queue, which claimed a mention each and kept it
    from the coders for 15 minutes ("2 other mention(s) on colleagues' screens now")."""
    at = app_as("li")
    assert any(m.value == "### Gold annotation" for m in at.markdown)
    assert not [w for w in at.multiselect if w.key and w.key.startswith("terms_")]  # no coding page drawn
    with services.session_scope(world["url"]) as s:
        assert services.claimed_by_others(s, world["batch_id"], "coder1") == 0
        assert all(services.claimed_by_others(s, b["id"], "coder1") == 0 for b in services.batches(s))
    coder = app_as("coder1")  # a coder still lands on the coding queue
    assert [w for w in coder.multiselect if w.key and w.key.startswith("terms_")]


def test_adjudication_refuses_an_empty_box_a_stale_page_and_a_press_as_the_mention_opens(world, monkeypatch):
    """A user test: Save pressed twice saved the next mention, unseen, as "no term fits"; a single Save on an empty
    box did the same; a second lead's page drawn before the first lead's answer overwrote it without a word."""
    mids = world["mentions"]
    with services.session_scope(world["url"]) as s:
        tid = gold.create_gold_task(s, "lead1", "t", world["batch_id"], ["li", "wang"])
    annotate(world["url"], tid, mids, {"li": LI, "wang": WANG})

    def gold_of(mid):
        with services.session_scope(world["url"]) as s:
            g = gold.gold_labels(s, "lead1", tid).set_index("mention_id")
        return (list(g.loc[mid, "terms"]), g.loc[mid, "by"]) if mid in g.index else None

    at = page_as("lead1", "adjudicate.py", vocabulary_id=world["vocabulary_id"])
    stale = page_as("root", "adjudicate.py", vocabulary_id=world["vocabulary_id"])  # the same mention, drawn now
    assert at.multiselect(key=f"adj_terms_{tid}_{mids[3]}").value == []  # li and wang share no term
    press(at, at.button(key=f"adj_save_{tid}_{mids[3]}"))
    assert any('tick "No term fits"' in e.value for e in at.error) and gold_of(mids[3]) is None
    at.checkbox(key=f"adj_none_{tid}_{mids[3]}").check()
    press(at, at.button(key=f"adj_save_{tid}_{mids[3]}"))
    assert gold_of(mids[3]) == ([], "lead1")
    stale.multiselect(key=f"adj_terms_{tid}_{mids[3]}").set_value([B])  # li's answer, sent from the old page
    press(stale, stale.button(key=f"adj_save_{tid}_{mids[3]}"))
    said = " ".join(e.value for e in stale.error).replace("\\", "")
    assert "lead1 adjudicated this mention since your page was drawn (no term fits)" in said
    assert gold_of(mids[3]) == ([], "lead1")  # kept
    # a Save sooner than a person could read the mention (S pressed twice) is ignored
    monkeypatch.setenv("TERMNORM_MIN_DWELL_S", "10")
    at = page_as("lead1", "adjudicate.py", vocabulary_id=world["vocabulary_id"])
    press(at, button(at, "Use li's answer"))
    press(at, at.button(key=f"adj_save_{tid}_{mids[5]}"))
    assert any("Ignored a Save" in w.value for w in at.warning) and gold_of(mids[5]) is None


# ------------------------------------------------------------------ dashboards page
def _sug(mention, ranked, chosen, version):
    cands = [Candidate(i, t, 1.0 - 0.1 * i, {"bm25": 1.0 - 0.1 * i}, []) for i, t in enumerate(ranked)]
    return Suggestion(mention=mention, candidates=cands, predicted_count=len(chosen), chosen=chosen, confidence=0.5,
                      keywords=[], model_version=version)


def test_dashboard_shows_hand_computed_acceptance_and_accuracy(world):
    """Same fixture as tests/test_gold.py::test_dashboard_frames_and_numbers_by_hand, except that the coding
    page lists _ui.SHOWN (10) candidates, so D (rank 6) was seen: top-1 1/4 (m1), top-5 2/4 (m1, m2),
    rejected all 1/4 (only m3's reject); gold accuracy v1 2/6, v2 5/6, and v2 on the 3 mentions no coder
    had coded before its suggestions (m3, m5, m6) 3/3."""
    mids = world["mentions"]
    ranked = [A, B, C, "甲状腺部分切除术", "甲状腺病损射频消融术", D]
    with services.session_scope(world["url"]) as s:
        texts = [services.mention(s, m)["text"] for m in mids]
        services.store_suggestions(s, mids, [_sug(t, ranked, [c], "v1") for t, c in zip(texts, [A, A, A, A, C, B])])
        services.record_decision(s, mids[0], "coder1", "accept", seconds=10)
        services.record_decision(s, mids[1], "coder1", "correct", [C], seconds=30)
        services.record_decision(s, mids[2], "coder1", "reject", seconds=20)
        services.record_decision(s, mids[3], "coder1", "correct", [D], seconds=40)
        services.store_suggestions(s, mids, [_sug(t, ranked, [c], "v2") for t, c in zip(texts, [A, C, B, B, C, A])])
        tid = gold.create_gold_task(s, "lead1", "thyroid gold", world["batch_id"], ["li", "wang"])
    annotate(world["url"], tid, mids, {"li": [A, C, B, D, C, A], "wang": [A, C, B, D, C, A]})

    at = page_as("lead1", "dashboards.py", vocabulary_id=world["vocabulary_id"])
    assert metric(at, "Decisions") == "4"
    assert metric(at, "Top-1 accepted") == "25.0%" and delta(at, "Top-1") == "1 of 4"
    assert metric(at, "Within top-5") == "50.0%"
    assert _ui.SHOWN >= 6 and metric(at, "Rejected all") == "25.0%"
    assert metric(at, "Gold accuracy") == "100.0%"  # fresh mentions only (the default)
    assert delta(at, "Gold accuracy") == "n=3"
    assert metric(at, "Annotator κ") == "1.000" and delta(at, "Annotator κ") == "thyroid gold"  # full agreement
    assert all(m.help for m in at.metric)
    acc_table = next(d.value for d in at.dataframe if "accuracy" in d.value.columns)
    assert acc_table.set_index("model_version")["accuracy"].to_dict() == pytest.approx({"v1": 2 / 6, "v2": 1.0})
    assert "recall_at_5" in acc_table.columns
    at.toggle(key="dash_fresh").set_value(False)
    run(at)
    assert metric(at, "Gold accuracy") == "83.3%" and delta(at, "Gold accuracy") == "n=6"
    charts = at.get("plotly_chart")
    assert len(charts) >= 7
    assert all('"how"' in c.proto.spec for c in charts)  # each chart carries its explanation (hover + meta)
    # error examples: filter by kind, download what is shown
    assert any(b.proto.label.startswith("Download these errors") for b in at.get("download_button"))
    at.radio(key="dash_against").set_value("gold")
    at.multiselect(key="dash_f_version").set_value(["v1"])
    run(at)
    errors = at.dataframe[-1].value
    # v1 vs gold: wrong on m2 (A for C), m3 (A for B), m4 (A for D), m6 (B for A)
    assert sorted(errors["mention"]) == sorted(texts[i] for i in (1, 2, 3, 5))
    assert set(errors["kind"]) == {"wrong term"}



def test_gold_left_out_as_already_taught_is_said_so_not_no_gold(world):
    """Every gold mention coded before the engine's suggestion: the default view leaves them all out. A user test
    read "no gold yet" and advice to build gold that existed; the page names how many were left out and why."""
    mids = world["mentions"]
    ranked = [A, B, C, "甲状腺部分切除术", "甲状腺病损射频消融术", D]
    with services.session_scope(world["url"]) as s:
        texts = [services.mention(s, m)["text"] for m in mids]
        for m, c in zip(mids, [A, C, B, D, C, A]):
            services.record_decision(s, m, "coder1", "correct", [c], seconds=10)
        services.store_suggestions(s, mids, [_sug(t, ranked, [c], "v1") for t, c in zip(texts, [A, C, B, D, C, A])])
        tid = gold.create_gold_task(s, "lead1", "taught gold", world["batch_id"], ["li", "wang"])
    annotate(world["url"], tid, mids, {"li": [A, C, B, D, C, A], "wang": [A, C, B, D, C, A]})

    at = page_as("lead1", "dashboards.py", vocabulary_id=world["vocabulary_id"])
    assert metric(at, "Gold accuracy") == "—"
    assert delta(at, "Gold accuracy") == f"all {len(mids)} gold mentions already taught"
    said = " ".join(c.value for c in at.caption)
    assert "No fresh gold" in said and "Leave out mentions already taught" in said and "build gold" not in said
    at.toggle(key="dash_fresh").set_value(False)
    run(at)
    assert metric(at, "Gold accuracy") == "100.0%" and delta(at, "Gold accuracy") == f"n={len(mids)}"


def test_imported_gold_left_out_by_the_toggle_is_said_so_not_no_gold(world):
    """Mentions imported with their gold terms are not gold on the dashboard until the lead includes them; until
    then the cards say they are there and how to include them (a user test read "no gold yet" beside a job that
    had scored 400 of them)."""
    from termnorm.records import LabelledMention

    engine = _ui.serving_holder(world["url"], world["vocabulary_id"]).engine
    with services.session_scope(world["url"]) as s:
        services.create_batch(s, "labelled", world["vocabulary_id"],
                              [LabelledMention(f"甲状腺手术{i}", [engine.vocabulary.names[0]]) for i in range(3)])
    at = page_as("lead1", "dashboards.py", vocabulary_id=world["vocabulary_id"])
    assert metric(at, "Gold accuracy") == "—" and delta(at, "Gold accuracy") == "3 imported gold mentions not included"
    assert any('turn on "Also gold from imported files"' in c.value for c in at.caption)
    at.toggle(key="dash_file_gold").set_value(True)
    run(at)
    assert delta(at, "Gold accuracy") == "no gold yet"  # included, but no suggestion of them stored yet
    assert engine.model_version in button(at, "Score the current engine on 3 gold mentions").help


def test_admin_page_creates_users_and_changes_roles(world):
    at = page_as("root", "admin_users.py")
    assert set(at.dataframe[0].value["user"]) == {"root", "lead1", "li", "wang", "coder1"}
    at.text_input(key="au_name").set_value("zhao")
    at.selectbox(key="au_role").set_value("annotator")
    at.text_input(key="au_pw").set_value("zhao-password")
    at.text_input(key="au_pw2").set_value("zhao-password")
    press(at, button(at, "Add user"))
    at.selectbox(key="au_who").set_value("coder1")
    run(at)
    at.selectbox(key="au_new_role").set_value("lead")
    press(at, at.button(key="au_set_role"))
    at.selectbox(key="au_who").set_value("root")
    run(at)
    at.selectbox(key="au_new_role").set_value("coder")
    press(at, at.button(key="au_set_role"))  # refused: the last admin
    assert any("last admin" in e.value for e in at.error)
    with services.session_scope(world["url"]) as s:
        assert auth.authenticate(s, "zhao", "zhao-password")["role"] == "annotator"
        assert auth.role_of(s, "coder1") == "lead" and auth.role_of(s, "root") == "admin"


# ------------------------------------------------------------------ a new lead, end to end
def test_end_to_end_gold_task_of_30_demo_mentions(world, monkeypatch):
    """A lead builds gold on 30 demo mentions, two annotators answer, the lead adjudicates, the dashboard
    shows the annotators' κ and the engine's accuracy on the new gold set."""
    url = world["url"]
    demo = {m.text: m.terms for m in demo_mentions("procedures")}
    with services.session_scope(url) as s:
        demo_batch = next(b["id"] for b in services.batches(s) if b["name"] == "demo procedures")

    # 1. the lead creates the task on the Gold tasks page: a random sample of 30, blind
    at = page_as("lead1", "gold_tasks.py", vocabulary_id=world["vocabulary_id"])
    at.text_input(key="gt_name").set_value("demo gold")
    at.selectbox(key="gt_batch").set_value(demo_batch)
    at.multiselect(key="gt_annotators").set_value(["li", "wang"])
    at.number_input(key="gt_sample").set_value(30)
    at.number_input(key="gt_seed").set_value(3)
    press(at, button(at, "Create gold task"))
    with services.session_scope(url) as s:
        (task,) = gold.gold_tasks(s, "lead1", batch_id=demo_batch)
        queue = gold.annotation_queue(s, task["id"], "li")
    assert task["n_mentions"] == 30 and len(queue) == 30 and task["mode"] == "blind"

    # 2. two annotators (function level): li gives the demo gold terms; wang differs on every 4th mention,
    #    answering with the first term of the vocabulary that is not in the gold set
    vocab_names = _ui.serving_holder(url, world["vocabulary_id"]).engine.vocabulary.names
    mids = [m["mention_id"] for m in queue]
    li = [demo[m["text"]] for m in queue]
    wang = [g if i % 4 else [next(n for n in vocab_names if n not in g)] for i, g in enumerate(li)]
    annotate(url, task["id"], mids, {"li": li, "wang": wang})

    # κ by hand: category = sorted term set; p_o, p_e from the two marginals
    la, lb = ["##".join(sorted(x)) for x in li], ["##".join(sorted(x)) for x in wang]
    p_o = sum(a == b for a, b in zip(la, lb)) / 30
    ca, cb = Counter(la), Counter(lb)
    p_e = sum(ca[c] * cb[c] for c in ca) / 30 ** 2
    kappa = (p_o - p_e) / (1 - p_e)
    assert p_o == pytest.approx(22 / 30)  # mentions 0, 4, ..., 28 differ: 8 of 30

    # 3. the lead adjudicates every disagreement on the Adjudicate page, taking li's answer
    at = page_as("lead1", "adjudicate.py", vocabulary_id=world["vocabulary_id"])
    assert metric(at, "To adjudicate") == "8"
    for _ in range(8):
        press(at, button(at, "Use li's answer"))
        mid = at.selectbox(key=f"adj_pick_{task['id']}").value
        press(at, at.button(key=f"adj_save_{task['id']}_{mid}"))
    assert any("Every disagreement of this task is adjudicated" in x.value for x in at.success)
    with services.session_scope(url) as s:
        g = gold.gold_labels(s, "lead1", task["id"])
    assert len(g) == 30 and g["source"].value_counts().to_dict() == {"agreed": 22, "adjudicated": 8}
    assert all(sorted(t) == sorted(demo[m]) for m, t in zip(g["mention"], g["terms"]))

    # 4. the dashboard: κ at once; accuracy after scoring the current engine on the new gold set
    at = page_as("lead1", "dashboards.py", vocabulary_id=world["vocabulary_id"])
    assert metric(at, "Annotator κ") == f"{kappa:.3f}" and delta(at, "Annotator κ") == "demo gold"
    version = _ui.serving_holder(url, world["vocabulary_id"]).engine.model_version
    with services.session_scope(url) as s:
        assert len(dashboard_data.unscored_gold(s, version, world["vocabulary_id"])) == 30
    assert metric(at, "Gold accuracy") == "—"
    score = "Score the current engine on 30 gold mentions"
    assert not button(at, score).disabled and version in button(at, score).help
    # while another suggestion job of the vocabulary runs, the button waits for it (a press would be refused)
    workers_import_tests(monkeypatch)
    runner = JobRunner()
    other = runner.start(SLEEP, {"seconds": 120, "steps": 240}, lock=suggest_jobs.lock(world["vocabulary_id"]))
    at = page_as("lead1", "dashboards.py", vocabulary_id=world["vocabulary_id"])
    assert button(at, score).disabled and "is running" in button(at, score).help
    runner.cancel(other)
    assert runner.wait(other, timeout=60)["state"] == "cancelled"
    at = page_as("lead1", "dashboards.py", vocabulary_id=world["vocabulary_id"])
    press(at, button(at, score))
    job = runner.latest(lock=suggest_jobs.lock(world["vocabulary_id"]))  # scoring runs in the background
    assert job is not None and runner.wait(job["id"], timeout=300)["state"] == "done"
    at = page_as("lead1", "dashboards.py", vocabulary_id=world["vocabulary_id"])
    assert not [b for b in at.button if b.label.startswith("Score the current engine")]
    with services.session_scope(url) as s:
        right = sum(sorted(services.latest_suggestion(s, m).chosen) == sorted(demo[services.mention(s, m)["text"]])
                    for m in mids)
    assert metric(at, "Gold accuracy") == f"{right / 30:.1%}"
    assert delta(at, "Gold accuracy") == "n=30"
    assert f"Model version **{version}**" in next(m.help for m in at.metric if m.label == "Gold accuracy")
    assert 0 < right < 30  # the lexical demo engine gets some, not all
