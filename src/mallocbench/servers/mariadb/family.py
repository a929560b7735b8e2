"""MariaDB (and MySQL builds) as a server family (servers/family.ServerFamily), for the
registry: the storage engines InnoDB and MyRocks are its own."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from mallocbench.deploy import forms
from mallocbench.errors import MallocbenchError
from mallocbench.model.results import SetupInfo
from mallocbench.probes import process
from mallocbench.probes.server import ServerMemoryProbe
from mallocbench.servers import engines as storage
from mallocbench.servers.engines import Engine
from mallocbench.servers.family import Build, Launch, Server, ServerFamily, Shape, SoakEvents
from mallocbench.servers.known_options import known_options, plugins_asked
from mallocbench.servers.mariadb import dataset
from mallocbench.servers.mariadb.access import ServerUser, server_user
from mallocbench.servers.mariadb.build import ServerBuild, find_build
from mallocbench.servers.mariadb.config import ServerConfig
from mallocbench.servers.mariadb.private import PrivateServer
from mallocbench.servers.orphans import stop_orphans
from mallocbench.servers.runtime import RuntimeDir

NAME = "mariadb"


def _build(build: Build) -> ServerBuild:
    if not isinstance(build, ServerBuild):
        raise MallocbenchError(f"{build.label} is not a MariaDB or MySQL build")
    return build


def _server(running: Server) -> PrivateServer:
    if not isinstance(running, PrivateServer):
        raise MallocbenchError("not a MariaDB server")
    return running


class MariaDBFamily:
    """What the pipeline asks of MariaDB; the member table is in servers/family.py."""

    name = NAME
    default_engines = ("innodb",)
    # Its soak events are soak/events.py's own forms (run.soak_events.ACTION_KEYS).
    soak_actions: Mapping[str, tuple[str, ...]] | None = None

    def engine(self, name: str) -> Engine:
        return storage.get(name)

    def find_build(self, basedir: str | None) -> ServerBuild:
        return find_build(basedir)

    def check_settings(
        self,
        build: Build,
        settings: Mapping[str, object],
        engines: Iterable[str],
        who: str = "the experiment",
    ) -> None:
        """Refuse a config key the server would not take on one of the engines (each
        loads its own plugins), and a plugin it cannot load."""
        mysqld = _build(build)
        asked = {k: str(v) for k, v in settings.items()}
        for engine in map(storage.get, engines):
            # The engine's own keys say which plugins it loads; the cache size is no key.
            config = {**engine.config(0), **asked}
            known = known_options(mysqld, plugins_asked(config))
            if known is None:
                return
            if known.plugin_error is not None:
                raise MallocbenchError(
                    f"{who} on {engine.name}: {mysqld.label} cannot load a plugin "
                    f"the setup asks for ({known.plugin_error}): install it or remove it from "
                    "plugin_load_add"
                )
            problems = [p for p in map(known.problem, asked) if p is not None]
            if problems:
                more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
                raise MallocbenchError(f"{who} on {engine.name}: {problems[0]}{more}")

    def check_steps(self, names: Iterable[str]) -> None:
        """Every catalogue step is written in MariaDB's SQL: nothing to refuse."""

    def check_plan(self, alternate: str, design: str, record: bool, port: int | None) -> None:
        """MariaDB takes every design, turns, recording and a TCP port."""

    def server_user(self) -> ServerUser | None:
        return server_user()

    def new_server(
        self, build: Build, rundir: Path, launch: Launch, runtime_dir: RuntimeDir | None
    ) -> PrivateServer:
        config = ServerConfig(
            engine=storage.get(launch.engine or self.default_engines[0]),
            cache_bytes=launch.cache_bytes,
            allocator=launch.allocator,
            knobs=launch.knobs,
            overrides=launch.settings,
            cpus=launch.cpus,
            thp_disabled=launch.thp_disabled,
            port=launch.port,
            max_connections=launch.max_connections,
            memory_cgroup=launch.memory_cgroup,
            cpu_cgroup=launch.cpu_cgroup,
            record_shim=launch.record_shim,
        )
        return PrivateServer(_build(build), rundir, config, runtime_dir)

    def golden_datadir(
        self,
        build: Build,
        engine: str | None,
        shape: Shape,
        root: Path,
        on_status: Callable[[str], None] | None,
    ) -> Path:
        if not isinstance(shape, dataset.LoadableShape):
            raise MallocbenchError("a MariaDB dataset needs its loader (run.dataset.Dataset)")
        chosen = storage.get(engine or self.default_engines[0])
        return dataset.golden_datadir(_build(build), chosen, shape, root, on_status)

    def warm_cache(self, running: Server, shape: Shape) -> str:
        return dataset.warm_cache(_server(running), shape)

    def read_memory(self, pid: int) -> process.Memory | None:
        return process.read_memory(pid)

    def read_counters(self, pid: int) -> process.Counters | None:
        return process.read_counters(pid)

    def memory_probe(self, running: Server) -> ServerMemoryProbe:
        return ServerMemoryProbe(_server(running))

    def variables(self, running: Server) -> dict[str, str]:
        return {str(k): str(v) for k, v in running.query("SHOW GLOBAL VARIABLES")}

    def version(self, running: Server) -> str:
        return _server(running).server_version or "unknown"

    def account(self, running: Server, allocator: str) -> dict[str, float] | None:
        return None  # memory/account.py's, which `mallocbench memory` shares

    def deployment(self, setup: SetupInfo) -> forms.Deployment:
        return forms.deployment_for(setup, service="mariadb")

    def soak_events(self, running: Server) -> SoakEvents | None:
        return None  # soak/events.py's own forms

    def stop_leftovers(self, servers_dir: Path) -> list[int]:
        return [orphan.pid for orphan in stop_orphans(servers_dir)]


FAMILY: ServerFamily = MariaDBFamily()  # mypy checks it against the protocol

__all__ = ["FAMILY", "NAME", "MariaDBFamily"]
