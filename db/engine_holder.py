"""The serving engine of a vocabulary as the app holds it: one lock, what it has learnt, fresh suggestions.

``EngineHolder`` wraps the engine db.serving builds for a vocabulary (the
promoted version on the edition in force, fed with the coded mentions and user
synonyms stored in the database, so a restarted app knows everything coders
taught it); the app caches one per vocabulary (app_pages/_ui.py). ``seed_demo``
puts the embedded demo vocabularies and batches into an empty database.
"""

from __future__ import annotations

import logging
import threading
import time

from db import serving, services
from db.suggestions import PRECODED
from termnorm import explain, reading
from termnorm.engine import Engine, demo_mentions, demo_vocabulary
from termnorm.records import Candidate, KeywordSpan, Suggestion
from termnorm.text.normalize import char_bigrams, normalize

DEMO_SETS = ("procedures", "diagnoses")
DEMO_USER = "demo"
DEMO_VOCABULARIES = tuple(f"demo-{which}" for which in DEMO_SETS)  # the names seed_demo gives them
# Mentions prepared ahead on the coding page. One is enough for the next click; 3 covers a
# coder skipping a couple, and costs ~20 ms of engine time per page with the demo engine
# (benchmarks/next_suggestion.py). More would spend CPU on mentions a colleague may take first.
PREPARE_AHEAD = 3


