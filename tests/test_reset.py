"""``cogd reset``: the projection after a reset equals the one before; the cache and ledger survive."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

import pytest

from cogd.cli import reset as reset_module
from cogd.config import load_config
from cogd.rpc import control
from cogd.rpc.client import call
from cogd.paths import Layout
from conftest import Daemon, cogd_in_process, copy_stdlib, lexical_only, make_repo, run_cogd, wait_for

pytestmark = pytest.mark.timeout(600)  # a hang guard, generous for a busy machine


def _rows(db: Path, sql: str) -> list[tuple]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return sorted(tuple(r) for r in conn.execute(sql))
    finally:
        conn.close()


def dump(root: Path) -> dict:
    """The projection as sorted rows: entities, edges, refs, FTS rows (by entity id), files, memory, vectors.

    Left out: rowids, and the files table's mtime_ns/indexed_at (clock-dependent by design).
    """
    index = root / ".cogd" / "index"
    db = index / "index.db"
    out = {
        "files": _rows(db, "SELECT path, language, hash, size, status FROM files"),
        "entities": _rows(db, "SELECT id, kind, subkind, path, name, qualname, start_line, end_line, language, "
                              "signature, doc, hash, parent_id FROM entities"),
        "edges": _rows(db, "SELECT src, dst, kind, path, resolution FROM edges"),
        "refs": _rows(db, "SELECT path, src, kind, name, qualifier, alias, line FROM refs"),
        "fts": _rows(db, "SELECT e.id, f.path, f.name, f.signature, f.doc, f.body FROM entities_fts f "
                         "JOIN entities e ON e.rowid = f.rowid"),
        "fts_count": _rows(db, "SELECT count(*) FROM entities_fts"),
        "meta": _rows(db, "SELECT key, value FROM meta WHERE key IN ('commit', 'schema_version')"),
    }
    memory = index / "memory.db"
    if memory.exists():
        # Times to the millisecond: memory.db keeps the clock's float when a memory is written, and
        # the value as the file states it (ISO, sub-second digits) when rebuilt from the file.
        out["memories"] = _rows(memory, "SELECT id, type, title, status, body, path, round(created_at, 3), "
                                        "round(updated_at, 3), source, anchors, supersedes, superseded_by, tags, "
                                        "content_hash FROM memories")
        out["memory_fts"] = _rows(memory, "SELECT m.id, f.* FROM memory_fts f JOIN memories m ON m.rowid = f.rowid")
        out["memory_files"] = _rows(memory, "SELECT path, size, id, problem FROM files")
    if (index / "vectors").exists():
        from cogd.index.vectors import VectorStore

        out["vectors"] = sorted((i, m, h) for i, (m, h) in VectorStore(index / "vectors", 384).state().items())
    return out


def stats(root: Path) -> dict:
    return json.loads(run_cogd(root, "stats", "--json").stdout)


@pytest.fixture
def repo(tmp_path):
    return lexical_only(copy_stdlib(tmp_path / "repo", ("json",)))


def history_settled(sock) -> bool:
    """Whether the daemon's history miner has finished a pass (its co-change figures are in stats)."""
    state = call(sock, "history.status", {})
    return not state.get("enabled") or (bool(state["last_pass"]) and state["state"] in ("idle", "no_git", "partial_clone"))


def test_reset_with_a_running_daemon_reproduces_the_projection(repo, daemon_factory):
    d = daemon_factory(repo)
    layout = Layout(repo)
    sock = layout.socket_path
    first = call(sock, "memory.record", {"type": "observation", "text": "decode() refuses trailing data",
                                         "anchors": ["json/decoder.py::JSONDecoder.decode"]})
    call(sock, "memory.record", {"type": "rule", "text": "json/ imports nothing outside the standard library",
                                 "source": "human"})
    call(sock, "context.prompt", {"session_id": "s1", "prompt": "decode a json document"})  # a delivery
    memory_files = {p: p.read_bytes() for p in (repo / ".cogd" / "memory").rglob("*.md")}
    assert len(memory_files) == 2
    # History is mined in the background: compare stats once each daemon's first pass is done, or a
    # pass that ends between the two reads shows as a difference the reset did not make.
    wait_for(lambda: history_settled(sock), what="history mined")
    before, stats_before, pid = dump(repo), stats(repo), d.status()["pid"]
    assert stats_before["ledger"]["deliveries"] == 1 and len(before["memories"]) == 2

    out = run_cogd(repo, "reset").stdout
    assert "projection rebuilt" in out and "daemon restarted" in out
    status = d.status()
    assert status["running"] and status["pid"] != pid
    wait_for(lambda: history_settled(sock), what="history mined after the reset")
    after = dump(repo)
    for key in before:
        diffs = [[(i, x, y) for i, (x, y) in enumerate(zip(a, b)) if x != y] for a, b in zip(after[key], before[key])]
        assert after[key] == before[key], (key, diffs)
    assert stats(repo) == stats_before
    assert {p: p.read_bytes() for p in (repo / ".cogd" / "memory").rglob("*.md")} == memory_files
    assert call(sock, "memory.get", {"id": first["record"]["id"]})["record"]["status"] == "candidate"
    assert not (repo / ".cogd" / reset_module.OLD_INDEX).exists()


