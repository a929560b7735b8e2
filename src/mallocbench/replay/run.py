"""A replay as a run of its own: the trace replayed under each setup, kept in the results
store like every run (its results in the run's metadata, `replay`, each replay committed
as it ends), so `report`, `runs` and every report format read it back."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from mallocbench.model.metadata import ReplayRecord, ReplayRun, RunMetadata
from mallocbench.model.results import RunResult, SetupInfo
from mallocbench.patterns.experiment import PatternSetup
from mallocbench.probes.system import host_facts
from mallocbench.replay import runner
from mallocbench.replay.trace import TraceInfo
from mallocbench.store.base import ResultsStore
from mallocbench.store.sqlite import STATUS_FINISHED, STATUS_INTERRUPTED, STATUS_RUN_FAILED


def new_result(
    info: TraceInfo,
    setups: Sequence[PatternSetup],
    timing: str,
    speed: float,
    repeats: int,
    min_effect: float | None,
    warnings: list[str],
    order: str = "recorded",
) -> RunResult:
    """The replay's run before anything was replayed: the trace, the setups, no results."""
    record = ReplayRecord(
        trace_path=str(info.path),
        trace={k: v for k, v in info.data.items() if k != "ideal_curve"},
        ideal_curve=list(info.data.get("ideal_curve") or []),
        timing=timing,
        speed=speed,
        repeats=repeats,
        setups=[
            {"name": s.name, "allocator": s.allocator.name, "knobs": dict(s.knobs)} for s in setups
        ],
        runs=[],
        warnings=list(warnings),
        order=order,
    )
    server = info.header.get("server_version") or None
    return RunResult(
        run_id=f"replay-{info.path.stem}-{time.strftime('%Y%m%d-%H%M%S')}",
        experiment=f"replay of {info.path.name}",
        base_setup=setups[0].name,
        metadata=RunMetadata(host=host_facts(), min_effect=min_effect, replay=record),
        setups=[
            SetupInfo(
                name=s.name,
                allocator=s.allocator.name,
                allocator_version=s.allocator.version,
                allocator_library=s.allocator.path,
                knobs=dict(s.knobs),
                server_version=server,
                description="replayed trace",
            )
            for s in setups
        ],
    )


# What every replay repeats of the trace's own account (kept once, in the record's
# `trace` and `ideal_curve`): not stored per replay.
TRACE_ONLY = frozenset({"trace", "status", "info", "end", "calls", "ideal_curve"})


def _unique_id(store: ResultsStore, run_id: str) -> str:
    candidate, n = run_id, 1
    while store.run_exists(candidate):
        n += 1
        candidate = f"{run_id}.{n}"
    return candidate


def crash_note(run: ReplayRun) -> str:
    """The run's note of a replay that died: the signal, then the call each replay thread
    was on, so the call can be found in the trace (and the trace replayed up to it)."""
    crash = run.data.get("crash") or {}
    where = "; ".join(crash.get("threads") or [])
    return f"{run.setup}, repeat {run.repeat + 1}: {run.error}" + (
        f"; where each thread was: {where}" if where else ""
    )


# Runs the given (setup, repeat) replays of a run's trace somewhere else than here (on
# a cluster), handing each to the callback as it ends, which commits it.
Replays = Callable[
    [RunResult, Path, list[tuple[PatternSetup, int]], Callable[[ReplayRun], None]], None
]


def committed(record: ReplayRecord) -> frozenset[tuple[str, int]]:
    """The (setup, repeat) replays the run holds: a resume never runs one again."""
    return frozenset((r.setup, r.repeat) for r in record.replay_runs)


def pending(record: ReplayRecord, setups: Sequence[PatternSetup]) -> list[tuple[PatternSetup, int]]:
    """The replays still to run, in the local order (repeat by repeat, setup by setup)."""
    done = committed(record)
    return [
        (setup, repeat)
        for repeat in range(record.repeats or 1)
        for setup in setups
        if (setup.name, repeat) not in done
    ]


def replay_run(
    result: RunResult,
    setups: Sequence[PatternSetup],
    trace: Path,
    store: ResultsStore | None,
    progress: Callable[[str], None] | None = None,
    finished: Callable[[ReplayRun], None] | None = None,
    until: float | None = None,
    elsewhere: Replays | None = None,
    resumed: bool = False,
) -> None:
    """Replay under every setup into `result` (and `store`, each replay as it ends);
    `progress` hears of each replay as it starts, `finished` once it is committed.
    `until`: only the trace's first that many seconds. `elsewhere`: where the replays
    run when not here. `resumed`: `result` is a run of `store` whose committed replays
    are kept and not run again."""
    record = result.metadata.replay
    assert record is not None, "new_result makes a replay's run"
    with contextlib.ExitStack() as held:
        if store is not None and not resumed:
            result.run_id = _unique_id(store, result.run_id)
            # Held while it replays, as a run's: `runs` reads a run nobody holds as died.
            held.enter_context(store.lock_run(result.run_id))
            store.create_run(result)
            for setup in result.setups:
                store.save_setup(result.run_id, setup)
        _replay_into(result, record, setups, trace, store, progress, finished, until, elsewhere)


def _replay_into(
    result: RunResult,
    record: ReplayRecord,
    setups: Sequence[PatternSetup],
    trace: Path,
    store: ResultsStore | None,
    progress: Callable[[str], None] | None,
    finished: Callable[[ReplayRun], None] | None,
    until: float | None,
    elsewhere: Replays | None,
) -> None:
    """replay_run's replays, each committed as it ends, and the run's status at the end."""

    def commit(run: ReplayRun) -> None:
        if (run.setup, run.repeat) in committed(record):
            return  # a unit a lost host finished after all: its replay is in already
        kept = ReplayRun(
            run.setup,
            run.repeat,
            run.status,
            {k: v for k, v in run.data.items() if k not in TRACE_ONLY},
            run.error,
        )
        record.runs = [*(record.runs or []), kept.to_dict()]
        if run.status == "crashed":
            result.metadata.notes = [*(result.metadata.notes or []), crash_note(run)]
        if store is not None:
            store.update_metadata(result.run_id, result.metadata)
        if finished is not None:
            finished(run)

    status = STATUS_RUN_FAILED
    try:
        if elsewhere is not None:
            elsewhere(result, trace, pending(record, setups), commit)
        else:
            runner.replay_all(
                setups,
                trace,
                record.repeats or 1,
                record.timing or "recorded",
                record.speed or 1.0,
                float((record.trace or {}).get("duration_s") or 0),
                progress=progress,
                on_run=commit,
                order=record.order or "recorded",
                until=until,
                done=committed(record),
            )
        status = STATUS_FINISHED
    except KeyboardInterrupt:
        status = STATUS_INTERRUPTED
        raise
    except Exception as exc:
        # Replays lost with their hosts leave the run interrupted: --resume completes it.
        status = getattr(exc, "run_status", STATUS_RUN_FAILED)
        raise
    finally:
        if store is not None:
            store.finish_run(result.run_id, status)
