"""PostgreSQL as a server family (servers/family.ServerFamily), for the registry."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shlex
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from mallocbench.deploy import containers, forms
from mallocbench.errors import MallocbenchError
from mallocbench.model.results import SetupInfo
from mallocbench.probes import process
from mallocbench.probes.server import ProbedServer, ServerMemoryProbe
from mallocbench.servers.access import ServerUser
from mallocbench.servers.engines import Engine
from mallocbench.servers.family import Build, Launch, Server, ServerFamily, Shape, SoakEvents
from mallocbench.servers.orphans import stop_orphans
from mallocbench.servers.postgresql import build as pg_build
from mallocbench.servers.postgresql import (
    dataset,
    events,
    memory,
    pgbench,
    server,
    tree,
    workload,
)
from mallocbench.servers.postgresql import settings as pg_settings
from mallocbench.servers.runtime import RuntimeDir

NAME = "postgresql"
# A family without storage engines of its own: what the experiment's engine list says.
ENGINE = "postgresql"
_ENGINE = Engine(
    name=ENGINE,
    sql_engine="",
    description="PostgreSQL with shared_buffers as the cache",
    config=lambda cache_bytes: {"shared_buffers": f"{max(128, cache_bytes // 1024)}kB"},
    cache_variable="shared_buffers",
)
_NO_TURNS = (
    "sysbench's own scripts, which PostgreSQL runs, have no turn loop; "
    'use alternate = "runs" (the default)'
)
# Deploy snippets only a MariaDB server reads.
_MARIADB_ONLY_SNIPPETS = ("mysqld_safe", "etc_default", "mycnf")


def _pg(build: Build) -> pg_build.PgBuild:
    if not isinstance(build, pg_build.PgBuild):
        raise MallocbenchError(f"{build.label} is not a PostgreSQL build")
    return build


def _server(running: Server) -> server.PgServer:
    if not isinstance(running, server.PgServer):
        raise MallocbenchError("not a PostgreSQL server")
    return running


class PostgresFamily:
    """What the pipeline asks of PostgreSQL; the member table is in servers/family.py."""

    name = NAME
    default_engines = (ENGINE,)
    soak_actions: Mapping[str, tuple[str, ...]] | None = events.ACTIONS

    def engine(self, name: str) -> Engine:
        if name.lower() != ENGINE:
            raise MallocbenchError(
                f"PostgreSQL has no storage engine {name!r}: leave engines out of the "
                "experiment for a PostgreSQL server"
            )
        return _ENGINE

    def find_build(self, basedir: str | None) -> pg_build.PgBuild:
        return pg_build.find_build(basedir)

    def check_settings(
        self,
        build: Build,
        settings: Mapping[str, object],
        engines: Iterable[str],
        who: str = "the experiment",
    ) -> None:
        for engine in engines:
            self.engine(engine)
        try:
            pg_settings.check_settings(_pg(build), settings)
        except MallocbenchError as exc:
            raise MallocbenchError(f"{who}: {exc}") from None

    def check_steps(self, names: Iterable[str]) -> None:
        for name in names:
            if name not in pgbench.SCRIPTS:
                workload.form_named(name)

    def check_plan(self, alternate: str, design: str, record: bool, port: int | None) -> None:
        refused = (
            ('alternate = "turns"', alternate == "turns", _NO_TURNS),
            ('design = "auto"', design == "auto", "its calibration weighs turns: " + _NO_TURNS),
            ("record = true", record, "recording is MariaDB's yet; leave record out"),
            ("server.port", port is not None, "it listens on its own socket only; leave it out"),
        )
        for what, asked, why in refused:
            if asked:
                raise MallocbenchError(f"a PostgreSQL server cannot take {what}: {why}")

    def server_user(self) -> ServerUser | None:
        return server.server_user()

    def new_server(
        self, build: Build, rundir: Path, launch: Launch, runtime_dir: RuntimeDir | None
    ) -> server.PgServer:
        refused = (
            ("server.port", launch.port is not None, "it listens on its own socket only"),
            ("record = true", launch.record_shim is not None, "recording is MariaDB's yet"),
            ("engines", launch.engine not in (None, ENGINE), "it has no storage engines"),
        )
        for what, asked, why in refused:
            if asked:
                raise MallocbenchError(f"a PostgreSQL server cannot take {what}: {why}")
        config = server.PgConfig(
            cache_bytes=launch.cache_bytes,
            allocator=launch.allocator,
            knobs=launch.knobs,
            overrides=launch.settings,
            cpus=launch.cpus,
            max_connections=launch.max_connections,
            thp_disabled=launch.thp_disabled,
            memory_cgroup=launch.memory_cgroup,
            cpu_cgroup=launch.cpu_cgroup,
        )
        return server.PgServer(_pg(build), rundir, config, runtime_dir)

    def golden_datadir(
        self,
        build: Build,
        engine: str | None,
        shape: Shape,
        root: Path,
        on_status: Callable[[str], None] | None,
    ) -> Path:
        return dataset.golden_datadir(_pg(build), shape, root, on_status)

    def warm_cache(self, running: Server, shape: Shape) -> str:
        return dataset.warm_cache(_server(running))

    def read_memory(self, pid: int) -> process.Memory | None:
        return tree.tree_memory(pid)

    def read_counters(self, pid: int) -> process.Counters | None:
        return tree.tree_counters(pid)

    def memory_probe(self, running: Server) -> ServerMemoryProbe:
        # Its counters are not MariaDB's status variables: the cgroup's charge alone.
        probed: ProbedServer = _server(running)  # type: ignore[assignment]
        return ServerMemoryProbe(probed, asks_server=False)

    def variables(self, running: Server) -> dict[str, str]:
        return _server(running).variables()

    def version(self, running: Server) -> str:
        return _server(running).server_version or "unknown"

    def account(self, running: Server, allocator: str) -> dict[str, float] | None:
        """The cell's account of the server's memory; never raises (it must never cost
        a measured cell)."""
        with contextlib.suppress(Exception):
            return memory.metrics(memory.account(_server(running)))
        return {}

    def deployment(self, setup: SetupInfo) -> forms.Deployment:
        """The environment in the forms that reach a PostgreSQL service (systemd, env,
        Docker, Kubernetes); the MariaDB-only ones (mysqld_safe, my.cnf) are left out."""
        major = (setup.server_version or "15").split(".")[0]
        return postgresql_forms(forms.deployment_for(setup, service=f"postgresql@{major}-main"))

    def stop_leftovers(self, servers_dir: Path) -> list[int]:
        return [orphan.pid for orphan in stop_orphans(servers_dir)]

    def soak_events(self, running: Server) -> SoakEvents | None:
        return events.PgEvents(_server(running))


def postgresql_forms(d: forms.Deployment) -> forms.Deployment:
    """`d` in the forms that reach a PostgreSQL service (systemd, env, Docker,
    Kubernetes): the MariaDB-only ones (mysqld_safe, my.cnf) are left out."""
    kept = {k: s for k, s in d.snippets.items() if k not in _MARIADB_ONLY_SNIPPETS}
    # Compose names a service by [A-Za-z0-9._-]: not after the unit's template instance.
    kept["compose"] = containers.compose_snippet(dataclasses.replace(d, service=NAME))
    k8s = kept["kubernetes"]
    kept["kubernetes"] = dataclasses.replace(
        k8s, text=k8s.text.replace("MariaDB container", "PostgreSQL container")
    )
    notes = [
        *d.notes,
        "Debian's pg_ctlcluster also reads /etc/postgresql/<version>/<cluster>/"
        "environment; a variable set there and in the drop-in: check which one the "
        "server got with the lines below",
    ]
    return dataclasses.replace(d, snippets=kept, verify=_verify_lines(d), notes=notes)


def service_of(postmaster: int) -> str:
    """The systemd unit Debian runs a cluster as, postgresql@<version>-<cluster>, for a
    running postmaster: from its data directory (/var/lib/postgresql/<version>/<cluster>),
    else the version in its binary's path and the cluster "main"."""
    with contextlib.suppress(OSError):
        datadir = Path(os.readlink(f"/proc/{postmaster}/cwd"))
        if datadir.parent.parent == Path("/var/lib/postgresql"):
            return f"postgresql@{datadir.parent.name}-{datadir.name}"
    version = "15"
    with contextlib.suppress(OSError):
        exe = Path(os.readlink(f"/proc/{postmaster}/exe"))
        # /usr/lib/postgresql/<version>/bin/postgres
        if exe.parent.name == "bin" and exe.parent.parent.name.isdigit():
            version = exe.parent.parent.name
    return f"postgresql@{version}-main"


def _verify_lines(d: forms.Deployment) -> list[str]:
    """After a restart: the postmaster's PID, then the allocator in one of its children
    (the backends run the queries; they inherit the postmaster's environment)."""
    lines = [
        f"PID=$(systemctl show --property MainPID --value {d.service})",
        'CHILD=$(pgrep -P "$PID" | head -1)',
    ]
    if d.preload:
        lines.append(
            f'grep -m1 -F {shlex.quote(d.preload)} /proc/"$CHILD"/maps'
            "   # one line: the library is mapped; nothing: the preload failed"
        )
    if d.environment:
        # Not the child: a backend writes its process title over its copy of the
        # environment; the postmaster's, which every backend was forked with, is intact.
        lines.append('mallocbench check --pid "$PID"   # each setting in force, one a line')
    return lines


FAMILY: ServerFamily = PostgresFamily()  # mypy checks it against the protocol

__all__ = ["FAMILY", "PostgresFamily", "postgresql_forms", "service_of"]
