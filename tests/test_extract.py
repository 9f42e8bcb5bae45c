"""Tests for cogd.index.extract and cogd.index.languages: real tree-sitter, exact entities."""

from __future__ import annotations

import ast
import sysconfig
import textwrap
from pathlib import Path

import pytest

from cogd.index.extract import MAX_SIGNATURE_CHARS, content_hash, cut_signature, extract, line_count
from cogd.index.languages import LANGUAGES, grammar, language_for_path


def src(text: str) -> bytes:
    """Dedented sample source without the leading newline of the triple-quoted literal."""
    return textwrap.dedent(text).lstrip("\n").encode("utf-8")


def by_id(parsed) -> dict:
    return {e.id: e for e in parsed.entities}


def shape(parsed) -> list[tuple]:
    """(id, kind, subkind, start, end, parent) of every non-file entity, in output order."""
    return [(e.id, e.kind, e.subkind, e.start_line, e.end_line, e.parent_id)
            for e in parsed.entities if e.kind != "file"]


# --------------------------------------------------------------------------- languages

@pytest.mark.parametrize("path, expected", [
    ("a.py", "python"), ("stubs/a.pyi", "python"), ("UPPER.PY", "python"),
    ("web/app.js", "javascript"), ("x.mjs", "javascript"), ("x.cjs", "javascript"), ("C.jsx", "javascript"),
    ("src/a.ts", "typescript"), ("a.mts", "typescript"), ("a.cts", "typescript"),
    ("ui/Button.tsx", "tsx"),
    ("README.md", None), ("Makefile", None), ("a.py.bak", None), (".py", None), ("dir.py/notes.txt", None),
])
def test_language_for_path(path, expected):
    assert language_for_path(path) == expected


def test_every_language_has_a_parser_and_tags_query():
    for name in LANGUAGES:
        gram = grammar(name)
        assert gram.parser.parse(b"").root_node is not None
        assert gram.tags.pattern_count > 0
    assert grammar("python") is grammar("python")  # cached per thread


def test_unknown_language_raises_key_error():
    with pytest.raises(KeyError):
        extract("a.cob", b"IDENTIFICATION DIVISION.\n", "cobol")


def test_line_count():
    assert line_count(b"") == 0
    assert line_count(b"x") == 1
    assert line_count(b"x\n") == 1
    assert line_count(b"x\ny") == 2
    assert line_count(b"\n\n") == 2


# --------------------------------------------------------------------------- Python

PY_SAMPLE = src('''
    """Tools for exporting tables.

    More text here.
    """
    import functools


    def plain(a, b=1):
        """Add two numbers.

        Longer explanation.
        """
        def helper(x):
            return x
        return helper(a) + b


    @functools.lru_cache(maxsize=None)
    @staticmethod
    def cached(
        key: str,
    ) -> int:
        # not a docstring
        return len(key)


    class Outer(Base, metaclass=Meta):
        \'\'\'Outer doc.\'\'\'

        class Inner:
            r"""Inner doc."""

            def deep(self):
                pass

        @property
        def value(self) -> int:
            return 1

        async def fetch(self, url):
            """Fetch it."""
            class Local:
                pass
            return url


    def plain(a):
        return a


    if True:
        def plain(a):
            return a
''')


def test_python_entities_shape():
    parsed = extract("pkg/tables.py", PY_SAMPLE, "python")
    assert parsed.path == "pkg/tables.py"
    assert parsed.language == "python"
    assert shape(parsed) == [
        ("pkg/tables.py::plain", "function", "", 8, 15, "pkg/tables.py"),
        ("pkg/tables.py::cached", "function", "", 18, 24, "pkg/tables.py"),
        ("pkg/tables.py::Outer", "class", "", 27, 44, "pkg/tables.py"),
        ("pkg/tables.py::Outer.Inner", "class", "", 30, 34, "pkg/tables.py::Outer"),
        ("pkg/tables.py::Outer.Inner.deep", "method", "", 33, 34, "pkg/tables.py::Outer.Inner"),
        ("pkg/tables.py::Outer.value", "method", "", 36, 38, "pkg/tables.py::Outer"),
        ("pkg/tables.py::Outer.fetch", "method", "", 40, 44, "pkg/tables.py::Outer"),
        ("pkg/tables.py::plain~2", "function", "", 47, 48, "pkg/tables.py"),
        ("pkg/tables.py::plain~3", "function", "", 52, 53, "pkg/tables.py"),
    ]


