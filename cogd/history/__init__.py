"""The repository's own history as memory: commits mined into a projection (``history.db``).

Modules: :mod:`~cogd.history.git` (git as untrusted input: a safe environment, timeouts,
HEAD read from files), :mod:`~cogd.history.diff` (the log stream parsed into commits and
hunks), :mod:`~cogd.history.store` (the projection: commits, touched definitions, messages
searchable by BM25, co-change pairs), :mod:`~cogd.history.miner` (the daemon's background
thread: which commits, skip rules, hunks onto definitions). docs/architecture.md, "History
as memory", is the design.
"""
