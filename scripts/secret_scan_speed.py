"""How long the secret scan (cogd/secrets.py) takes on a prompt: the daemon runs it on every prompt.

Usage: python scripts/secret_scan_speed.py [--rounds N]

Prints the median (and 90th percentile) wall time of ``cogd.secrets.mask`` for a clean 200-character
prompt, a 20 KB pasted Python traceback (clean, but full of "key"/"token" words that wake the
keyword rules), and the same traceback with one AWS key in it. Medians over N rounds after a warm-up
(the first call imports detect-secrets' plugins: ~0.1 s, once per daemon).
"""

from __future__ import annotations

import argparse
import statistics
import time

from cogd.secrets import mask

PROMPT = ("Please fix the failing test in cogd/memory/api.py: record() refuses duplicates even when "
          "--allow-duplicate is passed; see the CI traceback and make dedup respect the flag, thanks!")[:200]


def traceback_text(size: int = 20_000) -> str:
    frames = []
    i = 0
    while sum(map(len, frames)) < size:
        frames.append(f'  File "/home/dev/project/src/service/handlers_{i}.py", line {17 + i * 7}, in handle_{i}\n'
                      f'    result = cache.get(key, token_count=len(tokens), timeout=30)\n')
        i += 1
    text = "Traceback (most recent call last):\n" + "".join(frames)
    return text[: size - 40] + "\nKeyError: 'session_token_expired'\n"


def measure(text: str, rounds: int) -> tuple[float, float]:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        mask(text)
        times.append(time.perf_counter() - start)
    times.sort()
    return statistics.median(times), times[int(len(times) * 0.9) - 1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=200)
    rounds = parser.parse_args().rounds
    mask("warm up AKIAABCDEFGHIJKLMNOP")
    tb = traceback_text()
    cases = [("200-char prompt", PROMPT), (f"{len(tb) // 1000} KB traceback", tb),
             (f"{len(tb) // 1000} KB traceback + AWS key", tb[:10_000] + " AKIAQWERTYUIOPASDFGH " + tb[10_000:])]
    for name, text in cases:
        median, p90 = measure(text, rounds if len(text) < 1000 else max(rounds // 10, 5))
        print(f"{name:32s} median {median * 1e6:9.0f} µs   p90 {p90 * 1e6:9.0f} µs")


if __name__ == "__main__":
    main()
