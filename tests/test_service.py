"""How the Service is put together (cogd/daemon/service.py, cogd/daemon/parts.py).

Every method module exposes ``methods(parts)`` built by ``parts.bind``; the Service's dispatch
table is exactly their union; the method modules are thin and side by side: none imports
another (what two of them share lives on ``Parts``).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from cogd.config import Config
from cogd.daemon import (context_methods, graph_methods, history_methods, index_methods, memory_methods,
                         session_methods, status_methods)
from cogd.daemon.service import Service
from cogd.paths import Layout
from conftest import make_repo

DAEMON = Path(__file__).resolve().parent.parent / "cogd" / "daemon"
METHOD_MODULES = {m.__name__.rsplit(".", 1)[1]: m for m in (
    context_methods, session_methods, index_methods, graph_methods, memory_methods, status_methods,
    history_methods)}


@pytest.fixture
def service(tmp_path):
    root = make_repo(tmp_path / "repo", {"app.py": "def helper(x):\n    return x + 1\n"})
    config = Config()
    config.embed.enabled = False
    service = Service(Layout(root).ensure(), config, start_index=False, start_embedder=False)
    try:
        yield service
    finally:
        service.close()


def test_the_dispatch_table_is_the_union_of_every_method_modules_methods(service):
    parts = service.parts
    tables = {name: (module.methods(parts, service.lifecycle) if name == "status_methods" else module.methods(parts))
              for name, module in METHOD_MODULES.items()}
    names = [method for table in tables.values() for method in table]
    assert len(names) == len(set(names)), "two method modules answer the same method"
    assert set(names) == service.methods
    assert set(tables["status_methods"]) == {"status"}
    assert set(tables["context_methods"]) == {"context.session_start", "context.prompt"}
    assert set(tables["session_methods"]) == {"usage.tool_use", "session.pre_compact", "session.end",
                                              # read-only views of the ledger (cogd ui)
                                              "usage.sessions", "usage.session", "usage.daily", "usage.files"}
    assert set(tables["graph_methods"]) == {"graph.callers", "graph.callees", "graph.impact"}
    assert set(tables["history_methods"]) == {"history.status"}
    # The two the socket server answers itself never reach Service.call.
    assert not {"context.ack", "daemon.shutdown"} & service.methods
    # Bound handlers answer through the same collaborators the Service holds.
    assert tables["status_methods"]["status"]({})["root"] == str(parts.layout.root)
    assert tables["memory_methods"]["memory.list"]({}) == {"memories": []}


def test_method_modules_import_no_other_method_module():
    for name in METHOD_MODULES:
        tree = ast.parse((DAEMON / f"{name}.py").read_text(encoding="utf-8"))
        imported = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                imported.add(node.module)
                imported.update(f"{node.module}.{alias.name}" for alias in node.names)
            elif isinstance(node, ast.Import):
                imported.update(alias.name for alias in node.names)
        others = {f"cogd.daemon.{other}" for other in METHOD_MODULES if other != name}
        assert not imported & others, f"{name} imports {sorted(imported & others)}"
