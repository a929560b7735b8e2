"""The experiment dialect: which keys each table of a `run` or `patterns` file takes, and
the checks of the `[[setup]]` tables both kinds share.

The key tables are the one source of truth for key names and value types: validators
read the names from them (unknown keys, near-miss suggestions) and `mallocbench schema`
turns them into a JSON Schema for editors. Each entry is a JSON Schema fragment.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from mallocbench import allocators
from mallocbench.allocators import knobs as allocator_knobs
from mallocbench.allocators.base import Allocator
from mallocbench.errors import MallocbenchError
from mallocbench.inputs.validation import Problems
from mallocbench.servers import families
from mallocbench.servers.options import check_knob

Schema = dict[str, Any]

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$")
# A setup's name becomes part of directory names (a session's is NAME.ENGINE.rN under
# --out), a socket path and report columns: 300 characters overflowed a file name.
MAX_NAME = 64
# Blocks: a server start of every setup each (patterns: runs of every case). Beyond a
# thousand an interval stops narrowing in any way a run could use (--max-repeats has
# the same cap), and the plan grows without end (a million repeats took 14 s and 674 MB).
MAX_REPEATS = 1000
# What one file may plan: cells of a run (setups x engines x steps x threads x repeats),
# runs of a patterns file (cases x threads x setups x repeats). At a second each this is
# more than a day of measuring.
MAX_PLANNED = 100_000


def _of(types: str | list[str], description: str, **extra: Any) -> Schema:
    return {"type": types, "description": description, **extra}


def table(
    properties: dict[str, Schema], description: str, required: tuple[str, ...] = ()
) -> Schema:
    """A TOML table that takes these keys and no others."""
    schema: Schema = {
        "type": "object",
        "description": description,
        "properties": properties,
        "additionalProperties": False,
    }
    return schema | ({"required": list(required)} if required else {})


def _list_of(item: Schema, description: str) -> Schema:
    """A list, or one value standing for a list of one (threads = 8)."""
    return {"anyOf": [{"type": "array", "items": item}, item], "description": description}


SCALAR = ["string", "integer", "number", "boolean"]
STRING_MAP = _of("object", "NAME = value", additionalProperties={"type": SCALAR})
SIZE = _of(["integer", "string"], 'bytes, or a size such as "256M" or "2G"')
DURATION = _of(["number", "string"], 'seconds, or a duration such as "90s", "30m" or "2h"')
FRACTION = _of(["number", "string"], 'a fraction (0.02) or a percentage ("2%")')

SETUP: dict[str, Schema] = {
    "name": _of(
        "string",
        "short name used in reports, e.g. je-arena1",
        pattern=_NAME.pattern,
        maxLength=MAX_NAME,
    ),
    "allocator": _of("string", "glibc, jemalloc, tcmalloc, tcmalloc_minimal, mimalloc or a .so"),
    "knobs": {**STRING_MAP, "description": "allocator environment, e.g. MALLOC_ARENA_MAX"},
    "description": _of("string", "what this setup is for"),
    # Keys that need a server: `patterns` accepts and leaves them out.
    "config": {**STRING_MAP, "description": "my.cnf overrides for this setup's server"},
    "basedir": _of("string", "the mysqld build to run (any basedir)"),
    "cpus": _of(["integer", "string"], 'the first N CPUs, or a CPU list such as "0-3"'),
    "thp": _of("string", "transparent huge pages", enum=["always", "madvise", "never"]),
    "memory_limit": SIZE | {"description": "cap of the server's own memory cgroup"},
    "cpu_quota": FRACTION | {"description": 'CPU time cap, a share of its CPUs ("95%")'},
    "record": _of("boolean", "record the server's allocation calls in each measured cell"),
    # A key of the pattern driver: `run` accepts and leaves it out.
    "options": _of("object", 'pattern-driver options, a variant: { init = "calloc" }'),
}
SETUP_TABLE = table(SETUP, "a setup: allocator, knobs and, for servers, config", ("allocator",))

RUN_DATASET: dict[str, Schema] = {
    "tables": _of("integer", "sysbench tables", minimum=1),
    "rows": _of(["integer", "string"], 'rows per table: 50000 or "50k"'),
    "cache": SIZE | {"description": "InnoDB buffer pool / RocksDB block cache"},
}
RUN_DURATIONS: dict[str, Schema] = {
    "warmup": DURATION | {"description": "at least this warmup (0: none)"},
    "max_warmup": DURATION | {"description": "at most this warmup"},
    "step": DURATION | {"description": "measured seconds per cell"},
    "slice": DURATION
    | {"description": "seconds per slice alternating between setups (runs: 5, turns: 1)"},
    "settle": _of("integer", "turns: rounds of unmeasured turns before the measured (1)"),
}
RUN_SERVER: dict[str, Schema] = {
    "family": _of(
        "string", "the server every setup runs (default mariadb)", enum=list(families.FAMILIES)
    ),
    "basedir": _of("string", "the server build every setup runs (mysqld's; PostgreSQL's bin)"),
    "port": _of("integer", "TCP port of the first server", minimum=1024, maximum=65535),
    "config": {**STRING_MAP, "description": "my.cnf (postgresql.conf) overrides for every setup"},
    "memory_limit": SIZE | {"description": "cap every setup's memory cgroup"},
}
SOAK_EVENT: dict[str, Schema] = {
    "action": _of(
        "string",
        "what the event does beside the soak's load",
        enum=[
            "dump",
            "backup",
            "alter",
            "optimize",
            "big-sort",
            "connect-storm",
            "sql",
            "hash-join",
            "vacuum",
            "create-index",
        ],  # fmt: skip
    ),
    "every": DURATION | {"description": "run it this often, the first this long after the start"},
    "at": DURATION | {"description": "run it once, this long after the server's start"},
    "table": _of(
        "string", "alter, optimize, big-sort, vacuum, create-index: the dataset's table (sbtest1)"
    ),
    "sessions": _of("integer", "big-sort, hash-join: sessions at once", minimum=1),
    "sort_buffer": SIZE | {"description": "big-sort: sort_buffer_size asked for (32M)"},
    "connections": _of("integer", "connect-storm: connections at once", minimum=1),
    "sql": _of("string", "sql: the one statement to run"),
    "work_mem": SIZE | {"description": "PostgreSQL big-sort, hash-join: work_mem asked for (64M)"},
    "maintenance_work_mem": SIZE
    | {"description": "PostgreSQL vacuum, create-index: maintenance_work_mem (the server's)"},
    "settle": DURATION
    | {"description": "PostgreSQL: how long the backend stays open after the work (10s)"},
}
RUN_SOAK: dict[str, Schema] = {
    "event": {
        "type": "array",
        "items": table(SOAK_EVENT, "an event of a soak", ("action",)),
        "description": "[[soak.event]] tables: work run beside a soak's load",
    },
}
RUN_DECISION: dict[str, Schema] = {
    "priority": _list_of(
        _of("string", "throughput, rss, p99 or cpu", enum=["throughput", "rss", "p99", "cpu"]),
        "what matters, most important first (default: throughput, rss)",
    ),
    "memory_budget": SIZE
    | {"description": "peak RSS a setup may use: a peak-RSS loss within it is taken"},
    "max_loss": _of(
        "object",
        'the loss taken per objective for a gain on a priority: { rss = "10%" }',
        properties={name: FRACTION for name in ("throughput", "p99", "rss", "cpu")},
        additionalProperties=False,
    ),
}
RUN_TOP: dict[str, Schema] = {
    "name": _of("string", "the experiment's name"),
    "description": _of("string", "what the experiment asks"),
    "base": _of("string", "the setup others are compared with"),
    "engines": _list_of(
        _of("string", "innodb or myrocks (PostgreSQL: leave out)"), "engines to run"
    ),
    "steps": _list_of(_of("string", '"name", "name range=N" or a group'), "steps to run"),
    "threads": _list_of(_of("integer", "clients", minimum=1), "client counts"),
    "repeats": _of(
        "integer", "blocks: server starts of every setup", minimum=1, maximum=MAX_REPEATS
    ),
    "design": _of("string", "how setups share time", enum=["interleaved", "sequential", "auto"]),
    "alternate": _of(
        "string",
        "interleaved slices: sysbench runs of their own, or turns of connected clients",
        enum=["runs", "turns"],
    ),
    "min_effect": FRACTION | {"description": "smaller changes are never findings"},
    "budget": DURATION
    | {"description": 'design = "auto": the wall time it fits the chosen design to'},
    "record": _of("boolean", "every setup records (a setup's own record wins)"),
    "dataset": table(RUN_DATASET, "the sysbench tables every engine loads"),
    "durations": table(RUN_DURATIONS, "how long each cell warms and is measured"),
    "server": table(RUN_SERVER, "what every setup's server shares"),
    "setup": {"type": "array", "items": SETUP_TABLE, "description": "[[setup]] tables"},
    "soak": table(RUN_SOAK, "what `mallocbench soak` runs beside its load"),
    "decision": table(RUN_DECISION, "how `recommend` and the reports decide: priorities, budgets"),
}

CASE: dict[str, Schema] = {
    "pattern": _of("string", "the allocation pattern"),
    "name": _of("string", "the case's name in reports"),
    "threads": _list_of(_of("integer", "threads", minimum=1), "thread counts"),
    "seconds": _of("number", "seconds per run"),
    "ops": _of("integer", "operations per thread (instead of seconds)", minimum=1),
    "seed": _of("integer", "random seed", minimum=0),
    "setups": _of("array", "the setups this case runs", items={"type": "string"}),
    "base": _of("string", "this case's base setup"),
}
PATTERNS_TOP: dict[str, Schema] = {
    "name": RUN_TOP["name"],
    "description": RUN_TOP["description"],
    "base": RUN_TOP["base"],
    "repeats": _of("integer", "runs of every case and setup", minimum=1, maximum=MAX_REPEATS),
    "seconds": CASE["seconds"],
    "ops": CASE["ops"],
    "threads": CASE["threads"],
    "seed": CASE["seed"],
    "setups": _of("object", "older spelling: [setups.NAME]", additionalProperties=SETUP_TABLE),
    "setup": RUN_TOP["setup"],
    # [[patterns]] tables: CASE keys and the driver's options (mallocbench.patterns.schema).
    "patterns": _of("array", "[[patterns]] tables: a pattern, its options and overrides"),
}


# --- the shared [[setup]] checks ------------------------------------------------------------


@dataclass
class SetupTable:
    """One setup table as written, with where it stands and how messages name it."""

    path: tuple[str | int, ...]
    raw: dict[str, Any]
    label: str  # "setup je" ([[setup]]) or "setups.je" (the older [setups.NAME])
    name: str | None = None  # None until the allocator gives a default name


@dataclass
class CommonSetup:
    """What a setup means to both kinds of file."""

    name: str
    allocator: Allocator
    spec: str
    knobs: dict[str, str] = field(default_factory=dict)
    description: str = ""


def setup_tables(problems: Problems, data: dict[str, Any], older: bool) -> list[SetupTable]:
    """The `[[setup]]` tables (and with `older`, the `[setups.NAME]` ones)."""
    if older and "setups" in data:
        if "setup" in data:
            problems.add(("setups",), "give the setups once: [[setup]] tables or [setups.NAME]")
            return []
        named = data["setups"]
        if not isinstance(named, dict) or not named:
            problems.add(("setups",), 'define at least one setup: [[setup]] name = "glibc"')
            return []
        return [SetupTable(("setups", n), t, f"setups.{n}", n) for n, t in named.items()]
    listed = data.get("setup")
    if not isinstance(listed, list) or not listed:
        problems.add(
            ("setup",), "the experiment has no setups: add [[setup]] tables with name and allocator"
        )
        return []
    tables = []
    for index, raw in enumerate(listed):
        name = raw.get("name") if isinstance(raw, dict) else None
        label = f"setup {name}" if isinstance(name, str) else f"setup #{index + 1}"
        tables.append(SetupTable(("setup", index), raw, label, name))
    return tables


def common_setups(problems: Problems, tables: list[SetupTable]) -> dict[int, CommonSetup]:
    """Name, allocator, knobs and description of every table that has them right, by
    position; each table's problems are recorded, and names must differ."""
    result: dict[int, CommonSetup] = {}
    seen: set[str] = set()
    for index, table in enumerate(tables):
        setup = _common_setup(problems, table)
        if setup is None:
            continue
        if setup.name in seen:
            problems.add(
                table.path + ("name",),
                f"setup name {setup.name!r} is used twice: names must differ",
            )
            continue
        seen.add(setup.name)
        result[index] = setup
    return result


