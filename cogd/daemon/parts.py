"""The daemon's collaborators, created in one place (:func:`build_parts`) and shared by every method module.

:class:`Parts` is what every method module is given — ``context_methods``,
``session_methods``, ``index_methods``, ``graph_methods``, ``memory_methods``
and ``status_methods``: the ledger, the index worker, the memory store, the
consolidator, per-thread index readers, the packs held for acknowledgement,
and the record of current problems, with the few reads more than one method
module needs (:meth:`Parts.working_set`, :meth:`Parts.associate`). Each method
module exposes ``methods(parts)``, its handlers bound to ``parts`` by
:func:`bind`. Nothing here answers a request;
:class:`cogd.daemon.service.Service` owns the lifecycle and the dispatch.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from cogd import recovery
from cogd.config import Config
from cogd.daemon.consolidator import Consolidator
from cogd.daemon.watcher import Watcher
from cogd.daemon.worker import IndexWorker
from cogd.index import store
from cogd.index.sources import recently_changed_files
from cogd.paths import Layout
from cogd.retrieve.prompt import WINDOW_CHARS, prose_windows
from cogd.retrieve.repomap import RankedGraph, pagerank
from cogd.retrieve.workingset import entities_at, working_set
from cogd.usage.ledger import Ledger
from cogd.usage.touches import Touch
from cogd.usage.utility import UtilityModel
from cogd.fusion import BM25

if TYPE_CHECKING:  # heavy (onnxruntime, lancedb) or only for the annotations
    from cogd.daemon.embedder import EmbeddingWorker
    from cogd.history.query import HistoryQueries
    from cogd.memory.api import MemoryStore

log = logging.getLogger(__name__)

RECENT_FILES_TTL_S = 10.0
REPO_MAP_TTL_S = 60.0  # the PageRank map is recomputed at most this often (0.6 s on a 60,000-entity index)


class IndexReaders:
    """One read-only connection to ``index.db`` per thread; all reopen after :meth:`renew`.

    Reads see the last committed index (the index worker writes on its own connection).
    """

    def __init__(self, index_db: Path):
        self.index_db = index_db
        self.generation = 0  # bumped when index.db was replaced: every thread reopens
        self._local = threading.local()
        self._all: list[sqlite3.Connection] = []  # every thread's reader, closed at close()
        self._lock = threading.Lock()

    def get(self) -> sqlite3.Connection:
        """This thread's reader (``sqlite3.Row`` rows), opened or reopened as needed."""
        conn = getattr(self._local, "conn", None)
        if conn is None or getattr(self._local, "generation", -1) != self.generation:
            if conn is not None:
                with self._lock:
                    if conn in self._all:
                        self._all.remove(conn)
                conn.close()
            conn = store.connect(self.index_db, readonly=True, check_same_thread=False)
            with self._lock:
                self._all.append(conn)
            self._local.conn = conn
            self._local.generation = self.generation
        return conn

    def renew(self) -> None:
        """The database file was replaced: every thread's next :meth:`get` opens a new connection."""
        self.generation += 1

    def close(self) -> None:
        """Close every thread's reader (errors ignored: the process is stopping)."""
        with self._lock:
            readers, self._all = self._all, []
        for conn in readers:
            try:
                conn.close()
            except sqlite3.Error:
                pass


