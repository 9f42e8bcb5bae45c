"""Turn stored references into ``imports``, ``calls`` and ``inherits`` edges.

Resolution is by name, the way a reader without a type checker would do it,
and each edge keeps how it was found (``edges.resolution``) so ranking can
trust a same-scope call more than a repository-wide guess:

- ``imports``: ``file`` when the module is a file of the repository (Python
  dotted and relative modules, JS/TS relative specifiers, Go packages under the
  ``go.mod`` module, Rust ``crate::``/``super::``/``mod``, C/C++ quoted
  includes), else ``external`` with the module name as written as ``dst``.
- ``calls``, in order: ``scope`` (a member of the caller's own class, for
  ``self.f()``/``this.f()``/a bare call in languages with implicit ``this``),
  ``file`` (a definition in the same file), ``import`` (a name the file
  imports, or ``alias.f()`` on an imported module), ``global`` (the only
  definition of that name in the repository). Anything else stays unresolved.
- ``inherits``: ``file``, ``import`` or ``global`` as for calls, restricted to
  class-like entities; else ``external`` with the base as written.

Incremental use: after a save that keeps the file list, the saved files' references
and, elsewhere, only the references to a name whose definitions changed are resolved
again, and only the edges that differ are written (:func:`resolve_saved`).
"""

from __future__ import annotations

import posixpath
import re
import sqlite3
import threading
from collections import defaultdict
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager

from cogd.index import store
from cogd.index.boundary import read_tree_file

SELF_LIKE = {"self", "cls", "this", "super", "super()", "@", "base", "Self", "static"}
# Languages where a bare call inside a method may mean another method of the class.
IMPLICIT_THIS = {"java", "c_sharp", "cpp", "kotlin", "ruby", "php", "go", "rust", "c"}
CALLABLE = ("function", "method", "class")
CLASS_LIKE = ("class",)
JS_EXTENSIONS = (".ts", ".tsx", ".js", ".jsx", ".mjs", ".cjs", ".d.ts")
EDGE_BATCH = 20_000  # reference edges written per statement
CROWDED_NAME = 16  # a name with more entities than this is read only in the files a save's references look in
GO_MOD_MAX_BYTES = 1 << 20  # the module line comes first; a bigger go.mod is read up to here
# Languages that can call each other's definitions by name; others resolve
# only within their own language.
FAMILY = {"typescript": "js", "tsx": "js", "javascript": "js", "c": "c", "cpp": "c"}


