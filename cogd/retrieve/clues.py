"""Clues → entities: traceback frames, file paths and identifiers of a prompt, resolved in the index.

:mod:`cogd.retrieve.prompt` finds the parts of a prompt; this module looks the precise
ones up, each kind giving its own ranked list for the fusion (docs/architecture.md,
"Prompt analysis"):

* a **frame** names the entity spanning its line (or defining its function) in the file
  its path names, matched at any depth that exists in the tree: ``/usr/lib/python3/
  site-packages/astropy/io/ascii/ui.py`` is ``astropy/io/ascii/ui.py`` here; innermost
  frames first (where the error was raised), frames in tests last unless the prompt is
  about tests;
* a **path** names its file entity;
* an **identifier** (``Table.read``, ``_array_converter``) names the entities defining it,
  when few do: a name defined in many places says little.

Each resolved id carries a label for ``--explain`` ("traceback frame 3 (ui.py:800 in
get_writer)", "path `conf.py`", "identifier `Foo.bar`").
"""

from __future__ import annotations

import re
import sqlite3
from dataclasses import dataclass, field

from cogd.index import store
from cogd.retrieve.prompt import Frame, PromptParts, describe_frame

MAX_CANDIDATE_FILES = 3  # a bare file name matching more files than this names none of them
MAX_DEFINITIONS = 4  # an identifier defined in more places than this is not a clue
MAX_IDENTIFIERS = 60
MAX_PATHS = 40  # paths looked up per prompt (frames' first): each distinct file name is one query
_DEF_KINDS = ("function", "method", "class")
# Frame forms whose innermost frame is printed last (Python: "most recent call last").
_INNERMOST_LAST = ("python", "ipython", "pytest")


@dataclass
class Clues:
    """Ranked lists of entity ids, each id with the label of the part behind it.

    ``frames``, ``paths``, ``identifiers``: ids best first, no repeats within a list.
    ``files``: the files the frames and paths named, best first (for file-level ranking).
    """

    frames: list[str] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    identifiers: list[str] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    labels: dict[str, str] = field(default_factory=dict)

    def label(self, entity_id: str, text: str) -> None:
        self.labels.setdefault(entity_id, text)


def _components(printed: str) -> list[str]:
    return [c for c in printed.replace("\\", "/").split("/") if c and c not in (".", "..", "~")]


def resolve_paths(conn: sqlite3.Connection, printed: list[str]) -> dict[str, str]:
    """Printed path → indexed path, at the deepest suffix of it that exists in the tree.

    A path whose file name matches several indexed files resolves to the one sharing the
    most trailing components with it; a tie, or a bare file name matching more than
    ``MAX_CANDIDATE_FILES`` files, resolves to none. One query per distinct file name.
    """
    by_name = store.paths_ending_with(conn, [_components(p)[-1] for p in printed if _components(p)])
    out: dict[str, str] = {}
    for path in printed:
        comps = _components(path)
        if not comps:
            continue
        candidates = by_name.get(comps[-1], [])
        best, best_depth, tie = None, 0, False
        for candidate in candidates:
            theirs = candidate.split("/")
            depth = 0
            while depth < min(len(theirs), len(comps)) and theirs[-1 - depth] == comps[-1 - depth]:
                depth += 1
            if depth > best_depth:
                best, best_depth, tie = candidate, depth, False
            elif depth == best_depth:
                tie = True
        if best is None or (tie and best_depth <= 1) or (best_depth == 1 and len(candidates) > MAX_CANDIDATE_FILES):
            continue
        if tie:
            continue
        out[path] = best
    return out


def _frame_entity(conn: sqlite3.Connection, path: str, frame: Frame) -> str:
    """The entity a resolved frame names: its function's definition (the one spanning the
    line when several), else the narrowest definition spanning the line, else the file."""
    function = frame.function.rsplit(".", 1)[-1]
    if function and not function.startswith("<"):
        named = store.entities_named_in(conn, path, [function])
        if named:
            spanning = [n for n in named if frame.line and n[2] <= frame.line <= n[3]]
            return (spanning or named)[0][0]
    if frame.line:
        spans = store.definitions_at(conn, path, frame.line, frame.line, _DEF_KINDS)
        if spans:
            return spans[0][0]
    return path


def _ordered_frames(parts: PromptParts, tests_ok: bool) -> list[Frame]:
    """Innermost first; frames in tests after the others unless the prompt is about tests."""
    frames = list(parts.frames)
    innermost_last = [f for f in frames if f.form in _INNERMOST_LAST]
    others = [f for f in frames if f.form not in _INNERMOST_LAST]
    ordered = list(reversed(innermost_last)) + others
    if not tests_ok:
        ordered = [f for f in ordered if not f.about_tests] + [f for f in ordered if f.about_tests]
    return ordered


