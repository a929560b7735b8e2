"""Drive sysbench with the packaged Lua scripts and read its JSON report lines.

sysbench (C + LuaJIT) generates the load; Python only reads one line per second.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from mallocbench.errors import MallocbenchError
from mallocbench.servers.process import die_with_parent
from mallocbench.workloads.catalogue import Step, lua_dir

# Errors a write step may hit under concurrency; sysbench retries the event and counts them.
IGNORED_WRITE_ERRORS = "1213,1205,1020,1062,1180"
_HISTOGRAM_ROW = re.compile(r"^\s*([0-9.]+)\s+\|[* ]*\s(\d+)\s*$")


@dataclass
class Interval:
    """One per-second sysbench report."""

    t: float  # wall clock when the line arrived
    seconds: float
    events: int
    queries: int
    errors: int
    latency_ms: float

    @property
    def qps(self) -> float:
        return self.queries / self.seconds if self.seconds > 0 else 0.0

    @property
    def tps(self) -> float:
        return self.events / self.seconds if self.seconds > 0 else 0.0


# Turn owners are written one character a turn, so at most this many clients take turns.
TURN_DIGITS = "0123456789abcdefghijklmnopqrstuvwxyz"


@dataclass(frozen=True)
class TurnPlan:
    """Clients of several servers taking turns on the wall clock (mb_common.lua).

    `order` has one character per turn naming the client whose turn it is (an index
    into TURN_DIGITS); turn k runs from start + k x width to start + (k+1) x width.
    """

    order: str
    start: float  # Unix time the first turn begins
    width: float  # seconds

    def bounds(self, turn: int) -> tuple[float, float]:
        return self.start + turn * self.width, self.start + (turn + 1) * self.width

    @property
    def end(self) -> float:
        return self.start + len(self.order) * self.width

    def owner(self, turn: int) -> int:
        return TURN_DIGITS.index(self.order[turn])

    def args(self, mine: int) -> list[str]:
        return [
            f"--turns={self.order}",
            f"--turn-mine={TURN_DIGITS[mine]}",
            f"--turn-start={self.start:.6f}",
            f"--turn-width={self.width:.6f}",
        ]


@dataclass
class Turn:
    """What one client's workers did in one of its turns, summed over the workers."""

    index: int
    queries: int = 0
    events: int = 0
    errors: int = 0
    # Each worker's throughput over its own busy span (its first event to the end of
    # its last), summed: a worker whose last event ran past the turn's end is not
    # credited with time it did not count.
    qps: float = 0.0
    tps: float = 0.0
    began: float = 0.0  # the first worker's first event
    ended: float = 0.0  # the last worker's last event ended
    workers: int = 0  # how many reported it

    def add(self, record: dict[str, float]) -> None:
        busy = record["ended"] - record["began"]
        self.queries += int(record["queries"])
        self.events += int(record["events"])
        self.errors += int(record["errors"])
        if busy > 0:
            self.qps += record["queries"] / busy
            self.tps += record["events"] / busy
        self.began = min(self.began or record["began"], record["began"])
        self.ended = max(self.ended, record["ended"])

    @property
    def seconds(self) -> float:
        return max(0.0, self.ended - self.began)


@dataclass
class RunOutput:
    returncode: int
    seconds: float = 0.0
    events: int = 0
    queries: int = 0
    errors: int = 0
    reconnects: int = 0
    p95_ms: float | None = None
    p99_ms: float | None = None
    avg_ms: float | None = None
    client_cpu_s: float = 0.0
    threads: int = 0  # what sysbench ran with: a step may fix its own thread count
    intervals: list[Interval] = field(default_factory=list)
    output_tail: str = ""
    # Step-specific numbers a script reports with `mb.report_metric` (summed over threads).
    metrics: dict[str, float] = field(default_factory=dict)
    histogram: list[tuple[float, int]] = field(default_factory=list)  # latency ms, count
    turns: dict[int, Turn] = field(default_factory=dict)  # by turn index, with --turns
    # The harness ended it (a stop, the watchdog): a signal in returncode is then ours.
    stopped_by_harness: bool = False

    @property
    def killed_by(self) -> signal.Signals | None:
        """The signal that ended sysbench when something else than the harness sent it."""
        if self.returncode >= 0 or self.stopped_by_harness:
            return None
        try:
            return signal.Signals(-self.returncode)
        except ValueError:
            return None

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and self.seconds > 0

    @property
    def qps(self) -> float:
        return self.queries / self.seconds if self.seconds > 0 else 0.0

    @property
    def tps(self) -> float:
        return self.events / self.seconds if self.seconds > 0 else 0.0


