"""A replay's repeats as units on benchmark hosts (`replay --cluster`).

A unit is a block: one repeat of every setup, replayed on one host in the order a local
replay of that repeat uses, so within a repeat setups are compared on the same host,
never across hosts. It runs on its host as a run's unit does (a subprocess of the Dask
worker that dies with it, in the host's directory of the run, under its lock). The
trace is not shipped: every host reads it at the driver's own path, a shared mount or
a copy, and a host that sees no trace there, or another one, refuses the unit in one
line. A trace of hours is gigabytes, and the scheduler, which every message of the
cluster passes through, is no place to stream them.

Each replay's account goes to the driver as the replay ends (the worker relays it as a
scheduler event, kept there if the host dies next) and again with its unit; the driver
commits it to the replay's run once, as a local replay commits its own, so a host lost
mid-repeat loses only the replay under way, and the hosts need no store.
"""

from __future__ import annotations

import contextlib
import json
import queue
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
    Event,
    News,
    ReplayUnit,
    Tell,
    UnitsLost,
    replay_label,
    replays_topic,
    stop_event_name,
    tell_nothing,
)
from mallocbench.cluster.worker import stop_left_servers
from mallocbench.errors import EnvironmentLost, MallocbenchError
from mallocbench.files import write_text_atomic
from mallocbench.model.metadata import HostRecord, ReplayRun
from mallocbench.model.results import RunResult
from mallocbench.patterns.experiment import PatternSetup, make_setup
from mallocbench.probes.system import host_facts
from mallocbench.replay import control, runner
from mallocbench.replay import trace as tracemod
from mallocbench.replay.run import committed
from mallocbench.store import locks


class ReplaysLost(UnitsLost, EnvironmentLost):
    """Replays whose hosts died past the retries, or that a host refused: the finished
    ones are kept, and --resume runs the rest (the run is interrupted, exit 3)."""


def run_replay_unit(spec: dict[str, Any]) -> dict[str, Any]:
    """Replay one repeat of every setup of the unit on this host, in the local order; the
    result for the driver (the replays, or why not all). Each replay is also written as
    it ends, for the worker to relay (`relay`, when given)."""
    host, unit = spec["host"], ReplayUnit.from_dict(spec["replay"])
    result: dict[str, Any] = {"host": host, "unit": unit.label, "aborted": None, "replays": []}
    trace, out_dir = Path(unit.trace), Path(spec["out_dir"])
    # A stop (the worker gone, the driver's stop) drops the replay under way at once:
    # subprocess.run kills the replayer on the way out, so no replay outlives its unit.
    with control.signals_interrupt(), locks.lock_directory(out_dir):
        result["aborted"] = _trace_refused(host, trace, unit.trace_bytes)
        if result["aborted"]:
            return result
        # As a run's unit does: no replay beside servers a killed unit left running.
        notes = stop_left_servers(out_dir, host)
        # A stop between two replays, too, ends the unit with the replays it finished.
        try:
            _replay_setups(spec, unit, notes, result["replays"])
        except KeyboardInterrupt:
            result["aborted"] = "interrupted"
        except MallocbenchError as exc:
            result["aborted"] = str(exc)
    return result


def _replay_setups(
    spec: dict[str, Any], unit: ReplayUnit, notes: list[str], replays: list[dict[str, Any]]
) -> None:
    """The unit's replays one after the other, each into `replays` (and its relay file)
    as it ends; the host's notes go with the first."""
    trace = Path(unit.trace)
    timeout = runner.replay_timeout(unit.duration_s, unit.speed, unit.timing)
    for stored in unit.setups:
        setup = _setup(stored)
        record = HostRecord(host=host_facts(), allocators={setup.name: setup.allocator.version})
        run = runner.run_once(
            setup, trace, unit.timing, unit.speed, unit.repeat, timeout, unit.order
        )
        done = {"host": spec["host"], "replay": run.to_dict(), "metadata": record.to_dict()}
        done["notes"], notes = notes, []
        if spec.get("relay"):
            write_text_atomic(Path(str(spec["relay"]).format(len(replays))), json.dumps(done))
        replays.append(done)


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


# A repeat's setups are replayed on one host: what a difference between the hosts does
# to the figures compared.
ACROSS_HOSTS = (
    "each repeat replays every setup on one host, so within a repeat setups are compared "
    "on the same host, and repeats replayed on different hosts are combined across them"
)


def _host_of(result: RunResult, done: dict[str, Any]) -> None:
    """The host that ran a replay: in the replay's account (`host`), among the run's
    hosts with its facts, and in a note for each fact the hosts differ in (and the
    host's own notes, and one when its repeat's other replays ran elsewhere)."""
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
    split = _split_repeat(result, host, int(done["replay"]["repeat"]))
    notes += [n for n in [*(done.get("notes") or []), split] if n and n not in notes]
    metadata.notes = notes + host_differences(hosts, ACROSS_HOSTS) or None


def _split_repeat(result: RunResult, host: str, repeat: int) -> str | None:
    """The note of a repeat whose replays ran on more than one host (its first host was
    lost mid-repeat, and a retry or --resume replayed the rest elsewhere), or None."""
    record = result.metadata.replay
    assert record is not None
    # A replay of a local attempt names no host: here, not another benchmark host.
    ran = [r.data.get("host") for r in record.replay_runs if r.repeat == repeat]
    others = {str(h) for h in ran if h is not None and h != host}
    if not others:
        return None
    return (
        f"repeat {repeat + 1}'s replays ran on {', '.join(sorted(others))} and then on {host} "
        "(a host was lost mid-repeat): within that repeat setups are compared across hosts"
    )


