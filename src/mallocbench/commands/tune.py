"""`mallocbench tune`: search allocator knobs for the RSS-against-time front, on a trace
(replays, seconds per trial) or an experiment (short runs on private servers)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from mallocbench.commands.options import (
    confirm_time_option,
    min_effect_option,
    timing_options,
)
from mallocbench.deploy.launch import FORMS, form_for
from mallocbench.errors import MallocbenchError

if TYPE_CHECKING:
    from mallocbench.replay.trace import TraceInfo
    from mallocbench.tune.driver import Plan
    from mallocbench.tune.evaluate import ReplayEvaluator, ServerEvaluator
    from mallocbench.tune.objectives import Metric
    from mallocbench.tune.workload import Workload

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
@click.argument("trace", metavar="TRACE|EXPERIMENT", type=click.Path(path_type=Path))
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
    help="What to optimise. On a trace: rss, rss_over_live, time (CPU), wall (lower is "
    "better), calls_per_s. On servers: rss (peak), time (server CPU per operation), qps, p99.",
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
    help="Measurements of each front point and the default, for the intervals.",
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
    help="How a setting is measured: replay (of a TRACE, seconds a trial) or servers (a "
    "short run of the EXPERIMENT's one engine, step and thread count on a private server, "
    "a server start a trial). Default: by the argument.",
)
@click.option(
    "--workload",
    "workload_file",
    type=click.Path(dir_okay=False, path_type=Path),
    metavar="EXPERIMENT.toml",
    help="For a TRACE: the experiment whose load it recorded (one engine, step, thread "
    "count); confirm.toml runs it. Found without it for a trace a run recorded.",
)
@click.option(
    "--engine",
    help="Engine of the confirmation's generic workload (default innodb), when the "
    "trace's is not known.",
)
@click.option(
    "--max-cpu",
    type=click.FloatRange(min=0, min_open=True),
    metavar="RATIO",
    help="Memory first only among settings whose CPU (the time objective) is at most "
    "RATIO times the default's, e.g. 1.10.",
)
@click.option(
    "--memory-at-any-cost",
    is_flag=True,
    help="Memory first is the lowest RSS whatever its CPU. Default: the cheapest in CPU "
    "among the settings within the lowest RSS's noise.",
)
@click.option(
    "--form",
    type=click.Choice(FORMS),
    help="How the chosen settings are printed for deploying: systemd drop-in, mysqld_safe "
    "malloc-lib, plain environment, Docker Compose, Kubernetes (default: how the server the "
    "trace was recorded from runs, if it still runs here; else systemd). tune.md and the "
    "JSON hold every form.",
)
@confirm_time_option
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
    evaluator_name: str | None,
    workload_file: Path | None,
    engine: str | None,
    max_cpu: float | None,
    memory_at_any_cost: bool,
    form: str | None,
    confirm_s: float,
    seed: int | None,
    as_json: bool,
) -> None:
    """Search allocator knobs for the RSS-versus-time front, with intervals.

    \b
    TRACE (.mbt): each setting is a replay of the trace under the allocator (seconds).
    EXPERIMENT (.toml, or --on servers): each setting is a short run of the experiment's
    one engine, step and thread count on a private server started under it, as
    `mallocbench run` starts them (the dataset loaded once; a trial is a server start,
    the warmup and the measured seconds), the front's repeats in blocks of servers up
    at once.

    One Optuna study per allocator (kept in OUT/tune.db; Ctrl-C keeps every finished
    trial, --resume continues), the default setting first. The front is then measured
    --repeats times per point, and a setting is chosen (memory first, speed first) only
    when it beats the default as a finding; how to deploy it is printed (--form), and
    OUT/confirm.toml runs it against the default on servers."""
    from mallocbench.tune import objectives as objmod
    from mallocbench.tune.driver import Plan, check_allocators, check_out, spaces_for
    from mallocbench.tune.search import guarded

    on = _method(trace, evaluator_name)
    if on == objmod.SERVERS:
        _refuse_replay_options(portion_s, workload_file, engine)
    metrics = objmod.parse_objectives(objectives, on)
    _check_memory_options(metrics, max_cpu, memory_at_any_cost)
    constraints = objmod.parse_constraints(constraint_list, on)
    tuned = check_allocators(allocator_list)
    spaces = spaces_for(tuned, space_list)
    evaluator: ReplayEvaluator | ServerEvaluator
    header: dict[str, str] | None = None
    if on == objmod.SERVERS:
        evaluator = _server_evaluator(trace, out_dir)
        known: Workload | None = evaluator.workload
    else:
        known = _trace_workload(trace, workload_file, engine)  # before the trace's long read
        _refuse_confirm_time(known)
        info = _check_trace(trace)
        header = info.header
        evaluator = _evaluator(
            trace, info, timing, speed, portion_s, budget, len(tuned), trials or DEFAULT_TRIALS
        )
    with guarded(out_dir):
        check_out(out_dir, resume)
    plan = Plan(
        trace=str(trace.resolve()), evaluator_name=evaluator.describe(),
        objectives=metrics, constraints=constraints, spaces=spaces, tuned=tuned, out=out_dir,
        resume=resume, trials=trials or (None if budget else DEFAULT_TRIALS), budget_s=budget,
        repeats=repeats, min_effect=0.02 if min_effect is None else min_effect, seed=seed,
        engine=known.engine if known else engine or "innodb", evaluation=evaluator.facts(),
        workload=known, max_cpu=max_cpu, memory_at_any_cost=memory_at_any_cost,
        confirm_s=confirm_s,
    )  # fmt: skip
    plan.deploy_form, plan.deploy_form_why, plan.deploy_service = form_for(form, header)
    with guarded(out_dir):
        _run(plan, evaluator, as_json)


def _check_memory_options(
    metrics: list[Metric], max_cpu: float | None, memory_at_any_cost: bool
) -> None:
    """--max-cpu bounds the time objective's ratio and the two contradict each other:
    one line each, before any trial."""
    if max_cpu is not None and memory_at_any_cost:
        raise MallocbenchError(
            "--max-cpu bounds the CPU that --memory-at-any-cost ignores: give one of them"
        )
    names = [m.name for m in metrics]
    if max_cpu is not None and "time" not in names:
        raise MallocbenchError(
            f"--max-cpu bounds the time objective, which --objectives {','.join(names)} "
            "leaves out: add time to --objectives"
        )


def _method(target: Path, evaluator_name: str | None) -> str:
    """servers for an experiment, replay for a trace; --on must agree with the argument."""
    from mallocbench.tune.objectives import REPLAY, SERVERS

    experiment = target.suffix.lower() == ".toml"
    if evaluator_name == SERVERS and not experiment:
        raise MallocbenchError(
            f"--on servers measures an experiment, and {target} is not one (.toml): give "
            "the experiment of the workload to tune, or leave --on out to replay the trace"
        )
    if evaluator_name == REPLAY and experiment:
        raise MallocbenchError(
            f"--on replay replays a trace, and {target} is an experiment: leave --on out to "
            "tune it on servers, or give a trace (.mbt) recorded from it (record = true)"
        )
    return SERVERS if experiment else REPLAY


def _refuse_replay_options(
    portion_s: float | None, workload_file: Path | None, engine: str | None
) -> None:
    """Options of a trace's tune given with an experiment: one line, not ignored."""
    ctx = click.get_current_context()
    replay_only = [
        name
        for name, given in (
            ("--timing", _given(ctx, "timing")),
            ("--speed", _given(ctx, "speed")),
            ("--portion", portion_s is not None),
            ("--workload", workload_file is not None),
            ("--engine", engine is not None),
            ("--confirm-time", _given(ctx, "confirm_s")),
        )
        if given
    ]
    if replay_only:
        verb = "is" if len(replay_only) == 1 else "are"
        raise MallocbenchError(
            f"{', '.join(replay_only)} {verb} for a trace: on servers the experiment says "
            "the engine, step, dataset and durations; leave it out"
        )


