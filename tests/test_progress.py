"""The words and shapes of progress: ETAs, the embedding bar's counts, the stages of a reset.

The commands that use them run against real daemons in tests/test_up.py and tests/test_reset.py;
here each piece is checked on its own, with exact strings.
"""

from __future__ import annotations

import io
import re

from rich.console import Console

from cogd.cli.progress import Stages, _counts, format_eta, front_line

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def test_format_eta():
    assert [format_eta(s) for s in (0, 44.6, 60, 125, 599, 600, 3599, 3600, 13_000)] == [
        "0 s", "45 s", "1 min 00 s", "2 min 05 s", "9 min 59 s", "10 min", "59 min", "1 h 00 min", "3 h 36 min"]


def test_the_bar_counts_say_only_what_is_known():
    assert _counts({"state": "loading", "phase": "loading"}) == "loading the model"
    assert _counts({"state": "embedding", "phase": "counting", "entities": 0}) == "counting the entities"
    e = {"state": "embedding", "phase": "embedding", "entities": 60_445, "embedded_entities": 4_755,
         "pending": 55_690, "rate_per_s": 201.44, "eta_s": 276.5,
         "front": {"entities": 4_755, "embedded_entities": 4_755}}
    assert _counts(e) == "4,755/60,445 entities · 201.4/s · ETA 4 min 36 s · front 4,755/4,755"
    assert _counts({**e, "rate_per_s": 0.0, "front": {}}) == "4,755/60,445 entities"  # no rate yet: no ETA


def test_the_front_row_waits_for_a_count():
    e = {"phase": "embedding", "front": {"entities": 1_234, "embedded_entities": 99, "files": 38}}
    assert front_line(e) == ("99/1,234 embedded (every file entity and the definitions of 38 recently "
                             "changed or most-referenced files)")
    assert front_line({**e, "phase": "counting"}) is None
    assert front_line({"phase": "current"}) is None  # a daemon that reports no front


def test_stages_as_lines_without_a_terminal():
    out = io.StringIO()
    with Stages(Console(file=out, force_terminal=False, width=200), tty=False) as stages:
        stages.start("index", "parsing the work tree")
        stages.update(3, 10, "files parsed")  # the first update within LINE_EVERY_S of the start: not printed
        stages.finish("10 files, 42 code entities", 10)
        stages.start("vectors", "loading the model")
        stages.finish("52 of 52 entities, 0 computed by the model (the rest from the cache)", 52)
    lines = out.getvalue().splitlines()
    assert [re.sub(r" \(\d+\.\d s\)$", " (T)", line) for line in lines] == [
        "index: parsing the work tree", "index: 10 files, 42 code entities (T)",
        "vectors: loading the model", "vectors: 52 of 52 entities, 0 computed by the model (the rest from the cache) (T)"]


def test_stages_as_bars_on_a_terminal_keep_each_summary():
    out = io.StringIO()
    # 80 columns, a common terminal: a long summary is wrapped onto the next line, never cut
    long = "2,677 of 2,677 entities, 565 computed by the model (the rest from the cache)"
    with Stages(Console(file=out, force_terminal=True, width=80), tty=True) as stages:
        stages.start("index", "parsing the work tree")
        stages.update(3, 10, "files parsed")
        stages.finish("10 files, 42 code entities", 10)
        stages.start("vectors", "loading the model")
        stages.update(64, 2677, "0 computed by the model")
        stages.finish(long, 2677)
    text = ANSI.sub("", out.getvalue())
    # Each finished stage is a line of its own with its summary and its duration.
    assert re.search(r"✓ index    10 files, 42 code entities \(\d+\.\d s\)", text), text
    flat = " ".join(text.split())  # the wrapped summary, joined again
    assert re.search(r"✓ vectors " + re.escape(long) + r" \(\d+\.\d s\)", flat), text


def test_quiet_stages_draw_nothing():
    out = io.StringIO()
    with Stages(Console(file=out, force_terminal=True), quiet=True) as stages:
        stages.start("index")
        stages.update(1, 2)
        stages.finish("done", 2)
    assert out.getvalue() == ""
