"""A run's session source (RunSessions) and the checks before its first server: a new
run's id or the run a resume continues, a reports directory that is the run's own, the
setups as the run records them.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

from mallocbench.errors import MallocbenchError
from mallocbench.model.metadata import DesignRecord, RunMetadata
from mallocbench.model.results import SetupInfo
from mallocbench.run.builds import resolve_builds
from mallocbench.run.executor import Session
from mallocbench.run.experiment import Experiment, PlannedCell, PlannedSession
from mallocbench.run.options import RunOptions, RunOutcome
from mallocbench.run.planning import plan
from mallocbench.servers.family import Build
from mallocbench.store import ResultsStore, is_url, open_store


def check_writable(directory: Path) -> None:
    try:
        directory.mkdir(parents=True, exist_ok=True)
        probe = directory / ".mallocbench-write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise MallocbenchError(
            f"output directory {directory} is not writable ({exc.strerror}): "
            "choose another with --out"
        ) from exc


def setup_infos(experiment: Experiment, builds: dict[str | None, Build]) -> list[SetupInfo]:
    infos = []
    for setup in experiment.setups:
        build = builds[setup.basedir]
        infos.append(
            SetupInfo(
                name=setup.name,
                allocator=setup.allocator.name,
                allocator_version=setup.allocator.version,
                allocator_library=setup.allocator.preload() or setup.allocator.path,
                knobs=dict(setup.knobs),
                config={**experiment.server_config, **setup.config},
                server=build.server_program,
                server_version=build.version,
                cpus=setup.cpus,
                thp=setup.thp,
                description=setup.description,
                memory_limit_bytes=setup.memory_limit_bytes,
            )
        )
    return infos


def new_run_id(store: ResultsStore, experiment: Experiment) -> str:
    """Name-date-time, with a suffix when another run started in the same second."""
    base = f"{experiment.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    run_id, n = base, 1
    while store.run_exists(run_id):
        n += 1
        run_id = f"{base}.{n}"
    return run_id


def _resume_run_id(store: ResultsStore, experiment: Experiment) -> str:
    for run in reversed(store.list_runs()):
        if run["experiment"] == experiment.name:
            existing = store.load_run_header(run["run_id"])
            if existing.experiment_text != experiment.text:
                raise MallocbenchError(
                    f"cannot resume {run['run_id']}: the experiment file changed since; "
                    "run without --resume to start a new run"
                )
            return str(run["run_id"])
    raise MallocbenchError(
        f"nothing to resume: {store.label} has no run of experiment {experiment.name!r}; "
        "run without --resume"
    )


_RUN_ID_FIELD = re.compile(r'"run_id": "((?:[^"\\]|\\.)*)"')


def check_reports_dir(out_dir: Path, store: ResultsStore, run_id: str) -> None:
    """Refuse to replace another run's reports that this run's store cannot rebuild.

    Reports of a run the store keeps are one `report` away, so a directory shared by
    the runs of one store is fine; those of a run from elsewhere (a local run's `out`
    met by a resume from a PostgreSQL store) would be lost without a word.
    """
    path = out_dir / "results.json"
    try:
        with path.open(errors="replace") as reports:
            head = reports.read(4096)
    except OSError:
        return
    match = _RUN_ID_FIELD.search(head)
    if match is None:
        return
    other = json.loads(f'"{match.group(1)}"')
    if other == run_id or store.run_exists(other):
        return
    raise MallocbenchError(
        f"{out_dir} holds the reports of run {other}, which {store.label} does not keep: "
        f"give run {run_id} a directory of its own, e.g. --out {out_dir / run_id}"
    )


def dry_run_checks(experiment: Experiment, options: RunOptions, on_cluster: bool) -> None:
    """What a real run refuses before it starts a server, checked without starting one:
    each setup's basedir holds a server (the allocator libraries were checked as the
    experiment loaded), and a resumed run's experiment file has not changed since."""
    if not on_cluster:  # a cluster's servers are on its hosts, checked there
        resolve_builds(experiment)
    if not options.resume:
        return
    target = options.store_target
    if not is_url(target) and not Path(target).is_file():
        raise MallocbenchError(
            f"nothing to resume: there is no results store at {options.store_label}; "
            "run without --resume"
        )
    store = open_store(target, readonly=True)
    try:
        _resume_run_id(store, experiment)
    finally:
        store.close()


class RunSessions:
    """The session source of a run: what it measures, which run a resume continues, how
    its sessions are named and what they do beside the load. A soak
    (soak.runner.SoakSessions) and a run kept in a shared store
    (cluster.units.StoredRunSessions) change parts of it; the pipeline asks it and
    schedules what it plans."""

    # A server that died mid-session is replaced for the session's remaining cells; a
    # soak ends the setup's soak instead, its death being the outcome.
    restart_after_death = True

    def plan(self, experiment: Experiment) -> list[PlannedSession]:
        return plan(experiment)

    def finished_keys(
        self, store: ResultsStore, run_id: str, experiment: Experiment
    ) -> set[tuple[str, str, str, int, int]]:
        """Keys of the cells a resumed run skips."""
        return store.finished_cell_keys(run_id)

    def resume_run_id(
        self, store: ResultsStore, experiment: Experiment, carried: RunMetadata
    ) -> str:
        """The run --resume continues; `carried` is the metadata the run will be given."""
        return _resume_run_id(store, experiment)

    def session_id(
        self, store: ResultsStore, run_id: str, planned: PlannedSession, attempt: int, host: str
    ) -> str:
        return planned.id if attempt == 0 else f"{planned.id}.{attempt + 1}"

    def completed_notes(self, notes: list[str]) -> list[str]:
        """The run's notes once every cell is measured: none may still say what is missing."""
        return notes

    def takes_account(self, experiment: Experiment, planned: PlannedCell) -> bool:
        """Whether the cell ends with the server's full account of its RSS."""
        return True

    def design_record(self, record: DesignRecord) -> DesignRecord:
        """What the run records of its design, given what the experiment asked for."""
        return record

    def session_started(self, experiment: Experiment, live: Session) -> None:
        """A session's server is up and recorded, before its first cell."""

    def session_ending(self, live: Session) -> None:
        """A session's server is about to stop."""

    def sessions_ran(
        self,
        store: ResultsStore,
        run_id: str,
        experiment: Experiment,
        outcome: RunOutcome,
        builds: dict[str | None, Build],
        measured_on: str | None,
    ) -> None:
        """After a round of sessions, also on an error; `measured_on`: the host that
        measured a cell in it (None: no cell was measured)."""


__all__ = ["RunSessions", "dry_run_checks"]
