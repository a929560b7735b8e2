"""Time to verdict against the floor: the width each design reaches in 5 minutes, over
the width `mallocbench calibrate` predicts for the best design in the same 5 minutes.

For each setup count, 2 (glibc, jemalloc) and 4 (+ tcmalloc, mimalloc), one bench run:
`calibrate` once on that experiment (InnoDB point-query, 8 clients; glibc the base), as
a process, its --json read back; calibrate stores it for this host and shape, where
`design = "auto"` finds it. Its components (of one setup start after start, and of the
log-ratio of copy a to each other copy, as many copies up at once as the experiment has
setups, compared as runs and as turns) and costs (start, warmup, slice,
turn, stop) give each design's plan for the budget: calibrate's own (analysis.designs
plan_run: the slices or turns per start whose predicted width, with the starts that
then fit, is the narrowest), read from its JSON and checked against the same model here.

Then each fixed design (runs, turns, sequential) runs as its plan says, and
`design = "auto"` runs with `budget` set to the minutes, so it chooses the design and
its shape for that wall time itself (from the stored calibration: no time spent
calibrating). Each is stopped with SIGTERM after --minutes, as a user's Ctrl-C would
(finished cells are kept), and judged by the code the reports use.

The best design by prediction runs first, then auto (the two swap every other round),
then the others. A fixed design asks for the blocks its plan fits; auto for many, and
takes its own repeats from the budget. After each
design it prints that design's width reached (mean and widest over the ratios to the
base, in points), the blocks it finished against the plan's, the median seconds a block
took against the model's, and the spread of a block's log-ratio against the calibrated
one; then the ratio reached / predicted for the best design by prediction (target <=
1.25) and auto's width over the best fixed design's (target <= 1.1).

A run's residual has 9-12 degrees of freedom, so one run's width scatters by about a
fifth around its expected value: one run of each design cannot tell a chooser that
works from one that does not (two runs of one design in one bench run reached 9.9 and
14.0 points). `--repeats N` runs every design N times, round after round (so drift of
the host's noise reaches every design alike), and judges the median width of each.
Each ratio comes with the 95% interval that the runs' chi-squares give a median of
widths at their true spread, and with the chance that a model and a chooser that were
exactly right would meet each target at these degrees of freedom.

Auto judged over runs: after every run it also prints "pooled", each design's width
pooled over its runs (the root of the squared widths weighted by their degrees of
freedom, per design and shape), auto's expected width (the pooled width of what it
chose, pooled with the fixed runs of the same design and shape) over the best fixed
design's, its F interval, and the chance of meeting 1.1 were the two equal. `--pool`
adds earlier invocations' output to the pool (3 or more bench runs, as the target
asks); given alone it only pools them.

    .venv/bin/python bench/bench_time_to_verdict.py [--minutes 5] [--setups 2,4]
        [--designs runs,turns,sequential,auto] [--repeats 1] [--calibration FILE.json]
        [--pool OUTPUT.jsonl ... [--measure]]
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

import numpy as np
from common import Plan, emit, run
from scipy import stats as scipy_stats

from mallocbench.analysis import designs, noise, stats
from mallocbench.analysis.adjust import adjust_for_other_cpu
from mallocbench.analysis.summary import summarize, summarize_run
from mallocbench.model.results import RunResult

ALLOCATORS = ("glibc", "jemalloc", "tcmalloc", "mimalloc")
FIXED = ("runs", "turns", "sequential")
REPEATS = 60  # more than fit in the minutes: auto takes its own from the budget
TARGET_CI_PCT = 3.0
PREDICTION_TARGET = 1.25
AUTO_TARGET = 1.1


def setups_of(count: int) -> list[tuple[str, str, str]]:
    return [(a, a, "") for a in ALLOCATORS[:count]]


def load() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


MAX_WARMUP_S = 15  # the calibration's and every run's: the warmup is a cost the plan prices


def calibrate(out: Path, minutes: float, setups: int) -> tuple[dict[str, Any], float, float]:
    """calibrate's JSON for the experiment of `setups` setups, its wall seconds and the
    load before; calibrate stores it where auto finds it (the key holds the setups)."""
    out.mkdir(parents=True, exist_ok=True)
    name = f"ttv{setups}"
    experiment = out / f"{name}.toml"
    experiment.write_text(
        Plan(name, setups_of(setups), repeats=REPEATS, max_warmup=MAX_WARMUP_S).toml()
    )
    path = out / f"calibration{setups}.json"
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


def costs_of(calibration: dict[str, Any]) -> designs.Costs:
    return designs.Costs(**calibration["costs"])


def plan(calibration: dict[str, Any], design: str, setups: int, budget_s: float) -> dict:
    """Slices per start, starts that fit and the width they reach, for one design, by
    calibrate's own model (analysis.designs.shape_in_budget)."""
    found = components_of(calibration, design)
    costs = costs_of(calibration)
    paired = design != "sequential"
    shape = designs.shape_in_budget(found, costs, design, setups, budget_s, paired=paired)
    slices = shape.slices_per_start
    block_var = (1.0 if paired else 2.0) * ((found.between_var or 0.0) + found.within_var / slices)
    fixed_s, per_slice_s = designs.block_costs(design, costs, setups)
    series = designs.series_per_start(design, setups)
    in_range = designs.width_range_pct(found, slices, shape.width_pct, series_per_start=series)
    return {
        "slices_per_start": slices,
        "starts": shape.starts,
        "width": shape.width_pct,
        "width_range": in_range,
        "width_df": designs.width_df(found, slices, series_per_start=series),
        "block_s": fixed_s + slices * per_slice_s,
        "block_log_ratio_sd": math.sqrt(block_var),
    }