def percentiles_from_histogram(
    rows: list[tuple[float, int]], wanted: tuple[float, ...] = (95.0, 99.0)
) -> tuple[dict[float, float], float | None]:
    """Percentiles (ms) and mean (ms) from sysbench's latency histogram rows."""
    total = sum(count for _, count in rows)
    if total == 0:
        return {}, None
    result: dict[float, float] = {}
    ordered = sorted(rows)
    for pct in wanted:
        threshold = total * pct / 100.0
        running = 0
        for value, count in ordered:
            running += count
            if running >= threshold:
                result[pct] = value
                break
    mean = sum(value * count for value, count in rows) / total
    return result, mean


def _set_latency(output: RunOutput) -> None:
    pcts, mean = percentiles_from_histogram(output.histogram)
    output.p95_ms, output.p99_ms, output.avg_ms = pcts.get(95.0), pcts.get(99.0), mean


def merge_outputs(outputs: list[RunOutput]) -> RunOutput:
    """Several runs of one step as one: totals summed, latency from the merged histogram.

    The first failed run (or the last run) gives the status and output tail.
    """
    if len(outputs) == 1:
        return outputs[0]
    failed = next((o for o in outputs if not o.ok), outputs[-1])
    merged = RunOutput(
        returncode=failed.returncode,
        threads=outputs[0].threads,
        output_tail=failed.output_tail,
        stopped_by_harness=failed.stopped_by_harness,
    )
    counts: dict[float, int] = {}
    for output in outputs:
        merged.seconds += output.seconds
        merged.events += output.events
        merged.queries += output.queries
        merged.errors += output.errors
        merged.reconnects += output.reconnects
        merged.client_cpu_s += output.client_cpu_s
        merged.intervals.extend(output.intervals)
        for name, value in output.metrics.items():
            merged.metrics[name] = merged.metrics.get(name, 0.0) + value
        for value, count in output.histogram:
            counts[value] = counts.get(value, 0) + count
    merged.histogram = sorted(counts.items())
    _set_latency(merged)
    return merged


@dataclass
class Explained:
    """One statement of a step's event with the server's EXPLAIN rows for it."""

    sql: str
    rows: list[dict[str, str | None]]

    @property
    def keys(self) -> list[str | None]:
        return [row.get("key") for row in self.rows]

    @property
    def extras(self) -> list[str]:
        return [row.get("Extra") or "" for row in self.rows]


# MariaDB's EXPLAIN columns, in order.
EXPLAIN_COLUMNS = (
    "id",
    "select_type",
    "table",
    "type",
    "possible_keys",
    "key",
    "key_len",
    "ref",
    "rows",
    "Extra",
)
# A step that does a fixed amount of work may take long on a big dataset; this only
# guards against a server that stopped answering.
UNTIL_DONE_LIMIT_S = 6 * 3600


def threads_for(step: Step, threads: int) -> int:
    """The thread count a step really runs with (some steps fix their own)."""
    return step.definition.threads or threads


def sysbench_binary() -> str:
    binary = shutil.which("sysbench")
    if binary is None:
        raise MallocbenchError(
            "sysbench is not installed: run `make setup` (apt-get install sysbench)"
        )
    return binary


def _child_setup() -> Callable[[], None]:
    """Runs in the forked child: a harness killed with SIGKILL takes its load with it."""
    return functools.partial(die_with_parent, os.getpid(), signal.SIGKILL)