def resolve(conn: sqlite3.Connection, parts: PromptParts, *, tests_ok: bool) -> Clues:
    """Resolve ``parts``' frames, paths and identifiers in the index (see the module docstring).

    Raises sqlite3.Error when the index is unreadable.
    """
    clues = Clues()
    if not (parts.frames or parts.paths or parts.identifiers):
        return clues
    resolved = resolve_paths(conn, parts.paths[:MAX_PATHS]) if parts.paths else {}
    for frame in _ordered_frames(parts, tests_ok):
        path = resolved.get(frame.path)
        if path is None:
            continue
        entity_id = _frame_entity(conn, path, frame)
        if entity_id not in clues.frames:
            clues.frames.append(entity_id)
            clues.label(entity_id, describe_frame(frame))
        if path not in clues.files:
            clues.files.append(path)
    _refused_callees(conn, parts, clues)
    frame_paths = {f.path for f in parts.frames}
    for printed in parts.paths:
        path = resolved.get(printed)
        if path is None or printed in frame_paths:
            continue
        if path not in clues.paths:
            clues.paths.append(path)
            clues.label(path, f"path `{printed}`")
        if path not in clues.files:
            clues.files.append(path)
    names = parts.identifiers[:MAX_IDENTIFIERS]
    if names:
        rows = store.entities_with_names(conn, [n.rsplit(".", 1)[-1] for n in names])
        by_name: dict[str, list[tuple[str, str, str, str]]] = {}
        for row in rows:
            by_name.setdefault(row[2], []).append(row)
        scored: list[tuple[float, int, str, str]] = []
        for order, name in enumerate(names):
            found = _narrowed(name, by_name.get(name.rsplit(".", 1)[-1], []))
            if not found or len(found) > MAX_DEFINITIONS:
                continue
            # Fewer definitions = more specific; a qualified name more so; then order of appearance.
            specificity = 1.0 / len(found) + (0.5 if "." in name else 0.0)
            for row in found:
                scored.append((-specificity, order, row[0], name))
        for _s, _o, entity_id, name in sorted(scored):
            if entity_id not in clues.identifiers:
                clues.identifiers.append(entity_id)
                clues.label(entity_id, f"identifier `{name}`")
    return clues


def _narrowed(name: str, found: list[tuple[str, str, str, str]]) -> list[tuple[str, str, str, str]]:
    """The rows of ``found`` (definitions of ``name``'s last part: ``(id, path, name, qualname)``)
    that a dotted ``name`` agrees with: ``Table.read`` / ``astropy.table.Table.read`` keep the
    definitions whose qualified name or path has the qualifier; ``self.x`` keeps all; a
    qualifier that matches none leaves nothing unless only one definition exists."""
    if "." not in name:
        return found
    last = name.rsplit(".", 1)[-1]
    qualifier = name.rsplit(".", 1)[0].split(".")[-1]
    if qualifier in ("self", "cls", "this"):
        return found
    narrowed = [r for r in found if r[3].endswith(f"{qualifier}.{last}")
                or f"/{qualifier}." in "/" + r[1] or f"/{qualifier}/" in "/" + r[1]]
    return narrowed or ([] if len(found) > 1 else found)


# Python's own wording when a call does not fit the callee's signature. The error is raised
# before the callee's body runs, so the callee is in no frame of the traceback, yet its
# signature is what the report is about.
_REFUSED_CALL = re.compile(
    r"^TypeError: ((?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*)\(\) (?:got an unexpected keyword argument|"
    r"got multiple values for argument|missing \d+ required|takes (?:\d+|no|from \d+ to \d+) )")
MAX_REFUSED_DEFINITIONS = 2  # a refused callee defined in more places than this is not pinned down


def _refused_callees(conn: sqlite3.Connection, parts: PromptParts, clues: Clues) -> None:
    """Put the callee of each call-signature ``TypeError`` (``RST.__init__() got an unexpected
    keyword argument 'header_rows'``) first among ``clues.frames``, as the innermost frame the
    traceback could not print, when the index defines it in at most
    :data:`MAX_REFUSED_DEFINITIONS` places (after the qualifier narrows it, see :func:`_narrowed`).
    Its file goes first in ``clues.files``. A bare ``__init__()`` (Python before 3.10 printed
    no class) is defined everywhere and so pins nothing."""
    names = [m.group(1) for m in map(_REFUSED_CALL.match, parts.errors[:20]) if m]
    if not names:
        return
    rows = store.entities_with_names(conn, list({n.rsplit(".", 1)[-1] for n in names}))
    by_name: dict[str, list[tuple[str, str, str, str]]] = {}
    for row in rows:
        by_name.setdefault(row[2], []).append(row)
    pinned: list[tuple[str, str, str]] = []
    for name in names:
        found = _narrowed(name, by_name.get(name.rsplit(".", 1)[-1], []))
        if 0 < len(found) <= MAX_REFUSED_DEFINITIONS:
            pinned.extend((row[0], row[1], name) for row in found)
    for entity_id, path, name in reversed(pinned):
        if entity_id in clues.frames:
            clues.frames.remove(entity_id)
        clues.frames.insert(0, entity_id)
        clues.label(entity_id, f"callee refused in the error `{name}()`")
        if path in clues.files:
            clues.files.remove(path)
        clues.files.insert(0, path)


