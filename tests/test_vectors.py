"""The vector projection: LanceDB rows keyed by id, exact in-memory KNN with filters before the cut."""

from __future__ import annotations

import numpy as np
import pytest

from cogd.index.vectors import DenseIndex, VectorStore, quantize_rows


def unit(values) -> np.ndarray:
    v = np.asarray(values, dtype=np.float32)
    return v / np.linalg.norm(v)


def rows(n: int, model: str = "m1"):
    rng = np.random.default_rng(7)
    return [
        {"id": f"f.py::e{i}", "kind": "class" if i % 5 == 0 else "function", "path": "f.py", "model": model,
         "src_hash": f"h{i}", "vector": unit(rng.normal(size=8))}
        for i in range(n)
    ]


def test_upsert_is_keyed_by_id_and_never_duplicates(tmp_path):
    store = VectorStore(tmp_path / "vectors", 8)
    data = rows(40)
    store.upsert(data)
    store.upsert(data[:10])  # same ids again
    changed = dict(data[3], src_hash="new")
    store.upsert([changed])
    assert store.count() == 40
    state = store.state()
    assert state["f.py::e3"] == ("m1", "new") and state["f.py::e4"] == ("m1", "h4")
    store.delete(["f.py::e0", "f.py::e1", "no-such-id"])
    assert store.count() == 38 and "f.py::e0" not in store.state()


def test_lancedb_filtered_search_returns_k_rows_of_the_kind(tmp_path):
    store = VectorStore(tmp_path / "vectors", 8)
    data = rows(100)
    store.upsert(data)
    query = data[7]["vector"]  # a function; classes are 1 in 5
    found = store.search(query, 10, kinds=("class",))
    assert len(found) == 10
    assert {i for i, _ in found} <= {r["id"] for r in data if r["kind"] == "class"}
    assert store.search(query, 1)[0][0] == "f.py::e7"


def test_status_filter_is_pushed_down(tmp_path):
    store = VectorStore(tmp_path / "vectors", 8)
    data = rows(60)
    store.upsert([dict(r, status="stale" if i % 3 else "active") for i, r in enumerate(data)])
    found = store.search(data[1]["vector"], 10)  # row 1 is stale: never returned by default
    assert len(found) == 10 and all(int(i.split("e")[-1]) % 3 == 0 for i, _ in found)
    assert store.search(data[1]["vector"], 1, statuses=("stale",))[0][0] == "f.py::e1"


def test_load_keeps_only_the_current_model(tmp_path):
    store = VectorStore(tmp_path / "vectors", 8)
    store.upsert(rows(10, "old"))
    store.upsert([dict(r, id=r["id"] + "_n") for r in rows(4, "new")])
    ids, kinds, paths, matrix = store.load("new")
    assert sorted(ids) == [f"f.py::e{i}_n" for i in range(4)]
    assert matrix.shape == (4, 8) and matrix.dtype == np.float32


def test_dense_index_exact_knn_with_kind_filter_before_the_cut():
    index = DenseIndex(8)
    data = rows(200)
    index.replace([r["id"] for r in data], [r["kind"] for r in data], np.stack([r["vector"] for r in data]))
    query = data[11]["vector"]
    best = index.search(query, 5)
    assert best[0] == ("f.py::e11", pytest.approx(1.0, abs=1e-4))
    # Every row scanned: the order is exactly that of the cosines of the stored (int8) directions.
    codes, factors = quantize_rows(np.stack([r["vector"] for r in data]))
    stored = (codes.astype(np.float32) @ query) * factors
    expected = sorted(zip(stored.tolist(), [r["id"] for r in data]), reverse=True)[:5]
    assert [i for i, _ in best] == [i for _, i in expected]
    exact = {r["id"]: float(r["vector"] @ query) for r in data}
    assert all(abs(score - exact[i]) < 0.01 for i, score in best)  # 8-d rows round coarsely
    classes = index.search(query, 30, kinds=("class",))
    assert len(classes) == 30 and all(int(i.split("e")[-1]) % 5 == 0 for i, _ in classes)
    index.remove(["f.py::e11"])
    assert index.search(query, 1)[0][0] != "f.py::e11"
    index.upsert(["f.py::e11", "g.py::new"], ["function", "function"], np.stack([query, -query]))
    assert index.search(query, 1)[0][0] == "f.py::e11"
    assert len(index) == 201


