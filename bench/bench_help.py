"""Start-up: how much longer `mallocbench --help` takes than a bare interpreter.

The median of --runs `mallocbench --help` against the median of --runs `python -c pass`,
each a fresh process, alternated so that a busy host slows both alike; one unmeasured
run of each first, so that neither pays for a cold page cache. Fails (exit 1) when the
difference of the medians exceeds --limit seconds (0.3 by default): --help must not wait
for the libraries only a measurement or a report needs. The CPU seconds are printed
beside the wall-clock ones: a busy host stretches the latter, hardly the former, so the
two together tell a slow start from a crowded machine.

    .venv/bin/python bench/bench_help.py [--runs 10] [--limit 0.3]
"""

from __future__ import annotations

import argparse
import os
import resource
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


# As a user runs it: with PYTHONDONTWRITEBYTECODE (set in some CI and container images)
# every run would compile mallocbench's modules from source; the unmeasured first run
# writes their bytecode instead.
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def elapsed(argv: list[str]) -> tuple[float, float]:
    """Wall-clock seconds (the verdict) and CPU seconds (what a busy host cannot inflate)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stdin=subprocess.DEVNULL, env=ENV)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return wall, cpu


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10, help="processes of each (default 10)")
    parser.add_argument("--limit", type=float, default=0.3, help="seconds (default 0.3)")
    args = parser.parse_args()
    bare = [sys.executable, "-c", "pass"]
    helps = [*mallocbench_command(), "--help"]
    elapsed(bare), elapsed(helps)
    bare_s: list[tuple[float, float]] = []
    help_s: list[tuple[float, float]] = []
    for _ in range(args.runs):
        bare_s.append(elapsed(bare))
        help_s.append(elapsed(helps))
    bare_wall, bare_cpu = (statistics.median(x) for x in zip(*bare_s, strict=True))
    help_wall, help_cpu = (statistics.median(x) for x in zip(*help_s, strict=True))
    difference = help_wall - bare_wall
    print(f"load average {os.getloadavg()[0]:.1f}; medians of {args.runs} runs, wall (cpu)")
    print(f"python -c pass      {bare_wall:.3f} s ({bare_cpu:.3f} s)")
    print(f"mallocbench --help  {help_wall:.3f} s ({help_cpu:.3f} s)")
    verdict = "ok" if difference <= args.limit else "too slow"
    print(
        f"difference          {difference:+.3f} s ({help_cpu - bare_cpu:+.3f} s); "
        f"limit {args.limit:.1f} s: {verdict}"
    )
    return 0 if difference <= args.limit else 1


if __name__ == "__main__":
    sys.exit(main())
