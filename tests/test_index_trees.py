"""Saves: incremental re-parses (cogd.index.trees) give a fresh parse's rows; the kept file list follows other writers."""

from __future__ import annotations

import dataclasses
import sqlite3

from conftest import STDLIB, make_repo
from cogd.config import IndexConfig
from cogd.daemon.worker import parse_pool
from cogd.index.extract import extract
from cogd.index.indexer import Indexer, forget_trees_job
from cogd.index.languages import grammar
from cogd.index.trees import TreeCache, common_prefix, common_suffix, point_at
from test_index_parallel import _content

SOURCE = (STDLIB / "collections" / "__init__.py").read_bytes()


def edits(source: bytes) -> list[bytes]:
    """A chain of saves of ``source``: append, insert in the middle, delete a block, break the
    syntax, mend it, edit a docstring, change the first byte, empty the file, restore it."""
    middle = source.index(b"\nclass ", len(source) // 2)
    appended = source + b"\n\ndef _probe():\n    return 1\n"
    inserted = appended[:middle] + b"\ndef _inserted(a, b):\n    '''Doc.'''\n    return a + b\n" + appended[middle:]
    cut_at = inserted.index(b"\ndef ", middle + 200)
    deleted = inserted[:middle] + inserted[cut_at:]
    broken = deleted.replace(b"def _probe():", b"def _probe(:", 1)
    doc = broken.replace(b"def _probe(:", b"def _probe():", 1).replace(b"'''Doc.'''", b"'''Other doc, longer.'''")
    return [appended, inserted, deleted, broken, doc, b"#" + doc[1:], b"", source]


def _row(item) -> tuple:
    return dataclasses.astuple(item) if dataclasses.is_dataclass(item) else tuple(item)


def entity_rows(parsed) -> tuple[list, list, list]:
    """Every entity, edge and reference of a ParsedFile as plain tuples."""
    return [_row(e) for e in parsed.entities], [_row(e) for e in parsed.edges], [_row(r) for r in parsed.references]


def test_edit_span_helpers_find_the_changed_range():
    assert common_prefix(b"abcdef", b"abcxef") == 3
    assert common_suffix(b"abcdef", b"abcxef", 3) == 2
    assert common_prefix(b"abc", b"abcd") == 3 and common_suffix(b"abc", b"abcd", 0) == 0
    # An insertion of a repeated byte: the prefix and suffix must not overlap.
    assert common_prefix(b"aa", b"aaa") == 2 and common_suffix(b"aa", b"aaa", 0) == 0
    assert point_at(b"ab\ncd\nef", 0) == (0, 0)
    assert point_at(b"ab\ncd\nef", 4) == (1, 1)
    assert point_at(b"ab\ncd\nef", 6) == (2, 0)


def test_a_chain_of_incremental_parses_extracts_what_fresh_parses_do():
    parser = grammar("python").parser
    cache = TreeCache()
    cache.parse("collections/__init__.py", parser, SOURCE)
    for step, source in enumerate(edits(SOURCE)):
        tree = cache.parse("collections/__init__.py", parser, source)
        fresh = parser.parse(source)
        assert str(tree.root_node) == str(fresh.root_node), step
        incremental = extract("collections/__init__.py", source, "python", tree=tree)
        assert entity_rows(incremental) == entity_rows(extract("collections/__init__.py", source, "python")), step


def test_the_cache_keeps_only_its_capacity_and_a_tree_only_for_its_parser():
    parser = grammar("python").parser
    cache = TreeCache(capacity=2)
    for name in ("a.py", "b.py", "c.py"):
        cache.parse(name, parser, b"x = 1\n")
    assert list(cache._trees) == ["b.py", "c.py"]
    other = grammar("javascript").parser
    tree = cache.parse("c.py", other, b"let x = 1;\n")
    assert tree.root_node.type == "program"  # parsed afresh with the other language's parser
    cache.forget("c.py")
    assert list(cache._trees) == ["b.py"]


def test_saves_reparsed_incrementally_leave_the_index_a_fresh_build_makes(tmp_path):
    rel = "collections/__init__.py"
    root = make_repo(tmp_path / "repo", {rel: SOURCE.decode(),
                                          "collections/abc.py": (STDLIB / "collections" / "abc.py").read_text()})
    ix = Indexer(root, tmp_path / "index.db")
    try:
        ix.refresh()
        for source in edits(SOURCE):
            (root / rel).write_bytes(source)
            assert ix.refresh(paths=[rel]).parsed == 1
            fresh = Indexer(root, tmp_path / f"fresh-{len(source)}.db")
            try:
                fresh.refresh()
            finally:
                fresh.close()
            saved = sqlite3.connect(tmp_path / "index.db")
            built = sqlite3.connect(tmp_path / f"fresh-{len(source)}.db")
            try:
                ix.conn.commit()
                assert _content(saved) == _content(built), len(source)
            finally:
                saved.close()
                built.close()
        assert rel in ix.trees  # the saves kept its tree (and bytes) for the next one
        (root / rel).unlink()
        assert ix.refresh(paths=[rel]).removed == 1
        assert rel not in ix.trees  # a deleted file's bytes are not kept after its rows are gone
    finally:
        ix.close()


def test_a_save_sees_files_another_writer_added_since_the_last_save(tmp_path):
    root = make_repo(tmp_path / "repo", {"a.py": "def main():\n    return helper()\n"})
    db = tmp_path / "index.db"
    ix = Indexer(root, db)
    try:
        ix.refresh()
        (root / "a.py").write_text("def main():\n    return helper() + 1\n")
        ix.refresh(paths=["a.py"])  # keeps the file list: a.py only
        (root / "b.py").write_text("def helper():\n    return 1\n")
        other = Indexer(root, db)  # another connection adds b.py
        try:
            assert other.refresh(paths=["b.py"]).parsed == 1
        finally:
            other.close()
        (root / "a.py").write_text("def main():\n    return helper() + 2\n")
        assert ix.refresh(paths=["a.py"]).parsed == 1
        assert "b.py" in ix._files()
        calls = ix.conn.execute("SELECT src, dst FROM edges WHERE kind = 'calls'").fetchall()
        assert [tuple(row) for row in calls] == [("a.py::main", "b.py::helper")]
    finally:
        ix.close()


def _lane_holds(pool, path: str) -> bool:
    """Whether the pool's save lane process holds the tree of ``path`` (asked of that process;
    the probe drops it, so it ends a test's use of the lane)."""
    return pool.saves._pool.apply_async(forget_trees_job, ([path],)).get(timeout=30) == 1


def test_the_daemons_saves_reparse_in_its_save_lane_and_leave_a_fresh_builds_index(tmp_path):
    rel = "collections/__init__.py"
    root = make_repo(tmp_path / "repo", {rel: SOURCE.decode(), "collections/abc.py": (STDLIB / "collections" / "abc.py").read_text(),
                                          "gone.py": "def gone():\n    return 1\n"})
    pool = parse_pool(root, IndexConfig())
    ix = Indexer(root, tmp_path / "index.db", pool=pool)
    try:
        ix.refresh()
        assert pool.saves is not None and pool.saves._pool is not None  # started with the pool
        for source in edits(SOURCE)[:4]:
            (root / rel).write_bytes(source)
            assert ix.refresh(paths=[rel]).parsed == 1
        fresh = Indexer(root, tmp_path / "fresh.db")
        try:
            fresh.refresh()
        finally:
            fresh.close()
        ix.conn.commit()
        saved, built = sqlite3.connect(tmp_path / "index.db"), sqlite3.connect(tmp_path / "fresh.db")
        try:
            assert _content(saved) == _content(built)
        finally:
            saved.close()
            built.close()
        assert rel not in ix.trees  # parsed in the lane, not in this process
        (root / "gone.py").write_text("def gone():\n    return 2\n")
        assert ix.refresh(paths=["gone.py"]).parsed == 1
        (root / "gone.py").unlink()
        assert ix.refresh(paths=["gone.py"]).removed == 1
        assert not _lane_holds(pool, "gone.py")  # a deleted file's bytes left the lane with its rows
        assert _lane_holds(pool, rel)  # the saved file's tree is there, for its next save
    finally:
        ix.close()
        pool.close()


def test_a_save_that_runs_out_of_time_in_the_save_lane_is_killed_there(tmp_path):
    # Nested brackets: the tags query takes minutes on this and cannot be cancelled, and the
    # parse has no deadline (parse_timeout_ms 0), so only the kill of the lane's process ends it.
    root = make_repo(tmp_path / "repo", {"a.py": "def a():\n    return 1\n", "deep.py": "x = 1\n"})
    config = IndexConfig(parse_timeout_ms=0)
    pool = parse_pool(root, config)
    ix = Indexer(root, tmp_path / "index.db", config, pool=pool)
    try:
        ix.refresh()
        (root / "deep.py").write_bytes(b"x = [\n" + b"[\n" * 200_000)
        result = ix.refresh(paths=["deep.py"])
        assert result.skipped == {"timeout": 1}
        assert (pool.saves.restarts, pool.restarts) == (1, 0)
        (root / "a.py").write_text("def a():\n    return 2\n\n\ndef b():\n    return a()\n")
        assert ix.refresh(paths=["a.py"]).parsed == 1  # the lane is started again for the next save
        ids = [row[0] for row in ix.conn.execute("SELECT id FROM entities WHERE path = 'a.py' ORDER BY id")]
        assert ids == ["a.py", "a.py::a", "a.py::b"]
    finally:
        ix.close()
        pool.close()
