"""The LanceDB vector table written from a child process, so LanceDB and Arrow stay out of the daemon.

Why: importing ``lancedb`` and ``pyarrow`` adds about 105 MB to a process's
resident size (their native libraries), and writing 60,000 rows adds about
80 MB of Arrow buffers and a compaction's worth more
(``scripts/bench_vector_writes.py``), while the daemon never reads the
table on a query path: searches go to the in-memory
:class:`cogd.index.vectors.DenseIndex`. So the daemon holds a
:class:`ChildVectorStore`, a stand-in with the calls the embedding thread
makes (``state``, ``upsert``, ``delete``, ``compact``), and the real
:class:`cogd.index.vectors.VectorStore` runs in a child process
(``python -m cogd.index.vector_proc``) that is started when the table is
first needed and ended after :data:`IDLE_S` seconds without a write
(:meth:`ChildVectorStore.release`): a burst of saves shares one child; a
quiet daemon has none.

Protocol (the child's stdin and stdout, this module's own framing): a
frame is 16 bytes of two little-endian uint64 (header length, payload
length), a UTF-8 JSON header and a raw payload. Requests: ``open`` (dir,
dim, model) → the rows' state and ``model``'s vectors (ids, kinds and paths
in the header, the float32 matrix as the payload); ``upsert`` (rows
without vectors in the header, their vectors as the payload); ``delete``
(ids); ``compact`` (force); ``close``. Every reply is ``{"ok": true, ...}``
or ``{"ok": false, "error": ...}``; an error is raised in the daemon as
:class:`VectorProcError` and the child is ended (the next call starts a
fresh one, which reads the table again). Nothing but numbers and strings
crosses the pipe (no pickle).
"""

from __future__ import annotations

import json
import logging
import os
import struct
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping
from pathlib import Path

import numpy as np

log = logging.getLogger("cogd.vectors")

IDLE_S = 60.0  # a child unused this long is ended by release()
START_TIMEOUT_S = 300.0  # importing LanceDB on a loaded machine can take a while
_FRAME = struct.Struct("<QQ")


class VectorProcError(RuntimeError):
    """The vector child failed: it died, answered garbage, or LanceDB raised (the message says which)."""


def _write(fh, header: dict, payload: bytes | memoryview = b"") -> None:
    # payload: any contiguous buffer (a vector matrix's own memory, not a bytes copy of it)
    data = json.dumps(header, separators=(",", ":")).encode("utf-8")
    size = memoryview(payload).nbytes
    fh.write(_FRAME.pack(len(data), size))
    fh.write(data)
    if size:
        fh.write(payload)
    fh.flush()


def _read_exact(fh, n: int) -> bytes:
    chunks, got = [], 0
    while got < n:
        chunk = fh.read(n - got)
        if not chunk:
            raise EOFError(f"pipe closed after {got} of {n} bytes")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def _read(fh) -> tuple[dict, bytes]:
    head = fh.read(_FRAME.size)
    if not head:
        raise EOFError("pipe closed")
    if len(head) < _FRAME.size:
        head += _read_exact(fh, _FRAME.size - len(head))
    size, payload_size = _FRAME.unpack(head)
    header = json.loads(_read_exact(fh, size).decode("utf-8"))
    payload = _read_exact(fh, payload_size) if payload_size else b""
    if not isinstance(header, dict):
        raise ValueError("a frame header must be a JSON object")
    return header, payload


