"""The hook path stays light, and the plugin wiring matches what the installer writes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from cogd.install import merged_settings

PROJECT = Path(__file__).resolve().parent.parent

# Modules that cost tens of milliseconds (or far more) to import: never on the hook path.
HEAVY = {"sqlite3", "asyncio", "tree_sitter", "rich", "click", "xxhash", "dataclasses", "typing",
         "subprocess", "concurrent", "logging", "tomllib", "pathlib", "cogd.paths",
         "cogd.daemon.service", "cogd.index"}


def test_hook_client_imports_nothing_heavy():
    code = "import sys, cogd.hookclient; print('\\n'.join(sorted(sys.modules)))"
    loaded = set(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split())
    assert "cogd.hookclient" in loaded
    assert HEAVY & loaded == set()


def test_plugin_hooks_json_matches_the_installer():
    plugin = json.loads((PROJECT / "hooks" / "hooks.json").read_text())
    installed = merged_settings({}, "cogd-hook")
    assert plugin["hooks"] == installed["hooks"]
