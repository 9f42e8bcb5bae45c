"""The languages cogd parses: file extensions, tree-sitter grammars, tags queries.

Each grammar comes from its maintained per-language wheel (``tree-sitter-python``
and friends), which ships the grammar compiled and its standard
``queries/tags.scm`` — the definition/reference queries GitHub code navigation
uses. TypeScript's tags file only adds TypeScript's own constructs and is
meant to be layered on JavaScript's (as the tree-sitter CLI's ``inherits``
does), so both are concatenated for ``typescript`` and ``tsx``.
"""

from __future__ import annotations

import importlib
import threading
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import tree_sitter


@dataclass(frozen=True)
class LanguageSpec:
    """How to load one language: grammar module and function, tags sources."""

    name: str
    extensions: tuple[str, ...]
    module: str  # the grammar wheel's import name
    function: str  # the function in it that returns the language pointer
    tags_from: tuple[str, ...]  # modules whose queries/tags.scm are concatenated
    extra_tags: str = ""  # patterns the shipped tags.scm lacks
    # cogd's own queries for edges the tags files do not describe:
    # imports: @import (the statement), @module (what is imported from: a
    #   dotted name, a path string), optional @name (an imported symbol) and
    #   @alias (the local name it is bound to).
    # inherits: @base (a base class / interface / trait name) inside the
    #   class-like definition it belongs to.
    imports: str = ""
    inherits: str = ""


# TypeScript's tags.scm only knows `module X {}`; `namespace X {}` parses as internal_module.
_TS_EXTRA_TAGS = "(internal_module name: (identifier) @name) @definition.module\n"

_PYTHON_IMPORTS = """
(import_statement name: (dotted_name) @module) @import
(import_statement name: (aliased_import name: (dotted_name) @module alias: (identifier) @alias)) @import
(import_from_statement module_name: (_) @module name: (dotted_name) @name) @import
(import_from_statement module_name: (_) @module
  name: (aliased_import name: (dotted_name) @name alias: (identifier) @alias)) @import
(import_from_statement module_name: (_) @module (wildcard_import)) @import
"""
_PYTHON_INHERITS = """
(class_definition superclasses: (argument_list [(identifier) (attribute)] @base))
"""
_JS_IMPORTS = """
(import_statement source: (string (string_fragment) @module)) @import
(import_statement
  (import_clause (named_imports (import_specifier name: (identifier) @name)))
  source: (string (string_fragment) @module)) @import
(import_statement
  (import_clause (named_imports (import_specifier name: (identifier) @name alias: (identifier) @alias)))
  source: (string (string_fragment) @module)) @import
(import_statement (import_clause (identifier) @alias) source: (string (string_fragment) @module)) @import
(import_statement (import_clause (namespace_import (identifier) @alias)) source: (string (string_fragment) @module)) @import
(export_statement source: (string (string_fragment) @module)) @import
((call_expression function: (identifier) @_require arguments: (arguments (string (string_fragment) @module))) @import
  (#eq? @_require "require"))
"""
_JS_INHERITS = """
(class_heritage [(identifier) (member_expression)] @base)
"""
_TS_INHERITS = """
(extends_clause value: [(identifier) (member_expression)] @base)
(implements_clause [(type_identifier) (nested_type_identifier) (generic_type)] @base)
(extends_type_clause [(type_identifier) (nested_type_identifier) (generic_type)] @base)
"""


LANGUAGES: dict[str, LanguageSpec] = {
    spec.name: spec
    for spec in (
        LanguageSpec(
            "python", (".py", ".pyi"), "tree_sitter_python", "language", ("tree_sitter_python",),
            imports=_PYTHON_IMPORTS, inherits=_PYTHON_INHERITS,
        ),
        LanguageSpec(
            "javascript",
            (".js", ".mjs", ".cjs", ".jsx"),
            "tree_sitter_javascript",
            "language",
            ("tree_sitter_javascript",),
            imports=_JS_IMPORTS,
            inherits=_JS_INHERITS,
        ),
        LanguageSpec(
            "typescript",
            (".ts", ".mts", ".cts"),
            "tree_sitter_typescript",
            "language_typescript",
            ("tree_sitter_javascript", "tree_sitter_typescript"),
            _TS_EXTRA_TAGS,
            imports=_JS_IMPORTS,
            inherits=_TS_INHERITS,
        ),
        LanguageSpec(
            "tsx",
            (".tsx",),
            "tree_sitter_typescript",
            "language_tsx",
            ("tree_sitter_javascript", "tree_sitter_typescript"),
            _TS_EXTRA_TAGS,
            imports=_JS_IMPORTS,
            inherits=_TS_INHERITS,
        ),
    )
}

_BY_EXTENSION = {ext: spec.name for spec in LANGUAGES.values() for ext in spec.extensions}


def language_for_path(path: str) -> str | None:
    """Return the language name for a repository-relative path, or None."""
    return _BY_EXTENSION.get(PurePosixPath(path).suffix.lower())


def _tags_source(module_name: str) -> str:
    module = importlib.import_module(module_name)
    return (Path(module.__file__).parent / "queries" / "tags.scm").read_text(encoding="utf-8")


@dataclass
class Grammar:
    """A ready parser and compiled tags query for one language.

    ``tree_sitter.Parser`` is not safe to share between threads, so grammars
    are cached per thread (see :func:`grammar`).
    """

    language: tree_sitter.Language
    parser: tree_sitter.Parser
    tags: tree_sitter.Query
    imports: tree_sitter.Query | None = None
    inherits: tree_sitter.Query | None = None


_local = threading.local()


def grammar(name: str) -> Grammar:
    """Return this thread's :class:`Grammar` for language ``name``.

    Raises KeyError for an unknown language and ImportError when the grammar
    wheel is missing.
    """
    cache: dict[str, Grammar] = getattr(_local, "cache", None) or {}
    _local.cache = cache
    if name not in cache:
        spec = LANGUAGES[name]
        pointer = getattr(importlib.import_module(spec.module), spec.function)()
        language = tree_sitter.Language(pointer)
        query_text = "\n".join([*(_tags_source(m) for m in spec.tags_from), spec.extra_tags])
        cache[name] = Grammar(
            language,
            tree_sitter.Parser(language),
            tree_sitter.Query(language, query_text),
            tree_sitter.Query(language, spec.imports) if spec.imports.strip() else None,
            tree_sitter.Query(language, spec.inherits) if spec.inherits.strip() else None,
        )
    return cache[name]
