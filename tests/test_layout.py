"""The shape of the code, checked: import graph, layer order, function length, references, docs.

(Every CLI command's help text is checked by tests/test_cli_help.py.) Everything here reads
source files with :mod:`ast` (or plain text), so a test fails with the
offending file and line named. The layer order is data in this module *and* a list in
docs/architecture.md ("Layers"); :func:`test_documented_layer_order_is_the_checked_one` keeps
the two equal, so the page a newcomer reads is the order the code obeys.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "cogd"
ARCHITECTURE = REPO / "docs" / "architecture.md"
PROTOCOL = REPO / "docs" / "protocol.md"

# Lowest first. A module may import from its own layer or any layer below it, never above. A
# name stands for itself and every module below it (``cogd.rpc`` covers ``cogd.rpc.client``);
# ``cogd`` alone is the package's ``__init__`` only. docs/architecture.md lists the same.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("foundation", ("cogd", "cogd.errors", "cogd.faults", "cogd.safepath", "cogd.committed",
                    "cogd.config", "cogd.paths", "cogd.rpc", "cogd.recovery", "cogd.fusion", "cogd.inlist", "cogd.ages", "cogd.visible",
                    "cogd.clients", "cogd.evidence", "cogd.gitsafe")),
    ("secrets", ("cogd.secrets",)),
    ("index", ("cogd.index",)),
    ("embed", ("cogd.embed",)),
    ("usage", ("cogd.usage",)),
    ("history", ("cogd.history",)),
    ("memory", ("cogd.memory",)),
    ("retrieve", ("cogd.retrieve",)),
    ("snapshot", ("cogd.snapshot",)),
    ("daemon", ("cogd.daemon",)),
    ("viewer", ("cogd.ui",)),
    ("edges", ("cogd.cli", "cogd.mcp_server", "cogd.hookclient")),
]

MAX_FUNCTION_LINES = 80
# The one exemption from MAX_FUNCTION_LINES: this marker, with a reason, on the def's own lines.
LONG_MARKER = re.compile(r"#\s*long:\s*\S")


# ---------------------------------------------------------------- reading the package

def modules() -> dict[str, Path]:
    """Dotted module name → file, for every ``.py`` file under ``cogd/`` (a package is its ``__init__``)."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(REPO).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _resolve(name: str, known: dict[str, Path]) -> str | None:
    """The longest known module that ``name`` (a module or ``module.attribute``) lies in, or None."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def import_edges(known: dict[str, Path] | None = None) -> list[tuple[str, str, int]]:
    """(importer, imported, line) for every ``import``/``from … import`` of a cogd module.

    Imports inside functions count like module-level ones (a lazy import is still a
    dependency); relative imports are resolved against the importer's package. ``from cogd
    import safepath`` is an import of ``cogd.safepath``; ``from cogd import __version__`` one
    of the package ``cogd``.
    """
    known = known or modules()
    edges = []
    for name, path in known.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")
                    base = base[: len(base) - node.level + 1]
                    source = ".".join(base + ([node.module] if node.module else []))
                else:
                    source = node.module or ""
                # ``from a import b`` imports the submodule a.b when there is one, else a itself
                targets = [f"{source}.{alias.name}" for alias in node.names]
            else:
                continue
            for target in targets:
                imported = _resolve(target, known)
                if imported is not None and imported != name:
                    edges.append((name, imported, node.lineno))
    return edges


def layer_of(module: str) -> int | None:
    """Index in LAYERS of the layer holding ``module`` (longest listed prefix wins), or None."""
    best, best_len = None, -1
    for index, (_, names) in enumerate(LAYERS):
        for listed in names:
            covers = module == listed if listed == "cogd" else module == listed or module.startswith(listed + ".")
            if covers and len(listed) > best_len:
                best, best_len = index, len(listed)
    return best


def cycles(edges: list[tuple[str, str, int]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan 1972), each sorted."""
    graph: dict[str, set[str]] = {}
    for a, b, _ in edges:
        graph.setdefault(a, set()).add(b)
        graph.setdefault(b, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []

    def visit(node: str) -> None:  # recursion depth is bounded by the module count (~80)
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def documented_layers() -> list[tuple[str, tuple[str, ...]]]:
    """The layer list of docs/architecture.md: between the ``layers:begin``/``layers:end`` markers,
    one numbered item per layer, ``N. **name**: `module`, `module` — why``."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    match = re.search(r"<!-- layers:begin -->(.*?)<!-- layers:end -->", text, re.S)
    assert match, "docs/architecture.md has no <!-- layers:begin --> … <!-- layers:end --> list"
    layers = []
    for line in match.group(1).splitlines():
        item = re.match(r"\s*\d+\.\s+\*\*([\w-]+)\*\*:\s*(.*)", line)
        if item:
            head = item.group(2).split(" — ")[0]
            layers.append((item.group(1), tuple(re.findall(r"`(cogd[\w.]*)`", head))))
    return layers


# ---------------------------------------------------------------- import graph

def test_import_graph_has_no_cycle():
    edges = import_edges()
    found = cycles(edges)
    detail = []
    for component in found:
        members = set(component)
        detail.append(" <-> ".join(component) + ":\n" + "\n".join(
            f"    {a} imports {b} (line {line})" for a, b, line in sorted(set(edges)) if a in members and b in members))
    assert not found, "import cycles:\n" + "\n".join(detail)


def test_every_module_has_a_layer():
    missing = sorted(m for m in modules() if layer_of(m) is None)
    assert not missing, f"modules in no layer (add them to LAYERS and docs/architecture.md): {missing}"


def test_no_upward_import():
    upward = sorted({
        f"{a} ({LAYERS[layer_of(a)][0]}) imports {b} ({LAYERS[layer_of(b)][0]}) at line {line}"
        for a, b, line in import_edges()
        if layer_of(a) is not None and layer_of(b) is not None and layer_of(b) > layer_of(a)
    })
    assert not upward, "imports against the layer order:\n" + "\n".join(upward)


def test_documented_layer_order_is_the_checked_one():
    assert documented_layers() == LAYERS


def test_the_graph_reader_sees_lazy_and_relative_imports(tmp_path, monkeypatch):
    """The checks above are only as good as the reader: a lazy import inside a function, a
    relative import and ``from package import submodule`` must all be edges."""
    package = tmp_path / "cogd"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "low.py").write_text("X = 1\n")
    (package / "sub" / "__init__.py").write_text("from .. import low\n")
    (package / "sub" / "high.py").write_text("def f():\n    from cogd.sub import other\n    return other\n")
    (package / "sub" / "other.py").write_text("from .high import f\nimport cogd.low\n")
    monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path)
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", package)
    edges = {(a, b) for a, b, _ in import_edges()}
    assert edges == {("cogd.sub", "cogd.low"), ("cogd.sub.high", "cogd.sub.other"),
                     ("cogd.sub.other", "cogd.sub.high"), ("cogd.sub.other", "cogd.low")}
    assert cycles(import_edges()) == [["cogd.sub.high", "cogd.sub.other"]]


# ---------------------------------------------------------------- function length

def long_functions(limit: int = MAX_FUNCTION_LINES) -> list[str]:
    """``path:line name (N lines)`` for every function over ``limit`` lines (def line to last
    line, decorators not counted) whose signature carries no ``# long: <reason>`` marker."""
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        lines = path.read_text(encoding="utf-8").splitlines()
        for node in ast.walk(ast.parse("\n".join(lines), str(path))):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            length = node.end_lineno - node.lineno + 1
            if length <= limit:
                continue
            signature = lines[node.lineno - 1: max(node.body[0].lineno - 1, node.lineno)]
            if any(LONG_MARKER.search(line) for line in signature):
                continue
            offenders.append(f"{path.relative_to(REPO)}:{node.lineno} {node.name} ({length} lines)")
    return offenders


def test_no_function_over_80_lines():
    offenders = long_functions()
    assert not offenders, (f"functions over {MAX_FUNCTION_LINES} lines (split them into named steps, or "
                           "justify in place with '# long: <reason>' on the def line):\n" + "\n".join(offenders))


def test_long_marker_needs_a_reason(tmp_path, monkeypatch):
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES))
    (tmp_path / "cogd").mkdir()
    (tmp_path / "cogd" / "m.py").write_text(
        f"def bare():  # long:\n{body}\n\ndef kept():  # long: one table, read top to bottom\n{body}")
    monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path)
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", tmp_path / "cogd")
    assert long_functions() == [f"cogd/m.py:1 bare ({MAX_FUNCTION_LINES + 1} lines)"]


