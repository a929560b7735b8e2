"""Time to verdict against the floor: the width each design reaches in 5 minutes, over
the width `mallocbench calibrate` predicts for the best design in the same 5 minutes.

One bench run: `calibrate` once on the 4-setup experiment (InnoDB point-query, 8
clients; glibc the base), as a process, its --json read back. Its components (of one
setup start after start, and of the log-ratio of two copies compared as runs and as
turns) and costs give each design's plan for the budget: the slices (or turns) per
start whose predicted width, with the starts that then fit, is the narrowest.
(calibrate's own plan takes Kalibera and Jones' optimum, which ignores the budget: on
a host where starts differ little it asks for 20 slices, and fewer than 2 starts fit.
It is shown beside, and checked against calibrate's JSON for its 4 setups, so the
model here is calibrate's.)

Then, for 2 setups (glibc, jemalloc) and 4 (+ tcmalloc, mimalloc), each fixed design
(runs, turns, sequential) runs as its plan says, and `design = "auto"` runs the runs
plan's experiment with the design left to it (it finds calibrate's stored calibration,
so it spends no time calibrating). Each is stopped with SIGTERM after --minutes, as a
user's Ctrl-C would (finished cells are kept), and judged by the code the reports use.

The best design by prediction runs first, then auto, then the others. After each
design it prints that design's width reached (mean and widest over the
ratios to the base, in points), the blocks it finished against the plan's, and the
spread of a block's log-ratio against the calibrated one; then the ratio reached /
predicted for the best design by prediction (target <= 1.25) and auto's width over the
best fixed design's (target <= 1.1). A run's residual has few degrees of freedom, so
each ratio comes with the 95% interval the run's chi-square gives the width at its
true spread.

    .venv/bin/python bench/bench_time_to_verdict.py [--minutes 5] [--setups 2,4]
        [--designs runs,turns,sequential,auto] [--calibration FILE.json]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from common import Plan, emit, run
from scipy.stats import chi2
from scipy.stats import f as fisher_f

from mallocbench.analysis import noise, stats
from mallocbench.analysis.summary import summarize
from mallocbench.results import RunResult

ALLOCATORS = ("glibc", "jemalloc", "tcmalloc", "mimalloc")
FIXED = ("runs", "turns", "sequential")
REPEATS = 60  # more than fit in the minutes: the stop ends every run
TARGET_CI_PCT = 3.0
PREDICTION_TARGET = 1.25
AUTO_TARGET = 1.1


def setups_of(count: int) -> list[tuple[str, str, str]]:
    return [(a, a, "") for a in ALLOCATORS[:count]]


def load() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def calibrate(out: Path, minutes: float) -> tuple[dict[str, Any], float, float]:
    """calibrate's JSON for the 4-setup experiment, its wall seconds and the load before."""
    out.mkdir(parents=True, exist_ok=True)
    experiment = out / "ttv4.toml"
    experiment.write_text(Plan("ttv4", setups_of(4), repeats=REPEATS).toml())
    path = out / "calibration.json"
    before, started = load(), time.monotonic()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mallocbench.cli",
            "calibrate",
            str(experiment),
            "--budget",
            f"{minutes * 60:.0f}s",
            "--target-ci",
            f"{TARGET_CI_PCT:g}%",
            "--out",
            str(out),
            "--json",
            str(path),
        ],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise SystemExit(f"mallocbench calibrate failed:\n{done.stderr[-2000:]}")
    return json.loads(path.read_text()), time.monotonic() - started, before


def components_of(calibration: dict[str, Any], design: str) -> noise.VarianceComponents:
    key = {"sequential": "components", "runs": "runs_ratio", "turns": "turns_ratio"}[design]
    found = calibration[key]
    if found is None:
        raise SystemExit(f"calibrate measured no {design} components (no pairs?)")
    fields = ("within_var", "between_var", "starts", "slices", "within_df", "mean_log")
    return noise.VarianceComponents(**{f: found[f] for f in fields})


def block_seconds(design: str, costs: dict[str, float], setups: int) -> tuple[float, float]:
    """A block's fixed seconds and its seconds per slice (or turn) of every setup: the
    cost model calibrate plans with (checked against its own plans in `plans`)."""
    if design == "sequential":
        fixed = setups * (costs["start_s"] + costs["warmup_s"] + 1.0)
        return fixed, setups * max(costs["slice_wall_s"] - 1.0, 1.0)
    fixed = costs["start_s"] + setups * costs["warmup_s"]
    if design == "turns":
        return fixed + setups * costs["turn_s"], setups * costs["turn_s"]
    return fixed, setups * costs["slice_wall_s"]