def test_dense_index_accepts_updates_after_loading_a_read_only_matrix():
    index = DenseIndex(8)
    data = rows(5)
    matrix = np.stack([r["vector"] for r in data])
    matrix.setflags(write=False)  # what a LanceDB/Arrow load hands over
    index.replace([r["id"] for r in data], [r["kind"] for r in data], matrix)
    index.upsert(["f.py::e0"], ["function"], np.stack([-data[0]["vector"]]))
    assert index.search(-data[0]["vector"], 1)[0][0] == "f.py::e0"


def test_dense_index_kind_filter_follows_every_change():
    # the live-rows mask of a kind filter is kept between searches: each change must renew it
    index = DenseIndex(8)
    data = rows(50)  # every fifth row is a class
    index.replace([r["id"] for r in data], [r["kind"] for r in data], np.stack([r["vector"] for r in data]))
    query = data[3]["vector"]  # a function
    classes = {i for i, _ in index.search(query, 100, kinds=("class",))}
    assert classes == {f"f.py::e{n}" for n in range(0, 50, 5)}
    index.upsert(["f.py::e3"], ["class"], np.stack([query]))  # a function becomes a class
    assert index.search(query, 1, kinds=("class",)) == [("f.py::e3", pytest.approx(1.0, abs=1e-4))]
    assert len(index.search(query, 100, kinds=("class",))) == 11
    index.remove(["f.py::e3", "f.py::e0"])
    assert {i for i, _ in index.search(query, 100, kinds=("class",))} == classes - {"f.py::e0"}
    index.upsert(["h.py::c"], ["class"], np.stack([-query]))  # a new row
    assert index.search(-query, 1, kinds=("class",))[0][0] == "h.py::c"
    index.replace([], [], np.zeros((0, 8), dtype=np.float32))
    assert index.search(query, 5, kinds=("class",)) == [] and index.search(query, 5) == []
    assert index.search(query, 0) == []


def test_state_follows_writes_without_rereading_and_matches_the_table(tmp_path):
    store = VectorStore(tmp_path / "vectors", 8)
    data = rows(30)
    store.upsert(data)
    assert store.state()["f.py::e5"] == ("m1", "h5")  # first call: read from the table
    store.upsert([dict(data[5], src_hash="changed", model="m2")])
    store.delete(["f.py::e6", "no-such-id"])
    kept = store.state()
    assert len(kept) == 29 and kept["f.py::e5"] == ("m2", "changed") and "f.py::e6" not in kept
    kept.clear()  # a copy: the caller cannot corrupt the store's mirror
    fresh = VectorStore(tmp_path / "vectors", 8).state()  # what the table on disk holds
    assert fresh == store.state() and len(fresh) == 29


def test_compaction_after_a_pass_waits_for_enough_writes(tmp_path):
    store = VectorStore(tmp_path / "vectors", 8)
    data = rows(40)
    for n in range(4):
        store.upsert(data[n * 10:(n + 1) * 10])
    versions = len(store.table.list_versions())
    store.compact()  # 4 writes since the start: too few, nothing done
    assert len(store.table.list_versions()) == versions
    for n in range(4, 10):
        store.upsert([dict(row, src_hash=f"again{n}") for row in data[:5]])
    versions = len(store.table.list_versions())
    store.compact()  # 10 writes: compacted (a new version)
    assert len(store.table.list_versions()) > versions
    assert store.count() == 40 and store.state()["f.py::e0"] == ("m1", "again9")


