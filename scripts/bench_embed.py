#!/usr/bin/env python3
"""Benchmark cogd's local embeddings (cogd.embed) on real code entities, variant against variant.

What it measures
----------------
Texts: the functions and methods that ``cogd.index.extract.extract`` finds in
``--files`` (default 200) Python files of the running interpreter's standard
library (sorted paths, every k-th file so that the sample spans the tree),
turned into embedding text by ``cogd.embed.text.entity_text`` in each text
style a variant uses. Printed first: how many, their length in characters
and in tokens before any cap, and the share each cap cuts.

A *variant* is ``name=model:cap:text:batch:batch_tokens:threads`` (``model``
``minilm`` = the bundled file as shipped, ``minilm-int8pc`` = the derived int8
per-channel model, ``minilm-static`` the distilled static table, a path
(with a ``/``) an ``[embed] model_dir``; ``text`` ``full`` or ``words``; ``batch_tokens`` 0 = none;
``threads`` intra-op threads). ``--variants`` lists them separated by ``;``
(default :data:`DEFAULT_VARIANTS`: today's encoder first, as the baseline).

1. Throughput: the same ``--texts`` entities (default 400, a fixed random
   sample) embedded by every variant, ``--rounds`` rounds (default 2), the
   variants interleaved within each round so that load drift hits all alike;
   entities/s per round, the median, and the ratio to the first variant
   (the baseline) in the same run. Also the cosine of each variant's vectors to
   the baseline's on the same entities (mean and minimum) when their text
   style is the same.
2. Query latency of the ``--rss-variant`` (default: ``EmbedConfig()``'s
   encoder): ``encode_query`` on 200 short queries (2–8 words) after 10
   warm-up queries; p50 and p95 in milliseconds (nearest rank), on the main
   session and on a one-thread light session (``threads=1``).
3. Memory, in a fresh child process holding one encoder of the
   ``--rss-variant``: ``--rss-count`` (default 20,000) embeddings in calls of 64,
   cycling through the texts; VmRSS from /proc/self/status before the first
   embedding, after 500 and then every 2,000; the deltas, VmHWM; then the
   one-thread light session is built and used for 500 more embeddings and
   the RSS it adds is printed (the memory cost of light mode).

Also printed: the time to locate and verify each model (sha256; the first
use of ``minilm-int8pc`` derives it, 5-15 s once) and to build each session,
and the load average (1/5/15 min) at start, between phases and at the end,
since other work on the machine slows everything here.

Goals reported: >= 200 entities/s for the ``--rss-variant``; query p50 <= 5 ms;
RSS flat (growth < 80 MB from text 500 to the end); peak RSS <= 350 MB.

How to run
----------
    /tmp/venv/bin/python scripts/bench_embed.py [--files 200] [--texts 400]
        [--rounds 2] [--rss-count 20000] [--variants "base=minilm:256:full:8:0:2;..."]
        [--rss-variant "int8pc=minilm-int8pc:128:full:8:0:2"]
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
from dataclasses import dataclass
from pathlib import Path

GOAL_ENTITIES_PER_S = 200.0
GOAL_QUERY_P50_MS = 5.0
GOAL_RSS_GROWTH_MB = 80.0
GOAL_PEAK_RSS_MB = 350.0
DEFAULT_VARIANTS = ";".join([
    "today=minilm:256:full:8:0:2",
    "int8pc-256=minilm-int8pc:256:full:8:0:2",
    "int8pc-128=minilm-int8pc:128:full:8:0:2",
    "int8pc-96=minilm-int8pc:96:full:8:0:2",
    "int8pc-64=minilm-int8pc:64:full:8:0:2",
    "int8pc-128-words=minilm-int8pc:128:words:8:0:2",
    "int8pc-128-bt1024=minilm-int8pc:128:full:32:1024:2",
    "int8pc-128-1thr=minilm-int8pc:128:full:8:0:1",
])
QUERY_WORDS = ("parse json document read config file open socket connection retry request timeout "
               "decode bytes utf8 compress archive zip walk directory tree spawn subprocess wait exit "
               "format date time zone log message handler thread pool queue lock email header").split()


@dataclass(frozen=True)
class Variant:
    """One encoder set-up: ``name=model:cap:text:batch:batch_tokens:threads``."""

    name: str
    model: str
    cap: int
    text: str
    batch: int
    batch_tokens: int
    threads: int

    @classmethod
    def parse(cls, spec: str) -> "Variant":
        name, _, rest = spec.strip().partition("=")
        parts = rest.split(":")
        if not name or len(parts) != 6:
            raise SystemExit(f"a variant is name=model:cap:text:batch:batch_tokens:threads, got {spec!r}")
        model, cap, text, batch, batch_tokens, threads = parts
        return cls(name, model, int(cap), text, int(batch), int(batch_tokens), int(threads))

    def spec(self) -> str:
        return (f"{self.name}={self.model}:{self.cap}:{self.text}:{self.batch}:{self.batch_tokens}:"
                f"{self.threads}")

    def encoder(self):
        from cogd.embed.encoder import load_encoder
        from cogd.embed.model import resolve_model

        return load_encoder(resolve_model(model_config(self.model)), threads=self.threads,
                            max_tokens=self.cap, batch_size=self.batch, batch_tokens=self.batch_tokens)


def model_config(model: str):
    """The EmbedConfig a variant's ``model`` names: an ``[embed] model`` value, or (when it holds a
    ``/``) an ``[embed] model_dir`` path, e.g. a table ``scripts/train_static.py`` wrote."""
    from cogd.config import EmbedConfig

    return EmbedConfig(model_dir=model) if "/" in model else EmbedConfig(model=model)


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


def stdlib_entities(files: int) -> tuple[list, int]:
    """The function and method entities of ``files`` standard-library files."""
    from cogd.index.extract import extract

    stdlib = Path(sysconfig.get_paths()["stdlib"])
    paths = sorted(p for p in stdlib.rglob("*.py")
                   if "site-packages" not in p.parts and "__pycache__" not in p.parts
                   and "test" not in p.parts and "tests" not in p.parts and "idle_test" not in p.parts)
    step = max(1, len(paths) // files)
    chosen = paths[::step][:files]
    entities = []
    for path in chosen:
        rel = path.relative_to(stdlib).as_posix()
        entities.extend(e for e in extract(rel, path.read_bytes(), "python").entities
                        if e.kind in ("function", "method"))
    return entities, len(chosen)


def texts_of(entities: list, style: str) -> list[str]:
    from cogd.embed.text import entity_text

    return [entity_text(e.kind, e.qualname, e.signature, e.doc, e.body, e.path, style=style) for e in entities]


def entity_texts(files: int, style: str = "full") -> tuple[list[str], int]:
    """Embedding texts (``style``) of the functions and methods in ``files`` standard-library files."""
    entities, n = stdlib_entities(files)
    return texts_of(entities, style), n


def child_rss(count: int, spec: str, files: int) -> None:
    """Phase 3 in a process of its own: one encoder, ``count`` embeddings; RSS as it goes.

    The last line printed is ``<count> <growth MB from text 500 to the end> <VmHWM MB>`` for the parent.
    """
    variant = Variant.parse(spec)
    texts, _ = entity_texts(files, variant.text)
    gc.collect()
    rss_texts = proc_status("VmRSS")
    encoder = variant.encoder()
    gc.collect()
    rss_before = proc_status("VmRSS")
    print(f"  RSS with interpreter, cogd.index and {len(texts)} texts: {rss_texts:.1f} MB; "
          f"+ loaded encoder ({variant.spec()}), before embedding: {rss_before:.1f} MB")
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
    hwm = proc_status("VmHWM")
    print(f"  RSS before embedding {rss_before:.1f} MB, after {done}: {rss_end:.1f} MB "
          f"(delta {rss_end - rss_before:+.1f} MB); after 500 -> after {done}: {rss_end - rss_500:+.1f} MB; "
          f"peak (VmHWM) {hwm:.1f} MB")
    if variant.threads != 1:
        started = time.perf_counter()
        encoder.session_for(1)
        built_ms = (time.perf_counter() - started) * 1000
        for start in range(0, 512, 64):
            encoder.encode(texts[start:start + 64], threads=1)
        gc.collect()
        light = proc_status("VmRSS")
        print(f"  light mode: one-thread session built in {built_ms:.0f} ms; after 512 embeddings on it "
              f"RSS {light:.1f} MB ({light - rss_end:+.1f} MB for the second session), "
              f"peak (VmHWM) {proc_status('VmHWM'):.1f} MB")
        hwm = proc_status("VmHWM")
    print(f"{done} {rss_end - rss_500:.1f} {hwm:.1f}")


def main() -> None:
    from cogd.config import EmbedConfig

    defaults = EmbedConfig()
    default_rss = (f"default={defaults.model}:{defaults.max_tokens}:{defaults.text}:{defaults.batch_size}:"
                   f"{getattr(defaults, 'batch_tokens', 0)}:{defaults.threads or 2}")
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=200)
    parser.add_argument("--texts", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--rss-count", type=int, default=20_000)
    parser.add_argument("--variants", default=DEFAULT_VARIANTS)
    parser.add_argument("--rss-variant", default=default_rss, help="the variant of phases 2 and 3")
    parser.add_argument("--child-rss", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child_rss:
        child_rss(args.child_rss, args.rss_variant, args.files)
        return

    import numpy as np
    from tokenizers import Tokenizer

    from cogd.embed.model import resolve_model

    variants = [Variant.parse(v) for v in args.variants.split(";") if v.strip()]
    print(f"python {sys.version.split()[0]}, {load()}")
    for model in dict.fromkeys(v.model for v in variants):
        started = time.perf_counter()
        info = resolve_model(model_config(model))
        print(f"model {model}: {info.id} ({info.source}, dim {info.dim}, {info.path.stat().st_size / 1e6:.1f} MB); "
              f"locate + sha256 verify (+ derive on first use) {(time.perf_counter() - started) * 1000:.0f} ms")

    entities, nfiles = stdlib_entities(args.files)
    sample = random.Random(7).sample(entities, min(args.texts, len(entities)))
    raw = Tokenizer.from_file(str(info.tokenizer_path))
    raw.no_truncation()
    raw.no_padding()
    styles = {style: texts_of(sample, style) for style in dict.fromkeys(v.text for v in variants)}
    for style, texts in styles.items():
        lengths = [len(e.ids) for e in raw.encode_batch(texts)]
        chars = [len(t) for t in texts]
        print(f"texts ({style}): {len(texts)} functions/methods sampled from {len(entities)} in {nfiles} stdlib "
              f"files; chars mean {sum(chars) / len(chars):.0f} max {max(chars)}; tokens (uncapped) "
              f"mean {sum(lengths) / len(lengths):.0f} p50 {nearest_rank(lengths, .5):.0f} "
              f"p95 {nearest_rank(lengths, .95):.0f} max {max(lengths)}")
        for cap in sorted({v.cap for v in variants if v.text == style}):
            cut = sum(1 for n in lengths if n > cap) / len(lengths)
            mean = sum(min(n, cap) for n in lengths) / len(lengths)
            print(f"  cap {cap}: {cut:.0%} of texts cut, mean tokens embedded {mean:.0f}")

    encoders = {}
    for v in variants:
        started = time.perf_counter()
        encoders[v.name] = v.encoder()
        print(f"encoder {v.spec()}: session built in {(time.perf_counter() - started) * 1000:.0f} ms")

    print(f"\n[1] throughput, {len(sample)} entities, {args.rounds} rounds; {load()}")
    for v in variants:
        encoders[v.name].encode(styles[v.text][:16])  # warm-up
    rates: dict[str, list[float]] = {v.name: [] for v in variants}
    vectors: dict[str, np.ndarray] = {}
    for r in range(args.rounds):
        order = variants if r % 2 == 0 else list(reversed(variants))
        for v in order:
            started = time.perf_counter()
            vectors[v.name] = encoders[v.name].encode(styles[v.text])
            rates[v.name].append(len(sample) / (time.perf_counter() - started))
        print(f"  round {r + 1}: " + ", ".join(f"{v.name} {rates[v.name][-1]:.1f}/s" for v in variants)
              + f"; {load()}")
    base = variants[0]
    print(f"\n  {'variant':<22} {'spec':<44} {'entities/s':>10} {'x base':>7} {'cos to base mean/min':>21}")
    for v in variants:
        rate = median(rates[v.name])
        cos = ""
        if v.text == base.text and vectors[v.name].shape == vectors[base.name].shape:  # a static table has its own size
            c = (vectors[v.name] * vectors[base.name]).sum(axis=1)
            cos = f"{c.mean():.4f} / {c.min():.4f}"
        print(f"  {v.name:<22} {v.spec().split('=', 1)[1]:<44} {rate:>10.1f} {rate / median(rates[base.name]):>6.2f}x "
              f"{cos:>21}")
    encoders.clear()
    gc.collect()

    chosen = Variant.parse(args.rss_variant)
    print(f"\n[2] query latency of {chosen.spec()}, 200 short queries; {load()}")
    encoder = chosen.encoder()
    rnd = random.Random(11)
    queries = [" ".join(rnd.choice(QUERY_WORDS) for _ in range(rnd.randint(2, 8))) for _ in range(210)]
    q50 = None
    for light in (None, 1):
        timings = []
        for i, query in enumerate(queries):
            started = time.perf_counter()
            encoder.encode_query(query, threads=light)
            if i >= 10:
                timings.append((time.perf_counter() - started) * 1000)
        p50, p95 = nearest_rank(timings, .5), nearest_rank(timings, .95)
        q50 = p50 if q50 is None else q50
        print(f"  {'main session' if light is None else 'light session (1 thread)'}: p50 {p50:.2f} ms, "
              f"p95 {p95:.2f} ms, max {max(timings):.2f} ms")
    del encoder
    gc.collect()

    print(f"\n[3] RSS over {args.rss_count} embeddings of {chosen.spec()}, calls of 64, in a fresh process; "
          f"{load()}")
    sys.stdout.flush()
    child = subprocess.run([sys.executable, __file__, "--child-rss", str(args.rss_count), "--rss-variant",
                            chosen.spec(), "--files", str(args.files)], stdout=subprocess.PIPE, text=True, check=True)
    lines = child.stdout.splitlines()
    print("\n".join(lines[:-1]))
    done, growth, hwm = int(lines[-1].split()[0]), float(lines[-1].split()[1]), float(lines[-1].split()[2])

    rate = median(rates[chosen.name]) if chosen.name in rates else float("nan")
    print(f"\nGoals ({load()}):")
    print(f"  throughput of {chosen.name}: {rate:.1f} entities/s (goal >= {GOAL_ENTITIES_PER_S:.0f}; "
          f"{base.name} {median(rates[base.name]):.1f} in the same run): "
          f"{'met' if rate >= GOAL_ENTITIES_PER_S else 'NOT met' if rate == rate else 'not in --variants'}")
    print(f"  query p50 {q50:.2f} ms (goal <= {GOAL_QUERY_P50_MS:.0f} ms): "
          f"{'met' if q50 <= GOAL_QUERY_P50_MS else 'NOT met'}")
    print(f"  RSS delta {growth:+.1f} MB from embedding 500 to {done} (goal < {GOAL_RSS_GROWTH_MB:.0f} MB): "
          f"{'met' if growth < GOAL_RSS_GROWTH_MB else 'NOT met'}")
    print(f"  peak RSS of the encoder process {hwm:.1f} MB (goal <= {GOAL_PEAK_RSS_MB:.0f} MB): "
          f"{'met' if hwm <= GOAL_PEAK_RSS_MB else 'NOT met'}")


if __name__ == "__main__":
    main()