@dataclass
class Sysbench:
    """sysbench bound to one server and one dataset shape.

    `connection_file` holds sysbench's --mysql-socket/-user/-password options (a 0600 file
    the private server writes): a password never appears on a command line, where any
    user could read it in /proc.
    """

    connection_file: str
    tables: int
    table_size: int
    engine_sql: str
    database: str = "sbtest"
    rand_seed: int = 0

    def _command(self, step: Step | None, script: str, threads: int) -> list[str]:
        cmd = [
            sysbench_binary(),
            str(lua_dir() / script),
            f"--config-file={self.connection_file}",
            f"--mysql-db={self.database}",
            f"--tables={self.tables}",
            f"--table-size={self.table_size}",
            f"--engine={self.engine_sql}",
            f"--threads={threads}",
            "--rand-type=uniform",
            f"--rand-seed={self.rand_seed}",
        ]
        if step is not None:
            cmd.append(f"--range={step.range}")
            if step.definition.writes:
                cmd.append(f"--mysql-ignore-errors={IGNORED_WRITE_ERRORS}")
            cmd.extend(step.definition.sysbench_args)
            cmd.extend(f"--{k}={v}" for k, v in step.options.items())
        return cmd

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        # The step scripts `require` their shared modules from the package's lua folder.
        env["LUA_PATH"] = f"{lua_dir()}/?.lua;;"
        # sysbench must not inherit a setup's allocator: only the server is under test.
        for key in list(env):
            if key == "LD_PRELOAD" or key.startswith(("MALLOC_", "MIMALLOC_", "TCMALLOC_")):
                env.pop(key)
        return env

    def _run_to_end(self, cmd: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            env=self._env(),
            timeout=timeout,
            check=False,
            preexec_fn=_child_setup(),
        )

    def prepare(self, threads: int, timeout: float = 3600) -> None:
        cmd = [*self._command(None, "point-query.lua", max(1, threads)), "prepare"]
        out = self._run_to_end(cmd, timeout)
        if out.returncode != 0:
            tail = "\n".join((out.stdout + out.stderr).strip().splitlines()[-5:])
            raise MallocbenchError(f"loading the dataset with sysbench failed: {tail}")

    def run(
        self,
        step: Step,
        threads: int,
        seconds: float,
        on_interval: Callable[[Interval], object] | None = None,
        should_stop: Callable[[], bool] | None = None,
        turns: tuple[TurnPlan, int] | None = None,
        on_start: Callable[[int], None] | None = None,
        on_turn: Callable[[Turn], None] | None = None,
    ) -> RunOutput:
        """Run one step for `seconds`, calling `on_interval` as each second is reported.

        A step with a fixed amount of work (`until_done`) ignores `seconds` and ends when
        its work is done; a step that fixes its thread count ignores `threads`. With
        `turns` (the plan and this client's index in it) the workers run only in this
        client's turns and end after its last; `seconds` is then a limit, and each turn's
        work is in the output's `turns`, each also given to `on_turn` once every worker
        has reported it. `on_start` gets sysbench's PID once it runs.
        """
        threads = threads_for(step, threads)
        until_done = step.definition.until_done
        limit_s = UNTIL_DONE_LIMIT_S if until_done else seconds
        cmd = [
            *self._command(step, step.definition.script_name, threads),
            *(turns[0].args(turns[1]) if turns else []),
            "--time=0" if until_done else f"--time={max(1, round(seconds))}",
            "--report-interval=1",
            "--histogram=on",
            "--percentile=99",
            # Past its time limit sysbench waits for in-flight events; do not wait forever
            # on a server that stopped answering.
            "--forced-shutdown=15",
            "run",
        ]
        proc = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=self._env(),
            text=True,
            bufsize=1,
            preexec_fn=_child_setup(),
        )
        if on_start is not None:
            on_start(proc.pid)
        result = RunOutput(returncode=-1, threads=threads)

        def stop() -> None:
            result.stopped_by_harness = True
            _kill_quietly(proc)

        watchdog = threading.Timer(limit_s + 60, stop)
        watchdog.daemon = True
        watchdog.start()
        reports = _Reports(result, on_interval, on_turn)
        assert proc.stdout is not None
        try:
            for line in proc.stdout:
                # Asked once a second, as each report arrives.
                if reports.read(line) and should_stop is not None and should_stop():
                    stop()
        finally:
            _, status, usage = os.wait4(proc.pid, 0)
            proc.returncode = os.waitstatus_to_exitcode(status)
            watchdog.cancel()
        result.returncode = proc.returncode
        result.client_cpu_s = usage.ru_utime + usage.ru_stime
        result.histogram = reports.histogram
        _set_latency(result)
        result.output_tail = "\n".join(reports.tail[-8:])
        return result

    def explain(self, step: Step, timeout: float = 120) -> list[Explained]:
        """EXPLAIN every statement of one event of `step`, exactly as the script sends it.

        Steps that build their own table (the insert benchmark) build it first, so this
        is not side-effect free for them.
        """
        cmd = [*self._command(step, step.definition.script_name, 1), "explain"]
        out = self._run_to_end(cmd, timeout)
        explained = []
        for line in out.stdout.splitlines():
            if line.startswith("MBEXPLAIN "):
                data = json.loads(line[10:])
                rows = [dict(zip(EXPLAIN_COLUMNS, row, strict=False)) for row in data["rows"]]
                explained.append(Explained(sql=data["sql"], rows=rows))
        if out.returncode != 0 or not explained:
            tail = "\n".join((out.stdout + out.stderr).strip().splitlines()[-5:])
            raise MallocbenchError(f"explaining {step.label} with sysbench failed: {tail}")
        return explained


