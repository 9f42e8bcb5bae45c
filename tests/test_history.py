"""History mining on real git repositories: hunks onto definitions, skip rules, secrets, a
hostile repository config, no leakage when HEAD moves, and one real daemon end to end."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from cogd.config import HistoryConfig
from cogd.history import git as history_git
from cogd.history.miner import HistoryMiner
from cogd.history.query import HistoryQueries
from cogd.history.store import HistoryStore, associated, entity_commits, status
from cogd.index import store as index_store
from cogd.index.indexer import Indexer
from conftest import cogd_in_process, run_cogd, wait_for, write

BASE_TIME = 1_700_000_000


def commit(root: Path, message: str, *, author: str = "Dev", email: str = "dev@example.com",
           when: int | None = None) -> str:
    """``git add -A && git commit`` with a fixed identity and time; returns the new hash."""
    n = int(subprocess.run(["git", "-C", str(root), "rev-list", "--count", "--all"], capture_output=True,
                           text=True).stdout.strip() or 0)
    stamp = f"{when or BASE_TIME + 3600 * n} +0000"
    env = {**os.environ, "GIT_AUTHOR_NAME": author, "GIT_AUTHOR_EMAIL": email, "GIT_COMMITTER_NAME": author,
           "GIT_COMMITTER_EMAIL": email, "GIT_AUTHOR_DATE": stamp, "GIT_COMMITTER_DATE": stamp}
    subprocess.run(["git", "-C", str(root), "add", "-A"], check=True, env=env)
    subprocess.run(["git", "-C", str(root), "commit", "-q", "--allow-empty", "-m", message], check=True, env=env)
    return git_out(root, "rev-parse", "HEAD")


def git_out(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True, text=True).stdout.strip()


SHAPES_V1 = '''"""Shapes."""


def area(width, height):
    """Area of a rectangle."""
    return width * height


def perimeter(width, height):
    return 2 * (width + height)


class Circle:
    def __init__(self, radius):
        self.radius = radius

    def scale(self, factor):
        return Circle(self.radius * factor)
'''


def init_repo(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "init", "-q", "-b", "main", str(root)], check=True)
    write(root, "shapes.py", SHAPES_V1)
    write(root, "README.md", "shapes\n")
    commit(root, "initial shapes")
    return root


def mine(root: Path, **settings) -> tuple[HistoryMiner, HistoryStore]:
    (root / ".cogd" / "index").mkdir(parents=True, exist_ok=True)
    store = HistoryStore(root / ".cogd" / "index" / "history.db")
    miner = HistoryMiner(root, store, HistoryConfig(**settings))
    miner.sync()
    return miner, store


def indexed(root: Path):
    """The work tree indexed in-process; a read-only connection to its index."""
    db = root / ".cogd" / "index" / "index.db"
    indexer = Indexer(root, db)
    indexer.refresh()
    indexer.conn.close()
    return index_store.connect(db, readonly=True)


def touched(store: HistoryStore, hash_: str) -> dict[str, int]:
    return dict(store.reader().execute("SELECT entity_id, lines FROM touched WHERE hash = ?", (hash_,)).fetchall())


def skipped(store: HistoryStore, hash_: str) -> str | None:
    return store.reader().execute("SELECT skipped FROM commits WHERE hash = ?", (hash_,)).fetchone()[0]


# ---------------------------------------------------------------- hunks onto definitions

def test_hunks_map_onto_the_innermost_definition_at_the_parent(tmp_path):
    root = init_repo(tmp_path / "repo")
    text = SHAPES_V1.replace("    return width * height", "    if width < 0:\n        raise ValueError(width)\n"
                             "    return width * height")
    write(root, "shapes.py", text)
    inside = commit(root, "area rejects negative widths")
    write(root, "shapes.py", text.replace("Circle(self.radius * factor)", "Circle(abs(self.radius * factor))"))
    method = commit(root, "scale keeps the radius positive")
    write(root, "shapes.py", '"""Shapes, in two dimensions."""\n' + text.split("\n", 1)[1].replace(
        "Circle(self.radius * factor)", "Circle(abs(self.radius * factor))"))
    module = commit(root, "say what the shapes are")
    miner, store = mine(root)
    try:
        # Two lines inserted after area()'s docstring (``@@ -5,0 +6,2 @@``): inside area, 2 lines.
        assert touched(store, inside) == {"shapes.py::area": 2}
        assert touched(store, method) == {"shapes.py::Circle.scale": 1}
        assert touched(store, module) == {"shapes.py": 1}  # the module docstring is outside every definition
        assert skipped(store, inside) is None
        assert [c["hash"] for c in entity_commits(store.reader(), "shapes.py::area")] == [inside]
    finally:
        store.close()


def test_a_renamed_file_maps_onto_its_old_path_and_then_onto_the_current_index(tmp_path):
    root = init_repo(tmp_path / "repo")
    subprocess.run(["git", "-C", str(root), "mv", "shapes.py", "geometry.py"], check=True)
    commit(root, "rename the module")
    write(root, "geometry.py", SHAPES_V1.replace("2 * (width + height)", "2 * width + 2 * height"))
    edited = commit(root, "perimeter without parentheses")
    subprocess.run(["git", "-C", str(root), "mv", "geometry.py", "plane.py"], check=True)
    commit(root, "rename the module again")
    miner, store = mine(root)
    try:
        assert touched(store, edited) == {"geometry.py::perimeter": 1}  # the id at the edit's parent
        conn = indexed(root)
        queries = HistoryQueries(miner, HistoryConfig())
        found = queries.associations(conn, '"parentheses"', 10)
        # geometry.py no longer exists; its perimeter is plane.py's now (the one definition of that name).
        assert [(a.entity_id, a.evidence) for a in found] == [("plane.py::perimeter", 1)]
        conn.close()
    finally:
        store.close()


# ---------------------------------------------------------------- skip rules

def test_skip_rules_are_applied_and_counted(tmp_path):
    root = init_repo(tmp_path / "repo")
    write(root, "README.md", "shapes, documented\n")
    docs = commit(root, "document the shapes")
    write(root, "shapes.py", SHAPES_V1.replace("factor", "k"))
    bot = commit(root, "Apply automatic fixes", author="pre-commit-ci[bot]", email="66853113+pre-commit-ci[bot]@users.noreply.github.com")
    write(root, "shapes.py", SHAPES_V1.replace("factor", "f"))
    version = commit(root, "Release 2.0.1")
    for n in range(4):
        write(root, f"pkg/mod{n}.py", f"def f{n}():\n    return {n}\n")
    commit(root, "add modules")
    for n in range(4):
        write(root, f"pkg/mod{n}.py", f"def f{n}():\n    return {n + 1}\n")
    mass = commit(root, "reformat everything")
    subprocess.run(["git", "-C", str(root), "checkout", "-q", "-b", "topic"], check=True)
    write(root, "shapes.py", SHAPES_V1.replace("factor", "f").replace("2 * (width + height)", "(width + height) * 2"))
    topic = commit(root, "perimeter multiplies last")
    subprocess.run(["git", "-C", str(root), "checkout", "-q", "main"], check=True)
    write(root, "README.md", "shapes, documented twice\n")
    commit(root, "more docs")
    env = {**os.environ, "GIT_AUTHOR_NAME": "Dev", "GIT_AUTHOR_EMAIL": "d@e", "GIT_COMMITTER_NAME": "Dev",
           "GIT_COMMITTER_EMAIL": "d@e"}
    subprocess.run(["git", "-C", str(root), "merge", "-q", "--no-ff", "-m", "Merge branch topic", "topic"],
                   check=True, env=env)
    merge = git_out(root, "rev-parse", "HEAD")
    miner, store = mine(root, max_files=3)
    try:
        assert skipped(store, docs) == "no_code"
        assert skipped(store, bot) == "bot"
        assert skipped(store, version) == "version"
        assert skipped(store, mass) == "mass_files"
        assert skipped(store, merge) == "merge"
        assert skipped(store, topic) is None  # the merged branch's own commit is mined
        assert touched(store, topic) == {"shapes.py::perimeter": 1}
        figures = status(store.reader())
        # "add modules" adds four source files: a mass change too at max_files = 3.
        assert figures["skipped"] == {"bot": 1, "mass_files": 2, "merge": 1, "no_code": 2, "version": 1}
        assert figures["mined"] == 2  # initial shapes, perimeter multiplies last
        assert figures["commits"] == 9
    finally:
        store.close()


# ---------------------------------------------------------------- hostile input

def test_a_secret_in_a_commit_message_is_stored_masked(tmp_path):
    root = init_repo(tmp_path / "repo")
    token = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
    write(root, "shapes.py", SHAPES_V1.replace("factor", "ratio"))
    leaked = commit(root, f"scale by ratio\n\ndeploy with token {token}")
    miner, store = mine(root)
    try:
        message = store.reader().execute("SELECT message FROM commits WHERE hash = ?", (leaked,)).fetchone()[0]
        assert token not in message and "[secret:github_token]" in message
        assert associated(store.reader(), '"a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"',
                          miner_settings()) == []  # the secret is not searchable either
        raw = (root / ".cogd" / "index" / "history.db").read_bytes()
        assert token.encode() not in raw
    finally:
        store.close()


def miner_settings():
    from cogd.history.store import AssociationSettings

    return AssociationSettings()


def test_a_hostile_repository_config_runs_nothing(tmp_path):
    root = init_repo(tmp_path / "repo")
    write(root, ".gitattributes", "*.py diff=evil\n")
    write(root, "shapes.py", SHAPES_V1.replace("factor", "ratio"))
    edited = commit(root, "scale by ratio")
    marker = tmp_path / "pwned"
    payload = f"sh -c 'touch {marker}'"
    for key, value in (("diff.external", payload), ("diff.evil.textconv", payload), ("diff.evil.command", payload),
                       ("core.fsmonitor", payload), ("core.pager", payload), ("pager.log", payload)):
        subprocess.run(["git", "-C", str(root), "config", key, value], check=True)
    # The control: plain git runs the repository's programs (its external diff, here).
    subprocess.run(["git", "-C", str(root), "diff", "HEAD~1", "HEAD"], capture_output=True)
    assert marker.exists()
    marker.unlink()
    miner, store = mine(root)
    try:
        assert touched(store, edited) == {"shapes.py::Circle.scale": 2}
        assert not marker.exists()
    finally:
        store.close()


def test_head_is_read_from_the_git_files_as_git_reads_it(tmp_path):
    root = init_repo(tmp_path / "repo")
    head = git_out(root, "rev-parse", "HEAD")
    assert history_git.head_from_files(root) == head
    subprocess.run(["git", "-C", str(root), "pack-refs", "--all"], check=True)
    assert history_git.head_from_files(root) == head  # from packed-refs
    subprocess.run(["git", "-C", str(root), "checkout", "-q", "--detach"], check=True)
    assert history_git.head_from_files(root) == head
    worktree = tmp_path / "wt"
    subprocess.run(["git", "-C", str(root), "worktree", "add", "-q", "--detach", str(worktree), head], check=True)
    assert history_git.head_from_files(worktree) == head  # .git is a gitdir: file


# ---------------------------------------------------------------- no leakage

def test_nothing_after_head_is_used_when_the_tree_moves_backwards_and_forwards(tmp_path):
    root = init_repo(tmp_path / "repo")
    early = commit(root, "nothing yet")
    for n, word in enumerate(("velocity", "velocity again")):
        write(root, "shapes.py", SHAPES_V1.replace("factor", f"factor{n}").replace("2 * (width", f"{n + 3} * (width"))
        commit(root, f"scale and perimeter learn {word}")
    late = git_out(root, "rev-parse", "HEAD")
    miner, store = mine(root)
    queries = HistoryQueries(miner, HistoryConfig(co_change_min_support=2))
    conn = indexed(root)
    try:
        def visible() -> tuple:
            found = queries.associations(conn, '"velocity"', 10)
            pairs = queries.co_changed(conn, ["shapes.py::Circle.scale"])
            shown = queries.entity("shapes.py::Circle.scale")
            return ([a.entity_id for a in found], [p[1] for p in pairs], [c["subject"] for c in shown["commits"]])

        assert visible() == (["shapes.py::Circle.scale", "shapes.py::perimeter"], ["shapes.py::perimeter"],
                             ["scale and perimeter learn velocity again", "scale and perimeter learn velocity"])
        # the reads went through the pass's in-memory view, and it answers as the SQL does
        assert queries._view() is miner.view is not None
        view, miner.view = miner.view, None
        assert visible()[:2] == (["shapes.py::Circle.scale", "shapes.py::perimeter"], ["shapes.py::perimeter"])
        miner.view = view
        # the evidence that shrinks history's weights: the reachable change requests and pair commits
        assert queries.evidence() == {"history_association": 3, "co_change": 2}
        subprocess.run(["git", "-C", str(root), "checkout", "-q", "--detach", early], check=True)
        assert not miner.usable()  # HEAD moved, not synchronised yet: history is withheld
        assert visible() == ([], [], [])
        assert queries.evidence() == {"history_association": 0, "co_change": 0}
        miner.sync()
        assert miner.usable() and miner.view is not view and view.key != miner.state_key()  # the old view is stale
        assert visible() == ([], [], [])  # both commits are after HEAD: hidden, not used
        assert queries.evidence() == {"history_association": 1, "co_change": 0}  # only the commits up to HEAD count
        assert status(store.reader())["hidden"] == 2
        miner.view = view  # a stale view is never read: its key is not the live set's
        assert queries._view() is None and visible() == ([], [], [])
        subprocess.run(["git", "-C", str(root), "checkout", "-q", "--detach", late], check=True)
        miner.sync()
        assert visible()[0] == ["shapes.py::Circle.scale", "shapes.py::perimeter"]
        assert queries.evidence() == {"history_association": 3, "co_change": 2}
    finally:
        conn.close()
        store.close()


# ---------------------------------------------------------------- one real daemon end to end

@pytest.fixture(scope="module")
def history_daemon(tmp_path_factory):
    root = init_repo(tmp_path_factory.mktemp("hist") / "repo")
    write(root, "shapes.py", SHAPES_V1.replace("2 * (width + height)", "2 * (abs(width) + abs(height))"))
    first = commit(root, "negative sides no longer shrink the outline")
    write(root, "shapes.py", SHAPES_V1.replace("2 * (width + height)", "2 * (abs(width) + abs(height))")
          .replace("self.radius = radius", "self.radius = abs(radius)"))
    second = commit(root, "a circle keeps its outline when built from a negative radius")
    write(root, ".cogd/config.toml", "[embed]\nenabled = false\n[history]\npoll_s = 0.2\n")
    run_cogd(root, "start")
    try:
        run_cogd(root, "index")
        yield root, first, second
    finally:
        run_cogd(root, "stop", check=False)


def test_a_daemon_mines_and_a_pack_explains_the_commit_behind_an_association(history_daemon):
    root, first, second = history_daemon
    state = wait_for(lambda: (s := json.loads(cogd_in_process(root, "history", "--json").stdout))["usable"] and s,
                     what="the history miner to synchronise")
    assert state["mined"] == 3 and state["skipped"] == {} and state["synced_head"] == second
    assert state["file_prior_files"] == 1  # the pass counted shapes.py's changes on the daemon's index
    pack = json.loads(run_cogd(root, "context", "outline grows", "--json").stdout)
    by_id = {i["entity_id"]: i for i in pack["items"]}
    # No word of the prompt is in perimeter's code; the commits that changed it say "outline".
    item = by_id["shapes.py::perimeter"]
    assert item["signals"]["history_evidence"] == 1
    assert item["signals"]["history_commits"] == [f"{first[:10]} negative sides no longer shrink the outline"]
    assert f"{first[:10]} negative sides no longer shrink the outline" in item["reason"]
    init = by_id["shapes.py::Circle.__init__"]
    assert init["signals"]["history_commits"] == [f"{second[:10]} a circle keeps its outline when built from a "
                                                  "negative radius"]
    shown = run_cogd(root, "show", "shapes.py::perimeter").stdout
    assert f"{first[:10]}" in shown and second[:10] not in shown
    assert "changed by 1 mined commit:" in shown  # one commit, said as one
    assert "co-changed" not in shown  # perimeter and Circle.__init__ share no commit
    text = run_cogd(root, "history").stdout
    assert "commits mined: 3" in text and "used by packs: yes" in text


def test_the_daemon_uses_no_commit_after_head(history_daemon):
    root, first, second = history_daemon
    subprocess.run(["git", "-C", str(root), "checkout", "-q", "--detach", first], check=True)
    try:
        run_cogd(root, "index")
        wait_for(lambda: (s := json.loads(cogd_in_process(root, "history", "--json").stdout))["usable"]
                 and s["synced_head"] == first, what="the miner to follow HEAD backwards")
        pack = json.loads(run_cogd(root, "context", "circle radius outline", "--json").stdout)
        labels = [str(x) for i in pack["items"] for x in i["signals"].get("history_commits", [])]
        assert labels and not any(second[:10] in x for x in labels)
        assert second[:10] not in run_cogd(root, "show", "shapes.py::perimeter").stdout
    finally:
        subprocess.run(["git", "-C", str(root), "checkout", "-q", "main"], check=True)


# ---------------------------------------------------------------- measures and bounds

def test_co_change_support_and_confidence_are_the_association_rule_measures(tmp_path):
    root = init_repo(tmp_path / "repo")
    text = SHAPES_V1
    for n in range(3):  # area and perimeter together three times, area alone once more
        text = text.replace(f"width * height{'' if n == 0 else f' + {n - 1}'}", f"width * height + {n}")
        text = text.replace(f"2 * (width + height){'' if n == 0 else f' + {n - 1}'}", f"2 * (width + height) + {n}")
        write(root, "shapes.py", text)
        commit(root, f"together {n}")
    write(root, "shapes.py", text.replace("width * height + 2", "width * height + 3"))
    commit(root, "area alone")
    miner, store = mine(root, co_change_min_support=2)
    try:
        pairs = store.reader().execute("SELECT a, b, support, confidence FROM pairs ORDER BY a, b").fetchall()
        # support(area) = 4, support(perimeter) = 3, support(both) = 3
        assert pairs == [("shapes.py::area", "shapes.py::perimeter", 3, 0.75),
                         ("shapes.py::perimeter", "shapes.py::area", 3, 1.0)]
    finally:
        store.close()


def test_a_commit_quoted_verbatim_does_not_answer_the_prompt(tmp_path):
    root = init_repo(tmp_path / "repo")
    write(root, "shapes.py", SHAPES_V1.replace("factor", "ratio"))
    commit(root, "Scale circles by a ratio")
    miner, store = mine(root)
    try:
        settings = miner_settings()
        assert [a.entity_id for a in associated(store.reader(), '"ratio"', settings, "scale  CIRCLES by a ratio\n")] == []
        assert [a.entity_id for a in associated(store.reader(), '"ratio"', settings, "circles by a ratio")] == [
            "shapes.py::Circle.scale"]
    finally:
        store.close()


def test_a_pass_stops_at_its_time_budget_and_the_next_one_goes_on(tmp_path):
    root = init_repo(tmp_path / "repo")
    write(root, "shapes.py", SHAPES_V1.replace("factor", "ratio"))
    commit(root, "scale by ratio")
    (root / ".cogd" / "index").mkdir(parents=True)
    store = HistoryStore(root / ".cogd" / "index" / "history.db")
    try:
        miner = HistoryMiner(root, store, HistoryConfig(time_budget_s=0.0))
        first = miner.sync()
        assert (first["mined"], first["more"]) == (0, True)
        assert miner.usable()  # the live set is right for HEAD even before anything is mined
        miner.config = HistoryConfig()
        second = miner.sync()
        assert (second["mined"], second["more"]) == (2, False)
        assert status(store.reader())["mined"] == 2
    finally:
        store.close()


def test_a_removed_line_that_looks_like_a_file_header_is_read_as_a_line(tmp_path):
    root = init_repo(tmp_path / "repo")
    text = SHAPES_V1.replace('    """Area of a rectangle."""', '    """Area of a rectangle.\n\n-- a b\n--- c\n    """')
    write(root, "shapes.py", text)
    commit(root, "document area oddly")
    write(root, "shapes.py", text.replace("-- a b\n--- c\n", "").replace("factor", "ratio"))
    edited = commit(root, "tidy the docstring and scale by ratio")
    miner, store = mine(root)
    try:
        assert touched(store, edited) == {"shapes.py::area": 2, "shapes.py::Circle.scale": 2}
    finally:
        store.close()


def merged_pull_request(tmp_path) -> tuple:
    """A repository whose main branch merged a two-commit feature branch as pull request #7:
    ``(root, first commit, second commit, merge commit)``."""
    root = init_repo(tmp_path / "repo")
    subprocess.run(["git", "-C", str(root), "checkout", "-q", "-b", "feature"], check=True)
    write(root, "shapes.py", SHAPES_V1.replace("factor", "ratio"))
    one = commit(root, "wip")
    write(root, "shapes.py", SHAPES_V1.replace("factor", "ratio").replace("2 * (width", "2.0 * (width"))
    two = commit(root, "fix review comments")
    subprocess.run(["git", "-C", str(root), "checkout", "-q", "main"], check=True)
    env = {**os.environ, "GIT_AUTHOR_NAME": "Dev", "GIT_AUTHOR_EMAIL": "d@e", "GIT_COMMITTER_NAME": "Dev",
           "GIT_COMMITTER_EMAIL": "d@e"}
    subprocess.run(["git", "-C", str(root), "merge", "-q", "--no-ff", "-m",
                    "Merge pull request #7 from dev/feature\n\nTolerance for elliptical outlines", "feature"],
                   check=True, env=env)
    merge = git_out(root, "rev-parse", "HEAD")
    return root, one, two, merge


def test_a_merged_pull_request_is_one_change_request_found_by_its_text(tmp_path):
    root, one, two, merge = merged_pull_request(tmp_path)
    miner, store = mine(root)
    try:
        found = associated(store.reader(), '"elliptical"', miner_settings())
        # Both commits' definitions, through the merge's text, as one request (evidence 1).
        assert [(a.entity_id, a.evidence, a.commits) for a in found] == [
            ("shapes.py::Circle.scale", 1, [merge]), ("shapes.py::perimeter", 1, [merge])]
        # each request's time is its newest member commit's (committer time), aligned with commits
        newest = int(git_out(root, "log", "-1", "--format=%ct", two))
        assert newest > int(git_out(root, "log", "-1", "--format=%ct", one))
        assert [a.times for a in found] == [[newest], [newest]]
        assert associated(store.reader(), '"review"', miner_settings())[0].commits == [merge]
        # --explain labels the request by the pull request's title, not by "Merge pull request #7 from …"
        queries = HistoryQueries(miner, HistoryConfig())
        assert queries._view() is not None and queries.subjects([merge, one]) == {
            merge: "Tolerance for elliptical outlines (#7)", one: "wip"}
        miner.view = None  # the same labels from SQL
        assert queries.subjects([merge, one]) == {merge: "Tolerance for elliptical outlines (#7)", one: "wip"}
        subprocess.run(["git", "-C", str(root), "checkout", "-q", "--detach", two], check=True)
        miner.sync()  # the merge is after HEAD now: its text is not used, nor its grouping
        assert associated(store.reader(), '"elliptical"', miner_settings()) == []
        assert [(a.entity_id, a.commits) for a in associated(store.reader(), '"review"', miner_settings())] == [
            ("shapes.py::perimeter", [two])]
        assert one != two
    finally:
        store.close()


def test_a_deleted_projection_is_mined_again(tmp_path):
    root = init_repo(tmp_path / "repo")
    miner, store = mine(root)
    try:
        assert status(store.reader())["commits"] == 1
        for suffix in ("", "-wal", "-shm"):
            Path(f"{store.path}{suffix}").unlink(missing_ok=True)
        assert miner.sync()["mined"] == 1
        assert status(store.reader())["commits"] == 1 and miner.usable()
    finally:
        store.close()


# ---------------------------------------------------------------- cogd history says what happens next

def test_cogd_history_says_what_will_happen(tmp_path):
    from cogd.cli.history import describe

    root = init_repo(tmp_path / "repo")
    write(root, ".cogd/config.toml", "[embed]\nenabled = false\n")
    (root / ".cogd" / "index").mkdir(parents=True)
    (root / ".cogd" / "index" / "history.db").write_bytes(b"not a database, damaged")
    text = run_cogd(root, "history").stdout  # no daemon: this command opens (and recovers) the projection
    assert "of the newest 3000: [history] max_commits" in " ".join(text.split())
    assert "no daemon runs: nothing is being mined now; `cogd start` mines HEAD's history" in " ".join(text.split())
    status_text = " ".join(run_cogd(root, "status", check=False).stdout.split())
    assert "re-mined from git by the daemon's background miner (when none runs: once `cogd start` starts one)" \
        in status_text
    # a daemon's miner before its first pass, and then after it
    store = HistoryStore(tmp_path / "fresh" / "history.db")
    try:
        miner = HistoryMiner(root, store, HistoryConfig())
        fresh = {"enabled": True, **miner.status(), "running": True}
        assert describe(fresh, 0)[-1] == ("mining starts after the first index; co-change pairs and the time spent "
                                          "are counted when the pass ends; used by packs: not yet (HEAD not "
                                          "synchronised)")
        assert describe({**fresh, "state": "mining"}, 0)[-1].startswith(
            "first mining pass under way: 0 commits stored so far; co-change pairs")
        miner.sync()
        done = {"enabled": True, **miner.status(), "running": True}
        assert describe(done, 0)[0].startswith("commits mined: 1 (reachable from HEAD, of the newest 3000: "
                                               "[history] max_commits); skipped: 0")
        assert describe(done, 0)[-1].startswith("co-change pairs: 0; time spent mining: ")
    finally:
        store.close()


def test_one_request_is_one_vote_and_a_weak_match_is_no_evidence(tmp_path):
    root = init_repo(tmp_path / "repo")
    # A broad request: three definitions, most lines changed in area, then one line each in
    # perimeter and Circle.scale (a tie: by id, Circle.scale first).
    write(root, "shapes.py", SHAPES_V1.replace("    return width * height",
                                               "    if width < 0:\n        raise ValueError(width)\n"
                                               "    return width * height")
          .replace("2 * (width + height)", "2 * (abs(width) + height)")
          .replace("self.radius * factor", "self.radius * float(factor)"))
    broad = commit(root, "tidy shapes to match the circle ratio")
    # A narrow one, matching the query better: one definition.
    write(root, "shapes.py", (root / "shapes.py").read_text().replace("self.radius = radius", "self.radius = +radius"))
    narrow = commit(root, "circle ratio radius ratio")
    miner, store = mine(root)
    try:
        from cogd.history.store import AssociationSettings

        def scores(**knobs) -> dict[str, float]:
            return {a.entity_id: a.score for a in associated(store.reader(), '"ratio" OR "circle"',
                                                             AssociationSettings(**knobs))}

        flat = scores(request_decay=0.0)
        assert set(flat) == {"shapes.py::area", "shapes.py::perimeter", "shapes.py::Circle.scale",
                             "shapes.py::Circle.__init__"}
        # request_decay 0: the broad request's three definitions weigh the same
        assert flat["shapes.py::area"] == flat["shapes.py::perimeter"] == flat["shapes.py::Circle.scale"]
        # request_decay 1: its k-th definition (most changed lines first) gets 1/k of that weight;
        # the narrow request's single definition is its first and keeps all of it
        harmonic = scores()  # the default
        assert harmonic["shapes.py::area"] == pytest.approx(flat["shapes.py::area"])
        assert harmonic["shapes.py::Circle.scale"] == pytest.approx(flat["shapes.py::area"] / 2)
        assert harmonic["shapes.py::perimeter"] == pytest.approx(flat["shapes.py::area"] / 3)
        assert harmonic["shapes.py::Circle.__init__"] == pytest.approx(flat["shapes.py::Circle.__init__"])
        assert scores(request_decay=0.5)["shapes.py::perimeter"] == pytest.approx(flat["shapes.py::area"] / 3 ** 0.5)
        # min_match_share 1: only the best-matching request counts (it is the narrow one: two
        # terms, one of them twice, in a shorter text); 0 (and any share at or below the weaker
        # one's relative score) keeps both
        best = associated(store.reader(), '"ratio" OR "circle"', AssociationSettings(request_decay=0.0, min_match_share=1.0))
        assert [(a.entity_id, a.commits) for a in best] == [("shapes.py::Circle.__init__", [narrow])]
        assert best[0].score == pytest.approx(flat["shapes.py::Circle.__init__"])
        both = associated(store.reader(), '"ratio" OR "circle"', AssociationSettings(min_match_share=0.0))
        assert {c for a in both for c in a.commits} == {broad, narrow}
    finally:
        store.close()


TESTS_PY = '''from shapes import area, perimeter


def test_area():
    assert area(2, 3) == 6


def test_perimeter():
    assert perimeter(2, 3) == 10
'''


def test_a_requests_test_edits_are_left_out_of_its_change_when_tests_are_not_wanted(tmp_path):
    from cogd.retrieve.hybrid import is_test_path

    root = init_repo(tmp_path / "repo")
    write(root, "tests/test_shapes.py", TESTS_PY)
    commit(root, "add tests")
    # One request: a one-line fix of perimeter and a larger edit of its tests (most lines: first).
    write(root, "shapes.py", (root / "shapes.py").read_text().replace("2 * (width + height)", "2 * (width + abs(height))"))
    write(root, "tests/test_shapes.py", TESTS_PY.replace("    assert perimeter(2, 3) == 10",
                                                          "    assert perimeter(2, 3) == 10\n"
                                                          "    assert perimeter(2, -3) == 10\n"
                                                          "    assert perimeter(0, 0) == 0"))
    fix = commit(root, "perimeter of a negative height")
    miner, store = mine(root)
    try:
        def found(**knobs) -> dict[str, float]:
            return {a.entity_id: a.score for a in associated(store.reader(), '"perimeter"', miner_settings(), **knobs)}

        kept = found()  # the test edit has the most lines: the request's first, full share
        test_entity = next(e for e in kept if e.startswith("tests/test_shapes.py"))
        assert set(kept) == {test_entity, "shapes.py::perimeter"}
        assert kept["shapes.py::perimeter"] == pytest.approx(kept[test_entity] / 2)
        apart = found(leave_out=is_test_path)
        # without the tests the request changed one definition: it is the first, and n = 1, not 2
        assert set(apart) == {"shapes.py::perimeter"}
        assert apart["shapes.py::perimeter"] == pytest.approx(kept[test_entity] * 2 ** 0.5)
        # a request that changed only tests gives nothing then
        assert associated(store.reader(), '"tests"', miner_settings(), leave_out=is_test_path) == []
        # the query layer applies the caller's predicate only with test_changes = "wanted"
        conn = indexed(root)
        for config, expected in ((HistoryConfig(test_changes="wanted"), {"shapes.py::perimeter"}),
                                 (HistoryConfig(), set(kept))):
            queries = HistoryQueries(miner, config)
            assert {a.entity_id for a in queries.associations(conn, '"perimeter"', 10, None, None, is_test_path)} == expected
            assert {a.entity_id for a in queries.associations(conn, '"perimeter"', 10)} == set(kept)
            assert all(fix in a.commits for a in queries.associations(conn, '"perimeter"', 10))
        conn.close()
    finally:
        store.close()


def test_test_changes_is_validated(tmp_path):
    from cogd.config import ConfigError, load_config

    path = tmp_path / "config.toml"
    assert HistoryConfig().test_changes == "always"  # rule worst of the replay's cross-validation
    path.write_text('[history]\ntest_changes = "wanted"\n')
    assert load_config(path).history.test_changes == "wanted"
    path.write_text('[history]\ntest_changes = "never"\n')
    with pytest.raises(ConfigError, match="must be one of always, wanted"):
        load_config(path)


def test_request_decay_and_min_match_share_are_validated(tmp_path):
    from cogd.config import ConfigError, load_config
    from cogd.history.store import AssociationSettings

    path = tmp_path / "config.toml"
    assert (HistoryConfig().request_decay, HistoryConfig().min_match_share) == (1.0, 0.0)
    assert (AssociationSettings().request_decay, AssociationSettings().min_match_share) == (1.0, 0.0)
    path.write_text("[history]\nrequest_decay = 1\nmin_match_share = 0.25\n")
    loaded = load_config(path).history
    assert (loaded.request_decay, loaded.min_match_share) == (1.0, 0.25)
    queries = HistoryQueries(HistoryMiner(tmp_path, HistoryStore(tmp_path / "history.db"), loaded), loaded)
    assert (queries.settings.request_decay, queries.settings.min_match_share) == (1.0, 0.25)
    queries.miner.store.close()
    for key, value, message in (("request_decay", "-1", "non-negative"), ("request_decay", "inf", "finite"),
                                ("min_match_share", "1.5", r"in \[0, 1\]"), ("min_match_share", "nan", "finite"),
                                ("min_match_share", '"half"', "non-negative number")):
        path.write_text(f"[history]\n{key} = {value}\n")
        with pytest.raises(ConfigError, match=message):
            load_config(path)


def test_name_words_split_a_qualified_name_as_the_query_splits_identifiers():
    from cogd.history.store import definition_words, name_words

    assert name_words("src/a.py::CliRunner.invoke_cmd~2") == ["clirunner", "cli", "runner", "invoke_cmd", "invoke",
                                                                "cmd"]
    assert name_words("src/a.py::_unpack_args") == ["_unpack_args", "unpack", "args"]
    assert name_words("src/a.py") == []  # a file entity has no name of its own
    assert definition_words(["a.py::Context.exit", "a.py::exit", "a.py"]) == "context exit"


def test_a_commit_is_found_by_the_names_of_what_it_changed_with_name_weight(tmp_path):
    from cogd.history.store import AssociationSettings

    root = init_repo(tmp_path / "repo")
    # A maintenance commit whose message shares no word with the query, changing Circle.scale ...
    write(root, "shapes.py", SHAPES_V1.replace("self.radius * factor", "self.radius * float(factor)"))
    upkeep = commit(root, "use floats consistently")
    # ... and one whose message matches it, changing perimeter.
    write(root, "shapes.py", (root / "shapes.py").read_text().replace("2 * (width + height)", "2 * (height + width)"))
    worded = commit(root, "scale the perimeter")
    miner, store = mine(root)
    try:
        conn = store.reader()
        names = dict(conn.execute("SELECT m.hash, n.words FROM names n JOIN messages m ON m.rowid = n.rowid"))
        assert names[upkeep] == "circle scale" and names[worded] == "perimeter"

        def found(view, **knobs) -> dict[str, float]:
            return {a.entity_id: a.score for a in associated(conn, '"scale"', AssociationSettings(**knobs),
                                                             view=miner.view if view else None)}

        text_only = found(True)
        assert text_only == found(False) and set(text_only) == {"shapes.py::perimeter"}  # name_weight 0: as before
        expanded, doubled = found(True, name_weight=1.0), found(True, name_weight=2.0)
        for view in (False, True):  # the SQL path and the in-memory view give one answer
            assert found(view, name_weight=1.0) == pytest.approx(expanded)
        # the upkeep commit is found by its names alone: its score is name_weight x that match
        assert set(expanded) == {"shapes.py::perimeter", "shapes.py::Circle.scale"}
        assert doubled["shapes.py::Circle.scale"] == pytest.approx(2 * expanded["shapes.py::Circle.scale"])
        # the worded commit matches by its text only (its names say "perimeter"): unchanged
        assert expanded["shapes.py::perimeter"] == pytest.approx(text_only["shapes.py::perimeter"])
        assert doubled["shapes.py::perimeter"] == pytest.approx(text_only["shapes.py::perimeter"])
        # a query word in both the text and the names: text score + w x names score, linear in w
        both = [{a.entity_id: a.score for a in associated(conn, '"perimeter"', AssociationSettings(name_weight=w),
                                                          view=miner.view)}["shapes.py::perimeter"]
                for w in (0.0, 1.0, 2.0)]
        assert both[0] < both[1] < both[2] and both[2] - both[1] == pytest.approx(both[1] - both[0])
        # the query layer reads [history] name_weight
        index_conn = indexed(root)
        for config, expected in ((HistoryConfig(), {"shapes.py::perimeter"}),
                                 (HistoryConfig(name_weight=1.0), {"shapes.py::perimeter", "shapes.py::Circle.scale"})):
            queries = HistoryQueries(miner, config)
            assert {a.entity_id for a in queries.associations(index_conn, '"scale"', 10)} == expected
        index_conn.close()
    finally:
        store.close()


def test_a_merged_pull_requests_rows_carry_their_own_commits_names(tmp_path):
    root = init_repo(tmp_path / "repo")
    subprocess.run(["git", "-C", str(root), "checkout", "-q", "-b", "feature"], check=True)
    write(root, "shapes.py", SHAPES_V1.replace("self.radius * factor", "self.radius * float(factor)"))
    member = commit(root, "first step")
    subprocess.run(["git", "-C", str(root), "checkout", "-q", "main"], check=True)
    env = {**os.environ, "GIT_AUTHOR_NAME": "Dev", "GIT_AUTHOR_EMAIL": "d@e", "GIT_COMMITTER_NAME": "Dev",
           "GIT_COMMITTER_EMAIL": "d@e"}
    subprocess.run(["git", "-C", str(root), "merge", "-q", "--no-ff", "feature", "-m",
                    "Merge pull request #7 from dev/feature\n\nmake circles exact"], check=True, env=env)
    miner, store = mine(root)
    try:
        rows = store.reader().execute("SELECT m.hash, m.source, n.words FROM messages m JOIN names n "
                                      "ON n.rowid = m.rowid WHERE m.hash = ?", (member,)).fetchall()
        assert len(rows) == 2 and {words for _h, _s, words in rows} == {"circle scale"}
        assert {source for _h, source, _w in rows} == {member, git_out(root, "rev-parse", "HEAD")}
    finally:
        store.close()


def test_named_request_order_gives_the_definition_the_prompt_names_the_first_share(tmp_path):
    from cogd.history.store import AssociationSettings

    root = init_repo(tmp_path / "repo")
    # One request: most lines in area, one line in perimeter.
    write(root, "shapes.py", SHAPES_V1.replace("    return width * height",
                                               "    if width < 0:\n        raise ValueError(width)\n"
                                               "    return width * height")
          .replace("2 * (width + height)", "2 * (abs(width) + height)"))
    commit(root, "check the sizes")
    miner, store = mine(root)
    try:
        def scores(terms, **knobs) -> dict[str, float]:
            return {a.entity_id: a.score for a in associated(store.reader(), '"sizes"', AssociationSettings(**knobs),
                                                             terms=terms)}

        by_lines = scores(["sizes", "perimeter"])  # request_order "lines", the default: terms unused
        assert by_lines["shapes.py::area"] == pytest.approx(2 * by_lines["shapes.py::perimeter"])
        named = scores(["sizes", "perimeter"], request_order="named")
        assert named["shapes.py::perimeter"] == pytest.approx(by_lines["shapes.py::area"])  # the first, full share
        assert named["shapes.py::area"] == pytest.approx(by_lines["shapes.py::perimeter"])
        # the per_commit place goes to the named definition
        assert set(scores(["perimeter"], request_order="named", per_commit=1)) == {"shapes.py::perimeter"}
        assert set(scores(["perimeter"], per_commit=1)) == {"shapes.py::area"}
        # no terms, or none naming a definition: the lines' order
        assert scores(None, request_order="named") == pytest.approx(by_lines)
        assert scores(["sizes", "width"], request_order="named") == pytest.approx(by_lines)
        # the query layer hands the caller's terms over with [history] request_order = "named"
        conn = indexed(root)
        queries = HistoryQueries(miner, HistoryConfig(request_order="named", per_commit=1))
        assert [a.entity_id for a in queries.associations(conn, '"sizes"', 10, terms=["perimeter"])] == [
            "shapes.py::perimeter"]
        assert [a.entity_id for a in queries.associations(conn, '"sizes"', 10)] == ["shapes.py::area"]
        conn.close()
    finally:
        store.close()


def test_a_pull_request_matched_through_one_commit_is_all_its_commits_change_with_request_members_all(tmp_path):
    root, one, two, merge = merged_pull_request(tmp_path)
    newest = int(git_out(root, "log", "-1", "--format=%ct", two))
    miner, store = mine(root)
    try:
        from cogd.history.store import AssociationSettings

        def found(members: str, view: bool) -> list[tuple]:
            return [(a.entity_id, a.evidence, a.commits, a.times) for a in associated(
                store.reader(), '"review"', AssociationSettings(request_members=members),
                view=miner.view if view else None)]

        assert miner.view is not None and sorted(miner.view.members[merge]) == sorted([one, two])
        for view in (False, True):  # the SQL path and the in-memory view give one answer
            # "read" (the default): matched through two's own message, the request is two's change
            assert found("read", view) == [("shapes.py::perimeter", 1, [merge], [newest])]
            # "all": the pull request's whole change, one request (evidence 1), its newest time
            rows = found("all", view)
            assert {r[0] for r in rows} == {"shapes.py::perimeter", "shapes.py::Circle.scale"}
            assert all(r[1:] == (1, [merge], [newest]) for r in rows)
            # two definitions share the request's weight (score / sqrt(2), the 2nd at 1/2): less than one
            alone = associated(store.reader(), '"review"', AssociationSettings())[0].score
            both = {a.entity_id: a.score for a in associated(store.reader(), '"review"',
                                                             AssociationSettings(request_members="all"))}
            assert max(both.values()) < alone
        # the query layer reads [history] request_members
        conn = indexed(root)
        for config, expected in ((HistoryConfig(), {"shapes.py::perimeter"}),
                                 (HistoryConfig(request_members="all"),
                                  {"shapes.py::perimeter", "shapes.py::Circle.scale"})):
            assert {a.entity_id for a in HistoryQueries(miner, config).associations(conn, '"review"', 10)} == expected
        conn.close()
        # a commit that is no pull request's: the same answer under both settings
        subprocess.run(["git", "-C", str(root), "checkout", "-q", "--detach", two], check=True)
        miner.sync()  # the merge is after HEAD: two is a request of its own
        for view in (False, True):
            assert found("all", view) == found("read", view) == [("shapes.py::perimeter", 1, [two], [newest])]
    finally:
        store.close()


def test_request_members_is_validated(tmp_path):
    from cogd.config import ConfigError, load_config
    from cogd.history.store import AssociationSettings

    assert HistoryConfig().request_members == AssociationSettings().request_members == "read"
    path = tmp_path / "config.toml"
    path.write_text('[history]\nrequest_members = "all"\n')
    loaded = load_config(path).history
    assert loaded.request_members == "all"
    queries = HistoryQueries(HistoryMiner(tmp_path, HistoryStore(tmp_path / "history.db"), loaded), loaded)
    assert queries.settings.request_members == "all"
    queries.miner.store.close()
    path.write_text('[history]\nrequest_members = "some"\n')
    with pytest.raises(ConfigError, match="must be one of read, all"):
        load_config(path)


def test_name_weight_and_request_order_are_validated(tmp_path):
    from cogd.config import ConfigError, load_config
    from cogd.history.store import AssociationSettings

    path = tmp_path / "config.toml"
    assert (HistoryConfig().name_weight, HistoryConfig().request_order) == (0.0, "lines")
    assert (AssociationSettings().name_weight, AssociationSettings().request_order) == (0.0, "lines")
    path.write_text('[history]\nname_weight = 0.5\nrequest_order = "named"\n')
    loaded = load_config(path).history
    assert (loaded.name_weight, loaded.request_order) == (0.5, "named")
    queries = HistoryQueries(HistoryMiner(tmp_path, HistoryStore(tmp_path / "history.db"), loaded), loaded)
    assert (queries.settings.name_weight, queries.settings.request_order) == (0.5, "named")
    queries.miner.store.close()
    for key, value, message in (("name_weight", "-1", "non-negative"), ("name_weight", "inf", "finite"),
                                ("request_order", '"random"', "must be one of lines, named")):
        path.write_text(f"[history]\n{key} = {value}\n")
        with pytest.raises(ConfigError, match=message):
            load_config(path)


def test_a_projection_without_the_names_table_is_mined_again(tmp_path):
    import sqlite3

    root = init_repo(tmp_path / "repo")
    write(root, "shapes.py", SHAPES_V1.replace("self.radius * factor", "self.radius * float(factor)"))
    change = commit(root, "use floats consistently")
    miner, store = mine(root)
    store.close()
    # the shape before the names table: schema 3, no names rows
    path = root / ".cogd" / "index" / "history.db"
    conn = sqlite3.connect(path)
    conn.execute("DROP TABLE names")
    conn.execute("UPDATE meta SET value = '3' WHERE key = 'schema_version'")
    conn.commit()
    conn.close()
    miner, store = mine(root)  # opening it drops the old shape; the pass mines every commit again
    try:
        assert store.meta("schema_version") == "4"
        assert miner.last_pass["mined"] == 2
        words = dict(store.reader().execute("SELECT m.hash, n.words FROM names n JOIN messages m ON m.rowid = n.rowid"))
        assert words[change] == "circle scale"
    finally:
        store.close()
