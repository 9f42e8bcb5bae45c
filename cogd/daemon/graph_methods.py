"""The daemon's call-graph methods: ``graph.callers``, ``graph.callees``, ``graph.impact``.

Thin adapters from JSON-RPC params to :mod:`cogd.retrieve.graph`, run on the
calling thread's read-only index connection (:meth:`Parts.reader`).

Params (all methods): ``id`` (entity id, required), ``limit`` (1..1000,
default 50); ``graph.impact`` also takes ``depth`` (1..10, default 3).
Errors: ``bad_request`` for bad params (checked here, :mod:`cogd.daemon.params`);
``not_found`` for an unknown id (the module's :class:`~cogd.retrieve.graph.GraphError`,
a CogdError, passed on as it is).
"""

from __future__ import annotations

from collections.abc import Callable

from cogd.daemon import params as p
from cogd.daemon.parts import Parts
from cogd.retrieve import graph


def _id(params: dict) -> str:
    entity_id = p.text(params, "id", limit=p.TEXT_MAX)
    if not entity_id:
        raise p.invalid("id", "must be a non-empty entity id such as 'json/decoder.py::JSONDecoder.decode'")
    return entity_id


def _limit(params: dict) -> int:
    return p.integer(params, "limit", graph.DEFAULT_LIMIT, 1, graph.MAX_LIMIT)


def callers(parts: Parts, params: dict) -> dict:
    return graph.callers(parts.reader(), _id(params), _limit(params))


def callees(parts: Parts, params: dict) -> dict:
    return graph.callees(parts.reader(), _id(params), _limit(params))


def impact(parts: Parts, params: dict) -> dict:
    depth = p.integer(params, "depth", graph.DEFAULT_DEPTH, 1, graph.MAX_DEPTH)
    return graph.impact(parts.reader(), _id(params), depth, _limit(params))


def graph_methods(parts: Parts) -> dict[str, Callable[[dict], dict]]:
    """Method name → handler(params), over ``parts``' index readers."""
    return {
        "graph.callers": lambda params: callers(parts, params),
        "graph.callees": lambda params: callees(parts, params),
        "graph.impact": lambda params: impact(parts, params),
    }
