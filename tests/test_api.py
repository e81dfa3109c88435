"""The normalization API for real: ``termnorm serve`` (uvicorn) on a loopback port over a seeded database, called
over HTTP with tokens made by ``termnorm api-token``; the FHIR answers validated with fhir.resources."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

import browser  # free_port, wait_http, stop

REPO = Path(__file__).resolve().parents[1]
MENTION = "右侧甲状腺肿瘤切除术"


def _call(base: str, path: str, token: str | None = None, body=None, method: str | None = None):
    """(status, parsed JSON) of one request."""
    data = json.dumps(body, ensure_ascii=False).encode("utf-8") if body is not None else None
    req = urllib.request.Request(base + path, data=data, method=method or ("POST" if data else "GET"))
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def _cli(*args, env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "termnorm.cli", *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=300)


@pytest.fixture
def api(db_url, tmp_path, fast_bcrypt):
    """The demo data with two decisions (one coded, one rejected), a coder, a disabled user, and the API."""
    from db import auth, services
    from db.engine_holder import seed_demo

    with services.session_scope(db_url) as s:
        bid = seed_demo(s)[0]
        services.ensure_user(s, "boss", role="admin")
        services.ensure_user(s, "cora", role="coder")
        services.ensure_user(s, "gone", role="coder")
        services.ensure_user(s, "import", role="admin")  # termnorm load-data's account
        rows = services.mentions(s, bid)
        services.record_decision(s, rows[0]["id"], "cora", "correct", ["甲状腺病损切除术"])
        services.record_decision(s, rows[1]["id"], "cora", "reject")
        coded, rejected = rows[0]["text"], rows[1]["text"]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(TERMNORM_DB_URL=db_url, PYTHONPATH=str(REPO))
    with services.session_scope(db_url) as s:  # what `termnorm api-token` prints (its own test below)
        tokens = {user: auth.create_api_token(s, user, auth.API_TOKEN_DAYS) for user in ("cora", "gone")}
    with services.session_scope(db_url) as s:
        auth.set_disabled(s, "boss", "gone", True)
    port = browser.free_port()
    log = tmp_path / "api.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "termnorm.cli", "serve", "--port", str(port)], cwd=REPO,
                                env=env, stdout=out, stderr=subprocess.STDOUT)
        try:
            try:
                browser.wait_http(f"http://127.0.0.1:{port}/health", 120, proc)
            except (TimeoutError, RuntimeError) as e:
                pytest.fail(f"{e}\n{log.read_text(errors='replace')[-3000:]}")
            yield {"base": f"http://127.0.0.1:{port}", "token": tokens["cora"], "disabled": tokens["gone"],
                   "coded": coded, "rejected": rejected, "batch": bid}
        finally:
            browser.stop(proc)


def test_the_api_token_command_prints_a_token_once_and_refuses_what_it_must(db_url, fast_bcrypt):
    from db import auth, services

    with services.session_scope(db_url) as s:
        services.ensure_user(s, "cora", role="coder")
        services.ensure_user(s, "import", role="admin")  # termnorm load-data's account
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(TERMNORM_DB_URL=db_url, PYTHONPATH=str(REPO))
    r = _cli("api-token", "cora", env=env)
    assert r.returncode == 0 and not r.stderr.strip(), r.stderr
    with services.session_scope(db_url) as s:
        assert auth.session_user(s, r.stdout.strip(), kind="api")["username"] == "cora"
        assert auth.session_user(s, r.stdout.strip()) is None  # set as the app's cookie it signs nobody in
    for refused, why in ((("nobody",), "create the user on the Users page first"),
                         (("cora", "--days", "0"), "expired when issued"), (("cora", "--days", "-5"), "expired"),
                         (("import",), "load-data")):  # a dead token; the loader's admin account
        r = _cli("api-token", *refused, env=env)
        assert r.returncode == 2 and why in r.stderr and not r.stdout.strip(), (refused, r.stdout, r.stderr)


def test_normalize_answers_as_the_app_serves(api):
    status, out = _call(api["base"], "/normalize", api["token"],
                        {"mentions": [MENTION, "胆囊切除术"], "vocabulary": "demo-procedures", "k": 5})
    assert status == 200, out
    assert out["vocabulary"] == "demo-procedures" and len(out["results"]) == 2
    first = out["results"][0]
    assert first["mention"] == MENTION and first["chosen"] == ["甲状腺病损切除术"]
    assert first["predicted_count"] == 1 and 0 < first["confidence"] <= 1
    assert first["model_version"].startswith("pretrained:")  # the shipped model serves: nothing promoted
    top = first["candidates"][0]
    assert len(first["candidates"]) == 5 and top["term"] == "甲状腺病损切除术" and top["code"] == top["codes"][0]
    assert {k["kind"] for k in first["keywords"]} >= {"site", "type"}
    # a coded mention is answered from the coders' history, as on the coding page
    status, out = _call(api["base"], "/normalize", api["token"], {"mentions": [api["coded"]],
                                                                  "vocabulary": "demo-procedures"})
    assert status == 200 and out["results"][0]["chosen"] == ["甲状腺病损切除术"]


def test_tokens_and_bad_requests_get_clear_answers(api):
    body = {"mentions": [MENTION], "vocabulary": "demo-procedures"}
    assert _call(api["base"], "/normalize", None, body)[0] == 401
    assert _call(api["base"], "/normalize", "not-a-token", body)[0] == 401
    assert _call(api["base"], "/normalize", api["disabled"], body)[0] == 401  # account disabled after issue
    status, out = _call(api["base"], "/normalize", api["token"], {"mentions": [MENTION], "vocabulary": "icd-99"})
    assert status == 404 and "demo-procedures" in out["detail"]
    status, out = _call(api["base"], "/normalize", api["token"], {"mentions": [MENTION]})
    assert status == 422 and "name the vocabulary" in out["detail"]  # two are loaded
    # a part of the name only one vocabulary holds names it (the README's yidu-n7k); one two hold does not
    status, out = _call(api["base"], "/normalize", api["token"], {"mentions": [MENTION], "vocabulary": "PROCEDURES"})
    assert status == 200 and out["vocabulary"] == "demo-procedures"
    status, out = _call(api["base"], "/normalize", api["token"], {"mentions": [MENTION], "vocabulary": "demo"})
    assert status == 404 and "demo-diagnoses" in out["detail"]
    status, out = _call(api["base"], "/normalize", api["token"], {"mentions": ["x" * 501], "vocabulary": "demo-procedures"})
    assert status == 422 and "500" in out["detail"]
    status, out = _call(api["base"], "/normalize", api["token"], {"mentions": []})
    assert status == 422
    assert _call(api["base"], "/health")[0] == 200
    status, spec = _call(api["base"], "/openapi.json")
    assert status == 200 and {"/normalize", "/decisions", "/fhir/ConceptMap/$translate"} <= set(spec["paths"])
    # too many mentions: the problem is named, the mentions (patient text, perhaps) are not echoed back
    status, out = _call(api["base"], "/normalize", api["token"], {"mentions": ["病历甲"] * 1001})
    assert status == 422 and "1000" in json.dumps(out) and "病历甲" not in json.dumps(out, ensure_ascii=False)
    # /docs works offline: its script and style come from this server, not a CDN
    with urllib.request.urlopen(api["base"] + "/docs", timeout=60) as r:
        page = r.read().decode()
    assert "cdn" not in page.lower() and "swagger-ui-bundle.js" in page
    script = next(s for s in page.split('"') if s.endswith("swagger-ui-bundle.js"))
    with urllib.request.urlopen(api["base"] + script, timeout=60) as r:
        assert r.status == 200 and len(r.read()) > 100_000


def test_the_api_answers_with_what_coders_taught_in_the_app_since_it_started(api, db_url):
    """The API's engine was built at its first call and never learnt: a mention a coder coded in the app (another
    process) was answered as before, by the engine's own guess. It now catches up from the database, a few
    seconds late at most (db.http_api.FRESH_S)."""
    from db import services

    text = "阑尾切除伴腹腔引流"
    status, out = _call(api["base"], "/normalize", api["token"], {"mentions": [text], "vocabulary": "demo-procedures"})
    assert status == 200, out
    guess = out["results"][0]["chosen"]
    coded = next(c["term"] for c in out["results"][0]["candidates"] if [c["term"]] != guess)
    with services.session_scope(db_url) as s:  # what the coding page writes, in this process, not the API's
        bid = services.create_batch(s, "ward 9", services.vocabulary_id(s, "demo-procedures"), [text])
        services.record_decision(s, services.mentions(s, bid)[0]["id"], "cora", "correct", [coded])
    t0, answers = time.time(), []
    while time.time() - t0 < 60 and (not answers or answers[-1] != [coded]):
        status, out = _call(api["base"], "/normalize", api["token"], {"mentions": [text],
                                                                      "vocabulary": "demo-procedures"})
        assert status == 200, out
        answers.append(out["results"][0]["chosen"])
        time.sleep(0.5)
    assert answers[-1] == [coded], (guess, coded, answers[-3:])
    assert time.time() - t0 < 30  # FRESH_S, and a catch-up's reading of the history
    # re-coded: read by a catch-up that reads only the decisions made since the one before
    again = next(c["term"] for c in out["results"][0]["candidates"] if c["term"] != coded)
    with services.session_scope(db_url) as s:
        services.record_decision(s, services.mentions(s, bid)[0]["id"], "cora", "correct", [again])
    t0, answers = time.time(), []
    while time.time() - t0 < 60 and (not answers or answers[-1] != [again]):
        answers.append(_call(api["base"], "/normalize", api["token"], {"mentions": [text],
                                                                       "vocabulary": "demo-procedures"})[1]
                       ["results"][0]["chosen"])
        time.sleep(0.5)
    assert answers[-1] == [again], (coded, again, answers[-3:])


def test_a_large_call_does_not_hold_up_a_small_one(api):
    """A user test: a one-mention call waited the whole 11 s of another caller's 1,000 mentions. Calls now take
    turns at the engine, a chunk at a time, so the small one comes back first."""
    import threading

    assert _call(api["base"], "/normalize", api["token"], {"mentions": [MENTION], "vocabulary": "demo-procedures"}
                 )[0] == 200  # the engine is built and warm: the large call goes straight to it
    done: dict[str, float] = {}
    big = {"mentions": [f"{MENTION}{i}" for i in range(1000)], "vocabulary": "demo-procedures", "k": 3}

    def call_big():
        _call(api["base"], "/normalize", api["token"], big)
        done["big"] = time.time() - t0

    t0 = time.time()
    worker = threading.Thread(target=call_big)
    worker.start()
    time.sleep(1.5)  # the large call is at the engine (it takes several seconds: 16 turns of 64 mentions)
    status, out = _call(api["base"], "/normalize", api["token"],
                        {"mentions": [MENTION], "vocabulary": "demo-procedures"})
    done["small"] = time.time() - t0
    worker.join(300)
    assert status == 200 and out["results"][0]["chosen"] == ["甲状腺病损切除术"]
    # back while the large call is far from done (it waited for all of it: 5.17 s against 5.25 s)
    assert done["small"] - 1.5 < (done["big"] - 1.5) / 2, done


def test_decisions_and_fhir_translate(api):
    from fhir.resources.parameters import Parameters

    status, out = _call(api["base"], f"/decisions?batch_id={api['batch']}", api["token"])
    assert status == 200 and out["count"] == 2 and out["total"] == 2 and out["next_offset"] is None
    by_text = {d["mention"]: d for d in out["decisions"]}
    assert by_text[api["coded"]]["terms"] == ["甲状腺病损切除术"] and by_text[api["rejected"]]["action"] == "reject"
    # paged: every decision is reachable, none twice
    first = _call(api["base"], f"/decisions?batch_id={api['batch']}&limit=1", api["token"])[1]
    assert (first["count"], first["total"], first["next_offset"]) == (1, 2, 1)
    second = _call(api["base"], f"/decisions?batch_id={api['batch']}&limit=1&offset=1", api["token"])[1]
    assert second["next_offset"] is None and {d["mention"] for d in first["decisions"] + second["decisions"]} == \
        {api["coded"], api["rejected"]}
    status, out = _call(api["base"], "/decisions?batch_id=999999", api["token"])
    assert status == 404 and "999999" in out["detail"]

    q = urllib.parse.urlencode({"sourceCode": api["coded"]})
    status, out = _call(api["base"], f"/fhir/ConceptMap/$translate?{q}", api["token"])
    assert status == 200
    p = Parameters.model_validate(out)  # a valid FHIR R5 Parameters resource
    params = {x.name: x for x in p.parameter}
    assert params["result"].valueBoolean is True
    match = next(x for x in p.parameter if x.name == "match")
    part = {x.name: x for x in match.part}
    assert part["relationship"].valueCode == "equivalent"
    assert part["concept"].valueCoding.display == "甲状腺病损切除术" and part["concept"].valueCoding.code == "06.3100"

    body = {"resourceType": "Parameters", "parameter": [{"name": "sourceCode", "valueCode": api["rejected"]}]}
    status, out = _call(api["base"], "/fhir/ConceptMap/$translate", api["token"], body)
    assert status == 200
    assert out["parameter"][0] == {"name": "result", "valueBoolean": False}
    assert "unmappable" in out["parameter"][1]["valueString"]
    status, out = _call(api["base"], "/fhir/ConceptMap/$translate?sourceCode=never-coded", api["token"])
    assert status == 200 and out["parameter"][0]["valueBoolean"] is False and "no coded decision" in \
        out["parameter"][1]["valueString"]
    status, out = _call(api["base"], "/fhir/ConceptMap/$translate", api["token"], {"resourceType": "Patient"})
    assert status == 400 and out["resourceType"] == "OperationOutcome"
    # a system no batch has is said so, not answered "no coded decision"; the batch's own system narrows
    for system in ("http://snomed.info/sct", "urn:termnorm:batch:abc"):
        q = urllib.parse.urlencode({"sourceCode": api["coded"], "system": system})
        status, out = _call(api["base"], f"/fhir/ConceptMap/$translate?{q}", api["token"])
        assert status == 404 and out["resourceType"] == "OperationOutcome" and system in out["issue"][0]["diagnostics"]
    q = urllib.parse.urlencode({"sourceCode": api["coded"], "system": f"urn:termnorm:batch:{api['batch']}"})
    assert _call(api["base"], f"/fhir/ConceptMap/$translate?{q}", api["token"])[1]["parameter"][0]["valueBoolean"]
