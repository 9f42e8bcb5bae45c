"""``cogd doctor`` on real repositories, with and without a running daemon."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from cogd.config import Config, EmbedConfig
from cogd.cli.doctor_checks import FAIL, OK, RTT_WARN_SHARE, WARN, DoctorContext, check_model, run_checks
from cogd.paths import Layout
from conftest import cogd_in_process, copy_stdlib, lexical_only, make_repo, run_cogd, write

pytestmark = pytest.mark.timeout(600)  # a hang guard, generous for a busy machine


def doctor(root: Path, *args: str) -> tuple[int, dict[str, dict]]:
    proc = run_cogd(root, "doctor", "--json", *args, check=False)
    report = json.loads(proc.stdout)
    assert report["ok"] == (proc.returncode == 0)
    return proc.returncode, {c["name"]: c for c in report["checks"]}


@pytest.fixture(scope="module")
def indexed(tmp_path_factory):
    """The json package, lexical only, indexed by the real ``cogd index`` (in-process: no daemon).
    Never changed: each test gets a copy (:func:`repo`)."""
    root = lexical_only(copy_stdlib(tmp_path_factory.mktemp("doctor") / "repo", ("json",)))
    run_cogd(root, "index")
    return root


@pytest.fixture
def repo(indexed, tmp_path):
    """A test's own copy of :func:`indexed`, modes and mtimes kept (what the index recorded still
    matches the tree), at the cost of a copy instead of a CLI process per test."""
    root = tmp_path / "repo"
    shutil.copytree(indexed, root, symlinks=True)
    return root


def test_green_without_a_daemon(repo):
    code, checks = doctor(repo)
    assert code == 0, checks
    assert list(checks) == ["config", "permissions", "committed state", "daemon", "socket", "runtime dir", "lock", "model", "inotify",
                            "index drift", "languages", "db index.db", "db memory.db", "db history.db",
                            "db state.db", "ledger", "recovery",
                            "disk", "snapshot", "memory files", "memory intents", "memory in git", "memory anchors",
                            "memory dead weight"]
    assert all(c["status"] == OK for c in checks.values()), checks
    assert checks["daemon"]["details"] == {"running": False}
    assert checks["index drift"]["details"]["indexed_files"] == len(list(repo.rglob("*.py")))
    assert checks["inotify"]["details"]["directories"] == 2  # the root and json/
    assert checks["disk"]["details"]["bytes"] > 0
    assert checks["languages"]["finding"] == \
        "1 language checked by doctor: grammars load and queries compile (python)"
    assert all(c["fix"] == "" for c in checks.values())


def test_table_output_and_drift(repo):
    write(repo, "json/decoder.py", (repo / "json/decoder.py").read_text() + "\ndef added():\n    pass\n")
    write(repo, "json/new_module.py", "def fresh():\n    return 1\n")
    (repo / "json" / "tool.py").unlink()
    os.utime(repo / "json" / "scanner.py")  # a new mtime, same content: not drift
    code, checks = doctor(repo)
    assert code == 0  # drift is a warning
    drift = checks["index drift"]
    assert drift["status"] == WARN and drift["fix"] == "`cogd index`"
    assert (drift["details"]["changed"], drift["details"]["added"], drift["details"]["removed"]) == (1, 1, 1)
    assert set(drift["details"]["sample"]) == {"json/decoder.py", "json/new_module.py", "json/tool.py"}
    table = run_cogd(repo, "doctor").stdout
    assert "index drift" in table and "3 files differ" in table and "1 warning," in table
    cogd_in_process(repo, "index")  # set-up for the next doctor, which is the real process
    assert doctor(repo)[1]["index drift"]["status"] == OK


def test_corrupt_database_fails_and_reset_repairs_it(repo):
    db = repo / ".cogd" / "index" / "index.db"
    for side in ("index.db-wal", "index.db-shm"):
        (db.parent / side).unlink(missing_ok=True)
    data = bytearray(db.read_bytes())
    data[4096:8192] = b"\xff" * 4096  # a page of garbage in the middle of the file
    db.write_bytes(bytes(data))
    code, checks = doctor(repo)
    assert code == 1
    assert checks["db index.db"]["status"] == FAIL
    assert checks["db index.db"]["fix"] == ("nothing to do: the next start moves it aside and rebuilds it from the "
                                            "work tree (and memory files); `cogd stop; cogd start` does it now")
    assert checks["db state.db"]["status"] == OK
    assert "the check itself failed" not in checks["index drift"]["finding"]
    run_cogd(repo, "reset")
    code, checks = doctor(repo)
    assert code == 0 and checks["db index.db"]["status"] == OK


def test_with_a_running_daemon(repo, daemon_factory):
    # The "answers slowly" budget is a share of the hook deadline: set generously here, so that
    # a busy machine does not turn the check into a warning.
    deadline_ms = 30_000
    config = repo / ".cogd" / "config.toml"
    config.write_text(config.read_text() + f"[hook]\ndeadline_ms = {deadline_ms}\n")
    d = daemon_factory(repo)
    pid = d.status()["pid"]
    code, checks = doctor(repo)
    assert code == 0, checks
    assert checks["daemon"]["status"] == OK, checks["daemon"]
    assert checks["daemon"]["details"]["pid"] == pid and 0 < checks["daemon"]["details"]["rtt_ms"] < deadline_ms / RTT_WARN_SHARE
    assert checks["lock"]["details"]["cmdline_ok"] is True and str(pid) in checks["lock"]["finding"]
    assert checks["socket"]["details"]["mode"] == "0600"
    assert checks["inotify"]["details"]["daemon_mode"] == "inotify"
    sock = repo / ".cogd" / "run" / "cogd.sock"
    os.chmod(sock, 0o666)
    try:
        code, checks = doctor(repo)
        assert code == 1 and checks["socket"]["status"] == FAIL and "0666" in checks["socket"]["finding"]
    finally:
        os.chmod(sock, 0o600)


def test_bad_config_fails_but_other_checks_run(repo):
    (repo / ".cogd" / "config.toml").write_text("[embed\n")
    code, checks = doctor(repo)
    assert code == 1 and checks["config"]["status"] == FAIL and "config.toml" in checks["config"]["fix"]
    assert checks["index drift"]["status"] == OK  # the rest ran with the defaults


def test_model_check_loads_the_bundled_model(tmp_path):
    ctx = DoctorContext(Layout(tmp_path), Config())
    check = check_model(ctx)
    assert check.status == OK and check.details["dim"] == 384 and check.details["load_ms"] > 0
    broken = tmp_path / "model"
    broken.mkdir()
    (broken / "model.onnx").write_bytes(b"not a model")
    (broken / "tokenizer.json").write_text("{}")
    (broken / "cogd-model.json").write_text(json.dumps({"sha256": "0" * 64}))
    bad = check_model(DoctorContext(Layout(tmp_path), Config(embed=EmbedConfig(model_dir=str(broken)))))
    assert bad.status == FAIL and "sha256" in bad.finding and bad.fix


def test_a_raising_check_is_a_failure_not_a_crash(tmp_path):
    def check_boom(ctx):
        raise RuntimeError("boom")

    results = run_checks(DoctorContext(Layout(tmp_path), Config()), [check_boom])
    assert [(r.name, r.status) for r in results] == [("boom", FAIL)] and "boom" in results[0].finding


def test_memory_checks(repo):
    from cogd.memory.api import MemoryStore

    layout = Layout(repo)
    store = MemoryStore(repo, layout.state_db, layout.index_dir)
    try:
        kept = store.record("observation", "json.tool reads stdin when no file is given",
                            anchors=["json/tool.py::main"])["record"]
        edited = store.record("observation", "scanner.py has a C accelerator", anchors=[])["record"]
        store.sync()
    finally:
        store.close()
    code, checks = doctor(repo)
    assert code == 0 and checks["memory files"]["details"]["files"] == 2, checks
    assert checks["memory anchors"]["status"] == OK and checks["memory dead weight"]["status"] == OK

    from cogd.usage.ledger import Ledger

    ledger = Ledger(layout.state_db)
    item = {"rank": 1, "entity_id": kept["id"], "kind": "observation", "path": "", "start_line": 0,
            "end_line": 0, "score": 1.0, "chars": 10, "pointer": False}
    for n in range(10):  # delivered ten times, never a hit
        ledger.record_delivery(f"s{n}", "prompt", "", "q", "text", [item])
    ledger.close()
    dead = doctor(repo)[1]["memory dead weight"]
    assert dead["status"] == WARN and dead["details"]["dead"] == [kept["id"]]
    assert dead["details"]["never_delivered"] == 1

    memory = repo / ".cogd" / "memory" / "observations"
    path = memory / f"{edited['id']}.md"
    path.write_text(path.read_text().replace("status: candidate", "status: stale"))  # candidate → stale: illegal
    (memory / "01J00000000000000000000000.md").write_text("---\nid: [unclosed\n---\nbody\n")
    (repo / "json" / "tool.py").unlink()
    cogd_in_process(repo, "index")
    code, checks = doctor(repo)
    assert code == 1
    files = checks["memory files"]
    assert files["status"] == FAIL and files["details"]["problem_count"] == 2
    assert files["finding"].startswith("2 memory files need attention (broken_frontmatter, illegal_transition), e.g. ")
    kinds = {p["kind"]: p for p in files["details"]["problems"]}
    assert set(kinds) == {"broken_frontmatter", "illegal_transition"}
    assert "'candidate'" in kinds["illegal_transition"]["fix"] and "line" in kinds["broken_frontmatter"]["message"]
    anchors = checks["memory anchors"]
    assert anchors["status"] == WARN
    assert anchors["details"]["dangling"] == [{"memory": kept["id"], "entity": "json/tool.py::main"}]


def _snapshot(folder: Path) -> dict[str, tuple[int, int, int]]:
    """relative path → (size, mode, mtime_ns) of everything under ``folder``."""
    found = {}
    for dirpath, dirs, files in os.walk(folder):
        for name in dirs + files:
            st = os.lstat(os.path.join(dirpath, name))
            found[os.path.relpath(os.path.join(dirpath, name), folder)] = (st.st_size, st.st_mode, st.st_mtime_ns)
    return found


def test_an_index_db_that_is_not_a_database_is_one_failure_and_a_plain_warning(repo):
    db = repo / ".cogd" / "index" / "index.db"
    for side in ("index.db-wal", "index.db-shm"):
        (db.parent / side).unlink(missing_ok=True)
    db.write_bytes(os.urandom(20000))
    code, checks = doctor(repo)
    assert code == 1 and checks["db index.db"]["status"] == FAIL
    drift = checks["index drift"]
    assert drift["status"] == WARN and "cannot be read" in drift["finding"], drift


def test_an_empty_index_db_is_reported_plainly_and_doctor_changes_nothing(repo):
    index_db = repo / ".cogd" / "index" / "index.db"
    assert not Path(f"{index_db}-wal").exists()  # `cogd index` closed cleanly: WAL folded in
    wal_bytes = b"\0" * 100_000
    os.truncate(index_db, 0)
    Path(f"{index_db}-wal").write_bytes(wal_bytes)  # what a copy of a live index can leave
    os.chmod(f"{index_db}-wal", 0o600)
    before = _snapshot(repo / ".cogd")
    code, checks = doctor(repo, "--no-model-load")
    assert _snapshot(repo / ".cogd") == before  # read-only: no side file made, none deleted
    assert Path(f"{index_db}-wal").read_bytes() == wal_bytes
    assert code == 0, [c for c in checks.values() if c["status"] == FAIL]
    assert checks["db index.db"]["status"] == WARN
    assert checks["db index.db"]["finding"] == "index.db is empty (0 bytes): the next start rebuilds it"
    assert checks["index drift"]["status"] == WARN
    assert checks["index drift"]["finding"] == \
        "not checked: index.db is empty (0 bytes): the next start rebuilds it"
    assert checks["db memory.db"]["status"] == OK and checks["db state.db"]["status"] == OK


def test_index_drift_on_a_database_without_the_index_tables(tmp_path):
    """A foreign SQLite file where index.db belongs is reported as no index, not as a failed check."""
    import sqlite3

    from cogd.cli.doctor_checks import check_index_drift

    root = make_repo(tmp_path / "repo")
    layout = Layout(root).ensure()
    conn = sqlite3.connect(layout.index_db)
    conn.execute("CREATE TABLE other (x)")
    conn.commit()
    conn.close()
    check = check_index_drift(DoctorContext(layout, Config()))
    assert (check.status, check.finding) == (
        WARN, "not checked: index.db holds no index (no files table): the next start rebuilds it")


def test_dead_weight_before_any_delivery_table_exists(tmp_path):
    """Memory wrote state.db (events only), no daemon ever made the ledger's tables: nothing delivered yet."""
    import sqlite3

    from cogd.cli.doctor_checks import check_memory_dead_weight
    from cogd.memory.api import MemoryStore

    root = make_repo(tmp_path / "repo")
    layout = Layout(root).ensure()
    store = MemoryStore(root, layout.state_db, layout.index_dir)
    try:
        store.record("observation", "the parser keeps a cache of compiled patterns", anchors=[])
    finally:
        store.close()
    conn = sqlite3.connect(layout.state_db)
    assert "delivery_items" not in {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    conn.close()
    check = check_memory_dead_weight(DoctorContext(layout, Config()))
    assert check.status == OK
    assert (check.details["live"], check.details["never_delivered"], check.details["dead_count"]) == (1, 1, 0)
