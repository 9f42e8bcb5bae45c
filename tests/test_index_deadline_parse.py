"""The deadline-bound parse of large files (cogd.index.indexer.parse_with_deadline): the tree it
keeps, the rows it gives, and which languages' queries may read node text. Real tree-sitter."""

from __future__ import annotations

import dataclasses

import pytest

from cogd.index import languages
from cogd.index.extract import _has_preludes, extract
from cogd.index.indexer import GUARDED_PARSE_BYTES, ParseLimits, parse_file, parse_with_deadline
from cogd.index.languages import grammar, query_reads_text


class CountingParser:
    """A real parser that counts its parses (``parse_with_deadline`` takes any parser)."""

    def __init__(self, parser):
        self.parser, self.parses = parser, 0

    def parse(self, *args, **kwargs):
        self.parses += 1
        return self.parser.parse(*args, **kwargs)

    def reset(self):
        self.parser.reset()


def _python_source(min_bytes: int) -> bytes:
    """A Python module over ``min_bytes``: classes with bases, imports, calls, docstrings."""
    parts = ['"""A large module."""\n\nimport os.path\nfrom collections import OrderedDict as OD\n\n']
    n = 0
    while sum(map(len, parts)) <= min_bytes:
        parts.append(f'class Shape{n}(OD, os.PathLike):\n    """Shape number {n}."""\n\n'
                     f'    def area(self, k):\n        return os.path.join(str(k), helper{n}(k))\n\n\n'
                     f'def helper{n}(value):\n    """Help {n}."""\n    return Shape{n}().area(value)\n\n\n')
        n += 1
    return "".join(parts).encode()


def _javascript_source(min_bytes: int) -> bytes:
    """A JavaScript module over ``min_bytes`` whose imports only a text predicate finds (``require``)."""
    parts = ['const fs = require("fs");\n']
    n = 0
    while sum(map(len, parts)) <= min_bytes:
        parts.append(f'const m{n} = require("./mod{n}");\nclass Box{n} extends Base {{\n'
                     f'  open() {{ return fs.readFileSync(m{n}.path); }}\n}}\n')
        n += 1
    return "".join(parts).encode()


def _rows(parsed):
    return ([dataclasses.astuple(e) for e in parsed.entities], [dataclasses.astuple(e) for e in parsed.edges],
            list(parsed.references))


def test_only_a_query_with_a_predicate_reads_node_text():
    assert not query_reads_text(["(call function: (identifier) @name) @reference.call", ""])
    assert query_reads_text(['((identifier) @f (#eq? @f "require"))'])
    assert not grammar("python").reads_text  # tags, imports and inherits: no predicate
    assert grammar("javascript").reads_text  # its imports query matches `require` by text


@pytest.mark.parametrize(("language", "reads_text", "parses"), [("python", False, 1), ("javascript", True, 2)])
def test_a_large_file_is_parsed_once_unless_its_queries_read_text(language, reads_text, parses):
    source = _python_source(GUARDED_PARSE_BYTES) if language == "python" else _javascript_source(GUARDED_PARSE_BYTES)
    gram = grammar(language)
    assert gram.reads_text is reads_text
    counting = CountingParser(gram.parser)
    tree = parse_with_deadline(counting, source, 30.0, gram.reads_text)
    assert counting.parses == parses
    plain = gram.parser.parse(source)
    assert str(tree.root_node) == str(plain.root_node)  # the same syntax tree either way
    path = f"big.{'py' if language == 'python' else 'js'}"
    assert _rows(extract(path, source, language, tree=tree)) == _rows(extract(path, source, language, tree=plain))


@pytest.mark.parametrize("language", ["python", "javascript"])
def test_the_rows_of_a_large_file_do_not_depend_on_the_deadline(language):
    source = _python_source(GUARDED_PARSE_BYTES) if language == "python" else _javascript_source(GUARDED_PARSE_BYTES)
    assert len(source) > GUARDED_PARSE_BYTES
    path = f"big.{'py' if language == 'python' else 'js'}"
    bounded, status = parse_file(path, source, ParseLimits(parse_timeout_ms=30_000))
    unbounded, status_unbounded = parse_file(path, source, ParseLimits(parse_timeout_ms=0))
    assert status == status_unbounded == "ok"
    assert _rows(bounded) == _rows(unbounded)
    kinds = {ref.kind for ref in bounded.references}
    assert kinds == {"calls", "imports", "inherits"}  # text read from the bytes: imports and bases too
    imports = {ref.name for ref in bounded.references if ref.kind == "imports"}
    assert ("fs" in imports and "./mod0" in imports) if language == "javascript" else \
        imports == {"os.path", "collections"}


def test_preludes_are_looked_for_only_where_the_grammar_has_them():
    assert _has_preludes(grammar("rust"), "rust")
    assert not _has_preludes(grammar("python"), "python")
    source = b"/// A point.\n#[derive(Debug)]\npub struct Point { x: i32 }\n"
    point = next(e for e in extract("p.rs", source, "rust").entities if e.name == "Point")
    assert (point.start_line, point.doc) == (2, "A point.")  # from its attribute, with the comment above it


def test_the_shipped_queries_of_every_language_load_with_a_reads_text_answer():
    for name in languages.LANGUAGES:
        state = languages.check(name)
        if state.problem is None:
            assert isinstance(state.reads_text, bool)
