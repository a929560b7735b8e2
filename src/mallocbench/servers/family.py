"""The seam between the pipeline and a server family (MariaDB, PostgreSQL, ...).

A family is one package under servers/ plus one entry in the registry (FAMILIES in
servers/families.py). The pipeline, executors, store, analysis and reports reach a
server only through these protocols; only the family's package imports its client
library or names its binaries.

What each member replaces (the calls that are MariaDB's today, so that wiring a
family in is mechanical):

ServerFamily
  name                   the `flavor` the reports and the store show ("mariadb"); also
                         the key workloads/drivers.py picks the sysbench driver by
  find_build(basedir)    servers.mariadb.find_build in executors/real.resolve_builds,
                         probes/doctor and calibrate/measure
  check_settings(...)    executors/real.check_config_keys (servers.known_options:
                         known_options, plugins_asked): an unknown name is refused in one
                         line before any dataset is loaded
  check_steps(names)     nothing yet: where run/experiment parses steps, a step the
                         family cannot run is refused by name
  server_user()          servers.mariadb.server_user in RealExecutor.server_state (who
                         owns the run's runtime directory)
  new_server(...)        PrivateServer(build, rundir, session.server_config(...),
                         runtime_dir) in run/session.start_session and run/dataset._load
  golden_datadir(...)    run/dataset.golden_datadir in RealExecutor.start_session
  warm_cache(server, s)  run/session.warm_cache in RealExecutor.start_session
  variables(server)      server.query("SHOW GLOBAL VARIABLES") (servers.mariadb.
                         _check_taken, memory/server.collect)
  version(server)        server.server_version / SELECT VERSION() (run/session, model
                         SetupInfo.server_version)
  account(server, a)     probes/server.account in run/measure.finish_cell (the cell's
                         RSS account; values only)
  deployment(setup)      deploy/forms.deployment_for(setup, service="mariadb") in
                         commands/deploy and the report's deploy snippets
  stop_leftovers(dir)    servers/orphans.stop_orphans in RealExecutor.stop_leftovers

Server (one private server lifetime; servers.mariadb.PrivateServer is one)
  pid, alive(), exit_info(), stop(), discard_state(keep)   run/session.stop_session,
                         run/measure (a dead server's cell), executors/real
  initialize_datadir(), copy_datadir_from(golden), start() run/session.start_session,
                         run/dataset._load
  datadir, rundir, statedir, stdout_log                    probes/start.at_start, the
                         session's kept logs
  sysbench_options       the 0600 connection file the workload driver reads
  allocator_path, adjusted                                 run/measure.new_cell, the
                         session's notes
  query(sql, args)       every SQL the pipeline sends (warm_cache, soak events, loads)
  render_config(), environment()                           the session's files, tests

The sysbench driver is not a member here: workloads/ depends on servers/ and not the
other way, so workloads/drivers.py picks it by `name` (Sysbench for MariaDB,
workloads/pgsql.PgSysbench for PostgreSQL).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from mallocbench.allocators.base import Allocator
from mallocbench.deploy.forms import Deployment
from mallocbench.model.results import SetupInfo
from mallocbench.servers.access import ServerUser
from mallocbench.servers.cgroup.own import CpuCgroup, MemoryCgroup
from mallocbench.servers.outcome import ServerExit
from mallocbench.servers.runtime import RuntimeDir


class Build(Protocol):
    """A server build (servers.mariadb.ServerBuild, postgresql.build.PgBuild)."""

    @property
    def version(self) -> str: ...
    @property
    def flavor(self) -> str: ...
    @property
    def basedir(self) -> str | None: ...
    @property
    def label(self) -> str: ...


class Shape(Protocol):
    """The dataset's shape (run.dataset.Dataset is one)."""

    @property
    def tables(self) -> int: ...
    @property
    def rows(self) -> int: ...
    @property
    def cache_bytes(self) -> int: ...


@dataclass
class Launch:
    """How the pipeline asks for one server, whatever its family: each family turns it
    into its own configuration (servers.mariadb.ServerConfig, postgresql.PgConfig) and
    refuses in one line what it cannot do (an engine it has not, a recording shim)."""

    allocator: Allocator
    cache_bytes: int
    knobs: Mapping[str, str] = field(default_factory=dict)
    settings: Mapping[str, object] = field(default_factory=dict)
    engine: str | None = None  # a storage engine of the family (MariaDB: innodb, myrocks)
    cpus: str | None = None
    port: int | None = None
    max_connections: int = 1000
    thp_disabled: bool = False
    memory_cgroup: MemoryCgroup | None = None
    cpu_cgroup: CpuCgroup | None = None
    record_shim: str | None = None


class Server(Protocol):
    """One private server lifetime, as the pipeline drives it."""

    rundir: Path
    statedir: Path
    datadir: Path
    stdout_log: Path
    sysbench_options: Path
    allocator_path: str | None
    adjusted: list[str]

    @property
    def pid(self) -> int: ...
    def initialize_datadir(self) -> None: ...
    def copy_datadir_from(self, golden: Path) -> None: ...
    def start(self, timeout: float = ...) -> None: ...
    def stop(self, timeout: float = ...) -> ServerExit | None: ...
    def alive(self) -> bool: ...
    def exit_info(self) -> ServerExit | None: ...
    def discard_state(self, keep_datadir: bool = False) -> None: ...
    def query(
        self, sql: str, args: tuple[object, ...] | None = None
    ) -> list[tuple[object, ...]]: ...
    def render_config(self) -> str: ...
    def environment(self) -> dict[str, str]: ...


class ServerFamily(Protocol):
    """A server family: everything the pipeline asks of one (see the module's table)."""

    @property
    def name(self) -> str: ...
    def find_build(self, basedir: str | None) -> Build: ...
    def check_settings(
        self, build: Build, settings: Mapping[str, object], engines: Iterable[str]
    ) -> None: ...
    def check_steps(self, names: Iterable[str]) -> None: ...
    def server_user(self) -> ServerUser | None: ...
    def new_server(
        self, build: Build, rundir: Path, launch: Launch, runtime_dir: RuntimeDir | None
    ) -> Server: ...
    def golden_datadir(
        self,
        build: Build,
        engine: str | None,
        shape: Shape,
        root: Path,
        on_status: Callable[[str], None] | None,
    ) -> Path: ...
    def warm_cache(self, server: Server, shape: Shape) -> str: ...
    def variables(self, server: Server) -> dict[str, str]: ...
    def version(self, server: Server) -> str: ...
    def account(self, server: Server, allocator: str) -> dict[str, float]: ...
    def deployment(self, setup: SetupInfo) -> Deployment: ...
    def stop_leftovers(self, servers_dir: Path) -> list[int]: ...


__all__ = ["Build", "Launch", "Server", "ServerFamily", "Shape"]
