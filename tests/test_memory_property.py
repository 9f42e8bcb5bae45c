"""Property: whatever mix of API operations, CLI-style edits and hand edits of the files happens,
the projection never holds a state the lattice forbids, and no event row ever changes (erasure's
redaction of a purged entity's text is the one sanctioned exception).

Real store, real files, real SQLite; hypothesis picks the sequence.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cogd.memory import lattice
from cogd.memory.api import MemoryStore
from cogd.memory.errors import MemoryRefused

TEXTS = [
    "parse_date returns naive datetimes",
    "PARSE_DATE  returns naive datetimes!",  # the same claim, folded
    "the socket is created with mode 0600",
    "run the suite with two workers",
    "the index is a projection of the work tree",
    "hooks exit within 1.5 seconds",
]
TYPES = ["observation", "rule", "knowledge"]
SOURCES = ["agent", "human"]
STATUSES = list(lattice.STATUSES)

memory_index = st.integers(min_value=0, max_value=7)
record_op = st.tuples(st.just("record"), st.sampled_from(TYPES), st.integers(0, len(TEXTS) - 1),
                      st.sampled_from(SOURCES))
operations = st.one_of(
    record_op,
    st.tuples(st.just("transition"), memory_index, st.sampled_from(STATUSES)),
    st.tuples(st.just("supersede"), memory_index, memory_index),
    st.tuples(st.just("verify"), memory_index),
    st.tuples(st.just("edit"), memory_index, st.sampled_from(STATUSES)),
    st.tuples(st.just("hand_status"), memory_index, st.sampled_from(STATUSES)),
    st.tuples(st.just("hand_body"), memory_index, st.integers(0, len(TEXTS) - 1)),
    st.tuples(st.just("hand_break"), memory_index),
    st.tuples(st.just("hand_delete"), memory_index),
    st.tuples(st.just("purge"), memory_index),
    st.tuples(st.just("sync")),
    st.tuples(st.just("rebuild")),
)

ACCEPTED_EXCLUDED = ("illegal_transition", "refused", "file_removed", "purge")
# Events that record something about a file but change no status (old and new are both None):
# they are not links of the status chain.
NOT_TRANSITIONS = ("secret_masked",)


def _events(state_db: Path) -> list[tuple]:
    conn = sqlite3.connect(state_db)
    try:
        return conn.execute("SELECT id, at, actor, entity_id, action, old_status, new_status, pre_image, detail, "
                            "redacted FROM events ORDER BY id").fetchall()
    finally:
        conn.close()


def _touch_write(path: Path, text: str) -> None:
    before = path.stat().st_mtime_ns
    path.write_text(text, encoding="utf-8")
    if path.stat().st_mtime_ns == before:
        os.utime(path, ns=(before + 1_000_000, before + 1_000_000))


def _check(store: MemoryStore, state_db: Path, before: list[tuple], purged: set[str]) -> list[tuple]:
    after = _events(state_db)
    assert len(after) >= len(before)
    for old, new in zip(before, after):
        if old != new:  # only erasure may touch a row: same facts, text replaced by a hash
            assert new[3] in purged and new[9] == 1, (old, new)
            assert old[:7] == new[:7]
            assert new[7] is None or new[7].startswith("sha256:")
    by_entity: dict[str, list[tuple]] = {}
    for row in after:
        by_entity.setdefault(row[3], []).append(row)
    for row in store.projection.rows():
        status = row["status"]
        assert status in lattice.STATUSES
        chain = [e for e in by_entity.get(row["id"], []) if e[4] not in ACCEPTED_EXCLUDED]
        assert chain, f"{row['id']} is projected without any accepted event"
        assert all(e[5] is None and e[6] is None for e in chain if e[4] in NOT_TRANSITIONS), chain
        chain = [e for e in chain if e[4] not in NOT_TRANSITIONS]
        previous = None
        for event in chain:
            action, old, new = event[4], event[5], event[6]
            if previous is not None:
                assert old == previous, (row["id"], chain)
            assert lattice.allowed(old, new, arrival=old is None and event[2] == "sync"), (row["id"], action, old, new)
            previous = new
        assert status == previous, (row["id"], status, chain)
    return after


@settings(max_examples=45, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(record_op, min_size=1, max_size=4), st.lists(operations, min_size=1, max_size=20))
def test_random_operations_never_break_the_lattice_or_rewrite_events(prelude, more):
    ops = prelude + more
    workdir = Path(tempfile.mkdtemp(prefix="cogd-prop-"))
    try:
        (workdir / ".cogd" / "index").mkdir(parents=True)
        state_db = workdir / ".cogd" / "state.db"
        store = MemoryStore(workdir, state_db, workdir / ".cogd" / "index")
        ids: list[str] = []
        purged: set[str] = set()
        before: list[tuple] = []

        def pick(i: int) -> str | None:
            return ids[i % len(ids)] if ids else None

        def file_of(entity_id: str) -> Path | None:
            found = list((workdir / ".cogd" / "memory").glob(f"*/{entity_id}.md"))
            return found[0] if found else None

        try:
            for op in ops:
                kind = op[0]
                try:
                    if kind == "record":
                        ids.append(store.record(op[1], TEXTS[op[2]], source=op[3])["record"]["id"])
                    elif kind == "transition" and pick(op[1]):
                        store.transition(pick(op[1]), op[2], reason="property test")
                    elif kind == "supersede" and pick(op[1]):
                        store.supersede(pick(op[1]), pick(op[2]))
                    elif kind == "verify" and pick(op[1]):
                        store.verify(pick(op[1]))
                    elif kind == "edit" and pick(op[1]):
                        got = store.get(pick(op[1]))
                        status = got["record"]["status"]
                        store.edit(pick(op[1]), got["text"].replace(f"status: {status}", f"status: {op[2]}", 1))
                    elif kind in ("hand_status", "hand_body", "hand_break", "hand_delete") and pick(op[1]):
                        path = file_of(pick(op[1]))
                        if path is not None:
                            text = path.read_text(encoding="utf-8")
                            if kind == "hand_status":
                                lines = [f"status: {op[2]}" if line.startswith("status:") else line
                                         for line in text.split("\n")]
                                _touch_write(path, "\n".join(lines))
                            elif kind == "hand_body":
                                head, sep, _ = text.partition("\n---\n")
                                _touch_write(path, head + sep + "\n" + TEXTS[op[2]] + "\n")
                            elif kind == "hand_break":
                                _touch_write(path, text.replace("type:", "type: [", 1))
                            else:
                                path.unlink()
                    elif kind == "purge" and pick(op[1]):
                        store.purge(pick(op[1]))
                        purged.add(pick(op[1]))
                    elif kind == "sync":
                        store.sync()
                    elif kind == "rebuild":
                        store.close()
                        for suffix in ("", "-wal", "-shm"):
                            (workdir / ".cogd" / "index" / f"memory.db{suffix}").unlink(missing_ok=True)
                        store = MemoryStore(workdir, state_db, workdir / ".cogd" / "index")
                except MemoryRefused as exc:
                    assert exc.kind in ("illegal_transition", "tombstoned", "secret_detected", "duplicate",
                                        "not_found", "bad_request")
                store.sync()
                before = _check(store, state_db, before, purged)
        finally:
            store.close()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