def setup_names(tables: list[SetupTable]) -> list[str]:
    """The names the tables give or imply, for checks of base and setups = [...] that
    should not repeat a broken setup's own problem."""
    return [t.name or str(t.raw.get("allocator", "")) for t in tables if isinstance(t.raw, dict)]


def _common_setup(problems: Problems, table: SetupTable) -> CommonSetup | None:
    raw, path, label = table.raw, table.path, table.label
    if not isinstance(raw, dict):
        problems.add(path, f"{label} is not a table: write [[setup]] with name and allocator")
        return None
    where = f"[[setup]] {table.name}" if path[0] == "setup" else f"[setups.{table.name}]"
    problems.unknown_keys(path, raw, SETUP, where)
    spec = raw.get("allocator")
    if not spec:
        problems.add(path, f'{label} has no allocator: set allocator = "jemalloc" or a .so path')
        return None
    allocator = problems.check(path + ("allocator",), _allocator, str(spec), label)
    name = table.name if table.name is not None else (allocator.name if allocator else None)
    if name is not None and not _NAME.match(str(name)):
        problems.add(
            path + ("name",),
            f"setup name {name!r} is invalid: use letters, digits, '-', '_' and '.'",
        )
        return None
    if name is not None and len(str(name)) > MAX_NAME:
        problems.add(
            path + ("name",),
            f"setup name {str(name)[:20]}... is {len(str(name))} characters long: give at "
            f"most {MAX_NAME} (it names directories and report columns)",
        )
        return None
    knobs = setup_knobs(problems, path + ("knobs",), raw.get("knobs", {}), label, allocator)
    if allocator is None or name is None or knobs is None:
        return None
    return CommonSetup(str(name), allocator, str(spec), knobs, str(raw.get("description", "")))


