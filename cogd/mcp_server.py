"""``cogd mcp``: a stdio MCP server over the repository's daemon (official MCP SDK, ``mcp`` 2.x).

Every tool is one JSON-RPC call to the repository's daemon through
:mod:`cogd.rpc.client`; the daemon is started on the first call if none
runs (as ``cogd start`` does), and once more if it went away. The SDK is
imported only here (it costs about 0.7 s of start-up), so nothing else in cogd
pays for it.

Tools (input schemas come from the signatures below; results are JSON objects):

``search(query, kind?, limit?, mode?)``
    entities ranked by BM25 and/or embeddings: ``{"mode", "hits": [...]}``.
``get_context(prompt, session_id?)``
    the context pack a prompt hook would inject, recorded as a delivery in the
    ledger (session ``session_id``, default this server's own ``mcp-…`` id; client
    ``mcp:NAME``, NAME the client's own from MCP's initialize, see :func:`client_label`).
``get_entity(id, body_chars?)``
    one entity with its edges both ways, its body (trimmed) and delivery counts.
``get_callers(id, limit?)`` / ``get_callees(id, limit?)``
    entities one resolved ``calls`` edge away.
``get_impact(id, depth?, limit?)``
    transitive callers, breadth-first, bounded by ``depth`` and ``limit``.
``status()``
    the daemon's status (index counts, embedding coverage, watcher).
``record_observation`` / ``create_rule`` / ``create_knowledge(text, title?, anchors?, reason?, tags?, session_id?)``
    a new memory record (``memory.record``; source ``agent``, so a candidate).
``reject(id, reason?)``, ``supersede(old_id, new_id)``, ``verify(id)``, ``list_memories(type?, status?, limit?)``
    ``memory.transition`` (to rejected), ``memory.supersede``, ``memory.verify``, ``memory.list``.

Errors come back as MCP tool errors (``isError``) whose text names the
problem and its cogd kind, e.g. ``no entity 'x.py::nope' (ids come from
search results) [not_found]``.
"""

from __future__ import annotations

import logging
import re
import threading
import uuid
from pathlib import Path
from typing import Annotated, Any, Literal

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field

from cogd import __version__
from cogd.memory.lattice import STATUSES
from cogd.memory.record import TYPES
from cogd.rpc import control
from cogd.rpc.client import DaemonUnavailable, RemoteError, call
from cogd.paths import Layout
from cogd.fusion import MODES

log = logging.getLogger("cogd.mcp")

CALL_TIMEOUT_S = 60.0
START_TIMEOUT_S = 60.0
FIRST_INDEX_WAIT_S = 60.0  # a daemon this server started: wait this long for its first index
BODY_CHARS_DEFAULT = 4000
CLIENT_NAME_CHARS = 32  # of the client's own name, in the ledger's client label
# What a client's name may hold in the ledger: it is the client's word, shown by `cogd stats` and
# the viewer; anything else (controls, markup, quotes) becomes "_".
_NAME_UNSAFE = re.compile(r"[^A-Za-z0-9._+@/ -]+")

INSTRUCTIONS = """\
cogd indexes this repository's code (tree-sitter entities, call edges, embeddings).
Entity ids look like `path/to/file.py::Class.method`; get them from `search`, then
`get_entity`, `get_callers`, `get_callees` or `get_impact` on them. `get_context`
returns a ranked context pack for a task description (recorded as a delivery)."""


EntityId = Annotated[str, Field(min_length=1, max_length=2000,
                                description="an entity id from search, e.g. 'json/decoder.py::JSONDecoder.decode'")]
Limit = Annotated[int, Field(ge=1, le=1000, description="at most this many entities")]
MemoryText = Annotated[str, Field(min_length=1, max_length=20_000, description="the claim, in markdown")]
Title = Annotated[str | None, Field(max_length=200, description="a short title (default: the first line)")]
Anchors = Annotated[list[str], Field(max_length=100, description="code entity ids the claim is about")]
Reason = Annotated[str, Field(max_length=500, description="why (kept as provenance)")]
Tags = Annotated[list[str], Field(max_length=50)]
SessionId = Annotated[str | None, Field(max_length=200, description="ledger session id (default: this MCP session)")]
MemoryId = Annotated[str, Field(min_length=1, max_length=200, description="a memory id (ULID) from list_memories")]


