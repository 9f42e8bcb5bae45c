"""The daemon's history method: ``history.status`` (what is mined; cogd.history)."""

from __future__ import annotations

from cogd.daemon.parts import Handler, Parts, bind


def history_status(parts: Parts, params: dict) -> dict:
    """``{"enabled": false}`` when ``[history] enabled`` is false; else the miner's figures:
    commits stored, mined and skipped by reason (live ones), hidden (after HEAD), the last
    commit mined, co-change pairs, seconds spent, the thread's state and whether packs use it."""
    if parts.history is None:
        return {"enabled": False}
    if params.get("sync") is True and not parts.history.miner.last_pass:
        parts.history.miner.wake()
    return {"enabled": True, **parts.history.miner.status()}


HANDLERS = {"history.status": history_status}


def methods(parts: Parts) -> dict[str, Handler]:
    """Method name → handler(params), over ``parts.history``."""
    return bind(parts, HANDLERS)
