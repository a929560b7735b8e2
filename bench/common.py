"""What the verdict benchmarks share: write an experiment, run it as a user would, judge it.

Each benchmark runs real `mallocbench run` processes on private servers and judges the
stored results with the very code the reports use (`relative_tables`), so what it
measures is what a user would have been told.
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mallocbench.analysis.summary import RatioCell, relative_tables
from mallocbench.model.results import RunResult

EXPERIMENT = """
name = "{name}"
base = "{base}"
design = "{design}"
alternate = "{alternate}"
engines = ["{engine}"]
steps = ["{step}"]
threads = [{threads}]
repeats = {repeats}
min_effect = "{min_effect}"
{budget_line}
[dataset]
tables = 4
rows = 20000
cache = "256M"
[durations]
warmup = 1
max_warmup = {max_warmup}
step = {step_s}
{slice_line}
{settle_line}
"""

SETUP = """
[[setup]]
name = "{name}"
allocator = "{allocator}"
{extra}
"""


@dataclass
class Plan:
    name: str
    setups: list[tuple[str, str, str]]  # (name, allocator, extra TOML lines)
    repeats: int = 3
    design: str = "interleaved"
    alternate: str = "runs"
    engine: str = "innodb"
    step: str = "point-query"
    threads: int = 8
    min_effect: str = "3%"
    step_s: float = 5
    slice_s: float | None = None
    max_warmup: float = 10
    budget_s: float | None = None  # design "auto" only: the wall time it chooses for
    settle: int | None = None  # alternate "turns" only: rounds of settle turns

    def toml(self) -> str:
        text = EXPERIMENT.format(
            name=self.name,
            base=self.setups[0][0],
            design=self.design,
            alternate=self.alternate,
            engine=self.engine,
            step=self.step,
            threads=self.threads,
            repeats=self.repeats,
            min_effect=self.min_effect,
            step_s=self.step_s,
            max_warmup=self.max_warmup,
            slice_line="" if self.slice_s is None else f"slice = {self.slice_s}",
            budget_line="" if self.budget_s is None else f"budget = {self.budget_s:g}",
            settle_line="" if self.settle is None else f"settle = {self.settle}",
        )
        for name, allocator, extra in self.setups:
            text += SETUP.format(name=name, allocator=allocator, extra=extra)
        return text


def run(
    plan: Plan, out: Path, *extra: str, stop_after_s: float | None = None
) -> tuple[RunResult, float]:
    """Run the plan into `out`; the stored result and the wall seconds it took.

    `stop_after_s` sends SIGTERM then, as a user's Ctrl-C would: the run stops and keeps
    every finished cell.
    """
    out.mkdir(parents=True, exist_ok=True)
    experiment = out / f"{plan.name}.toml"
    experiment.write_text(plan.toml())
    started = time.monotonic()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mallocbench.cli",
            "run",
            str(experiment),
            "--out",
            str(out),
            "--quiet",
            *extra,
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _, stderr = proc.communicate(timeout=stop_after_s)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=300)
    elapsed = time.monotonic() - started
    if proc.returncode != 0 and stop_after_s is None:
        raise SystemExit(f"{plan.name}: mallocbench run failed:\n{stderr[-2000:]}")
    data = json.loads((out / "results.json").read_text())
    return RunResult.from_dict(data), elapsed


def ratio_cells(result: RunResult) -> dict[str, RatioCell]:
    """Each setup's relative-QPS cell (one engine, step and thread count per benchmark)."""
    (table,) = relative_tables(result)
    (row,) = table.rows
    return row.cells


def emit(record: dict[str, object]) -> None:
    print(json.dumps(record), flush=True)


@contextlib.contextmanager
def server_under_load(
    tmp: Path,
    engine_name: str,
    dataset: Any,
    config_extra: dict[str, Any],
    allocator: str,
    step_label: str,
    threads: int,
    warm_s: float,
    load_s: float,
) -> Iterator[Any]:
    """A private server from the golden datadir under `allocator`, warmed by `warm_s` of
    the step, then kept under `threads` clients in the background for `load_s`: what the
    record and replay benches measure beside. Waits for the load when the body ends."""
    from mallocbench import allocators
    from mallocbench.servers import engines
    from mallocbench.servers.mariadb import PrivateServer, ServerConfig, find_build
    from mallocbench.servers.mariadb.dataset import golden_datadir
    from mallocbench.workloads.catalogue import step_from_label
    from mallocbench.workloads.sysbench import Sysbench

    build = find_build()
    engine = engines.get(engine_name)
    golden = golden_datadir(build, engine, dataset)
    config = ServerConfig(engine, dataset.cache_bytes, allocators.get(allocator), **config_extra)
    with PrivateServer(build, tmp / "srv", config) as server:
        server.copy_datadir_from(golden)
        server.start()
        sysbench = Sysbench(
            str(server.sysbench_options), dataset.tables, dataset.rows, engine.sql_engine
        )
        step = step_from_label(step_label)
        sysbench.run(step, threads, warm_s)
        load = threading.Thread(target=sysbench.run, args=(step, threads, load_s), daemon=True)
        load.start()
        yield server
        load.join()
