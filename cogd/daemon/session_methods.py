"""The daemon's session methods: ``usage.tool_use``, ``session.pre_compact``, ``session.end``,
and the ledger's read-only views for the viewer: ``usage.sessions``, ``usage.session``,
``usage.daily``, ``usage.files``.

What a session did (its tool uses, their touches, the hits they make on
delivered packs) goes to the ledger; an edit also queues the edited files for
re-indexing. See docs/protocol.md for the params and answers.
"""

from __future__ import annotations

from cogd.daemon import params as p
from cogd.daemon.parts import Handler, Parts, bind
from cogd.usage.touches import touches_from_tool_use

EDITING_TOOLS = ("Edit", "MultiEdit", "Write", "NotebookEdit")


def tool_use(parts: Parts, params: dict) -> dict:
    """PostToolUse: record the tool use and its touches; an edit queues its files for re-indexing."""
    payload = params.get("payload")
    if not isinstance(payload, dict):
        raise p.invalid("payload", "must be the PostToolUse object")
    tool = p.ledger_text(payload, "tool_name", 200) or "unknown"
    client = p.ledger_text(payload, "client", 40)
    touches = touches_from_tool_use(payload, parts.layout.root)
    # a tool_use_id that is not a string is ignored (it only de-duplicates spooled replays)
    tool_use_id = p.ledger_text(payload, "tool_use_id", 200) if isinstance(payload.get("tool_use_id"), str) else ""
    session, now = p.session_id(payload), p.event_time(params, parts.config.usage.trust_client_clock)
    row, hits = parts.ledger.record_tool_use_with_hits(session, tool, tool_use_id, touches, now=now, client=client)
    parts.associate(session, touches, now)
    if touches and (tool in EDITING_TOOLS or any(t.action in ("edit", "write") for t in touches)):
        parts.worker.request(sorted({t.path for t in touches}))
    return {"tool_use": row, "touches": [t.as_dict() for t in touches], "hits": hits}


def pre_compact(parts: Parts, params: dict) -> dict:
    """PreCompact: snapshot the session's working set for the ``compact`` session start."""
    session = p.session_id(params)
    trigger = p.ledger_text(params, "trigger", 40)
    entities = parts.working_set(session)
    row = parts.ledger.save_working_set(session, trigger, entities,
                                        now=p.event_time(params, parts.config.usage.trust_client_clock))
    return {"working_set": entities, "snapshot": row}


def end(parts: Parts, params: dict) -> dict:
    """SessionEnd: close the session (its unhit deliveries become misses); kick a consolidation."""
    reason = p.ledger_text(params, "reason", 80) or "other"
    misses = parts.ledger.end_session(p.session_id(params), reason,
                                      now=p.event_time(params, parts.config.usage.trust_client_clock),
                                      client=p.ledger_text(params, "client", 40))
    parts.consolidator.kick("session_end")  # on its own thread: the SessionEnd reply never waits for it
    return {"ok": True, "misses": misses}


def sessions(parts: Parts, params: dict) -> dict:
    """Read-only: the sessions with deliveries, latest first (``limit``, default 100)."""
    return {"sessions": parts.ledger.sessions(p.limit(params, 100))}


def session(parts: Parts, params: dict) -> dict:
    """Read-only: one session's deliveries with their items and its tool uses with their touches,
    oldest first (the newest ``limit`` of each, default 100)."""
    session_id = p.text(params, "session_id", required=True, limit=p.SESSION_ID_MAX)
    limit = p.limit(params, 100)
    return {"session_id": session_id,
            "deliveries": parts.ledger.deliveries(session_id, limit)[::-1],
            "tool_uses": parts.ledger.tool_uses(session_id, limit)[::-1]}


def daily(parts: Parts, params: dict) -> dict:
    """Read-only: deliveries, pack characters and outcomes per UTC day of delivery."""
    return {"days": parts.ledger.daily()}


def files(parts: Parts, params: dict) -> dict:
    """Read-only: usage summed per file, the most delivered first (``limit``, default 1000)."""
    return {"files": parts.ledger.file_usage(p.limit(params, 1000))}


HANDLERS = {"usage.tool_use": tool_use, "session.pre_compact": pre_compact, "session.end": end,
            "usage.sessions": sessions, "usage.session": session, "usage.daily": daily, "usage.files": files}


def methods(parts: Parts) -> dict[str, Handler]:
    """Method name → handler(params), over ``parts``' ledger and index worker."""
    return bind(parts, HANDLERS)
