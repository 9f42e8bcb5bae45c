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

Saves have a lane of their own (``save_job``): one more parser process, kept
apart from the pool, that parses every small refresh (a save: at most
:data:`cogd.index.trees.TREE_CACHE_FILES` files). Since every save of a file
lands on that one process, it can keep the file's last parse tree and re-parse
incrementally (:class:`cogd.index.trees.TreeCache`), which a pool whose
workers take jobs in turn from one queue cannot. The lane is a
:class:`ParsePool` of one worker, with the same deadline and the same kill on
timeout.
"""

from __future__ import annotations

import collections
import logging
import multiprocessing
import multiprocessing.pool
import os
from collections.abc import Callable, Iterable, Iterator

log = logging.getLogger("cogd.parsepool")

START_SLACK_S = 5.0  # a fresh worker imports tree-sitter and its grammars first
WINDOW_PER_WORKER = 16  # jobs handed out ahead per worker: keeps every worker busy while the caller writes
_END = object()

MAX_WORKERS = 8  # a committed config may not ask for more parser processes than this
AUTO_MAX_WORKERS = 4  # "one per core" stops here: past it the single writer is the bottleneck

Job = tuple  # (path, data, ParseLimits): the arguments of cogd.index.indexer.parse_file


class _QuietPool(multiprocessing.pool.Pool):
    """``multiprocessing.pool.Pool`` whose worker-maintenance thread does not spin while results wait.

    Why: the stock pool's maintenance thread (``Pool._handle_workers``) waits on the worker
    processes' sentinels, its change notifier *and the result pipe*; while a result sits in the
    pipe unread (the result thread has not yet taken it: the GIL is with the writer), every wait
    returns at once, so the thread loops, re-checking the workers, and takes the GIL from the
    writer and the result thread. Measured on a full index of the standard library with two
    parser processes: 0.9 CPU-seconds of the writer process (a fifth of it) in that thread. This
    pool waits as the stock thread pool does (``multiprocessing.pool.ThreadPool._get_sentinels``):
    on the change notifier, which the pool writes on every change of state that thread acts on
    (close, terminate, the task cache emptied), and on the worker sentinels (a worker that exits
    is still replaced at once). Nothing else differs: same queues, same kill on terminate.
    """

    def _get_sentinels(self) -> list:
        return [self._change_notifier._reader]


def worker_count(requested: int, cpus: int | None = None) -> int:
    """How many parser processes to run for ``[index] parse_workers = requested``.

    ``requested`` <= 0 means one per core (``cpus``, default ``os.cpu_count()``),
    at most ``AUTO_MAX_WORKERS``; an explicit count is capped at ``MAX_WORKERS``.
    Always at least 1. One per core, not one per spare core: the writer
    thread mostly waits on SQLite and on the workers' results, so on two
    cores two parsers plus the writer keep both cores busy (measured by
    ``scripts/bench_index.py``).
    """
    if requested <= 0:
        return max(1, min(cpus or os.cpu_count() or 1, AUTO_MAX_WORKERS))
    return min(requested, MAX_WORKERS)


class ParsePool:
    """A restartable pool of parser processes. Not thread-safe: one caller (the index worker)."""

    def __init__(self, workers: int, job: Callable, on_timeout: Callable[[Job], object],
                 initializer: Callable | None = None, initargs: tuple = (), *,
                 save_job: Callable | None = None, forget_job: Callable | None = None):
        """``job``: a module-level function run in the workers (picklable);
        ``on_timeout(job)``: the result to use for a job that ran out of time;
        ``initializer(*initargs)``: run once in each new worker process (picklable).
        ``save_job``: the job of the save lane (:attr:`saves`, a pool of one process started with
        this pool), None for no lane; ``forget_job(paths)``: run in the lane by :meth:`forget`."""
        self.workers = max(1, workers)
        # The save lane: one process of its own, so that every save of a file meets the trees
        # its earlier saves left there (see the module docstring).
        self.saves = (ParsePool(1, save_job, on_timeout, initializer, initargs)
                      if save_job is not None else None)
        self._forget_job = forget_job
        self._initializer, self._initargs = initializer, initargs
        self._job = job
        self._on_timeout = on_timeout
        self._context = multiprocessing.get_context("spawn")  # the daemon has threads: never fork it
        self._pool: multiprocessing.pool.Pool | None = None
        self.restarts = 0

    def _ensure(self) -> tuple[multiprocessing.pool.Pool, bool]:
        fresh = self._pool is None
        if fresh:
            self._pool = _QuietPool(self.workers, self._initializer, self._initargs, maxtasksperchild=5000,
                                    context=self._context)
        return self._pool, fresh

    def forget(self, paths: list[str], budget_s: float = 5.0) -> None:
        """Run ``forget_job(paths)`` in the save lane, if it is running, and wait for it: a file
        deleted or swapped for a link out of the tree leaves the lane's memory with its rows.

        A lane that does not answer within ``budget_s`` seconds is terminated (its memory goes
        with it). No-op without a lane, a ``forget_job`` or a running lane process."""
        lane = self.saves
        if lane is None or lane._pool is None or self._forget_job is None or not paths:
            return
        try:
            lane._pool.apply_async(self._forget_job, (list(paths),)).get(timeout=budget_s)
        except multiprocessing.TimeoutError:
            log.warning("the save lane did not forget %d file(s) within %.1f s: restarted", len(paths), budget_s)
            lane._kill()
            lane.restarts += 1

    def map(self, jobs: list[Job], budget_s: float) -> list:
        """Run ``jobs`` and return their results in order (:meth:`imap` collected into a list)."""
        return list(self.imap(jobs, budget_s))

    def imap(self, jobs: Iterable[Job], budget_s: float, window: int = 0) -> Iterator:
        """Run ``jobs`` (any iterable, consumed lazily) and yield their results in order.

        At most ``window`` jobs are handed to the workers ahead of the result
        the caller waits for (0: ``WINDOW_PER_WORKER`` per worker), so the
        caller's work between two results (writing the previous file) overlaps
        the workers' parsing, and memory stays bounded by the window (jobs
        hold the files' bytes). The queue is first in, first out, so a job is
        running at the latest when the one before it has returned: each result
        is awaited at most ``budget_s`` seconds after the previous one arrived
        (plus start-up time for a fresh pool). On a timeout the pool is
        terminated, that job gets ``on_timeout(job)`` and the jobs already
        handed out go to a new pool, in the same order.
        """
        window = window or WINDOW_PER_WORKER * self.workers
        source = iter(jobs)
        waiting: collections.deque[Job] = collections.deque()  # handed out to this pool, in order
        handles: collections.deque = collections.deque()
        exhausted = False
        while True:
            pool, fresh = self._ensure()
            if fresh and waiting:  # the jobs a terminated pool held, again
                handles = collections.deque(pool.apply_async(self._job, (job,)) for job in waiting)
            returned = 0  # results from this pool so far (a fresh one gets start-up slack)
            while True:
                while not exhausted and len(waiting) < window:
                    job = next(source, _END)
                    if job is _END:
                        exhausted = True
                        break
                    waiting.append(job)
                    handles.append(pool.apply_async(self._job, (job,)))
                if not waiting:
                    # The save lane starts once this pool has done its first run (the daemon's first
                    # index), so it is warm for the first save without taking a core from that index.
                    if self.saves is not None and self.saves._pool is None:
                        self.saves._ensure()
                    return
                job, handle = waiting[0], handles[0]
                wait = budget_s + (START_SLACK_S if fresh and returned < self.workers else 0.0)
                try:
                    result = handle.get(timeout=wait)
                except multiprocessing.TimeoutError:
                    log.warning("parsing %s took longer than %.1f s: indexed by path only", job[0], budget_s)
                    self._kill()  # this pool's processes only: the save lane keeps its trees
                    self.restarts += 1
                    waiting.popleft()
                    handles.clear()
                    yield self._on_timeout(job)
                    break  # a new pool for the rest
                waiting.popleft()
                handles.popleft()
                returned += 1
                yield result

    def _kill(self) -> None:
        if self._pool is not None:
            self._pool.terminate()
            self._pool.join()
            self._pool = None

    def terminate(self) -> None:
        """Kill the worker processes (and the save lane's) now; the next job starts new ones."""
        self._kill()
        if self.saves is not None:
            self.saves.terminate()

    def close(self) -> None:
        """Let the workers (and the save lane) finish their jobs, then end them."""
        if self._pool is not None:
            self._pool.close()
            self._pool.join()
            self._pool = None
        if self.saves is not None:
            self.saves.close()
