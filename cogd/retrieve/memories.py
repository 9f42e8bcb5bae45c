"""Memories in packs: rules first, then memories, each traceable by id
(docs/architecture.md, "Retrieval, in order", step 7).

Rendering only: the memory store (:mod:`cogd.memory.api`) finds them. A
``stale`` memory — its anchored code changed since it was written — is shown
with its age and a "may be outdated" mark, never as current fact, or left out
(``[memory] show_stale = false``). A ``candidate`` (agent-written, not yet
confirmed) is shown only where asked, marked "unconfirmed": delivering it is
how it can earn the hits that promote it.
"""

from __future__ import annotations

import re
import time
from typing import Iterable

from cogd.memory.projection import MemoryHit
from cogd.retrieve.pack import PackItem

MEMORY_SHARE = 0.35  # at most this share of a pack's budget goes to rules and memories
BODY_CHARS = 320  # a memory's body is cut to this many characters in a pack
_SPACE = re.compile(r"\s+")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def age(seconds: float) -> str:
    """``5 min``, ``3 h``, ``12 days``, ``4 months`` — a coarse, human age."""
    seconds = max(seconds, 0.0)
    if seconds < 3600:
        return f"{max(int(seconds // 60), 1)} min"
    if seconds < 86400:
        return f"{int(seconds // 3600)} h"
    if seconds < 60 * 86400:
        return f"{int(seconds // 86400)} days"
    return f"{int(seconds // (30 * 86400))} months"


def _one_line(text: str, limit: int) -> str:
    line = _CONTROL.sub(" ", _SPACE.sub(" ", text)).strip()
    return line if len(line) <= limit else line[: limit - 1].rstrip() + "…"


def _memory_path(memory: MemoryHit) -> str:
    return f".cogd/memory/{memory.type}s/{memory.id}.md"


def render_memories(
    rules: Iterable[MemoryHit], memories: Iterable[MemoryHit], budget_chars: int, *,
    show_stale: bool = True, show_candidates: bool = False, now: float | None = None,
) -> tuple[str, list[PackItem]]:
    """Markdown for ``rules`` then ``memories`` within ``budget_chars``, and their pack items.

    Items carry kind = the memory type, path = the record's file, lines 0-0,
    rank 0 (the pack numbers them). Returns ``("", [])`` when nothing fits.
    """
    now = time.time() if now is None else now
    parts: list[str] = []
    items: list[PackItem] = []
    used = 0
    seen: set[str] = set()
    for heading, group in (("### Rules (follow these)", rules), ("### Memories", memories)):
        lines = []
        for memory in group:
            if memory.id in seen or memory.status not in ("active", "stale", "candidate"):
                continue
            if (memory.status == "stale" and not show_stale) or (memory.status == "candidate" and not show_candidates):
                continue
            mark = ""
            if memory.status == "candidate":
                mark = " _(unconfirmed: recorded by an agent, not yet corroborated)_"
            elif memory.status == "stale":
                mark = f" _(may be outdated: its code changed since; written {age(now - memory.updated_at)} ago)_"
            body = _one_line(memory.body, BODY_CHARS)
            title = _one_line(memory.title, 160)
            text = f"- **{title}**{mark}" + (f" — {body}" if body and body != title else "") + f" `{memory.id}`\n"
            size = len(text) + (len(heading) + 2 if not lines else 0)
            if used + size > budget_chars:
                continue
            used += size
            lines.append(text)
            seen.add(memory.id)
            items.append(PackItem(memory.id, memory.type, _memory_path(memory), 0, 0, float(memory.score),
                                  chars=len(text), signals={"memory": memory.status}))
        if lines:
            parts.append(heading + "\n" + "".join(lines))
    return ("\n".join(parts), items) if items else ("", [])
