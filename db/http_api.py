"""The normalization API: what the systems around the coders call (``termnorm serve``; FastAPI over uvicorn).

Handlers only: every answer comes from the same services and serving engine as the app's pages (db.serving: the
promoted model version on the edition in force, fed with every coded mention), so an ETL job and a coder see the
same suggestion. OpenAPI documentation at ``/docs`` (and ``/openapi.json``).

=========================================  ==================================================================
``GET  /health``                           no token: ``{"status": "ok"}``, 503 when the database is not answering
``GET  /vocabularies``                     the vocabularies with their edition and code system
``POST /normalize``                        one or many mentions -> ranked candidates with codes, scores,
                                           keywords, predicted count, confidence (and its word), model version
``GET  /decisions``                        the latest decision per mention (``batch_id``, ``mention``, ``limit``,
                                           ``offset``; ``total`` and ``next_offset`` page through all of them)
``GET|POST /fhir/ConceptMap/$translate``   FHIR R5 ``$translate`` over the coded decisions (``sourceCode``, or
                                           ``sourceCoding``; ``system`` = ``urn:termnorm:batch:<id>`` narrows it)
=========================================  ==================================================================

Authentication: ``Authorization: Bearer <token>``, a token made by ``termnorm api-token USER`` (stored as its
SHA-256 like a browser's sign-in, db.auth) and answering with that user's role: reading needs ``coder``. A
disabled account or a revoked / expired token gets 401.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, HTTPException, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi_offline import FastAPIOffline
from pydantic import BaseModel, Field
from sqlalchemy import text
from sqlalchemy.exc import InterfaceError, OperationalError

from db import auth, exports, import_rows, learning, serving, services
from termnorm.records import MAX_MENTION_CHARS, suggestion_dict
from termnorm.stats import band_of

#: Mentions per /normalize call (an ETL sends batches; more belongs in a batch import and a background job).
MAX_MENTIONS = 1000
#: Mention length accepted (db.imports refuses longer mentions in files for the same reason).
MAX_CHARS = MAX_MENTION_CHARS  # termnorm.records: the same limit as import and normalize --input
#: Document length accepted with a mention (db.import_rows: the same limit for imported files).
MAX_DOCUMENT_CHARS = import_rows.MAX_DOCUMENT_CHARS

#: Mentions a request's turn at a vocabulary's engine codes before the next caller's turn (a 1,000-mention call
#: held the engine 11 s while a one-mention call waited all of it).
CHUNK = 64
log = logging.getLogger("termnorm.api")

# /docs and /redoc from files installed with termnorm (fastapi-offline): the CDN FastAPI uses is out of reach
app = FastAPIOffline(title="termnorm", version="1", description=__doc__.split("\n\n")[0])


@app.exception_handler(RequestValidationError)
async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
    """422 naming each problem without echoing the input back: it may be patient text, and 10,000 of them."""
    return JSONResponse({"detail": [{k: v for k, v in e.items() if k not in ("input", "ctx", "url")}
                                    for e in exc.errors()]}, status_code=422)


@app.exception_handler(OperationalError)
@app.exception_handler(InterfaceError)
async def _database_down(request: Request, exc: Exception) -> JSONResponse:
    log.error("database not answering: %s", exc)
    return JSONResponse({"detail": "the database is not answering; retry later (the server's log has the "
                                   "details)"}, status_code=503, headers={"Retry-After": "30"})


@app.exception_handler(Exception)
async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
    log.exception("unexpected error on %s %s", request.method, request.url.path)
    return JSONResponse({"detail": "internal error (logged on the server)"}, status_code=500)


# ------------------------------------------------------------------------------------- who is calling
def caller(request: Request) -> dict:
    """The user a bearer token signs in (401 without a valid one)."""
    header = request.headers.get("authorization", "")
    token = header[7:].strip() if header.lower().startswith("bearer ") else ""
    with services.session_scope() as s:
        user = auth.session_user(s, token, kind="api")
    if user is None:
        raise HTTPException(401, "a valid token is needed: Authorization: Bearer <token> (termnorm api-token USER)",
                            headers={"WWW-Authenticate": "Bearer"})
    return user


def role(needed: str):
    def check(user: Annotated[dict, Depends(caller)]) -> dict:
        if not auth.has_role(user["role"], needed):
            raise HTTPException(403, f"this needs the {needed} role; {user['username']} is a {user['role']}")
        return user
    return check


Coder = Annotated[dict, Depends(role("coder"))]


# ------------------------------------------------------------------------------------- the serving engines
class FairLock:
    """A lock granted in the order it was asked for. Written by hand: threading.Lock makes no such promise, and a
    caller taking it again chunk after chunk could starve the others."""

    def __init__(self):
        self._turns = threading.Condition()
        self._next = self._serving = 0

    def __enter__(self):
        with self._turns:
            ticket, self._next = self._next, self._next + 1
            self._turns.wait_for(lambda: self._serving == ticket)

    def __exit__(self, *exc):
        with self._turns:
            self._serving += 1
            self._turns.notify_all()


class _Engines:
    """The serving engine of each vocabulary as the app holds it (db.engine_holder.ServingSwitch: a promotion or
    a new encoder is built in the background while the engine before answers), with what coders taught in the app
    since (decisions, synonyms, abbreviations: db.serving.catch_up) -- at most :data:`FRESH_S` late. It was built
    once per version and never learnt: a mention coded in the app an hour before was answered as before it. A
    first-come first-served lock each (an engine is not shared between threads while it answers)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._switches: dict[tuple, tuple[FairLock, object]] = {}
        self._fresh: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # per engine holder: a new one reads all

    def get(self, vocabulary_id: int):
        """(the vocabulary's turn lock, its engine holder), caught up with the database."""
        from db.engine_holder import ServingSwitch

        url = services.database_url()
        with self._lock:
            turns, switch = self._switches.setdefault((url, vocabulary_id),
                                                      (FairLock(), ServingSwitch(url, vocabulary_id)))
        holder = switch.get(serving.serving_key(url, vocabulary_id))
        self._catch_up(holder, url, vocabulary_id)
        return turns, holder

    def _catch_up(self, holder, url, vocabulary_id: int) -> None:
        fresh = self._fresh.setdefault(holder, _Freshness())
        if time.monotonic() - fresh.read_at < FRESH_S:
            return
        with holder.lock:  # one catch-up at a time; answers wait for it, as a coder's page waits for a decision
            if time.monotonic() - fresh.read_at < FRESH_S:
                return
            newest = serving.audit_mark(url)  # every decision, synonym and abbreviation is audited
            # once more after a change, though nothing changed since: on PostgreSQL a write numbered below the newest
            # may commit after that was read (concurrent coders), and no later mark would then say so
            if newest != fresh.audit or not fresh.settled:
                decided = serving.decision_mark(url)  # before the read: a decision made during it is read next time
                for text in serving.catch_up(holder.engine, url, vocabulary_id, after_decision=fresh.decided):
                    holder._learnt(text)
                # from the mark one catch-up back, for the same reason
                fresh.settled = newest == fresh.audit
                fresh.audit, fresh.decided, fresh.decided_next = newest, fresh.decided_next, decided
            fresh.read_at = time.monotonic()


