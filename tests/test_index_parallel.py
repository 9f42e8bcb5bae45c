"""The parallel index (parse pool, batched writes) stores exactly what the serial one does.

Real tree-sitter on real code: packages of the running interpreter's standard
library plus two of its large modules (over the size above which a parse runs
under a deadline), indexed once in this thread and once through a pool of two
parser processes, then compared row by row: entities, edges, unresolved
references, FTS5 rows (joined to their entity by rowid) and files. And the
pool's kill-on-timeout guarantee with several files in flight.

The same index is also pinned: a digest of every table, rowids included, is kept in
``tests/fixtures/index_digests.json`` per interpreter and grammar version, so a change to
extraction, resolution or the writes that alters any stored row fails here. A deliberate
change of the index writes the new digest with ``COGD_WRITE_INDEX_DIGEST=1`` (then review
the diff of the rows, not only of the digest).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import platform
import shutil
import sqlite3
from pathlib import Path

import pytest

from conftest import STDLIB, make_repo
from cogd.index import languages
from cogd.index.indexer import (GUARDED_PARSE_BYTES, Indexer, ParseLimits, parse_job, parse_rows_job, timeout_result,
                                timeout_rows)
from cogd.index.parsepool import ParsePool

PACKAGES = ("json", "email", "http", "logging")
DIGESTS = Path(__file__).parent / "fixtures" / "index_digests.json"
# The pinned slice: more kinds of code (async, XML, tests with their helpers, import machinery).
PINNED_PACKAGES = (*PACKAGES, "asyncio", "importlib", "unittest", "urllib", "xml", "concurrent", "idlelib", "multiprocessing")
LARGE_MODULES = ("_pydecimal.py", "typing.py")  # each over GUARDED_PARSE_BYTES


def content(conn: sqlite3.Connection) -> dict[str, list[tuple]]:
    """Everything an index holds that a reader can see, in a canonical order (no rowids, no times)."""
    reader = sqlite3.connect(conn.execute("PRAGMA database_list").fetchone()[2])  # plain tuples, committed rows
    try:
        return _content(reader)
    finally:
        reader.close()


def _content(conn: sqlite3.Connection) -> dict[str, list[tuple]]:
    return {
        "entities": sorted(conn.execute(
            "SELECT id, kind, subkind, path, name, qualname, start_line, end_line, language, signature, doc, "
            "hash, parent_id FROM entities")),
        "edges": sorted(conn.execute("SELECT src, dst, kind, path, resolution FROM edges")),
        "refs": list(conn.execute(
            "SELECT path, src, kind, name, qualifier, alias, line FROM refs ORDER BY path, rowid")),
        "fts": sorted(conn.execute(
            "SELECT e.id, f.path, f.name, f.signature, f.doc, f.body FROM entities_fts f "
            "JOIN entities e ON e.rowid = f.rowid")),
        "fts_rows": list(conn.execute("SELECT count(*) FROM entities_fts")),
        "files": sorted(conn.execute("SELECT path, language, hash, size, status FROM files")),
    }


def stdlib_slice(tmp_path_factory, name: str, packages: tuple[str, ...]) -> Path:
    """A git repository holding copies of standard-library ``packages`` and the LARGE_MODULES."""
    root = tmp_path_factory.mktemp(name) / "repo"
    root.mkdir()
    for package in packages:
        shutil.copytree(STDLIB / package, root / package, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for module in LARGE_MODULES:
        assert (STDLIB / module).stat().st_size > GUARDED_PARSE_BYTES
        shutil.copy(STDLIB / module, root / module)
    return make_repo(root)


@pytest.fixture(scope="module")
def stdlib_repo(tmp_path_factory) -> Path:
    return stdlib_slice(tmp_path_factory, "parallel", PACKAGES)


def index_digests(conn: sqlite3.Connection) -> dict[str, str]:
    """sha256 (16 hex digits) of each table's rows, canonical as :func:`content` reads them, plus
    the stored order: entity ids and FTS rowids by rowid (row for row, not only as sets)."""
    reader = sqlite3.connect(conn.execute("PRAGMA database_list").fetchone()[2])
    try:
        tables = {**_content(reader),
                  "entity_order": list(reader.execute("SELECT rowid, id FROM entities ORDER BY rowid")),
                  "fts_order": list(reader.execute("SELECT rowid FROM entities_fts ORDER BY rowid"))}
    finally:
        reader.close()
    return {name: hashlib.sha256(repr(rows).encode()).hexdigest()[:16] for name, rows in sorted(tables.items())}


def digest_key() -> str:
    """What the pinned digests depend on besides cogd: the standard library's and the grammar's versions."""
    return (f"python {platform.python_version()}, tree-sitter {importlib.metadata.version('tree-sitter')}, "
            f"tree-sitter-python {importlib.metadata.version('tree-sitter-python')}")


@pytest.fixture(scope="module")
def pinned_repo(tmp_path_factory) -> Path:
    return stdlib_slice(tmp_path_factory, "pinned", PINNED_PACKAGES)


def test_the_index_of_the_standard_library_slice_is_the_pinned_one(pinned_repo, tmp_path):
    ix = Indexer(pinned_repo, tmp_path / "pinned.db")
    try:
        result = ix.refresh()
        found = index_digests(ix.conn)
    finally:
        ix.close()
    assert result.parsed == result.scanned > 250 and result.skipped == {}
    pinned = json.loads(DIGESTS.read_text(encoding="utf-8")) if DIGESTS.exists() else {}
    if os.environ.get("COGD_WRITE_INDEX_DIGEST") == "1":
        pinned[digest_key()] = found
        DIGESTS.write_text(json.dumps(pinned, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    if digest_key() not in pinned:
        pytest.skip(f"no pinned index digest for {digest_key()} (write one with COGD_WRITE_INDEX_DIGEST=1)")
    assert found == pinned[digest_key()]


def pool_for(root: Path, rows: bool = True) -> ParsePool:
    """Two parser processes running the daemon's job (rows) or :func:`parse_job` (entity objects)."""
    job, on_timeout = (parse_rows_job, timeout_rows) if rows else (parse_job, timeout_result)
    return ParsePool(2, job, on_timeout, languages.configure, (str(root), languages.configure(root)))


