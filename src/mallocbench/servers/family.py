"""The seam between the pipeline and a server family (MariaDB, PostgreSQL, ...).

A family is one package under servers/ plus one entry in the registry (FAMILIES in
servers/families.py). The pipeline, executors, store, analysis and reports reach a
server only through these protocols; only the family's package imports its client
library or names its binaries.

What each member replaces (the calls that are MariaDB's today, so that wiring a
family in is mechanical):

ServerFamily (the experiment's `[server] family` picks one: run/loading)
  name                   the experiment's `[server] family` and the build's flavor;
                         also the key workloads/drivers.py picks the sysbench driver by
  default_engines        what `engines` reads when the experiment leaves it out
  engine(name)           servers.engines.get in run/loading (a family without storage
                         engines has one named after itself and refuses the others)
  find_build(basedir)    run/builds.resolve_builds
  check_settings(...)    run/builds.check_config_keys: an unknown name is refused in one
                         line before any dataset is loaded
  check_steps(names)     run/loading: a step the family cannot run is refused by name
  check_plan(...)        run/loading: how the run alternates and what it records, refused
                         in one line where the family cannot
  server_user()          RealExecutor.server_state (who owns the run's runtime directory)
  new_server(...)        run/session.start_session (the Launch: session.launch)
  golden_datadir(...)    RealExecutor.start_session
  warm_cache(server, s)  RealExecutor.start_session
  read_memory(pid)       the per-second and peak readings of run/measure and run/turns,
                         the session's idle and end readings (run/session)
  read_counters(pid)     the server's CPU time, context switches and I/O around each slice
                         and turn (run/measure, run/turns)
  memory_probe(server)   what the server says of its memory beside each reading
  variables(server)      SHOW GLOBAL VARIABLES, pg_settings
  version(server)        what the running server says it is
  account(server, a)     run/measure.finish_cell (the cell's account; values only). None:
                         the pipeline's own account applies (memory/account.py, which
                         sits above servers/ and is shared with `mallocbench memory`)
  deployment(setup)      commands/recommend's deploy snippets
  stop_leftovers(dir)    servers/orphans.stop_orphans
  soak_actions           run/soak_events.parse_events: the [[soak.event]] actions its
                         servers run and the keys each takes; None: MariaDB's, which
                         soak/events.py runs itself
  soak_events(server)    soak/events.EventRunner: the family's own forms of those
                         actions (SoakEvents); None: soak/events.py's

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
from mallocbench.probes.process import Counters, Memory
from mallocbench.probes.server import ServerMemoryProbe
from mallocbench.servers.access import ServerUser
from mallocbench.servers.cgroup.own import CpuCgroup, MemoryCgroup
from mallocbench.servers.engines import Engine
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
    @property
    def server_program(self) -> str: ...


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


class SoakEvents(Protocol):
    """A family's own forms of soak events on one running server. soak/events.py keeps
    the timing and the records; each call runs one event to its end."""

    def run(self, action: str, params: Mapping[str, object]) -> dict[str, object]:
        """Run one event (params: run.soak_events.SoakEvent.params); the fields its record
        gains (a "detail" line, readings). Raises when the event fails: its outcome."""
        ...

    def interrupt(self) -> None:
        """From another thread: end what an event has running (the server is going)."""
        ...


class ServerFamily(Protocol):
    """A server family: everything the pipeline asks of one (see the module's table)."""

    @property
    def name(self) -> str: ...
    @property
    def default_engines(self) -> tuple[str, ...]: ...
    def engine(self, name: str) -> Engine: ...
    def find_build(self, basedir: str | None) -> Build: ...
    def check_settings(
        self,
        build: Build,
        settings: Mapping[str, object],
        engines: Iterable[str],
        who: str = "the experiment",
    ) -> None: ...
    def check_steps(self, names: Iterable[str]) -> None: ...
    def check_plan(self, alternate: str, design: str, record: bool, port: int | None) -> None: ...
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
    def read_memory(self, pid: int) -> Memory | None: ...
    def read_counters(self, pid: int) -> Counters | None: ...
    def memory_probe(self, server: Server) -> ServerMemoryProbe: ...
    def variables(self, server: Server) -> dict[str, str]: ...
    def version(self, server: Server) -> str: ...
    def account(self, server: Server, allocator: str) -> dict[str, float] | None: ...
    def deployment(self, setup: SetupInfo) -> Deployment: ...
    def stop_leftovers(self, servers_dir: Path) -> list[int]: ...
    @property
    def soak_actions(self) -> Mapping[str, tuple[str, ...]] | None: ...
    def soak_events(self, server: Server) -> SoakEvents | None: ...


__all__ = ["Build", "Launch", "Server", "ServerFamily", "Shape", "SoakEvents"]
