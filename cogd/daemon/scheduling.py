"""Background work gives way to requests: requests in flight, and the priority of background threads.

A hook waits for its answer with the user's prompt in its hands; embedding, consolidation and
the like can wait a little. Two mechanisms, both measured with ``scripts/bench_hooks.py --load``
(docs/architecture.md, "Hooks under load"):

* :class:`RequestTracker` counts the requests the daemon is answering. A background loop calls
  :meth:`RequestTracker.wait_quiet` between its units of work (the embedder: between encoder
  batches) and waits while a request is in flight, and optionally for a quiet window after the
  last one ended (a prompt's hook sends its acknowledgement a moment after its answer, and
  tool-use hooks come in bursts), but never longer than a cap, so a client that never stops
  asking cannot starve the background work.
* :func:`lower_thread_priority` raises the calling thread's nice value (Linux keeps one per
  thread). Threads and processes a thread creates afterwards inherit it, which is why a
  background thread calls it first, before it creates onnxruntime's pool threads or worker
  processes.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

log = logging.getLogger(__name__)

MAX_NICE = 19  # the lowest priority a Linux thread can have


class RequestTracker:
    """How many requests are being answered, and when the last one ended (monotonic seconds).

    Thread-safe: requests enter and leave on the request pool's threads, a background loop waits
    on another. Counters for ``status`` and tests: ``requests`` (entered so far), ``waits`` (calls
    of :meth:`wait_quiet` that did wait) and ``waited_s`` (their total).
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._in_flight = 0
        self._last_end = float("-inf")
        self.requests = 0
        self.waits = 0
        self.waited_s = 0.0

    @property
    def in_flight(self) -> int:
        """Requests entered and not yet left."""
        with self._cond:
            return self._in_flight

    def enter(self) -> None:
        """A request starts being answered (pair with :meth:`leave`; :meth:`track` does both)."""
        with self._cond:
            self._in_flight += 1
            self.requests += 1

    def leave(self) -> None:
        """A request entered with :meth:`enter` has been answered (or failed)."""
        with self._cond:
            self._in_flight = max(0, self._in_flight - 1)
            self._last_end = time.monotonic()
            self._cond.notify_all()

    @contextmanager
    def track(self) -> Iterator[None]:
        """``with tracker.track(): answer()`` — the request counts as in flight inside the block."""
        self.enter()
        try:
            yield
        finally:
            self.leave()

    def wake(self) -> None:
        """Wake every :meth:`wait_quiet` so that it re-checks its ``stopping`` condition."""
        with self._cond:
            self._cond.notify_all()

    def wait_quiet(self, quiet_s: float, max_s: float, stopping: Callable[[], bool] = lambda: False,
                   on_wait: Callable[[], None] | None = None) -> float:
        """Block while a request is in flight or the last one ended less than ``quiet_s`` ago.

        ``quiet_s``: the quiet window after the last request, seconds (0: only while one is in
        flight). ``max_s``: the longest this call blocks, seconds (the background work then does
        one unit and asks again). ``stopping``: checked on every wake-up (:meth:`wake`); True ends
        the wait. ``on_wait``: called once, before blocking, when this call is going to wait.
        Returns the seconds waited, 0.0 when the daemon was quiet already.
        """
        started = time.monotonic()
        deadline = started + max_s
        waited = False
        with self._cond:
            while not stopping():
                now = time.monotonic()
                if self._in_flight == 0:
                    quiet_until = self._last_end + quiet_s
                    if now >= quiet_until:
                        break
                    until = min(quiet_until, deadline)
                else:
                    until = deadline
                if now >= deadline:
                    break
                if not waited:
                    waited = True
                    if on_wait is not None:
                        on_wait()
                self._cond.wait(until - now)
            if not waited:
                return 0.0
            spent = time.monotonic() - started
            self.waits += 1
            self.waited_s += spent
            return spent


# The daemon's one tracker: the socket server enters and leaves it, the embedder waits on it.
requests = RequestTracker()


def thread_nice() -> int | None:
    """The calling thread's nice value (-20..19), None where per-thread priorities do not exist."""
    get_native_id = getattr(threading, "get_native_id", None)
    if get_native_id is None or not hasattr(os, "getpriority"):
        return None
    try:
        return os.getpriority(os.PRIO_PROCESS, get_native_id())
    except OSError:
        return None


def lower_thread_priority(nice: int) -> int | None:
    """Make the calling thread at least ``nice`` nice (0..19; 0 leaves it as it is).

    Linux keeps a nice value per thread (``setpriority(PRIO_PROCESS, tid)`` addresses one thread),
    and threads and processes created afterwards by this thread inherit it. A thread already
    nicer than ``nice`` keeps its value (lowering it needs privileges). Returns the thread's nice
    value afterwards, or None when the platform has no per-thread priority or refused (logged,
    never raised: a priority is a preference, not a requirement).
    """
    nice = max(0, min(int(nice), MAX_NICE))
    current = thread_nice()
    if current is None or nice == 0 or current >= nice:
        return current
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), nice)
    except OSError as exc:
        log.info("could not lower the priority of thread %s: %s", threading.current_thread().name, exc)
        return None
    return thread_nice()


BLAS_THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def single_threaded_blas() -> None:
    """Make numpy's BLAS (OpenBLAS in numpy's wheels) use one thread in this process.

    Must run before numpy is imported: OpenBLAS reads the variables when it loads. The
    daemon's products are small (a query against the KNN matrix, a pack's similarity matrix):
    one thread does them in well under a millisecond at 2,400 x 384, while waking a second
    BLAS thread on a loaded machine made the same search take 16-24 ms (measured with
    ``scripts/bench_hooks.py --load``, docs/architecture.md "Hooks under load"). A variable the
    user set is kept. onnxruntime has its own pool (``[embed] threads``) and is not affected.
    """
    for name in BLAS_THREAD_VARIABLES:
        os.environ.setdefault(name, "1")


class Yielding:
    """How a background worker gives way: the tracker it waits on, its quiet window and cap
    (seconds), and the nice value its thread takes (0: unchanged). See the module docstring."""

    def __init__(self, tracker: RequestTracker, quiet_s: float, max_s: float, nice: int):
        self.tracker, self.quiet_s, self.max_s, self.nice = tracker, quiet_s, max_s, nice

    @property
    def preempts(self) -> bool:
        """Whether the worker waits for requests at all (a cap of 0 turns pre-emption off)."""
        return self.max_s > 0


def daemon_yielding(config) -> Yielding:
    """The daemon's :class:`Yielding` from its ``[daemon]`` settings (:class:`cogd.config.DaemonConfig`):
    ``preempt_quiet_ms``, ``preempt_max_ms`` (0: no pre-emption) and ``background_nice``."""
    return Yielding(requests, config.preempt_quiet_ms / 1000, config.preempt_max_ms / 1000, config.background_nice)
