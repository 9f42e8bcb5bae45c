"""The daemon's ``status`` method: what the daemon, its index, its workers and its stores are doing.

Read-only and cheap (one count query on the index, the workers' counters), so
``cogd status`` and the hook's health checks may call it at any time.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from functools import partial
from typing import NamedTuple

from cogd import __version__, recovery
from cogd.daemon.parts import Handler, Parts, bind
from cogd.daemon.watcher import off_status
from cogd.index import store
from cogd.paths import Layout
from cogd.rpc.protocol import PROTOCOL_VERSION


class Lifecycle(NamedTuple):
    """The service's own state: ``uptime_s`` (seconds, 3 decimals), ``requests`` served,
    ``ledger_report`` (:class:`cogd.recovery.LedgerReport`: the ledger's check at start)."""

    uptime_s: float
    requests: int
    ledger_report: recovery.LedgerReport


def recovery_status(layout: Layout, report: recovery.LedgerReport) -> dict:
    """For ``cogd status``: given the ledger's check at start (``report``), the newest move of each damaged projection, and the ledger's story.

    ``projections``: ``[{store, moved_to, at, reason, rebuild}]``; ``ledger``:
    ``{state, statement, loss (the unacknowledged loss or None), fix, started_fresh_at,
    started_fresh_records}``.
    """
    cogd_dir = layout.cogd_dir
    loss = recovery.ledger_loss(cogd_dir)
    mark = recovery.read_mark(cogd_dir) or {}
    return {
        "projections": recovery.latest_recoveries(cogd_dir),
        "ledger": {
            "state": "lost" if loss else report.state,
            "statement": loss.get("statement") if loss else report.statement(),
            "loss": loss,
            "fix": recovery.loss_fix(loss) if loss else "",
            "started_fresh_at": mark.get("started_fresh_at"),
            "started_fresh_records": mark.get("started_fresh_records"),
        },
    }


def status(parts: Parts, lifecycle: Lifecycle) -> dict:
    """The ``status`` answer (docs/protocol.md "status"): versions, the index and its worker,
    embedding, watcher, memory, consolidation, recovery, packs not yet in the ledger, and current problems."""
    # Read the ticket before the counts: a caller that sees ticket N served
    # must also see the rows that refresh committed.
    completed = parts.worker.completed
    result = parts.worker.last_result
    conn = parts.reader()
    counts = store.counts(conn)
    return {
        "version": __version__,
        "protocol": PROTOCOL_VERSION,
        "pid": os.getpid(),
        "root": str(parts.layout.root),
        "socket": str(parts.layout.socket_path),
        "uptime_s": lifecycle.uptime_s,
        "requests": lifecycle.requests,
        "last_error": parts.problems.last_error or parts.worker.last_error,
        **_problems_status(parts),
        "languages": _languages_status(),
        "index": {
            **counts,
            "skipped": store.skipped_files(conn),
            "commit": store.get_meta(conn, "commit") or None,
            "indexed_at": float(store.get_meta(conn, "indexed_at") or 0) or None,
            "state": parts.worker.state,
            "progress": dict(parts.worker.progress),
            "queue_depth": parts.worker.queue_depth,
            "completed_ticket": completed,
            "refreshes": parts.worker.refreshes,
            "last_refresh": result.as_dict() if result else None,
        },
        "embedding": _embedding_status(parts),
        "watch": parts.watcher.status() if parts.watcher is not None else off_status(
            "disabled by [watch] enabled = false" if not parts.config.watch.enabled else "not started"),
        "memory": parts.memory.status(),
        "consolidation": parts.consolidator.status(),
        "recovery": recovery_status(parts.layout, lifecycle.ledger_report),
        "deliveries": parts.held.pending(),
    }


def _problems_status(parts: Parts) -> dict:
    """``errors``: the current problems (each until its method, or the index worker, next
    succeeds); ``last_resolved``: the newest problem that cleared, with ``resolved_at``."""
    errors = parts.problems.current()
    resolved = [r for r in (parts.problems.last_resolved, parts.worker.last_resolved) if r]
    if parts.worker.last_error:
        errors.append({"kind": "index.refresh", "error": parts.worker.last_error})
    return {"errors": errors, "last_resolved": max(resolved, key=lambda r: r["resolved_at"], default=None)}


def _languages_status() -> dict:
    """``disabled``: language → why it is off (its grammar did not load or a query did not
    compile; see cogd.index.languages); ``checked``: languages checked so far (those of the
    tree's files, at the first refresh)."""
    from cogd.index import languages

    return {"checked": languages.checked(), "disabled": languages.problems()}


def _embedding_status(parts: Parts) -> dict:
    if parts.embedder is None:
        return {"state": "disabled", "phase": "disabled", "model": None, "coverage": 0.0}
    status = parts.embedder.status()
    if parts.worker.refreshes == 0 and status["phase"] in ("current", "loading"):
        # The index is not listed yet: whatever the embedder counted is not the tree's entities
        # (and the model waits for that first index before it loads: cogd.daemon.embedder).
        status["phase"] = "counting"
    return status


def _status(parts: Parts, params: dict, *, lifecycle: Callable[[], Lifecycle]) -> dict:
    return status(parts, lifecycle())


def methods(parts: Parts, lifecycle: Callable[[], Lifecycle]) -> dict[str, Handler]:
    """``{"status": handler(params)}`` over ``parts``; ``lifecycle()`` gives the Service's own
    state at the time of the call (uptime, requests served: :meth:`Service.lifecycle`)."""
    return bind(parts, {"status": partial(_status, lifecycle=lifecycle)})