def test_python_nested_functions_and_local_classes_are_not_entities():
    ids = set(by_id(extract("pkg/tables.py", PY_SAMPLE, "python")))
    assert not any("helper" in i or "Local" in i for i in ids)
    assert len(ids) == 10  # file + 9 definitions


def test_python_file_entity():
    parsed = extract("pkg/tables.py", PY_SAMPLE, "python")
    f = parsed.entities[0]
    assert (f.id, f.kind, f.name, f.qualname, f.path, f.parent_id) == (
        "pkg/tables.py", "file", "tables.py", "pkg/tables.py", "pkg/tables.py", None)
    assert (f.start_line, f.end_line, f.language) == (1, 53, "python")
    assert f.doc == "Tools for exporting tables.\n\nMore text here."
    assert f.hash == content_hash(PY_SAMPLE)
    assert len(f.hash) == 16 and int(f.hash, 16) >= 0


def test_python_names_signatures_docs():
    e = by_id(extract("pkg/tables.py", PY_SAMPLE, "python"))
    plain = e["pkg/tables.py::plain"]
    assert (plain.name, plain.qualname, plain.language) == ("plain", "plain", "python")
    assert plain.signature == "def plain(a, b=1)"
    assert plain.doc == "Add two numbers.\n\nLonger explanation."
    assert plain.doc.splitlines()[0] == "Add two numbers."

    cached = e["pkg/tables.py::cached"]
    assert cached.signature == "def cached( key: str, ) -> int"  # decorators are not part of it
    assert cached.doc == ""  # a comment is not a docstring

    outer = e["pkg/tables.py::Outer"]
    assert outer.signature == "class Outer(Base, metaclass=Meta)"
    assert outer.doc == "Outer doc."
    assert e["pkg/tables.py::Outer.Inner"].doc == "Inner doc."  # raw-string prefix stripped
    assert e["pkg/tables.py::Outer.Inner"].qualname == "Outer.Inner"
    assert e["pkg/tables.py::Outer.Inner.deep"].qualname == "Outer.Inner.deep"
    assert e["pkg/tables.py::Outer.Inner.deep"].name == "deep"
    assert e["pkg/tables.py::Outer.value"].signature == "def value(self) -> int"
    assert e["pkg/tables.py::Outer.fetch"].signature == "async def fetch(self, url)"
    assert e["pkg/tables.py::Outer.fetch"].doc == "Fetch it."
    assert e["pkg/tables.py::plain~2"].qualname == "plain"
    assert e["pkg/tables.py::plain~3"].name == "plain"


def test_a_signature_over_the_limit_is_cut_visibly():
    params = ", ".join(f"parameter_number_{i}: int = {i}" for i in range(12))
    source = src(f"""
        def many({params}) -> dict:
            return {{}}

        def fits(a):
            return a
    """)
    e = by_id(extract("pkg/wide.py", source, "python"))
    whole = f"def many({params}) -> dict"
    assert len(whole) > MAX_SIGNATURE_CHARS
    cut = e["pkg/wide.py::many"].signature
    assert cut.endswith("…") and len(cut) <= MAX_SIGNATURE_CHARS
    assert whole.startswith(cut[:-1]) and len(cut) >= MAX_SIGNATURE_CHARS - 2  # only a trailing space may go
    assert e["pkg/wide.py::fits"].signature == "def fits(a)"


