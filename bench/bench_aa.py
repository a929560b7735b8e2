"""A/A: identical setups must not come out different, run after run.

Each run compares glibc with an identical twin (glibc-b) on real private servers: any
finding there is a false one. The target: >= 95% of the comparisons "same" or "not
significant" at min_effect 3%. Twenty runs cannot tell a 5% error rate from a 10% one,
so the recorded blocks of all runs are then resampled (3 blocks at a time, each block
keeping its own pairing) into hundreds of further A/A comparisons judged by the same code.

With `--alternate turns` the twins' clients take 1 s turns (10 per cell) instead of
running 5 s slices of their own. The paired log-ratio twin/base per turn (or slice) is
then split into its per-turn and per-start variance components over every block of
every run: how much of a block ratio's spread comes from the server starts themselves;
and again after a regression on the difference in other processes' CPU share between
the paired turns (a covariate the allocator does not cause), to show how much of the
per-turn noise is the busy host.
`--reuse` keeps the runs already in --out (a run that was stopped is run again).

    .venv/bin/python bench/bench_aa.py [--runs 20] [--resamples 400] [--alternate turns]
        [--out /tmp/mb-bench-aa] [--reuse]
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

from common import Plan, emit, ratio_cells, run

from mallocbench.analysis import noise, stats
from mallocbench.analysis.adjust import within_group_slope
from mallocbench.analysis.summary import summarize
from mallocbench.model.results import RunResult

MIN_EFFECT = 0.03
TARGET = 0.95
PASSING = (stats.SAME, stats.NOT_SIGNIFICANT)


def blocks_of(result: RunResult) -> list[tuple[float, float]]:
    """(base, twin) throughput per block of one run."""
    summaries = summarize(result.cells)
    (base,) = [s for k, s in summaries.items() if k[0] == "glibc"]
    (twin,) = [s for k, s in summaries.items() if k[0] == "glibc-b"]
    return [(base.by_repeat[b], twin.by_repeat[b]) for b in base.by_repeat if b in twin.by_repeat]


def block_turns(result: RunResult) -> list[list[tuple[float, float]]]:
    """Per block, for each turn (or slice) paired by position (the k-th turn of each ran
    in the same round): twin/base throughput, and how much more of the machine other
    processes used in the twin's turn than in the base's (probes.system.interference)."""
    cells = {(c.setup, c.repeat): c for c in result.cells if c.slices}
    out = []
    for (setup, repeat), base in sorted(cells.items()):
        twin = cells.get(("glibc-b", repeat))
        if setup != "glibc" or twin is None:
            continue
        pairs = zip(base.slices, twin.slices, strict=False)
        out.append(
            [
                (t["qps"] / b["qps"], t.get("other_cpu_share", 0.0) - b.get("other_cpu_share", 0.0))
                for b, t in pairs
                if b.get("qps") and t.get("qps")
            ]
        )
    return [r for r in out if r]


def adjusted_for_others(turns: list[list[tuple[float, float]]]) -> tuple[list[list[float]], float]:
    """The ratios with the part other processes' CPU explains taken out (the run's own
    adjustment, analysis.adjust: the log-ratio regressed on the difference in their
    share within blocks), and the share of the within-block variance it explained."""
    fitted = within_group_slope([[(math.log(r), d) for r, d in block] for block in turns])
    if fitted is None:
        return [[r for r, _ in block] for block in turns], 0.0
    slope, explained, _ = fitted
    return [[r * math.exp(-slope * d) for r, d in block] for block in turns], explained


def components(ratios: list[list[float]], per_cell: int) -> dict[str, object]:
    """Per-turn and per-start variance of the paired log-ratio, and the share of a block
    ratio's variance (the mean of `per_cell` turns) that is per start."""
    if len(ratios) < 2 or not any(len(r) >= 2 for r in ratios):
        return {"components": None}
    found = noise.variance_components(ratios)
    between = found.between_var or 0.0
    block_var = between + found.within_var / per_cell
    return {
        "components": found.to_dict(),
        "per_start_share_of_one_turn": between / (between + found.within_var),
        "per_start_share_of_block_ratio": between / block_var if block_var else math.nan,
        "block_ratio_sd": math.sqrt(block_var),
    }


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


