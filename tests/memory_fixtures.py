"""Fixtures shared by the memory test modules: a repository root with ``.cogd/index`` and a
:class:`MemoryStore` on it (real files, real SQLite). Import them into a test module by name."""

from __future__ import annotations

from pathlib import Path

import pytest

from cogd.memory.api import MemoryStore
from cogd.memory.errors import MemoryRefused


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / ".cogd" / "index").mkdir(parents=True)
    return tmp_path


@pytest.fixture
def store(root: Path):
    s = MemoryStore(root, root / ".cogd" / "state.db", root / ".cogd" / "index")
    yield s
    s.close()


def refused(kind: str, fn, *args, **kwargs) -> MemoryRefused:
    """Call ``fn`` and assert it raises a MemoryRefused of ``kind``; returns the error."""
    with pytest.raises(MemoryRefused) as info:
        fn(*args, **kwargs)
    assert info.value.kind == kind, (info.value.kind, str(info.value))
    return info.value
