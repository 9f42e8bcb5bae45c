"""Hit/miss accounting and utility: cogd.usage.outcomes, cogd.usage.utility and the ledger's resolution."""

from __future__ import annotations

import math
import sqlite3

import pytest

from cogd.retrieve.pack import PackItem
from cogd.usage.ledger import Ledger
from cogd.usage.outcomes import PendingItem, match_hits, miss_weight
from cogd.usage.touches import Touch
from cogd.usage.utility import UtilityModel, posterior_mean

W = {"edit": 1.0, "read": 0.5, "search": 0.2}

F = ("a.py::f", "function", "a.py", 10, 20)
G = ("a.py::g", "function", "a.py", 30, 40)
FILE = ("a.py", "file", "a.py", 1, 50)
H = ("b.py::h", "function", "b.py", 1, 9)


def pending(*specs) -> list[PendingItem]:
    return [PendingItem((1, rank), *spec) for rank, spec in enumerate(specs, 1)]


def hits_of(specs, touches) -> dict[str, tuple[float, str, str]]:
    return {h.entity_id: (h.weight, h.action, h.level) for h in match_hits(pending(*specs), touches, W)}


def test_a_ranged_edit_hits_only_overlapping_items_and_the_file():
    assert hits_of([F, G, FILE, H], [Touch("a.py", "edit", 18, 25)]) == {
        "a.py::f": (1.0, "edit", "entity"), "a.py": (1.0, "edit", "file")}


def test_a_whole_file_read_is_a_file_level_hit_for_every_item_of_the_file():
    assert hits_of([F, G, FILE, H], [Touch("a.py", "read")]) == {
        "a.py::f": (0.5, "read", "file"), "a.py::g": (0.5, "read", "file"), "a.py": (0.5, "read", "file")}


def test_a_search_listing_hits_only_the_file_item_but_a_grep_line_hits_its_function():
    assert hits_of([F, G, FILE], [Touch("a.py", "search")]) == {"a.py": (0.2, "search", "file")}
    assert hits_of([F, G], [Touch("a.py", "search", 35, 35)]) == {"a.py::g": (0.2, "search", "entity")}
    assert hits_of([F, G], [Touch("a.py", "mention")]) == {}


def test_the_strongest_touch_wins_and_adjacent_ranges_do_not_count():
    touches = [Touch("a.py", "read", 1, 50), Touch("a.py", "edit", 31, 31), Touch("a.py", "read", 21, 29)]
    assert hits_of([F, G], touches) == {"a.py::f": (0.5, "read", "entity"), "a.py::g": (1.0, "edit", "entity")}
    assert hits_of([F], [Touch("a.py", "edit", 21, 29)]) == {}


def test_posterior_mean_base_rate_and_file_shrinkage():
    model = UtilityModel(alpha=1.0, beta=3.0)
    assert model.prior_mean == model.base_rate() == 0.25
    assert model.utility("x.py::new", "x.py") == 0.25  # nothing known: the base rate, factor exactly 1
    assert model.factor("x.py::new", "x.py", 2.0)[0] == 1.0
    model.add("a.py::f", "a.py", 1.0, 0.0)  # one edit hit
    base = model.base_rate()
    assert base == pytest.approx(posterior_mean(1, 0, 1, 3)) == pytest.approx(0.4)
    assert model.utility("a.py::f") == pytest.approx((4 * 0.4 + 1) / 5)
    # a sibling never delivered borrows its file's mean, which sits above the base rate
    assert model.file_utility("a.py") == pytest.approx((4 * 0.4 + 1) / 5)
    assert model.utility("a.py::g", "a.py") == pytest.approx(0.52)
    assert model.factor("a.py::g", "a.py", 1.0)[0] == pytest.approx(math.exp(0.52 - 0.4))
    # an entity delivered twice and ignored falls below the base rate
    model.add("c.py::k", "c.py", 0.0, 1.0)
    model.add("c.py::k", "c.py", 0.0, 1.0)
    base = model.base_rate()
    assert base == pytest.approx(2 / 7)
    low = model.utility("c.py::k", "c.py")
    assert low == pytest.approx(4 * base / 6)  # its file holds no other evidence: the file mean is the base
    factor, _ = model.factor("c.py::k", "c.py", 1.0)
    assert factor == pytest.approx(math.exp(low - base)) and factor < 1.0
    # code never delivered stays neutral whatever the base rate
    assert model.factor("z.py::new", "z.py", 1.0)[0] == pytest.approx(1.0)
    with pytest.raises(ValueError):
        UtilityModel(alpha=0.0)


def item_dicts(*specs) -> list[dict]:
    return [PackItem(e, k, p, s, t, 1.0, rank, 10).as_dict() for rank, (e, k, p, s, t) in enumerate(specs, 1)]


