"""Hybrid retrieval (cogd/retrieve/hybrid.py) on a real index: fusion, expansion, selection, and the
ledger's third list (query association). The corpus is conftest's ``small_index``."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from cogd.config import RankConfig, RetrieveConfig
from cogd.fusion import MODES, RRF_K
from cogd.index.vectors import DenseIndex
from cogd.index import store
from cogd.retrieve.feedback import Feedback
from cogd.retrieve.lexical import Hit
from cogd.retrieve.hybrid import _structural, is_test_path, retrieve, select, similarity_matrix
from cogd.usage.utility import UtilityModel

QUERY = "normalise text"


@pytest.fixture
def conn(small_index):
    return small_index[1]


def dense_index(conn, near: dict[str, list[float]]) -> DenseIndex:
    """A DenseIndex over every entity of the index: the ids in ``near`` get their vector, the rest [0, 0, 1]."""
    rows = conn.execute("SELECT id, kind FROM entities ORDER BY id").fetchall()
    dense = DenseIndex(3)
    matrix = np.array([near.get(entity_id, [0.0, 0.0, 1.0]) for entity_id, _ in rows], dtype=np.float32)
    dense.replace([r[0] for r in rows], [r[1] for r in rows], matrix)
    return dense


def test_bm25_mode_fuses_one_list_and_expands_over_edges(conn):
    hits = retrieve(conn, QUERY, RetrieveConfig(), mode="bm25")
    assert [h.id for h in hits[:6]] == ["pkg/core.py::tokenise", "pkg/user0.py::handle0", "pkg/user1.py::handle1",
                                        "pkg/user2.py::handle2", "pkg/user3.py::handle3", "pkg/core.py::normalise"]
    for hit in hits:
        rank = hit.signals["bm25_rank"]
        assert hit.signals["rrf"] == round(1 / (RRF_K + rank), 5)
        assert "vector_rank" not in hit.signals
        assert hit.score == pytest.approx(1 / (RRF_K + rank) + hit.signals.get("expansion", 0.0), abs=1e-5)
    by_id = {h.id: h for h in hits}
    # one hop over resolved edges: the caller inside the file, the callers through imports
    assert by_id["pkg/core.py::normalise"].signals["expanded_from"] == "callee of pkg/core.py::tokenise (calls/file)"
    assert by_id["pkg/user0.py::handle0"].signals["expanded_from"] == "caller of pkg/core.py::tokenise (calls/import)"
    assert "pkg/lonely.py::lonely_footer" not in by_id  # shares no word and no edge with the query


def test_hybrid_mode_adds_the_nearest_neighbours_by_rrf(conn):
    dense = dense_index(conn, {"pkg/lonely.py::lonely_footer": [1.0, 0.0, 0.0], "pkg/core.py::normalise": [0.8, 0.6, 0.0]})
    query_vector = np.array([1.0, 0.0, 0.0], dtype=np.float32)
    hits = retrieve(conn, QUERY, RetrieveConfig(), mode="hybrid", query_vector=query_vector, dense=dense)
    by_id = {h.id: h for h in hits}
    footer = by_id["pkg/lonely.py::lonely_footer"]  # found by its vector alone
    assert (footer.signals["vector_rank"], footer.signals["cosine"], footer.signals["rrf"]) == (1, 1.0, round(1 / 61, 5))
    assert "bm25_rank" not in footer.signals
    normalise = by_id["pkg/core.py::normalise"]
    # The KNN index keeps int8 directions: [0.8, 0.6, 0] is stored as [127, 95, 0], cosine 127 / 158.6.
    assert (normalise.signals["bm25_rank"], normalise.signals["vector_rank"], normalise.signals["cosine"]) == (6, 2, 0.8008)
    for hit in hits:
        parts = [hit.signals[k] for k in ("bm25_rank", "vector_rank") if k in hit.signals]
        assert hit.signals["rrf"] == round(sum(1 / (RRF_K + r) for r in parts), 5)
    # normalise, sixth by BM25 alone, is now second: its vector is the second nearest
    assert [h.id for h in hits[:2]] == ["pkg/core.py::tokenise", "pkg/core.py::normalise"]
    weighted = retrieve(conn, QUERY, RetrieveConfig(vector_weight=0.0), mode="hybrid", query_vector=query_vector, dense=dense)
    assert {h.id: h.signals["rrf"] for h in weighted}["pkg/lonely.py::lonely_footer"] == 0.0


def test_vector_mode_without_vectors_is_bm25(conn):
    lexical = [(h.id, h.score) for h in retrieve(conn, QUERY, RetrieveConfig(), mode="bm25")]
    assert [(h.id, h.score) for h in retrieve(conn, QUERY, RetrieveConfig(), mode="vector")] == lexical
    assert [(h.id, h.score) for h in retrieve(conn, QUERY, RetrieveConfig(), mode="vector", dense=DenseIndex(3),
                                             query_vector=np.ones(3, dtype=np.float32))] == lexical
    for mode in MODES:  # every mode works without an embedding model
        assert [h.id for h in retrieve(conn, QUERY, RetrieveConfig(), mode=mode)] == [i for i, _ in lexical]


def test_select_caps_each_file_and_drops_a_file_once_its_definition_is_in(conn):
    hits = retrieve(conn, QUERY, RetrieveConfig(), mode="bm25")
    chosen = select(hits, RetrieveConfig(), per_file_cap=1, prompt=QUERY, limit=10)
    assert [h.id for h in chosen] == ["pkg/core.py::tokenise", "pkg/user0.py::handle0", "pkg/user1.py::handle1",
                                      "pkg/user2.py::handle2", "pkg/user3.py::handle3"]
    assert all(h.signals["prior"] == 1.0 for h in chosen)
    two = select(retrieve(conn, QUERY, RetrieveConfig(), mode="bm25"), RetrieveConfig(), per_file_cap=2, prompt=QUERY, limit=10)
    assert [h.id for h in two][:2] == ["pkg/core.py::tokenise", "pkg/user0.py::handle0"]
    assert "pkg/core.py::normalise" in [h.id for h in two]
    assert not any(h.kind == "file" for h in two)  # each file's definitions are in: the file entity says nothing more


@pytest.mark.parametrize("path, expected", [
    ("tests/test_x.py", True), ("pkg/test_x.py", True), ("src/x_test.go", True), ("web/a.spec.ts", True),
    ("conftest.py", True), ("pkg/testing/util.py", True), ("pkg/contest.py", False), ("pkg/latest.py", False),
])
def test_is_test_path(path, expected):
    assert is_test_path(path) is expected


def test_similarity_matrix_is_the_pairwise_definition(conn):
    # Every hit of the index; a third of them with a vector: cosine where both have one, the
    # structural similarity (same container 0.8, same file 0.5) wherever either has none.
    ids = [r[0] for r in conn.execute("SELECT id FROM entities ORDER BY id")]
    hits = [Hit(*row, 0.0) for row in store.entities_by_ids(conn, ids).values()]
    # the corpus has no class: two methods of one (same container) and one of another, same file
    hits += [replace(hits[-1], id=f"pkg/core.py::{c}.m{n}", path="pkg/core.py", parent_id=f"pkg/core.py::{c}")
             for n, c in ((1, "Box"), (2, "Box"), (3, "Other"))]
    assert len(hits) >= 6
    rng = np.random.default_rng(7)
    vectors = {h.id: (lambda v: v / np.linalg.norm(v))(rng.normal(size=4).astype(np.float32))
               for h in hits[::3]}
    sim = similarity_matrix(hits, vectors)
    n = len(hits)
    expected = np.zeros((n, n), dtype=np.float32)
    for i in range(n):
        for j in range(n):
            a, b = hits[i], hits[j]
            if a.id in vectors and b.id in vectors:
                expected[i, j] = max(float(vectors[a.id] @ vectors[b.id]), 0.0)
            elif i != j:
                expected[i, j] = _structural(a, b)
    assert np.allclose(sim, expected, atol=1e-6)
    plain = similarity_matrix(hits, {})
    assert np.array_equal(plain, np.array([[_structural(a, b) if a is not b else 0.0 for b in hits] for a in hits],
                                          dtype=np.float32))
    assert {round(float(x), 6) for x in np.unique(plain)} == {0.0, 0.5, 0.8}  # one container, one file, neither


def test_past_prompts_bring_back_the_code_they_led_to(conn, tmp_path):
    from cogd.retrieve.lexical import match_expression, query_terms
    from cogd.usage.ledger import Ledger

    config = RetrieveConfig()
    query = "the tally at the bottom is off by one"
    plain = [h.id for h in retrieve(conn, query, config, mode="bm25")]
    assert "pkg/lonely.py::lonely_footer" not in plain  # its words are not the prompt's
    ledger = Ledger(tmp_path / "state.db")
    try:
        # an earlier session: a prompt in other words, then an edit of the footer
        ledger.record_delivery("s1", "prompt", "", "fix the tally shown at the bottom", "t", [], now=1.0)
        assert ledger.associate("s1", [("pkg/lonely.py::lonely_footer", "pkg/lonely.py")], now=2.0) == 1
        assert ledger.associate("s1", [("pkg/lonely.py::lonely_footer", "pkg/lonely.py")], now=3.0) == 0  # idempotent
        assert ledger.associate("no-prompt", [("pkg/core.py::normalise", "pkg/core.py")], now=3.0) == 0

        def associations(text):
            return ledger.associated(match_expression(query_terms(text)))

        assert [e for e, _ in associations(query)] == ["pkg/lonely.py::lonely_footer"]
        # evidence_k = 0: the mechanism without shrinkage (tests/test_evidence.py covers the shrinkage)
        feedback = Feedback(RankConfig(evidence_k=0), UtilityModel(), associations=associations)
        hits = [h for h in retrieve(conn, query, config, mode="bm25", feedback=feedback)]
        ids = [h.id for h in hits]
        assert ids[0] == "pkg/lonely.py::lonely_footer"
        footer = hits[ids.index("pkg/lonely.py::lonely_footer")]
        assert footer.signals["association_rank"] == 1
        assert footer.signals["rrf"] == round(RankConfig().association_weight / (RRF_K + 1), 5)
        off = Feedback(RankConfig(association_weight=0, evidence_k=0), UtilityModel(), associations=associations)
        assert all("association_rank" not in h.signals for h in retrieve(conn, query, config, mode="bm25", feedback=off))
    finally:
        ledger.close()