def seed_demo(s) -> list[int]:
    """Two demo vocabularies with one batch each (mention texts only: the gold answers stay hidden)."""
    ids = []
    for which, name in zip(DEMO_SETS, DEMO_VOCABULARIES):
        vid = services.load_vocabulary(s, demo_vocabulary(which), name)
        texts = [m.text for m in demo_mentions(which)]
        ids.append(services.create_batch(s, f"demo {which}", vid, texts, username=DEMO_USER,
                                         source_file="assets/demo/mentions.csv"))
    return ids


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
        self.retired: dict[str, str] = {}  # retired name or code -> what search says of it (db.vocabularies)
        self.lock = threading.RLock()
        self.revision = 0
        self._computed: dict[int, int] = {}  # mention id -> revision its stored suggestion was computed at
        self._learned: dict[str, int] = {}  # normalized text -> revision it was learned at
        # (revision, character bigrams) of each text learnt, oldest first: which prepared suggestions a decision
        # may have changed (only those of similar mentions; see :meth:`changed_since`)
        self._log: list[tuple[int, frozenset[str]]] = []

    # -- suggestions
    def suggest_and_store(self, s, mention_ids: list[int], texts: list[str], progress=None) -> list[Suggestion]:
        """Suggest for a few mentions and store them, holding the engine lock for at most
        :data:`PREPARE_AHEAD` mentions at a time: another coder's decision (``learn``) or suggestion on
        this vocabulary waits for one small group, never for a whole list. Many mentions belong in a
        background job (db.suggest_jobs), which builds its own engine."""
        sugs: list[Suggestion] = []
        docs = services.mention_documents(s, mention_ids)  # the texts they were found in (their abbreviations)
        for at in range(0, len(mention_ids), PREPARE_AHEAD):
            ids, group = mention_ids[at:at + PREPARE_AHEAD], texts[at:at + PREPARE_AHEAD]
            with self.lock:
                rev = self.revision
                got = self.engine.suggest_batch(group, documents=[docs.get(i, "") for i in ids])
            services.store_suggestions(s, ids, got)  # outside the lock: the fsync waits for the disk only
            for mid in ids:
                self._computed[mid] = rev
            sugs += got
            if progress:
                progress(len(sugs), len(mention_ids))
        return sugs

    def changed_since(self, revision: int, text: str) -> bool:
        """Whether anything learnt after ``revision`` may change ``text``'s suggestion: a learnt text sharing at
        least :data:`SIMILAR_BIGRAMS` of the shorter one's character bigrams (what the history recall and the sieve
        match on). Other coders' decisions on unrelated mentions leave a prepared suggestion fresh -- recomputing
        every upcoming suggestion after every decision made 20 coders wait on each other's recomputations."""
        if revision >= self.revision:
            return False
        if not self._log or self._log[0][0] > revision + 1:  # older entries were dropped: assume changed
            return True
        mine = char_bigrams(normalize(text))
        for rev, theirs in reversed(self._log):
            if rev <= revision:
                return False
            if mine & theirs and len(mine & theirs) >= SIMILAR_BIGRAMS * min(len(mine), len(theirs)):
                return True
        return False

    def is_stale(self, mention_id: int, text: str) -> bool:
        return self._learned.get(normalize(text), -1) > self._computed.get(mention_id, 0)

    def suggestion(self, s, mention_id: int, text: str) -> Suggestion:
        """The stored suggestion (a DB read), computed now if missing or stale: the same text or a similar one
        (:meth:`changed_since`) was learnt after it was computed -- the shown mention follows a colleague's
        decision as the prepared ones do, so its scores agree with the history the page's evidence counts."""
        sug = services.latest_suggestion(s, mention_id, edition=self.edition)
        if (sug is None or self.is_stale(mention_id, text)
                or self.changed_since(self._computed.get(mention_id, 0), text)
                or not self._served_as_stored(sug.model_version, text)):
            sug = self.suggest_and_store(s, [mention_id], [text])[0]
        return sug

    def _served_as_stored(self, version: str, text: str) -> bool:
        """A stored suggestion of this model is shown as stored; so is a pre-coded file's (db.precoded: what it
        was imported for), unless a coder taught this engine something about a similar mention since."""
        if version == self.engine.model_version:
            return True
        return version.startswith(PRECODED) and not self.changed_since(0, text)

    def prepare(self, s, batch_id: int, current_id: int, n: int) -> int:
        """Store suggestions for the next ``n`` open mentions after ``current_id`` that lack a fresh one."""
        upcoming = [m for m in services.mentions(s, batch_id, status=services.OPEN_STATUSES, limit=n + 1,
                                                 order=services.queue_order(s, batch_id))
                    if m["id"] != current_id][:n]
        stored = services.latest_suggestion_versions(s, [m["id"] for m in upcoming])
        here = (self.engine.model_version, self.edition)

        def fresh(mid: int, text: str) -> bool:
            if mid in self._computed:
                return not self.changed_since(self._computed[mid], text)
            # stored by a background job or another app process: fresh when it is this model's, on this edition,
            # and nothing this engine learnt since it started may change it
            version, edition = stored.get(mid, (None, None))
            return (version is not None and (version == here[0] or version.startswith(PRECODED))
                    and (self.edition is None or edition == self.edition) and not self.changed_since(0, text))

        todo = [m for m in upcoming if not fresh(m["id"], m["text"])]
        if todo:
            self.suggest_and_store(s, [m["id"] for m in todo], [m["text"] for m in todo])
        return len(todo)

    # -- learning
    def learn(self, mention: str, terms: list[str], document: str = "") -> None:
        """A decision, learnt at once: the mention as the engine reads it in its ``document`` (if any)."""
        with self.lock:
            read = reading.in_document(self.engine, mention, document)
            self.engine.add_coded_mention(read, list(terms), written=mention if read != mention else "")
            if serving.follow_history(self.engine):
                self._computed.clear()  # made by the other ranker: prepare() compares stored versions instead
            self._learnt(mention)

    def _learnt(self, text: str) -> None:
        self.revision += 1
        self._learned[normalize(text)] = self.revision
        self._log.append((self.revision, char_bigrams(normalize(text))))
        if len(self._log) > LOG_SIZE:
            del self._log[:len(self._log) - LOG_SIZE]

    def learn_synonym(self, term: str, synonym: str) -> None:
        with self.lock:
            self.engine.add_synonym(term, synonym)
            self._learnt(synonym)

    # -- look-ups
    def tag(self, text: str) -> list[KeywordSpan]:
        with self.lock:
            return self.engine.tag(text)

    def search(self, query: str, limit: int = 10) -> list[Candidate]:
        with self.lock:
            return self.engine.search_vocabulary(query, limit=limit)


#: Share of the shorter text's character bigrams a learnt text must share for a prepared suggestion to be redone.
SIMILAR_BIGRAMS = 0.34
#: Learnt texts remembered for that check (older suggestions are redone).
LOG_SIZE = 5000


