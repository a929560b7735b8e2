"""`mallocbench advise TRACE`: from a recorded trace to one decision within one budget.

The stages are tune's search and front (tune/driver.py), a replay of the finalists
(replay/run.py) and recommend's rule on it (analysis/recommend.py); tune/advise.py joins
them, report/advise.py words them.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from mallocbench.commands.options import confirm_time_option, min_effect_option, timing_options
from mallocbench.commands.output import say
from mallocbench.errors import MallocbenchError

if TYPE_CHECKING:
    from rich.console import Console

    from mallocbench.deploy.deployment import Deployment
    from mallocbench.model.results import RunResult
    from mallocbench.tune.advise import AdvicePlan, AdviceRun, Finalist
    from mallocbench.tune.evaluate import ReplayEvaluator
    from mallocbench.tune.result import AllocatorTune

ADVISE_HELP = """Decide which allocator and knobs to run from a recorded trace, within one budget.

\b
Replays the trace under each allocator's default (glibc, jemalloc, tcmalloc, mimalloc
where installed), searches each allocator's knobs as `tune` does (its noise-aware pick:
within the lowest RSS's noise, the cheapest in CPU), replays the finalists together
--repeats times, and decides with `recommend`'s rule: a setting is deployed only when
it is shown better on a priority by at least --min-effect and no worse than that on the
other; a loss is taken only within a budget you give (--max-loss, --memory-budget).
The last line is the answer: deploy SETTING or keep the default, why, its steady peak
RSS and CPU ratios to the default with 95% intervals, and what it saves of the
server's RSS (of the replayed heap for a trace recorded without it).

\b
Examples:
  mallocbench advise prod.mbt --budget 15m
  mallocbench advise prod.mbt --budget 15m --max-cpu 1.10 --json
  mallocbench advise prod.mbt --budget 1h --speed 2 --max-loss cpu=5% --out advise-out
