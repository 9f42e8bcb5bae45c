"""Turn one source file into code entities and ``contains`` edges.

Definitions come from each grammar's standard tags query (``@definition.*``
captures with their ``@name``); nesting, qualified names, spans, signatures and
docstrings are derived from the syntax tree. Functions defined inside another
function are part of that function's body, not entities of their own (this
matches how changes are attributed: ``path::Class.method`` is the finest unit).
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field

import tree_sitter
import xxhash

from cogd.index.languages import Grammar, grammar
from cogd.index.queries import run_query
from cogd.index.references import Reference, collect_references

# tags.scm capture → (kind, subkind); the capture names are listed in cogd.index.languages.
_DEFINITION_KINDS = {
    "definition.class": ("class", ""),
    "definition.interface": ("class", "interface"),
    "definition.enum": ("class", "enum"),
    "definition.object": ("class", "object"),
    "definition.type": ("class", "type"),
    "definition.function": ("function", ""),
    "definition.method": ("method", ""),
    "definition.macro": ("function", "macro"),
    "definition.module": ("module", ""),
    "definition.package": ("module", "package"),
    "definition.constant": ("constant", ""),
}
# A class-like node's own syntax decides its subkind over the capture name (tags
# files call Rust structs and enums classes, PHP traits interfaces).
_CLASS_SUBKINDS = {
    "struct_item": "struct", "struct_specifier": "struct", "struct_declaration": "struct", "struct_type": "struct",
    "interface_declaration": "interface", "interface_type": "interface",
    "enum_item": "enum", "enum_specifier": "enum", "enum_declaration": "enum",
    "trait_item": "trait", "trait_declaration": "trait",
    "union_item": "union", "union_specifier": "union",
    "record_declaration": "record",
    "object_declaration": "object", "companion_object": "object",
    "type_item": "type",
}
# Type declarations take the subkind of the type they declare (Go `type X struct`, C typedefs).
_TYPE_DECLARATIONS = {"type_spec", "type_definition"}
# Nodes that define something only with a body: without one they are forward
# declarations, uses (C `enum mode m;`) or imports (Rust `mod x;`).
_NEEDS_BODY = {"struct_specifier", "union_specifier", "enum_specifier", "class_specifier", "mod_item"}
# C-family nodes that hold a function declarator, and those of them without a
# body (prototypes, member declarations; also where C declares a union).
_DECLARATIONS = {"function_definition", "declaration", "field_declaration"}
_PROTOTYPES = {"declaration", "field_declaration"}
_CONTAINER_KINDS = {"class", "module"}
_CALLABLE_KINDS = {"function", "method"}
_LEAF_KINDS = _CALLABLE_KINDS | {"constant"}
_CONSTANT_NAME = re.compile(r"^_?[A-Z][A-Z0-9_]*$")  # what is defined inside these is part of their text
_COMMENTS = {"comment", "line_comment", "block_comment"}
# Wrappers whose span and comments belong to the definition they wrap.
_WRAPPERS = {"decorated_definition", "export_statement", "lexical_declaration", "variable_declaration",
             "expression_statement", "template_declaration", "type_definition"}
# Wrappers that may group several definitions (Go `const (...)`): they belong to a sole one only.
_GROUP_WRAPPERS = {"type_declaration", "const_declaration"}
# Siblings written just before a definition that belong to it (Rust attributes).
_PRELUDES = {"attribute_item"}
# Bodies of grammars that do not name the field (Kotlin).
_BODY_TYPES = {"class_body", "enum_class_body", "function_body"}

MAX_SIGNATURE_CHARS = 240  # a longer signature is cut, and ends with "…" (cut_signature)
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


def content_hash(data: bytes | memoryview) -> str:
    """xxh3-64 of ``data`` (bytes or a view of them) as 16 hex digits (the index's content hash)."""
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
    # Child by child (Node.named_children would make a node of every statement of the block).
    for i in range(body.named_child_count):
        child = body.named_child(i)
        if child.type == "comment":
            continue
        if child.type == "expression_statement" and child.named_child_count:
            first = child.named_child(0)
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


_COMMENT_MARKS = re.compile(r"^\s*(/\*[*!]?|\*/|\*|//+!?|#+)\s?")


def _clean_doc(text: str) -> str:
    lines = [_COMMENT_MARKS.sub("", line).rstrip() for line in text.replace("*/", "").splitlines()]
    while lines and not lines[0].strip():
        lines.pop(0)
    return "\n".join(line.strip() for line in lines).strip()[:MAX_DOC_CHARS]


def _leading_comments(node: tree_sitter.Node, src: bytes) -> str:
    """Comments directly above ``node`` (no blank line between), cleaned.

    A node that opens a block without delimiters (Ruby) takes the comments
    the grammar puts just before that block.
    """
    parts: list[str] = []
    row = node.start_point.row
    while node.prev_named_sibling is None and node.parent is not None and node.parent.start_byte == node.start_byte:
        node = node.parent
    sibling = node.prev_named_sibling
    while sibling is not None and sibling.type in _COMMENTS and sibling.end_point.row >= row - 1:
        before = sibling.prev_sibling
        if before is not None and before.type not in _COMMENTS and before.end_point.row == sibling.start_point.row:
            break  # a trailing comment of the code on its line
        parts.append(_text(src, sibling.start_byte, sibling.end_byte))
        row = sibling.start_point.row
        sibling = sibling.prev_named_sibling
    return _clean_doc("\n".join(reversed(parts)))


def _outer(node: tree_sitter.Node) -> tuple[tree_sitter.Node, tree_sitter.Node | None]:
    """The outermost wrapper (decorators, export, const) of a definition node, and the node's parent."""
    # Node.parent walks down from the root (linear in the depth): asked once per level.
    parent = first_parent = node.parent
    while parent is not None and (
        parent.type in _WRAPPERS
        or (parent.type in _GROUP_WRAPPERS
            and [c for c in parent.named_children if c.type not in _COMMENTS] == [node])
    ):
        node, parent = parent, parent.parent
    return node, first_parent


_PRELUDES_BY_LANGUAGE: dict[str, bool] = {}


def _has_preludes(gram: Grammar, language: str) -> bool:
    """Whether ``language``'s grammar (``gram``) has a node kind of :data:`_PRELUDES`: only then
    can a definition have one (asked once per language: reading a node's previous sibling walks
    its parent's children)."""
    found = _PRELUDES_BY_LANGUAGE.get(language)
    if found is None:
        found = _PRELUDES_BY_LANGUAGE[language] = any(
            gram.language.id_for_node_kind(kind, True) for kind in _PRELUDES)
    return found


def _start(node: tree_sitter.Node) -> tree_sitter.Node:
    """The first of the attribute siblings directly above ``node``, or ``node``."""
    sibling = node.prev_named_sibling
    while sibling is not None and sibling.type in _PRELUDES and sibling.end_point.row >= node.start_point.row - 1:
        node, sibling = sibling, sibling.prev_named_sibling
    return node


def _code_end(node: tree_sitter.Node) -> tree_sitter.Node:
    """The last token of ``node`` that is not a comment.

    tree-sitter-python puts comments that trail an indented block inside that
    block; they are not part of the definition (Python's ``ast`` agrees), so
    spans and hashed text end at the last code token. Children are read from
    the last one back (``Node.children`` would wrap every statement of a body
    at each level).
    """
    while True:
        i = node.child_count - 1
        child = node.child(i) if i >= 0 else None
        while child is not None and child.type == "comment":
            i -= 1
            child = node.child(i) if i >= 0 else None
        if child is None:  # a leaf, or only comments inside
            return node
        node = child


def _body_node(node: tree_sitter.Node, body: tree_sitter.Node | None) -> tree_sitter.Node | None:
    """The body of a definition ``node``; ``body``: its ``body`` field, as the caller read it."""
    if body is None:
        value = node.child_by_field_name("value") or node.child_by_field_name("right")
        if value is not None:
            body = value.child_by_field_name("body")
    if body is None:
        body = next((child for child in node.named_children if child.type in _BODY_TYPES), None)
    return body


def _signature(node: tree_sitter.Node, body: tree_sitter.Node | None, src: bytes,
               parent: tree_sitter.Node | None, body_field: bool) -> str:
    """The head of definition ``node`` (before its body), whitespace collapsed, cut to MAX_SIGNATURE_CHARS.

    ``body``: its body node (:func:`_body_node`); ``parent``: ``node.parent``; ``body_field``:
    whether ``body`` is the node's own ``body`` field (both already read by the caller: a
    parent is found by walking down from the root, linear in the depth).
    """
    start = node.start_byte
    if parent is not None and parent.type in ("lexical_declaration", "variable_declaration"):
        start = parent.start_byte  # keep the `const` of `const f = () => ...`
    end = node.end_byte
    for child in node.children:  # stop at the body or a comment before it
        if child.type == "comment" or (body is not None and child.start_byte >= body.start_byte):
            end = child.start_byte
            break
    if body is not None and not body_field:
        end = min(end, body.start_byte)  # arrow function held in a declarator
    text = " ".join(_text(src, start, end).split()).rstrip("{:= ").rstrip()
    return cut_signature(text)


# Characters that belong to the one before them: a cut between the two would part a letter from
# its accent or an emoji from its modifier. Combining marks (categories Mn, Mc, Me) and these:
# the zero width joiner, the variation selectors, the skin-tone modifiers.
_JOINING = re.compile("[\u200d\ufe00-\ufe0f\U0001f3fb-\U0001f3ff\U000e0100-\U000e01ef]")


def _joins_previous(char: str) -> bool:
    return unicodedata.category(char) in ("Mn", "Mc", "Me") or _JOINING.match(char) is not None


def cut_signature(text: str, limit: int = MAX_SIGNATURE_CHARS) -> str:
    """``text`` as it is when it has at most ``limit`` characters; else its head and ``"…"``,
    ``limit`` characters at most in all, so a cut signature says it was cut.

    The cut falls between whole characters as a reader sees them: never between a character and
    a combining mark, variation selector or skin-tone modifier after it, nor right after a zero
    width joiner; trailing spaces of the head go. ``limit``: at least 2.
    """
    if len(text) <= limit:
        return text
    end = limit - 1  # room for the ellipsis
    while end > 1 and (_joins_previous(text[end]) or text[end - 1] == "\u200d"):
        end -= 1
    return text[:end].rstrip() + "…"


@dataclass
class _Definition:
    node: tree_sitter.Node  # the definition node the tags query captured
    name: str
    kind: str
    subkind: str
    receiver: str = ""  # the type of a method defined outside its body (@receiver)


def _definition_node(node: tree_sitter.Node, kind: str) -> tree_sitter.Node | None:
    """The node a captured definition spans, or None when it defines nothing.

    C-family tags capture a function's declarator (its definition is the
    declaration around it), a declaration naming a union (the union is the
    definition), and struct/enum/class specifiers that may be mere uses.
    """
    if node.type == "function_declarator":
        while node.parent is not None and node.parent.type.endswith("_declarator"):
            node = node.parent
        node = node.parent
        return node if node is not None and node.type in _DECLARATIONS else None
    if kind == "class" and node.type in _PROTOTYPES:
        node = node.child_by_field_name("type") or node
    if node.type in _NEEDS_BODY and node.child_by_field_name("body") is None:
        return None
    if node.type in _TYPE_DECLARATIONS:
        declared = node.child_by_field_name("type")
        if (declared is not None and declared.type in _NEEDS_BODY
                and declared.child_by_field_name("name") and declared.child_by_field_name("body")):
            return None  # `typedef struct s {...} s_t;`: the struct is the entity, the typedef its wrapper
    return node


def _class_subkind(node: tree_sitter.Node, subkind: str) -> str:
    declared = node.child_by_field_name("type") if node.type in _TYPE_DECLARATIONS else None
    if declared is not None and declared.type in _NEEDS_BODY and declared.child_by_field_name("body") is None:
        declared = None  # `typedef struct s s_t;` is an alias, not a struct
    return _CLASS_SUBKINDS.get(node.type) or (declared is not None and _CLASS_SUBKINDS.get(declared.type)) or subkind


def _scope_key(definition: _Definition, src: bytes) -> tuple[str, str]:
    """(type, name) of a C-family function: its receiver or the class it is declared in."""
    scope = definition.receiver.rsplit(".", 1)[-1]
    parent = definition.node.parent
    while not scope and parent is not None:
        name = parent.child_by_field_name("name") if parent.type in _NEEDS_BODY else None
        if name is not None:
            scope = _text(src, name.start_byte, name.end_byte)
        parent = parent.parent
    return scope, definition.name


def _definitions(matches: list, src: bytes) -> list[_Definition]:
    found: dict[tuple[int, int], _Definition] = {}
    for _pattern, captures in matches:
        if len(captures) == 2 and "reference.call" in captures:
            continue  # a call (`@name` and `@reference.call`): most matches, no definition among them
        names = captures.get("name")
        if not names:
            continue
        defined = [(capture, nodes) for capture, nodes in captures.items() if capture in _DEFINITION_KINDS]
        if not defined:  # a call or other reference: most matches
            continue
        receivers = captures.get("receiver")  # most definitions have none: nothing to sort or join
        receiver = ".".join(_text(src, n.start_byte, n.end_byte)
                            for n in sorted(receivers, key=lambda n: n.start_byte)) if receivers else ""
        for capture, nodes in defined:
            kinds = _DEFINITION_KINDS[capture]
            for captured in nodes:
                node = _definition_node(captured, kinds[0])
                if node is None:
                    continue
                key = (node.start_byte, node.end_byte)
                known = found.get(key)
                if known is None:
                    name = _text(src, names[0].start_byte, names[0].end_byte)
                    found[key] = _Definition(node, name, *kinds, receiver)
                else:  # the same node from a more specific pattern adds to what is known
                    known.receiver = known.receiver or receiver
                    if kinds[1] and not known.subkind:
                        known.kind, known.subkind = kinds
    definitions = list(found.values())
    for definition in definitions:
        if definition.kind == "class":
            definition.subkind = _class_subkind(definition.node, definition.subkind)
    # A prototype yields to the definition of the same function in the file.
    prototypes = [d for d in definitions if d.kind in _CALLABLE_KINDS and d.node.type in _PROTOTYPES]
    if prototypes:
        defined = {_scope_key(d, src) for d in definitions
                   if d.kind in _CALLABLE_KINDS and d.node.type not in _PROTOTYPES}
        superseded = {id(d) for d in prototypes if _scope_key(d, src) in defined}
        definitions = [d for d in definitions if id(d) not in superseded]
    # Outer definitions first, so a stack walk sees parents before children.
    return sorted(definitions, key=lambda d: (d.node.start_byte, -d.node.end_byte))


def extract(path: str, source: bytes, language: str, tree: tree_sitter.Tree | None = None) -> ParsedFile:
    """Parse ``source`` (raw bytes of ``path``, a repo-relative POSIX path).

    Returns the file entity (id = ``path``), one entity per module, class,
    function, method and documented module-level constant (id =
    ``path::Qualified.name``; a repeated qualified name gets a ``~2``, ``~3``
    suffix in source order), and ``contains`` edges. A method defined outside
    its type (Go receiver, Rust ``impl``, C++ ``A::f``) is named
    ``Type.method`` and contained in that type when it is defined above it in
    the same file, else in the enclosing module or file. Raises
    KeyError for a language cogd does not know. Never raises on bad syntax:
    tree-sitter recovers and yields what it can. ``tree``: an already parsed
    tree of ``source`` (callers that bound the parse time parse themselves).
    """
    gram = grammar(language)
    if tree is None:  # callers that bound the parse time pass their own tree
        tree = gram.parser.parse(source)
    root = tree.root_node
    file_entity = Entity(
        id=path,
        kind="file",
        path=path,
        name=path.rsplit("/", 1)[-1],
        qualname=path,
        start_line=1,
        end_line=max(line_count(source), 1),
        language=language,
        doc=_file_doc(root, source, language),
        hash=content_hash(source),
    )
    parsed = ParsedFile(path, language, [file_entity])
    # One walk of the tree runs every query; the tags matches serve both definitions and call references.
    matches = gram.run_all(root)
    members, spans = _add_definitions(parsed, _definitions(matches[0], source), source, _has_preludes(gram, language))
    parsed.references = collect_references(tree, gram, spans, file_entity.id, source=source, matches=matches)
    _fill_summaries(parsed, members, spans, source)
    return parsed


def definitions(path: str, source: bytes, language: str) -> list[Entity]:
    """The definitions of ``source`` as :func:`extract` names them (same ids, spans and kinds),
    without the file entity, references or summaries: what history mining needs to map a
    commit's changed lines onto entities (:mod:`cogd.history.miner`). Raises KeyError for an
    unknown language, LanguageUnavailable when its grammar does not load."""
    gram = grammar(language)
    tree = gram.parser.parse(source)
    parsed = ParsedFile(path, language, [])
    _add_definitions(parsed, _definitions(run_query(gram.tags, tree.root_node), source), source,
                     _has_preludes(gram, language))
    return parsed.entities


def _file_doc(root: tree_sitter.Node, source: bytes, language: str) -> str:
    """The file's own documentation: a Python module docstring, else a header comment.

    A header comment is the file's first node (after PHP's opening tag and a
    ``#!`` line) when it is a comment followed by a blank line or nothing, so
    the doc comment of the first definition is not taken (Rust's ``//!`` and
    ``/*!`` always document the file).
    """
    if language == "python":
        return _python_docstring(root, source)
    first = root.named_children[0] if root.named_child_count else None
    while first is not None and (first.type == "php_tag" or source.startswith(b"#!", first.start_byte)):
        first = first.next_named_sibling
    second = first.next_named_sibling if first is not None else None
    is_header = first is not None and first.type in _COMMENTS and (
        second is None or second.start_point.row > first.end_point.row + 1
        or source.startswith((b"//!", b"/*!"), first.start_byte)
    )
    return _clean_doc(_text(source, first.start_byte, first.end_byte)) if is_header else ""


def _add_definitions(
    parsed: ParsedFile, definitions: list[_Definition], source: bytes, preludes: bool = True
) -> tuple[dict[str, list[str]], list[tuple[int, int, str]]]:
    """Append an entity and its ``contains`` edge to ``parsed`` for each definition that is one.

    ``definitions`` come outer first (see :func:`_definitions`), so a stack of
    the open containers and callables gives each one its parent. Returns the
    member names of each entity (for container summaries) and the byte spans
    ``(start, end, entity id)`` of the entities (for attributing references).
    ``preludes``: whether the language has a node kind of :data:`_PRELUDES`
    (:func:`_has_preludes`); without, no sibling is looked at for one.
    """
    path, language, file_id = parsed.path, parsed.language, parsed.path
    stack: list[tuple[Entity, int]] = []  # (entity, end_byte) of open containers/callables
    seen_ids: dict[str, int] = {}
    members: dict[str, list[str]] = {file_id: []}
    by_id: dict[str, Entity] = {}
    spans: list[tuple[int, int, str]] = []
    view = memoryview(source)
    for definition in definitions:
        node = definition.node
        while stack and node.start_byte >= stack[-1][1]:
            stack.pop()
        parent = stack[-1][0] if stack else None
        if parent is not None and parent.kind in _LEAF_KINDS:
            continue  # nested helper: part of its enclosing function's body
        outer, node_parent = _outer(node)
        start = _start(outer) if preludes else outer
        if definition.kind == "constant":
            doc = _constant_doc(definition, parent, start, source, language)
            if doc is None:
                continue
        kind, parent, qualname = _place(definition, parent, path, by_id)
        body_field = node.child_by_field_name("body")
        body = _body_node(node, body_field)
        if kind != "constant":  # a constant's doc was read above
            doc = _python_docstring(body, source) if language == "python" else _leading_comments(start, source)
        entity_id = f"{path}::{qualname}"
        count = seen_ids.get(entity_id, 0) + 1
        seen_ids[entity_id] = count
        if count > 1:
            entity_id = f"{entity_id}~{count}"
        last = _code_end(node)
        text_start, text_end = start.start_byte, last.end_byte
        # Hashed through a view: a copy of a class's text per entity (every method's again) cost
        # as much as the hash; the body keeps only its head.
        entity = Entity(
            id=entity_id, kind=kind, subkind=definition.subkind, path=path, name=definition.name,
            qualname=qualname, start_line=start.start_point.row + 1, end_line=last.end_point.row + 1,
            language=language, signature=_signature(node, body, source, node_parent, body_field is not None), doc=doc,
            hash=content_hash(view[text_start:text_end]), parent_id=parent.id if parent is not None else file_id,
        )
        if kind in _CALLABLE_KINDS:
            entity.body = source[text_start:min(text_end, text_start + MAX_BODY_CHARS * 2)].decode(
                "utf-8", errors="replace")[:MAX_BODY_CHARS]
        parsed.entities.append(entity)
        by_id[entity_id] = entity
        parsed.edges.append(Edge(entity.parent_id, entity_id, "contains"))
        members.setdefault(entity.parent_id, []).append(definition.name)
        members.setdefault(entity_id, [])
        stack.append((entity, node.end_byte))
        spans.append((outer.start_byte, node.end_byte, entity_id))
    return members, spans


def _constant_doc(definition: _Definition, parent: Entity | None, start: tree_sitter.Node, source: bytes,
                  language: str) -> str | None:
    """The doc of a constant that is an entity, or None for one that is not.

    Only documented module-level constants are entities; Python has no
    ``const``, so there a constant is, by convention, an UPPER_CASE name.
    """
    doc = _leading_comments(start, source)
    if not doc or (parent is not None and parent.kind != "module"):
        return None
    if language == "python" and not _CONSTANT_NAME.match(definition.name):
        return None
    return doc


def _place(definition: _Definition, parent: Entity | None, path: str,
           by_id: dict[str, Entity]) -> tuple[str, Entity | None, str]:
    """(kind, parent, qualified name) of a definition whose enclosing entity is ``parent``.

    A definition with a receiver outside its type (Go receiver, Rust impl,
    C++ ``A::f``) is the method ``Type.method``, contained in the type when the
    type is defined above it in this file (``by_id``: the entities so far). A
    function in a class is a method; a "method" outside a class (an
    object-literal method at top level, a Rust fn in a mod) is a function.
    """
    kind = definition.kind
    prefix = f"{parent.qualname}." if parent is not None else ""
    if definition.receiver and (parent is None or parent.kind == "module"):
        kind = "method"
        owner = by_id.get(f"{path}::{prefix}{definition.receiver}")
        prefix += f"{definition.receiver}."
        if owner is not None and owner.kind == "class":
            parent = owner
    elif kind == "function" and parent is not None and parent.kind == "class":
        kind = "method"
    elif kind == "method" and (parent is None or parent.kind != "class"):
        kind = "function"
    return kind, parent, prefix + definition.name


def _fill_summaries(parsed: ParsedFile, members: dict[str, list[str]], spans: list[tuple[int, int, str]],
                    source: bytes) -> None:
    """Set the searchable text of containers and of the file.

    Containers are searched by their header, docstring and member names, not
    by a copy of every member's body (members are entities of their own). A
    file is also found by what it says outside its definitions: imports,
    module-level settings (``__version__ = "7.1"``), exports.
    """
    for entity in parsed.entities:
        if entity.kind not in _CALLABLE_KINDS:
            names = " ".join(members.get(entity.id, []))
            entity.body = f"{entity.signature}\n{entity.doc}\n{names}".strip()[:MAX_BODY_CHARS]
    file_entity = parsed.entities[0]
    file_entity.body = f"{file_entity.body}\n{_module_level_text(source, spans)}".strip()[:MAX_BODY_CHARS]


MODULE_TEXT_CHARS = 2000


def _module_level_text(source: bytes, spans: list[tuple[int, int, str]]) -> str:
    """Up to MODULE_TEXT_CHARS of the file's text that lies outside every entity."""
    parts, position, budget = [], 0, MODULE_TEXT_CHARS
    for start, end, _entity_id in sorted(spans):
        if start > position:
            chunk = source[position:start][:budget * 2].decode("utf-8", errors="replace").strip()
            if chunk:
                parts.append(chunk[:budget])
                budget -= len(parts[-1])
        position = max(position, end)
        if budget <= 0:
            break
    if budget > 0 and position < len(source):
        parts.append(source[position:position + budget * 2].decode("utf-8", errors="replace").strip()[:budget])
    return "\n".join(p for p in parts if p)