def plans(calibration: dict[str, Any], setups: int, budget_s: float) -> dict[str, dict]:
    """Every design's plan in the budget; for calibrate's setup count, checked against
    the plans in its JSON (so the model here is calibrate's)."""
    made = {d: plan(calibration, d, setups, budget_s) for d in FIXED}
    for theirs in calibration["designs"]:
        if theirs["setups"] != setups or abs(theirs["budget_s"] - budget_s) > 0.5:
            continue
        ours = made[theirs["design"]]
        width = theirs["budget_width_pct"]
        same = (width is None and not math.isfinite(ours["width"])) or (
            width is not None and abs(width - ours["width"]) < 0.01
        )
        if not same or ours["slices_per_start"] != theirs["slices_per_start"]:
            raise SystemExit(f"this bench's plan model differs from calibrate's: {theirs}")
    return made


def experiment_for(
    name: str, design: str, setups: int, made: dict, calibration: dict[str, Any], budget_s: float
) -> Plan:
    """The experiment a design's plan asks for; auto gets the budget and chooses itself
    (its step and slice here are only the defaults it replaces)."""
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
        # A fixed design asks for the blocks its plan fits, and ends by itself as auto
        # does, so the two runs differ in nothing but the choosing.
        repeats=REPEATS if design == "auto" else max(2, shape["starts"]),
        design=kind,
        alternate=alternate,
        step_s=shape["slices_per_start"] * piece,
        slice_s=piece,
        max_warmup=MAX_WARMUP_S,
        budget_s=budget_s if design == "auto" else None,
    )


def block_seconds(result: RunResult) -> float | None:
    """The median wall seconds of a finished block: first start to last stop."""
    spans: dict[int, list[float]] = {}
    for session in result.sessions:
        if session.started_at is None or session.ended_at is None:
            continue
        spans.setdefault(session.repeat, []).extend([session.started_at, session.ended_at])
    finished = {c.repeat for c in result.cells if c.status == "ok"}
    seconds = [max(v) - min(v) for r, v in spans.items() if r in finished]
    return statistics.median(seconds) if seconds else None


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
        "block_s": block_seconds(result),
        **adjusted_widths(result),
        "chosen": chosen(result),
    }


