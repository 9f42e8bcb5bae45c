"""Context packs: select entities for a prompt or a session start and render them.

A pack is compact markdown under a hard character budget. Claude Code replaces
injected text over 10,000 characters with a short preview, so a pack that
overflows is worse than a short one: items are added in rank order while they
fit, top items carry a body excerpt when room allows, and the candidates that
did not fit are listed as one-line pointers (``cogd show ID`` expands them).
"""

from __future__ import annotations

import re
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from cogd.config import PACK_HARD_CAP_CHARS, PackConfig, RetrieveConfig
from cogd.index.vectors import DenseIndex
from cogd.retrieve.hybrid import is_test_path, retrieve, select
from cogd.retrieve.lexical import Hit, query_terms

CANDIDATES = 60  # retrieved before selection


@dataclass
class PackItem:
    """One delivered entity: its rank (1-based), score and rendered size in characters."""

    entity_id: str
    kind: str
    path: str
    start_line: int
    end_line: int
    score: float
    rank: int = 0
    chars: int = 0
    pointer: bool = False  # listed as a one-line pointer only
    signals: dict = field(default_factory=dict)  # ranking signals, for --explain

    def as_dict(self) -> dict:
        return {
            "entity_id": self.entity_id, "kind": self.kind, "path": self.path,
            "start_line": self.start_line, "end_line": self.end_line,
            "score": round(self.score, 6), "rank": self.rank, "chars": self.chars,
            "pointer": self.pointer, "signals": self.signals,
        }


@dataclass
class Pack:
    """A rendered pack. ``text`` is exactly what the hook injects ('' = nothing)."""

    text: str
    items: list[PackItem] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {"text": self.text, "chars": len(self.text), "items": [i.as_dict() for i in self.items]}


_DOCSTRING_OPEN = re.compile(r"^\s*[rRuUbB]?(\"\"\"|\'\'\')")


def _drop_docstring(lines: list[str]) -> list[str]:
    """Remove a Python docstring block from a definition's lines (it is shown already)."""
    for i, line in enumerate(lines[:6]):
        match = _DOCSTRING_OPEN.match(line)
        if not match:
            continue
        quote = match.group(1)
        rest = line[match.end():]
        if quote in rest:
            return lines[:i] + lines[i + 1:]
        for j in range(i + 1, len(lines)):
            if quote in lines[j]:
                return lines[:i] + lines[j + 1:]
        return lines[:i]
    return lines


def _excerpt(root: Path, hit: Hit, max_lines: int) -> str:
    """Up to ``max_lines`` lines of the entity, read from the work tree now.

    A Python docstring is left out when the item already shows its first line.
    """
    try:
        with open(root / hit.path, "rb") as fh:
            lines = fh.read().decode("utf-8", errors="replace").splitlines()
    except OSError:
        return ""
    body = lines[hit.start_line - 1 : hit.end_line]
    if hit.doc and hit.path.endswith((".py", ".pyi")):
        body = _drop_docstring(body)
    cut = len(body) > max_lines
    body = body[:max_lines]
    if cut:
        body.append("    ...")
    return "\n".join(line.rstrip()[:160] for line in body)


def _first_line(text: str, limit: int = 200) -> str:
    """The first paragraph of a docstring on one line, cut at ``limit`` characters."""
    paragraph = text.strip().split("\n\n", 1)[0]
    line = " ".join(paragraph.split())
    return line if len(line) <= limit else line[: limit - 1].rstrip() + "…"


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _safe(text: str) -> str:
    """Control characters (a newline in a file name) would break the markdown: show them as ?."""
    return _CONTROL.sub("?", text)


def _render_item(n: int, hit: Hit, excerpt: str, language: str) -> str:
    kind = f"{hit.subkind} " if hit.subkind else ""
    head = f"{n}. `{_safe(hit.path)}:{hit.start_line}-{hit.end_line}` {kind}{hit.kind} **{_safe(hit.qualname)}**"
    lines = [head]
    if hit.signature and hit.kind != "file":
        lines.append(f"   `{hit.signature}`")
    doc = _first_line(hit.doc)
    if doc:
        lines.append(f"   {doc}")
    lines.append(f"   id: `{_safe(hit.id)}`")
    if excerpt:
        fence = "```"
        lines.append(f"{fence}{language}\n{excerpt}\n{fence}")
    return "\n".join(lines) + "\n"


def _language(conn: sqlite3.Connection, path: str) -> str:
    row = conn.execute("SELECT language FROM files WHERE path = ?", (path,)).fetchone()
    return row[0] if row else ""


