"""One tune from checked input to the document: search, repeats, judgement, choices.

Everything the user gave is checked in `prepare` before the first trial (objectives,
constraints, allocators, search spaces, the trace, the output directory), so a typo never
costs a half-finished search.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mallocbench import allocators
from mallocbench.allocators.base import Allocator
from mallocbench.errors import MallocbenchError
from mallocbench.tune import confirm, front, search
from mallocbench.tune.evaluate import Evaluator
from mallocbench.tune.objectives import Constraint, Metric
from mallocbench.tune.result import (
    AllocatorTune,
    BudgetOverrun,
    ChoiceRule,
    Confirm,
    Deployed,
    MeasuredBy,
    NothingToConfirm,
    Objective,
    Point,
    Searched,
    TuneDocument,
    TuneNote,
)
from mallocbench.tune.space import Dimension, build_space, parse_space_options
from mallocbench.tune.workload import Workload, generic_lines, setup_lines, toml_lines

# Of a --budget, the share the search gets; the rest is for re-measuring the front: with
# 5 repeats, two fifths leave room for the default and about three front points.
SEARCH_SHARE = 0.6
MAX_FRONT = 8  # front points re-measured at most, beside the default
# Front points re-measured at least, beside the default, whatever the budget: the two
# ends and the knee, without which the choice could only be the lowest-RSS end.
MIN_FRONT = 3


@dataclass
class Plan:
    """A checked tune: nothing in it can be refused once trials start."""

    trace: str
    evaluator_name: str
    objectives: list[Metric]
    constraints: list[Constraint]
    spaces: dict[str, list[Dimension]]
    tuned: list[Allocator]
    out: Path
    resume: bool
    trials: int | None
    budget_s: float | None
    repeats: int
    min_effect: float
    seed: int | None = None
    engine: str = "innodb"
    evaluation: dict[str, Any] = field(default_factory=dict)  # how a setting is measured
    # What was tuned (the experiment's, or the one the trace was recorded under); None:
    # unknown, and the confirmation's workload is generic.
    workload: Workload | None = None
    # The memory-first choice's explicit options: a bound on the CPU ratio to the
    # default, and the lowest RSS whatever its CPU (never the default).
    max_cpu: float | None = None
    memory_at_any_cost: bool = False
    # The deploy form printed (launch.FORMS) and why that one; the JSON holds them all.
    deploy_form: str = "systemd"
    deploy_form_why: str = ""
    deploy_service: str = "mariadb"  # the recorded server's unit, when it has one
    # The time a confirmation derived from the recorded load is planned to fit.
    confirm_s: float = confirm.DEFAULT_BUDGET_S


def check_allocators(names: str) -> list[Allocator]:
    specs = allocators.split_list(names)
    if not specs:
        raise MallocbenchError("--allocators is empty: give e.g. glibc,jemalloc")
    out: list[Allocator] = []
    for spec in specs:
        head, _, knobs = spec.partition(":")
        if "=" in knobs and not allocators.is_custom_spec(head):
            raise MallocbenchError(
                f"--allocators {spec!r}: the search sets each allocator's knobs itself: "
                f"give the allocator alone ({head.strip()})"
            )
        allocator = allocators.get(spec)
        if not allocator.available:
            raise MallocbenchError(
                f"allocator {allocator.name} is not installed here: {allocator.install_hint()}"
            )
        if any(a.name == allocator.name for a in out):
            raise MallocbenchError(f"--allocators names {allocator.name} twice: once each")
        out.append(allocator)
    return out


def check_out(out: Path, resume: bool) -> None:
    """A resume needs a tune in OUT, a new tune an OUT without one. An allocator that
    has no study yet (Ctrl-C came before its turn) starts one on a resume."""
    studies = search.existing_studies(out)
    if studies and not resume:
        raise MallocbenchError(
            f"{out} already holds a tune ({out / search.DB_NAME}): give --resume to continue "
            "it, or another --out"
        )
    if resume and not studies:
        raise MallocbenchError(f"--resume: {out} holds no tune to continue: leave --resume out")


def spaces_for(tuned: Sequence[Allocator], specs: Sequence[str]) -> dict[str, list[Dimension]]:
    given = parse_space_options(specs, [a.name for a in tuned])
    return {a.name: build_space(a, given.get(a.name, [])) for a in tuned}


def _stop(
    plan: Plan, started: float, index: int, done: int, requested: Callable[[], bool] | None
) -> search.Stop:
    """The study's share of the budget: what is left, split over the allocators left."""
    deadline = None
    if plan.budget_s is not None:
        left = plan.budget_s * SEARCH_SHARE - (time.monotonic() - started)
        deadline = time.monotonic() + max(0.0, left) / (len(plan.tuned) - index)
    target = None if plan.trials is None else done + plan.trials
    if plan.resume and plan.trials is not None:
        target = max(plan.trials, done)  # a resume fills the study up to --trials
    return search.Stop(target, deadline, requested)