class HeldDeliveries:
    """Built packs' ledger records kept in memory until their client acknowledges them, by token.

    Held records live only in this process: a daemon that dies with some held has,
    by construction, recorded none of them (nothing to retract).
    """

    def __init__(self):
        self._held: dict[int, tuple] = {}
        self._seq = 0
        self._recording = 0  # taken for their ledger write, not yet committed (or failed)
        self._lock = threading.Lock()

    def hold(self, delivery: tuple) -> int:
        """Keep ``delivery`` (the ledger record's fields); returns its token."""
        with self._lock:
            self._seq += 1
            self._held[self._seq] = delivery
            return self._seq

    def take(self, token: int) -> tuple | None:
        """The record held under ``token``, no longer held (None when unknown or already taken)."""
        with self._lock:
            return self._held.pop(token, None)

    def take_to_record(self, token: int) -> tuple | None:
        """As :meth:`take`, for the ledger write that follows: the record counts as pending
        (:meth:`pending`) until :meth:`recorded` is called, whatever the write's outcome."""
        with self._lock:
            delivery = self._held.pop(token, None)
            if delivery is not None:
                self._recording += 1
            return delivery

    def recorded(self) -> None:
        """The write that :meth:`take_to_record` began has committed or failed."""
        with self._lock:
            self._recording -= 1

    def pending(self) -> dict:
        """``{"held": n, "recording": m}``: packs waiting for their client's acknowledgement, and
        acknowledged ones whose ledger write has not finished. A hook waits a bounded time for
        that write (cogd.hookclient.ACK_WAIT_S), so a reader of the ledger that must see every
        printed pack waits until both are 0."""
        with self._lock:
            return {"held": len(self._held), "recording": self._recording}

    def __len__(self) -> int:
        with self._lock:
            return len(self._held)


class Problems:
    """Current problems by kind (a method name), each until a later success of that kind clears it.

    The condition behind a failure (a full disk, a read-only file) is judged cleared
    by the next success of the same method, which did the same kind of writes; the
    last problem resolved is kept, with when.
    """

    def __init__(self):
        self.last_error: str | None = None  # the newest current problem's message
        self.last_resolved: dict | None = None
        self._current: dict[str, dict] = {}  # kind → {"kind", "error", "since", "at", "count"}
        self._lock = threading.Lock()

    def __contains__(self, kind: str) -> bool:
        return kind in self._current  # unlocked peek: the hot path pays one dict lookup

    def record(self, kind: str, message: str) -> None:
        """Record a current problem of ``kind``: shown by status until it clears."""
        with self._lock:
            known = self._current.get(kind)
            now = time.time()
            self._current[kind] = {"kind": kind, "error": message, "since": known["since"] if known else now,
                                   "at": now, "count": (known["count"] if known else 0) + 1}
            self.last_error = message

    def resolve(self, kind: str) -> None:
        """``kind`` succeeded: its problem is no longer current."""
        with self._lock:
            gone = self._current.pop(kind, None)
            if gone is None:
                return
            self.last_resolved = {**gone, "resolved_at": time.time()}
            newest = max(self._current.values(), key=lambda e: e["at"], default=None)
            self.last_error = newest["error"] if newest else None
        log.info("%s works again: cleared %r", kind, gone["error"])

    def current(self) -> list[dict]:
        """The current problems, oldest first."""
        with self._lock:
            return sorted(self._current.values(), key=lambda e: e["at"])


class RecentFiles:
    """``recently_changed_files(root)``, reused for RECENT_FILES_TTL_S (it runs git twice: ~10 ms)."""

    def __init__(self, root: Path):
        self.root = root
        self._cache: tuple[float, list[str]] | None = None

    def get(self) -> list[str]:
        now = time.monotonic()
        cached = self._cache
        if cached is None or now - cached[0] > RECENT_FILES_TTL_S:
            cached = (now, recently_changed_files(self.root))
            self._cache = cached
        return cached[1]


