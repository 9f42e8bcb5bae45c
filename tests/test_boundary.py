"""The work tree boundary: nothing cogd reads comes from outside the working tree.

A repository commits symlinks to ``/etc/passwd`` and to a "private key"
holding a unique marker under a temporary home directory. A real daemon on a
real socket indexes it; the marker must reach no byte under ``.cogd/``, no
``entity.get``/``search`` answer and no pack the real ``cogd-hook`` prints.
Links inside the tree are indexed once; directory links out are never
entered; a file swapped for a link out (before a re-index, or between the
listing and the read) is never read; tool payloads naming paths outside leave
no touch in the ledger. See docs/architecture.md, "The work tree boundary".
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import uuid
from pathlib import Path

import pytest

import cogd.index.indexer as indexer_module
from cogd.rpc.client import RemoteError, call
from cogd.index.boundary import OutsideTree, open_tree_file, read_tree_file, tree_relpath
from cogd.index.indexer import Indexer
from cogd.index.sources import scan_source_files
from cogd.paths import Layout
from conftest import HOOK_DEADLINE_MS, LEXICAL_ONLY, git, make_repo, run_cogd, run_hook, write

pytestmark = pytest.mark.timeout(180)

PASSWD = Path("/etc/passwd")
# No watcher: refreshes only when a test asks (exact counts). A hook deadline a busy machine meets.
CONFIG = LEXICAL_ONLY + "[watch]\nenabled = false\n[hook]\ndeadline_ms = 30000\n"


def passwd_line() -> bytes:
    """The first line of /etc/passwd (``root:x:0:0:...``): bytes that must never reach .cogd/."""
    if not PASSWD.is_file():
        pytest.skip("no /etc/passwd on this system")
    line = PASSWD.read_bytes().split(b"\n", 1)[0]
    assert len(line) > 10
    return line


def configure(root: Path) -> Path:
    (root / ".cogd").mkdir(exist_ok=True)
    (root / ".cogd" / "config.toml").write_text(CONFIG, encoding="utf-8")
    return root


def cogd_bytes_containing(root: Path, needle: bytes) -> list[str]:
    """Every file under ``root/.cogd`` (db, -wal, -shm, logs, vectors, anything) whose raw bytes hold ``needle``."""
    found = []
    for dirpath, _dirs, files in os.walk(root / ".cogd"):
        for name in files:
            path = Path(dirpath) / name
            if path.is_symlink() or not path.is_file():  # the socket, say
                continue
            if needle in path.read_bytes():
                found.append(str(path.relative_to(root)))
    return found


class Secrets:
    """A temporary home directory outside the repository with a marked private file."""

    def __init__(self, base: Path):
        self.home = base / "home"
        self.marker = f"COGD_BOUNDARY_MARKER_{uuid.uuid4().hex}"
        self.function = f"leaked_{uuid.uuid4().hex[:12]}"
        self.key = write(self.home, ".ssh/id_rsa",
                         f'def {self.function}():\n    return "{self.marker}"\n')
        # A directory of "code" outside the tree, reachable only through a directory symlink.
        write(self.home, "extdir/leak.py", f'def leak_from_dir():\n    return "{self.marker}"\n')
        # Ignore rules outside the tree: read, they would drop app.py from the index.
        write(self.home, "rules", "app.py\n")


@pytest.fixture
def attack(tmp_path) -> tuple[Path, Secrets]:
    """A committed repository holding symlinks out of the tree and in it."""
    secrets = Secrets(tmp_path)
    root = make_repo(tmp_path / "repo", {
        "app.py": "def app_main():\n    return 1\n",
        "pkg/real.py": "def real_thing():\n    return 2\n",
        "scripts/tool": "def tool_entry():\n    return 3\n",  # no extension: not a source file itself
    }, commit=False)
    os.symlink(PASSWD, root / "evil_link.py")
    os.symlink(secrets.key, root / "notes.py")
    os.symlink("pkg/real.py", root / "alias.py")  # in the tree, target listed: indexed once, as pkg/real.py
    os.symlink("scripts/tool", root / "tool.py")  # in the tree, target not listed: indexed as tool.py
    os.symlink(secrets.home / "extdir", root / "ext")  # a directory out of the tree
    os.symlink(secrets.home / "rules", root / ".cogdignore")  # rules out of the tree
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "links")
    assert "120000 " in git(root, "ls-files", "-s", "notes.py")  # committed as a symlink
    return configure(root), secrets


def file_status(conn_or_root, path: str) -> str | None:
    rows = conn_or_root.execute("SELECT status FROM files WHERE path = ?", (path,)).fetchall()
    return rows[0][0] if rows else None


# --------------------------------------------------------------------------- the attack, end to end


def test_symlinks_out_of_the_tree_reach_no_store_answer_or_pack(attack, daemon_factory):
    root, secrets = attack
    line = passwd_line()
    daemon = daemon_factory(root)
    sock = Layout(root).socket_path
    run_cogd(root, "index", "--full")  # every file (and link) judged in this one refresh

    status = daemon.status()
    assert status["index"]["last_refresh"]["skipped"] == {"symlink_outside": 2}
    stats = json.loads(run_cogd(root, "stats", "--json").stdout)
    assert {(r["status"], r["n"]) for r in stats["files"]} == {("ok", 3), ("symlink_outside", 2)}

    conn = sqlite3.connect(Layout(root).index_db)
    try:
        files = dict(conn.execute("SELECT path, status FROM files"))
        assert files == {"app.py": "ok", "pkg/real.py": "ok", "tool.py": "ok",
                         "evil_link.py": "symlink_outside", "notes.py": "symlink_outside"}
        # Recorded by path only: no code entity, no size, no hash of the target's bytes.
        assert conn.execute("SELECT id, kind FROM entities WHERE path IN ('notes.py', 'evil_link.py') "
                            "ORDER BY id").fetchall() == [("evil_link.py", "file"), ("notes.py", "file")]
        assert conn.execute("SELECT size, mtime_ns FROM files WHERE status = 'symlink_outside'").fetchall() == \
            [(0, 0), (0, 0)]
        # In-tree links: each definition exactly once, under the path the rules give it.
        functions = [r[0] for r in conn.execute("SELECT id FROM entities WHERE kind = 'function' ORDER BY id")]
        assert functions == ["app.py::app_main", "pkg/real.py::real_thing", "tool.py::tool_entry"]
    finally:
        conn.close()

    # The methods: nothing of the targets, though the names are findable.
    for query in (secrets.function, secrets.marker, "leak_from_dir", "root"):
        hits = call(sock, "search", {"query": query, "limit": 50})["hits"]
        text = json.dumps(hits)
        assert secrets.marker not in text and line.decode() not in text
        assert not any(h["id"].startswith(("notes.py::", "evil_link.py::", "ext/")) for h in hits)
    for entity_id in ("notes.py", "evil_link.py"):
        got = call(sock, "entity.get", {"id": entity_id})
        assert got["body"] == "" and got["entity"]["kind"] == "file"
        assert secrets.marker not in json.dumps(got) and line.decode() not in json.dumps(got)
    with pytest.raises(RemoteError) as missing:
        call(sock, "entity.get", {"id": f"notes.py::{secrets.function}"})
    assert missing.value.kind == "not_found"
    shown = run_cogd(root, "show", "notes.py", "--json").stdout
    assert secrets.marker not in shown

    # The pack the real hook prints, for a prompt that names the files outright.
    prompt = (f"what does {secrets.function} in notes.py return, what is in evil_link.py, "
              f"and how does app_main use it?")
    proc, _ = run_hook("prompt-submit", {"session_id": "s-boundary", "hook_event_name": "UserPromptSubmit",
                                         "cwd": str(root), "prompt": prompt}, timeout=60,
                       deadline_ms=HOOK_DEADLINE_MS)  # the pack's content is the point, not its latency
    assert proc.returncode == 0
    context = json.loads(proc.stdout)["hookSpecificOutput"]["additionalContext"]
    assert "app.py::app_main" in context  # a real pack was built ...
    assert secrets.marker not in context and line.decode() not in context  # ... without the targets

    # Not one byte of either target anywhere under .cogd/ (while the daemon runs: -wal included).
    assert any(p.endswith("-wal") for p in os.listdir(root / ".cogd" / "index"))
    assert cogd_bytes_containing(root, secrets.marker.encode()) == []
    assert cogd_bytes_containing(root, line) == []


def test_tool_payloads_naming_paths_outside_leave_no_touch(attack, daemon_factory):
    root, secrets = attack
    outside = write(root.parent, "outside.py", "def outside():\n    pass\n")
    daemon_factory(root)
    sock = Layout(root).socket_path
    session = "s-touches"

    def tool_use(tool: str, tool_input: dict, response: dict | None = None) -> None:
        proc, _ = run_hook("post-tool-use", {
            "session_id": session, "hook_event_name": "PostToolUse", "cwd": str(root), "tool_name": tool,
            "tool_input": tool_input, "tool_response": response or {}, "tool_use_id": f"t{uuid.uuid4().hex}"},
            timeout=60, deadline_ms=HOOK_DEADLINE_MS)
        assert proc.returncode == 0

    tool_use("Read", {"file_path": str(PASSWD)})
    tool_use("Read", {"file_path": "../outside.py"})  # relative to the payload's cwd
    tool_use("Read", {"file_path": str(root / ".." / "outside.py")})
    tool_use("Read", {"file_path": str(root / "notes.py")})  # a link that leads out
    tool_use("Read", {"file_path": str(root / "ext" / "leak.py")})  # through a directory link out
    tool_use("Edit", {"file_path": str(outside)}, {"structuredPatch": [{"newStart": 1, "newLines": 2}]})
    tool_use("Write", {"file_path": str(root / "ext" / "new.py")})
    tool_use("Grep", {"path": "/etc"}, {"filenames": [str(PASSWD), "../outside.py"], "mode": "files_with_matches"})
    tool_use("Glob", {"pattern": "*"}, {"filenames": [str(secrets.key), str(root / "ext" / "leak.py")]})
    tool_use("Bash", {"command": f"cat ../outside.py {PASSWD} notes.py ext/leak.py {secrets.key}"})
    tool_use("Read", {"file_path": str(root / "app.py")})  # the one path inside: recorded
    tool_use("Read", {"file_path": str(root / "alias.py")})  # an in-tree link: recorded under its target

    conn = sqlite3.connect(Layout(root).state_db)
    try:
        rows = conn.execute("SELECT tool_name, touches FROM tool_uses WHERE session_id = ? ORDER BY id",
                            (session,)).fetchall()
    finally:
        conn.close()
    assert [name for name, _ in rows] == ["Read"] * 5 + ["Edit", "Write", "Grep", "Glob", "Bash", "Read", "Read"]
    paths = [[t["path"] for t in json.loads(touches)] for _name, touches in rows]
    assert paths == [[]] * 10 + [["app.py"], ["pkg/real.py"]]

    # Saves: only paths inside are queued for re-indexing.
    answer = call(sock, "index.touch", {"paths": ["../outside.py", str(PASSWD), "notes.py", "ext/leak.py",
                                                  str(outside), "pkg/../../outside.py", "app.py"],
                                        "attribute": False, "wait": True})
    assert answer["queued"] == ["app.py"]
    conn = sqlite3.connect(Layout(root).index_db)
    try:
        assert conn.execute("SELECT count(*) FROM files WHERE path LIKE '%outside%' OR path LIKE 'ext/%'"
                            ).fetchone()[0] == 0
    finally:
        conn.close()


def test_mcp_tools_return_nothing_of_the_targets(attack, request):
    """The real ``cogd mcp`` process (it starts the daemon itself), through the MCP SDK's client."""
    import asyncio

    from mcp import Client, StdioServerParameters

    from conftest import COGD

    root, secrets = attack
    line = passwd_line().decode()
    request.addfinalizer(lambda: run_cogd(root, "stop", check=False))  # the daemon `cogd mcp` starts

    async def calls(client):
        out = {}
        for key, name, args in [
            ("entity", "get_entity", {"id": "notes.py"}),
            ("passwd", "get_entity", {"id": "evil_link.py"}),
            ("search", "search", {"query": f"{secrets.function} notes.py evil_link.py", "limit": 20}),
            ("context", "get_context", {"prompt": f"what does {secrets.function} in notes.py return?",
                                        "session_id": "mcp-boundary"}),
        ]:
            out[key] = await client.call_tool(name, args)
        return out

    async def main():
        params = StdioServerParameters(command=COGD, args=["mcp"], cwd=str(root))
        async with Client(params, read_timeout_seconds=120) as client:
            return await calls(client)

    out = asyncio.run(main())
    for key, result in out.items():
        assert not result.is_error, (key, result.content)
        text = json.dumps(result.structured_content)
        assert secrets.marker not in text and line not in text, key
    assert out["entity"].structured_content["entity"]["kind"] == "file"
    assert out["entity"].structured_content["body"] == ""
    found = {h["id"] for h in out["search"].structured_content["hits"]}
    assert "notes.py" in found and not any(i.startswith(("notes.py::", "evil_link.py::")) for i in found)


