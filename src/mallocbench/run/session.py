"""One server lifetime of a run: a setup's private server, started, watched and stopped.

A session owns what must not outlive it: the server process, its datadir copy and the
cgroups that cap its memory or CPU. The scheduler (runner.py) decides which sessions run
and when; the cell code (measure.py) drives a live session's server.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from mallocbench import units as fmt
from mallocbench.errors import MallocbenchError
from mallocbench.model.results import SessionInfo
from mallocbench.native import shim_path
from mallocbench.probes import start as start_probe
from mallocbench.probes.server import ServerMemoryProbe
from mallocbench.probes.system import process_thp_disabled, thp_mode
from mallocbench.run.experiment import Experiment, PlannedSession, Setup
from mallocbench.servers import families
from mallocbench.servers.cgroup.own import CpuCgroup, MemoryCgroup
from mallocbench.servers.family import Build, Launch, Server, ServerFamily
from mallocbench.servers.outcome import ServerStartError, SettingNotTaken
from mallocbench.servers.runtime import RuntimeDir
from mallocbench.workloads.drivers import driver
from mallocbench.workloads.sysbench import Sysbench


def launch(
    experiment: Experiment,
    planned: PlannedSession,
    memory_cgroup: MemoryCgroup | None = None,
    cpu_cgroup: CpuCgroup | None = None,
) -> Launch:
    """How the session asks its family for a server."""
    setup = experiment.setup(planned.setup)
    return Launch(
        engine=planned.engine,
        cache_bytes=experiment.dataset.cache_bytes,
        allocator=setup.allocator,
        knobs=setup.knobs,
        settings={**experiment.server_config, **setup.config},
        cpus=setup.cpus,
        thp_disabled=setup.thp == "never",
        port=experiment.port,
        max_connections=max(200, 2 * max(experiment.threads) + 50),
        memory_cgroup=memory_cgroup,
        cpu_cgroup=cpu_cgroup,
        record_shim=str(shim_path()) if setup.record else None,
    )


def effective_thp(pid: int, requested: str | None) -> str | None:
    """The THP mode the server really runs under, as recorded with its session.

    Recent MariaDB releases (10.11.19 here) turn THP off for themselves with
    PR_SET_THP_DISABLE once started, whatever the system's mode: a THP knob has little
    left to act on there, and the record says so.
    """
    system_mode = thp_mode()
    if requested == "never":
        return "never (PR_SET_THP_DISABLE, set by mallocbench)"
    if process_thp_disabled(pid):
        return f"off: the server disabled THP for itself (system mode {system_mode})"
    return system_mode


@dataclass
class LiveSession:
    """A started server with what its cells need: the sysbench driver and the probes."""

    setup: Setup
    info: SessionInfo
    server: Server
    sysbench: Sysbench
    family: ServerFamily
    memory_group: MemoryCgroup | None = None
    cpu_group: CpuCgroup | None = None
    notes: list[str] = field(default_factory=list)
    probe: ServerMemoryProbe | None = None

    @property
    def pid(self) -> int:
        return self.server.pid

    def alive(self) -> bool:
        return self.server.alive()

    def note_peak(self, peak: int | None) -> None:
        if peak is not None:
            self.info.peak_cgroup_bytes = max(self.info.peak_cgroup_bytes or 0, peak)


def start_session(
    experiment: Experiment,
    planned: PlannedSession,
    session_id: str,
    rundir: Path,
    build: Build,
    golden: Path,
    runtime_dir: RuntimeDir | None = None,
) -> LiveSession:
    """Start the setup's server on a copy of the golden datadir; raises ServerStartError.

    On failure everything made so far (cgroups, the server) is undone before raising.
    The server keeps its own state in `runtime_dir` when mallocbench runs as root.
    """
    setup = experiment.setup(planned.setup)
    family = families.get(experiment.family)
    engine = family.engine(planned.engine)
    # A fresh group per server: a killed server's charge and OOM count stay behind.
    memory_group = (
        MemoryCgroup.create(session_id, setup.memory_limit_bytes)
        if setup.memory_limit_bytes is not None
        else None
    )
    cpu_group = CpuCgroup.create(session_id, setup.cpu_quota) if setup.cpu_quota else None
    server = family.new_server(
        build, rundir, launch(experiment, planned, memory_group, cpu_group), runtime_dir
    )
    info = SessionInfo(
        id=session_id, setup=planned.setup, engine=planned.engine, repeat=planned.repeat
    )
    if memory_group is not None:
        info.memory_limit_bytes = memory_group.limit_bytes()
    live = LiveSession(
        setup,
        info,
        server,
        driver(
            family.name,
            str(server.sysbench_options),
            experiment.dataset.tables,
            experiment.dataset.rows,
            engine.sql_engine,
        ),
        family,
        memory_group,
        cpu_group,
    )
    try:
        server.copy_datadir_from(golden)
        began = time.monotonic()
        _start_server(live, engine.name)
    except BaseException:
        stop_session(live, keep_datadir=False)
        raise
    info.pid = server.pid
    info.started_at = time.time()
    info.start = start_probe.at_start(server.pid, server.datadir, time.monotonic() - began)
    idle = family.read_memory(server.pid)
    info.idle_rss_bytes = idle.rss_bytes if idle is not None else None
    info.thp = effective_thp(server.pid, setup.thp)
    live.notes.extend(
        f"setup {setup.name} on {engine.name}: the server adjusted {change}"
        for change in server.adjusted
    )
    if setup.thp in ("always", "madvise") and (info.thp or "").startswith("off"):
        live.notes.append(
            f"setup {setup.name} asks for THP {setup.thp}, but the server turns THP "
            "off for itself (PR_SET_THP_DISABLE) once started: the setting only "
            "reaches start-up allocations"
        )
    return live


def _start_server(live: LiveSession, engine_name: str) -> None:
    setup, group = live.setup, live.memory_group
    try:
        live.server.start()
    except SettingNotTaken as exc:
        raise SettingNotTaken(f"setup {setup.name} on {engine_name} failed: {exc}") from exc
    except ServerStartError as exc:
        if group is not None and group.oom_kills():
            raise ServerStartError(
                f"the server for setup {setup.name} on {engine_name} was OOM-killed "
                f"while starting: memory_limit = {fmt.mib(live.info.memory_limit_bytes)} "
                "is too small for it; raise the cap"
            ) from exc
        raise ServerStartError(
            f"the server for setup {setup.name} on {engine_name} did not start: {exc}"
        ) from exc
    except MallocbenchError as exc:
        # The allocator was not mapped: a setting not taken, like a knob the server
        # ignored, so the setup fails and the run goes on with the others.
        raise SettingNotTaken(f"setup {setup.name} on {engine_name} failed: {exc}") from exc


def stop_session(live: LiveSession, keep_datadir: bool) -> None:
    """Stop the server, record its peaks, remove its cgroups; problems become notes.

    Raised here, a cleanup problem would hide whatever ended the session (an error,
    Ctrl-C), so it is told in `live.notes` instead.
    """
    info, server = live.info, live.server
    if live.probe is not None:
        live.probe.close()
        live.probe = None
    memory = live.family.read_memory(server.pid) if server.alive() else None
    if memory is not None and info.start is not None:
        start_probe.at_end(server.pid, info.start)
    if memory is not None:
        info.peak_rss_bytes = memory.hwm_bytes
        info.peak_vsz_bytes = memory.peak_vsz_bytes
    try:
        server.stop()
    finally:
        for group in (live.memory_group, live.cpu_group):
            if group is None:
                continue
            if isinstance(group, MemoryCgroup):
                live.note_peak(group.peak_bytes())
            try:
                group.remove()
            except MallocbenchError as exc:
                live.notes.append(str(exc))
        info.ended_at = time.time()
        server.discard_state(keep_datadir)