def adjusted_widths(result: RunResult) -> dict[str, Any]:
    """The widths the reports' other-CPU adjustment gives (analysis.adjust), beside the
    raw: their mean over the setups it adjusted, how many it left alone (the covariate
    differed by setup) and the within-block share the covariate explained."""
    found = adjust_for_other_cpu(result, summarize_run(result))
    if not found:
        return {"adjusted_width_mean": None}
    (cell,) = found
    done = [r.adjusted for r in cell.ratios if r.adjusted is not None]
    widths = [100 * (r.high - r.low) for r in done if math.isfinite(r.high - r.low)]
    return {
        "adjusted_width_mean": statistics.fmean(widths) if widths else None,
        "adjusted_setups": len(done),
        "not_adjusted_setups": len(cell.ratios) - len(done),
        "other_cpu_explained": cell.explained,
        "other_cpu_slope": cell.slope,
    }


def chosen(result: RunResult) -> dict[str, Any] | None:
    """The design the run used and, for auto, why."""
    design = result.metadata.design
    if design is None:
        return None
    return {
        "used": design.used,
        "alternate": design.alternate,
        "slice_s": design.slice_s,
        "slices_per_cell": design.slices_per_cell,
        "repeats": result.metadata.repeats,
        "widths": design.widths,
        "why": design.why,
    }


SCATTER_DRAWS = 200_000


def scatter(dfs: list[int], rng: np.random.Generator) -> np.ndarray:
    """Draws of the median, over runs with these residual degrees of freedom, of a run's
    width over its expected width: each scatters as sqrt(chi2_df / df)."""
    draws = [np.sqrt(rng.chisquare(df, SCATTER_DRAWS) / df) for df in dfs]
    return np.median(np.array(draws), axis=0)


def median_width(runs: list[dict]) -> float:
    return statistics.median(r["width_mean"] for r in runs)


def dfs_of(runs: list[dict]) -> list[int]:
    return [r["df"] for r in runs if r["df"] >= 1]


def ratio_interval(ratio: float, dfs: list[int]) -> tuple[float, float]:
    """95% interval of the median width at the runs' true spread over the same denominator."""
    if not dfs or not math.isfinite(ratio):
        return math.nan, math.nan
    low, high = np.quantile(scatter(dfs, np.random.default_rng(1)), [0.025, 0.975])
    return ratio / float(high), ratio / float(low)


def two_median_interval(ratio: float, dfs_top: list[int], dfs_bottom: list[int]) -> tuple:
    """95% interval of a ratio of two designs' median widths at their true spreads (for
    one run each, the F interval of a ratio of two widths)."""
    if not dfs_top or not dfs_bottom or not math.isfinite(ratio):
        return math.nan, math.nan
    rng = np.random.default_rng(2)
    quotient = scatter(dfs_top, rng) / scatter(dfs_bottom, rng)
    low, high = np.quantile(quotient, [0.025, 0.975])
    return ratio / float(high), ratio / float(low)


def odds_at_these_df(found: dict[str, list[dict]], best: str) -> dict[str, float]:
    """What chance alone allows at the degrees of freedom this bench run had, for a model
    and a chooser that are exactly right. The chance that the best design's median width
    comes out at most 1.25 times the expected one; and, were every design's expected
    width the same, the chance that auto's comes out at most 1.1 times the narrowest of
    the fixed designs' (the minimum of several noisy widths sits below their common value)."""
    rng = np.random.default_rng(0)
    out: dict[str, float] = {}
    if dfs_of(found.get(best, [])):
        reached_ = scatter(dfs_of(found[best]), rng)
        out["p_reached_within_prediction_target"] = float(np.mean(reached_ <= PREDICTION_TARGET))
    fixed = [dfs_of(found[d]) for d in FIXED if dfs_of(found.get(d, []))]
    if fixed and dfs_of(found.get("auto", [])):
        narrowest = np.min([scatter(dfs, rng) for dfs in fixed], axis=0)
        out["p_auto_within_target_if_designs_tie"] = float(
            np.mean(scatter(dfs_of(found["auto"]), rng) <= AUTO_TARGET * narrowest)
        )
    return out


