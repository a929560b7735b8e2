"""`mallocbench cluster init|scheduler|worker`, and the hidden `_run-unit` a worker starts.

Thin wrappers around Dask distributed: one scheduler, and on every benchmark host one
worker with exactly one thread and one unit of the benchmark-host resource, no nanny
(the worker is the process a unit's PR_SET_PDEATHSIG watches) and no dashboard unless
asked for. Every connection is mutual TLS with the certificates `cluster init` makes,
and every socket listens on the address given with --host, nowhere else.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import logging
import os
import signal
import socket
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from mallocbench.cluster import tls as clustertls
from mallocbench.cluster.units import RESOURCE, WORK_DIR_ENV
from mallocbench.cluster.worker import run_unit
from mallocbench.commands.options import StopOnSignals
from mallocbench.commands.output import say
from mallocbench.errors import MallocbenchError
from mallocbench.report import cluster as said
from mallocbench.report import formats
from mallocbench.servers.process import die_with_parent

# A worker measures nothing itself, but it shares the host with the servers it runs:
# Dask's defaults wake it every 10-500 ms (statistical profiler, system monitor,
# event-loop tick, memory monitor). These keep it asleep between messages; the unit
# measures what is left (the run's notes quote it): on a 2-core test machine a default
# worker used 5.4% of a CPU while its host measured, this one 0.6%.
CLOSE_TIMEOUT_S = 10.0
QUIET_WORKER = {
    "distributed.worker.profile.enabled": False,
    "distributed.admin.system-monitor.interval": "10s",
    "distributed.admin.tick.interval": "2s",
    "distributed.worker.memory.monitor-interval": "10s",
}


async def _until_signalled(server: Any) -> None:
    """Serve until SIGINT/SIGTERM or the server closes by itself, then close it."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    stopping = asyncio.ensure_future(stop.wait())
    finished = asyncio.ensure_future(server.finished())
    await asyncio.wait({stopping, finished}, return_when=asyncio.FIRST_COMPLETED)
    stopping.cancel()
    # A worker whose scheduler is gone can hang closing (its client keeps reconnecting):
    # a stop must stop.
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(server.close(), CLOSE_TIMEOUT_S)


def _http(host: str, port: int | None) -> dict[str, Any]:
    """Where Dask's HTTP server listens: it starts whatever the dashboard setting, and
    given no address (or ":0") it binds every interface; here always --host. Without a
    dashboard it serves no route at all."""
    if port is not None and importlib.util.find_spec("bokeh") is None:
        raise MallocbenchError(
            "--dashboard needs bokeh, which is not installed: .venv/bin/pip install 'bokeh>=3.1'"
        )
    # A (host, port) pair, not "host:port": Dask would split an IPv6 address at its colons.
    return {"dashboard": port is not None, "dashboard_address": [(host, port or 0)]}


def _check_listen(host: str, port: int) -> None:
    """A --host this machine cannot listen on is one line, before Dask logs its failure
    at length."""
    try:
        family, _, _, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(address)
    except OSError as exc:
        raise MallocbenchError(
            f"cannot listen on {host} port {port or '(any)'}: {exc.strerror or exc}; give "
            "--host an address of this machine" + (" and a free --port" if port else "")
        ) from exc


def _quiet_http(role: str, dashboard: bool) -> None:
    """Without a dashboard, Dask's HTTP server serves nothing, and no log line claims one."""
    import dask

    if not dashboard:
        dask.config.set({f"distributed.{role}.http.routes": []})
        logging.getLogger(f"distributed.{role}").addFilter(
            lambda record: "dashboard at" not in record.getMessage()
        )


async def _scheduler(
    host: str,
    port: int,
    allowed_failures: int,
    access: clustertls.Access,
    dashboard_port: int | None,
) -> None:
    from distributed import Scheduler

    async with Scheduler(
        host=host,
        port=port,
        protocol=access.protocol,
        security=access.security,
        allowed_failures=allowed_failures,
        **_http(host, dashboard_port),
    ) as scheduler:
        say(formats.CLUSTER_SCHEDULER, scheduler.address, err=True)
        if dashboard_port is not None:
            where = scheduler.http_server.address, scheduler.http_server.port
            say(formats.CLUSTER_DASHBOARD, where, err=True)
        await _until_signalled(scheduler)


