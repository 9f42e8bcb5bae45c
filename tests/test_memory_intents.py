"""A crash at every step of every memory write is completed (or undone) on restart, never taken for a hand edit.

Each case prepares a tiny repository, then runs the real operation in a real process — a ``cogd``
command's process, or a real daemon for consolidation — with ``COGD_FAULT=<op>:<step>``, which makes
that process ``os._exit(137)`` at the step (what ``kill -9`` leaves). It checks what the crash
left on disk (so the step was really reached), restarts cogd, and asserts: the operation is
fully done (every step from the intent on) or fully undone (``planned``: nothing was durable yet)
— exact files and exact events —, no ``illegal_transition``, ``refused`` or hand-edit event,
files, projection and ledger agree, no intent is left, and ``cogd doctor`` passes its memory checks.

The crashing operation is always a real process of its own (it must die): forked from one that
imported the CLI once (:data:`PREFORK`), with the command's environment and its crash point read
from it. What comes after it — the restart's ``cogd memory list``, a consolidation daemon's start
and stop — is the same CLI code run in this process (:func:`cli`), the daemon a real process on
its real socket. A Python start-up with the CLI's imports costs more than the rest of a case on a
busy machine, and the restart's recovery is the same code either way.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import Daemon, cogd_in_process, make_repo, wait_for
from cogd.memory.api import MemoryStore
from cogd.memory.record import read
from cogd.paths import Layout

SMALL = {"pkg/mod.py": "def alpha():\n    return 1\n\n\ndef beta():\n    return alpha()\n"}
A_TEXT = "parse_date returns naive datetimes when the header has no zone"
B_TEXT = "parse_date returns naive datetimes when the header has no zone given"
EDITOR = r'''
import sys
path = sys.argv[1]
text = open(path, encoding="utf-8").read()
open(path, "w", encoding="utf-8").write(text.rstrip("\n") + "\n\nedited in the editor\n")
'''


def points(op: str, files: int) -> list[str]:
    """Every fault point of an operation writing ``files`` files (see cogd/faults.py)."""
    return ([f"{op}:planned", f"{op}:intent"] + [f"{op}:file{k}" for k in range(1, files + 1)] + [f"{op}:logged"]
            + [f"{op}:project{k}" for k in range(1, files + 1)])


CASES = ([("merge", p) for p in points("merge", 2)] + [("promote", p) for p in points("promote", 1)]
         + [("retention", p) for p in points("retention", 1)] + [("record", p) for p in points("record", 1)]
         + [("reject", p) for p in points("transition", 1)] + [("supersede", p) for p in points("supersede", 2)]
         + [("edit", p) for p in points("edit", 1)] + [("purge", p) for p in points("purge", 1)]
         + [("verify", p) for p in points("verify", 1)] + [("stale", p) for p in points("stale", 1)])


# The crashing command runs in a process forked from this one, which imported the CLI and its
# in-process backend once: a real process of its own that dies at the fault point (os._exit(137)),
# without the Python start-up and the imports, which cost more than the command on a busy machine.
# Each child takes the command's environment and re-reads the crash point from it as a fresh
# ``cogd`` process does (cogd/faults.py reads COGD_FAULT at import); a daemon it starts inherits it.
PREFORK = r"""
import importlib, json, os, sys, traceback
import cogd.cli, cogd.cli.base, cogd.daemon.service, cogd.faults
from cogd.cli import main

replies = os.fdopen(os.dup(1), "w")
os.dup2(os.open(os.devnull, os.O_WRONLY), 1)  # nothing of this process reaches the reply pipe
for line in sys.stdin:
    request = json.loads(line)
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.environ.clear()
            os.environ.update(request["env"])
            importlib.reload(cogd.faults)  # COGD_FAULT and COGD_FAULT_AFTER, from this command's environment
            os.chdir(request["cwd"])
            os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
            os.dup2(os.open(request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), 1)
            os.dup2(os.open(request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), 2)
            sys.argv = ["cogd", *request["args"]]
            main(request["args"], prog_name="cogd")
            code = 0
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
        except BaseException:
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    replies.write(json.dumps({"pid": pid}) + "\n")
    replies.flush()
    _, status = os.waitpid(pid, 0)
    replies.write(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}) + "\n")
    replies.flush()