def judge(setups: int, made: dict, found: dict[str, list[dict]]) -> dict[str, Any]:
    """The two Done-when ratios for one setup count, from each design's median width."""
    best = min(FIXED, key=lambda d: made[d]["width"])
    predicted = made[best]["width"]
    ratio = median_width(found[best]) / predicted if best in found else math.nan
    out: dict[str, Any] = {
        "setups": setups,
        "best_predicted": best,
        "predicted_width": predicted,
        # Where the prediction itself may lie, from the calibration's starts and turns.
        "predicted_width_range": made[best]["width_range"],
        # The designs the calibration cannot rank against the best: auto's choice
        # among them is a guess.
        "predicted_unranked": list(
            designs.unranked_beside(
                best,
                {
                    d: (made[d]["width"], made[d]["width_df"])
                    for d in FIXED
                    if math.isfinite(made[d]["width"])
                },
            )
        ),
        "best_reached_widths": [r["width_mean"] for r in found.get(best, [])],
        "best_reached_width": median_width(found[best]) if best in found else None,
        "reached_over_predicted": ratio,
        "reached_over_predicted_each": [r["width_mean"] / predicted for r in found.get(best, [])],
        "reached_over_predicted_95": ratio_interval(ratio, dfs_of(found.get(best, []))),
        "prediction_target": PREDICTION_TARGET,
    }
    fixed = [d for d in FIXED if d in found]
    if fixed and "auto" in found:
        narrowest = min(fixed, key=lambda d: median_width(found[d]))
        versus = median_width(found["auto"]) / median_width(found[narrowest])
        out |= {
            "best_fixed_reached": narrowest,
            "auto_widths": [r["width_mean"] for r in found["auto"]],
            "auto_over_best_fixed": versus,
            "auto_over_best_fixed_95": two_median_interval(
                versus, dfs_of(found["auto"]), dfs_of(found[narrowest])
            ),
            "auto_target": AUTO_TARGET,
        }
    return out | odds_at_these_df(found, best)


def design_of(record: dict[str, Any]) -> str | None:
    """The design a run used, by the fixed designs' names, from its design record."""
    chosen_ = record.get("chosen")
    if not chosen_ or chosen_.get("used") is None:
        return None
    if chosen_["used"] == "sequential":
        return "sequential"
    return "turns" if chosen_.get("alternate") == "turns" else "runs"


Shape = tuple[str | None, Any, Any]  # design, slices per cell, slice seconds


def shape_of(record: dict[str, Any]) -> Shape:
    """A run's design and shape: what auto's runs are pooled with fixed runs by."""
    chosen_ = record.get("chosen") or {}
    return design_of(record), chosen_.get("slices_per_cell"), chosen_.get("slice_s")


def pooled_width(runs: list[dict[str, Any]]) -> tuple[float, int]:
    """(width, degrees of freedom) pooled over runs of one design and shape: the root of
    their squared widths weighted by their residual degrees of freedom. A width is a t
    quantile times the root of a block variance over the blocks, so at one shape its
    square is the variance scaled, and this pools the variance as an F test would;
    runs that reached no width (no df) add nothing."""
    kept = [(r["width_mean"], r["df"]) for r in runs if r.get("df", 0) >= 1]
    kept = [(w, df) for w, df in kept if math.isfinite(w)]
    df = sum(d for _, d in kept)
    if df == 0:
        return math.inf, 0
    return math.sqrt(sum(w * w * d for w, d in kept) / df), df