@pytest.fixture
def ledger(tmp_path):
    led = Ledger(tmp_path / "state.db", UtilityModel(1.0, 3.0), W, miss_halflife=0)  # every miss counts 1
    yield led
    led.close()


def outcomes(ledger: Ledger, delivery_id: int) -> list[tuple[str, str, float]]:
    [d] = [d for d in ledger.deliveries(limit=1000) if d["id"] == delivery_id]
    return [(i["entity_id"], i["outcome"], i["hit_weight"]) for i in d["items"]]


def test_hits_then_misses_at_the_next_prompt_and_session_end(ledger):
    start = ledger.record_delivery("s", "session_start", "startup", "", "t", item_dicts(H), now=1.0)
    p1 = ledger.record_delivery("s", "prompt", "", "q1", "t", item_dicts(F, G), now=2.0)
    ledger.record_tool_use("s", "Read", "", [Touch("a.py", "read", 5, 25)], now=3.0)
    ledger.record_tool_use("s", "Edit", "", [Touch("a.py", "edit", 12, 12)], now=4.0)  # read → edit upgrade
    ledger.record_tool_use("other", "Edit", "", [Touch("a.py", "edit", 30, 40)], now=4.5)  # another session
    assert outcomes(ledger, p1) == [("a.py::f", "hit", 1.0), ("a.py::g", "pending", 0.0)]
    p2 = ledger.record_delivery("s", "prompt", "", "q2", "t", item_dicts(G), now=5.0)
    # the next prompt closes the first prompt pack: g is a miss there, pending in the new pack
    assert outcomes(ledger, p1) == [("a.py::f", "hit", 1.0), ("a.py::g", "miss", 0.0)]
    assert outcomes(ledger, p2) == [("a.py::g", "pending", 0.0)]
    assert outcomes(ledger, start) == [("b.py::h", "pending", 0.0)]  # the session-start pack stays open
    ledger.record_tool_use("s", "Edit", "", [Touch("a.py", "edit", 1, 2)], now=6.0)  # touches nothing delivered
    assert ledger.end_session("s", "other", now=7.0) == 2
    assert outcomes(ledger, p2) == [("a.py::g", "miss", 0.0)]
    assert outcomes(ledger, start) == [("b.py::h", "miss", 0.0)]
    totals = ledger.totals()
    assert (totals["hits"], totals["misses"], totals["pending"], totals["hit_rate"]) == (1, 3, 0, 0.25)
    f, g = ledger.entity_usage("a.py::f"), ledger.entity_usage("a.py::g")
    assert (f["retrieval_count"], f["used_count"], f["ignored_count"], f["successes"], f["failures"]) == (1, 1, 0, 1.0, 0.0)
    assert (g["retrieval_count"], g["used_count"], g["ignored_count"], g["successes"], g["failures"]) == (2, 0, 2, 0.0, 2.0)
    # evidence: f (1, 0), g (0, 2), h (0, 1) → base rate (1 + 1) / (4 + 4) = 0.25
    assert f["base_rate"] == pytest.approx(0.25, abs=1e-4)
    assert f["utility"] == pytest.approx(0.4, abs=1e-4) and g["utility"] == pytest.approx(1 / 6, abs=1e-4)
    assert ledger.utility.evidence("a.py::f") == (1.0, 0.0)


def test_a_touch_before_the_delivery_or_after_its_close_does_not_count(ledger):
    ledger.record_tool_use("s", "Edit", "", [Touch("a.py", "edit", 10, 20)], now=1.0)
    d = ledger.record_delivery("s", "prompt", "", "q", "t", item_dicts(F), now=2.0)
    ledger.record_tool_use("s", "Edit", "", [Touch("a.py", "edit", 10, 20)], now=1.5)  # clock earlier than the pack
    assert outcomes(ledger, d) == [("a.py::f", "pending", 0.0)]
    ledger.end_session("s", "other", now=3.0)
    ledger.record_tool_use("s", "Edit", "", [Touch("a.py", "edit", 10, 20)], now=4.0)
    assert outcomes(ledger, d) == [("a.py::f", "miss", 0.0)]


def test_resume_closes_nothing_clear_closes_everything(ledger):
    d1 = ledger.record_delivery("s", "prompt", "", "q", "t", item_dicts(F), now=1.0)
    ledger.record_delivery("s", "session_start", "resume", "", "t", item_dicts(H), now=2.0)
    assert outcomes(ledger, d1) == [("a.py::f", "pending", 0.0)]
    ledger.record_delivery("s", "session_start", "clear", "", "t", item_dicts(G), now=3.0)
    assert outcomes(ledger, d1) == [("a.py::f", "miss", 0.0)]