"""


def _budget(_ctx: click.Context, _param: click.Parameter, value: str) -> float:
    from mallocbench.units import parse_duration

    return parse_duration(value, "--budget")


@click.command("advise", help=ADVISE_HELP)
@click.argument("trace", type=click.Path(path_type=Path))
@click.option(
    "--budget",
    callback=_budget,
    default="10m",
    show_default=True,
    metavar="DURATION",
    help="Wall-clock budget for everything, e.g. 15m: 7/10 for the search and each "
    "allocator's front, 3/10 for the finalists' replay.",
)
@click.option(
    "--allocators",
    "allocator_list",
    metavar="A,B,...",
    help="Allocators to search; the first one's default is the default kept. Default: "
    "glibc,jemalloc,tcmalloc,mimalloc, those installed.",
)
@click.option(
    "--repeats",
    type=click.IntRange(3, 100),
    default=3,
    show_default=True,
    help="Replays of each finalist, for the intervals.",
)
@click.option(
    "--priority",
    "priority_text",
    metavar="LIST",
    help="What matters, most important first: rss, cpu (default rss,cpu).",
)
@min_effect_option("Smallest change that counts, better or worse (default 2%).")
@click.option(
    "--max-cpu",
    type=click.FloatRange(min=0, min_open=True),
    metavar="RATIO",
    help="Only settings whose CPU is at most RATIO times the default's, e.g. 1.10.",
)
@click.option(
    "--memory-at-any-cost",
    is_flag=True,
    help="The lowest RSS whatever its CPU, its CPU loss taken. Default: a CPU loss beyond "
    "--min-effect is a trade-off you decide with --max-loss cpu=PCT.",
)
@click.option(
    "--memory-budget",
    "budget_text",
    metavar="SIZE",
    help="RAM the server may use (e.g. 8G): a setting whose predicted peak exceeds it is "
    "out, and a peak-RSS loss within it is taken.",
)
@click.option(
    "--max-loss",
    "max_loss_items",
    multiple=True,
    metavar="OBJECTIVE=PCT",
    help="A loss taken for a gain on a priority (rss or cpu), e.g. cpu=5%: every "
    "interval's bad end within it. Repeat for both.",
)
@timing_options
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("advise-out"),
    show_default=True,
    help="Directory for the search (search/tune.db), the finalists' replay (a run: "
    "`mallocbench report DIR`) and advise.json, advise.md.",
)
@confirm_time_option
@click.option("--seed", type=int, help="Seed of the search's sampler.")
@click.option("--json", "as_json", is_flag=True, help="Print the JSON document instead.")
def advise(
    trace: Path,
    budget: float,
    allocator_list: str | None,
    repeats: int,
    priority_text: str | None,
    min_effect: float | None,
    max_cpu: float | None,
    memory_at_any_cost: bool,
    budget_text: str | None,
    max_loss_items: tuple[str, ...],
    timing: str,
    speed: float,
    out_dir: Path,
    confirm_s: float,
    seed: int | None,
    as_json: bool,
) -> None:
    """`mallocbench advise` (ADVISE_HELP)."""
    from mallocbench.replay import trace as tracemod
    from mallocbench.tune import advise as advisemod

    rule = _rule(priority_text, budget_text, max_loss_items, max_cpu, memory_at_any_cost)
    tuned = advisemod.installed_allocators(allocator_list)
    _check_out(out_dir)
    info = tracemod.check(trace)
    from mallocbench.replay import runner

    runner.replay_timeout(float(info.data.get("duration_s") or 0), speed, timing)
    plan = advisemod.AdvicePlan(
        trace=trace, info=info, tuned=tuned, budget_s=budget, repeats=repeats,
        min_effect=0.02 if min_effect is None else min_effect, rule=rule, timing=timing,
        speed=speed, out=out_dir, max_cpu=max_cpu, memory_at_any_cost=memory_at_any_cost,
        seed=seed,
    )  # fmt: skip
    run = _advise(plan)
    _output(run, as_json, confirm_s)


def _rule(
    priority_text: str | None,
    budget_text: str | None,
    max_loss_items: tuple[str, ...],
    max_cpu: float | None,
    memory_at_any_cost: bool,
) -> Any:
    """recommend's rule from the options, checked before any replay."""
    from mallocbench.analysis import criteria
    from mallocbench.analysis import recommend as rec
    from mallocbench.units import parse_size

    if max_cpu is not None and memory_at_any_cost:
        raise MallocbenchError(
            "--max-cpu bounds the CPU that --memory-at-any-cost ignores: give one of them"
        )
    priorities = (
        criteria.parse_priorities(priority_text) if priority_text else criteria.REPLAY_PRIORITIES
    )
    rec.check_replay_priorities(priorities)
    max_loss = criteria.parse_max_loss(max_loss_items)
    rec.check_replay_priorities(tuple(max_loss), "--max-loss")
    if memory_at_any_cost:
        if criteria.CPU in max_loss:
            raise MallocbenchError(
                "--max-loss cpu bounds the CPU that --memory-at-any-cost ignores: give one"
            )
        max_loss[criteria.CPU] = float("inf")
    memory = parse_size(budget_text, "--memory-budget") if budget_text else None
    return criteria.DecisionRule(priorities, memory, max_loss)


def _check_out(out_dir: Path) -> None:
    """A new advise needs an OUT without one, finished or not (there is no resume)."""
    from mallocbench.tune import search
    from mallocbench.tune.advise import SEARCH_DIR

    if (out_dir / "advise.json").exists():
        raise MallocbenchError(f"{out_dir} already holds an advise: give another --out")
    if (out_dir / SEARCH_DIR / search.DB_NAME).exists():
        raise MallocbenchError(
            f"{out_dir} holds an advise that did not finish ({out_dir / SEARCH_DIR}): give "
            "another --out, or remove that directory"
        )


def _advise(plan: AdvicePlan) -> AdviceRun:
    from mallocbench.console import make_console
    from mallocbench.report import formats
    from mallocbench.report.advise import Overrun
    from mallocbench.tune import advise as advisemod
    from mallocbench.tune.advise import TUNE_SHARE
    from mallocbench.tune.driver import SEARCH_SHARE

    err = make_console(stderr=True)
    started = time.monotonic()
    evaluator = plan.evaluator()
    least = plan.least_s(evaluator.portion_s)
    share = plan.budget_s * (1 - TUNE_SHARE * SEARCH_SHARE)
    if least is not None and least > share:
        # Said before the search, not only after an overrun: the user may rather stop.
        replay_s = plan.replay_s(evaluator.portion_s)
        overrun = Overrun(len(plan.tuned), replay_s, least, share, plan.budget_s)
        say(formats.ADVISE_OVERRUN, overrun, console=err)
    plan.out.mkdir(parents=True, exist_ok=True)
    searched = _search(plan, evaluator, err)
    chosen = advisemod.finalists(searched)
    result = _replay_finalists(plan, chosen, evaluator, err)
    return advisemod.finish(
        plan, evaluator.facts(), searched, chosen, result, started, evaluator.portion_s
    )