@dataclass
class _Freshness:
    """How far the API's engine has caught up with the database: the audit entry and decision it read up to."""
    read_at: float = 0.0
    audit: int | None = None
    decided: int = 0  # the engine was built from the database: its first catch-up reads every decision
    decided_next: int = 0
    settled: bool = False  # the last catch-up found nothing new: the next reads only after a change


#: how late the API may answer after a coder taught something in the app (seconds): a catch-up reads the decisions
#: made since the one before (the first reads the whole coded history: about 1 s on NCBI's 5,000 coded mentions)
FRESH_S = 5.0
ENGINES = _Engines()


def _vocabulary(name: str | None) -> dict:
    with services.session_scope() as s:
        vocabs = services.vocabularies(s)
        # the exact name, the id, or the one name holding it (yidu-n7k)
        vid = services.vocabulary_id(s, name) if name is not None else None
    if name is None and len(vocabs) == 1:
        return vocabs[0]
    found = next((v for v in vocabs if name is not None and v["id"] == vid), None)
    if found is None:
        known = ", ".join(v["name"] for v in vocabs) or "none loaded"
        raise HTTPException(404 if name else 422, f"no vocabulary {name!r}; known: {known}" if name else
                            f"name the vocabulary (known: {known})")
    return found


# ------------------------------------------------------------------------------------- routes
@app.get("/health")
def health():
    """No token: ``{"status": "ok"}`` when the database answers, else 503 (a load balancer takes this server out)."""
    try:
        with services.session_scope() as s:
            s.execute(text("SELECT 1"))
    except (OperationalError, InterfaceError) as e:
        log.error("health: database not answering: %s", e)
        return JSONResponse({"status": "database not answering"}, status_code=503, headers={"Retry-After": "30"})
    return {"status": "ok"}


