"""The index's read functions (:mod:`cogd.index.store`) over an index the real indexer built.

The tree is small and known line by line, so every answer is asserted exactly; ``big.py``
holds 600 functions so that id and path lists run past :data:`MAX_PARAMS` and the
connection's host-parameter limit is lowered to that figure: a lookup that did not chunk
would fail with "too many SQL variables".
"""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path

import pytest

from cogd.config import IndexConfig
from cogd.index import store
from cogd.inlist import MAX_PARAMS, chunked
from cogd.index.extract import content_hash
from cogd.index.indexer import Indexer
from cogd.index.resolve import resolve
from conftest import make_repo

SHAPES = '''"""Shapes and their areas."""


class Square:
    """A square."""

    def __init__(self, side):
        self.side = side

    def area(self):
        return self.side * self.side


def total_area(shapes):
    return sum(s.area() for s in shapes)
'''
USE = '''from pkg.shapes import Square, total_area


def main():
    return total_area([Square(2)])
'''
BIG_COUNT = 600
BIG = "".join(f"def f{i}():\n    return {i}\n\n\n" for i in range(BIG_COUNT))
MAX_FILE_BYTES = 20_000  # big.py (17,180 bytes) is indexed, huge.py (24,000) is too large


@pytest.fixture(scope="module")
def index_db(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("store")
    root = make_repo(base / "repo", {"pkg/__init__.py": "", "pkg/shapes.py": SHAPES, "pkg/use.py": USE,
                                     "big.py": BIG, "huge.py": "x = 1\n" * 4000})
    db = base / "index.db"
    indexer = Indexer(root, db, IndexConfig(max_file_bytes=MAX_FILE_BYTES))
    try:
        result = indexer.refresh()
    finally:
        indexer.close()
    assert result.skipped == {"too_large": 1}
    return db


@pytest.fixture
def conn(index_db: Path):
    c = store.connect(index_db, readonly=True)
    # What SQLite builds with by default before 3.32 (999) is above this; lowering the limit to
    # the chunk size makes any unchunked IN-list of the 600 big.py ids fail.
    c.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, MAX_PARAMS)
    yield c
    c.close()


BIG_IDS = [f"big.py::f{i}" for i in range(BIG_COUNT)]
SQUARE_AREA = ("pkg/shapes.py::Square.area", "method", "", "pkg/shapes.py", "area", "Square.area", 10, 11,
               "def area(self)", "", "pkg/shapes.py::Square")


def test_chunked_cuts_in_order_and_refuses_a_bad_size():
    assert list(chunked(range(7), 3)) == [[0, 1, 2], [3, 4, 5], [6]]
    assert list(chunked([], 3)) == []
    assert [len(c) for c in chunked(BIG_IDS)] == [500, 100]
    with pytest.raises(ValueError, match="at least 1"):
        list(chunked([1], 0))


def test_the_lowered_limit_refuses_an_unchunked_list(conn):
    """The premise of the chunking tests below: 600 parameters in one statement fail here."""
    with pytest.raises(sqlite3.OperationalError, match="too many SQL variables"):
        conn.execute(f"SELECT id FROM entities WHERE id IN ({','.join('?' * BIG_COUNT)})", BIG_IDS).fetchall()


def test_entities_by_ids_over_600_ids(conn):
    rows = store.entities_by_ids(conn, [*BIG_IDS, "pkg/shapes.py::Square.area", "no/such.py::x", BIG_IDS[0]])
    assert len(rows) == BIG_COUNT + 1
    assert rows["pkg/shapes.py::Square.area"] == SQUARE_AREA
    assert rows["big.py::f599"] == ("big.py::f599", "function", "", "big.py", "f599", "f599", 2397, 2398,
                                    "def f599()", "", "big.py")
    assert "no/such.py::x" not in rows
    assert store.entities_by_ids(conn, ["pkg/use.py::main"], ("hash", "parent_id")) == {
        "pkg/use.py::main": ("7654140c79bc46ab", "pkg/use.py")}
    assert store.entities_by_ids(conn, []) == {}
    with pytest.raises(ValueError, match="not entity columns"):
        store.entities_by_ids(conn, ["pkg/use.py::main"], ("id; DROP TABLE entities",))


