"""The daemon's context methods: ``context.session_start``, ``context.prompt``, and their deliveries.

A pack is built from the index (:mod:`cogd.retrieve.pack`), the session's
ledger history and the memory store, then recorded in the ledger as a
delivery — at once, or, when the client asks to acknowledge it (``ack``),
only once the client confirms it printed the pack (docs/protocol.md
"Delivery acknowledgement"; :func:`confirm` and :func:`withdraw`).
"""

from __future__ import annotations

import hashlib
import logging
import sqlite3
import time
from cogd import faults
from cogd.daemon import params as p
from cogd.daemon.parts import Handler, Parts, bind, learned_evidence
from cogd.index import store
from cogd.retrieve.feedback import Feedback
from cogd.retrieve.lexical import match_expression, query_terms
from cogd.retrieve.memories import MEMORY_SHARE, render_memories
from cogd.retrieve.pack import Pack, Preface, overview_pack, prompt_pack, working_set_pack
from cogd.fusion import MODES

log = logging.getLogger(__name__)


def session_start(parts: Parts, params: dict) -> dict:
    """SessionStart by ``source``: startup/clear → the repository map; resume → the same
    unless the session already holds an identical pack; compact → the session's working set."""
    source = p.ledger_text(params, "source", 40) or "startup"
    session = p.session_id(params)
    _keep_fresh(parts)
    if source == "compact":
        entities = parts.ledger.latest_working_set(session)
        if entities is None:
            entities = parts.working_set(session)
        pack = working_set_pack(parts.reader(), parts.layout.root, entities, parts.config.pack,
                                _with_git_note(parts, memory_preface(parts, None, rules_only=True)))
        return _deliver(parts, params, "session_start", source, "", pack, None if entities else "no_working_set")
    pack = overview_pack(parts.reader(), parts.layout.root, parts.recent.get(), parts.config.pack,
                         parts.repo_map.get(parts), _with_git_note(parts, memory_preface(parts, None)))
    if source == "resume" and pack.text and parts.ledger.has_fingerprint(session, fingerprint(pack.text)):
        return {**Pack("").as_dict(), "delivery_id": None, "skipped": "the session already holds this pack",
                "empty_reason": "already_delivered"}
    return _deliver(parts, params, "session_start", source, "", pack)


def prompt(parts: Parts, params: dict) -> dict:
    """The prompt pack. After a compaction whose pack shows no sign of having arrived
    (no item of it hit), the session's working set is re-added at the top."""
    text = p.text(params, "prompt", required=True)
    mode = p.choice(params, "mode", MODES, parts.config.retrieve.mode)
    session = p.session_id(params)
    record = params.get("record", True) is not False
    _keep_fresh(parts)
    vector, dense = parts.query_vector(text, mode)
    pinned: list[str] = []
    source = ""
    if record and parts.ledger.compact_acknowledged(session) is False:
        pinned = parts.ledger.latest_working_set(session) or parts.working_set(session)
        source = "compact_recovery"
    pack = prompt_pack(parts.reader(), parts.layout.root, text, parts.config.pack, parts.config.retrieve,
                       mode=mode, query_vector=vector, dense=dense,
                       feedback=_feedback(parts, session if record else None), pinned=pinned,
                       preface=memory_preface(parts, text))
    return _deliver(parts, params, "prompt", source, text, pack, None if query_terms(text) else "empty_prompt")


def _keep_fresh(parts: Parts) -> None:
    """Run a cheap stat-scan refresh before a pack, waiting a bounded time.

    Only when the watcher is not on inotify (off, starting, polling): then
    this carries unreported edits into the index. At most one scan per
    ``refresh_debounce_ms``; the pack waits at most ``fresh_wait_ms`` for
    it (a long reindex is not waited for: the pack is then served from the
    last committed index). With inotify watching, the scan would only cost
    time on every prompt (tens of ms on a 2,000-file tree).
    """
    if parts.watcher is not None and parts.watcher.mode == "inotify":
        return
    worker, config = parts.worker, parts.config.index
    if worker.queue_depth == 0 and time.monotonic() - worker.last_refresh_started > config.refresh_debounce_ms / 1000:
        worker.wait(worker.request(None), timeout=config.fresh_wait_ms / 1000)


