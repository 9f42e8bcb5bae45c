"""The ledger's client column: migrated in place (a ledger from before it keeps every row, labelled
with the only client cogd then served), and hit rates broken down by client."""

from __future__ import annotations

import sqlite3

from cogd.usage.ledger import SCHEMA, Ledger
from cogd.usage.touches import Touch


def item(entity_id: str, path: str, start: int, end: int, rank: int) -> dict:
    return {"rank": rank, "entity_id": entity_id, "kind": "function", "path": path, "start_line": start,
            "end_line": end, "score": 1.0, "chars": 100, "pointer": False}


def test_a_ledger_from_before_the_client_column_is_migrated_in_place(tmp_path):
    db = tmp_path / "state.db"
    conn = sqlite3.connect(db)
    conn.executescript(SCHEMA)  # the first release's tables: no client column anywhere
    conn.execute("INSERT INTO deliveries(session_id, event, source, created_at, query, size_chars, item_count) "
                 "VALUES ('old', 'prompt', '', 10.0, 'how', 120, 1)")
    conn.execute("INSERT INTO delivery_items(delivery_id, rank, entity_id, kind, path, start_line, end_line, score, "
                 "chars) VALUES (1, 1, 'a.py::f', 'function', 'a.py', 1, 3, 2.5, 80)")
    conn.execute("INSERT INTO tool_uses(session_id, tool_name, created_at, touches) VALUES ('old', 'Read', 11.0, '[]')")
    conn.execute("INSERT INTO sessions(session_id, started_at) VALUES ('old', 10.0)")
    conn.commit()
    conn.close()
    ledger = Ledger(db)
    try:
        [old] = ledger.deliveries()
        assert (old["id"], old["session_id"], old["query"], old["client"]) == (1, "old", "how", "claude-code")
        assert [(i["entity_id"], i["score"]) for i in old["items"]] == [("a.py::f", 2.5)]
        assert [t["client"] for t in ledger.tool_uses()] == ["claude-code"]
        new = ledger.record_delivery("s2", "prompt", "", "q", "x" * 50, [item("a.py::f", "a.py", 1, 3, 1)], now=20.0,
                                     client="codex")
        assert new == 2
    finally:
        ledger.close()
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("SELECT id, client FROM deliveries ORDER BY id").fetchall() == [(1, "claude-code"),
                                                                                            (2, "codex")]
        assert conn.execute("SELECT client FROM sessions WHERE session_id = 'old'").fetchall() == [("claude-code",)]
    finally:
        conn.close()
    Ledger(db).close()  # reopening migrates nothing again: the old rows keep their label
    conn = sqlite3.connect(db)
    assert conn.execute("SELECT client FROM deliveries ORDER BY id").fetchall() == [("claude-code",), ("codex",)]
    conn.close()


def test_hit_rates_by_client(tmp_path):
    ledger = Ledger(tmp_path / "state.db")
    try:
        f, g = item("a.py::f", "a.py", 1, 3, 1), item("a.py::g", "a.py", 10, 12, 2)
        ledger.record_delivery("c1", "prompt", "", "q", "x" * 40, [f, g], now=1.0, client="claude-code")
        ledger.record_delivery("x1", "prompt", "", "q", "x" * 40, [f, g], now=1.0, client="codex")
        ledger.record_delivery("x2", "prompt", "", "q", "x" * 40, [f], now=1.0, client="codex")
        ledger.record_tool_use("c1", "Edit", "t1", [Touch("a.py", "edit", 2, 2)], now=2.0, client="claude-code")
        ledger.record_tool_use("x1", "apply_patch", "", [Touch("a.py", "edit", 11, 11)], now=2.0, client="codex")
        ledger.record_tool_use("p1", "view", "", [Touch("a.py", "read", 1, 3)], now=2.0, client="copilot")
        ledger.end_session("c1", "other", now=3.0, client="claude-code")
        ledger.end_session("x1", "complete", now=3.0, client="codex")
        ledger.end_session("x2", "complete", now=3.0, client="codex")
        assert ledger.by_client() == {
            "claude-code": {"deliveries": 1, "hits": 1, "misses": 1, "pending": 0, "hit_rate": 0.5, "tool_uses": 1},
            "codex": {"deliveries": 2, "hits": 1, "misses": 2, "pending": 0, "hit_rate": 0.3333, "tool_uses": 1},
            "copilot": {"deliveries": 0, "hits": 0, "misses": 0, "pending": 0, "hit_rate": 0.0, "tool_uses": 1},
        }
        assert ledger.entity_usage("a.py::f")["by_client"] == {
            "claude-code": {"deliveries": 1, "hits": 1, "misses": 0, "pending": 0, "hit_rate": 1.0},
            "codex": {"deliveries": 2, "hits": 0, "misses": 2, "pending": 0, "hit_rate": 0.0},
        }
        assert ledger.entity_usage("a.py::nothing")["by_client"] == {}
    finally:
        ledger.close()