class DaemonLink:
    """Calls into the repository's daemon, starting it when none answers. Thread-safe."""

    def __init__(self, layout: Layout):
        self.layout = layout
        self._lock = threading.Lock()

    def _ensure(self) -> None:
        with self._lock:
            if control.is_running(self.layout) and control.wait_ready(self.layout, timeout=START_TIMEOUT_S):
                return
            try:
                control.spawn(self.layout)
            except OSError as exc:
                raise ToolError(f"cannot start the cogd daemon: {exc}") from exc
            if not control.wait_ready(self.layout, timeout=START_TIMEOUT_S):
                raise ToolError("the cogd daemon did not come up; see `cogd logs`")
            # A daemon we just started has an empty index: let its first refresh commit
            # (bounded) so the first answers are not empty.
            try:
                call(self.layout.socket_path, "index.refresh", {"wait": True, "timeout_s": FIRST_INDEX_WAIT_S},
                     timeout=FIRST_INDEX_WAIT_S + 5)
            except (DaemonUnavailable, RemoteError) as exc:
                log.warning("the first index refresh did not finish: %s", exc)

    def call(self, method: str, params: dict) -> Any:
        """``method`` on the daemon; raises ToolError with the daemon's message and kind."""
        for attempt in (1, 2):
            try:
                return call(self.layout.socket_path, method, params, timeout=CALL_TIMEOUT_S)
            except DaemonUnavailable:
                if attempt == 2:
                    raise ToolError("the cogd daemon does not answer; see `cogd logs`") from None
                self._ensure()
            except RemoteError as exc:
                raise ToolError(f"{exc} [{exc.kind or 'error'}]") from exc
            except ValueError as exc:
                raise ToolError(f"malformed answer from the cogd daemon: {exc}") from exc
        raise AssertionError("unreachable")

    async def acall(self, method: str, params: dict) -> Any:
        """:meth:`call` on a worker thread (the socket client blocks)."""
        return await anyio.to_thread.run_sync(self.call, method, params)


def client_label(ctx: Context | None) -> str:
    """The ledger's client for a delivery through this server: ``mcp:NAME``, NAME the
    ``clientInfo.name`` the client sent in MCP's initialize request (or the request envelope of
    the newer protocol), with anything outside letters, digits and ``._+@/ -`` replaced by ``_``
    and cut to :data:`CLIENT_NAME_CHARS`; plain ``mcp`` when the client sent no name or the SDK's
    placeholder ``mcp``. Never raises: a request without a context is ``mcp``."""
    try:
        params = ctx.request_context.session.client_params if ctx is not None else None
        name = params.client_info.name if params is not None and params.client_info is not None else ""
    except (AttributeError, ValueError):  # no request context: not inside a request
        name = ""
    name = _NAME_UNSAFE.sub("_", name if isinstance(name, str) else "")[:CLIENT_NAME_CHARS].strip(" _")
    return f"mcp:{name}" if name and name != "mcp" else "mcp"


def _entity_summary(row: dict) -> dict:
    keep = ("id", "kind", "path", "start_line", "end_line", "signature", "resolution", "distance", "via")
    return {k: row[k] for k in keep if k in row}


def build_server(layout: Layout, session_id: str | None = None) -> MCPServer:
    """The MCP server for ``layout``'s repository. ``session_id``: ledger session for deliveries."""
    link = DaemonLink(layout)
    own_session = session_id or f"mcp-{uuid.uuid4().hex[:12]}"
    server = MCPServer("cogd", instructions=INSTRUCTIONS, version=__version__, log_level="WARNING")
    _add_search_tools(server, link, own_session)
    _add_graph_tools(server, link)
    _add_status_tool(server, link)
    _add_recording_tools(server, link, own_session)
    _add_review_tools(server, link)
    return server


