"""``python -m cogd.daemon --root PATH [--lock-fd N] [--foreground]``: one daemon process."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from cogd.daemon.scheduling import single_threaded_blas

single_threaded_blas()  # before anything imports numpy (see the function)

from cogd.daemon.server import run  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="cogd-daemon")
    parser.add_argument("--root", required=True, type=Path)
    parser.add_argument("--lock-fd", type=int, default=None, help="an inherited, already locked daemon.lock fd")
    parser.add_argument("--foreground", action="store_true", help="also log to stderr")
    args = parser.parse_args(argv)
    return run(args.root, args.lock_fd, args.foreground)


if __name__ == "__main__":
    sys.exit(main())
