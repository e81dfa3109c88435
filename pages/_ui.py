"""Shared pieces of the review app: the cached engine and database, and the keyword highlight markup.

Pages import this module and stay free of SQL and model code: the database
is reached through :mod:`db.services`, suggestions through
:class:`EngineHolder`, which wraps the one cached :class:`termnorm.engine.Engine`
of a vocabulary (loaded once per vocabulary with ``st.cache_resource`` and
fed at start-up with the coded mentions and user synonyms stored in the
database, so a restarted app knows everything coders taught it).

The highlight shows the keywords that decide a code (approach A's KAR
attends to the procedure *site* and *type*; methods.md): every mention and
candidate text is HTML-escaped first and only then wrapped in
``<span class="kw kw-<kind>">`` tags, so a mention such as
``<img src=x onerror=...>`` is displayed as text.
"""

from __future__ import annotations

import html
import logging
import re
import threading
import time
from dataclasses import dataclass

import streamlit as st

from db import auth, serving, services
from termnorm.engine import Engine, demo_mentions, demo_vocabulary
from termnorm.records import KEYWORD_KINDS, Candidate, KeywordSpan, Suggestion
from termnorm.text.normalize import normalize

DEMO_SETS = ("procedures", "diagnoses")
DEMO_USER = "demo"

# Kinds whose disagreement between mention and candidate is shown as a mismatch:
# the body site and the procedure / disease type decide the code, while approach,
# laterality and nature "usually do not" (methods.md, "What makes the task hard").
MISMATCH_KINDS = ("site", "type")

# Candidates in the coding page's main table; the next ones sit in an expander. 10 = approach A's
# k_c (recall top-10 feeds the ranker). This many count as "shown": those not chosen become
# confirmed hard negatives (db.services.record_decision(shown=...)).
SHOWN = 10
# Mentions prepared ahead on the coding page. One is enough for the next click; 3 covers a
# coder skipping a couple, and costs ~20 ms of engine time per page with the demo engine
# (benchmarks/next_suggestion.py). More would spend CPU on mentions a colleague may take first.
PREPARE_AHEAD = 3

KIND_LABELS = {"site": "site 部位", "type": "type 类型", "approach": "approach 入路",
               "laterality": "laterality 侧别", "nature": "nature 性质"}

CSS = """
<style>
.kw{border-radius:4px;padding:0 2px;margin:0 1px;border-bottom:2px solid transparent}
.kw-site{background:#dbeafe;border-color:#2563eb;color:#1e3a8a}
.kw-type{background:#ffedd5;border-color:#ea580c;color:#7c2d12}
.kw-approach{background:#ede9fe;border-color:#7c3aed;color:#4c1d95}
.kw-laterality{background:#ccfbf1;border-color:#0d9488;color:#134e4a}
.kw-nature{background:#fce7f3;border-color:#db2777;color:#831843}
.kw-match::after{content:"✓";color:#15803d;font-weight:700;font-size:.75em;margin-left:1px;vertical-align:super}
.kw-mismatch{outline:2px dashed #dc2626;outline-offset:0}
.kw-mismatch::after{content:"✗";color:#dc2626;font-weight:700;font-size:.75em;margin-left:1px;vertical-align:super}
.tn-mention{font-size:1.9rem;line-height:2.6rem;padding:.6rem 1rem;border:1px solid #e5e7eb;
  border-left:6px solid #2563eb;
  border-radius:8px;background:#fafafa;word-break:break-all}
.tn-legend{font-size:.8rem;color:#4b5563}
.tn-legend .kw{font-size:.8rem}
.tn-badge{display:inline-block;border-radius:999px;padding:1px 10px;font-size:.85rem;font-weight:600;margin-right:6px}
.tn-sure{background:#dcfce7;color:#166534}
.tn-likely{background:#e0f2fe;color:#075985}
.tn-unsure{background:#fef3c7;color:#92400e}
.tn-grey{background:#f3f4f6;color:#374151}
.tn-chosen{display:inline-block;border:1px solid #16a34a;background:#f0fdf4;border-radius:6px;padding:2px 8px;
  margin:2px 4px 2px 0}
table.tn-cands{border-collapse:collapse;width:100%;font-size:.95rem}
table.tn-cands th{text-align:left;font-weight:600;color:#6b7280;font-size:.78rem;
  border-bottom:1px solid #e5e7eb;padding:4px 6px}
table.tn-cands td{border-bottom:1px solid #f3f4f6;padding:5px 6px;vertical-align:middle}
table.tn-cands tr.tn-pick td{background:#f0fdf4}
table.tn-cands tr.tn-pick td:first-child{border-left:4px solid #16a34a}
.tn-code{font-family:ui-monospace,monospace;color:#374151;font-size:.85rem}
.tn-bar{display:inline-block;height:8px;border-radius:4px;background:#2563eb;vertical-align:middle;margin-right:6px}
.tn-part{display:inline-block;background:#f3f4f6;border-radius:4px;padding:0 5px;margin:1px 2px;
  font-size:.78rem;color:#374151}
.tn-miss{color:#9ca3af;font-size:.78rem}
.tn-keys{font-size:.8rem;color:#6b7280}
.st-key-_on_screen{display:none}
.tn-keys kbd{border:1px solid #d1d5db;border-bottom-width:2px;border-radius:4px;padding:0 4px;font-size:.8rem;background:#fff}
</style>
"""


