"""Index snapshots on a file:// store: publish at A, a clone at B pulls A and catches up to a
projection equal to a fresh build at B; damaged, truncated, foreign and hostile snapshots and a
store that vanishes mid-pull each end in a clear message and a correct local build."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3

import pytest

from conftest import Daemon, git, run_cogd
from snapshot_helpers import (clone_at, config_text, make_history, projection, recut_index, rewrite_manifest,
                              store_dir)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A published snapshot of A in a file:// store, a fresh build at B to compare with."""
    base = tmp_path_factory.mktemp("snap")
    store = base / "store"
    store.mkdir()  # a file:// store must exist: an unmounted share is never created on the local disk
    origin = base / "origin"
    a, b = make_history(origin, config_text(f"file://{store}"))
    run_cogd(origin, "index")
    published = json.loads(run_cogd(origin, "snapshot", "publish", "--json").stdout)
    fresh = clone_at(origin, base / "fresh", b)
    run_cogd(fresh, "index")  # in-process: a local build (only a daemon pulls)
    return {"base": base, "store": store, "origin": origin, "a": a, "b": b, "published": published,
            "fresh": projection(fresh)}


def copy_store(world, name: str):
    """A private copy of the store (a test may damage it) and a clone at B configured for it."""
    store = world["base"] / f"store-{name}"
    shutil.copytree(world["store"], store)
    clone = clone_at(world["origin"], world["base"] / name, world["b"])
    (clone / ".cogd" / "config.toml").write_text(config_text(f"file://{store}"))
    git(clone, "update-index", "--assume-unchanged", ".cogd/config.toml")
    return store, clone


def pull(clone, check: bool = True):
    proc = run_cogd(clone, "snapshot", "pull", "--json", check=check)
    return proc, json.loads(proc.stdout) if proc.stdout.strip().startswith("{") else None


def pull_here(clone):
    """The pull of ``cogd snapshot pull``, in this process (what the command prints is its ``line()``)."""
    from cogd.config import load_config
    from cogd.paths import Layout
    from cogd.snapshot.pull import pull as pull_snapshot

    layout = Layout(clone).ensure()
    return pull_snapshot(layout, load_config(layout.config_file))


def assert_equal_to_fresh(world, clone) -> None:
    got = projection(clone)
    for key in ("entities", "edges", "refs", "fts", "fts_rows", "files", "commit"):
        assert got[key] == world["fresh"][key], key
    assert got["commit"] == world["b"]


def test_publish_writes_a_verifiable_snapshot_once(world):
    published = world["published"]
    assert published["state"] == "published" and published["commit"] == world["a"]
    folder = store_dir(world["store"], world["origin"], world["a"])
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["commit"] == world["a"] and manifest["model"] is None
    assert [f["name"] for f in manifest["files"]] == ["index.db"]
    assert manifest["counts"]["entities"] == published["counts"]["entities"] > 20
    assert sorted(os.listdir(folder / "objects")) == sorted(p["object"] for p in manifest["files"][0]["parts"])
    # A shared store: the team reads it whatever the publisher's umask (cogd's own is 077).
    assert [oct(os.stat(p).st_mode & 0o777) for p in (folder.parent, folder, folder / "objects",
                                                      folder / "manifest.json")] == ["0o755"] * 3 + ["0o644"]
    again = json.loads(run_cogd(world["origin"], "snapshot", "publish", "--json").stdout)
    assert again["state"] == "exists"
    assert json.loads((folder / "manifest.json").read_text()) == manifest  # immutable: not rewritten


def test_publish_refuses_a_dirty_work_tree(world, tmp_path):
    clone = clone_at(world["origin"], tmp_path / "dirty", world["b"])
    (clone / "json" / "extra.py").write_text("def changed():\n    return 1\n")
    proc = run_cogd(clone, "snapshot", "publish", check=False)
    assert proc.returncode == 1
    assert "the work tree differs from HEAD (json/extra.py)" in proc.stderr


def test_cogd_up_pulls_the_ancestor_and_catches_up_to_a_fresh_build(world):
    _store, clone = copy_store(world, "up")
    daemon = Daemon(clone)
    try:
        out = run_cogd(clone, "up", "--no-hooks", "--wait-embed", "0").stdout
        assert f"snapshot of {world['a'][:12]} installed (1 commit behind HEAD" in out
        run_cogd(clone, "index")
        status = json.loads(run_cogd(clone, "status", "--json").stdout)
        assert status["snapshot"]["commit"] == world["a"] and status["snapshot"]["behind"] == 1
        assert status["index"]["last_refresh"]["parsed"] <= 2  # only what differs from A was parsed again
    finally:
        daemon.stop()
    assert_equal_to_fresh(world, clone)


def test_a_daemon_started_by_a_hook_pulls_before_its_first_index(world):
    _store, clone = copy_store(world, "start")
    daemon = Daemon(clone)
    try:
        daemon.start()  # cogd start, then cogd index: the daemon's own pull, then its refresh
        log = (clone / ".cogd" / "logs" / "daemon.log").read_text()
        assert f"snapshot of {world['a'][:12]} installed" in log
    finally:
        daemon.stop()
    assert_equal_to_fresh(world, clone)


