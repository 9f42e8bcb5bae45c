"""Tests for cogd.index.indexer, sources and store: real git repositories, real SQLite, real tree-sitter."""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path

import pytest

from conftest import git, make_repo
from conftest import write as write_file
from cogd.config import IndexConfig
from cogd.index import store
from cogd.index.indexer import Indexer
from cogd.index.sources import git_head, list_source_files, recently_changed_files
from cogd.retrieve.lexical import bm25_search

A_PY = '''"""Account helpers."""


def loadUserProfile(user_id):
    """Fetch the avatar thumbnail and display name."""
    return {"id": user_id}


def format_name(first, last):
    """Join names."""
    return f"{first} {last}"


class Account:
    """A bank account."""

    def deposit(self, amount):
        self.balance += amount

    def withdraw(self, amount):
        self.balance -= amount
'''

B_PY = '''def helper():
    return 42
'''

C_JS = '''/** Render the sidebar. */
export function renderSidebar(items) {
  return items.map((i) => i.name);
}
'''

D_TS = '''export interface Point {
  x: number;
  y: number;
}

export class Grid {
  cell(p: Point): number { return p.x + p.y; }
}
'''

E_TSX = '''export const Badge = ({ label }: { label: string }) => <span>{label}</span>;
'''

FILES = {
    "a.py": A_PY,
    "pkg/__init__.py": "",
    "pkg/b.py": B_PY,
    "web/c.js": C_JS,
    "web/d.ts": D_TS,
    "ui/e.tsx": E_TSX,
    "README.md": "# Project\n",
    "data.json": "{}\n",
}
SOURCES = ["a.py", "pkg/__init__.py", "pkg/b.py", "ui/e.tsx", "web/c.js", "web/d.ts"]

_clock = [0]


def set_old_mtime(path: Path) -> int:
    """Give ``path`` a distinct mtime well outside the racy window; returns it (ns)."""
    _clock[0] += 1
    ns = time.time_ns() - 3_600 * 10**9 + _clock[0] * 10**9
    os.utime(path, ns=(ns, ns))
    return ns


def age_tree(root: Path) -> None:
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != ".git"]
        for name in filenames:
            set_old_mtime(Path(dirpath) / name)


def write(root: Path, rel: str, content: str | bytes) -> Path:
    """conftest's write, with an mtime old enough that the racy-clean rule does not apply."""
    path = write_file(root, rel, content)
    set_old_mtime(path)
    return path


@pytest.fixture
def repo(tmp_path) -> Path:
    root = make_repo(tmp_path / "repo", FILES)
    age_tree(root)
    return root


@pytest.fixture
def indexer(repo, tmp_path):
    ix = Indexer(repo, tmp_path / "index" / "index.db")
    yield ix
    ix.close()


def refresh(ix: Indexer, paths=None):
    seen: list[str] = []
    result = ix.refresh(paths, progress=lambda done, total, path: seen.append(path))
    return result, seen


def entity_ids(conn: sqlite3.Connection, path: str | None = None) -> list[str]:
    if path is None:
        return [r[0] for r in conn.execute("SELECT id FROM entities ORDER BY id")]
    return [r[0] for r in conn.execute("SELECT id FROM entities WHERE path = ? ORDER BY id", (path,))]


def rowids(conn: sqlite3.Connection, path: str) -> dict[str, int]:
    return {r[0]: r[1] for r in conn.execute("SELECT id, rowid FROM entities WHERE path = ?", (path,))}


def file_row(conn: sqlite3.Connection, path: str):
    return conn.execute("SELECT * FROM files WHERE path = ?", (path,)).fetchone()


def snapshot(conn: sqlite3.Connection) -> dict[str, list[tuple]]:
    """Everything an index holds that must not depend on how it was built."""
    columns = ", ".join(store.ENTITY_COLUMNS)
    return {
        "entities": [tuple(r) for r in conn.execute(f"SELECT {columns} FROM entities ORDER BY id")],
        "edges": [tuple(r) for r in conn.execute("SELECT src, dst, kind, path FROM edges ORDER BY src, dst, kind")],
        "fts": [tuple(r) for r in conn.execute(
            "SELECT e.id, f.path, f.name, f.signature, f.doc, f.body FROM entities_fts f "
            "JOIN entities e ON e.rowid = f.rowid ORDER BY e.id")],
        "files": [tuple(r) for r in conn.execute("SELECT path, language, hash, size, status FROM files ORDER BY path")],
    }


