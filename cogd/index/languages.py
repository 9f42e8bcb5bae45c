"""The languages cogd parses: file extensions, tree-sitter grammars, tags queries.

Each grammar comes from its maintained per-language wheel (``tree-sitter-python``
and friends), which ships the grammar compiled and its standard
``queries/tags.scm`` — the definition/reference queries GitHub code navigation
uses. TypeScript's tags file only adds TypeScript's own constructs and is
meant to be layered on JavaScript's (as the tree-sitter CLI's ``inherits``
does), so both are concatenated for ``typescript`` and ``tsx``. C++'s tags
file already holds C's patterns and its own. Kotlin and Bash wheels ship no
tags file: their definitions are cogd's own patterns in ``extra_tags``.

Definition capture names (``@definition.<capture>``, mapped to entity kinds in
:mod:`cogd.index.extract`): ``class``, ``interface``, ``enum``, ``object``,
``type`` (a named type or alias), ``module``, ``package``, ``function``,
``method``, ``macro``, ``constant``. A definition's match may also capture
``@receiver``: the type a method defined outside its type's body belongs to
(Go receivers, Rust ``impl`` blocks, C++ ``A::f``; several captures are the
parts of a scoped name, ``ns::A::f``), which qualifies the method's name
(``Type.method``, ``ns.A.f``).

Modules and packages: block forms that enclose their definitions (Rust ``mod
x {}``, C++/C# ``namespace X {}``, PHP ``namespace X {}``, Ruby ``module``,
TypeScript namespaces) are containers, so they prefix qualified names
(``geo.Shape.area``). One-statement declarations of the file's package (Go
``package``, Java/Kotlin ``package``, C# ``namespace X;``, PHP ``namespace
X;``) are ``module`` entities with subkind ``package`` spanning their line:
they enclose nothing and do not prefix names (the path already does).

Loading: :func:`check` loads a language's grammar and compiles each query on
its own, once per process; a failure disables that language only
(:class:`LanguageUnavailable`, skip reason ``language_disabled``). A
repository may replace any query with ``.cogd/queries/<language>/<kind>.scm``
(``kind``: ``tags``, ``imports``, ``inherits``), read after :func:`configure`
names its root.
"""

from __future__ import annotations

import hashlib
import importlib
import logging
import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path

import tree_sitter

from cogd.index.boundary import OutsideTree, read_tree_file
from cogd.index.queries import run_query
from cogd.rpc.locate import COGD_DIR


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
    #   class-like definition it belongs to; where the base is written outside
    #   that definition (Rust `impl Trait for Type`) the match also captures
    #   @type, the name of the type that gets the base.
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

# --------------------------------------------------------------------------- Go
# The tags file knows functions, methods and `type` specs; cogd adds the
# package clause, method receivers and documented constants.
_GO_EXTRA_TAGS = """
(package_clause (package_identifier) @name) @definition.package
(method_declaration
  receiver: (parameter_list (parameter_declaration type: [
    (type_identifier) @receiver
    (generic_type type: (type_identifier) @receiver)
    (pointer_type (type_identifier) @receiver)
    (pointer_type (generic_type type: (type_identifier) @receiver))]))
  name: (field_identifier) @name) @definition.method
(const_declaration (const_spec name: (identifier) @name) @definition.constant)
"""
_GO_IMPORTS = """
(import_spec path: (interpreted_string_literal (interpreted_string_literal_content) @module)) @import
(import_spec name: [(package_identifier) (dot) (blank_identifier)] @alias
  path: (interpreted_string_literal (interpreted_string_literal_content) @module)) @import
"""
# Embedded fields of a struct and embedded interfaces of an interface.
_GO_INHERITS = """
(type_spec type: (struct_type (field_declaration_list (field_declaration !name type: [
  (type_identifier) (qualified_type) (generic_type)
  (pointer_type (type_identifier)) (pointer_type (qualified_type))] @base))))
(type_spec type: (interface_type (type_elem [(type_identifier) (qualified_type) (generic_type)] @base)))
"""