class Resolver:
    """Resolves the references of a set of files against the current index.

    Loads only what the references need (entities by the names they mention,
    members of the classes involved), so resolving one edited file costs a few
    queries, and a full pass costs one scan per table.
    """

    def __init__(self, conn: sqlite3.Connection, root: str, files: dict[str, str] | None = None):
        """``files``: the index's ``{path: language}`` (:func:`cogd.index.store.file_languages`) when
        the caller holds it current; None reads it. Never mutated."""
        self.conn = conn
        self.root = root
        self.files = store.file_languages(conn) if files is None else files
        self._layout = _layout_for(root, self.files)
        self._by_name: dict[str, list[tuple[str, str, str, str | None]]] = {}
        self._members: dict[str, dict[str, str]] = {}
        self._parent: dict[str, tuple[str, str | None]] = {}
        self._import_cache: dict[tuple[str, str, str], list[str]] = {}
        self._dirs: dict[str, list[str]] | None = None
        self._stems: dict[str, list[str]] | None = None
        self._unique_cache: dict[tuple, str | None] = {}
        self._go_module: str | None | bool = False
        self._families: dict[str, str] = {}
        self._refs: dict[str, list[tuple[str, str, str, str, str]]] | None = None  # preloaded, by path
        # preloaded: name → file → (place in the name's list, id, kind, parent), in rowid order
        self._by_file: dict[str, dict[str, list[tuple[int, str, str, str | None]]]] | None = None
        # family → the tree's languages in it: derived from the file list alone, so shared through the layout
        self._family_languages: dict[str, list[str]] = self._layout.setdefault("family_languages", {})
        self._partial: dict[str, set[str]] = {}  # crowded name → the files its definitions were read in
        self._crowded_rows: dict[str, list[tuple]] = {}  # crowded name → (rowid, id, kind, path, parent, name)

    def preload(self, tables: store.ResolutionTables | None = None) -> None:
        """Read every entity and reference once, for a pass over every file.

        Fills the name table for every name a call or base mentions (as a
        lazy pass loads: a name only written as a receiver, ``Reg`` of
        ``Reg.get()``, is not looked up), each entity's kind and parent and
        each container's members, from one scan of ``entities`` in rowid order,
        and the stored references from one scan of ``refs``, so the pass makes
        no query per file or per entity. What it loads equals what the lazy
        lookups would read: per name, definitions in rowid order (as the name
        index returns them); members last defined first, ties in rowid order.
        ``tables``: the same two tables as the writer kept them while writing them
        (:class:`cogd.index.store.ResolutionTables`, used only when ``valid``): nothing read,
        and they are consumed: the entity rows are emptied once loaded here, and the references
        are handed out by :meth:`resolve_file` file by file (a full pass's memory then shrinks
        as its edges grow, instead of holding both).
        """
        children: dict[str, list[tuple[int, str, str]]] = defaultdict(list)
        if tables is not None and not tables.valid:
            tables = None
        refs = store.all_refs(self.conn) if tables is None else tables.refs
        # The names of store.referenced_names, from the rows just read (a second scan cost as much).
        referenced = {name for rows in refs.values() for _src, kind, name, _q, _a in rows if kind != "imports"}
        by_name: dict[str, list[tuple[str, str, str, str | None]]] = {name: [] for name in referenced}
        # The same definitions by name and then by file, each with its place in by_name's list
        # (see _in_files): most lookups ask for one file among a name's hundreds of definitions.
        by_file: dict[str, dict[str, list[tuple[int, str, str, str | None]]]] = {name: {} for name in referenced}
        entities = store.entity_table(self.conn) if tables is None else tables.entities
        if tables is not None:
            tables.entities = []  # consumed (see above): the rows are held only by this loop
        for entity_id, kind, path, parent, name, start_line in entities:
            self._parent[entity_id] = (kind, parent)
            if kind != "file" and name in referenced:
                listed = by_name[name]
                by_file[name].setdefault(path, []).append((len(listed), entity_id, kind, parent))
                listed.append((entity_id, kind, path, parent))
            if parent is not None:
                children[parent].append((start_line, entity_id, name))
        del entities  # the kept rows go now, before the members are built
        self._by_name, self._by_file = by_name, by_file
        for parent, rows in children.items():
            rows.sort(key=lambda row: -row[0])  # stable: ties stay in rowid order
            # Last defined first, put in a dict: the first definition of a repeated name wins.
            self._members[parent] = {name: entity_id for _line, entity_id, name in rows}
        self._refs = refs

    # ---- name tables ------------------------------------------------------
    def load_names(self, names: set[str], files: set[str] | None = None) -> None:
        """Read the definitions of ``names`` (entity names) into the name table, once per name.

        With ``files`` (the files a reference of the file being resolved can look in: the file
        itself and what it imports), a crowded name (more than CROWDED_NAME entities, such as
        ``__init__`` or ``get`` on a large tree) is read only in those files, more of them as
        later files need; whether it has a single definition is asked of the index when a
        reference gets that far (:meth:`_unique`). The answers are the same; a save then reads
        a few rows per such name instead of thousands.
        """
        wanted = [n for n in names if n not in self._by_name or n in self._partial]
        if files is None:
            fresh = sorted(n for n in wanted if n not in self._partial)
            crowded: list[str] = []
        else:
            counts = store.name_counts(self.conn, [n for n in wanted if n not in self._partial])
            fresh = sorted(n for n in wanted if n not in self._partial and counts.get(n, 0) <= CROWDED_NAME)
            crowded = sorted(n for n in wanted if n not in fresh)
        for name in fresh:
            self._by_name[name] = []
        for entity_id, kind, path, parent, name in store.entities_named(self.conn, fresh):
            self._by_name[name].append((entity_id, kind, path, parent))
            self._parent[entity_id] = (kind, parent)
        if not crowded or files is None:
            return
        need = {f for name in crowded for f in files - self._partial.get(name, set())}
        if not need:
            return
        rows = store.entities_named_in_paths(self.conn, crowded, sorted(need))
        for name in crowded:
            seen = self._partial.setdefault(name, set())
            listing = self._crowded_rows.setdefault(name, [])
            listing.extend(r for r in rows if r[5] == name and r[3] not in seen)
            listing.sort()  # rowid order, as the name index returns every definition
            seen |= need
            self._by_name[name] = [(entity_id, kind, path, parent) for _rowid, entity_id, kind, path, parent, _n in listing]
        for _rowid, entity_id, kind, _path, parent, _name in rows:
            self._parent[entity_id] = (kind, parent)

    def _load_parents(self, path: str) -> None:
        """Kind and parent of every entity of ``path`` in one query (the callers of its references and
        the classes around them are its own entities), where :meth:`_kind_parent` would ask one id
        at a time. An id it does not find is still asked for alone."""
        for entity_id, kind, parent in store.entities_in_paths(self.conn, [path], ("id", "kind", "parent_id")):
            self._parent.setdefault(entity_id, (kind, parent))

    def _members_of(self, container: str) -> dict[str, str]:
        if self._refs is not None:  # preloaded: a container with no members has none
            return self._members.get(container, {})
        if container not in self._members:
            self._members[container] = {name: entity_id for entity_id, name in store.members(self.conn, container)}
        return self._members[container]

    def _kind_parent(self, entity_id: str) -> tuple[str, str | None] | None:
        if entity_id not in self._parent:
            if self._refs is not None:  # preloaded: an id not in the table is no entity
                return ("file", None)
            row = store.entities_by_ids(self.conn, [entity_id], ("kind", "parent_id")).get(entity_id)
            self._parent[entity_id] = (row[0], row[1]) if row else ("file", None)
        return self._parent[entity_id]

    def _enclosing_class(self, entity_id: str) -> str | None:
        current: str | None = entity_id
        for _ in range(20):
            if current is None:
                return None
            kind, parent = self._kind_parent(current)
            if kind in CLASS_LIKE:
                return current
            current = parent
        return None

    # ---- imports ------------------------------------------------------------
    def _all_dirs(self) -> dict[str, list[str]]:
        if self._dirs is None:
            self._dirs = self._layout.get("dirs")
        if self._dirs is None:
            self._dirs = defaultdict(list)
            for path in self.files:
                self._dirs[posixpath.dirname(path)].append(path)
            self._layout["dirs"] = self._dirs
        return self._dirs

    def _existing(self, candidates: Iterable[str]) -> list[str]:
        for candidate in candidates:
            candidate = posixpath.normpath(candidate)
            if candidate in self.files:
                return [candidate]
        return []

    def _python_stems(self) -> dict[str, list[str]]:
        """Module stems (``pkg/mod`` for ``pkg/mod.py`` and ``pkg/mod/__init__.py``) by last component."""
        if self._stems is None:
            self._stems = self._layout.get("stems")
        if self._stems is None:
            self._stems = defaultdict(list)
            for path, language in self.files.items():
                if language != "python":
                    continue
                stem = path[: -len("/__init__.py")] if path.endswith("/__init__.py") else posixpath.splitext(path)[0]
                self._stems[posixpath.basename(stem)].append(stem)
            self._layout["stems"] = self._stems
        return self._stems

    def _python_module(self, path: str, module: str, symbol: str) -> list[str]:
        level = len(module) - len(module.lstrip("."))
        dotted = module[level:]
        if level:
            base = posixpath.dirname(path)
            for _ in range(level - 1):
                base = posixpath.dirname(base)
            heads = [posixpath.join(base, *dotted.split(".")) if dotted else base]
        else:
            stem = dotted.replace(".", "/")
            # The package may sit under a source root (src/pkg, lib/pkg): match by suffix.
            tail = stem.rsplit("/", 1)[-1]
            heads = [stem] + sorted(
                (s for s in self._python_stems().get(tail, []) if s.endswith("/" + stem)), key=len
            )
        for head in heads:
            if symbol:  # `from pkg import module` names a submodule first
                found = self._existing([f"{head}/{symbol}.py", f"{head}/{symbol}/__init__.py"])
                if found:
                    return found
            found = self._existing([f"{head}.py", f"{head}/__init__.py", f"{head}.pyi"])
            if found:
                return found
        return []

    def _js_module(self, path: str, module: str) -> list[str]:
        if not module.startswith("."):
            return []
        base = posixpath.normpath(posixpath.join(posixpath.dirname(path), module))
        candidates = [base] + [base + ext for ext in JS_EXTENSIONS]
        candidates += [f"{base}/index{ext}" for ext in JS_EXTENSIONS]
        if base.endswith(".js"):  # TypeScript's ESM style: import "./x.js" means x.ts
            candidates += [base[:-3] + ext for ext in (".ts", ".tsx")]
        return self._existing(candidates)

    def _go_package(self, module: str) -> list[str]:
        if self._go_module is False:
            self._go_module = None
            try:  # never outside the work tree (go.mod may be a symlink)
                text = read_tree_file(self.root, "go.mod", GO_MOD_MAX_BYTES).decode("utf-8", errors="replace")
            except OSError:
                text = ""
            match = re.search(r"^module\s+(\S+)", text, re.M)
            self._go_module = match.group(1) if match else None
        prefix = self._go_module
        if not prefix or not (module == prefix or module.startswith(prefix + "/")):
            return []
        directory = module[len(prefix) :].lstrip("/")
        return sorted(p for p in self._all_dirs().get(directory, []) if p.endswith(".go") and not p.endswith("_test.go"))

    def _rust_module(self, path: str, module: str) -> list[str]:
        parts = [p for p in re.split(r"::", module.replace("{", "").split("{")[0]) if p and p != "*"]
        if not parts:
            return []
        here = posixpath.dirname(path)
        if parts[0] == "crate":
            crate_root = path.split("/src/")[0] + "/src" if "/src/" in path else ("src" if path.startswith("src/") else here)
            base, rest = crate_root, parts[1:]
        elif parts[0] == "super":
            base, rest = posixpath.dirname(here), parts[1:]
        elif parts[0] == "self":
            base, rest = here, parts[1:]
        elif len(parts) == 1:  # `mod x;`
            stem = posixpath.splitext(posixpath.basename(path))[0]
            base = here if stem in ("mod", "lib", "main") else posixpath.join(here, stem)
            rest = parts
        else:
            return []
        for n in range(len(rest), 0, -1):  # the longest prefix that is a file
            stem = posixpath.join(base, *rest[:n])
            found = self._existing([stem + ".rs", stem + "/mod.rs"])
            if found:
                return found
        return []

    def _c_include(self, path: str, module: str) -> list[str]:
        here = posixpath.dirname(path)
        candidates = [posixpath.join(here, module), module]
        candidates += [posixpath.join(d, module) for d in ("include", "src")]
        return self._existing(candidates)

    def import_targets(self, path: str, module: str, symbol: str = "") -> list[str]:
        """Repository files an import statement in ``path`` refers to ([] if none)."""
        key = (path, module, symbol)
        if key not in self._import_cache:
            language = self.files.get(path, "")
            if language == "python":
                targets = self._python_module(path, module, symbol)
            elif language in ("javascript", "typescript", "tsx"):
                targets = self._js_module(path, module)
            elif language == "go":
                targets = self._go_package(module)
            elif language == "rust":
                targets = self._rust_module(path, module)
            elif language in ("c", "cpp"):
                targets = self._c_include(path, module)
            else:
                targets = self._existing([module]) if "/" in module else []
            self._import_cache[key] = [t for t in targets if t != path]
        return self._import_cache[key]

    # ---- resolution -----------------------------------------------------------
    def _in_files(self, name: str, files: list[str], kinds: tuple[str, ...]) -> str | None:
        """The definition of ``name`` of one of ``kinds`` in one of ``files``: the first, in rowid
        order, defined at the top level of its file, else the first; None when there is none."""
        if self._by_file is not None:
            return self._in_files_preloaded(name, files, kinds)
        candidates = self._by_name.get(name)
        if not candidates:
            return None
        best = None
        if len(files) == 1:  # the caller's own file, most lookups: no set to build
            only = files[0]
            for entity_id, kind, path, parent in candidates:
                if path == only and kind in kinds:
                    if parent == path:  # top level beats nested
                        return entity_id
                    best = best or entity_id
            return best
        wanted = set(files)
        for entity_id, kind, path, parent in candidates:
            if path in wanted and kind in kinds:
                if parent == path:  # top level beats nested
                    return entity_id
                best = best or entity_id
        return best

    def _in_files_preloaded(self, name: str, files: list[str], kinds: tuple[str, ...]) -> str | None:
        """:meth:`_in_files` over the preloaded table by name and file: the same answer, found
        among the definitions in ``files`` only (their places in the name's list order them)."""
        in_file = self._by_file.get(name)
        if not in_file:
            return None
        top = best = None  # (place, entity id)
        for path in (files if len(files) == 1 else set(files)):
            for place, entity_id, kind, parent in in_file.get(path, ()):
                if kind not in kinds:
                    continue
                if parent == path:  # top level beats nested: the first of them in this file
                    if top is None or place < top[0]:
                        top = (place, entity_id)
                    break
                if best is None or place < best[0]:
                    best = (place, entity_id)
        if top is not None:
            return top[1]
        return best[1] if best is not None else None

    def _family(self, path: str) -> str:
        family = self._families.get(path)
        if family is None:
            language = self.files.get(path, "")
            family = self._families[path] = FAMILY.get(language, language)
        return family


    def _unique(self, name: str, kinds: tuple[str, ...], from_path: str) -> str | None:
        """The only definition named ``name`` in the caller's language family, if exactly one."""
        family = self._family(from_path)
        key = (name, kinds, family)
        if key not in self._unique_cache:
            if name in self._partial:  # only some of its definitions are loaded: ask the index for two
                languages = self._family_languages.get(family)
                if languages is None:
                    languages = self._family_languages[family] = sorted(
                        {language for language in self.files.values() if FAMILY.get(language, language) == family})
                matches = store.definitions_of(self.conn, name, kinds, languages, limit=2)
            else:
                matches = [e for e in self._by_name.get(name, []) if e[1] in kinds and self._family(e[2]) == family]
            self._unique_cache[key] = matches[0][0] if len(matches) == 1 else None
        return self._unique_cache[key]

    def _bindings(self, path: str, refs: list[tuple[str, str, str, str, str]],
                  edges: dict[tuple[str, str, str], str]) -> tuple[dict[str, list[str]], set[str], list[str]]:
        """What ``path``'s imports bind: ``(local name → target files, local names bound outside
        the repository, the imported files)``; the ``imports`` edges go into ``edges``."""
        language = self.files.get(path, "")
        bound: dict[str, list[str]] = {}
        external: set[str] = set()  # local names bound to modules outside the repository
        imported_files: list[str] = []
        for src, kind, name, symbol, alias in refs:
            if kind != "imports":
                continue
            targets = self.import_targets(path, name, symbol)
            if targets:
                for target in targets:
                    edges.setdefault((path, target, "imports"), "file")
                imported_files.extend(targets)
            else:
                edges.setdefault((path, name, "imports"), "external")
            # The local name the import binds: `import a.b` binds `a` in Python;
            # elsewhere the last component (`"pkg/x"` → x, `a::b::C` → C).
            parts = [p for p in re.split(r"::|[./]", name) if p]
            local = alias or symbol or (parts[0] if language == "python" and parts else parts[-1] if parts else "")
            if local and targets:
                bound.setdefault(local, []).extend(targets)
            elif local:
                external.add(local)
        return bound, external, imported_files

    def _resolve_refs(self, path: str, refs: list[tuple[str, str, str, str, str]], bound: dict[str, list[str]],
                      external: set[str], imported_files: list[str], edges: dict[tuple[str, str, str], str]) -> None:
        """The ``calls`` and ``inherits`` edges of ``refs`` (of ``path``) into ``edges``, in order
        (the first reference to make an edge names how it was found)."""
        language = self.files.get(path, "")
        for src, kind, name, qualifier, _alias in refs:
            if kind == "calls":
                target, how = self._resolve_call(path, language, src, name, qualifier, bound, imported_files, external)
                if target is not None and target != src:
                    edges.setdefault((src, target, "calls"), how)
            elif kind == "inherits":
                target = self._in_files(name, [path], CLASS_LIKE)
                how = "file"
                if target is None:
                    target, how = self._in_files(name, bound.get(name, []) + bound.get(qualifier.split(".")[0], []), CLASS_LIKE), "import"
                if target is None:
                    target, how = self._unique(name, CLASS_LIKE, path), "global"
                if target is None:
                    target, how = qualifier or name, "external"
                if target != src:
                    edges.setdefault((src, target, "inherits"), how)

    def resolve_file(self, path: str) -> list[tuple[str, str, str, str, str]]:
        """Edges (src, dst, kind, path, resolution) for the stored references of ``path``.

        After :meth:`preload`, the file's preloaded references are handed out once and dropped
        here (a full pass resolves each file once): a second call for the same path finds none.
        """
        refs = store.refs_of(self.conn, path) if self._refs is None else self._refs.pop(path, [])
        edges: dict[tuple[str, str, str], str] = {}
        bound, external, imported_files = self._bindings(path, refs, edges)
        if self._refs is None:
            self.load_names({name for _s, kind, name, _q, _a in refs if kind in ("calls", "inherits")},
                            {path, *imported_files})
            self._load_parents(path)
        self._resolve_refs(path, refs, bound, external, imported_files, edges)
        return [(s, d, k, path, how) for (s, d, k), how in edges.items()]

    def resolve_names(self, path: str, names: set[str]) -> int:
        """Re-resolve only the ``calls``/``inherits`` references of ``path`` to one of ``names``
        (whose definitions changed elsewhere) and replace the edges they made. Returns how many
        edge rows changed. No commit.

        Exact without re-resolving the rest: the target of such a reference is always an
        entity of the same name (a member, a definition in a file, the only one of its name)
        or, for a base class found nowhere, its name as written; so the stored edges such
        references made are the ones from their sources to an entity named in ``names``, to an
        entity gone since (it was named in ``names``), or to their written base — no other
        reference can have made the same edge.
        """
        refs = store.refs_of(self.conn, path)
        edges: dict[tuple[str, str, str], str] = {}
        bound, external, imported_files = self._bindings(path, refs, {})
        chosen = [r for r in refs if r[1] in ("calls", "inherits") and r[2] in names]
        if not chosen:
            return 0
        self.load_names({r[2] for r in chosen}, {path, *imported_files})
        self._load_parents(path)
        self._resolve_refs(path, chosen, bound, external, imported_files, edges)
        sources = sorted({r[0] for r in chosen})
        written_bases = {(r[0], r[3] or r[2]) for r in chosen if r[1] == "inherits"}
        stored = store.reference_edges_from(self.conn, path, sources)
        named = store.entity_name_of(self.conn, {dst for _s, dst, _k, _how in stored})
        made = set()
        for src, dst, kind, how in stored:
            name = named.get(dst)
            if (name in names or (name is None and how != "external")
                    or (kind == "inherits" and how == "external" and (src, dst) in written_bases)):
                made.add((src, dst, kind, path, how))
        new = [(s, d, k, path, how) for (s, d, k), how in edges.items()]
        gone = sorted(made - set(new))
        self.conn.executemany("DELETE FROM edges WHERE src = ? AND dst = ? AND kind = ?", [e[:3] for e in gone])
        fresh = [e for e in new if e not in made]
        store.write_reference_edges(self.conn, fresh)
        return len(gone) + len(fresh)

    def _resolve_call(
        self, path: str, language: str, src: str, name: str, qualifier: str,
        bound: dict[str, list[str]], imported_files: list[str], external: set[str],
    ) -> tuple[str | None, str]:
        head = qualifier.split(".")[0].split("::")[0] if qualifier else ""
        if qualifier in SELF_LIKE or (not qualifier and language in IMPLICIT_THIS):
            owner = self._enclosing_class(src)
            if owner is not None:
                member = self._members_of(owner).get(name)
                if member is not None:
                    return member, "scope"
        if not qualifier or qualifier in SELF_LIKE:
            target = self._in_files(name, [path], CALLABLE)
            if target is not None:
                return target, "file"
            if name in bound:
                target = self._in_files(name, bound[name], CALLABLE)
                if target is not None:
                    return target, "import"
        elif head in bound:  # module_alias.f() or imported_class.method()
            target = self._in_files(name, bound[head], CALLABLE)
            if target is not None:
                return target, "import"
        elif head in external:
            return None, ""  # os.replace(), json.dumps(): a library's function, not ours
        else:
            # Class.method() / Type::f() on a class defined in this file.
            owner = self._in_files(head, [path], CLASS_LIKE)
            if owner is not None:
                member = self._members_of(owner).get(name)
                if member is not None:
                    return member, "file"
        # The last resort, a unique name: on an unknown receiver (`sock.connect()`)
        # only a method can be meant; and library code never calls into tests,
        # scripts or examples, so those are not candidates for it.
        kinds = CALLABLE if not qualifier or qualifier in SELF_LIKE else ("method",)
        target = self._unique(name, kinds, path)
        if target is not None and _auxiliary(target) and not _auxiliary(path):
            return None, ""
        return (target, "global") if target is not None else (None, "")