# --------------------------------------------------------------------------- swaps and races


def test_file_swapped_for_a_link_out_is_dropped_on_reindex(tmp_path, daemon_factory):
    secrets = Secrets(tmp_path)
    root = configure(make_repo(tmp_path / "repo", {"swap.py": "def original():\n    return 0\n",
                                                   "app.py": "def app_main():\n    return 1\n"}))
    daemon_factory(root)
    sock = Layout(root).socket_path
    assert call(sock, "entity.get", {"id": "swap.py::original"})["entity"]["name"] == "original"

    (root / "swap.py").unlink()
    os.symlink(secrets.key, root / "swap.py")
    run_cogd(root, "index")
    last = json.loads(run_cogd(root, "status", "--json").stdout)["index"]["last_refresh"]
    assert last["skipped"] == {"symlink_outside": 1} and last["parsed"] == 1
    with pytest.raises(RemoteError):
        call(sock, "entity.get", {"id": "swap.py::original"})
    conn = sqlite3.connect(Layout(root).index_db)
    try:
        assert file_status(conn, "swap.py") == "symlink_outside"
        assert [r[0] for r in conn.execute("SELECT id FROM entities WHERE path = 'swap.py'")] == ["swap.py"]
    finally:
        conn.close()
    assert cogd_bytes_containing(root, secrets.marker.encode()) == []

    # Back to a regular file: indexed again (the symlink_outside row does not stick).
    (root / "swap.py").unlink()
    write(root, "swap.py", "def restored():\n    return 4\n")
    run_cogd(root, "index")
    assert call(sock, "entity.get", {"id": "swap.py::restored"})["entity"]["kind"] == "function"


