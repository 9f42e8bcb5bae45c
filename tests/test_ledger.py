"""Tests for cogd.usage.ledger: deliveries, items, tool uses and sessions in a real state.db."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest

from cogd.inlist import MAX_PARAMS
from cogd.retrieve.pack import PackItem
from cogd.usage.ledger import QUERY_KEEP_CHARS, Ledger, LedgerReader
from cogd.usage.touches import Touch


@pytest.fixture
def db(tmp_path) -> Path:
    return tmp_path / ".cogd" / "state.db"


@pytest.fixture
def ledger(db):
    led = Ledger(db)
    yield led
    led.close()


def items(*specs) -> list[dict]:
    """PackItem dicts from (entity_id, kind, path, start, end, score, chars[, pointer]) tuples, ranked 1..n."""
    out = []
    for rank, spec in enumerate(specs, 1):
        entity_id, kind, path, start, end, score, chars, *rest = spec
        out.append(PackItem(entity_id, kind, path, start, end, score, rank, chars, bool(rest and rest[0])).as_dict())
    return out


def usage3(ledger, entity_id: str) -> dict:
    usage = ledger.entity_usage(entity_id)
    return {k: usage[k] for k in ("retrieval_count", "used_count", "ignored_count")}


def set_outcome(db: Path, delivery_id: int, rank: int, outcome: str) -> None:
    conn = sqlite3.connect(db)
    with conn:
        conn.execute("UPDATE delivery_items SET outcome = ? WHERE delivery_id = ? AND rank = ?",
                     (outcome, delivery_id, rank))
    conn.close()


def test_creates_the_database_and_parent_directory(db):
    assert not db.parent.exists()
    led = Ledger(db)
    led.close()
    conn = sqlite3.connect(db)
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert tables >= {"meta", "deliveries", "delivery_items", "tool_uses", "sessions"}
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.close()


def test_empty_ledger(ledger):
    assert ledger.totals() == {"deliveries": 0, "delivery_items": 0, "hits": 0, "misses": 0, "pending": 0,
                               "hit_rate": 0.0, "tool_uses": 0, "sessions": 0, "sessions_ended": 0}
    assert ledger.deliveries() == []
    assert ledger.tool_uses() == []
    assert usage3(ledger, "a.py::f") == {"retrieval_count": 0, "used_count": 0, "ignored_count": 0}


def test_delivery_with_items_round_trips(ledger):
    pack_items = items(
        ("pkg/geometry.py::Circle.area", "method", "pkg/geometry.py", 10, 12, 3.14159265, 180),
        ("pkg/geometry.py", "file", "pkg/geometry.py", 1, 40, 1.5, 60, True),
    )
    text = "## Context\n" + "x" * 229
    delivery_id = ledger.record_delivery("s1", "prompt", "", "how is the area computed?", text, pack_items, now=1000.5)
    assert isinstance(delivery_id, int) and delivery_id >= 1
    [stored] = ledger.deliveries()
    assert {k: v for k, v in stored.items() if k != "items"} == {
        "id": delivery_id, "session_id": "s1", "event": "prompt", "source": "", "created_at": 1000.5,
        "query": "how is the area computed?", "size_chars": 240, "item_count": 2, "fingerprint": "",
        "closed_at": None, "client": "",
    }
    assert stored["items"] == [
        {"delivery_id": delivery_id, "rank": 1, "entity_id": "pkg/geometry.py::Circle.area", "kind": "method",
         "path": "pkg/geometry.py", "start_line": 10, "end_line": 12, "score": 3.141593, "chars": 180,
         "pointer": 0, "outcome": "pending", "hit_weight": 0.0, "hit_action": "", "hit_level": "",
         "resolved_at": None, "reason": "", "signals": {}},
        {"delivery_id": delivery_id, "rank": 2, "entity_id": "pkg/geometry.py", "kind": "file",
         "path": "pkg/geometry.py", "start_line": 1, "end_line": 40, "score": 1.5, "chars": 60,
         "pointer": 1, "outcome": "pending", "hit_weight": 0.0, "hit_action": "", "hit_level": "",
         "resolved_at": None, "reason": "", "signals": {}},
    ]


def test_each_item_keeps_its_ranking_signals_as_delivered(ledger):
    # What --explain showed at delivery time, kept: rounded, text masked, NaN dropped, bounded.
    [item] = items(("pkg/a.py::f", "function", "pkg/a.py", 1, 3, 2.0, 50))
    secret = "AKIA" + "IOSFODNN7EXAMPLE"  # an AWS access key id shape (split: not a secret in this file)
    item["signals"] = {"bm25_rank": 2, "rrf": 0.0123456789, "vector_rank": 1, "frame": f"traceback frame 1 ({secret})",
                       "nan": float("nan"), "flag": True}
    ledger.record_delivery("s1", "prompt", "", "q", "x" * 50, [item], now=1.0)
    [stored] = ledger.deliveries()
    signals = stored["items"][0]["signals"]
    assert {k: v for k, v in signals.items() if k != "frame"} == {"bm25_rank": 2, "rrf": 0.0123, "vector_rank": 1,
                                                                 "flag": True}
    assert signals["frame"].startswith("traceback frame 1 (") and secret not in signals["frame"]
    [big] = items(("pkg/a.py::g", "function", "pkg/a.py", 5, 6, 1.0, 20))
    big["signals"] = {f"k{n}": "v" * 200 for n in range(40)}  # past the bound: none kept rather than a cut JSON
    ledger.record_delivery("s2", "prompt", "", "q", "x" * 20, [big], now=2.0)
    assert ledger.deliveries("s2")[0]["items"][0]["signals"] == {}


def test_signals_of_one_delivery_mask_each_label_and_keep_index_ids(ledger):
    # Every item quoting the same prompt label gets it masked; an expansion's label is made of
    # entity ids (stored unmasked in entity_id already) and is kept as it was built.
    secret = "AKIA" + "IOSFODNN7EXAMPLE"
    pack_items = items(("pkg/a.py::f", "function", "pkg/a.py", 1, 3, 2.0, 50),
                       ("pkg/a.py::g", "function", "pkg/a.py", 5, 9, 1.0, 40),
                       ("pkg/b.py::h", "function", "pkg/b.py", 2, 4, 0.5, 30))
    for item in pack_items:
        item["signals"] = {"part": f"identifier `{secret}`", "rrf": 0.5,
                           "expanded_from": "caller of pkg/a.py::f (calls/import)"}
    ledger.record_delivery("s1", "prompt", "", "q", "x" * 120, pack_items, now=1.0)
    stored = [i["signals"] for i in ledger.deliveries()[0]["items"]]
    assert [s["expanded_from"] for s in stored] == ["caller of pkg/a.py::f (calls/import)"] * 3
    assert all(s["part"].startswith("identifier `") and secret not in s["part"] for s in stored)
    assert len({s["part"] for s in stored}) == 1


def test_outcome_defaults_to_pending(ledger):
    ledger.record_delivery("s", "session_start", "startup", "", "t", items(("a.py::f", "function", "a.py", 1, 2, 1.0, 10)))
    assert [i["outcome"] for d in ledger.deliveries() for i in d["items"]] == ["pending"]


def test_delivery_without_items_and_session_start_source(ledger):
    delivery_id = ledger.record_delivery("s2", "session_start", "resume", "", "", [], now=5.0)
    [d] = ledger.deliveries()
    assert (d["id"], d["event"], d["source"], d["size_chars"], d["item_count"], d["items"]) == (
        delivery_id, "session_start", "resume", 0, 0, [])


def test_long_query_is_cut(ledger):
    ledger.record_delivery("s", "prompt", "", "q" * (QUERY_KEEP_CHARS + 500), "text", [])
    assert ledger.deliveries()[0]["query"] == "q" * QUERY_KEEP_CHARS
    assert QUERY_KEEP_CHARS == 2000


def test_deliveries_newest_first_filtered_and_limited(ledger):
    ids = [ledger.record_delivery(s, "prompt", "", f"q{n}", "t", [], now=float(n))
           for n, s in enumerate(["a", "b", "a", "c", "a"])]
    assert [d["id"] for d in ledger.deliveries()] == ids[::-1]
    assert [d["query"] for d in ledger.deliveries("a")] == ["q4", "q2", "q0"]
    assert [d["query"] for d in ledger.deliveries("a", limit=2)] == ["q4", "q2"]
    assert [d["query"] for d in ledger.deliveries(limit=1)] == ["q4"]
    assert ledger.deliveries("nobody") == []


def test_duplicate_rank_rolls_back_the_whole_delivery(ledger):
    bad = items(("a.py::f", "function", "a.py", 1, 2, 1.0, 10)) * 2  # rank 1 twice
    with pytest.raises(sqlite3.IntegrityError):
        ledger.record_delivery("s", "prompt", "", "q", "t", bad)
    assert ledger.totals()["deliveries"] == 0 and ledger.totals()["delivery_items"] == 0
    # the ledger is still usable afterwards
    ledger.record_delivery("s", "prompt", "", "q", "t", bad[:1])
    assert ledger.totals()["delivery_items"] == 1


def test_tool_uses_round_trip(ledger):
    touches = [Touch("src/a.py", "edit", 3, 9), Touch("README.md", "write")]
    row = ledger.record_tool_use("s1", "Edit", "toolu_01", touches, now=7.0)
    ledger.record_tool_use("s2", "Read", "", [], now=8.0)
    ledger.record_tool_use("s1", "Bash", "call-x", [Touch("t.py", "mention")], now=9.0)
    all_uses = ledger.tool_uses()
    assert [u["tool_name"] for u in all_uses] == ["Bash", "Read", "Edit"]
    edit = all_uses[-1]
    assert (edit["id"], edit["session_id"], edit["tool_use_id"], edit["created_at"]) == (row, "s1", "toolu_01", 7.0)
    assert edit["touches"] == [
        {"path": "src/a.py", "action": "edit", "start_line": 3, "end_line": 9},
        {"path": "README.md", "action": "write", "start_line": None, "end_line": None},
    ]
    assert [u["tool_name"] for u in ledger.tool_uses("s1")] == ["Bash", "Edit"]
    assert [u["tool_name"] for u in ledger.tool_uses("s1", limit=1)] == ["Bash"]
    assert ledger.tool_uses("s2")[0]["touches"] == []
    assert ledger.totals()["tool_uses"] == 3
    assert ledger.totals()["sessions"] == 0  # tool uses alone do not open a session


def test_totals_and_sessions(ledger):
    ledger.record_delivery("s1", "session_start", "startup", "", "t",
                           items(("a.py::f", "function", "a.py", 1, 2, 1.0, 10),
                                 ("a.py::g", "function", "a.py", 4, 6, 0.5, 10)), now=1.0)
    ledger.record_delivery("s1", "prompt", "", "q", "t", items(("a.py::f", "function", "a.py", 1, 2, 1.0, 10)), now=2.0)
    ledger.record_delivery("s2", "prompt", "", "q", "t", [], now=3.0)
    ledger.record_tool_use("s1", "Read", "", [Touch("a.py", "read")])
    ledger.end_session("s1", "prompt_input_exit", now=10.0)
    totals = ledger.totals()
    assert {k: totals[k] for k in ("deliveries", "delivery_items", "tool_uses", "sessions", "sessions_ended")} == {
        "deliveries": 3, "delivery_items": 3, "tool_uses": 1, "sessions": 2, "sessions_ended": 1}
    # f in the session-start pack: read (whole file) → hit; g too (file-level); the prompt pack's f too.
    assert (totals["hits"], totals["misses"], totals["pending"]) == (3, 0, 0)


def session_row(db: Path, session_id: str):
    conn = sqlite3.connect(db)
    row = conn.execute("SELECT started_at, ended_at, end_reason FROM sessions WHERE session_id = ?",
                       (session_id,)).fetchone()
    conn.close()
    return row


def test_end_session_is_idempotent_first_end_wins(ledger, db):
    ledger.record_delivery("s1", "session_start", "startup", "", "t", [], now=100.0)
    ledger.record_delivery("s1", "prompt", "", "q", "t", [], now=150.0)  # a later delivery keeps the start
    ledger.end_session("s1", "clear", now=200.0)
    ledger.end_session("s1", "other", now=300.0)
    ledger.end_session("s1", "logout", now=400.0)
    assert session_row(db, "s1") == (100.0, 200.0, "clear")
    assert ledger.totals()["sessions"] == 1 and ledger.totals()["sessions_ended"] == 1


def test_end_of_an_unknown_session_creates_it(ledger, db):
    ledger.end_session("ghost", "other", now=50.0)
    assert session_row(db, "ghost") == (50.0, 50.0, "other")
    ledger.record_delivery("ghost", "prompt", "", "q", "t", [], now=60.0)  # does not reopen or restart it
    assert session_row(db, "ghost") == (50.0, 50.0, "other")
    assert ledger.totals()["sessions_ended"] == 1


def test_entity_usage_counts(ledger, db):
    f = ("a.py::f", "function", "a.py", 1, 2, 1.0, 10)
    g = ("a.py::g", "function", "a.py", 4, 6, 0.5, 10)
    # three sessions: no delivery closes another
    d1 = ledger.record_delivery("s1", "prompt", "", "q1", "t", items(f, g))
    d2 = ledger.record_delivery("s2", "prompt", "", "q2", "t", items(g, f))
    d3 = ledger.record_delivery("s3", "prompt", "", "q3", "t", items(f))
    assert usage3(ledger, "a.py::f") == {"retrieval_count": 3, "used_count": 0, "ignored_count": 0}
    set_outcome(db, d1, 1, "hit")
    set_outcome(db, d2, 2, "miss")
    set_outcome(db, d3, 1, "hit")
    set_outcome(db, d1, 2, "miss")  # g
    assert usage3(ledger, "a.py::f") == {"retrieval_count": 3, "used_count": 2, "ignored_count": 1}
    assert usage3(ledger, "a.py::g") == {"retrieval_count": 2, "used_count": 0, "ignored_count": 1}
    assert usage3(ledger, "a.py::h") == {"retrieval_count": 0, "used_count": 0, "ignored_count": 0}
    assert [i["outcome"] for i in ledger.deliveries()[-1]["items"]] == ["hit", "miss"]


def test_ledger_survives_reopen(db):
    led = Ledger(db)
    d = led.record_delivery("s", "prompt", "", "q", "t", items(("a.py::f", "function", "a.py", 1, 2, 1.0, 10)))
    led.record_tool_use("s", "Read", "", [Touch("a.py", "read")])
    led.end_session("s", "other")
    led.close()
    led = Ledger(db)
    try:
        assert led.totals() == {"deliveries": 1, "delivery_items": 1, "hits": 1, "misses": 0, "pending": 0,
                                "hit_rate": 1.0, "tool_uses": 1, "sessions": 1, "sessions_ended": 1}
        assert led.utility.evidence("a.py::f") == (0.0, 0.0)  # a read is a hit but no evidence of use  # reloaded from entity_utility
        assert led.deliveries()[0]["id"] == d
    finally:
        led.close()


def test_concurrent_writers_from_threads(ledger):
    def work(n: int) -> None:
        for k in range(20):
            ledger.record_delivery(f"s{n}", "prompt", "", f"{n}-{k}", "t",
                                   items((f"m{n}.py::f{k}", "function", f"m{n}.py", 1, 2, 1.0, 5)))
            ledger.record_tool_use(f"s{n}", "Read", "", [Touch(f"m{n}.py", "read")])

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert ledger.totals() == {"deliveries": 80, "delivery_items": 80, "hits": 80, "misses": 0, "pending": 0,
                               "hit_rate": 1.0, "tool_uses": 80, "sessions": 4, "sessions_ended": 0}
    assert len(ledger.deliveries("s2")) == 20


# ---- LedgerReader: the read-only view memory consolidation and doctor use ----------------

def test_reader_answers_from_a_real_ledger(ledger, db):
    f = ("a.py::f", "function", "a.py", 1, 2, 1.0, 10)
    g = ("a.py::g", "function", "a.py", 4, 6, 0.5, 10)
    ledger.record_delivery("s1", "prompt", "", "q1", "t", items(f, g), now=100.0)
    ledger.record_tool_use("s1", "Edit", "", [Touch("a.py", "edit", 1, 2)], now=110.0)  # f: a hit
    ledger.end_session("s1", "other", now=120.0)  # g: a miss
    ledger.record_delivery("s2", "prompt", "", "q2", "t", items(f), now=200.0)
    ledger.end_session("s2", "other", now=210.0)  # f: a miss
    reader = LedgerReader.open(db)
    try:
        assert reader.has_usage is True
        assert reader.usage(["a.py::f", "a.py::g", "a.py::h"]) == {"a.py::f": (2, 1, 110.0), "a.py::g": (1, 0, None)}
        assert reader.delivery_counts(["a.py::f", "a.py::g", "a.py::h"]) == {"a.py::f": (2, 1), "a.py::g": (1, 0)}
        assert reader.hit_sessions(["a.py::f", "a.py::g"]) == ["s1"]
        assert reader.hit_sessions(["a.py::g"]) == []
        assert reader.outcomes_since(["a.py::f"], 150.0) == (1, 0, 110.0)  # the hit was before, its time is not
        assert reader.outcomes_since(["a.py::f", "a.py::g"], 0.0) == (2, 1, 110.0)
        assert reader.outcomes_since(["a.py::g"], 0.0) == (1, 0, None)
        assert reader.usage([]) == {} and reader.outcomes_since([], 0.0) == (0, 0, None)
    finally:
        reader.close()


def test_reader_chunks_long_id_lists(ledger, db):
    """700 delivered ids, read back with SQLite's host-parameter limit lowered to the chunk size."""
    specs = [(f"m/{i}.md", "memory", f"m/{i}.md", 1, 1, 1.0, 10) for i in range(700)]
    ledger.record_delivery("s", "prompt", "", "q", "t", items(*specs), now=50.0)
    ledger.record_tool_use("s", "Edit", "", [Touch("m/699.md", "edit", 1, 1)], now=60.0)
    ids = [s[0] for s in specs]
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    conn.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, 501)  # a chunk of 500 plus `since`
    reader = LedgerReader(conn)
    try:
        assert len(reader.usage(ids)) == 700
        assert reader.delivery_counts(ids)["m/699.md"] == (1, 1)
        assert sum(n for n, _h in reader.delivery_counts(ids).values()) == 700
        assert reader.hit_sessions(ids) == ["s"]
        assert reader.outcomes_since(ids, 0.0) == (0, 1, 60.0)  # the others are still pending
    finally:
        conn.close()


