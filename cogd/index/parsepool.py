"""Parsing in child processes the daemon can kill.

tree-sitter's parse and queries run in C and hold the GIL. A pathological file
(200,000 nested brackets: the tags query is quadratic in the depth) kept a
daemon unresponsive for minutes, and py-tree-sitter 0.26.1 offers no way to
cancel a query (its ``progress_callback`` crashes the interpreter). So the
daemon parses in a small ``multiprocessing`` pool: requests keep being served
while a file parses, and a file that takes longer than its budget is given up
(``timeout``) by terminating the pool, which is then started again.

With more than one worker, files also parse in parallel with the daemon's
SQLite writes. Results come back in submission order, so everything written
stays deterministic.

Each worker process starts with ``initializer(*initargs)``: the daemon passes
:func:`cogd.index.languages.configure`, the repository root and the query
overrides it read, so workers compile exactly the queries the daemon checked,
each language once per process (a disabled language answers
``language_disabled`` for every file without being tried again).
"""

from __future__ import annotations

import logging
import multiprocessing
import multiprocessing.pool
from collections.abc import Callable

log = logging.getLogger("cogd.parsepool")

START_SLACK_S = 5.0  # a fresh worker imports tree-sitter and its grammars first

Job = tuple  # (path, data, ParseLimits): the arguments of cogd.index.indexer.parse_file


class ParsePool:
    """A restartable pool of parser processes. Not thread-safe: one caller (the index worker)."""

    def __init__(self, workers: int, job: Callable, on_timeout: Callable[[Job], object],
                 initializer: Callable | None = None, initargs: tuple = ()):
        """``job``: a module-level function run in the workers (picklable);
        ``on_timeout(job)``: the result to use for a job that ran out of time;
        ``initializer(*initargs)``: run once in each new worker process (picklable)."""
        self.workers = max(1, workers)
        self._initializer, self._initargs = initializer, initargs
        self._job = job
        self._on_timeout = on_timeout
        self._context = multiprocessing.get_context("spawn")  # the daemon has threads: never fork it
        self._pool: multiprocessing.pool.Pool | None = None
        self.restarts = 0

    def _ensure(self) -> tuple[multiprocessing.pool.Pool, bool]:
        fresh = self._pool is None
        if fresh:
            self._pool = self._context.Pool(self.workers, self._initializer, self._initargs, maxtasksperchild=5000)
        return self._pool, fresh

    def map(self, jobs: list[Job], budget_s: float) -> list:
        """Run ``jobs`` and return their results in order.

        Each result is awaited at most ``budget_s`` seconds after the previous
        one arrived (plus start-up time for a fresh pool). On a timeout the
        pool is terminated, that job gets ``on_timeout(job)`` and the rest run
        in a new pool.
        """
        results: list = []
        remaining = list(jobs)
        while remaining:
            pool, fresh = self._ensure()
            pending = [pool.apply_async(self._job, (job,)) for job in remaining]
            for n, (job, handle) in enumerate(zip(remaining, pending)):
                wait = budget_s + (START_SLACK_S if fresh and n < self.workers else 0.0)
                try:
                    results.append(handle.get(timeout=wait))
                except multiprocessing.TimeoutError:
                    log.warning("parsing %s took longer than %.1f s: indexed by path only", job[0], budget_s)
                    self.terminate()
                    self.restarts += 1
                    results.append(self._on_timeout(job))
                    remaining = remaining[n + 1 :]
                    break
            else:
                remaining = []
        return results

    def terminate(self) -> None:
        if self._pool is not None:
            self._pool.terminate()
            self._pool.join()
            self._pool = None

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool.join()
            self._pool = None