def test_a_corrupted_object_is_refused_and_the_index_is_built_locally(world):
    store, clone = copy_store(world, "corrupt")
    objects = store_dir(store, clone, world["a"]) / "objects"
    victim = objects / os.listdir(objects)[0]
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0xFF
    victim.write_bytes(bytes(data))
    proc, result = pull(clone, check=False)
    assert proc.returncode == 1 and result["state"] == "refused"
    assert "fails its SHA-256 check (the store's copy is damaged)" in result["reason"]
    assert not (clone / ".cogd" / "index" / "index.db").exists()  # nothing installed
    daemon = Daemon(clone)
    try:  # a daemon started right after does not fail the same way again: it builds locally
        daemon.start()
        log = (clone / ".cogd" / "logs" / "daemon.log").read_text()
        assert "snapshot not pulled: the pull for this HEAD just ended refused (object" in log
    finally:
        daemon.stop()
    assert_equal_to_fresh(world, clone)


def test_a_truncated_download_is_refused(world):
    store, clone = copy_store(world, "truncated")
    objects = store_dir(store, clone, world["a"]) / "objects"
    victim = objects / os.listdir(objects)[0]
    victim.write_bytes(victim.read_bytes()[:1000])
    proc, result = pull(clone, check=False)
    assert proc.returncode == 1
    assert "is damaged or truncated (1000 of" in result["reason"]
    run_cogd(clone, "index")
    assert_equal_to_fresh(world, clone)


def test_a_manifest_from_another_model_is_refused_with_the_reason(world):
    store, clone = copy_store(world, "model")
    (clone / ".cogd" / "config.toml").write_text(config_text(f"file://{store}", embed='model = "minilm"'))
    folder = store_dir(store, clone, world["a"])
    fake = {"id": "other-encoder@0123456789ab", "sha256": "0" * 64, "dim": 384, "text": "full", "max_tokens": 256}

    def other_model(data):
        data["model"] = fake
        data["files"].append({"name": "vectors.db", "size": 0, "sha256": "0" * 64, "parts": []})
    rewrite_manifest(folder, other_model)
    proc, result = pull(clone, check=False)
    assert proc.returncode == 1 and result["state"] == "refused"
    assert "its vectors are of {'id': 'other-encoder@0123456789ab'" in result["reason"]
    assert "this repository embeds with {'id': 'all-MiniLM-L6-v2" in result["reason"]
    assert not (clone / ".cogd" / "index" / "index.db").exists()
    run_cogd(clone, "index")
    assert_equal_to_fresh(world, clone)


def test_another_schema_version_is_refused(world):
    store, clone = copy_store(world, "schema")
    rewrite_manifest(store_dir(store, clone, world["a"]), lambda d: d.update(schema_version="1"))
    result = pull_here(clone)
    assert result.state == "refused"
    assert result.reason.endswith("refused: it was built with index schema '1', this cogd uses '2'")


def test_a_store_that_vanishes_mid_pull_fails_clearly_and_a_second_pull_resumes(world, monkeypatch, tmp_path):
    from cogd.config import load_config
    from cogd.paths import Layout
    from cogd.snapshot import manifest, publish, pull as pull_mod

    # Small parts, so that the snapshot has several objects to fetch (the default is 32 MiB).
    monkeypatch.setattr(publish, "PART_BYTES", 64 << 10)
    store = tmp_path / "store"
    store.mkdir()
    origin = clone_at(world["origin"], tmp_path / "origin", world["a"])
    (origin / ".cogd" / "config.toml").write_text(config_text(f"file://{store}"))
    git(origin, "update-index", "--assume-unchanged", ".cogd/config.toml")
    run_cogd(origin, "index")
    layout = Layout(origin)
    result = publish.publish(layout, load_config(layout.config_file))
    parts = json.loads((store_dir(store, origin, world["a"]) / "manifest.json").read_text())["files"][0]["parts"]
    assert len(parts) >= 3 and all(p["raw_size"] <= 64 << 10 for p in parts) and result.state == "published"
    clone = clone_at(world["origin"], tmp_path / "clone", world["b"])
    (clone / ".cogd" / "config.toml").write_text(config_text(f"file://{store}"))
    layout = Layout(clone).ensure()
    moved = tmp_path / "store-gone"

    def vanish(_name, _size):
        store.rename(moved)  # the share goes away after the first object
    failed = pull_mod.pull(layout, load_config(layout.config_file), hook=vanish)
    assert failed.state == "failed" and failed.downloaded_bytes == parts[0]["size"]
    assert f"snapshot store file://{store}: cannot read" in failed.reason
    assert not layout.index_db.exists()
    moved.rename(store)
    resumed = pull_mod.pull(layout, load_config(layout.config_file))
    assert resumed.state == "installed" and resumed.reused_bytes == parts[0]["size"]
    assert resumed.downloaded_bytes == sum(p["size"] for p in parts[1:])
    assert manifest.PART_BYTES == 32 << 20  # the reader's bound is untouched
    run_cogd(clone, "index")
    assert_equal_to_fresh(world, clone)


