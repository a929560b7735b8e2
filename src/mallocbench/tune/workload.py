"""The workload a tune's settings are judged on, and the confirmation that measures it.

A tune on servers measures one workload: the experiment's engine, step and thread count
on its dataset. A tune of a trace measured a recording of one; when the trace says which
(it was recorded by a run with `record = true`, whose store keeps the cell it came from)
or the user names it (`--workload EXPERIMENT.toml`), the confirmation runs that
workload, so it checks the choice where it was made. Otherwise the confirmation's
workload is a generic one, and its comment says which fields to set.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mallocbench.errors import MallocbenchError
from mallocbench.run.experiment import Experiment, Setup

TRACES_DIR = "traces"  # where a run keeps its cells' traces (replay.cells.TRACES_DIR)


@dataclass
class Workload:
    """One engine x step x thread count on one dataset, as an experiment file says it."""

    engine: str
    step: str
    threads: int
    tables: int
    rows: int
    cache_bytes: int
    warmup_s: float
    max_warmup_s: float | None
    step_s: float
    source: str  # where it came from, for the confirmation's comment
    server_config: dict[str, str] = field(default_factory=dict)
    basedir: str | None = None
    # What every [[setup]] of the confirmation carries beside its allocator and knobs
    # (the server's config, CPUs, THP, caps), as TOML values.
    setup_fields: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "engine": self.engine,
            "step": self.step,
            "threads": self.threads,
            "dataset": {"tables": self.tables, "rows": self.rows, "cache_bytes": self.cache_bytes},
            "warmup_s": self.warmup_s,
            "step_s": self.step_s,
            "source": self.source,
        }

    def describe(self) -> str:
        return (
            f"{self.engine} {self.step} at {self.threads} client(s), {self.tables}x{self.rows} "
            f"rows, cache {self.cache_bytes >> 20} MiB"
        )


def one_workload(experiment: Experiment, where: str) -> None:
    """Refuse, in one line, an experiment that is not one workload: a tune compares
    settings on one engine, step and thread count (the confirmation says which)."""
    counts = [
        ("engines", [e.name for e in experiment.engines]),
        ("steps", [s.label for s in experiment.steps]),
        ("threads", [str(t) for t in experiment.threads]),
    ]
    for key, values in counts:
        if len(values) != 1:
            raise MallocbenchError(
                f"{where} has {len(values)} {key} ({', '.join(values)}): a tune measures one "
                f"workload, so keep one in {key} (a tune per {key[:-1]} for the others)"
            )
    if experiment.events:
        raise MallocbenchError(
            f"{where} has [[soak.event]] entries: a tune measures the load alone; remove them"
        )


def _setup_fields(setup: Setup, basedir: str | None) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    if setup.config:
        fields["config"] = dict(setup.config)
    if setup.basedir and setup.basedir != basedir:
        fields["basedir"] = setup.basedir
    if setup.cpus:
        fields["cpus"] = setup.cpus
    if setup.thp:
        fields["thp"] = setup.thp
    if setup.memory_limit_bytes:
        fields["memory_limit"] = setup.memory_limit_bytes
    if setup.cpu_quota:
        # The model keeps CPUs of time; the file says a share of the setup's CPUs.
        count = len(_cpus(setup.cpus)) if setup.cpus else (os.cpu_count() or 1)
        fields["cpu_quota"] = f"{setup.cpu_quota / count * 100:g}%"
    return fields


def _cpus(text: str) -> set[int]:
    out: set[int] = set()
    for part in text.split(","):
        low, _, high = part.strip().partition("-")
        out.update(range(int(low), int(high or low) + 1))
    return out


def from_experiment(experiment: Experiment, where: str) -> Workload:
    one_workload(experiment, where)
    base = experiment.setup(experiment.base)
    return Workload(
        engine=experiment.engines[0].name,
        step=experiment.steps[0].label,
        threads=experiment.threads[0],
        tables=experiment.dataset.tables,
        rows=experiment.dataset.rows,
        cache_bytes=experiment.dataset.cache_bytes,
        warmup_s=experiment.warmup_s,
        max_warmup_s=experiment.max_warmup_s if experiment.warmup_s > 0 else None,
        step_s=experiment.duration_s,
        source=f"the experiment {where}",
        server_config=dict(experiment.server_config),
        basedir=experiment.basedir,
        setup_fields=_setup_fields(base, experiment.basedir),
    )


def of_trace(trace: Path) -> Workload | None:
    """The workload a trace was recorded under, when the run that recorded it (a cell
    of an experiment with `record = true`, in RUN/traces/) is in RUN's store; None when
    nothing says (`mallocbench record --pid` of a server whose load is its users')."""
    from mallocbench.store import open_store
    from mallocbench.store.base import STORE_NAME

    trace = trace.absolute()
    if trace.parent.name != TRACES_DIR:
        return None
    store_path = trace.parent.parent / STORE_NAME
    if not store_path.is_file():
        return None
    relative = f"{TRACES_DIR}/{trace.name}"
    try:
        store = open_store(store_path, readonly=True)
        try:
            for run in reversed(store.list_runs()):
                result = store.load_run(str(run["run_id"]), with_samples=False)
                for cell in result.cells:
                    if cell.trace == relative:
                        return _from_cell(result, cell, store_path)
        finally:
            store.close()
    except MallocbenchError:
        return None  # a store this version cannot read: the confirmation stays generic
    return None


def _from_cell(result: Any, cell: Any, store_path: Path) -> Workload | None:
    meta = result.metadata
    dataset, durations = meta.dataset, meta.durations
    cache = dataset.cache_bytes if dataset is not None else None
    if dataset is None or durations is None or not (dataset.tables and dataset.rows and cache):
        return None
    setup = next((s for s in result.setups if s.name == cell.setup), None)
    fields: dict[str, Any] = {}
    if setup is not None:
        fields = {
            k: v
            for k, v in (
                ("config", dict(setup.config) if setup.config else None),
                ("cpus", setup.cpus),
                ("thp", setup.thp),
                ("memory_limit", setup.memory_limit_bytes),
            )
            if v
        }
    return Workload(
        engine=cell.engine,
        step=cell.step,
        threads=cell.threads,
        tables=dataset.tables,
        rows=dataset.rows,
        cache_bytes=cache,
        warmup_s=durations.warmup_s if durations.warmup_s is not None else 2.0,
        max_warmup_s=durations.max_warmup_s,
        step_s=durations.step_s or 10.0,
        source=f"run {result.run_id} in {store_path}, cell {cell.setup}/{cell.engine}/"
        f"{cell.step}/{cell.threads}t (the recording's)",
        setup_fields=fields,
    )


def _toml(value: Any) -> str:
    """A TOML value: JSON's strings, numbers and booleans are TOML's too."""
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{json.dumps(k)} = {_toml(v)}" for k, v in value.items()) + " }"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return json.dumps(value)


