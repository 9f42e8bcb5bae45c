"""Raw references found in one parsed file: calls, imports, inherits.

These are *unresolved*: a call names a callee, an import names a module, a
base names a class. :mod:`cogd.index.resolve` turns them into edges between
entities once the whole repository's names are known, and re-resolves them
when other files change, without re-parsing.

Calls come from each grammar's tags query (``@reference.call`` with ``@name``,
plus ``new X()`` captured as ``@reference.class``); imports and bases come from
cogd's own per-language queries in :mod:`cogd.index.languages`.
"""

from __future__ import annotations

import bisect
import functools
import re
from typing import NamedTuple

import tree_sitter

from cogd.index.languages import Grammar
from cogd.index.queries import run_query

MAX_REFERENCES = 5000  # per file: generated code can hold hundreds of thousands of calls
MAX_TEXT = 200

_GENERICS = re.compile(r"<.*>|\(.*\)|\[.*\]", re.S)
_LAST_PART = re.compile(r"[\w$]+$")


class Reference(NamedTuple):
    """One unresolved reference. ``line`` is 1-based. A named tuple in the column order of the
    index's ``refs`` rows (it is hashed and compared as that tuple: hundreds of thousands are
    made per full index, so no per-instance ``__init__``).

    - ``calls``: ``name`` is the callee's simple name, ``qualifier`` the
      receiver text before it (``self``, ``os.path``, ``''``).
    - ``imports``: ``name`` is the module as written (``.utils``, ``./m``,
      ``fmt``), ``qualifier`` the imported symbol if any, ``alias`` the local
      name it is bound to if any.
    - ``inherits``: ``name`` is the base's simple name, ``qualifier`` the base
      as written without type arguments (``abc.ABC``).
    """

    src: str
    kind: str
    name: str
    qualifier: str = ""
    alias: str = ""
    line: int = 0


class _Enclosing:
    """Maps a byte offset to the innermost entity whose span holds it."""

    def __init__(self, spans: list[tuple[int, int, str]], file_id: str):
        self.spans = sorted(spans)
        self.starts = [s[0] for s in self.spans]
        self.file_id = file_id

    def __call__(self, offset: int) -> str:
        i = bisect.bisect_right(self.starts, offset) - 1
        # Spans nest, so scanning back from the last span starting before the
        # offset, the first one that still covers it is the innermost.
        while i >= 0:
            start, end, entity_id = self.spans[i]
            if start <= offset < end:
                return entity_id
            i -= 1
        return self.file_id


def _text(node: tree_sitter.Node, source: bytes = b"") -> str:
    """The text of ``node`` (at most MAX_TEXT characters): from ``source``, the bytes its tree was
    parsed from, by the node's byte offsets when given (what ``Node.text`` returns, without asking
    the tree: a tree parsed from a read callback would call it again), else ``Node.text``."""
    raw = source[node.start_byte:node.end_byte] if source else node.text or b""
    return raw.decode("utf-8", errors="replace")[:MAX_TEXT]


# The receiver chain right before a callee's name: `self.`, `os.path.`, `a->`, `A::`, `x?.`, `f().`.
_RECEIVER = re.compile(r"(?:[\w$]+(?:\(\))?(?:\?\.|\.|->|::))+")
_RECEIVER_CHARS = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_$.?->:()"
_NOT_RECEIVER = {"new", "await", "yield", "return"}
_RECEIVER_SCAN = 120  # bytes before the name looked at
_RECEIVER_ENDS = frozenset(b".>:")  # the last byte of every receiver chain: `.`, `?.`, `->`, `::`