"""


class Prefork:
    """The forking process of :data:`PREFORK`; :meth:`run` is ``subprocess.run([COGD, ...])``'s equivalent."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.proc = subprocess.Popen([sys.executable, "-c", PREFORK], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, cwd=folder)
        self.count = 0

    def _reply(self, timeout: float) -> dict:
        import select

        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            raise subprocess.TimeoutExpired("cogd (forked)", timeout)
        line = self.proc.stdout.readline()
        assert line, f"the forking process exited ({self.proc.poll()})"
        return json.loads(line)

    def run(self, root: Path, args: list[str], env: dict[str, str], timeout: float) -> subprocess.CompletedProcess:
        """``cogd <args>`` in ``root`` with exactly ``env``, in a forked child; killed after ``timeout`` s."""
        self.count += 1
        out, err = self.folder / f"{self.count}.out", self.folder / f"{self.count}.err"
        self.proc.stdin.write(json.dumps({"args": args, "env": env, "cwd": str(root), "stdout": str(out),
                                          "stderr": str(err)}) + "\n")
        self.proc.stdin.flush()
        pid = self._reply(30)["pid"]
        try:
            returncode = self._reply(timeout)["returncode"]
        except subprocess.TimeoutExpired:
            os.kill(pid, 9)
            self._reply(30)
            raise
        return subprocess.CompletedProcess(["cogd (forked)", *args], returncode,
                                           out.read_text(encoding="utf-8"), err.read_text(encoding="utf-8"))

    def close(self) -> None:
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


_prefork: list[Prefork] = []


@pytest.fixture(scope="module", autouse=True)
def prefork(tmp_path_factory):
    forker = Prefork(tmp_path_factory.mktemp("prefork"))
    _prefork.append(forker)
    yield forker
    _prefork.remove(forker)
    forker.close()


def cogd(root: Path, *args: str, fault: str = "", timeout: float = 120, env: dict | None = None):
    """The real ``cogd`` command in its own process (forked, see :data:`PREFORK`), with ``COGD_FAULT=fault``."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("COGD_FAULT")}
    environment.update(env or {})
    if fault:
        environment["COGD_FAULT"] = fault
    return _prefork[0].run(root, list(args), environment, timeout)


def cli(root: Path, *args: str) -> subprocess.CompletedProcess:
    """``cogd`` in this process (:func:`conftest.cogd_in_process`). No ``COGD_FAULT`` reaches it
    (this process has none), so it never crashes on purpose."""
    assert not os.environ.get("COGD_FAULT"), "an in-process command must not carry a crash point"
    return cogd_in_process(root, *args, check=False)


def ok(proc: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert proc.returncode == 0, f"{proc.args} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return proc


def open_store(root: Path) -> MemoryStore:
    return MemoryStore(root, root / ".cogd" / "state.db", root / ".cogd" / "index")


def digests(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root / ".cogd" / "memory")): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted((root / ".cogd" / "memory").glob("*/*.md"))}


def ledger_rows(root: Path, sql: str, args: tuple = ()) -> list[sqlite3.Row]:
    conn = sqlite3.connect(f"file:{root / '.cogd' / 'state.db'}?mode=ro", uri=True)
    conn.row_factory = sqlite3.Row
    try:
        return conn.execute(sql, args).fetchall()
    finally:
        conn.close()


def events(root: Path) -> list[tuple]:
    """(actor, entity, action, old, new, recovered) of every event, oldest first."""
    return [(r["actor"], r["entity_id"], r["action"], r["old_status"], r["new_status"],
             bool(json.loads(r["detail"]).get("recovered")))
            for r in ledger_rows(root, "SELECT * FROM events ORDER BY id")]


def intents(root: Path) -> list[sqlite3.Row]:
    return ledger_rows(root, "SELECT * FROM intents ORDER BY id")


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    """:data:`SMALL` as a committed git repository (copied by each test, never changed)."""
    return make_repo(tmp_path_factory.mktemp("intents") / "repo", SMALL)


@pytest.fixture
def repo(tmp_path, template):
    root = tmp_path / "repo"
    shutil.copytree(template, root, symlinks=True)
    (root / ".cogd").mkdir()
    yield root
    Daemon(root).stop()  # what `cogd stop` does, in this process (most cases start no daemon at all)


def doctor(root: Path) -> dict:
    """What ``cogd doctor --json --no-model-load`` reports (``{"checks": [{name, status, ...}]}``): the
    same checks, run in this process. The restart under test is the CLI's; doctor only reads."""
    from cogd.cli.doctor_checks import make_context, run_checks

    return {"checks": [c.as_dict() for c in run_checks(make_context(Layout(root), load_model=False))]}