@pytest.mark.parametrize("point", ["snapshot:object", "snapshot:install"])
def test_a_killed_pull_resumes_from_its_verified_objects(world, point):
    store, clone = copy_store(world, f"killed-{point[9:]}")
    proc = _run_with_fault(clone, point)
    assert proc.returncode == 137  # killed (as by SIGKILL) after an object was verified / before the swap
    assert not (clone / ".cogd" / "index" / "index.db").exists()
    _proc, result = pull(clone)
    assert result["state"] == "installed" and result["downloaded_bytes"] == 0 and result["reused_bytes"] > 0
    assert os.listdir(clone / ".cogd" / "snapshot" / "incoming") == []  # installed: nothing left aside
    assert projection(clone)["commit"] == world["a"]  # the snapshot's index, before any refresh


def _run_with_fault(root, point):
    import subprocess

    from conftest import COGD

    return subprocess.run([COGD, "snapshot", "pull"], cwd=root, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "COGD_FAULT": point})


@pytest.mark.parametrize("tamper, message", [
    ("CREATE TRIGGER t AFTER UPDATE ON files BEGIN DELETE FROM entities; END",
     "index.db has another schema than this cogd's (differs in: t)"),
    ("CREATE VIEW v AS SELECT 1", "index.db has another schema than this cogd's (differs in: v)"),
    ("UPDATE entities SET path = '../../outside.py' WHERE rowid = (SELECT min(rowid) FROM entities)",
     "index.db names paths outside a work tree: '../../outside.py'"),
    ("UPDATE files SET path = '/etc/passwd' WHERE rowid = (SELECT min(rowid) FROM files)",
     "index.db names paths outside a work tree: '/etc/passwd'"),
    ("DELETE FROM edges WHERE (src, dst, kind) IN (SELECT src, dst, kind FROM edges LIMIT 1)", "index.db holds {"),
])
def test_a_crafted_index_with_valid_checksums_is_refused(world, tamper, message):
    store, clone = copy_store(world, f"crafted-{abs(hash(tamper)) % 10 ** 6}")

    def apply(path):
        conn = sqlite3.connect(path)
        conn.execute(tamper)
        conn.commit()
        conn.close()
    recut_index(store_dir(store, clone, world["a"]), apply)
    result = pull_here(clone)
    assert result.state == "refused" and message in result.reason
    assert not (clone / ".cogd" / "index" / "index.db").exists()


@pytest.mark.parametrize("change, message", [
    (lambda d: d["files"][0].update(name="../../../escape.db"), "file name must be one of index.db, vectors.db"),
    (lambda d: d["files"][0]["parts"][0].update(object="../x"), "a part's object must be 64 hex digits"),
    (lambda d: d["files"][0]["parts"][0].update(raw_size=1 << 40), "part raw_size must be an integer in 0.."),
    (lambda d: d.update(commit="f" * 40), "it describes commit ffffffffffff"),
])
def test_a_hostile_manifest_is_rejected_before_anything_is_downloaded(world, change, message):
    store, clone = copy_store(world, f"manifest-{message[:6].replace(' ', '')}")
    rewrite_manifest(store_dir(store, clone, world["a"]), change)
    result = pull_here(clone)
    assert result.state == "refused" and message in result.reason
    assert not (clone / ".cogd" / "snapshot" / "incoming" / world["a"] / "objects").exists() or not os.listdir(
        clone / ".cogd" / "snapshot" / "incoming" / world["a"] / "objects")


def test_snapshot_status_and_doctor(world, tmp_path):
    store, clone = copy_store(world, "doctor")
    info = json.loads(run_cogd(clone, "snapshot", "status", "--json").stdout)
    assert info["nearest"]["commit"] == world["a"] and info["installed"] is None and info["nearest"]["refused"] is None
    checks = {c["name"]: c for c in json.loads(run_cogd(clone, "doctor", "--json", "--no-model-load",
                                                        check=False).stdout)["checks"]}
    assert checks["snapshot"]["status"] == "ok"
    assert f"{world['a'][:12]} (1 commit behind HEAD)" in checks["snapshot"]["finding"]
    shutil.rmtree(store)
    checks = {c["name"]: c for c in json.loads(run_cogd(clone, "doctor", "--json", "--no-model-load",
                                                        check=False).stdout)["checks"]}
    assert checks["snapshot"]["status"] == "fail" and "is not a directory" in checks["snapshot"]["finding"]
    proc = run_cogd(clone, "snapshot", "publish", check=False)  # a missing share is not created locally
    assert proc.returncode == 1 and f"{store} is not a directory" in proc.stderr and not store.exists()