def test_parallel_index_equals_the_serial_index_on_the_standard_library(stdlib_repo, tmp_path):
    serial = Indexer(stdlib_repo, tmp_path / "serial.db")
    pool = pool_for(stdlib_repo)
    parallel = Indexer(stdlib_repo, tmp_path / "parallel.db", pool=pool)
    try:
        first_serial, first_parallel = serial.refresh(), parallel.refresh()
        assert first_parallel.parsed == first_serial.parsed == first_serial.scanned
        assert first_serial.skipped == first_parallel.skipped == {}
        expected = content(serial.conn)
        assert content(parallel.conn) == expected
        # Real content, not two empty indexes: every file, the large ones with their definitions,
        # resolved calls, one FTS row per entity.
        assert len(expected["files"]) == first_serial.parsed
        assert expected["fts_rows"] == [(len(expected["entities"]),)]
        ids = {row[0] for row in expected["entities"]}
        assert {"_pydecimal.py::Decimal", "_pydecimal.py::Decimal.__add__", "typing.py::NamedTuple",
                "json/decoder.py::JSONDecoder.decode"} <= ids
        kinds = {row[2] for row in expected["edges"]}
        assert kinds == {"contains", "calls", "imports", "inherits"}

        # A save of one file and a deleted file: the incremental paths agree too.
        edited = stdlib_repo / "json" / "decoder.py"
        edited.write_text(edited.read_text(encoding="utf-8") + "\n\ndef added_probe():\n    return py_scanstring('\"a\"', 1)\n",
                          encoding="utf-8")
        (stdlib_repo / "http" / "cookies.py").unlink()
        for ix in (serial, parallel):
            result = ix.refresh(paths=["json/decoder.py", "http/cookies.py"])
            assert (result.parsed, result.removed) == (1, 1)
        after = content(serial.conn)
        assert content(parallel.conn) == after
        assert ("json/decoder.py::added_probe", "json/decoder.py::py_scanstring", "calls", "json/decoder.py",
                "file") in after["edges"]
        assert not [row for row in after["files"] if row[0] == "http/cookies.py"]
    finally:
        serial.close()
        parallel.close()
        pool.close()


def test_a_file_that_runs_out_of_time_costs_only_itself_with_files_in_flight(tmp_path):
    # 200,000 nested brackets: tree-sitter's tags query takes minutes on this, and the parse
    # has no deadline here (parse_timeout_ms 0), so only the pool's kill can end it.
    files = {f"m{n}.py": f"def f{n}():\n    return g{n}()\n\n\ndef g{n}():\n    return {n}\n" for n in range(12)}
    root = make_repo(tmp_path / "repo", {**files, "deep.py": b"x = [\n" + b"[\n" * 200_000})
    limits = ParseLimits(1 << 20, 0, 4096, 300)
    names = ["m0.py", "m1.py", "deep.py", *[f"m{n}.py" for n in range(2, 12)]]
    jobs = [(name, (root / name).read_bytes(), limits) for name in names]
    pool = pool_for(root, rows=False)
    try:
        outcomes = list(pool.imap(iter(jobs), budget_s=1.0, window=8))
    finally:
        pool.close()
    assert pool.restarts == 1
    assert [(parsed.path, status) for parsed, status in outcomes] == [
        (name, "timeout" if name == "deep.py" else "ok") for name in names]
    for name, (parsed, _status) in zip(names, outcomes):
        if name != "deep.py":  # the jobs in flight when the pool was killed ran again, whole
            n = name[1:-3]
            assert [e.id for e in parsed.entities] == [name, f"{name}::f{n}", f"{name}::g{n}"]
            assert [(r.src, r.name) for r in parsed.references] == [(f"{name}::f{n}", f"g{n}")]
    assert [e.id for e in outcomes[2][0].entities] == ["deep.py"]