def _refuse_confirm_time(known: Workload | None) -> None:
    """--confirm-time fits a confirmation derived from a recorded load; the tuned
    workload's confirmation runs that experiment as it is: one line, not ignored."""
    if known is not None and _given(click.get_current_context(), "confirm_s"):
        raise MallocbenchError(
            f"--confirm-time fits the confirmation derived from what a `record --pid` "
            f"server said of its load; this tune's runs the tuned workload as it is "
            f"({known.source}): leave --confirm-time out"
        )


def _given(ctx: click.Context, name: str) -> bool:
    source = ctx.get_parameter_source(name)
    return source is not None and source != click.core.ParameterSource.DEFAULT


def _server_evaluator(target: Path, out_dir: Path) -> ServerEvaluator:
    from mallocbench.run import loading as loading_mod
    from mallocbench.tune.evaluate import ServerEvaluator

    evaluator = ServerEvaluator(loading_mod.load(target), out_dir)
    evaluator.check()
    return evaluator


def _trace_workload(trace: Path, workload_file: Path | None, engine: str | None) -> Workload | None:
    """What the trace was recorded under: --workload's experiment, else what the run
    that recorded it stored; None: unknown (the confirmation's workload is generic)."""
    from mallocbench.run import loading as loading_mod
    from mallocbench.tune import workload

    if workload_file is None:
        return workload.of_trace(trace)
    if engine is not None:
        raise MallocbenchError(
            "--engine sets the generic workload's engine; with --workload its experiment "
            "says the engine: leave --engine out"
        )
    return workload.from_experiment(loading_mod.load(workload_file), str(workload_file))


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