@dataclass
class _Reports:
    """One sysbench run's output, read line by line into its RunOutput."""

    result: RunOutput
    on_interval: Callable[[Interval], object] | None
    on_turn: Callable[[Turn], None] | None
    histogram: list[tuple[float, int]] = field(default_factory=list)
    tail: list[str] = field(default_factory=list)

    def read(self, line: str) -> bool:
        """Take one line; True when it was a per-second report."""
        result = self.result
        if line.startswith("MBSTAT "):
            interval = _interval(_first_json(line[7:]))
            result.intervals.append(interval)
            if self.on_interval is not None:
                self.on_interval(interval)
            return True
        if line.startswith("MBFINAL "):
            final = _first_json(line[8:])
            result.seconds = float(final["total"])
            result.events = int(final["events"])
            result.queries = int(final["reads"] + final["writes"] + final["other"])
            result.errors = int(final["errors"])
            result.reconnects = int(final["reconnects"])
        elif line.startswith("MBTURN "):
            record = _first_json(line[7:])
            turn = result.turns.setdefault(int(record["turn"]), Turn(int(record["turn"])))
            turn.add(record)
            turn.workers += 1
            if self.on_turn is not None and turn.workers == result.threads:
                self.on_turn(turn)
        elif line.startswith("MBMETRIC "):
            for name, value in _first_json(line[9:]).items():
                result.metrics[name] = result.metrics.get(name, 0.0) + float(value)
        else:
            row = _HISTOGRAM_ROW.match(line)
            if row:
                self.histogram.append((float(row.group(1)), int(row.group(2))))
            elif line.strip():
                self.tail = [*self.tail[-19:], line.rstrip()]
        return False


def _first_json(text: str) -> dict[str, float]:
    # The report thread prints while workers may print too; read the object and no more.
    value, _ = json.JSONDecoder().raw_decode(text.strip())
    return value


def _interval(data: dict[str, float]) -> Interval:
    return Interval(
        t=time.time(),
        seconds=float(data["interval"]),
        events=int(data["events"]),
        queries=int(data["reads"] + data["writes"] + data["other"]),
        errors=int(data["errors"]),
        latency_ms=float(data["latency_pct_s"]) * 1000.0,
    )


def _kill_quietly(proc: subprocess.Popen[str]) -> None:
    # Never poll() here: reaping the child would leave run()'s wait4, which collects its
    # CPU usage, with no child to wait for (ChildProcessError). Until that wait4 the pid
    # cannot be reused, so signalling it is safe even when sysbench has just exited.
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGKILL)


def script_exists(step: Step) -> bool:
    return (Path(lua_dir()) / step.definition.script_name).is_file()
