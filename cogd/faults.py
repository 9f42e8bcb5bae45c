"""Fault injection for tests: failures and holds that are hard to cause for real on demand.

Switchable faults are inert unless the environment variable ``COGD_FAULTS`` names a file (the
daemon inherits it from the command that starts it). While that file exists,
each of its lines names an active fault; a test writes and removes the file to
switch faults on and off in a running daemon. Faults:

``ledger_write``
    recording a delivery fails as a full disk does
    (``sqlite3.OperationalError: database or disk is full``);
``hold_index``
    the index worker holds each refresh (state ``indexing``) until the fault
    is removed, so a test can act during the first index deterministically;
``hold_embed``
    the embedding worker waits before each chunk of a pass (the entities are
    counted, the chunk not embedded yet) until the fault is removed.

Reading the file costs one ``stat`` per check, and only when the variable is set.

**Crash points** (:func:`point`): ``COGD_FAULT=<point>`` in the environment of a cogd
process (daemon or CLI) makes :func:`point` call ``os._exit(137)`` — no cleanup, no
``finally``, exactly what a SIGKILL leaves — when execution reaches ``<point>``. The
variable is read once, at import; unset (always, outside tests) :func:`point` is one
string compare. The memory write path (:meth:`cogd.memory.api.MemoryStore.commit`) names its
points ``<operation>:<step>``: ``planned`` (nothing durable yet), ``intent`` (the intent is
recorded, no file touched), ``file<k>`` (file k of the operation written), ``logged``
(events appended) and ``project<k>`` (record k projected). ``COGD_FAULT_AFTER=<n>`` skips
the first ``n`` passes through the point (a multi-step run dies on a later one).
"""

from __future__ import annotations

import os

ENV = "COGD_FAULTS"


def active(name: str) -> bool:
    """Whether fault ``name`` is switched on (see the module docstring). Never raises."""
    path = os.environ.get(ENV)
    if not path:
        return False
    try:
        with open(path, encoding="utf-8") as fh:
            return name in {line.strip() for line in fh}
    except OSError:
        return False


CRASH_POINT = os.environ.get("COGD_FAULT", "")
_crash_skip = int(os.environ.get("COGD_FAULT_AFTER", "0") or 0)
CRASH_EXIT_CODE = 137  # what a shell reports for a process killed by SIGKILL (128 + 9)


def point(name: str) -> None:
    """Die here (``os._exit(137)``) when ``COGD_FAULT`` names ``name``; otherwise return at once."""
    global _crash_skip
    if CRASH_POINT and name == CRASH_POINT:
        if _crash_skip > 0:
            _crash_skip -= 1
            return
        os._exit(CRASH_EXIT_CODE)