@dataclass(frozen=True)
class _WorkerSpec:
    scheduler: str
    name: str
    work_dir: Path
    host: str
    port: int
    access: clustertls.Access
    dashboard_port: int | None


async def _worker(spec: _WorkerSpec) -> None:
    from distributed import Worker

    async with Worker(
        spec.scheduler,
        nthreads=1,
        resources={RESOURCE: 1},
        name=spec.name,
        local_directory=str(spec.work_dir / "dask"),
        host=spec.host,
        port=spec.port,
        protocol=spec.access.protocol,
        security=spec.access.security,
        **_http(spec.host, spec.dashboard_port),
    ) as worker:
        say(formats.CLUSTER_WORKER, said.Worker(spec.name, worker.address, spec.work_dir), err=True)
        await _until_signalled(worker)


def _security_options(func: Any) -> Any:
    """--tls DIR | --insecure, the same on every cluster command."""
    func = click.option("--insecure", is_flag=True, help=clustertls.INSECURE_HELP)(func)
    return click.option(
        "--tls",
        "tls_dir",
        type=click.Path(file_okay=False, path_type=Path),
        metavar="DIR",
        help="This host's certificates, a directory `mallocbench cluster init` made "
        "(ca.pem, cert.pem, key.pem): every connection is mutual TLS, and only "
        "certificates of that CA are accepted.",
    )(func)


def _dashboard_option(default_port: int) -> Any:
    return click.option(
        "--dashboard",
        "dashboard_port",
        type=click.IntRange(0, 65535),
        flag_value=default_port,
        default=None,
        is_flag=False,
        metavar="[PORT]",
        help=f"Serve Dask's dashboard (needs bokeh; plain HTTP, read-only, no "
        f"authentication) on --host, port {default_port or 'random'} unless given.",
    )


def _warn_insecure(access: clustertls.Access, where: str) -> None:
    if access.security is None:
        say(formats.CLUSTER_INSECURE, where, err=True)


@click.group("cluster")
def cluster_group() -> None:
    """Run one experiment's blocks, or a trace's replays, on many benchmark hosts (Dask).

    \b
    Certificates first (the CA's key stays in tls/), one directory per host, then one
    scheduler anywhere, one worker per benchmark host, and the run:
      mallocbench cluster init tls sched db1 db2 driver
      mallocbench cluster scheduler --tls tls/sched --host 10.0.0.1 --port 8786
      mallocbench cluster worker tls://10.0.0.1:8786 --tls tls/db1 --host 10.0.0.11
      mallocbench run my.toml --cluster tls://10.0.0.1:8786 --tls tls/driver --store ...
      mallocbench replay db.mbt --cluster tls://10.0.0.1:8786 --tls tls/driver --out DIR
    """


@cluster_group.command("init")
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.argument("names", nargs=-1, required=True)
def init_cmd(directory: Path, names: tuple[str, ...]) -> None:
    """Make the cluster's CA in DIRECTORY and a certificate for each host NAME.

    \b
    DIRECTORY/ca.key is the CA's private key: whoever holds it can make certificates
    the cluster accepts, so it stays here (mode 0600, directory 0700). Each
    DIRECTORY/NAME/ (ca.pem, cert.pem, key.pem) goes to host NAME only, and is what
    its --tls names; the driver that runs `mallocbench run --cluster` is a host too.
    Run again with new names to add hosts under the same CA; existing ones are kept.
    """
    made, kept = clustertls.init(directory, list(names))
    say(formats.CLUSTER_INIT, said.Certificates(made, kept, directory / clustertls.CA_KEY))


@cluster_group.command("scheduler")
@click.option(
    "--host",
    required=True,
    help="The address to listen on (its port, and the dashboard's if asked for): one the "
    "workers and the driver reach, e.g. the private network's; 0.0.0.0 means every one.",
)
@click.option("--port", type=click.IntRange(1, 65535), default=8786, show_default=True)
@_security_options
@_dashboard_option(8787)
@click.option(
    "--allowed-failures",
    type=click.IntRange(0, 100),
    default=3,
    show_default=True,
    help="Worker deaths a unit survives (it is retried on another host each time) "
    "before it is recorded as lost.",
)
def scheduler_cmd(
    host: str,
    port: int,
    allowed_failures: int,
    tls_dir: Path | None,
    insecure: bool,
    dashboard_port: int | None,
) -> None:
    """Start the Dask scheduler the driver and the workers connect to.

    It accepts only TLS connections that present a certificate of the cluster's CA
    (--tls), and listens on --host alone; no dashboard unless --dashboard.
    """
    access = clustertls.access(tls_dir, insecure)
    _check_listen(host, port)
    _warn_insecure(access, f"{host}:{port}")
    _quiet_http("scheduler", dashboard_port is not None)
    try:
        asyncio.run(_scheduler(host, port, allowed_failures, access, dashboard_port))
    except OSError as exc:
        raise MallocbenchError(
            f"cannot start the scheduler on {host}:{port}: {str(exc).splitlines()[0]}"
        ) from exc


