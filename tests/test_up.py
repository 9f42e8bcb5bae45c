"""``cogd up``: the sample pack comes before the embedding; the embedding is followed as a live
bar on a terminal (Ctrl-C leaves it to the background) and as a few lines otherwise.

Real daemons with the real model; the ``hold_embed`` fault (cogd.faults) holds the embedding
after it has counted the entities, so "the pack did not wait for the embedding" and "Ctrl-C
left it running" are facts of the run, not of timing.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import select
import signal
import struct
import subprocess
import termios
import time

import pytest

from conftest import COGD, WAIT_S, Daemon, cogd_in_process, interruptible, make_repo, wait_for

pytestmark = pytest.mark.timeout(600)

FILES = {
    "app/models.py": "class User:\n    def display_name(self):\n        return 'u'\n",
    "app/views.py": "from app.models import User\n\n\ndef render_profile(user: User):\n    return user.display_name()\n",
}
ENTITIES = 5  # 2 file entities, the class, its method, the function: all of them the front here
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")
PACK_RULE = "sample context pack (what SessionStart injects)"


class Up:
    """A repository for ``cogd up``, with a fault file its daemon inherits; stopped at the end."""

    def __init__(self, root, faults):
        self.root, self.faults = root, faults
        self.env = {**os.environ, "COGD_FAULTS": str(faults), "TERM": "xterm", "COLUMNS": "200"}
        self.env.pop("NO_COLOR", None)

    def hold(self, on: bool) -> None:
        if on:
            self.faults.write_text("hold_embed\n", encoding="utf-8")
        else:
            self.faults.unlink(missing_ok=True)

    def cogd(self, *args: str, timeout: float = 180) -> subprocess.CompletedProcess:
        proc = subprocess.run([COGD, *args], cwd=self.root, capture_output=True, text=True, timeout=timeout,
                              env=self.env)
        assert proc.returncode == 0, (args, proc.stdout, proc.stderr)
        return proc

    def embedding(self) -> dict:
        """The status's embedding section, from ``cogd status --json``'s code in this process (tests
        poll it while they wait: a CLI process per poll took CPU from the daemon being waited for)."""
        return json.loads(cogd_in_process(self.root, "status", "--json", env=self.env).stdout)["embedding"]


@pytest.fixture
def up(tmp_path):
    made = Up(make_repo(tmp_path / "repo", FILES), tmp_path / "faults")
    try:
        yield made
    finally:
        made.hold(False)
        Daemon(made.root).stop()


def _read_until(fd: int, buffer: bytearray, condition, timeout: float = WAIT_S) -> str:
    """Read the pty's output into ``buffer`` until ``condition(text without ANSI codes)`` holds."""
    deadline = time.monotonic() + timeout
    while True:
        text = ANSI.sub("", buffer.decode("utf-8", "replace"))
        if condition(text):
            return text
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out; the terminal showed:\n{text[-3000:]}")
        ready, _, _ = select.select([fd], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(fd, 65536)
            except OSError:  # EIO: the other side is closed
                chunk = b""
            if not chunk:
                return ANSI.sub("", buffer.decode("utf-8", "replace"))
            buffer.extend(chunk)


def test_on_a_terminal_the_pack_comes_first_then_a_bar_that_ctrl_c_leaves_running(up):
    up.hold(True)
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 80, 0, 0))  # a common terminal's width
    proc = subprocess.Popen([COGD, "up", "--no-hooks"], cwd=up.root, stdin=slave, stdout=slave, stderr=slave,
                            env=up.env, start_new_session=True, preexec_fn=interruptible)
    os.close(slave)
    buffer = bytearray()
    try:
        # The pack is on screen, and under it the bar with the counted entities, none embedded.
        text = _read_until(master, buffer, lambda t: PACK_RULE in t and f"0/{ENTITIES} · front" in t)
        assert text.index(PACK_RULE) < text.rindex(f"0/{ENTITIES} · front")
        assert f"front 0/{ENTITIES}" in text and "Ctrl-C leaves it to the background" in text
        assert proc.poll() is None  # still following the embedding
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C on the terminal sends the foreground group
        assert proc.wait(timeout=WAIT_S) == 0
        text = _drain(master, buffer)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
    assert "Ctrl-C stopped only this display: the daemon goes on embedding in the background" in text
    assert "Traceback" not in text and "Aborted" not in text

    # The daemon was not interrupted: once the hold is lifted it finishes the work.
    embedding = up.embedding()
    assert (embedding["phase"], embedding["embedded_entities"], embedding["entities"]) == ("embedding", 0, ENTITIES)
    up.hold(False)
    done = wait_for(lambda: (e := up.embedding())["phase"] == "current" and e, what="the embedding")
    assert (done["embedded_entities"], done["front"]["embedded_entities"], done["front"]["entities"]) == (
        ENTITIES, ENTITIES, ENTITIES)
    status = up.cogd("status").stdout
    assert re.search(rf"front\s+{ENTITIES}/{ENTITIES} embedded \(every file entity and the definitions of 2 ", status), status


def _drain(fd: int, buffer: bytearray) -> str:
    """Everything left on the pty after its process exited."""
    while True:
        ready, _, _ = select.select([fd], [], [], 0.5)
        if not ready:
            break
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            break
        if not chunk:
            break
        buffer.extend(chunk)
    return ANSI.sub("", buffer.decode("utf-8", "replace"))


def test_without_a_terminal_output_is_lines_and_finite(up):
    up.hold(True)
    first = up.cogd("up", "--no-hooks")  # no --wait-embed: report once, do not wait
    out = first.stdout
    assert PACK_RULE in out and "render_profile" in out
    last = out.strip().splitlines()[-1]
    assert last.startswith("embedding: ") and last.endswith("continuing in the background (see `cogd status`)"), last
    for stream in (first.stdout, first.stderr):
        assert "\r" not in stream and "\x1b" not in stream  # no bar, no cursor movement
    wait_for(lambda: up.embedding()["phase"] == "embedding", what="the entities counted")
    # The model is loaded (a query vector exists) but no entity has a vector: the pack says BM25 only.
    lexical = json.loads(up.cogd("context", "render the profile", "--json").stdout)["text"]
    assert lexical.startswith("## cogd: code that may matter for this prompt\n(BM25") and "embeddings" not in \
        lexical.splitlines()[1], lexical[:200]

    held = up.cogd("up", "--no-hooks", "--wait-embed", "1")  # held: the cap ends it
    lines = held.stdout.strip().splitlines()
    assert lines[-2:] == [f"embedding: 0/{ENTITIES} entities · front 0/{ENTITIES}",
                          f"embedding: embedding 0 of {ENTITIES} entities (0.0%) ({up.embedding()['model']}); "
                          "continuing in the background (see `cogd status`)"], lines[-3:]

    up.hold(False)
    done = up.cogd("up", "--no-hooks", "--wait-embed", str(WAIT_S))  # returns once it is current
    last = done.stdout.strip().splitlines()[-1]
    assert last == f"embedding: current: all {ENTITIES} entities embedded ({up.embedding()['model']})", last
