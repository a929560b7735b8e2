"""The run pipeline's scheduling, on recorded runs replayed by RecordedExecutor.

No server starts here: the executor replays cells real runs measured (fixtures), so the
scheduler's decisions (plan, blocks, adaptive rounds and their stopping, resume, what a
dead server changes, Ctrl-C) are tested in seconds. tests/test_interleaved_design.py and
tests/test_run_e2e.py test the same pipeline on real servers.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import pytest

from mallocbench.executors.recorded import RecordedExecutor, ScriptedDeath
from mallocbench.model.results import STATUS_OK, STATUS_OOM, Cell, RunResult
from mallocbench.run.experiment import Experiment, PlannedCell
from mallocbench.run.loading import load
from mallocbench.run.options import RunOptions, RunOutcome, SilentProgress
from mallocbench.run.planning import plan
from mallocbench.run.runner import STAGE1_BLOCKS, Pipeline
from mallocbench.run.source import RunSessions
from mallocbench.soak.runner import SoakSessions, SoakSpec, soak_experiment
from mallocbench.store import open_store
from mallocbench.store.loading import load_result

FIXTURES = Path(__file__).parent / "fixtures"
# glibc vs je on InnoDB and MyRocks, 3 steps x 1 and 2 clients, 2 repeats: 48 cells.
SMALL = FIXTURES / "results-small.json"
# An A/A run: glibc against itself, 1 cell, 3 interleaved blocks (/tmp/mb-bench-aa/run00).
AA = FIXTURES / "results-aa.json"


def experiment_of(
    recording: RunResult, tmp_path: Path, overrides: Sequence[str] = ()
) -> Experiment:
    """The recorded experiment, loaded as a user's file with --set overrides would be."""
    path = tmp_path / f"{recording.experiment}.toml"
    path.write_text(recording.experiment_text)
    return load(path, list(overrides))


class StopAfter(SilentProgress):
    """Asks the run to stop (Ctrl-C) once `cells` cells have finished."""

    def __init__(self, cells: int) -> None:
        self.cells = cells
        self.finished: list[Cell] = []

    def cell_finished(self, cell: Cell) -> None:
        self.finished.append(cell)

    def requested(self) -> bool:
        return len(self.finished) >= self.cells


def run_status(out: Path, run_id: str) -> str:
    store = open_store(out / "results.sqlite", readonly=True)
    try:
        return str(next(r["status"] for r in store.list_runs() if r["run_id"] == run_id))
    finally:
        store.close()


def replay(
    experiment: Experiment,
    executor: RecordedExecutor,
    out: Path,
    sessions: RunSessions | None = None,
    progress: StopAfter | None = None,
    **options: object,
) -> RunOutcome:
    started = time.monotonic()
    outcome = Pipeline(
        experiment,
        RunOptions(out_dir=out, **options),  # type: ignore[arg-type]
        progress,
        progress.requested if progress else None,
        executor=executor,
        sessions=sessions,
    ).execute()
    # A replay never waits: seconds, not the minutes the recorded runs took. The bound is
    # loose because a loaded 2-core host stretched 2 s of work past 10 s.
    assert time.monotonic() - started < 60
    return outcome


def groups(cells: list[Cell], repeat: int) -> set[tuple[str, str, int]]:
    """The (engine, step, threads) measured in a repeat."""
    return {(c.engine, c.step, c.threads) for c in cells if c.repeat == repeat}


# --- adaptive repetition (--target-ci) -----------------------------------------------------


def test_target_ci_converges_when_the_recorded_spread_allows(tmp_path: Path) -> None:
    recording = load_result(AA)
    experiment = experiment_of(recording, tmp_path)
    outcome = replay(experiment, RecordedExecutor(recording), tmp_path / "out", target_ci_pct=30)
    assert outcome.aborted is None and outcome.adaptive_stop == "converged"
    assert outcome.not_converged == []
    adaptive = outcome.result.metadata.adaptive
    assert adaptive is not None
    assert adaptive.stopped == "converged" and adaptive.not_converged == []
    assert adaptive.stage1_blocks == STAGE1_BLOCKS
    assert outcome.repeats_done is not None
    assert adaptive.rounds == outcome.repeats_done >= STAGE1_BLOCKS
    assert run_status(tmp_path / "out", outcome.result.run_id) == "finished"


