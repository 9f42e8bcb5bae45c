#!/usr/bin/env python3
"""Benchmark cogd's local embeddings (cogd.embed) on real code entities.

What it measures
----------------
Texts: the functions and methods that ``cogd.index.extract.extract`` finds in
``--files`` (default 200) Python files of the running interpreter's standard
library (sorted paths, every k-th file so that the sample spans the tree),
turned into embedding text by ``cogd.embed.text.entity_text``. Printed first:
how many, their length in characters and in tokens before any cap, and the
share the caps cut.

1. Throughput: the same ``--texts`` texts (default 400, a fixed random sample)
   embedded by two encoders, ``max_tokens`` 128 and 256, ``--rounds`` rounds
   (default 2) alternating so that load drift hits both alike; entities/s per
   round and the median. Threads = ``EmbedConfig().threads`` (0: all cores
   but one), batch size = ``EmbedConfig().batch_size``.
2. Query latency: ``encode_query`` on 200 short queries (2–8 words), after 10
   warm-up queries; p50 and p95 in milliseconds (nearest rank).
3. Memory, in a fresh child process holding one encoder (``python
   scripts/bench_embed.py --child-rss N``): ``--rss-count`` (default 20,000)
   embeddings at the chosen cap (``--cap``, default
   ``EmbedConfig().max_tokens``) in calls of 64, cycling through the texts;
   VmRSS from /proc/self/status before the first embedding, after 500 and
   then every 2,000; the deltas before → end and 500 → end, and VmHWM.

Also printed: the time to locate and verify the model (sha256) and to build
the session, and the load average (1/5/15 min) at start, between phases and at
the end, since other work on the machine slows everything here.

Goals reported: >= 25 entities/s at the chosen cap; query p50 <= 5 ms; RSS
flat (growth < 80 MB from text 500 to the end).

How to run
----------
    /tmp/venv/bin/python scripts/bench_embed.py [--files 200] [--texts 400]
        [--rounds 2] [--rss-count 20000] [--cap 256]
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

GOAL_ENTITIES_PER_S = 25.0
GOAL_QUERY_P50_MS = 5.0
GOAL_RSS_GROWTH_MB = 80.0
QUERY_WORDS = ("parse json document read config file open socket connection retry request timeout "
               "decode bytes utf8 compress archive zip walk directory tree spawn subprocess wait exit "
               "format date time zone log message handler thread pool queue lock email header").split()


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f} ({os.cpu_count()} CPUs)"


def proc_status(field: str) -> float:
    """A /proc/self/status field in MB (VmRSS, VmHWM)."""
    with open("/proc/self/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def nearest_rank(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, int(round(q * len(ordered) + 0.5)) - 1))]


def median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def entity_texts(files: int) -> tuple[list[str], int]:
    """Embedding texts of the functions and methods in ``files`` standard-library files."""
    from cogd.embed.text import entity_text
    from cogd.index.extract import extract

    stdlib = Path(sysconfig.get_paths()["stdlib"])
    paths = sorted(p for p in stdlib.rglob("*.py")
                   if "site-packages" not in p.parts and "__pycache__" not in p.parts
                   and "test" not in p.parts and "tests" not in p.parts and "idle_test" not in p.parts)
    step = max(1, len(paths) // files)
    chosen = paths[::step][:files]
    texts = []
    for path in chosen:
        rel = path.relative_to(stdlib).as_posix()
        for e in extract(rel, path.read_bytes(), "python").entities:
            if e.kind in ("function", "method"):
                texts.append(entity_text(e.kind, e.qualname, e.signature, e.doc, e.body, e.path))
    return texts, len(chosen)


def child_rss(count: int, cap: int, files: int) -> None:
    """Phase 3 in a process of its own: one encoder, ``count`` embeddings; RSS as it goes.

    The last line printed is ``<count> <growth MB from text 500 to the end>`` for the parent.
    """
    from cogd.config import EmbedConfig
    from cogd.embed.encoder import Encoder
    from cogd.embed.model import resolve_model

    defaults = EmbedConfig()
    texts, _ = entity_texts(files)
    gc.collect()
    rss_texts = proc_status("VmRSS")
    encoder = Encoder(resolve_model(defaults), threads=defaults.threads, max_tokens=cap,
                      batch_size=defaults.batch_size)
    gc.collect()
    rss_before = proc_status("VmRSS")
    print(f"  RSS with interpreter, cogd.index and {len(texts)} texts: {rss_texts:.1f} MB; "
          f"+ loaded encoder, before embedding: {rss_before:.1f} MB")
    done, rss_500, mark = 0, None, 0
    started = time.perf_counter()
    while done < count:
        n = min(64, count - done)
        encoder.encode([texts[(done + i) % len(texts)] for i in range(n)])
        done += n
        if rss_500 is None and done >= 500:
            gc.collect()
            rss_500 = proc_status("VmRSS")
            print(f"  after {done:>6}: RSS {rss_500:.1f} MB", flush=True)
            mark = done
        elif done - mark >= 2000 or done == count:
            gc.collect()
            elapsed = time.perf_counter() - started
            print(f"  after {done:>6}: RSS {proc_status('VmRSS'):.1f} MB ({done / elapsed:.1f} entities/s "
                  f"so far; {load()})", flush=True)
            mark = done
    gc.collect()
    rss_end = proc_status("VmRSS")
    rss_500 = rss_end if rss_500 is None else rss_500
    print(f"  RSS before embedding {rss_before:.1f} MB, after {done}: {rss_end:.1f} MB "
          f"(delta {rss_end - rss_before:+.1f} MB); after 500 -> after {done}: {rss_end - rss_500:+.1f} MB; "
          f"peak (VmHWM) {proc_status('VmHWM'):.1f} MB")
    print(f"{done} {rss_end - rss_500:.1f}")


def main() -> None:
    from cogd.config import EmbedConfig

    defaults = EmbedConfig()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=200)
    parser.add_argument("--texts", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--rss-count", type=int, default=20_000)
    parser.add_argument("--cap", type=int, default=defaults.max_tokens)
    parser.add_argument("--child-rss", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child_rss:
        child_rss(args.child_rss, args.cap, args.files)
        return

    from tokenizers import Tokenizer

    from cogd.embed.encoder import Encoder, default_threads
    from cogd.embed.model import resolve_model

    print(f"python {sys.version.split()[0]}, {load()}")
    rss_start = proc_status("VmRSS")
    started = time.perf_counter()
    info = resolve_model(defaults)
    verify_ms = (time.perf_counter() - started) * 1000
    print(f"model {info.id} ({info.source}, dim {info.dim}); locate + sha256 verify {verify_ms:.0f} ms")

    texts, nfiles = entity_texts(args.files)
    raw = Tokenizer.from_file(str(info.tokenizer_path))
    raw.no_truncation()
    raw.no_padding()
    lengths = [len(e.ids) for e in raw.encode_batch(texts)]
    chars = [len(t) for t in texts]
    print(f"texts: {len(texts)} functions/methods from {nfiles} stdlib files; "
          f"chars mean {sum(chars) / len(chars):.0f} max {max(chars)}; tokens (uncapped) "
          f"mean {sum(lengths) / len(lengths):.0f} p50 {nearest_rank(lengths, .5):.0f} "
          f"p95 {nearest_rank(lengths, .95):.0f} max {max(lengths)}")
    for cap in (128, 256):
        cut = sum(1 for n in lengths if n > cap) / len(lengths)
        mean = sum(min(n, cap) for n in lengths) / len(lengths)
        print(f"  cap {cap}: {cut:.0%} of texts cut, mean tokens embedded {mean:.0f}")

    threads = defaults.threads or default_threads()
    encoders = {}
    for cap in (128, 256):
        started = time.perf_counter()
        encoders[cap] = Encoder(info, threads=defaults.threads, max_tokens=cap, batch_size=defaults.batch_size)
        print(f"encoder cap {cap}: session built in {(time.perf_counter() - started) * 1000:.0f} ms "
              f"(intra-op threads {threads}, batch {defaults.batch_size})")

    sample = random.Random(7).sample(texts, min(args.texts, len(texts)))
    print(f"\n[1] throughput, {len(sample)} texts, {args.rounds} rounds; {load()}")
    for enc in encoders.values():
        enc.encode(sample[:16])  # warm-up
    rates: dict[int, list[float]] = {128: [], 256: []}
    for r in range(args.rounds):
        for cap, enc in encoders.items():
            started = time.perf_counter()
            enc.encode(sample)
            rates[cap].append(len(sample) / (time.perf_counter() - started))
        print(f"  round {r + 1}: " + ", ".join(f"cap {c}: {v[-1]:.1f} entities/s" for c, v in rates.items())
              + f"; {load()}")
    for cap, values in rates.items():
        print(f"  cap {cap}: median {median(values):.1f} entities/s")

    print(f"\n[2] query latency, 200 short queries; {load()}")
    rnd = random.Random(11)
    queries = [" ".join(rnd.choice(QUERY_WORDS) for _ in range(rnd.randint(2, 8))) for _ in range(210)]
    chosen = encoders.get(args.cap) or Encoder(info, threads=defaults.threads, max_tokens=args.cap,
                                               batch_size=defaults.batch_size)
    timings = []
    for i, query in enumerate(queries):
        started = time.perf_counter()
        chosen.encode_query(query)
        if i >= 10:
            timings.append((time.perf_counter() - started) * 1000)
    q50, q95 = nearest_rank(timings, .5), nearest_rank(timings, .95)
    print(f"  p50 {q50:.2f} ms, p95 {q95:.2f} ms, max {max(timings):.2f} ms")

    encoders.clear()
    print(f"\n[3] RSS over {args.rss_count} embeddings at cap {args.cap}, calls of 64, in a fresh process; "
          f"{load()}")
    sys.stdout.flush()
    child = subprocess.run([sys.executable, __file__, "--child-rss", str(args.rss_count), "--cap", str(args.cap),
                            "--files", str(args.files)], stdout=subprocess.PIPE, text=True, check=True)
    lines = child.stdout.splitlines()
    print("\n".join(lines[:-1]))
    done, growth = int(lines[-1].split()[0]), float(lines[-1].split()[1])

    rate = median(rates[args.cap]) if args.cap in rates else float("nan")
    print(f"\nGoals ({load()}):")
    print(f"  throughput at cap {args.cap}: {rate:.1f} entities/s (goal >= {GOAL_ENTITIES_PER_S:.0f}): "
          f"{'met' if rate >= GOAL_ENTITIES_PER_S else 'NOT met'}")
    other = 128 if args.cap == 256 else 256
    if other in rates:
        print(f"  (cap {other}: {median(rates[other]):.1f} entities/s)")
    print(f"  query p50 {q50:.2f} ms (goal <= {GOAL_QUERY_P50_MS:.0f} ms): "
          f"{'met' if q50 <= GOAL_QUERY_P50_MS else 'NOT met'}")
    print(f"  RSS delta {growth:+.1f} MB from embedding 500 to {done} (goal < {GOAL_RSS_GROWTH_MB:.0f} MB): "
          f"{'met' if growth < GOAL_RSS_GROWTH_MB else 'NOT met'}")


if __name__ == "__main__":
    main()