def configure(root: Path, retention_days: float = 0) -> None:
    # background consolidation off (a session end or idle stretch must not run it behind the test's back)
    (root / ".cogd" / "config.toml").write_text(
        "[embed]\nenabled = false\n\n[consolidate]\nenabled = false\nidle_after_s = 0\n"
        f"retention_days = {retention_days}\n", encoding="utf-8")


def prepare(root: Path, case: str) -> dict:
    """The records a case starts from (written through the API, before anything crashes)."""
    configure(root, retention_days=1e-7 if case == "retention" else 0)
    store = open_store(root)
    try:
        ids: dict = {}
        if case in ("merge", "promote"):
            ids["a"] = store.record("observation", A_TEXT, session_id="s1")["record"]["id"]
            ids["b"] = store.record("observation", B_TEXT, session_id="s2")["record"]["id"]
        elif case == "retention":
            ids["a"] = store.record("observation", A_TEXT)["record"]["id"]
            store.transition(ids["a"], "rejected", reason="wrong header")
        elif case == "stale":  # anchored to alpha through the CLI (it indexes first), then alpha changes
            store.close()
            out = ok(cli(root, "memory", "add", "observation", A_TEXT, "--anchor", "pkg/mod.py::alpha", "--json"))
            ids["a"] = json.loads(out.stdout)["record"]["id"]
            (root / "pkg" / "mod.py").write_text(SMALL["pkg/mod.py"].replace("return 1", "return 2"), encoding="utf-8")
            store = open_store(root)
        elif case in ("reject", "edit", "purge", "verify"):
            ids["a"] = store.record("observation", A_TEXT, source="human")["record"]["id"]
        elif case == "supersede":
            ids["a"] = store.record("observation", A_TEXT, source="human")["record"]["id"]
            ids["b"] = store.record("observation", "parsedate_to_datetime gives aware datetimes only with a zone",
                                    source="human")["record"]["id"]
        return ids
    finally:
        store.close()


def run_crashing(root: Path, tmp_path: Path, case: str, ids: dict, fault: str) -> None:
    """The operation under ``fault``: the process must die with 137 at that point."""
    if case in ("merge", "promote"):
        ok(cogd(root, "start", fault=fault))  # a real CLI process, so the daemon it starts inherits the fault
        pid = json.loads(ok(cli(root, "status", "--json")).stdout)["pid"]
        proc = cli(root, "consolidate", "--json")
        assert proc.returncode != 0, proc.stdout
        wait_for(lambda: not Path(f"/proc/{pid}").exists(), 60, "the daemon to die at the fault point")
        return
    if case == "retention":
        time.sleep(0.05)  # the rejection is older than retention_days (0.0086 s) by now
    editor = tmp_path / "editor.py"
    editor.write_text(EDITOR, encoding="utf-8")
    args = {"retention": ["consolidate", "--json"], "record": ["memory", "add", "observation", A_TEXT],
            "reject": ["memory", "reject", ids.get("a", ""), "--reason", "wrong header"],
            "supersede": ["memory", "supersede", ids.get("a", ""), ids.get("b", "")],
            "edit": ["memory", "edit", ids.get("a", "")], "purge": ["memory", "purge", ids.get("a", ""), "--yes"],
            "verify": ["verify", ids.get("a", "")], "stale": ["memory", "list", "--json"]}[case]
    proc = cogd(root, *args, fault=fault, env={"EDITOR": f"{sys.executable} {editor}"})
    assert proc.returncode == 137, f"expected death at {fault}: {proc.returncode}\n{proc.stdout}\n{proc.stderr}"


