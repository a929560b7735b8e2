"""Time to verdict: how narrow do 4 setups' intervals get in 5 minutes, old design vs new.

Both designs run the same comparison (glibc, jemalloc, tcmalloc, mimalloc; InnoDB
point-query at 8 clients) for the same wall time, one after the other in this run, and
are stopped with SIGTERM as a user's Ctrl-C would (every finished cell is kept):

- before: one server at a time in A B C D, D C B A rounds, independent-samples
  intervals (Welch on log throughput), as the tool did until now;
- after: interleaved blocks (all four servers up at once, 5 s slices alternating, each
  a sysbench run of its own), intervals paired by block and pooled over setups;
- turns: the same with the clients taking 1 s turns (alternate = "turns"), 10 each
  per cell;
- turns-short: turns again, 4 per cell, so more server starts fit in the time.

After each block the widest of the three relative-QPS intervals is recorded with the
wall time it took, so the output shows width against time for both, the width at the
end, and (where 3 points was not reached) how many blocks and minutes the observed
spread says 3 points would need.

    .venv/bin/python bench/bench_time_to_verdict.py [--minutes 5] [--target 3]
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

from common import Plan, emit, run

from mallocbench.analysis import stats
from mallocbench.analysis.summary import summarize
from mallocbench.results import RunResult

SETUPS = [(a, a, "") for a in ("glibc", "jemalloc", "tcmalloc", "mimalloc")]


def widths(result: RunResult, paired: bool) -> list[tuple[int, float, float]]:
    """(blocks, wall seconds, widest interval in points) after each completed block."""
    start = min(s.started_at for s in result.sessions if s.started_at)
    out = []
    for k in range(1, 2 + max(c.repeat for c in result.cells)):
        cells = [c for c in result.cells if c.repeat < k]
        by_setup = summarize(cells)
        if len({key[0] for key in by_setup}) < len(SETUPS):
            break
        base = next(s for key, s in by_setup.items() if key[0] == "glibc")
        others = {key[0]: s for key, s in by_setup.items() if key[0] != "glibc"}
        if any(len(s.by_repeat) < k for s in [base, *others.values()]):
            break
        if paired:
            blocks = {n: s.by_repeat for n, s in others.items()}
            ratios = stats.blocked_ratios(base.by_repeat, blocks)
            width = max(r.high - r.low for r in ratios.values())
        else:
            independent = [stats.ratio_ci(s.qps_values, base.qps_values) for s in others.values()]
            width = max(high - low for _, low, high in independent)
        ended = max((c.started_at or 0) + (c.duration_s or 0) for c in cells)
        out.append((k, ended - start, 100 * width if math.isfinite(width) else math.inf))
    return out


def needed(
    curve: list[tuple[int, float, float]], target: float, setups: int, paired: bool
) -> tuple[int | None, float | None]:
    """Blocks and seconds the last width's spread says the target needs (width ~ t/sqrt(k))."""
    if not curve or not math.isfinite(curve[-1][2]):
        return None, None
    k, seconds, width = curve[-1]
    df = (lambda n: (setups - 1) * (n - 1)) if paired else (lambda n: 2 * (n - 1))
    spread = width / stats.t_quantile(0.95, df(k)) * math.sqrt(k)
    for n in range(k, 1000):
        if stats.t_quantile(0.95, df(n)) * spread / math.sqrt(n) <= target:
            return n, n * seconds / k
    return None, None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=5)
    parser.add_argument("--target", type=float, default=3.0, help="interval width, points")
    parser.add_argument("--out", type=Path, default=Path("/tmp/mb-bench-ttv"))
    parser.add_argument("--designs", default="before,after,turns,turns-short")
    args = parser.parse_args()
    designs = {
        "before": (
            Plan("before", SETUPS, repeats=40, design="sequential", step_s=5, max_warmup=15),
            False,
        ),
        "after": (
            Plan("after", SETUPS, repeats=40, step_s=10, slice_s=5, max_warmup=15),
            True,
        ),
        "turns": (
            Plan(
                "turns", SETUPS, repeats=40, alternate="turns", step_s=10, slice_s=1, max_warmup=15
            ),
            True,
        ),
        "turns-short": (
            Plan(
                "turns-short",
                SETUPS,
                repeats=80,
                alternate="turns",
                step_s=4,
                slice_s=1,
                max_warmup=15,
            ),
            True,
        ),
    }
    for name, (plan, paired) in designs.items():
        if name not in args.designs.split(","):
            continue
        started = time.monotonic()
        result, _ = run(plan, args.out / name, stop_after_s=args.minutes * 60)
        curve = widths(result, paired)
        blocks, seconds = needed(curve, args.target, len(SETUPS), paired)
        reached = next((t for _, t, w in curve if w <= args.target), None)
        emit(
            {
                "design": name,
                "wall_s": round(time.monotonic() - started),
                "curve": [(k, round(t), round(w, 1)) for k, t, w in curve],
                "width_at_end": round(curve[-1][2], 1) if curve else None,
                "reached_target_at_s": reached,
                "blocks_needed": blocks,
                "minutes_needed": None if seconds is None else round(seconds / 60, 1),
            }
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