def _search(plan: AdvicePlan, evaluator: ReplayEvaluator, err: Console) -> list[AllocatorTune]:
    """tune's search per allocator, then its front re-measured and picked from."""
    from mallocbench import exitcodes
    from mallocbench.commands.options import StopOnSignals
    from mallocbench.report import formats
    from mallocbench.report.advise import CUT_SHORT, REMEASURING, remeasuring_text
    from mallocbench.report.runs import NO_DECISION
    from mallocbench.tune import driver
    from mallocbench.tune.progress import SearchProgress
    from mallocbench.tune.search import guarded

    tune = plan.tune_plan(evaluator)
    tune.out.mkdir(parents=True, exist_ok=True)
    began = time.monotonic()
    stop = StopOnSignals(err, under_way=NO_DECISION, plain=True)
    with guarded(tune.out):
        progress = SearchProgress(err, tune.objectives, [], tune.spaces, None, CUT_SHORT)
        with stop, progress as bar:
            studies = driver.run_searches(tune, evaluator, bar, stop.requested)
        if stop.signal is not None:
            say(formats.ADVISE_STOPPED, None, err=True)
            sys.exit(exitcodes.interrupted(stop.signal))
        limit = driver.front_limit(tune, time.monotonic() - began, driver.mean_trial_s(studies))
        with err.status(REMEASURING) as status:

            def said(text: str) -> None:
                status.update(remeasuring_text(text))
                if not err.is_terminal:  # a log gets a line per replay, not silence
                    say(formats.ADVISE_REMEASURING, text, console=err)

            return driver.judge_all(tune, studies, evaluator, limit, said)


def _replay_finalists(
    plan: AdvicePlan, chosen: list[Finalist], evaluator: ReplayEvaluator, err: Console
) -> RunResult:
    """The finalists replayed together, interleaved, as a replay run kept in OUT."""
    from mallocbench.commands.progress import ReplayProgress
    from mallocbench.replay import run as replay_runs
    from mallocbench.report.advise import FINALISTS
    from mallocbench.store import open_store
    from mallocbench.store.base import STORE_NAME

    setups = [f.setup() for f in chosen]
    warnings = plan.info.warnings()
    if evaluator.portion_s is not None:
        warnings.append(f"advise replayed the trace's first {evaluator.portion_s:g} s only")
    result = replay_runs.new_result(
        plan.info, setups, plan.timing, plan.speed, plan.repeats, plan.min_effect, warnings
    )
    store = open_store(plan.out / STORE_NAME)
    try:
        with ReplayProgress(err, len(setups) * plan.repeats) as progress:
            progress.status(FINALISTS)
            replay_runs.replay_run(
                result, setups, plan.trace, store, progress.started, progress.finished,
                until=evaluator.portion_s,
            )  # fmt: skip
    finally:
        store.close()
    return result


def _deployment(run: AdviceRun) -> Deployment | None:
    from mallocbench.deploy import forms as deploy

    d = run.decision
    if d is None or not d.deploy:
        return None
    setup = next(s for s in run.result.setups if s.name == d.setup)
    return deploy.deployment_for(setup)


def _output(run: AdviceRun, as_json: bool, confirm_s: float) -> None:
    from mallocbench.analysis.run_analysis import analyze
    from mallocbench.files import write_text_atomic
    from mallocbench.report import formats
    from mallocbench.report.advise import Advised, advice_json, advice_markdown, confirmation_notes
    from mallocbench.report.runs import Wrote
    from mallocbench.tune.advise_confirm import for_advice

    deployment = _deployment(run)
    out = run.plan.out
    confirmation = for_advice(run, confirm_s)
    written = formats.write_reports(analyze(run.result), out)
    write_text_atomic(out / "advise.json", advice_json(run, deployment, confirmation) + "\n")
    write_text_atomic(out / "advise.md", advice_markdown(run, deployment, confirmation) + "\n")
    names = [p.name for p in [*written, out / "advise.json", out / "advise.md"]]
    say(formats.WROTE, Wrote(names, out, confirmation_notes(confirmation)), err=True)
    advised = Advised(run, deployment, confirmation)
    say(formats.ADVISE, advised, fmt="json" if as_json else None)


commands = [advise]