def check_crash_left(root: Path, fault: str, before: dict[str, str]) -> None:
    """What the crash left is what that step leaves (so the step was reached, and no further)."""
    step = fault.split(":", 1)[1]
    open_ = intents(root)
    if step == "planned":
        assert open_ == []
        if fault.startswith("promote:"):  # the same run merged first (completely): the survivor is still a candidate
            assert sorted(read(p).status for p in (root / ".cogd" / "memory").glob("*/*.md")) == \
                ["candidate", "superseded"]
        else:
            assert digests(root) == before
        return
    assert len(open_) == 1 and open_[0]["op"] == fault.split(":", 1)[0]
    assert open_[0]["state"] == ("open" if step == "intent" or step.startswith("file") else "logged")
    plan = json.loads(open_[0]["plan"])
    now = digests(root)
    written = int(step[4:]) if step.startswith("file") else (0 if step == "intent" else len(plan["files"]))
    for k, entry in enumerate(plan["files"], start=1):
        assert now.get(entry["path"]) == (entry["post"] if k <= written else entry["pre"]), (k, entry["path"])


def expected(case: str, ids: dict, done: bool, recovered: bool, new_id: str | None) -> tuple[list, dict]:
    """(events, {relpath: status}) after the restart."""
    a, b = ids.get("a"), ids.get("b")
    r = recovered
    obs = lambda i: f"observations/{i}.md"  # noqa: E731
    if case in ("merge", "promote"):
        base = [("agent", a, "create", None, "candidate", False), ("agent", b, "create", None, "candidate", False)]
        merge = [("consolidation", b, "supersede", "candidate", "superseded", case == "merge" and r),
                 ("consolidation", a, "merge", "candidate", "candidate", case == "merge" and r)]
        if case == "merge":
            return (base + merge if done else base), {obs(a): "candidate", obs(b): "superseded" if done else "candidate"}
        promote = [("consolidation", a, "activate", "candidate", "active", r)]
        return base + merge + (promote if done else []), {obs(a): "active" if done else "candidate",
                                                          obs(b): "superseded"}
    if case == "retention":
        base = [("agent", a, "create", None, "candidate", False), ("agent", a, "reject", "candidate", "rejected", False)]
        return base + ([("consolidation", a, "prune", "rejected", "pruned", r)] if done else []), \
            {obs(a): "pruned" if done else "rejected"}
    if case == "record":
        return ([("human", new_id, "create", None, "active", r)], {obs(new_id): "active"}) if done else ([], {})
    base = [("human", a, "create", None, "active", False)]
    if case == "reject":
        return base + ([("human", a, "reject", "active", "rejected", r)] if done else []), \
            {obs(a): "rejected" if done else "active"}
    if case == "supersede":
        base = base + [("human", b, "create", None, "active", False)]
        return base + ([("human", a, "supersede", "active", "superseded", r),
                        ("human", b, "edit", "active", "active", r)] if done else []), \
            {obs(a): "superseded" if done else "active", obs(b): "active"}
    if case == "edit":
        return base + ([("human", a, "edit", "active", "active", r)] if done else []), {obs(a): "active"}
    if case == "purge":
        return base + ([("human", a, "purge", "active", "purged", r)] if done else []), \
            ({} if done else {obs(a): "active"})
    if case == "verify":
        return base + ([("human", a, "verify", "active", "active", r)] if done else []), {obs(a): "active"}
    if case == "stale":  # undone at `planned`, the restart's own anchor check makes the move itself
        return base + [("daemon", a, "stale", "active", "stale", r)], {obs(a): "stale"}
    raise AssertionError(case)


