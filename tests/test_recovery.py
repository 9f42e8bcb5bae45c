"""Damaged stores: projections are moved aside and rebuilt, the ledger is never replaced silently,
and a daemon that cannot start is not started again on every prompt (docs/architecture.md).

Real daemons on real sockets, real SQLite and LanceDB files damaged on disk, the real ``cogd``
and ``cogd-hook`` processes: each test runs the real ``cogd`` command where its process is the
point (a start, an in-process command that must not print a traceback, a stop), and the steps
around it (status, index, memory commands, doctor) as the same CLI code in this process
(``here``: :func:`conftest.cogd_in_process`). Every daemon a test starts is stopped by the
``repos`` fixture's finaliser, even when the test fails.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from conftest import COGD_HOOK, HOOK_DEADLINE_MS, Daemon, cogd_in_process as here, git, make_repo, run_cogd, wait_for

CODE = {
    "shapes.py": (
        '"""Shapes and their areas."""\n\n'
        "class Circle:\n"
        '    """A circle of a given radius."""\n\n'
        "    def __init__(self, radius):\n"
        "        self.radius = radius\n\n"
        "    def area(self):\n"
        '        """Its area."""\n'
        "        return 3.14159 * self.radius ** 2\n\n\n"
        "def total_area(shapes):\n"
        '    """The sum of the areas of ``shapes``."""\n'
        "    return sum(s.area() for s in shapes)\n"
    ),
    "report.py": (
        "from shapes import Circle, total_area\n\n\n"
        "def summary(radii):\n"
        '    """One line about circles of these radii."""\n'
        "    return f'{len(radii)} circles, {total_area([Circle(r) for r in radii]):.1f}'\n"
    ),
}
LEXICAL = "[embed]\nenabled = false\n"


def daemon_pids(root: Path) -> list[int]:
    """Pids of ``cogd.daemon`` processes serving ``root`` (from /proc, zombies excluded)."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(") ", 1)[-1][:1]
        except OSError:
            continue
        if b"cogd.daemon" in argv and os.fsencode(str(root)) in argv and state != "Z":
            pids.append(int(entry))
    return pids


@pytest.fixture
def repos(tmp_path):
    """``make(name, files, config)`` → a git repository with ``.cogd/config.toml``; its daemons
    are stopped afterwards (what ``cogd stop`` does, in this process, then SIGTERM and SIGKILL
    for any left: :meth:`conftest.Daemon.stop`)."""
    made: list[Path] = []

    def make(name: str = "repo", files: dict | None = None, config: str = LEXICAL) -> Path:
        root = make_repo(tmp_path / name, files if files is not None else CODE)
        (root / ".cogd").mkdir(exist_ok=True)
        (root / ".cogd" / "config.toml").write_text(config, encoding="utf-8")
        made.append(root)
        return root

    make.made = made  # a test adds roots it created otherwise (a clone)
    yield make
    for root in made:
        Daemon(root).stop()
        for pid in daemon_pids(root):  # found by this module's own /proc reading too
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def status(root: Path) -> dict:
    return json.loads(here(root, "status", "--json").stdout)


def start_indexed(root: Path) -> dict:
    run_cogd(root, "start")  # the real command; the steps around a test's subject run in-process (``here``)
    here(root, "index")
    return status(root)