def _receiver(name: tree_sitter.Node, source: bytes) -> str:
    """The text before the callee's name: ``self`` for ``self.f()``, ``''`` for ``f()``.

    The run of receiver characters (all ASCII) that ends right before the name, within
    ``_RECEIVER_SCAN`` bytes, found by one ``bytes.rstrip`` over those bytes: it costs the same
    for any syntax (``a.f()``, ``a->f()``, ``A::f()``, Ruby's ``a.f``) and never walks the tree
    (``Node.parent`` is linear in the depth; an end-anchored regex search would be quadratic).
    No byte of a multi-byte UTF-8 character is ASCII, so the run is the same in the bytes as in
    their decoded text.
    """
    return _receiver_before(source, name.start_byte)


def _receiver_before(source: bytes, end: int) -> str:
    """:func:`_receiver` for a name starting at byte ``end`` of ``source``."""
    before = source[max(0, end - _RECEIVER_SCAN) : end]
    run = len(before) - len(before.rstrip(_RECEIVER_CHARS))
    return _receiver_of(before[len(before) - run:].decode("ascii")) if run else ""


@functools.lru_cache(maxsize=4096)
def _receiver_of(tail: str) -> str:
    """The receiver a run of receiver characters ends with (cached: ``self.``, ``os.path.`` recur)."""
    # The chain must end right before the name; keep its longest well-formed suffix.
    for offset in range(len(tail)):
        if _RECEIVER.fullmatch(tail, offset):
            text = tail[offset:].rstrip(".:->?")
            return "" if text in _NOT_RECEIVER else text
    return ""


def _strip_quotes(text: str) -> str:
    return text.strip().strip("\"'`<>")


def collect_references(
    tree: tree_sitter.Tree,
    gram: Grammar,
    spans: list[tuple[int, int, str]],
    file_id: str,
    tag_matches: list | None = None,
    source: bytes = b"",
    matches: tuple[list, list | None, list | None] | None = None,
) -> list[Reference]:
    """Every call, import and base-class reference in ``tree``.

    ``spans``: (start_byte, end_byte, entity_id) of the file's entities, used
    to attribute each reference to the innermost entity around it (imports
    always belong to the file). ``tag_matches``: the tags query's matches if
    the caller already ran it (saves a second pass); ``matches``: those of
    every query (:meth:`Grammar.run_all`), when the caller ran them. Returns at most ``MAX_REFERENCES`` references,
    de-duplicated, in source order. Never raises on odd syntax trees.
    """
    enclosing = _Enclosing(spans, file_id)
    found: dict[Reference, None] = {}  # an ordered set: source order, each reference once
    root = tree.root_node
    if matches is not None:
        tag_matches, import_matches, inherit_matches = matches
    else:
        if tag_matches is None:
            tag_matches = run_query(gram.tags, root)
        import_matches = inherit_matches = None
    if _add_calls(found, tag_matches, enclosing, source):
        return list(found)
    if gram.imports is not None:
        _add_imports(found, import_matches if matches is not None else run_query(gram.imports, root), file_id,
                     source)
    if gram.inherits is not None:
        _add_bases(found, inherit_matches if matches is not None else run_query(gram.inherits, root), enclosing,
                   spans, file_id, source)
    return list(found)[:MAX_REFERENCES]