# --------------------------------------------------------------------------- Rust
# The tags file captures methods in any declaration list; cogd adds the impl's
# type as their receiver, trait method signatures, and constants/statics. (A body-less `mod x;` is an
# import, not an entity: extract drops it.)
_RUST_EXTRA_TAGS = """
(impl_item
  type: [
    (type_identifier) @receiver
    (generic_type type: (type_identifier) @receiver)
    (scoped_type_identifier name: (type_identifier) @receiver)]
  body: (declaration_list (function_item name: (identifier) @name) @definition.method))
(function_signature_item name: (identifier) @name) @definition.method
[(const_item name: (identifier) @name) (static_item name: (identifier) @name)] @definition.constant
"""
_RUST_IMPORTS = """
(use_declaration argument: (identifier) @module) @import
(use_declaration argument: (scoped_identifier path: (_) @module name: (identifier) @name)) @import
(use_declaration argument: (use_as_clause
  path: (scoped_identifier path: (_) @module name: (identifier) @name) alias: (identifier) @alias)) @import
(use_declaration argument: (use_wildcard [(identifier) (scoped_identifier)] @module)) @import
(use_declaration argument: (scoped_use_list path: (_) @module list: (use_list (identifier) @name))) @import
(use_declaration argument: (scoped_use_list path: (_) @module
  list: (use_list (use_as_clause path: (identifier) @name alias: (identifier) @alias)))) @import
(mod_item name: (identifier) @module !body) @import
(extern_crate_declaration name: (identifier) @module) @import
"""
_RUST_INHERITS = """
(impl_item
  trait: [(type_identifier) (scoped_type_identifier) (generic_type)] @base
  type: [
    (type_identifier) @type
    (generic_type type: (type_identifier) @type)
    (scoped_type_identifier name: (type_identifier) @type)])
(trait_item bounds: (trait_bounds [(type_identifier) (scoped_type_identifier) (generic_type)] @base))
"""

# --------------------------------------------------------------------------- Java
_JAVA_EXTRA_TAGS = """
(package_declaration [(identifier) (scoped_identifier)] @name) @definition.package
(enum_declaration name: (identifier) @name) @definition.class
(record_declaration name: (identifier) @name) @definition.class
"""
_JAVA_IMPORTS = """
(import_declaration (scoped_identifier scope: (_) @module name: (identifier) @name) .) @import
(import_declaration [(identifier) (scoped_identifier)] @module (asterisk)) @import
"""
_JAVA_TYPES = "[(type_identifier) (scoped_type_identifier) (generic_type)]"
_JAVA_INHERITS = f"""
(superclass {_JAVA_TYPES} @base)
(super_interfaces (type_list {_JAVA_TYPES} @base))
(extends_interfaces (type_list {_JAVA_TYPES} @base))
"""

# --------------------------------------------------------------------------- C / C++
# The tags files capture a function's declarator and any enum/class specifier;
# extract widens declarators to their declaration and drops specifiers
# without a body (forward declarations and uses). cogd adds unions defined at
# top level (the tags file only sees them inside a declaration), `#define`d
# constants, and for C++ namespaces and out-of-class member definitions.
_C_EXTRA_TAGS = """
(union_specifier name: (type_identifier) @name body: (_)) @definition.class
(preproc_def name: (identifier) @name) @definition.constant
"""
_CPP_EXTRA_TAGS = _C_EXTRA_TAGS + """
(namespace_definition name: [(namespace_identifier) (nested_namespace_specifier)] @name) @definition.module
(function_declarator declarator: (qualified_identifier
  scope: [(namespace_identifier) @receiver (template_type name: (type_identifier) @receiver)]
  name: (identifier) @name)) @definition.method
(function_declarator declarator: (qualified_identifier
  scope: (namespace_identifier) @receiver
  name: (qualified_identifier
    scope: [(namespace_identifier) @receiver (template_type name: (type_identifier) @receiver)]
    name: (identifier) @name))) @definition.method
"""
_C_IMPORTS = """
(preproc_include path: (string_literal (string_content) @module)) @import
(preproc_include path: (system_lib_string) @module) @import
"""
_CPP_INHERITS = """
(base_class_clause [(type_identifier) (qualified_identifier) (template_type)] @base)
"""