def _allocator(spec: str, label: str) -> Allocator:
    try:
        return allocators.get(spec)
    except MallocbenchError as exc:  # said again with the setup it is about
        raise MallocbenchError(f"{label}.allocator: {exc}") from None


def setup_knobs(
    problems: Problems,
    path: tuple[str | int, ...],
    value: object,
    label: str,
    allocator: Allocator | None,
) -> dict[str, str] | None:
    """A setup's knobs as strings, each checked, and only for the setup's allocator."""
    knobs = problems.check(path, string_map, value, f"{label}.knobs")
    if knobs is None:
        return None
    for key, text in knobs.items():
        problems.check(path + (key,), check_knob, key, text, label)
    if allocator is None:
        return None if problems.failed(*path) else knobs
    foreign = {k: allocators.knob_allocator_mismatch(allocator, {k: v}) for k, v in knobs.items()}
    for key, owner in foreign.items():
        if owner:
            problems.add(
                path + (key,),
                f"{label}.knobs: knob {owner[0]} has no effect on {allocator.name}: "
                "remove it or change the allocator",
            )
            break
    # A name the installed library does not read would be measured as if it had worked.
    own = {k: v for k, v in knobs.items() if not foreign[k] and not problems.failed(*path, k)}
    for key, message in allocator_knobs.raw_problems(allocator, own):
        problems.add(path + (key,), f"{label}.knobs: {message}")
    return None if problems.failed(*path) else knobs


def string_map(value: object, key: str) -> dict[str, str]:
    """A table of NAME = single value, as strings (true/false as the server writes them)."""
    if not isinstance(value, dict):
        raise MallocbenchError(f"{key} = {value!r} is invalid: write a table of NAME = value")
    result = {}
    for k, v in value.items():
        if isinstance(v, dict | list):
            raise MallocbenchError(f"{key}.{k} must be a single value, not {type(v).__name__}")
        result[str(k)] = str(v).lower() if isinstance(v, bool) else str(v)
    return result