def test_reader_on_a_state_db_without_usage_tables(tmp_path):
    """Only memory has written to state.db so far (no daemon ran): every answer is empty, nothing is created."""
    from cogd.memory.events import MemoryLedger

    db = tmp_path / ".cogd" / "state.db"
    MemoryLedger(db).close()
    reader = LedgerReader.open(db)
    try:
        assert reader.has_usage is False
        assert reader.usage(["x"]) == {} and reader.delivery_counts(["x"]) == {}
        assert reader.hit_sessions(["x"]) == [] and reader.outcomes_since(["x"], 0.0) == (0, 0, None)
    finally:
        reader.close()
    conn = sqlite3.connect(db)
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    conn.close()
    assert not tables & {"deliveries", "delivery_items", "entity_utility"}


def test_reader_of_a_missing_file_is_empty(tmp_path):
    reader = LedgerReader.open(tmp_path / "state.db")
    assert reader.has_usage is False and reader.usage(["x"]) == {}
    reader.close()
    assert not (tmp_path / "state.db").exists()


def test_reader_on_a_ledger_from_before_the_migrations(tmp_path):
    """The first release's tables (no resolved_at): a hit's time is its delivery's."""
    from cogd.usage.ledger import MIGRATIONS, SCHEMA

    db = tmp_path / "state.db"
    conn = sqlite3.connect(db)
    conn.executescript(SCHEMA)  # the base tables; MIGRATIONS add their columns later
    assert ("delivery_items", "resolved_at", "REAL") in MIGRATIONS
    assert "resolved_at" not in {r[1] for r in conn.execute("PRAGMA table_info(delivery_items)")}
    with conn:
        conn.execute("INSERT INTO deliveries(id, session_id, event, created_at, size_chars, item_count) "
                     "VALUES (1, 's', 'prompt', 300.0, 10, 1)")
        conn.execute("INSERT INTO delivery_items(delivery_id, rank, entity_id, kind, path, start_line, end_line, "
                     "score, chars, outcome) VALUES (1, 1, 'm/1.md', 'memory', 'm/1.md', 1, 1, 1.0, 10, 'hit')")
    conn.close()
    reader = LedgerReader.open(db)
    try:
        assert reader.outcomes_since(["m/1.md"], 0.0) == (0, 1, 300.0)
        assert reader.hit_sessions(["m/1.md"]) == ["s"]
    finally:
        reader.close()