# --------------------------------------------------------------------------- C#
_CSHARP_EXTRA_TAGS = """
(namespace_declaration name: (qualified_name) @name) @definition.module
(file_scoped_namespace_declaration name: [(identifier) (qualified_name)] @name) @definition.package
[(struct_declaration name: (identifier) @name)
 (enum_declaration name: (identifier) @name)
 (record_declaration name: (identifier) @name)] @definition.class
"""
_CSHARP_IMPORTS = """
(using_directive !name [(identifier) (qualified_name)] @module) @import
(using_directive name: (identifier) @alias . [(identifier) (qualified_name)] @module) @import
"""
_CSHARP_INHERITS = """
(base_list [(identifier) (qualified_name) (generic_name)] @base)
"""

# --------------------------------------------------------------------------- Ruby
_RUBY_EXTRA_TAGS = """
(assignment left: (constant) @name) @definition.constant
"""
_RUBY_IMPORTS = """
((call !receiver method: (identifier) @_load arguments: (argument_list . (string (string_content) @module))) @import
  (#any-of? @_load "require" "require_relative"))
"""
_RUBY_INHERITS = """
(class superclass: (superclass [(constant) (scope_resolution)] @base))
([(class body: (body_statement
     (call !receiver method: (identifier) @_mixin arguments: (argument_list [(constant) (scope_resolution)] @base))))
  (module body: (body_statement
     (call !receiver method: (identifier) @_mixin arguments: (argument_list [(constant) (scope_resolution)] @base))))]
  (#any-of? @_mixin "include" "prepend"))
"""

# --------------------------------------------------------------------------- PHP
_PHP_EXTRA_TAGS = """
(namespace_definition name: (namespace_name) @name !body) @definition.package
(enum_declaration name: (name) @name) @definition.class
(const_declaration (const_element (name) @name)) @definition.constant
"""
_PHP_LOADS = "\n".join(
    f"({kind} (string (string_content) @module)) @import\n"
    f"({kind} (binary_expression right: (string (string_content) @module))) @import"  # __DIR__ . '/x.php'
    for kind in ("require_expression", "require_once_expression", "include_expression", "include_once_expression")
)
_PHP_IMPORTS = f"""
(namespace_use_declaration (namespace_use_clause [
  (qualified_name prefix: (namespace_name) @module (name) @name)
  (name) @module] !alias)) @import
(namespace_use_declaration (namespace_use_clause
  (qualified_name prefix: (namespace_name) @module (name) @name) alias: (name) @alias)) @import
(namespace_use_declaration (namespace_name) @module
  body: (namespace_use_group (namespace_use_clause . (name) @name !alias))) @import
(namespace_use_declaration (namespace_name) @module
  body: (namespace_use_group (namespace_use_clause . (name) @name alias: (name) @alias))) @import
{_PHP_LOADS}
"""
_PHP_INHERITS = """
(base_clause [(name) (qualified_name)] @base)
(class_interface_clause [(name) (qualified_name)] @base)
(declaration_list (use_declaration [(name) (qualified_name)] @base))
"""

# --------------------------------------------------------------------------- Kotlin
# No tags file ships with tree-sitter-kotlin: these are cogd's own patterns.
_KOTLIN_TAGS = """
(package_header (qualified_identifier) @name) @definition.package
(class_declaration name: (identifier) @name) @definition.class
(class_declaration "interface" name: (identifier) @name) @definition.interface
(class_declaration name: (identifier) @name (enum_class_body)) @definition.enum
(object_declaration name: (identifier) @name) @definition.object
(companion_object name: (identifier) @name) @definition.object
(type_alias type: (identifier) @name) @definition.type
(function_declaration name: (identifier) @name) @definition.function
((property_declaration (modifiers (property_modifier) @_const) (variable_declaration (identifier) @name))
  @definition.constant (#eq? @_const "const"))
"""
_KOTLIN_IMPORTS = """
(import (qualified_identifier) @module . (identifier)? @alias .) @import
"""
_KOTLIN_INHERITS = """
(delegation_specifier [
  (user_type) @base
  (constructor_invocation (user_type) @base)
  (explicit_delegation (user_type) @base)])
"""

