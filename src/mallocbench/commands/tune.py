"""`mallocbench tune`: search allocator knobs on a trace for the RSS-against-time front."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import click

from mallocbench.commands.options import min_effect_option, timing_options
from mallocbench.errors import MallocbenchError

if TYPE_CHECKING:
    from mallocbench.replay.trace import TraceInfo
    from mallocbench.tune.driver import Plan
    from mallocbench.tune.evaluate import ReplayEvaluator

DEFAULT_TRIALS = 30


def _budget(_ctx: click.Context, _param: click.Parameter, value: str | None) -> float | None:
    from mallocbench.units import parse_duration

    return None if value is None else parse_duration(value, "--budget")


def _portion(_ctx: click.Context, _param: click.Parameter, value: str | None) -> float | None:
    """Seconds, 0.0 for "all" (the whole trace), None when not given (auto)."""
    from mallocbench.units import parse_duration

    if value is None:
        return None
    return 0.0 if value.strip().lower() == "all" else parse_duration(value, "--portion")


@click.command("tune")
@click.argument("trace", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--allocators",
    "allocator_list",
    default="glibc,jemalloc",
    show_default=True,
    metavar="A,B,...",
    help="Allocators to tune, one study each.",
)
@click.option(
    "--budget",
    callback=_budget,
    metavar="DURATION",
    help="Wall-clock budget for everything, e.g. 15m (3/5 search, 2/5 repeats).",
)
@click.option(
    "--trials",
    type=click.IntRange(2, 100000),
    metavar="N",
    help=f"Settings per allocator, the default first (default {DEFAULT_TRIALS} without --budget).",
)
@click.option(
    "--objectives",
    default="rss,time",
    show_default=True,
    metavar="A,B",
    help="What to optimise: rss, rss_over_live, time (CPU), wall (lower is better), calls_per_s.",
)
@click.option(
    "--constraint",
    "constraint_list",
    multiple=True,
    metavar="METRIC<=VALUE",
    help="A bound every chosen setting keeps, e.g. 'time<=2' or 'rss<=512M'.",
)
@click.option(
    "--space",
    "space_list",
    multiple=True,
    metavar="[ALLOC:]KNOB=RANGE",
    help="Search only these knobs of ALLOC, e.g. glibc:arena_max=1..8 or "
    "jemalloc:background_thread=true/false (repeatable).",
)
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("tune-out"),
    show_default=True,
    help="Directory for the studies (tune.db) and the reports.",
)
@click.option("--resume", is_flag=True, help="Continue the studies in --out.")
@click.option(
    "--repeats",
    type=click.IntRange(2, 100),
    default=5,
    show_default=True,
    help="Replays of each front point and the default, for the intervals.",
)
@min_effect_option("Smaller changes never count as beating the default (default 2%).")
@timing_options
@click.option(
    "--portion",
    "portion_s",
    callback=_portion,
    metavar="DURATION|all",
    help="Replay only the trace's first DURATION in every trial and repeat (e.g. 20s). "
    "Default with --budget: what lets --trials settings per allocator fit it; else all.",
)
@click.option(
    "--on",
    "evaluator_name",
    type=click.Choice(["replay", "servers"]),
    default="replay",
    show_default=True,
    help="How a setting is measured.",
)
@click.option(
    "--engine",
    default="innodb",
    show_default=True,
    help="Engine of the confirmation experiment written to --out.",
)
@click.option("--seed", type=int, help="Seed of the sampler, for a repeatable search.")
@click.option("--json", "as_json", is_flag=True, help="Print the JSON document instead.")
def tune(
    trace: Path,
    allocator_list: str,
    budget: float | None,
    trials: int | None,
    objectives: str,
    constraint_list: tuple[str, ...],
    space_list: tuple[str, ...],
    out_dir: Path,
    resume: bool,
    repeats: int,
    min_effect: float | None,
    timing: str,
    speed: float,
    portion_s: float | None,
    evaluator_name: str,
    engine: str,
    seed: int | None,
    as_json: bool,
) -> None:
    """Search allocator knobs on a trace for the RSS-versus-time front, with intervals.

    One Optuna study per allocator (kept in OUT/tune.db; Ctrl-C keeps every finished
    trial, --resume continues), the default setting first. The front is then replayed
    --repeats times per point, and a setting is chosen (memory first, speed first) only
    when it beats the default as a finding; its systemd drop-in is printed."""
    from mallocbench.tune import objectives as objmod
    from mallocbench.tune.driver import Plan, check_allocators, check_out, spaces_for

    if evaluator_name == "servers" or trace.suffix.lower() == ".toml":
        raise MallocbenchError(_servers_refusal(trace, evaluator_name))
    metrics = objmod.parse_objectives(objectives)
    constraints = objmod.parse_constraints(constraint_list)
    tuned = check_allocators(allocator_list)
    spaces = spaces_for(tuned, space_list)
    info = _check_trace(trace)
    check_out(out_dir, resume)
    evaluator = _evaluator(
        trace, info, timing, speed, portion_s, budget, len(tuned), trials or DEFAULT_TRIALS
    )
    plan = Plan(
        trace=str(trace), evaluator_name=evaluator.describe(),
        objectives=metrics, constraints=constraints, spaces=spaces, tuned=tuned, out=out_dir,
        resume=resume, trials=trials or (None if budget else DEFAULT_TRIALS), budget_s=budget,
        repeats=repeats, min_effect=0.02 if min_effect is None else min_effect, seed=seed,
        engine=engine, evaluation=evaluator.facts(),
    )  # fmt: skip
    _run(plan, evaluator, as_json)


def _servers_refusal(target: Path, evaluator_name: str) -> str:
    """What to do instead of tuning on servers, which is not built: record a trace of the
    same workload, tune that, and confirm on servers with the experiment tune writes."""
    what = (
        "--on servers (tuning on private servers)"
        if evaluator_name == "servers"
        else f"{target} is an experiment: tuning on private servers (--on servers)"
    )
    return (
        f"{what} is not built yet: record a trace of the workload "
        "(record = true in the experiment, then mallocbench run it; or mallocbench record "
        "--pid), tune OUT/traces/*.mbt, then mallocbench run the confirm.toml tune writes"
    )


def _check_trace(trace: Path) -> TraceInfo:
    from mallocbench.replay import trace as tracemod

    return tracemod.check(trace)


def _evaluator(
    trace: Path,
    info: TraceInfo,
    timing: str,
    speed: float,
    portion_s: float | None,
    budget: float | None,
    allocators: int,
    trials: int,
) -> ReplayEvaluator:
    """The replay every trial and repeat makes. Under a budget, by default only the
    trace's first seconds, as many as let `trials` settings per allocator fit the
    search's share of it: a search that runs out of time finds less than one that sees a
    shorter stretch of the same program."""
    from mallocbench.tune.driver import SEARCH_SHARE
    from mallocbench.tune.evaluate import ReplayEvaluator, auto_portion

    duration_s = float(info.data.get("duration_s") or 0)
    if portion_s is None and budget is not None:
        trial_s = budget * SEARCH_SHARE / allocators / trials
        portion_s = auto_portion(trial_s, timing, speed, duration_s)
    return ReplayEvaluator(trace, timing, speed, duration_s, portion_s or None)


def _run(plan: Plan, evaluator: ReplayEvaluator, as_json: bool) -> None:
    import sys
    import time

    from mallocbench import exitcodes
    from mallocbench.commands.options import StopOnSignals
    from mallocbench.console import make_console
    from mallocbench.tune import driver
    from mallocbench.tune.progress import SearchProgress
    from mallocbench.tune.render import print_terminal, write_all

    plan.out.mkdir(parents=True, exist_ok=True)
    err = make_console(stderr=True)
    started = time.monotonic()
    # The first Ctrl-C (or SIGTERM) ends the search after the trial under way, so no
    # trial is cut in half in the database; a second one aborts at once.
    stop = StopOnSignals(lambda text: err.print(text, markup=False), dropped="trial")
    kept = (
        f"mallocbench: every finished trial is kept in {plan.out / 'tune.db'}: "
        "the same command with --resume continues"
    )
    try:
        with (
            stop,
            SearchProgress(err, plan.objectives, plan.constraints, plan.spaces, plan.trials) as bar,
        ):
            studies = driver.run_searches(plan, evaluator, bar, stop.requested)
    except KeyboardInterrupt:
        click.echo(kept, err=True)
        raise
    if stop.signal is not None:
        click.echo(kept, err=True)
        sys.exit(exitcodes.interrupted(stop.signal))
    limit = driver.front_limit(plan, time.monotonic() - started, driver.mean_trial_s(studies))
    with err.status("re-measuring the front") as status:
        results = driver.judge_all(
            plan, studies, evaluator, limit, lambda text: status.update(f"re-measuring {text}")
        )
    doc = driver.document(plan, results, time.monotonic() - started)
    paths = write_all(doc, plan.out)
    if as_json:
        click.echo(json.dumps(doc, indent=1))
        return
    console = make_console()
    print_terminal(doc, console)
    console.print("wrote " + ", ".join(str(p) for p in paths.values()), markup=False)


commands = [tune]