def assemble(
    conn: sqlite3.Connection, root: Path, header: str, ranked: list[Hit], config: PackConfig,
    sections: list[str] | None = None,
) -> Pack:
    """Render ``ranked`` under ``config.max_chars`` (never above the hard cap).

    ``sections`` are extra markdown blocks (already rendered) placed after the
    items if they fit. Returns an empty pack when nothing is ranked.
    """
    budget = min(config.max_chars, PACK_HARD_CAP_CHARS)
    if not ranked and not sections:
        return Pack("")
    parts = [header.rstrip() + "\n"]
    used = len(parts[0])
    items: list[PackItem] = []
    leftovers: list[Hit] = []
    reserve = 400  # room kept for the pointer list
    for hit in ranked:
        if len(items) >= config.max_items:
            leftovers.append(hit)
            continue
        n = len(items) + 1
        excerpt = ""
        if n <= config.excerpt_items and hit.kind in ("function", "method"):
            excerpt = _excerpt(root, hit, config.excerpt_lines)
        block = _render_item(n, hit, excerpt, _language(conn, hit.path))
        if used + len(block) > budget - reserve and excerpt:
            block = _render_item(n, hit, "", "")
        if used + len(block) > budget - reserve:
            leftovers.append(hit)
            continue
        parts.append(block)
        used += len(block)
        items.append(PackItem(hit.id, hit.kind, hit.path, hit.start_line, hit.end_line, hit.score, n, len(block),
                              signals=hit.signals))
    for section in sections or []:
        if used + len(section) + 1 <= budget - reserve:
            parts.append("\n" + section)
            used += len(section) + 1
    pointers = []
    for hit in leftovers[: config.max_pointers]:
        line = f"- `{_safe(hit.id)}` ({_safe(hit.path)}:{hit.start_line}-{hit.end_line})\n"
        if used + len(line) + 40 > budget:
            break
        pointers.append(line)
        used += len(line)
        items.append(PackItem(hit.id, hit.kind, hit.path, hit.start_line, hit.end_line, hit.score,
                              len(items) + 1, len(line), pointer=True, signals=hit.signals))
    if pointers:
        parts.append("\nAlso relevant (expand with `cogd show ID`):\n" + "".join(pointers))
    text = "".join(parts)
    return Pack(text[:budget], items)


def prompt_pack(
    conn: sqlite3.Connection,
    root: Path,
    prompt: str,
    config: PackConfig,
    retrieve_config: RetrieveConfig,
    *,
    mode: str | None = None,
    query_vector: np.ndarray | None = None,
    dense: DenseIndex | None = None,
) -> Pack:
    """The pack for one user prompt: hybrid candidates, priors, MMR, budgeted rendering.

    A prompt with no searchable word ("ok", "continue", "thanks!") gets no pack:
    anything retrieved for it would be noise in the agent's context.
    """
    if not query_terms(prompt):
        return Pack("")
    hits = retrieve(conn, prompt, retrieve_config, mode=mode, query_vector=query_vector, dense=dense, limit=CANDIDATES)
    ranked = select(hits, retrieve_config, per_file_cap=config.per_file_cap, prompt=prompt, dense=dense,
                    limit=config.max_items + config.max_pointers)
    sources = "BM25 + embeddings" if query_vector is not None and (mode or retrieve_config.mode) != "bm25" else "BM25"
    header = (f"## cogd: code that may matter for this prompt\n"
              f"({sources} over the repository index; `path:start-end`, then the entity id)\n")
    return assemble(conn, root, header, ranked, config)


def _hit_by_id(conn: sqlite3.Connection, entity_id: str, score: float) -> Hit | None:
    row = conn.execute(
        "SELECT id, kind, subkind, path, name, qualname, start_line, end_line, signature, doc, parent_id "
        "FROM entities WHERE id = ?", (entity_id,),
    ).fetchone()
    return Hit(*row, score) if row else None


def overview_pack(conn: sqlite3.Connection, root: Path, recent_paths: list[str], config: PackConfig) -> Pack:
    """The session-start pack: most-connected entities, then recently changed files.

    "Most connected" counts an entity's edges both ways (with only ``contains``
    edges so far: the classes and files holding the most definitions).
    ``recent_paths`` come newest first from git; unindexed ones are skipped.
    """
    degree = conn.execute(
        "SELECT e.id, count(*) AS d FROM edges g JOIN entities e ON e.id IN (g.src, g.dst) "
        "WHERE e.kind != 'file' GROUP BY e.id ORDER BY d DESC, e.id LIMIT ?", (config.max_items * 6,),
    ).fetchall()
    ranked = [h for h in (_hit_by_id(conn, row[0], float(row[1])) for row in degree)
              if h is not None and not is_test_path(h.path)][: config.max_items]
    recent_lines = []
    for path in recent_paths:
        row = conn.execute("SELECT end_line, doc FROM entities WHERE id = ? AND kind = 'file'", (path,)).fetchone()
        if row is None:
            continue
        names = list(dict.fromkeys(r[0] for r in conn.execute(
            "SELECT name FROM entities WHERE parent_id = ? ORDER BY start_line LIMIT 12", (path,))))[:8]
        doc = _first_line(row[1], 100)
        recent_lines.append(f"- `{path}` ({row[0]} lines){' — ' + doc if doc else ''}"
                            f"{' — defines ' + ', '.join(names) if names else ''}")
        if len(recent_lines) >= 8:
            break
    sections = ["### Recently changed files\n" + "\n".join(recent_lines) + "\n"] if recent_lines else []
    header = "## cogd: repository overview\n(most-connected entities; `path:start-end`, then the entity id)\n"
    return assemble(conn, root, header, ranked, PackConfig(**{**config.__dict__, "excerpt_items": 0}), sections)
