"""Tests for cogd.usage.touches: PostToolUse payloads → repo-relative touches."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import PAYLOADS, payload
from cogd.usage.touches import ACTIONS, Touch, touches_from_tool_use

REPO_FILES = ("src/pkg/export.py", "src/pkg/cli.py", "tests/test_export.py", "tests/test_cli.py")


@pytest.fixture
def root(tmp_path) -> Path:
    root = tmp_path / "repo"
    for rel in REPO_FILES:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("# placeholder\n")
    return root


def T(path, action, start=None, end=None) -> Touch:
    return Touch(path, action, start, end)


EXPECTED = {
    "post_tool_use.bash.json": [T("tests/test_export.py", "mention")],
    "post_tool_use.edit.json": [T("src/pkg/export.py", "edit", 1, 6)],
    "post_tool_use.glob.json": [T("tests/test_cli.py", "search"), T("tests/test_export.py", "search")],
    "post_tool_use.grep.content.json": [T("src/pkg/export.py", "search", 1, 1)],
    "post_tool_use.grep.count.json": [T("src/pkg/export.py", "search"), T("src/pkg/cli.py", "search")],
    "post_tool_use.grep.files_with_matches.json": [T("src/pkg/export.py", "search"), T("src/pkg/cli.py", "search")],
    "post_tool_use.multiedit.json": [T("src/pkg/export.py", "edit", 1, 4)],
    "post_tool_use.notebookedit.SYNTHETIC.json": [T("notebooks/explore.ipynb", "edit")],
    "post_tool_use.read.file_unchanged.json": [T("src/pkg/export.py", "read")],
    "post_tool_use.read.json": [T("src/pkg/export.py", "read")],
    "post_tool_use.read.range.json": [T("src/pkg/cli.py", "read", 120, 159)],
    "post_tool_use.task.json": [T("src/pkg/export.py", "mention"), T("src/pkg/cli.py", "mention")],
    "post_tool_use.write.create.json": [T("tests/test_export.py", "write")],
    "post_tool_use.write.update.json": [T("README.md", "write")],
}


def test_every_post_tool_use_fixture_has_an_expectation():
    assert sorted(p.name for p in PAYLOADS.glob("post_tool_use*.json")) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_fixture_touches(name, root):
    data = payload(name, root)
    assert data["hook_event_name"] == "PostToolUse"
    assert touches_from_tool_use(data, root) == EXPECTED[name]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_fixture_touches_do_not_depend_on_a_trailing_slash_in_root(name, root):
    data = payload(name, root)
    assert touches_from_tool_use(data, Path(str(root) + "/")) == EXPECTED[name]


def test_mentions_require_the_file_to_exist(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    for name in ("post_tool_use.bash.json", "post_tool_use.task.json"):
        assert touches_from_tool_use(payload(name, empty), empty) == []
    # Strong evidence does not need the file on disk (it may have been deleted since).
    assert touches_from_tool_use(payload("post_tool_use.edit.json", empty), empty) == [
        T("src/pkg/export.py", "edit", 1, 6)]


def test_payloads_from_another_checkout_touch_nothing(root, tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    for name in EXPECTED:
        assert touches_from_tool_use(payload(name, other), root) == []


def test_replayed_session_tool_events(root):
    lines = (PAYLOADS / "session.replay.jsonl").read_text().replace("{{CWD}}", str(root)).splitlines()
    events = [json.loads(line) for line in lines if line.strip()]
    found = [(e["tool_name"], touches_from_tool_use(e, root))
             for e in events if e.get("hook_event_name") == "PostToolUse"]
    assert found == [
        ("Grep", [T("src/pkg/export.py", "search"), T("src/pkg/cli.py", "search")]),
        ("Read", [T("src/pkg/export.py", "read")]),
        ("Edit", [T("src/pkg/export.py", "edit", 1, 6)]),
        ("Write", [T("tests/test_export.py", "write")]),
        ("Bash", [T("tests/test_export.py", "mention")]),
    ]


def test_touch_as_dict():
    assert T("a.py", "read", 3, 9).as_dict() == {"path": "a.py", "action": "read", "start_line": 3, "end_line": 9}
    assert T("a.py", "edit").as_dict() == {"path": "a.py", "action": "edit", "start_line": None, "end_line": None}
    assert ACTIONS == ("edit", "write", "read", "search", "mention")


# --------------------------------------------------------------------------- tool specifics

def base(root: Path, tool: str, tool_input=None, tool_response=None, **extra) -> dict:
    data = {"hook_event_name": "PostToolUse", "cwd": str(root), "tool_name": tool}
    if tool_input is not None:
        data["tool_input"] = tool_input
    if tool_response is not None:
        data["tool_response"] = tool_response
    data.update(extra)
    return data


def test_read_with_offset_only_uses_the_response_range(root):
    p = base(root, "Read", {"file_path": f"{root}/src/pkg/cli.py", "offset": 10},
             {"type": "text", "file": {"startLine": 10, "numLines": 5}})
    assert touches_from_tool_use(p, root) == [T("src/pkg/cli.py", "read", 10, 14)]


def test_read_range_from_input_when_response_lacks_it(root):
    p = base(root, "Read", {"file_path": f"{root}/src/pkg/cli.py", "offset": 7, "limit": 3}, {"type": "text"})
    assert touches_from_tool_use(p, root) == [T("src/pkg/cli.py", "read", 7, 9)]


def test_read_with_offset_but_no_count_is_a_whole_file_read(root):
    p = base(root, "Read", {"file_path": f"{root}/src/pkg/cli.py", "offset": 7}, {})
    assert touches_from_tool_use(p, root) == [T("src/pkg/cli.py", "read")]


def test_edit_with_several_hunks_and_a_pure_deletion(root):
    hunks = [
        {"oldStart": 3, "oldLines": 2, "newStart": 3, "newLines": 3, "lines": []},
        {"oldStart": 40, "oldLines": 2, "newStart": 41, "newLines": 0, "lines": []},
        {"oldStart": 90, "oldLines": 1, "newStart": 89, "newLines": 1, "lines": []},
    ]
    p = base(root, "Edit", {"file_path": f"{root}/src/pkg/export.py"}, {"structuredPatch": hunks})
    assert touches_from_tool_use(p, root) == [
        T("src/pkg/export.py", "edit", 3, 5), T("src/pkg/export.py", "edit", 41, 41),
        T("src/pkg/export.py", "edit", 89, 89)]


def test_edit_path_falls_back_to_the_response(root):
    p = base(root, "Edit", {}, {"filePath": f"{root}/src/pkg/export.py", "structuredPatch": []})
    assert touches_from_tool_use(p, root) == [T("src/pkg/export.py", "edit")]


def test_write_ignores_hunks_and_touches_the_whole_file(root):
    p = base(root, "Write", {"file_path": f"{root}/src/pkg/cli.py"},
             {"type": "update", "structuredPatch": [{"newStart": 5, "newLines": 2}]})
    assert touches_from_tool_use(p, root) == [T("src/pkg/cli.py", "write")]


def test_grep_in_a_single_file_has_no_path_prefix(root):
    p = base(root, "Grep", {"pattern": "x", "path": f"{root}/src/pkg/export.py", "output_mode": "content", "-n": True},
             {"mode": "content", "filenames": [], "content": "3:    if not rows:\n5-    with open(path) as fh:\nnoise"})
    assert touches_from_tool_use(p, root) == [T("src/pkg/export.py", "search", 3, 3),
                                              T("src/pkg/export.py", "search", 5, 5)]


def test_grep_in_a_single_file_without_matches_lines_still_counts_the_file(root):
    p = base(root, "Grep", {"pattern": "x", "path": "src/pkg/cli.py", "output_mode": "count"},
             {"mode": "count", "content": "", "numMatches": 2})
    assert touches_from_tool_use(p, root) == [T("src/pkg/cli.py", "search")]


def test_grep_relative_names_resolve_against_cwd(root):
    p = base(root, "Grep", {"pattern": "x", "output_mode": "files_with_matches"},
             {"mode": "files_with_matches", "filenames": ["pkg/export.py", "../tests/test_cli.py"]})
    p["cwd"] = str(root / "src")
    assert touches_from_tool_use(p, root) == [T("src/pkg/export.py", "search"), T("tests/test_cli.py", "search")]


def test_grep_content_lines_deduplicate(root):
    p = base(root, "Grep", {"pattern": "x", "path": str(root)},
             {"mode": "content", "content": "src/pkg/cli.py:4:a\nsrc/pkg/cli.py:4:a\nsrc/pkg/cli.py:9:b"})
    assert touches_from_tool_use(p, root) == [T("src/pkg/cli.py", "search", 4, 4), T("src/pkg/cli.py", "search", 9, 9)]


def test_missing_cwd_means_the_root(root):
    p = {"tool_name": "Glob", "tool_response": {"filenames": ["src/pkg/cli.py", f"{root}/tests/test_cli.py"]}}
    assert touches_from_tool_use(p, root) == [T("src/pkg/cli.py", "search"), T("tests/test_cli.py", "search")]


def test_bash_mentions_only_existing_files_and_ignores_output(root):
    p = base(root, "Bash", {"command": "sed -n 1,5p src/pkg/cli.py nothere.py && cat ./tests/test_cli.py 1.5"},
             {"stdout": "src/pkg/export.py was printed", "stderr": ""})
    assert touches_from_tool_use(p, root) == [T("src/pkg/cli.py", "mention"), T("tests/test_cli.py", "mention")]


def test_unknown_and_mcp_tools_touch_nothing(root):
    for tool in ("WebFetch", "mcp__github__get_file", "TodoWrite", None, 7):
        p = base(root, tool, {"file_path": f"{root}/src/pkg/cli.py"}, {"filePath": f"{root}/src/pkg/cli.py"})
        assert touches_from_tool_use(p, root) == []


def test_a_name_starting_with_two_dots_is_inside_the_repo(root):
    (root / "..hidden.py").write_text("x = 1\n")
    p = base(root, "Read", {"file_path": f"{root}/..hidden.py"}, {})
    assert touches_from_tool_use(p, root) == [T("..hidden.py", "read")]


# --------------------------------------------------------------------------- malformed payloads

def test_tool_input_of_the_wrong_type(root):
    for bad in ([f"{root}/src/pkg/cli.py"], "src/pkg/cli.py", 42, None, True):
        assert touches_from_tool_use(base(root, "Read", bad, {}), root) == []
        assert touches_from_tool_use(base(root, "NotebookEdit", bad, {}), root) == []


def test_tool_response_of_the_wrong_type(root):
    for bad in (["src/pkg/cli.py"], "src/pkg/cli.py", 3, None):
        assert touches_from_tool_use(base(root, "Glob", {}, bad), root) == []
        assert touches_from_tool_use(base(root, "Grep", {}, bad), root) == []
    # Edit still knows its file from the input.
    assert touches_from_tool_use(base(root, "Edit", {"file_path": f"{root}/src/pkg/cli.py"}, "ok"), root) == [
        T("src/pkg/cli.py", "edit")]


def test_structured_patch_garbage_falls_back_to_the_whole_file(root):
    for garbage in ("not a list", {"newStart": 3}, [None, 1, "x", []],
                    [{"newStart": "3", "newLines": 2}, {"newStart": 0, "newLines": 2}, {"newStart": -4, "newLines": 1},
                     {"newStart": True, "newLines": 1}, {"newStart": 5}, {"newStart": 5, "newLines": -1},
                     {"newStart": 5, "newLines": "2"}]):
        p = base(root, "Edit", {"file_path": f"{root}/src/pkg/cli.py"}, {"structuredPatch": garbage})
        assert touches_from_tool_use(p, root) == [T("src/pkg/cli.py", "edit")], garbage
    mixed = [{"newStart": 2, "newLines": 2}, "junk", {"newStart": None}]
    p = base(root, "MultiEdit", {"file_path": f"{root}/src/pkg/cli.py"}, {"structuredPatch": mixed})
    assert touches_from_tool_use(p, root) == [T("src/pkg/cli.py", "edit", 2, 3)]


def test_read_range_values_of_the_wrong_type(root):
    p = base(root, "Read", {"file_path": f"{root}/src/pkg/cli.py", "offset": "10", "limit": True},
             {"file": {"startLine": -1, "numLines": 0}})
    assert touches_from_tool_use(p, root) == [T("src/pkg/cli.py", "read")]
    p = base(root, "Read", {"file_path": f"{root}/src/pkg/cli.py", "offset": 1}, {"file": ["startLine", 1]})
    assert touches_from_tool_use(p, root) == [T("src/pkg/cli.py", "read")]


def test_paths_outside_the_repository_are_dropped(root, tmp_path):
    (tmp_path / "outside.py").write_text("x = 1\n")
    outside = [
        "/etc/passwd",
        str(tmp_path / "outside.py"),
        f"{root}/../outside.py",
        f"{root}/src/../../outside.py",
        "../outside.py",
        "src/pkg/../../../outside.py",
        str(root),
        f"{root}/.",
        "..",
        "",
    ]
    for raw in outside:
        assert touches_from_tool_use(base(root, "Read", {"file_path": raw}, {}), root) == [], raw
        assert touches_from_tool_use(base(root, "Edit", {"file_path": raw}, {}), root) == [], raw
    p = base(root, "Glob", {}, {"filenames": outside + [f"{root}/src/pkg/cli.py"]})
    assert touches_from_tool_use(p, root) == [T("src/pkg/cli.py", "search")]
    p = base(root, "Bash", {"command": f"cat ../outside.py {tmp_path}/outside.py"}, {})
    assert touches_from_tool_use(p, root) == []


def test_dot_dot_inside_the_repo_is_normalised(root):
    p = base(root, "Read", {"file_path": f"{root}/tests/../src/pkg/./cli.py"}, {})
    assert touches_from_tool_use(p, root) == [T("src/pkg/cli.py", "read")]


def test_nul_bytes_and_oversized_paths_are_dropped(root):
    for raw in (f"{root}/src/pkg/cli.py\0.txt", "src/pkg/cli.py\0", "a" * 5000 + ".py"):
        assert touches_from_tool_use(base(root, "Read", {"file_path": raw}, {}), root) == []
    p = base(root, "Glob", {}, {"filenames": ["src/pkg/\0cli.py", "src/pkg/cli.py"]})
    assert touches_from_tool_use(p, root) == [T("src/pkg/cli.py", "search")]
    p = base(root, "Grep", {"path": "src/\0"}, {"mode": "content", "content": "src/pkg/cli.py:3:x\n\0:4:y"})
    assert touches_from_tool_use(p, root) == [T("src/pkg/cli.py", "search", 3, 3)]


def test_file_list_given_as_a_string_is_not_split_into_characters(root):
    for tool in ("Glob", "Grep"):
        p = base(root, tool, {}, {"filenames": "src/pkg/cli.py", "mode": "files_with_matches"})
        assert touches_from_tool_use(p, root) == []
    p = base(root, "Glob", {}, {"filenames": {"src/pkg/cli.py": 1}})
    assert touches_from_tool_use(p, root) == []


def test_non_string_entries_in_file_lists_are_skipped(root):
    p = base(root, "Glob", {}, {"filenames": [None, 3, ["src/pkg/cli.py"], {"p": 1}, "tests/test_cli.py"]})
    assert touches_from_tool_use(p, root) == [T("tests/test_cli.py", "search")]


def test_huge_line_numbers_do_not_raise(root):
    p = base(root, "Grep", {"path": str(root)},
             {"mode": "content", "content": "src/pkg/cli.py:" + "9" * 5000 + ":x\nsrc/pkg/cli.py:12:y"})
    assert touches_from_tool_use(p, root) == [T("src/pkg/cli.py", "search", 12, 12)]
    p = base(root, "Grep", {"path": f"{root}/src/pkg/cli.py"}, {"mode": "content", "content": "9" * 5000 + ":x"})
    assert touches_from_tool_use(p, root) == [T("src/pkg/cli.py", "search")]


def test_overlong_file_names_in_free_text_do_not_raise(root):
    p = base(root, "Bash", {"command": "cat " + "a" * 300 + ".py src/pkg/cli.py"}, {})
    assert touches_from_tool_use(p, root) == [T("src/pkg/cli.py", "mention")]
    p = base(root, "Grep", {"path": "b" * 300 + ".py"}, {"mode": "content", "content": "1:x"})
    assert touches_from_tool_use(p, root) == []


def test_task_content_of_the_wrong_shape(root):
    for content in ("src/pkg/cli.py", [None, "src/pkg/cli.py", {"text": 5}, {"type": "text"}], {"text": "src/pkg/cli.py"}):
        p = base(root, "Task", {"prompt": 42}, {"content": content})
        assert touches_from_tool_use(p, root) == []


def test_cwd_of_the_wrong_type_falls_back_to_the_root(root):
    for cwd in (None, 5, ["x"], ""):
        p = base(root, "Grep", {}, {"filenames": ["src/pkg/cli.py"]}, cwd=cwd)
        assert touches_from_tool_use(p, root) == [T("src/pkg/cli.py", "search")]


def test_empty_payload(root):
    assert touches_from_tool_use({}, root) == []
