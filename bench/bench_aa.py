"""A/A: identical setups must not come out different, run after run.

Each run compares glibc with an identical twin (glibc-b) on real private servers: any
finding there is a false one. The target: >= 95% of the comparisons "same" or "not
significant" at min_effect 3%. Twenty runs cannot tell a 5% error rate from a 10% one,
so the recorded blocks of all runs are then resampled (3 blocks at a time, each block
keeping its own pairing) into hundreds of further A/A comparisons judged by the same code.

    .venv/bin/python bench/bench_aa.py [--runs 20] [--resamples 400] [--out /tmp/mb-bench-aa]
"""

from __future__ import annotations

import argparse
import random
import sys
from collections import Counter
from pathlib import Path

from common import Plan, emit, ratio_cells, run

from mallocbench.analysis import stats
from mallocbench.analysis.summary import summarize
from mallocbench.results import RunResult

MIN_EFFECT = 0.03
TARGET = 0.95
PASSING = (stats.SAME, stats.NOT_SIGNIFICANT)


def blocks_of(result: RunResult) -> list[tuple[float, float]]:
    """(base, twin) throughput per block of one run."""
    summaries = summarize(result.cells)
    (base,) = [s for k, s in summaries.items() if k[0] == "glibc"]
    (twin,) = [s for k, s in summaries.items() if k[0] == "glibc-b"]
    return [(base.by_repeat[b], twin.by_repeat[b]) for b in base.by_repeat if b in twin.by_repeat]


def resampled(pool: list[tuple[float, float]], draws: int, rng: random.Random) -> Counter[str]:
    verdicts: Counter[str] = Counter()
    for _ in range(draws):
        chosen = rng.sample(pool, 3)
        # Which twin is "base" is arbitrary: swap at random so order effects cancel.
        pairs = [(a, b) if rng.random() < 0.5 else (b, a) for a, b in chosen]
        base = {k: a for k, (a, _) in enumerate(pairs)}
        twin = {k: b for k, (_, b) in enumerate(pairs)}
        (r,) = stats.blocked_ratios(base, {"twin": twin}).values()
        verdicts[stats.classify(r.ratio, r.low, r.high, MIN_EFFECT)] += 1
    return verdicts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--resamples", type=int, default=400)
    parser.add_argument("--out", type=Path, default=Path("/tmp/mb-bench-aa"))
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    plan = Plan("aa", [("glibc", "glibc", ""), ("glibc-b", "glibc", "")], repeats=args.repeats)
    verdicts: Counter[str] = Counter()
    pool: list[tuple[float, float]] = []
    for i in range(args.runs):
        result, seconds = run(plan, args.out / f"run{i:02d}")
        cell = ratio_cells(result)["glibc-b"]
        verdicts[cell.verdict] += 1
        pool += blocks_of(result)
        emit(
            {
                "run": i,
                "ratio": cell.ratio,
                "low": cell.low,
                "high": cell.high,
                "verdict": cell.verdict,
                "seconds": round(seconds),
            }
        )
    resamples = resampled(pool, args.resamples, random.Random(1))
    real_rate = sum(verdicts[v] for v in PASSING) / args.runs
    resampled_rate = sum(resamples[v] for v in PASSING) / args.resamples
    findings = sum(resamples[v] for v in stats.FINDINGS) / args.resamples
    emit(
        {
            "benchmark": "aa",
            "runs": args.runs,
            "verdicts": dict(verdicts),
            "same_or_not_significant": real_rate,
            "resamples": args.resamples,
            "resampled_verdicts": dict(resamples),
            "resampled_same_or_not_significant": resampled_rate,
            "resampled_false_findings": findings,
            "blocks_in_pool": len(pool),
            "target": TARGET,
            "verdict": "ok" if min(real_rate, resampled_rate) >= TARGET else "below target",
        }
    )
    return 0 if min(real_rate, resampled_rate) >= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