# ---------------------------------------------------------------------------------- markup
def esc(text: str) -> str:
    """HTML-escape (quotes too) and flatten newlines, so text can sit inside one-line HTML blocks."""
    return html.escape(" ".join(str(text).splitlines()), quote=True)


def keyword_key(span: KeywordSpan) -> str:
    """What two keywords must share to be "the same": normalized text, a type without its
    trailing 术 (mentions write 切除 / 探查 / 清扫 where terms write 切除术 / 探查术 / 清扫术)."""
    text = normalize(span.text)
    return text.removesuffix("术") or text if span.kind == "type" else text


def compare_keywords(mention_spans: list[KeywordSpan], term_spans: list[KeywordSpan]) -> list[str | None]:
    """Per keyword of a candidate term: ``"match"``, ``"mismatch"`` or None (nothing to compare).

    A keyword matches when the mention has a keyword of the same kind with the
    same text (:func:`keyword_key`); it mismatches when the mention has keywords of that
    kind, none with this text, and the kind is one of :data:`MISMATCH_KINDS`
    (a different site or type usually means a different code).
    """
    mine: dict[str, set[str]] = {}
    for s in mention_spans:
        mine.setdefault(s.kind, set()).add(keyword_key(s))
    out: list[str | None] = []
    for s in term_spans:
        have = mine.get(s.kind)
        if not have:
            out.append(None)
        elif keyword_key(s) in have:
            out.append("match")
        else:
            out.append("mismatch" if s.kind in MISMATCH_KINDS else None)
    return out


def missing_keywords(mention_spans: list[KeywordSpan], term_spans: list[KeywordSpan]) -> list[KeywordSpan]:
    """Site / type keywords of the mention that the candidate lacks (shown greyed after the term)."""
    have = {(s.kind, keyword_key(s)) for s in term_spans}
    seen, out = set(), []
    for s in mention_spans:
        key = (s.kind, keyword_key(s))
        if s.kind in MISMATCH_KINDS and key not in have and key not in seen:
            seen.add(key)
            out.append(s)
    return out


def highlight_html(text: str, spans: list[KeywordSpan], marks: list[str | None] | None = None) -> str:
    """``text`` escaped, with each keyword span wrapped in ``<span class="kw kw-<kind> [kw-match|kw-mismatch]">``.

    Overlapping or out-of-range spans are skipped (the first, longest wins).
    """
    order = sorted(range(len(spans)), key=lambda i: (spans[i].start, -spans[i].end))
    out, pos = [], 0
    for i in order:
        sp = spans[i]
        if sp.start < pos or sp.end > len(text) or sp.start >= sp.end:
            continue
        kind = sp.kind if sp.kind in KEYWORD_KINDS else "other"
        mark = marks[i] if marks else None
        cls = f"kw kw-{kind}" + (f" kw-{mark}" if mark else "")
        title = kind + (f" ({mark})" if mark else "")
        out.append(esc(text[pos:sp.start]))
        out.append(f'<span class="{cls}" title="{title}">{esc(text[sp.start:sp.end])}</span>')
        pos = sp.end
    out.append(esc(text[pos:]))
    return "".join(out)


