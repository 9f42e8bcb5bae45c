"""A hostile repository cannot drive the user's terminal through the CLI.

The repository below puts escape sequences (clear the screen, OSC 52 clipboard write, OSC 8
link, OSC 0 window title), a C1 CSI and a right-to-left override into a docstring, a signature,
file names and a memory. Every command that prints them runs as a real subprocess against one
real daemon (lexical only), and its stdout and stderr must hold no raw control, C1 or
bidirectional character, only their visible form ``⟨U+001B⟩`` (cogd.visible).
"""

from __future__ import annotations

import json
import os
import pty
import re
import select
import subprocess
import time

import pytest

from cogd.cli.terminal import VisibleStream
from cogd.visible import visible
from tests.conftest import COGD, lexical_only, make_repo, run_cogd, running_daemon

ESC, BEL = "\x1b", "\x07"
CLEAR = f"{ESC}[2J"
OSC52 = f"{ESC}]52;c;ZXZpbA=={BEL}"
OSC8 = f"{ESC}]8;;http://evil.example/{ESC}\\click here{ESC}]8;;{ESC}\\"
TITLE = f"{ESC}]0;pwned{BEL}"
RLO = "\u202e"
CSI1 = "\x9b"  # the one-character CSI of C1
DOC = f"Frobnicate {CLEAR} the clipboard {OSC52} a link {OSC8} and {RLO}desrever {CSI1}31m done."
EVIL_SRC = f'def frobnicate_widget(x="{TITLE}"):\n    """{DOC}"""\n    return x\n'
SPOOFED = f"pkg/a{RLO}gnp.py"            # reads as pkg/apng.py
CLEARING = f"pkg/{CLEAR}cleared.py"      # a file name that clears the screen
MEMORY = f"Never paste {OSC52} into {RLO}prod; {CLEAR}ok"

# What must never reach the output raw: C0 but tab and line feed (a carriage return only as part
# of CRLF), DEL, C1, and the bidirectional controls.
RAW = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]|\r(?!\n)")
# What rich writes itself on a colour terminal: SGR (colours, bold) and nothing else here.
SGR = re.compile(r"\x1b\[[0-9;]*m")


def assert_clean(text: str, what: str) -> None:
    found = RAW.search(text)
    assert found is None, f"{what}: raw {found.group()!r} at {found.start()}: {text[max(0, found.start() - 60):found.end() + 20]!r}"


def cogd(root, *args, env=None, check=True) -> subprocess.CompletedProcess:
    """``cogd ARGS`` in ``root`` with its output as bytes decoded strictly (a lone surrogate or
    bad byte fails here, not silently)."""
    proc = subprocess.run([COGD, *args], cwd=root, capture_output=True, timeout=120,
                          env={**os.environ, "COLUMNS": "200", **(env or {})})
    out, err = proc.stdout.decode("utf-8"), proc.stderr.decode("utf-8")
    if check and proc.returncode != 0:
        raise AssertionError(f"cogd {args} failed ({proc.returncode}):\n{out}\n{err}")
    assert_clean(out, f"stdout of cogd {args}")
    assert_clean(err, f"stderr of cogd {args}")
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    """A committed repository of hostile text with a running daemon (lexical only), and the id
    of a memory whose title and body hold escapes."""
    root = tmp_path_factory.mktemp("hostile") / "repo"
    make_repo(root, {"pkg/evil.py": EVIL_SRC,
                     SPOOFED: 'def spoofed_name():\n    """Plain."""\n    return 1\n',
                     CLEARING: "def cleared_path():\n    return 2\n"})
    lexical_only(root)
    with running_daemon(root):
        added = json.loads(run_cogd(root, "memory", "add", "rule", MEMORY, "--title", f"Rule {CLEAR}title",
                                    "--anchor", "pkg/evil.py::frobnicate_widget", "--json").stdout)
        yield root, added["record"]["id"]


def test_show_search_context_and_stats_print_hostile_text_visibly(hostile):
    root, _ = hostile
    shown = cogd(root, "show", "pkg/evil.py::frobnicate_widget").stdout
    assert visible(TITLE) in shown  # the signature
    for part in (CLEAR, OSC52, OSC8, f"{RLO}desrever", f"{CSI1}31m"):  # the docstring
        assert visible(part) in shown, part
    assert "⟨U+001B⟩]52;c;ZXZpbA==⟨U+0007⟩" in shown  # the form itself, not only visible()'s word for it
    found = cogd(root, "search", "cleared").stdout
    assert "pkg/⟨U+001B⟩[2Jcleared.py::cleared_path" in found
    assert "pkg/a⟨U+202E⟩gnp.py::spoofed_name" in cogd(root, "search", "spoofed").stdout
    explained = cogd(root, "search", "frobnicate", "--explain").stdout
    assert "frobnicate_widget" in explained
    pack = cogd(root, "context", "frobnicate the widget", "--explain")
    assert "frobnicate_widget" in pack.stdout and visible(OSC52) in pack.stdout
    assert "pkg/evil.py::frobnicate_widget" in pack.stderr  # the ranking signals
    assert "usage ledger" in cogd(root, "stats").stdout