# --------------------------------------------------------------------------- Bash
# No tags file ships with tree-sitter-bash: these are cogd's own patterns.
_BASH_TAGS = """
(function_definition name: (word) @name) @definition.function
(declaration_command "readonly" (variable_assignment name: (variable_name) @name)) @definition.constant
((declaration_command (word) @_flag (variable_assignment name: (variable_name) @name)) @definition.constant
  (#match? @_flag "^-[a-zA-Z]*r"))
"""
_BASH_SOURCED = "[(word) (string) (raw_string) (concatenation)]"
_BASH_IMPORTS = f"""
((command name: (command_name (word) @_source) . argument: {_BASH_SOURCED} @module) @import
  (#any-of? @_source "source" "."))
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
        LanguageSpec("go", (".go",), "tree_sitter_go", "language", ("tree_sitter_go",), _GO_EXTRA_TAGS,
                     imports=_GO_IMPORTS, inherits=_GO_INHERITS),
        LanguageSpec("rust", (".rs",), "tree_sitter_rust", "language", ("tree_sitter_rust",), _RUST_EXTRA_TAGS,
                     imports=_RUST_IMPORTS, inherits=_RUST_INHERITS),
        LanguageSpec("java", (".java",), "tree_sitter_java", "language", ("tree_sitter_java",), _JAVA_EXTRA_TAGS,
                     imports=_JAVA_IMPORTS, inherits=_JAVA_INHERITS),
        LanguageSpec("c", (".c", ".h"), "tree_sitter_c", "language", ("tree_sitter_c",), _C_EXTRA_TAGS,
                     imports=_C_IMPORTS),
        LanguageSpec("cpp", (".cpp", ".cc", ".cxx", ".hpp", ".hh", ".hxx"), "tree_sitter_cpp", "language",
                     ("tree_sitter_cpp",), _CPP_EXTRA_TAGS, imports=_C_IMPORTS, inherits=_CPP_INHERITS),
        LanguageSpec("csharp", (".cs",), "tree_sitter_c_sharp", "language", ("tree_sitter_c_sharp",),
                     _CSHARP_EXTRA_TAGS, imports=_CSHARP_IMPORTS, inherits=_CSHARP_INHERITS),
        LanguageSpec("ruby", (".rb",), "tree_sitter_ruby", "language", ("tree_sitter_ruby",), _RUBY_EXTRA_TAGS,
                     imports=_RUBY_IMPORTS, inherits=_RUBY_INHERITS),
        LanguageSpec("php", (".php",), "tree_sitter_php", "language_php", ("tree_sitter_php",), _PHP_EXTRA_TAGS,
                     imports=_PHP_IMPORTS, inherits=_PHP_INHERITS),
        LanguageSpec("kotlin", (".kt", ".kts"), "tree_sitter_kotlin", "language", (), _KOTLIN_TAGS,
                     imports=_KOTLIN_IMPORTS, inherits=_KOTLIN_INHERITS),
        LanguageSpec("bash", (".sh", ".bash"), "tree_sitter_bash", "language", (), _BASH_TAGS,
                     imports=_BASH_IMPORTS),
    )
}

_BY_EXTENSION = {ext: spec.name for spec in LANGUAGES.values() for ext in spec.extensions}


def language_for_path(path: str) -> str | None:
    """Return the language name for a repository-relative POSIX path, or None.

    The extension is ``PurePosixPath(path).suffix`` (a name's last dot, not
    its first character), found with string methods: every refresh asks this
    of every file in the tree.
    """
    name = path[path.rfind("/") + 1:]
    dot = name.rfind(".")
    if dot <= 0 or dot == len(name) - 1:
        return None
    return _BY_EXTENSION.get(name[dot:].lower())


def _tags_source(module_name: str) -> str:
    package = Path(importlib.import_module(module_name).__file__).parent
    # Most wheels ship queries/ inside the package; tree-sitter-c-sharp ships it
    # in a sibling folder spelled with a hyphen (tree_sitter_c-sharp/queries).
    for folder in (package, *sorted(package.parent.glob(module_name.replace("_", "[_-]")))):
        tags = folder / "queries" / "tags.scm"
        if tags.is_file():
            return tags.read_text(encoding="utf-8")
    raise FileNotFoundError(f"no queries/tags.scm for {module_name}")


# ---------------------------------------------------------------- loading and checking
#
# A grammar wheel that does not import, or a query that does not compile (a
# node type the installed grammar does not have, a typo in an override), must
# cost that language only. So each language is loaded and each of its queries
# compiled once per process, on its own (:func:`check`); a failure disables
# the language — its files are indexed by path only, with status
# ``language_disabled`` — and is reported once (a warning, the daemon's status,
# ``cogd doctor``), never as one traceback per file.

QUERY_KINDS = ("tags", "imports", "inherits")
OVERRIDE_DIR = "queries"  # under .cogd/: <language>/<kind>.scm replaces that query
OVERRIDE_MAX_BYTES = 1 << 20

log = logging.getLogger("cogd.languages")


class LanguageUnavailable(Exception):
    """A language is disabled in this process: its grammar did not load or a query did not compile.

    ``language``: the language name; ``problem``: the status line text
    (``tags query does not compile: …``).
    """

    def __init__(self, language: str, problem: str):
        super().__init__(f"{language}: {problem}")
        self.language = language
        self.problem = problem


@dataclass(frozen=True)
class LanguageState:
    """The outcome of :func:`check` for one language.

    ``problem``: None when usable, else why not (``grammar does not load: …``,
    ``imports query does not compile: …``; several separated by ``; ``).
    ``digest``: 16 hex digits identifying the grammar and query texts in use
    (or the problem), so an index can tell when a language's extraction changed.
    ``overrides``: the override files in use (paths relative to the root).
    """

    name: str
    problem: str | None
    digest: str
    overrides: tuple[str, ...] = ()
    language: tree_sitter.Language | None = None
    queries: tuple[tree_sitter.Query | None, ...] = ()  # in QUERY_KINDS order; None = no such query
    combined: tree_sitter.Query | None = None  # every query of QUERY_KINDS in one (see Grammar.run_all)
    reads_text: bool = True  # a query may read node text (see query_reads_text)


def query_reads_text(texts: list[str]) -> bool:
    """Whether queries with these source ``texts`` may read the text of the nodes they match.

    Text predicates (``#eq?``, ``#match?``, ``#any-of?`` …) are the only part of a query that
    reads the source; they are all written with a ``#``, so a query without any ``#`` (in a
    predicate, a string or a comment alike: the answer errs towards True) reads none. Why it
    matters: a tree parsed from a read callback answers every text read by calling it again
    (:func:`cogd.index.indexer.parse_with_deadline`), which only such a query would do.
    """
    return any("#" in text for text in texts)


_settings: dict = {"root": None, "overrides": {}}  # the configured root and its overrides, read at configure()
_compiled: dict[tuple, LanguageState] = {}  # (name, overrides) → state: each distinct query set compiled once
_by_root: dict[str | None, dict[str, LanguageState]] = {}  # root → name → state: what each root has checked
_state_lock = threading.Lock()
_local = threading.local()


def configure(root: str | os.PathLike[str] | None, overrides: dict[str, "Overrides"] | None = None) -> dict:
    """Use the query overrides of repository ``root`` (``.cogd/queries/``) in this process.

    None: the shipped queries only (the default). The override files are read
    here, once: ``overrides`` (language → :data:`Overrides`, as this function
    returns) hands a snapshot already read to another process, so the parse
    workers compile exactly what the daemon checked even if a file changes
    meanwhile (an edit takes effect when the daemon restarts). Configuring the
    root already configured keeps its snapshot. Returns the snapshot in use.
    Called by the index worker (before it starts the parse pool), by each
    parse worker process when it starts, and by in-process indexing.
    """
    path = Path(root) if root is not None else None
    if overrides is None and path is not None and path == _settings["root"]:
        return _settings["overrides"]
    if overrides is None:
        overrides = {name: found for name in LANGUAGES if (found := _overrides(name, path))}
    with _state_lock:
        _settings["root"], _settings["overrides"] = path, overrides
        _by_root.pop(str(path) if path is not None else None, None)  # checked again with this snapshot
    return overrides


def _read_override(root: Path, name: str, kind: str) -> tuple[str, str] | None:
    """(text, path relative to root) of ``.cogd/queries/<name>/<kind>.scm``, or None when absent.

    Read through the work tree boundary (:func:`cogd.index.boundary.read_tree_file`)
    with no symlink allowed anywhere on the path: the override must be a
    regular file of the repository, at most OVERRIDE_MAX_BYTES, UTF-8. Raises
    ValueError otherwise.
    """
    rel = f"{COGD_DIR}/{OVERRIDE_DIR}/{name}/{kind}.scm"
    try:
        data = read_tree_file(root, rel, OVERRIDE_MAX_BYTES + 1, follow_inside=False)
    except FileNotFoundError:
        return None
    except OutsideTree:
        raise ValueError(f"{rel} is refused: a symlink is on its path (an override must be a regular file)") from None
    except OSError as exc:
        raise ValueError(f"{rel} is unreadable: {exc.strerror or exc}") from None
    if len(data) > OVERRIDE_MAX_BYTES:
        raise ValueError(f"{rel} is larger than {OVERRIDE_MAX_BYTES} bytes")
    try:
        return data.decode("utf-8"), rel
    except UnicodeDecodeError as exc:
        raise ValueError(f"{rel} is not UTF-8: {exc}") from None


Overrides = dict  # kind → (text, path relative to the root), or kind → the reason it is unusable (str)


def _overrides(name: str, root: Path | None) -> Overrides:
    """The override files of language ``name`` under ``root`` (see :func:`_read_override`)."""
    found: Overrides = {}
    if root is None:
        return found
    for kind in QUERY_KINDS:
        try:
            override = _read_override(root, name, kind)
        except (OSError, ValueError) as exc:
            found[kind] = str(exc)
            continue
        if override is not None:
            found[kind] = override
    return found


def _query_parts(spec: LanguageSpec, kind: str, overrides: Overrides) -> list[tuple[str, str]]:
    """The texts that make up query ``kind`` of ``spec``, as (label, text) pairs.

    An override replaces the whole query (shipped tags file and cogd's own
    patterns). Raises ValueError for an unusable override, OSError for a
    missing shipped tags file.
    """
    override = overrides.get(kind)
    if isinstance(override, str):
        raise ValueError(override)
    if override is not None:
        return [(override[1], override[0])]
    if kind == "tags":
        parts = [(f"{m}/queries/tags.scm", _tags_source(m)) for m in spec.tags_from]
        if spec.extra_tags:
            parts.append((f"cogd's {spec.name} tags patterns", spec.extra_tags))
        return parts
    return [(f"cogd's {spec.name} {kind} query", getattr(spec, kind))]


_ROW = re.compile(r"\bat row (\d+), column (\d+)")


def _where(message: str, parts: list[tuple[str, str]]) -> str:
    """``message`` with tree-sitter's position (0-based row and column of the joined
    text) rewritten as a 1-based line and column of the part it falls in."""
    found = _ROW.search(message)
    if found is None:
        return message
    row, column = int(found.group(1)), int(found.group(2))
    for label, text in parts:
        lines = text.count("\n") + 1
        if row < lines:
            return f"{message[:found.start()]}at line {row + 1}, column {column + 1} of {label}{message[found.end():]}"
        row -= lines
    return message


def _compile(language: tree_sitter.Language, kind: str, parts: list[tuple[str, str]]) -> tree_sitter.Query | None:
    """Compile the joined ``parts``; None for an empty query. Raises LanguageUnavailable's problem text as ValueError."""
    text = "\n".join(t for _label, t in parts)
    if not text.strip():
        return None
    try:
        return tree_sitter.Query(language, text)
    except (tree_sitter.QueryError, ValueError) as exc:  # QueryError is a ValueError
        raise ValueError(f"{kind} query does not compile: {_where(str(exc), parts)}") from None


