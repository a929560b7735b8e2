"""The load generators of a private PostgreSQL server, read back like the MariaDB steps:
sysbench's OLTP scripts through its pgsql driver, and pgbench's built-in scripts.

Which script and options a step runs is the PostgreSQL family's (servers/postgresql/
workload.py, pgbench.py); this is only the binding to the harness's RunOutput.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from mallocbench.errors import MallocbenchError
from mallocbench.servers.postgresql import pgbench
from mallocbench.servers.postgresql import workload as forms
from mallocbench.servers.postgresql.build import PgBuild
from mallocbench.workloads.catalogue import Step, StepDef
from mallocbench.workloads.sysbench import (
    Explained,
    Interval,
    RunOutput,
    Sysbench,
    _child_setup,
)

PGBENCH_GROUP = "pgbench-builtin"
PGBENCH_STEPS = {
    "tpcb-like": StepDef(
        "tpcb-like",
        PGBENCH_GROUP,
        "BEGIN; UPDATE accounts, SELECT balance, UPDATE tellers, UPDATE branches, "
        "INSERT history; END",
        (),
        writes=True,
        takes_turns=False,
    ),
    "simple-update": StepDef(
        "simple-update",
        PGBENCH_GROUP,
        "BEGIN; UPDATE accounts, SELECT balance, INSERT history; END",
        (),
        writes=True,
        takes_turns=False,
    ),
    "select-only": StepDef(
        "select-only",
        PGBENCH_GROUP,
        "SELECT abalance FROM pgbench_accounts WHERE aid = ?",
        (),
        takes_turns=False,
    ),
}


@dataclass
class PgSysbench(Sysbench):
    """`connection_file` holds --pgsql-host/-port/-user/-password/-db (a 0600 file of
    the server's): the password never reaches a command line. Turns
    (run.measure.measure_turns) need the packaged scripts' worker loop, so PostgreSQL
    steps are measured in slices."""

    engine_sql: str = ""

    def _command(self, step: Step | None, script: str, threads: int) -> list[str]:
        return [
            *forms.command(self.connection_file, self.tables, self.table_size, threads, step),
            f"--rand-seed={self.rand_seed}",
        ]

    def _env(self) -> dict[str, str]:
        env = super()._env()
        env["LUA_PATH"] = forms.lua_path()
        return env

    def explain(self, step: Step, timeout: float = 120) -> list[Explained]:
        raise MallocbenchError(f"explaining {step.label} is not done for PostgreSQL yet")


def pgbench_step(name: str) -> Step:
    """One of pgbench's built-in scripts as a step (not in the catalogue: PostgreSQL's own)."""
    return Step(PGBENCH_STEPS[pgbench.script(name)], 0)


@dataclass
class Pgbench:
    """pgbench on a private PostgreSQL server; `client_env` is the server's 0600 file of
    PGHOST, PGPASSWORD and the rest. An interval's latency is pgbench's average for that
    second (sysbench's is a percentile), and a run has no histogram."""

    build: PgBuild
    client_env: Path

    def _env(self) -> dict[str, str]:
        env = {
            k: v
            for k, v in os.environ.items()
            if k != "LD_PRELOAD" and not k.startswith(("MALLOC_", "MIMALLOC_", "TCMALLOC_"))
        }
        return {**env, **pgbench.client_environment(self.client_env)}

    def run(
        self,
        step: Step,
        threads: int,
        seconds: float,
        on_interval: Callable[[Interval], object] | None = None,
        should_stop: Callable[[], bool] | None = None,
    ) -> RunOutput:
        statements = pgbench.SCRIPTS[pgbench.script(step.name)]
        proc = subprocess.Popen(
            pgbench.run_command(self.build, step.name, threads, seconds),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=self._env(),
            text=True,
            bufsize=1,
            preexec_fn=_child_setup(),  # a harness killed outright takes its load along
        )
        result = RunOutput(returncode=-1, threads=threads)
        watchdog = threading.Timer(seconds + 60, _stop, (proc, result))
        watchdog.daemon = True
        watchdog.start()
        lines: list[str] = []
        last = 0.0
        assert proc.stdout is not None
        try:
            for line in proc.stdout:
                lines.append(line)
                seen = pgbench.progress(line)
                if seen is None:
                    continue
                interval = _interval(seen, seen.at_s - last, statements)
                last = seen.at_s
                result.intervals.append(interval)
                if on_interval is not None:
                    on_interval(interval)
                if should_stop is not None and should_stop():
                    _stop(proc, result)
        finally:
            result.returncode = proc.wait()
            watchdog.cancel()
        _finish(result, "".join(lines), statements)
        return result


def _interval(seen: pgbench.Progress, width: float, statements: int) -> Interval:
    events = round(seen.tps * width)
    return Interval(
        t=time.time(),
        seconds=width,
        events=events,
        queries=events * statements,
        errors=seen.failed,
        latency_ms=seen.latency_ms,
    )


def _finish(result: RunOutput, text: str, statements: int) -> None:
    said = pgbench.summary(text)
    result.seconds = said.get("duration_s", 0.0) if "transactions" in said else 0.0
    result.events = int(said.get("transactions", 0))
    result.queries = result.events * statements
    result.errors = int(said.get("failed", 0))
    result.avg_ms = said.get("latency_ms")
    result.output_tail = "\n".join(text.strip().splitlines()[-8:])


def _stop(proc: subprocess.Popen[str], result: RunOutput) -> None:
    result.stopped_by_harness = True
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGINT)


__all__ = ["PGBENCH_STEPS", "PgSysbench", "Pgbench", "pgbench_step"]
