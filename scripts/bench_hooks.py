#!/usr/bin/env python3
"""Benchmark the end-to-end latency of the real ``cogd-hook`` processes.

What it measures
----------------
The wall-clock time (``time.perf_counter``) from starting a ``cogd-hook``
process to its exit, with its stdin fed and its stdout drained, exactly as a
client such as Claude Code pays it on every prompt:

* ``cogd-hook prompt-submit`` with real-shaped UserPromptSubmit payloads
  (``tests/fixtures/hook-payloads/user_prompt_submit.json``), rotating through
  ten prompts about the code in the repository;
* ``cogd-hook post-tool-use`` with the Read fixture pointed at real files of
  the repository (real content, real line counts);
* ``cogd-hook session-start`` with the startup fixture;
* the floor, with the hook's own interpreter: ``python -c pass`` and
  ``python -S -c pass``; and, for reference, ``python -c "import
  cogd.hookclient"`` (start-up plus the hook client's imports, no socket).

The repository is a temporary git repository holding copies of the running
interpreter's standard-library packages json, email, http, logging and
asyncio, committed, with a warm daemon (``cogd start`` then ``cogd index``).
The daemon runs cogd's default configuration (hybrid retrieval: BM25 plus the
embedding model) and the runs start once every entity has its vector, so that
no background embedding competes for the CPU; ``--lexical`` measures a
lexical-only daemon (``[embed] enabled = false``) instead.
Before measuring, the bytecode of the hook's package is compiled (as pip does
on install), so that a ``PYTHONDONTWRITEBYTECODE`` environment or a freshly
edited source tree does not make every hook compile its modules.
Each command gets 10 unmeasured warm-up runs; measured runs are interleaved
round-robin (the order rotates every round) so that load drift hits every
command alike. Every context hook run must exit 0 and print a JSON object
with ``hookSpecificOutput.additionalContext``; anything else (including
printing nothing) counts as a failure. ``post-tool-use`` must exit 0 and
print nothing (that event injects no context); any line the runs add to
``.cogd/logs/hook.log`` is reported, since the hook logs only what went wrong.

The daemon is stopped and the temporary directory removed at the end, also on
Ctrl-C or an error (``--keep`` keeps the directory and leaves the daemon up).

Under load
----------
``--load N`` starts N busy processes (pure CPU loops of the bench's own
interpreter, each in its own session and process group, as a build in another
terminal would run) before the warm-up and keeps them running through the
measured rounds. They are always stopped by the bench itself: in a ``finally``
block (Ctrl-C, SIGTERM and errors included), again at interpreter exit
(``atexit``), and, should the bench be killed outright, each one notices that
its parent changed and exits on its own within a fraction of a second. The
ratio ``prompt-submit p50 / python -c pass p50`` of the same rounds is printed
with the load averages (1/5/15 min) before, during and after the runs and the
CPU time each busy process received. With ``--load`` the ratio is a goal
(``--ratio-goal``, default 2.5) in the exit status as well.

``--embedding`` measures while the daemon embeds instead of after it finished:
the runs start as soon as the embedder is working, on a larger repository
(``EMBEDDING_PACKAGES``; ``--packages`` overrides), and the embedder's state
and counters before and after the runs are printed, so a run whose embedding
finished early says so. ``--config-toml`` appends lines to the repository's
``.cogd/config.toml`` (to measure a daemon setting, e.g. ``[daemon]
background_nice = 0``).

Latency goals: p95 of ``prompt-submit`` <= 40 ms and of
``post-tool-use`` <= 25 ms, each printed with the same run's floor
(``python -c pass``) beside it; the exit status is 0 only when both are met
with no failures.

How to run
----------
    python scripts/bench_hooks.py [--runs 200] [--json]
    python scripts/bench_hooks.py --load 3 --runs 100 [--embedding]

Other options: ``--other-runs N`` (post-tool-use and session-start; default
the same as ``--runs``), ``--warmup 10``, ``--goal-ms 40`` (prompt-submit),
``--tool-goal-ms 25`` (post-tool-use), ``--lexical``, ``--keep``,
``--baseline-hook PATH`` (another ``cogd-hook`` script, e.g. an older
version's, measured in the same rounds against the same daemon: the client side alone),
``--baseline-bin DIR`` (another installation's ``bin/`` folder, e.g. a venv of an older
commit: its ``cogd`` starts its own daemon on a second copy of the repository, or on
``--baseline-repo PATH`` kept by an earlier ``--keep``, and its ``cogd-hook`` is measured
against that daemon in the same rounds, so a before/after comparison covers the daemon's
side too; both ratios to the same floor are printed),
``--packages json,email``, ``--load N``, ``--ratio-goal 2.5``, ``--embedding``,
``--config-toml TEXT``, ``--repo PATH`` (a repository a ``--keep`` run left, measured again
with its vectors: variants of one daemon setting without re-embedding), ``--cogd PATH``, ``--cogd-hook PATH`` (default: the console scripts next to
``sys.executable``), ``--python PATH`` (the floor's interpreter; default: the
one in the ``cogd-hook`` script's ``#!`` line). Standard library only.
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

STDLIB_PACKAGES = ("json", "email", "http", "logging", "asyncio")
# --embedding: enough entities that the embedder is still busy when the runs end on a loaded machine
EMBEDDING_PACKAGES = STDLIB_PACKAGES + ("unittest", "xml", "multiprocessing", "concurrent", "importlib", "tomllib",
                                        "urllib", "sqlite3", "collections", "ctypes")
LOAD_MARK = "cogd-bench-load"  # in every busy process's argv, so that it can be recognised in ps
# A pure CPU loop; every ~4M iterations (a fraction of a second) it checks that its parent (the
# bench) is still the one that started it, and exits when not: even a SIGKILLed bench leaves none.
LOAD_CODE = (
    "import os, sys\n"
    "parent = int(sys.argv[2])\n"
    "n = 0\n"
    "while True:\n"
    "    n += 1\n"
    "    if not n & 0x3FFFFF and os.getppid() != parent:\n"
    "        sys.exit(0)\n"
)
DEFAULT_FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "hook-payloads"
RUN_TIMEOUT_S = 10.0

PROMPTS = (
    "Why does json.loads raise JSONDecodeError with the wrong column for an unterminated string? Look at py_scanstring.",
    "Add a sort_keys-aware fast path to JSONEncoder.iterencode and make sure _make_iterencode still handles circular references.",
    "email.message.Message.get_payload(decode=True) returns None for a multipart message; explain why and fix it.",
    "The header folding in email._header_value_parser breaks long encoded words; where is the fold policy applied?",
    "http.client.HTTPConnection hangs when the server sends a chunked response without a final chunk. Where is _read_chunked?",
    "Make http.server.SimpleHTTPRequestHandler send a Last-Modified header for directory listings.",
    "logging.handlers.RotatingFileHandler loses records when two processes rotate at once; how does shouldRollover decide?",
    "Why does logging.config.dictConfig ignore the 'disable_existing_loggers' key for child loggers?",
    "asyncio.wait_for leaves the inner task running after a timeout in some cases; trace the cancellation path in tasks.py.",
    "Explain how BaseEventLoop.create_connection staggers happy-eyeballs attempts and where the sockets are closed on error.",
)

READ_FILES = ("json/decoder.py", "email/message.py", "http/client.py", "logging/__init__.py", "asyncio/tasks.py")


class BenchError(RuntimeError):
    pass


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def git(root: Path, *args: str) -> None:
    env = {**os.environ, "GIT_AUTHOR_NAME": "bench", "GIT_AUTHOR_EMAIL": "bench@example.com",
           "GIT_COMMITTER_NAME": "bench", "GIT_COMMITTER_EMAIL": "bench@example.com"}
    subprocess.run(["git", "-C", str(root), "-c", "commit.gpgsign=false", *args],
                   check=True, capture_output=True, text=True, env=env)


def build_repo(root: Path, packages: tuple[str, ...] = STDLIB_PACKAGES) -> int:
    """Copy the standard-library packages into ``root`` and commit them; returns the file count."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    root.mkdir(parents=True)
    for name in packages:
        shutil.copytree(stdlib / name, root / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "standard-library packages for the hook benchmark")
    return sum(1 for p in root.rglob("*") if p.is_file() and ".git" not in p.parts)