def test_cut_signature_keeps_exact_fits_and_whole_characters():
    exact = "x" * MAX_SIGNATURE_CHARS
    assert cut_signature(exact) == exact
    assert cut_signature(exact + "y") == "x" * (MAX_SIGNATURE_CHARS - 1) + "…"
    # "é" as e + COMBINING ACUTE ACCENT across the cut: both go, not the accent alone
    accented = "a" * 238 + "e\u0301" + "tail"
    assert cut_signature(accented) == "a" * 238 + "…"
    # a woman technologist (woman, ZWJ, laptop) across the cut: the whole sequence goes
    emoji = "b" * 237 + "\U0001f469\u200d\U0001f4bb" + "tail"
    assert cut_signature(emoji) == "b" * 237 + "…"
    # a thumbs up with its skin tone modifier across the cut
    toned = "c" * 238 + "\U0001f44d\U0001f3fd" + "tail"
    assert cut_signature(toned) == "c" * 238 + "…"
    assert cut_signature("def f(a, " + "z" * 300, limit=10) == "def f(a,…"  # the space before the cut goes


def test_python_contains_edges_follow_parents():
    parsed = extract("pkg/tables.py", PY_SAMPLE, "python")
    edges = [(x.src, x.dst, x.kind) for x in parsed.edges]
    assert edges == [(e.parent_id, e.id, "contains") for e in parsed.entities[1:]]
    assert ("pkg/tables.py::Outer", "pkg/tables.py::Outer.Inner", "contains") in edges
    assert ("pkg/tables.py::Outer.Inner", "pkg/tables.py::Outer.Inner.deep", "contains") in edges
    assert len(edges) == 9


def test_python_bodies_and_hashes():
    parsed = extract("pkg/tables.py", PY_SAMPLE, "python")
    e = by_id(parsed)
    lines = PY_SAMPLE.decode().splitlines(keepends=True)
    cached = e["pkg/tables.py::cached"]
    expected_text = "".join(lines[17:24]).rstrip("\n")  # decorator line 18 .. line 24
    assert cached.body == expected_text
    assert cached.hash == content_hash(expected_text.encode())
    # Containers are summarised by header, doc and member names.
    assert e["pkg/tables.py::Outer"].body == "class Outer(Base, metaclass=Meta)\nOuter doc.\nInner value fetch"
    file_body = e["pkg/tables.py"].body
    assert "\nplain cached Outer plain plain\n" in file_body  # member names...
    assert "import functools" in file_body  # ...and module-level code outside every definition
    assert "def plain" not in file_body


def test_python_hash_changes_only_for_the_edited_function():
    before = by_id(extract("m.py", PY_SAMPLE, "python"))
    edited = PY_SAMPLE.replace(b"return len(key)", b"return len(key) + 1")
    after = by_id(extract("m.py", edited, "python"))
    assert set(before) == set(after)
    changed = {i for i in before if before[i].hash != after[i].hash}
    assert changed == {"m.py", "m.py::cached"}
    # A body edit in a method changes the method and not its class summary.
    edited2 = PY_SAMPLE.replace(b"return 1\n", b"return 2\n")
    after2 = by_id(extract("m.py", edited2, "python"))
    assert {i for i in before if before[i].hash != after2[i].hash} == {"m.py", "m.py::Outer.value", "m.py::Outer"}


def test_python_property_setter_pair_gets_suffix():
    code = src('''
        class Temperature:
            @property
            def celsius(self):
                return self._c

            @celsius.setter
            def celsius(self, value):
                self._c = value
    ''')
    assert shape(extract("t.py", code, "python")) == [
        ("t.py::Temperature", "class", "", 1, 8, "t.py"),
        ("t.py::Temperature.celsius", "method", "", 2, 4, "t.py::Temperature"),
        ("t.py::Temperature.celsius~2", "method", "", 6, 8, "t.py::Temperature"),
    ]