def test_target_ci_stops_at_max_repeats_when_the_spread_is_too_wide(tmp_path: Path) -> None:
    recording = load_result(AA)
    experiment = experiment_of(recording, tmp_path)
    outcome = replay(
        experiment,
        RecordedExecutor(recording),
        tmp_path / "out",
        target_ci_pct=1,
        max_repeats=6,
    )
    assert outcome.adaptive_stop == "max repeats" and outcome.repeats_done == 6
    assert {c.repeat for c in outcome.result.cells} == set(range(6))
    adaptive = outcome.result.metadata.adaptive
    assert adaptive is not None
    assert adaptive.stopped == "max repeats" and adaptive.rounds == 6
    assert adaptive.not_converged is not None
    (wide,) = adaptive.not_converged
    assert wide["setup"] == "glibc-b" and wide["width_pct"] > 1


def test_target_ci_stops_before_a_round_would_overspend_the_budget(tmp_path: Path) -> None:
    recording = load_result(AA)
    experiment = experiment_of(recording, tmp_path)
    executor = RecordedExecutor(recording)
    started = executor.now()
    outcome = replay(
        experiment, executor, tmp_path / "out", target_ci_pct=1, budget_s=150, max_repeats=50
    )
    assert outcome.adaptive_stop == "budget"
    assert outcome.result.metadata.adaptive is not None
    assert outcome.result.metadata.adaptive.stopped == "budget"
    # The virtual clock ran on the recorded seconds (about 11 s a cell here).
    spent = executor.now() - started
    assert 100 < spent <= 150
    assert outcome.repeats_done is not None
    assert STAGE1_BLOCKS <= outcome.repeats_done < 50


def test_stage_one_runs_every_cell_then_only_the_wide_ones(tmp_path: Path) -> None:
    recording = load_result(SMALL)
    experiment = experiment_of(recording, tmp_path)
    executor = RecordedExecutor(recording, seed=1)
    outcome = replay(experiment, executor, tmp_path / "out", target_ci_pct=30, max_repeats=6)
    cells = outcome.result.cells
    every = groups(cells, 0)
    assert len(every) == 12 and len(cells) > 0
    for repeat in range(STAGE1_BLOCKS):
        assert groups(cells, repeat) == every
        assert Counter(c.setup for c in cells if c.repeat == repeat) == {"glibc": 12, "je": 12}
    # After the first stage the spread decided: the rounds shrink to the wide cells,
    # each measured with its base (a relative value needs both).
    later = [groups(cells, r) for r in range(STAGE1_BLOCKS, outcome.repeats_done or 0)]
    assert later and len(later[0]) < len(every)
    assert all(after <= before for before, after in zip(later, later[1:], strict=False))
    for repeat in range(STAGE1_BLOCKS, outcome.repeats_done or 0):
        setups = Counter(c.setup for c in cells if c.repeat == repeat)
        assert setups["glibc"] == setups["je"]
    adaptive = outcome.result.metadata.adaptive
    assert adaptive is not None
    assert adaptive.stage1_blocks == STAGE1_BLOCKS
    assert adaptive.stopped == outcome.adaptive_stop == "max repeats"
    assert adaptive.not_converged is not None
    wide = {(w["engine"], w["step"], w["threads"]) for w in adaptive.not_converged}
    assert wide and wide <= later[-1]


def test_repeats_beyond_the_recording_are_drawn_per_block_and_seeded(tmp_path: Path) -> None:
    recording = load_result(SMALL)
    experiment = experiment_of(recording, tmp_path)
    step = experiment.steps[0]

    def drawn(seed: int, repeat: int) -> tuple[int, int]:
        executor = RecordedExecutor(recording, seed=seed)
        pair = [
            executor.recorded_cell(PlannedCell(setup, "innodb", step, 1, repeat))
            for setup in ("glibc", "je")
        ]
        return (pair[0].repeat, pair[1].repeat)

    # A recorded repeat is replayed as recorded.
    assert drawn(0, 1) == (1, 1)
    draws = [drawn(0, repeat) for repeat in range(2, 12)]
    # Both setups of a block replay the same recorded block: they stay paired.
    assert all(glibc == je for glibc, je in draws)
    assert {glibc for glibc, _ in draws} == {0, 1}
    assert draws == [drawn(0, repeat) for repeat in range(2, 12)]


# --- resume and Ctrl-C ---------------------------------------------------------------------


def test_stop_requested_mid_run_leaves_it_interrupted_with_its_finished_cells(
    tmp_path: Path,
) -> None:
    recording = load_result(SMALL)
    experiment = experiment_of(recording, tmp_path)
    progress = StopAfter(cells=7)
    outcome = replay(experiment, RecordedExecutor(recording), tmp_path / "out", progress=progress)
    assert outcome.aborted == "interrupted"
    assert run_status(tmp_path / "out", outcome.result.run_id) == "interrupted"
    # Interleaved: the stop is seen after a block's cell pair, which is kept whole.
    assert len(outcome.result.cells) == len(progress.finished) == 8
    assert {c.key for c in outcome.result.cells} == {c.key for c in progress.finished}


