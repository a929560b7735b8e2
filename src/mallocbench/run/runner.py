"""The compare pipeline: plan -> dataset -> server -> workload + probes -> store.

Each cell is committed to the store the moment it finishes; a crashed or OOM-killed
server is recorded as the cell's result and the next cell gets a fresh server.
"""

from __future__ import annotations

import socket
from collections.abc import Callable

from mallocbench.analysis.convergence import cells_to_repeat, wide_cells
from mallocbench.errors import EnvironmentLost
from mallocbench.model.metadata import (
    AdaptiveRecord,
    AllocatorRecord,
    DatasetRecord,
    DecisionRecord,
    DesignRecord,
    Durations,
    RunMetadata,
)
from mallocbench.model.results import STATUS_FAILED, STATUS_OK, Cell, RunResult
from mallocbench.probes.system import host_facts
from mallocbench.run.executor import Executor, RunContext, Session
from mallocbench.run.experiment import (
    AUTO,
    INTERLEAVED,
    SEQUENTIAL,
    TURNS,
    Experiment,
    PlannedCell,
    PlannedSession,
)
from mallocbench.run.measure import planned_cell
from mallocbench.run.options import Progress, RunOptions, RunOutcome, SilentProgress, cell_estimate
from mallocbench.run.planning import concurrency_problem, plan_extra_round, slices_per_cell
from mallocbench.run.schedule import LocalSchedule, Schedule
from mallocbench.run.source import (
    RunSessions,
    check_reports_dir,
    check_writable,
    new_run_id,
    setup_infos,
)
from mallocbench.servers.family import Build
from mallocbench.servers.outcome import ServerStartError, SettingNotTaken
from mallocbench.store import ResultsStore, locks, open_store
from mallocbench.store.sqlite import (
    STATUS_FINISHED,
    STATUS_INTERRUPTED,
    STATUS_RUN_FAILED,
    STATUS_RUNNING,
)

# Blocks every cell gets before --target-ci's stopping rule looks at the spread: with
# fewer, Stein's first-stage t quantile (12.7 at 1 degree of freedom) asks for dozens.
STAGE1_BLOCKS = 3