def test_python_trailing_comments_are_not_part_of_the_span():
    code = src('''
        def f():
            return 1
        # top-level comment

        def g(x):
            if x:
                y()
                # inner trailing comment
            # outer trailing comment

        class C:
            """Doc."""
            # trailing
    ''')
    parsed = extract("c.py", code, "python")
    assert [(e.id, e.start_line, e.end_line) for e in parsed.entities] == [
        ("c.py", 1, 13), ("c.py::f", 1, 2), ("c.py::g", 5, 7), ("c.py::C", 11, 12),
    ]
    assert by_id(parsed)["c.py::g"].body == "def g(x):\n    if x:\n        y()"


def test_python_methods_under_conditionals_in_a_class():
    code = src('''
        import sys

        class Compat:
            if sys.version_info >= (3, 12):
                def run(self):
                    return 12
            else:
                def run(self):
                    return 11

        try:
            from fast import speedup
        except ImportError:
            def speedup(x):
                return x
    ''')
    assert shape(extract("compat.py", code, "python")) == [
        ("compat.py::Compat", "class", "", 3, 9, "compat.py"),
        ("compat.py::Compat.run", "method", "", 5, 6, "compat.py::Compat"),
        ("compat.py::Compat.run~2", "method", "", 8, 9, "compat.py::Compat"),
        ("compat.py::speedup", "function", "", 14, 15, "compat.py"),
    ]


def test_python_empty_and_comment_only_files():
    empty = extract("e.py", b"", "python")
    assert [(e.id, e.kind, e.start_line, e.end_line, e.doc) for e in empty.entities] == [("e.py", "file", 1, 1, "")]
    assert empty.edges == []
    comments = extract("c.py", b"# just a note\n# and another\n", "python")
    assert [(e.id, e.end_line, e.doc) for e in comments.entities] == [("c.py", 2, "")]


# --------------------------------------------------------------------------- JavaScript

JS_SAMPLE = src('''
    // Header comment for the module.

    import fs from "fs";

    /**
     * Parse a config file.
     * @param {string} path
     */
    function parseConfig(path) {
      function inner() { return 1; }
      return inner();
    }

    // Load things lazily.
    const loadAll = async (dir) => {
      return [];
    };

    export const exported = function named() { return 2; };

    /** A widget. */
    export class Widget extends Base {
      constructor(x) {
        this.x = x;
      }

      /** Render it. */
      render() {
        const cb = () => 1;
        return cb();
      }

      static create() { return new Widget(1); }

      get size() { return 1; }
      set size(v) { this.s = v; }
    }

    var legacy = function (a) {
      return a;
    };
''')


def test_javascript_entities_shape():
    parsed = extract("web/app.js", JS_SAMPLE, "javascript")
    assert shape(parsed) == [
        ("web/app.js::parseConfig", "function", "", 9, 12, "web/app.js"),
        ("web/app.js::loadAll", "function", "", 15, 17, "web/app.js"),
        ("web/app.js::exported", "function", "", 19, 19, "web/app.js"),
        ("web/app.js::Widget", "class", "", 22, 37, "web/app.js"),
        ("web/app.js::Widget.render", "method", "", 28, 31, "web/app.js::Widget"),
        ("web/app.js::Widget.create", "method", "", 33, 33, "web/app.js::Widget"),
        ("web/app.js::Widget.size", "method", "", 35, 35, "web/app.js::Widget"),
        ("web/app.js::Widget.size~2", "method", "", 36, 36, "web/app.js::Widget"),
        ("web/app.js::legacy", "function", "", 39, 41, "web/app.js"),
    ]
    assert [(x.src, x.dst) for x in parsed.edges] == [(e.parent_id, e.id) for e in parsed.entities[1:]]


