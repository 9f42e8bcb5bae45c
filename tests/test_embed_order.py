"""The embedding order: file entities, then the front files' definitions, then the rest.

Real tree-sitter on a real repository with real git history; the worker test runs the real
model on a handful of entities and records, through the index reader it calls, which
entities each chunk carried.
"""

from __future__ import annotations

import os
import threading
import time

import pytest

from conftest import SMALL_REPO, WAIT_S, git, make_repo, wait_for, write
from cogd.config import EmbedConfig
from cogd.daemon import embed_order, embedder as embedder_module
from cogd.daemon.embedder import EmbeddingWorker
from cogd.index import store
from cogd.index.indexer import Indexer
from cogd.paths import Layout

pytestmark = pytest.mark.timeout(600)

# Definitions of each file, in index order (the order the tests below expect within a file).
DEFS = {
    "pkg/core.py": ["pkg/core.py::normalise", "pkg/core.py::tokenise"],
    "pkg/lonely.py": ["pkg/lonely.py::lonely_report", "pkg/lonely.py::lonely_footer"],
    **{f"pkg/user{n}.py": [f"pkg/user{n}.py::handle{n}"] for n in range(4)},
}
FILES = sorted(SMALL_REPO)


def _repo_with_history(tmp_path):
    """SMALL_REPO committed, then a second commit touching only ``pkg/lonely.py``: git names
    lonely.py as the most recent file; core.py is the one the others call."""
    root = make_repo(tmp_path / "repo", SMALL_REPO)
    write(root, "pkg/lonely.py", SMALL_REPO["pkg/lonely.py"] + "\n\ndef lonely_extra():\n    return 0\n")
    git(root, "commit", "-qam", "lonely grows")
    return root


def test_most_referenced_files_counts_edges_from_other_files(small_index):
    _root, conn = small_index
    # Each of the four users imports pkg.core once (one imports edge to its file entity) and
    # calls normalise and tokenise (two calls edges); core.py's own call of normalise in
    # tokenise stays inside the file and does not count.
    assert store.most_referenced_files(conn, 10) == [("pkg/core.py", 12)]
    assert store.most_referenced_files(conn, 0) == []


def test_the_front_interleaves_recent_and_connected_files(tmp_path):
    root = _repo_with_history(tmp_path)
    indexer = Indexer(root, tmp_path / "index.db")
    indexer.refresh()
    try:
        entities = store.entity_states(indexer.conn)
        indexed = {path for _h, _k, path in entities.values()}
        front = embed_order.choose_front(root, indexer.conn, indexed, recent_limit=1, connected_limit=1)
        assert (front.paths, front.recent, front.connected) == ({"pkg/lonely.py": 0, "pkg/core.py": 1}, 1, 1)

        pending = list(entities)  # index order
        ordered = embed_order.order(pending, entities, front)
        files_first = ["pkg/lonely.py", "pkg/core.py"] + [f for f in FILES if f not in ("pkg/lonely.py", "pkg/core.py")]
        front_defs = [*DEFS["pkg/lonely.py"], "pkg/lonely.py::lonely_extra", *DEFS["pkg/core.py"]]
        rest = [i for i in pending if i not in files_first and i not in front_defs]
        assert ordered == files_first + front_defs + rest
        assert sorted(rest) == sorted(f"pkg/user{n}.py::handle{n}" for n in range(4))
        assert embed_order.front_ids(entities, front) == set(files_first) | set(front_defs)
    finally:
        indexer.close()


def test_outside_git_the_newest_files_are_the_recent_ones(tmp_path):
    root = tmp_path / "tree"
    for rel, text in SMALL_REPO.items():
        write(root, rel, text)
    old = time.time() - 3600
    for rel in SMALL_REPO:
        os.utime(root / rel, (old, old))
    os.utime(root / "pkg/user2.py", (old + 60, old + 60))  # the newest, by a minute
    indexer = Indexer(root, tmp_path / "index.db")
    indexer.refresh()
    try:
        assert store.newest_files(indexer.conn, 1) == ["pkg/user2.py"]
        entities = store.entity_states(indexer.conn)
        front = embed_order.choose_front(root, indexer.conn, {p for _h, _k, p in entities.values()},
                                         recent_limit=1, connected_limit=1)
        assert front.paths == {"pkg/user2.py": 0, "pkg/core.py": 1}
    finally:
        indexer.close()


