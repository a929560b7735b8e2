"""Scale out: one experiment's blocks dispatched to benchmark hosts with Dask distributed.

The driver (`mallocbench run EXP --cluster ADDRESS`) plans as a local run does and holds
the run's lock; each *unit* it dispatches is one block of the verdict design (one engine
in one repeat, every setup's sessions), so a setup is only ever compared with a base
measured on the same host. Every benchmark host runs one Dask worker that advertises one
unit of RESOURCE, so a host never measures two units at once. A unit runs as a
subprocess of the worker (`mallocbench _run-unit`): signals and cleanup work as in a
local run, and the subprocess dies with its worker (PR_SET_PDEATHSIG).

Cells are committed to the shared store by the unit as they finish. A worker that dies
loses its unit's running cells only: Dask retries the unit on another host (within the
scheduler's allowed-failures), and the retry skips the cells already in the store; a
unit whose retries are spent is recorded as lost, the run ends "interrupted" and
`--resume` measures what is missing.

This module is what `mallocbench run` asks of a cluster; cluster.units holds what the
driver (cluster.driver) and the workers (cluster.worker) share.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from mallocbench.cluster.driver import ClusterSchedule, DriverExecutor
from mallocbench.cluster.units import StoredRunSessions, Tell, experiment_from_run, units_of
from mallocbench.errors import MallocbenchError
from mallocbench.executors.real import RealExecutor
from mallocbench.run.experiment import Experiment
from mallocbench.run.options import Progress, RunOptions
from mallocbench.run.runner import Pipeline
from mallocbench.store import open_store


def load_for_run(
    experiment_file: Path, overrides: list[str], resume: bool, store_at: str | Path
) -> tuple[Experiment, str | None]:
    """The experiment to run, and the run id to resume when one was named instead of a file.

    `run --resume RUN_ID --store TARGET` needs no experiment file: the run's stored text
    is the experiment (on another machine too, as long as it reaches the store).
    """

    from mallocbench.run import loading as loading_mod

    as_file = experiment_file.suffix == ".toml" or experiment_file.exists()
    if not resume or as_file:
        return loading_mod.load(experiment_file, overrides), None
    run_id = str(experiment_file)
    if overrides:
        raise MallocbenchError(
            f"--set cannot change run {run_id} while resuming it: its stored experiment is "
            "what it measures; start a new run from the file to change it"
        )
    store = open_store(store_at, readonly=True)
    try:
        if not store.run_exists(run_id):
            raise MallocbenchError(
                f"{run_id} is neither an experiment file nor a run in {store.label}: give "
                "an experiment file, or a run id of that store (mallocbench runs)"
            )
        stored = store.load_run(run_id, with_samples=False)
    finally:
        store.close()
    return experiment_from_run(stored), run_id


def pipeline_for(
    experiment: Experiment,
    options: RunOptions,
    progress: Progress | None,
    stop_requested: Callable[[], bool],
    run_id: str | None,
    address: str | None,
    tell: Tell | None = None,
    security: Any = None,
) -> Pipeline:
    """The local pipeline, or the cluster's when an address is given."""
    if address is None:
        return Pipeline(
            experiment,
            options,
            progress,
            stop_requested,
            executor=RealExecutor(),
            sessions=StoredRunSessions(run_id),
        )
    return Pipeline(
        experiment,
        options,
        progress,
        stop_requested,
        executor=DriverExecutor(),
        # The driver records the hosts from what the units return.
        sessions=StoredRunSessions(run_id, joins_hosts=False),
        schedule=ClusterSchedule(address, security, tell),
    )


def dispatch_line(experiment: Experiment, address: str) -> str:
    """What --dry-run --cluster adds to the plan."""
    from mallocbench.run.planning import plan

    count = len(units_of(plan(experiment), set()))
    return (
        f"cluster {address}: {count} unit(s) to dispatch, one per engine and repeat (every "
        "setup's sessions of a block on one host), one unit per host at a time"
    )


__all__ = []
