"""A replay's (setup, repeat) replays as units on benchmark hosts (`replay --cluster`).

Each replay is one unit, run on its host as a run's unit is (a subprocess of the Dask
worker that dies with it, in the host's directory of the run, under its lock). The
trace is not shipped: every host reads it at the driver's own path, a shared mount or
a copy, and a host that sees no trace there, or another one, refuses the unit in one
line. A trace of hours is gigabytes, and the scheduler, which every message of the
cluster passes through, is no place to stream them.

The unit returns the replayer's account; the driver commits it to the replay's run as
the unit ends, as a local replay commits its own, so a replay is committed once
whichever host ran it, and the hosts need no store.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from mallocbench.cluster.driver import (
    HostWatch,
    benchmark_hosts,
    connect,
    host_differences,
    lost_reason,
    submit_unit,
)
from mallocbench.cluster.units import (
    POLL_S,
    ReplayUnit,
    UnitsLost,
    stop_event_name,
)
from mallocbench.cluster.worker import stop_left_servers
from mallocbench.errors import EnvironmentLost, MallocbenchError
from mallocbench.model.metadata import HostRecord, ReplayRun
from mallocbench.model.results import RunResult
from mallocbench.patterns.experiment import PatternSetup, make_setup
from mallocbench.probes.system import host_facts
from mallocbench.replay import control, runner
from mallocbench.replay import trace as tracemod
from mallocbench.store import locks


class ReplaysLost(UnitsLost, EnvironmentLost):
    """Replays whose hosts died past the retries, or that a host refused: the finished
    ones are kept, and --resume runs the rest (the run is interrupted, exit 3)."""


def run_replay_unit(spec: dict[str, Any]) -> dict[str, Any]:
    """Run one replay on this host; the result for the driver (the replay, or why not)."""
    host, unit = spec["host"], ReplayUnit.from_dict(spec["replay"])
    result: dict[str, Any] = {"host": host, "unit": unit.label, "aborted": None, "replay": None}
    trace, out_dir = Path(unit.trace), Path(spec["out_dir"])
    # A stop (the worker gone, the driver's stop) drops the replay under way at once:
    # subprocess.run kills the replayer on the way out, so no replay outlives its unit.
    with control.signals_interrupt(), locks.lock_directory(out_dir):
        result["aborted"] = _trace_refused(host, trace, unit.trace_bytes)
        if result["aborted"]:
            return result
        # As a run's unit does: no replay beside servers a killed unit left running.
        result["notes"] = stop_left_servers(out_dir, host)
        setup = _setup(unit.setup)
        record = HostRecord(host=host_facts(), allocators={setup.name: setup.allocator.version})
        result["metadata"] = record.to_dict()
        try:
            run = runner.run_once(
                setup,
                trace,
                unit.timing,
                unit.speed,
                unit.repeat,
                runner.replay_timeout(unit.duration_s, unit.speed, unit.timing),
                unit.order,
            )
        except KeyboardInterrupt:
            result["aborted"] = "interrupted"
        except MallocbenchError as exc:
            result["aborted"] = str(exc)
        else:
            result["replay"] = run.to_dict()
    return result


def _trace_refused(host: str, trace: Path, size: int) -> str | None:
    """Why this host cannot replay the driver's trace at `trace`, or None."""
    try:
        seen = tracemod.trace_bytes(trace)
    except OSError as exc:
        return (
            f"host {host} cannot read the trace at {trace} ({exc.strerror or exc}): every "
            "host reads it at the path the driver gives; mount it there or copy it to the "
            "same path"
        )
    if seen != size:
        return (
            f"host {host} has another trace at {trace} ({seen} bytes where the driver's has "
            f"{size}): copy the driver's trace to that path"
        )
    return None


def _setup(stored: dict[str, Any]) -> PatternSetup:
    return make_setup("replay", str(stored["name"]), str(stored["allocator"]), stored["knobs"])


# Replays of one setup and of the others may run on different hosts: what a difference
# between the hosts does to the figures compared.
ACROSS_HOSTS = (
    "each replay's figures are its host's, and setups replayed on different hosts are "
    "compared across them"
)


def _host_of(result: RunResult, done: dict[str, Any]) -> None:
    """The host that ran a replay: in the replay's account (`host`), among the run's
    hosts with its facts, and in a note for each fact the hosts differ in (and the
    host's own notes)."""
    host = str(done["host"])
    done["replay"]["data"]["host"] = host
    metadata = result.metadata
    hosts = dict(metadata.hosts or {})
    if done.get("metadata"):
        known = hosts.get(host)
        record = HostRecord.from_dict(done["metadata"])
        if known is not None and known.allocators and record.allocators:
            record.allocators = {**known.allocators, **record.allocators}
        hosts[host] = record
    metadata.hosts = hosts
    notes = [n for n in metadata.notes or [] if not n.startswith("hosts differ in host.")]
    notes += [n for n in done.get("notes") or [] if n not in notes]
    metadata.notes = notes + host_differences(hosts, ACROSS_HOSTS) or None