@pytest.mark.parametrize("swap", ["file", "parent directory"])
def test_swap_between_listing_and_read_is_refused_at_read_time(tmp_path, monkeypatch, swap):
    """The listing saw a regular file; before the read it became a symlink out
    (or its directory did). The read refuses it: the old entities go, nothing
    of the target is read."""
    secrets = Secrets(tmp_path)
    root = make_repo(tmp_path / "repo", {"pkg/mod.py": "def inner():\n    return 0\n",
                                         "app.py": "def app_main():\n    return 1\n"})
    db = tmp_path / "index.db"
    ix = Indexer(root, db)
    try:
        ix.refresh()
        assert file_status(ix.conn, "pkg/mod.py") == "ok"
        write(root, "pkg/mod.py", "def inner_changed():\n    return 5\n")  # so the refresh reads it again
        stale = scan_source_files(root)
        assert stale.files["pkg/mod.py"] == "pkg/mod.py"
        if swap == "file":
            (root / "pkg" / "mod.py").unlink()
            os.symlink(secrets.key, root / "pkg" / "mod.py")
        else:
            shutil.rmtree(root / "pkg")
            write(secrets.home, "pkgdir/mod.py", f'def swapped():\n    return "{secrets.marker}"\n')
            os.symlink(secrets.home / "pkgdir", root / "pkg")
        reads: list[str] = []
        real_read_tree_file = indexer_module.read_tree_file

        def recording_read(root_arg, rel, limit, **kwargs):
            data = real_read_tree_file(root_arg, rel, limit, **kwargs)
            reads.append(rel)
            return data

        monkeypatch.setattr(indexer_module, "scan_source_files", lambda _root: stale)  # the race, made certain
        monkeypatch.setattr(indexer_module, "read_tree_file", recording_read)
        result = ix.refresh()
        assert result.skipped == {"symlink_outside": 1}
        assert "pkg/mod.py" not in reads  # refused, not read (app.py may be re-read: racy-clean mtime)
        assert file_status(ix.conn, "pkg/mod.py") == "symlink_outside"
        assert [r[0] for r in ix.conn.execute("SELECT id FROM entities WHERE path = 'pkg/mod.py'")] == ["pkg/mod.py"]
        monkeypatch.undo()
        result = ix.refresh()  # listed afresh: still a path out of the tree, left as recorded
        assert result.skipped == {} and file_status(ix.conn, "pkg/mod.py") == "symlink_outside"
    finally:
        ix.close()
    for path in (db, Path(f"{db}-wal")):
        if path.exists():
            assert secrets.marker.encode() not in path.read_bytes()


