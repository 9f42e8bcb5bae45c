"""The daemon's memory consolidation runner: one run at a time, in the background or on request.

See :func:`cogd.memory.consolidate.consolidate` for what a run does (dedup, promote,
decay, retention) and docs/memory.md for when it runs.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

from cogd.config import ConsolidateConfig
from cogd.errors import CogdError

log = logging.getLogger(__name__)


class Consolidator:
    """Runs :func:`cogd.memory.consolidate.consolidate` for the daemon: on a background thread at
    session end and once per idle stretch, synchronously for ``memory.consolidate``.

    One run at a time: a background request while a run is going marks one more run
    (coalesced); :meth:`run` waits for the running one (at most ``wait_s``). Failures
    are logged and kept in ``last_error``; they never reach a hook.
    """

    def __init__(self, memory, state_db: Path, config: ConsolidateConfig, wait_s: float = 120.0, nice: int = 0):
        self.memory = memory
        self.nice = nice  # the background thread's nice value (cogd.daemon.scheduling); 0: unchanged
        self.state_db = state_db
        self.config = config
        self.wait_s = wait_s
        self._run_lock = threading.Lock()
        self._state = threading.Lock()
        self._thread: threading.Thread | None = None
        self._again: str | None = None
        self._idle_mark: float | None = None  # the last_request_at whose idle stretch was consolidated
        self.last_report: dict | None = None
        self.last_error: str | None = None
        self.runs = 0

    def status(self) -> dict:
        """For ``cogd status``: runs so far, the last run's trigger, time (unix s) and counts, the last error."""
        last = self.last_report or {}
        return {"runs": self.runs, "last_trigger": last.get("trigger"), "last_finished_at": last.get("finished_at"),
                "last_counts": last.get("counts"), "last_error": self.last_error}

    def run(self, trigger: str, *, dry_run: bool = False) -> dict:
        """One run now (waits for a running one); returns the report as a dict.

        Raises CogdError: ``busy`` when a run holds the lock past ``wait_s``; the
        consolidation's own refusals (:class:`~cogd.memory.errors.MemoryRefused`) as they are.
        """
        from cogd.memory.consolidate import consolidate

        if not self._run_lock.acquire(timeout=self.wait_s):
            raise CogdError("busy", f"a consolidation has been running for over {self.wait_s:.0f} s; try again later")
        try:
            report = consolidate(self.memory, self.state_db, self.config, dry_run=dry_run, trigger=trigger).as_dict()
            if not dry_run:
                self.runs += 1
                self.last_report = {**report, "trigger": trigger, "finished_at": time.time()}
                if report["actions"] or report["errors"]:
                    log.info("consolidation (%s): %s; %d errors", trigger, report["counts"], len(report["errors"]))
            return report
        finally:
            self._run_lock.release()

    def kick(self, trigger: str) -> bool:
        """Consolidate on a background thread (never blocks the caller). Returns False when disabled."""
        if not self.config.enabled:
            return False
        with self._state:
            if self._thread is not None and self._thread.is_alive():
                self._again = trigger
                return True
            self._thread = threading.Thread(target=self._background, args=(trigger,), name="cogd-consolidate",
                                            daemon=True)
            self._thread.start()
        return True

    def _background(self, trigger: str) -> None:
        if self.nice:
            from cogd.daemon.scheduling import lower_thread_priority

            lower_thread_priority(self.nice)  # background work: hooks go first
        while True:
            try:
                self.run(trigger)
                self.last_error = None
            except Exception as exc:  # noqa: BLE001 — logged; the daemon goes on
                self.last_error = f"{exc.__class__.__name__}: {exc}"
                log.exception("consolidation (%s) failed", trigger)
            with self._state:
                if self._again is None:
                    self._thread = None
                    return
                trigger, self._again = self._again, None

    def on_idle(self, last_request_at: float, now: float) -> bool:
        """Called by the daemon's housekeeping (monotonic seconds): consolidate once per idle stretch
        of ``[consolidate] idle_after_s``. Returns whether a run was started."""
        idle_after = self.config.idle_after_s
        if not idle_after or now - last_request_at < idle_after or self._idle_mark == last_request_at:
            return False
        self._idle_mark = last_request_at
        return self.kick("idle")

    def join(self, timeout: float | None = None) -> None:
        """Wait for a background run (daemon shutdown, tests)."""
        thread = self._thread
        if thread is not None:
            thread.join(timeout)
