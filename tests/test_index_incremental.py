"""A save re-indexes in place and leaves the index a full rebuild would make, row for row.

Real tree-sitter on real code: the standard library's ``json``, ``email`` and
``collections`` packages, saved one file at a time (``Indexer.refresh(paths=[file])``,
as the daemon's watcher does) through edits that exercise every part of the in-place
rewrite: a function appended, a method and a function inserted before existing ones
(stored order must stay file order), a docstring removed (FTS text only), a class
renamed that other files call and inherit from (their references resolve anew), a class
deleted, a base class that was external defined, lines shifted above everything, a file
added and a file removed. After each
group of saves the index is compared with one built from scratch on the same tree:
entities (and their order within each file), every edge, the unresolved references in
stored order, the FTS rows joined to their entities, and the files.
"""

from __future__ import annotations

import shutil
import sqlite3
import threading
from pathlib import Path

import pytest

from conftest import STDLIB, make_repo
from cogd.index.indexer import Indexer
from test_index_parallel import content

PACKAGES = ("json", "email", "collections")


def edit(root: Path, rel: str, old: str, new: str, count: int = 1) -> None:
    path = root / rel
    text = path.read_text(encoding="utf-8")
    assert text.count(old) >= count, f"{old!r} not in {rel}"
    path.write_text(text.replace(old, new, count), encoding="utf-8")


def rebuilt(root: Path, db: Path) -> dict[str, list[tuple]]:
    """The content of a fresh full index of ``root`` (with each file's entity order)."""
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    full = Indexer(root, db)
    try:
        full.refresh()
        return with_order(full)
    finally:
        full.close()


