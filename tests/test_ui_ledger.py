"""The ledger's read-only views for ``cogd ui`` (``Ledger.sessions``, ``daily``, ``file_usage``)
on a real state.db, with real hits and misses resolved by the ledger's own rules, plus the
viewer's evidence matcher and charts (no daemon, no browser: these run in milliseconds)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cogd.retrieve.pack import PackItem
from cogd.ui import charts, pages
from cogd.usage.ledger import Ledger
from cogd.usage.touches import Touch

DAY1 = 1_796_083_200.0  # 2026-12-01 00:00:00 UTC
DAY2 = DAY1 + 86_400.0


def items(*specs) -> list[dict]:
    """PackItem dicts from (entity_id, path, start, end) tuples, ranked 1..n."""
    return [PackItem(entity_id, "function", path, start, end, 1.0, rank, 100, False).as_dict()
            for rank, (entity_id, path, start, end) in enumerate(specs, 1)]


@pytest.fixture
def ledger(tmp_path: Path):
    """Two sessions over two days: s1 a hit on a.py::f (read of its lines) then closed (misses),
    s2 one open pack (pending)."""
    led = Ledger(tmp_path / ".cogd" / "state.db")
    a, b = ("a.py::f", "a.py", 1, 10), ("b.py::g", "b.py", 5, 9)
    led.record_delivery("s1", "prompt", "", "fix f", "x" * 400, items(a, b), now=DAY1 + 10)
    led.record_tool_use_with_hits("s1", "Read", "t1", [Touch("a.py", "read", 3, 4)], now=DAY1 + 20)
    led.record_delivery("s1", "prompt", "", "fix g", "y" * 200, items(b), now=DAY1 + 30)  # closes the first
    led.end_session("s1", "other", now=DAY1 + 40)
    led.record_delivery("s2", "prompt", "", "fix f again", "z" * 100, items(a, b), now=DAY2 + 5)
    yield led
    led.close()


def test_sessions_count_each_sessions_outcomes(ledger):
    rows = ledger.sessions()
    assert [r["session_id"] for r in rows] == ["s2", "s1"]  # the latest delivery first
    s2, s1 = rows
    assert (s1["deliveries"], s1["items"], s1["hits"], s1["misses"], s1["pending"]) == (2, 3, 1, 2, 0)
    assert (s1["first_at"], s1["last_at"], s1["ended_at"], s1["end_reason"]) == (DAY1 + 10, DAY1 + 30, DAY1 + 40, "other")
    assert (s2["deliveries"], s2["items"], s2["hits"], s2["misses"], s2["pending"], s2["ended_at"]) == (1, 2, 0, 0, 2, None)
    assert [r["session_id"] for r in ledger.sessions(limit=1)] == ["s2"]


def test_daily_adds_up_to_the_totals(ledger):
    days = ledger.daily()
    assert days == [
        {"day": "2026-12-01", "deliveries": 2, "chars": 600, "hits": 1, "misses": 2, "pending": 0, "hit_rate": 0.3333},
        {"day": "2026-12-02", "deliveries": 1, "chars": 100, "hits": 0, "misses": 0, "pending": 2, "hit_rate": None},
    ]
    totals = ledger.totals()
    for key in ("deliveries", "hits", "misses", "pending"):
        assert sum(d[key] for d in days) == totals[key]
    assert pages.tokens_per_pack(days[0]) == 75  # 600 characters / 4 / 2 packs


def test_file_usage_sums_its_entities(ledger):
    rows = {r["path"]: r for r in ledger.file_usage()}
    a, b = rows["a.py"], rows["b.py"]
    assert (a["entities"], a["retrieval_count"], a["used_count"], a["ignored_count"]) == (1, 2, 1, 0)
    assert (b["entities"], b["retrieval_count"], b["used_count"], b["ignored_count"]) == (1, 3, 0, 2)
    assert a["utility"] == round(ledger.utility.file_utility("a.py"), 4)
    assert a["last_hit_at"] == DAY1 + 20 and b["last_hit_at"] is None
    assert [r["path"] for r in ledger.file_usage()] == ["b.py", "a.py"]  # the most delivered first
    usage = ledger.entity_usage("b.py::g")
    assert (b["successes"], b["failures"]) == (usage["successes"], usage["failures"])


def test_evidence_is_the_touches_on_the_items_lines_while_open(ledger):
    session = ledger.deliveries("s1")[::-1]
    uses = ledger.tool_uses("s1")[::-1]
    first, second = session
    f, g = first["items"]
    assert pages.evidence(f, first, uses) == [
        {"tool": "Read", "action": "read", "start_line": 3, "end_line": 4, "at": DAY1 + 20}]
    assert pages.evidence(g, first, uses) == []  # another file
    assert pages.evidence(second["items"][0], second, uses) == []  # before this pack was delivered
    whole = {"tool_name": "Write", "created_at": DAY1 + 21, "touches": [{"path": "b.py", "action": "write",
                                                                          "start_line": None, "end_line": None}]}
    assert pages.evidence(g, first, [whole])[0]["start_line"] is None  # a whole-file touch covers every item
    outside = {"tool_name": "Read", "created_at": DAY1 + 22, "touches": [{"path": "a.py", "action": "read",
                                                                          "start_line": 11, "end_line": 20}]}
    assert pages.evidence(f, first, [outside]) == []  # past f's last line


def test_charts_escape_their_labels_and_scale_to_the_data():
    hostile = "<script>alert(1)</script>"
    for svg in (charts.line_chart([(hostile, 0.5)], hostile), charts.bar_chart([(hostile, 3)], hostile),
                charts.hbar_chart([(hostile, 0.2)], hostile)):
        assert "<script>" not in svg and "&lt;script&gt;" in svg
    bars = charts.bar_chart([("a", 1), ("b", 4)], "t")
    assert 'height="0.0"' not in bars and "<title>b: 4</title>" in bars
    assert "nothing recorded yet" in charts.line_chart([], "t")
    line = charts.line_chart([("a", 0.5), ("b", None), ("c", 1.0)], "t")
    assert line.count("<circle") == 2 and "<polyline" not in line  # a gap leaves no segment of two points


def test_the_rate_axis_ends_at_the_next_ten_percent():
    low = charts.line_chart([("a", 0.13), ("b", 0.08)], "t")
    assert ">20%</text>" in low and "<title>a: 13.0%</title>" in low
    assert ">10%</text>" in charts.line_chart([("a", 0.0)], "t")  # at least 10%
    assert ">100%</text>" in charts.line_chart([("a", 0.95)], "t")
    assert ">30%</text>" in charts.line_chart([("a", 0.3)], "t")  # 30% exactly is its own top
