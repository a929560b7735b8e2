"""Execute a pattern experiment: check every case, run the plan, store each result."""

from __future__ import annotations

import json
import os
import platform
import secrets
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from mallocbench import allocators
from mallocbench.allocators.base import glibc_version
from mallocbench.console import make_console
from mallocbench.errors import MallocbenchError
from mallocbench.model.patterns import (
    METRICS,
    PatternKey,
    PatternResult,
    PatternRun,
    PatternRunMetadata,
    RunModel,
)
from mallocbench.patterns.driver import DriverRun, binary_path, driver_args, run_driver
from mallocbench.patterns.experiment import PatternExperiment, PlannedRun
from mallocbench.store import ResultsStore, is_url, load_pattern_run, open_store, store_label


def new_run_id() -> str:
    return time.strftime("p%Y%m%d-%H%M%S-") + secrets.token_hex(2)


def metadata(binary: Path) -> PatternRunMetadata:
    return PatternRunMetadata(
        host=platform.node(),
        cpus=os.cpu_count(),
        kernel=platform.release(),
        glibc=glibc_version(),
        python=platform.python_version(),
        driver=str(binary),
        command=list(sys.argv),
        started=time.strftime("%Y-%m-%d %H:%M:%S %z"),
    )


def precheck(experiment: PatternExperiment, binary: Path) -> None:
    """Run each distinct case/option combination once, for one operation, so a bad value
    fails in a second with the key named, not halfway through the experiment."""
    glibc = allocators.get("glibc")
    seen: set[tuple[str, tuple[tuple[str, str], ...]]] = set()
    for run in experiment.plan():
        options = run.options()
        key = (run.case.pattern, tuple(sorted((k, str(v)) for k, v in options.items())))
        if key in seen:
            continue
        seen.add(key)
        args = driver_args(run.case.pattern, options, 1, None, 1, run.case.seed)
        try:
            run_driver(glibc, {}, args, timeout=120, binary=binary, verify=False)
        except MallocbenchError as exc:
            where = f"case {run.case.name!r}"
            if run.setup.options:
                where += f" with setup {run.setup.name!r}"
            raise MallocbenchError(f"{where}: {exc}") from None


def result_record(planned: PlannedRun, outcome: DriverRun) -> PatternResult:
    """The stored result of one driver run in the cell `planned`."""
    data = outcome.data
    return PatternResult(
        case=planned.case.name,
        pattern=planned.case.pattern,
        setup=planned.setup.name,
        threads=planned.threads,
        repeat=planned.repeat,
        status=outcome.status,
        error=outcome.error,
        allocator=planned.setup.allocator.name,
        allocator_library=data.get("malloc_library"),
        knobs=dict(planned.setup.knobs),
        options=planned.options(),
        command=outcome.command,
        finished_at=time.time(),
        driver=data,
        # the driver's numbers lifted to the top, None where it gave none (or crashed)
        **{m: data.get(m) for m in METRICS},
    )


def resume_point(experiment: PatternExperiment, target: str | Path) -> tuple[str, set[PatternKey]]:
    """The run to continue (the latest of the same experiment) and its finished cells."""
    label = store_label(target)
    if not is_url(target) and not Path(target).is_file():
        raise MallocbenchError(
            f"nothing to resume: no results store at {label}; run without --resume"
        )
    store = open_store(target)
    try:
        run_id = store.latest_pattern_run(experiment.name)
        if run_id is None:
            raise MallocbenchError(
                f"nothing to resume: {label} has no run of experiment "
                f"{experiment.name!r}; run without --resume"
            )
        model = store.load_pattern_run(run_id).model
        # Compared as stored (JSON), so a tuple here and a list there are the same.
        current = json.loads(json.dumps(experiment.to_dict()))
        stored = model.to_dict()
        changed = [k for k in current if stored.get(k) != current[k]]
        if changed:
            raise MallocbenchError(
                f"cannot resume {run_id}: the experiment's {', '.join(changed)} changed "
                "since; run without --resume to start a new run"
            )
        return run_id, store.finished_pattern_keys(run_id)
    finally:
        store.close()


def execute(
    experiment: PatternExperiment,
    target: str | Path,
    console: Console | None = None,
    resume: bool = False,
) -> PatternRun:
    """Run every planned cell (with `resume`, those the latest run of the same experiment
    has not finished) into the store at `target` (a file or a PostgreSQL URL) and return
    the stored run (model, metadata, results)."""
    console = console or make_console(stderr=True)
    binary = binary_path()
    precheck(experiment, binary)
    plan = experiment.plan()
    run_id = resume_point(experiment, target)[0] if resume else new_run_id()
    store = open_store(target)
    try:
        # One writer per run id, as for server runs: a second --resume is refused.
        with store.lock_run(run_id):
            if resume:
                # What is done, read under the lock: a writer may have ended just before.
                done = store.finished_pattern_keys(run_id)
                plan = [planned for planned in plan if planned.key not in done]
                console.print(f"resuming {run_id}: {len(done)} runs done, {len(plan)} to go")
                store.reopen_pattern_run(run_id)
            else:
                store.create_pattern_run(_new_run(run_id, experiment, binary))
            _measure(store, run_id, plan, binary, console)
    finally:
        store.close()
    # From the store: a resumed run's results include those of its earlier passes.
    return load_pattern_run(target, run_id)


def _new_run(run_id: str, experiment: PatternExperiment, binary: Path) -> PatternRun:
    """The run before anything ran: what it plans and where it runs."""
    return PatternRun(
        run_id=run_id,
        experiment=experiment.name,
        base_setup=experiment.base,
        experiment_text=experiment.text,
        # through JSON, as stored: the model is read back exactly as it will load later
        model=RunModel.from_dict(json.loads(json.dumps(experiment.to_dict()))),
        metadata=metadata(binary),
        status="running",
        results=[],
    )


def _measure(
    store: ResultsStore, run_id: str, plan: list[PlannedRun], binary: Path, console: Console
) -> None:
    """Run the driver in each planned cell, each result committed as it ends."""
    status = "failed"
    try:
        columns = (
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeRemainingColumn(),
        )
        with Progress(*columns, console=console, transient=True) as progress:
            task = progress.add_task("patterns", total=len(plan))
            for planned in plan:
                progress.update(
                    task,
                    description=f"{planned.case.name} · {planned.threads} thr · "
                    f"{planned.setup.name} · repeat {planned.repeat + 1}",
                )
                case = planned.case
                args = driver_args(
                    case.pattern,
                    planned.options(),
                    planned.threads,
                    case.seconds,
                    case.ops,
                    case.seed + planned.repeat,
                )
                timeout = 600.0 if case.ops else (case.seconds or 1.0) * 5 + 60
                outcome = run_driver(
                    planned.setup.allocator,
                    planned.setup.knobs,
                    args,
                    timeout=timeout,
                    binary=binary,
                )
                store.save_pattern_result(run_id, result_record(planned, outcome))
                if outcome.status != "ok":
                    progress.console.print(
                        f"[red]{case.name} / {planned.setup.name} / {planned.threads} threads "
                        f"{outcome.status}:[/] {outcome.error}"
                    )
                progress.advance(task)
        status = "finished"
    except KeyboardInterrupt:
        status = "interrupted"
        raise
    finally:
        store.finish_pattern_run(run_id, status)