# --------------------------------------------------------------------------- links inside the tree


def test_links_inside_the_tree_are_indexed_once(tmp_path):
    root = make_repo(tmp_path / "repo", {
        "pkg/real.py": "def real_thing():\n    return 2\n",
        "scripts/tool": "def tool_entry():\n    return 3\n",
    }, commit=False)
    os.symlink("pkg/real.py", root / "alias.py")  # target listed: the target's path wins
    os.symlink("../pkg/real.py", root / "scripts" / "again.py")
    os.symlink("scripts/tool", root / "tool.py")  # target not a source: indexed under the link's name
    os.symlink("scripts/tool", root / "tool2.py")  # a second link to it: left out
    os.symlink(".git/config", root / "gitconfig.py")  # into .git/: not work tree content
    os.symlink("pkg", root / "pkglink")  # a directory link inside: not entered
    os.symlink("missing.py", root / "dangling.py")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "links")
    listing = scan_source_files(root)
    assert listing.files == {"pkg/real.py": "pkg/real.py", "tool.py": "scripts/tool"}
    assert listing.outside == ["gitconfig.py"]
    ix = Indexer(root, tmp_path / "index.db")
    try:
        result = ix.refresh()
        assert result.parsed == 3 and result.skipped == {"symlink_outside": 1}
        rows = [tuple(r) for r in ix.conn.execute("SELECT id, kind FROM entities ORDER BY id")]
        assert rows == [("gitconfig.py", "file"), ("pkg/real.py", "file"), ("pkg/real.py::real_thing", "function"),
                        ("tool.py", "file"), ("tool.py::tool_entry", "function")]
        # A save of the target refreshes the entry read from it.
        write(root, "scripts/tool", "def tool_entry_v2():\n    return 4\n")
        result = ix.refresh(["scripts/tool"])
        assert result.parsed == 1
        assert [r[0] for r in ix.conn.execute("SELECT id FROM entities WHERE path = 'tool.py' ORDER BY id")] == \
            ["tool.py", "tool.py::tool_entry_v2"]
    finally:
        ix.close()


