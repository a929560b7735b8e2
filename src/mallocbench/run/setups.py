"""An experiment's [[setup]] tables and its [server] table read into Setups: the server's
config, CPU sets, memory and CPU caps, each checked against what this host can give.
"""

from __future__ import annotations

import itertools
import os
import re
from dataclasses import dataclass, field
from typing import Any

import psutil

from mallocbench.errors import MallocbenchError, did_you_mean
from mallocbench.inputs.tomlpos import KeyPath
from mallocbench.inputs.validation import Problems
from mallocbench.run.dialect import (
    RUN_SERVER,
    CommonSetup,
    SetupTable,
    common_setups,
    setup_names,
    string_map,
)
from mallocbench.run.experiment import MIN_MEMORY_LIMIT, THP_MODES, Setup
from mallocbench.servers import families
from mallocbench.servers.cgroup.parents import capping_problem, cpu_capping_problem
from mallocbench.servers.options import check_config
from mallocbench.units import gb, parse_fraction, parse_size


def expect(value: object, kind: type | tuple[type, ...], key: str, hint: str) -> Any:
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        raise MallocbenchError(f"{key} = {value!r} is invalid: {hint}")
    return value


def _cpu_list(value: object, key: str) -> str | None:
    """A taskset CPU list; a whole number N means the first N CPUs (a vCPU-count sweep)."""
    if value is None:
        return None
    available = sorted(os.sched_getaffinity(0))
    if isinstance(value, int) and not isinstance(value, bool):
        if not 1 <= value <= len(available):
            raise MallocbenchError(
                f"{key} = {value} CPUs, but {len(available)} are available here: "
                f'use 1-{len(available)}, or a CPU list such as "0-3"'
            )
        return ",".join(str(c) for c in available[:value])
    text = str(value).strip()
    if not re.fullmatch(r"\d+(-\d+)?(,\d+(-\d+)?)*", text):
        raise MallocbenchError(
            f'{key} = {value!r} is not a CPU list: write e.g. "0-3" or "0,2", or a count such as 4'
        )
    wanted = _expand_cpus(text)
    missing = sorted(wanted - set(available))
    if missing or not wanted:
        raise MallocbenchError(
            f"{key} = {value!r} names CPU {missing[0] if missing else '?'}, which this machine "
            f"does not offer: available are {_ranges(available)}"
        )
    return text


def _expand_cpus(text: str) -> set[int]:
    """ "0-2,5" -> {0, 1, 2, 5}."""
    wanted: set[int] = set()
    for part in text.split(","):
        first, _, last = part.partition("-")
        wanted.update(range(int(first), int(last or first) + 1))
    return wanted


def _ranges(cpus: list[int]) -> str:
    """[0, 1, 2, 5] -> "0-2,5", as taskset and lscpu write CPU lists."""
    parts = []
    for _, run in itertools.groupby(enumerate(cpus), key=lambda pair: pair[1] - pair[0]):
        members = [cpu for _, cpu in run]
        parts.append(str(members[0]) if len(members) == 1 else f"{members[0]}-{members[-1]}")
    return ",".join(parts)


def _memory_limit(value: object, key: str) -> int | None:
    """A setup's memory cap in bytes; None when not given."""
    if value is None:
        return None
    limit = parse_size(value, key)
    if limit < MIN_MEMORY_LIMIT:
        raise MallocbenchError(
            f"{key} = {value!r} is below {MIN_MEMORY_LIMIT >> 20} MiB, the smallest cap: the "
            f"server needs about 110 MiB just to start; give at least {MIN_MEMORY_LIMIT >> 20}M"
        )
    ram = psutil.virtual_memory().total
    if limit > ram:
        raise MallocbenchError(
            f"{key} = {value!r} is more than this machine's {gb(ram)} GiB of RAM, so it could "
            f"never act: give at most {ram >> 20}M, or no memory_limit"
        )
    return limit


def _cpu_quota(value: object, label: str, cpus: str | None) -> float | None:
    """CPUs of time per second from "95%": a share of the setup's CPUs (all, if unset).

    A quota of every CPU but a little is the smallest handicap that can be given a server
    on purpose: benchmarks use it as a known effect.
    """
    if value is None:
        return None
    key = f"{label}.cpu_quota"
    share = parse_fraction(value, key, upper=1e6)
    if share <= 0:
        raise MallocbenchError(f"{key} = {value!r} would stop the server: give e.g. 95%")
    if share > 1:
        raise MallocbenchError(
            f"{key} = {value!r} is more than all of the setup's CPUs: give at most 100%, e.g. 95%"
        )
    problem = cpu_capping_problem()
    if problem is not None:
        raise MallocbenchError(f"{key} needs a writable cpu cgroup, but {problem}")
    count = len(_expand_cpus(cpus)) if cpus else (os.cpu_count() or 1)
    return share * count


def _check_capping(name: str) -> None:
    """A cap is only real in a memory cgroup of its own: say now if none can be made."""
    problem = capping_problem()
    if problem is not None:
        raise MallocbenchError(
            f"setup {name} has a memory_limit, which needs a writable memory cgroup, but {problem}"
        )


@dataclass
class _Server:
    """The [server] table: what every setup's server shares."""

    basedir: str | None = None
    port: int | None = None
    config: dict[str, str] = field(default_factory=dict)
    memory_limit: int | None = None
    record: bool = False  # the experiment's `record`: every setup's default
    family: str = families.DEFAULT


