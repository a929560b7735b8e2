"""The driver's side of a cluster run: the Dask client, the units sent to benchmark hosts
and what their results say about the hosts (ClusterSchedule).
"""

from __future__ import annotations

import contextlib
import json
import shlex
import statistics
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from mallocbench.analysis.comparability import MEMORY_TOLERANCE
from mallocbench.cluster.units import (
    HOST_FACTS,
    HOSTS_TOPIC,
    LOST_NOTE,
    NO_HOST_GRACE_S,
    POLL_S,
    RESOURCE,
    Event,
    News,
    Tell,
    Unit,
    UnitsLost,
    stop_event_name,
    store_target,
    tell_nothing,
    units_of,
)
from mallocbench.cluster.worker import run_unit_task
from mallocbench.errors import MallocbenchError
from mallocbench.executors.real import RealExecutor
from mallocbench.model.metadata import ClusterRecord, HostRecord, RunMetadata, WorkerCpuShare
from mallocbench.run.experiment import PlannedSession
from mallocbench.run.options import RunOptions, RunOutcome
from mallocbench.run.schedule import ScheduledRun
from mallocbench.servers.family import Build
from mallocbench.servers.outcome import ServerStartError
from mallocbench.store import ResultsStore, store_label


def connect(address: str, security: Any = None, timeout: float = 15.0) -> Any:
    """A Dask client of the scheduler at `address`, with at least one benchmark host.

    With `security` (cluster.tls.security) it presents this host's certificate and
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


def submit_unit(client: Any, spec: dict[str, Any], name: str) -> Any:
    """A unit's task, for one benchmark host at a time; its key is new on every attempt
    (the scheduler would answer a key it knows with that attempt's outcome)."""
    return client.submit(
        run_unit_task, spec, resources={RESOURCE: 1}, pure=False, key=f"{name}-{time.time_ns()}"
    )


def lost_reason(future: Any) -> str:
    """Why a unit's task ended without a result, in a few words."""
    from distributed.scheduler import KilledWorker

    exc = future.exception() if future.status == "error" else None
    if isinstance(exc, KilledWorker):
        return "its host died and the scheduler's allowed-failures retries are spent"
    return str(exc).splitlines()[0] if exc else str(future.status)


class HostWatch:
    """What a driver follows of the hosts while units run: which host took each unit
    (said once: the scheduler knows, the task cannot say) and how long no host was left."""

    def __init__(self, tell: Tell) -> None:
        self.tell = tell
        self.announced: dict[str, str] = {}  # unit task key -> the host that took it first
        self.hostless_since: float | None = None

    def announce(self, client: Any, running: dict[str, str], hosts: dict[str, str]) -> None:
        """`running`: task key -> unit label, of the units dispatched and not ended."""
        waiting = {key: label for key, label in running.items() if key not in self.announced}
        if not waiting:
            return
        for address, keys in client.processing().items():
            for key in keys:
                if key in waiting:
                    self.announced[key] = hosts.get(address, address)
                    self.tell(News(Event.STARTED, waiting[key], self.announced[key]))

    def hostless(self, waiting: list[str], hosts: bool, running: bool) -> list[str]:
        """The waiting units to record as lost: all of them once no benchmark host was
        left, and no unit running, for NO_HOST_GRACE_S; else none."""
        if hosts or running or not waiting:
            self.hostless_since = None
            return []
        self.hostless_since = self.hostless_since or time.monotonic()
        if time.monotonic() - self.hostless_since <= NO_HOST_GRACE_S:
            return []
        return [f"{label}: no benchmark host left" for label in waiting]


@dataclass
class _Dispatch:
    """What the driver learns from the units as they end."""

    hosts: dict[str, HostRecord]
    shares: list[float]
    lost: list[str]
    aborted: str | None = None
    interrupted: bool = False


class DriverExecutor(RealExecutor):
    """The driver starts no server: each unit makes its own runtime directory on its host."""

    @contextlib.contextmanager
    def server_state(self, label: str) -> Iterator[str | None]:
        yield None


class ClusterSchedule:
    """Runs each block as a unit on a benchmark host of a Dask cluster."""

    def __init__(self, address: str, security: Any = None, tell: Tell | None = None) -> None:
        self.address = address
        self.security = security
        # Nothing told without a caller to word it: a quiet run's progress is silent too.
        self.tell: Tell = tell or tell_nothing
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
        builds: dict[str | None, Build],
        outcome: RunOutcome,
    ) -> None:
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
        watch = HostWatch(self.tell)
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
            gone = watch.hostless([u.label for u in queue], bool(hosts), bool(running))
            if gone:
                state.lost += gone
                queue.clear()
            time.sleep(POLL_S)
            for future in [f for f in running if f.done()]:
                unit, started = running.pop(future)
                first = watch.announced.get(future.key)
                self._collect(future, unit, time.monotonic() - started, outcome, state, first)
            watch.announce(self.client, {f.key: u.label for f, (u, _) in running.items()}, hosts)
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
        return submit_unit(self.client, spec, f"unit-{run_id}-{unit.engine}-r{unit.repeat}")

    def _collect(
        self,
        future: Any,
        unit: Unit,
        seconds: float,
        outcome: RunOutcome,
        state: _Dispatch,
        first_host: str | None,
    ) -> None:
        if future.status != "finished":
            why = lost_reason(future)
            state.lost.append(f"{unit.label}: {why}")
            self.tell(News(Event.LOST, unit.label, why=why))
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
        self.tell(News(Event.FINISHED, unit.label, host, cells=result["measured"], seconds=seconds))

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


# What a host difference means for a run's figures: a block is measured on one host.
WITHIN_BLOCKS = (
    "relative values pair setups within a block, hence within one host, and are combined "
    "across hosts"
)


def host_differences(hosts: dict[str, HostRecord], meaning: str = WITHIN_BLOCKS) -> list[str]:
    """One note per host fact that differs between the hosts that measured (compared as
    stored: HOST_FACTS names their keys); `meaning` says what that does to the figures."""
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
        notes.append(f"hosts differ in host.{key}: {listed}; {meaning}")
    return notes


__all__ = ["ClusterSchedule", "HostWatch", "connect", "lost_reason", "submit_unit"]