def pooled_judgement(records: list[dict[str, Any]], setups: int) -> dict[str, Any]:
    """auto judged over runs, for one setup count: each auto run's expected width is the
    pooled width of the design and shape it chose (pooled over auto's runs and the fixed
    runs of that design and shape), auto's expected width their mean; against the best
    fixed design's pooled width (over its fixed runs and auto's of the same shape), with
    the F interval of their ratio and the chance of meeting the target were the two
    designs' expected widths equal, at these degrees of freedom."""
    runs = [r for r in records if r.get("setups") == setups and "width_mean" in r]
    pools: dict[Shape, list[dict[str, Any]]] = {}
    for r in runs:
        pools.setdefault(shape_of(r), []).append(r)
    widths = {k: pooled_width(v) for k, v in pools.items()}
    # Each fixed design at the shape its own runs had (its narrowest, were there several).
    fixed: dict[str, Shape] = {}
    for design in FIXED:
        shapes = {shape_of(r) for r in runs if r.get("design") == design}
        if shapes:
            fixed[design] = min(shapes, key=lambda k: widths[k][0])
    autos = [r for r in runs if r.get("design") == "auto"]
    out: dict[str, Any] = {
        "setups": setups,
        "pooled_runs": {d: sum(r.get("design") == d for r in runs) for d in (*FIXED, "auto")},
        "pooled_fixed": {d: {"width": widths[k][0], "df": widths[k][1]} for d, k in fixed.items()},
        "auto_target": AUTO_TARGET,
    }
    finite = [d for d, k in fixed.items() if math.isfinite(widths[k][0])]
    if not finite or not autos:
        return out | {"pooled_reason": "no auto run or no fixed design with a width"}
    best = min(finite, key=lambda d: widths[fixed[d]][0])
    best_width, best_df = widths[fixed[best]]
    chose = {shape_of(r) for r in autos}
    expected = statistics.fmean(widths[shape_of(r)][0] for r in autos)
    auto_df = sum(widths[k][1] for k in chose)
    ratio = expected / best_width
    # Auto that always chose the best design's shape shares its pool: the ratio is 1 by
    # construction, and an F interval of two independent pools would not describe it.
    same = chose == {fixed[best]}
    return (
        out
        | ({"pooled_auto_over_best_fixed_95": (1.0, 1.0)} if same else {})
        | ({} if same else pooled_ratio(ratio, auto_df, best_df))
        | {
            "pooled_best_fixed": best,
            "pooled_auto_same_as_best": same,
            "pooled_auto_chose": [design_of(r) for r in autos],
            "pooled_auto_width": expected,
            "pooled_auto_df": auto_df,
            "pooled_auto_over_best_fixed": ratio,
            "pooled_target_met": ratio <= AUTO_TARGET,
        }
    )


def pooled_ratio(ratio: float, df_top: int, df_bottom: int) -> dict[str, Any]:
    """The 95% F interval of a ratio of two pooled widths (a width is the root of a
    variance), and the chance a ratio of widths whose expected values are equal comes
    out at most the target at these degrees of freedom."""
    if df_top < 1 or df_bottom < 1 or not math.isfinite(ratio):
        return {"pooled_auto_over_best_fixed_95": (math.nan, math.nan)}
    high = math.sqrt(float(scipy_stats.f.ppf(0.975, df_top, df_bottom)))
    low = math.sqrt(float(scipy_stats.f.ppf(0.025, df_top, df_bottom)))
    chance = float(scipy_stats.f.cdf(AUTO_TARGET**2, df_top, df_bottom))
    return {
        "pooled_auto_over_best_fixed_95": (ratio / high, ratio / low),
        "p_pooled_within_target_if_designs_tie": chance,
    }


def read_records(paths: list[Path]) -> list[dict[str, Any]]:
    """The per-run records of earlier invocations, from their JSON lines (stdout)."""
    records = []
    for path in paths:
        for line in path.read_text().splitlines():
            if line.startswith("{"):
                record = json.loads(line)
                if "design" in record and "width_mean" in record:
                    records.append(record)
    return records