@pytest.mark.parametrize("case,fault", CASES, ids=[f for _, f in CASES])
def test_crash_at_every_step_is_completed_or_undone(repo, tmp_path, case, fault):
    ids = prepare(repo, case)
    before = digests(repo)
    run_crashing(repo, tmp_path, case, ids, fault)
    check_crash_left(repo, fault, before)
    step = fault.split(":", 1)[1]
    done = step != "planned"
    if case == "stale":  # before the restart: the event is in from `logged` on
        assert [e[2] for e in events(repo)] == ["create"] + (["stale"] if step == "logged" or "project" in step else [])
    recovered = step == "intent" or step.startswith("file")

    # restart: what syncs is a real daemon process for consolidation, the CLI's in-process backend otherwise
    if case in ("merge", "promote"):
        ok(cli(repo, "start"))
        listed = json.loads(ok(cli(repo, "memory", "list", "--json")).stdout)
        ok(cli(repo, "stop"))
    else:
        listed = json.loads(ok(cli(repo, "memory", "list", "--json")).stdout)
    new_ids = [m["id"] for m in listed if m["id"] not in ids.values()]
    new_id = new_ids[0] if new_ids else None
    assert len(new_ids) == (1 if case == "record" and done else 0)

    want_events, want_files = expected(case, ids, done, recovered, new_id)
    got_events = events(repo)
    assert got_events == want_events
    assert not [e for e in got_events if e[2] in ("illegal_transition", "refused", "file_removed")]
    files = {str(p.relative_to(repo / ".cogd" / "memory")): read(p).status
             for p in sorted((repo / ".cogd" / "memory").glob("observations/*.md"))}
    assert files == want_files
    if case == "merge" and done:
        loser = read(repo / ".cogd" / "memory" / "observations" / f"{ids['b']}.md")
        survivor = read(repo / ".cogd" / "memory" / "observations" / f"{ids['a']}.md")
        assert loser.superseded_by == ids["a"] and survivor.supersedes == ids["b"]
        assert [e["id"] for e in survivor.extra["evidence"]] == [ids["b"]]
    if case == "edit":
        body = read(repo / ".cogd" / "memory" / "observations" / f"{ids['a']}.md").body
        assert body.endswith("edited in the editor") == done
    if case == "purge" and done:
        assert all(r["redacted"] for r in ledger_rows(repo, "SELECT redacted FROM events WHERE entity_id = ? AND "
                                                            "action = 'create'", (ids["a"],)))
    assert intents(repo) == []

    # files, projection and ledger agree
    conn = sqlite3.connect(f"file:{repo / '.cogd' / 'index' / 'memory.db'}?mode=ro", uri=True)
    try:
        projected = {path: status for path, status in conn.execute("SELECT path, status FROM memories")
                     if path.startswith("observations/")}
        problems = conn.execute("SELECT path, problem FROM files WHERE problem IS NOT NULL").fetchall()
    finally:
        conn.close()
    assert projected == want_files and problems == []
    store = open_store(repo)
    try:
        assert {rel: store.ledger.last_status(Path(rel).stem) for rel in want_files} == want_files
    finally:
        store.close()

    report = doctor(repo)
    memory_checks = {c["name"]: c["status"] for c in report["checks"] if c["name"].startswith("memory")}
    assert memory_checks["memory files"] == "ok", report
    assert memory_checks.get("memory intents", "ok") == "ok", report
    assert not [c for c in report["checks"] if c["status"] == "fail"], report


def _append_line(path: Path, line: str) -> None:
    path.write_text(path.read_text(encoding="utf-8").rstrip("\n") + f"\n\n{line}\n", encoding="utf-8")


def test_hand_edit_after_a_crash_before_any_file_wins(repo, tmp_path):
    """Killed with the intent recorded and no file written; a person then edits the file (from the
    pre-image): the interrupted rejection is rolled back, the person's edit is accepted as theirs."""
    ids = prepare(repo, "reject")
    run_crashing(repo, tmp_path, "reject", ids, "transition:intent")
    path = repo / ".cogd" / "memory" / "observations" / f"{ids['a']}.md"
    _append_line(path, "callers must attach UTC themselves")
    ok(cli(repo, "memory", "list", "--json"))
    a = ids["a"]
    assert events(repo) == [("human", a, "create", None, "active", False), ("human", a, "edit", "active", "active", False)]
    assert read(path).status == "active" and read(path).body.endswith("callers must attach UTC themselves")
    assert intents(repo) == []
    report = doctor(repo)
    assert {c["name"]: c["status"] for c in report["checks"]}["memory files"] == "ok"


