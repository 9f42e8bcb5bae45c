"""Hybrid retrieval: BM25 and KNN candidates, fused, expanded one hop, reranked, diversified.

Steps (docs/architecture.md, "Retrieval, in order"), each recorded in the hit's ``signals``
for ``--explain``:

1. candidates from FTS5 BM25 and from exact cosine KNN over entity vectors,
   ``retrieve.candidates`` from each (the mode picks the sources);
2. weighted reciprocal rank fusion (:func:`cogd.fusion.reciprocal_rank_fusion`,
   Cormack et al. 2009) with ``k = retrieve.rrf_k``;
3. one hop over edges from the top seeds — callees, callers, the container,
   subclasses/bases — a neighbour gains ``expand_decay × edge weight × the
   seed's score`` (calls resolved by scope or file weigh more than guesses);
4. priors: kind (a function is a better answer than the file around it) and
   test files (weaker unless the prompt is about tests);
5. feedback from the usage ledger (:mod:`cogd.retrieve.feedback`): utility,
   the session's working set, recency of edits;
   (the ledger also feeds step 2 with a third list: the code earlier sessions
   edited after prompts like this one — query association);
6. maximal marginal relevance (Carbonell & Goldstein, SIGIR 1998):
   ``argmax λ·rel(d) − (1−λ)·max_{s∈S} sim(d, s)`` with cosine similarity of
   entity vectors when both have one, else structural similarity (same
   container 0.8, same file 0.5); an optional hard cap per file (off by default: MMR's
   redundancy term already spreads a pack over files, and a cap cuts the file the evidence
   points to first).
"""

from __future__ import annotations

import dataclasses
import re
import sqlite3
from collections import Counter
from collections.abc import Callable

import numpy as np

from cogd.config import RetrieveConfig
from cogd.fusion import BM25, HYBRID, VECTOR, reciprocal_rank_fusion
from cogd.index import store
from cogd.index.vectors import DenseIndex
from cogd.retrieve.clues import Clues, resolve, resolve_modules
from cogd.retrieve.feedback import Feedback
from cogd.retrieve.lexical import MAX_QUERY_TERMS, SHORT_PROMPT_CHARS, Hit, bm25_search, message_trigrams, phrase_search, query_terms, weighted_terms
from cogd.retrieve.priors import names_vendored, vendored_name, vendored_root
from cogd.retrieve.prompt import PromptParts, analyze, compound_names, message_phrases, own_names, strip_template

KIND_PRIOR = {"file": 0.7, "module": 0.8, "class": 0.9, "function": 1.0, "method": 1.0, "constant": 0.8}
EXAMPLE_PRIOR = 0.7  # examples, demos, docs, benchmarks and scripts use the code but implement none of it
SEEDS = 20  # top fused candidates whose neighbours are considered
# Edge kind / resolution → how much of a seed's score crosses it.
EDGE_WEIGHT = {
    ("calls", "scope"): 1.0, ("calls", "file"): 0.9, ("calls", "import"): 0.9, ("calls", "global"): 0.5,
    ("inherits", "file"): 0.8, ("inherits", "import"): 0.8, ("inherits", "global"): 0.5,
    ("contains", ""): 0.6,
}

_TEST_PATH = re.compile(
    r"(^|/)(tests?|testing|__tests__|spec|specs)/|(^|/)test_[^/]*$|_test\.[a-z]+$|\.(test|spec)\.[jt]sx?$|(^|/)conftest\.py$"
)
_EXAMPLE_PATH = re.compile(r"(^|/)(examples?|samples?|demos?|docs?|benchmarks?|scripts?)/")
_MENTIONS_EXAMPLES = re.compile(r"\b(examples?|samples?|demos?|docs?|documentation|benchmarks?|bench|scripts?)\b", re.I)
_MENTIONS_TESTS = re.compile(r"\b(tests?|testing|unit ?tests?|pytest|spec|fixtures?)\b", re.I)

_EXPAND_KINDS = ("calls", "inherits", "contains")  # the edge kinds a seed's score crosses


def is_test_path(path: str) -> bool:
    """True for paths that hold tests by the usual conventions (``tests/``, ``test_*.py``, ``*.spec.ts``…)."""
    return bool(_TEST_PATH.search(path))


def about_tests(prompt: str) -> bool:
    """True when the prompt talks about tests (then test files keep their full weight)."""
    return bool(_MENTIONS_TESTS.search(prompt[:20_000]))


LONG_PROMPT_CHARS = 400  # above this (or with a frame, path, code block or error), the prompt's parts decide priors
IDENTIFIER_BOOST, ERROR_BOOST, TITLE_BOOST = 3.0, 2.0, 2.0  # term weights by part (lexical.weighted_terms)
OWN_NAME_BOOST = 0.5  # ... and of the words of names the prompt's own snippet defines (prompt.own_names)


def is_long(parts: PromptParts) -> bool:
    """True for a prompt whose parts, not its mere words, should decide the priors."""
    return parts.chars > LONG_PROMPT_CHARS or parts.structured


_TEST_NAME = re.compile(r"^(?:test_|Test[A-Z])")


def tests_wanted(prompt: str, parts: PromptParts, strict: bool, clue_files: list[str] | None = None) -> bool:
    """Whether test files keep their full weight: a long prompt must name a test of this
    repository — a test file its frames or paths resolved to (``clue_files``; a reporter's
    own ``repro_test.py`` is not one), or a test's name (``test_x``, ``TestX``) — while a short
    one need only talk about tests. Without ``clue_files`` (before resolution) a frame or
    path that looks like a test counts."""
    if strict and is_long(parts):
        if any(_TEST_NAME.match(i.rsplit(".", 1)[-1]) for i in parts.identifiers):
            return True
        if clue_files is None:
            return parts.about_tests()
        return any(is_test_path(f) for f in clue_files)
    return about_tests(prompt)