def _until_one_ends(futures: list[Any], seconds: float) -> None:
    """Back as soon as a replay ends, so it is committed at once (a future's state is the
    client's own: looking at it sends the scheduler nothing)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not any(f.done() for f in futures):
        time.sleep(0.05)


class ClusterReplays:
    """Runs a replay's pending replays as units on the hosts of a Dask cluster (the
    `elsewhere` of replay.run.replay_run)."""

    def __init__(
        self,
        address: str,
        security: Any,
        stop_requested: Callable[[], bool],
        resume_hint: Callable[[str], str],
        say: Callable[[str], None] | None = None,
    ) -> None:
        self.address = address
        self.security = security
        self.stop_requested = stop_requested
        self.resume_hint = resume_hint  # run id -> the command that replays the rest
        self.say = say or (lambda _text: None)
        self.client: Any = None

    @contextlib.contextmanager
    def connected(self) -> Iterator[ClusterReplays]:
        # Before the run is created: a cluster without hosts is one line and no run.
        self.client = connect(self.address, self.security)
        try:
            yield self
        finally:
            self.client.close()

    def __call__(
        self,
        result: RunResult,
        trace: Path,
        todo: list[tuple[PatternSetup, int]],
        commit: Callable[[ReplayRun], None],
    ) -> None:
        from distributed import Event

        record = result.metadata.replay
        assert record is not None
        trace = trace.absolute()
        size = tracemod.trace_bytes(trace)
        units = [
            ReplayUnit(
                setup=next(s for s in record.setups or [] if s["name"] == setup.name),
                repeat=repeat,
                trace=str(trace),
                trace_bytes=size,
                timing=record.timing or "recorded",
                speed=record.speed or 1.0,
                order=record.order or "recorded",
                duration_s=float((record.trace or {}).get("duration_s") or 0),
            )
            for setup, repeat in todo
        ]
        stop = Event(stop_event_name(result.run_id), client=self.client)
        stop.clear()  # a stop asked of an earlier attempt must not stop this one
        try:
            lost, aborted, stopped = self._dispatch(result, units, commit, stop)
        except KeyboardInterrupt:
            stop.set()  # aborted at once (a second Ctrl-C): the hosts still stop theirs
            raise
        if lost:
            raise ReplaysLost(
                f"{len(lost)} replay(s) lost with their benchmark host ("
                + "; ".join(lost)
                + "): the finished replays are kept; replay the rest with: "
                + self.resume_hint(result.run_id)
            )
        if aborted:
            raise ReplaysLost(
                f"{aborted}; then run the rest with: {self.resume_hint(result.run_id)}"
            )
        if stopped:
            raise KeyboardInterrupt

    def _dispatch(
        self,
        result: RunResult,
        units: list[ReplayUnit],
        commit: Callable[[ReplayRun], None],
        stop: Any,
    ) -> tuple[list[str], str | None, bool]:
        """Keep every free host busy with one replay until none is left; the replays lost,
        the first host's refusal, whether a stop was asked."""
        queue = list(units)
        running: dict[Any, ReplayUnit] = {}
        lost: list[str] = []
        aborted: str | None = None
        stopped = False
        watch = HostWatch(self.say)
        while queue or running:
            if self.stop_requested() and not stopped:
                stop.set()
                queue.clear()
                stopped = True
            hosts = benchmark_hosts(self.client)
            while queue and len(running) < len(hosts):
                unit = queue.pop(0)
                running[self._submit(result.run_id, unit)] = unit
            gone = watch.hostless([u.label for u in queue], bool(hosts), bool(running))
            if gone:
                lost += gone
                queue.clear()
            _until_one_ends(list(running), POLL_S)
            for future in [f for f in running if f.done()]:
                unit = running.pop(future)
                if future.status != "finished":
                    lost.append(f"{unit.label}: {lost_reason(future)}")
                    self.say(f"replay {unit.label} lost: {lost_reason(future)}")
                    continue
                done = future.result()
                if done.get("replay") is not None:
                    _host_of(result, done)
                    commit(ReplayRun.from_dict(done["replay"]))
                    self.say(f"replay {unit.label} finished on {done['host']}")
                elif done.get("aborted") == "interrupted":
                    stopped = True
                elif done.get("aborted"):
                    # A host that refuses one replay would refuse the next as fast: no
                    # more are handed out, and --resume runs them once it is fixed.
                    aborted = aborted or str(done["aborted"])
                    queue.clear()
            watch.announce(self.client, {f.key: u.label for f, u in running.items()}, hosts)
        return lost, aborted, stopped

    def _submit(self, run_id: str, unit: ReplayUnit) -> Any:
        spec = {"run_id": run_id, "replay": unit.to_dict()}
        return submit_unit(
            self.client, spec, f"replay-{run_id}-{unit.setup['name']}-r{unit.repeat}"
        )


__all__ = ["ClusterReplays", "ReplaysLost", "run_replay_unit"]