def legend_html(candidates: bool = True) -> str:
    """Colour key of the keyword kinds (and of the ✓ / ✗ marks when candidates are compared)."""
    chips = " ".join(f'<span class="kw kw-{k}">{esc(KIND_LABELS[k])}</span>' for k in KEYWORD_KINDS)
    marks = (' &nbsp;·&nbsp; in candidates: <span class="kw kw-site kw-match">same as mention</span> '
             '<span class="kw kw-site kw-mismatch">different site / type</span>') if candidates else ""
    return f'<div class="tn-legend">Keywords: {chips}{marks}</div>'


def confidence_badge(conf: float, bands: dict | None = None) -> str:
    """How sure the suggestion is, in the words of the serving version's bands (termnorm.stats, calibrated on
    its held-out mentions): "sure · 96%" / "likely · 85%" give the share of held-out suggestions at least this
    confident that were right; "unsure" in amber; grey "not measured yet" before any measurement. A raw
    probability is never the headline: a ranker's scores need not read as chances."""
    from termnorm.stats import band_of

    band = band_of(conf, bands)
    if band is None:
        return (f'<span class="tn-badge tn-grey" title="the serving model was not measured on held-out mentions: '
                f'model confidence {conf:.2f}">confidence not measured yet</span>')
    word = band["word"]
    if "precision" not in band:
        return (f'<span class="tn-badge tn-unsure" title="below every band measured on {bands["n"]} held-out '
                f'mentions: model confidence {conf:.2f}">{esc(word)}</span>')
    return (f'<span class="tn-badge tn-{esc(word)}" title="{band["precision"]:.0%} of {band["support"]} held-out '
            f'suggestions at least this confident were right (model confidence {conf:.2f})">'
            f'{esc(word)} · {band["precision"]:.0%}</span>')


#: Candidate scores that are not a recall strategy's and stay out of the "found by" column: the fused
#: ranker probability (its own column), the surface scorer's log-odds (a ranker input, any sign) and the
#: term classifier's score (a ranker input given to every candidate, 0 for terms never coded).
NOT_RECALL_SCORES = frozenset({"ranker", "diff", "clf"})


def code_cell(codes: list[str]) -> str:
    """The code exported (bold: the first, the most specific) and, greyed, the term's other codes."""
    if not codes:
        return ""
    rest = f' <span class="tn-miss" title="other codes of this term">{esc(", ".join(codes[1:]))}</span>' \
        if len(codes) > 1 else ""
    return f'<b title="exported code">{esc(codes[0])}</b>{rest}'


def candidate_table_html(cands: list[Candidate], mention_spans: list[KeywordSpan], chosen: list[str],
                         tag, start: int = 1) -> str:
    """The ranked candidates as one HTML table: rank, code, highlighted term, fused score and its parts."""
    if not cands:
        return '<div class="tn-legend">No candidate.</div>'
    top = max((c.score for c in cands), default=1.0) or 1.0
    ranked = any("ranker" in c.scores for c in cands)  # the lexical-only engine has no ranker column
    rows = []
    for r, c in enumerate(cands, start=start):
        spans = tag(c.term)
        marks = compare_keywords(mention_spans, spans)
        term = highlight_html(c.term, spans, marks)
        miss = missing_keywords(mention_spans, spans)
        if miss:
            term += ' <span class="tn-miss">lacks ' + ", ".join(esc(s.text) for s in miss) + "</span>"
        parts = "".join(f'<span class="tn-part">{esc(k)} {v:.2f}</span>'
                        for k, v in sorted(c.scores.items()) if k not in NOT_RECALL_SCORES)
        ranker = (f'<td>{c.scores["ranker"]:.2f}</td>' if "ranker" in c.scores else "<td>–</td>") if ranked else ""
        width = max(2, int(60 * max(0.0, c.score) / top))
        cls = ' class="tn-pick"' if c.term in chosen else ""
        rows.append(f'<tr{cls}><td>{r}</td><td class="tn-code">{code_cell(c.codes)}</td><td>{term}</td>'
                    f'<td><span class="tn-bar" style="width:{width}px"></span>{c.score:.2f}</td>'
                    f"<td>{parts}</td>{ranker}</tr>")
    head = ("<tr><th>#</th><th>code</th><th>term</th><th>fused score</th><th>found by (recall scores)</th>"
            + ("<th>ranker</th>" if ranked else "") + "</tr>")
    return f'<table class="tn-cands">{head}{"".join(rows)}</table>'