# ---------------------------------------------------------------- references stay inside the repository

# Written so that this file does not match itself.
OUTSIDE_REFERENCES = re.compile(
    r"DESIG[N]\.md|\u00a7|\bissues?\s+#?\d+|design\s+card|outside\s+this\s+repository"
    r"|clients\.md|dependencies\.md|shared/[r]eference", re.I)
TEXT_SUFFIXES = {".py", ".md", ".sh", ".toml", ".scm", ".txt", ".cfg", ".ini"}


def test_references_point_inside_the_repository():
    """Code, tests, scripts and docs cite only what a reader of this repository has: no design
    file kept elsewhere, no section signs into it, no issue numbers of a tracker."""
    places = [REPO / "README.md", REPO / "pyproject.toml"]
    for folder in ("cogd", "tests", "scripts", "docs", "hooks", "bin"):
        places += [p for p in sorted((REPO / folder).rglob("*"))
                   if p.is_file() and (p.suffix in TEXT_SUFFIXES or folder == "bin")]
    found = []
    for path in places:
        for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if OUTSIDE_REFERENCES.search(line):
                found.append(f"{path.relative_to(REPO)}:{number}: {line.strip()[:120]}")
    assert not found, "references to things outside the repository:\n" + "\n".join(found)


# ---------------------------------------------------------------- docs cover the interfaces

