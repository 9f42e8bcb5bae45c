"""The daemon's ``memory.*`` JSON-RPC methods: thin, validating wrappers over :class:`MemoryStore`.

Every client payload is untrusted: shapes are checked here and turned into
``bad_request``; the store's :class:`~cogd.memory.errors.MemoryError_` becomes an
:class:`RpcError` with the same ``kind`` and ``data`` (``illegal_transition``,
``tombstoned``, ``secret_detected``, ``duplicate``, ``not_found``, ``bad_request``).
See docs/protocol.md for one example per method.
"""

from __future__ import annotations

from typing import Callable

from cogd.daemon.protocol import INVALID_PARAMS, RpcError
from cogd.memory.errors import MemoryError_

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
            except MemoryError_ as exc:
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
        return store().get(_str(params, "id", required=True))

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

    handlers = {
        "memory.record": record, "memory.transition": transition, "memory.get": get, "memory.list": list_,
        "memory.edit": edit, "memory.supersede": supersede, "memory.verify": verify, "memory.purge": purge,
        "memory.events": events, "memory.export": export, "memory.import": import_, "memory.search": search,
        "memory.sync": sync,
    }
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