def run_cogd(cogd: str, root: Path, *args: str, timeout: float = 600) -> str:
    proc = subprocess.run([cogd, *args], cwd=root, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise BenchError(f"cogd {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc.stdout.strip()


def hook_interpreter(cogd_hook: str) -> str:
    """The interpreter named by the console script's ``#!`` line (else sys.executable)."""
    try:
        with open(cogd_hook, "rb") as fh:
            first = fh.readline().decode("utf-8", "replace").strip()
        if first.startswith("#!"):
            parts = first[2:].split()
            if parts and os.path.basename(parts[0]) != "env" and os.access(parts[0], os.X_OK):
                return parts[0]
    except OSError:
        pass
    return sys.executable


def load_fixture(fixtures: Path, name: str, cwd: Path) -> dict:
    text = (fixtures / name).read_text(encoding="utf-8")
    text = (text.replace("{{CWD}}", str(cwd))
                .replace("{{HOME}}", os.path.expanduser("~"))
                .replace("{{PROJECT_SLUG}}", str(cwd).replace("/", "-")))
    return json.loads(text)


def start_repo(cogd: str, root: Path, reuse: bool, packages: tuple[str, ...], config_toml: str) -> int:
    """Build (unless ``reuse``) the repository at ``root``, write its config, start its daemon
    with ``cogd`` and index it. Returns the number of files (``.git`` and ``.cogd`` left out)."""
    if not reuse:
        log(f"building the repository in {root} ...")
        nfiles = build_repo(root, packages)
    else:  # a repository kept by an earlier --keep run: its vectors are reused
        log(f"reusing the repository {root} ...")
        nfiles = sum(1 for p in root.rglob("*") if p.is_file() and ".git" not in p.parts and ".cogd" not in p.parts)
    if config_toml or reuse:
        (root / ".cogd").mkdir(exist_ok=True)
        (root / ".cogd" / "config.toml").write_text(config_toml + "\n", encoding="utf-8")
    log(f"  {nfiles} files; cogd start ...")
    log("  " + run_cogd(cogd, root, "start", timeout=120))
    log("  cogd index ...")
    log("  " + " ".join(run_cogd(cogd, root, "index").split()))
    return nfiles


def hook_inputs(fx: Path, root: Path) -> tuple[list[bytes], list[bytes], list[bytes]]:
    """The stdin payloads for ``root``: the prompts, the Read tool uses of real files, session start."""
    prompt_base = load_fixture(fx, "user_prompt_submit.json", root)
    prompt_inputs = [json.dumps({**prompt_base, "prompt": text}).encode() for text in PROMPTS]
    read_base = load_fixture(fx, "post_tool_use.read.json", root)
    read_inputs = []
    read_files = [rel for rel in READ_FILES if (root / rel).is_file()] or sorted(
        str(p.relative_to(root)) for p in root.rglob("*.py") if ".git" not in p.parts)[:5]
    for rel in read_files:
        path = root / rel
        content = path.read_text(encoding="utf-8", errors="replace")
        nlines = len(content.splitlines())
        payload = json.loads(json.dumps(read_base))  # a deep copy
        payload["tool_input"]["file_path"] = str(path)
        payload["tool_response"]["file"].update(
            filePath=str(path), content=content, numLines=nlines, startLine=1, totalLines=nlines)
        read_inputs.append(json.dumps(payload).encode())
    start_input = [json.dumps(load_fixture(fx, "session_start.startup.json", root)).encode()]
    return prompt_inputs, read_inputs, start_input


# --------------------------------------------------------------------------- checks

def check_context(event_name: str):
    def check(proc: subprocess.CompletedProcess) -> str | None:
        if proc.returncode != 0:
            return f"exit {proc.returncode}"
        out = proc.stdout.strip()
        if not out:
            return "printed nothing"
        try:
            data = json.loads(out)
        except ValueError as exc:
            return f"stdout is not JSON: {exc}"
        hso = data.get("hookSpecificOutput") if isinstance(data, dict) else None
        if not isinstance(hso, dict):
            return "no hookSpecificOutput object"
        if hso.get("hookEventName") != event_name:
            return f"hookEventName {hso.get('hookEventName')!r}"
        ctx = hso.get("additionalContext")
        if not isinstance(ctx, str) or not ctx:
            return "no additionalContext"
        return None
    return check


def check_silent(proc: subprocess.CompletedProcess) -> str | None:
    if proc.returncode != 0:
        return f"exit {proc.returncode}"
    if proc.stdout.strip():
        return "printed output (expected nothing)"
    return None


def check_exit0(proc: subprocess.CompletedProcess) -> str | None:
    return None if proc.returncode == 0 else f"exit {proc.returncode}"


# --------------------------------------------------------------------------- measurement

class Task:
    def __init__(self, name: str, argv: list[str], runs: int, cwd: Path, check, inputs: list[bytes] | None = None,
                 floor: bool = False):
        self.name = name
        self.argv = argv
        self.runs = runs
        self.cwd = cwd
        self.check = check
        self.inputs = inputs or [b""]
        self.floor = floor
        self.times: list[float] = []
        self.failures: list[str] = []
        self.warmup_failures = 0
        self._next = 0

    def once(self, env: dict) -> tuple[float, str | None]:
        data = self.inputs[self._next % len(self.inputs)]
        self._next += 1
        started = time.perf_counter()
        try:
            proc = subprocess.run(self.argv, input=data, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  cwd=self.cwd, env=env, timeout=RUN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return time.perf_counter() - started, f"timed out after {RUN_TIMEOUT_S:.0f} s"
        elapsed = time.perf_counter() - started
        return elapsed, self.check(proc)


def percentile(values: list[float], q: float) -> float:
    """Linear-interpolated percentile (q in 0..100) of a non-empty list."""
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    pos = (len(ordered) - 1) * q / 100
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def round_robin(tasks: list[Task], env: dict, warmup: int) -> tuple[float, float] | None:
    """Warm up, then run every task's measured runs round-robin. Returns the (lowest, highest)
    1-minute load average sampled every 50 rounds (None when unavailable)."""
    # warm-up: unmeasured, interleaved as well
    for i in range(warmup):
        for task in tasks:
            _, failure = task.once(env)
            if failure:
                task.warmup_failures += 1
    for task in tasks:
        task._next = 0
    total = max(t.runs for t in tasks)
    started = time.monotonic()
    samples: list[tuple[float, float, float]] = []
    for i in range(total):
        active = [t for t in tasks if i < t.runs]
        shift = i % len(active)
        for task in active[shift:] + active[:shift]:  # rotate the order every round
            elapsed, failure = task.once(env)
            task.times.append(elapsed)
            if failure:
                task.failures.append(failure)
        if (i + 1) % 50 == 0 or i + 1 == total:
            loads = _loadavgs()
            if loads:
                samples.append(loads)
            log(f"  round {i + 1}/{total} ({time.monotonic() - started:.0f} s, load avg {loads})")
    # the 1-minute load average sampled every 50 rounds: its lowest and highest
    ones = [s[0] for s in samples]
    return (min(ones), max(ones)) if ones else None


# --------------------------------------------------------------------------- set-up

def wait_for_embeddings(cogd: str, root: Path, timeout: float = 900) -> None:
    """Return once every entity has its vector and the embedder is idle (so it stops using CPU)."""
    log("  waiting for embedding coverage ...")
    deadline = time.monotonic() + timeout
    embedding: dict = {}
    while time.monotonic() < deadline:
        embedding = json.loads(run_cogd(cogd, root, "status", "--json"))["embedding"]
        if embedding.get("coverage") == 1.0 and embedding.get("state") == "idle" and not embedding.get("queued"):
            return
        if embedding.get("state") == "error":
            break
        time.sleep(1)
    raise BenchError(f"embedding did not finish: {embedding}")


def compile_hook_package(python: str, log) -> None:
    """Write the bytecode of the ``cogd`` package the hook interpreter imports.

    An installed wheel has it; an editable install under ``PYTHONDONTWRITEBYTECODE``
    (or just edited) does not, and every hook would then compile its modules (~3 ms).
    """
    code = ("import compileall, os, cogd; "
            "ok = compileall.compile_dir(os.path.dirname(cogd.__file__), quiet=1); print(cogd.__file__, ok)")
    proc = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=300, cwd="/")
    log(f"  bytecode compiled: {proc.stdout.strip() or proc.stderr.strip()[-300:]}")


# --------------------------------------------------------------------------- reporting

def goal_result(row: dict, goal_ms: float, floor: dict) -> dict:
    """One goal's verdict, with the same run's floor beside it."""
    met = row["p95_ms"] <= goal_ms and row["failures"] == 0
    line = (f"{row['command']}: p50 {row['p50_ms']:.1f} / p95 {row['p95_ms']:.1f} ms "
            f"(floor {floor['command']}: p50 {floor['p50_ms']:.1f} / p95 {floor['p95_ms']:.1f} ms); "
            f"goal p95 <= {goal_ms:g} ms: {'met' if met else 'NOT met'}"
            + (f" ({row['failures']} failures of {row['runs']})" if row["failures"] else ""))
    return {"command": row["command"], "p50_ms": row["p50_ms"], "p95_ms": row["p95_ms"], "p95_ms_max": goal_ms,
            "failures": row["failures"], "floor_p50_ms": floor["p50_ms"], "floor_p95_ms": floor["p95_ms"],
            "met": met, "line": line}


def machine_info(python: str) -> dict:
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").splitlines():
            if line.lower().startswith(("model name", "hardware", "processor\t: ")) and ":" in line:
                value = line.split(":", 1)[1].strip()
                if value and not value.isdigit():
                    cpu = value
                    break
    except OSError:
        pass
    cpu = cpu or platform.processor() or platform.machine()
    try:
        usable = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        usable = os.cpu_count()
    try:
        version = subprocess.run([python, "-S", "-c", "import sys, platform; print(platform.python_implementation(),"
                                  " sys.version.split()[0])"], capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        version = ""
    os_name = platform.system()
    try:
        info = platform.freedesktop_os_release()
        os_name = f"{info.get('PRETTY_NAME', os_name)}"
    except (AttributeError, OSError):
        pass
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "cores_usable": usable,
        "python": version or f"{platform.python_implementation()} {platform.python_version()}",
        "python_path": python,
        "os": f"{os_name}, {platform.system()} {platform.release()} {platform.machine()}",
    }


def _autogroup() -> str:
    """``/proc/sys/kernel/sched_autogroup_enabled`` (1: CPU shared fairly between sessions first), or "n/a"."""
    try:
        return Path("/proc/sys/kernel/sched_autogroup_enabled").read_text().strip()
    except OSError:
        return "n/a"


def _loadavg() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        return None


def machine_line(m: dict) -> str:
    cores = f"{m['cores']} cores" + (f" ({m['cores_usable']} usable)" if m["cores_usable"] != m["cores"] else "")
    load = ""
    if m.get("loadavg_1m_before") is not None:
        load = f", load avg (1 min) {m['loadavg_1m_before']} before / {m['loadavg_1m_after']} after"
    return f"machine: {m['cpu']}, {cores}, {m['python']} ({m['python_path']}), {m['os']}{load}"


def summarize(tasks: list[Task], base_p50: float) -> list[dict]:
    rows = []
    for t in tasks:
        p50 = statistics.median(t.times) * 1000
        rows.append({
            "command": t.name,
            "argv": t.argv,
            "runs": len(t.times),
            "failures": len(t.failures),
            "failure_reasons": sorted(set(t.failures)),
            "warmup_failures": t.warmup_failures,
            "p50_ms": round(p50, 2),
            "p95_ms": round(percentile(t.times, 95) * 1000, 2),
            "min_ms": round(min(t.times) * 1000, 2),
            "max_ms": round(max(t.times) * 1000, 2),
            "mean_ms": round(statistics.fmean(t.times) * 1000, 2),
            "p50_vs_python_c_pass": round(p50 / base_p50, 2),
        })
    return rows


def print_table(rows: list[dict]) -> None:
    headers = ("command", "runs", "fail", "p50 ms", "p95 ms", "p50 / python -c pass")
    body = [(r["command"], str(r["runs"]), str(r["failures"]), f"{r['p50_ms']:.1f}", f"{r['p95_ms']:.1f}",
             f"{r['p50_vs_python_c_pass']:.2f}x") for r in rows]
    widths = [max(len(h), *(len(b[i]) for b in body)) for i, h in enumerate(headers)]
    fmt = "  ".join("{:<%d}" % widths[0] if i == 0 else "{:>%d}" % w for i, w in enumerate(widths))
    print(fmt.format(*headers))
    print("  ".join("-" * w for w in widths))
    for b in body:
        print(fmt.format(*b))


def hook_log_lines(root: Path, since: int) -> list[str]:
    path = root / ".cogd" / "logs" / "hook.log"
    try:
        with open(path, "rb") as fh:
            fh.seek(since)
            return fh.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return []


def hook_log_size(root: Path) -> int:
    try:
        return (root / ".cogd" / "logs" / "hook.log").stat().st_size
    except OSError:
        return 0


# --------------------------------------------------------------------------- load

def _cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of ``pid`` so far (``/proc/PID/stat`` fields 14 and 15), None if unreadable."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


class BusyLoad:
    """N busy processes (CPU loops) that this bench starts and always stops.

    Each runs in its own session and process group (``start_new_session``): a
    terminal's Ctrl-C reaches only the bench, which then kills each group with
    SIGKILL and reaps it. :meth:`stop` is idempotent and also registered with
    ``atexit``; a busy process whose parent is gone exits by itself (LOAD_CODE).
    """

    def __init__(self, count: int, python: str = sys.executable):
        self.count = count
        self.python = python
        self.procs: list[subprocess.Popen] = []
        self._cpu_at_start: list[float | None] = []
        atexit.register(self.stop)

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def start(self) -> None:
        for _ in range(self.count):
            self.procs.append(subprocess.Popen(
                [self.python, "-c", LOAD_CODE, LOAD_MARK, str(os.getpid())], cwd="/",
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                start_new_session=True))
        self._cpu_at_start = [_cpu_seconds(p.pid) for p in self.procs]

    def cpu_used(self) -> list[float | None]:
        """CPU seconds each busy process received since :meth:`start` (None when unreadable)."""
        now = [_cpu_seconds(p.pid) for p in self.procs]
        return [round(b - a, 2) if a is not None and b is not None else None for a, b in zip(self._cpu_at_start, now)]

    def stop(self) -> None:
        procs, self.procs = self.procs, []
        for proc in procs:
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)  # its own group: it and anything it could have started
                except (ProcessLookupError, PermissionError):
                    pass
        for proc in procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                log(f"busy process {proc.pid} did not exit after SIGKILL")


def _loadavgs() -> tuple[float, float, float] | None:
    try:
        return tuple(round(x, 2) for x in os.getloadavg())
    except (AttributeError, OSError):
        return None


def embedding_status(cogd: str, root: Path) -> dict:
    """The daemon's ``embedding`` status section (``cogd status --json``)."""
    return json.loads(run_cogd(cogd, root, "status", "--json"))["embedding"]


def wait_embedding_started(cogd: str, root: Path, timeout: float = 600) -> dict:
    """Return the embedding status once the embedder is computing vectors (model loaded, a pass running)."""
    log("  waiting for the embedder to start embedding ...")
    deadline = time.monotonic() + timeout
    status: dict = {}
    while time.monotonic() < deadline:
        status = embedding_status(cogd, root)
        if status.get("phase") == "embedding" and status.get("computed", 0) > 0:
            return status
        if status.get("state") == "error":
            break
        time.sleep(0.5)
    raise BenchError(f"the embedder did not start embedding: {status}")


def ratio_result(row: dict, floor: dict, goal: float) -> dict:
    """prompt-submit p50 over the same rounds' ``python -c pass`` p50, against ``goal``."""
    ratio = row["p50_ms"] / floor["p50_ms"] if floor["p50_ms"] > 0 else float("inf")
    met = ratio <= goal and row["failures"] == 0
    line = (f"{row['command']} p50 / {floor['command']} p50 = {row['p50_ms']:.1f} / {floor['p50_ms']:.1f} ms = "
            f"{ratio:.2f}x; goal <= {goal:g}x: {'met' if met else 'NOT met'}")
    return {"command": row["command"], "ratio": round(ratio, 3), "ratio_max": goal, "met": met, "line": line}


# --------------------------------------------------------------------------- main

def parse_args(argv: list[str] | None) -> argparse.Namespace:
    bin_dir = Path(sys.executable).parent
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=200, help="measured runs of prompt-submit and of the floor (default 200)")
    p.add_argument("--other-runs", type=int, default=None,
                   help="measured runs of post-tool-use and session-start (default: --runs)")
    p.add_argument("--warmup", type=int, default=10, help="unmeasured runs of each command first (default 10)")
    p.add_argument("--goal-ms", type=float, default=40.0, help="p95 goal for prompt-submit (default 40)")
    p.add_argument("--tool-goal-ms", type=float, default=25.0, help="p95 goal for post-tool-use (default 25)")
    p.add_argument("--lexical", action="store_true",
                   help="a lexical-only daemon ([embed] enabled = false) instead of the default hybrid retrieval")
    p.add_argument("--baseline-hook", default=None,
                   help="another cogd-hook script to measure in the same rounds (before/after comparisons)")
    p.add_argument("--baseline-bin", type=Path, default=None,
                   help="another installation's bin/ folder: its daemon on a second repository copy and its "
                        "cogd-hook, measured in the same rounds (before/after comparisons including the daemon)")
    p.add_argument("--baseline-repo", type=Path, default=None,
                   help="with --baseline-bin: a repository a --keep run left for the baseline (never removed)")
    p.add_argument("--packages", default=None,
                   help="comma-separated standard-library packages to copy into the repository "
                        f"(default {','.join(STDLIB_PACKAGES)}; with --embedding {','.join(EMBEDDING_PACKAGES)})")
    p.add_argument("--load", type=int, default=0, metavar="N",
                   help="run N busy processes (CPU loops) during the warm-up and the measured runs (default 0)")
    p.add_argument("--ratio-goal", type=float, default=2.5,
                   help="with --load: goal for prompt-submit p50 / python -c pass p50 (default 2.5)")
    p.add_argument("--embedding", action="store_true",
                   help="measure while the daemon embeds (a larger repository, runs start once embedding has begun)")
    p.add_argument("--config-toml", default="", help="lines appended to the repository's .cogd/config.toml")
    p.add_argument("--repo", type=Path, default=None,
                   help="measure this repository (one a --keep run left, with its vectors) instead of building one; "
                        "it is never removed")
    p.add_argument("--json", action="store_true", help="print the results as JSON instead of a table")
    p.add_argument("--keep", action="store_true", help="keep the temporary repository and leave its daemon running")
    p.add_argument("--cogd", default=str(bin_dir / "cogd"), help="the cogd console script")
    p.add_argument("--cogd-hook", default=str(bin_dir / "cogd-hook"), help="the cogd-hook console script")
    p.add_argument("--python", default=None, help="interpreter for the floor (default: the cogd-hook #! interpreter)")
    p.add_argument("--fixtures", type=Path, default=DEFAULT_FIXTURES, help="the hook-payloads fixture folder")
    args = p.parse_args(argv)
    if args.runs < 2 or (args.other_runs is not None and args.other_runs < 2):
        p.error("need at least 2 runs")
    if args.warmup < 0:
        p.error("--warmup must be >= 0")
    if args.load < 0:
        p.error("--load must be >= 0")
    if args.embedding and args.lexical:
        p.error("--embedding needs the embedding model (not --lexical)")
    if args.repo is not None:
        args.repo = args.repo.resolve()
        if not (args.repo / ".git").exists():
            p.error(f"--repo {args.repo} is not a git repository")
    if args.baseline_repo is not None:
        if args.baseline_bin is None:
            p.error("--baseline-repo needs --baseline-bin")
        args.baseline_repo = args.baseline_repo.resolve()
        if not (args.baseline_repo / ".git").exists():
            p.error(f"--baseline-repo {args.baseline_repo} is not a git repository")
    if args.baseline_bin is not None:
        if args.baseline_hook:
            p.error("--baseline-bin and --baseline-hook exclude each other")
        args.baseline_bin = args.baseline_bin.resolve()
        args.baseline_hook = str(args.baseline_bin / "cogd-hook")
        args.baseline_cogd = str(args.baseline_bin / "cogd")
        if not os.access(args.baseline_cogd, os.X_OK):
            p.error(f"--baseline-bin {args.baseline_bin} has no executable cogd")
    else:
        args.baseline_cogd = None
    if args.packages is not None:
        args.packages = tuple(x.strip() for x in args.packages.split(",") if x.strip())
        stdlib = Path(sysconfig.get_paths()["stdlib"])
        missing = [x for x in args.packages if not (stdlib / x).is_dir()]
        if not args.packages or missing:
            p.error(f"--packages: not standard-library packages: {missing or args.packages}")
    else:
        args.packages = EMBEDDING_PACKAGES if args.embedding else STDLIB_PACKAGES
    for flag, path in (("--cogd", args.cogd), ("--cogd-hook", args.cogd_hook), ("--baseline-hook", args.baseline_hook)):
        if path is not None and not os.access(path, os.X_OK):
            p.error(f"{flag} {path} is not an executable file (run with the venv's python or pass {flag})")
    if not args.fixtures.is_dir():
        p.error(f"fixture folder {args.fixtures} not found (pass --fixtures)")
    return args