def term_boosts(parts: PromptParts, own: frozenset[str] = frozenset()) -> dict[str, float]:
    """Search-term weights from a prompt's parts: identifier words ×3, error-message and
    title (first line) words ×2; the words of ``own`` (names the prompt's snippet defines for
    itself, :func:`cogd.retrieve.prompt.own_names`) ×0.5 whatever else they are, since a
    reporter's ``class Point`` repeated ten times says nothing about this project's code."""
    boosts: dict[str, float] = {}
    title = parts.prose.split("\n", 1)[0] if parts.prose else ""
    for term in query_terms(title, 32):
        boosts[term] = TITLE_BOOST
    for error in parts.errors[:20]:
        for term in query_terms(error, 64):
            boosts[term] = ERROR_BOOST
    for name in parts.identifiers[:120]:
        for term in query_terms(name, 16):
            boosts[term] = IDENTIFIER_BOOST
    for name in own:
        for term in query_terms(name, 16):
            boosts[term] = OWN_NAME_BOOST
    return boosts


def without_own_names(parts: PromptParts, enabled: bool) -> tuple[PromptParts, frozenset[str]]:
    """``(parts without the identifiers whose last name the prompt's own snippet defines,
    those names)`` (:func:`cogd.retrieve.prompt.own_names`); ``(parts, ∅)`` unchanged when
    ``enabled`` is false or the prompt has no code block (a one-line prompt: no work)."""
    if not enabled or not parts.code:
        return parts, frozenset()
    own = own_names(parts)
    if not own:
        return parts, own
    kept = [i for i in parts.identifiers if i.rsplit(".", 1)[-1] not in own]
    return dataclasses.replace(parts, identifiers=kept), own


def _fetch(conn: sqlite3.Connection, ids: list[str]) -> dict[str, Hit]:
    return {entity_id: Hit(*row, 0.0) for entity_id, row in store.entities_by_ids(conn, ids).items()}


def _expand(conn: sqlite3.Connection, fused: dict[str, float], decay: float, signals: dict[str, dict],
            feedback: Feedback | None = None) -> dict[str, float]:
    """One hop over edges from the top seeds; returns the neighbours' added scores. With
    ``feedback``, co-change (:meth:`Feedback.co_change_edges`) is one more edge kind, of weight
    ``rank.co_change_weight × confidence(seed → partner)``."""
    seeds = sorted(fused, key=fused.get, reverse=True)[:SEEDS]
    if not seeds or decay <= 0:
        return {}
    gained: dict[str, float] = {}
    rows = store.edges_touching(conn, seeds, _EXPAND_KINDS)
    for src, dst, kind, resolution in rows:
        weight = EDGE_WEIGHT.get((kind, resolution), 0.0)
        if not weight:
            continue
        for seed, neighbour in ((src, dst), (dst, src)):
            if seed not in fused or neighbour == seed:
                continue
            if kind == "contains" and (neighbour == src or "::" not in seed):
                # Only a class passes score to its members: a member's hit says
                # more than its container would, and a file has too many children.
                continue
            add = decay * weight * fused[seed]
            if add > gained.get(neighbour, 0.0):
                gained[neighbour] = add
                direction = "callee" if neighbour == dst else "caller"
                if kind == "contains":
                    direction = "member" if neighbour == dst else "container"
                elif kind == "inherits":
                    direction = "base" if neighbour == dst else "subclass"
                signals.setdefault(neighbour, {})["expanded_from"] = f"{direction} of {seed} ({kind}/{resolution or '-'})"
    if feedback is not None:
        weight = feedback.weight("co_change")
        for seed, partner, confidence, support in feedback.co_change_edges(seeds):
            add = decay * weight * confidence * fused[seed]
            if partner != seed and add > gained.get(partner, 0.0):
                gained[partner] = add
                signals.setdefault(partner, {})["expanded_from"] = (
                    f"co-changed with {seed} (co_changed/{support} commits, confidence {confidence:.2f})")
    return gained


def _vector_lists(query_vector: np.ndarray, dense: DenseIndex, config: RetrieveConfig,
                  kinds: tuple[str, ...] | None, signals: dict[str, dict]) -> list[tuple[str, float, list[str]]]:
    """Nearest-neighbour lists: one for a single query vector; for a long prompt's prose
    windows (a 2-D array, one row per window) one for their normalised mean, weighted
    ``vector_weight``, plus one per window sharing half that weight, so a clue in a late
    paragraph still finds its code; ``--explain`` names the window ("prose window 2")."""
    rows = np.atleast_2d(np.asarray(query_vector, dtype=np.float32))
    mean = rows.mean(axis=0)
    mean /= max(float(np.linalg.norm(mean)), 1e-12)
    nearest = dense.search(mean, config.candidates, kinds)
    for rank, (entity_id, similarity) in enumerate(nearest, 1):
        signals.setdefault(entity_id, {}).update(vector_rank=rank, cosine=round(similarity, 4))
    lists = [(VECTOR, config.vector_weight, [i for i, _ in nearest])]
    if len(rows) > 1:
        share = 0.5 * config.vector_weight / len(rows)
        for n, row in enumerate(rows, 1):
            window = dense.search(row, config.candidates, kinds)
            for rank, (entity_id, _similarity) in enumerate(window, 1):
                sig = signals.setdefault(entity_id, {})
                if rank < sig.get("window_rank", 1 << 30):
                    sig.update(window_rank=rank, window=n)
                    if "part" not in sig or str(sig["part"]).startswith("prose window"):
                        sig["part"] = f"prose window {n}"
            lists.append((f"window{n}", share, [i for i, _ in window]))
    return lists


def _top_level_names(conn: sqlite3.Connection) -> set[str]:
    """Lower-cased names of the tree's top-level directories that hold indexed files (the
    project's packages: ``sphinx``, ``pylint``), one query."""
    rows = conn.execute("SELECT DISTINCT substr(path, 1, instr(path, '/') - 1) FROM files "
                        "WHERE status = 'ok' AND instr(path, '/') > 0").fetchall()
    return {r[0].lower() for r in rows if r[0]}