def run_searches(
    plan: Plan,
    evaluator: Evaluator,
    progress: Callable[[str, Any, Any], None] | None = None,
    requested: Callable[[], bool] | None = None,
) -> dict[str, Any]:
    """Every allocator's study in turn, until done or a stop is `requested`; returns the
    studies by allocator name."""
    started = time.monotonic()
    studies = {}
    for index, allocator in enumerate(plan.tuned):
        if requested is not None and requested():
            break
        space = plan.spaces[allocator.name]
        settings = search.settings_for(
            plan.trace, plan.evaluator_name, plan.objectives, plan.constraints, space,
            replayed=plan.evaluation.get("method") == "replay",
        )  # fmt: skip
        study = search.open_study(
            plan.out, allocator.name, plan.objectives, plan.constraints, settings, plan.seed
        )
        stop = _stop(plan, started, index, len(search.finished_trials(study)), requested)
        report = functools.partial(progress, allocator.name) if progress else None
        search.search(
            study, allocator, space, plan.objectives, evaluator, stop, report, plan.constraints
        )
        studies[allocator.name] = study
    return studies


def mean_trial_s(studies: dict[str, Any]) -> float:
    durations = [
        (t.datetime_complete - t.datetime_start).total_seconds()
        for s in studies.values()
        for t in search.finished_trials(s)
        if t.datetime_complete and t.datetime_start
    ]
    return sum(durations) / len(durations) if durations else 1.0


def front_limit(plan: Plan, spent_s: float, mean_trial_s: float) -> int:
    """How many front points each allocator can have re-measured within the budget."""
    if plan.budget_s is None:
        return MAX_FRONT
    left = max(0.0, plan.budget_s - spent_s)
    per_allocator = left / len(plan.tuned) / max(mean_trial_s, 1e-3) / plan.repeats
    # Never fewer than the front's ends and knee: a choice among fewer is no choice, so
    # a slow host overruns the budget instead (and the notes say so).
    return max(MIN_FRONT, min(MAX_FRONT, int(per_allocator) - 1))


def judge_all(
    plan: Plan,
    studies: dict[str, Any],
    evaluator: Evaluator,
    limit: int,
    progress: Callable[[str], None] | None = None,
) -> list[AllocatorTune]:
    results = []
    for allocator in plan.tuned:
        space = plan.spaces[allocator.name]
        observed = search.observed(studies[allocator.name], space, plan.constraints)
        chosen = front.candidates(observed, plan.objectives, limit)
        points = front.measure(allocator, chosen, evaluator, plan.repeats, progress)
        front.judge(points, plan.objectives, plan.constraints, plan.min_effect)
        picks = front.choose(points, plan.objectives, plan.max_cpu, plan.memory_at_any_cost)
        results.append(
            result_for(plan, allocator, studies[allocator.name], observed, points, picks)
        )
    return results


def result_for(
    plan: Plan,
    allocator: Allocator,
    study: Any,
    observed: Sequence[search.Observed],
    points: Sequence[Point],
    picks: dict[str, Point | None],
) -> AllocatorTune:
    from mallocbench.allocators import knobs

    keys = {m.key for m in plan.objectives} | {c.metric.key for c in plan.constraints}
    trials = search.finished_trials(study)
    deploy = {
        priority: deploy_for(
            allocator, point, knobs.environment(allocator, point.setting), plan.deploy_service
        )
        for priority, point in picks.items()
        if point is not None
    }
    return AllocatorTune(
        allocator=allocator.name,
        version=allocator.version,
        library=allocator.path,
        space=[d.describe() for d in plan.spaces[allocator.name]],
        trials=len(trials),
        failed_trials=len(trials) - len(observed),
        searched=[
            Searched(
                o.number,
                o.default,
                o.setting,
                {k: v for k, v in o.metrics.items() if k in keys},
                o.feasible,
            )
            for o in observed
        ],
        points=list(points),
        chosen={k: (p.label if p else None) for k, p in picks.items()},
        beats_default=any(p.beats_default and p.on_front for p in points),
        deploy=deploy,
    )


