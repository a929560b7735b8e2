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
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import signal
import statistics
import subprocess
import sys
import time
import tomllib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from mallocbench.analysis.comparability import MEMORY_TOLERANCE
from mallocbench.errors import MallocbenchError
from mallocbench.executors.real import RealExecutor
from mallocbench.files import write_text_atomic
from mallocbench.model.metadata import ClusterRecord, HostRecord, RunMetadata, WorkerCpuShare
from mallocbench.model.results import Cell, RunResult
from mallocbench.probes.system import host_facts
from mallocbench.run.executor import RunContext, Session
from mallocbench.run.experiment import Experiment, PlannedCell, PlannedSession
from mallocbench.run.loading import from_dict
from mallocbench.run.options import Progress, RunOptions, RunOutcome
from mallocbench.run.overrides import apply_overrides, recorded_set
from mallocbench.run.planning import blocks, plan_extra_round
from mallocbench.run.runner import Pipeline
from mallocbench.run.schedule import ScheduledRun
from mallocbench.run.source import RunSessions
from mallocbench.servers.mariadb import ServerBuild, ServerStartError
from mallocbench.servers.orphans import Orphan, stop_orphans
from mallocbench.store import ResultsStore, is_url, locks, open_store, store_label
from mallocbench.store.sqlite import STATUS_INTERRUPTED

# The resource every benchmark host's worker advertises once: a unit asks for one, so
# a host never runs two units (and their servers) at once.
RESOURCE = "benchmark_host"
# Set by `mallocbench cluster worker` in its own process: where units keep their files.
WORK_DIR_ENV = "MALLOCBENCH_WORK_DIR"
# The scheduler's event topic where a unit's worker announces its host's facts as soon
# as they are known: a host killed mid-unit returns no result, yet measured cells.
HOSTS_TOPIC = "mallocbench-hosts"
# How often the driver and the unit tasks look around (store, stop event, hosts). Every
# look is a message to the scheduler: rare enough to keep a measuring host quiet.
POLL_S = 2.0
# With units waiting and no benchmark host left for this long, they are recorded as lost.
NO_HOST_GRACE_S = 60.0
# Host facts that must agree for blocks measured on different hosts to be combined.
HOST_FACTS = (
    "cpu_model",
    "cpus",
    "memory_bytes",
    "kernel",
    "glibc",
    "thp",
    "sysbench",
    "server_versions",
    "allocators",
)


# A lost unit's note while the run is incomplete, and once a resume measured the rest.
LOST_NOTE = "lost unit {}; its finished cells are kept, --resume measures the rest"
LOST_NOTE_DONE = "lost unit {}; its finished cells were kept, and a --resume measured the rest"


class UnitsLost(ServerStartError):
    """Units whose hosts died past the retries: their finished cells are kept, --resume."""

    run_status = STATUS_INTERRUPTED


class UnitFailed(Exception):
    """A unit's subprocess ended without a result (raised in the worker, shown one line)."""


# --- the experiment, rebuilt from a stored run ---------------------------------------------

_SET_LINE = re.compile(r"^# --set (.+)$")


def experiment_from_run(stored: RunResult) -> Experiment:
    """The experiment a run ran, from its stored text alone (no file needed).

    The text is the file as it was, then one `# --set KEY=VALUE` comment line per
    command-line override (run.loading.load writes them): those trailing lines are
    applied again, so the rebuilt experiment is the one that ran and its text is the
    stored text, byte for byte, as --resume checks.
    """
    text = stored.experiment_text
    if not text.strip():
        raise MallocbenchError(
            f"run {stored.run_id} has no stored experiment text (an older store): resume it "
            "with its experiment file: mallocbench run FILE --resume --store ..."
        )
    lines = text.rstrip("\n").splitlines()
    overrides: list[str] = []
    while lines and (match := _SET_LINE.match(lines[-1])):
        overrides.insert(0, recorded_set(match.group(1)))
        lines.pop()
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise MallocbenchError(f"run {stored.run_id}: its stored experiment text: {exc}") from exc
    apply_overrides(data, overrides)
    experiment = from_dict(data, text, default_name=stored.experiment)
    experiment.source = str(stored.metadata.experiment_file or "")
    return experiment


def store_target(options: RunOptions) -> str:
    """The store as every host reaches it: a URL as given, a file by its absolute path."""
    target = options.store_target
    if is_url(target):
        return str(target)
    return str(Path(target).resolve())