def test_the_worker_embeds_the_front_first_and_reports_its_coverage(tmp_path, monkeypatch):
    root = _repo_with_history(tmp_path)
    layout = Layout(root).ensure()
    indexer = Indexer(root, layout.index_db)
    indexer.refresh()
    entities = store.entity_states(indexer.conn)
    indexer.close()
    monkeypatch.setattr(embed_order, "FRONT_RECENT_FILES", 1)
    monkeypatch.setattr(embed_order, "FRONT_CONNECTED_FILES", 1)
    monkeypatch.setattr(embedder_module, "CHUNK", 3)  # several chunks out of a small tree

    chunks: list[tuple[list[str], dict]] = []
    real_rows = store.embedding_rows
    worker: EmbeddingWorker | None = None
    recorded = threading.Event()

    def recording_rows(conn, ids):
        ids = list(ids)
        chunks.append((ids, worker.front_status() if worker else {}))
        if sum(len(c) for c, _ in chunks) >= len(entities):
            recorded.set()
        return real_rows(conn, ids)

    monkeypatch.setattr(embedder_module.store, "embedding_rows", recording_rows)
    worker = EmbeddingWorker(layout.index_dir, layout.index_db, EmbedConfig(threads=1))
    try:
        status = wait_for(lambda: (s := worker.status())["phase"] == "current" and s, what="current")
        assert recorded.wait(WAIT_S)
        order = [i for ids, _ in chunks for i in ids]
        front = embed_order.Front({"pkg/lonely.py": 0, "pkg/core.py": 1})
        assert order == embed_order.order(list(entities), entities, front)
        assert order[:len(FILES)] == ["pkg/lonely.py", "pkg/core.py",
                                       *[f for f in FILES if f not in ("pkg/lonely.py", "pkg/core.py")]]
        front_size = len(FILES) + 5  # every file entity, lonely.py's 3 definitions, core.py's 2
        # Before each chunk, the front's coverage had grown by the chunks before it, so the
        # front was complete while the rest (the users' handlers) still waited.
        seen = [s["embedded_entities"] for _ids, s in chunks]
        assert seen == [min(3 * n, front_size) for n in range(len(chunks))]
        assert status["front"] == {"entities": front_size, "embedded_entities": front_size, "files": 2,
                                   "recent_files": 1, "connected_files": 1, "coverage": 1.0}
        assert (status["entities"], status["embedded_entities"], status["computed"]) == (
            len(entities), len(entities), len(entities))
    finally:
        worker.stop()


def test_a_front_chosen_before_the_first_index_is_chosen_again(tmp_path, monkeypatch):
    """The daemon's worker makes its first pass while the first index is still being built (no
    entities, so no front files); the pass after the index commits chooses the front, without
    waiting out FRONT_TTL_S."""
    root = _repo_with_history(tmp_path)
    layout = Layout(root).ensure()
    indexer = Indexer(root, layout.index_db)  # the schema, no rows yet
    monkeypatch.setattr(embed_order, "FRONT_RECENT_FILES", 1)
    monkeypatch.setattr(embed_order, "FRONT_CONNECTED_FILES", 1)
    monkeypatch.setattr(embedder_module, "CHUNK", 3)
    worker = EmbeddingWorker(layout.index_dir, layout.index_db, EmbedConfig(threads=1))
    try:
        first = wait_for(lambda: (s := worker.status())["phase"] == "current" and s, what="the empty pass")
        assert (first["entities"], first["front"]["files"], first["front"]["entities"]) == (0, 0, 0)
        indexer.refresh()
        worker.notify()
        done = wait_for(lambda: (s := worker.status())["phase"] == "current" and s["entities"] and s,
                        what="the pass over the index")
        assert done["front"]["files"] == 2 and done["front"]["embedded_entities"] == len(FILES) + 5
    finally:
        worker.stop()
        indexer.close()