def _run(plan: Plan, evaluator: ReplayEvaluator | ServerEvaluator, as_json: bool) -> None:
    import sys
    import time

    from mallocbench import exitcodes
    from mallocbench.commands.options import StopOnSignals
    from mallocbench.commands.output import emit, say
    from mallocbench.console import make_console
    from mallocbench.report import formats
    from mallocbench.report.runs import TRIAL
    from mallocbench.report.tune import REMEASURING_FRONT, remeasuring_text, write_tune_reports
    from mallocbench.tune import driver
    from mallocbench.tune.progress import SearchProgress

    plan.out.mkdir(parents=True, exist_ok=True)
    err = make_console(stderr=True)
    from mallocbench.tune.evaluate import ServerEvaluator

    if isinstance(evaluator, ServerEvaluator):  # a first dataset load is worth a line
        evaluator.say = lambda text: say(formats.PLAIN, text, console=err)
    started = time.monotonic()
    # The first Ctrl-C (or SIGTERM) ends the search after the trial under way, so no
    # trial is cut in half in the database; a second one aborts at once. A Ctrl-C at a
    # terminal stops the trial's replayer too: that trial is measured again on --resume.
    stop = StopOnSignals(err, under_way=TRIAL, plain=True)
    try:
        with (
            stop,
            SearchProgress(err, plan.objectives, plan.constraints, plan.spaces, plan.trials) as bar,
        ):
            studies = driver.run_searches(plan, evaluator, bar, stop.requested)
    except KeyboardInterrupt:
        say(formats.TUNE_KEPT, plan.out / "tune.db", err=True)
        raise
    if stop.signal is not None:
        say(formats.TUNE_KEPT, plan.out / "tune.db", err=True)
        sys.exit(exitcodes.interrupted(stop.signal))
    limit = driver.front_limit(plan, time.monotonic() - started, driver.mean_trial_s(studies))
    with err.status(REMEASURING_FRONT) as status:
        results = driver.judge_all(
            plan, studies, evaluator, limit, lambda text: status.update(remeasuring_text(text))
        )
    doc = driver.document(plan, results, time.monotonic() - started)
    paths = write_tune_reports(doc, plan.out)
    emit(formats.TUNE, "json" if as_json else formats.TERMINAL, doc)
    if not as_json:
        say(formats.TUNE_WROTE, list(paths.values()))


commands = [tune]
