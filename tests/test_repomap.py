"""The repository map (personalised PageRank), on a real index (conftest's ``small_index``)."""

from __future__ import annotations

import pytest

from cogd.retrieve.repomap import map_entities, pagerank


@pytest.fixture
def conn(small_index):
    return small_index[1]


def test_the_most_used_definitions_rank_first(conn):
    graph = pagerank(conn)
    assert sum(graph.scores.values()) == pytest.approx(1.0)
    assert graph.order.index("pkg/core.py::normalise") < graph.order.index("pkg/lonely.py::lonely_report")
    assert graph.order.index("pkg/core.py::tokenise") < graph.order.index("pkg/user0.py::handle0")
    files = [path for path, _score, _defs in map_entities(conn, graph, max_files=3)]
    assert files[0] == "pkg/core.py"
    defs = {path: [d.qualname for d in found] for path, _score, found in map_entities(conn, graph)}
    assert defs["pkg/core.py"] == ["normalise", "tokenise"]  # in source order


def test_personalisation_moves_recent_files_up(conn):
    plain = pagerank(conn)
    recent = pagerank(conn, recent_paths=["pkg/lonely.py"])
    assert recent.scores["pkg/lonely.py::lonely_report"] > 3 * plain.scores["pkg/lonely.py::lonely_report"]
    useful = pagerank(conn, utility={"pkg/lonely.py::lonely_footer": 0.5})
    assert useful.scores["pkg/lonely.py::lonely_footer"] > plain.scores["pkg/lonely.py::lonely_footer"]