def test_hand_edit_after_a_crash_half_way_is_judged_after_the_completed_write(repo, tmp_path):
    """Killed after the first of supersede's two files; a person then edits the second: the supersession
    is completed (its events, the first file), the second file keeps the person's text, accepted as theirs."""
    ids = prepare(repo, "supersede")
    run_crashing(repo, tmp_path, "supersede", ids, "supersede:file1")
    new_path = repo / ".cogd" / "memory" / "observations" / f"{ids['b']}.md"
    _append_line(new_path, "checked against email.utils in 3.11")
    ok(cli(repo, "memory", "list", "--json"))
    a, b = ids["a"], ids["b"]
    assert events(repo) == [
        ("human", a, "create", None, "active", False), ("human", b, "create", None, "active", False),
        ("human", a, "supersede", "active", "superseded", True), ("human", b, "edit", "active", "active", True),
        ("human", b, "edit", "active", "active", False)]
    old = read(repo / ".cogd" / "memory" / "observations" / f"{a}.md")
    assert old.status == "superseded" and old.superseded_by == b
    assert read(new_path).body.endswith("checked against email.utils in 3.11")
    assert intents(repo) == []


def test_a_failed_commit_puts_the_files_back(tmp_path, monkeypatch):
    """The ledger refuses the events (here: a locked database) after both merge files were written:
    the operation raises, both files are byte for byte what they were, no intent and no event stays."""
    root = make_repo(tmp_path / "repo", SMALL)
    store = open_store(root)
    try:
        survivor = store.record("observation", A_TEXT, session_id="s1")["record"]["id"]
        loser = store.record("observation", B_TEXT, session_id="s2")["record"]["id"]
        before = digests(root)
        events_before = store.events()

        def locked(*args, **kwargs):
            raise sqlite3.OperationalError("database is locked")

        monkeypatch.setattr(store.ledger, "log_intent", locked)
        from cogd.memory.consolidate import _merge

        with pytest.raises(sqlite3.OperationalError):
            _merge(store, survivor, loser, {"how": "title", "score": 0.95}, time.time())
        monkeypatch.undo()
        assert digests(root) == before
        assert store.ledger.intents() == [] and store.events() == events_before
        assert store.sync()["refused"] == 0 and store.events() == events_before  # rewritten as they were: no edit
        assert {r["id"]: r["status"] for r in store.projection.rows()} == {survivor: "candidate", loser: "candidate"}
    finally:
        store.close()


def test_a_crafted_intent_writes_nothing(tmp_path):
    """A ledger that arrives with the repository (a crafted .cogd/state.db) holding an intent aimed outside
    the record folders, or with a post-image that is not the record it names: dropped, nothing written."""
    root = make_repo(tmp_path / "repo", SMALL)
    store = open_store(root)
    try:
        legit = store.record("observation", A_TEXT)["record"]["id"]
        text = (root / ".cogd" / "memory" / "observations" / f"{legit}.md").read_text(encoding="utf-8")
        other = "01M8RNTRWD3G1X9ZP9JET7GB91"
        for path, post_text in (("../../evil.md", "x"), ("observations/../../../evil.md", "x"),
                                (f"observations/{other}.md", text)):  # the text is another record's
            plan = {"files": [{"path": path, "pre": None, "post": hashlib.sha256(post_text.encode()).hexdigest(),
                               "text": post_text, "project": True, "text_changed": True, "write": True,
                               "delete": False}], "ops": [], "erase": []}
            store.ledger.open_intent("record", "agent", plan)
        events_before = store.events()
        store.sync()
        assert store.ledger.intents() == []
        assert not (tmp_path / "evil.md").exists() and not (root / "evil.md").exists()
        assert not (root / ".cogd" / "memory" / "observations" / f"{other}.md").exists()
        assert store.events() == events_before
    finally:
        store.close()