def assert_consistent(conn: sqlite3.Connection) -> None:
    """No FTS row without its entity (and the reverse), no edge to or from a missing entity."""
    n_entities = conn.execute("SELECT count(*) FROM entities").fetchone()[0]
    assert conn.execute("SELECT count(*) FROM entities_fts").fetchone()[0] == n_entities
    assert conn.execute(
        "SELECT count(*) FROM entities_fts WHERE rowid NOT IN (SELECT rowid FROM entities)").fetchone()[0] == 0
    assert conn.execute(
        "SELECT count(*) FROM edges WHERE src NOT IN (SELECT id FROM entities) "
        "OR dst NOT IN (SELECT id FROM entities)").fetchone()[0] == 0
    assert conn.execute(
        "SELECT count(*) FROM entities WHERE path NOT IN (SELECT path FROM files)").fetchone()[0] == 0


# --------------------------------------------------------------------------- sources

def test_list_source_files_in_git(repo):
    assert list_source_files(repo) == SOURCES


def test_gitignored_files_are_not_indexed(repo, indexer):
    write(repo, ".gitignore", "build/\nnode_modules/\n*.gen.py\nsecret.py\n")
    write(repo, "build/out.py", "def built():\n    pass\n")
    write(repo, "node_modules/lib/index.js", "function lib() {}\n")
    write(repo, "models.gen.py", "def generated():\n    pass\n")
    write(repo, "secret.py", "def hidden():\n    pass\n")
    write(repo, "local_only.py", "def excluded_locally():\n    pass\n")
    (repo / ".git" / "info").mkdir(exist_ok=True)
    (repo / ".git" / "info" / "exclude").write_text("local_only.py\n")
    write(repo, "scratch.py", "def untracked_but_visible():\n    pass\n")  # untracked, not ignored
    write(repo, "tools/new_tool.js", "function tool() {}\n")  # untracked dir, not ignored
    write(repo, ".cogd/index/stray.py", "def inside_cogd():\n    pass\n")  # cogd's own directory

    result, _ = refresh(indexer)
    indexed = sorted(store.known_files(indexer.conn))
    assert indexed == sorted(SOURCES + ["scratch.py", "tools/new_tool.js"])
    assert result.scanned == 8 and result.parsed == 8
    ids = entity_ids(indexer.conn)
    assert "scratch.py::untracked_but_visible" in ids
    assert "tools/new_tool.js::tool" in ids
    for gone in ("built", "lib", "generated", "hidden", "excluded_locally", "inside_cogd"):
        assert not any(i.endswith("::" + gone) for i in ids)


def test_tracked_file_matching_gitignore_is_still_indexed(tmp_path):
    root = make_repo(tmp_path / "r", {".gitignore": "*.gen.py\n", "keep.py": "def keep():\n    pass\n"})
    write(root, "forced.gen.py", "def forced():\n    pass\n")
    git(root, "add", "-f", "forced.gen.py")
    git(root, "commit", "-q", "-m", "force")
    assert list_source_files(root) == ["forced.gen.py", "keep.py"]


def test_deleted_but_unstaged_file_is_not_listed(repo):
    (repo / "pkg" / "b.py").unlink()
    assert "pkg/b.py" in git(repo, "ls-files")
    assert list_source_files(repo) == [p for p in SOURCES if p != "pkg/b.py"]


