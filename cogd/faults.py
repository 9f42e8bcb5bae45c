"""Fault injection for tests: failures and holds that are hard to cause for real on demand.

Inert unless the environment variable ``COGD_FAULTS`` names a file (the
daemon inherits it from the command that starts it). While that file exists,
each of its lines names an active fault; a test writes and removes the file to
switch faults on and off in a running daemon. Faults:

``ledger_write``
    recording a delivery fails as a full disk does
    (``sqlite3.OperationalError: database or disk is full``);
``hold_index``
    the index worker holds each refresh (state ``indexing``) until the fault
    is removed, so a test can act during the first index deterministically.

Reading the file costs one ``stat`` per check, and only when the variable is set.
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
