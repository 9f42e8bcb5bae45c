"""The process pool under cogd.index.parsepool: workers replaced, closed and terminated as the stock
``multiprocessing.pool.Pool`` does, with a maintenance thread that waits only on worker exits and
the pool's own changes of state. Real processes (spawned)."""

from __future__ import annotations

import multiprocessing
import os

from cogd.index.parsepool import _QuietPool

SPAWN = multiprocessing.get_context("spawn")


def test_a_worker_that_ends_after_its_tasks_is_replaced_and_every_task_returns():
    pool = _QuietPool(2, maxtasksperchild=1, context=SPAWN)  # each worker exits after one task
    try:
        results = [pool.apply_async(os.getpid) for _ in range(6)]
        pids = [result.get(timeout=120) for result in results]
    finally:
        pool.close()
        pool.join()
    assert len(set(pids)) == 6  # six tasks, six processes: every exited worker was replaced
    assert os.getpid() not in pids


def test_close_waits_for_outstanding_tasks_and_terminate_ends_the_workers():
    pool = _QuietPool(2, context=SPAWN)
    pending = [pool.apply_async(abs, (-n,)) for n in range(20)]
    pool.close()  # with tasks outstanding: the maintenance thread must still see the cache drain
    pool.join()
    assert [p.get(timeout=0) for p in pending] == list(range(20))

    pool = _QuietPool(2, context=SPAWN)
    assert pool.apply_async(abs, (-3,)).get(timeout=60) == 3
    workers = list(pool._pool)
    pool.terminate()
    pool.join()
    assert all(not worker.is_alive() for worker in workers)


def test_the_maintenance_thread_waits_on_the_notifier_not_the_result_pipe():
    pool = _QuietPool(1, context=SPAWN)
    try:
        sentinels = pool._get_sentinels()
        assert pool._change_notifier._reader in sentinels
        assert pool._outqueue._reader not in sentinels  # a result waiting in it woke the stock thread
    finally:
        pool.terminate()
        pool.join()