def test_retracted_delivery_gives_back_its_retrieval_count(ledger):
    d = ledger.record_delivery("s", "prompt", "", "q", "t", item_dicts(F), now=1.0)
    assert ledger.entity_usage("a.py::f")["retrieval_count"] == 1
    assert ledger.retract_delivery(d) is True
    assert ledger.entity_usage("a.py::f")["retrieval_count"] == 0


def test_a_read_only_distractor_earns_less_than_an_edit(ledger):
    for n in range(3):
        ledger.record_delivery(f"s{n}", "prompt", "", "q", "t", item_dicts(F, H), now=10.0 * n)
        ledger.record_tool_use(f"s{n}", "Read", "", [Touch("b.py", "read")], now=10.0 * n + 1)
        ledger.record_tool_use(f"s{n}", "Edit", "", [Touch("a.py", "edit", 15, 16)], now=10.0 * n + 2)
        ledger.end_session(f"s{n}", "other", now=10.0 * n + 3)
    edited, read = ledger.entity_usage("a.py::f"), ledger.entity_usage("b.py::h")
    assert edited["used_count"] == read["used_count"] == 3
    base = (1 + 4.5) / (4 + 4.5)  # successes 3 (edits) + 1.5 (reads at weight 0.5 here), no failures
    assert edited["base_rate"] == pytest.approx(base, abs=1e-4)
    assert edited["utility"] == pytest.approx((4 * base + 3) / (4 + 3), abs=1e-4)
    assert read["utility"] == pytest.approx((4 * base + 1.5) / (4 + 1.5), abs=1e-4)
    assert edited["utility"] > read["utility"]


OLD_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE deliveries (id INTEGER PRIMARY KEY, session_id TEXT NOT NULL, event TEXT NOT NULL,
    source TEXT NOT NULL DEFAULT '', created_at REAL NOT NULL, query TEXT NOT NULL DEFAULT '',
    size_chars INTEGER NOT NULL, item_count INTEGER NOT NULL);
CREATE TABLE delivery_items (delivery_id INTEGER NOT NULL, rank INTEGER NOT NULL, entity_id TEXT NOT NULL,
    kind TEXT NOT NULL, path TEXT NOT NULL, start_line INTEGER NOT NULL, end_line INTEGER NOT NULL,
    score REAL NOT NULL, chars INTEGER NOT NULL, pointer INTEGER NOT NULL DEFAULT 0,
    outcome TEXT NOT NULL DEFAULT 'pending', PRIMARY KEY (delivery_id, rank));
INSERT INTO deliveries VALUES (1, 's', 'prompt', '', 1.0, 'q', 10, 1);
INSERT INTO delivery_items VALUES (1, 1, 'a.py::f', 'function', 'a.py', 10, 20, 1.0, 10, 0, 'pending');
"""


def test_an_old_ledger_is_migrated_in_place_and_keeps_its_rows(tmp_path):
    db = tmp_path / "state.db"
    conn = sqlite3.connect(db)
    conn.executescript(OLD_SCHEMA)
    conn.close()
    led = Ledger(db, UtilityModel(), W)
    try:
        led.record_tool_use("s", "Edit", "", [Touch("a.py", "edit", 12, 12)], now=2.0)
        assert outcomes(led, 1) == [("a.py::f", "hit", 1.0)]
    finally:
        led.close()


def test_a_miss_weighs_by_how_likely_the_item_was_looked_at(tmp_path):
    assert miss_weight(1, False, 5.0) == 1.0
    assert miss_weight(6, False, 5.0) == pytest.approx(0.5)
    assert miss_weight(6, True, 5.0) == pytest.approx(0.25)
    assert miss_weight(40, False, 0.0) == 1.0
    led = Ledger(tmp_path / "state.db", UtilityModel(), W, miss_halflife=5.0, pointer_miss_weight=0.5)
    try:
        specs = [("m.py::f%d" % n, "function", "m.py", 10 * n + 1, 10 * n + 5) for n in range(12)]
        items = item_dicts(*specs)
        items[-1]["pointer"] = True
        led.record_delivery("s", "prompt", "", "q", "t", items, now=1.0)
        led.end_session("s", "other", now=2.0)
        assert led.entity_usage("m.py::f0")["failures"] == 1.0
        assert led.entity_usage("m.py::f5")["failures"] == pytest.approx(0.5, abs=1e-4)
        assert led.entity_usage("m.py::f11")["failures"] == pytest.approx(0.5 / (1 + 11 / 5), abs=1e-4)
        assert all(led.entity_usage(e)["ignored_count"] == 1 for e, *_ in specs)
    finally:
        led.close()
