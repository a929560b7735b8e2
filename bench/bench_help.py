"""Start-up: how much longer `mallocbench --help` takes than a bare interpreter.

The median of --runs `mallocbench --help` against the median of --runs `python -c pass`,
each a fresh process, alternated so that a busy host slows both alike; one unmeasured
run of each first, so that neither pays for a cold page cache. Fails (exit 1) when the
difference of the medians exceeds --limit seconds (0.3 by default): --help must not wait
for the libraries only a measurement or a report needs.

    .venv/bin/python bench/bench_help.py [--runs 10] [--limit 0.3]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path


def mallocbench_command() -> list[str]:
    """The console script next to this interpreter (the venv's), else the one on PATH."""
    beside = Path(sys.executable).with_name("mallocbench")
    found = str(beside) if beside.exists() else shutil.which("mallocbench")
    if found is None:
        raise SystemExit("bench_help: no mallocbench console script: run `make setup` first")
    return [found]


def elapsed(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10, help="processes of each (default 10)")
    parser.add_argument("--limit", type=float, default=0.3, help="seconds (default 0.3)")
    args = parser.parse_args()
    bare = [sys.executable, "-c", "pass"]
    helps = [*mallocbench_command(), "--help"]
    elapsed(bare), elapsed(helps)
    bare_s: list[float] = []
    help_s: list[float] = []
    for _ in range(args.runs):
        bare_s.append(elapsed(bare))
        help_s.append(elapsed(helps))
    bare_median = statistics.median(bare_s)
    help_median = statistics.median(help_s)
    difference = help_median - bare_median
    print(f"python -c pass      median {bare_median:.3f} s of {args.runs}")
    print(f"mallocbench --help  median {help_median:.3f} s of {args.runs}")
    verdict = "ok" if difference <= args.limit else "too slow"
    print(f"difference          {difference:+.3f} s (limit {args.limit:.1f} s): {verdict}")
    return 0 if difference <= args.limit else 1


if __name__ == "__main__":
    sys.exit(main())
