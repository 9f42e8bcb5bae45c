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


# TypeScript's tags.scm only knows `module X {}`; `namespace X {}` parses as internal_module.
_TS_EXTRA_TAGS = "(internal_module name: (identifier) @name) @definition.module\n"


LANGUAGES: dict[str, LanguageSpec] = {
    spec.name: spec
    for spec in (
        LanguageSpec("python", (".py", ".pyi"), "tree_sitter_python", "language", ("tree_sitter_python",)),
        LanguageSpec(
            "javascript",
            (".js", ".mjs", ".cjs", ".jsx"),
            "tree_sitter_javascript",
            "language",
            ("tree_sitter_javascript",),
        ),
        LanguageSpec(
            "typescript",
            (".ts", ".mts", ".cts"),
            "tree_sitter_typescript",
            "language_typescript",
            ("tree_sitter_javascript", "tree_sitter_typescript"),
            _TS_EXTRA_TAGS,
        ),
        LanguageSpec(
            "tsx",
            (".tsx",),
            "tree_sitter_typescript",
            "language_tsx",
            ("tree_sitter_javascript", "tree_sitter_typescript"),
            _TS_EXTRA_TAGS,
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
        cache[name] = Grammar(language, tree_sitter.Parser(language), tree_sitter.Query(language, query_text))
    return cache[name]