def test_an_error_quoting_hostile_text_shows_it_visibly(hostile):
    root, _ = hostile
    proc = cogd(root, "show", f"{CLEARING}::{RLO}nothing", check=False)
    assert proc.returncode == 1
    assert "no entity 'pkg/\\x1b[2Jcleared.py::\\u202enothing'" in proc.stderr  # quoted as a repr
    # A message that quotes its text as it is goes through the stream filter (click prints it):
    # (click itself drops a CSI such as CLEAR from a message to a pipe, not OSC or bidi)
    missing = root.parent / f"gone{OSC52}{RLO}"  # outside any repository
    proc = cogd(root, "--root", str(missing), "status", check=False)
    assert proc.returncode == 1
    assert f"{root.parent}/gone⟨U+001B⟩]52;c;ZXZpbA==⟨U+0007⟩⟨U+202E⟩ is not a directory" in proc.stderr
    # The other commands that quote the repository: doctor's findings, the daemon's log lines.
    assert "config" in cogd(root, "doctor", check=False).stdout
    # a log line quoting a hostile file name, as the daemon's warnings about a file do
    with open(root / ".cogd" / "logs" / "daemon.log", "a", encoding="utf-8") as log:
        log.write(f"2026-01-01 00:00:00,000 1 WARNING cogd.test: skipped {CLEARING}: {OSC52}\n")
    # (click.echo drops a CSI such as CLEAR itself when its output is not a terminal)
    assert "skipped pkg/cleared.py: ⟨U+001B⟩]52;c;ZXZpbA==⟨U+0007⟩" in cogd(root, "logs", "-n", "5").stdout


def test_memory_commands_show_hostile_text_visibly_and_export_stays_exact(hostile):
    root, memory_id = hostile
    listed = cogd(root, "memory", "list").stdout
    assert "⟨U+001B⟩[2J" in listed
    shown = cogd(root, "memory", "show", memory_id).stdout
    assert "Never paste ⟨U+001B⟩]52;c;ZXZpbA==⟨U+0007⟩ into ⟨U+202E⟩prod; ⟨U+001B⟩[2Jok" in shown
    assert "Rule ⟨U+001B⟩[2Jtitle" in cogd(root, "show", memory_id).stdout  # `cogd show` of a memory id
    exported = [json.loads(line) for line in cogd(root, "export").stdout.splitlines()]
    assert [m["body"].strip() for m in exported if m["id"] == memory_id] == [MEMORY]  # \u escapes: exact
    assert cogd(root, "events").stdout


def test_json_output_is_valid_and_exact(hostile):
    root, memory_id = hostile
    entity = json.loads(cogd(root, "show", "pkg/evil.py::frobnicate_widget", "--json").stdout)
    assert entity["doc"] == DOC and entity["signature"] == f'def frobnicate_widget(x="{TITLE}")'
    hits = json.loads(cogd(root, "search", "spoofed", "--json").stdout)
    assert f"{SPOOFED}::spoofed_name" in [h["id"] for h in hits]
    memory = json.loads(cogd(root, "memory", "show", memory_id, "--json").stdout)
    assert memory["record"]["body"].strip() == MEMORY
    pack = json.loads(cogd(root, "context", "frobnicate the widget", "--json").stdout)
    # The pack itself shows the hidden characters (what the agent reads is what a reviewer sees):
    assert visible(OSC52) in pack["text"] and not RAW.search(pack["text"])
    json.loads(cogd(root, "stats", "--json").stdout)
    json.loads(cogd(root, "status", "--json").stdout)


def test_on_a_colour_terminal_only_rich_styles_are_escapes(hostile):
    """FORCE_COLOR makes rich style its output as on a terminal: every escape left in the
    output is then rich's own SGR, none of the repository's."""
    root, memory_id = hostile
    for args in (("show", "pkg/evil.py::frobnicate_widget"), ("search", "cleared"), ("memory", "show", memory_id),
                 ("status",)):
        proc = subprocess.run([COGD, *args], cwd=root, capture_output=True, timeout=120,
                              env={**os.environ, "FORCE_COLOR": "1", "COLUMNS": "200"})
        assert proc.returncode == 0, proc.stderr
        for stream in (proc.stdout.decode(), proc.stderr.decode()):
            rest = SGR.sub("", stream)
            assert_clean(rest, f"cogd {args} with FORCE_COLOR")
        assert SGR.search(proc.stdout.decode()), "rich did not style: the test would prove nothing"


