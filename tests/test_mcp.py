"""``cogd mcp`` through the official MCP SDK's own client over stdio, on a real repository.

The server is the real ``cogd mcp`` process; it starts the repository's daemon
itself (none runs before the first tool call). Also: the graph queries behind
get_callers/get_callees/get_impact, and the ``.mcp.json`` registration.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3

import pytest
from mcp import Client, StdioServerParameters
from mcp.types import Implementation

from cogd.index import store
from cogd.cli.install import SettingsError, install_mcp_server
from cogd.retrieve import graph
from conftest import COGD, WAIT_S, Daemon, copy_stdlib, lexical_only, run_cogd

pytestmark = pytest.mark.timeout(600)  # a hang guard, generous for a busy machine

DECODE = "json/decoder.py::JSONDecoder.decode"
RAW_DECODE = "json/decoder.py::JSONDecoder.raw_decode"
LOADS = "json/__init__.py::loads"


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    root = lexical_only(copy_stdlib(tmp_path_factory.mktemp("mcp") / "repo", ("json",)))
    yield root
    Daemon(root).stop()


def _session(root, calls, client_info=None):
    """Run ``calls(client)`` against a fresh ``cogd mcp`` process in ``root``; returns its result.
    ``client_info``: the Implementation the client introduces itself with (default: the SDK's)."""
    async def main():
        params = StdioServerParameters(command=COGD, args=["mcp"], cwd=str(root))
        async with Client(params, read_timeout_seconds=WAIT_S, client_info=client_info) as client:
            return await calls(client)
    return asyncio.run(main())


def test_tools_over_stdio(repo):
    assert not (repo / ".cogd" / "run" / "cogd.sock").exists()  # no daemon yet: the server starts one

    async def calls(client):
        out = {"tools": {t.name: t for t in (await client.list_tools()).tools}}
        for name, args in [
            ("search", {"query": "decode a JSON document", "limit": 5}),
            ("search_kind", {"query": "decoder", "kind": "class", "limit": 3}),
            ("get_entity", {"id": DECODE, "body_chars": 40}),
            ("get_callers", {"id": RAW_DECODE}),
            ("get_callees", {"id": LOADS}),
            ("get_impact", {"id": RAW_DECODE, "depth": 2}),
            ("get_impact_1", {"id": RAW_DECODE, "depth": 3, "limit": 1}),
            ("status", {}),
        ]:
            out[name] = await client.call_tool(name.split("_kind")[0].removesuffix("_1"), args)
        return out

    out = _session(repo, calls)
    tools = out["tools"]
    assert {"search", "get_context", "get_entity", "get_callers", "get_callees", "get_impact", "status"} <= set(tools)
    schema = tools["search"].input_schema
    assert schema["required"] == ["query"] and schema["properties"]["limit"]["maximum"] == 100
    assert set(schema["properties"]["kind"]["anyOf"][0]["enum"]) >= {"class", "function", "method"}
    assert tools["get_impact"].input_schema["properties"]["depth"]["maximum"] == 10
    assert all(t.description for t in tools.values())

    for name, result in out.items():
        if name != "tools":
            assert not result.is_error, (name, result.content)
    hits = out["search"].structured_content["hits"]
    assert hits and all(h["path"].startswith("json/") and "::" in h["id"] for h in hits)
    assert all(h["kind"] == "class" for h in out["search_kind"].structured_content["hits"])

    entity = out["get_entity"].structured_content
    assert entity["entity"]["id"] == DECODE and entity["entity"]["kind"] == "method"
    assert entity["body_truncated"] is True and len(entity["body"]) == 40
    assert any(e["id"] == RAW_DECODE and e["kind"] == "calls" for e in entity["edges"]["out"])

    callers = out["get_callers"].structured_content
    assert [c["id"] for c in callers["callers"]] == [DECODE] and callers["total"] == 1
    assert callers["callers"][0]["resolution"] == "scope"
    callees = {c["id"] for c in out["get_callees"].structured_content["callees"]}
    assert {DECODE, "json/__init__.py::detect_encoding"} <= callees

    impact = out["get_impact"].structured_content
    by_id = {r["id"]: r for r in impact["impacted"]}
    assert by_id[DECODE]["distance"] == 1 and by_id[LOADS]["distance"] == 2 and by_id[LOADS]["via"] == DECODE
    assert max(r["distance"] for r in impact["impacted"]) == 2 and not impact["truncated"]
    one = out["get_impact_1"].structured_content
    assert [r["id"] for r in one["impacted"]] == [DECODE] and one["truncated"] is True

    status = out["status"].structured_content
    assert status["root"] == str(repo) and status["index"]["files"] == len(list(repo.rglob("*.py")))


def test_get_context_records_a_delivery(repo):
    db = repo / ".cogd" / "state.db"

    async def calls(client):
        return await client.call_tool("get_context", {"prompt": "decoding JSON with an object hook",
                                                      "session_id": "mcp-test"})

    result = _session(repo, calls)
    assert not result.is_error, result.content
    pack = result.structured_content
    assert pack["delivery_id"] and "## cogd" in pack["text"] and pack["items"]
    with sqlite3.connect(db) as conn:
        row = conn.execute("SELECT session_id, item_count FROM deliveries WHERE id = ?", (pack["delivery_id"],)).fetchone()
    assert row == ("mcp-test", len(pack["items"]))


def test_a_delivery_names_the_mcp_client(repo):
    """The ledger's client of an MCP delivery is the name the client gave in the handshake,
    made safe and bounded; a client that gave the SDK's placeholder is plain ``mcp``."""
    async def calls(client):
        return await client.call_tool("get_context", {"prompt": "decoding JSON with an object hook"})

    names = {"Evil\x1b]52;c;eA==\x07 [bold]Agent\u202e/2 " + "x" * 80: "mcp:Evil_52_c_eA_ _bold_Agent_/2 xxx",
             "mcp": "mcp"}  # a session costs seconds: the hostile name covers the plain one too
    for name, label in names.items():
        result = _session(repo, calls, Implementation(name=name, version="1.0"))
        assert not result.is_error, result.content
        with sqlite3.connect(repo / ".cogd" / "state.db") as conn:
            row = conn.execute("SELECT client FROM deliveries WHERE id = ?",
                               (result.structured_content["delivery_id"],)).fetchone()
        assert row == (label,), name
    assert len("mcp:Evil_52_c_eA_ _bold_Agent_/2 xxx") == len("mcp:") + 32  # cut to CLIENT_NAME_CHARS


def test_errors_are_tool_errors(repo):
    async def calls(client):
        return [await client.call_tool(name, args) for name, args in [
            ("get_entity", {"id": "json/nope.py::missing"}),
            ("get_callers", {"id": "json/nope.py::missing"}),
            ("get_impact", {"id": RAW_DECODE, "depth": 11}),
            ("search", {"query": ""}),
            ("search", {"query": "x", "mode": "fuzzy"}),
        ]]

    missing, callers, deep, empty, mode = _session(repo, calls)
    assert missing.is_error and "no entity 'json/nope.py::missing'" in missing.content[0].text
    assert "[not_found]" in missing.content[0].text and "[not_found]" in callers.content[0].text
    assert deep.is_error and "depth" in deep.content[0].text
    assert empty.is_error and "query" in empty.content[0].text
    assert mode.is_error and "mode" in mode.content[0].text


def test_graph_queries(repo):
    conn = store.connect(repo / ".cogd" / "index" / "index.db", readonly=True)
    try:
        assert graph.callers(conn, RAW_DECODE)["callers"][0]["id"] == DECODE
        limited = graph.callees(conn, LOADS, limit=1)
        assert len(limited["callees"]) == 1 and limited["total"] >= 2 and limited["truncated"]
        full = graph.impact(conn, RAW_DECODE, depth=10, limit=1000)
        ids = [r["id"] for r in full["impacted"]]
        assert len(ids) == len(set(ids)) and RAW_DECODE not in ids  # each once, never the start
        assert [r["distance"] for r in full["impacted"]] == sorted(r["distance"] for r in full["impacted"])
        for bad in ({"depth": 0}, {"depth": 11}, {"limit": 0}, {"limit": True}):
            with pytest.raises(graph.GraphError) as info:
                graph.impact(conn, RAW_DECODE, **bad)
            assert info.value.kind == "bad_request"
        with pytest.raises(graph.GraphError) as info:
            graph.callers(conn, "nope")
        assert info.value.kind == "not_found"
    finally:
        conn.close()


def test_mcp_json_registration(tmp_path):
    path = tmp_path / ".mcp.json"
    first = install_mcp_server(tmp_path, "/opt/cogd", ["mcp"])
    assert first == {"path": str(path), "changed": True, "backup": None}
    assert json.loads(path.read_text())["mcpServers"]["cogd"] == {
        "type": "stdio", "command": "/opt/cogd", "args": ["mcp"], "env": {}}
    assert install_mcp_server(tmp_path, "/opt/cogd", ["mcp"])["changed"] is False  # idempotent
    other = {"mcpServers": {"github": {"command": "gh-mcp"}, "cogd": {"command": "old"}}, "x": 1}
    path.write_text(json.dumps(other))
    again = install_mcp_server(tmp_path, "/opt/cogd", ["mcp"])
    assert again["changed"] and json.loads(open(again["backup"]).read()) == other
    merged = json.loads(path.read_text())
    assert merged["x"] == 1 and merged["mcpServers"]["github"] == {"command": "gh-mcp"}
    assert merged["mcpServers"]["cogd"]["command"] == "/opt/cogd"
    path.write_text("[1]")
    with pytest.raises(SettingsError, match="not an object"):
        install_mcp_server(tmp_path, "/opt/cogd", ["mcp"])
    assert path.read_text() == "[1]"


def test_install_hooks_registers_the_mcp_server(tmp_path):
    root = lexical_only(copy_stdlib(tmp_path / "repo", ("json",)))
    out = run_cogd(root, "install-hooks").stdout
    assert "registered in" in out
    entry = json.loads((root / ".mcp.json").read_text())["mcpServers"]["cogd"]
    assert entry["command"] == COGD and entry["args"] == ["mcp"]
    assert "MCP server already in" in run_cogd(root, "install-hooks").stdout


def test_memory_tools(repo):
    claim = "JSONDecoder.decode refuses trailing data after the document; raw_decode parses a prefix"

    async def calls(client):
        out = {}
        out["tools"] = {t.name for t in (await client.list_tools()).tools}
        out["first"] = await client.call_tool("record_observation", {"text": claim, "anchors": [DECODE],
                                                                      "reason": "read the code"})
        out["again"] = await client.call_tool("record_observation", {"text": claim})
        out["rule"] = await client.call_tool("create_rule", {"text": "Keep json/ free of third-party imports"})
        out["listed"] = await client.call_tool("list_memories", {"type": "observation"})
        first_id = out["first"].structured_content["record"]["id"]
        out["rejected"] = await client.call_tool("reject", {"id": first_id, "reason": "wrong"})
        out["retry"] = await client.call_tool("record_observation", {"text": claim})
        out["bad_anchor"] = await client.call_tool("create_knowledge", {"text": "something else entirely",
                                                                         "anchors": ["json/nope.py::x"]})
        out["missing"] = await client.call_tool("verify", {"id": "01J0000000000000000000000X"})
        return out

    out = _session(repo, calls)
    assert {"record_observation", "create_rule", "create_knowledge", "reject", "supersede", "verify",
            "list_memories"} <= out["tools"]
    first = out["first"]
    assert not first.is_error, first.content
    record = first.structured_content["record"]
    assert record["type"] == "observation" and record["status"] == "candidate"
    assert (repo / ".cogd" / "memory" / "observations" / f"{record['id']}.md").is_file()
    assert out["again"].is_error and "[duplicate]" in out["again"].content[0].text
    assert not out["rule"].is_error and out["rule"].structured_content["record"]["type"] == "rule"
    assert [m["id"] for m in out["listed"].structured_content["memories"]] == [record["id"]]
    assert not out["rejected"].is_error, out["rejected"].content
    assert out["retry"].is_error and "[tombstoned]" in out["retry"].content[0].text
    assert out["bad_anchor"].is_error and "[not_found]" in out["bad_anchor"].content[0].text
    assert out["missing"].is_error and "[not_found]" in out["missing"].content[0].text