def checkpoint(db: Path) -> None:
    """Fold the WAL into the database file so damage to the file cannot be papered over by it."""
    conn = sqlite3.connect(db)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    for suffix in ("-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)


def truncate(db: Path, size: int = 8192) -> None:
    checkpoint(db)
    assert db.stat().st_size > 2 * size, f"{db} is too small to truncate meaningfully"
    os.truncate(db, size)


def garble(db: Path) -> None:
    """Overwrite the head of every page but the first with junk (the schema stays readable)."""
    checkpoint(db)
    size = db.stat().st_size
    assert size >= 3 * 4096
    junk = bytes((i * 37 + 11) % 256 for i in range(512))
    with open(db, "r+b") as fh:
        for offset in range(4096, size, 4096):
            fh.seek(offset)
            fh.write(junk)


def moved_copies(folder: Path, name: str) -> list[str]:
    """``<name>.corrupt-*`` entries in ``folder`` (SQLite companions -wal/-shm left out)."""
    return sorted(p.name for p in folder.iterdir()
                  if p.name.startswith(f"{name}.corrupt-") and not p.name.endswith(("-wal", "-shm")))


def recoveries(result: dict, store: str) -> list[dict]:
    return [e for e in result["recovery"]["projections"] if e["store"] == store]


def test_truncated_index_db_is_moved_aside_and_rebuilt(repos):
    root = repos()
    before = start_indexed(root)["index"]
    assert (before["files"], before["entities"]) == (2, 5)  # Circle, __init__, area, total_area, summary
    index_dir = root / ".cogd" / "index"
    names = []
    for round_ in (1, 2):
        here(root, "stop")
        truncate(index_dir / "index.db")
        here(root, "start")  # today's failure: "database disk image is malformed", no daemon
        here(root, "index")
        result = status(root)
        assert (result["index"]["files"], result["index"]["entities"]) == (2, 5)
        copies = moved_copies(index_dir, "index.db")
        assert len(copies) == 1, copies  # only the newest copy is kept
        names.append(copies[0])
        events = recoveries(result, "index.db")
        assert len(events) == 1 and events[0]["moved_to"] == copies[0]
        assert events[0]["reason"] == "database disk image is malformed"
        text = here(root, "status").stdout
        assert text.count("index.db.corrupt-") == 1 and copies[0] in text
        log = (root / ".cogd" / "logs" / "daemon.log").read_text(encoding="utf-8")
        assert log.count(f"moved aside to {copies[0]}") == 1
    assert names[0] != names[1]
    # The damaged copy is kept as it was: 8,192 bytes.
    assert (index_dir / names[1]).stat().st_size == 8192


def test_garbled_memory_db_is_rebuilt_and_memory_list_works(repos):
    root = repos()
    here(root, "start")
    ids = {json.loads(here(root, "memory", "add", kind, text, "--json").stdout)["record"]["id"]
           for kind, text in (("rule", "Run the shape tests before committing"),
                              ("observation", "total_area accepts any iterable of shapes"))}
    here(root, "stop")
    memory_db = root / ".cogd" / "index" / "memory.db"
    garble(memory_db)
    # No daemon: the CLI opens the stores in-process.
    proc = run_cogd(root, "memory", "list", "--json", check=False)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    assert {m["id"] for m in json.loads(proc.stdout)} == ids
    first = moved_copies(memory_db.parent, "memory.db")
    assert len(first) == 1
    # With a daemon: it finds the damage at start, and the CLI asks it.
    garble(memory_db)
    here(root, "start")
    proc = run_cogd(root, "memory", "list", "--json", check=False)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr
    assert {m["id"] for m in json.loads(proc.stdout)} == ids
    copies = moved_copies(memory_db.parent, "memory.db")
    assert len(copies) == 1 and copies != first
    result = status(root)
    events = recoveries(result, "memory.db")
    assert len(events) == 1 and events[0]["moved_to"] == copies[0]
    assert result["memory"]["total"] == 2
    assert here(root, "status").stdout.count("memory.db.corrupt-") == 1


def test_damaged_vectors_and_embedding_cache_are_rebuilt(repos):
    root = repos(config="[daemon]\nidle_exit_s = 600\n")  # embeddings on: they are the point here

    def embedded() -> dict | None:
        e = status(root)["embedding"]
        assert e["state"] != "error", e["error"]
        return e if e["state"] == "idle" and e["entities"] and e["coverage"] == 1.0 and not e["queued"] else None

    start_indexed(root)
    first = wait_for(embedded, what="the first embedding pass", timeout=300)
    assert first["entities"] == 7  # five definitions and two file entities
    here(root, "stop")
    index_dir = root / ".cogd" / "index"
    for path in sorted((index_dir / "vectors").rglob("*")):
        if path.is_file():
            path.write_bytes(b"\x00not lance\x00" * max(1, path.stat().st_size // 11))
    garble(index_dir / "embed_cache.db")
    here(root, "start")
    after = wait_for(embedded, what="embedding after the damage", timeout=300)
    assert (after["entities"], after["embedded_entities"]) == (7, 7)
    assert after["computed"] == 7  # the cache was damaged too: every vector came from the model again
    assert len(moved_copies(index_dir, "vectors")) == 1
    assert len(moved_copies(index_dir, "embed_cache.db")) == 1
    result = status(root)
    assert [e["store"] for e in result["recovery"]["projections"]] == ["embed_cache.db", "vectors"]
    hits = json.loads(here(root, "search", "area of a circle", "--mode", "vector", "--json").stdout)
    assert len(hits) == 7  # vector search ranks every entity again (it finds none without vectors)


def test_a_daemon_that_cannot_start_is_started_once_per_backoff_window(repos):
    root = repos(config=LEXICAL + "[daemon]\nrestart_backoff_s = 600\n[hook]\ndeadline_ms = 3000\n")
    (root / ".cogd" / "state.db").mkdir()  # a ledger that is not a file: refused, never moved
    prompt = {"session_id": "s1", "prompt": "where is the area of a circle computed", "cwd": str(root),
              "hook_event_name": "UserPromptSubmit", "transcript_path": "/dev/null"}
    marker = root / ".cogd" / "run" / "start-failed.json"
    hook_log = root / ".cogd" / "logs" / "hook.log"

    def ten_hooks() -> None:
        for _ in range(10):
            started = time.monotonic()
            proc = subprocess.run([COGD_HOOK, "prompt-submit"], input=json.dumps(prompt).encode(),
                                  capture_output=True, timeout=30)
            assert proc.returncode == 0 and proc.stdout == b""
            assert time.monotonic() - started < 10.0  # its deadline is 3 s

    # Ten hooks while the first daemon they started is failing: the others find it holding the
    # lock, or find its marker.
    ten_hooks()

    def settled() -> bool:
        spawned = hook_log.read_text(encoding="utf-8").count("started one in the background")
        assert spawned == 1, f"{spawned} daemons started by ten hooks"
        return marker.exists() and not daemon_pids(root)

    wait_for(settled, what="the failed daemon to leave its marker and exit")
    # Ten more after the failure: every one backs off.
    logged = hook_log.read_text(encoding="utf-8")
    ten_hooks()
    later = hook_log.read_text(encoding="utf-8")[len(logged):]
    assert later.count("its last start failed") == 10 and "started one" not in later
    assert not daemon_pids(root)
    info = json.loads(marker.read_text())
    assert info["failures"] == 1  # twenty hooks, one daemon started (and failed)
    assert "state.db" in info["reason"] and info["retry_after"] - info["at"] == pytest.approx(600, abs=1)
    assert hook_log.read_text(encoding="utf-8").count("started one in the background") == 1
    daemon_log = (root / ".cogd" / "logs" / "daemon.log").read_text(encoding="utf-8")
    assert daemon_log.count("the daemon could not start") == 1
    offline = status(root)
    assert offline["running"] is False and "state.db" in offline["start_failure"]["reason"]
    assert "start failed" in here(root, "status").stdout
    doctor = here(root, "doctor", "--json", "--no-model-load", check=False)
    assert doctor.returncode == 1
    failed = [c for c in json.loads(doctor.stdout)["checks"] if c["status"] == "fail"]
    assert any(c["name"] == "daemon start" and "state.db" in c["finding"] for c in failed)
    # In-process commands say what is wrong and how to fix it, without a traceback.
    proc = run_cogd(root, "memory", "list", check=False)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "state.db" in proc.stderr and "fix:" in proc.stderr
    # Fixed by hand: `cogd start` does not wait for the back-off, and a good start clears the marker.
    (root / ".cogd" / "state.db").rmdir()
    run_cogd(root, "start")
    assert not marker.exists()
    assert "start_failure" not in status(root)


def _reject_and_deliver(root: Path) -> tuple[str, str]:
    """A rejected observation (tombstoned) and an active rule; one recorded prompt delivery."""
    rejected = json.loads(here(root, "memory", "add", "observation", "Circle.area rounds pi to two places",
                                   "--json").stdout)["record"]["id"]
    here(root, "memory", "reject", rejected, "--reason", "it uses five places")
    rule = json.loads(here(root, "memory", "add", "rule", "Keep the shape tests fast",
                               "--json").stdout)["record"]["id"]
    prompt = {"session_id": "s1", "prompt": "circle area", "cwd": str(root), "hook_event_name": "UserPromptSubmit"}
    # The pack is what this hook must print: the index is current first (the daemon's first index
    # runs in the background after a start), and the hook's deadline is the test's, generous.
    here(root, "index")
    proc = subprocess.run([COGD_HOOK, "prompt-submit"], input=json.dumps(prompt).encode(), capture_output=True,
                          timeout=60, env={**os.environ, "COGD_HOOK_DEADLINE_MS": str(HOOK_DEADLINE_MS)})
    assert b"additionalContext" in proc.stdout
    return rejected, rule


def test_an_emptied_ledger_is_reported_moved_aside_and_its_tombstones_restored(repos):
    root = repos()
    start_indexed(root)
    rejected, _rule = _reject_and_deliver(root)
    assert json.loads(here(root, "stats", "--json").stdout)["deliveries"] == 1
    here(root, "stop")
    state_db = root / ".cogd" / "state.db"
    for suffix in ("-wal", "-shm"):
        assert not Path(f"{state_db}{suffix}").exists()  # the daemon checkpointed at stop
    os.truncate(state_db, 0)

    # Status without a daemon runs the same read-only check and shows the loss before any start.
    offline = here(root, "status").stdout
    assert "ledger lost ledger state.db was empty (0 bytes) (the marker says it held" in " ".join(offline.split())
    assert "started" not in offline and "backup" in offline
    assert status(root)["recovery"]["ledger"]["state"] == "lost"
    assert state_db.stat().st_size == 0 and moved_copies(root / ".cogd", "state.db") == []  # status moved nothing

    doctor = here(root, "doctor", "--json", "--no-model-load", check=False)
    assert doctor.returncode == 1  # today: green, and the next start silently begins an empty ledger
    ledger = next(c for c in json.loads(doctor.stdout)["checks"] if c["name"] == "ledger")
    assert ledger["status"] == "fail" and "state.db was empty (0 bytes)" in ledger["finding"]
    assert "backup" in ledger["fix"] and "cogd start" in ledger["fix"]

    here(root, "start")
    moved = moved_copies(root / ".cogd", "state.db")
    assert len(moved) == 1 and (root / ".cogd" / moved[0]).stat().st_size == 0  # moved, not deleted
    loss = status(root)["recovery"]["ledger"]
    assert loss["state"] == "lost" and loss["loss"]["restored_tombstones"] == 1
    assert loss["loss"]["before"]["deliveries"] == 1
    statement = loss["statement"]
    assert statement.startswith(f"ledger state.db was empty (0 bytes), moved to {moved[0]}")
    assert "restored 1 tombstones from memory files" in statement
    assert "delivery history and event log before" in statement and "are lost" in statement
    assert "ledger lost" in here(root, "status").stdout
    # The restored tombstone refuses the same claim, in other case and spacing.
    proc = here(root, "memory", "add", "observation", "circle.area  ROUNDS pi to two places", check=False)
    assert proc.returncode == 1 and "tombstoned" in proc.stderr and rejected in proc.stderr
    # The loss stays a failure until someone accepts it (or restores a backup).
    doctor = here(root, "doctor", "--json", "--no-model-load", check=False)
    assert doctor.returncode == 1
    ledger = next(c for c in json.loads(doctor.stdout)["checks"] if c["name"] == "ledger")
    assert ledger["status"] == "fail" and moved[0] in ledger["finding"] and "ledger-loss.json" in ledger["fix"]
    (root / ".cogd" / "ledger-loss.json").unlink()
    ledger = next(c for c in json.loads(here(root, "doctor", "--json", "--no-model-load", check=False).stdout)
                  ["checks"] if c["name"] == "ledger")
    assert ledger["status"] == "ok"


def test_a_fresh_clone_starts_a_new_ledger_without_a_failure(repos, tmp_path):
    origin = repos("origin")
    here(origin, "start")
    rejected, _rule = _reject_and_deliver(origin)
    here(origin, "stop")
    git(origin, "add", "-f", ".cogd/memory", ".cogd/config.toml", ".cogd/.gitignore")
    git(origin, "commit", "-q", "-m", "memory")
    clone = tmp_path / "clone"
    # A clone as a user with the common umask makes it (0755 / 0644), whatever this process's umask is.
    subprocess.run(["git", "clone", "-q", str(origin), str(clone)], check=True, capture_output=True,
                   preexec_fn=lambda: os.umask(0o022))
    repos.made.append(clone)  # its daemon is stopped by the fixture too
    assert not (clone / ".cogd" / "state.db").exists() and (clone / ".cogd" / "memory").is_dir()
    doctor = here(clone, "doctor", "--json", "--no-model-load", check=False)
    checks = {c["name"]: c for c in json.loads(doctor.stdout)["checks"]}
    assert checks["ledger"]["status"] == "ok"
    assert "starts fresh with 2 memory records from git" in checks["ledger"]["finding"]
    # A clone's folders and files come from git with its modes (0755 / 0644): the permissions
    # check warns about each path (`cogd start` tightens them). Nothing fails.
    assert doctor.returncode == 0
    cogd = clone / ".cogd"
    from_git = [str(cogd)] + [os.path.join(d, n) for d, dirs, files in os.walk(cogd) for n in dirs + files]
    perms = [c for c in json.loads(doctor.stdout)["checks"] if c["name"] == "permissions"]
    assert sorted(c["details"].get("path", "") for c in perms) == sorted(from_git), perms
    assert {c["status"] for c in perms} == {"warn"}
    assert sorted(os.path.relpath(p, cogd) for p in from_git if not p.endswith(".md")) == [
        ".", ".gitignore", "config.toml", "memory", "memory/observations", "memory/rules"]
    assert len(from_git) == 8  # and the two record files
    run_cogd(clone, "start")
    result = status(clone)
    assert result["recovery"]["ledger"]["loss"] is None
    assert result["recovery"]["ledger"]["started_fresh_records"] == 2
    assert "ledger     started on " in here(clone, "status").stdout
    wait_for(lambda: status(clone)["memory"]["total"] == 2, what="the memory files to be projected")
    proc = here(clone, "memory", "add", "observation", "Circle.area rounds pi to two places", check=False)
    assert proc.returncode == 1 and "tombstoned" in proc.stderr and rejected in proc.stderr
    here(clone, "stop")
    doctor = here(clone, "doctor", "--json", "--no-model-load", check=False)
    assert doctor.returncode == 0
    assert not moved_copies(clone / ".cogd", "state.db")


def test_move_aside_keeps_only_the_newest_copy_with_its_journal(tmp_path):
    from cogd.recovery import move_aside

    folder = tmp_path / ".cogd" / "index"
    folder.mkdir(parents=True)
    db = folder / "index.db"
    names = []
    for n, now in enumerate((1_800_000_000.25, 1_800_000_060.5)):
        db.write_bytes(b"damaged %d" % n)
        Path(f"{db}-wal").write_bytes(b"wal %d" % n)
        names.append(move_aside(db, now).name)
    assert names == ["index.db.corrupt-20270115T080000.250Z", "index.db.corrupt-20270115T080100.500Z"]
    assert sorted(p.name for p in folder.iterdir()) == [names[1], names[1] + "-wal"]
    assert (folder / names[1]).read_bytes() == b"damaged 1" and (folder / (names[1] + "-wal")).read_bytes() == b"wal 1"
    assert move_aside(db) is None  # nothing there: nothing moved


def test_the_ledger_marker_is_not_lowered_by_a_ledger_that_shrank(tmp_path):
    from cogd.memory.events import MemoryLedger
    from cogd.recovery import classify_ledger, read_mark, write_mark

    cogd_dir = tmp_path / ".cogd"
    cogd_dir.mkdir()
    state_db = cogd_dir / "state.db"
    ledger = MemoryLedger(state_db)
    for n in range(3):
        ledger.append("human", f"id{n}", "create", None, "active")
    ledger.close()
    assert write_mark(cogd_dir, state_db)["events"] == 3
    state_db.unlink()
    MemoryLedger(state_db).close()  # an empty ledger in its place (what opening it used to do silently)
    assert write_mark(cogd_dir, state_db) is None and read_mark(cogd_dir)["events"] == 3
    report = classify_ledger(cogd_dir, 0)
    assert (report.state, report.problem) == ("lost", "was replaced by an empty database")
    assert write_mark(cogd_dir, state_db, force=True)["events"] == 0  # at start, once accepted


def test_reset_all_is_a_wipe_on_request_not_a_loss(repos):
    root = repos()
    here(root, "memory", "add", "rule", "Keep the shape tests fast")  # in-process: no daemon
    assert json.loads((root / ".cogd" / "ledger.json").read_text())["events"] == 1
    run_cogd(root, "reset", "--all", "--yes")
    doctor = here(root, "doctor", "--json", "--no-model-load", check=False)
    ledger = next(c for c in json.loads(doctor.stdout)["checks"] if c["name"] == "ledger")
    assert ledger["status"] == "ok" and doctor.returncode == 0, ledger
    here(root, "start")
    result = status(root)["recovery"]["ledger"]
    assert result["loss"] is None and result["state"] == "new"
    assert not moved_copies(root / ".cogd", "state.db")


def test_a_clean_stop_folds_the_index_wal_in(repos):
    root = repos()
    start_indexed(root)
    index_db = root / ".cogd" / "index" / "index.db"
    wal = Path(f"{index_db}-wal")
    assert wal.exists() and wal.stat().st_size > 0  # the index was written through the WAL
    # Readers on request threads hold their own connections: serve some requests first.
    assert "Circle" in here(root, "search", "circle area").stdout
    run_cogd(root, "stop")
    assert daemon_pids(root) == []
    left = {p.name: p.stat().st_size for p in index_db.parent.iterdir() if p.name.endswith(("-wal", "-shm"))}
    assert left == {}
    conn = sqlite3.connect(f"file:{index_db}?mode=ro", uri=True)
    try:  # what the WAL held is in the file now
        assert conn.execute("SELECT count(*) FROM entities WHERE name = 'Circle'").fetchone()[0] == 1
    finally:
        conn.close()


def test_a_long_check_report_becomes_one_line():
    from cogd.recovery import summarise_check

    # What quick_check gives for an index.db truncated to 100,000 bytes: one row per damaged page,
    # the first packed with a header and several pages.
    rows = ["*** in database main ***\nPage 25: btreeInitPage() returns error code 11\n"
            "Page 26: btreeInitPage() returns error code 11"] + \
           [f"Page {n}: btreeInitPage() returns error code 11" for n in range(27, 125)]
    assert summarise_check(rows) == "Page 25: btreeInitPage() returns error code 11 (and 99 more problems)"
    assert summarise_check(["row 3 missing from index x"]) == "row 3 missing from index x"
    assert summarise_check(["a", "b"]) == "a (and 1 more problem)"