@dataclass(frozen=True)
class Parts:
    """The collaborators of every daemon method; see :func:`build_parts`."""

    layout: Layout
    config: Config
    utility: UtilityModel
    ledger: Ledger
    embedder: EmbeddingWorker | None  # None when embedding is off (or not started)
    worker: IndexWorker
    memory: MemoryStore
    consolidator: Consolidator
    readers: IndexReaders
    held: HeldDeliveries
    problems: Problems
    recent: RecentFiles
    watcher: Watcher | None  # built here, started by the Service once the ledger is settled
    repo_map: "RepoMap"
    history: "HistoryQueries | None" = None  # [history] enabled: the mined commits (cogd.history)

    def reader(self) -> sqlite3.Connection:
        """This thread's read-only connection to the index (see :class:`IndexReaders`)."""
        return self.readers.get()

    def query_vector(self, text: str, mode: str) -> tuple:
        """``(vector, dense)``: the query embedding for vector/hybrid modes, ``(None, None)`` for
        ``bm25`` or while no model is loaded (``dense``: the embedder's dense-vector store)."""
        if mode == BM25 or self.embedder is None:
            return None, None
        # search_pair: the query and the index of one model (the static first tier's while it is
        # active, cogd.daemon.first_tier), read together.
        if len(text) <= WINDOW_CHARS:  # a short prompt: one vector, as it always was
            return self.embedder.search_pair(text[:4000])
        # A long prompt: its prose in windows (cogd.retrieve.prompt.prose_windows), one row each;
        # retrieval fuses one nearest-neighbour list per window.
        windows = prose_windows(text)
        if len(windows) <= 1:
            return self.embedder.search_pair((windows or [text])[0][:4000])
        return self.embedder.search_pair(windows)

    def working_set(self, session_id: str) -> list[str]:
        """Entity ids the session worked on: edited, then hit, then read (strongest first).

        Read by ``session.pre_compact`` (the snapshot) and by the context methods
        when a compaction left no snapshot."""
        return working_set(self.reader(), self.ledger.session_hits(session_id),
                           self.ledger.session_touches(session_id))

    def associate(self, session: str, touches: list[Touch], now: float) -> None:
        """Link the definitions an edit changed to the session's latest prompt (query association).

        Only ranged edits count: a whole-file write says nothing about which
        definition the prompt was about. Runs before the edit is re-indexed,
        so spans are the ones the agent saw. Called for a tool use and for an
        editor's save (``index.touch``); ``now`` in unix seconds.
        """
        edits = [t for t in touches if t.action == "edit" and t.start_line is not None]
        if not edits or self.config.rank.association_weight <= 0:
            return
        conn = self.reader()
        pairs = [(entity_id, touch.path) for touch in edits for entity_id in entities_at(conn, touch)]
        if pairs:
            self.ledger.associate(session, pairs, now)


Handler = Callable[[dict], object]  # one method: its params object in, its JSON-able answer out


def bind(parts: Parts, handlers: Mapping[str, Callable[[Parts, dict], object]]) -> dict[str, Handler]:
    """``{method name: handler(params)}``: each of ``handlers`` (``fn(parts, params)``) bound to ``parts``.

    Every method module builds its ``methods(parts)`` with this, so the Service's
    dispatch table is the union of those dicts.
    """
    return {name: partial(fn, parts) for name, fn in handlers.items()}


class RepoMap:
    """Personalised PageRank over the code graph, cached for REPO_MAP_TTL_S per index state."""

    def __init__(self):
        self._cache: tuple[float, tuple, RankedGraph] | None = None
        self._lock = threading.Lock()

    def get(self, parts: Parts) -> RankedGraph:
        """The map for the index as ``parts`` sees it, favouring recently changed files and useful entities."""
        recent = tuple(parts.recent.get())
        key = (parts.worker.refreshes, parts.readers.generation, recent)
        with self._lock:
            cached = self._cache
            if cached is not None and cached[1] == key and time.monotonic() - cached[0] < REPO_MAP_TTL_S:
                return cached[2]
            favoured = {}
            utility = parts.utility
            if parts.config.rank.utility_weight > 0:
                base = utility.base_rate()
                favoured = {e: u for e in utility.entities() if (u := utility.utility(e, base=base) - base) > 0}
            graph = pagerank(parts.reader(), list(recent), favoured)
            self._cache = (time.monotonic(), key, graph)
            return graph


def memory_store(layout: Layout, config: Config, embedder: EmbeddingWorker | None) -> MemoryStore:
    """The daemon's :class:`~cogd.memory.api.MemoryStore`, embedding through ``embedder`` when a model is loaded."""
    from cogd.memory.api import MemoryStore

    def embed(text: str):
        if embedder is None or embedder.model_id is None:
            return None
        vector = embedder.query_vector(text[:4000])
        return (embedder.model_id, vector) if vector is not None else None

    return MemoryStore(layout.root, layout.state_db, layout.index_dir, config.memory, embed)