def deploy_for(
    allocator: Allocator, point: Point, env: dict[str, str], service: str = "mariadb"
) -> Deployed:
    """The chosen setting's environment and its text in every form, through deploy.py."""
    from mallocbench.deploy import deployment
    from mallocbench.deploy import forms as deploy
    from mallocbench.model.results import SetupInfo

    setup = SetupInfo(
        name=f"{allocator.name}-tuned-{point.label.lstrip('#')}",
        allocator=allocator.name,
        allocator_version=allocator.version,
        allocator_library=allocator.path,
        knobs=env,
    )
    d = deploy.deployment_for(setup, service)
    return Deployed(
        point=point.label,
        environment=d.environment,
        systemd=d.snippets["systemd"].text,
        dropin=f"{deployment.SYSTEMD_DIR}/{d.dropin_relpath}",
        forms={form: deploy.render_form(d, form) for form in deployment.FORM_SNIPPETS},
    )


def confirmation_toml(plan: Plan, results: Sequence[AllocatorTune]) -> str | None:
    """An experiment for `mallocbench run` that confirms the chosen settings on real
    private servers against each allocator's default, on the workload that was tuned
    when it is known (None: nothing was chosen)."""
    setups: list[tuple[str, str, dict[str, str]]] = []
    for result in results:
        if not result.deploy:
            continue
        setups.append((result.allocator, result.allocator, {}))
        seen: set[str] = set()
        for priority, d in result.deploy.items():
            env = {k: v for k, v in d.environment.items() if k != "LD_PRELOAD"}
            if d.point in seen:
                continue
            seen.add(d.point)
            setups.append((f"{result.allocator}-{priority}", result.allocator, env))
    if not setups:
        return None
    lines = [
        "# Written by `mallocbench tune`: the settings it chose, against each allocator's",
        "# default, on real private servers; compare each tuned setup to its allocator's",
        "# default.",
        'name = "tune-confirm"',
        f"base = {json.dumps(setups[0][0])}",
        f'min_effect = "{plan.min_effect * 100:g}%"',
    ]
    known = plan.workload
    derived = None if known else confirm.for_trace(plan.trace, len(setups), plan.confirm_s)[0]
    if known is not None:
        lines += toml_lines(known)
    else:
        lines += derived.lines() if derived is not None else generic_lines(plan.engine)
    fields = known.setup_fields if known else {}
    for name, allocator, env in setups:
        lines += setup_lines(name, allocator, env, fields)
    return "\n".join(lines) + "\n"


def document(
    plan: Plan, results: list[AllocatorTune], elapsed_s: float | None = None
) -> TuneDocument:
    """The tune every output is rendered from; writes confirm.toml to OUT."""
    notes: list[TuneNote] = []
    if plan.budget_s is not None and elapsed_s is not None and elapsed_s > plan.budget_s * 1.05:
        notes.append(BudgetOverrun(elapsed_s, plan.budget_s, repeats_share()))
    if any(label for r in results for label in r.chosen.values()):
        notes.append(ChoiceRule(plan.memory_at_any_cost, plan.max_cpu))
    notes.append(MeasuredBy(plan.evaluator_name, plan.evaluation.get("method") == "servers"))
    toml = confirmation_toml(plan, results)
    if toml is None:
        notes.append(NothingToConfirm())
    else:
        path = plan.out / "confirm.toml"
        path.write_text(toml)
        known = plan.workload
        derived = (
            () if known else tuple(confirm.workload_notes(plan.trace, toml, path, plan.confirm_s))
        )
        notes.append(
            Confirm(
                str(path),
                str(plan.out / "confirm"),
                known.describe() if known else None,
                known.source if known else None,
                derived,
                known is None and confirm.DERIVED in toml,
            )
        )
    return TuneDocument(
        trace=plan.trace,
        evaluator=plan.evaluator_name,
        evaluation=plan.evaluation,
        workload=plan.workload.to_dict() if plan.workload else None,
        objectives=[Objective(m.name, m.key, m.unit, m.direction) for m in plan.objectives],
        constraints=[c.text for c in plan.constraints],
        min_effect=plan.min_effect,
        max_cpu=plan.max_cpu,
        memory_at_any_cost=plan.memory_at_any_cost,
        deploy_form=plan.deploy_form,
        deploy_form_why=plan.deploy_form_why,
        repeats=plan.repeats,
        out=str(plan.out),
        allocators=results,
        notes=notes,
    )


def repeats_share() -> str:
    """The budget's share left for the repeats, as --help words it (2/5)."""
    from fractions import Fraction

    share = Fraction(1 - SEARCH_SHARE).limit_denominator(10)
    return f"{share.numerator}/{share.denominator}"