def test_existing_ids_and_hashes(conn):
    assert store.existing_ids(conn, [*BIG_IDS, "gone.py::f"]) == set(BIG_IDS)
    hashes = store.entity_hashes(conn, ["pkg/shapes.py::Square.area", "pkg/shapes.py", "gone.py::f"])
    # An entity's hash is its own text's; a file entity's is the file's bytes'.
    assert hashes == {"pkg/shapes.py::Square.area": content_hash(b"def area(self):\n        return self.side * self.side"),
                      "pkg/shapes.py": content_hash(SHAPES.encode())}
    assert store.entity_exists(conn, "pkg/shapes.py::Square") is True
    assert store.entity_exists(conn, "pkg/shapes.py::Circle") is False


def test_entities_in_paths(conn):
    assert store.entities_in_paths(conn, ["pkg/shapes.py", "pkg/use.py", "nowhere.py"], ("id", "start_line")) == [
        ("pkg/shapes.py::Square", 4), ("pkg/shapes.py::Square.__init__", 7), ("pkg/shapes.py::Square.area", 10),
        ("pkg/shapes.py::total_area", 14), ("pkg/use.py::main", 4)]
    assert store.entities_in_paths(conn, ["pkg/shapes.py"], ("id",), kinds=("method",)) == [
        ("pkg/shapes.py::Square.__init__",), ("pkg/shapes.py::Square.area",)]
    assert store.entities_in_paths(conn, ["pkg/shapes.py"], ("id",), kinds=("file",)) == [("pkg/shapes.py",)]
    assert store.entities_in_paths(conn, ["pkg/shapes.py"], kinds=()) == []
    assert store.entities_in_paths(conn, ["pkg/shapes.py"], kinds=("method",))[1] == SQUARE_AREA
    # 600 paths (one real) in one call: chunked, the real one's 600 functions in file order.
    paths = ["big.py", *(f"missing{i}.py" for i in range(599))]
    assert [r[0] for r in store.entities_in_paths(conn, paths, ("id",))] == BIG_IDS


def test_names_members_children_and_spans(conn):
    assert sorted(store.entities_named(conn, ["area", "main", "f7", "nothing"])) == [
        ("big.py::f7", "function", "big.py", "big.py", "f7"),
        ("pkg/shapes.py::Square.area", "method", "pkg/shapes.py", "pkg/shapes.py::Square", "area"),
        ("pkg/use.py::main", "function", "pkg/use.py", "pkg/use.py", "main")]
    assert len(store.entities_named(conn, [f"f{i}" for i in range(BIG_COUNT)])) == BIG_COUNT
    assert store.members(conn, "pkg/shapes.py::Square") == [
        ("pkg/shapes.py::Square.area", "area"), ("pkg/shapes.py::Square.__init__", "__init__")]
    assert store.child_names(conn, ["pkg/shapes.py", "big.py", "pkg/__init__.py"], 3) == {
        "pkg/shapes.py": ["Square", "total_area"], "big.py": ["f0", "f1", "f2"]}
    assert store.definitions_at(conn, "pkg/shapes.py", 11, 11, ("class", "function", "method")) == [
        ("pkg/shapes.py::Square.area", 10, 11), ("pkg/shapes.py::Square", 4, 11)]
    assert store.definitions_at(conn, "pkg/shapes.py", 12, 13, ("class", "function", "method")) == []