def _message_list(conn: sqlite3.Connection, parts: PromptParts, config: RetrieveConfig,
                  kinds: tuple[str, ...] | None, signals: dict[str, dict],
                  tests_ok: bool) -> list[tuple[str, float, list[str]]]:
    """Two phrase lists (:func:`cogd.retrieve.lexical.phrase_search`): the hyphenated names of
    the prose (``unused-import``, ``--ignore-paths``, as phrases), and the prompt's printed
    errors and warnings (three-word phrases of them, :func:`cogd.retrieve.lexical.message_trigrams`,
    with the symbols of pasted output): the source of a message or a symbol spells it, whatever
    the prose around it says. Tests come after the code in both unless the prompt is about tests."""
    if config.message_weight <= 0:
        return []
    phrases: list[str] = []
    symbols = parts.symbols
    if config.template_filter and symbols:
        # ``sphinx-build``, ``pylint-config``: the project's own commands, run in every report.
        own = _top_level_names(conn)
        symbols = [s for s in symbols if s.lstrip("-").split("-", 1)[0] not in own]
    for message in parts.messages[:12]:
        phrases.extend(message_phrases(message))
    printed = [s.replace("-", " ") for s in parts.printed_symbols[:12]]  # the tokenizer splits on "-"
    wanted = (
        ("symbol", [s.lstrip("-").replace("-", " ") for s in symbols[:12]],
         f"symbol `{symbols[0]}`" if len(symbols) == 1 else "a hyphenated name"),
        ("message", printed + message_trigrams(phrases),
         f"error message “{parts.messages[0][:60]}”" if len(parts.messages) == 1 else "a printed message"),
    )
    lists = []
    for name, queries, label in wanted:
        found = phrase_search(conn, queries, limit=config.candidates, kinds=kinds) if queries else []
        if not tests_ok:  # tests spell the messages they expect: the code that prints them first
            found = [h for h in found if not is_test_path(h.path)] + [h for h in found if is_test_path(h.path)]
        for rank, hit in enumerate(found, 1):
            sig = signals.setdefault(hit.id, {})
            sig[f"{name}_rank"] = rank
            if "part" not in sig or str(sig["part"]).startswith("prose window"):
                sig["part"] = label
        if found:
            lists.append((name, config.message_weight, [h.id for h in found]))
    return lists


def _clue_lists(conn: sqlite3.Connection, found: Clues, config: RetrieveConfig, kinds: tuple[str, ...] | None,
                signals: dict[str, dict]) -> list[tuple[str, float, list[str]]]:
    """The fusion lists of resolved frames, paths and identifiers (a weight of 0 drops one),
    each id's rank and the label of its part recorded in ``signals``."""
    lists = []
    for name, weight, ids in (("frame", config.frame_weight, found.frames), ("path", config.path_weight, found.paths),
                              ("identifier", config.identifier_weight, found.identifiers)):
        if weight <= 0 or not ids:
            continue
        ids = ids[: config.candidates]
        if kinds:  # the clue lists are unfiltered lookups: keep them to the asked kinds
            rows = store.entities_by_ids(conn, ids)
            ids = [i for i in ids if i in rows and rows[i][1] in kinds]
        for rank, entity_id in enumerate(ids, 1):
            sig = signals.setdefault(entity_id, {})
            sig[f"{name}_rank"] = rank
            if "part" not in sig or str(sig["part"]).startswith("prose window"):  # a precise part names it first
                sig["part"] = found.labels.get(entity_id, name)
        lists.append((name, weight, ids))
    return lists


