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

from cogd.daemon import params as p
from cogd.daemon.parts import Handler, Parts, bind
from cogd.retrieve import graph


def _id(params: dict) -> str:
    return p.identifier(params, p.ENTITY_ID)


def _limit(params: dict) -> int:
    return p.limit(params, graph.DEFAULT_LIMIT, graph.MAX_LIMIT)


def callers(parts: Parts, params: dict) -> dict:
    return graph.callers(parts.reader(), _id(params), _limit(params))


def callees(parts: Parts, params: dict) -> dict:
    return graph.callees(parts.reader(), _id(params), _limit(params))


def impact(parts: Parts, params: dict) -> dict:
    depth = p.integer(params, "depth", graph.DEFAULT_DEPTH, 1, graph.MAX_DEPTH)
    return graph.impact(parts.reader(), _id(params), depth, _limit(params))


HANDLERS = {"graph.callers": callers, "graph.callees": callees, "graph.impact": impact}


def methods(parts: Parts) -> dict[str, Handler]:
    """Method name → handler(params), over ``parts``' index readers."""
    return bind(parts, HANDLERS)