def read_pty(argv, cwd, timeout=120.0) -> bytes:
    """All that ``argv`` writes to a pseudo-terminal (stdout and stderr both), until it exits."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(argv, cwd=cwd, stdin=subprocess.DEVNULL, stdout=slave, stderr=slave,
                            env={**os.environ, "COLUMNS": "200", "TERM": "xterm-256color"})
    os.close(slave)
    chunks, deadline = [], time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 1.0)
            if ready:
                try:
                    data = os.read(master, 65536)
                except OSError:  # EIO: the child closed its side
                    break
                if not data:
                    break
                chunks.append(data)
            elif proc.poll() is not None:
                break
    finally:
        os.close(master)
        proc.wait(timeout=30)
    assert proc.returncode == 0, b"".join(chunks)
    return b"".join(chunks)


def test_on_a_real_terminal_nothing_of_the_repository_is_interpreted(hostile):
    root, _ = hostile
    for args in (["show", "pkg/evil.py::frobnicate_widget"], ["context", "frobnicate the widget"]):
        # show prints through rich, context's pack through click.echo (which keeps a CSI on a terminal)
        out = read_pty([COGD, *args], root).decode("utf-8")
        out = out.replace("\r\n", "\n")  # the terminal's own line discipline
        assert_clean(SGR.sub("", out), f"cogd {args[0]} on a pty")
        assert "⟨U+001B⟩]52;c;ZXZpbA==⟨U+0007⟩" in out and "⟨U+202E⟩desrever" in out, args
        assert "⟨U+001B⟩[2J" in out, args


def test_a_live_progress_bar_keeps_its_own_escapes_on_a_terminal(hostile):
    # rich's live display redirects sys.stdout through its own proxy, in front of the filter:
    # the bar's cursor and colour codes must still reach the terminal raw, not as marks.
    root, _ = hostile
    out = read_pty([COGD, "index", "--full"], root).decode("utf-8")
    assert "indexing" in out or "index" in out
    for own in ("⟨U+001B⟩[2K", "⟨U+001B⟩[?25", "⟨U+000D⟩⟨U+001B⟩", "⟨U+001B⟩[32m", "⟨U+001B⟩[1m"):
        assert own not in out, (own, out[-2000:])


def test_cogd_up_prints_its_sample_pack_visibly(hostile):
    root, _ = hostile
    up = cogd(root, "up", "--no-hooks", "--wait-embed", "0")
    assert "sample context pack" in up.stdout
    assert "frobnicate_widget" in up.stdout or "cleared_path" in up.stdout


def test_the_stream_filter_keeps_crlf_and_marks_a_lone_carriage_return():
    class Sink:
        def __init__(self):
            self.parts = []

        def write(self, text):
            self.parts.append(text)

        def flush(self):
            pass

    sink = Sink()
    stream = VisibleStream(sink)
    assert stream.write("a\r") == 2
    stream.write("\nb\r")  # CRLF across two writes stays; the second CR waits
    stream.write("c\x1b[2J\u202e")
    stream.write("end\r")
    stream.flush()
    assert "".join(sink.parts) == "a\r\nb⟨U+000D⟩c⟨U+001B⟩[2J⟨U+202E⟩end⟨U+000D⟩"
    assert stream.rich_proxied_file is sink
    with pytest.raises(TypeError):
        stream.write(b"raw")


def test_visible_marks_exactly_the_hidden_characters():
    kept = "tab\there\nline\r\nZWJ 👩\u200d💻 accents é, CJK 漢字, arrows → ⚓"
    assert visible(kept) is kept or visible(kept) == kept
    assert visible("\x00\x1b\x7f\x85\x9b\xad\u061c\u200b\u200e\u202e\u2066\u2069\ufeff\U000e0041\ud800") == (
        "⟨U+0000⟩⟨U+001B⟩⟨U+007F⟩⟨U+0085⟩⟨U+009B⟩⟨U+00AD⟩⟨U+061C⟩⟨U+200B⟩⟨U+200E⟩⟨U+202E⟩⟨U+2066⟩⟨U+2069⟩"
        "⟨U+FEFF⟩⟨U+E0041⟩⟨U+D800⟩")
    assert visible(visible("\x1b\u202e")) == visible("\x1b\u202e")