def test_resume_measures_nothing_already_stored(tmp_path: Path) -> None:
    recording = load_result(SMALL)
    experiment = experiment_of(recording, tmp_path)
    out = tmp_path / "out"
    first = replay(experiment, RecordedExecutor(recording), out, progress=StopAfter(cells=10))
    kept = {c.key for c in first.result.cells}
    assert first.aborted == "interrupted" and 0 < len(kept) < 48

    executor = RecordedExecutor(recording)
    second = replay(experiment, executor, out, resume=True)
    assert second.result.run_id == first.result.run_id
    measured = [c.key for call in executor.calls for c in call.cells]
    assert second.skipped == len(kept) and second.measured == len(measured) == 48 - len(kept)
    assert not kept & set(measured)
    assert len(second.result.cells) == 48
    assert run_status(out, second.result.run_id) == "finished"

    again = RecordedExecutor(recording)
    third = replay(experiment, again, out, resume=True)
    assert third.measured == 0 and again.calls == [] and again.sessions == []
    assert third.skipped == 48


def test_a_resume_keeps_what_earlier_attempts_noted(tmp_path: Path) -> None:
    recording = load_result(SMALL)
    experiment = experiment_of(recording, tmp_path)
    out = tmp_path / "out"
    first = replay(experiment, RecordedExecutor(recording), out, progress=StopAfter(cells=10))
    store = open_store(out / "results.sqlite")
    try:
        interrupted = store.load_run(first.result.run_id, with_samples=False).metadata
        interrupted.notes = ["stopped 1 server(s) left running by an earlier run"]
        store.update_metadata(first.result.run_id, interrupted)
    finally:
        store.close()
    # The resume writes the run's metadata anew (here its adaptive record, as it goes).
    second = replay(experiment, RecordedExecutor(recording), out, resume=True, target_ci_pct=30)
    assert second.result.metadata.adaptive is not None
    assert second.result.metadata.notes == interrupted.notes


# --- the two designs ---------------------------------------------------------------------------


def test_interleaved_blocks_hold_every_setup_and_rotate(tmp_path: Path) -> None:
    recording = load_result(SMALL)
    # Two slices a cell (6 s in slices of 3 s), so the rotation shows inside a block too.
    experiment = experiment_of(recording, tmp_path, ["durations.step=6", "durations.slice=3"])
    executor = RecordedExecutor(recording)
    outcome = replay(experiment, executor, tmp_path / "out")
    assert outcome.result.metadata.design is not None
    assert outcome.result.metadata.design.used == "interleaved"
    assert len(executor.calls) == 24
    for call in executor.calls:
        assert call.interleave and len(call.cells) == 2
        assert {c.setup for c in call.cells} == {"glibc", "je"}
        assert len({(c.engine, c.step.label, c.threads, c.repeat) for c in call.cells}) == 1
        first, second = (c.setup for c in call.cells)
        assert call.slice_order == (first, second, second, first)
    # The block order turns with the repeat: A B, then B A.
    by_repeat = {c.cells[0].repeat: [p.setup for p in c.cells] for c in executor.calls}
    assert by_repeat[0] == ["glibc", "je"] and by_repeat[1] == ["je", "glibc"]
    # One server per setup and block, up for all of the block's cells.
    started = Counter(s.info.id for s in executor.sessions)
    assert len(started) == 8 and set(started.values()) == {1}
    assert {(c.setup, c.engine, c.repeat): c.session for c in outcome.result.cells} == {
        (s.setup, s.engine, s.repeat): s.id for s in outcome.result.sessions
    }


def test_sequential_design_runs_one_session_per_setup_engine_and_repeat(tmp_path: Path) -> None:
    recording = load_result(SMALL)
    experiment = experiment_of(recording, tmp_path, ['design="sequential"'])
    executor = RecordedExecutor(recording)
    outcome = replay(experiment, executor, tmp_path / "out")
    assert outcome.result.metadata.design is not None
    assert outcome.result.metadata.design.used == "sequential"
    assert all(not call.interleave and len(call.cells) == 1 for call in executor.calls)
    ids = [s.info.id for s in executor.sessions]
    assert len(ids) == len(set(ids)) == 2 * 2 * 2
    assert set(ids) == {
        f"{s}.{e}.r{r}" for s in ("glibc", "je") for e in ("innodb", "myrocks") for r in (0, 1)
    }
    # A session's cells run back to back on its server, none of another's between.
    runs = [call.sessions[0] for call in executor.calls]
    assert [k for i, k in enumerate(runs) if i == 0 or runs[i - 1] != k] == ids
    assert all(c.session == f"{c.setup}.{c.engine}.r{c.repeat}" for c in outcome.result.cells)