def with_order(indexer: Indexer) -> dict[str, list[tuple]]:
    found = content(indexer.conn)
    found["entity_order"] = [tuple(r) for r in indexer.conn.execute("SELECT path, id FROM entities ORDER BY path, rowid")]
    return found


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """``(root, incremental indexer, scratch dir)``: the packages indexed once, before any save."""
    scratch = tmp_path_factory.mktemp("incremental")
    root = scratch / "repo"
    root.mkdir()
    for name in PACKAGES:
        shutil.copytree(STDLIB / name, root / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    make_repo(root)
    indexer = Indexer(root, scratch / "incremental.db")
    indexer.refresh()
    yield root, indexer, scratch
    indexer.close()


def save(indexer: Indexer, rel: str, parsed: int = 1) -> None:
    result = indexer.refresh(paths=[rel])
    assert result.parsed == parsed, (rel, result.as_dict())


def assert_same(indexer: Indexer, root: Path, scratch: Path) -> None:
    expected = rebuilt(root, scratch / "full.db")
    actual = with_order(indexer)
    for table in expected:
        assert actual[table] == expected[table], table


def test_saves_that_keep_the_file_list_equal_a_full_rebuild(saved):
    root, indexer, scratch = saved
    # appended at the end (the common save): every stored row but the new one stays
    edit(root, "collections/__init__.py", "\n\ndef namedtuple(", "\n\ndef _appended(x):\n    return deque(x)\n\n\n"
         "def namedtuple(")
    (root / "collections/__init__.py").write_text(
        (root / "collections/__init__.py").read_text(encoding="utf-8") + "\n\ndef _last(d):\n    return OrderedDict(d)\n",
        encoding="utf-8")
    save(indexer, "collections/__init__.py")
    # a method before the existing ones and a function before the class: file order changes
    edit(root, "json/decoder.py", "class JSONDecoder(object):\n",
         "def _early(s):\n    return JSONObject(s)\n\n\nclass JSONDecoder(object):\n"
         "    def first(self, s):\n        return self.raw_decode(s)\n\n")
    save(indexer, "json/decoder.py")
    # the docstring only: the FTS row and the doc column change, nothing else
    edit(root, "json/scanner.py", '"""JSON token scanner\n"""', "")
    save(indexer, "json/scanner.py")
    # lines shifted above every entity of the file
    edit(root, "email/utils.py", "import os\n", "import os\n\n\n\n# shifted\n")
    save(indexer, "email/utils.py")
    assert_same(indexer, root, scratch)


def test_renaming_and_removing_definitions_that_other_files_use(saved):
    root, indexer, scratch = saved
    # other files raise errors.HeaderParseError and subclass it: their references resolve anew
    edit(root, "email/errors.py", "class HeaderParseError(MessageParseError):",
         "class HeaderParsingError(MessageParseError):")
    save(indexer, "email/errors.py")
    edit(root, "email/errors.py", "class CharsetError(MessageError):\n", "class _Gone:\n")
    save(indexer, "email/errors.py")
    # a base class another file names but nothing defined (an external edge) gets a definition
    path = root / "email/charset.py"
    path.write_text(path.read_text(encoding="utf-8") + "\n\nclass TypeError(Exception):\n    pass\n", encoding="utf-8")
    save(indexer, "email/charset.py")
    # a name other files call, defined a second time (a duplicate id) and then the first removed
    edit(root, "email/utils.py", "\ndef formataddr(", "\ndef formataddr(pair):\n    return pair\n\n\ndef formataddr(")
    save(indexer, "email/utils.py")
    assert_same(indexer, root, scratch)


def test_a_file_added_and_a_file_removed(saved):
    root, indexer, scratch = saved
    (root / "json/extra.py").write_text(
        "from json.decoder import JSONDecoder\n\n\nclass Strict(JSONDecoder):\n    def decode(self, s):\n"
        "        return super().decode(s)\n", encoding="utf-8")
    save(indexer, "json/extra.py")
    (root / "email/base64mime.py").unlink()
    save(indexer, "email/base64mime.py", parsed=0)
    assert_same(indexer, root, scratch)


def test_a_first_build_with_its_indexes_deferred_stores_what_a_build_without_does(tmp_path, monkeypatch):
    # The first build of a tree drops the secondary indexes and builds them at the end
    # (store.begin_bulk / end_bulk), those the reference resolution only reads in a thread
    # while it runs (store.build_indexes): same rows, same edges, and every index back
    # afterwards, also when that thread's build fails (end_bulk then builds them all).
    from cogd.index import indexer as indexer_module, store

    root = tmp_path / "repo"
    root.mkdir()
    for name in ("json", "collections"):
        shutil.copytree(STDLIB / name, root / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    make_repo(root)
    real_build = store.build_indexes
    built_beside: list[tuple] = []

    def spied(path, names):
        built_beside.append(tuple(names))
        real_build(path, names)

    def locked(path, names):
        raise sqlite3.OperationalError("database is locked")

    # The deferred build's resolution takes the entities and references as its writer kept them
    # (store.ResolutionTables), reading neither table back; the kept build reads both.
    read_back: list[str] = []
    for reader in ("all_refs", "entity_table"):
        real = getattr(store, reader)
        monkeypatch.setattr(store, reader, lambda conn, _real=real, _name=reader: read_back.append(_name) or _real(conn))
    found = {}
    for name, threshold, build in (("deferred", 1, spied), ("kept", 1 << 30, spied), ("beside failed", 1, locked)):
        monkeypatch.setattr(indexer_module, "BULK_MIN_FILES", threshold)
        monkeypatch.setattr(store, "build_indexes", build)
        read_back.clear()
        built = Indexer(root, tmp_path / f"{name.replace(' ', '-')}.db")
        try:
            built.refresh()
            found[name] = with_order(built)
            indexes = {r[0] for r in built.conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
            assert set(store.SECONDARY_INDEXES) <= indexes, name
            assert sorted(read_back) == ([] if threshold == 1 else ["all_refs", "entity_table"]), name
        finally:
            built.close()
    assert built_beside == [store.RESOLUTION_SAFE_INDEXES]  # the deferred build only: the kept one needs none
    assert found["deferred"] == found["kept"] == found["beside failed"]
    assert len(found["kept"]["entities"]) > 200 and found["kept"]["edges"]


def test_a_first_build_keeps_a_small_cache_its_sorts_in_memory_and_lean_resolution_tables(tmp_path, monkeypatch):
    # What a first build holds in the writer's process (docs/architecture.md, "Memory"): SQLite's
    # default page cache on the writer and on the index build beside it, with their sorts in
    # memory (temp_store=MEMORY: no temporary file outside .cogd/); the kept resolution tables
    # with one string object per distinct name, kind and qualifier; and those tables consumed by
    # the resolution (emptied when it ends), the edges the same as a build that reads them back.
    from cogd.index import indexer as indexer_module, resolve, store

    root = tmp_path / "repo"
    root.mkdir()
    for name in ("json", "collections", "email"):
        shutil.copytree(STDLIB / name, root / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    make_repo(root)
    kept: list[store.ResolutionTables] = []

    class Kept(store.ResolutionTables):
        __slots__ = ()

        def __init__(self):
            super().__init__()
            kept.append(self)

    seen: dict[str, object] = {}
    real_preload = resolve.Resolver.preload

    def preload(self, tables=None):
        if tables is not None:  # what the writer kept, before the resolution consumes it
            refs = [ref for rows in tables.refs.values() for ref in rows]
            seen["refs"] = len(refs)
            for field, at in (("kind", 1), ("name", 2), ("qualifier", 3)):
                seen[field] = (len({ref[at] for ref in refs}), len({id(ref[at]) for ref in refs}))
            names = {ref[2]: ref[2] for ref in refs}
            seen["entity names shared"] = all(names.get(e[4], e[4]) is e[4] for e in tables.entities)
            seen["writer pragmas"] = (self.conn.execute("PRAGMA cache_size").fetchone()[0],
                                      self.conn.execute("PRAGMA temp_store").fetchone()[0])
        return real_preload(self, tables)

    class Recorded(sqlite3.Connection):  # the index build's connection: its settings when it closes
        def close(self):
            seen.setdefault("build pragmas", []).append(
                (self.execute("PRAGMA cache_size").fetchone()[0], self.execute("PRAGMA temp_store").fetchone()[0]))
            super().close()

    class Sqlite:  # store's sqlite3 module: the index build's thread opens a Recorded connection
        def __getattr__(self, name):
            return getattr(sqlite3, name)

        @staticmethod
        def connect(*args, **kwargs):
            if threading.current_thread().name == "cogd-index-build":
                kwargs["factory"] = Recorded
            return sqlite3.connect(*args, **kwargs)

    monkeypatch.setattr(store, "ResolutionTables", Kept)
    monkeypatch.setattr(resolve.Resolver, "preload", preload)
    monkeypatch.setattr(store, "sqlite3", Sqlite())
    found = {}
    for name, threshold in (("deferred", 1), ("kept", 1 << 30)):
        monkeypatch.setattr(indexer_module, "BULK_MIN_FILES", threshold)
        built = Indexer(root, tmp_path / f"{name}.db")
        try:
            built.refresh()
            found[name] = with_order(built)
        finally:
            built.close()
    assert len(kept) == 1 and kept[0].valid
    assert kept[0].entities == [] and kept[0].refs == {}  # consumed by the resolution
    assert seen["refs"] > 2000
    for field in ("kind", "name", "qualifier"):
        distinct, objects = seen[field]
        assert distinct == objects, field  # one object per distinct value
    assert seen["kind"][0] == 3 and seen["name"][0] > 500
    assert seen["entity names shared"]
    assert seen["writer pragmas"] == (-2000, 2)  # SQLite's default cache; temp_store 2 = MEMORY
    assert seen["build pragmas"] == [(-2000, 2)]
    assert found["deferred"] == found["kept"]
    assert found["kept"]["edges"]
