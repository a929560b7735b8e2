"""Replay one trace under each setup (allocator + knobs), repeats interleaved.

The replayer is started with the setup's LD_PRELOAD and knobs and a clean environment
(the same as the pattern driver's: no inherited allocator knobs), and it reports which
file its malloc() came from, so a preload that did not take is an error, not a result.
"""

from __future__ import annotations

import json
import math
import signal
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path

from mallocbench.allocators import knobs as allocator_knobs
from mallocbench.errors import MallocbenchError
from mallocbench.model.metadata import ReplayRun
from mallocbench.native import replayer_path
from mallocbench.patterns.driver import check_malloc_library, clean_environment
from mallocbench.patterns.experiment import PatternSetup
from mallocbench.replay.trace import EXIT_USAGE, TraceError, replayer_error

TIMINGS = ("recorded", "none")
# recorded: every thread's calls one at a time in the order recorded, so each replay makes
# the allocator the same calls in the same order; batched: the recorded order kept by
# batches of 256 calls, free within a batch (a barrier per batch instead of a hand-over
# at every change of thread); threads: the replay's threads run freely (real
# concurrency, for CPU cost; the layout of some allocators, tcmalloc's, then varies with
# how they interleave: 2.8% peak-RSS CV where recorded gives 0.1%).
ORDERS = ("recorded", "batched", "threads")
# How the replayer's signal handler starts each line of its account of a crash: the
# signal and the thread it hit, then the call each replay thread was on.
CRASH_PREFIX = "mbreplay: crash: "


# One replay at --timing recorded lasts the trace's span over --speed; past a day it is
# refused (mbreplay refuses it too). The deadline is bounded apart from that: at --timing
# none a trace's span says little of its length, and Python cannot wait on a subprocess
# past 2**31 ms (24.8 days: OverflowError).
MAX_REPLAY_S = 86400.0
MAX_TIMEOUT_S = 6 * 86400.0


def replay_timeout(span_s: float, speed: float, timing: str) -> float:
    """The deadline of one replay of `span_s` seconds of trace: five times its own length
    and a minute to start. A recorded-timing replay longer than MAX_REPLAY_S is refused."""
    length = span_s / speed
    if timing == "recorded" and length > MAX_REPLAY_S:
        need = math.ceil(span_s / MAX_REPLAY_S * 1000) / 1000
        raise MallocbenchError(
            f"the trace spans {span_s:.0f} s: at --speed {speed:g} one replay would take "
            f"{length / 86400:.1f} days, over the bound of 1 day: give --speed {need:g} or "
            "more, or --timing none"
        )
    return min(max(120.0, length * 5 + 60), MAX_TIMEOUT_S)


def replay_command(
    trace: Path, timing: str, speed: float, order: str = "recorded", until: float | None = None
) -> list[str]:
    """`until`: replay only the first that many seconds of the trace (tune's trials)."""
    command = [
        str(replayer_path()),
        str(trace),
        "--timing",
        timing,
        "--speed",
        f"{speed:g}",
        "--order",
        order,
    ]
    return command if until is None else [*command, "--until", f"{until:g}"]


def passed_knobs(setup: PatternSetup, timing: str, speed: float) -> dict[str, str]:
    """The setup's knobs as the replayer gets them: at recorded timing and N times the
    pace, time-based ones at 1/N (knobs.at_speed); the setup keeps the trace's time."""
    if timing != "recorded":
        return dict(setup.knobs)
    return allocator_knobs.at_speed(setup.allocator, setup.knobs, speed)


def crashed(setup: str, repeat: int, signum: int, stderr: str) -> ReplayRun:
    """A replay killed by `signum`: the error names the signal and the thread it hit;
    `data["crash"]` keeps where every thread was (its call and recorded time)."""
    try:
        name = signal.Signals(signum).name
    except ValueError:  # a real-time signal has no name
        name = f"signal {signum}"
    lines = [
        line.removeprefix(CRASH_PREFIX)
        for line in stderr.splitlines()
        if line.startswith(CRASH_PREFIX)
    ]
    if not lines:  # killed from outside before the handler was set, or by SIGKILL
        return ReplayRun(setup, repeat, "crashed", error=f"killed by {name}")
    hit = lines[0].split(" in ", 1)[-1]
    return ReplayRun(
        setup,
        repeat,
        "crashed",
        data={"crash": {"signal": name, "in": hit, "threads": lines[1:]}},
        error=f"killed by {name} in {hit}",
    )


def run_once(
    setup: PatternSetup,
    trace: Path,
    timing: str,
    speed: float,
    repeat: int,
    timeout: float,
    order: str = "recorded",
    until: float | None = None,
) -> ReplayRun:
    """Replay once under `setup`; a bad trace raises, a crash is a result."""
    command = replay_command(trace, timing, speed, order, until)
    env = clean_environment(setup.allocator, passed_knobs(setup, timing, speed))
    try:
        proc = subprocess.run(
            command, env=env, capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired:
        return ReplayRun(setup.name, repeat, "failed", error=f"timed out after {timeout:.0f} s")
    if proc.returncode == EXIT_USAGE:
        raise TraceError(replayer_error(proc.stderr))
    if proc.returncode < 0:
        return crashed(setup.name, repeat, -proc.returncode, proc.stderr)
    if proc.returncode != 0:
        tail = proc.stderr.strip()[-300:]
        return ReplayRun(setup.name, repeat, "failed", error=f"exit {proc.returncode}: {tail}")
    try:
        data = json.loads(proc.stdout)
    except json.JSONDecodeError as exc:
        return ReplayRun(setup.name, repeat, "failed", error=f"unreadable output: {exc}")
    check_malloc_library(setup.allocator, data.get("malloc_library"))
    return ReplayRun(setup.name, repeat, "ok", data=data)


def replay_all(
    setups: Sequence[PatternSetup],
    trace: Path,
    repeats: int,
    timing: str = "recorded",
    speed: float = 1.0,
    duration_s: float = 0.0,
    progress: Callable[[str], None] | None = None,
    on_run: Callable[[ReplayRun], None] | None = None,
    order: str = "recorded",
    until: float | None = None,
    done: frozenset[tuple[str, int]] = frozenset(),
) -> list[ReplayRun]:
    """Every setup `repeats` times, interleaved (A B C A B C ...), so a drift of the host
    spreads over all setups instead of biasing the one that ran last. `on_run` receives
    each replay as it ends (to commit it: an interrupted replay keeps what it measured).
    `until`: only the trace's first that many seconds (advise's budget). `done`: the
    (setup, repeat) replays a resumed run has already committed, not run again."""
    if timing not in TIMINGS:
        raise MallocbenchError(f"--timing must be one of {', '.join(TIMINGS)}, not {timing!r}")
    if order not in ORDERS:
        raise MallocbenchError(f"--order must be one of {', '.join(ORDERS)}, not {order!r}")
    timeout = replay_timeout(duration_s if until is None else until, speed, timing)
    runs = []
    for repeat in range(repeats):
        for setup in setups:
            if (setup.name, repeat) in done:
                continue
            if progress is not None:
                progress(f"{setup.name} · repeat {repeat + 1}/{repeats}")
            run = run_once(setup, trace, timing, speed, repeat, timeout, order, until)
            runs.append(run)
            if on_run is not None:
                on_run(run)
    return runs
