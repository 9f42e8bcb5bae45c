"""onnxruntime writes nothing of its own outside what cogd owns: its telemetry store stays off."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

CHILD = """
import os
from cogd.embed.encoder import Encoder
from cogd.embed.model import resolve_model
from cogd.config import EmbedConfig

encoder = Encoder(resolve_model(EmbedConfig(model="minilm")), threads=1)
assert encoder.encode(["def parse(text): return text.split()"]).shape == (1, 384)
print(os.environ.get("ORT_DISABLE_TELEMETRY"))
"""


def test_loading_an_encoder_writes_nothing_under_home(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("ORT_DISABLE_TELEMETRY", "XDG_CACHE_HOME")}
    env["HOME"] = str(home)
    done = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "1"
    # without the variable onnxruntime's import makes .cache/Microsoft/DeveloperTools/.onnxruntime/
    assert sorted(str(p.relative_to(home)) for p in Path(home).rglob("*")) == []