def _add_calls(found: dict[Reference, None], tag_matches: list, enclosing: _Enclosing, source: bytes) -> bool:
    """Add the calls of the tags query's matches to ``found``; True when ``MAX_REFERENCES`` was reached.

    One call reference per (caller, callee, receiver): a function calling
    ``log.info`` forty times needs one edge, not forty.
    """
    seen_calls: set[tuple[str, str, str]] = set()
    add_seen = seen_calls.add
    # (span index, name bytes, receiver) seen: a repeated call is dropped before its name is decoded
    seen_raw: set[tuple[int, bytes, str]] = set()
    add_raw = seen_raw.add
    spans, starts, file_id = enclosing.spans, enclosing.starts, enclosing.file_id
    receiver_chars, receiver_of, bisect_right = _RECEIVER_CHARS, _receiver_of, bisect.bisect_right
    for _pattern, captures in tag_matches:
        if not captures.get("reference.call"):
            classes = captures.get("reference.class")
            if not classes or not any(n.type == "new_expression" for n in classes):
                continue
        names = captures.get("name")
        if not names:
            continue
        name_node = names[0]
        at = name_node.start_byte
        # enclosing(at), inlined: the innermost span holding the name (spans nest)
        i = bisect_right(starts, at) - 1
        while i >= 0 and not at < spans[i][1]:
            i -= 1
        receiver = ""
        # _receiver_before(source, at), inlined. A receiver chain ends in `.`, `->` or `::`
        # (:data:`_RECEIVER`): when the byte before the name is none of these there is none,
        # whatever precedes it (most calls are bare names: no slice, no strip).
        if source and at and source[at - 1] in _RECEIVER_ENDS:
            before = source[max(0, at - _RECEIVER_SCAN) : at]
            run = len(before) - len(before.rstrip(receiver_chars))
            receiver = receiver_of(before[len(before) - run:].decode("ascii"))
        if source:
            # The source's own bytes: what Node.text returns, without a call into the tree.
            raw_name = source[at:name_node.end_byte]
            raw = (i, raw_name, receiver)
            if raw in seen_raw:  # the same bytes decode to the same name: seen_calls has it
                continue
            add_raw(raw)
            name = raw_name.decode("utf-8", errors="replace")[:MAX_TEXT]
        else:
            name = _text(name_node)
        if not name:
            continue
        src = spans[i][2] if i >= 0 else file_id
        key = (src, name, receiver)
        if key in seen_calls:
            continue
        add_seen(key)
        found[Reference(src, "calls", name, receiver, "", name_node.start_point.row + 1)] = None
        if len(found) >= MAX_REFERENCES:
            return True
    return False


def _add_imports(found: dict[Reference, None], matches: list, file_id: str, source: bytes = b"") -> None:
    """Add the file's imports (matches of the grammar's imports query) to ``found``.

    The same import can match a general and a more specific pattern: one is
    kept per (module, symbol, line), with the alias when one knows it, and a
    bare module reference is dropped where the same line imports symbols of it.
    """
    imports: dict[tuple[str, str, int], str] = {}
    for _pattern, captures in matches:
        modules = captures.get("module")
        if not modules:
            continue
        module = _strip_quotes(_text(modules[0], source))
        symbol = _text(captures["name"][0], source) if captures.get("name") else ""
        alias = _text(captures["alias"][0], source) if captures.get("alias") else ""
        line = (captures.get("import") or modules)[0].start_point.row + 1
        key = (module, symbol, line)
        imports[key] = imports.get(key) or alias
    with_symbols = {(module, line) for module, symbol, line in imports if symbol}
    for (module, symbol, line), alias in imports.items():
        if symbol or alias or (module, line) not in with_symbols:
            found[Reference(file_id, "imports", module, symbol, alias, line)] = None


def _add_bases(found: dict[Reference, None], matches: list, enclosing: _Enclosing,
               spans: list[tuple[int, int, str]], file_id: str, source: bytes = b"") -> None:
    """Add base classes and implemented traits (matches of the grammar's inherits query) to ``found``.

    A base belongs to the class around it, except that Rust's ``impl Trait
    for Type`` names the implementing type in ``@type``: the base then belongs
    to that type when it is an entity of this file.
    """
    entity_ids = {entity_id for _s, _e, entity_id in spans}
    for _pattern, captures in matches:
        owner = None
        if captures.get("type"):
            type_name = _LAST_PART.search(_GENERICS.sub("", _text(captures["type"][0], source)).strip() or "-")
            candidate = f"{file_id}::{type_name.group(0)}" if type_name else ""
            owner = candidate if candidate in entity_ids else None
        for node in captures.get("base", []):
            written = _GENERICS.sub("", " ".join(_text(node, source).split())).strip()
            match = _LAST_PART.search(written)
            if not match:
                continue
            src = owner or enclosing(node.start_byte)
            found[Reference(src, "inherits", match.group(0), written, "", node.start_point.row + 1)] = None