def _sigterm(signum, frame):  # noqa: ARG001
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    other_runs = args.other_runs if args.other_runs is not None else args.runs
    python = args.python or hook_interpreter(args.cogd_hook)
    signal.signal(signal.SIGTERM, _sigterm)
    signal.signal(signal.SIGHUP, _sigterm)

    tmp = Path(tempfile.mkdtemp(prefix="cogd-bench-"))
    root = args.repo if args.repo is not None else tmp / "repo"
    daemon_started = baseline_started = False
    load = BusyLoad(args.load)
    try:
        config_toml = ("[embed]\nenabled = false\n" if args.lexical else "") + args.config_toml
        daemon_started = True  # from here on, always try to stop it
        nfiles = start_repo(args.cogd, root, args.repo is not None, args.packages, config_toml)
        base_root = None
        if args.baseline_cogd:
            base_root = args.baseline_repo or tmp / "baseline-repo"
            log("baseline installation: " + str(args.baseline_bin))
            baseline_started = True
            start_repo(args.baseline_cogd, base_root, args.baseline_repo is not None, args.packages, config_toml)
            compile_hook_package(hook_interpreter(args.baseline_hook), log)
        compile_hook_package(python, log)
        embed_before: dict | None = None
        if args.embedding:
            wait_embedding_started(args.cogd, root)
        elif not args.lexical:
            wait_for_embeddings(args.cogd, root)
            if base_root is not None:
                wait_for_embeddings(args.baseline_cogd, base_root)

        prompt_inputs, read_inputs, start_input = hook_inputs(args.fixtures, root)
        hook = args.cogd_hook
        baseline = []
        if args.baseline_hook:
            b_root = base_root or root
            b_prompts, b_reads, _ = hook_inputs(args.fixtures, b_root) if base_root else (prompt_inputs, read_inputs, None)
            baseline = [
                Task("baseline prompt-submit", [args.baseline_hook, "prompt-submit"], args.runs, b_root,
                     check_context("UserPromptSubmit"), b_prompts),
                Task("baseline post-tool-use (Read)", [args.baseline_hook, "post-tool-use"], other_runs, b_root,
                     check_silent, b_reads),
            ]
        tasks = [
            Task("cogd-hook prompt-submit", [hook, "prompt-submit"], args.runs, root,
                 check_context("UserPromptSubmit"), prompt_inputs),
            Task("cogd-hook post-tool-use (Read)", [hook, "post-tool-use"], other_runs, root, check_silent,
                 read_inputs),
            Task("cogd-hook session-start", [hook, "session-start"], other_runs, root,
                 check_context("SessionStart"), start_input),
            # the floor runs outside the repository so that its copied json/ cannot shadow the stdlib's
            Task("python -c pass", [python, "-c", "pass"], args.runs, tmp, check_exit0, floor=True),
            Task("python -S -c pass", [python, "-S", "-c", "pass"], args.runs, tmp, check_exit0, floor=True),
            Task("python -c 'import cogd.hookclient'", [python, "-c", "import cogd.hookclient"], args.runs, tmp,
                 check_exit0, floor=True),
            *baseline,
        ]
        env = dict(os.environ)
        if args.load:
            load.start()
            log(f"load: {args.load} busy processes started (pids {' '.join(map(str, load.pids))})")
        if args.embedding:
            embed_before = embedding_status(args.cogd, root)
        load_before = _loadavg()
        loads_before = _loadavgs()
        log_offset = hook_log_size(root)
        log(f"measuring: {args.warmup} warm-up + {args.runs} runs (others {other_runs}), round-robin ...")
        loads_during = round_robin(tasks, env, args.warmup)
        new_log = hook_log_lines(root, log_offset)
        load_after = _loadavg()
        loads_after = _loadavgs()
        load_cpu = load.cpu_used() if args.load else []
        load_pids = load.pids
        load.stop()
        embed_after = embedding_status(args.cogd, root) if args.embedding else None

        machine = machine_info(python)
        machine["loadavg_1m_before"], machine["loadavg_1m_after"] = load_before, load_after
        base_p50 = statistics.median(tasks[3].times) * 1000
        rows = summarize(tasks, base_p50)
        floor_row = rows[3]
        goals = [goal_result(rows[0], args.goal_ms, floor_row), goal_result(rows[1], args.tool_goal_ms, floor_row)]
        ratio = ratio_result(rows[0], floor_row, args.ratio_goal)
        baseline_ratio = (ratio_result(next(r for r in rows if r["command"] == "baseline prompt-submit"), floor_row,
                                       args.ratio_goal) if args.baseline_hook else None)
        if args.load:
            goals.append(ratio)
        met = all(g["met"] for g in goals)
        load_info = {"processes": args.load, "pids": load_pids, "cpu_s": load_cpu,
                     "loadavg_before": loads_before, "loadavg_during": loads_during, "loadavg_after": loads_after,
                     "autogroup": _autogroup()}
        embedding_info = None
        if args.embedding:
            still = embed_after.get("phase") == "embedding" and embed_after.get("coverage", 1.0) < 1.0
            embedding_info = {
                "before": {k: embed_before.get(k) for k in ("phase", "coverage", "computed", "rate_per_s")},
                "after": {k: embed_after.get(k) for k in ("phase", "coverage", "computed", "rate_per_s")},
                "computed_during_runs": embed_after.get("computed", 0) - embed_before.get("computed", 0),
                "embedding_throughout": bool(still),
            }
        log_by_event: dict[str, int] = {}
        for line in new_log:
            event = next((w[6:] for w in line.split() if w.startswith("event=")), "?")
            log_by_event[event] = log_by_event.get(event, 0) + 1

        if args.json:
            print(json.dumps({
                "machine": machine,
                "repository": {"packages": list(args.packages), "files": nfiles},
                "warmup": args.warmup,
                "results": rows,
                "retrieval": "lexical" if args.lexical else "hybrid",
                "daemon": "embedding" if args.embedding else "idle",
                "config_toml": args.config_toml,
                "load": load_info,
                "ratio": ratio,
                "baseline": ({"bin": str(args.baseline_bin) if args.baseline_bin else None, "hook": args.baseline_hook,
                              "own_daemon": bool(args.baseline_cogd), "ratio": baseline_ratio}
                             if args.baseline_hook else None),
                "embedding": embedding_info,
                "goals": goals,
                "met": met,
                "hook_log": {"lines_during_runs": len(new_log), "by_event": log_by_event, "sample": new_log[:5]},
            }, indent=2))
        else:
            print(machine_line(machine))
            print(f"repository: stdlib {', '.join(args.packages)} ({nfiles} files); warm daemon "
                  f"({'lexical-only' if args.lexical else 'hybrid'} retrieval"
                  f"{', EMBEDDING during the runs' if args.embedding else ', idle'}); "
                  f"{args.warmup} warm-up runs each; measured runs interleaved round-robin")
            if args.config_toml:
                print(f"config.toml additions: {args.config_toml!r}")
            print(f"load: {args.load} busy processes (CPU s each during the runs: {load_cpu}); "
                  f"load avg 1/5/15 min before {loads_before}, during {loads_during}, after {loads_after}; "
                  f"sched_autogroup {load_info['autogroup']}")
            if embedding_info:
                print(f"embedder: before {embedding_info['before']}; after {embedding_info['after']}; "
                      f"{embedding_info['computed_during_runs']} vectors computed during the runs"
                      + ("" if embedding_info["embedding_throughout"] else
                         " -- NOTE: embedding was not running until the end of the runs"))
            print()
            print_table(rows)
            print()
            for r in rows:
                if r["failures"] or r["warmup_failures"]:
                    print(f"failures in {r['command']}: {r['failures']} measured, {r['warmup_failures']} warm-up: "
                          f"{'; '.join(r['failure_reasons'])}")
            if new_log:
                print(f"hook.log: {len(new_log)} lines written during the runs {log_by_event}; first: {new_log[0]}")
            else:
                print("hook.log: no lines written during the runs (no hook reported a problem)")
            print()
            for g in goals:
                print(g["line"])
            if not args.load:
                print(ratio["line"].replace("NOT met", "not met") + " (informational without --load)")
            if baseline_ratio:
                print(f"{baseline_ratio['line'].rsplit('; goal', 1)[0]} "
                      f"({'its own daemon, ' + str(args.baseline_bin) if args.baseline_cogd else 'the same daemon'})")
        return 0 if met else 1
    except KeyboardInterrupt:
        log("interrupted")
        return 130
    except (BenchError, subprocess.SubprocessError, OSError) as exc:
        log(f"error: {exc}")
        return 2
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # let the clean-up finish
        load.stop()  # first: the busy processes must never outlive the bench
        if args.keep:
            log(f"kept {root} (the daemon is still running: `cogd stop` there)")
            if baseline_started:
                log(f"kept {args.baseline_repo or tmp / 'baseline-repo'} (the baseline daemon is still running)")
        else:  # a --repo run stops the daemon it started too, and removes only its own scratch folder
            stops = [(args.cogd, root)] if daemon_started else []
            if baseline_started:
                stops.append((args.baseline_cogd, args.baseline_repo or tmp / "baseline-repo"))
            for cogd, where in stops:
                try:
                    subprocess.run([cogd, "stop"], cwd=where, capture_output=True, timeout=60)
                except (OSError, subprocess.SubprocessError) as exc:
                    log(f"could not stop the daemon in {where}: {exc}")
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