def toml_lines(workload: Workload) -> list[str]:
    """The top-level keys and tables of an experiment file that runs `workload`."""
    lines = [
        f"# The workload: {workload.source}.",
        f"engines = [{json.dumps(workload.engine)}]",
        f"steps = [{json.dumps(workload.step)}]",
        f"threads = [{workload.threads}]",
        "repeats = 5",
        "",
        "[dataset]",
        f"tables = {workload.tables}",
        f"rows = {workload.rows}",
        f"cache = {workload.cache_bytes}",
        "",
        "[durations]",
        f"warmup = {_toml(workload.warmup_s)}",
    ]
    if workload.max_warmup_s is not None and workload.warmup_s > 0:
        lines.append(f"max_warmup = {_toml(workload.max_warmup_s)}")
    lines.append(f"step = {_toml(workload.step_s)}")
    if workload.server_config or workload.basedir:
        lines += ["", "[server]"]
        if workload.basedir:
            lines.append(f"basedir = {json.dumps(workload.basedir)}")
        if workload.server_config:
            lines.append(f"config = {_toml(workload.server_config)}")
    return lines


def generic_lines(engine: str) -> list[str]:
    """A workload nobody said: the comment names the fields to set."""
    return [
        "# The workload is GENERIC: nothing said what the trace was recorded under (a run",
        "# with record = true says so, or tune's --workload). Set engines, steps, threads and",
        "# [dataset] to that workload before running this, or the confirmation measures",
        "# another program than the one that was tuned.",
        f"engines = [{json.dumps(engine)}]",
        'steps = ["point-query", "update-nonindex"]',
        "threads = [8]",
        "repeats = 5",
        "",
        "[dataset]",
        "tables = 4",
        "rows = 50000",
        'cache = "512M"',
        "",
        "[durations]",
        "warmup = 5",
        "step = 30",
    ]


def setup_lines(
    name: str, allocator: str, env: dict[str, str], fields: dict[str, Any]
) -> Sequence[str]:
    lines = ["", "[[setup]]", f"name = {json.dumps(name)}", f"allocator = {json.dumps(allocator)}"]
    if env:
        lines.append(f"knobs = {_toml(env)}")
    lines += [f"{key} = {_toml(value)}" for key, value in fields.items()]
    return lines
