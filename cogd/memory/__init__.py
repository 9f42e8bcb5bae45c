"""Memory: observations, rules and knowledge as markdown files, kept honest
(docs/memory.md; the vocabulary is in docs/architecture.md).

The files under ``.cogd/memory/{observations,rules,knowledge}/<ULID>.md`` are the
record; ``.cogd/index/memory.db`` is their projection; the ``events`` and
``tombstones`` tables in ``.cogd/state.db`` are the ledger. Modules, one
concept each:

- :mod:`vocabulary` — the memory types and their folders (light: the command line imports it);
- :mod:`record` — parse, serialise and atomically write one record file;
- :mod:`lattice` — the status table and the one function every status change calls;
- :mod:`normalise` — normalised content and its hash (the tombstone key);
- :mod:`errors` — :class:`~cogd.memory.errors.MemoryRefused`, the memory kinds of :class:`cogd.errors.CogdError`;
- :mod:`dedup` — exact, fuzzy-title and embedding duplicate detection;
- :mod:`events` — the append-only ``events`` table, ``tombstones`` and ``intents`` (the ledger),
  and the ops an intent carries;
- :mod:`projection` — ``memory.db``: rows, FTS5, vectors;
- :mod:`anchors` — what the code index says about anchored entities;
- :mod:`gitstate` — how many memory files git does not hold yet;
- :mod:`sync` — the stat scan that carries hand edits through the lattice;
- :mod:`api` — :class:`~cogd.memory.api.MemoryStore`, the operations the CLI and the daemon share;
- :mod:`consolidate` — merge duplicates, promote, decay and prune, over a ``MemoryStore``.

The secret scan and ``<private>`` stripping live in :mod:`cogd.secrets` (one module for memory,
the ledger and the logs).

Nothing here imports :mod:`cogd.daemon`.
"""
