"""A unit on a benchmark host: run as a subprocess of its Dask worker, it measures its
block's cells into the shared store and announces its host (a replay's unit, in
cluster.replays, runs a repeat of every setup, and the worker relays each replay as
it ends).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import psutil

from mallocbench.cluster.units import (
    HOSTS_TOPIC,
    POLL_S,
    WORK_DIR_ENV,
    StoredRunSessions,
    Unit,
    UnitFailed,
    experiment_from_run,
    host_record,
    replays_topic,
    stop_event_name,
    unit_names,
)
from mallocbench.errors import MallocbenchError
from mallocbench.executors.real import RealExecutor
from mallocbench.files import write_text_atomic
from mallocbench.model.results import Cell
from mallocbench.run.executor import RunContext, Session
from mallocbench.run.experiment import PlannedCell
from mallocbench.run.options import RunOptions, RunOutcome
from mallocbench.run.runner import Pipeline
from mallocbench.servers.orphans import Orphan, stop_orphans
from mallocbench.servers.outcome import ServerStartError
from mallocbench.store import locks, open_store


def run_unit_task(spec: dict[str, Any]) -> dict[str, Any]:
    """The Dask task: run one unit as a subprocess of this worker, return its result."""
    from distributed import Event, get_worker

    worker = get_worker()
    host = str(worker.name)
    work_dir = Path(os.environ.get(WORK_DIR_ENV) or worker.local_directory)
    safe_run = re.sub(r"[^A-Za-z0-9_.+-]", "_", spec["run_id"])
    out_dir = work_dir / "runs" / safe_run
    out_dir.mkdir(parents=True, exist_ok=True)
    label, stem = unit_names(spec)
    result_path, host_path = out_dir / f"{stem}.result.json", out_dir / f"{stem}.host.json"
    result_path.unlink(missing_ok=True)
    host_path.unlink(missing_ok=True)
    for stale in out_dir.glob(f"{stem}.replayed-*.json"):
        stale.unlink()
    spec = {
        **spec,
        "host": host,
        "out_dir": str(out_dir),
        "worker_pid": os.getpid(),
        "result": str(result_path),
        "host_record": str(host_path),
        "relay": str(out_dir / f"{stem}.replayed-{{}}.json"),
    }
    stop = Event(stop_event_name(spec["run_id"]))
    with open(out_dir / f"{stem}.log", "a") as log:
        # A session of its own: a signal to the worker's process group (a terminal's
        # Ctrl-C, a kill of the group) reaches the unit only through PR_SET_PDEATHSIG,
        # as a SIGTERM it answers like a local run, stopping its servers.
        proc = subprocess.Popen(
            [sys.executable, "-m", "mallocbench.cli", "_run-unit"],
            stdin=subprocess.PIPE,
            stdout=log,
            stderr=log,
            text=True,
            start_new_session=True,
        )
        assert proc.stdin is not None
        proc.stdin.write(json.dumps(spec))
        proc.stdin.close()
        signalled = announced = False
        relayed, looked = 0, time.monotonic()
        while True:
            try:
                code = proc.wait(timeout=RELAY_S)
                break
            except subprocess.TimeoutExpired:
                relayed = _relay_replays(worker, spec, relayed)
                # The rest asks the scheduler: at the driver's pace, not the relay's.
                if time.monotonic() - looked < POLL_S:
                    continue
                looked = time.monotonic()
                if not announced and host_path.is_file():
                    announced = _announce_host(worker, spec, host_path)
                if not signalled and stop.is_set():
                    proc.send_signal(signal.SIGTERM)
                    signalled = True
    _relay_replays(worker, spec, relayed)
    if not result_path.is_file():
        tail = (out_dir / f"{stem}.log").read_text(errors="replace").strip().splitlines()
        raise UnitFailed(
            f"unit {label} on {host} ended with status {code} and no result: "
            f"{tail[-1] if tail else 'no output'} (log: {out_dir / f'{stem}.log'})"
        )
    return dict(json.loads(result_path.read_text()))


# How soon a replay a unit finished is relayed to the scheduler (a look at a local file,
# no message unless there is one): a host killed meanwhile loses it as if under way.
RELAY_S = 0.2


def _relay_replays(worker: Any, spec: dict[str, Any], relayed: int) -> int:
    """Relay the replays the unit finished since `relayed` (cluster.replays writes each
    as it ends) to the scheduler's topic of the run; how many are relayed now."""
    while (path := Path(str(spec["relay"]).format(relayed))).is_file():
        worker.log_event(replays_topic(spec["run_id"]), json.loads(path.read_text()))
        relayed += 1
    return relayed


def _announce_host(worker: Any, spec: dict[str, Any], path: Path) -> bool:
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return False
    event = {"run_id": spec["run_id"], "host": spec["host"], "record": record}
    worker.log_event(HOSTS_TOPIC, event)
    return True


