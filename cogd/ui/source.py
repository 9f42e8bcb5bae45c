"""Where the viewer's facts come from: the repository's daemon, over its socket.

Every page is built from the daemon's own JSON-RPC methods (docs/protocol.md), so it shows
the numbers ``cogd status``, ``cogd stats`` and ``cogd show`` print. Only read-only methods
are called (:data:`READ_METHODS`); :meth:`Source.call` refuses any other name, so no page can
issue a write even by mistake. When no daemon answers, the source starts one as the hooks do
(respecting the back-off of a failed start) and asks again once.
"""

from __future__ import annotations

from cogd.paths import Layout
from cogd.rpc import control
from cogd.rpc.client import DaemonUnavailable, call as rpc_call

#: The methods a page may call. ``context.prompt`` only with ``record`` false (see :meth:`Source.call`).
READ_METHODS = frozenset({
    "status", "stats", "entity.get", "graph.callers", "graph.callees", "search",
    "memory.list", "memory.get", "memory.events", "context.prompt",
    "usage.sessions", "usage.session", "usage.daily", "usage.files",
})

START_WAIT_S = 60.0  # a cold daemon opens its stores and answers ``status`` well within this


class Source:
    """Calls to ``layout``'s daemon; ``timeout`` (seconds) bounds each call, ``start`` lets a
    call start the daemon when none answers."""

    def __init__(self, layout: Layout, *, timeout: float = 30.0, start: bool = True):
        self.layout = layout
        self.timeout = timeout
        self.start = start

    def call(self, method: str, params: dict | None = None) -> object:
        """``method``'s result. Raises ValueError for a method that is not read-only (or a
        ``context.prompt`` that would record a delivery), RemoteError for the daemon's refusal
        (its ``kind`` says which), DaemonUnavailable when no daemon answers even after a start."""
        params = dict(params or {})
        if method not in READ_METHODS:
            raise ValueError(f"the viewer does not call {method!r}: it is not a read-only method")
        if method == "context.prompt" and params.get("record") is not False:
            raise ValueError("the viewer asks for packs only with record=false (no delivery is recorded)")
        try:
            return rpc_call(self.layout.socket_path, method, params, timeout=self.timeout)
        except DaemonUnavailable:
            if not self.start:
                raise
        control.spawn(self.layout)
        control.wait_ready(self.layout, timeout=START_WAIT_S)
        return rpc_call(self.layout.socket_path, method, params, timeout=self.timeout)