def style() -> None:
    """Inject the page CSS (a style-only st.html is applied without taking space)."""
    st.html(CSS)


def markup(html_text: str) -> None:
    """Render trusted markup built by this module (all user text inside is escaped)."""
    st.markdown(html_text, unsafe_allow_html=True)


# ---------------------------------------------------------------------------------- database
def db_url() -> str:
    return services.database_url()


@st.cache_resource(show_spinner="Preparing the database…")
def ready_database(url: str) -> str:
    """Migrate the database; on first run with no vocabulary, seed the embedded demo data."""
    services.init_db(url)
    with services.session_scope(url) as s:
        if not services.vocabularies(s):
            seed_demo(s)
    return url


def seed_demo(s) -> list[int]:
    """Two demo vocabularies with one batch each (mention texts only: the gold answers stay hidden)."""
    ids = []
    for which in DEMO_SETS:
        vid = services.load_vocabulary(s, demo_vocabulary(which), f"demo-{which}")
        texts = [m.text for m in demo_mentions(which)]
        ids.append(services.create_batch(s, f"demo {which}", vid, texts, username=DEMO_USER,
                                         source_file="assets/demo/mentions.csv"))
    return ids


def session():
    """A database session (commit on success); every page call goes through one of these."""
    return services.session_scope(db_url())


# ---------------------------------------------------------------------------------- engine
class EngineHolder:
    """The cached engine of one vocabulary plus what the app needs around it.

    * a lock: Streamlit serves every browser session from its own thread and
      the engine's history index is mutated by decisions;
    * ``revision``: bumped whenever the engine learns (coded mention, synonym);
      a suggestion remembers the revision it was computed at;
    * staleness: a stored suggestion is recomputed before it is shown when the
      engine has since learned the *same* mention text (approach E's sieve
      answers it exactly, so showing the old suggestion would be wrong), when
      another model version made it (a promotion or rollback since), or when it
      was made from an older vocabulary edition (its terms may be retired).
      Other upcoming suggestions are refreshed by :meth:`prepare` after the
      page is drawn, so similar mentions pick up the new history too.
    """

    def __init__(self, engine: Engine, vocabulary_id: int, edition: int | None = None):
        self.engine = engine
        self.vocabulary_id = vocabulary_id
        self.edition = edition
        self.lock = threading.RLock()
        self.revision = 0
        self._computed: dict[int, int] = {}  # mention id -> revision its stored suggestion was computed at
        self._learned: dict[str, int] = {}  # normalized text -> revision it was learned at

    # -- suggestions
    def suggest_and_store(self, s, mention_ids: list[int], texts: list[str], progress=None) -> list[Suggestion]:
        """Suggest for a few mentions and store them, holding the engine lock for at most
        :data:`PREPARE_AHEAD` mentions at a time: another coder's decision (``learn``) or suggestion on
        this vocabulary waits for one small group, never for a whole list. Many mentions belong in a
        background job (db.suggest_jobs), which builds its own engine."""
        sugs: list[Suggestion] = []
        for at in range(0, len(mention_ids), PREPARE_AHEAD):
            ids, group = mention_ids[at:at + PREPARE_AHEAD], texts[at:at + PREPARE_AHEAD]
            with self.lock:
                rev = self.revision
                got = self.engine.suggest_batch(group)
            services.store_suggestions(s, ids, got)  # outside the lock: the fsync waits for the disk only
            for mid in ids:
                self._computed[mid] = rev
            sugs += got
            if progress:
                progress(len(sugs), len(mention_ids))
        return sugs

    def is_stale(self, mention_id: int, text: str) -> bool:
        return self._learned.get(normalize(text), -1) > self._computed.get(mention_id, 0)

    def suggestion(self, s, mention_id: int, text: str) -> Suggestion:
        """The stored suggestion (a DB read), computed now if missing or stale."""
        sug = services.latest_suggestion(s, mention_id, edition=self.edition)
        if sug is None or self.is_stale(mention_id, text) or sug.model_version != self.engine.model_version:
            sug = self.suggest_and_store(s, [mention_id], [text])[0]
        return sug

    def prepare(self, s, batch_id: int, current_id: int, n: int) -> int:
        """Store suggestions for the next ``n`` open mentions after ``current_id`` that lack a fresh one."""
        upcoming = [m for m in services.mentions(s, batch_id, status=services.OPEN_STATUSES, limit=n + 1)
                    if m["id"] != current_id][:n]
        stored = services.latest_suggestion_versions(s, [m["id"] for m in upcoming])
        here = (self.engine.model_version, self.edition)

        def fresh(mid: int) -> bool:
            if mid in self._computed:
                return self._computed[mid] >= self.revision
            # stored by a background job or another app process: fresh when it is this model's, on this edition,
            # and this engine has learnt nothing since it started
            version, edition = stored.get(mid, (None, None))
            return self.revision == 0 and version == here[0] and (self.edition is None or edition == self.edition)

        todo = [m for m in upcoming if not fresh(m["id"])]
        if todo:
            self.suggest_and_store(s, [m["id"] for m in todo], [m["text"] for m in todo])
        return len(todo)

    # -- learning
    def learn(self, mention: str, terms: list[str]) -> None:
        with self.lock:
            self.engine.add_coded_mention(mention, list(terms))
            self.revision += 1
            self._learned[normalize(mention)] = self.revision

    def learn_synonym(self, term: str, synonym: str) -> None:
        with self.lock:
            self.engine.add_synonym(term, synonym)
            self.revision += 1
            self._learned[normalize(synonym)] = self.revision

    # -- look-ups
    def tag(self, text: str) -> list[KeywordSpan]:
        with self.lock:
            return self.engine.tag(text)

    def search(self, query: str, limit: int = 10) -> list[Candidate]:
        with self.lock:
            return self.engine.search_vocabulary(query, limit=limit)