class ChildVectorStore:
    """The calls of :class:`cogd.index.vectors.VectorStore` the embedding thread makes, served by a child.

    ``directory``: the table's folder (``.cogd/index/vectors``); ``dim``: vector length;
    ``model``: the model whose rows :meth:`open` returns. One caller thread (the embedding
    thread), like the store it stands for. :meth:`state` is answered from a copy kept here
    (no round trip); writes go to the child and wait for its answer. Raises VectorProcError.
    """

    def __init__(self, directory: Path, dim: int, model: str):
        self.directory = Path(directory)
        self.dim = dim
        self.model = model
        self._proc: subprocess.Popen | None = None
        # id → src_hash for rows of ``model`` (the usual case), id → (model, src_hash) for others:
        # one small string per row instead of a tuple and a copy of the model id per row.
        self._state: dict[str, str | tuple[str, str]] | None = None
        self._used = time.monotonic()
        self._loaded: tuple | None = None
        self._deletes: list[str] = []  # deleted here, not yet in the table: sent before the next write
        self.started = 0  # children started (tests and status read it)

    # ---- the child ----------------------------------------------------------------
    def _call(self, header: dict, payload: bytes | memoryview = b"") -> tuple[dict, bytes]:
        proc = self._ensure()
        try:
            assert proc.stdin is not None and proc.stdout is not None
            _write(proc.stdin, header, payload)
            reply, data = _read(proc.stdout)
        except (OSError, EOFError, ValueError) as exc:
            self._end()
            raise VectorProcError(f"vector child failed during {header.get('op')}: {exc}") from exc
        self._used = time.monotonic()
        if not reply.get("ok"):
            self._end()
            raise VectorProcError(f"vector child: {reply.get('error', 'unknown error')}")
        return reply, data

    def _ensure(self, rows: bool = False) -> subprocess.Popen:
        """The running child, started first when there is none (``rows``: also fetch ``model``'s vectors)."""
        if self._proc is not None and self._proc.poll() is None:
            return self._proc
        self._proc = None
        env = {**os.environ}
        proc = subprocess.Popen([sys.executable, "-m", "cogd.index.vector_proc"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, env=env, close_fds=True)
        self._proc = proc
        self.started += 1
        try:
            assert proc.stdin is not None and proc.stdout is not None
            _write(proc.stdin, {"op": "open", "dir": str(self.directory), "dim": self.dim, "model": self.model,
                                "rows": rows})
            reply, data = _read(proc.stdout)
        except (OSError, EOFError, ValueError) as exc:
            self._end()
            raise VectorProcError(f"vector child did not start: {exc}") from exc
        if not reply.get("ok"):
            self._end()
            raise VectorProcError(f"vector child: {reply.get('error', 'unknown error')}")
        model = self.model
        self._state = {i: (h if m == model else (m, h)) for i, m, h in reply["state"]}
        for i in self._deletes:  # queued deletions the table does not know yet
            self._state.pop(i, None)
        if rows:
            matrix = np.frombuffer(data, dtype="<f4").reshape(len(reply["ids"]), self.dim)
            self._loaded = (reply["ids"], reply["kinds"], reply["paths"], matrix)
        return proc

    def _end(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        try:
            if proc.poll() is None and proc.stdin is not None:
                try:
                    _write(proc.stdin, {"op": "close"})
                except OSError:
                    pass
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        finally:
            for pipe in (proc.stdin, proc.stdout):
                if pipe is not None:
                    pipe.close()

    # ---- the store's calls ---------------------------------------------------------
    def open(self) -> tuple[list[str], list[str], list[str], np.ndarray]:
        """Start a child, which opens the table (moving a damaged one aside, as
        :func:`cogd.index.vectors.open_vectors` does) and sends ``(ids, kinds, paths, matrix)``
        of ``model``'s rows."""
        self._end()
        self._ensure(rows=True)
        loaded, self._loaded = self._loaded, None
        assert loaded is not None
        return loaded

    def _known(self) -> dict[str, str | tuple[str, str]]:
        if self._state is None:
            self._ensure()
        assert self._state is not None
        return self._state

    def state(self) -> dict[str, tuple[str, str]]:
        """id → (model, src_hash) of every stored row (a copy; read by a child once, then kept here)."""
        model = self.model
        return {i: (v if isinstance(v, tuple) else (model, v)) for i, v in self._known().items()}

    def holds(self, entity_id: str, src_hash: str) -> bool:
        """True when the table has ``entity_id``'s row made by ``model`` from text of ``src_hash``."""
        return self._known().get(entity_id) == src_hash

    def stale_ids(self, current: Mapping[str, object]) -> list[str]:
        """Stored ids that are not keys of ``current`` (the index's entities) or were made by
        another model: the rows a pass deletes before it embeds."""
        return [i for i, v in self._known().items() if isinstance(v, tuple) or i not in current]

    def upsert(self, rows: list[dict]) -> None:
        """Insert or replace rows (dicts with id, kind, path, model, src_hash, vector; optional status)."""
        if not rows:
            return
        self.flush()
        meta = [[r["id"], r["kind"], r["path"], r["model"], r["src_hash"], r.get("status", "active")] for r in rows]
        matrix = np.empty((len(rows), self.dim), dtype="<f4")  # filled in place: no stacked copy and no bytes copy
        for k, r in enumerate(rows):
            matrix[k] = np.asarray(r["vector"], dtype="<f4").reshape(self.dim)
        self._call({"op": "upsert", "rows": meta}, memoryview(matrix).cast("B"))
        if self._state is not None:
            model = self.model
            self._state.update((r["id"], r["src_hash"] if r["model"] == model else (r["model"], r["src_hash"]))
                               for r in rows)

    def delete(self, ids: Iterable[str]) -> int:
        """Delete rows by id; returns how many ids were asked for.

        The state copy forgets them now; the table is told before the next write (:meth:`flush`),
        so a pass that only deletes a few rows never waits for a child to start before it embeds.
        """
        ids = list(ids)
        if ids:
            self._deletes.extend(ids)
            if self._state is not None:
                for i in ids:
                    self._state.pop(i, None)
        return len(ids)

    def flush(self) -> None:
        """Send the deletions not yet in the table (starting a child if needed)."""
        if self._deletes:
            ids = list(self._deletes)
            self._call({"op": "delete", "ids": ids})  # on failure they stay queued for the next write
            del self._deletes[:len(ids)]

    def compact(self, *, force: bool = False) -> None:
        """Send pending deletions, then ask the child to compact (see
        :meth:`cogd.index.vectors.VectorStore.compact`); with no child and nothing pending, a no-op."""
        self.flush()
        if self._proc is not None and self._proc.poll() is None:
            self._call({"op": "compact", "force": force})

    def idle_for(self) -> float | None:
        """Seconds since the child last answered, or None when no child runs."""
        if self._proc is None or self._proc.poll() is not None:
            return None
        return time.monotonic() - self._used

    def release(self) -> bool:
        """End the child (its memory goes back to the system); True when one was running.
        The state copy is kept: the next write starts a fresh child."""
        running = self._proc is not None
        if running:
            try:
                self.flush()
            except VectorProcError:
                log.warning("vector table deletions not written yet: kept for the next write", exc_info=True)
        self._end()
        return running

    def close(self) -> None:
        """Send pending deletions (best effort) and end the child."""
        try:
            self.flush()
        except VectorProcError:
            log.warning("vector table deletions not written at close: the next pass makes them again")
        self._end()


def _serve(stdin, stdout) -> int:
    """The child's loop: read requests from ``stdin``, answer on ``stdout`` (binary pipes)."""
    from cogd.index.vectors import open_vectors

    store = None
    while True:
        try:
            header, payload = _read(stdin)
        except EOFError:
            return 0
        op = header.get("op")
        try:
            if op == "close":
                return 0
            if op == "open":
                store, (ids, kinds, paths, matrix) = open_vectors(Path(header["dir"]), int(header["dim"]),
                                                                  str(header["model"]))
                state = [[i, m, h] for i, (m, h) in store.state().items()]
                if not header.get("rows"):
                    ids, kinds, paths, matrix = [], [], [], np.zeros((0, store.dim), dtype="<f4")
                _write(stdout, {"ok": True, "state": state, "ids": ids, "kinds": kinds, "paths": paths},
                       np.ascontiguousarray(matrix, dtype="<f4").tobytes())
                continue
            if store is None:
                raise RuntimeError(f"{op!r} before open")
            if op == "upsert":
                meta = header["rows"]
                matrix = np.frombuffer(payload, dtype="<f4").reshape(len(meta), store.dim)
                store.upsert([{"id": i, "kind": k, "path": p, "model": m, "src_hash": h, "status": s,
                               "vector": matrix[n]} for n, (i, k, p, m, h, s) in enumerate(meta)])
            elif op == "delete":
                store.delete(header["ids"])
            elif op == "compact":
                store.compact(force=bool(header.get("force")))
            else:
                raise RuntimeError(f"unknown request {op!r}")
            _write(stdout, {"ok": True})
        except Exception as exc:  # LanceDB and Arrow raise their own types; the daemon sees the text
            _write(stdout, {"ok": False, "error": f"{exc.__class__.__name__}: {exc}"[:2000]})


def _main() -> int:
    """Child entry point: the protocol on a private copy of stdout; fd 1 then points at stderr,
    so a library that prints cannot corrupt a frame."""
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    return _serve(sys.stdin.buffer, out)


if __name__ == "__main__":
    sys.exit(_main())