def _add_search_tools(server: MCPServer, link: DaemonLink, own_session: str) -> None:
    """``search`` and ``get_context``."""
    @server.tool(structured_output=True)
    async def search(
        query: Annotated[str, Field(min_length=1, max_length=4000, description="words, names or a question")],
        kind: Annotated[Literal["file", "module", "class", "function", "method", "constant"] | None,
                        Field(description="only entities of this kind")] = None,
        limit: Annotated[int, Field(ge=1, le=100, description="number of hits")] = 10,
        mode: Annotated[Literal[MODES] | None,
                        Field(description="candidate sources (default: the repository's config, hybrid)")] = None,
    ) -> dict[str, Any]:
        """Search the repository's code index. Example: {"query": "parse an email date header", "limit": 5}."""
        result = await link.acall("search", {"query": query, "kind": kind, "limit": limit, "mode": mode})
        hits = [{**_entity_summary(h), "name": h.get("qualname"), "score": h.get("score"),
                 "doc": (h.get("doc") or "").split("\n", 1)[0]} for h in result["hits"]]
        return {"mode": result.get("mode"), "vectors": result.get("vectors"), "hits": hits}

    @server.tool(structured_output=True)
    async def get_context(
        prompt: Annotated[str, Field(min_length=1, max_length=100_000, description="the task or question")],
        session_id: Annotated[str | None, Field(max_length=200, description="ledger session id (default: this MCP session)")] = None,
        ctx: Context | None = None,
    ) -> dict[str, Any]:
        """The ranked context pack for a task, as the prompt hook injects it; recorded as a delivery.

        Example: {"prompt": "the date in an email header is parsed wrong"}.
        """
        pack = await link.acall("context.prompt", {"prompt": prompt, "session_id": session_id or own_session,
                                                   "record": True, "client": client_label(ctx)})
        items = [{"id": i["entity_id"], "kind": i["kind"], "path": i["path"], "start_line": i["start_line"],
                  "end_line": i["end_line"], "rank": i["rank"], "pointer": i.get("pointer", False)}
                 for i in pack.get("items", [])]
        return {"text": pack.get("text", ""), "delivery_id": pack.get("delivery_id"), "items": items}


def _add_graph_tools(server: MCPServer, link: DaemonLink) -> None:
    """``get_entity``, ``get_callers``, ``get_callees`` and ``get_impact``."""
    @server.tool(structured_output=True)
    async def get_entity(
        id: EntityId,
        body_chars: Annotated[int, Field(ge=0, le=200_000, description="trim the body to this many characters")] = BODY_CHARS_DEFAULT,
    ) -> dict[str, Any]:
        """One entity: place, signature, doc, edges both ways, body, delivery counts.

        Example: {"id": "json/decoder.py::JSONDecoder.decode"}.
        """
        result = await link.acall("entity.get", {"id": id})
        body = result.get("body") or ""
        return {**result, "body": body[:body_chars], "body_truncated": len(body) > body_chars}

    @server.tool(structured_output=True)
    async def get_callers(id: EntityId, limit: Limit = 50) -> dict[str, Any]:
        """Entities whose body calls this one (resolved calls). Example: {"id": "json/__init__.py::loads"}."""
        result = await link.acall("graph.callers", {"id": id, "limit": limit})
        return {**result, "callers": [_entity_summary(r) for r in result["callers"]]}

    @server.tool(structured_output=True)
    async def get_callees(id: EntityId, limit: Limit = 50) -> dict[str, Any]:
        """Entities this one calls (resolved calls). Example: {"id": "json/__init__.py::loads"}."""
        result = await link.acall("graph.callees", {"id": id, "limit": limit})
        return {**result, "callees": [_entity_summary(r) for r in result["callees"]]}

    @server.tool(structured_output=True)
    async def get_impact(
        id: EntityId,
        depth: Annotated[int, Field(ge=1, le=10, description="hops of callers to follow")] = 3,
        limit: Limit = 50,
    ) -> dict[str, Any]:
        """Transitive callers (what a change may affect), nearest first, each with its distance and `via`.

        Example: {"id": "json/decoder.py::JSONDecoder.raw_decode", "depth": 2}.
        """
        result = await link.acall("graph.impact", {"id": id, "depth": depth, "limit": limit})
        return {**result, "impacted": [_entity_summary(r) for r in result["impacted"]]}


def _add_status_tool(server: MCPServer, link: DaemonLink) -> None:
    """``status``."""
    @server.tool(structured_output=True)
    async def status() -> dict[str, Any]:
        """The daemon's status: root, index counts, embedding coverage, watcher, last error."""
        result = await link.acall("status", {})
        return {k: result.get(k) for k in ("version", "protocol", "pid", "root", "uptime_s", "last_error",
                                           "index", "embedding", "watch")}