def test_dense_index_keeps_int8_rows_and_ranks_as_float32_would_at_model_size():
    # 384-d unit rows as the model makes them: a quarter of float32's memory, cosines within
    # 0.002 of the exact ones, and nearly the same top 10 as an exact float32 scan.
    rng = np.random.default_rng(11)
    dim, n = 384, 3000
    centres = rng.normal(size=(30, dim))
    matrix = (centres[rng.integers(0, 30, n)] + 0.8 * rng.normal(size=(n, dim))).astype(np.float32)
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    ids = [f"m.py::e{i}" for i in range(n)]
    index = DenseIndex(dim)
    index.make_room(n)
    index.upsert(ids[:1000], ["function"] * 1000, matrix[:1000])  # as a pass adds them, in chunks
    index.upsert(ids[1000:], ["function"] * (n - 1000), matrix[1000:])
    assert index._matrix.dtype == np.int8 and index._matrix.nbytes == n * dim
    assert index._factors.nbytes == n * 4
    same = 0
    for q in range(0, n, 97):
        query = matrix[q]
        exact = matrix @ query
        order = np.argsort(-exact)
        best = index.search(query, 10)
        assert best[0][0] == ids[q] and 0.999 < best[0][1] <= 1.0
        found = [int(i.split("e")[-1]) for i, _ in best]
        assert all(abs(score - float(exact[j])) < 0.002 for j, (_i, score) in zip(found, best))
        # Only a neighbour within the rounding margin of the exact 10th can take its place.
        assert all(exact[j] >= exact[order[9]] - 0.004 for j in found)
        same += len(set(found) & set(order[:10].tolist()))
    assert same / (10 * len(range(0, n, 97))) >= 0.95
    back = index.vectors([ids[5], "m.py::absent"])
    assert list(back) == [ids[5]]
    assert back[ids[5]].dtype == np.float32
    assert abs(float(np.linalg.norm(back[ids[5]])) - 1.0) < 1e-5
    assert float(back[ids[5]] @ matrix[5]) > 0.9995


def test_quantize_rows_exact_codes_and_a_zero_row():
    codes, factors = quantize_rows(np.array([[0.5, -0.25, 0.0], [0.0, 0.0, 0.0]], dtype=np.float32))
    assert codes.tolist() == [[127, -64, 0], [0, 0, 0]]  # -0.25 / (0.5 / 127) = -63.5, rounded to even
    assert factors.tolist() == [pytest.approx(1 / np.hypot(127, 64)), 0.0]


def test_dense_index_stamps_name_the_rows_that_changed():
    """A row's stamp is kept through growth and overwrite; ``changed`` lists what is missing, removed
    or stamped otherwise, and ``live_ids`` hands back the caller's own id objects."""
    rng = np.random.default_rng(3)
    dense = DenseIndex(8)
    ids = [f"pkg/mod_{k}.py::f" for k in range(1500)]  # past the first reservation of 1,024 rows
    stamps = np.arange(1500, dtype=np.uint64) * np.uint64(2 ** 52) + np.uint64(7)  # beyond float precision
    dense.upsert(ids, ["function"] * 1500, rng.normal(size=(1500, 8)), stamps=stamps.tolist())
    assert dense.changed(ids, stamps) == []
    assert all(a is b for a, b in zip(dense.live_ids(), ids))
    probe = ids + ["new.py::g"]
    moved = stamps.copy()
    moved[5] += np.uint64(1)  # one content hash differs in the lowest bit
    dense.remove([ids[9]])
    assert dense.changed(probe, np.append(moved, np.uint64(0))) == [5, 9, 1500]
    dense.upsert([ids[9]], ["function"], rng.normal(size=(1, 8)), stamps=[int(stamps[9])])
    assert dense.changed(ids, stamps) == [] and len(dense.live_ids()) == 1500
    dense.upsert([ids[0]], ["function"], rng.normal(size=(1, 8)))  # no stamps given: 0
    assert dense.changed(ids[:2], np.array([0, stamps[1]], dtype=np.uint64)) == []
    with pytest.raises(OverflowError):
        dense.upsert(["x.py"], ["file"], rng.normal(size=(1, 8)), stamps=[2 ** 64])