def test_javascript_signatures_and_comments():
    parsed = extract("web/app.js", JS_SAMPLE, "javascript")
    e = by_id(parsed)
    assert e["web/app.js"].doc == "Header comment for the module."
    assert e["web/app.js"].end_line == 41
    assert e["web/app.js::parseConfig"].signature == "function parseConfig(path)"
    assert e["web/app.js::parseConfig"].doc == "Parse a config file.\n@param {string} path"
    assert e["web/app.js::loadAll"].signature == "const loadAll = async (dir) =>"
    assert e["web/app.js::loadAll"].doc == "Load things lazily."
    assert e["web/app.js::exported"].signature == "const exported = function named()"
    assert e["web/app.js::Widget"].signature == "class Widget extends Base"
    assert e["web/app.js::Widget"].doc == "A widget."
    assert e["web/app.js::Widget.render"].signature == "render()"
    assert e["web/app.js::Widget.render"].doc == "Render it."
    assert e["web/app.js::Widget.create"].signature == "static create()"
    assert e["web/app.js::Widget.create"].doc == ""
    assert e["web/app.js::legacy"].signature == "var legacy = function (a)"
    # Nested helpers and callbacks are part of their function; constructors are skipped by the tags query.
    assert not any(n in i for i in e for n in ("inner", "cb", "named", "constructor"))
    # The arrow function's text starts at `const`.
    assert e["web/app.js::loadAll"].body == "const loadAll = async (dir) => {\n  return [];\n}"


def test_javascript_first_comment_is_not_a_header_when_it_documents_a_definition():
    code = src('''
        /** Adds. */
        function add(a, b) { return a + b; }
    ''')
    e = by_id(extract("a.js", code, "javascript"))
    assert e["a.js"].doc == ""
    assert e["a.js::add"].doc == "Adds."


def test_javascript_comment_separated_by_blank_line_is_not_a_doc():
    code = src('''
        const x = 1;
        // unrelated note

        function f() {}
    ''')
    assert by_id(extract("a.js", code, "javascript"))["a.js::f"].doc == ""


def test_javascript_object_literal_and_assigned_functions():
    code = src('''
        const api = {
          get: (k) => k,
          put(k, v) { return v; },
        };
        module.exports.helper = function () { return 3; };
    ''')
    assert shape(extract("api.js", code, "javascript")) == [
        ("api.js::get", "function", "", 2, 2, "api.js"),
        ("api.js::put", "function", "", 3, 3, "api.js"),
        ("api.js::helper", "function", "", 5, 5, "api.js"),
    ]


# --------------------------------------------------------------------------- TypeScript / TSX

TS_SAMPLE = src('''
    /** Shapes that can be drawn. */
    export interface Shape {
      area(): number;
      name: string;
    }

    // Base of all shapes.
    export abstract class BaseShape implements Shape {
      name = "base";
      abstract area(): number;
      describe(): string {
        return `${this.name}: ${this.area()}`;
      }
    }

    export function total(shapes: Shape[]): number {
      return shapes.reduce((s, x) => s + x.area(), 0);
    }

    type Alias = { a: number };

    export default class Square extends BaseShape {
      constructor(private side: number) { super(); }
      area(): number { return this.side ** 2; }
    }
''')


def test_typescript_entities_shape():
    parsed = extract("src/shapes.ts", TS_SAMPLE, "typescript")
    assert parsed.language == "typescript"
    assert shape(parsed) == [
        ("src/shapes.ts::Shape", "class", "interface", 2, 5, "src/shapes.ts"),
        ("src/shapes.ts::Shape.area", "method", "", 3, 3, "src/shapes.ts::Shape"),
        ("src/shapes.ts::BaseShape", "class", "", 8, 14, "src/shapes.ts"),
        ("src/shapes.ts::BaseShape.area", "method", "", 10, 10, "src/shapes.ts::BaseShape"),
        ("src/shapes.ts::BaseShape.describe", "method", "", 11, 13, "src/shapes.ts::BaseShape"),
        ("src/shapes.ts::total", "function", "", 16, 18, "src/shapes.ts"),
        ("src/shapes.ts::Square", "class", "", 22, 25, "src/shapes.ts"),
        ("src/shapes.ts::Square.area", "method", "", 24, 24, "src/shapes.ts::Square"),
    ]
    assert len(parsed.edges) == 8