class Pipeline:
    """A run from its plan to the store, composed of three parts: the session source
    (what is measured and how sessions are named: RunSessions, a soak's, a stored
    run's), the schedule (where and in what order sessions run: LocalSchedule, a
    cluster's) and the executor (what starts servers and measures: real or recorded).
    The pipeline itself keeps the run's record: its status, metadata, sessions, cells
    and adaptive rounds in the store."""

    def __init__(
        self,
        experiment: Experiment,
        options: RunOptions,
        progress: Progress | None = None,
        stop_requested: Callable[[], bool] | None = None,
        *,
        executor: Executor,
        sessions: RunSessions | None = None,
        schedule: Schedule | None = None,
    ) -> None:
        self.experiment = experiment
        self.options = options
        self.progress = progress or SilentProgress()
        self.stop_requested = stop_requested or (lambda: False)
        # What starts the servers and measures; the scheduler here decides the rest.
        self.executor = executor
        self.sessions = sessions or RunSessions()
        self.schedule: Schedule = schedule or LocalSchedule()
        # Why the setups' servers cannot be up at once, when the design asks for it.
        self.concurrency_problem = concurrency_problem(experiment)
        self.interleaved = experiment.design == INTERLEAVED and self.concurrency_problem is None
        self.stage1_blocks: int | None = None  # set once --target-ci's first stage is done
        self.runtime_dir: str | None = None  # where the servers keep their state (root)
        # What every session records as the host that measured it (a cluster unit: the
        # worker's --name).
        self.host_name = socket.gethostname()
        self.store_lost: EnvironmentLost | None = None  # the store failed saving a cell

    def execute(self) -> RunOutcome:
        # Before anything is created or measured: a cluster without hosts is one line.
        with self.schedule.connected():
            return self._execute_here()

    def _execute_here(self) -> RunOutcome:
        experiment, options = self.experiment, self.options
        check_writable(options.out_dir)
        with locks.lock_directory(options.out_dir):
            # Holding the directory's lock, any server recorded under it is an orphan of
            # a harness that died: stop it before its files are reused.
            orphans = self.executor.stop_leftovers(options.out_dir)
            builds = self.executor.resolve_builds(experiment)
            store = open_store(options.store_target)
            try:
                return self._execute(store, builds, orphans)
            finally:
                store.close()

    def _execute(
        self, store: ResultsStore, builds: dict[str | None, Build], orphans: list[int]
    ) -> RunOutcome:
        experiment, options = self.experiment, self.options
        run_id = (
            self.sessions.resume_run_id(store, experiment, options.extra_metadata)
            if options.resume
            else new_run_id(store, experiment)
        )
        check_reports_dir(options.out_dir, store, run_id)
        with store.lock_run(run_id), self.executor.server_state(run_id) as state:
            self.runtime_dir = state
            return self._execute_locked(store, builds, orphans, run_id)

    def _execute_locked(
        self,
        store: ResultsStore,
        builds: dict[str | None, Build],
        orphans: list[int],
        run_id: str,
    ) -> RunOutcome:
        experiment, options = self.experiment, self.options
        setups = setup_infos(experiment, builds)
        metadata = self._run_metadata(builds)
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

        if self.concurrency_problem is not None:
            outcome_notes = [
                f"measured one server at a time (design sequential), not interleaved: "
                f"{self.concurrency_problem}"
            ]
        else:
            outcome_notes = []
        if experiment.design_why is not None:
            outcome_notes.append(f"design {experiment.design_why}")
        if options.resume:
            # The metadata is written anew; what earlier attempts found (a lost unit, the
            # orphans they stopped) stays part of the run's story.
            earlier = store.load_run_header(run_id).metadata.notes or []
            outcome_notes = [*earlier, *(n for n in outcome_notes if n not in earlier)]
        done = self.sessions.finished_keys(store, run_id, experiment)
        sessions = self.sessions.plan(experiment)
        total = sum(len(s.cells) for s in sessions)
        skipped = sum(1 for s in sessions for c in s.cells if c.key in done)
        self.progress.start(total, skipped)
        outcome = RunOutcome(result=result, skipped=skipped, notes=outcome_notes)
        if orphans:
            outcome.notes.append(
                f"stopped {len(orphans)} server(s) left running by an earlier run whose "
                "harness died: PID " + ", ".join(str(pid) for pid in orphans)
            )
        store.set_status(run_id, STATUS_RUNNING)
        # Anything but a normal end (a bug, SystemExit, a signal) leaves the run "failed"
        # or "interrupted" in the store, never "finished".
        status = STATUS_RUN_FAILED
        started = self.executor.now()
        try:
            self._run_sessions(store, run_id, sessions, done, builds, outcome)
            if options.target_ci_pct is not None:
                self._repeat_until_narrow(store, run_id, metadata, builds, outcome, started)
            status = STATUS_FINISHED
            outcome.notes[:] = self.sessions.completed_notes(outcome.notes)
        except KeyboardInterrupt:
            status = STATUS_INTERRUPTED
            outcome.aborted = "interrupted"
        except ServerStartError as exc:
            outcome.aborted = str(exc)
            # A failed setup, as a crashed server is: the run keeps why with its cells.
            outcome.notes += [str(exc)] if isinstance(exc, SettingNotTaken) else []
            # A unit lost with its benchmark host (cluster.UnitsLost) leaves the run
            # "interrupted", resumable, rather than "failed".
            status = getattr(exc, "run_status", status)
        except EnvironmentLost as exc:
            # The store or its disk went away (full, failing, a lost connection): the
            # cells committed before are kept, and the run ends as an abort, not a bug.
            outcome.aborted = str(exc)
        except SystemExit:
            status = STATUS_INTERRUPTED
            raise
        finally:
            self._record_end(store, run_id, metadata, outcome, status)
        outcome.result = store.load_run(run_id)
        return outcome

    def _record_end(
        self,
        store: ResultsStore,
        run_id: str,
        metadata: RunMetadata,
        outcome: RunOutcome,
        status: str,
    ) -> None:
        """The run's notes and status into the store; on a store that failed mid-run
        this fails too, and the first failure (already in outcome.aborted) is the one
        to tell: the run then reads as died, and --resume goes on from its cells."""
        try:
            if outcome.notes:
                metadata.notes = outcome.notes
                store.update_metadata(run_id, metadata)
            if self.options.target_ci_pct is not None and outcome.adaptive_stop is None:
                outcome.adaptive_stop = (
                    "interrupted" if outcome.aborted == "interrupted" else "run failed"
                )
                self._record_adaptive(store, run_id, metadata, outcome)
            store.finish_run(run_id, status)
        except EnvironmentLost:
            if outcome.aborted is None or outcome.aborted == "interrupted":
                raise

    def _run_metadata(self, builds: dict[str | None, Build]) -> RunMetadata:
        """What a run records of its host, versions, dataset, durations and design."""
        experiment, options = self.experiment, self.options
        metadata = RunMetadata(
            host=host_facts(),
            experiment_file=experiment.source,
            server_versions=sorted({b.label for b in builds.values()}),
            allocators={
                s.name: AllocatorRecord(version=s.allocator.version, library=s.allocator.path)
                for s in experiment.setups
            },
            dataset=DatasetRecord(
                tables=experiment.dataset.tables,
                rows=experiment.dataset.rows,
                cache_bytes=experiment.dataset.cache_bytes,
            ),
            durations=Durations(
                warmup_s=experiment.warmup_s,
                max_warmup_s=experiment.max_warmup_s,
                step_s=experiment.duration_s,
            ),
            threads=experiment.threads,
            engines=[e.name for e in experiment.engines],
            steps=[s.label for s in experiment.steps],
            repeats=experiment.repeats,
            design=self._design_record(),
        )
        # Assigned, not given: a run records its min_effect even when None (null).
        metadata.min_effect = (
            options.min_effect if options.min_effect is not None else experiment.min_effect
        )
        decision = experiment.decision
        if decision is not None:
            metadata.decision = DecisionRecord(
                priorities=list(decision.priorities) if decision.priorities else None,
                memory_budget_bytes=decision.memory_budget_bytes,
                max_loss=dict(decision.max_loss) or None,
            )
        metadata.update_from_dict(options.extra_metadata.to_dict())
        if self.runtime_dir is not None:
            metadata.runtime_dir = self.runtime_dir
        return metadata

    def _run_sessions(
        self,
        store: ResultsStore,
        run_id: str,
        sessions: list[PlannedSession],
        done: set[tuple[str, str, str, int, int]],
        builds: dict[str | None, Build],
        outcome: RunOutcome,
    ) -> None:
        before = outcome.measured
        try:
            self.schedule.run(self, store, run_id, sessions, done, builds, outcome)
        finally:
            host = self.host_name if outcome.measured > before else None
            self.sessions.sessions_ran(store, run_id, self.experiment, outcome, builds, host)

    def _design_record(self) -> DesignRecord:
        experiment = self.experiment
        record = DesignRecord(
            asked=experiment.design, used=INTERLEAVED if self.interleaved else SEQUENTIAL
        )
        if self.interleaved:
            record.slice_s = experiment.slice_s
            record.slices_per_cell = slices_per_cell(experiment)
            if experiment.alternate == TURNS:
                record.alternate = TURNS
                record.settle_rounds = experiment.settle_rounds
        if experiment.design_why is not None:
            record.asked = AUTO
            record.why = experiment.design_why
            record.budget_s = experiment.design_budget_s
            record.widths = experiment.design_widths
            record.unranked = experiment.design_unranked
        if self.concurrency_problem is not None:
            record.why = "; ".join(w for w in (record.why, self.concurrency_problem) if w)
        return self.sessions.design_record(record)

    # --- adaptive repetition --------------------------------------------------------------

    def _repeat_until_narrow(
        self,
        store: ResultsStore,
        run_id: str,
        metadata: RunMetadata,
        builds: dict[str | None, Build],
        outcome: RunOutcome,
        started: float,
    ) -> None:
        """Add blocks of the cells whose interval is still too wide (Stein's two stages).

        The first STAGE1_BLOCKS blocks (or the experiment's repeats, if more) run for every
        cell; their spread then decides, cell by cell, how many blocks it needs, and gives
        its interval's width, whatever the later blocks show. Stopping on a width computed
        from all blocks would stop when the spread happened to look small, and the
        intervals would cover less than 95% (a simulation in the tests shows both).
        """
        options, experiment = self.options, self.experiment
        assert options.target_ci_pct is not None
        stage1 = max(experiment.repeats, STAGE1_BLOCKS)
        while True:
            current = store.load_run(run_id, with_samples=False)
            repeat = 1 + max((c.repeat for c in current.cells), default=-1)
            outcome.repeats_done = repeat
            if repeat >= stage1:
                self.stage1_blocks = stage1
                # The loaded copy's intervals (wide_cells) follow Stein's rule from now on.
                current.metadata.adaptive = current.metadata.adaptive or AdaptiveRecord()
                current.metadata.adaptive.stage1_blocks = stage1
            outcome.not_converged = wide_cells(current, options.target_ci_pct)
            if not outcome.not_converged:
                outcome.adaptive_stop = "converged"
                break
            if repeat >= options.max_repeats:
                outcome.adaptive_stop = "max repeats"
                break
            if repeat < stage1:
                wanted = None
                reason = f"first stage: {stage1} blocks of every cell before the spread decides"
            else:
                wanted = cells_to_repeat(outcome.not_converged, experiment.base)
                reason = (
                    f"{len(outcome.not_converged)} relative QPS intervals wider than "
                    f"{options.target_ci_pct:g} points"
                )
            sessions = plan_extra_round(experiment, repeat, wanted)
            cells = sum(len(s.cells) for s in sessions)
            elapsed = self.executor.now() - started
            per_cell = elapsed / outcome.measured if outcome.measured else cell_estimate(experiment)
            if elapsed + cells * per_cell > options.budget_s:
                outcome.adaptive_stop = "budget"
                break
            self._record_adaptive(store, run_id, metadata, outcome)
            self.progress.round_started(repeat, cells, reason)
            self._run_sessions(store, run_id, sessions, set(), builds, outcome)
        self._record_adaptive(store, run_id, metadata, outcome)

    def _record_adaptive(
        self, store: ResultsStore, run_id: str, metadata: RunMetadata, outcome: RunOutcome
    ) -> None:
        metadata.adaptive = AdaptiveRecord(
            target_ci_pct=self.options.target_ci_pct,
            budget_s=self.options.budget_s,
            max_repeats=self.options.max_repeats,
            rounds=outcome.repeats_done or self.experiment.repeats,
            stopped=outcome.adaptive_stop or "running",
            not_converged=[w.to_dict() for w in outcome.not_converged],
            stage1_blocks=self.stage1_blocks,
        )
        store.update_metadata(run_id, metadata)

    # --- sessions and cells ---------------------------------------------------------------

    def _run_context(self) -> RunContext:
        # Built per use, never stored: the pipeline's attributes stay the one source.
        return RunContext(
            experiment=self.experiment,
            out_dir=self.options.out_dir,
            keep_datadirs=self.options.keep_datadirs,
            progress=self.progress,
            stop_requested=self.stop_requested,
            takes_account=lambda planned: self.sessions.takes_account(self.experiment, planned),
        )

    def begin_session(
        self,
        store: ResultsStore,
        run_id: str,
        planned: PlannedSession,
        attempt: int,
        builds: dict[str | None, Build],
    ) -> Session:
        """Start a server for the session's setup, warm its cache, record it."""
        build = builds[self.experiment.setup(planned.setup).basedir]
        session_id = self.sessions.session_id(store, run_id, planned, attempt, self.host_name)
        live = self.executor.start_session(self._run_context(), planned, session_id, build)
        live.info.host = live.info.host or self.host_name
        try:
            store.save_session(run_id, live.info)
            self.sessions.session_started(self.experiment, live)
        except BaseException:
            # Not yet the caller's to stop: a store (or a soak's events) failing here
            # leaves no server.
            self.executor.stop_session(self._run_context(), live)
            raise
        return live

    def end_session(
        self, store: ResultsStore, run_id: str, live: Session, outcome: RunOutcome
    ) -> None:
        try:
            try:
                self.sessions.session_ending(live)
            finally:
                self.executor.stop_session(self._run_context(), live)
        finally:
            info = live.info
            try:
                if info.peak_rss_bytes is None:
                    info.peak_rss_bytes = store.max_session_value(run_id, info.id, "rss")
                    info.peak_vsz_bytes = store.max_session_value(run_id, info.id, "vsz")
                store.save_session(run_id, info)
            except EnvironmentLost:
                # The store failed under a cell already: that failure is the one to tell.
                if self.store_lost is None:
                    raise
            for note in live.notes:
                if note not in outcome.notes:
                    outcome.notes.append(note)

    def save_cell(self, store: ResultsStore, run_id: str, cell: Cell, outcome: RunOutcome) -> None:
        try:
            store.save_cell(run_id, cell)
        except EnvironmentLost as exc:
            self.store_lost = EnvironmentLost(
                f"cell {cell.setup}/{cell.engine}/{cell.step}/{cell.threads}t was measured "
                f"but could not be saved: {exc}"
            )
            raise self.store_lost from exc
        outcome.measured += 1
        self.progress.cell_finished(cell)
        if cell.status != STATUS_OK:
            outcome.failures.append(
                f"{cell.setup}/{cell.engine}/{cell.step}/{cell.threads}t: "
                f"{cell.status} ({cell.error})"
            )
        elif cell.error:
            # Measured, but not cleanly (a stall): the run's notes say so too.
            outcome.notes.append(
                f"{cell.setup}/{cell.engine}/{cell.step}/{cell.threads}t, repeat "
                f"{cell.repeat + 1}: {cell.error}"
            )

    def setup_not_taken(
        self,
        store: ResultsStore,
        run_id: str,
        cells: list[PlannedCell],
        exc: SettingNotTaken,
        outcome: RunOutcome,
    ) -> None:
        """A setup whose server did not take its allocator or a setting: its cells are
        failed ones with why, as a crashed server's are, and the run goes on with the
        other setups. The base setup's stops the run: every finding is against it, so
        nothing the others measured could be read."""
        if cells and cells[0].setup == self.experiment.base:
            raise exc
        for planned in cells:
            cell = planned_cell(planned, self.experiment, status=STATUS_FAILED, error=str(exc))
            self.save_cell(store, run_id, cell, outcome)
        if str(exc) not in outcome.notes:
            outcome.notes.append(str(exc))

    def measure_together(
        self, pairs: list[tuple[Session, PlannedCell]], interleave: bool
    ) -> list[Cell]:
        """One cell per (session, planned cell), measured by the executor."""
        return self.executor.measure(self._run_context(), pairs, interleave)


__all__ = ["Pipeline"]
