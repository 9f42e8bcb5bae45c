"""The daemon's parameter policy (cogd/daemon/params.py) and the one mapping of errors (Service.call).

A bad parameter is refused with ``bad_request`` (JSON-RPC code -32602) naming the parameter
and its limit; only the ledger's short labels are cut, masked first. A CogdError raised
below the daemon (the memory store's, the call graph's) reaches the wire with its own
kind, code and data.
"""

from __future__ import annotations

import pytest

from cogd.config import Config
from cogd.daemon import params as p
from cogd.daemon.service import Service
from cogd.errors import CogdError
from cogd.fusion import MODES
from cogd.paths import Layout
from cogd.rpc.protocol import RpcError, error_response
from conftest import make_repo

AWS_KEY = "AKIAIOSFODNN7EXAMPLF"


def refused(fn, *args) -> RpcError:
    with pytest.raises(RpcError) as info:
        fn(*args)
    return info.value


def test_text_is_refused_past_its_limit_never_cut():
    assert p.text({"q": "x" * 40}, "q", limit=40) == "x" * 40
    with pytest.raises(RpcError) as info:
        p.text({"q": "x" * 41}, "q", limit=40)
    error = info.value
    assert error.to_json() == {"code": -32602, "message": "q is longer than 40 characters",
                               "data": {"kind": "bad_request"}}
    with pytest.raises(RpcError) as info:
        p.text({"q": 7}, "q")
    assert str(info.value) == "q must be a string"
    with pytest.raises(RpcError) as info:
        p.text({}, "q", required=True)
    assert str(info.value) == "q is required"
    assert p.text({}, "q") is None
    assert p.text({"q": "a\udcffb"}, "q") == "a?b"  # a lone surrogate cannot reach SQLite


def test_numbers_flags_choices_and_lists_name_their_limits():
    assert p.integer({}, "limit", 20, 1, 1000) == 20
    for bad in (0, 1001, 2.0, True, "5"):
        with pytest.raises(RpcError) as info:
            p.integer({"limit": bad}, "limit", 20, 1, 1000)
        assert (info.value.kind, info.value.code, str(info.value)) == (
            "bad_request", -32602, "limit must be an integer in 1..1000")
    with pytest.raises(RpcError) as info:
        p.seconds({"timeout_s": 0}, 60.0)
    assert str(info.value) == "timeout_s must be a number of seconds in (0, 3600]"
    assert p.seconds({"timeout_s": 2}, 60.0) == 2.0
    with pytest.raises(RpcError) as info:
        p.flag({"dry_run": "yes"}, "dry_run")
    assert str(info.value) == "dry_run must be true or false"
    assert p.choice({"mode": ""}, "mode", MODES, "hybrid") == "hybrid"
    with pytest.raises(RpcError) as info:
        p.choice({"mode": "fuzzy"}, "mode", MODES, "hybrid")
    assert str(info.value) == "mode must be one of bm25, vector, hybrid"
    with pytest.raises(RpcError) as info:
        p.str_list({"paths": ["a"] * 11}, "paths", 10)
    assert str(info.value) == "paths must be a list of at most 10 strings"
    with pytest.raises(RpcError):
        p.str_list({}, "paths", 10, required=True)
    assert p.str_list({}, "tags", 10) == []


def test_ledger_labels_are_masked_before_the_deliberate_cut():
    # The key straddles the cut: cut first, its head would be stored unrecognised.
    label = "s" * 190 + AWS_KEY
    kept = p.ledger_text({"session_id": label}, "session_id", 200)
    assert kept == ("s" * 190 + "AKIA…[secret:aws_access_key]")[:200]
    assert AWS_KEY[:8] not in kept and len(kept) == 200
    assert p.session_id({}) == "unknown"
    assert p.ledger_text({"reason": "x" * 5000}, "reason", 80) == "x" * 80
    with pytest.raises(RpcError) as info:
        p.ledger_text({"reason": ["x"]}, "reason", 80)
    assert str(info.value) == "reason must be a string"


