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
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from cogd.config import PACK_HARD_CAP_CHARS, PackConfig, RetrieveConfig
from cogd.fusion import BM25
from cogd.index import store
from cogd.index.boundary import read_tree_file
from cogd.index.vectors import DenseIndex
from cogd.retrieve.feedback import Feedback
from cogd.retrieve.clues import Clues
from cogd.retrieve.hybrid import is_test_path, retrieve, select
from cogd.retrieve.lexical import Hit, query_terms
from cogd.retrieve.priors import cached_package_roots, vendored_patterns
from cogd.retrieve.prompt import analyze
from cogd.retrieve.repomap import RankedGraph, map_entities
from cogd.retrieve.version import version_files, version_request
from cogd.visible import visible

EXCERPT_READ_BYTES = 16 << 20  # indexed files are far smaller (index.max_file_bytes); a bound all the same

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
            "pointer": self.pointer, "signals": self.signals, "reason": reason_of(self.signals),
        }


def reason_of(signals: dict) -> str:
    """Why an item is in a pack, in one line, from its ranking signals.

    E.g. ``BM25 #3, vector #7; caller of a.py::f; utility 0.41 ×1.17; touched this session ×1.5``.
    """
    found = []
    sources = [f"{label} #{signals[key]}" for key, label in
               (("bm25_rank", "BM25"), ("vector_rank", "vector"), ("association_rank", "edited after similar prompts")) if key in signals]
    if "history_rank" in signals:
        commits = signals.get("history_commits") or []
        sources.append(f"changed by similar commits #{signals['history_rank']}"
                       + (f" ({signals.get('history_evidence', len(commits))}: " + "; ".join(map(str, commits)) + ")"
                          if commits else ""))
    if sources:
        found.append(", ".join(sources))
    if signals.get("deepened"):
        found.append("in the strongest file, read past the BM25 cut")
    if "part" in signals:
        found.append(str(signals["part"]))
    if "expanded_from" in signals:
        found.append(str(signals["expanded_from"]).split(" (")[0])
    if "prior" in signals and signals["prior"] != 1.0:
        why = (f" (vendored: {signals['vendored']})" if "vendored" in signals
               else " (test, the prompt is not about tests)" if signals.get("test_prior") else "")
        found.append(f"prior ×{signals['prior']}{why}")
    if "file_rank" in signals:
        found.append(f"file #{signals['file_rank']}")
    if "file_prior_pointer" in signals:
        found.append(f"placed as file #{signals['file_prior_pointer']} by history's file prior")
    if "utility_x" in signals:
        found.append(f"utility {signals.get('utility')} ×{signals['utility_x']}")
    if "utility_in_history" in signals:
        found.append(f"utility ×{signals['utility_in_history']} left out (history counts those edits)")
    if "working_set_x" in signals:
        found.append(f"touched this session ×{signals['working_set_x']}")
    if "recency_x" in signals:
        found.append(f"recently changed ×{signals['recency_x']}")
    if "pagerank" in signals:
        found.append(f"PageRank {signals['pagerank']}")
    if "memory" in signals:
        found.append(f"{signals['memory']} memory")
    if signals.get("working_set") is True:
        found.append("this session's working set")
    if "pinned" in signals:
        found.append(str(signals["pinned"]))
    return "; ".join(found)


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

    Read through :func:`cogd.index.boundary.read_tree_file`: a path that has
    become a symlink out of the tree since it was indexed gives no excerpt.
    A Python docstring is left out when the item already shows its first line.
    """
    try:
        data = read_tree_file(root, hit.path, EXCERPT_READ_BYTES)
    except OSError:  # gone, unreadable, or outside the work tree now
        return ""
    lines = data.decode("utf-8", errors="replace").splitlines()
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
    """Control characters (a newline in a file name) would break the markdown: show them as ?;
    other hidden characters (C1, bidirectional, zero-width) as :func:`cogd.visible.visible` shows them."""
    return visible(_CONTROL.sub("?", text))


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
    # The repository's text (signature, doc, excerpt) with its hidden characters shown: what the
    # agent reads is what a person reviewing the pack sees (docs/architecture.md, "Untrusted text").
    return visible("\n".join(lines) + "\n")


Preface = tuple[str, list[PackItem]]  # rendered rules/memories and their items (cogd.retrieve.memories)


def _add_preface(parts: list[str], items: list[PackItem], preface: Preface | None) -> int:
    """Append a rendered preface and its items (ranked first); returns the characters added."""
    if not preface or not preface[0]:
        return 0
    text = visible(preface[0].rstrip()) + "\n\n"  # memory text, shown as in _render_item
    parts.append(text)
    for item in preface[1]:
        item.rank = len(items) + 1
        items.append(item)
    return len(text)


def assemble(
    conn: sqlite3.Connection, root: Path, header: str, ranked: list[Hit], config: PackConfig,
    sections: list[str] | None = None, preface: Preface | None = None,
) -> Pack:
    """Render ``ranked`` under ``config.max_chars`` (never above the hard cap).

    At most ``config.max_items`` full items, then ``config.max_pointers`` one-line pointers; a
    file entity history's file prior placed (``file_prior_pointer`` in its signals,
    :func:`cogd.retrieve.hybrid.file_pointers`: a heading, the file's doc line and its id, no
    excerpt) is rendered where it stands without taking one of the ``max_items``.

    ``preface``: rendered rules and memories placed first (their size must
    already fit the budget). ``sections`` are extra markdown blocks (already
    rendered) placed after the items if they fit. Returns an empty pack when
    nothing is ranked.
    """
    budget = min(config.max_chars, PACK_HARD_CAP_CHARS)
    if not ranked and not sections and not (preface and preface[0]):
        return Pack("")
    parts = [header.rstrip() + "\n"]
    used = len(parts[0])
    items: list[PackItem] = []
    used += _add_preface(parts, items, preface)
    first_code = len(items)
    leftovers: list[Hit] = []
    reserve = 400  # room kept for the pointer list
    languages = store.file_languages(conn, [h.path for h in ranked])  # one query, not one per item
    placed = 0  # file entities placed by history's file prior: they take no definition's slot
    for hit in ranked:
        is_placed = "file_prior_pointer" in hit.signals
        if not is_placed and len(items) - first_code - placed >= config.max_items:
            leftovers.append(hit)
            continue
        n = len(items) - first_code + 1
        excerpt = ""
        if n <= config.excerpt_items and hit.kind in ("function", "method"):
            excerpt = _excerpt(root, hit, config.excerpt_lines)
        block = _render_item(n, hit, excerpt, languages.get(hit.path, ""))
        if used + len(block) > budget - reserve and excerpt:
            block = _render_item(n, hit, "", "")
        if used + len(block) > budget - reserve:
            leftovers.append(hit)
            continue
        parts.append(block)
        used += len(block)
        placed += is_placed
        items.append(PackItem(hit.id, hit.kind, hit.path, hit.start_line, hit.end_line, hit.score, len(items) + 1,
                              len(block), signals=hit.signals))
    for section in map(visible, sections or []):
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
    feedback: Feedback | None = None,
    pinned: list[str] | None = None,
    preface: Preface | None = None,
) -> Pack:
    """The pack for one user prompt: hybrid candidates, priors, feedback, MMR, budgeted rendering.

    A prompt with no searchable word ("ok", "continue", "thanks!") gets no pack:
    anything retrieved for it would be noise in the agent's context.
    ``pinned``: entity ids placed first whatever their score (the session's
    working set re-added after a compaction that seems to have lost it).
    """
    if not query_terms(prompt):
        return Pack("")  # rules were given at session start; chat filler needs nothing
    parts = analyze(prompt)
    clues = Clues()
    bumped = (version_files(conn, root) if retrieve_config.version_weight > 0 and version_request(prompt) else [])
    hits = retrieve(conn, prompt, retrieve_config, mode=mode, query_vector=query_vector, dense=dense, limit=CANDIDATES,
                    feedback=feedback, parts=parts, clues=clues, version_files=bumped)
    ranked = select(hits, retrieve_config, per_file_cap=config.per_file_cap, prompt=prompt, dense=dense,
                    limit=config.max_items + config.max_pointers, feedback=feedback, parts=parts, clues=clues,
                    vendored=vendored_patterns(root), package_roots=_package_roots(conn, root, retrieve_config),
                    file_entities=lambda paths: _hits_by_ids(conn, paths, 0.0))
    # Embeddings are named only when some vector could have ranked an item: a query vector is
    # computed as soon as the model loads, long before the entities have theirs.
    vectors = query_vector is not None and dense is not None and len(dense) > 0
    sources = "BM25 + embeddings" if vectors and (mode or retrieve_config.mode) != BM25 else "BM25"
    header = (f"## cogd: code that may matter for this prompt\n"
              f"({sources} over the repository index; `path:start-end`, then the entity id)\n")
    if pinned:
        pins = _hits_by_ids(conn, pinned[: config.max_items // 2], 0.0)
        for hit in pins:
            hit.signals = {"pinned": "working set re-added after compaction"}
        pinned_ids = {h.id for h in pins}
        ranked = pins + [h for h in ranked if h.id not in pinned_ids]
        header += "(the first items are this session's working set, re-added after compaction)\n"
    return assemble(conn, root, header, ranked, config, preface=preface)


PACKAGE_ROOTS_TTL_S = 600


def _package_roots(conn: sqlite3.Connection, root: Path, config: RetrieveConfig) -> dict[str, str]:
    """The tree's vendored package directories (:func:`cogd.retrieve.priors.package_roots`),
    listed again when the number of indexed files changes (a copied package brings files) and
    at most every ``PACKAGE_ROOTS_TTL_S`` otherwise (a licence file alone is not indexed), so
    a save between two prompts costs no listing; {} when the vendored prior is off or the
    tree cannot be listed."""
    if config.vendor_prior == 1.0:
        return {}
    try:
        count = conn.execute("SELECT count(*) FROM files").fetchone()[0]
        freshness = (count, int(time.time() // PACKAGE_ROOTS_TTL_S))
        return cached_package_roots(root, freshness)
    except (OSError, sqlite3.Error, ValueError):
        return {}


def _hits_by_ids(conn: sqlite3.Connection, entity_ids: list[str], score: float) -> list[Hit]:
    """Hits for those of ``entity_ids`` the index holds, in the given order (one query)."""
    rows = store.entities_by_ids(conn, entity_ids)
    return [Hit(*rows[entity_id], score) for entity_id in dict.fromkeys(entity_ids) if entity_id in rows]


def _recent_section(conn: sqlite3.Connection, recent_paths: list[str], limit: int = 8) -> str:
    """Markdown lines for recently changed, indexed files: size, doc line, what they define."""
    summaries = store.file_summaries(conn, recent_paths)
    shown = [summaries[path] for path in dict.fromkeys(recent_paths) if path in summaries][:limit]
    children = store.child_names(conn, [f.path for f in shown], 12)
    lines = []
    for file in shown:
        names = list(dict.fromkeys(children.get(file.path, [])))[:8]
        doc = _first_line(file.doc, 100)
        lines.append(f"- `{_safe(file.path)}` ({file.lines} lines){' — ' + doc if doc else ''}"
                     f"{' — defines ' + ', '.join(names) if names else ''}")
    return "### Recently changed files\n" + "\n".join(lines) + "\n" if lines else ""


def _public_first(hit: Hit) -> tuple[int, float]:
    return (1 if hit.name.startswith("_") and not hit.name.startswith("__") else 0, -hit.score)


def overview_pack(
    conn: sqlite3.Connection, root: Path, recent_paths: list[str], config: PackConfig, graph: RankedGraph,
    preface: Preface | None = None,
) -> Pack:
    """The session-start pack: the repository map, then recently changed files.

    The map lists the files with the most PageRank (personalised towards
    recently changed files and useful entities, :mod:`cogd.retrieve.repomap`)
    and, under each, its top definitions with line span and signature. Every
    definition shown is a delivery item (its id is ``path::qualified.name``).
    ``preface``: rendered rules and memories placed before the map.
    ``recent_paths`` come newest first from git; unindexed ones are skipped.
    """
    budget = min(config.max_chars, PACK_HARD_CAP_CHARS)
    header = ("## cogd: repository map\n"
              "(the definitions the code leans on most, weighted towards recent work; "
              "an item's id is `path::qualified.name` — `cogd show ID` expands it)\n")
    parts = [header]
    used = len(header)
    items: list[PackItem] = []
    used += _add_preface(parts, items, preface)
    recent = _recent_section(conn, recent_paths)
    reserve = min(len(recent) + 1, budget // 4)
    per_file = max(2, config.max_items // 4)
    mapped = map_entities(conn, graph, max_files=config.max_items, per_file=per_file * 2, skip_path=is_test_path)
    summaries = store.file_summaries(conn, [path for path, _score, _defs in mapped])
    for path, _score, defs in mapped:
        defs = sorted(sorted(defs, key=_public_first)[:per_file], key=lambda h: h.start_line)
        summary = summaries.get(path)
        doc = _first_line(summary.doc, 90) if summary else ""
        block = [f"\n`{_safe(path)}`{f' ({summary.lines} lines)' if summary else ''}{' — ' + doc if doc else ''}\n"]
        lines = []
        for hit in defs:
            sig = hit.signature if hit.signature and len(hit.signature) <= 120 else ""
            kind = hit.subkind or hit.kind
            line = f"- {kind} **{_safe(hit.qualname)}** L{hit.start_line}-{hit.end_line}{': `' + _safe(sig) + '`' if sig else ''}\n"
            lines.append((hit, line))
        size = len(block[0]) + sum(len(line) for _, line in lines)
        if not lines or used + size > budget - reserve or len(items) + len(lines) > config.max_items * 2:
            continue
        parts.append(block[0])
        used += len(block[0])
        for hit, line in lines:
            parts.append(line)
            used += len(line)
            hit.signals = {"pagerank": round(graph.scores.get(hit.id, 0.0), 6)}
            items.append(PackItem(hit.id, hit.kind, hit.path, hit.start_line, hit.end_line, hit.score,
                                  len(items) + 1, len(line), signals=hit.signals))
    if recent and used + len(recent) + 1 <= budget:
        parts.append("\n" + recent)
    if not items and len(parts) == 1:
        return Pack("")
    return Pack("".join(parts)[:budget], items)


def working_set_pack(conn: sqlite3.Connection, root: Path, entity_ids: list[str], config: PackConfig,
                     preface: Preface | None = None) -> Pack:
    """The ``compact`` session-start pack: rules, then the session's working set (what it edited, used and read).

    An empty working set and no rules give an empty pack.
    """
    hits = _hits_by_ids(conn, entity_ids, 1.0)
    for hit in hits:
        hit.signals = {"working_set": True}
    header = ("## cogd: this session's working set (after compaction)\n"
              "(what this session edited, used and read; `path:start-end`, then the entity id)\n")
    return assemble(conn, root, header, hits, config, preface=preface)