@app.get("/vocabularies")
def vocabularies(user: Coder) -> list[dict]:
    with services.session_scope() as s:
        return [{"name": v["name"], "terms": v["n_terms"], "edition": v["edition"],
                 "system": v["system_uri"] or services.code_system(v["name"])} for v in services.vocabularies(s)]


class NormalizeRequest(BaseModel):
    mentions: list[str] = Field(min_length=1, max_length=MAX_MENTIONS, examples=[["右侧甲状腺肿瘤切除术"]])
    vocabulary: str | None = Field(None, description="vocabulary: its name, id, or a part of the name "
                                   "only it holds, e.g. yidu-n7k (optional when only one is loaded)")
    k: int = Field(10, ge=1, le=50, description="candidates returned per mention")
    documents: list[str] | None = Field(None, description="the text each mention was found in (a note, an "
                                        "abstract), one per mention: abbreviations it defines are read")


@app.post("/normalize")
def normalize(req: NormalizeRequest, user: Coder) -> dict:
    long = [i for i, m in enumerate(req.mentions) if len(m) > MAX_CHARS or not m.strip()]
    if long:
        raise HTTPException(422, f"mentions {long[:10]} are empty or longer than {MAX_CHARS} characters")
    if req.documents is not None and len(req.documents) != len(req.mentions):
        raise HTTPException(422, f"documents: one per mention ({len(req.mentions)}), found {len(req.documents)}")
    if req.documents is not None and any(len(d) > MAX_DOCUMENT_CHARS for d in req.documents):
        raise HTTPException(422, f"documents longer than {MAX_DOCUMENT_CHARS:,} characters")
    vocab = _vocabulary(req.vocabulary)
    turns, holder = ENGINES.get(vocab["id"])
    engine = holder.engine
    sugs = []
    for at in range(0, len(req.mentions), CHUNK):  # turn by turn: other callers' mentions go between the chunks
        with turns, holder.lock:
            sugs += engine.suggest_batch(list(req.mentions[at:at + CHUNK]), k=max(20, req.k),
                                         documents=req.documents[at:at + CHUNK] if req.documents else None)
    bands = learning.serving_bands(None, vocab["id"], model_version=sugs[0].model_version if sugs else None)
    out = []
    for sug in sugs:
        d = suggestion_dict(sug)
        d["candidates"] = d["candidates"][:req.k]
        band = band_of(sug.confidence, bands)
        d["confidence_word"] = band["word"] if band else None
        out.append(d)
    return {"vocabulary": vocab["name"], "edition": vocab["edition"], "results": out}


@app.get("/decisions")
def decisions(user: Coder, batch_id: int | None = None, mention: str | None = None,
              limit: Annotated[int, Query(ge=1, le=10_000)] = 1000,
              offset: Annotated[int, Query(ge=0)] = 0) -> dict:
    """A page of the latest decisions (``total`` of them; the next page at ``next_offset``, null after the last)."""
    with services.session_scope() as s:
        if batch_id is not None and batch_id not in {b["id"] for b in services.batches(s)}:
            raise HTTPException(404, f"no batch {batch_id}")
        total = services.decisions_count(s, batch_id, mention=mention)
        rows = exports.jsonable_records(services.decisions_frame(s, batch_id, mention=mention, offset=offset,
                                                                 limit=limit))
    more = offset + limit < total
    return {"total": total, "offset": offset, "count": len(rows), "next_offset": offset + limit if more else None,
            "decisions": rows}


# ------------------------------------------------------------------------------------- FHIR $translate
def _parameters(params: list[dict]) -> JSONResponse:
    return JSONResponse({"resourceType": "Parameters", "parameter": params}, media_type="application/fhir+json")


def _outcome(status: int, text: str) -> JSONResponse:
    return JSONResponse({"resourceType": "OperationOutcome", "issue": [
        {"severity": "error", "code": "invalid" if status < 500 else "exception", "diagnostics": text}]},
        status_code=status, media_type="application/fhir+json")


