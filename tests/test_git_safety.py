"""git on a hostile repository: nothing the repository configures runs, and its history cannot lie.

Every case builds a real repository, gives it the configuration an attacker who packed the tree
would write into ``.git/config``, shows (where cheap) that plain git does run the program, then
runs cogd's own readers and asserts the marker file was never made.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from cogd import committed, gitsafe
from cogd.history import git as history_git
from cogd.history.diff import MAX_MESSAGE_CHARS, log_format, parse_log
from cogd.index import sources
from conftest import write
from test_history import SHAPES_V1, commit, git_out, init_repo, mine, skipped, touched


def evil(marker: Path) -> str:
    return f"sh -c 'touch {marker}; cat'"


def test_filters_and_fsmonitor_of_the_repository_never_run_in_the_index_readers(tmp_path):
    root = init_repo(tmp_path / "repo")
    write(root, ".gitattributes", "*.py filter=evil\n")
    commit(root, "attributes")
    marker = tmp_path / "pwned"
    for key in ("filter.evil.clean", "filter.evil.process", "filter.evil.smudge", "core.fsmonitor"):
        subprocess.run(["git", "-C", str(root), "config", key, evil(marker)], check=True)
    (root / "shapes.py").touch()  # stat-dirty: git status must look at the content
    subprocess.run(["git", "-C", str(root), "status", "--porcelain"], capture_output=True)
    assert marker.exists()  # the control: plain git runs the repository's programs
    marker.unlink()
    subprocess.run(["git", "-C", str(root), "config", "--unset", "core.fsmonitor"], check=True)
    (root / "shapes.py").touch()
    assert sources.git_head(root) == git_out(root, "rev-parse", "HEAD")
    assert "shapes.py" in sources._git_files(root)
    assert {".gitattributes", "shapes.py"} <= set(sources.recently_changed_files(root))  # runs git status and log
    assert committed.committed_state(root) == []  # runs ls-files -- .cogd
    assert not marker.exists()
    assert "-c" in gitsafe.argv(root, "status") and "filter.evil.process=" in gitsafe.argv(root, "status")


def test_a_partial_clone_never_fetches_through_the_repository_transport(tmp_path):
    server = init_repo(tmp_path / "server")
    write(server, "shapes.py", SHAPES_V1.replace("factor", "ratio"))
    commit(server, "scale by ratio")
    for key in ("uploadpack.allowFilter", "uploadpack.allowAnySHA1InWant"):
        subprocess.run(["git", "-C", str(server), "config", key, "true"], check=True)
    clone = tmp_path / "lazy"
    subprocess.run(["git", "clone", "-q", "--no-local", "--filter=blob:none", f"file://{server}", str(clone)],
                   check=True, capture_output=True)
    marker = tmp_path / "pwned"
    subprocess.run(["git", "-C", str(clone), "config", "remote.origin.uploadpack",
                    f"sh -c 'touch {marker}; exec git-upload-pack \"$@\"' -"], check=True)
    reader = history_git.BlobReader(clone)
    try:
        reader.read("HEAD~1:shapes.py", 1 << 20)  # missing locally: git fails instead of fetching
        raise AssertionError("a blob missing from a partial clone was read")
    except history_git.GitError:
        pass
    finally:
        reader.close()
    assert not marker.exists()
    miner, store = mine(clone)  # refused as a whole, with a reason
    try:
        assert miner.state == "partial_clone"
        assert store.reader().execute("SELECT count(*) FROM commits").fetchone()[0] == 0
    finally:
        store.close()
    assert not marker.exists()


def test_a_commit_message_cannot_forge_a_header_or_rewrite_a_mined_commit(tmp_path):
    root = init_repo(tmp_path / "repo")
    honest = git_out(root, "rev-parse", "HEAD")
    forged = (f"tweak\n\nx\x1d\n\x1e{honest}\x1f\x1f1000000000\x1fMaintainer\x1fm@m\x1f"
              "REWRITTEN: call eval on input\x1d\n")
    write(root, "shapes.py", SHAPES_V1.replace("factor", "ratio"))
    (tmp_path / "msg").write_text(forged, encoding="utf-8")
    subprocess.run(["git", "-C", str(root), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(root), "-c", "user.name=a", "-c", "user.email=a@b", "commit", "-q",
                    "--cleanup=verbatim", "-F", str(tmp_path / "msg")], check=True)
    attacker = git_out(root, "rev-parse", "HEAD")
    miner, store = mine(root)
    try:
        rows = dict(store.reader().execute("SELECT hash, message FROM commits").fetchall())
        assert set(rows) == {honest, attacker}
        assert rows[honest] == "initial shapes"
        assert touched(store, attacker) == {"shapes.py::Circle.scale": 2}
    finally:
        store.close()
    # The parser alone: a header naming a hash that was not asked for is dropped.
    nonce = "00ff"
    stream = [f"\x1e{nonce}{'a' * 40}\x1f\x1f1\x1fA\x1fa@a\x1fhello\x1d{nonce}\n".encode()]
    assert [c.hash for c in parse_log(stream, nonce, {"a" * 40})] == ["a" * 40]
    assert list(parse_log(stream, nonce, {"b" * 40})) == []
    assert "%x1e00ff%H" in log_format(nonce)


def test_a_secret_cut_by_the_message_limit_is_still_masked(tmp_path):
    root = init_repo(tmp_path / "repo")
    key = "AKIA" + "IOSFODNN7EXAMPLE"
    message = "x" * (MAX_MESSAGE_CHARS - 10) + " " + key + " tail"
    write(root, "shapes.py", SHAPES_V1.replace("factor", "ratio"))
    leaked = commit(root, message)
    miner, store = mine(root)
    try:
        stored = store.reader().execute("SELECT message FROM commits WHERE hash = ?", (leaked,)).fetchone()[0]
        assert len(stored) <= MAX_MESSAGE_CHARS
        assert "AKIAIOSFO" not in stored
    finally:
        store.close()
    raw = b"".join(p.read_bytes() for p in (root / ".cogd" / "index").glob("history.db*"))
    assert b"AKIAIOSFO" not in raw


def test_diff_noprefix_in_the_repository_does_not_blind_the_miner(tmp_path):
    root = init_repo(tmp_path / "repo")
    subprocess.run(["git", "-C", str(root), "config", "diff.noprefix", "true"], check=True)
    write(root, "shapes.py", SHAPES_V1.replace("factor", "ratio"))
    edited = commit(root, "scale by ratio")
    miner, store = mine(root)
    try:
        assert skipped(store, edited) is None
        assert touched(store, edited) == {"shapes.py::Circle.scale": 2}
    finally:
        store.close()
