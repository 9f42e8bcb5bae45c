"""Each client's tool names → touches, and the text-locating that gives edits without line numbers
their lines; hostile payloads (paths out of the tree, links, huge files, wrong types) touch
nothing outside and never raise."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cogd.usage.touches import LOCATE_MAX_BYTES, Touch, touches_from_tool_use

CODE = "".join(f"def f{n}():\n    return {n}\n\n" for n in range(1, 11))  # f<n> at line 3n-2, body at 3n-1


@pytest.fixture
def root(tmp_path) -> Path:
    root = tmp_path / "repo"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "mod.py").write_text(CODE)
    (root / "pkg" / "new.py").write_text("x = 1\n")
    return root


def touches(root: Path, client: str, tool: str, tool_input: dict, response: object = None, cwd: Path | None = None):
    payload = {"client": client, "session_id": "s", "cwd": str(cwd or root), "tool_name": tool,
               "tool_input": tool_input, "tool_response": response if response is not None else {}}
    return touches_from_tool_use(payload, root)


PATCH = """*** Begin Patch
*** Update File: pkg/mod.py
@@ def f2():
-    return 0
+    return 2
@@
 def f7():
-    return 0
+    return 7
*** Add File: pkg/new.py
+x = 1
*** Delete File: pkg/gone.py
*** End Patch
"""


def test_codex_apply_patch_hunks_become_line_ranges(root):
    assert touches(root, "codex", "apply_patch", {"command": PATCH}) == [
        Touch("pkg/mod.py", "edit", 5, 5), Touch("pkg/mod.py", "edit", 19, 20),
        Touch("pkg/new.py", "write"), Touch("pkg/gone.py", "edit")]


def test_codex_moved_file_and_unlocatable_hunk(root):
    patch = ("*** Begin Patch\n*** Update File: pkg/old.py\n*** Move to: pkg/mod.py\n@@\n+    return 99\n"
             "*** End Patch\n")
    assert touches(root, "codex", "apply_patch", {"command": patch}) == [Touch("pkg/mod.py", "edit")]


def test_codex_shell_and_mcp(root):
    assert touches(root, "codex", "Bash", {"command": "pytest pkg/mod.py -q"}) == [Touch("pkg/mod.py", "mention")]
    assert touches(root, "codex", "Bash", {"command": ["cat", "pkg/new.py"]}) == [Touch("pkg/new.py", "mention")]
    assert touches(root, "codex", "mcp__cogd__get_context", {"prompt": "pkg/mod.py"}) == []


def test_gemini_tools(root):
    path = str(root / "pkg" / "mod.py")
    assert touches(root, "gemini", "read_file", {"file_path": path, "start_line": 4, "end_line": 5}) == [
        Touch("pkg/mod.py", "read", 4, 5)]
    assert touches(root, "gemini", "read_file", {"file_path": path, "offset": 3, "limit": 2}) == [
        Touch("pkg/mod.py", "read", 4, 5)]  # the older 0-based offset
    assert touches(root, "gemini", "replace", {"file_path": path, "new_string": "def f9():\n    return 9\n"}) == [
        Touch("pkg/mod.py", "edit", 25, 26)]
    assert touches(root, "gemini", "write_file", {"file_path": str(root / "pkg/new.py")}) == [
        Touch("pkg/new.py", "write")]
    listing = f"Found 2 file(s) matching \"*.py\":\n{root}/pkg/mod.py\n{root}/pkg/new.py"
    assert touches(root, "gemini", "glob", {"pattern": "*.py"}, {"llmContent": listing}) == [
        Touch("pkg/mod.py", "search"), Touch("pkg/new.py", "search")]
    grep = "Found 1 match:\n---\nFile: pkg/mod.py\nL7: def f3():\n---"
    assert touches(root, "gemini", "grep_search", {"pattern": "f3"}, {"llmContent": grep}) == [
        Touch("pkg/mod.py", "search"), Touch("pkg/mod.py", "search", 7, 7)]
    assert touches(root, "gemini", "read_many_files", {"paths": ["pkg/*.py", "pkg/new.py"]}) == [
        Touch("pkg/new.py", "read")]


def test_cursor_copilot_cline_tools(root):
    path = str(root / "pkg" / "mod.py")
    assert touches(root, "cursor", "afterFileEdit", {"file_path": path, "edits": [
        {"new_string": "    return 4"}, {"new_string": "def f10():"}]}) == [
        Touch("pkg/mod.py", "edit", 11, 11), Touch("pkg/mod.py", "edit", 28, 28)]
    assert touches(root, "cursor", "Read", {"file_path": path, "offset": 10, "limit": 3}) == [
        Touch("pkg/mod.py", "read", 10, 12)]
    assert touches(root, "copilot", "view", {"path": path, "view_range": [1, 2]}) == [Touch("pkg/mod.py", "read", 1, 2)]
    assert touches(root, "copilot", "view", {"path": path, "view_range": [5, -1]}) == [Touch("pkg/mod.py", "read")]
    assert touches(root, "copilot", "str_replace_editor", {"command": "str_replace", "path": path,
                                                          "new_str": "    return 3"}) == [Touch("pkg/mod.py", "edit", 8, 8)]
    diff = "------- SEARCH\n    return 0\n=======\n    return 5\n+++++++ REPLACE\n"
    assert touches(root, "cline", "replace_in_file", {"path": "pkg/mod.py", "diff": diff}) == [
        Touch("pkg/mod.py", "edit", 14, 14)]
    assert touches(root, "cline", "read_file", {"path": "pkg/mod.py"}) == [Touch("pkg/mod.py", "read")]
    assert touches(root, "cline", "execute_command", {"command": "python pkg/new.py"}) == [Touch("pkg/new.py", "mention")]


def test_the_same_tool_name_means_what_its_client_means(root):
    """``read_file`` is Gemini's (``file_path``) and Cline's (``path``); Claude Code has no such tool."""
    assert touches(root, "claude-code", "read_file", {"path": "pkg/mod.py"}) == []
    assert touches(root, "cline", "read_file", {"path": "pkg/mod.py"}) == [Touch("pkg/mod.py", "read")]
    assert touches(root, "nobody", "Read", {"file_path": str(root / "pkg/mod.py")}) == [Touch("pkg/mod.py", "read")]


def test_paths_out_of_the_tree_and_links_out_touch_nothing(root, tmp_path):
    outside = tmp_path / "secret.py"
    outside.write_text(CODE)
    os.symlink(outside, root / "pkg" / "link.py")
    patch = ("*** Begin Patch\n*** Update File: ../secret.py\n@@\n+    return 2\n*** Update File: pkg/link.py\n@@\n"
             "+    return 2\n*** Add File: /etc/cron.d/x\n+y\n*** End Patch\n")
    assert touches(root, "codex", "apply_patch", {"command": patch}) == []
    assert touches(root, "gemini", "replace", {"file_path": str(outside), "new_string": "    return 2"}) == []
    assert touches(root, "cline", "replace_in_file", {"path": "../secret.py", "diff": "x"}) == []
    assert touches(root, "copilot", "edit", {"path": str(root / "pkg" / "link.py"), "new_str": "    return 2"}) == []


def test_hostile_shapes_never_raise(root):
    path = str(root / "pkg" / "mod.py")
    for client, tool, tool_input in [
        ("codex", "apply_patch", {"command": 5}), ("codex", "apply_patch", {"command": "*** Update File: \n@@\n+"}),
        ("gemini", "read_file", {"file_path": path, "start_line": "4", "end_line": None}),
        ("gemini", "glob", {}), ("gemini", "read_many_files", {"paths": "pkg"}),
        ("cursor", "afterFileEdit", {"file_path": path, "edits": "x"}),
        ("cursor", "afterFileEdit", {"file_path": path, "edits": [5, None, {"new_string": 7}]}),
        ("copilot", "view", {"path": path, "view_range": [3, "x"]}), ("copilot", "str_replace_editor", {}),
        ("cline", "replace_in_file", {"path": "pkg/mod.py", "diff": ["not", "text"]}),
    ]:
        found = touches(root, client, tool, tool_input, {"llmContent": 5})
        assert all(t.path in ("pkg/mod.py",) for t in found), (client, tool, found)


def test_a_huge_file_is_touched_whole_not_read(root):
    big = root / "pkg" / "big.py"
    big.write_text("x = 1\n" * (LOCATE_MAX_BYTES // 6 + 10))
    assert big.stat().st_size > LOCATE_MAX_BYTES
    assert touches(root, "gemini", "replace", {"file_path": str(big), "new_string": "x = 1"}) == [
        Touch("pkg/big.py", "edit")]