def test_reader_refuses_a_linked_state_db(tmp_path):
    from cogd.safepath import UnsafePath

    real = tmp_path / "elsewhere.db"
    Ledger(real).close()
    (tmp_path / ".cogd").mkdir()
    (tmp_path / ".cogd" / "state.db").symlink_to(real)
    with pytest.raises(UnsafePath):
        LedgerReader.open(tmp_path / ".cogd" / "state.db")


def test_the_ledger_cuts_its_own_long_in_lists(ledger):
    """A tool use touching 600 delivered paths, and a session end closing 600 open deliveries, with
    SQLite's host-parameter limit lowered to the chunk size: both run (unchunked, each would fail)."""
    ledger._conn.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, MAX_PARAMS)
    specs = [(f"p{i}.py::f", "function", f"p{i}.py", 1, 5, 1.0, 10) for i in range(600)]
    ledger.record_delivery("s", "prompt", "", "q", "t", items(*specs), now=10.0)
    touches = [Touch(f"p{i}.py", "edit", 1, 5) for i in range(600)]
    _tool_use, hits = ledger.record_tool_use_with_hits("s", "MultiEdit", "", touches, now=20.0)
    assert len(hits) == 600 and {h["entity_id"] for h in hits} == {s[0] for s in specs}
    for n in range(600):  # resumed sessions' packs close nothing: 600 open deliveries
        ledger.record_delivery("t", "session_start", "resume", "", "t", items(specs[n]), now=30.0 + n)
    assert ledger.end_session("t", "exit", now=1000.0) == 600
    assert usage3(ledger, "p0.py::f") == {"retrieval_count": 2, "used_count": 1, "ignored_count": 1}

