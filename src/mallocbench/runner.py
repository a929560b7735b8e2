"""The compare pipeline: plan -> dataset -> server -> workload + probes -> store.

Each cell is committed to the store the moment it finishes; a crashed or OOM-killed
server is recorded as the cell's result and the next cell gets a fresh server.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import pymysql

from mallocbench import dataset
from mallocbench.analysis.convergence import WideCell, cells_to_repeat, wide_cells
from mallocbench.analysis.steady import WINDOW_S, WarmupDetector, check_stability
from mallocbench.errors import MallocbenchError
from mallocbench.experiment import (
    BYTES_PER_ROW,
    Experiment,
    PlannedCell,
    PlannedSession,
    plan,
    plan_extra_round,
)
from mallocbench.probes import process as proc_probe
from mallocbench.probes.server import CGROUP_METRIC, ServerMemoryProbe, account
from mallocbench.probes.system import (
    host_metadata,
    process_thp_disabled,
    system_thp_mode,
    thp_mode,
)
from mallocbench.report import formatting as fmt
from mallocbench.results import (
    STATUS_FAILED,
    STATUS_OK,
    STATUS_OOM,
    Cell,
    RunResult,
    Sample,
    SessionInfo,
    SetupInfo,
)
from mallocbench.servers import engines
from mallocbench.servers.cgroup import MemoryCgroup
from mallocbench.servers.mariadb import (
    PrivateServer,
    ServerBuild,
    ServerConfig,
    ServerStartError,
    find_build,
)
from mallocbench.servers.orphans import Orphan, stop_orphans
from mallocbench.store import Store, locks
from mallocbench.store.sqlite import (
    STATUS_FINISHED,
    STATUS_INTERRUPTED,
    STATUS_RUN_FAILED,
    STATUS_RUNNING,
)
from mallocbench.workloads.catalogue import Step
from mallocbench.workloads.sysbench import Interval, RunOutput, Sysbench


class Progress(Protocol):
    """What the pipeline tells whoever watches it (the CLI draws it with rich)."""

    def start(self, total_cells: int, skipped: int) -> None: ...
    def status(self, text: str) -> None: ...
    def cell_started(self, cell: PlannedCell, phase: str) -> None: ...
    def interval(self, cell: PlannedCell, interval: Interval, rss_bytes: int | None) -> None: ...
    def cell_finished(self, cell: Cell) -> None: ...
    def round_started(self, repeat: int, cells: int, reason: str) -> None: ...


class SilentProgress:
    def start(self, total_cells: int, skipped: int) -> None:
        pass

    def status(self, text: str) -> None:
        pass

    def cell_started(self, cell: PlannedCell, phase: str) -> None:
        pass

    def interval(self, cell: PlannedCell, interval: Interval, rss_bytes: int | None) -> None:
        pass

    def cell_finished(self, cell: Cell) -> None:
        pass

    def round_started(self, repeat: int, cells: int, reason: str) -> None:
        pass


@dataclass
class RunOptions:
    out_dir: Path
    store_path: Path | None = None
    resume: bool = False
    keep_datadirs: bool = False
    # Adaptive repetition: add repeats until every relative QPS interval is narrower than
    # this many percentage points, the budget (seconds from the start) is spent, or
    # max_repeats is reached.
    target_ci_pct: float | None = None
    budget_s: float = 3600.0
    max_repeats: int = 20
    min_effect: float | None = None  # overrides the experiment's min_effect

    @property
    def store_file(self) -> Path:
        return self.store_path or self.out_dir / "results.sqlite"


@dataclass
class RunOutcome:
    result: RunResult
    aborted: str | None = None  # why the run stopped early, if it did
    skipped: int = 0
    measured: int = 0
    failures: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # things the reader must know
    not_converged: list[WideCell] = field(default_factory=list)
    adaptive_stop: str | None = None  # why adaptive repetition stopped, when it ran
    repeats_done: int | None = None  # repeats per cell so far, as adaptive repetition saw


def cell_estimate(experiment: Experiment) -> float:
    """Seconds per cell before any was measured: warmup + step + a second of overhead."""
    # Warming cannot end before the detector has a full window of seconds to judge.
    warmup = min(max(experiment.warmup_s, WINDOW_S), experiment.max_warmup_s)
    return (warmup if experiment.warmup_s > 0 else 0.0) + experiment.duration_s + 1.0


def _effective_thp(pid: int, requested: str | None) -> str | None:
    """The THP mode the server really runs under, as recorded with its session.

    Recent MariaDB releases (10.11.19 here) turn THP off for themselves with
    PR_SET_THP_DISABLE once started, whatever the system's mode: a THP knob has little
    left to act on there, and the record says so.
    """
    system_mode = thp_mode()
    if requested == "never":
        return "never (PR_SET_THP_DISABLE, set by mallocbench)"
    if process_thp_disabled(pid):
        return f"off: the server disabled THP for itself (system mode {system_mode})"
    return system_mode


def _check_writable(directory: Path) -> None:
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


def _setup_infos(experiment: Experiment, builds: dict[str | None, ServerBuild]) -> list[SetupInfo]:
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
                server=build.mysqld,
                server_version=build.version,
                cpus=setup.cpus,
                thp=setup.thp,
                description=setup.description,
                memory_limit_bytes=setup.memory_limit_bytes,
            )
        )
    return infos


def _resolve_builds(experiment: Experiment) -> dict[str | None, ServerBuild]:
    builds: dict[str | None, ServerBuild] = {}
    for setup in experiment.setups:
        if setup.basedir not in builds:
            builds[setup.basedir] = find_build(setup.basedir)
    return builds


def _new_run_id(store: Store, experiment: Experiment) -> str:
    """Name-date-time, with a suffix when another run started in the same second."""
    base = f"{experiment.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    run_id, n = base, 1
    while store.run_exists(run_id):
        n += 1
        run_id = f"{base}.{n}"
    return run_id


def _resume_run_id(store: Store, experiment: Experiment) -> str:
    for run in reversed(store.list_runs()):
        if run["experiment"] == experiment.name:
            existing = store.load_run(run["run_id"], with_samples=False)
            if existing.experiment_text != experiment.text:
                raise MallocbenchError(
                    f"cannot resume {run['run_id']}: the experiment file changed since; "
                    "run without --resume to start a new run"
                )
            return str(run["run_id"])
    raise MallocbenchError(
        f"nothing to resume: {store.path} has no run of experiment {experiment.name!r}; "
        "run without --resume"
    )


class Pipeline:
    def __init__(
        self,
        experiment: Experiment,
        options: RunOptions,
        progress: Progress | None = None,
        stop_requested: Callable[[], bool] | None = None,
    ) -> None:
        self.experiment = experiment
        self.options = options
        self.progress = progress or SilentProgress()
        self.stop_requested = stop_requested or (lambda: False)

    def execute(self) -> RunOutcome:
        experiment, options = self.experiment, self.options
        _check_writable(options.out_dir)
        with locks.lock_directory(options.out_dir):
            # Holding the directory's lock, any server recorded under it is an orphan of
            # a harness that died: stop it before its files are reused.
            orphans = stop_orphans(options.out_dir / "servers")
            builds = _resolve_builds(experiment)
            store = Store(options.store_file)
            try:
                return self._execute(store, builds, orphans)
            finally:
                store.close()

    def _execute(
        self, store: Store, builds: dict[str | None, ServerBuild], orphans: list[Orphan]
    ) -> RunOutcome:
        experiment, options = self.experiment, self.options
        run_id = (
            _resume_run_id(store, experiment) if options.resume else _new_run_id(store, experiment)
        )
        with locks.lock_run(options.store_file, run_id):
            return self._execute_locked(store, builds, orphans, run_id)

    def _execute_locked(
        self,
        store: Store,
        builds: dict[str | None, ServerBuild],
        orphans: list[Orphan],
        run_id: str,
    ) -> RunOutcome:
        experiment, options = self.experiment, self.options
        setups = _setup_infos(experiment, builds)
        metadata = host_metadata()
        metadata.update(
            {
                "experiment_file": experiment.source,
                "server_versions": sorted({b.label for b in builds.values()}),
                "allocators": {
                    s.name: {"version": s.allocator.version, "library": s.allocator.path}
                    for s in experiment.setups
                },
                "dataset": {
                    "tables": experiment.dataset.tables,
                    "rows": experiment.dataset.rows,
                    "cache_bytes": experiment.dataset.cache_bytes,
                },
                "durations": {
                    "warmup_s": experiment.warmup_s,
                    "max_warmup_s": experiment.max_warmup_s,
                    "step_s": experiment.duration_s,
                },
                "threads": experiment.threads,
                "engines": [e.name for e in experiment.engines],
                "steps": [s.label for s in experiment.steps],
                "repeats": experiment.repeats,
                "min_effect": (
                    options.min_effect if options.min_effect is not None else experiment.min_effect
                ),
            }
        )
        result = RunResult(
            run_id=run_id,
            experiment=experiment.name,
            base_setup=experiment.base,
            metadata=metadata,
            setups=setups,
            experiment_text=experiment.text,
        )
        if not options.resume:
            store.create_run(result)
        for info in setups:
            store.save_setup(run_id, info)

        done = store.finished_cell_keys(run_id)
        sessions = plan(experiment)
        total = sum(len(s.cells) for s in sessions)
        skipped = sum(1 for s in sessions for c in s.cells if c.key in done)
        self.progress.start(total, skipped)
        outcome = RunOutcome(result=result, skipped=skipped)
        if orphans:
            outcome.notes.append(
                f"stopped {len(orphans)} server(s) left running by an earlier run whose "
                "harness died: PID " + ", ".join(str(o.pid) for o in orphans)
            )
        store.set_status(run_id, STATUS_RUNNING)
        # Anything but a normal end (a bug, SystemExit, a signal) leaves the run "failed"
        # or "interrupted" in the store, never "finished".
        status = STATUS_RUN_FAILED
        started = time.monotonic()
        try:
            self._run_sessions(store, run_id, sessions, done, builds, outcome)
            if options.target_ci_pct is not None:
                self._repeat_until_narrow(store, run_id, metadata, builds, outcome, started)
            status = STATUS_FINISHED
        except KeyboardInterrupt:
            status = STATUS_INTERRUPTED
            outcome.aborted = "interrupted"
        except ServerStartError as exc:
            outcome.aborted = str(exc)
        except SystemExit:
            status = STATUS_INTERRUPTED
            raise
        finally:
            if outcome.notes:
                metadata["notes"] = outcome.notes
                store.update_metadata(run_id, metadata)
            if options.target_ci_pct is not None and outcome.adaptive_stop is None:
                outcome.adaptive_stop = (
                    "interrupted" if outcome.aborted == "interrupted" else "run failed"
                )
                self._record_adaptive(store, run_id, metadata, outcome)
            store.finish_run(run_id, status)
        outcome.result = store.load_run(run_id)
        return outcome

    def _run_sessions(
        self,
        store: Store,
        run_id: str,
        sessions: list[PlannedSession],
        done: set[tuple[str, str, str, int, int]],
        builds: dict[str | None, ServerBuild],
        outcome: RunOutcome,
    ) -> None:
        for session in sessions:
            pending = [c for c in session.cells if c.key not in done]
            if not pending:
                continue
            if self.stop_requested():
                raise KeyboardInterrupt
            self._run_session(store, run_id, session, pending, builds, outcome)

    # --- adaptive repetition --------------------------------------------------------------

    def _repeat_until_narrow(
        self,
        store: Store,
        run_id: str,
        metadata: dict[str, Any],
        builds: dict[str | None, ServerBuild],
        outcome: RunOutcome,
        started: float,
    ) -> None:
        """Add interleaved repeats of the cells whose interval is still too wide."""
        options, experiment = self.options, self.experiment
        assert options.target_ci_pct is not None
        while True:
            current = store.load_run(run_id, with_samples=False)
            outcome.not_converged = wide_cells(current, options.target_ci_pct)
            repeat = 1 + max((c.repeat for c in current.cells), default=-1)
            outcome.repeats_done = repeat
            if not outcome.not_converged:
                outcome.adaptive_stop = "converged"
                break
            if repeat >= options.max_repeats:
                outcome.adaptive_stop = "max repeats"
                break
            sessions = plan_extra_round(
                experiment, repeat, cells_to_repeat(outcome.not_converged, experiment.base)
            )
            cells = sum(len(s.cells) for s in sessions)
            elapsed = time.monotonic() - started
            per_cell = elapsed / outcome.measured if outcome.measured else cell_estimate(experiment)
            if elapsed + cells * per_cell > options.budget_s:
                outcome.adaptive_stop = "budget"
                break
            self._record_adaptive(store, run_id, metadata, outcome)
            self.progress.round_started(
                repeat,
                cells,
                f"{len(outcome.not_converged)} relative QPS intervals wider than "
                f"{options.target_ci_pct:g}%",
            )
            self._run_sessions(store, run_id, sessions, set(), builds, outcome)
        self._record_adaptive(store, run_id, metadata, outcome)

    def _record_adaptive(
        self, store: Store, run_id: str, metadata: dict[str, Any], outcome: RunOutcome
    ) -> None:
        metadata["adaptive"] = {
            "target_ci_pct": self.options.target_ci_pct,
            "budget_s": self.options.budget_s,
            "max_repeats": self.options.max_repeats,
            "rounds": outcome.repeats_done or self.experiment.repeats,
            "stopped": outcome.adaptive_stop or "running",
            "not_converged": [w.to_dict() for w in outcome.not_converged],
        }
        store.update_metadata(run_id, metadata)

    # --- sessions and cells ---------------------------------------------------------------

    def _server_config(
        self, planned: PlannedSession, memory_cgroup: MemoryCgroup | None = None
    ) -> ServerConfig:
        experiment = self.experiment
        setup = experiment.setup(planned.setup)
        return ServerConfig(
            engine=engines.get(planned.engine),
            cache_bytes=experiment.dataset.cache_bytes,
            allocator=setup.allocator,
            knobs=setup.knobs,
            overrides={**experiment.server_config, **setup.config},
            cpus=setup.cpus,
            thp_disabled=setup.thp == "never",
            port=experiment.port,
            max_connections=max(200, 2 * max(experiment.threads) + 50),
            memory_cgroup=memory_cgroup,
        )

    def _run_session(
        self,
        store: Store,
        run_id: str,
        planned: PlannedSession,
        pending: list[PlannedCell],
        builds: dict[str | None, ServerBuild],
        outcome: RunOutcome,
    ) -> None:
        """Run the pending cells on fresh servers; a server that dies is replaced."""
        experiment = self.experiment
        setup = experiment.setup(planned.setup)
        build = builds[setup.basedir]
        engine = engines.get(planned.engine)
        golden = dataset.golden_datadir(
            build, engine, experiment.dataset, on_status=self.progress.status
        )
        # "never" is set on the server alone (PR_SET_THP_DISABLE); the other modes can
        # only be had system-wide, for the session's duration.
        system_thp = setup.thp if setup.thp in ("always", "madvise") else None
        try:
            with system_thp_mode(system_thp):
                self._run_servers(store, run_id, planned, pending, build, golden, outcome)
        except MallocbenchError as exc:
            if isinstance(exc, ServerStartError):
                raise
            raise ServerStartError(f"setup {setup.name}: {exc}") from exc

    def _run_servers(
        self,
        store: Store,
        run_id: str,
        planned: PlannedSession,
        pending: list[PlannedCell],
        build: ServerBuild,
        golden: Path,
        outcome: RunOutcome,
    ) -> None:
        experiment = self.experiment
        setup = experiment.setup(planned.setup)
        engine = engines.get(planned.engine)
        attempt = 0
        while pending:
            session_id = planned.id if attempt == 0 else f"{planned.id}.{attempt + 1}"
            attempt += 1
            rundir = self.options.out_dir / "servers" / session_id
            # A fresh group per server: a killed server's charge and OOM count stay behind.
            group = (
                MemoryCgroup.create(session_id, setup.memory_limit_bytes)
                if setup.memory_limit_bytes is not None
                else None
            )
            server = PrivateServer(build, rundir, self._server_config(planned, group))
            self.progress.status(f"starting {setup.name} on {engine.name} ({session_id})")
            info = SessionInfo(
                id=session_id, setup=planned.setup, engine=planned.engine, repeat=planned.repeat
            )
            if group is not None:
                info.memory_limit_bytes = group.limit_bytes()
            try:
                server.copy_datadir_from(golden)
                try:
                    server.start()
                except ServerStartError as exc:
                    if group is not None and group.oom_kills():
                        raise ServerStartError(
                            f"the server for setup {setup.name} on {engine.name} was OOM-killed "
                            f"while starting: memory_limit = {fmt.mib(info.memory_limit_bytes)} "
                            "is too small for it; raise the cap"
                        ) from exc
                    raise ServerStartError(
                        f"the server for setup {setup.name} on {engine.name} did not start: {exc}"
                    ) from exc
                except MallocbenchError as exc:
                    # The allocator was not mapped: nothing measured is trustworthy.
                    raise ServerStartError(f"setup {setup.name}: {exc}") from exc
                info.pid = server.pid
                info.started_at = time.time()
                info.thp = _effective_thp(server.pid, setup.thp)
                if setup.thp in ("always", "madvise") and (info.thp or "").startswith("off"):
                    note = (
                        f"setup {setup.name} asks for THP {setup.thp}, but the server turns THP "
                        "off for itself (PR_SET_THP_DISABLE) once started: the setting only "
                        "reaches start-up allocations"
                    )
                    if note not in outcome.notes:
                        outcome.notes.append(note)
                self.progress.status(f"warming the {engine.name} cache ({session_id})")
                info.cache_warm = warm_cache(server, experiment)
                store.save_session(run_id, info)
                sysbench = Sysbench(
                    connection_file=str(server.sysbench_options),
                    tables=experiment.dataset.tables,
                    table_size=experiment.dataset.rows,
                    engine_sql=engine.sql_engine,
                )
                while pending:
                    planned_cell = pending[0]
                    exact_peak = group is not None and _restart_peak(group, info)
                    cell = self._run_cell(server, sysbench, planned_cell, session_id)
                    if group is not None:
                        _record_charge(cell, group, info, exact_peak)
                    store.save_cell(run_id, cell)
                    pending.pop(0)
                    outcome.measured += 1
                    self.progress.cell_finished(cell)
                    if cell.status != STATUS_OK:
                        outcome.failures.append(
                            f"{cell.setup}/{cell.engine}/{cell.step}/{cell.threads}t: "
                            f"{cell.status} ({cell.error})"
                        )
                    if not server.alive():
                        info.status = cell.status
                        break
                    if self.stop_requested():
                        raise KeyboardInterrupt
            finally:
                memory = proc_probe.read_memory(server.pid) if server.alive() else None
                if memory is not None:
                    info.peak_rss_bytes = memory.hwm_bytes
                    info.peak_vsz_bytes = memory.peak_vsz_bytes
                try:
                    server.stop()
                finally:
                    if group is not None:
                        _remove_group(group, info, outcome)
                info.ended_at = time.time()
                if info.peak_rss_bytes is None:
                    info.peak_rss_bytes = _max_cell_value(store, run_id, session_id, "rss")
                    info.peak_vsz_bytes = _max_cell_value(store, run_id, session_id, "vsz")
                if info.started_at is not None:
                    store.save_session(run_id, info)
                if not self.options.keep_datadirs:
                    _remove_datadir(server)

    def _run_cell(
        self, server: PrivateServer, sysbench: Sysbench, planned: PlannedCell, session_id: str
    ) -> Cell:
        experiment = self.experiment
        cell = Cell(
            setup=planned.setup,
            engine=planned.engine,
            step=planned.step.label,
            threads=planned.threads,
            repeat=planned.repeat,
            group=planned.step.group,
            session=session_id,
            allocator_path=server.allocator_path,
            cache_bytes=experiment.dataset.cache_bytes,
            started_at=time.time(),
        )
        # Steps that do a fixed amount of work (loads, index builds) are not warmed up:
        # a warmup would do that work twice.
        until_done = planned.step.definition.until_done
        if experiment.warmup_s > 0 and not until_done:
            not_warmed = self._warm_up(server, sysbench, planned, cell)
            if not_warmed is not None:
                return not_warmed

        self.progress.cell_started(planned, "measure")
        before = proc_probe.read_counters(server.pid)
        system_cs_before = proc_probe.system_context_switches()
        with ServerMemoryProbe(server) as server_probe:
            measured = measure(
                server.pid,
                sysbench,
                planned.step,
                planned.threads,
                experiment.duration_s,
                on_interval=lambda i, rss: self.progress.interval(planned, i, rss),
                should_stop=self.stop_requested,
                server_probe=server_probe,
            )
            reported_at_end = server_probe.read()
        output, samples = measured.output, measured.samples
        after = proc_probe.read_counters(server.pid)
        system_cs_after = proc_probe.system_context_switches()
        cell.samples = samples
        cell.duration_s = output.seconds or (time.time() - cell.started_at)
        cell.peak_rss_bytes = measured.peak_rss_bytes
        cell.peak_vsz_bytes = measured.peak_vsz_bytes
        if self.stop_requested():
            raise KeyboardInterrupt
        if not server.alive():
            return _dead_server_cell(cell, server, "while measuring")
        if not output.ok:
            cell.status = STATUS_FAILED
            cell.error = (
                "sysbench failed: " + (output.output_tail.splitlines() or ["no output"])[-1]
            )
            return cell
        cell.qps = output.qps
        cell.tps = output.tps
        cell.p95_ms = output.p95_ms
        cell.p99_ms = output.p99_ms
        cell.avg_ms = output.avg_ms
        cell.errors = output.errors
        cell.metrics = _per_op_metrics(
            output.queries, output.client_cpu_s, before, after, system_cs_before, system_cs_after
        )
        cell.metrics.update(output.metrics)
        cell.metrics.update(reported_at_end)
        cell.metrics.update(account(server, experiment.setup(planned.setup).allocator.name))
        # A load's throughput changes as its tables grow: no level to hold, nothing to judge.
        if not until_done:
            cell.stability = check_stability([s.qps for s in samples]).to_dict()
        return cell

    def _warm_up(
        self, server: PrivateServer, sysbench: Sysbench, planned: PlannedCell, cell: Cell
    ) -> Cell | None:
        """Run the step until its throughput stops trending; the cell to return if it failed.

        Between durations.warmup and durations.max_warmup seconds: every server start
        re-creates a ramp longer than a fixed warmup guessed (analysis.steady).
        """
        experiment = self.experiment
        detector = WarmupDetector(experiment.warmup_s, experiment.max_warmup_s)
        self.progress.cell_started(planned, "warmup")
        warm = sysbench.run(
            planned.step,
            planned.threads,
            experiment.max_warmup_s,
            on_interval=lambda i: detector.add(i.qps, i.seconds),
            should_stop=lambda: detector.done or self.stop_requested(),
        )
        if self.stop_requested():
            raise KeyboardInterrupt
        if not server.alive():
            return _dead_server_cell(cell, server, "during warmup")
        # Killed by us once the detector was done: no totals printed, and no failure either.
        cut_short = detector.done and warm.returncode == -signal.SIGKILL
        if not warm.ok and not cut_short:
            cell.status = STATUS_FAILED
            cell.error = "warmup failed: " + (warm.output_tail.splitlines() or ["no output"])[-1]
            return cell
        cell.warmup_s = round(detector.elapsed_s, 1)
        cell.warmup_steady = detector.steady
        return None


@dataclass
class Measured:
    output: RunOutput
    samples: list[Sample]
    peak_rss_bytes: int | None
    peak_vsz_bytes: int | None


def measure(
    server_pid: int,
    sysbench: Sysbench,
    step: Step,
    threads: int,
    seconds: float,
    probes: bool = True,
    on_interval: Callable[[Interval, int | None], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    server_probe: ServerMemoryProbe | None = None,
) -> Measured:
    """One measured sysbench run with the memory probes around it.

    `probes=False` exists for the harness-overhead benchmark, which must run the very
    same code path with and without sampling (the server's own counters included).
    """
    samples: list[Sample] = []

    def record(interval: Interval) -> None:
        memory = proc_probe.read_memory(server_pid) if probes else None
        reported = server_probe.read() if probes and server_probe is not None else {}
        samples.append(
            Sample(
                t=interval.t,
                rss_bytes=memory.rss_bytes if memory else None,
                vsz_bytes=memory.vsz_bytes if memory else None,
                qps=interval.qps,
                tps=interval.tps,
                latency_ms=interval.latency_ms,
                extra=reported,
            )
        )
        if on_interval is not None:
            on_interval(interval, memory.rss_bytes if memory else None)

    if not probes:
        output = sysbench.run(step, threads, seconds, on_interval=record, should_stop=should_stop)
        return Measured(output, samples, None, None)
    with proc_probe.PeakSampler(server_pid) as peaks:
        output = sysbench.run(step, threads, seconds, on_interval=record, should_stop=should_stop)
    return Measured(output, samples, peaks.peak_rss or None, peaks.peak_vsz or None)


# The server aborts a cache-warming read that runs longer (a dataset on a slow disk);
# the first cell then warms the rest, as it would have without this.
CACHE_WARM_STATEMENT_S = 300


def _quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def warm_cache(server: PrivateServer, experiment: Experiment, database: str = "sbtest") -> str:
    """Read every index of every table once after a start; says what was done.

    A cold cache is a ramp of its own, and a long one on a dataset of some size: with
    8 x 150,000 rows and a 1 GiB cache (point-query, 8 clients, no warmup) MyRocks'
    block cache took ~12 s to fill from the queries alone, QPS ramping from 15k to 21k,
    and InnoDB's first second ran at a third of the rest. Reading the indexes took
    1.0-1.4 s and left both flat from the first second. Tables that do not fit the
    cache are not read: a scan would only churn it, for as long as the dataset is big.
    """
    data = experiment.dataset
    table_bytes = data.tables * data.rows * BYTES_PER_ROW
    if table_bytes > data.cache_bytes:
        return (
            f"not warmed: the tables (about {fmt.mib(table_bytes)}) do not fit the cache "
            f"({fmt.mib(data.cache_bytes)})"
        )
    started = time.monotonic()
    try:
        with (
            server.connect(read_timeout=CACHE_WARM_STATEMENT_S + 30) as conn,
            conn.cursor() as cur,
        ):
            # MySQL has no such variable; there the read timeout still bounds each read.
            with contextlib.suppress(pymysql.MySQLError):
                cur.execute(f"SET SESSION max_statement_time = {CACHE_WARM_STATEMENT_S}")
            cur.execute(
                "SELECT DISTINCT table_name, index_name FROM information_schema.statistics"
                " WHERE table_schema = %s ORDER BY table_name, index_name",
                (database,),
            )
            indexes = [(str(t), str(i)) for t, i in cur.fetchall()]
            for table, index in indexes:
                cur.execute(
                    f"SELECT COUNT(*) FROM {_quoted(database)}.{_quoted(table)}"
                    f" FORCE INDEX ({_quoted(index)})"
                )
                cur.fetchall()
    except pymysql.MySQLError as exc:
        return f"warming failed after {time.monotonic() - started:.1f} s: {exc.args[-1]}"
    tables = len({table for table, _ in indexes})
    return f"read {len(indexes)} indexes of {tables} tables in {time.monotonic() - started:.1f} s"


def _per_op_metrics(
    operations: int,
    client_cpu_s: float,
    before: proc_probe.Counters | None,
    after: proc_probe.Counters | None,
    system_cs_before: int | None,
    system_cs_after: int | None,
) -> dict[str, float]:
    """Per-operation costs as in the seeds' cpu/o and cs/o, from /proc deltas."""
    if operations <= 0 or before is None or after is None:
        return {}
    user = after.user_s - before.user_s
    system = after.system_s - before.system_s
    metrics = {
        "server_cpu_us_per_op": (user + system) * 1e6 / operations,
        "server_user_us_per_op": user * 1e6 / operations,
        "server_sys_us_per_op": system * 1e6 / operations,
        "voluntary_cs_per_op": (after.voluntary_cs - before.voluntary_cs) / operations,
        "involuntary_cs_per_op": (after.involuntary_cs - before.involuntary_cs) / operations,
        "client_cpu_s": client_cpu_s,
        "server_cpu_s": user + system,
    }
    total_cpu = user + system + client_cpu_s
    if total_cpu > 0:
        metrics["client_cpu_share"] = client_cpu_s / total_cpu
    if before.read_bytes is not None and after.read_bytes is not None:
        metrics["read_kb_per_op"] = (after.read_bytes - before.read_bytes) / 1024 / operations
    if before.write_bytes is not None and after.write_bytes is not None:
        metrics["write_kb_per_op"] = (after.write_bytes - before.write_bytes) / 1024 / operations
    if before.read_syscalls is not None and after.read_syscalls is not None:
        metrics["reads_per_op"] = (after.read_syscalls - before.read_syscalls) / operations
    if system_cs_before is not None and system_cs_after is not None:
        metrics["system_cs_per_op"] = (system_cs_after - system_cs_before) / operations
    return metrics


def _dead_server_cell(cell: Cell, server: PrivateServer, when: str) -> Cell:
    exit_info = server.exit_info()
    assert exit_info is not None
    cell.status = exit_info.status
    cell.exit_signal = exit_info.signal
    cell.log_tail = exit_info.log_tail
    cell.error = f"{exit_info.describe()} {when}"
    return cell


def _note_peak(info: SessionInfo, peak: int | None) -> None:
    if peak is not None:
        info.peak_cgroup_bytes = max(info.peak_cgroup_bytes or 0, peak)


def _restart_peak(group: MemoryCgroup, info: SessionInfo) -> bool:
    """Start a cell's peak charge afresh, keeping the session's; False if it cannot be."""
    _note_peak(info, group.peak_bytes())
    return group.reset_peak()


def _record_charge(cell: Cell, group: MemoryCgroup, info: SessionInfo, exact_peak: bool) -> None:
    """The cell's peak cgroup charge, to set beside its peak RSS.

    The kernel's peak covers the whole cell (its warmup too) and is exact, even when the
    server was killed between two samples; where it could not be restarted for the cell,
    the samples' highest charge stands in, a lower bound.
    """
    peak = group.peak_bytes()
    _note_peak(info, peak)
    if not exact_peak:
        sampled = [s.extra[CGROUP_METRIC] for s in cell.samples if CGROUP_METRIC in s.extra]
        peak = int(max(sampled)) if sampled else None
    if peak is not None:
        cell.metrics["cgroup_peak_bytes"] = float(peak)
    if info.memory_limit_bytes is not None:
        cell.metrics["cgroup_limit_bytes"] = float(info.memory_limit_bytes)
    if cell.status == STATUS_OOM and peak is not None:
        # Which of the two reached the cap is the first question about a kill.
        cell.error = (
            f"{cell.error}; cgroup charge peaked at {fmt.mib(peak)} of a "
            f"{fmt.mib(info.memory_limit_bytes)} cap, RSS at {fmt.mib(cell.peak_rss_bytes)}"
        )


def _remove_group(group: MemoryCgroup, info: SessionInfo, outcome: RunOutcome) -> None:
    """Remove a server's cgroup once it stopped; a failure is told, never raised.

    Raised here, it would hide whatever ended the session (an error, Ctrl-C).
    """
    _note_peak(info, group.peak_bytes())
    try:
        group.remove()
    except MallocbenchError as exc:
        outcome.notes.append(str(exc))


def _max_cell_value(store: Store, run_id: str, session_id: str, kind: str) -> int | None:
    column = "peak_rss_bytes" if kind == "rss" else "peak_vsz_bytes"
    row = store.db.execute(
        f"SELECT max({column}) FROM cells WHERE run_id = ? AND json_extract(data, '$.session') = ?",
        (run_id, session_id),
    ).fetchone()
    return int(row[0]) if row and row[0] is not None else None


def _remove_datadir(server: PrivateServer) -> None:
    import shutil

    shutil.rmtree(server.datadir, ignore_errors=True)


def write_results_json(result: RunResult, path: Path) -> None:
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(result.to_dict(), indent=1))
    os.replace(tmp, path)


__all__ = [
    "Pipeline",
    "Progress",
    "RunOptions",
    "RunOutcome",
    "SilentProgress",
    "cell_estimate",
    "write_results_json",
]
