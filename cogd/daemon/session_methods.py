"""The daemon's session methods: ``usage.tool_use``, ``session.pre_compact``, ``session.end``.

What a session did (its tool uses, their touches, the hits they make on
delivered packs) goes to the ledger; an edit also queues the edited files for
re-indexing. See docs/protocol.md for the params and answers.
"""

from __future__ import annotations

from collections.abc import Callable

from cogd.daemon import params as p
from cogd.daemon.parts import Parts
from cogd.usage.touches import Touch, touches_from_tool_use
from cogd.retrieve.workingset import entities_at, working_set

EDITING_TOOLS = ("Edit", "MultiEdit", "Write", "NotebookEdit")


def session_working_set(parts: Parts, session_id: str) -> list[str]:
    """Entity ids the session worked on: edited, then hit, then read (strongest first)."""
    return working_set(parts.reader(), parts.ledger.session_hits(session_id),
                       parts.ledger.session_touches(session_id))


def associate(parts: Parts, session: str, touches: list[Touch], now: float) -> None:
    """Link the definitions an edit changed to the session's latest prompt (query association).

    Only ranged edits count: a whole-file write says nothing about which
    definition the prompt was about. Runs before the edit is re-indexed,
    so spans are the ones the agent saw.
    """
    edits = [t for t in touches if t.action == "edit" and t.start_line is not None]
    if not edits or parts.config.rank.association_weight <= 0:
        return
    conn = parts.reader()
    pairs = [(entity_id, touch.path) for touch in edits for entity_id in entities_at(conn, touch)]
    if pairs:
        parts.ledger.associate(session, pairs, now)


def tool_use(parts: Parts, params: dict) -> dict:
    """PostToolUse: record the tool use and its touches; an edit queues its files for re-indexing."""
    payload = params.get("payload")
    if not isinstance(payload, dict):
        raise p.invalid("payload", "must be the PostToolUse object")
    tool = p.ledger_text(payload, "tool_name", 200) or "unknown"
    touches = touches_from_tool_use(payload, parts.layout.root)
    # a tool_use_id that is not a string is ignored (it only de-duplicates spooled replays)
    tool_use_id = p.ledger_text(payload, "tool_use_id", 200) if isinstance(payload.get("tool_use_id"), str) else ""
    session, now = p.session_id(payload), p.event_time(params, parts.config.usage.trust_client_clock)
    row, hits = parts.ledger.record_tool_use_with_hits(session, tool, tool_use_id, touches, now=now)
    associate(parts, session, touches, now)
    if tool in EDITING_TOOLS and touches:
        parts.worker.request(sorted({t.path for t in touches}))
    return {"tool_use": row, "touches": [t.as_dict() for t in touches], "hits": hits}


def pre_compact(parts: Parts, params: dict) -> dict:
    """PreCompact: snapshot the session's working set for the ``compact`` session start."""
    session = p.session_id(params)
    trigger = p.ledger_text(params, "trigger", 40)
    entities = session_working_set(parts, session)
    row = parts.ledger.save_working_set(session, trigger, entities,
                                        now=p.event_time(params, parts.config.usage.trust_client_clock))
    return {"working_set": entities, "snapshot": row}


def end(parts: Parts, params: dict) -> dict:
    """SessionEnd: close the session (its unhit deliveries become misses); kick a consolidation."""
    reason = p.ledger_text(params, "reason", 80) or "other"
    misses = parts.ledger.end_session(p.session_id(params), reason,
                                      now=p.event_time(params, parts.config.usage.trust_client_clock))
    parts.consolidator.kick("session_end")  # on its own thread: the SessionEnd reply never waits for it
    return {"ok": True, "misses": misses}


def session_methods(parts: Parts) -> dict[str, Callable[[dict], dict]]:
    """Method name → handler(params), over ``parts``' ledger and index worker."""
    return {
        "usage.tool_use": lambda params: tool_use(parts, params),
        "session.pre_compact": lambda params: pre_compact(parts, params),
        "session.end": lambda params: end(parts, params),
    }