def in_order(designs: list[str], made: dict[str, dict], round_: int) -> list[str]:
    """The best design by prediction and auto first (the best run even when not asked
    for: the Done-when ratios are about it), then the rest: the two the ratios need come
    first when the time runs short. The two swap places every other round, so neither
    always follows the same run (a run stopped for time, or the calibration)."""
    best = min(FIXED, key=lambda d: made[d]["width"])
    first = [best] + [d for d in ("auto",) if d in designs]
    if round_ % 2 == 1:
        first.reverse()
    return first + [d for d in designs if d not in first]


def bench_setups(args: argparse.Namespace, setups: int, earlier: list[dict[str, Any]]) -> None:
    """Calibrate (or read --calibration), then run every design --repeats times for one
    setup count; after every run, the verdict so far, and auto judged over the runs so
    far pooled with `earlier` invocations' runs."""
    budget_s = args.minutes * 60
    if args.calibration:
        calibration = json.loads(args.calibration.read_text())
    else:
        calibration, seconds, before = calibrate(args.out / "calibrate", args.minutes, setups)
        emit(
            {
                "setups": setups,
                "calibrate_s": round(seconds),
                "load_before": before,
                "load_after": load(),
            }
        )
    kept = ("costs", "runs_ratio", "turns_ratio", "own_start_var", "start_agreement_p")
    emit({"calibration": {k: calibration.get(k) for k in kept}})
    made = plans(calibration, setups, budget_s)
    emit({"setups": setups, "plans": made})
    found: dict[str, list[dict]] = {}
    records = list(earlier)
    for round_ in range(args.repeats):
        for design in in_order(args.designs.split(","), made, round_):
            name = f"ttv{setups}-{design}" + (f"-{round_ + 1}" if args.repeats > 1 else "")
            experiment = experiment_for(name, design, setups, made, calibration, budget_s)
            before = load()
            result, wall = run(experiment, args.out / name, stop_after_s=budget_s)
            found.setdefault(design, []).append(reached(result))
            record = {
                "setups": setups,
                "design": design,
                "round": round_ + 1,
                "wall_s": round(wall),
                "load_before": before,
                "load_after": load(),
                **found[design][-1],
                "planned_blocks": made[design]["starts"] if design in made else None,
                "planned_block_s": made.get(design, {}).get("block_s"),
                "planned_block_log_ratio_sd": made.get(design, {}).get("block_log_ratio_sd"),
            }
            records.append(record)
            emit(record)
            # After every run: a bench stopped for time still leaves its verdict so far.
            emit(
                judge(setups, made, found)
                | {"runs_per_design": {d: len(v) for d, v in found.items()}}
            )
            emit({"pooled": pooled_judgement(records, setups)})


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=5)
    parser.add_argument("--setups", default="2,4")
    parser.add_argument("--designs", default="runs,turns,sequential,auto")
    parser.add_argument(
        "--repeats", type=int, default=1, help="runs of each design, round after round"
    )
    parser.add_argument("--out", type=Path, default=Path("/tmp/mb-bench-ttv"))
    parser.add_argument(
        "--calibration", type=Path, help="calibrate --json to use, not a new one (one --setups)"
    )
    parser.add_argument(
        "--pool",
        type=Path,
        nargs="+",
        metavar="OUTPUT",
        help="earlier invocations' output (JSON lines) to pool with; alone, only pools them",
    )
    parser.add_argument("--measure", action="store_true", help="with --pool: run as well")
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error(f"--repeats {args.repeats}: give at least 1 run of each design")
    earlier = read_records(args.pool) if args.pool else []
    if args.pool and not args.measure:
        for setups in sorted({r["setups"] for r in earlier}):
            emit({"pooled": pooled_judgement(earlier, setups)})
        return 0
    for setups in (int(n) for n in args.setups.split(",")):
        bench_setups(args, setups, earlier)
    return 0


if __name__ == "__main__":
    sys.exit(main())
