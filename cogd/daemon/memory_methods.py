"""The daemon's ``memory.*`` JSON-RPC methods: thin, validating wrappers over :class:`MemoryStore`.

Every client payload is untrusted: shapes are checked here and turned into
``bad_request``; the store's :class:`~cogd.memory.errors.MemoryRefused` becomes an
:class:`RpcError` with the same ``kind`` and ``data`` (``illegal_transition``,
``tombstoned``, ``secret_detected``, ``duplicate``, ``not_found``, ``bad_request``).
See docs/protocol.md for one example per method.
"""

from __future__ import annotations

import logging
import time
from typing import Callable

from cogd.rpc.protocol import INVALID_PARAMS, RpcError
from cogd.memory.errors import MemoryRefused

log = logging.getLogger("cogd.memory")

ACTORS = ("agent", "human", "consolidation", "import")
MAX_IMPORT_ITEMS = 10_000


def _str(params: dict, name: str, *, required: bool = False, limit: int = 200_000) -> str | None:
    value = params.get(name)
    if value is None:
        if required:
            raise RpcError("bad_request", f"{name} is required", INVALID_PARAMS)
        return None
    if not isinstance(value, str):
        raise RpcError("bad_request", f"{name} must be a string", INVALID_PARAMS)
    if len(value) > limit:
        raise RpcError("bad_request", f"{name} is longer than {limit} characters", INVALID_PARAMS)
    return value.encode("utf-8", errors="replace").decode("utf-8")


def _str_list(params: dict, name: str, limit: int = 100) -> list[str]:
    value = params.get(name) or []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value) or len(value) > limit:
        raise RpcError("bad_request", f"{name} must be a list of at most {limit} strings", INVALID_PARAMS)
    return value


def _actor(params: dict, default: str) -> str:
    actor = params.get("actor", default)
    if actor not in ACTORS:
        raise RpcError("bad_request", f"actor must be one of {', '.join(ACTORS)}", INVALID_PARAMS)
    return actor


def _limit(params: dict) -> int | None:
    limit = params.get("limit")
    if limit is not None and (type(limit) is not int or not 0 < limit <= 100_000):
        raise RpcError("bad_request", "limit must be an integer in 1..100000", INVALID_PARAMS)
    return limit


def memory_methods(service) -> dict[str, Callable[[dict], object]]:
    """``{method name: handler(params) -> result}`` for ``service.memory`` (a MemoryStore)."""

    def guarded(fn: Callable[[dict], object]) -> Callable[[dict], object]:
        def handler(params: dict) -> object:
            try:
                return fn(params)
            except MemoryRefused as exc:
                raise RpcError(exc.kind, str(exc), data=exc.data) from exc
        return handler

    def store():
        return service.memory

    def record(params: dict) -> dict:
        source = params.get("source", "agent")
        return store().record(
            _str(params, "type", required=True), _str(params, "text", required=True),
            title=_str(params, "title", limit=1000), anchors=_str_list(params, "anchors"), source=source,
            actor=_actor(params, source if source in ACTORS else "agent"),
            session_id=_str(params, "session_id", limit=200) or "",
            creation_reason=_str(params, "creation_reason", limit=500) or "", tags=_str_list(params, "tags", 50),
            allow_duplicate=params.get("allow_duplicate") is True)

    def transition(params: dict) -> dict:
        return store().transition(_str(params, "id", required=True), _str(params, "status", required=True),
                                  reason=_str(params, "reason", limit=1000) or "", actor=_actor(params, "agent"))

    def get(params: dict) -> dict:
        result = store().get(_str(params, "id", required=True))
        record = result["record"]
        if record.get("superseded_by"):  # graph expansion follows superseded_by to the live record
            from cogd.memory.consolidate import resolve_survivor

            result["survivor"] = resolve_survivor(store(), record["id"])
        return result

    def list_(params: dict) -> dict:
        return {"memories": store().list(type=_str(params, "type"), status=_str(params, "status"),
                                         limit=_limit(params))}

    def edit(params: dict) -> dict:
        return store().edit(_str(params, "id", required=True), _str(params, "text", required=True),
                            actor=_actor(params, "human"))

    def supersede(params: dict) -> dict:
        return store().supersede(_str(params, "old_id", required=True), _str(params, "new_id", required=True),
                                 actor=_actor(params, "agent"))

    def verify(params: dict) -> dict:
        return store().verify(_str(params, "id", required=True), actor=_actor(params, "human"))

    def purge(params: dict) -> dict:
        return store().purge(_str(params, "id", required=True), actor=_actor(params, "human"))

    def events(params: dict) -> dict:
        return {"events": store().events(_str(params, "entity"), _limit(params))}

    def export(params: dict) -> dict:
        return {"memories": store().export()}

    def import_(params: dict) -> dict:
        items = params.get("memories")
        if not isinstance(items, list) or len(items) > MAX_IMPORT_ITEMS:
            raise RpcError("bad_request", f"memories must be a list of at most {MAX_IMPORT_ITEMS} objects",
                           INVALID_PARAMS)
        return store().import_(items)

    def search(params: dict) -> dict:
        limit = _limit(params) or 10
        statuses = _str_list(params, "statuses", 6) or ["active", "stale"]
        hits = store().search(_str(params, "query", required=True, limit=20_000), limit, tuple(statuses))
        return {"hits": [h.as_dict() for h in hits]}

    def sync(params: dict) -> dict:
        return store().sync()

    def consolidate(params: dict) -> dict:
        dry_run = params.get("dry_run", False)
        if type(dry_run) is not bool:
            raise RpcError("bad_request", "dry_run must be true or false", INVALID_PARAMS)
        return service.consolidator.run("manual", dry_run=dry_run)

    handlers = {
        "memory.record": record, "memory.transition": transition, "memory.get": get, "memory.list": list_,
        "memory.edit": edit, "memory.supersede": supersede, "memory.verify": verify, "memory.purge": purge,
        "memory.events": events, "memory.export": export, "memory.import": import_, "memory.search": search,
        "memory.sync": sync, "memory.consolidate": consolidate,
    }
    if getattr(service, "consolidator", None) is None:
        service.consolidator = Consolidator(service)
    return {name: guarded(fn) for name, fn in handlers.items()}