def _fuse_learned(feedback: Feedback, text: str, config: RetrieveConfig, fused: dict[str, float],
                  signals: dict[str, dict], tests_ok: bool = True) -> None:
    """Add the learned association terms to ``fused`` in place (:meth:`Feedback.association_terms`).

    Retrieval alone can only rerank what it found; past prompts (and past commit messages) bring
    back the code that requests like this one changed, whatever words that code uses. How the
    two sources' RRF terms combine per entity is ``rank.association_combine``. ``tests_ok``:
    whether the request wants tests (:func:`tests_wanted`); when not, history is given
    :func:`is_test_path` to leave a past request's test edits out of its change."""
    terms, lists = feedback.association_terms(text, max(config.candidates // 3, 1), config.rrf_k,
                                              None if tests_ok else is_test_path)
    for entity_id, term in terms.items():
        fused[entity_id] = fused.get(entity_id, 0.0) + term
    for source, items in lists:
        key = "association_rank" if source == "session" else f"{source}_rank"
        for rank, (entity_id, evidence, commits) in enumerate(items, 1):
            sig = signals.setdefault(entity_id, {})
            sig[key] = rank
            if commits:
                sig[f"{source}_evidence"] = evidence
                sig[f"{source}_commits"] = list(commits[:3])  # labels, e.g. "1a2b3c4d subject"
    for entity_id in feedback.counted_once:  # both sources named it for one change: its terms counted once
        signals.setdefault(entity_id, {})["same_change"] = 1


def _bm25_list(conn: sqlite3.Connection, text: str, parts: PromptParts, config: RetrieveConfig,
               kinds: tuple[str, ...] | None, signals: dict[str, dict],
               own: frozenset[str] = frozenset(),
               extra_terms: tuple[str, ...] = (), deep: list | None = None) -> tuple[str, float, list[str]]:
    """The BM25 list of the fusion: a long prompt's terms chosen by weight from its text without
    the issue template's scaffolding (in every report, so no clue), a short one's as always.
    ``deep``: filled with ``(id, path)`` of the hits past the list's cut, down to
    ``retrieve.file_depth`` (:func:`_deepen`)."""
    searched = strip_template(text) if config.template_filter and is_long(parts) else text
    # A short prompt keeps its terms exactly as before, whatever the long-prompt budget.
    budget = config.long_prompt_terms if len(text) > SHORT_PROMPT_CHARS else MAX_QUERY_TERMS
    terms = (weighted_terms(conn, searched, term_boosts(parts, own), max_terms=budget)
             if config.idf_terms else None)
    if extra_terms:
        terms = list(dict.fromkeys([*(query_terms(searched) if terms is None else terms), *extra_terms]))
    depth = max(config.candidates, config.file_depth)  # the tail past the cut is for _deepen
    lexical = bm25_search(conn, searched, limit=depth, kinds=kinds, terms=terms)
    for rank, hit in enumerate(lexical[: config.candidates], 1):
        signals.setdefault(hit.id, {}).update(bm25_rank=rank, bm25=round(hit.score, 3))
    if deep is not None:
        deep.extend((h.id, h.path) for h in lexical[config.candidates:])
    return (BM25, config.bm25_weight, [h.id for h in lexical[: config.candidates]])


def report_title(text: str, parts: PromptParts) -> str:
    """A long prompt's title: its first line when more text follows (a bug report's summary,
    ``Cross-references don't work in property's type annotations``), else ''. A one-line or
    short prompt has none: its whole text is already the query."""
    if not is_long(parts) or "\n" not in text:
        return ""
    title = text.lstrip().split("\n", 1)[0].strip().strip("#*").strip()
    return title if len(title.split()) >= 3 else ""


def _title_list(conn: sqlite3.Connection, text: str, parts: PromptParts, config: RetrieveConfig,
                kinds: tuple[str, ...] | None, signals: dict[str, dict],
                tests_ok: bool) -> list[tuple[str, float, list[str]]]:
    """The title's own BM25 list (``retrieve.title_weight``; :func:`report_title`): the reporter's
    one-line summary, whose words the pages of pasted code, logs and prose after it outnumber
    in the long query however they are weighted. Tests after the code unless the prompt is about
    tests. [] without a title or with the weight 0."""
    title = report_title(text, parts) if config.title_weight > 0 else ""
    if not title:
        return []
    found = bm25_search(conn, title, limit=config.candidates, kinds=kinds)
    if not tests_ok:
        found = [h for h in found if not is_test_path(h.path)] + [h for h in found if is_test_path(h.path)]
    for rank, hit in enumerate(found, 1):
        sig = signals.setdefault(hit.id, {})
        sig["title_rank"] = rank
        if "part" not in sig or str(sig["part"]).startswith("prose window"):
            sig["part"] = f"title #{rank}"
    return [("title", config.title_weight, [h.id for h in found])] if found else []


def _version_list(paths, config: RetrieveConfig, kinds: tuple[str, ...] | None,
                  signals: dict[str, dict], found: Clues) -> list[tuple[str, float, list[str]]]:
    """The fusion list of a version-bump request's version files (their file entities, ids =
    paths), ``retrieve.version_weight``; [] without files, with the weight 0, or when ``kinds``
    leaves out files. The files also join ``found.files``: the request points at them as a
    printed path would, so the file-level ranking gives them a named file's evidence."""
    if not paths or config.version_weight <= 0 or (kinds and "file" not in kinds):
        return []
    found.files.extend(p for p in paths if p not in found.files)
    for rank, path in enumerate(paths, 1):
        sig = signals.setdefault(path, {})
        sig["version_rank"] = rank
        sig["part"] = "assigns the version the prompt bumps"
    return [("version", config.version_weight, list(paths))]


def _add_module_list(conn, parts: PromptParts, config: RetrieveConfig, found: Clues, tests_ok: bool,
                     kinds: tuple[str, ...] | None, signals: dict[str, dict], lists: list) -> None:
    """The files the prompt names as modules (:func:`cogd.retrieve.clues.resolve_modules`):
    their file entities one more fusion list (``retrieve.module_weight``), and the files
    among the clue files for the file-level ranking, after the frames' and paths'."""
    prose = strip_template(parts.prose) if config.template_filter else parts.prose
    modules = resolve_modules(conn, parts, prose, tests_ok=tests_ok)
    ids = [p for p in modules.paths if p not in found.files]
    if kinds:
        rows = store.entities_by_ids(conn, ids)
        ids = [i for i in ids if i in rows and rows[i][1] in kinds]
    for rank, path in enumerate(ids, 1):
        sig = signals.setdefault(path, {})
        sig["module_rank"] = rank
        if "part" not in sig or str(sig["part"]).startswith("prose window"):
            sig["part"] = modules.labels.get(path, "module")
    if ids:
        lists.append(("module", config.module_weight, ids))


def _add_compound_names(conn: sqlite3.Connection, parts: PromptParts, text: str, found: Clues, tests_ok: bool) -> None:
    """Append to ``found.identifiers`` the definitions of the code spellings of the prompt's
    markup and option names (:func:`cogd.retrieve.prompt.compound_names`), after its own identifiers."""
    names = compound_names(parts, text)
    if not names:
        return
    extra = resolve(conn, PromptParts(identifiers=names), tests_ok=tests_ok)
    for entity_id in extra.identifiers:
        if entity_id not in found.identifiers:
            found.identifiers.append(entity_id)
            found.label(entity_id, extra.labels[entity_id] + " (spelled as markup or an option in the prompt)")


def retrieve(
    conn: sqlite3.Connection,
    text: str,
    config: RetrieveConfig,
    *,
    mode: str | None = None,
    query_vector: np.ndarray | None = None,
    dense: DenseIndex | None = None,
    kinds: tuple[str, ...] | None = None,
    limit: int = 60,
    feedback: Feedback | None = None,
    parts: PromptParts | None = None,
    clues: Clues | None = None,
    extra_terms: tuple[str, ...] = (),
    version_files: list[str] | tuple[str, ...] = (),
) -> list[Hit]:
    """Ranked candidates for ``text`` (before MMR), best first, at most ``limit``.

    ``parts``: the prompt's analysis (:func:`cogd.retrieve.prompt.analyze`; computed when
    None); ``clues``: filled in place with what its frames, paths and identifiers resolved
    to (:func:`cogd.retrieve.clues.resolve`), each a list of its own in the fusion
    (``retrieve.frame_weight``, ``path_weight``, ``identifier_weight``); ``extra_terms``:
    lower-case words searched by BM25 besides the prompt's own terms (``cogd search get``);
    ``version_files``: for a version-bump request, the files that assign the version
    (:func:`cogd.retrieve.version.version_files`), one more fusion list of weight
    ``retrieve.version_weight``.

    ``mode``: ``bm25``, ``vector`` or ``hybrid`` (default ``config.mode``);
    without a query vector or a dense index the vector source is empty and
    hybrid degrades to BM25. With ``feedback``, the ledger adds a third list
    to the fusion (``rank.association_weight``, shrunk by its evidence): the code earlier sessions
    edited after prompts like this one (BM25 over those prompts). Each hit's ``score`` is the fused score after
    expansion; ``signals`` holds the parts. Raises sqlite3.Error on a broken index.
    """
    mode = mode or config.mode
    if mode == VECTOR and (query_vector is None or dense is None or not len(dense)):
        mode = BM25  # no vectors yet (model loading, coverage 0): lexical beats an empty pack
    signals: dict[str, dict] = {}
    lists: list[tuple[str, float, list[str]]] = []
    parts = parts if parts is not None else analyze(text)
    parts, own = without_own_names(parts, config.own_names)
    found = resolve(conn, parts, tests_ok=tests_wanted(text, parts, config.strict_test_prior))
    deep: list[tuple[str, str]] = []  # (id, path) of the BM25 list past its cut, to retrieve.file_depth
    if mode in (BM25, HYBRID):
        lists.append(_bm25_list(conn, text, parts, config, kinds, signals, own, extra_terms, deep))
    if mode in (VECTOR, HYBRID) and query_vector is not None and dense is not None:
        lists.extend(_vector_lists(query_vector, dense, config, kinds, signals))

    tests_ok = tests_wanted(text, parts, config.strict_test_prior, found.files)
    if config.compound_names:
        _add_compound_names(conn, parts, text, found, tests_ok)
    lists.extend(_version_list(version_files, config, kinds, signals, found))
    if clues is not None:
        clues.__dict__.update(found.__dict__)
    if config.module_weight > 0 and is_long(parts):
        _add_module_list(conn, parts, config, found, tests_ok, kinds, signals, lists)
    lists.extend(_clue_lists(conn, found, config, kinds, signals))
    lists.extend(_message_list(conn, parts, config, kinds, signals, tests_ok))
    lists.extend(_title_list(conn, text, parts, config, kinds, signals, tests_ok))

    fused = reciprocal_rank_fusion(((weight, ids) for _name, weight, ids in lists), config.rrf_k)
    if feedback is not None:
        _fuse_learned(feedback, text, config, fused, signals, tests_ok)
    for entity_id, score in fused.items():
        signals[entity_id]["rrf"] = round(score, 5)

    gained = _expand(conn, fused, config.expand_decay, signals, feedback)
    for entity_id, add in gained.items():
        fused[entity_id] = fused.get(entity_id, 0.0) + add
        signals.setdefault(entity_id, {})["expansion"] = round(add, 5)

    ranked_ids = sorted(fused, key=fused.get, reverse=True)[: max(limit * 2, limit)]
    extra = _deepen(ranked_ids[:limit], fused, deep, config, signals) if deep else []
    return _hits(conn, ranked_ids, extra, fused, signals, kinds, limit)


def _hits(conn: sqlite3.Connection, ranked_ids: list[str], extra: list[str], fused: dict[str, float],
          signals: dict[str, dict], kinds: tuple[str, ...] | None, limit: int) -> list[Hit]:
    """The Hit rows of ``ranked_ids`` (the first ``limit`` of ``kinds`` that the index still holds),
    then those of ``extra`` (the strongest file's definitions past the BM25 cut, :func:`_deepen`),
    each with its fused ``score`` and its ``signals``."""
    hits = _fetch(conn, ranked_ids + extra)
    result = []
    for entity_id in ranked_ids:
        hit = hits.get(entity_id)
        if hit is None or (kinds and hit.kind not in kinds):
            continue
        hit.score = fused[entity_id]
        hit.signals = signals.get(entity_id, {})
        result.append(hit)
        if len(result) >= limit:
            break
    for entity_id in extra:
        hit = hits.get(entity_id)
        if hit is not None and not (kinds and hit.kind not in kinds):
            hit.score = fused[entity_id]
            hit.signals = signals.get(entity_id, {})
            result.append(hit)
    return result


def _deepen(ranked: list[str], fused: dict[str, float], deep: list[tuple[str, str]], config: RetrieveConfig,
            signals: dict[str, dict]) -> list[str]:
    """The BM25 hits past the list's cut (``deep``: ``(id, path)`` at ranks ``candidates + 1`` …
    ``file_depth``) that lie in the strongest file of ``ranked``, added to ``fused`` in place
    with the RRF term of their BM25 rank, ``bm25_weight / (rrf_k + rank)`` — what they would
    have had from a list that deep. Returns their ids, best first.

    Why: a definition is likely where its file is (P(d | q) = P(f | q) · P(d | f, q)), and the
    pack's later ranking gives every definition of a strong file that file's evidence
    (:func:`file_ranking`) — but only the definitions among the candidates; a long file's
    further matches of the prompt's words sat past the global cut, behind weak matches in weak
    files. The strongest file is the one whose entities' fused scores have the largest decaying
    sum (best + ½ next …, as :func:`file_ranking`); one file only, so the others' evidence,
    and with it the order of files, is unchanged."""
    by_file: dict[str, list[float]] = {}
    for entity_id in ranked:
        by_file.setdefault(entity_id.split("::", 1)[0], []).append(fused[entity_id])
    if not by_file:
        return []
    evidence = {p: sum(s * 0.5 ** i for i, s in enumerate(sorted(v, reverse=True))) for p, v in by_file.items()}
    strongest = max(evidence, key=lambda p: (evidence[p], p))
    added = []
    for rank, (entity_id, path) in enumerate(deep, config.candidates + 1):
        if path == strongest and entity_id not in fused:
            fused[entity_id] = config.bm25_weight / (config.rrf_k + rank)
            signals.setdefault(entity_id, {}).update(bm25_rank=rank, deepened=True)
            added.append(entity_id)
    return added


def _structural(a: Hit, b: Hit) -> float:
    """Similarity without vectors: same container 0.8, same file 0.5, else 0."""
    if a.parent_id and a.parent_id == b.parent_id and "::" in a.parent_id:
        return 0.8
    if a.path == b.path:
        return 0.5
    return 0.0


def similarity_matrix(hits: list[Hit], vectors: dict[str, np.ndarray]) -> np.ndarray:
    """Pairwise similarity of ``hits`` (n × n, float32): the cosine of their vectors (floored
    at 0) where both have one, else :func:`_structural`. One matrix product instead of
    O(n²·k) Python calls inside MMR."""
    n = len(hits)
    sim = np.zeros((n, n), dtype=np.float32)
    have = [i for i, h in enumerate(hits) if h.id in vectors]
    if have:
        matrix = np.stack([vectors[hits[i].id] for i in have]).astype(np.float32)
        sim[np.ix_(have, have)] = np.maximum(matrix @ matrix.T, 0.0)
    if len(have) == n:
        return sim
    # _structural for every pair at once: equal codes of container (one with "::") and of path
    codes: dict[str, int] = {}
    path = np.array([codes.setdefault("p:" + h.path, len(codes)) for h in hits])
    parent = np.array([codes.setdefault("c:" + h.parent_id, len(codes)) if h.parent_id and "::" in h.parent_id
                       else -1 - i for i, h in enumerate(hits)])
    structural = np.where(parent[:, None] == parent[None, :], np.float32(0.8),
                          np.where(path[:, None] == path[None, :], np.float32(0.5), np.float32(0.0)))
    np.fill_diagonal(structural, 0.0)
    without = np.ones(n, dtype=bool)
    without[have] = False
    sim[without, :] = structural[without, :]
    sim[:, without] = structural[:, without]
    return sim


def _add_shares(named: dict[str, float] | None, shares: dict[str, float]) -> dict[str, float]:
    """``named`` (a :func:`file_ranking` ``named_files``) with ``shares`` added per path (a new dict)."""
    out = dict(named or {})
    for path, share in shares.items():
        out[path] = out.get(path, 0.0) + share
    return out


def file_ranking(hits: list[Hit], clue_files: list[str], agg: str = "decay",
                 named_files: dict[str, float] | None = None,
                 scaled_files: dict[str, float] | None = None) -> dict[str, float]:
    """Each file's aggregated evidence, in [0, 1]: its entities' scores as a decaying sum
    (``agg="decay"``: best + ½ second + ¼ third …, so one strong definition counts more than
    many weak ones; ``"max"`` the best alone; ``"sum"`` all), plus half the best file's evidence
    for a file a frame or path named, plus ``named_files[path]`` times the best file's for a
    file under a directory or module the prose names; then ``× (1 + scaled_files[path])``
    (``{path: share ≥ 0}``, history's file prior combined as a product: P(f | q) ∝ P(q | f) ·
    P(f), the evidence standing for the first factor and 1 + share for a smoothed second, so
    a file the prompt gives no evidence stays without); scaled by the best file's. Only files
    with at least one hit are ranked."""
    by_file: dict[str, list[float]] = {}
    for hit in hits:
        by_file.setdefault(hit.path, []).append(hit.score)
    if agg == "max":
        evidence = {path: max(scores) for path, scores in by_file.items()}
    elif agg == "sum":
        evidence = {path: sum(scores) for path, scores in by_file.items()}
    else:
        evidence = {path: sum(s * 0.5 ** i for i, s in enumerate(sorted(scores, reverse=True)))
                    for path, scores in by_file.items()}
    top = max(evidence.values(), default=0.0) or 1.0
    for path in clue_files:
        if path in evidence:
            evidence[path] += 0.5 * top
    for path, share in (named_files or {}).items():
        if path in evidence:
            evidence[path] += share * top
    for path, share in (scaled_files or {}).items():
        if path in evidence:
            evidence[path] *= 1.0 + share
    top = max(evidence.values(), default=0.0) or 1.0
    return {path: value / top for path, value in evidence.items()}


_PROSE_WORD = re.compile(r"[A-Za-z][A-Za-z0-9_]{3,}")


def module_words(hits: list[Hit], parts: PromptParts, weight: float, template_filter: bool = True) -> dict[str, float]:
    """Files among ``hits`` whose directory or module name is a word of the prompt's prose or
    identifiers (``autodoc`` → ``sphinx/ext/autodoc/…``, ``pyreverse`` → ``pylint/pyreverse/…``,
    ``napoleon`` → ``sphinx/ext/napoleon.py``), each with ``weight`` (:func:`file_ranking`
    adds that share of the best file's evidence). A name shared by more than a quarter of the
    candidate files (``util``, ``config``…) names none of them."""
    prose = strip_template(parts.prose[:20_000]) if template_filter else parts.prose[:20_000]
    words = {w.lower() for w in _PROSE_WORD.findall(prose)}
    words.update(i.rsplit(".", 1)[-1].lower() for i in parts.identifiers)
    if not words:
        return {}
    files = {h.path for h in hits}
    named: dict[str, set[str]] = {}
    for path in files:
        pieces = path.split("/")
        stem = pieces[-1].rsplit(".", 1)[0]
        for piece in set(pieces[:-1]) | {stem}:
            if piece.lower() in words and piece not in ("__init__", "src", "lib"):
                named.setdefault(piece, set()).add(path)
    out: dict[str, float] = {}
    for piece, paths in named.items():
        if len(paths) <= max(len(files) // 4, 1):
            for path in paths:
                out[path] = weight
    return out


def _apply_priors(hits: list[Hit], config: RetrieveConfig, prompt: str, parts: PromptParts, clue_files: list[str],
                  resolved: bool, vendored: list[str], package_roots: dict[str, str] | None) -> None:
    """Scale each hit's score by its priors (kind; vendored; tests; examples and docs), each
    recorded in its ``signals`` (see :func:`select`)."""
    tests_ok = tests_wanted(prompt, parts, config.strict_test_prior, clue_files if resolved else None)
    examples_strict = config.strict_test_prior and is_long(parts)
    if examples_strict:  # a bug report says "docs" without meaning doc/ examples: as a test then
        examples_ok = any(_EXAMPLE_PATH.search(p) for p in clue_files)
    else:
        examples_ok = bool(_MENTIONS_EXAMPLES.search(prompt[:20_000]))
    prompt_lower = prompt[:20_000].lower()
    for hit in hits:
        prior = KIND_PRIOR.get(hit.kind, 1.0)
        vendor = vendored_name(hit.path, vendored) if config.vendor_prior != 1.0 else None
        marker = None
        if vendor is None and package_roots and config.vendor_prior != 1.0:
            found = vendored_root(hit.path, package_roots)
            if found:
                vendor, marker = found[0].rsplit("/", 1)[-1], found[1]
        if vendor and not names_vendored(prompt_lower, vendor, clue_files, hit.path):
            prior *= config.vendor_prior
            hit.signals["vendored"] = marker or vendor
        elif not tests_ok and is_test_path(hit.path):
            prior *= config.test_prior
            hit.signals["test_prior"] = True
        elif not examples_ok and _EXAMPLE_PATH.search(hit.path):
            prior *= config.test_prior if examples_strict else EXAMPLE_PRIOR
        hit.signals["prior"] = round(prior, 3)
        hit.score *= prior


def select(
    hits: list[Hit], config: RetrieveConfig, *, per_file_cap: int, prompt: str = "",
    dense: DenseIndex | None = None, limit: int = 40, feedback: Feedback | None = None,
    parts: PromptParts | None = None, clues: Clues | None = None, vendored: list[str] = (),
    package_roots: dict[str, str] | None = None, file_entities: Callable[[list[str]], list[Hit]] | None = None,
) -> list[Hit]:
    """Priors, feedback, file-level ranking, then MMR (with a per-file cap when ``per_file_cap`` > 0;
    0 = none): the order a pack shows items in.

    Priors: kind; tests (:func:`tests_wanted`); examples and docs; vendored code
    (``retrieve.vendor_prior``, unless the prompt names the vendored project; ``vendored``
    are ``.gitattributes`` patterns, :func:`cogd.retrieve.priors.vendored_patterns`;
    ``package_roots`` the directories with their own licence or metadata,
    :func:`cogd.retrieve.priors.package_roots`, the marker named in ``--explain``).
    With ``retrieve.file_rank_weight`` > 0 an entity gains that share of the top score times
    its file's evidence (:func:`file_ranking`). History's file prior (``feedback``'s
    :meth:`Feedback.file_prior_shares`) is part of that evidence for every definition
    (``rank.history_file_prior_scope = "entities"``), only for each file's first appearance
    ("first": the prior's term is added to a candidate's score while its file has no item yet),
    or for the file order alone ("pointers": no score changes; the ``rank.history_file_prior_files``
    strongest files of the ranking with the prior appear in that order, :func:`file_pointers`,
    their file entities from ``file_entities(paths)``; without it nothing is placed). Relevance is the resulting score scaled to
    [0, 1]. A file entity is dropped once an entity inside it is selected (the narrower
    item says the same with line numbers). Returns at most ``limit`` hits, and the files
    placed by "pointers" beside them (at most ``rank.history_file_prior_files`` more).
    """
    if not hits:
        return []
    parts = parts if parts is not None else analyze(prompt)
    clue_files = clues.files if clues is not None else []
    first_bonus: dict[int, float] = {}  # id(hit) → the file prior's term for its file's first item
    lead: list[str] = []  # scope "pointers": the files whose order the prior sets, best first
    _apply_priors(hits, config, prompt, parts, clue_files, clues is not None, vendored, package_roots)
    if config.file_rank_weight > 0:
        first_bonus, lead = _rank_files(hits, config, parts, clue_files, feedback)
    if feedback is not None:
        feedback.apply(hits)
    chosen = _mmr(hits, config, dense, limit, per_file_cap, first_bonus)
    if lead and file_entities is not None and chosen:
        if feedback.config.history_file_prior_after_first:  # the words' first file stays first
            lead = [chosen[0].path] + [path for path in lead if path != chosen[0].path][:len(lead) - 1]
        return file_pointers(chosen, lead, file_entities)  # the placed files take no definition's place
    return chosen


def _rank_files(hits: list[Hit], config: RetrieveConfig, parts: PromptParts, clue_files: list[str],
                feedback: Feedback | None) -> tuple[dict[int, float], list[str]]:
    """The file-level ranking step of :func:`select`: each hit gains ``file_rank_weight`` × the
    top score × its file's evidence (in place; ``file_rank`` in its signals). History's file
    prior is part of that evidence per ``rank.history_file_prior_scope``; returns ``(first_bonus,
    lead)``: for "first", ``id(hit)`` → the prior's term its file's first item competes with; for
    "pointers", the paths whose order the prior sets, best first (both empty otherwise)."""
    named = (module_words(hits, parts, config.module_word_weight, config.template_filter)
             if config.module_word_weight > 0 else None)
    changed = feedback.history_file_shares() if feedback is not None else {}
    prior = feedback.file_prior_shares() if feedback is not None else {}
    scope = feedback.config.history_file_prior_scope if prior else "entities"
    first_only = scope in ("first", "pointers")
    if changed:  # files the matching commits changed
        named = _add_shares(named, changed)
    plain = file_ranking(hits, clue_files, config.file_rank_agg, named) if first_only else {}
    scaled = None
    if prior and feedback.config.history_file_prior_combine == "product":  # reorders what the words found
        scaled = prior
    elif prior:  # files changes usually go to, wherever the words found anything of them
        named = _add_shares(named, prior)
    ranking = file_ranking(hits, clue_files, config.file_rank_agg, named, scaled)
    order_of = {path: n for n, path in enumerate(sorted(ranking, key=ranking.get, reverse=True), 1)}
    best = max(h.score for h in hits)
    for hit in hits:
        hit.score += config.file_rank_weight * best * (plain if first_only else ranking).get(hit.path, 0.0)
        hit.signals["file_rank"] = order_of.get(hit.path)
    if scope == "pointers":  # the file order the prior gives: its strongest files (file_pointers)
        # A file the test or vendored prior demotes for this prompt is placed by none: tests change
        # with most requests, so history's counts rank them high where the prompt asks no test.
        demoted = {h.path for h in hits if h.signals.get("test_prior") or "vendored" in h.signals}
        wanted = max(0, feedback.config.history_file_prior_files)
        return {}, sorted((p for p in ranking if p not in demoted), key=lambda path: (-ranking[path], path))[:wanted]
    first_bonus: dict[int, float] = {}
    if first_only:
        # What the prior would add to a definition's score (negative for a file below the
        # prior's new top), given only while its file has no item yet (not scaled by the
        # ledger's feedback factors applied next: the prior is history's, not the session's).
        for hit in hits:
            bonus = config.file_rank_weight * best * (ranking.get(hit.path, 0.0) - plain.get(hit.path, 0.0))
            if bonus:
                first_bonus[id(hit)] = bonus
    return first_bonus, []


def _mmr(hits: list[Hit], config: RetrieveConfig, dense: DenseIndex | None, limit: int, per_file_cap: int,
         first_bonus: dict[int, float]) -> list[Hit]:
    """Maximal marginal relevance over ``hits`` (the selection step of :func:`select`): at most
    ``limit``, ``per_file_cap`` per file (0 = none), a file entity only before its file's other
    items; a hit in ``first_bonus`` competes with that term added while its file has no item."""

    def opening(hit: Hit) -> float:
        """The score a hit competes with while its file has no item in the pack yet."""
        return hit.score + first_bonus.get(id(hit), 0.0)

    top = max(h.score for h in hits) or 1.0  # the scale without the prior: other items rank as with none
    vectors = dense.vectors([h.id for h in hits]) if dense is not None else {}
    lam = config.mmr_lambda
    order = sorted(hits, key=opening if first_bonus else (lambda h: h.score), reverse=True)
    sim = similarity_matrix(order, vectors)
    redundancy = np.zeros(len(order), dtype=np.float32)  # max similarity to anything chosen so far
    remaining = list(range(len(order)))
    chosen: list[Hit] = []
    per_file: Counter[str] = Counter()
    while remaining and len(chosen) < limit:
        best, best_value = -1, -1e9
        for i in remaining[:80]:
            hit = order[i]
            if (per_file_cap and per_file[hit.path] >= per_file_cap) or (hit.kind == "file" and per_file[hit.path]):
                continue
            score = hit.score if per_file[hit.path] else opening(hit)
            value = lam * (score / top) - (1 - lam) * float(redundancy[i])
            if value > best_value:
                best, best_value = i, value
        if best < 0:
            break
        hit = order[best]
        if not per_file[hit.path] and id(hit) in first_bonus:
            hit.signals["file_prior_first"] = round(first_bonus[id(hit)], 6)
        hit.signals["mmr"] = round(best_value, 4)
        if redundancy[best]:
            hit.signals["redundancy"] = round(float(redundancy[best]), 3)
        chosen.append(hit)
        per_file[hit.path] += 1
        remaining.remove(best)
        np.maximum(redundancy, sim[:, best], out=redundancy)
    return chosen


def file_pointers(chosen: list[Hit], lead: list[str], file_entities: Callable[[list[str]], list[Hit]]) -> list[Hit]:
    """``chosen`` with the files of ``lead`` (paths, best first) appearing in that order: before a
    file's first item, each ``lead`` file ranked above it that has not appeared yet gets its
    file entity (``file_entities(paths)``: the index's file hits, absent paths left out) as its
    pointer; the definitions keep their order and scores (a file entity already in ``chosen``
    moves up instead of appearing twice). Each placed entity carries ``file_prior_pointer``, its
    place in ``lead`` (1 = first)."""
    place = {path: n for n, path in enumerate(lead)}
    files = {hit.path: hit for hit in file_entities(list(lead)) if hit.kind == "file"}
    out: list[Hit] = []
    pointed: set[str] = set()
    seen: set[str] = set()
    for hit in chosen:
        if hit.path not in seen:
            rank = place.get(hit.path, len(lead))
            for path in lead[:rank]:
                if path in seen or path not in files:
                    continue
                pointer = next((h for h in chosen if h.id == files[path].id), files[path])
                pointer.signals["file_prior_pointer"] = place[path] + 1
                out.append(pointer)
                pointed.add(pointer.id)
                seen.add(path)
        if hit.id in pointed:
            continue  # placed above as a pointer
        out.append(hit)
        seen.add(hit.path)
    return out