def _add_recording_tools(server: MCPServer, link: DaemonLink, own_session: str) -> None:
    """``record_observation``, ``create_rule`` and ``create_knowledge`` (the daemon's ``memory.record``)."""
    async def _record(type_: str, text: str, title: str | None, anchors: list[str], reason: str,
                      tags: list[str], session_id: str | None) -> dict[str, Any]:
        return await link.acall("memory.record", {
            "type": type_, "text": text, "title": title, "anchors": anchors, "source": "agent",
            "session_id": session_id or own_session, "creation_reason": reason, "tags": tags})

    @server.tool(structured_output=True)
    async def record_observation(
        text: MemoryText, title: Title = None, anchors: Anchors = [], reason: Reason = "",
        tags: Tags = [], session_id: SessionId = None,
    ) -> dict[str, Any]:
        """Record something learned about this code (a candidate until evidence promotes it).

        Refused with a pointer when the same claim exists (duplicate) or was rejected (tombstoned).
        Example: {"text": "JSONDecoder.decode rejects trailing data; use raw_decode to parse a prefix",
        "anchors": ["json/decoder.py::JSONDecoder.decode"]}.
        """
        return await _record("observation", text, title, anchors, reason, tags, session_id)

    @server.tool(structured_output=True)
    async def create_rule(
        text: MemoryText, title: Title = None, anchors: Anchors = [], reason: Reason = "",
        tags: Tags = [], session_id: SessionId = None,
    ) -> dict[str, Any]:
        """Record a rule to follow in this repository (shown first in packs once active).

        Example: {"text": "Never call the network from tests; use the fixtures in tests/conftest.py"}.
        """
        return await _record("rule", text, title, anchors, reason, tags, session_id)

    @server.tool(structured_output=True)
    async def create_knowledge(
        text: MemoryText, title: Title = None, anchors: Anchors = [], reason: Reason = "",
        tags: Tags = [], session_id: SessionId = None,
    ) -> dict[str, Any]:
        """Record background knowledge (architecture, domain facts, decisions and their reasons).

        Example: {"text": "The index and the ledger are two SQLite files so a delivery never waits for a reindex"}.
        """
        return await _record("knowledge", text, title, anchors, reason, tags, session_id)


def _add_review_tools(server: MCPServer, link: DaemonLink) -> None:
    """``reject``, ``supersede``, ``verify`` and ``list_memories`` (records under .cogd/memory/)."""
    @server.tool(structured_output=True)
    async def reject(id: MemoryId, reason: Reason = "") -> dict[str, Any]:
        """Reject a memory as wrong; its claim is tombstoned so it cannot be recorded again.

        Example: {"id": "01JD3…", "reason": "raw_decode does not skip whitespace"}.
        """
        return await link.acall("memory.transition", {"id": id, "status": "rejected", "reason": reason,
                                                      "actor": "agent"})

    @server.tool(structured_output=True)
    async def supersede(old_id: MemoryId, new_id: MemoryId) -> dict[str, Any]:
        """Mark memory ``old_id`` as replaced by the newer ``new_id``. Example: {"old_id": "01JD3…", "new_id": "01JD4…"}."""
        return await link.acall("memory.supersede", {"old_id": old_id, "new_id": new_id, "actor": "agent"})

    @server.tool(structured_output=True)
    async def verify(id: MemoryId) -> dict[str, Any]:
        """Re-anchor a memory to the code as it is now (a stale one becomes active again). An agent's verify
        does not promote a candidate; evidence does (see consolidation). Example: {"id": "01JD3…"}."""
        return await link.acall("memory.verify", {"id": id, "actor": "agent"})

    @server.tool(structured_output=True)
    async def list_memories(
        type: Annotated[Literal[TYPES] | None, Field(description="only this type")] = None,
        status: Annotated[Literal[STATUSES] | None, Field(description="only this status")] = None,
        limit: Annotated[int, Field(ge=1, le=1000)] = 50,
    ) -> dict[str, Any]:
        """List memories, newest first. Example: {"type": "rule", "status": "active"}."""
        return await link.acall("memory.list", {"type": type, "status": status, "limit": limit})


def run(root: Path) -> None:
    """Serve MCP on stdin/stdout for the repository at ``root`` until stdin closes."""
    layout = Layout(root).ensure()
    build_server(layout).run("stdio")
