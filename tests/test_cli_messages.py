"""What the CLI prints in the small cases: nothing but the message when there is nothing to list."""

from __future__ import annotations

import json

from conftest import cogd_in_process, lexical_only, make_repo, run_cogd


def test_memory_list_without_matches_prints_only_the_message(tmp_path):
    root = lexical_only(make_repo(tmp_path / "repo", {"a.py": "def f():\n    return 1\n"}))
    assert run_cogd(root, "memory", "list").stdout == "no memories yet\n"  # the real command, then its code here
    assert cogd_in_process(root, "memory", "list", "--status", "active").stdout == "no memories with these filters\n"
    cogd_in_process(root, "memory", "add", "observation", "f returns one, always")
    assert [m["type"] for m in json.loads(cogd_in_process(root, "memory", "list", "--json").stdout)] == ["observation"]
    assert "no memories" not in cogd_in_process(root, "memory", "list").stdout  # the table, without the message
    assert run_cogd(root, "memory", "list", "--type", "rule").stdout == "no memories with these filters\n"


# ---- errors at the edge: one line, mapped once in the `cogd` group, exit 1, no traceback ----------

def test_a_bad_config_is_one_line(tmp_path):
    root = make_repo(tmp_path / "repo", {"a.py": "def f():\n    return 1\n"})
    (root / ".cogd").mkdir()
    (root / ".cogd" / "config.toml").write_text('[embed]\nenabled = "yes"\n', encoding="utf-8")
    for args in (("models",), ("search", "f")):  # before any work, and from the in-process backend
        proc = run_cogd(root, *args, check=False)
        assert (proc.returncode, proc.stdout, proc.stderr) == (
            1, "", "Error: embed.enabled must be true or false, got 'yes'\n"), args


def test_a_refusal_from_the_service_names_its_kind(tmp_path):
    root = lexical_only(make_repo(tmp_path / "repo", {"a.py": "def f():\n    return 1\n"}))
    proc = run_cogd(root, "memory", "show", "01ARZ3NDEKTSV4RRFFQ69G5FAV", check=False)
    assert (proc.returncode, proc.stderr) == (1, "Error: no memory '01ARZ3NDEKTSV4RRFFQ69G5FAV' (not_found)\n")


def test_settings_that_cannot_be_merged_are_one_line_and_untouched(tmp_path):
    root = lexical_only(make_repo(tmp_path / "repo", {"a.py": "x = 1\n"}))
    (root / ".claude").mkdir()
    (root / ".claude" / "settings.json").write_text("[1, 2]\n", encoding="utf-8")
    proc = run_cogd(root, "install-hooks", check=False)
    assert (proc.returncode, proc.stderr) == (
        1, f"Error: Claude Code: {(root / '.claude' / 'settings.json').resolve()} holds a JSON list, not an object\n")
    assert (root / ".claude" / "settings.json").read_text(encoding="utf-8") == "[1, 2]\n"


def test_the_group_maps_each_error_type_once():
    import click
    from click.testing import CliRunner

    from cogd.cli.base import CogdGroup
    from cogd.errors import CogdError
    from cogd.recovery import StoreRefused
    from cogd.rpc.client import DaemonUnavailable, RemoteError
    from cogd.safepath import UnsafePath

    raised = {
        "plain": CogdError("busy", "the index is being rebuilt.", "try again in a minute."),
        "nofix": CogdError("not_found", "no such entity."),
        "unsafe": UnsafePath("/r/.cogd/run", "is a symbolic link (to /x)", "rm /r/.cogd/run"),
        "store": StoreRefused("state.db", "/r/.cogd/state.db is busy", "stop the other process"),
        "remote": RemoteError({"code": -32003, "message": "stale cannot become candidate",
                               "data": {"kind": "illegal_transition"}}),
        "silent": DaemonUnavailable("timed out after 5 s"),
        "remotefix": RemoteError({"code": -32001, "message": "superseded_by names nothing",
                                  "data": {"kind": "bad_request", "fix": "set `superseded_by:`"}}),
        "silentfix": DaemonUnavailable("no socket", "run `cogd start`"),
    }

    @click.group(cls=CogdGroup)
    def group() -> None:
        """A group."""

    def raising(exc: Exception):
        def command() -> None:
            """Raises."""
            raise exc
        return command

    for name, exc in raised.items():
        group.command(name)(raising(exc))
    said = {name: CliRunner().invoke(group, [name]) for name in raised}
    assert {name: (r.exit_code, r.output) for name, r in said.items()} == {
        "plain": (1, "Error: the index is being rebuilt. Fix: try again in a minute.\n"),
        "nofix": (1, "Error: no such entity.\n"),
        "unsafe": (1, "Error: refusing /r/.cogd/run: it is a symbolic link (to /x); fix: rm /r/.cogd/run\n"),
        "store": (1, "Error: state.db: /r/.cogd/state.db is busy\n  fix: stop the other process\n"),
        "remote": (1, "Error: stale cannot become candidate (illegal_transition)\n"),
        "silent": (1, "Error: the daemon did not answer: timed out after 5 s\n"),
        "remotefix": (1, "Error: superseded_by names nothing (bad_request)\n  fix: set `superseded_by:`\n"),
        "silentfix": (1, "Error: the daemon did not answer: no socket\n  fix: run `cogd start`\n"),
    }
    # The refusal types stay what callers catch them as.
    assert isinstance(raised["unsafe"], PermissionError) and raised["unsafe"].kind == "unsafe_path"
    assert str(raised["unsafe"]) == "/r/.cogd/run is a symbolic link (to /x); fix: rm /r/.cogd/run"
    assert str(raised["store"]) == "state.db: /r/.cogd/state.db is busy; fix: stop the other process"
    assert raised["store"].to_json()["data"] == {"kind": "store_refused", "store": "state.db",
                                                 "fix": "stop the other process"}


def test_a_bug_keeps_its_traceback():
    import click
    from click.testing import CliRunner

    from cogd.cli.base import CogdGroup

    @click.group(cls=CogdGroup)
    def group() -> None:
        """A group."""

    @group.command("bug")
    def bug() -> None:
        raise KeyError("index")

    result = CliRunner().invoke(group, ["bug"])
    assert isinstance(result.exception, KeyError) and result.exit_code == 1


def test_a_refusal_from_the_in_process_service_prints_its_fix(tmp_path):
    root = lexical_only(make_repo(tmp_path / "repo", {"a.py": "def f():\n    return 1\n"}))
    rid = run_cogd(root, "memory", "add", "rule", "Never import the daemon from memory").stdout.split()[2]
    path = root / ".cogd" / "memory" / "rules" / f"{rid}.md"
    path.write_text(path.read_text(encoding="utf-8").replace("status: active", "status: pruned"), encoding="utf-8")
    proc = run_cogd(root, "memory", "prune", rid, check=False)
    assert (proc.returncode, proc.stderr) == (1, (
        f"Error: {path} has an unresolved problem ({rid} cannot go from active to pruned; from active it can go "
        "to rejected, stale, superseded): fix the file first (bad_request)\n"
        "  fix: set `status:` back to 'active' or 'rejected' or 'stale' or 'superseded' in the file\n"))
    assert "status: pruned" in path.read_text(encoding="utf-8")  # the file is the user's: left as it is