def _check(name: str, overrides: Overrides) -> LanguageState:
    spec = LANGUAGES[name]
    digest = hashlib.sha256(spec.module.encode())
    try:
        pointer = getattr(importlib.import_module(spec.module), spec.function)()
        language = tree_sitter.Language(pointer)
    except Exception as exc:  # a broken wheel: ImportError, AttributeError, a bad pointer (ValueError)
        problem = f"grammar does not load: {exc.__class__.__name__}: {exc}"
        return LanguageState(name, problem, hashlib.sha256(problem.encode()).hexdigest()[:16])
    digest.update(str(getattr(language, "semantic_version", None) or language.abi_version).encode())
    problems: list[str] = []
    queries: list[tree_sitter.Query | None] = []
    texts: list[str] = []
    used = tuple(o[1] for o in overrides.values() if isinstance(o, tuple))
    for kind in QUERY_KINDS:
        try:  # each query on its own: one error report per broken query
            parts = _query_parts(spec, kind, overrides)
            for _label, text in parts:
                digest.update(b"\0" + text.encode())
            queries.append(_compile(language, kind, parts))
            texts.append("\n".join(t for _label, t in parts) if queries[-1] is not None else "")
        except (OSError, ValueError) as exc:  # an unreadable tags file or override, a query error
            problems.append(str(exc) if str(exc).startswith(kind) else f"{kind} query unusable: {exc}")
            queries.append(None)
    if queries[0] is None and not problems:
        problems.append("tags query is empty")
    if problems:
        problem = "; ".join(problems)
        return LanguageState(name, problem, hashlib.sha256(problem.encode()).hexdigest()[:16], used)
    return LanguageState(name, None, digest.hexdigest()[:16], used, language, tuple(queries),
                         _combine(language, queries, texts), query_reads_text(texts))