def test_ids_and_limits_follow_one_policy_for_every_method_module():
    assert p.identifier({"id": "app.py::helper"}, p.ENTITY_ID) == "app.py::helper"
    for params in ({}, {"id": None}, {"id": ""}):
        with pytest.raises(RpcError) as info:
            p.identifier(params, p.ENTITY_ID)
        assert str(info.value) == "id must be a non-empty entity id such as 'json/decoder.py::JSONDecoder.decode'"
    with pytest.raises(RpcError) as info:
        p.identifier({"old_id": ""}, p.MEMORY_ID, "old_id")
    assert str(info.value) == "old_id must be a non-empty memory id such as '01ARZ3NDEKTSV4RRFFQ69G5FAV'"
    assert p.identifier({"id": "x" * p.ID_MAX}, p.MEMORY_ID) == "x" * p.ID_MAX
    with pytest.raises(RpcError) as info:
        p.identifier({"id": "x" * (p.ID_MAX + 1)}, p.MEMORY_ID)
    assert str(info.value) == "id is longer than 10000 characters"
    assert (p.limit({}, None), p.limit({"limit": None}, 10), p.limit({"limit": 100_000}, None)) == (None, 10, 100_000)
    with pytest.raises(RpcError) as info:
        p.limit({"limit": 51}, 50, 50)
    assert str(info.value) == "limit must be an integer in 1..50"
    # Three limits on text, each for one kind of string: ids < memory strings < prompts.
    assert p.ID_MAX < p.MEMORY_TEXT_MAX < p.PROMPT_MAX


@pytest.fixture
def service(tmp_path):
    root = make_repo(tmp_path / "repo", {"app.py": "def helper(x):\n    return x + 1\n\n\n"
                                                   "def main():\n    return helper(2)\n"})
    config = Config()
    config.embed.enabled = False
    config.watch.enabled = False
    service = Service(Layout(root).ensure(), config, start_index=False, start_embedder=False)
    try:
        assert service.call("index.refresh", {"wait": True, "timeout_s": 120})["done"]
        yield service
    finally:
        service.close()


def test_every_method_refuses_bad_params_the_same_way(service):
    cases = [
        ("search", {"query": "helper", "limit": 0}, "limit must be an integer in 1..1000"),
        ("search", {"query": "helper", "kind": "k" * 41}, "kind is longer than 40 characters"),
        ("context.prompt", {"prompt": "x" * (p.PROMPT_MAX + 1)}, f"prompt is longer than {p.PROMPT_MAX} characters"),
        ("context.prompt", {"prompt": "helper", "mode": "fuzzy"}, "mode must be one of bm25, vector, hybrid"),
        ("index.touch", {"paths": "app.py"}, "paths must be a list of at most 10000 strings"),
        ("graph.impact", {"id": "app.py::helper", "depth": 11}, "depth must be an integer in 1..10"),
        ("graph.callers", {"id": ""}, "id must be a non-empty entity id such as 'json/decoder.py::JSONDecoder.decode'"),
        ("memory.list", {"limit": 0}, "limit must be an integer in 1..100000"),
        ("memory.get", {}, "id must be a non-empty memory id such as '01ARZ3NDEKTSV4RRFFQ69G5FAV'"),
        ("memory.supersede", {"old_id": "a", "new_id": ""},
         "new_id must be a non-empty memory id such as '01ARZ3NDEKTSV4RRFFQ69G5FAV'"),
        ("memory.record", {"type": "observation", "text": "x" * (p.MEMORY_TEXT_MAX + 1)},
         f"text is longer than {p.MEMORY_TEXT_MAX} characters"),
        ("entity.get", {"id": ""}, "id must be a non-empty entity id such as 'json/decoder.py::JSONDecoder.decode'"),
        ("memory.consolidate", {"dry_run": "yes"}, "dry_run must be true or false"),
        ("usage.tool_use", {"payload": []}, "payload must be the PostToolUse object"),
    ]
    for method, params, message in cases:
        error = refused(service.call, method, params)
        assert error.to_json() == {"code": -32602, "message": message, "data": {"kind": "bad_request"}}, method


def test_errors_from_below_keep_their_kind_code_and_data(service):
    assert service.call("graph.callers", {"id": "app.py::main"})["callers"] == []
    missing = refused(service.call, "graph.callers", {"id": "app.py::nope"})
    assert error_response(3, missing) == {"jsonrpc": "2.0", "id": 3, "error": {
        "code": -32002, "message": "no entity 'app.py::nope' (ids come from search results)",
        "data": {"kind": "not_found", "id": "app.py::nope"}}}
    entity = refused(service.call, "entity.get", {"id": "app.py::nope"})
    assert entity.to_json() == {"code": -32002, "message": "no entity 'app.py::nope'",
                                "data": {"kind": "not_found", "id": "app.py::nope"}}
    rid = service.call("memory.record", {"type": "observation", "text": "helper adds one"})["record"]["id"]
    illegal = refused(service.call, "memory.transition", {"id": rid, "status": "pruned"})
    assert isinstance(illegal.__cause__, CogdError) and illegal.__cause__.kind == "illegal_transition"
    assert (illegal.code, illegal.data["from"], illegal.data["allowed"]) == (-32003, "candidate", ["active", "rejected"])
    unknown = refused(service.call, "no.such.method", {})
    assert unknown.to_json() == {"code": -32601, "message": "unknown method 'no.such.method'",
                                 "data": {"kind": "not_found"}}