def test_typescript_signatures_and_docs():
    e = by_id(extract("src/shapes.ts", TS_SAMPLE, "typescript"))
    assert e["src/shapes.ts"].doc == ""  # the first comment documents Shape
    assert e["src/shapes.ts::Shape"].signature == "interface Shape"
    assert e["src/shapes.ts::Shape"].doc == "Shapes that can be drawn."
    assert e["src/shapes.ts::Shape.area"].signature == "area(): number"
    assert e["src/shapes.ts::BaseShape"].signature == "abstract class BaseShape implements Shape"
    assert e["src/shapes.ts::BaseShape"].doc == "Base of all shapes."
    assert e["src/shapes.ts::BaseShape.area"].signature == "abstract area(): number"
    assert e["src/shapes.ts::BaseShape.describe"].signature == "describe(): string"
    assert e["src/shapes.ts::total"].signature == "function total(shapes: Shape[]): number"
    assert e["src/shapes.ts::Square"].signature == "class Square extends BaseShape"
    assert e["src/shapes.ts::Shape"].body == "interface Shape\nShapes that can be drawn.\narea"


def test_typescript_namespaces_and_modules_are_containers():
    code = src('''
        namespace Geometry {
          export function unit(): number { return 1; }
        }

        module Legacy {
          export function old() {}
        }

        export namespace Physics {
          export class Body {
            mass(): number { return 1; }
          }
          export function unit(): number { return 2; }
        }
    ''')
    for lang in ("typescript", "tsx"):
        parsed = extract("ns.ts", code, lang)
        assert shape(parsed) == [
            ("ns.ts::Geometry", "module", "", 1, 3, "ns.ts"),
            ("ns.ts::Geometry.unit", "function", "", 2, 2, "ns.ts::Geometry"),
            ("ns.ts::Legacy", "module", "", 5, 7, "ns.ts"),
            ("ns.ts::Legacy.old", "function", "", 6, 6, "ns.ts::Legacy"),
            ("ns.ts::Physics", "module", "", 9, 14, "ns.ts"),
            ("ns.ts::Physics.Body", "class", "", 10, 12, "ns.ts::Physics"),
            ("ns.ts::Physics.Body.mass", "method", "", 11, 11, "ns.ts::Physics.Body"),
            ("ns.ts::Physics.unit", "function", "", 13, 13, "ns.ts::Physics"),
        ]
        e = by_id(parsed)
        assert e["ns.ts::Geometry"].signature == "namespace Geometry"
        assert e["ns.ts::Legacy"].signature == "module Legacy"
        assert e["ns.ts::Physics"].body == "namespace Physics\n\nBody unit"


TSX_SAMPLE = src('''
    import React from "react";

    interface Props {
      title: string;
    }

    /** Shows a title. */
    export const Title = ({ title }: Props) => {
      const onClick = () => console.log(title);
      return <h1 onClick={onClick}>{title}</h1>;
    };

    export function App(): JSX.Element {
      return <Title title="hi" />;
    }

    class Counter extends React.Component<Props> {
      render() {
        return <div>{this.props.title}</div>;
      }
    }
''')


def test_tsx_entities():
    parsed = extract("ui/Title.tsx", TSX_SAMPLE, "tsx")
    assert shape(parsed) == [
        ("ui/Title.tsx::Props", "class", "interface", 3, 5, "ui/Title.tsx"),
        ("ui/Title.tsx::Title", "function", "", 8, 11, "ui/Title.tsx"),
        ("ui/Title.tsx::App", "function", "", 13, 15, "ui/Title.tsx"),
        ("ui/Title.tsx::Counter", "class", "", 17, 21, "ui/Title.tsx"),
        ("ui/Title.tsx::Counter.render", "method", "", 18, 20, "ui/Title.tsx::Counter"),
    ]
    e = by_id(parsed)
    assert e["ui/Title.tsx::Title"].signature == "const Title = ({ title }: Props) =>"
    assert e["ui/Title.tsx::Title"].doc == "Shows a title."
    assert e["ui/Title.tsx::App"].signature == "function App(): JSX.Element"
    assert e["ui/Title.tsx::Counter"].signature == "class Counter extends React.Component<Props>"