_AUXILIARY = re.compile(
    r"(^|/)(tests?|testing|__tests__|spec|specs|examples?|samples?|demos?|docs?|benchmarks?|scripts?)/"
    r"|(^|/)test_[^/]*$|_test\.[a-z]+$|\.(test|spec)\.[jt]sx?$|(^|/)conftest\.py$"
)


_LAYOUTS: dict[str, tuple[dict[str, str], dict]] = {}  # root → (files and languages, derived tables)
_LAYOUTS_MAX = 8  # roots remembered (a test process indexes many)
_layouts_lock = threading.Lock()


def _layout_for(root: str, files: dict[str, str]) -> dict:
    """Tables derived from the file list alone (directories, Python module stems, the languages of
    each family), shared between resolvers.

    Kept per root while the file list (path → language) stays exactly the
    same, which is every save of a file already indexed: building the stems
    of a 2,000-file tree was a quarter of a one-file refresh. Any change to
    the list (compared whole) starts empty tables. The tables are never
    mutated once built.
    """
    with _layouts_lock:
        known = _LAYOUTS.get(root)
        if known is not None and (known[0] is files or known[0] == files):  # the caller's kept list: no compare
            return known[1]
        if len(_LAYOUTS) >= _LAYOUTS_MAX:
            _LAYOUTS.pop(next(iter(_LAYOUTS)))
        tables: dict = {}
        _LAYOUTS[root] = (files, tables)
        return tables