class _WorkerCpuExecutor(RealExecutor):
    """A unit's executor: measures as a local run does, and counts what the Dask worker
    process spent meanwhile (its share of the CPU the servers might have had)."""

    def __init__(self, worker_pid: int) -> None:
        super().__init__()
        self.worker = _process(worker_pid)
        self.cpu_s = 0.0
        self.wall_s = 0.0
        self.per_session: dict[str, tuple[float, float]] = {}

    def measure(
        self, run: RunContext, pairs: Sequence[tuple[Session, PlannedCell]], interleave: bool
    ) -> list[Cell]:
        before_cpu, before = _cpu_seconds(self.worker), time.monotonic()
        cells = super().measure(run, pairs, interleave)
        cpu, wall = _cpu_seconds(self.worker) - before_cpu, time.monotonic() - before
        if wall > 0 and self.worker is not None:
            self.cpu_s += cpu
            self.wall_s += wall
            for live, _ in pairs:
                total_cpu, total_wall = self.per_session.get(live.info.id, (0.0, 0.0))
                total_cpu, total_wall = total_cpu + cpu, total_wall + wall
                self.per_session[live.info.id] = (total_cpu, total_wall)
                live.info.worker_cpu_share = total_cpu / total_wall
        return cells


def _process(pid: int) -> psutil.Process | None:
    with contextlib.suppress(psutil.Error):
        return psutil.Process(pid)
    return None


def _cpu_seconds(process: psutil.Process | None) -> float:
    if process is None:
        return 0.0
    try:
        times = process.cpu_times()
    except psutil.Error:
        return 0.0
    return float(times.user + times.system)


def _other_runs_orphans(out_dir: Path) -> list[Orphan]:
    """Servers killed units of other runs left in this host's work directory.

    A directory nobody holds is free to clean; one whose lock is held belongs to a unit
    under way (two workers sharing a --work-dir) and is left alone.
    """
    stopped: list[Orphan] = []
    for other in sorted(p for p in out_dir.parent.iterdir() if p.is_dir() and p != out_dir):
        with contextlib.suppress(MallocbenchError), locks.lock_directory(other):
            stopped += stop_orphans(other / "servers")
    return stopped


def stop_left_servers(out_dir: Path, host: str) -> list[str]:
    """Stop the servers killed units left running in this host's work directory (this
    run's, and other runs' nobody holds), before anything is measured beside them; the
    note that says so, if any."""
    orphans = stop_orphans(out_dir / "servers") + _other_runs_orphans(out_dir)
    if not orphans:
        return []
    return [f"host {host}: stopped {len(orphans)} server(s) a killed unit left running"]


def run_unit(spec: dict[str, Any], stop_requested: Callable[[], bool]) -> dict[str, Any]:
    """Measure one unit's missing cells into the shared store; the result for the driver."""
    run_id, host = spec["run_id"], spec["host"]
    unit = Unit.from_dict(spec["unit"])
    out_dir = Path(spec["out_dir"])
    result: dict[str, Any] = {"host": host, "unit": unit.label, "aborted": None}
    # The driver holds the run's lock; a unit locks only its host's own directory, and
    # stops what a killed unit of this directory left running before reusing it.
    with locks.lock_directory(out_dir):
        left = stop_left_servers(out_dir, host)
        store = open_store(spec["store"])
        try:
            stored = store.load_run(run_id, with_samples=False)
            experiment = experiment_from_run(stored)
            options = RunOptions(
                out_dir=out_dir,
                store_path=spec["store"],
                keep_datadirs=bool(spec.get("keep_datadirs")),
            )
            # The driver records the hosts, from the units' results.
            sessions = StoredRunSessions(taken=store.session_ids(run_id), joins_hosts=False)
            executor = _WorkerCpuExecutor(spec["worker_pid"])
            pipeline = Pipeline(
                experiment,
                options,
                stop_requested=stop_requested,
                executor=executor,
                sessions=sessions,
            )
            pipeline.host_name = host
            builds = pipeline.executor.resolve_builds(experiment)
            result["metadata"] = host_record(experiment, builds).to_dict()
            announce = Path(spec["host_record"])
            write_text_atomic(announce, json.dumps(result["metadata"]))
            # The driver decided the design for the whole run; every host follows it.
            pipeline.interleaved = bool(spec["interleaved"])
            outcome = RunOutcome(result=stored, notes=left)
            done = store.finished_cell_keys(run_id)
            try:
                # The unit's own runtime directory (root): created here, gone when it ends.
                with pipeline.executor.server_state(f"{run_id}.{host}"):
                    pipeline._run_sessions(
                        store, run_id, unit.sessions(experiment), done, builds, outcome
                    )
            except KeyboardInterrupt:
                result["aborted"] = "interrupted"
            except ServerStartError as exc:
                result["aborted"] = str(exc)
        finally:
            store.close()
    result.update(
        {
            "measured": outcome.measured,
            "failures": outcome.failures,
            "notes": outcome.notes,
            "worker_cpu_s": executor.cpu_s,
            "measured_s": executor.wall_s,
            "worker_cpu_share": executor.cpu_s / executor.wall_s if executor.wall_s else None,
        }
    )
    return result


__all__ = ["run_unit", "run_unit_task", "stop_left_servers"]