def test_tsx_is_not_parsed_as_plain_typescript():
    # The same JSX under the .ts grammar is a syntax error; under tsx it is clean.
    assert not grammar("tsx").parser.parse(TSX_SAMPLE).root_node.has_error
    assert grammar("typescript").parser.parse(TSX_SAMPLE).root_node.has_error


# --------------------------------------------------------------------------- robustness

def test_crlf_gives_the_same_lines_as_lf():
    for path, code, lang in (("a.py", PY_SAMPLE, "python"), ("a.js", JS_SAMPLE, "javascript"),
                             ("a.ts", TS_SAMPLE, "typescript")):
        lf = extract(path, code, lang)
        crlf = extract(path, code.replace(b"\n", b"\r\n"), lang)
        assert b"\r\n" in code.replace(b"\n", b"\r\n")
        key = lambda p: [(e.id, e.kind, e.subkind, e.start_line, e.end_line, e.parent_id, e.signature, e.doc)
                         for e in p.entities]
        assert key(crlf) == key(lf)
        assert [(x.src, x.dst) for x in crlf.edges] == [(x.src, x.dst) for x in lf.edges]


def test_syntax_error_keeps_recoverable_entities():
    code = src('''
        def good():
            return 1


        def broken(:
            pass


        class Fine:
            """Still here."""

            def method(self):
                return 2
    ''')
    parsed = extract("bad.py", code, "python")
    e = by_id(parsed)
    assert e["bad.py::good"].start_line == 1 and e["bad.py::good"].end_line == 2
    assert (e["bad.py::Fine"].start_line, e["bad.py::Fine"].end_line, e["bad.py::Fine"].doc) == (9, 13, "Still here.")
    assert (e["bad.py::Fine.method"].kind, e["bad.py::Fine.method"].parent_id) == ("method", "bad.py::Fine")
    assert (e["bad.py::Fine.method"].start_line, e["bad.py::Fine.method"].end_line) == (12, 13)
    assert e["bad.py"].end_line == 13


def test_syntax_error_in_javascript_does_not_raise():
    code = b"function ok() { return 1; }\nfunction broken( {\nclass K { m() { } }\n"
    parsed = extract("bad.js", code, "javascript")
    assert parsed.entities[0].id == "bad.js"
    assert "bad.js::ok" in by_id(parsed)


def test_latin1_bytes_do_not_raise():
    code = b"# Caf\xe9 tools\ndef brew():\n    \"\"\"Caf\xe9 au lait.\"\"\"\n    return '\xe9'\n"
    parsed = extract("cafe.py", code, "python")
    e = by_id(parsed)
    assert (e["cafe.py::brew"].start_line, e["cafe.py::brew"].end_line) == (2, 4)
    assert e["cafe.py::brew"].doc == "Caf\ufffd au lait."
    assert e["cafe.py"].hash == content_hash(code)
    js = extract("cafe.js", b"// caf\xe9\n\nfunction brew() { return '\xe9'; }\n", "javascript")
    assert [x.id for x in js.entities] == ["cafe.js", "cafe.js::brew"]


def test_garbage_bytes_do_not_raise():
    junk = bytes(range(256)) * 4
    for lang in LANGUAGES:
        parsed = extract("junk", junk, lang)
        assert parsed.entities[0].kind == "file"


# --------------------------------------------------------------------------- stdlib cross-check