# --------------------------------------------------------------------------- directories and ignore files


@pytest.mark.parametrize("mode", ["walk", "git"])
def test_directory_symlink_out_is_not_entered(tmp_path, monkeypatch, mode):
    secrets = Secrets(tmp_path)
    files = {"app.py": "def app_main():\n    return 1\n"}
    if mode == "walk":
        monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
        root = tmp_path / "plain"
        for rel, text in files.items():
            write(root, rel, text)
    else:
        root = make_repo(tmp_path / "repo", files, commit=False)
    os.symlink(secrets.home / "extdir", root / "ext")
    os.symlink(secrets.home, root / "home_link")
    if mode == "git":
        git(root, "add", "-A")
        git(root, "commit", "-q", "-m", "dir links")
    listing = scan_source_files(root)
    assert (list(listing.files), listing.outside) == (["app.py"], [])
    ix = Indexer(root, tmp_path / "index.db")
    try:
        result = ix.refresh()
        assert result.parsed == 1 and result.skipped == {}
        assert [r[0] for r in ix.conn.execute("SELECT path FROM files")] == ["app.py"]
    finally:
        ix.close()


def test_git_listing_below_a_directory_symlink_out_is_not_read(tmp_path):
    """git's index names ``lib/leak.py`` but ``lib`` is now a symlink out of the
    tree (a crafted work tree): the name counts as a link out and is not read."""
    secrets = Secrets(tmp_path)
    root = make_repo(tmp_path / "repo", {"lib/leak.py": "def harmless():\n    pass\n", "app.py": "def a():\n    pass\n"})
    shutil.rmtree(root / "lib")
    write(secrets.home, "libdir/leak.py", f'def leaked():\n    return "{secrets.marker}"\n')
    os.symlink(secrets.home / "libdir", root / "lib")
    assert "lib/leak.py" in git(root, "ls-files", "--cached")
    db = tmp_path / "index.db"
    ix = Indexer(root, db)
    try:
        result = ix.refresh()
        assert result.skipped == {"symlink_outside": 1}
        assert dict(ix.conn.execute("SELECT path, status FROM files")) == {"app.py": "ok",
                                                                          "lib/leak.py": "symlink_outside"}
    finally:
        ix.close()
    assert secrets.marker.encode() not in db.read_bytes()


