"""The daemon's call-graph methods: ``graph.callers``, ``graph.callees``, ``graph.impact``.

Thin adapters from JSON-RPC params to :mod:`cogd.retrieve.graph`, run on the
service's per-thread read-only index connection. Registered by
:class:`cogd.daemon.service.Service` through :func:`graph_methods`.

Params (all methods): ``id`` (entity id, required), ``limit`` (1..1000,
default 50); ``graph.impact`` also takes ``depth`` (1..10, default 3).
Errors: ``not_found`` for an unknown id, ``bad_request`` for bad params.
"""

from __future__ import annotations

from collections.abc import Callable

from cogd.rpc.protocol import INVALID_PARAMS, RpcError
from cogd.retrieve import graph


def _run(fn: Callable[..., dict], conn, params: dict, *names: str) -> dict:
    kwargs = {name: params[name] for name in names if params.get(name) is not None}
    try:
        return fn(conn, params.get("id"), **kwargs)
    except graph.GraphError as exc:
        if exc.kind == "not_found":
            raise RpcError("not_found", str(exc), data={"id": params.get("id")}) from exc
        raise RpcError("bad_request", str(exc), INVALID_PARAMS) from exc


def graph_methods(service) -> dict[str, Callable[[dict], dict]]:
    """Method name → handler, for ``service`` (anything with ``_reader()`` → sqlite3 connection)."""
    return {
        "graph.callers": lambda params: _run(graph.callers, service._reader(), params, "limit"),
        "graph.callees": lambda params: _run(graph.callees, service._reader(), params, "limit"),
        "graph.impact": lambda params: _run(graph.impact, service._reader(), params, "depth", "limit"),
    }