def current_model_version(url: str, vocabulary_id: int) -> str | None:
    """The promoted model version of a vocabulary (None: the shipped model serves)."""
    return serving.serving_version(url, vocabulary_id)


def build_holder(url: str, vocabulary_id: int, version: str | None = None, edition: int | None = None) -> EngineHolder:
    """The serving engine of a stored vocabulary (db.serving.build_engine) with what the app needs around it."""
    return EngineHolder(serving.build_engine(url, vocabulary_id, version), vocabulary_id, edition)


# bounded: every promotion, edition or withdrawn history makes a new key, and an engine holds its vocabulary's index
@st.cache_resource(show_spinner="Loading the engine for this vocabulary…", max_entries=12)
def engine_holder(url: str, vocabulary_id: int, version: str | None = None, edition: int | None = None,
                  history_epoch: int = 0) -> EngineHolder:
    """Cached per (vocabulary, serving version, edition, history epoch): a change of any gives a new engine."""
    return build_holder(url, vocabulary_id, version, edition)


def current_edition(url: str, vocabulary_id: int) -> int | None:
    return serving.edition(url, vocabulary_id)


def serving_holder(url: str, vocabulary_id: int) -> EngineHolder:
    """The engine every page uses for a vocabulary: the promoted model version on the edition in force (a
    promotion, rollback, new edition or withdrawn history gives a new cache key, so every page moves to it at
    its next run)."""
    return engine_holder(url, vocabulary_id, current_model_version(url, vocabulary_id),
                         current_edition(url, vocabulary_id), serving.history_epoch(url, vocabulary_id))


# ---------------------------------------------------------------------------------- shared state
@dataclass
class Context:
    url: str
    username: str
    vocabulary_id: int | None
    batch_id: int | None
    role: str = "coder"  # set by require_role from the database

    def holder(self) -> EngineHolder:
        # keyed by the promoted version and edition: promote / rollback / a new edition reach coders at once
        return serving_holder(self.url, self.vocabulary_id)


def context() -> Context:
    """What app.py's sidebar chose: user, vocabulary, batch."""
    ss = st.session_state
    return Context(db_url(), (ss.get("username") or "").strip() or "coder", ss.get("vocabulary_id"),
                   ss.get("batch_id"))


# ---------------------------------------------------------------------------------- sign-in (db.auth)
AUTH_KEY = "auth_user"  # the signed-in user name: set by the sign-in page (or a test), never by the browser


SESSION_COOKIE = "termnorm_session"  # the browser's session token (db.auth.create_session)


