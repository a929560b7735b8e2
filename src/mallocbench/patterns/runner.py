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
from mallocbench.patterns import store as pstore
from mallocbench.patterns.driver import DriverRun, binary_path, driver_args, run_driver
from mallocbench.patterns.experiment import PatternExperiment, PlannedRun


def new_run_id() -> str:
    return time.strftime("p%Y%m%d-%H%M%S-") + secrets.token_hex(2)


def metadata(binary: Path) -> pstore.PatternRunMetadata:
    return pstore.PatternRunMetadata(
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


def result_record(planned: PlannedRun, outcome: DriverRun) -> pstore.PatternResult:
    """The stored result of one driver run in the cell `planned`."""
    data = outcome.data
    return pstore.PatternResult(
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
        **{m: data.get(m) for m in pstore.METRICS},
    )


def resume_point(
    experiment: PatternExperiment, store_path: Path
) -> tuple[str, set[tuple[str, str, int, int]]]:
    """The run to continue (the latest of the same experiment) and its finished cells."""
    if not store_path.is_file():
        raise MallocbenchError(
            f"nothing to resume: no results store at {store_path}; run without --resume"
        )
    store = pstore.open_pattern_store(str(store_path))
    try:
        latest = pstore.latest_run_of(store, experiment.name)
        if latest is None:
            raise MallocbenchError(
                f"nothing to resume: {store_path} has no run of experiment "
                f"{experiment.name!r}; run without --resume"
            )
        run_id, model = latest
        # Compared as stored (JSON), so a tuple here and a list there are the same.
        current = json.loads(json.dumps(experiment.to_dict()))
        stored = model.to_dict()
        changed = [k for k in current if stored.get(k) != current[k]]
        if changed:
            raise MallocbenchError(
                f"cannot resume {run_id}: the experiment's {', '.join(changed)} changed "
                "since; run without --resume to start a new run"
            )
        return run_id, pstore.finished_keys(store, run_id)
    finally:
        store.close()


def execute(
    experiment: PatternExperiment,
    store_path: Path,
    console: Console | None = None,
    resume: bool = False,
) -> pstore.PatternRun:
    """Run every planned cell (with `resume`, those the latest run of the same experiment
    has not finished) and return the stored run (model, metadata, results)."""
    console = console or make_console(stderr=True)
    binary = binary_path()
    precheck(experiment, binary)
    plan = experiment.plan()
    if resume:
        run_id, done = resume_point(experiment, store_path)
        plan = [planned for planned in plan if planned.key not in done]
        console.print(f"resuming {run_id}: {len(done)} runs done, {len(plan)} to go")
    store = pstore.open_pattern_store(str(store_path))
    if resume:
        pstore.reopen_run(store, run_id)
    else:
        run_id = new_run_id()
        # through JSON, as stored: the model is read back exactly as it will load later
        model = pstore.RunModel.from_dict(json.loads(json.dumps(experiment.to_dict())))
        meta = metadata(binary)
        pstore.create_run(
            store, run_id, experiment.name, experiment.base, experiment.text, model, meta
        )
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
                pstore.save_result(store, run_id, result_record(planned, outcome))
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
        pstore.finish_run(store, run_id, status)
        store.close()
    # From the store: a resumed run's results include those of its earlier passes.
    return load(store_path, run_id)


def load(store_path: Path, run_id: str | None) -> pstore.PatternRun:
    if not store_path.is_file():
        raise MallocbenchError(
            f"no results store at {store_path}: run `mallocbench patterns` first"
        )
    store = pstore.open_pattern_store(str(store_path), readonly=True)
    try:
        run_id = run_id or pstore.latest_run_id(store)
        if run_id is None:
            raise MallocbenchError(f"{store_path} holds no pattern runs yet")
        run = pstore.load_run(store, run_id)
        if run is None:
            raise MallocbenchError(f"no pattern run {run_id!r} in {store_path}")
        return run
    finally:
        store.close()