@cluster_group.command("worker")
@click.argument("scheduler_address")
@click.option(
    "--host",
    required=True,
    help="The address this worker listens on: one the scheduler and the driver reach.",
)
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=0,
    show_default=True,
    help="The worker's port (0: any free one; give one to open it in a firewall).",
)
@click.option("--name", default=None, help="This host's name in results (default: hostname).")
@click.option(
    "--work-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("mallocbench-worker"),
    show_default=True,
    help="Where units keep their servers, logs and locks (runs/RUN_ID/ below).",
)
@_security_options
@_dashboard_option(0)
def worker_cmd(
    scheduler_address: str,
    host: str,
    port: int,
    name: str | None,
    work_dir: Path,
    tls_dir: Path | None,
    insecure: bool,
    dashboard_port: int | None,
) -> None:
    """Serve one benchmark host: one unit (block of sessions) at a time.

    Every unit runs as a subprocess (`mallocbench _run-unit`) that dies with this worker.
    The host needs what a local run needs (`make setup`: MariaDB, sysbench, allocators).
    """
    import dask

    access = clustertls.access(tls_dir, insecure)
    scheduler_address = access.address(scheduler_address)
    _check_listen(host, port)
    _warn_insecure(access, f"{host}:{port or 'any port'}")
    work_dir = work_dir.resolve()
    try:
        work_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise MallocbenchError(f"cannot create --work-dir {work_dir}: {exc.strerror}") from exc
    os.environ[WORK_DIR_ENV] = str(work_dir)
    dask.config.set(QUIET_WORKER)
    _quiet_http("worker", dashboard_port is not None)
    spec = _WorkerSpec(
        scheduler_address,
        name or socket.gethostname(),
        work_dir,
        host,
        port,
        access,
        dashboard_port,
    )
    try:
        asyncio.run(_worker(spec))
    except (OSError, TimeoutError) as exc:
        raise MallocbenchError(
            f"cannot serve the scheduler at {scheduler_address}: {str(exc).splitlines()[0]}"
        ) from exc


@click.command("_run-unit", hidden=True)
def run_unit_cmd() -> None:
    """Internal: measure one unit, a run's block or a replay's repeat (JSON spec on
    stdin), for a cluster worker."""
    spec = json.loads(sys.stdin.read())
    # Set here rather than in a preexec_fn: the worker has threads, and preexec_fn is
    # unsafe in their presence (the child can deadlock before exec).
    die_with_parent(int(spec["worker_pid"]), signal.SIGTERM)
    if "replay" in spec:
        _write_result(spec, _replay_unit(spec))
        return
    # As in a local run: the first signal stops after the cell under way (dropping it),
    # a second aborts at once; both stop the unit's servers.
    try:
        with StopOnSignals() as stop:
            result = run_unit(spec, stop.requested)
    except MallocbenchError as exc:
        result = {"host": spec.get("host"), "aborted": str(exc), "measured": 0}
        result.update({"failures": [], "notes": [], "metadata": {}})
    _write_result(spec, result)


def _replay_unit(spec: dict[str, Any]) -> dict[str, Any]:
    """One repeat of a `replay --cluster` (its signals are its own: a stop drops the
    replay under way, those finished are kept)."""
    from mallocbench.cluster.replays import run_replay_unit

    try:
        return run_replay_unit(spec)
    except MallocbenchError as exc:
        return {"host": spec.get("host"), "aborted": str(exc), "replays": []}


def _write_result(spec: dict[str, Any], result: dict[str, Any]) -> None:
    path = Path(spec["result"])
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(result))
    tmp.replace(path)


commands = [cluster_group, run_unit_cmd]