STDLIB = Path(sysconfig.get_paths()["stdlib"])
STDLIB_FILES = sorted(
    p.relative_to(STDLIB).as_posix()
    for package in ("json", "email")
    for p in (STDLIB / package).rglob("*.py")
    if "__pycache__" not in p.parts
)


def ast_entities(source: bytes, path: str) -> list[tuple]:
    """(id, kind, start, end) per class/function/method, by the same naming rules, from ``ast``."""
    found = []  # (def line, def column, qualname, kind, start, end)

    def visit(statements, prefix: str, in_class: bool) -> None:
        for node in statements:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                qualname = f"{prefix}.{node.name}" if prefix else node.name
                is_class = isinstance(node, ast.ClassDef)
                kind = "class" if is_class else ("method" if in_class else "function")
                start = node.decorator_list[0].lineno if node.decorator_list else node.lineno
                found.append((node.lineno, node.col_offset, qualname, kind, start, node.end_lineno))
                if is_class:
                    visit(node.body, qualname, True)
                # a function's body holds no entities
            else:  # if / try / with / for / while / match blocks do not change the scope
                for name in ("body", "orelse", "handlers", "finalbody", "cases"):
                    block = getattr(node, name, None)
                    if isinstance(block, list):
                        visit(block, prefix, in_class)

    visit(ast.parse(source).body, "", False)
    counts: dict[str, int] = {}
    result = []
    for _line, _col, qualname, kind, start, end in sorted(found):  # source order decides ~N
        entity_id = f"{path}::{qualname}"
        counts[entity_id] = counts.get(entity_id, 0) + 1
        if counts[entity_id] > 1:
            entity_id += f"~{counts[entity_id]}"
        result.append((entity_id, kind, start, end))
    return result


def test_stdlib_sample_is_substantial():
    assert len(STDLIB_FILES) > 20
    assert "json/decoder.py" in STDLIB_FILES and "email/message.py" in STDLIB_FILES


@pytest.mark.parametrize("rel", STDLIB_FILES)
def test_stdlib_entities_match_python_ast(rel):
    source = (STDLIB / rel).read_bytes()
    expected = ast_entities(source, rel)
    parsed = extract(rel, source, "python")
    got = [(e.id, e.kind, e.start_line, e.end_line) for e in parsed.entities if e.kind in ("class", "function", "method")]
    assert sorted(got) == sorted(expected)
    assert len({e.id for e in parsed.entities}) == len(parsed.entities)
    ids = {e.id for e in parsed.entities}
    assert all(e.parent_id in ids for e in parsed.entities[1:])


def test_stdlib_cross_check_covers_every_kind_and_decorators():
    # Guard that the comparison exercises classes, methods and decorators, not just plain defs.
    kinds = {"class": 0, "function": 0, "method": 0}
    decorated = 0
    for rel in STDLIB_FILES:
        source = (STDLIB / rel).read_bytes()
        for _id, kind, _start, _end in ast_entities(source, rel):
            kinds[kind] += 1
        decorated += sum(1 for node in ast.walk(ast.parse(source))
                         if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.decorator_list)
    assert min(kinds.values()) > 50
    assert decorated > 10


def test_ast_reference_numbers_duplicates_like_cogd():
    code = src('''
        try:
            from _speedups import scan
        except ImportError:
            def scan(s):
                return s
        else:
            def scan(s):
                return s.strip()

        class P:
            @property
            def x(self):
                return 1

            @x.setter
            def x(self, v):
                pass
    ''')
    expected = [("d.py::scan", "function", 4, 5), ("d.py::scan~2", "function", 7, 8),
                ("d.py::P", "class", 10, 17), ("d.py::P.x", "method", 11, 13), ("d.py::P.x~2", "method", 15, 17)]
    assert ast_entities(code, "d.py") == expected
    assert [(e.id, e.kind, e.start_line, e.end_line) for e in extract("d.py", code, "python").entities[1:]] == expected