def test_whole_index_scans(conn):
    paths = store.entity_paths(conn)
    assert len(paths) == BIG_COUNT + 1 + 9  # big.py and its functions, then the 9 entities of the other files
    assert paths[:2] == [("big.py", "big.py"), ("big.py::f0", "big.py")]
    assert paths[-1] == ("pkg/use.py::main", "pkg/use.py")
    states = store.entity_states(conn)
    assert states["pkg/use.py::main"] == ("7654140c79bc46ab", "function", "pkg/use.py")
    assert len(states) == len(paths)
    # one path string per file and interned kinds: the embedding pass holds this map for every entity
    by_path = {}
    for _hash, kind, path in states.values():
        assert by_path.setdefault(path, path) is path and kind is sys.intern(kind)
    assert len(by_path) == len({p for _i, p in paths}) < len(states)
    rows = store.embedding_rows(conn, [*BIG_IDS, "pkg/shapes.py::Square.area"])
    assert len(rows) == BIG_COUNT + 1
    assert [r for r in rows if r[0] == "pkg/shapes.py::Square.area"] == [
        ("pkg/shapes.py::Square.area", "method", "Square.area", "def area(self)", "", "pkg/shapes.py",
         "930104fc79a18d45", "def area(self):\n        return self.side * self.side")]


def test_edges(conn):
    calls_and_contains = store.edges_touching(conn, ["pkg/shapes.py::total_area"], ("calls", "contains"))
    assert sorted(calls_and_contains) == [
        ("pkg/shapes.py", "pkg/shapes.py::total_area", "contains", ""),
        ("pkg/shapes.py::total_area", "pkg/shapes.py::Square.area", "calls", "global"),
        ("pkg/use.py::main", "pkg/shapes.py::total_area", "calls", "import")]
    # 600 seeds: chunked in 249s (each id bound twice), every contains edge into big.py once.
    many = store.edges_touching(conn, BIG_IDS, ("contains",))
    assert len(many) == BIG_COUNT and len(set(many)) == BIG_COUNT
    assert store.edges_touching(conn, [], ("calls",)) == []
    edges = list(store.all_edges(conn))
    assert len(edges) == 609
    assert ("pkg/use.py", "pkg/shapes.py", "imports") in edges

    columns = ("id", "kind", "start_line")
    assert store.call_neighbours(conn, "pkg/shapes.py::total_area", "in", 10, columns) == (
        [{"id": "pkg/use.py::main", "kind": "function", "start_line": 4, "resolution": "import"}], 1)
    assert store.call_neighbours(conn, "pkg/use.py::main", "out", 1, columns) == (
        [{"id": "pkg/shapes.py::Square", "kind": "class", "start_line": 4, "resolution": "import"}], 2)
    with pytest.raises(ValueError, match="direction"):
        store.call_neighbours(conn, "pkg/use.py::main", "up", 1, columns)
    assert store.caller_ids(conn, "pkg/shapes.py::Square.area") == ["pkg/shapes.py::total_area"]
    assert store.caller_ids(conn, "pkg/use.py::main") == []


def test_entity_detail(conn):
    detail = store.entity_detail(conn, "pkg/shapes.py::Square.area")
    assert detail == {
        "entity": {"id": "pkg/shapes.py::Square.area", "kind": "method", "subkind": "", "path": "pkg/shapes.py",
                   "name": "area", "qualname": "Square.area", "start_line": 10, "end_line": 11,
                   "language": "python", "signature": "def area(self)", "doc": "", "hash": "930104fc79a18d45",
                   "parent_id": "pkg/shapes.py::Square"},
        "edges": {"out": [], "in": [
            {"id": "pkg/shapes.py::total_area", "kind": "calls", "resolution": "global"},
            {"id": "pkg/shapes.py::Square", "kind": "contains", "resolution": ""}]},
        "body": "def area(self):\n        return self.side * self.side",
    }
    assert store.entity_detail(conn, "pkg/shapes.py::Circle") is None


def test_search_fts(conn):
    weights = (2.0, 8.0, 3.0, 2.0, 1.0)
    rows = store.search_fts(conn, '"area"', weights, limit=10)
    # A name match outweighs a body match; the file entities (path words) come between.
    assert [r[0] for r in rows] == ["pkg/shapes.py::Square.area", "pkg/shapes.py::total_area", "pkg/shapes.py",
                                    "pkg/use.py::main", "pkg/shapes.py::Square", "pkg/use.py"]
    assert rows[0][:11] == SQUARE_AREA
    scores = [r[11] for r in rows]
    assert scores == sorted(scores, reverse=True) and scores[-1] > 0
    assert [r[0] for r in store.search_fts(conn, '"area"', weights, limit=10, kinds=("function",))] == [
        "pkg/shapes.py::total_area", "pkg/use.py::main"]
    assert [r[0] for r in store.search_fts(conn, '"area"', weights, limit=2)] == [
        "pkg/shapes.py::Square.area", "pkg/shapes.py::total_area"]
    with pytest.raises(ValueError, match="five column weights"):
        store.search_fts(conn, '"area"', (1.0,), limit=1)