def _combine(language: tree_sitter.Language, queries: list[tree_sitter.Query | None],
             texts: list[str]) -> tree_sitter.Query | None:
    """The texts of ``queries`` (each compiled on its own) as one query, or None if it does not compile.

    One query walks the tree once where three walk it three times (the walk,
    not the matches, is most of a query's cost); :meth:`Grammar.run_all` tells
    the patterns apart by index. Patterns keep their order, so the matches of
    each part come in the order its own query gives them (checked on the
    standard library by ``tests/test_index_parallel.py``).
    """
    present = [text for query, text in zip(queries, texts) if query is not None]
    if len(present) < 2:
        return None
    try:
        combined = tree_sitter.Query(language, "\n".join(present))
    except (tree_sitter.QueryError, ValueError):  # each part compiles: not expected, but the parts still work
        return None
    if combined.pattern_count != sum(q.pattern_count for q in queries if q is not None):
        return None
    return combined


def check(name: str) -> LanguageState:
    """Load language ``name``'s grammar and compile each of its queries, once per process.

    Uses the overrides of the root given to :func:`configure`. The result is
    remembered per root (so status and doctor can list it) and shared between
    roots with the same override texts (a test suite's many repositories
    compile each language once). A failure is logged once (a warning): the
    language stays disabled in this process. Raises KeyError for an unknown
    language.
    """
    root = _settings["root"]
    checked_here = _by_root.get(str(root) if root is not None else None)
    state = checked_here.get(name) if checked_here is not None else None
    if state is not None:
        return state
    with _state_lock:  # two threads asking at once compile once
        checked_here = _by_root.setdefault(str(root) if root is not None else None, {})
        state = checked_here.get(name)
        if state is None:
            overrides = _settings["overrides"].get(name, {})
            key = (name, tuple(sorted(overrides.items())))
            state = _compiled.get(key)
            if state is None:
                state = _check(name, overrides)
                if state.problem:
                    log.warning("%s disabled (its files are indexed by path only): %s", name, state.problem)
                _compiled[key] = state
            checked_here[name] = state
    return state


