"""The daemon's ``memory.*`` JSON-RPC methods: thin, validating wrappers over :class:`MemoryStore`.

Every client payload is untrusted: shapes are checked here (:mod:`cogd.daemon.params`,
``bad_request``); the store's :class:`~cogd.memory.errors.MemoryRefused` is a
:class:`~cogd.errors.CogdError` and reaches the client as it is, mapped once by
:meth:`cogd.daemon.service.Service.call` (``illegal_transition``, ``tombstoned``,
``secret_detected``, ``duplicate``, ``not_found``, ``bad_request``).
See docs/protocol.md for one example per method.
"""

from __future__ import annotations

from cogd.daemon import params as p
from cogd.daemon.parts import Handler, Parts, bind

ACTORS = ("agent", "human", "consolidation", "import")  # who may act on a memory (its events' actor)
MAX_IMPORT_ITEMS = 10_000


def _str(params: dict, name: str, *, required: bool = False, limit: int = p.MEMORY_TEXT_MAX) -> str | None:
    return p.text(params, name, required=required, limit=limit)


def _id(params: dict, name: str = "id") -> str:
    return p.identifier(params, p.MEMORY_ID, name)


def _actor(params: dict, default: str) -> str:
    return p.choice(params, "actor", ACTORS, default)


def record(parts: Parts, params: dict) -> dict:
    source = params.get("source", "agent")
    return parts.memory.record(
        _str(params, "type", required=True), _str(params, "text", required=True),
        title=_str(params, "title", limit=1000), anchors=p.str_list(params, "anchors"), source=source,
        actor=_actor(params, source if source in ACTORS else "agent"),
        session_id=_str(params, "session_id", limit=200) or "",
        creation_reason=_str(params, "creation_reason", limit=500) or "", tags=p.str_list(params, "tags", 50),
        allow_duplicate=params.get("allow_duplicate") is True)


def transition(parts: Parts, params: dict) -> dict:
    return parts.memory.transition(_id(params), _str(params, "status", required=True),
                                   reason=_str(params, "reason", limit=1000) or "", actor=_actor(params, "agent"))


def get(parts: Parts, params: dict) -> dict:
    result = parts.memory.get(_id(params))
    record = result["record"]
    if record.get("superseded_by"):  # graph expansion follows superseded_by to the live record
        from cogd.memory.consolidate import resolve_survivor

        result["survivor"] = resolve_survivor(parts.memory, record["id"])
    return result


def list_(parts: Parts, params: dict) -> dict:
    return {"memories": parts.memory.list(type=_str(params, "type"), status=_str(params, "status"),
                                          limit=p.limit(params, None))}


def edit(parts: Parts, params: dict) -> dict:
    return parts.memory.edit(_id(params), _str(params, "text", required=True),
                             actor=_actor(params, "human"))


def supersede(parts: Parts, params: dict) -> dict:
    return parts.memory.supersede(_id(params, "old_id"), _id(params, "new_id"), actor=_actor(params, "agent"))


def verify(parts: Parts, params: dict) -> dict:
    return parts.memory.verify(_id(params), actor=_actor(params, "human"))


def purge(parts: Parts, params: dict) -> dict:
    return parts.memory.purge(_id(params), actor=_actor(params, "human"))


def events(parts: Parts, params: dict) -> dict:
    return {"events": parts.memory.events(_str(params, "entity"), p.limit(params, None))}


def export(parts: Parts, params: dict) -> dict:
    return {"memories": parts.memory.export()}


def import_(parts: Parts, params: dict) -> dict:
    return parts.memory.import_(p.obj_list(params, "memories", MAX_IMPORT_ITEMS))


def search(parts: Parts, params: dict) -> dict:
    limit = p.limit(params, 10)
    statuses = p.str_list(params, "statuses", 6) or ["active", "stale"]
    hits = parts.memory.search(_str(params, "query", required=True, limit=20_000), limit, tuple(statuses))
    return {"hits": [h.as_dict() for h in hits]}


def sync(parts: Parts, params: dict) -> dict:
    return parts.memory.sync()


def consolidate(parts: Parts, params: dict) -> dict:
    return parts.consolidator.run("manual", dry_run=p.flag(params, "dry_run"))


HANDLERS = {
    "memory.record": record, "memory.transition": transition, "memory.get": get, "memory.list": list_,
    "memory.edit": edit, "memory.supersede": supersede, "memory.verify": verify, "memory.purge": purge,
    "memory.events": events, "memory.export": export, "memory.import": import_, "memory.search": search,
    "memory.sync": sync, "memory.consolidate": consolidate,
}


def methods(parts: Parts) -> dict[str, Handler]:
    """``{method name: handler(params) -> result}`` over ``parts.memory`` and ``parts.consolidator``."""
    return bind(parts, HANDLERS)