# --- a server that dies ----------------------------------------------------------------------


def death_in(experiment: Experiment, session_id: str, index: int) -> ScriptedDeath:
    planned = next(s for s in plan(experiment) if s.id == session_id).cells[index]
    return ScriptedDeath(*planned.key, status=STATUS_OOM)


def test_a_death_mid_session_is_recorded_and_the_server_replaced(tmp_path: Path) -> None:
    recording = load_result(SMALL)
    experiment = experiment_of(recording, tmp_path, ['design="sequential"'])
    death = death_in(experiment, "je.innodb.r0", 1)
    executor = RecordedExecutor(recording, deaths=[death])
    outcome = replay(experiment, executor, tmp_path / "out")
    assert outcome.aborted is None and len(outcome.result.cells) == 48
    (dead,) = [c for c in outcome.result.cells if c.status != STATUS_OK]
    assert dead.key == death.key and dead.status == STATUS_OOM and dead.qps is None
    assert dead.session == "je.innodb.r0" and "scripted" in (dead.error or "")
    assert len(outcome.failures) == 1 and "oom" in outcome.failures[0]
    sessions = {s.id: s for s in outcome.result.sessions}
    assert sessions["je.innodb.r0"].status == STATUS_OOM
    # The session's remaining cells ran on a new server, and only they.
    replaced = [c for c in outcome.result.cells if c.session == "je.innodb.r0.2"]
    assert len(replaced) == 4 and sessions["je.innodb.r0.2"].status == STATUS_OK
    assert len([c for c in outcome.result.cells if c.session == "je.innodb.r0"]) == 2


def test_a_death_in_an_interleaved_block_replaces_that_setups_server_only(
    tmp_path: Path,
) -> None:
    recording = load_result(SMALL)
    experiment = experiment_of(recording, tmp_path)
    death = death_in(experiment, "glibc.myrocks.r1", 2)
    executor = RecordedExecutor(recording, deaths=[death])
    outcome = replay(experiment, executor, tmp_path / "out")
    assert len(outcome.result.cells) == 48
    by_key = {c.key: c for c in outcome.result.cells}
    assert by_key[death.key].status == STATUS_OOM
    block = [c for c in outcome.result.cells if c.engine == "myrocks" and c.repeat == 1]
    assert Counter(c.session for c in block) == {
        "je.myrocks.r1": 6,
        "glibc.myrocks.r1": 3,
        "glibc.myrocks.r1.2": 3,
    }


def test_a_death_ends_the_setups_soak_instead(tmp_path: Path) -> None:
    recording = load_result(SMALL)
    experiment = experiment_of(
        recording, tmp_path, ['steps=["point-query"]', "threads=[1]", 'engines=["innodb"]']
    )
    soak = soak_experiment(experiment, SoakSpec(duration_s=40, segment_s=10))
    death = ScriptedDeath("je", "innodb", soak.steps[0].label, 1, 1, status=STATUS_OOM)
    executor = RecordedExecutor(recording, deaths=[death])
    outcome = replay(soak, executor, tmp_path / "out", sessions=SoakSessions())
    assert outcome.aborted is None
    segments = Counter(c.setup for c in outcome.result.cells)
    # glibc soaked its 4 segments (2 recorded, 2 drawn); je's soak ended with its server.
    assert segments == {"glibc": 4, "je": 2}
    assert [s.id for s in outcome.result.sessions if s.setup == "je"] == ["je.innodb.r0"]
    assert {c.status for c in outcome.result.cells if c.setup == "je"} == {STATUS_OK, STATUS_OOM}


@pytest.mark.parametrize("source", [SMALL, AA])
def test_a_recording_loads_from_its_results_json_and_replays_every_cell(
    tmp_path: Path, source: Path
) -> None:
    executor = RecordedExecutor.from_source(source)
    experiment = experiment_of(executor.recording, tmp_path)
    outcome = replay(experiment, executor, tmp_path / "out")
    recorded = {c.key: c for c in executor.recording.cells}
    assert {c.key for c in outcome.result.cells} == set(recorded)
    for cell in outcome.result.cells:
        assert cell.qps == recorded[cell.key].qps and cell.status == recorded[cell.key].status