def test_submodule_swapped_for_a_directory_link_out_is_not_entered(tmp_path):
    """A submodule's work tree replaced by a symlink to a directory of code
    outside: git lists only the gitlink, and nothing below it is indexed."""
    secrets = Secrets(tmp_path)
    sub = make_repo(tmp_path / "subrepo", {"inner.py": "def inner():\n    pass\n"})
    root = make_repo(tmp_path / "repo", {"app.py": "def a():\n    pass\n"})
    git(root, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(sub), "vendor.py")
    git(root, "commit", "-q", "-m", "submodule")
    assert list(scan_source_files(root).files) == ["app.py"]  # a submodule's files are its own
    shutil.rmtree(root / "vendor.py")
    os.symlink(secrets.home / "extdir", root / "vendor.py")  # holds leak.py with the marker
    db = tmp_path / "index.db"
    ix = Indexer(root, db)
    try:
        result = ix.refresh()
        # The gitlink, named like a source file, is now a symlink out: counted, never read.
        assert result.skipped == {"symlink_outside": 1}
        assert dict(ix.conn.execute("SELECT path, status FROM files")) == {"app.py": "ok",
                                                                          "vendor.py": "symlink_outside"}
    finally:
        ix.close()
    assert secrets.marker.encode() not in db.read_bytes()