def _configured_states() -> list[LanguageState]:
    root = _settings["root"]
    checked_here = _by_root.get(str(root) if root is not None else None) or {}
    return [state for _name, state in sorted(list(checked_here.items()))]


def checked() -> list[str]:
    """The languages checked so far in this process (for the configured root), sorted."""
    return [state.name for state in _configured_states()]


def problems() -> dict[str, str]:
    """Languages checked in this process (for the configured root) that are disabled: name → problem."""
    return {state.name: state.problem for state in _configured_states() if state.problem}


@dataclass
class Grammar:
    """A ready parser and compiled queries for one language.

    ``tree_sitter.Parser`` is not safe to share between threads, so grammars
    are cached per thread (see :func:`grammar`); the compiled queries are
    shared (compiled once per process by :func:`check`).
    """

    language: tree_sitter.Language
    parser: tree_sitter.Parser
    tags: tree_sitter.Query
    imports: tree_sitter.Query | None = None
    inherits: tree_sitter.Query | None = None
    combined: tree_sitter.Query | None = None  # tags, imports and inherits as one query
    reads_text: bool = True  # a query may read node text (LanguageState.reads_text)

    def run_all(self, node: tree_sitter.Node) -> tuple[list, list | None, list | None]:
        """Matches of ``tags``, ``imports`` and ``inherits`` under ``node`` (None for a query the language lacks).

        One walk of the tree with :attr:`combined` when there is one, split by
        pattern index (each part's indices renumbered from 0, as its own query
        numbers them); else each query on its own.
        """
        parts = [self.tags, self.imports, self.inherits]
        if self.combined is None:
            return tuple(run_query(q, node) if q is not None else None for q in parts)  # type: ignore[return-value]
        tags: list = []
        imports: list | None = [] if self.imports is not None else None
        inherits: list | None = [] if self.inherits is not None else None
        first_import = self.tags.pattern_count  # the combined query's patterns: tags, imports, inherits
        first_inherit = first_import + (self.imports.pattern_count if self.imports is not None else 0)
        add_tag = tags.append
        for match in run_query(self.combined, node):
            pattern = match[0]
            if pattern < first_import:  # most matches: the tags query's numbers are the combined ones
                add_tag(match)
            elif pattern < first_inherit:
                imports.append((pattern - first_import, match[1]))  # type: ignore[union-attr]
            else:
                inherits.append((pattern - first_inherit, match[1]))  # type: ignore[union-attr]
        return tags, imports, inherits


def grammar(name: str) -> Grammar:
    """Return this thread's :class:`Grammar` for language ``name``.

    Raises KeyError for an unknown language and :class:`LanguageUnavailable`
    when its grammar does not load or a query does not compile (see :func:`check`).
    """
    state = check(name)
    if state.problem:
        raise LanguageUnavailable(name, state.problem)
    cache: dict[tuple[str, str], Grammar] = getattr(_local, "cache", None) or {}
    _local.cache = cache
    key = (state.digest, name)
    if key not in cache:
        tags, imports, inherits = state.queries
        cache[key] = Grammar(state.language, tree_sitter.Parser(state.language), tags, imports, inherits,
                             state.combined, state.reads_text)
    return cache[key]