def sign_in(username: str, remember: bool = True) -> None:
    """Sign ``username`` in for this browser session and, with ``remember``, for later reloads and tabs (a
    session cookie set at the next run: :func:`cookie_script`)."""
    st.session_state[AUTH_KEY] = username
    st.session_state["username"] = username
    if remember:
        with session() as s:
            st.session_state["_set_cookie"] = auth.create_session(s, username)


def sign_out() -> None:
    """Forget the user and everything this browser session held (widget state of the previous user), end the
    session the cookie holds, and have the cookie cleared."""
    name = st.session_state.get(AUTH_KEY)
    if name:
        with session() as s:
            auth.record_sign_out(s, name, st.context.cookies.get(SESSION_COOKIE))
    for key in list(st.session_state):
        del st.session_state[key]
    st.session_state["_set_cookie"] = ""  # cleared at the next run


def cookie_script() -> None:
    """Set or clear the session cookie in the browser when a sign-in or sign-out asked for it. Streamlit has no
    API to set a cookie; a zero-height component runs the script in the app's origin (same-origin frame)."""
    token = st.session_state.pop("_set_cookie", None)
    if token is None:
        return
    import streamlit.components.v1 as components

    age = int(auth.session_hours() * 3600) if token else 0
    components.html(f"<script>document.cookie = '{SESSION_COOKIE}={token}; path=/; max-age={age}; "
                    "SameSite=Strict';</script>", height=0)


def current_user() -> dict | None:
    """The signed-in user (username, role, ...), re-read from the database on every run; None if nobody.

    Re-reading means a disabled or demoted account loses access at its next click. With sign-in switched
    off (``TERMNORM_AUTH=off``: tests and the offline demo only) the name typed in the sidebar is the user,
    created as a coder when new, and its stored role applies -- except that a typed name of an account with
    a password is refused (that account still has to sign in), so switching sign-in off never hands out an
    admin's or a lead's rights to whoever types their name.
    """
    ss = st.session_state
    name = ss.get(AUTH_KEY)
    if not name and auth.auth_enabled():  # a reload or a new tab: the browser's session cookie signs in
        with session() as s:
            remembered = auth.session_user(s, st.context.cookies.get(SESSION_COOKIE))
        if remembered is not None:
            sign_in(remembered["username"], remember=False)
            name = remembered["username"]
    typed = not name and not auth.auth_enabled()
    if typed:
        name = (ss.get("username") or "").strip() or "coder"
    if not name:
        return None
    with session() as s:
        if typed:
            services.ensure_user(s, name)
        user = auth.user(s, name)
    if user is None or user["disabled"] or (typed and user["has_password"]):
        ss.pop(AUTH_KEY, None)
        return None
    return user


def require_role(role: str) -> Context:
    """Stop the page unless the current user has ``role`` or above; else the shared context with the user.

    Pages call this before drawing anything. It only guards the screen: the db functions behind every lead /
    admin action check the role again (PermissionError).
    """
    user = current_user()
    if user is None:
        st.warning("Please sign in.", icon=":material/lock:")
        st.stop()
    if not auth.has_role(user["role"], role):
        st.error(f"This page is for the {role} role and above; {md(user['username'])} is a {user['role']}.",
                 icon=":material/block:")
        st.stop()
    ctx = context()
    ctx.username, ctx.role = user["username"], user["role"]
    return ctx


def prepare_in_background(holder: "EngineHolder", url: str, batch_id: int, current_id: int, n: int) -> threading.Thread:
    """:meth:`EngineHolder.prepare` in a daemon thread with a session of its own (no Streamlit call inside);
    a failure only means the next suggestion is computed when it is shown."""
    def run() -> None:
        try:
            with services.session_scope(url) as s:
                holder.prepare(s, batch_id, current_id, n)
        except Exception:  # noqa: BLE001 - logged; the page computes a missing suggestion on demand
            logging.getLogger(__name__).exception("preparing the next suggestions failed")

    t = threading.Thread(target=run, name="termnorm-prepare", daemon=True)
    t.start()
    return t


_decision_slots = threading.Lock()  # Streamlit may run two callbacks of one browser session in two threads


def claim_decision_slot(min_gap_s: float) -> float | None:
    """Take this browser session's next decision slot: None if the previous decision was at least
    ``min_gap_s`` ago (the slot is now taken), else the seconds since it (the caller ignores the action).
    Check and update are one step, so two callbacks running at once cannot both pass."""
    with _decision_slots:
        now = time.time()
        last = st.session_state.get("_last_decision_at")
        if last is not None and now - last < min_gap_s:
            return now - last
        st.session_state["_last_decision_at"] = now
        return None