def build_parts(layout: Layout, config: Config, *, start_index: bool, start_embedder: bool) -> Parts:
    """Open the stores and create the workers (none started) for ``layout``'s repository.

    The index projection is opened first (a damaged one is moved aside and rebuilt:
    cogd/recovery.py), so its schema exists before any reader. The caller has checked
    the ledger (:func:`cogd.recovery.check_ledger`) before this opens it.
    """
    recovery.open_projection(layout.index_db, lambda: store.connect(layout.index_db),
                             "rebuilt from the work tree in the background").close()
    utility = UtilityModel(config.rank.prior_hits, config.rank.prior_misses)
    ledger = Ledger(layout.state_db, utility, {
        "edit": config.usage.edit_weight, "read": config.usage.read_weight, "search": config.usage.search_weight},
        miss_halflife=config.usage.miss_halflife_ranks, pointer_miss_weight=config.usage.pointer_miss_weight)
    embedder = None
    if config.embed.enabled and start_embedder:
        from cogd.daemon.embedder import EmbeddingWorker  # onnxruntime, lancedb: daemon only

        from cogd.daemon.scheduling import daemon_yielding

        # Between encoder batches the embedder gives way to requests (cogd.daemon.scheduling).
        embedder = EmbeddingWorker(layout.index_dir, layout.index_db, config.embed,
                                   daemon_yielding(config.daemon) if start_index else None,
                                   after_first_index=start_index)
    worker = IndexWorker(layout.root, layout.index_db, config.index,
                         on_change=embedder.notify if embedder is not None else None)
    memory = memory_store(layout, config, embedder)
    # The file watcher runs in the daemon only (start_index), not for one in-process CLI command.
    watcher = Watcher(layout.root, worker, config.watch) if config.watch.enabled and start_index else None
    readers = IndexReaders(layout.index_db)
    return Parts(layout=layout, config=config, utility=utility, ledger=ledger, embedder=embedder, worker=worker,
                 memory=memory,
                 consolidator=Consolidator(memory, layout.state_db, config.consolidate, nice=config.daemon.background_nice),
                 readers=readers, held=HeldDeliveries(), problems=Problems(),
                 recent=RecentFiles(layout.root), watcher=watcher, repo_map=RepoMap(),
                 history=history_queries(layout, config, worker, readers.get))


def learned_evidence(parts: "Parts") -> dict[str, int]:
    """``{learned source: its evidence}`` (:data:`cogd.retrieve.feedback.LEARNED_SOURCES`): the
    ledger's sessions, and history's reachable change requests and pair commits (zero while
    history is off or not synchronised with HEAD). For the request handlers' ``Feedback``."""
    evidence = dict(parts.ledger.evidence_sessions())
    found = parts.history.evidence() if parts.history is not None else {}
    evidence["history_association"] = found.get("history_association", 0)
    evidence["co_change"] = found.get("co_change", 0)
    return evidence


def history_queries(layout: Layout, config: Config, worker: IndexWorker,
                    index_reader: Callable[[], sqlite3.Connection] | None = None) -> "HistoryQueries | None":
    """The history projection (``history.db``, moved aside and re-mined when damaged) and its
    miner, not started (the Service starts it), mining once the first index exists. None when
    ``[history] enabled`` is false or the projection cannot be opened (logged: packs go on without it).
    ``index_reader``: the per-thread index readers' ``get``, so each mining pass ends with the
    file prior's counts in memory (:class:`cogd.history.miner.HistoryMiner`)."""
    if not config.history.enabled:
        return None
    from cogd.daemon.scheduling import lower_thread_priority
    from cogd.history.miner import HistoryMiner
    from cogd.history.query import HistoryQueries
    from cogd.history.store import HistoryStore

    path = layout.index_dir / "history.db"
    try:
        history = recovery.open_projection(path, lambda: HistoryStore(path), "re-mined from git by the daemon's background miner (when none runs: once `cogd start` starts one)")
    except Exception:
        log.exception("history projection %s unavailable: packs go on without history", path)
        return None
    miner = HistoryMiner(layout.root, history, config.history, ready=lambda: worker.refreshes >= 1,
                         on_start=lambda: lower_thread_priority(config.daemon.background_nice),
                         index_reader=index_reader)
    return HistoryQueries(miner, config.history)