def _record(value: object, key: str) -> bool:
    if not isinstance(value, bool):
        raise MallocbenchError(
            f"{key} = {value!r} is not true or false: write {key.rsplit('.', 1)[-1]} = true "
            "to record the server's allocation calls in each measured cell"
        )
    return value


def read_server(problems: Problems, data: dict[str, Any]) -> _Server:
    raw = problems.check(
        ("server",), expect, data.get("server", {}), dict, "server", "write a [server] table"
    )
    record = problems.check(("record",), _record, data.get("record", False), "record")
    if raw is None:
        return _Server(record=bool(record))
    problems.unknown_keys(("server",), raw, RUN_SERVER, "[server]")
    family = problems.check(("server", "family"), _family, raw.get("family", families.DEFAULT))
    return _Server(
        family=family or families.DEFAULT,
        record=bool(record),
        basedir=raw.get("basedir") or None,
        port=problems.check(("server", "port"), _port, raw.get("port")),
        config=_config(problems, ("server", "config"), raw.get("config", {}), "[server]"),
        memory_limit=problems.check(
            ("server", "memory_limit"),
            _memory_limit,
            raw.get("memory_limit"),
            "server.memory_limit",
        ),
    )


def _family(name: object) -> str:
    expect(name, str, "server.family", 'write e.g. family = "postgresql"')
    return families.get(str(name)).name


def _port(port: object) -> int | None:
    if port is None:
        return None
    expect(port, int, "server.port", "give a TCP port number, e.g. 33060")
    if not 1024 <= port <= 65535:  # type: ignore[operator]
        raise MallocbenchError(f"server.port = {port} is out of range: use 1024-65535")
    return port  # type: ignore[return-value]


def _config(problems: Problems, path: KeyPath, value: object, label: str) -> dict[str, str]:
    """my.cnf overrides, each checked; `label` names their owner ("[server]", "setup je")."""
    key = "server.config" if label == "[server]" else f"{label}.config"
    config = problems.check(path, string_map, value, key) or {}
    for name, text in config.items():
        problems.check(path + (name,), check_config, name, text, label)
    return config


def read_setups(problems: Problems, tables: list[SetupTable], server: _Server) -> list[Setup]:
    """The setups whose tables are right; the others' problems are recorded."""
    common = common_setups(problems, tables)
    setups = []
    for index, table in enumerate(tables):
        setup = _server_setup(problems, table, common.get(index), server)
        if setup is not None:
            setups.append(setup)
    if len(setups) < len(tables):
        return setups  # the cgroup check is for a plan whose setups are all right
    capped = [(t, s) for t, s in zip(tables, setups, strict=True) if s.memory_limit_bytes]
    if capped:
        table, setup = capped[0]
        own = "memory_limit" in table.raw
        where = table.path + ("memory_limit",) if own else ("server", "memory_limit")
        problems.check(where, _check_capping, setup.name)
    return setups


def _server_setup(
    problems: Problems, table: SetupTable, common: CommonSetup | None, server: _Server
) -> Setup | None:
    """What a setup means to a server: config, CPUs, THP, caps; None if anything is wrong."""
    raw, path = table.raw, table.path
    if not isinstance(raw, dict):
        return None
    label = f"setup {common.name}" if common else table.label
    config = _config(problems, path + ("config",), raw.get("config", {}), label)
    cpus = problems.check(path + ("cpus",), _cpu_list, raw.get("cpus"), f"{label}.cpus")
    thp = raw.get("thp")
    if thp is not None and str(thp) not in THP_MODES:
        problems.add(
            path + ("thp",),
            f"{label}.thp = {thp!r} is not a THP mode: use "
            + ", ".join(f'"{m}"' for m in THP_MODES),
        )
    limit = server.memory_limit
    if "memory_limit" in raw:
        limit = problems.check(
            path + ("memory_limit",), _memory_limit, raw["memory_limit"], f"{label}.memory_limit"
        )
    quota = None
    if not problems.failed(*path, "cpus"):
        quota = problems.check(path + ("cpu_quota",), _cpu_quota, raw.get("cpu_quota"), label, cpus)
    record = problems.check(
        path + ("record",), _record, raw.get("record", server.record), f"{label}.record"
    )
    if common is None or problems.failed(*path):
        return None
    return Setup(
        name=common.name,
        allocator=common.allocator,
        allocator_spec=common.spec,
        knobs=common.knobs,
        config=config,
        basedir=raw.get("basedir") or server.basedir,
        cpus=cpus,
        thp=str(thp) if thp is not None else None,
        memory_limit_bytes=limit,
        cpu_quota=quota,
        description=common.description,
        record=bool(record),
    )


def read_base(
    problems: Problems, data: dict[str, Any], tables: list[SetupTable], setups: list[Setup]
) -> str:
    # Names of broken setups count too, so a typo in one is not also reported as a base.
    names = list(dict.fromkeys([s.name for s in setups] + setup_names(tables)))
    base = str(data.get("base", setups[0].name if setups else ""))
    if "base" in data and base not in names:
        problems.add(
            ("base",),
            f"base = {base!r} is not a setup{did_you_mean(base, names)}: "
            f"use one of {', '.join(s.name for s in setups)}",
        )
    return base