def test_ignore_files_that_are_symlinks_are_not_read(tmp_path):
    """A ``.cogdignore`` linking out of the tree (or anywhere: git reads no
    symlinked ``.gitignore`` either) is not read; a regular one still is."""
    secrets = Secrets(tmp_path)
    root = make_repo(tmp_path / "repo", {"app.py": "def a():\n    pass\n", "b.py": "def b():\n    pass\n",
                                         "rules.txt": "c.py\n"})
    os.symlink(secrets.home / "rules", root / ".cogdignore")  # says "app.py"
    write(root, "sub/c.py", "def c():\n    pass\n")
    os.symlink("../rules.txt", root / "sub" / ".cogdignore")  # in the tree ("c.py"), still a symlink: not read
    assert list(scan_source_files(root).files) == ["app.py", "b.py", "sub/c.py"]
    (root / ".cogdignore").unlink()
    write(root, ".cogdignore", "b.py\n")
    assert list(scan_source_files(root).files) == ["app.py", "sub/c.py"]


# --------------------------------------------------------------------------- the helpers themselves


def test_open_tree_file_follows_only_links_that_stay_inside(tmp_path):
    secrets = Secrets(tmp_path)
    root = make_repo(tmp_path / "repo", {"pkg/real.py": "x = 1\n", ".git-looking.py": "y = 2\n"})
    os.symlink("pkg/real.py", root / "alias.py")
    os.symlink("pkg", root / "pkglink")
    os.symlink(secrets.key, root / "key.py")
    os.symlink(".git/config", root / "gitconfig.py")
    os.mkfifo(root / "fifo.py")

    assert read_tree_file(root, "alias.py", 100) == b"x = 1\n"
    assert read_tree_file(root, "pkglink/real.py", 100) == b"x = 1\n"
    for rel in ("key.py", "gitconfig.py", "../repo/../home/.ssh/id_rsa", str(secrets.key)):
        with pytest.raises(OutsideTree):
            read_tree_file(root, rel, 100)
    for rel in ("alias.py", "pkglink/real.py"):  # no symlink at all when links are not to be followed
        with pytest.raises(OutsideTree):
            read_tree_file(root, rel, 100, follow_inside=False)
    with pytest.raises(OSError) as not_regular:
        open_tree_file(root, "fifo.py")  # opened without blocking, then refused
    assert not isinstance(not_regular.value, OutsideTree)
    assert read_tree_file(root, ".git-looking.py", 100) == b"y = 2\n"

    cwd = root / "pkg"
    assert tree_relpath(root, "real.py", cwd) == "pkg/real.py"
    assert tree_relpath(root, str(root / "alias.py")) == "pkg/real.py"
    assert tree_relpath(root, str(root / "pkglink" / "real.py")) == "pkg/real.py"
    for raw in ("../outside.py", "/etc/passwd", "key.py", "pkg/../../x.py", str(root), "", None, 7, "a\0b"):
        assert tree_relpath(root, raw) is None, raw


@pytest.mark.parametrize("swapped", ["key.py", "pkg/mod.py"])
def test_a_swap_after_resolution_is_refused_by_the_kernel(tmp_path, monkeypatch, swapped):
    """The path resolved inside the tree, then (before the open) its last
    component or a directory on the way became a symlink out: ``O_NOFOLLOW``
    on every component refuses it instead of following it."""
    import cogd.index.boundary as boundary

    secrets = Secrets(tmp_path)
    root = make_repo(tmp_path / "repo", {"key.py": "k = 1\n", "pkg/mod.py": "m = 1\n"})
    real_resolve = boundary.resolve_tree_path

    def resolve_then_swap(root_arg, rel, **kwargs):
        resolved = real_resolve(root_arg, rel, **kwargs)
        if rel == "key.py":
            (root / "key.py").unlink()
            os.symlink(secrets.key, root / "key.py")
        else:
            shutil.rmtree(root / "pkg")
            write(secrets.home, "pkgdir/mod.py", f'm = "{secrets.marker}"\n')
            os.symlink(secrets.home / "pkgdir", root / "pkg")
        return resolved

    monkeypatch.setattr(boundary, "resolve_tree_path", resolve_then_swap)
    with pytest.raises(OutsideTree) as refused:
        read_tree_file(root, swapped, 1 << 20)
    assert "changed while being read" in str(refused.value)