def _until_one_ends(futures: list[Any], seconds: float, inbox: queue.SimpleQueue[Any]) -> None:
    """Back as soon as a replay ends, relayed or with its unit, so it is committed at once
    (a future's state and the relayed events are the client's own: looking at them sends
    the scheduler nothing)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and inbox.empty() and not any(f.done() for f in futures):
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
        tell: Tell | None = None,
    ) -> None:
        self.address = address
        self.security = security
        self.stop_requested = stop_requested
        self.resume_hint = resume_hint  # run id -> the command that replays the rest
        self.tell: Tell = tell or tell_nothing
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
        stored = {str(s["name"]): s for s in record.setups or []}
        units = [
            ReplayUnit(
                setups=[stored[setup.name] for setup, r in todo if r == repeat],
                repeat=repeat,
                trace=str(trace),
                trace_bytes=size,
                timing=record.timing or "recorded",
                speed=record.speed or 1.0,
                order=record.order or "recorded",
                duration_s=float((record.trace or {}).get("duration_s") or 0),
            )
            for repeat in dict.fromkeys(r for _, r in todo)  # todo is in the local order
        ]
        stop = Event(stop_event_name(result.run_id), client=self.client)
        stop.clear()  # a stop asked of an earlier attempt must not stop this one
        # Subscribed before any unit starts: a replay is committed as it ends, not with
        # its unit, so a host lost mid-repeat loses only the replay under way.
        inbox: queue.SimpleQueue[Any] = queue.SimpleQueue()
        topic = replays_topic(result.run_id)
        self.client.subscribe_topic(topic, lambda event: inbox.put(event[1]))
        try:
            lost, aborted, stopped = self._dispatch(result, units, commit, stop, inbox)
        except KeyboardInterrupt:
            stop.set()  # aborted at once (a second Ctrl-C): the hosts still stop theirs
            raise
        finally:
            with contextlib.suppress(ValueError, OSError):
                self.client.unsubscribe_topic(topic)
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
        inbox: queue.SimpleQueue[Any],
    ) -> tuple[list[str], str | None, bool]:
        """Keep every free host busy with one repeat until none is left; the replays lost,
        the first host's refusal, whether a stop was asked."""
        waiting = list(units)
        running: dict[Any, ReplayUnit] = {}
        lost: list[str] = []
        aborted: str | None = None
        stopped = False
        watch = HostWatch(self.tell)
        while waiting or running:
            if self.stop_requested() and not stopped:
                stop.set()
                waiting.clear()
                stopped = True
            hosts = benchmark_hosts(self.client)
            while waiting and len(running) < len(hosts):
                unit = waiting.pop(0)
                running[self._submit(result.run_id, unit)] = unit
            labels = [label for u in waiting for label in u.replay_labels()]
            gone = watch.hostless(labels, bool(hosts), bool(running))
            if gone:
                lost += gone
                waiting.clear()
            _until_one_ends(list(running), POLL_S, inbox)
            while not inbox.empty():
                self._commit(result, inbox.get(), commit)
            for future in [f for f in running if f.done()]:
                unit = running.pop(future)
                if future.status != "finished":
                    lost += self._lost(result, unit, lost_reason(future), commit)
                    continue
                done = future.result()
                for replay in done.get("replays") or []:
                    self._commit(result, replay, commit)
                if done.get("aborted") == "interrupted":
                    stopped = True
                elif done.get("aborted"):
                    # A host that refuses one repeat would refuse the next as fast: no
                    # more are handed out, and --resume runs them once it is fixed.
                    aborted = aborted or str(done["aborted"])
                    waiting.clear()
            watch.announce(self.client, {f.key: u.label for f, u in running.items()}, hosts)
        return lost, aborted, stopped

    def _commit(self, result: RunResult, done: Any, commit: Callable[[ReplayRun], None]) -> None:
        """Commit a replay a host finished, unless it is in already (relayed as it ended,
        then returned with its unit)."""
        record = result.metadata.replay
        assert record is not None
        if not isinstance(done, dict) or done.get("replay") is None:
            return
        key = (str(done["replay"]["setup"]), int(done["replay"]["repeat"]))
        if key in committed(record):
            return
        _host_of(result, done)
        commit(ReplayRun.from_dict(done["replay"]))
        self.tell(News(Event.FINISHED, replay_label(*key), str(done["host"]), replay=True))

    def _lost(
        self, result: RunResult, unit: ReplayUnit, why: str, commit: Callable[[ReplayRun], None]
    ) -> list[str]:
        """The replays of a repeat whose host was lost that never reached the driver (the
        one under way, and those after it), once every relayed one is committed."""
        with contextlib.suppress(OSError, TimeoutError):
            # What the subscription may not have brought yet: the scheduler keeps it all.
            for _, done in self.client.get_events(replays_topic(result.run_id)):
                self._commit(result, done, commit)
        record = result.metadata.replay
        assert record is not None
        done = committed(record)
        missing = [
            replay_label(str(s["name"]), unit.repeat)
            for s in unit.setups
            if (str(s["name"]), unit.repeat) not in done
        ]
        for label in missing:
            self.tell(News(Event.LOST, label, why=why, replay=True))
        return [f"{label}: {why}" for label in missing]

    def _submit(self, run_id: str, unit: ReplayUnit) -> Any:
        spec = {"run_id": run_id, "replay": unit.to_dict()}
        return submit_unit(self.client, spec, f"replay-{run_id}-r{unit.repeat}")


__all__ = ["ClusterReplays", "ReplaysLost", "run_replay_unit"]