def _feedback(parts: Parts, session_id: str | None) -> Feedback:
    """Ranking feedback for one request: utility, the session's touches, recently changed files."""
    touches = parts.ledger.session_touches(session_id) if session_id else []

    def associations(text: str) -> list[tuple[str, float]]:
        """Entities earlier sessions edited after prompts like ``text`` (BM25 over those prompts)."""
        return parts.ledger.associated(match_expression(query_terms(text)), limit=parts.config.retrieve.candidates)

    history, co_changed = _history_sources(parts)
    queries = parts.history
    changes = ((lambda: queries.file_changes(parts.reader(), (parts.worker.refreshes, parts.readers.generation)))
               if history is not None and queries is not None else None)
    return Feedback(parts.config.rank, parts.utility, touches, parts.recent.get(), associations, history, co_changed,
                    session_times=parts.ledger.association_times, evidence=learned_evidence(parts),
                    file_changes=changes)



def _history_sources(parts: Parts) -> tuple:
    """``(history, co_changed)`` callables for :class:`Feedback`, or ``(None, None)`` when history
    is off or not usable now (no pass synchronised with the tree's HEAD yet: cogd.history.query).
    An association's commits are labelled ``short-hash subject`` for ``--explain``."""
    queries = parts.history
    if queries is None or not queries.miner.usable():
        return None, None
    limit = parts.config.retrieve.candidates

    def history(text: str, tests_unwanted=None) -> list:
        terms = query_terms(text)
        found = queries.associations(parts.reader(), match_expression(terms), limit, text,
                                     (parts.worker.refreshes, parts.readers.generation), tests_unwanted, terms)
        labels = queries.subjects(list({h for a in found[: max(limit // 3, 1)] for h in a.commits[:3]}))
        for item in found:
            item.commits = [f"{h[:10]} {labels.get(h, '')}".strip() for h in item.commits[:3]] + item.commits[3:]
        return found

    def co_changed(seeds: list[str]) -> list:
        return queries.co_changed(parts.reader(), seeds, (parts.worker.refreshes, parts.readers.generation))

    return history, co_changed


def memory_preface(parts: Parts, query: str | None, *, rules_only: bool = False) -> Preface | None:
    """Rules and memories for a pack: all active rules and the newest memories at session
    start (``query`` None), the memories (rules included) matching a prompt otherwise."""
    memory, config = parts.memory, parts.config.memory
    statuses = ("active", "stale") if config.show_stale else ("active",)
    # A prompt pack may carry matching candidates (marked unconfirmed) so they can earn promotion.
    show_candidates = query is not None and config.show_candidates
    if show_candidates:
        statuses += ("candidate",)
    try:
        counts = memory.projection.counts()
        if not any(n for by_status in counts.values() for status, n in by_status.items() if status in statuses):
            return None  # no live memory: skip the search (and its query embedding)
        if query is None:
            rules = memory.listing(type="rule", status="active")
            others = [] if rules_only else [
                m for m in memory.listing(status=statuses, limit=40) if m.type != "rule"][:5]
        else:
            found = memory.search(query, limit=6, statuses=statuses)
            rules = [m for m in found if m.type == "rule"]
            others = [m for m in found if m.type != "rule"][:4]
    except Exception:
        log.exception("memories left out of the pack")
        return None
    budget = int(min(parts.config.pack.max_chars, 9_500) * MEMORY_SHARE)
    return render_memories(rules, others, budget, show_stale=config.show_stale, show_candidates=show_candidates)


def _with_git_note(parts: Parts, preface: Preface | None) -> Preface | None:
    """The preface with one line first when memory files of this checkout are not committed to
    git (a removed worktree loses them). Reads the cached count only: never runs git on a pack."""
    from cogd.memory.gitstate import note

    line = note(parts.memory.git_state.peek())
    if not line:
        return preface
    text, items = preface if preface else ("", [])
    return (f"**cogd:** {line}\n\n{text}" if text else f"**cogd:** {line}\n", items)


def _deliver(parts: Parts, params: dict, event: str, source: str, query: str, pack: Pack,
             empty_reason: str | None = None) -> dict:
    """Record ``pack`` as a delivery (unless ``record`` is false or it is empty) and answer it.

    An empty pack's answer carries ``empty_reason`` (:func:`_empty_reason`
    when not given), so the hook can log why it injected nothing. With ``ack``
    true the record is held until the client confirms (:func:`confirm`).
    """
    if not pack.text:
        return {**pack.as_dict(), "delivery_id": None, "empty_reason": empty_reason or _empty_reason(parts)}
    if params.get("record", True) is False:
        return {**pack.as_dict(), "delivery_id": None}
    if faults.active("ledger_write"):  # tests only (cogd.faults): a full disk, on demand
        raise sqlite3.OperationalError("database or disk is full")
    delivery = (p.session_id(params), event, source, query, pack.text, [i.as_dict() for i in pack.items],
                p.event_time(params, parts.config.usage.trust_client_clock), fingerprint(pack.text),
                p.ledger_text(params, "client", 40))
    if params.get("ack") is True:  # the client acknowledges once the pack is printed
        return {**pack.as_dict(), "delivery_id": None, "ack": parts.held.hold(delivery)}
    return {**pack.as_dict(), "delivery_id": _record(parts, delivery)}


def _empty_reason(parts: Parts) -> str:
    """Why a pack came out empty, as one word: ``index_building`` (no index has been completed
    yet: the first one is running or queued), ``index_unavailable`` (none completed and none
    running: see status for the error), ``index_empty`` (no file is indexed), else
    ``no_match``. Callers name their own cases (``empty_prompt``, ``no_working_set``,
    ``already_delivered``)."""
    conn = parts.reader()
    if not store.get_meta(conn, "indexed_at"):  # written when a refresh completes
        busy = parts.worker.state == "indexing" or parts.worker.queue_depth
        return "index_building" if busy else "index_unavailable"
    if not store.has_files(conn):
        return "index_empty"
    return "no_match"


def _record(parts: Parts, delivery: tuple) -> int:
    session, event, source, query, text, items, now, digest, client = delivery
    return parts.ledger.record_delivery(session, event, source, query, text, items, now=now, fingerprint=digest,
                                        client=client)


def confirm(parts: Parts, token: int) -> int | None:
    """The client printed the pack held under ``token``: record the delivery. Returns its id
    (None when the token is unknown: never held, or already confirmed or withdrawn).
    A failed write is a current ``context.ack`` problem (status shows it) and is re-raised."""
    delivery = parts.held.take_to_record(token)
    if delivery is None:
        return None
    try:
        delivery_id = _record(parts, delivery)
    except sqlite3.Error as exc:  # the pack was printed but is not recorded: status says so
        parts.problems.record("context.ack", f"context.ack: {exc}")
        raise
    finally:
        parts.held.recorded()
    if "context.ack" in parts.problems:
        parts.problems.resolve("context.ack")
    return delivery_id


def withdraw(parts: Parts, token: int) -> bool:
    """The pack held under ``token`` never reached its client: forget it. Returns whether it was held."""
    return parts.held.take(token) is not None


def fingerprint(text: str) -> str:
    """A pack's identity for duplicate detection (sha256 of its text, 16 hex digits)."""
    return hashlib.sha256(text.encode("utf-8", "replace")).hexdigest()[:16]


HANDLERS = {"context.session_start": session_start, "context.prompt": prompt}


def methods(parts: Parts) -> dict[str, Handler]:
    """Method name → handler(params), over ``parts``' index readers, ledger and memory store.

    ``context.ack`` is not among them: the socket server answers it on the connection
    that received the pack (cogd/daemon/server.py), through :func:`confirm` and :func:`withdraw`.
    """
    return bind(parts, HANDLERS)