# --- units -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Unit:
    """One block to measure on one host: its engine, repeat and cells."""

    engine: str
    repeat: int
    cells: tuple[tuple[str, str, int], ...]  # (setup, step label, threads)

    @property
    def label(self) -> str:
        return f"{self.engine} r{self.repeat}"

    def to_dict(self) -> dict[str, Any]:
        return {"engine": self.engine, "repeat": self.repeat, "cells": list(self.cells)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Unit:
        cells = tuple((str(s), str(st), int(t)) for s, st, t in data["cells"])
        return cls(str(data["engine"]), int(data["repeat"]), cells)

    def sessions(self, experiment: Experiment) -> list[PlannedSession]:
        """The block's planned sessions again, in the order the repeat's parity gives."""
        wanted = {(setup, self.engine, step, threads) for setup, step, threads in self.cells}
        round_ = plan_extra_round(experiment, self.repeat, wanted)
        return [s for s in round_ if s.engine == self.engine]


def units_of(
    sessions: list[PlannedSession], done: set[tuple[str, str, str, int, int]]
) -> list[Unit]:
    """The blocks with something left to measure, each a unit for one host."""
    units = []
    for block in blocks(sessions):
        cells = [c for s in block for c in s.cells]
        if all(c.key in done for c in cells):
            continue
        units.append(
            Unit(
                block[0].engine,
                block[0].repeat,
                tuple((c.setup, c.step.label, c.threads) for c in cells),
            )
        )
    return units


def stop_event_name(run_id: str) -> str:
    return f"mallocbench-stop-{run_id}"


# --- the driver ------------------------------------------------------------------------------


def connect(address: str, security: Any = None, timeout: float = 15.0) -> Any:
    """A Dask client of the scheduler at `address`, with at least one benchmark host.

    With `security` (clustertls.security) it presents this host's certificate and
    accepts only a scheduler whose certificate the cluster's CA signed.
    """
    from distributed import Client

    try:
        client = Client(address, timeout=timeout, set_as_default=False, security=security)
    except (OSError, TimeoutError, ValueError) as exc:
        raise MallocbenchError(
            f"cannot reach the Dask scheduler at {address} ({str(exc).splitlines()[0]}): start "
            "it with `mallocbench cluster scheduler`, check that its port is reachable and "
            "that --tls names a host directory of the same `cluster init` CA"
        ) from exc
    if not benchmark_hosts(client):
        client.close()
        raise MallocbenchError(
            f"the Dask scheduler at {address} has no worker with the {RESOURCE!r} resource: "
            f"start one per benchmark host with `mallocbench cluster worker {address}`"
        )
    return client


def benchmark_hosts(client: Any) -> dict[str, str]:
    """Worker address -> name, of the workers that can take a unit."""
    workers = client.scheduler_info(n_workers=-1).get("workers", {})
    return {
        address: str(info.get("name", address))
        for address, info in workers.items()
        if (info.get("resources") or {}).get(RESOURCE, 0) >= 1
    }


def resume_command(run_id: str, options: RunOptions) -> str:
    """The command that measures what a run misses, from any machine reaching its store
    (a URL without its password: libpq finds it in ~/.pgpass or PGPASSWORD)."""
    return (
        f"mallocbench run --resume {shlex.quote(run_id)} "
        f"--store {shlex.quote(store_label(store_target(options)))}"
    )


class StoredRunSessions(RunSessions):
    """A run's session source when the run is resumed by id (`--resume RUN_ID`) or
    measured on several hosts: session ids unique across hosts and attempts, the hosts
    recorded, and lost units' notes closed once a resume measured them."""

    def __init__(
        self,
        run_id: str | None = None,
        taken: set[str] | None = None,
        joins_hosts: bool = True,
    ) -> None:
        self.pinned_run_id = run_id
        # Session ids already in the store: a resume or a retry never reuses one, which
        # would replace that session's record (its host, its peak memory) with its own.
        self.taken = taken
        # A local resume of a run measured on several hosts is one more host of it; a
        # unit's host and the cluster's driver leave the hosts to the driver's record.
        self.joins_hosts = joins_hosts

    def resume_run_id(
        self, store: ResultsStore, experiment: Experiment, carried: RunMetadata
    ) -> str:
        run_id = self.pinned_run_id or super().resume_run_id(store, experiment, carried)
        # The resumed run's metadata is written anew: keep what its hosts recorded so far.
        previous = store.load_run_header(run_id).metadata
        if carried.hosts is None and previous.hosts is not None:
            carried.hosts = previous.hosts
        if carried.cluster is None and previous.cluster is not None:
            carried.cluster = previous.cluster
        return run_id

    def session_id(
        self, store: ResultsStore, run_id: str, planned: PlannedSession, attempt: int, host: str
    ) -> str:
        if self.taken is None:
            self.taken = store.session_ids(run_id)
        base = super().session_id(store, run_id, planned, attempt, host)
        session_id, n = base, 1
        while session_id in self.taken:
            n += 1
            session_id = f"{base}.{host}.{n}"
        self.taken.add(session_id)
        return session_id

    def completed_notes(self, notes: list[str]) -> list[str]:
        done = []
        for note in notes:
            unit = _lost_unit(note)
            done.append(note if unit is None else LOST_NOTE_DONE.format(unit))
        return done

    def sessions_ran(
        self,
        store: ResultsStore,
        run_id: str,
        experiment: Experiment,
        outcome: RunOutcome,
        builds: dict[str | None, ServerBuild],
        measured_on: str | None,
    ) -> None:
        hosts = outcome.result.metadata.hosts
        if self.joins_hosts and measured_on and hosts is not None and measured_on not in hosts:
            hosts[measured_on] = _host_record(experiment, builds)
            store.update_metadata(run_id, outcome.result.metadata)


def _lost_unit(note: str) -> str | None:
    """The unit a LOST_NOTE names, or None for any other note."""
    head, tail = LOST_NOTE.split("{}")
    if note.startswith(head) and note.endswith(tail):
        return note[len(head) : len(note) - len(tail)]
    return None


@dataclass
class _Dispatch:
    """What the driver learns from the units as they end."""

    hosts: dict[str, HostRecord]
    shares: list[float]
    lost: list[str]
    aborted: str | None = None
    interrupted: bool = False


class _DriverExecutor(RealExecutor):
    """The driver starts no server: each unit makes its own runtime directory on its host."""

    @contextlib.contextmanager
    def server_state(self, label: str) -> Iterator[str | None]:
        yield None


class ClusterSchedule:
    """Runs each block as a unit on a benchmark host of a Dask cluster."""

    def __init__(
        self, address: str, security: Any = None, say: Callable[[str], None] | None = None
    ) -> None:
        self.address = address
        self.security = security
        self.asked_say = say
        self.say: Callable[[str], None] = say or (lambda _text: None)
        self.client: Any = None

    @contextlib.contextmanager
    def connected(self) -> Iterator[None]:
        # Before anything is created or measured: a cluster without hosts is one line.
        self.client = connect(self.address, self.security)
        try:
            yield
        finally:
            self.client.close()

    def run(
        self,
        pipeline: ScheduledRun,
        store: ResultsStore,
        run_id: str,
        sessions: list[PlannedSession],
        done: set[tuple[str, str, str, int, int]],
        builds: dict[str | None, ServerBuild],
        outcome: RunOutcome,
    ) -> None:
        self.say = self.asked_say or pipeline.progress.status
        stored = store.load_run(run_id, with_samples=False).metadata
        state = _Dispatch(hosts=dict(stored.hosts or {}), shares=[], lost=[])
        units = units_of(sessions, done)
        try:
            self._dispatch(pipeline, store, run_id, units, outcome, state)
        except KeyboardInterrupt:
            # Aborted at once (a second Ctrl-C): the hosts still stop their units.
            self._stop_event(run_id).set()
            raise
        finally:
            self._record(store, run_id, outcome, state)
        if state.lost:
            raise UnitsLost(
                f"{len(state.lost)} unit(s) lost with their benchmark host ("
                + "; ".join(state.lost)
                + "): their finished cells are kept; measure the rest with: "
                + resume_command(run_id, pipeline.options)
                + " (add --cluster and --tls to spread them over the hosts again)"
            )
        if state.aborted:
            raise ServerStartError(state.aborted)
        if state.interrupted or pipeline.stop_requested():
            raise KeyboardInterrupt

    def _dispatch(
        self,
        pipeline: ScheduledRun,
        store: ResultsStore,
        run_id: str,
        units: list[Unit],
        outcome: RunOutcome,
        state: _Dispatch,
    ) -> None:
        """Keep every free host busy with one unit until none is left.

        Units are handed out one per free host rather than all at once: a unit queued on
        a host that then dies would count that death against its retries too.
        """
        # A stop asked of an earlier attempt of this run must not stop this one.
        self._stop_event(run_id).clear()
        queue = list(units)
        running: dict[Any, tuple[Unit, float]] = {}
        seen = store.finished_cell_keys(run_id)
        stop_sent = False
        announced: dict[str, str] = {}  # unit task key -> the host that took it first
        hostless_since: float | None = None
        store_at = store_target(pipeline.options)
        while queue or running:
            if pipeline.stop_requested() and not stop_sent:
                self._stop_event(run_id).set()
                queue.clear()
                stop_sent = True
            hosts = benchmark_hosts(self.client)
            while queue and len(running) < len(hosts):
                unit = queue.pop(0)
                running[self._submit(pipeline, store_at, run_id, unit)] = (unit, time.monotonic())
            if not hosts and queue and not running:
                hostless_since = hostless_since or time.monotonic()
                if time.monotonic() - hostless_since > NO_HOST_GRACE_S:
                    state.lost += [f"{u.label}: no benchmark host left" for u in queue]
                    queue.clear()
            else:
                hostless_since = None
            time.sleep(POLL_S)
            for future in [f for f in running if f.done()]:
                unit, started = running.pop(future)
                first = announced.get(future.key)
                self._collect(future, unit, time.monotonic() - started, outcome, state, first)
            self._announce(running, hosts, announced)
            seen = self._report_cells(pipeline, store, run_id, seen)
        if stop_sent:
            state.interrupted = True

    def _stop_event(self, run_id: str) -> Any:
        from distributed import Event

        return Event(stop_event_name(run_id), client=self.client)

    def _submit(self, pipeline: ScheduledRun, store_at: str, run_id: str, unit: Unit) -> Any:
        spec = {
            "store": store_at,
            "run_id": run_id,
            "unit": unit.to_dict(),
            "interleaved": pipeline.interleaved,
            "keep_datadirs": pipeline.options.keep_datadirs,
        }
        return self.client.submit(
            run_unit_task,
            spec,
            resources={RESOURCE: 1},
            pure=False,
            key=f"unit-{run_id}-{unit.engine}-r{unit.repeat}-{time.time_ns()}",
        )

    def _announce(
        self,
        running: dict[Any, tuple[Unit, float]],
        hosts: dict[str, str],
        announced: dict[str, str],
    ) -> None:
        """Say which host took each unit, once (the scheduler knows; the task cannot say)."""
        waiting = {f.key: unit for f, (unit, _) in running.items() if f.key not in announced}
        if not waiting:
            return
        for address, keys in self.client.processing().items():
            for key in keys:
                if key in waiting:
                    announced[key] = hosts.get(address, address)
                    self.say(f"unit {waiting[key].label} started on {announced[key]}")

    def _collect(
        self,
        future: Any,
        unit: Unit,
        seconds: float,
        outcome: RunOutcome,
        state: _Dispatch,
        first_host: str | None,
    ) -> None:
        from distributed.scheduler import KilledWorker

        if future.status != "finished":
            exc = future.exception() if future.status == "error" else None
            if isinstance(exc, KilledWorker):
                why = "its host died and the scheduler's allowed-failures retries are spent"
            else:
                why = str(exc).splitlines()[0] if exc else future.status
            state.lost.append(f"{unit.label}: {why}")
            self.say(f"unit {unit.label} lost: {why}")
            return
        result = future.result()
        host = result["host"]
        if first_host is not None and first_host != host:
            outcome.notes.append(
                f"unit {unit.label} moved from {first_host} to {host} (its first host died): "
                f"the cells {first_host} had finished were kept, {host} measured the rest"
            )
        outcome.measured += result["measured"]
        outcome.failures.extend(result["failures"])
        for note in result["notes"]:
            if note not in outcome.notes:
                outcome.notes.append(note)
        if result.get("metadata"):
            state.hosts[host] = HostRecord.from_dict(result["metadata"])
        if result.get("worker_cpu_share") is not None:
            state.shares.append(result["worker_cpu_share"])
        if result.get("aborted") == "interrupted":
            state.interrupted = True
        elif result.get("aborted"):
            state.aborted = state.aborted or f"on host {host}: {result['aborted']}"
        self.say(
            f"unit {unit.label} finished on {host}: {result['measured']} cell(s) in {seconds:.0f} s"
        )

    def _report_cells(
        self,
        pipeline: ScheduledRun,
        store: ResultsStore,
        run_id: str,
        seen: set[tuple[str, str, str, int, int]],
    ) -> set[tuple[str, str, str, int, int]]:
        """Tell the progress display about cells the hosts committed since last time."""
        keys = store.finished_cell_keys(run_id)
        if keys - seen:
            for cell in store.load_run(run_id, with_samples=False).cells:
                if cell.key in keys - seen:
                    pipeline.progress.cell_finished(cell)
        return keys

    def _announced_hosts(self, store: ResultsStore, run_id: str) -> dict[str, HostRecord]:
        """The hosts that started measuring, with their facts, results returned or not."""
        announced = _announced(self.client, run_id)
        if not announced:
            return {}
        measured = {s.host for s in store.load_run(run_id, with_samples=False).sessions}
        return {host: record for host, record in announced.items() if host in measured}

    def _record(
        self, store: ResultsStore, run_id: str, outcome: RunOutcome, state: _Dispatch
    ) -> None:
        """Hosts, their differences and the engine's CPU share, in the run's metadata."""
        metadata = outcome.result.metadata
        for host, record in self._announced_hosts(store, run_id).items():
            state.hosts.setdefault(host, record)
        metadata.hosts = state.hosts
        for note in host_differences(state.hosts):
            if note not in outcome.notes:
                outcome.notes.append(note)
        share = share_note(state.shares)
        cluster = metadata.cluster or ClusterRecord()
        cluster.scheduler, cluster.resource = self.address, RESOURCE
        if state.shares:
            cluster.worker_cpu_share = WorkerCpuShare(
                median=statistics.median(state.shares),
                max=max(state.shares),
                units=len(state.shares),
            )
        metadata.cluster = cluster
        if share:
            outcome.notes[:] = [n for n in outcome.notes if not n.startswith("Dask worker used")]
            outcome.notes.append(share)
        for lost in state.lost:
            outcome.notes.append(LOST_NOTE.format(lost))
        # Facts every host agrees on describe the run as a local run's host facts do.
        held = metadata.to_dict()
        hosts = [record.to_dict() for record in state.hosts.values()]
        for key in HOST_FACTS:
            values = {json.dumps(host.get(key), sort_keys=True) for host in hosts}
            if len(values) != 1 or key not in held:
                continue
            agreed = json.loads(values.pop())
            if key == "allocators":
                _take_versions(metadata, agreed)
            else:
                metadata.update_from_dict({key: agreed})
        if outcome.notes:
            metadata.notes = outcome.notes
        store.update_metadata(run_id, metadata)


def _announced(client: Any, run_id: str) -> dict[str, HostRecord]:
    """Host name -> facts, as the units' workers announced them for this run."""
    found = {}
    with contextlib.suppress(OSError, TimeoutError):
        for _, event in client.get_events(HOSTS_TOPIC):
            if isinstance(event, dict) and event.get("run_id") == run_id:
                found[str(event["host"])] = HostRecord.from_dict(event["record"])
    return found


def _take_versions(metadata: RunMetadata, versions: dict[str, str | None]) -> None:
    """The hosts' allocator versions (setup -> version) into the run's record, which also
    names each library: replacing the record would drop the libraries, and its shape."""
    for setup, version in versions.items():
        record = (metadata.allocators or {}).get(setup)
        if record is not None:
            record.version = version


def share_note(shares: list[float]) -> str | None:
    """The engine's measured CPU share on the hosts, as the report quotes it."""
    if not shares:
        return None
    return (
        f"Dask worker used {100 * statistics.median(shares):.2f}% of a CPU while hosts "
        f"measured (median of {len(shares)} unit(s), highest {100 * max(shares):.2f}%; "
        "harness overhead, measured on each host)"
    )


def host_differences(hosts: dict[str, HostRecord]) -> list[str]:
    """One note per host fact that differs between the hosts that measured (compared as
    stored: HOST_FACTS names their keys)."""
    stored = {name: record.to_dict() for name, record in sorted(hosts.items())}
    notes = []
    for key in HOST_FACTS:
        values = {name: meta.get(key) for name, meta in stored.items()}
        distinct = {json.dumps(v, sort_keys=True) for v in values.values()}
        if len(distinct) < 2:
            continue
        numbers = [v for v in values.values() if isinstance(v, int)]
        if key == "memory_bytes" and len(numbers) == len(values):
            low, high = min(numbers), max(numbers)
            if high - low <= MEMORY_TOLERANCE * high:
                continue
        listed = ", ".join(f"{name} {value}" for name, value in values.items())
        notes.append(
            f"hosts differ in host.{key}: {listed}; relative values pair setups within a "
            "block, hence within one host, and are combined across hosts"
        )
    return notes


# --- the unit, in a worker -------------------------------------------------------------------


def run_unit_task(spec: dict[str, Any]) -> dict[str, Any]:
    """The Dask task: run one unit as a subprocess of this worker, return its result."""
    from distributed import Event, get_worker

    worker = get_worker()
    host = str(worker.name)
    work_dir = Path(os.environ.get(WORK_DIR_ENV) or worker.local_directory)
    safe_run = re.sub(r"[^A-Za-z0-9_.+-]", "_", spec["run_id"])
    out_dir = work_dir / "runs" / safe_run
    out_dir.mkdir(parents=True, exist_ok=True)
    unit = Unit.from_dict(spec["unit"])
    stem = f"unit-{unit.engine}-r{unit.repeat}"
    result_path, host_path = out_dir / f"{stem}.result.json", out_dir / f"{stem}.host.json"
    result_path.unlink(missing_ok=True)
    host_path.unlink(missing_ok=True)
    spec = {
        **spec,
        "host": host,
        "out_dir": str(out_dir),
        "worker_pid": os.getpid(),
        "result": str(result_path),
        "host_record": str(host_path),
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
        while True:
            try:
                code = proc.wait(timeout=POLL_S)
                break
            except subprocess.TimeoutExpired:
                if not announced and host_path.is_file():
                    announced = _announce_host(worker, spec, host_path)
                if not signalled and stop.is_set():
                    proc.send_signal(signal.SIGTERM)
                    signalled = True
    if not result_path.is_file():
        tail = (out_dir / f"{stem}.log").read_text(errors="replace").strip().splitlines()
        raise UnitFailed(
            f"unit {unit.label} on {host} ended with status {code} and no result: "
            f"{tail[-1] if tail else 'no output'} (log: {out_dir / f'{stem}.log'})"
        )
    return dict(json.loads(result_path.read_text()))


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


def _host_record(experiment: Experiment, builds: dict[str | None, ServerBuild]) -> HostRecord:
    return HostRecord(
        host=host_facts(),
        server_versions=sorted({b.label for b in builds.values()}),
        allocators={s.name: s.allocator.version for s in experiment.setups},
    )


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


def run_unit(spec: dict[str, Any], stop_requested: Callable[[], bool]) -> dict[str, Any]:
    """Measure one unit's missing cells into the shared store; the result for the driver."""
    run_id, host = spec["run_id"], spec["host"]
    unit = Unit.from_dict(spec["unit"])
    out_dir = Path(spec["out_dir"])
    result: dict[str, Any] = {"host": host, "unit": unit.label, "aborted": None}
    # The driver holds the run's lock; a unit locks only its host's own directory, and
    # stops what a killed unit of this directory left running before reusing it.
    with locks.lock_directory(out_dir):
        orphans = stop_orphans(out_dir / "servers") + _other_runs_orphans(out_dir)
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
            result["metadata"] = _host_record(experiment, builds).to_dict()
            announce = Path(spec["host_record"])
            write_text_atomic(announce, json.dumps(result["metadata"]))
            # The driver decided the design for the whole run; every host follows it.
            pipeline.interleaved = bool(spec["interleaved"])
            outcome = RunOutcome(result=stored)
            if orphans:
                outcome.notes.append(
                    f"host {host}: stopped {len(orphans)} server(s) a killed unit left running"
                )
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


__all__ = [
    "RESOURCE",
    "ClusterSchedule",
    "StoredRunSessions",
    "Unit",
    "connect",
    "experiment_from_run",
    "run_unit",
    "run_unit_task",
    "units_of",
]


# --- what `mallocbench run` asks of this module ----------------------------------------------


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
    say: Callable[[str], None] | None = None,
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
        executor=_DriverExecutor(),
        # The driver records the hosts from what the units return.
        sessions=StoredRunSessions(run_id, joins_hosts=False),
        schedule=ClusterSchedule(address, security, say),
    )


def dispatch_line(experiment: Experiment, address: str) -> str:
    """What --dry-run --cluster adds to the plan."""
    from mallocbench.run.planning import plan

    count = len(units_of(plan(experiment), set()))
    return (
        f"cluster {address}: {count} unit(s) to dispatch, one per engine and repeat (every "
        "setup's sessions of a block on one host), one unit per host at a time"
    )
