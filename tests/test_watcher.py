"""The file watcher against a real daemon on real git repositories: saves,
atomic saves, directories moved in and out, a branch switch, ignored
directories, the polling fallback. In-process (with a stand-in for the index
worker): a real kernel queue overflow, and directories moved within the tree."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import threading
from pathlib import Path

import pytest

# Waits are conftest.wait_for's (generous): these tests prove that the watcher delivers, not how
# fast; scripts/bench_watch.py measures the latency.
from conftest import LEXICAL_ONLY, Daemon, cogd_in_process, git, lexical_only, make_repo, run_cogd, wait_for
from cogd.config import WatchConfig
from cogd.rpc.client import RemoteError, call
from cogd.daemon.watcher import SYSCTL_FIX, Watcher
from cogd.index.indexer import Indexer
from cogd.paths import Layout

GEOMETRY = (
    '"""Shapes and their areas."""\n\n\n'
    "class Circle:\n"
    "    def __init__(self, radius):\n        self.radius = radius\n\n"
    "    def area(self):\n        return 3.14159 * self.radius ** 2\n\n\n"
    "def perimeter_of_square(side):\n    return 4 * side\n"
)
SAMPLE = {
    "pkg/__init__.py": '"""A tiny package."""\n',
    "pkg/geometry.py": GEOMETRY,
    "pkg/sub/helpers.py": "def clamp_value(x, low, high):\n    return max(low, min(x, high))\n",
    "web/app.js": "export function renderWidget(el) {\n  return el;\n}\n",
}


def hit_ids(root: Path, query: str) -> list[str]:
    return [h["id"] for h in call(Layout(root).socket_path, "search", {"query": query, "mode": "bm25"})["hits"]]


def status(root: Path) -> dict:
    return call(Layout(root).socket_path, "status", {})


def has_entity(root: Path, entity_id: str) -> bool:
    try:
        call(Layout(root).socket_path, "entity.get", {"id": entity_id})
    except RemoteError:
        return False
    return True


def start_daemon(root: Path) -> dict:
    run_cogd(root, "start")
    cogd_in_process(root, "index")  # after the real start: its code here, asking the daemon
    return wait_for(lambda: (s := status(root))["watch"]["mode"] != "starting" and s)


@pytest.fixture
def repo(tmp_path):
    root = lexical_only(make_repo(tmp_path / "repo", SAMPLE))
    yield root
    Daemon(root).stop()


def test_save_is_searchable_without_any_hook(repo):
    assert start_daemon(repo)["watch"]["mode"] == "inotify"
    (repo / "pkg" / "geometry.py").write_text(GEOMETRY + "\n\ndef hexagon_tessellate(side):\n    return side * side\n")
    assert wait_for(lambda: "pkg/geometry.py::hexagon_tessellate" in hit_ids(repo, "hexagon_tessellate"))
    out = json.loads(run_cogd(repo, "search", "hexagon_tessellate", "--json").stdout)
    assert out[0]["id"] == "pkg/geometry.py::hexagon_tessellate"
    watch = status(repo)["watch"]
    assert watch["events"] > 0 and watch["last_batch"]["paths"] == 1 and not watch["last_batch"]["whole_tree"]
    # A deleted file leaves the index too.
    (repo / "web" / "app.js").unlink()
    assert wait_for(lambda: not has_entity(repo, "web/app.js::renderWidget"))


def test_atomic_saves_count_as_changes_of_the_destination(repo):
    start_daemon(repo)
    target = repo / "pkg" / "geometry.py"
    # write-temporary-then-rename, as most editors save
    tmp = repo / "pkg" / "geometry.py.tmp"
    tmp.write_text(GEOMETRY + "\n\ndef octagon_tessellate(side):\n    return side\n")
    (repo / "pkg" / ".geometry.py.swp").write_bytes(b"\0swap")
    os.replace(tmp, target)
    assert wait_for(lambda: "pkg/geometry.py::octagon_tessellate" in hit_ids(repo, "octagon_tessellate"))
    # vim's way: the original is renamed to a backup, then a new file is written
    os.rename(target, repo / "pkg" / "geometry.py~")
    target.write_text(GEOMETRY + "\n\ndef decagon_tessellate(side):\n    return side\n")
    assert wait_for(lambda: "pkg/geometry.py::decagon_tessellate" in hit_ids(repo, "decagon_tessellate"))
    assert not has_entity(repo, "pkg/geometry.py::octagon_tessellate")
    paths = {h["path"] for h in call(Layout(repo).socket_path, "search", {"query": "geometry", "mode": "bm25"})["hits"]}
    assert not any(p.endswith((".tmp", ".swp", "~")) for p in paths)


def test_directory_moved_in_is_indexed_and_watched_moved_out_leaves_nothing(repo, tmp_path):
    before = start_daemon(repo)["watch"]["watched_dirs"]
    outside = tmp_path / "outside" / "extra"
    (outside / "deep").mkdir(parents=True)
    (outside / "deep" / "tools.py").write_text("def frobnicate_widget(x):\n    return x\n")
    os.rename(outside, repo / "extra")
    assert wait_for(lambda: "extra/deep/tools.py::frobnicate_widget" in hit_ids(repo, "frobnicate_widget"))
    assert wait_for(lambda: status(repo)["watch"]["watched_dirs"] == before + 2)
    # the moved-in directories are watched: a new file deep inside is seen
    (repo / "extra" / "deep" / "more.py").write_text("def defrobnicate_widget(x):\n    return x\n")
    assert wait_for(lambda: "extra/deep/more.py::defrobnicate_widget" in hit_ids(repo, "defrobnicate_widget"))

    gone = tmp_path / "gone"
    os.rename(repo / "pkg", gone)
    assert wait_for(lambda: not has_entity(repo, "pkg/geometry.py::Circle")
                    and not has_entity(repo, "pkg/sub/helpers.py::clamp_value"))
    assert wait_for(lambda: status(repo)["watch"]["watched_dirs"] == before)
    # edits in the moved-out tree are not reported under its old path
    (gone / "geometry.py").write_text(GEOMETRY + "\n\ndef ghost_function():\n    pass\n")
    (repo / "web" / "late.js").write_text("export function lateArrival() {}\n")  # a barrier
    assert wait_for(lambda: "web/late.js::lateArrival" in hit_ids(repo, "lateArrival"))
    assert not any("ghost" in i for i in hit_ids(repo, "ghost_function"))
    assert not any(i.startswith("pkg/") for i in hit_ids(repo, "circle area perimeter clamp"))


def module_source(i: int, n: int, version: int) -> str:
    """A module that defines functions and calls one in the next module (imports and calls edges)."""
    j = (i + 1) % n
    return (
        f'"""Module {i}, version {version}."""\n'
        f"from app.m{j:03d} import compute_{j:03d}\n\n\n"
        f"class Holder{i:03d}:\n"
        f"    def run(self, x):\n        return compute_{i:03d}(x) + {version}\n\n\n"
        f"def compute_{i:03d}(x):\n    return x * {version}\n\n\n"
        f"def chain_{i:03d}(x):\n    return compute_{j:03d}(x)\n"
        + (f"\n\ndef added_in_v{version}_{i:03d}():\n    return Holder{i:03d}()\n" if version > 1 else "")
    )


def index_rows(db: Path) -> tuple[set, set]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        entities = set(conn.execute(
            "SELECT id, kind, path, qualname, start_line, end_line, signature, hash, parent_id FROM entities"))
        edges = set(conn.execute("SELECT src, dst, kind, path, resolution FROM edges"))
    finally:
        conn.close()
    return entities, edges


def test_branch_switch_of_300_files_equals_a_fresh_index(tmp_path):
    n = 320
    root = make_repo(tmp_path / "repo", {f"app/m{i:03d}.py": module_source(i, n, 1) for i in range(n)})
    git(root, "checkout", "-q", "-b", "big")
    for i in range(200):  # 200 modified
        (root / "app" / f"m{i:03d}.py").write_text(module_source(i, n, 2))
    for i in range(300, 320):  # 20 deleted (calls into them no longer resolve)
        (root / "app" / f"m{i:03d}.py").unlink()
    (root / "app" / "more").mkdir()
    for i in range(80):  # 80 added, in a new directory
        (root / "app" / "more" / f"x{i:03d}.py").write_text(module_source(i, n, 3))
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "touch 300 files")
    git(root, "checkout", "-q", "main")
    # After the commits, so that no branch switch takes the config away. The batch window is
    # set wide here so that the checkout's event storm falls into a handful of batches even
    # when a busy machine spreads it over seconds.
    (root / ".cogd").mkdir(exist_ok=True)
    (root / ".cogd" / "config.toml").write_text(LEXICAL_ONLY + "[watch]\ndebounce_ms = 2000\nmax_delay_ms = 20000\n")
    try:
        start_daemon(root)
        batches_before = status(root)["watch"]["batches"]
        git(root, "checkout", "-q", "big")

        fresh = tmp_path / "fresh"
        subprocess.run(["git", "clone", "-q", "-b", "big", str(root), str(fresh)], check=True)
        indexer = Indexer(fresh, tmp_path / "fresh.db")
        indexer.refresh()
        indexer.close()
        expected = index_rows(tmp_path / "fresh.db")
        assert len(expected[0]) > 1000 and len(expected[1]) > 1000

        db = Layout(root).index_db
        wait_for(lambda: index_rows(db) == expected, what="the index to equal a fresh one", step=0.2)
        watch = status(root)["watch"]
        assert watch["rescans"] >= 1  # more than 200 paths, and a new directory: whole-tree refreshes
        assert watch["batches"] - batches_before <= 6  # a storm of ~900 events, a handful of batches
    finally:
        Daemon(root).stop()


def test_ignored_directories_are_neither_indexed_nor_watched(tmp_path):
    files = {
        **SAMPLE,
        ".gitignore": "generated/\nnode_modules/\n*.log\n",
        ".cogdignore": "vendor/\n",
        "generated/a/b/gen.py": "def generated_thing():\n    pass\n",
        "node_modules/lib/deep/index.js": "export function nodeModuleThing() {}\n",
        "vendor/v.py": "def vendored_thing():\n    pass\n",
    }
    root = lexical_only(make_repo(tmp_path / "repo", files))
    os.symlink("..", root / "pkg" / "loop")  # a symlink cycle: never followed
    try:
        watch = start_daemon(root)["watch"]
        assert watch["mode"] == "inotify"
        assert watch["watched_dirs"] == 4  # root, pkg, pkg/sub, web
        (root / "generated" / "a" / "b" / "gen.py").write_text("def generated_again():\n    pass\n")
        (root / "node_modules" / "lib" / "deep" / "index.js").write_text("export function nodeAgain() {}\n")
        (root / "node_modules" / "fresh").mkdir()
        (root / "generated" / "new").mkdir()
        (root / "pkg" / "sub" / "later.py").write_text("def later_function():\n    pass\n")  # a barrier
        assert wait_for(lambda: "pkg/sub/later.py::later_function" in hit_ids(root, "later_function"))
        for name in ("generated_thing", "generated_again", "nodeModuleThing", "nodeAgain", "vendored_thing"):
            assert not any(name in i for i in hit_ids(root, name)), name
        assert status(root)["index"]["files"] == 5  # the four of SAMPLE and later.py
        # new directories: ignored ones are not watched and cost no rescan, a wanted one is watched
        rescans = status(root)["watch"]["rescans"]
        (root / "generated" / "other").mkdir()
        (root / "pkg" / "generated").mkdir()  # ignored by the pattern generated/, in a watched directory
        (root / "build.log").write_text("noise")
        (root / "pkg" / "sub" / "later.py").write_text("def later_function_two():\n    pass\n")  # a barrier
        assert wait_for(lambda: "pkg/sub/later.py::later_function_two" in hit_ids(root, "later_function_two"))
        assert status(root)["watch"]["rescans"] == rescans and status(root)["watch"]["watched_dirs"] == 4
        (root / "docs").mkdir()
        assert wait_for(lambda: status(root)["watch"]["watched_dirs"] == 5)
        (root / "pkg" / "sub" / "later.py").write_text("def later_function_three():\n    pass\n")  # a barrier
        assert wait_for(lambda: "pkg/sub/later.py::later_function_three" in hit_ids(root, "later_function_three"))
        assert status(root)["watch"]["watched_dirs"] == 5
    finally:
        Daemon(root).stop()


@pytest.mark.parametrize("how", ["force_polling", "tiny_limit"])
def test_polling_fallback_still_sees_saves(tmp_path, monkeypatch, how):
    root = make_repo(tmp_path / "repo", SAMPLE)
    (root / ".cogd").mkdir()
    config = "[embed]\nenabled = false\n[watch]\npoll_interval_s = 0.5\n"
    if how == "force_polling":
        config += "force_polling = true\n"
    else:
        monkeypatch.setenv("COGD_WATCH_MAX_WATCHES", "3")  # the daemon inherits it from `cogd start`
    (root / ".cogd" / "config.toml").write_text(config)
    try:
        watch = start_daemon(root)["watch"]
        assert watch["mode"] == "polling" and watch["watched_dirs"] == 0
        if how == "tiny_limit":
            assert SYSCTL_FIX in watch["reason"] and "max_user_watches is 3" in watch["reason"]
            assert SYSCTL_FIX in (root / ".cogd" / "logs" / "daemon.log").read_text()
        (root / "pkg" / "geometry.py").write_text(GEOMETRY + "\n\ndef polled_function():\n    pass\n")
        assert wait_for(lambda: "pkg/geometry.py::polled_function" in hit_ids(root, "polled_function"))
        assert status(root)["watch"]["polls"] > 0
    finally:
        Daemon(root).stop()


class FakeWorker:
    def __init__(self):
        self.requests: list[list[str] | None] = []
        self.queue_depth = 0

    def request(self, paths=None):
        self.requests.append(paths)
        return len(self.requests)


def test_kernel_queue_overflow_triggers_a_whole_tree_rescan(tmp_path):
    limit = int(Path("/proc/sys/fs/inotify/max_queued_events").read_text())
    if limit > 50_000:
        pytest.skip(f"max_queued_events is {limit}: too slow to overflow here")
    root = make_repo(tmp_path / "repo", {"a/x.py": "x = 1\n"})
    worker = FakeWorker()
    watcher = Watcher(root, worker, WatchConfig()).start()
    try:
        assert wait_for(lambda: watcher.mode == "inotify" and worker.requests)  # the catch-up refresh
        assert watcher.watched_dirs == 2
        requests_before = len(worker.requests)
        with watcher._lock:  # the reader thread stalls on its first event; the kernel queue fills up
            for i in range(limit // 3 + 2000):  # each file: create, modify, close-after-write
                (root / "a" / f"f{i}.txt").write_bytes(b"x")
        assert wait_for(lambda: watcher.overflows >= 1 and None in worker.requests[requests_before:])
        assert watcher.status()["last_batch"]["whole_tree"]
        assert "overflow" in watcher.status()["last_batch"]["reason"]
    finally:
        watcher.stop()
    assert watcher.watched_dirs == 0 and not any(t.name == "cogd-watch" and t.is_alive() for t in threading.enumerate())


def test_directories_moved_within_the_tree_stay_watched_under_their_new_names(tmp_path):
    root = make_repo(tmp_path / "repo", {"a/b/m.py": "x = 1\n", "c/n.py": "y = 1\n"})
    worker = FakeWorker()
    watcher = Watcher(root, worker, WatchConfig()).start()

    def requested_after(n: int, path: str) -> bool:
        return any(r is not None and path in r for r in worker.requests[n:])

    def watched() -> list[str]:
        with watcher._lock:
            return sorted(watcher._by_path)

    try:
        assert wait_for(lambda: watcher.mode == "inotify" and worker.requests)  # the catch-up refresh
        assert watched() == ["", "a", "a/b", "c"]
        n = len(worker.requests)
        os.rename(root / "a", root / "x")  # away and back within one batch
        os.rename(root / "x", root / "a")
        assert wait_for(lambda: None in worker.requests[n:])
        (root / "a" / "b" / "new.py").write_text("z = 1\n")
        assert wait_for(lambda: requested_after(n, "a/b/new.py"))
        assert watched() == ["", "a", "a/b", "c"]
        os.rename(root / "a" / "b", root / "c" / "b2")  # to another parent: old name unwatched, new one watched
        assert wait_for(lambda: watched() == ["", "a", "c", "c/b2"])
        n = len(worker.requests)
        (root / "c" / "b2" / "later.py").write_text("w = 1\n")
        assert wait_for(lambda: requested_after(n, "c/b2/later.py"))
    finally:
        watcher.stop()