def memory_store(service):
    """The service's :class:`MemoryStore`, embedding through the daemon's encoder when one is loaded."""
    from cogd.memory.api import MemoryStore

    def embed(text: str):
        embedder = service.embedder
        if embedder is None or embedder.model_id is None:
            return None
        vector = embedder.query_vector(text[:4000])
        return (embedder.model_id, vector) if vector is not None else None

    layout = service.layout
    return MemoryStore(layout.root, layout.state_db, layout.index_dir, service.config.memory, embed)


class Consolidator:
    """Runs :func:`cogd.memory.consolidate.consolidate` for the daemon: on a background thread at
    session end and once per idle stretch, synchronously for ``memory.consolidate``.

    One run at a time: a background request while a run is going marks one more run
    (coalesced); :meth:`run` waits for the running one (at most ``wait_s``). Failures
    are logged and kept in ``last_error``; they never reach a hook.
    """

    def __init__(self, service, wait_s: float = 120.0):
        import threading

        self.service = service
        self.wait_s = wait_s
        self._run_lock = threading.Lock()
        self._state = threading.Lock()
        self._thread: threading.Thread | None = None
        self._again: str | None = None
        self._idle_mark: float | None = None  # the last_request_at whose idle stretch was consolidated
        self.last_report: dict | None = None
        self.last_error: str | None = None
        self.runs = 0

    def status(self) -> dict:
        """For ``cogd status``: runs so far, the last run's trigger, time (unix s) and counts, the last error."""
        last = self.last_report or {}
        return {"runs": self.runs, "last_trigger": last.get("trigger"), "last_finished_at": last.get("finished_at"),
                "last_counts": last.get("counts"), "last_error": self.last_error}

    @property
    def config(self):
        return self.service.config.consolidate

    def run(self, trigger: str, *, dry_run: bool = False) -> dict:
        """One run now (waits for a running one); returns the report as a dict. Raises RpcError."""
        from cogd.memory.consolidate import consolidate

        if not self._run_lock.acquire(timeout=self.wait_s):
            raise RpcError("busy", f"a consolidation has been running for over {self.wait_s:.0f} s; try again later")
        try:
            try:
                report = consolidate(self.service.memory, self.service.layout.state_db, self.config,
                                     dry_run=dry_run, trigger=trigger).as_dict()
            except MemoryRefused as exc:
                raise RpcError(exc.kind, str(exc), data=exc.data) from exc
            if not dry_run:
                self.runs += 1
                self.last_report = {**report, "trigger": trigger, "finished_at": time.time()}
                if report["actions"] or report["errors"]:
                    log.info("consolidation (%s): %s; %d errors", trigger, report["counts"], len(report["errors"]))
            return report
        finally:
            self._run_lock.release()

    def kick(self, trigger: str) -> bool:
        """Consolidate on a background thread (never blocks the caller). Returns False when disabled."""
        import threading

        if not self.config.enabled:
            return False
        with self._state:
            if self._thread is not None and self._thread.is_alive():
                self._again = trigger
                return True
            self._thread = threading.Thread(target=self._background, args=(trigger,), name="cogd-consolidate",
                                            daemon=True)
            self._thread.start()
        return True

    def _background(self, trigger: str) -> None:
        while True:
            try:
                self.run(trigger)
                self.last_error = None
            except Exception as exc:  # noqa: BLE001 — logged; the daemon goes on
                self.last_error = f"{exc.__class__.__name__}: {exc}"
                log.exception("consolidation (%s) failed", trigger)
            with self._state:
                if self._again is None:
                    self._thread = None
                    return
                trigger, self._again = self._again, None

    def on_idle(self, last_request_at: float, now: float) -> bool:
        """Called by the daemon's housekeeping (monotonic seconds): consolidate once per idle stretch
        of ``[consolidate] idle_after_s``. Returns whether a run was started."""
        idle_after = self.config.idle_after_s
        if not idle_after or now - last_request_at < idle_after or self._idle_mark == last_request_at:
            return False
        self._idle_mark = last_request_at
        return self.kick("idle")

    def join(self, timeout: float | None = None) -> None:
        """Wait for a background run (daemon shutdown, tests)."""
        thread = self._thread
        if thread is not None:
            thread.join(timeout)