def _auxiliary(path_or_id: str) -> bool:
    """Code around a project (tests, scripts, examples, docs, benchmarks) rather than in it."""
    return bool(_AUXILIARY.search(path_or_id.split("::", 1)[0]))


def entity_names(conn: sqlite3.Connection, paths: Iterable[str]) -> set[tuple[str, str, str]]:
    """(name, id, kind) of every non-file entity defined in ``paths`` (a definition that changes
    kind, a function becoming a class, resolves differently as a base)."""
    return set(store.entities_in_paths(conn, sorted(set(paths)), ("name", "id", "kind")))


def resolve(conn: sqlite3.Connection, root: str, paths: Iterable[str] | None = None, *,
            beside: Callable[[], AbstractContextManager] | None = None,
            tables: store.ResolutionTables | None = None) -> int:
    """Recompute reference edges for ``paths`` (None = every file). Returns the edge count written.

    The files' previous ``imports``/``calls``/``inherits`` edges are replaced (for ``paths``,
    only those that differ are deleted and inserted); ``contains`` edges are untouched.
    Does not commit. ``beside`` (with ``paths`` None): a context manager factory entered while
    the index is read and the edges computed, before any write, so that another connection
    may write meanwhile (a bulk load builds its indexes there:
    :func:`cogd.index.store.build_indexes`); the caller must hold no write transaction.
    ``tables`` (with ``beside``): what the writer kept of the rows it wrote (see
    :meth:`Resolver.preload`).
    """
    resolver = Resolver(conn, root)
    targets = sorted(resolver.files) if paths is None else sorted(p for p in set(paths) if p in resolver.files)
    if paths is None and beside is not None:
        with beside():
            resolver.preload(tables)
            edges = [edge for path in targets for edge in resolver.resolve_file(path)]
        store.delete_reference_edges(conn)
        for start in range(0, len(edges), EDGE_BATCH):
            store.write_reference_edges(conn, edges[start:start + EDGE_BATCH])
        return len(edges)
    if paths is None:
        store.delete_reference_edges(conn)
        resolver.preload()
    written = 0
    batch: list[tuple[str, str, str, str, str]] = []
    for path in targets:
        edges = resolver.resolve_file(path)
        if paths is not None:  # a save: only the edges that changed are written
            store.replace_reference_edges(conn, path, edges)
            written += len(edges)
            continue
        batch.extend(edges)  # a file's edges never collide with another file's (their src is its own entity)
        written += len(edges)
        if len(batch) >= EDGE_BATCH:
            store.write_reference_edges(conn, batch)
            batch = []
    store.write_reference_edges(conn, batch)
    return written


def resolve_saved(conn: sqlite3.Connection, root: str, changed: set[str], names: set[str],
                  files: dict[str, str] | None = None) -> int:
    """After a save that kept the file list: every reference of the ``changed`` files, and in
    the other files only the references to ``names`` (the names whose definitions were added,
    removed or changed kind), resolved again. Returns the edge rows changed. Does not commit.
    ``files``: the file list as :class:`Resolver` takes it (None reads it)."""
    resolver = Resolver(conn, root, files)
    changed = {p for p in changed if p in resolver.files}
    count = 0
    for path in sorted(changed):
        count += store.replace_reference_edges(conn, path, resolver.resolve_file(path))
    if names:
        for path in sorted(store.paths_referencing(conn, names) - changed):
            count += resolver.resolve_names(path, names)
    return count