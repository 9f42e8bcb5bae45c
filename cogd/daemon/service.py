"""The daemon's methods, independent of the socket: one object, thread-safe.

The server runs each request on a thread pool and calls :meth:`Service.call`.
Reads use one SQLite connection per thread and see the last committed index;
index writes happen on the index worker's thread; ledger writes go through
the ledger's own lock. Every payload from a client is untrusted: methods
validate shapes and raise :class:`RpcError` (``bad_request``) rather than fail.
"""

from __future__ import annotations

import hashlib
import logging
import os
import sqlite3
import threading
import time
from pathlib import Path

from cogd import __version__, faults, recovery
from cogd.config import Config
from cogd.rpc.protocol import INVALID_PARAMS, METHOD_NOT_FOUND, PROTOCOL_VERSION, RpcError
from cogd.daemon.watcher import Watcher, off_status
from cogd.daemon.worker import IndexWorker
from cogd.index import store
from cogd.index.boundary import tree_relpath
from cogd.index.sources import recently_changed_files
from cogd.paths import Layout
from cogd.retrieve.feedback import Feedback
from cogd.retrieve.hybrid import retrieve
from cogd.retrieve.memories import MEMORY_SHARE, render_memories
from cogd.retrieve.pack import Pack, Preface, overview_pack, prompt_pack, working_set_pack
from cogd.retrieve.repomap import RankedGraph, pagerank
from cogd.retrieve.lexical import match_expression, query_terms
from cogd.retrieve.workingset import entities_at, working_set
from cogd.secrets import mask as mask_secrets
from cogd.usage.ledger import Ledger
from cogd.usage.touches import Touch, touches_from_tool_use
from cogd.usage.utility import UtilityModel

log = logging.getLogger("cogd.service")

SESSION_ID_MAX = 200
RECENT_FILES_TTL_S = 10.0
SAVE_SESSION_WINDOW_S = 1800.0  # an editor's save counts for sessions with a pack this recent
STORE_CHECK_S = 30.0  # after a database error, projections are quick-checked at most this often
REPO_MAP_TTL_S = 60.0  # the PageRank map is recomputed at most this often (0.6 s on a 60,000-entity index)


def _clean_text(value: object, name: str, *, required: bool = False, limit: int = 2_000_000) -> str:
    """A client string made safe for SQLite: lone surrogates replaced, length capped."""
    if value is None and not required:
        return ""
    if not isinstance(value, str):
        raise RpcError("bad_request", f"{name} must be a string", INVALID_PARAMS)
    return value[:limit].encode("utf-8", errors="replace").decode("utf-8")


def _timeout(params: dict, default: float, limit: float = 3600.0) -> float:
    """``params["timeout_s"]`` as seconds in (0, limit], or ``default``; bad_request otherwise."""
    value = params.get("timeout_s", default)
    if type(value) not in (int, float) or not 0 < value <= limit:
        raise RpcError("bad_request", f"timeout_s must be a number of seconds in (0, {limit:g}]", INVALID_PARAMS)
    return float(value)


def _client_text(value: object, name: str, keep: int) -> str:
    """A short client string as the ledger keeps it: secrets masked *before* the cut to ``keep``
    characters (a token cut short is no longer recognised, and its head would be stored)."""
    return mask_secrets(_clean_text(value, name)[:keep + 4096])[:keep]


def _session_id(params: dict) -> str:
    # masked here, once, so that the ledger's reads and writes of a session agree
    return _client_text(params.get("session_id"), "session_id", SESSION_ID_MAX) or "unknown"


