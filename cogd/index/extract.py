"""Turn one source file into code entities and ``contains`` edges.

Definitions come from each grammar's standard tags query (``@definition.*``
captures with their ``@name``); nesting, qualified names, spans, signatures and
docstrings are derived from the syntax tree. Functions defined inside another
function are part of that function's body, not entities of their own (this
matches how changes are attributed: ``path::Class.method`` is the finest unit).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import tree_sitter
import xxhash

from cogd.index.languages import grammar
from cogd.index.references import Reference, collect_references

# tags.scm capture → (kind, subkind)
_DEFINITION_KINDS = {
    "definition.class": ("class", ""),
    "definition.interface": ("class", "interface"),
    "definition.function": ("function", ""),
    "definition.method": ("method", ""),
    "definition.module": ("module", ""),
}
_CONTAINER_KINDS = {"class", "module"}
_CALLABLE_KINDS = {"function", "method"}
# Wrappers whose span and comments belong to the definition they wrap.
_WRAPPERS = {"decorated_definition", "export_statement", "lexical_declaration", "variable_declaration"}

MAX_SIGNATURE_CHARS = 240
MAX_DOC_CHARS = 2000
MAX_BODY_CHARS = 16_000  # text kept for FTS and excerpts of one entity


@dataclass
class Entity:
    """One code entity. Lines are 1-based and inclusive; ``hash`` is xxh3-64 hex."""

    id: str
    kind: str
    path: str
    name: str
    qualname: str
    start_line: int
    end_line: int
    language: str
    signature: str = ""
    doc: str = ""
    hash: str = ""
    parent_id: str | None = None
    subkind: str = ""
    body: str = ""  # searchable text: source for callables, a summary for containers


@dataclass
class Edge:
    src: str
    dst: str
    kind: str


@dataclass
class ParsedFile:
    path: str
    language: str
    entities: list[Entity] = field(default_factory=list)
    edges: list[Edge] = field(default_factory=list)
    references: list[Reference] = field(default_factory=list)  # unresolved calls, imports, bases


def content_hash(data: bytes) -> str:
    """xxh3-64 of ``data`` as 16 hex digits (the index's content hash)."""
    return xxhash.xxh3_64_hexdigest(data)


def line_count(data: bytes) -> int:
    """Lines in ``data``; a last line without a newline still counts."""
    return data.count(b"\n") + (0 if data.endswith(b"\n") or not data else 1)


def _text(src: bytes, start: int, end: int) -> str:
    return src[start:end].decode("utf-8", errors="replace")


_STRING_PREFIX = re.compile(r"^[rRbBuUfF]*('''|\"\"\"|'|\")")


def _python_docstring(body: tree_sitter.Node | None, src: bytes) -> str:
    """The docstring of a Python block (module or def body), cleaned, or ''."""
    if body is None:
        return ""
    for child in body.named_children:
        if child.type == "comment":
            continue
        if child.type == "expression_statement" and child.named_child_count:
            first = child.named_children[0]
            if first.type == "string":
                raw = _text(src, first.start_byte, first.end_byte)
                match = _STRING_PREFIX.match(raw)
                if match:
                    quote = match.group(1)
                    raw = raw[match.end():]
                    if raw.endswith(quote):
                        raw = raw[: -len(quote)]
                return _clean_doc(raw)
        return ""
    return ""


_COMMENT_MARKS = re.compile(r"^\s*(/\*\*?|\*/|\*|//+|#+)\s?")


def _clean_doc(text: str) -> str:
    lines = [_COMMENT_MARKS.sub("", line).rstrip() for line in text.replace("*/", "").splitlines()]
    while lines and not lines[0].strip():
        lines.pop(0)
    return "\n".join(line.strip() for line in lines).strip()[:MAX_DOC_CHARS]


def _leading_comments(node: tree_sitter.Node, src: bytes) -> str:
    """Comments directly above ``node`` (no blank line between), cleaned."""
    parts: list[str] = []
    row = node.start_point.row
    sibling = node.prev_named_sibling
    while sibling is not None and sibling.type == "comment" and sibling.end_point.row >= row - 1:
        parts.append(_text(src, sibling.start_byte, sibling.end_byte))
        row = sibling.start_point.row
        sibling = sibling.prev_named_sibling
    return _clean_doc("\n".join(reversed(parts)))


def _outer(node: tree_sitter.Node) -> tree_sitter.Node:
    """The outermost wrapper (decorators, export, const) of a definition node."""
    while node.parent is not None and node.parent.type in _WRAPPERS:
        node = node.parent
    return node


def _code_end(node: tree_sitter.Node) -> tree_sitter.Node:
    """The last token of ``node`` that is not a comment.

    tree-sitter-python puts comments that trail an indented block inside that
    block; they are not part of the definition (Python's ``ast`` agrees), so
    spans and hashed text end at the last code token.
    """
    while node.child_count:
        code = [child for child in node.children if child.type != "comment"]
        if not code:
            break
        node = code[-1]
    return node


def _body_node(node: tree_sitter.Node) -> tree_sitter.Node | None:
    body = node.child_by_field_name("body")
    if body is None:
        value = node.child_by_field_name("value") or node.child_by_field_name("right")
        if value is not None:
            body = value.child_by_field_name("body")
    return body


def _signature(node: tree_sitter.Node, body: tree_sitter.Node | None, src: bytes) -> str:
    start = node.start_byte
    if node.parent is not None and node.parent.type in ("lexical_declaration", "variable_declaration"):
        start = node.parent.start_byte  # keep the `const` of `const f = () => ...`
    end = node.end_byte
    for child in node.children:  # stop at the body or a comment before it
        if child.type == "comment" or (body is not None and child.start_byte >= body.start_byte):
            end = child.start_byte
            break
    if body is not None and node.child_by_field_name("body") is None:
        end = min(end, body.start_byte)  # arrow function held in a declarator
    text = " ".join(_text(src, start, end).split()).rstrip("{:= ").rstrip()
    return text[:MAX_SIGNATURE_CHARS]


@dataclass
class _Definition:
    node: tree_sitter.Node  # the definition node the tags query captured
    name: str
    kind: str
    subkind: str


def _definitions(matches: list, src: bytes) -> list[_Definition]:
    found: dict[tuple[int, int], _Definition] = {}
    for _pattern, captures in matches:
        names = captures.get("name")
        if not names:
            continue
        for capture, nodes in captures.items():
            kinds = _DEFINITION_KINDS.get(capture)
            if kinds is None:
                continue
            for node in nodes:
                key = (node.start_byte, node.end_byte)
                if key not in found:
                    name = _text(src, names[0].start_byte, names[0].end_byte)
                    found[key] = _Definition(node, name, *kinds)
    # Outer definitions first, so a stack walk sees parents before children.
    return sorted(found.values(), key=lambda d: (d.node.start_byte, -d.node.end_byte))


def extract(path: str, source: bytes, language: str) -> ParsedFile:
    """Parse ``source`` (raw bytes of ``path``, a repo-relative POSIX path).

    Returns the file entity (id = ``path``), one entity per class, function and
    method (id = ``path::Qualified.name``; a repeated qualified name gets a
    ``~2``, ``~3`` suffix in source order), and ``contains`` edges. Raises
    KeyError for a language cogd does not know. Never raises on bad syntax:
    tree-sitter recovers and yields what it can.
    """
    gram = grammar(language)
    tree = gram.parser.parse(source)
    root = tree.root_node
    if language == "python":
        file_doc = _python_docstring(root, source)
    else:
        first = root.named_children[0] if root.named_child_count else None
        second = first.next_named_sibling if first is not None else None
        # A header comment, not the doc comment of the first definition.
        is_header = first is not None and first.type == "comment" and (
            second is None or second.start_point.row > first.end_point.row + 1
        )
        file_doc = _clean_doc(_text(source, first.start_byte, first.end_byte)) if is_header else ""
    file_entity = Entity(
        id=path,
        kind="file",
        path=path,
        name=path.rsplit("/", 1)[-1],
        qualname=path,
        start_line=1,
        end_line=max(line_count(source), 1),
        language=language,
        doc=file_doc,
        hash=content_hash(source),
    )
    parsed = ParsedFile(path, language, [file_entity])
    stack: list[tuple[Entity, int]] = []  # (entity, end_byte) of open containers/callables
    seen_ids: dict[str, int] = {}
    members: dict[str, list[str]] = {file_entity.id: []}
    spans: list[tuple[int, int, str]] = []  # byte spans, for attributing references

    # One pass of the tags query serves both definitions and call references.
    tag_matches = tree_sitter.QueryCursor(gram.tags).matches(root)
    for definition in _definitions(tag_matches, source):
        node = definition.node
        while stack and node.start_byte >= stack[-1][1]:
            stack.pop()
        parent = stack[-1][0] if stack else None
        if parent is not None and parent.kind in _CALLABLE_KINDS:
            continue  # nested helper: part of its enclosing function's body
        kind = definition.kind
        if kind == "function" and parent is not None and parent.kind == "class":
            kind = "method"
        elif kind == "method" and parent is None:
            kind = "function"  # e.g. an object-literal method at top level
        qualname = f"{parent.qualname}.{definition.name}" if parent is not None else definition.name
        entity_id = f"{path}::{qualname}"
        count = seen_ids.get(entity_id, 0) + 1
        seen_ids[entity_id] = count
        if count > 1:
            entity_id = f"{entity_id}~{count}"
        outer = _outer(node)
        body = _body_node(node)
        if language == "python":
            doc = _python_docstring(body, source)
        else:
            doc = _leading_comments(outer, source)
        last = _code_end(node)
        text_bytes = source[outer.start_byte : last.end_byte]
        entity = Entity(
            id=entity_id,
            kind=kind,
            subkind=definition.subkind,
            path=path,
            name=definition.name,
            qualname=qualname,
            start_line=outer.start_point.row + 1,
            end_line=last.end_point.row + 1,
            language=language,
            signature=_signature(node, body, source),
            doc=doc,
            hash=content_hash(text_bytes),
            parent_id=parent.id if parent is not None else file_entity.id,
        )
        if kind in _CALLABLE_KINDS:
            entity.body = text_bytes[:MAX_BODY_CHARS * 2].decode("utf-8", errors="replace")[:MAX_BODY_CHARS]
        parsed.entities.append(entity)
        parsed.edges.append(Edge(entity.parent_id or file_entity.id, entity.id, "contains"))
        members.setdefault(entity.parent_id or file_entity.id, []).append(definition.name)
        members.setdefault(entity.id, [])
        stack.append((entity, node.end_byte))
        spans.append((outer.start_byte, node.end_byte, entity.id))

    parsed.references = collect_references(tree, gram, spans, file_entity.id, tag_matches)

    # Containers are searched by their header, docstring and member names, not
    # by a copy of every member's body (members are entities of their own).
    for entity in parsed.entities:
        if entity.kind not in _CALLABLE_KINDS:
            names = " ".join(members.get(entity.id, []))
            entity.body = f"{entity.signature}\n{entity.doc}\n{names}".strip()[:MAX_BODY_CHARS]
    return parsed