def build_holder(url: str, vocabulary_id: int, version: str | None = None, edition: int | None = None) -> EngineHolder:
    """The serving engine of a stored vocabulary (db.serving.build_engine) with what the app needs around it."""
    engine = serving.build_engine(url, vocabulary_id, version)
    engine.warm_search()  # the coding page's search box: built now, not on a coder's first keystroke
    explain.counts(engine)  # the candidate table's evidence and keyword-drop counts (tags the coded history)
    holder = EngineHolder(engine, vocabulary_id, edition)
    with services.session_scope(url) as s:
        holder.retired = services.retired_notes(s, vocabulary_id)
    return holder


#: seconds before a background build that failed (an encoder folder deleted) is tried again: every page run
#: asks, and each try reads the whole vocabulary
RETRY_S = 60.0


class ServingSwitch:
    """The engine a vocabulary is served by, moved to a newly promoted version without making coders wait.

    A promotion or rollback changes the serving version: its engine is built in a background thread (loading a
    version with an encoder takes 10 to 25 s on MEDIC) while the engine before it goes on serving, then put in
    its place with what coders taught meanwhile caught up from the database (:func:`db.serving.catch_up`). A new
    edition or withdrawn history (a lead sent decisions back) is built at once, the caller waiting: the engine
    before would suggest retired terms or answer from the withdrawn decisions. ``key`` is (serving version,
    edition, history epoch[, anything else the engine is built from, e.g. the shipped model's encoder: built in
    the background]), as the pages read them from the database.
    """

    def __init__(self, url: str, vocabulary_id: int):
        self.url, self.vocabulary_id = url, vocabulary_id
        self.key: tuple | None = None
        self.holder: EngineHolder | None = None
        self.pending: tuple | None = None  # the key being built in the background
        self.failed: str = ""  # why the last background build failed (tried again at a get RETRY_S later)
        self._failed_key, self._failed_at = None, 0.0
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def builds_at_once(self, key: tuple) -> bool:
        """Whether :meth:`get` of ``key`` builds while its caller waits: no engine yet, another edition, or
        withdrawn history."""
        return self.holder is None or tuple(key[1:3]) != tuple(self.key[1:3])

    def get(self, key: tuple) -> EngineHolder:
        with self._lock:
            if key == self.key:
                return self.holder
            if self.builds_at_once(key):
                self.holder = build_holder(self.url, self.vocabulary_id, key[0], key[1])
                self.key, self.pending = key, None
                return self.holder
            if self.pending != key and not (key == self._failed_key and time.monotonic() - self._failed_at < RETRY_S):
                self.pending = key
                self._thread = threading.Thread(target=self._build, args=(key,), name="termnorm-switch", daemon=True)
                self._thread.start()
            return self.holder

    def settled(self, timeout: float | None = None) -> bool:
        """Wait for the background build, if any (a lead's page that must read the new version); True when none
        is left."""
        thread = self._thread
        if thread is not None:
            thread.join(timeout)
        return self.pending is None

    def _build(self, key: tuple) -> None:
        try:
            holder = build_holder(self.url, self.vocabulary_id, key[0], key[1])
        except Exception as e:  # noqa: BLE001 - logged; the version before keeps serving, the next get tries again
            logging.getLogger(__name__).exception("building the engine of %s failed", key[0])
            with self._lock:
                self.failed, self.pending = f"{key[0]}: {e}", None
                self._failed_key, self._failed_at = key, time.monotonic()
            return
        # what coders taught the engine before while this one was built, outside the switch's lock (reading the
        # coded history again takes seconds on 5,000 mentions): pages go on being served meanwhile
        seen = self.holder.revision
        self._catch_up(holder)
        with self._lock:
            if self.pending != key:  # another change came meanwhile: its own build replaces this one
                return
            if self.holder.revision != seen:  # taught during the catch-up: once more, the pages waiting for it
                self._catch_up(holder)
            self.holder, self.key, self.pending, self.failed = holder, key, None, ""

    def _catch_up(self, holder: EngineHolder) -> None:
        with holder.lock:
            for text in serving.catch_up(holder.engine, self.url, self.vocabulary_id):
                holder._learnt(text)


def prepare_in_background(holder: EngineHolder, url: str, batch_id: int, current_id: int, n: int) -> threading.Thread:
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