MAX_MODULE_FILES = 12  # module clues per prompt
_MODULE_WORD = re.compile(r"[A-Za-z][a-z0-9_]{3,}")
_SUFFIXES = ("", "s", "es", "d", "ed", "ing", "er", "ers")
MODULE_WORD_MAX_DF = 0.02  # a word in more than this share of entities is too common to name a module ...
MODULE_WORD_MIN_DF = 5  # ... but a small tree's words may always be in this many


def resolve_modules(conn: sqlite3.Connection, parts: PromptParts, prose: str, *, tests_ok: bool) -> Clues:
    """Files a prompt names as modules rather than as paths, best first (``paths`` of the
    returned :class:`Clues`, each labelled):

    * a dotted name of at least two parts in the prose (``sphinx.ext.autodoc``,
      ``astropy.units.format.cds``, a format name ``ascii.rst``; not in a code block, where a
      configuration's list of extensions names what is loaded) read as a module path —
      ``a/b.py`` or ``a/b/__init__.py``, matched at the deepest suffix that exists
      (:func:`resolve_paths`);
    * a word of the prose (``toctree``, ``mocked``) that is the file name of at most
      ``MAX_CANDIDATE_FILES`` indexed files, up to a plural or verb ending (``mock.py``), and
      is in at most ``MODULE_WORD_MAX_DF`` of the entities (``config``, ``types`` name nothing).

    Tests are left out unless the prompt is about tests. Raises sqlite3.Error when the index
    is unreadable."""
    from cogd.retrieve.lexical import document_frequencies  # lexical imports nothing from here

    clues = Clues()
    # Only names the prose spells: a pasted conf.py's extension list names what is loaded, not what is wrong.
    dotted = [i for i in parts.identifiers if "." in i and not i.startswith(("self.", "cls.")) and i in prose]
    dotted += [p for p in parts.paths if "/" not in p and "\\" not in p and "." in p and p in prose]
    printed: dict[str, str] = {}
    for name in dict.fromkeys(dotted):
        comps = [c for c in name.split(".") if c]
        if len(comps) < 2 or not all(c.isidentifier() for c in comps):
            continue
        printed.setdefault("/".join(comps) + ".py", name)
        printed.setdefault("/".join(comps) + "/__init__.py", name)
    resolved = resolve_paths(conn, list(printed)[: 2 * MAX_PATHS]) if printed else {}
    for candidate, path in resolved.items():
        # a package's __init__.py must match with its directory: "pkg/__init__.py" is not pkg.reader
        tail = "/".join(candidate.split("/")[-2:]) if candidate.endswith("/__init__.py") else candidate.rsplit("/", 1)[-1]
        if not ("/" + path).endswith("/" + tail):
            continue
        if len(path.split("/")) >= 2 and path not in clues.paths and (tests_ok or not _looks_like_test(path)):
            clues.paths.append(path)
            clues.label(path, f"module `{printed[candidate]}`")
    words = list(dict.fromkeys(w.lower() for w in _MODULE_WORD.findall(prose[:20_000])))[:200]
    if words:
        stems: dict[str, list[str]] = {}
        for (path,) in conn.execute("SELECT path FROM files WHERE status = 'ok'"):
            base = path.rsplit("/", 1)[-1]
            stem = base.split(".", 1)[0].lower()
            if len(stem) >= 4 and (tests_ok or not _looks_like_test(path)):
                stems.setdefault(stem, []).append(path)
        named: dict[str, list[str]] = {}
        for word in words:
            for suffix in _SUFFIXES:
                if suffix and not word.endswith(suffix):
                    continue
                stem = word[: len(word) - len(suffix)] if suffix else word
                if stem in stems and 0 < len(stems[stem]) <= MAX_CANDIDATE_FILES:
                    named.setdefault(word, stems[stem])
                    break
        if named:
            df, total = document_frequencies(conn, list(named))
            for word, paths in named.items():
                if df.get(word, 0) > max(MODULE_WORD_MAX_DF * total, MODULE_WORD_MIN_DF):
                    continue
                for path in paths:
                    if path not in clues.paths:
                        clues.paths.append(path)
                        clues.label(path, f"module word `{word}`")
    del clues.paths[MAX_MODULE_FILES:]
    return clues


def _looks_like_test(path: str) -> bool:
    base = path.rsplit("/", 1)[-1]
    return base.startswith("test_") or base.endswith("_test.py") or "/tests/" in "/" + path or "/test/" in "/" + path