def plan(
    calibration: dict[str, Any],
    design: str,
    setups: int,
    budget_s: float,
    slices: int | None = None,
) -> dict:
    """Slices per start, starts that fit and the width they reach, for one design:
    calibrate's (Kalibera and Jones' optimum, `slices` None) or with `slices` given."""
    found = components_of(calibration, design)
    fixed_s, per_slice_s = block_seconds(design, calibration["costs"], setups)
    if slices is None:
        slices = noise.optimal_slices_per_start(
            found.within_var, found.between_var or 0.0, per_slice_s, fixed_s
        )
    starts = int(budget_s // (fixed_s + slices * per_slice_s))
    paired = design != "sequential"
    width = (
        noise.resolvable_effect_pct(found, setups, slices, starts, paired=paired)
        if starts >= 2
        else math.inf
    )
    block_var = (1.0 if paired else 2.0) * ((found.between_var or 0.0) + found.within_var / slices)
    return {
        "slices_per_start": slices,
        "starts": starts,
        "width": width,
        "block_log_ratio_sd": math.sqrt(block_var),
    }


def narrowest(calibration: dict[str, Any], design: str, setups: int, budget_s: float) -> dict:
    """The plan whose predicted width in the budget is the narrowest: Kalibera and Jones'
    optimum ignores the budget, and where starts differ little it asks for so many slices
    that fewer than 2 starts fit (no interval at all)."""
    tried = [
        plan(calibration, design, setups, budget_s, k)
        for k in range(1, noise.MAX_SLICES_PER_START + 1)
    ]
    return min(tried, key=lambda p: (p["width"], -p["starts"]))


def plans(calibration: dict[str, Any], setups: int, budget_s: float) -> dict[str, dict]:
    """Every design's narrowest plan in the budget, with calibrate's own beside it; for
    calibrate's setup count, its own is checked against its JSON."""
    made = {d: narrowest(calibration, d, setups, budget_s) for d in FIXED}
    for design in FIXED:
        made[design]["calibrate_plan"] = plan(calibration, design, setups, budget_s)
    for theirs in calibration["designs"]:
        if theirs["setups"] != setups:
            continue
        ours = made[theirs["design"]]["calibrate_plan"]
        width = theirs["budget_width_pct"]
        same = (width is None and not math.isfinite(ours["width"])) or (
            width is not None and abs(width - ours["width"]) < 0.01
        )
        if not same or ours["slices_per_start"] != theirs["slices_per_start"]:
            raise SystemExit(f"this bench's plan model differs from calibrate's: {theirs}")
    return made


def experiment_for(
    name: str, design: str, setups: int, made: dict, calibration: dict[str, Any]
) -> Plan:
    """The experiment a design's plan asks for; auto gets the runs plan's, design open."""
    shape = made["runs" if design == "auto" else design]
    piece = float(calibration["turn_s"] if design == "turns" else calibration["slice_s"])
    kinds = {
        "runs": ("interleaved", "runs"),
        "turns": ("interleaved", "turns"),
        "sequential": ("sequential", "runs"),
        "auto": ("auto", "runs"),
    }
    kind, alternate = kinds[design]
    return Plan(
        name,
        setups_of(setups),
        repeats=REPEATS,
        design=kind,
        alternate=alternate,
        step_s=shape["slices_per_start"] * piece,
        slice_s=piece,
        max_warmup=15,
    )


def reached(result: RunResult) -> dict[str, Any]:
    """The widths (points) of the ratios to the base over the finished blocks, as the
    reports compute them, with their blocks and degrees of freedom."""
    by_setup = summarize(result.cells)
    base = next((s for key, s in by_setup.items() if key[0] == "glibc"), None)
    others = {key[0]: s.by_repeat for key, s in by_setup.items() if key[0] != "glibc"}
    if base is None or not others:
        return {"width_mean": math.inf, "width_max": math.inf, "blocks": 0, "df": 0}
    ratios = stats.blocked_ratios(base.by_repeat, others)
    widths = [
        100 * (r.high - r.low) if math.isfinite(r.high - r.low) else math.inf
        for r in ratios.values()
    ]
    first = next(iter(ratios.values()))
    # se = sqrt(2 mse / blocks), and a block's log-ratio has variance 2 mse.
    t = stats.t_quantile(0.95, first.df) if first.df >= 1 else math.nan
    se = math.log(first.high / first.low) / (2 * t) if first.df >= 1 else math.nan
    return {
        "width_mean": statistics.fmean(widths),
        "width_max": max(widths),
        "blocks": first.blocks,
        "df": first.df,
        "block_log_ratio_sd": se * math.sqrt(first.blocks),
        "chosen": chosen(result),
    }


def chosen(result: RunResult) -> dict[str, Any] | None:
    """The design the run used and, for auto, why."""
    design = result.metadata.design
    if design is None:
        return None
    return {"used": design.used, "alternate": design.alternate, "why": design.why}


def ratio_interval(ratio: float, df: int) -> tuple[float, float]:
    """95% interval of the width at the run's true spread over the same denominator."""
    if df < 1 or not math.isfinite(ratio):
        return math.nan, math.nan
    return (
        ratio * math.sqrt(df / chi2.ppf(0.975, df)),
        ratio * math.sqrt(df / chi2.ppf(0.025, df)),
    )


def two_run_interval(ratio: float, df_top: int, df_bottom: int) -> tuple[float, float]:
    """95% interval of a ratio of two runs' widths at their true spreads: each width's
    square scatters as chi-square over its df, so their quotient as F."""
    if min(df_top, df_bottom) < 1 or not math.isfinite(ratio):
        return math.nan, math.nan
    return (
        ratio / math.sqrt(fisher_f.ppf(0.975, df_top, df_bottom)),
        ratio / math.sqrt(fisher_f.ppf(0.025, df_top, df_bottom)),
    )


def judge(setups: int, made: dict, found: dict[str, dict]) -> dict[str, Any]:
    """The two Done-when ratios for one setup count."""
    best = min(FIXED, key=lambda d: made[d]["width"])
    predicted = made[best]["width"]
    ratio = found[best]["width_mean"] / predicted if best in found else math.nan
    out: dict[str, Any] = {
        "setups": setups,
        "best_predicted": best,
        "predicted_width": predicted,
        "best_reached_width": found.get(best, {}).get("width_mean"),
        "reached_over_predicted": ratio,
        "reached_over_predicted_95": ratio_interval(ratio, found.get(best, {}).get("df", 0)),
        "prediction_target": PREDICTION_TARGET,
    }
    fixed = [d for d in FIXED if d in found]
    if fixed and "auto" in found:
        narrowest = min(fixed, key=lambda d: found[d]["width_mean"])
        versus = found["auto"]["width_mean"] / found[narrowest]["width_mean"]
        out |= {
            "best_fixed_reached": narrowest,
            "auto_over_best_fixed": versus,
            "auto_over_best_fixed_95": two_run_interval(
                versus, found["auto"]["df"], found[narrowest]["df"]
            ),
            "auto_target": AUTO_TARGET,
        }
    return out


def in_order(designs: list[str], made: dict[str, dict]) -> list[str]:
    """The best design by prediction first, then auto, then the rest: the two the
    Done-when ratios need come first when the time runs short."""
    best = min((d for d in FIXED if d in designs), key=lambda d: made[d]["width"], default=None)
    first = [d for d in (best, "auto") if d in designs]
    return first + [d for d in designs if d not in first]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=5)
    parser.add_argument("--setups", default="2,4")
    parser.add_argument("--designs", default="runs,turns,sequential,auto")
    parser.add_argument("--out", type=Path, default=Path("/tmp/mb-bench-ttv"))
    parser.add_argument("--calibration", type=Path, help="calibrate --json to use, not a new one")
    args = parser.parse_args()
    budget_s = args.minutes * 60
    if args.calibration:
        calibration = json.loads(args.calibration.read_text())
    else:
        calibration, seconds, before = calibrate(args.out / "calibrate", args.minutes)
        emit({"calibrate_s": round(seconds), "load_before": before, "load_after": load()})
    emit({"calibration": {k: calibration[k] for k in ("costs", "runs_ratio", "turns_ratio")}})
    for setups in (int(n) for n in args.setups.split(",")):
        made = plans(calibration, setups, budget_s)
        emit({"setups": setups, "plans": made})
        found: dict[str, dict] = {}
        for design in in_order(args.designs.split(","), made):
            name = f"ttv{setups}-{design}"
            experiment = experiment_for(name, design, setups, made, calibration)
            before = load()
            result, wall = run(experiment, args.out / name, stop_after_s=budget_s)
            found[design] = reached(result)
            emit(
                {
                    "setups": setups,
                    "design": design,
                    "wall_s": round(wall),
                    "load_before": before,
                    "load_after": load(),
                    **found[design],
                    "planned_blocks": made[design]["starts"] if design in made else None,
                    "planned_block_log_ratio_sd": made.get(design, {}).get("block_log_ratio_sd"),
                }
            )
            # After every design: a bench stopped for time still leaves its verdict so far.
            emit(judge(setups, made, found) | {"designs_run": list(found)})
    return 0


if __name__ == "__main__":
    sys.exit(main())