def test_files(conn):
    assert store.file_summaries(conn, ["pkg/shapes.py", "pkg/use.py", "pkg/shapes.py::Square", "gone.py"]) == {
        "pkg/shapes.py": store.FileSummary("pkg/shapes.py", 15, "Shapes and their areas."),
        "pkg/use.py": store.FileSummary("pkg/use.py", 5, "")}
    languages = store.file_languages(conn)
    assert languages == {p: "python" for p in ("big.py", "huge.py", "pkg/__init__.py", "pkg/shapes.py", "pkg/use.py")}
    assert store.file_languages(conn, ["pkg/use.py", "gone.py"]) == {"pkg/use.py": "python"}
    assert store.indexed_paths(conn, ["huge.py", *(f"gone{i}.py" for i in range(700))]) == {"huge.py"}
    assert store.has_files(conn) is True
    assert store.holds_index(conn) is True
    assert store.skipped_files(conn) == {"too_large": 1}
    assert store.known_files(conn)["huge.py"]["size"] == 24_000
    assert store.breakdown(conn) == {
        "entities": [{"language": "python", "kind": "class", "n": 1}, {"language": "python", "kind": "file", "n": 5},
                     {"language": "python", "kind": "function", "n": BIG_COUNT + 2},
                     {"language": "python", "kind": "method", "n": 2}],
        "edges": [{"kind": "calls", "resolution": "global", "n": 1}, {"kind": "calls", "resolution": "import", "n": 2},
                  {"kind": "contains", "resolution": "", "n": BIG_COUNT + 5},
                  {"kind": "imports", "resolution": "file", "n": 1}],
        "files": [{"language": "python", "status": "ok", "n": 4}, {"language": "python", "status": "too_large", "n": 1}],
    }


def test_an_empty_database_holds_no_index(tmp_path):
    db = tmp_path / "other.db"
    sqlite3.connect(db).execute("CREATE TABLE t (x)").connection.close()
    conn = sqlite3.connect(db)
    try:
        assert store.holds_index(conn) is False
    finally:
        conn.close()


def test_references(conn):
    assert store.refs_of(conn, "pkg/use.py") == [
        ("pkg/use.py::main", "calls", "total_area", "", ""), ("pkg/use.py::main", "calls", "Square", "", ""),
        ("pkg/use.py", "imports", "pkg.shapes", "Square", ""), ("pkg/use.py", "imports", "pkg.shapes", "total_area", "")]
    assert store.referenced_names(conn) == {"sum", "area", "total_area", "Square"}
    assert store.paths_referencing(conn, ["area", "Square", "f1"]) == {"pkg/shapes.py", "pkg/use.py"}


def test_reference_edges_are_rewritten_through_store(index_db, tmp_path):
    """delete_reference_edges keeps ``contains``; resolve() writes the same edges back."""
    copy = tmp_path / "index.db"
    source = sqlite3.connect(index_db)
    target = sqlite3.connect(copy)
    source.backup(target)
    source.close()
    try:
        before = sorted(store.all_edges(target))
        store.delete_reference_edges(target, "pkg/use.py")
        assert sorted(e for e in store.all_edges(target) if e[0].startswith("pkg/use.py")) == [
            ("pkg/use.py", "pkg/use.py::main", "contains")]
        store.delete_reference_edges(target)
        assert {e[2] for e in store.all_edges(target)} == {"contains"}
        assert resolve(target, str(index_db.parent / "repo")) == 4
        assert sorted(store.all_edges(target)) == before
    finally:
        target.close()