def test_non_git_directory_uses_the_walk(tmp_path, monkeypatch):
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    root = tmp_path / "plain"
    for rel in ("main.py", "lib/util.js", "node_modules/dep/index.js", ".hidden/x.py", "build/gen.py",
                "__pycache__/m.py", "venv/lib/site.py", "notes.txt", ".cogd/index/y.py"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("x = 1\n")
    assert list_source_files(root) == ["lib/util.js", "main.py"]
    assert git_head(root) is None
    assert recently_changed_files(root) == []


def test_git_head_and_recently_changed(repo):
    head = git(repo, "rev-parse", "HEAD").strip()
    assert git_head(repo) == head and len(head) == 40
    write(repo, "pkg/b.py", B_PY + "\n# edited\n")
    write(repo, "fresh.py", "x = 1\n")
    recent = recently_changed_files(repo)
    assert recent[:2] == ["pkg/b.py", "fresh.py"]  # uncommitted first, in git status order
    assert set(recent) >= set(FILES)  # then files from the log
    assert recently_changed_files(repo, limit=1) == ["pkg/b.py"]


def test_non_utf8_file_name_does_not_stop_the_index(repo, indexer):
    try:
        with open(os.fsencode(repo) + b"/caf\xe9.py", "wb") as fh:
            fh.write(b"def latin():\n    pass\n")
    except OSError:
        pytest.skip("file system refuses non-UTF-8 names")
    result, _ = refresh(indexer)
    assert result.parsed == len(SOURCES)
    assert sorted(store.known_files(indexer.conn)) == SOURCES


# --------------------------------------------------------------------------- refresh

def test_first_refresh_parses_every_source_file(repo, indexer):
    result, seen = refresh(indexer)
    assert (result.scanned, result.parsed, result.unchanged, result.removed) == (6, 6, 0, 0)
    assert result.skipped == {}
    assert sorted(seen) == SOURCES
    conn = indexer.conn
    assert sorted(store.known_files(conn)) == SOURCES
    assert entity_ids(conn) == sorted([
        "a.py", "a.py::Account", "a.py::Account.deposit", "a.py::Account.withdraw",
        "a.py::format_name", "a.py::loadUserProfile",
        "pkg/__init__.py", "pkg/b.py", "pkg/b.py::helper",
        "ui/e.tsx", "ui/e.tsx::Badge",
        "web/c.js", "web/c.js::renderSidebar",
        "web/d.ts", "web/d.ts::Grid", "web/d.ts::Grid.cell", "web/d.ts::Point",
    ])
    assert store.counts(conn) == {"files": 6, "entities": 11, "file_entities": 6, "edges": 11}
    row = conn.execute("SELECT * FROM entities WHERE id = 'a.py::Account.deposit'").fetchone()
    assert (row["kind"], row["start_line"], row["end_line"], row["parent_id"], row["language"]) == (
        "method", 17, 18, "a.py::Account", "python")
    assert row["signature"] == "def deposit(self, amount)"
    assert conn.execute("SELECT subkind FROM entities WHERE id = 'web/d.ts::Point'").fetchone()[0] == "interface"
    assert file_row(conn, "a.py")["status"] == "ok"
    assert file_row(conn, "a.py")["size"] == len(A_PY.encode())
    assert file_row(conn, "a.py")["language"] == "python" and file_row(conn, "ui/e.tsx")["language"] == "tsx"
    assert set(conn.execute("SELECT DISTINCT kind FROM edges").fetchall()[0]) == {"contains"}
    assert_consistent(conn)


def test_second_refresh_is_a_stat_only_no_op(repo, indexer):
    refresh(indexer)
    before = snapshot(indexer.conn)
    stored = {p: r["mtime_ns"] for p, r in store.known_files(indexer.conn).items()}
    assert stored == {p: os.stat(repo / p).st_mtime_ns for p in SOURCES}  # old files: real mtimes kept
    result, seen = refresh(indexer)
    assert (result.scanned, result.parsed, result.unchanged, result.removed) == (6, 0, 6, 0)
    assert seen == []  # nothing was even read
    assert snapshot(indexer.conn) == before


def test_editing_one_file_reparses_only_that_file(repo, indexer):
    refresh(indexer)
    conn = indexer.conn
    before_ids = entity_ids(conn)
    before_hash = dict(conn.execute("SELECT id, hash FROM entities"))
    other_rowids = {p: rowids(conn, p) for p in SOURCES if p != "a.py"}

    write(repo, "a.py", A_PY.replace("self.balance -= amount", "self.balance -= amount * 2"))
    result, seen = refresh(indexer)
    assert (result.parsed, result.unchanged, result.removed) == (1, 5, 0)
    assert seen == ["a.py"]
    assert entity_ids(conn) == before_ids  # ids derive from names, not positions or content
    after_hash = dict(conn.execute("SELECT id, hash FROM entities"))
    assert {i for i in before_ids if before_hash[i] != after_hash[i]} == {"a.py", "a.py::Account", "a.py::Account.withdraw"}
    # Other files were not rewritten: their rows are the very same rows.
    assert {p: rowids(conn, p) for p in SOURCES if p != "a.py"} == other_rowids
    assert_consistent(conn)


def test_edit_that_shifts_lines_keeps_ids_and_moves_spans(repo, indexer):
    refresh(indexer)
    conn = indexer.conn
    write(repo, "a.py", A_PY.replace('"""Account helpers."""\n', '"""Account helpers."""\n\nimport os\nimport sys\n'))
    refresh(indexer)
    row = conn.execute("SELECT start_line, end_line, hash FROM entities WHERE id = 'a.py::Account.withdraw'").fetchone()
    assert (row[0], row[1]) == (23, 24)
    assert "a.py::Account.withdraw" in entity_ids(conn)


def test_touch_rehashes_without_reparsing(repo, indexer):
    refresh(indexer)
    conn = indexer.conn
    old_row = dict(file_row(conn, "pkg/b.py"))
    old_rowids = rowids(conn, "pkg/b.py")
    new_mtime = set_old_mtime(repo / "pkg" / "b.py")  # same content, new mtime
    (repo / "pkg" / "b.py").write_text(B_PY)  # content-identical rewrite
    os.utime(repo / "pkg" / "b.py", ns=(new_mtime, new_mtime))
    result, seen = refresh(indexer)
    assert seen == ["pkg/b.py"]  # it was read and hashed ...
    assert (result.parsed, result.unchanged) == (0, 6)  # ... but not parsed
    new_row = dict(file_row(conn, "pkg/b.py"))
    assert new_row["mtime_ns"] == new_mtime != old_row["mtime_ns"]
    assert new_row["indexed_at"] == old_row["indexed_at"] and new_row["hash"] == old_row["hash"]
    assert rowids(conn, "pkg/b.py") == old_rowids
    result, seen = refresh(indexer)  # the new stat is remembered
    assert seen == [] and result.unchanged == 6


def test_recently_modified_file_is_rechecked_next_time(repo, indexer):
    refresh(indexer)
    (repo / "pkg" / "b.py").write_text(B_PY.replace("42", "43"))  # mtime: now, inside the racy window
    result, seen = refresh(indexer)
    assert seen == ["pkg/b.py"] and result.parsed == 1
    assert file_row(indexer.conn, "pkg/b.py")["mtime_ns"] == 0
    result, seen = refresh(indexer)
    assert seen == ["pkg/b.py"]  # hashed again: a same-size edit in the same tick would otherwise hide
    assert result.parsed == 0


def test_same_size_edit_with_new_mtime_is_detected(repo, indexer):
    refresh(indexer)
    write(repo, "pkg/b.py", B_PY.replace("42", "43"))
    assert (repo / "pkg" / "b.py").stat().st_size == len(B_PY)
    result, _ = refresh(indexer)
    assert result.parsed == 1
    body = indexer.conn.execute(
        "SELECT body FROM entities_fts f JOIN entities e ON e.rowid = f.rowid WHERE e.id = 'pkg/b.py::helper'"
    ).fetchone()[0]
    assert "43" in body


def test_deleting_a_file_removes_entities_fts_rows_and_edges(repo, indexer):
    refresh(indexer)
    conn = indexer.conn
    assert bm25_search(conn, "sidebar")[0].id == "web/c.js::renderSidebar"
    (repo / "web" / "c.js").unlink()
    result, _ = refresh(indexer)
    assert (result.removed, result.parsed) == (1, 0)
    assert entity_ids(conn, "web/c.js") == []
    assert file_row(conn, "web/c.js") is None
    assert conn.execute("SELECT count(*) FROM edges WHERE path = 'web/c.js' OR src LIKE 'web/c.js%' "
                        "OR dst LIKE 'web/c.js%'").fetchone()[0] == 0
    assert conn.execute("SELECT count(*) FROM entities_fts WHERE entities_fts MATCH 'sidebar'").fetchone()[0] == 0
    assert bm25_search(conn, "sidebar") == []
    assert store.counts(conn) == {"files": 5, "entities": 10, "file_entities": 5, "edges": 10}
    assert_consistent(conn)


def test_renaming_a_file_leaves_nothing_under_the_old_path(repo, indexer):
    refresh(indexer)
    conn = indexer.conn
    git(repo, "mv", "pkg/b.py", "pkg/helpers.py")
    result, _ = refresh(indexer)
    assert (result.removed, result.parsed) == (1, 1)
    assert entity_ids(conn, "pkg/b.py") == []
    assert conn.execute("SELECT count(*) FROM edges WHERE path = 'pkg/b.py'").fetchone()[0] == 0
    assert entity_ids(conn, "pkg/helpers.py") == ["pkg/helpers.py", "pkg/helpers.py::helper"]
    # a plain (non-git) rename of an untracked name works the same
    os.rename(repo / "pkg" / "helpers.py", repo / "pkg" / "tools.py")
    refresh(indexer)
    assert entity_ids(conn, "pkg/helpers.py") == []
    assert entity_ids(conn, "pkg/tools.py") == ["pkg/tools.py", "pkg/tools.py::helper"]
    assert sorted(store.known_files(conn)) == sorted([p for p in SOURCES if p != "pkg/b.py"] + ["pkg/tools.py"])
    assert_consistent(conn)


def test_file_becoming_ignored_is_removed(repo, indexer):
    write(repo, "scratch.py", "def temp():\n    pass\n")
    refresh(indexer)
    assert "scratch.py::temp" in entity_ids(indexer.conn)
    write(repo, ".gitignore", "scratch.py\n")
    result, _ = refresh(indexer)
    assert result.removed == 1
    assert entity_ids(indexer.conn, "scratch.py") == []


def test_too_large_file_keeps_only_a_file_entity(repo, tmp_path):
    big = "def big():\n    return 1\n" + "# padding line\n" * 80 + "x = 1"  # no final newline
    write(repo, "big.py", big)
    ix = Indexer(repo, tmp_path / "small.db", IndexConfig(max_file_bytes=1000))
    try:
        result, _ = refresh(ix)
        assert len(big.encode()) > 1000 > max(len(text.encode()) for text in FILES.values())
        assert result.skipped == {"too_large": 1}
        assert result.parsed == 7  # skipped files are still recorded
        rows = ix.conn.execute("SELECT id, kind, start_line, end_line, hash FROM entities WHERE path = 'big.py'").fetchall()
        assert [(r[0], r[1], r[2], r[3]) for r in rows] == [("big.py", "file", 1, 83)]
        assert file_row(ix.conn, "big.py")["status"] == "too_large"
        assert ix.conn.execute("SELECT count(*) FROM edges WHERE path = 'big.py'").fetchone()[0] == 0
        # Shrunk below the limit, it is parsed normally.
        write(repo, "big.py", "def big():\n    return 1\n")
        result, _ = refresh(ix)
        assert result.parsed == 1 and result.skipped == {}
        assert file_row(ix.conn, "big.py")["status"] == "ok"
        assert entity_ids(ix.conn, "big.py") == ["big.py", "big.py::big"]
    finally:
        ix.close()


def test_raising_the_size_limit_reparses_a_skipped_file_with_unchanged_content(repo, tmp_path):
    db = tmp_path / "limit.db"
    ix = Indexer(repo, db, IndexConfig(max_file_bytes=100))
    refresh(ix)
    assert file_row(ix.conn, "a.py")["status"] == "too_large"
    ix.close()
    ix = Indexer(repo, db, IndexConfig(max_file_bytes=1 << 20))
    try:
        set_old_mtime(repo / "a.py")  # new stat, same content and hash
        result, _ = refresh(ix)
        assert result.parsed == 1
        assert file_row(ix.conn, "a.py")["status"] == "ok"
        assert "a.py::Account.deposit" in entity_ids(ix.conn)
    finally:
        ix.close()


def test_binary_file_with_source_extension(repo, indexer):
    write(repo, "blob.py", b"\x00\x01\x02def looks_like_code():\n    pass\n\xff\xfe")
    result, _ = refresh(indexer)
    assert result.skipped == {"binary": 1}
    assert file_row(indexer.conn, "blob.py")["status"] == "binary"
    rows = indexer.conn.execute("SELECT id, kind, language FROM entities WHERE path = 'blob.py'").fetchall()
    assert [tuple(r) for r in rows] == [("blob.py", "file", "python")]


def test_commit_is_recorded_in_meta(repo, indexer):
    result, _ = refresh(indexer)
    head = git(repo, "rev-parse", "HEAD").strip()
    assert result.commit == head
    assert store.get_meta(indexer.conn, "commit") == head
    assert float(store.get_meta(indexer.conn, "indexed_at")) > 0
    assert store.get_meta(indexer.conn, "schema_version") == store.SCHEMA_VERSION
    git(repo, "commit", "-q", "--allow-empty", "-m", "second")
    result, _ = refresh(indexer)
    assert store.get_meta(indexer.conn, "commit") == git(repo, "rev-parse", "HEAD").strip() != head
    assert result.as_dict()["commit"] == result.commit


def test_repository_without_commits(tmp_path):
    root = make_repo(tmp_path / "r", {"m.py": "def f():\n    pass\n"}, commit=False)
    ix = Indexer(root, tmp_path / "i.db")
    try:
        result = ix.refresh()
        assert result.commit is None
        assert store.get_meta(ix.conn, "commit") == ""
        assert entity_ids(ix.conn) == ["m.py", "m.py::f"]  # untracked files still count
    finally:
        ix.close()


def test_refresh_of_listed_paths_only(repo, indexer):
    refresh(indexer)
    conn = indexer.conn
    write(repo, "a.py", A_PY + "\n\ndef added():\n    pass\n")
    write(repo, "pkg/b.py", B_PY + "\n\ndef also():\n    pass\n")
    (repo / "web" / "c.js").unlink()
    result, seen = refresh(indexer, ["a.py", "./web/c.js", "README.md", "missing.py"])
    assert seen == ["a.py"]
    assert (result.scanned, result.parsed, result.removed) == (1, 1, 1)
    assert "a.py::added" in entity_ids(conn)
    assert "pkg/b.py::also" not in entity_ids(conn)  # not listed: not looked at
    assert entity_ids(conn, "web/c.js") == []
    result, _ = refresh(indexer, [])
    assert (result.scanned, result.parsed, result.removed) == (0, 0, 0)


def test_bm25_finds_a_function_by_docstring_word_and_camel_case_part(repo, indexer):
    refresh(indexer)
    conn = indexer.conn
    hits = bm25_search(conn, "thumbnail")
    assert [h.id for h in hits] == ["a.py::loadUserProfile"]
    assert (hits[0].kind, hits[0].start_line, hits[0].end_line) == ("function", 4, 6)
    assert hits[0].score > 0
    assert bm25_search(conn, "profile")[0].id == "a.py::loadUserProfile"  # a camelCase part of the name
    assert bm25_search(conn, "user profile", kinds=("function",))[0].id == "a.py::loadUserProfile"
    assert bm25_search(conn, "profile", kinds=("class",)) == []
    assert bm25_search(conn, "sidebar")[0].id == "web/c.js::renderSidebar"
    assert bm25_search(conn, "withdraw")[0].id == "a.py::Account.withdraw"
    assert bm25_search(conn, "the of and") == []


def test_incremental_index_equals_a_fresh_full_index(repo, tmp_path):
    ix = Indexer(repo, tmp_path / "incremental.db", IndexConfig(max_file_bytes=600))
    try:
        refresh(ix)
        steps = [
            lambda: write(repo, "a.py", A_PY.replace("amount", "value")),
            lambda: write(repo, "pkg/new.py", "class Fresh:\n    def go(self):\n        pass\n"),
            lambda: (repo / "web" / "c.js").unlink(),
            lambda: git(repo, "mv", "pkg/b.py", "pkg/b2.py"),
            lambda: write(repo, "a.py", A_PY + "\n\ndef format_name(x):\n    return x\n"),  # ~2
            lambda: write(repo, "web/d.ts", D_TS + "// " + "x" * 700 + "\n"),  # too large
            lambda: write(repo, "ui/e.tsx", b"\x00binary now"),
            lambda: write(repo, "web/d.ts", D_TS.replace("Grid", "Board")),  # small again, renamed class
            lambda: (write(repo, "scratch.js", "function s() {}\n"), write(repo, ".gitignore", "ignored/\n")),
            lambda: write(repo, "ignored/x.py", "def nope():\n    pass\n"),
            lambda: write(repo, ".gitignore", "ignored/\nscratch.js\n"),
            lambda: write(repo, "pkg/new.py", "class Fresh:\n    def go(self):\n        return 1\n"),
        ]
        for step in steps:
            step()
            refresh(ix)
            assert_consistent(ix.conn)
        incremental = snapshot(ix.conn)
    finally:
        ix.close()
    fresh_ix = Indexer(repo, tmp_path / "fresh.db", IndexConfig(max_file_bytes=600))
    try:
        fresh_ix.refresh()
        fresh = snapshot(fresh_ix.conn)
    finally:
        fresh_ix.close()
    assert incremental == fresh
    ids = [row[0] for row in fresh["entities"]]
    assert "a.py::format_name~2" in ids and "web/d.ts::Board.cell" in ids and "pkg/b2.py::helper" in ids
    assert not any(i.startswith(("web/c.js", "pkg/b.py", "scratch.js", "ignored/")) for i in ids)
    assert ("ui/e.tsx", "tsx", "binary") in [(r[0], r[1], r[4]) for r in fresh["files"]]


# --------------------------------------------------------------------------- store

def test_split_identifier():
    assert store.split_identifier("getHTTPResponse_code") == "get HTTP Response code"
    assert store.split_identifier("EmailMessage.as_string") == "Email Message as string"
    assert store.split_identifier("parse2Json") == "parse 2 Json"
    assert store.split_identifier("") == ""


def test_store_connect_schema_and_readonly(tmp_path):
    db = tmp_path / "deep" / "dir" / "index.db"
    conn = store.connect(db)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert store.counts(conn) == {"files": 0, "entities": 0, "file_entities": 0, "edges": 0}
    store.set_meta(conn, "k", "v1")
    store.set_meta(conn, "k", "v2")
    conn.commit()
    assert store.get_meta(conn, "k") == "v2"
    assert store.get_meta(conn, "absent", "dflt") == "dflt"
    ro = store.connect(db, readonly=True)
    try:
        assert store.get_meta(ro, "k") == "v2"
        with pytest.raises(sqlite3.OperationalError):
            ro.execute("INSERT INTO meta(key, value) VALUES ('x', 'y')")
    finally:
        ro.close()
        conn.close()
    conn = store.connect(db)  # reopening keeps data and does not reset the schema version
    try:
        assert store.get_meta(conn, "k") == "v2"
        assert store.get_meta(conn, "schema_version") == store.SCHEMA_VERSION
    finally:
        conn.close()


def test_store_connect_rejects_a_non_database(tmp_path):
    db = tmp_path / "index.db"
    db.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(sqlite3.DatabaseError):
        store.connect(db)


def test_the_collector_pause_restores_the_state_it_found(monkeypatch):
    """A large refresh pauses the cyclic collector (indexer.collector_paused): on again after,
    also when the body raised; left off when it was off before; nested, the outer one decides."""
    import gc

    from cogd.index import indexer as indexer_module

    assert gc.isenabled()
    with indexer_module.collector_paused():
        assert not gc.isenabled()
        with indexer_module.collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the inner one found it off: it stays off for the outer body
    assert gc.isenabled()
    with pytest.raises(RuntimeError):
        with indexer_module.collector_paused():
            raise RuntimeError("boom")
    assert gc.isenabled()
    gc.disable()
    try:
        with indexer_module.collector_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_a_refresh_of_many_files_parses_with_the_collector_paused(tmp_path, monkeypatch):
    """At least BULK_MIN_FILES files to parse: the parse runs with the collector off; a save does not."""
    import gc

    from cogd.index import indexer as indexer_module

    monkeypatch.setattr(indexer_module, "BULK_MIN_FILES", 3)
    repo = make_repo(tmp_path / "repo", {f"m{i}.py": f"def f{i}():\n    return {i}\n" for i in range(4)})
    seen: list[bool] = []
    real = indexer_module.parse_file

    def spying_parse_file(*args, **kwargs):
        seen.append(gc.isenabled())
        return real(*args, **kwargs)

    monkeypatch.setattr(indexer_module, "parse_file", spying_parse_file)
    ix = Indexer(repo, tmp_path / "index.db")
    try:
        ix.refresh()
        assert seen == [False] * 4 and gc.isenabled()
        seen.clear()
        write_file(repo, "m0.py", "def f0():\n    return 10\n")
        ix.refresh(paths=["m0.py"])
        assert seen == [True]
    finally:
        ix.close()