def test_stats_json_is_deterministic(repo):
    cogd_in_process(repo, "index")  # set-up: the stats commands below are the real processes
    one = run_cogd(repo, "stats", "--json").stdout
    assert "age_s" not in one and "indexed_at" not in one
    assert run_cogd(repo, "stats", "--json").stdout == one
    assert "index age:" in run_cogd(repo, "stats").stdout  # the table still shows it (from status)


def test_reset_keeps_the_embedding_cache_and_does_not_re_embed(tmp_path):
    files = {f"pkg/m{i}.py": f'def handler_{i}(x):\n    """Handle case {i}."""\n    return x + {i}\n\n\n'
                             f'class Thing{i}:\n    def run(self):\n        return handler_{i}(1)\n'
             for i in range(4)}
    root = make_repo(tmp_path / "repo", files)
    # no index yet: builds it and embeds everything (set-up, in-process: the second reset is the real process)
    first = cogd_in_process(root, "reset").stdout
    assert "vectors:" in first
    vectors = dump(root)["vectors"]
    assert len(vectors) == len(dump(root)["entities"]) > 0
    cache = root / ".cogd" / "index" / "embed_cache.db"
    cache_inode = cache.stat().st_ino
    before = dump(root)
    second = run_cogd(root, "reset").stdout
    assert "0 computed by the model" in second, second
    assert dump(root) == before
    assert cache.stat().st_ino == cache_inode  # the same file, moved back and forth, never rebuilt


def test_reset_all_asks_before_wiping_the_ledger(repo):
    cogd_in_process(repo, "context", "decode json")  # a preview: not recorded; record one through the service:
    layout = Layout(repo)
    from cogd.usage.ledger import Ledger

    ledger = Ledger(layout.state_db)
    ledger.record_delivery("s1", "prompt", "", "q", "text", [])
    ledger.close()
    entities = dump(repo)["entities"]
    refused = run_cogd(repo, "reset", "--all", check=False)
    assert refused.returncode != 0 and "Aborted" in refused.stderr  # no input: the prompt says no
    assert stats(repo)["ledger"]["deliveries"] == 1
    out = run_cogd(repo, "reset", "--all", "--yes").stdout
    assert "ledger wiped" in out
    assert stats(repo)["ledger"]["deliveries"] == 0
    assert dump(repo)["entities"] == entities


def test_failed_rebuild_restores_the_old_projection(repo, monkeypatch):
    cogd_in_process(repo, "index")
    layout = Layout(repo)
    (layout.index_dir / "embed_cache.db").write_bytes(b"")  # stands in for the cache: must come back
    before = dump(repo)
    inode = layout.index_db.stat().st_ino

    def broken(layout, config):
        raise RuntimeError("disk full")

    monkeypatch.setattr(reset_module, "REBUILD_HOOKS", [broken])
    with pytest.raises(RuntimeError, match="disk full"):
        reset_module.reset(layout, load_config(layout.config_file))
    assert layout.index_db.stat().st_ino == inode and dump(repo) == before
    assert (layout.index_dir / "embed_cache.db").exists()
    assert not (layout.cogd_dir / reset_module.OLD_INDEX).exists()
    assert not control.is_running(layout)


def test_reset_refuses_while_another_process_holds_the_lock(repo):
    cogd_in_process(repo, "index")
    layout = Layout(repo)
    before = dump(repo)
    fd = control.try_lock(layout)  # as a CLI command working in-process would
    try:
        proc = run_cogd(repo, "reset", check=False)
    finally:
        os.close(fd)
    assert proc.returncode == 1 and "not this repository's daemon" in proc.stderr
    assert dump(repo) == before


def test_a_reset_after_the_daemon_embedded_computes_only_what_the_cache_lacks(tmp_path):
    """The daemon fills the cache; a file is added; ``cogd reset`` runs the model on exactly the
    new file's two entities (its file entity and its function), shows each stage, and a second
    reset (in-process, the worker's own counter) runs the model on nothing."""
    files = {f"pkg/m{i}.py": f'def handler_{i}(x):\n    """Handle case {i}."""\n    return x + {i}\n' for i in range(3)}
    root = make_repo(tmp_path / "repo", files)
    try:
        run_cogd(root, "start")
        cogd_in_process(root, "index")  # after the real start: its code here, asking the daemon
        wait_for(lambda: (e := json.loads(cogd_in_process(root, "status", "--json").stdout)["embedding"])["phase"] == "current"
                 and e["embedded_entities"] == 6 and e, what="the daemon's embedding")
    finally:
        Daemon(root).stop()
    (root / "pkg" / "extra.py").write_text('def brand_new(y):\n    """Never embedded before."""\n    return -y\n',
                                           encoding="utf-8")
    proc = run_cogd(root, "reset")
    assert "vectors: 8 of 8, 2 computed by the model (the rest from the cache)" in proc.stdout, proc.stdout
    stages = [line.split(":", 1)[0] for line in proc.stderr.splitlines() if "(" in line and line.endswith(" s)")]
    assert stages == ["index", "memory", "vectors"], proc.stderr
    assert "index: 4 files, 4 code entities, " in proc.stderr
    assert "vectors: 8 of 8 entities, 2 computed by the model (the rest from the cache)" in proc.stderr

    layout = Layout(root)
    result = reset_module.reset(layout, load_config(layout.config_file), restart=False)
    assert {k: result["vectors"][k] for k in ("state", "entities", "embedded_entities", "pending", "computed")} == {
        "state": "idle", "entities": 8, "embedded_entities": 8, "pending": 0, "computed": 0}
    assert len(dump(root)["vectors"]) == 8
