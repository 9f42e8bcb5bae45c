"""The vector table written by a child process: same rows as the in-process store, LanceDB never in
the caller, deletions queued until the next write, a dead child replaced. Real LanceDB, real children."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import numpy as np
import pytest

from cogd.index.vector_proc import ChildVectorStore
from cogd.index.vectors import VectorStore

DIM = 8


def row(entity_id: str, seed: int, model: str = "m@1") -> dict:
    vector = np.random.default_rng(seed).standard_normal(DIM).astype(np.float32)
    return {"id": entity_id, "kind": "function", "path": "pkg/mod.py", "model": model, "src_hash": f"h{seed}",
            "vector": vector}


@pytest.fixture
def folder(tmp_path):
    os.chmod(tmp_path, 0o700)
    return tmp_path / "vectors"


def test_rows_round_trip_through_the_child_and_match_the_table(folder):
    store = ChildVectorStore(folder, DIM, "m@1")
    ids, kinds, paths, matrix = store.open()
    assert (ids, kinds, paths, matrix.shape) == ([], [], [], (0, DIM))
    rows = [row("a", 1), row("b", 2), row("c", 3), row("x", 4, model="other@2")]
    store.upsert(rows)
    assert store.delete(["b"]) == 1
    # The deletion is queued: the state copy already forgot it, the table learns it at the next write.
    assert store.state() == {"a": ("m@1", "h1"), "c": ("m@1", "h3"), "x": ("other@2", "h4")}
    store.upsert([row("c", 5)])  # an update through merge_insert, after the queued deletion
    assert store.release() is True and store.idle_for() is None and store.started == 1

    again = ChildVectorStore(folder, DIM, "m@1")
    ids, kinds, paths, matrix = again.open()
    assert sorted(ids) == ["a", "c"]
    by_id = dict(zip(ids, matrix))
    np.testing.assert_array_equal(by_id["a"], rows[0]["vector"])
    np.testing.assert_array_equal(by_id["c"], row("c", 5)["vector"])
    assert kinds == ["function", "function"] and paths == ["pkg/mod.py", "pkg/mod.py"]
    assert again.state() == {"a": ("m@1", "h1"), "c": ("m@1", "h5"), "x": ("other@2", "h4")}
    again.close()
    # The in-process store reads the very same table.
    assert VectorStore(folder, DIM).state() == {"a": ("m@1", "h1"), "c": ("m@1", "h5"), "x": ("other@2", "h4")}



def test_holds_and_stale_ids_compare_model_and_text_hash(folder):
    store = ChildVectorStore(folder, DIM, "m@1")
    store.open()
    store.upsert([row("a", 1), row("c", 3), row("x", 4, model="other@2")])
    assert store.holds("a", "h1") and store.holds("c", "h3")
    assert not store.holds("a", "h9")  # the entity's text changed since its vector was made
    assert not store.holds("x", "h4")  # made by another model
    assert not store.holds("zz", "h1")  # never stored
    # Rows of another model, and rows of entities the index no longer has, are the stale ones.
    assert sorted(store.stale_ids({"a": 0, "x": 0})) == ["c", "x"]
    store.delete(["c"])
    assert sorted(store.stale_ids({"a": 0})) == ["x"] and not store.holds("c", "h3")
    store.close()
    # The same answers from a fresh store that reads the state back from the table.
    again = ChildVectorStore(folder, DIM, "m@1")
    assert again.holds("a", "h1") and not again.holds("x", "h4") and sorted(again.stale_ids({"a": 0})) == ["x"]
    again.close()

def test_the_caller_never_imports_lancedb_or_pyarrow(folder):
    code = (
        "import sys, json, numpy as np\n"
        "from cogd.index.vector_proc import ChildVectorStore\n"
        f"s = ChildVectorStore({str(folder)!r}, {DIM}, 'm@1')\n"
        "s.open()\n"
        f"s.upsert([{{'id': 'a', 'kind': 'file', 'path': 'a.py', 'model': 'm@1', 'src_hash': 'h',"
        f" 'vector': np.ones({DIM}, dtype=np.float32)}}])\n"
        "s.compact(force=True)\n"
        "state = s.state(); s.close()\n"
        "print(json.dumps([state, sorted(m for m in sys.modules if m.split('.')[0] in ('lancedb', 'pyarrow'))]))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    state, heavy = json.loads(proc.stdout.strip().splitlines()[-1])
    assert state == {"a": ["m@1", "h"]} and heavy == []


def test_a_killed_child_is_replaced_and_reads_the_table_again(folder):
    store = ChildVectorStore(folder, DIM, "m@1")
    store.open()
    store.upsert([row("a", 1)])
    os.kill(store._proc.pid, signal.SIGKILL)
    store._proc.wait(timeout=30)
    store.delete(["a"])
    store.upsert([row("b", 2)])  # starts a fresh child, which sends the queued deletion first
    assert store.started == 2
    assert store.state() == {"b": ("m@1", "h2")}
    store.close()
    assert VectorStore(folder, DIM).state() == {"b": ("m@1", "h2")}