def daemon_methods(tmp_path: Path) -> set[str]:
    """Every method a running daemon answers: the Service's dispatch table, read from a real
    Service (index and embedder not started), plus the ones the socket server answers itself."""
    from cogd.config import load_config
    from cogd.daemon import server
    from cogd.daemon.service import open_service

    root = tmp_path / "repo"
    (root / ".cogd").mkdir(parents=True)
    (root / ".cogd" / "config.toml").write_text("[embed]\nenabled = false\n[watch]\nenabled = false\n")
    service = open_service(root, load_config(root / ".cogd" / "config.toml"), start_index=False)
    try:
        names = set(service.methods)
    finally:
        service.close()
    # The server answers daemon.shutdown before it reaches the Service (it stops the loop).
    server_source = Path(server.__file__).read_text(encoding="utf-8")
    names |= set(re.findall(r'method == "([a-z_.]+)"', server_source))
    return names


def protocol_sections() -> set[str]:
    """Method names in the headings of docs/protocol.md's "Methods" part (a heading may name several)."""
    text = PROTOCOL.read_text(encoding="utf-8")
    methods_part = text.split("\n## Methods", 1)[1].split("\n## ", 1)[0]
    names = set()
    for heading in re.findall(r"^#{3,4} (.*)$", methods_part, re.M):
        names |= set(re.findall(r"`([a-z_]+(?:\.[a-z_]+)?)`", heading))
    return names


def test_every_daemon_method_has_a_protocol_section(tmp_path):
    methods = daemon_methods(tmp_path)
    assert {"status", "context.prompt", "memory.record", "graph.impact", "daemon.shutdown"} <= methods
    sections = protocol_sections()
    assert not methods - sections, f"daemon methods without a section in docs/protocol.md: {sorted(methods - sections)}"
    assert not sections - methods, f"docs/protocol.md sections for no daemon method: {sorted(sections - methods)}"


@pytest.mark.parametrize("name", ["cogd.rpc.client", "cogd.cli.memory", "cogd.cli_extra", "cogd.memory.api", "cogd.nonexistent"])
def test_layer_of_uses_the_longest_prefix(name):
    expected = {"cogd.rpc.client": "foundation", "cogd.cli.memory": "edges", "cogd.memory.api": "memory"}
    index = layer_of(name)
    assert (LAYERS[index][0] if index is not None else None) == expected.get(name)


@pytest.mark.parametrize("line, outside", [
    # spelled in pieces, so that this file passes the check it tests
    ("see DESIG" "N.md for the picture", True), ("(design \u00a73)", True), ("fixed in iss" "ue 6", True),
    ("as iss" "ue #12 says", True), ("the design " "card says", True), ("kept outside this " "repository", True),
    ("(clients" ".md: 10,000)", True), ("docs/architecture.md, \"Layers\"", False), ("an issue with 3 causes", False),
])
def test_the_reference_check_tells_outside_from_inside(line, outside):
    assert bool(OUTSIDE_REFERENCES.search(line)) is outside
