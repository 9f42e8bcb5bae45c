"""A grammar that does not load or a query that does not compile disables its language only.

The query override directory (``.cogd/queries/<language>/<kind>.scm``) is how
a test breaks one query, and a shadow package first on ``PYTHONPATH`` is how it
breaks one grammar wheel; real daemons, the real CLI and real tree-sitter
everywhere.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from conftest import COGD, make_repo
from cogd.index import languages
from cogd.index.indexer import Indexer, ParseLimits, parse_job, timeout_result
from cogd.index.parsepool import ParsePool

BROKEN_AT_LINE_15 = "".join(f";; line {n}\n" for n in range(1, 15)) + "(nonexistent_node) @name @definition.function\n"
PYTHON_TAGS_PROBLEM = ("tags query does not compile: Invalid node type at line 15, column 2 of "
                       ".cogd/queries/python/tags.scm: nonexistent_node")
FILES = {
    "app/models.py": "class User:\n    def name(self):\n        return 'u'\n",
    "app/views.py": "from app.models import User\n\n\ndef show(user: User):\n    return user.name()\n",
    "svc/main.go": "package svc\n\nfunc Serve() int { return helper() }\n",
    "svc/util.go": "package svc\n\nfunc helper() int { return 1 }\n\ntype Config struct{ Port int }\n",
}
# The Go entities of FILES with a healthy grammar: (kind, count), file entities included.
GO_ENTITIES = {"class": 1, "file": 2, "function": 2, "module": 2}


def cogd(root: Path, *args: str, env: dict | None = None, check: bool = True) -> subprocess.CompletedProcess:
    """The real CLI in ``root``; a wide terminal so rich does not wrap the status lines."""
    proc = subprocess.run([COGD, *args], cwd=root, capture_output=True, text=True, timeout=180,
                          env={**os.environ, "COLUMNS": "400", **(env or {})})
    if check and proc.returncode != 0:
        raise AssertionError(f"cogd {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


@pytest.fixture
def repo(tmp_path):
    root = make_repo(tmp_path / "repo", FILES)
    (root / ".cogd").mkdir()
    (root / ".cogd" / "config.toml").write_text("[embed]\nenabled = false\n", encoding="utf-8")
    env: dict = {}
    yield root, env
    cogd(root, "stop", env=env, check=False)


def by_language(stats: dict) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for row in stats["entities"]:
        out.setdefault(row["language"], {})[row["kind"]] = row["n"]
    return out


def break_python_tags(root: Path) -> Path:
    path = root / ".cogd" / "queries" / "python" / "tags.scm"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(BROKEN_AT_LINE_15, encoding="utf-8")
    return path


def start_and_index(root: Path, env: dict) -> dict:
    cogd(root, "start", env=env)
    cogd(root, "index", env=env)
    return json.loads(cogd(root, "status", "--json", env=env).stdout)


def test_a_broken_query_disables_its_language_only_and_says_so(repo):
    root, env = repo
    override = break_python_tags(root)
    status = start_and_index(root, env)

    assert status["languages"]["disabled"] == {"python": PYTHON_TAGS_PROBLEM}
    assert status["languages"]["checked"] == ["go", "python"]
    assert status["index"]["files"] == 4
    assert status["index"]["skipped"] == {"language_disabled": 2}
    stats = json.loads(cogd(root, "stats", "--json", env=env).stdout)
    assert by_language(stats) == {"go": GO_ENTITIES, "python": {"file": 2}}
    assert {(r["language"], r["status"]): r["n"] for r in stats["files"]} == {
        ("go", "ok"): 2, ("python", "language_disabled"): 2}

    text = cogd(root, "status", env=env).stdout
    assert f"disabled    python: {PYTHON_TAGS_PROBLEM}" in text
    assert "skipped     language_disabled 2" in text

    doctor = cogd(root, "doctor", "--json", "--no-model-load", env=env, check=False)
    assert doctor.returncode == 1
    checks = {c["name"]: c for c in json.loads(doctor.stdout)["checks"]}
    failed = [name for name, c in checks.items() if c["status"] == "fail"]
    assert failed == ["language python"]
    assert checks["language python"]["finding"] == \
        f"python is disabled (its files are indexed by path only): {PYTHON_TAGS_PROBLEM}"
    assert checks["language python"]["fix"] == "fix or remove .cogd/queries/python/tags.scm (then `cogd stop; cogd start`)"

    log = (root / ".cogd" / "logs" / "daemon.log").read_text(encoding="utf-8")
    assert "Traceback" not in log
    assert log.count("python disabled (its files are indexed by path only)") == 1

    # A full re-index parses every file again: still one report, no traceback.
    cogd(root, "index", "--full", env=env)
    log = (root / ".cogd" / "logs" / "daemon.log").read_text(encoding="utf-8")
    assert "Traceback" not in log and log.count("python disabled") == 1

    # Fixed: the next daemon sees the language's state changed and parses its files again.
    override.unlink()
    cogd(root, "stop", env=env)
    status = start_and_index(root, env)
    assert status["languages"]["disabled"] == {}
    assert status["index"]["skipped"] == {}
    fixed = by_language(json.loads(cogd(root, "stats", "--json", env=env).stdout))
    assert fixed["go"] == GO_ENTITIES
    assert fixed["python"] == {"file": 2, "class": 1, "method": 1, "function": 1}
    doctor = cogd(root, "doctor", "--json", "--no-model-load", env=env, check=False)
    assert doctor.returncode == 0, doctor.stdout
    assert {c["name"]: c["status"] for c in json.loads(doctor.stdout)["checks"]}["languages"] == "ok"


def test_a_grammar_wheel_that_does_not_load_disables_its_language_only(repo, tmp_path):
    root, env = repo
    shadow = tmp_path / "shadow"
    (shadow / "tree_sitter_go").mkdir(parents=True)
    (shadow / "tree_sitter_go" / "__init__.py").write_text('raise ImportError("simulated broken wheel")\n')
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(shadow), os.environ.get("PYTHONPATH")]))
    status = start_and_index(root, env)

    assert status["languages"]["disabled"] == {"go": "grammar does not load: ImportError: simulated broken wheel"}
    assert status["index"]["skipped"] == {"language_disabled": 2}
    stats = json.loads(cogd(root, "stats", "--json", env=env).stdout)
    assert by_language(stats) == {"go": {"file": 2}, "python": {"file": 2, "class": 1, "method": 1, "function": 1}}
    doctor = cogd(root, "doctor", "--json", "--no-model-load", env=env, check=False)
    assert doctor.returncode == 1
    check = {c["name"]: c for c in json.loads(doctor.stdout)["checks"]}["language go"]
    assert check["status"] == "fail"
    assert check["fix"] == "reinstall the grammar: pip install --force-reinstall tree-sitter-go (then `cogd stop; cogd start`)"
    assert "Traceback" not in (root / ".cogd" / "logs" / "daemon.log").read_text(encoding="utf-8")


def test_doctor_without_a_daemon_checks_the_languages_itself(repo):
    root, env = repo
    break_python_tags(root)
    doctor = cogd(root, "doctor", "--json", "--no-model-load", env=env, check=False)
    assert doctor.returncode == 1
    checks = {c["name"]: c for c in json.loads(doctor.stdout)["checks"]}
    assert checks["language python"]["details"] == {"language": "python", "problem": PYTHON_TAGS_PROBLEM,
                                                     "checked_by": "doctor"}
    assert not (root / ".cogd" / "index").exists()  # doctor only reads


def test_each_language_is_checked_once_per_process_not_per_file(repo, monkeypatch):
    root, _env = repo
    break_python_tags(root)
    for n in range(5):
        (root / f"more_{n}.py").write_text(f"def f{n}():\n    pass\n")
    calls: list[str] = []
    real = languages._check
    monkeypatch.setattr(languages, "_check", lambda name, o: calls.append(name) or real(name, o))
    monkeypatch.setattr(languages, "_compiled", {})
    monkeypatch.setattr(languages, "_by_root", {})
    indexer = Indexer(root, root / ".cogd" / "test-index.db")
    try:
        result = indexer.refresh(full=True)
        assert result.skipped == {"language_disabled": 7}
        indexer.refresh(full=True)
    finally:
        indexer.close()
    assert sorted(calls) == ["go", "python"]
    assert languages.problems() == {"python": PYTHON_TAGS_PROBLEM}


def test_parse_workers_compile_what_the_daemon_checked_and_report_the_same(repo):
    root, _env = repo
    override = break_python_tags(root)
    try:
        snapshot = languages.configure(root)  # what the index worker does before starting its pool
        assert languages.check("python").problem == PYTHON_TAGS_PROBLEM
    finally:
        languages.configure(None)
    override.unlink()  # an edit after the daemon read its overrides does not split daemon and workers
    limits = ParseLimits(1 << 20, 2000, 4096, 300)
    jobs = [(rel, (root / rel).read_bytes(), limits) for rel in sorted(FILES)]
    pool = ParsePool(1, parse_job, timeout_result, languages.configure, (str(root), snapshot))
    try:
        outcomes = pool.map(jobs, budget_s=60.0)
    finally:
        pool.close()
    assert [(parsed.path, status) for parsed, status in outcomes] == [
        ("app/models.py", "language_disabled"), ("app/views.py", "language_disabled"),
        ("svc/main.go", "ok"), ("svc/util.go", "ok")]
    assert [len(parsed.entities) for parsed, _ in outcomes] == [1, 1, 3, 4]


def test_an_override_outside_the_tree_is_refused(repo, tmp_path):
    root, _env = repo
    outside = tmp_path / "elsewhere.scm"
    outside.write_text("(function_definition name: (identifier) @name) @definition.function\n")
    link = root / ".cogd" / "queries" / "python" / "tags.scm"
    link.parent.mkdir(parents=True)
    link.symlink_to(outside)
    languages.configure(root)
    try:
        assert languages.check("python").problem == ("tags query unusable: .cogd/queries/python/tags.scm is refused: "
                                                     "a symlink is on its path (an override must be a regular file)")
    finally:
        languages.configure(None)


def test_a_working_override_replaces_the_shipped_query(repo):
    root, _env = repo
    path = root / ".cogd" / "queries" / "python" / "tags.scm"
    path.parent.mkdir(parents=True)
    path.write_text("(class_definition name: (identifier) @name) @definition.class\n")  # classes only
    indexer = Indexer(root, root / ".cogd" / "test-index.db")
    try:
        indexer.refresh()
        kinds = dict(indexer.conn.execute(
            "SELECT kind, count(*) FROM entities WHERE language = 'python' GROUP BY kind").fetchall())
        assert languages.check("python").overrides == (".cogd/queries/python/tags.scm",)
        assert languages.check("go").overrides == ()
    finally:
        indexer.close()
        languages.configure(None)
    assert kinds == {"file": 2, "class": 1}
    assert languages.check("python").overrides == ()  # another root (none): the shipped queries