def plan_for(alternate: str, repeats: int) -> Plan:
    twins = [("glibc", "glibc", ""), ("glibc-b", "glibc", "")]
    if alternate == "turns":
        return Plan("aa", twins, repeats=repeats, alternate="turns", step_s=10, slice_s=1)
    return Plan("aa", twins, repeats=repeats)


def one_run(plan: Plan, out: Path, reuse: bool) -> tuple[RunResult, float | None]:
    """A run's result and its wall seconds (None: reused from an earlier bench)."""
    stored = out / "results.json"
    if reuse and stored.exists():
        result = RunResult.from_dict(json.loads(stored.read_text()))
        if len({c.repeat for c in result.cells if c.qps}) >= plan.repeats:
            return result, None
    return run(plan, out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--resamples", type=int, default=400)
    parser.add_argument("--out", type=Path, default=Path("/tmp/mb-bench-aa"))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--alternate", choices=("runs", "turns"), default="runs")
    parser.add_argument("--reuse", action="store_true", help="keep finished runs in --out")
    args = parser.parse_args()
    plan = plan_for(args.alternate, args.repeats)
    verdicts: Counter[str] = Counter()
    pool: list[tuple[float, float]] = []
    turns: list[list[tuple[float, float]]] = []
    widths: list[float] = []
    walls: list[float] = []
    for i in range(args.runs):
        load = Path("/proc/loadavg").read_text().split()[0]
        result, seconds = one_run(plan, args.out / f"run{i:02d}", args.reuse)
        cell = ratio_cells(result)["glibc-b"]
        verdicts[cell.verdict] += 1
        widths.append(100 * (cell.high - cell.low))
        walls += [] if seconds is None else [seconds]
        pool += blocks_of(result)
        turns += block_turns(result)
        emit(
            {
                "run": i,
                "ratio": cell.ratio,
                "low": cell.low,
                "high": cell.high,
                "verdict": cell.verdict,
                "seconds": None if seconds is None else round(seconds),
                "load_before": float(load),
                "load_after": float(Path("/proc/loadavg").read_text().split()[0]),
                "at": time.strftime("%H:%M:%S", time.gmtime()),
            }
        )
    resamples = resampled(pool, args.resamples, random.Random(1))
    real_rate = sum(verdicts[v] for v in PASSING) / args.runs
    resampled_rate = sum(resamples[v] for v in PASSING) / args.resamples
    findings = sum(resamples[v] for v in stats.FINDINGS) / args.resamples
    ratios = [[r for r, _ in block] for block in turns]
    per_cell = max((len(r) for r in ratios), default=1)
    adjusted, explained = adjusted_for_others(turns) if turns else ([], 0.0)
    emit(
        {
            "benchmark": "aa",
            "alternate": args.alternate,
            "runs": args.runs,
            "verdicts": dict(verdicts),
            "same_or_not_significant": real_rate,
            "resamples": args.resamples,
            "resampled_verdicts": dict(resamples),
            "resampled_same_or_not_significant": resampled_rate,
            "resampled_false_findings": findings,
            "blocks_in_pool": len(pool),
            "width_points_median": statistics.median(widths),
            "seconds_per_run_median": statistics.median(walls) if walls else None,
            "turns_per_cell": per_cell,
            "paired_log_ratio": components(ratios, per_cell),
            "adjusted_for_other_cpu": components(adjusted, per_cell)
            | {"within_block_share_explained": explained},
            "target": TARGET,
            "verdict": "ok" if min(real_rate, resampled_rate) >= TARGET else "below target",
        }
    )
    return 0 if min(real_rate, resampled_rate) >= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
