"""The catalogue's steps that PostgreSQL can run, as sysbench's pgsql driver runs them.

The packaged step scripts (workloads/lua) are MariaDB's: their SQL names engines and
index hints. Their PostgreSQL forms are sysbench's own OLTP scripts, which send the
statements the catalogue describes to the same schema (sbtestN: id, k, c, pad, index on
k), wrapped so they print the harness's report lines (lua/mb_pgsql_report.lua) and are
read back by the same reader (workloads/pgsql.py binds them to it). A step with no form
here is refused by name.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Protocol

from mallocbench.errors import MallocbenchError

# The script whose `prepare` loads the dataset (oltp_common's tables and index).
LOADER = "oltp_read_only"
_RANGE_KINDS = ("point_selects", "simple_ranges", "sum_ranges", "order_ranges", "distinct_ranges")


class StepLike(Protocol):
    """What a form needs of a catalogue step (workloads.catalogue.Step is one)."""

    @property
    def name(self) -> str: ...
    @property
    def range(self) -> int: ...
    @property
    def options(self) -> Mapping[str, str]: ...


@dataclass(frozen=True)
class PgForm:
    """A step's PostgreSQL form: sysbench's built-in script and its options."""

    script: str
    args: tuple[str, ...] = ()
    takes_range: bool = False


def _only(kind: str) -> tuple[str, ...]:
    """oltp_read_only reduced to one kind of range query, outside a transaction: the
    catalogue's single-statement range-agg steps."""
    counts = tuple(f"--{k.replace('_', '-')}={1 if k == kind else 0}" for k in _RANGE_KINDS)
    return (*counts, "--skip-trx=on")


FORMS: dict[str, PgForm] = {
    "point-query": PgForm("oltp_point_select"),
    "read-only": PgForm("oltp_read_only", takes_range=True),
    "read-only-distinct": PgForm("oltp_read_only", _only("distinct_ranges"), True),
    "read-only-order": PgForm("oltp_read_only", _only("order_ranges"), True),
    "read-only-simple": PgForm("oltp_read_only", _only("simple_ranges"), True),
    "read-only-sum": PgForm("oltp_read_only", _only("sum_ranges"), True),
    "read-write": PgForm("oltp_read_write", takes_range=True),
    "write-only": PgForm("oltp_write_only"),
    "update-index": PgForm("oltp_update_index"),
    "update-nonindex": PgForm("oltp_update_non_index"),
    "delete": PgForm("oltp_delete"),
    "insert": PgForm("oltp_insert"),
}


def form_named(name: str) -> PgForm:
    """A step's PostgreSQL form by the step's name; one without is refused in one line."""
    found = FORMS.get(name)
    if found is None:
        raise MallocbenchError(
            f"step {name!r} has no PostgreSQL form yet: PostgreSQL runs "
            f"{', '.join(FORMS)}; remove it from the experiment's steps"
        )
    return found


def form(step: StepLike) -> PgForm:
    return form_named(step.name)


def check_steps(steps: Iterable[StepLike]) -> None:
    """Refuse, before any server starts, a step PostgreSQL cannot run."""
    for step in steps:
        form(step)


def lua_dir() -> Path:
    return Path(str(resources.files("mallocbench.servers.postgresql") / "lua"))


def step_args(step: StepLike) -> list[str]:
    """sysbench's arguments for one step after the script: its options and range."""
    chosen = form(step)
    args = list(chosen.args)
    if chosen.takes_range:
        args.append(f"--range-size={step.range}")
    args.extend(f"--{k}={v}" for k, v in step.options.items())
    return args


def command(
    connection_file: str, tables: int, rows: int, threads: int, step: StepLike | None
) -> list[str]:
    """sysbench's command line for one step on a private server, or for loading the
    dataset (`step` None; the caller appends `prepare`)."""
    binary = shutil.which("sysbench")
    if binary is None:
        raise MallocbenchError(
            "sysbench is not installed: run `make setup` (apt-get install sysbench)"
        )
    builtin = form(step).script if step is not None else LOADER
    return [
        binary,
        str(lua_dir() / f"pg_{builtin}.lua"),
        f"--config-file={connection_file}",
        "--db-driver=pgsql",
        f"--tables={tables}",
        f"--table-size={rows}",
        f"--threads={threads}",
        "--rand-type=uniform",
        *(step_args(step) if step is not None else []),
    ]


def lua_path() -> str:
    """LUA_PATH for sysbench: the wrappers `require` the report hooks beside them;
    sysbench finds its own scripts (oltp_common) by itself."""
    return f"{lua_dir()}/?.lua;;"


__all__ = [
    "FORMS",
    "PgForm",
    "check_steps",
    "command",
    "form",
    "form_named",
    "lua_path",
    "step_args",
]
