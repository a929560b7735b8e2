"""`mallocbench cluster scheduler|worker`, and the hidden `_run-unit` a worker starts.

Thin wrappers around Dask distributed: one scheduler, and on every benchmark host one
worker with exactly one thread and one unit of the benchmark-host resource, no nanny
(the worker is the process a unit's PR_SET_PDEATHSIG watches) and no dashboard.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import sys
from pathlib import Path
from typing import Any

import click

from mallocbench.cluster import RESOURCE, WORK_DIR_ENV, run_unit
from mallocbench.commands.options import StopOnSignals
from mallocbench.errors import MallocbenchError
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


async def _scheduler(host: str | None, port: int, allowed_failures: int) -> None:
    from distributed import Scheduler

    async with Scheduler(
        host=host,
        port=port,
        dashboard=False,
        # Its HTTP server (health, metrics) still listens: on a random port, so nothing
        # beyond the scheduler's own port needs to be opened or can clash.
        dashboard_address=":0",
        allowed_failures=allowed_failures,
    ) as scheduler:
        click.echo(f"mallocbench: scheduler listening at {scheduler.address}", err=True)
        await _until_signalled(scheduler)


async def _worker(address: str, name: str, work_dir: Path) -> None:
    from distributed import Worker

    async with Worker(
        address,
        nthreads=1,
        resources={RESOURCE: 1},
        name=name,
        local_directory=str(work_dir / "dask"),
        dashboard=False,
    ) as worker:
        click.echo(f"mallocbench: worker {name} at {worker.address}, units in {work_dir}", err=True)
        await _until_signalled(worker)


@click.group("cluster")
def cluster_group() -> None:
    """Run one experiment's blocks on many benchmark hosts (Dask distributed).

    \b
    One scheduler anywhere, one worker per benchmark host, then:
      mallocbench cluster scheduler --port 8786
      mallocbench cluster worker tcp://SCHEDULER:8786 --name db1 --work-dir /var/tmp/mb
      mallocbench run my.toml --cluster tcp://SCHEDULER:8786 --store postgresql://...
    """


@cluster_group.command("scheduler")
@click.option("--host", default=None, help="Interface address to listen on (default: all).")
@click.option("--port", type=click.IntRange(1, 65535), default=8786, show_default=True)
@click.option(
    "--allowed-failures",
    type=click.IntRange(0, 100),
    default=3,
    show_default=True,
    help="Worker deaths a unit survives (it is retried on another host each time) "
    "before it is recorded as lost.",
)
def scheduler_cmd(host: str | None, port: int, allowed_failures: int) -> None:
    """Start the Dask scheduler the driver and the workers connect to (no dashboard).

    Dask has no authentication by default: keep the port reachable from the benchmark
    hosts and the driver only (a private network or a firewall rule).
    """
    try:
        asyncio.run(_scheduler(host, port, allowed_failures))
    except OSError as exc:
        raise MallocbenchError(f"cannot start the scheduler on port {port}: {exc}") from exc


@cluster_group.command("worker")
@click.argument("scheduler_address")
@click.option("--name", default=None, help="This host's name in results (default: hostname).")
@click.option(
    "--work-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("mallocbench-worker"),
    show_default=True,
    help="Where units keep their servers, logs and locks (runs/RUN_ID/ below).",
)
def worker_cmd(scheduler_address: str, name: str | None, work_dir: Path) -> None:
    """Serve one benchmark host: one unit (block of sessions) at a time.

    Every unit runs as a subprocess (`mallocbench _run-unit`) that dies with this worker.
    The host needs what a local run needs (`make setup`: MariaDB, sysbench, allocators).
    """
    import dask

    work_dir = work_dir.resolve()
    try:
        work_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise MallocbenchError(f"cannot create --work-dir {work_dir}: {exc.strerror}") from exc
    os.environ[WORK_DIR_ENV] = str(work_dir)
    dask.config.set(QUIET_WORKER)
    try:
        asyncio.run(_worker(scheduler_address, name or socket.gethostname(), work_dir))
    except (OSError, TimeoutError) as exc:
        raise MallocbenchError(
            f"cannot serve the scheduler at {scheduler_address}: {str(exc).splitlines()[0]}"
        ) from exc


@click.command("_run-unit", hidden=True)
def run_unit_cmd() -> None:
    """Internal: measure one unit (JSON spec on stdin) for a cluster worker."""
    spec = json.loads(sys.stdin.read())
    # Set here rather than in a preexec_fn: the worker has threads, and preexec_fn is
    # unsafe in their presence (the child can deadlock before exec).
    die_with_parent(int(spec["worker_pid"]), signal.SIGTERM)
    # As in a local run: the first signal stops after the cell under way (dropping it),
    # a second aborts at once; both stop the unit's servers.
    try:
        with StopOnSignals() as stop:
            result = run_unit(spec, stop.requested)
    except MallocbenchError as exc:
        result = {"host": spec.get("host"), "aborted": str(exc), "measured": 0}
        result.update({"failures": [], "notes": [], "metadata": {}})
    path = Path(spec["result"])
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(result))
    tmp.replace(path)


commands = [cluster_group, run_unit_cmd]
