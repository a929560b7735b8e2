"""How a private server is configured: the setup's config, the my.cnf text, the init file
that sets this start's credential, and the environment and command it starts with."""

from __future__ import annotations

import re
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from mallocbench.allocators.base import Allocator
from mallocbench.servers import process
from mallocbench.servers.cgroup.own import CpuCgroup, MemoryCgroup
from mallocbench.servers.engines import Engine
from mallocbench.servers.options import check_config


def size_value(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


@dataclass
class ServerConfig:
    """Everything that decides how one private server is started."""

    engine: Engine
    cache_bytes: int
    allocator: Allocator
    knobs: Mapping[str, str] = field(default_factory=dict)
    overrides: Mapping[str, object] = field(default_factory=dict)
    cpus: str | None = None
    # A TCP port on 127.0.0.1, for builds or tools that need one; None: socket only.
    port: int | None = None
    max_connections: int = 1000
    # PR_SET_THP_DISABLE for this server only: THP "never" without touching the host.
    thp_disabled: bool = False
    # The server starts inside this cgroup (a memory cap); its OOM kills are told apart.
    memory_cgroup: MemoryCgroup | None = None
    # ... and inside this one (a CPU quota: a known handicap for this setup).
    cpu_cgroup: CpuCgroup | None = None
    # The recording shim, preloaded in front of the allocator (idle until armed).
    record_shim: str | None = None


def in_child(config: ServerConfig) -> Callable[[], None] | None:
    """What the forked child does before exec: THP off, join the memory and cpu cgroups."""
    steps: list[Callable[[], None]] = []
    if config.thp_disabled:
        steps.append(process.disable_thp)
    if config.memory_cgroup is not None:
        steps.append(config.memory_cgroup.join_self)
    if config.cpu_cgroup is not None:
        steps.append(config.cpu_cgroup.join_self)
    return process.in_child(steps)


def mysqld_settings(
    config: ServerConfig,
    *,
    datadir: Path,
    socket: Path,
    statedir: Path,
    error_log: Path,
    tmpdir: Path,
    files_dir: Path,
    init_file: Path,
    port: int | None,
    user: str | None,
) -> dict[str, str]:
    """The my.cnf [mysqld] settings: harness defaults, engine, then the setup's overrides."""
    settings: dict[str, str] = {
        "datadir": str(datadir),
        "socket": str(socket),
        "pid-file": str(statedir / "mysqld.pid"),
        "log-error": str(error_log),
        # A private tmpdir: concurrent servers sharing /tmp collide on temp-table names.
        "tmpdir": str(tmpdir),
        "secure-file-priv": str(files_dir),
        "init-file": str(init_file),
        "skip-name-resolve": "ON",
        "skip-log-bin": "ON",
        "max_connections": str(config.max_connections),
        "max_prepared_stmt_count": "1000000",
        "table_open_cache": "2000",
        "performance_schema": "OFF",
    }
    if port is None:
        settings["skip-networking"] = "ON"
    else:
        settings["port"] = str(port)
        settings["bind-address"] = "127.0.0.1"
    if user is not None:
        settings["user"] = user
    settings.update(config.engine.config(config.cache_bytes))
    for key, value in config.overrides.items():
        # Validated with the experiment already; checked again here because this is
        # the last step before text reaches the server.
        check_config(key, size_value(value), "server config")
        settings[key] = size_value(value)
    return settings


def render_mycnf(settings: Mapping[str, str]) -> str:
    lines = [
        "# Written by mallocbench for one private server; not read by any system service.",
        "[mysqld]",
    ]
    for key, value in settings.items():
        lines.append(f"{key}={value}")
    return "\n".join(lines) + "\n"


def init_sql(password: str) -> str:
    """Run by the server before it accepts a connection: this start's credential."""
    quoted = password  # token_urlsafe: letters, digits, '-' and '_' only
    accounts = ", ".join(
        f"'root'@'{host}' IDENTIFIED BY '{quoted}'" for host in ("localhost", "127.0.0.1", "::1")
    )
    hostname = re.sub(r"[^A-Za-z0-9.-]", "", socket.gethostname())
    return (
        f"ALTER USER IF EXISTS {accounts};\n"
        # install-db adds root@<hostname> without a password; nothing needs it.
        f"DROP USER IF EXISTS 'root'@'{hostname}', ''@'localhost', ''@'{hostname}';\n"
    )


def server_environment(
    config: ServerConfig, server_version: str, record_control: str
) -> dict[str, str]:
    """Ours without anything that would change the allocator, then the setup's preload
    (the recording shim first, when asked) and knobs."""
    env = process.allocator_environment(config.allocator, config.knobs, config.record_shim)
    if config.record_shim:
        env["MBRECORD_CONTROL"] = record_control
        env["MBRECORD_ALLOCATOR"] = config.allocator.name
        env["MBRECORD_SERVER_VERSION"] = server_version
    return env


def server_command(mysqld: str, cnf_path: str, cpus: str | None) -> list[str]:
    return process.pinned([mysqld, f"--defaults-file={cnf_path}"], cpus)