def decide(ctx: Context, mention_id: int, text: str, action: str, terms=(), comment: str = "",
           shown: int | None = None, codes: dict[str, str] | None = None, relationship: str | None = None) -> int:
    """Record a decision durably, THEN teach the engine (accept / correct), so a crash never leaves
    the engine knowing something the database does not. Returns the decision id.

    The server refuses (services.NotYourMention) unless ``mention_id`` is the mention this coder has
    claimed, i.e. the one on their screen: a click or key press on the previous mention that reaches the
    server after the next one was drawn writes nothing."""
    started = st.session_state.get(f"shown_at_{mention_id}")
    seconds = time.time() - started if started else 0.0
    with session() as s:
        did = services.record_decision(s, mention_id, ctx.username, action, list(terms), comment, seconds,
                                       shown=shown, codes=codes, relationship=relationship, require_claim=True)
    if action in ("accept", "correct") and terms:
        ctx.holder().learn(text, list(terms))
    return did


def flash(kind: str, message: str) -> None:
    """A message to show on the next run (callbacks cannot draw where the page wants it)."""
    st.session_state.setdefault("_flash", []).append((kind, message))


def page(role: str | None = None) -> Context:
    """What every page does first: the role check (``role``; None = any signed-in user or the demo),
    the CSS and the messages left by the previous run. Returns the shared context."""
    ctx = require_role(role) if role else context()
    style()
    show_flash()
    return ctx


_MARKDOWN = re.compile(r"([\\`*_{}\[\]()<>#+\-.!|~$])")


def md(text) -> str:
    r"""``text`` with Markdown's special characters escaped, for user text inside st.markdown / st.warning /
    st.toast: a lead's note ``[click](http://evil.example)`` must stay text, not become a live link.

    >>> print(md("see [x](http://e.x) *now*"))
    see \[x\]\(http://e\.x\) \*now\*
    """
    return _MARKDOWN.sub(r"\\\1", " ".join(str(text).splitlines()))


def show_flash() -> None:
    """The messages left by callbacks, each once, user text escaped (messages hold terms, notes, reasons);
    repeated warnings (a burst of late key presses) are shown once."""
    seen = set()
    for kind, message in st.session_state.pop("_flash", []):
        if (kind, message) in seen:
            continue
        seen.add((kind, message))
        message = md(message)
        if kind == "error":
            st.error(message)
        elif kind == "warning":  # e.g. a late click that was refused: it stays until the next action
            st.warning(message, icon=":material/do_not_touch:")
        else:
            st.toast(message)


# ---------------------------------------------------------------------------------- vocabulary search
SEARCH_LIMIT = 10  # results shown while typing (engine.search_vocabulary answers in well under 100 ms)


def vocabulary_search(holder: "EngineHolder", query_key: str, add_key: str, on_pick, with_codes: bool = True) -> None:
    """Type-ahead search of the vocabulary with an Add button per result; call it inside an ``st.fragment``
    so typing reruns only the search. ``on_pick(term, codes)`` (or ``on_pick(term)``) adds the result."""
    from termnorm.search import found_tag, nearest_note

    q = st.text_input("Search the vocabulary", key=query_key, live=True, type="search",
                      placeholder="type a term, a code, a synonym or an abbreviation…")
    if not q.strip():
        return
    results = holder.search(q, limit=SEARCH_LIMIT)
    if not results:
        st.caption("No term found.")
        return
    note = nearest_note(q, results)  # "no code E11.900; codes under E11.90"
    if note:
        st.caption(note)
    for i, c in enumerate(results):
        rc = st.columns([6, 1], vertical_alignment="center")
        rc[0].markdown(f'<span class="tn-code">{code_cell(c.codes)}</span> &nbsp;'
                       f"{highlight_html(c.term, holder.tag(c.term))} &nbsp;"
                       f'<span class="tn-part" title="how it was found">{esc(found_tag(c))}</span>',
                       unsafe_allow_html=True)
        args = (c.term, c.codes) if with_codes else (c.term,)
        if rc[1].button("Add", key=f"{add_key}_{i}", width="stretch", on_click=on_pick, args=args):
            st.rerun(scope="app")  # the answer box lives outside the fragment
