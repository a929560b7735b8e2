"""The settle before turns: does a longer one cut the block variance of the log-ratio?

The same small turns experiment (InnoDB point-query, 8 clients, glibc the base against
jemalloc, 1 s turns, --blocks server starts a run) runs --runs times per arm, the arms
alternating in ABBA order so drift of the shared host reaches both alike: the default
settle (`[durations] settle` absent: one round of unmeasured turns) and a long one
(`settle = --long`). Each run gives its blocks' log-ratios ln(QPS jemalloc / QPS glibc)
and their sample variance (with 2 setups, twice the residual mean square the reports'
blocked ratio uses: analysis.stats.blocked_ratios). Each arm pools its runs' variances
over their degrees of freedom (a run's own level drops out), and the F test
(scipy.stats.f) asks whether the long settle's pooled variance is lower, one-sided.

Beside it, from the turns themselves: per arm, the mean change in the base's log-QPS
from a block's first measured turn to its last (the "fall through a block"), and the
first measured turn's log-QPS against the block's other turns.

`--reuse` judges the runs already in --out again (a run stopped part way is run again
once its directory is removed).

`--first-seconds DIR...` instead reads stored results of runs with alternate = "runs"
(each slice a sysbench process of its own) and reports, per slice, the mean log-QPS of
its first 3 kept seconds (after the dropped first) against the rest of it, from the
cells' per-second samples; `--slices` first runs such an experiment (the same setups
and step, --blocks blocks of three 10 s slices per cell) and judges it.

    .venv/bin/python bench/bench_settle.py [--runs 5] [--blocks 5] [--long 4]
        [--step 8] [--out /tmp/mb-bench-settle] [--reuse]
    .venv/bin/python bench/bench_settle.py --first-seconds RESULTS_DIR [RESULTS_DIR ...]
    .venv/bin/python bench/bench_settle.py --slices [--blocks 5]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path
from typing import Any

import numpy as np
from common import Plan, emit, run
from scipy import stats as scipy_stats

from mallocbench.analysis.summary import summarize
from mallocbench.model.results import Cell, RunResult

BASE, OTHER = "glibc", "jemalloc"
DEFAULT, LONG = "default", "long"
FIRST_S = 3.0  # a fresh sysbench process's fast start, then its dip


def block_log_ratios(result: RunResult) -> list[float]:
    """ln(QPS other / QPS base) per block where both cells finished, block by block."""
    by_setup = {key[0]: s.by_repeat for key, s in summarize(result.cells).items()}
    base, other = by_setup.get(BASE, {}), by_setup.get(OTHER, {})
    return [
        math.log(other[b] / base[b])
        for b in sorted(base)
        if b in other and base[b] > 0 and other[b] > 0
    ]


def turn_shape(result: RunResult, setup: str) -> dict[str, float | None]:
    """The setup's measured turns, per block: last minus first log-QPS, and the first
    turn's log-QPS minus the mean of the block's other turns; each averaged over blocks."""
    falls, firsts = [], []
    for cell in result.cells:
        if cell.setup != setup or cell.status != "ok":
            continue
        logs = [math.log(s["qps"]) for s in cell.slices if s.get("qps", 0) > 0]
        if len(logs) >= 3:
            falls.append(logs[-1] - logs[0])
            firsts.append(logs[0] - statistics.fmean(logs[1:]))
    return {
        "fall": statistics.fmean(falls) if falls else None,
        "first_over_rest": statistics.fmean(firsts) if firsts else None,
    }


def pooled(variances: list[tuple[float, int]]) -> tuple[float, int]:
    """The variance pooled over runs (each a variance and its degrees of freedom)."""
    df = sum(d for _, d in variances)
    if df == 0:
        return math.nan, 0
    return sum(v * d for v, d in variances) / df, df


def f_test(default: tuple[float, int], long: tuple[float, int]) -> dict[str, float]:
    """F = default's pooled variance over the long settle's; p: the chance of an F this
    large were the two equal (one-sided: the long settle lower), and two-sided."""
    (v_d, df_d), (v_l, df_l) = default, long
    if df_d < 1 or df_l < 1 or not v_l > 0:
        return {"F": math.nan, "p_one_sided": math.nan, "p_two_sided": math.nan}
    ratio = v_d / v_l
    one = float(scipy_stats.f.sf(ratio, df_d, df_l))
    two = 2 * min(one, float(scipy_stats.f.cdf(ratio, df_d, df_l)))
    return {"F": ratio, "p_one_sided": one, "p_two_sided": min(1.0, two)}


def arms_in_order(runs: int) -> list[str]:
    """ABBA ABBA ...: each arm as often first as second, runs per arm each."""
    order: list[str] = []
    while len(order) < 2 * runs:
        order += [DEFAULT, LONG, LONG, DEFAULT]
    return order[: 2 * runs]


def summary(found: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    pools = {}
    for arm, runs in found.items():
        parts = [(r["block_var"], r["blocks"] - 1) for r in runs if r["blocks"] >= 2]
        pools[arm] = pooled(parts)
        falls = [r["base"]["fall"] for r in runs if r["base"]["fall"] is not None]
        firsts = [r["base"]["first_over_rest"] for r in runs]
        firsts = [f for f in firsts if f is not None]
        out[arm] = {
            "runs": len(runs),
            "block_vars": [r["block_var"] for r in runs],
            "pooled_var": pools[arm][0],
            "df": pools[arm][1],
            "base_fall": statistics.fmean(falls) if falls else None,
            "base_first_over_rest": statistics.fmean(firsts) if firsts else None,
        }
    if DEFAULT in pools and LONG in pools:
        out["f_test"] = f_test(pools[DEFAULT], pools[LONG])
    return out


def measure(args: argparse.Namespace) -> None:
    found: dict[str, list[dict[str, Any]]] = {DEFAULT: [], LONG: []}
    for index, arm in enumerate(arms_in_order(args.runs)):
        name = f"settle-{index + 1:02d}-{arm}"
        plan = Plan(
            name,
            [(BASE, BASE, ""), (OTHER, OTHER, "")],
            repeats=args.blocks,
            alternate="turns",
            step_s=args.step,
            slice_s=1,
            # Both arms name their settle: the default is what is measured.
            settle=args.long if arm == LONG else 1,
        )
        stored = args.out / name / "results.json"
        wall = None
        if args.reuse and stored.exists():
            result = RunResult.from_dict(json.loads(stored.read_text()))
        else:
            result, seconds = run(plan, args.out / name)
            wall = round(seconds)
        ratios = block_log_ratios(result)
        design = result.metadata.design
        record: dict[str, Any] = {
            "run": index + 1,
            "arm": arm,
            # As the run recorded it (absent: one round, as before the option existed).
            "settle_rounds": (design.settle_rounds if design else None) or 1,
            "wall_s": wall,
            "load": float(Path("/proc/loadavg").read_text().split()[0]),
            "blocks": len(ratios),
            "log_ratios": ratios,
            "block_var": float(np.var(ratios, ddof=1)) if len(ratios) >= 2 else math.nan,
            "base": turn_shape(result, BASE),
            "other": turn_shape(result, OTHER),
        }
        found[arm].append(record)
        emit(record)
    emit({"settle": summary(found)})


def slice_logs(cell: Cell) -> list[list[float]]:
    """Per slice of a cell long enough to split, the log-QPS of its kept seconds in
    order (its first second, the clients connecting, is dropped before any is kept: a
    slice's "t" is its first kept sample)."""
    out = []
    for piece in cell.slices:
        start, seconds = piece.get("t"), piece.get("seconds")
        if start is None or not seconds or seconds < FIRST_S + 2:
            continue
        inside = sorted(
            (s.t, math.log(s.qps))
            for s in cell.samples
            if s.qps and s.qps > 0 and start - 0.01 <= s.t < start + seconds - 0.5
        )
        if len(inside) > FIRST_S:
            out.append([v for _, v in inside])
    return out


def cell_level(slices: list[list[float]], skip: int) -> float | None:
    """A cell's log-QPS: the mean over its slices of their seconds after the first `skip`."""
    kept = [statistics.fmean(logs[skip:]) for logs in slices if logs[skip:]]
    return statistics.fmean(kept) if kept else None


def with_and_without(result: RunResult) -> dict[str, list[float]]:
    """Per block, ln(QPS other / QPS base) from every kept second and from the seconds
    after each slice's first FIRST_S: what dropping them would change in a verdict."""
    levels: dict[tuple[str, int], list[list[float]]] = {}
    for cell in result.cells:
        if cell.status == "ok":
            levels[(cell.setup, cell.repeat)] = slice_logs(cell)
    out: dict[str, list[float]] = {"all": [], "dropped": []}
    for (setup, block), base in sorted(levels.items()):
        other = levels.get((OTHER, block))
        if setup != BASE or not other or not base:
            continue
        for key, skip in (("all", 0), ("dropped", int(FIRST_S))):
            b, o = cell_level(base, skip), cell_level(other, skip)
            if b is not None and o is not None:
                out[key].append(o - b)
    return out


def slices_run(args: argparse.Namespace) -> Path:
    """A runs experiment whose slices are long enough to see their first seconds:
    the same setups and step, 10 s slices, each a sysbench process of its own."""
    name = "slice-starts"
    plan = Plan(
        name,
        [(BASE, BASE, ""), (OTHER, OTHER, "")],
        repeats=args.blocks,
        alternate="runs",
        step_s=30,
        slice_s=10,
    )
    run(plan, args.out / name)
    return args.out / name


def slice_starts(dirs: list[Path]) -> None:
    gaps: list[float] = []
    blocks: dict[str, list[float]] = {"all": [], "dropped": []}
    for folder in dirs:
        result = RunResult.from_dict(json.loads((folder / "results.json").read_text()))
        for cell in result.cells:
            gaps += [
                statistics.fmean(logs[: int(FIRST_S)]) - statistics.fmean(logs[int(FIRST_S) :])
                for logs in slice_logs(cell)
            ]
        for key, ratios in with_and_without(result).items():
            blocks[key] += ratios
    if len(gaps) < 2:
        raise SystemExit("no 2 slices with more than 3 kept seconds in these results")
    sd = statistics.stdev(gaps)
    emit(
        {
            "first_seconds": {
                "results": [str(d) for d in dirs],
                "slices": len(gaps),
                "first_s": FIRST_S,
                "mean_log_first_minus_rest": statistics.fmean(gaps),
                "sd": sd,
                "se": sd / math.sqrt(len(gaps)),
                "block_log_ratios": blocks,
                "block_var": {
                    k: statistics.variance(v) if len(v) > 1 else None for k, v in blocks.items()
                },
                "mean_log_ratio": {
                    k: statistics.fmean(v) if v else None for k, v in blocks.items()
                },
            }
        }
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="runs per arm")
    parser.add_argument("--blocks", type=int, default=5, help="server starts per run")
    parser.add_argument("--long", type=int, default=4, help="the long arm's settle rounds")
    parser.add_argument("--step", type=float, default=8, help="measured seconds per cell")
    parser.add_argument("--out", type=Path, default=Path("/tmp/mb-bench-settle"))
    parser.add_argument(
        "--reuse", action="store_true", help="judge the runs already in --out again, not rerun"
    )
    parser.add_argument("--first-seconds", type=Path, nargs="+", metavar="RESULTS_DIR")
    parser.add_argument(
        "--slices", action="store_true", help="run 10 s runs slices, then judge their starts"
    )
    args = parser.parse_args()
    if args.first_seconds or args.slices:
        slice_starts(args.first_seconds or [slices_run(args)])
        return 0
    if args.runs < 2 or args.blocks < 3:
        parser.error("give --runs of at least 2 and --blocks of at least 3")
    measure(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