class UnknownSystem(ValueError):
    """A ``$translate`` system no group of the ConceptMap has (answered as an OperationOutcome, not 'no match')."""


def translate_parameters(code: str, system: str | None) -> list[dict]:
    """The ``$translate`` output for a source code (a mention) over every coded decision: a ``match`` per target
    of each element with that code (R5: relationship, concept, originMap); ``result`` says whether any match is
    a mapping (a rejected mention is an element with ``noMap``: no match, result false)."""
    with services.session_scope() as s:
        cm = exports.fhir_concept_map(exports.jsonable_records(services.decisions_frame(s, None)))
    want = exports.fhir_code(code)
    if system and system not in {g["source"] for g in cm.get("group", [])}:
        known = sorted({g["source"] for g in cm.get("group", [])})
        raise UnknownSystem(f"no coded batch has the system {system!r}: a system here is urn:termnorm:batch:<id> "
                            f"of a batch with decisions ({', '.join(known[:10]) or 'none yet'})")
    matches, unmapped = [], 0
    for group in cm.get("group", []):
        if system and group["source"] != system:
            continue
        target_system, _, version = group["target"].partition("|")
        for el in group["element"]:
            if el["code"] != want:
                continue
            if el.get("noMap"):
                unmapped += 1
            for t in el.get("target", []):
                coding = {"system": target_system, "code": t["code"], "display": t["display"]}
                if version:
                    coding["version"] = version
                part = [{"name": "relationship", "valueCode": t["relationship"]},
                        {"name": "concept", "valueCoding": coding},
                        {"name": "originMap", "valueCanonical": cm["url"]}]
                matches.append({"name": "match", "part": part})
    result = any(m["part"][0]["valueCode"] != "not-related-to" for m in matches)
    if result:
        message = f"{len(matches)} target(s) for {want!r}"
    elif unmapped:
        message = f"{want!r} was coded as unmappable (no term of the vocabulary fits)"
    else:
        message = f"no coded decision for {want!r}"
    return [{"name": "result", "valueBoolean": result}, {"name": "message", "valueString": message}, *matches]


@app.get("/fhir/ConceptMap/$translate")
def translate_get(user: Coder, sourceCode: str | None = None, system: str | None = None):  # noqa: N803 - FHIR names
    if not sourceCode:
        return _outcome(400, "sourceCode is required (the mention text), e.g. ?sourceCode=右侧甲状腺肿瘤切除术")
    try:
        return _parameters(translate_parameters(sourceCode, system))
    except UnknownSystem as e:
        return _outcome(404, str(e))


@app.post("/fhir/ConceptMap/$translate")
async def translate_post(request: Request, user: Coder):
    """A FHIR ``Parameters`` body with ``sourceCode`` (valueCode) or ``sourceCoding`` (valueCoding: code, system)."""
    try:
        body = await request.json()
    except ValueError:
        return _outcome(400, "the body is not JSON (a FHIR Parameters resource)")
    if not isinstance(body, dict) or body.get("resourceType") != "Parameters":
        return _outcome(400, "the body must be a FHIR Parameters resource")
    code = system = None
    for p in body.get("parameter", []):
        if p.get("name") == "sourceCode":
            code = p.get("valueCode")
        elif p.get("name") == "sourceCoding":
            coding = p.get("valueCoding") or {}
            code, system = coding.get("code"), coding.get("system")
        elif p.get("name") == "system":
            system = p.get("valueUri")
    if not code:
        return _outcome(400, "a sourceCode or sourceCoding parameter is required")
    return await _in_thread(translate_parameters, code, system)


async def _in_thread(fn, *args):
    from starlette.concurrency import run_in_threadpool

    try:
        return _parameters(await run_in_threadpool(fn, *args))
    except UnknownSystem as e:
        return _outcome(404, str(e))


def main(host: str = "127.0.0.1", port: int = 8000) -> int:
    """``termnorm serve``: the API on ``host:port`` (uvicorn; one process; put it behind the hospital's TLS proxy)."""
    import uvicorn

    try:
        services.init_db(services.database_url())  # migrate before the first request, as the app does
    except services.DATABASE_DOWN as e:  # started before the database (a reboot): serve 503s until it answers
        first = str(getattr(e, "orig", None) or e).strip().splitlines()[0]
        log.error("the database is not answering yet (%s); /health and every call answer 503 until it does", first)
    uvicorn.run(app, host=host, port=port, log_level="info")
    return 0