class Service:
    """All daemon methods. ``call(method, params)`` is the single entry point."""

    def __init__(self, layout: Layout, config: Config, *, start_index: bool = True, start_embedder: bool = True):
        self.layout = layout
        self.config = config
        self.started_at = time.time()
        self.last_request_at = time.monotonic()
        self.last_error: str | None = None  # the newest current error (see _errors)
        self._errors: dict[str, dict] = {}  # method → {"kind", "error", "since", "count"}: current problems
        self._last_resolved: dict | None = None  # the last error a later success of its method cleared
        self._errors_lock = threading.Lock()
        self.requests = 0
        self._local = threading.local()
        self._readers: list[sqlite3.Connection] = []  # every thread's index reader, closed at close()
        self._readers_lock = threading.Lock()
        # Damaged stores: the ledger is checked (never replaced) before anything opens it; a
        # damaged projection is moved aside and rebuilt (cogd/recovery.py, docs/architecture.md).
        self.ledger_report = recovery.check_ledger(layout.cogd_dir)  # StoreRefused: the daemon does not start
        self._suspect_corruption = False
        self._stores_checked_at = 0.0
        self._mark_written_at = 0.0
        recovery.open_projection(layout.index_db, lambda: store.connect(layout.index_db),
                                 "rebuilt from the work tree in the background").close()  # schema before readers
        self._index_inode = layout.index_db.stat().st_ino
        self._generation = 0
        self._recent_cache: tuple[float, list[str]] | None = None
        self._held: dict[int, tuple] = {}  # ack token → a built pack's delivery record, until acknowledged
        self._held_seq = 0
        self._held_lock = threading.Lock()
        self.utility = UtilityModel(config.rank.prior_hits, config.rank.prior_misses)
        self.ledger = Ledger(layout.state_db, self.utility, {
            "edit": config.usage.edit_weight, "read": config.usage.read_weight, "search": config.usage.search_weight},
            miss_halflife=config.usage.miss_halflife_ranks, pointer_miss_weight=config.usage.pointer_miss_weight)
        self._map_cache: tuple[float, tuple, RankedGraph] | None = None
        self._map_lock = threading.Lock()
        self.embedder = None
        if config.embed.enabled and start_embedder:
            from cogd.daemon.embedder import EmbeddingWorker  # onnxruntime, lancedb: daemon only

            self.embedder = EmbeddingWorker(layout.index_dir, layout.index_db, config.embed)
        self.worker = IndexWorker(
            layout.root, layout.index_db, config.index,
            on_change=self.embedder.notify if self.embedder is not None else None,
        )
        self._methods = {
            "status": self.status,
            "context.session_start": self.context_session_start,
            "context.prompt": self.context_prompt,
            "usage.tool_use": self.usage_tool_use,
            "session.pre_compact": self.session_pre_compact,
            "session.end": self.session_end,
            "index.touch": self.index_touch,
            "index.refresh": self.index_refresh,
            "search": self.search,
            "entity.get": self.entity_get,
            "stats": self.stats,
        }
        from cogd.daemon.graph_methods import graph_methods  # graph.callers, graph.callees, graph.impact

        self._methods.update(graph_methods(self))
        from cogd.daemon.memory_methods import memory_methods, memory_store  # memory.record, memory.transition, …

        self.memory = memory_store(self)
        self._methods.update(memory_methods(self))
        self._settle_ledger()
        if start_index:
            self.worker.request(None)
        # The file watcher runs in the daemon only (start_index), not for one in-process CLI command.
        self.watcher: Watcher | None = None
        if config.watch.enabled and start_index:
            self.watcher = Watcher(layout.root, self.worker, config.watch).start()

    def close(self) -> None:
        if getattr(self, "consolidator", None) is not None:
            self.consolidator.join(timeout=30)  # a consolidation in flight finishes its write
        if self.watcher is not None:
            self.watcher.stop()
        if self.embedder is not None:
            self.embedder.stop()
        # Readers first, then the writer: the index worker's close checkpoints the WAL, and as
        # the last connection on index.db it removes index.db-wal (a reader left open keeps it).
        with self._readers_lock:
            readers, self._readers = self._readers, []
        for conn in readers:
            try:
                conn.close()
            except sqlite3.Error:
                pass
        self.worker.stop()
        # What the ledger holds at stop, read before the last connection closes: that close
        # checkpoints the WAL and removes it (a reader opened afterwards would leave one behind).
        recovery.write_mark(self.layout.cogd_dir, self.layout.state_db)
        self.memory.close()
        self.ledger.close()

    def _settle_ledger(self) -> None:
        """After the ledger opened: restore tombstones into a new one, record a loss, write the marker."""
        report = self.ledger_report
        if report.state != "ok":  # a new ledger: the record files' tombstones are all it can have
            report.restored_tombstones = recovery.restore_tombstones(self.memory.memory_dir, self.memory.ledger)
        if report.state == "lost":
            recovery.record_loss(self.layout.cogd_dir, report)
        extra = {}
        if report.state == "fresh":
            log.info("%s", report.statement())
            extra = {"started_fresh_at": report.at, "started_fresh_records": report.memory_records,
                     "started_fresh_tombstones": report.restored_tombstones}
        recovery.write_mark(self.layout.cogd_dir, self.layout.state_db, force=True, **extra)
        self._mark_written_at = time.monotonic()

    def recovery_status(self) -> dict:
        """For ``cogd status``: the newest move of each damaged projection, and the ledger's story.

        ``projections``: ``[{store, moved_to, at, reason, rebuild}]``; ``ledger``:
        ``{state, statement, loss (the unacknowledged loss or None), fix, started_fresh_at,
        started_fresh_records}``.
        """
        cogd_dir = self.layout.cogd_dir
        loss = recovery.ledger_loss(cogd_dir)
        mark = recovery.read_mark(cogd_dir) or {}
        report = self.ledger_report
        return {
            "projections": recovery.latest_recoveries(cogd_dir),
            "ledger": {
                "state": "lost" if loss else report.state,
                "statement": loss.get("statement") if loss else report.statement(),
                "loss": loss,
                "fix": recovery.loss_fix(loss) if loss else "",
                "started_fresh_at": mark.get("started_fresh_at"),
                "started_fresh_records": mark.get("started_fresh_records"),
            },
        }

    def _check_stores(self) -> None:
        """After a query failed with corruption: move the damaged projection aside (the caller rebuilds)."""
        self._suspect_corruption = False
        for path, rebuild in ((self.layout.index_db, "rebuilt from the work tree in the background"),
                              (self.layout.index_dir / "memory.db", "rebuilt from the memory files")):
            try:
                problem = recovery.sqlite_problem(path)
            except sqlite3.Error:
                log.exception("could not check %s", path)
                continue
            if problem:
                recovery.quarantine(path, problem, rebuild)

    # ---- plumbing -------------------------------------------------------
    def call(self, method: str, params: dict) -> object:
        """Dispatch one request. Raises RpcError (never anything else)."""
        handler = self._methods.get(method)
        if handler is None:
            raise RpcError("not_found", f"unknown method {method!r}", METHOD_NOT_FOUND)
        if not isinstance(params, dict):
            raise RpcError("bad_request", "params must be an object", INVALID_PARAMS)
        self.requests += 1
        self.last_request_at = time.monotonic()
        try:
            answer = handler(params)
        except RpcError:
            raise
        except sqlite3.Error as exc:
            self._error(method, f"{method}: {exc}")
            if isinstance(exc, sqlite3.DatabaseError) and not any(w in str(exc) for w in ("locked", "busy")):
                # Damage shows as "malformed", but also as e.g. "vtable constructor failed": let
                # quick_check judge, on the next housekeeping tick (at most every STORE_CHECK_S).
                self._suspect_corruption = True
            log.exception("database error in %s", method)
            raise RpcError("internal", f"database error: {exc}") from exc
        except Exception as exc:
            self._error(method, f"{method}: {exc.__class__.__name__}: {exc}")
            log.exception("error in %s", method)
            raise RpcError("internal", f"{exc.__class__.__name__}: {exc}") from exc
        if method in self._errors:  # unlocked peek: the hot path pays one dict lookup
            self._resolve_error(method)
        return answer

    def _error(self, kind: str, message: str) -> None:
        """Record a current problem of ``kind`` (a method name): shown by status until it clears."""
        with self._errors_lock:
            known = self._errors.get(kind)
            now = time.time()
            self._errors[kind] = {"kind": kind, "error": message, "since": known["since"] if known else now,
                                  "at": now, "count": (known["count"] if known else 0) + 1}
            self.last_error = message

    def _resolve_error(self, kind: str) -> None:
        """``kind`` succeeded (its writes went through): its error is no longer current.

        The condition behind a failure (a full disk, a read-only file) is
        judged cleared by the next success of the same method, which did the
        same kind of writes; status keeps the last one resolved, and when.
        """
        with self._errors_lock:
            gone = self._errors.pop(kind, None)
            if gone is None:
                return
            self._last_resolved = {**gone, "resolved_at": time.time()}
            newest = max(self._errors.values(), key=lambda e: e["at"], default=None)
            self.last_error = newest["error"] if newest else None
        log.info("%s works again: cleared %r", kind, gone["error"])

    def _reader(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None or getattr(self._local, "generation", -1) != self._generation:
            if conn is not None:
                with self._readers_lock:
                    if conn in self._readers:
                        self._readers.remove(conn)
                conn.close()
            conn = store.connect(self.layout.index_db, readonly=True, check_same_thread=False)
            with self._readers_lock:
                self._readers.append(conn)
            self._local.conn = conn
            self._local.generation = self._generation
        return conn

    def check_projection(self) -> None:
        """Rebuild the index if its database file was deleted or replaced (called every second).

        The index is a projection, so losing it loses nothing; but connections
        still open on the old file would fail or serve a ghost. Readers reopen
        (a new generation) and the index worker rebuilds from the work tree.
        """
        if self._suspect_corruption and time.monotonic() - self._stores_checked_at > STORE_CHECK_S:
            self._stores_checked_at = time.monotonic()
            self._check_stores()
        if time.monotonic() - self._mark_written_at > recovery.MARK_INTERVAL_S:
            self._mark_written_at = time.monotonic()
            recovery.write_mark(self.layout.cogd_dir, self.layout.state_db)
        try:  # memory: hand edits, arrivals, anchors (a stat scan, at most once a second)
            self.memory.maybe_sync()
        except Exception:
            log.exception("memory sync failed")
        try:
            inode = self.layout.index_db.stat().st_ino
        except FileNotFoundError:
            inode = None
        if inode == self._index_inode:
            return
        log.warning("index database %s was deleted or replaced: rebuilding it", self.layout.index_db)
        store.connect(self.layout.index_db).close()  # the schema exists before any reader reopens
        self._index_inode = self.layout.index_db.stat().st_ino
        self._generation += 1
        self.worker.reopen()

    def _keep_fresh(self) -> None:
        """Run a cheap stat-scan refresh before a pack, waiting a bounded time.

        Only when the watcher is not on inotify (off, starting, polling): then
        this carries unreported edits into the index. At most one scan per
        ``refresh_debounce_ms``; the pack waits at most ``fresh_wait_ms`` for
        it (a long reindex is not waited for: the pack is then served from the
        last committed index). With inotify watching, the scan would only cost
        time on every prompt (tens of ms on a 2,000-file tree).
        """
        if self.watcher is not None and self.watcher.mode == "inotify":
            return
        gap = self.config.index.refresh_debounce_ms / 1000
        if self.worker.queue_depth == 0 and time.monotonic() - self.worker.last_refresh_started > gap:
            ticket = self.worker.request(None)
            self.worker.wait(ticket, timeout=self.config.index.fresh_wait_ms / 1000)

    # ---- methods ----------------------------------------------------------
    def status(self, params: dict) -> dict:
        # Read the ticket before the counts: a caller that sees ticket N served
        # must also see the rows that refresh committed.
        completed = self.worker.completed
        result = self.worker.last_result
        conn = self._reader()
        counts = store.counts(conn)
        return {
            "version": __version__,
            "protocol": PROTOCOL_VERSION,
            "pid": os.getpid(),
            "root": str(self.layout.root),
            "socket": str(self.layout.socket_path),
            "uptime_s": round(time.time() - self.started_at, 3),
            "requests": self.requests,
            "last_error": self.last_error or self.worker.last_error,
            **self._problems_status(),
            "languages": self._languages_status(),
            "index": {
                **counts,
                "skipped": dict(conn.execute(
                    "SELECT status, count(*) FROM files WHERE status != 'ok' GROUP BY status ORDER BY status")),
                "commit": store.get_meta(conn, "commit") or None,
                "indexed_at": float(store.get_meta(conn, "indexed_at") or 0) or None,
                "state": self.worker.state,
                "progress": dict(self.worker.progress),
                "queue_depth": self.worker.queue_depth,
                "completed_ticket": completed,
                "refreshes": self.worker.refreshes,
                "last_refresh": result.as_dict() if result else None,
            },
            "embedding": self._embedding_status(),
            "watch": self.watcher.status() if self.watcher is not None else off_status(
                "disabled by [watch] enabled = false" if not self.config.watch.enabled else "not started"),
            "memory": self.memory.status(),
            "consolidation": self.consolidator.status() if getattr(self, "consolidator", None) else None,
            "recovery": self.recovery_status(),
        }

    def _problems_status(self) -> dict:
        """``errors``: the current problems (each until its method, or the index worker, next
        succeeds); ``last_resolved``: the newest problem that cleared, with ``resolved_at``."""
        with self._errors_lock:
            errors = sorted(self._errors.values(), key=lambda e: e["at"])
            resolved = [r for r in (self._last_resolved, self.worker.last_resolved) if r]
        if self.worker.last_error:
            errors.append({"kind": "index.refresh", "error": self.worker.last_error})
        return {"errors": errors, "last_resolved": max(resolved, key=lambda r: r["resolved_at"], default=None)}

    def _languages_status(self) -> dict:
        """``disabled``: language → why it is off (its grammar did not load or a query did not
        compile; see cogd.index.languages); ``checked``: languages checked so far (those of the
        tree's files, at the first refresh)."""
        from cogd.index import languages

        return {"checked": languages.checked(), "disabled": languages.problems()}

    def _embedding_status(self) -> dict:
        if self.embedder is None:
            return {"state": "disabled", "phase": "disabled", "model": None, "coverage": 0.0}
        status = self.embedder.status()
        if self.worker.refreshes == 0 and status["phase"] == "current":
            # The index is not listed yet: whatever the embedder counted is not the tree's entities.
            status["phase"] = "counting"
        return status

    def _mode(self, params: dict) -> str:
        mode = params.get("mode") or self.config.retrieve.mode
        if mode not in ("bm25", "vector", "hybrid"):
            raise RpcError("bad_request", "mode must be bm25, vector or hybrid", INVALID_PARAMS)
        return mode

    def _query_vector(self, text: str, mode: str):
        """The query embedding for vector/hybrid modes (None while no model is loaded)."""
        if mode == "bm25" or self.embedder is None:
            return None, None
        return self.embedder.query_vector(text[:4000]), self.embedder.dense

    def _now(self, params: dict) -> float:
        """The event's time: the client's ``now`` (unix s) when ``[usage] trust_client_clock``, else the clock."""
        value = params.get("now")
        if self.config.usage.trust_client_clock and type(value) in (int, float) and 0 < value < 1e11:
            return float(value)
        return time.time()

    def _deliver(self, params: dict, event: str, source: str, query: str, pack: Pack,
                 empty_reason: str | None = None) -> dict:
        """Record ``pack`` as a delivery (unless ``record`` is false or it is empty) and answer it.

        An empty pack's answer carries ``empty_reason`` (:meth:`_empty_reason`
        when not given), so the hook can log why it injected nothing.
        """
        if not pack.text:
            return {**pack.as_dict(), "delivery_id": None, "empty_reason": empty_reason or self._empty_reason()}
        record = params.get("record", True) is not False
        delivery_id = None
        if record:
            if faults.active("ledger_write"):  # tests only (cogd.faults): a full disk, on demand
                raise sqlite3.OperationalError("database or disk is full")
            delivery = (_session_id(params), event, source, query, pack.text, [i.as_dict() for i in pack.items],
                        self._now(params), _fingerprint(pack.text))
            if params.get("ack") is True:  # the client acknowledges once the pack is printed
                return {**pack.as_dict(), "delivery_id": None, "ack": self._hold_delivery(delivery)}
            delivery_id = self._record_held(delivery)
        return {**pack.as_dict(), "delivery_id": delivery_id}

    def _empty_reason(self) -> str:
        """Why a pack came out empty, as one word: ``index_building`` (no index has been completed
        yet: the first one is running or queued), ``index_unavailable`` (none completed and none
        running: see status for the error), ``index_empty`` (no file is indexed), else
        ``no_match``. Callers name their own cases (``empty_prompt``, ``no_working_set``,
        ``already_delivered``)."""
        conn = self._reader()
        if not store.get_meta(conn, "indexed_at"):  # written when a refresh completes
            busy = self.worker.state == "indexing" or self.worker.queue_depth
            return "index_building" if busy else "index_unavailable"
        if not conn.execute("SELECT 1 FROM files LIMIT 1").fetchone():
            return "index_empty"
        return "no_match"

    # ---- delivery acknowledgement (docs/protocol.md "Delivery acknowledgement") ----
    def _hold_delivery(self, delivery: tuple) -> int:
        """Keep a built pack's ledger record in memory until its client acknowledges it. Returns its token.

        Held records live only in this process: a daemon that dies with some
        held has, by construction, recorded none of them (nothing to retract).
        """
        with self._held_lock:
            self._held_seq += 1
            self._held[self._held_seq] = delivery
            return self._held_seq

    def _record_held(self, delivery: tuple) -> int:
        session, event, source, query, text, items, now, fingerprint = delivery
        return self.ledger.record_delivery(session, event, source, query, text, items, now=now, fingerprint=fingerprint)

    def confirm_delivery(self, token: int) -> int | None:
        """The client printed the pack held under ``token``: record the delivery. Returns its id
        (None when the token is unknown: never held, or already confirmed or withdrawn)."""
        with self._held_lock:
            delivery = self._held.pop(token, None)
        if delivery is None:
            return None
        try:
            delivery_id = self._record_held(delivery)
        except sqlite3.Error as exc:  # the pack was printed but is not recorded: status says so
            self._error("context.ack", f"context.ack: {exc}")
            raise
        if "context.ack" in self._errors:
            self._resolve_error("context.ack")
        return delivery_id

    def withdraw_delivery(self, token: int) -> bool:
        """The pack held under ``token`` never reached its client: forget it. Returns whether it was held."""
        with self._held_lock:
            return self._held.pop(token, None) is not None

    @property
    def held_deliveries(self) -> int:
        """How many packs wait for their client's acknowledgement."""
        with self._held_lock:
            return len(self._held)

    def _feedback(self, session_id: str | None) -> Feedback:
        """Ranking feedback for one request: utility, the session's touches, recently changed files."""
        touches = self.ledger.session_touches(session_id) if session_id else []
        return Feedback(self.config.rank, self.utility, touches, self._recent_files(), self._associations)

    def _associations(self, text: str) -> list[tuple[str, float]]:
        """Entities earlier sessions edited after prompts like ``text`` (BM25 over those prompts)."""
        return self.ledger.associated(match_expression(query_terms(text)), limit=self.config.retrieve.candidates)

    def _repo_graph(self) -> RankedGraph:
        """Personalised PageRank over the code graph, cached for REPO_MAP_TTL_S per index state."""
        recent = tuple(self._recent_files())
        key = (self.worker.refreshes, self._generation, recent)
        with self._map_lock:
            cached = self._map_cache
            if cached is not None and cached[1] == key and time.monotonic() - cached[0] < REPO_MAP_TTL_S:
                return cached[2]
            favoured = {}
            if self.config.rank.utility_weight > 0:
                base = self.utility.base_rate()
                favoured = {e: u - base for e, u in self._utility_snapshot(base).items() if u > base}
            graph = pagerank(self._reader(), list(recent), favoured)
            self._map_cache = (time.monotonic(), key, graph)
            return graph

    def _utility_snapshot(self, base: float) -> dict[str, float]:
        return {entity_id: self.utility.utility(entity_id, base=base) for entity_id in self.utility.entities()}

    def _memory_preface(self, query: str | None, *, rules_only: bool = False) -> Preface | None:
        """Rules and memories for a pack: all active rules and the newest memories at session
        start (``query`` None), the memories (rules included) matching a prompt otherwise."""
        memory = getattr(self, "memory", None)
        if memory is None:
            return None
        show_stale = self.config.memory.show_stale
        statuses = ("active", "stale") if show_stale else ("active",)
        # A prompt pack may carry matching candidates (marked unconfirmed) so they can earn promotion.
        show_candidates = query is not None and self.config.memory.show_candidates
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
        budget = int(min(self.config.pack.max_chars, 9_500) * MEMORY_SHARE)
        return render_memories(rules, others, budget, show_stale=show_stale, show_candidates=show_candidates)

    def _with_git_note(self, preface: Preface | None) -> Preface | None:
        """The preface with one line first when memory files of this checkout are not committed to
        git (a removed worktree loses them). Reads the cached count only: never runs git on a pack."""
        from cogd.memory.gitstate import note

        memory = getattr(self, "memory", None)
        line = note(memory.git_state.peek()) if memory is not None else ""
        if not line:
            return preface
        text, items = preface if preface else ("", [])
        return (f"**cogd:** {line}\n\n{text}" if text else f"**cogd:** {line}\n", items)

    def context_session_start(self, params: dict) -> dict:
        """SessionStart by ``source``: startup/clear → the repository map; resume → the same
        unless the session already holds an identical pack; compact → the session's working set."""
        source = _client_text(params.get("source"), "source", 40) or "startup"
        session = _session_id(params)
        self._keep_fresh()
        if source == "compact":
            entities = self.ledger.latest_working_set(session)
            if entities is None:
                entities = self._working_set(session)
            pack = working_set_pack(self._reader(), self.layout.root, entities, self.config.pack,
                                    self._with_git_note(self._memory_preface(None, rules_only=True)))
            return self._deliver(params, "session_start", source, "", pack, None if entities else "no_working_set")
        pack = overview_pack(self._reader(), self.layout.root, self._recent_files(), self.config.pack,
                             self._repo_graph(), self._with_git_note(self._memory_preface(None)))
        if source == "resume" and pack.text and self.ledger.has_fingerprint(session, _fingerprint(pack.text)):
            return {**Pack("").as_dict(), "delivery_id": None, "skipped": "the session already holds this pack",
                    "empty_reason": "already_delivered"}
        return self._deliver(params, "session_start", source, "", pack)

    def _working_set(self, session_id: str) -> list[str]:
        """Entity ids the session worked on: edited, then hit, then read (strongest first)."""
        return working_set(self._reader(), self.ledger.session_hits(session_id),
                           self.ledger.session_touches(session_id))

    def _recent_files(self) -> list[str]:
        """``recently_changed_files``, reused for RECENT_FILES_TTL_S (it runs git twice: ~10 ms)."""
        now = time.monotonic()
        cached = self._recent_cache
        if cached is None or now - cached[0] > RECENT_FILES_TTL_S:
            cached = (now, recently_changed_files(self.layout.root))
            self._recent_cache = cached
        return cached[1]

    def context_prompt(self, params: dict) -> dict:
        """The prompt pack. After a compaction whose pack shows no sign of having arrived
        (no item of it hit), the session's working set is re-added at the top."""
        prompt = _clean_text(params.get("prompt"), "prompt", required=True)
        mode = self._mode(params)
        session = _session_id(params)
        record = params.get("record", True) is not False
        self._keep_fresh()
        vector, dense = self._query_vector(prompt, mode)
        pinned: list[str] = []
        source = ""
        if record and self.ledger.compact_acknowledged(session) is False:
            pinned = self.ledger.latest_working_set(session) or self._working_set(session)
            source = "compact_recovery"
        pack = prompt_pack(self._reader(), self.layout.root, prompt, self.config.pack, self.config.retrieve,
                           mode=mode, query_vector=vector, dense=dense,
                           feedback=self._feedback(session if record else None), pinned=pinned,
                           preface=self._memory_preface(prompt))
        return self._deliver(params, "prompt", source, prompt, pack, None if query_terms(prompt) else "empty_prompt")

    def usage_tool_use(self, params: dict) -> dict:
        payload = params.get("payload")
        if not isinstance(payload, dict):
            raise RpcError("bad_request", "payload must be the PostToolUse object", INVALID_PARAMS)
        tool = _client_text(payload.get("tool_name"), "tool_name", 200) or "unknown"
        touches = touches_from_tool_use(payload, self.layout.root)
        raw_id = payload.get("tool_use_id")
        tool_use_id = _client_text(raw_id, "tool_use_id", 200) if isinstance(raw_id, str) else ""
        session, now = _session_id(payload), self._now(params)
        row, hits = self.ledger.record_tool_use_with_hits(session, tool, tool_use_id, touches, now=now)
        self._associate(session, touches, now)
        if tool in ("Edit", "MultiEdit", "Write", "NotebookEdit") and touches:
            self.worker.request(sorted({t.path for t in touches}))
        return {"tool_use": row, "touches": [t.as_dict() for t in touches], "hits": hits}

    def _associate(self, session: str, touches: list[Touch], now: float) -> None:
        """Link the definitions an edit changed to the session's latest prompt (query association).

        Only ranged edits count: a whole-file write says nothing about which
        definition the prompt was about. Runs before the edit is re-indexed,
        so spans are the ones the agent saw.
        """
        edits = [t for t in touches if t.action == "edit" and t.start_line is not None]
        if not edits or self.config.rank.association_weight <= 0:
            return
        conn = self._reader()
        pairs = [(entity_id, touch.path) for touch in edits for entity_id in entities_at(conn, touch)]
        if pairs:
            self.ledger.associate(session, pairs, now)

    def session_pre_compact(self, params: dict) -> dict:
        """PreCompact: snapshot the session's working set for the ``compact`` session start."""
        session = _session_id(params)
        trigger = _client_text(params.get("trigger"), "trigger", 40)
        entities = self._working_set(session)
        row = self.ledger.save_working_set(session, trigger, entities, now=self._now(params))
        return {"working_set": entities, "snapshot": row}

    def session_end(self, params: dict) -> dict:
        reason = _client_text(params.get("reason"), "reason", 80) or "other"
        misses = self.ledger.end_session(_session_id(params), reason, now=self._now(params))
        consolidator = getattr(self, "consolidator", None)  # memory consolidation, on its own thread:
        if consolidator is not None:  # the SessionEnd reply never waits for it
            consolidator.kick("session_end")
        return {"ok": True, "misses": misses}

    def index_touch(self, params: dict) -> dict:
        paths = params.get("paths")
        if not isinstance(paths, list) or not all(isinstance(p, str) for p in paths):
            raise RpcError("bad_request", "paths must be a list of strings", INVALID_PARAMS)
        # Relative to the root; `..`, absolute paths and symlinks that lead out of the tree are dropped.
        rel = list(dict.fromkeys(p for p in (tree_relpath(self.layout.root, raw) for raw in paths[:10_000]) if p))
        timeout = _timeout(params, 60.0)
        before = self._entity_hashes(rel) if rel and params.get("attribute", True) is not False else None
        ticket = self.worker.request(rel)
        if before is not None:
            threading.Thread(target=self._attribute_saves, args=(rel, before, ticket, self._now(params)),
                             name="cogd-save-touches", daemon=True).start()
        if params.get("wait"):
            self.worker.wait(ticket, timeout=timeout)
        return {"queued": rel, "ticket": ticket}

    def _entity_hashes(self, paths: list[str]) -> dict[str, str]:
        conn = self._reader()
        found: dict[str, str] = {}
        for start in range(0, len(paths), 500):
            chunk = paths[start:start + 500]
            found.update(conn.execute(
                f"SELECT id, hash FROM entities WHERE path IN ({','.join('?' * len(chunk))}) AND kind != 'file'",
                chunk).fetchall())
        return found

    def _attribute_saves(self, paths: list[str], before: dict[str, str], ticket: int, now: float) -> None:
        """An editor's saves count as touches: once the saved files are re-indexed, each entity
        whose content hash changed (or that is new) is an ``edit`` touch of its lines, recorded
        for every session with a pack delivered in the last SAVE_SESSION_WINDOW_S."""
        try:
            if not self.worker.wait(ticket, timeout=30.0):
                return
            conn = store.connect(self.layout.index_db, readonly=True)
            try:
                rows = []
                for start in range(0, len(paths), 500):
                    chunk = paths[start:start + 500]
                    rows += conn.execute(
                        f"SELECT id, hash, path, start_line, end_line FROM entities WHERE path IN "
                        f"({','.join('?' * len(chunk))}) AND kind != 'file'", chunk).fetchall()
            finally:
                conn.close()
            touches = [Touch(path, "edit", start, end) for entity_id, digest, path, start, end in rows
                       if before.get(entity_id) != digest]
            if not touches:
                # The watcher may have re-indexed the file before this request saw the old
                # hashes: fall back to a file-level touch of each saved file.
                touches = [Touch(path, "write") for path in paths]
            for session in self.ledger.open_sessions(since=now - SAVE_SESSION_WINDOW_S):
                self.ledger.record_tool_use(session, "FileSave", "", touches, now=now)
                self._associate(session, touches, now)
        except Exception:
            log.exception("could not attribute saved files %s", paths[:5])

    def index_refresh(self, params: dict) -> dict:
        timeout = _timeout(params, 3600.0, limit=86400.0)
        ticket = self.worker.request(None, full=params.get("full") is True)
        if params.get("wait", True):
            done = self.worker.wait(ticket, timeout=timeout)
            result = self.worker.last_result
            return {"ticket": ticket, "done": done, "result": result.as_dict() if result else None}
        return {"ticket": ticket, "done": False, "result": None}

    def search(self, params: dict) -> dict:
        query = _clean_text(params.get("query"), "query", required=True)
        kind = _clean_text(params.get("kind"), "kind")[:40]
        kinds = (kind,) if kind else None
        limit = params.get("limit", 20)
        if not isinstance(limit, int) or not 0 < limit <= 1000:
            raise RpcError("bad_request", "limit must be an integer in 1..1000", INVALID_PARAMS)
        mode = self._mode(params)
        vector, dense = self._query_vector(query, mode)
        hits = retrieve(self._reader(), query, self.config.retrieve, mode=mode, query_vector=vector, dense=dense,
                        kinds=kinds, limit=limit)
        return {"mode": mode, "vectors": vector is not None,
                "hits": [{**h.__dict__, "score": round(h.score, 6)} for h in hits]}

    def entity_get(self, params: dict) -> dict:
        entity_id = _clean_text(params.get("id"), "id", required=True)
        conn = self._reader()
        row = conn.execute("SELECT * FROM entities WHERE id = ?", (entity_id,)).fetchone()
        if row is None:
            raise RpcError("not_found", f"no entity {entity_id!r}", data={"id": entity_id})
        entity = {k: row[k] for k in row.keys() if k != "rowid"}
        outgoing = [dict(r) for r in conn.execute(
            "SELECT dst AS id, kind, resolution FROM edges WHERE src = ? ORDER BY kind, dst", (entity_id,))]
        incoming = [dict(r) for r in conn.execute(
            "SELECT src AS id, kind, resolution FROM edges WHERE dst = ? ORDER BY kind, src", (entity_id,))]
        body = conn.execute("SELECT body FROM entities_fts WHERE rowid = ?", (row["rowid"],)).fetchone()
        return {
            "entity": entity,
            "edges": {"out": outgoing, "in": incoming},
            "body": body[0] if body else "",
            "usage": self.ledger.entity_usage(entity_id, row["path"]),
        }

    def stats(self, params: dict) -> dict:
        conn = self._reader()
        by_lang_kind = [dict(r) for r in conn.execute(
            "SELECT language, kind, count(*) AS n FROM entities GROUP BY language, kind ORDER BY language, kind")]
        edges = [dict(r) for r in conn.execute(
            "SELECT kind, resolution, count(*) AS n FROM edges GROUP BY kind, resolution ORDER BY kind, resolution")]
        files = [dict(r) for r in conn.execute(
            "SELECT language, status, count(*) AS n FROM files GROUP BY language, status ORDER BY language, status")]
        totals = self.ledger.totals()
        # Deterministic: the same index and ledger give the same answer (no clock
        # fields; `status` carries index.indexed_at), so a reset can be checked.
        return {
            "index": {**store.counts(conn), "commit": store.get_meta(conn, "commit") or None},
            "entities": by_lang_kind,
            "edges": edges,
            "files": files,
            "ledger": totals,
            **{key: totals[key] for key in ("deliveries", "hits", "misses", "hit_rate")},
        }


def _fingerprint(text: str) -> str:
    """A pack's identity for duplicate detection (sha256 of its text, 16 hex digits)."""
    return hashlib.sha256(text.encode("utf-8", "replace")).hexdigest()[:16]


def open_service(root: Path, config: Config, *, start_index: bool = True) -> Service:
    """A Service for ``root`` (used in-process by the CLI when no daemon runs)."""
    return Service(Layout(root).ensure(), config, start_index=start_index)
