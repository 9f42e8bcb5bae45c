"""The repository map (personalised PageRank) and the ledger's candidate list, on real indexes."""

from __future__ import annotations

import pytest

from conftest import make_repo
from cogd.config import PackConfig, RankConfig, RetrieveConfig
from cogd.index.indexer import Indexer
from cogd.retrieve.feedback import Feedback
from cogd.retrieve.hybrid import retrieve
from cogd.retrieve.pack import overview_pack
from cogd.retrieve.repomap import map_entities, pagerank
from cogd.usage.utility import UtilityModel

CORE = '''"""Core helpers everyone uses."""


def normalise(text):
    """Fold case and spaces."""
    return " ".join(text.lower().split())


def tokenise(text):
    return normalise(text).split()
'''

USERS = {
    f"pkg/user{n}.py": f'''from pkg.core import normalise, tokenise


def handle{n}(text):
    """Handler {n}."""
    return tokenise(normalise(text))
'''
    for n in range(4)
}

LONELY = '''def lonely_report(rows):
    """Format the lonely report table."""
    return [str(r) for r in rows]


def lonely_footer(rows):
    """Footer line of the lonely report."""
    return f"{len(rows)} rows"
'''


@pytest.fixture
def conn(tmp_path):
    root = make_repo(tmp_path / "repo", {"pkg/__init__.py": "", "pkg/core.py": CORE, "pkg/lonely.py": LONELY, **USERS})
    indexer = Indexer(root, tmp_path / "index.db")
    indexer.refresh()
    yield indexer.conn
    indexer.close()


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


def test_overview_pack_lists_files_and_records_each_definition(conn, tmp_path):
    pack = overview_pack(conn, tmp_path / "repo", ["pkg/lonely.py"], PackConfig(), pagerank(conn))
    assert pack.text.startswith("## cogd: repository map")
    assert "`pkg/core.py`" in pack.text and "**normalise** L4-6" in pack.text
    assert "### Recently changed files\n- `pkg/lonely.py`" in pack.text
    ids = [i.entity_id for i in pack.items]
    assert "pkg/core.py::normalise" in ids and len(ids) == len(set(ids))
    assert [i.rank for i in pack.items] == list(range(1, len(ids) + 1))
    assert all(i.signals.get("pagerank", 0) > 0 for i in pack.items)


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
        feedback = Feedback(RankConfig(), UtilityModel(), associations=associations)
        hits = [h for h in retrieve(conn, query, config, mode="bm25", feedback=feedback)]
        ids = [h.id for h in hits]
        assert ids[0] == "pkg/lonely.py::lonely_footer"
        assert hits[ids.index("pkg/lonely.py::lonely_footer")].signals["association_rank"] == 1
        off = Feedback(RankConfig(association_weight=0), UtilityModel(), associations=associations)
        assert all("association_rank" not in h.signals for h in retrieve(conn, query, config, mode="bm25", feedback=off))
    finally:
        ledger.close()
