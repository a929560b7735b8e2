"""`mallocbench profile`: a private server under heaptrack or valgrind massif, one step, sites.

Both tools replace or wrap malloc, so they only see malloc-family calls: the InnoDB
buffer pool and other mmap'd areas are not in their numbers (the `memory` command's
breakdown covers those).
"""

from __future__ import annotations

import contextlib
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import pymysql

from mallocbench import allocators
from mallocbench.errors import MallocbenchError
from mallocbench.memory.massif import Profile, parse_heaptrack_print, parse_massif
from mallocbench.servers import engines, mariadb
from mallocbench.servers.engines import Engine
from mallocbench.workloads import catalogue
from mallocbench.workloads.catalogue import Step
from mallocbench.workloads.sysbench import Sysbench, threads_for

# The golden sbtest datadir a catalogue step is profiled on, made or found by the run
# pipeline's datasets: (build, engine, tables, rows, cache_bytes, on_status) -> its path.
# The command passes it in: the pipeline imports memory/ (a cell's RSS account), so
# memory/ does not import the pipeline back.
GoldenDatadir = Callable[[mariadb.ServerBuild, Engine, int, int, int, Callable[[str], None]], Path]

TOOLS = ("heaptrack", "massif")
INSTALL_HINT = {
    "heaptrack": "bash scripts/install-deps.sh heaptrack (Debian package heaptrack)",
    "massif": "bash scripts/install-deps.sh valgrind (Debian package valgrind)",
}


def tool_available(tool: str) -> bool:
    if tool == "heaptrack":
        return shutil.which("heaptrack") is not None and shutil.which("heaptrack_print") is not None
    return shutil.which("valgrind") is not None


def pick_tool(requested: str) -> str:
    if requested == "auto":
        for tool in TOOLS:
            if tool_available(tool):
                return tool
        raise MallocbenchError(
            f"neither heaptrack nor valgrind is installed: {INSTALL_HINT['heaptrack']}"
        )
    if requested not in TOOLS:
        raise MallocbenchError(f"unknown profiler {requested!r}: use heaptrack or massif")
    if not tool_available(requested):
        raise MallocbenchError(f"{requested} is not installed: {INSTALL_HINT[requested]}")
    return requested


# --- steps ------------------------------------------------------------------------------

DEFAULT_STEP = "read-only-order"  # a filesort per query: the sort buffer shows as a site


@dataclass
class SqlStep:
    """The user's own statements, run `repeat` rounds on each connection."""

    statements: list[str]


def sql_step(sql: str) -> SqlStep:
    return SqlStep([s.strip() for s in sql.split(";") if s.strip()])


def catalogue_step(label: str) -> Step:
    """One step of the workload catalogue, e.g. "range-covered-pk range=100" or "qr100"."""
    name = re.split(r"[\s_]+", label.strip().lower(), maxsplit=1)[0]
    group = catalogue.GROUP_ALIASES.get(name, name)
    if name not in {d.name for d in catalogue.CATALOGUE} and group not in catalogue.GROUPS:
        raise MallocbenchError(
            f"unknown step {label!r}: list the steps with `mallocbench steps`, or give --sql"
        )
    steps = catalogue.parse_steps([label])
    if len(steps) != 1:
        # One profile has one heap peak: over several steps it would not say which one.
        names = ", ".join(dict.fromkeys(s.name for s in steps))
        raise MallocbenchError(
            f"--step takes one step and {label!r} is a group: pick one of {names} "
            f"(see `mallocbench steps`)"
        )
    return steps[0]


def run_sql(
    connect: Callable[[], pymysql.Connection], step: SqlStep, repeat: int, connections: int
) -> None:
    errors: list[str] = []

    def worker() -> None:
        try:
            with connect() as conn, conn.cursor() as cur:
                for _ in range(repeat):
                    for statement in step.statements:
                        cur.execute(statement)
                        cur.fetchall()
        except pymysql.err.MySQLError as exc:
            errors.append(str(exc.args[-1] if exc.args else exc))

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(connections)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise MallocbenchError(f"the profiled statements failed: {errors[0]}")


def run_catalogue_step(bench: Sysbench, step: Step, connections: int, seconds: float) -> None:
    output = bench.run(step, connections, seconds)
    if not output.ok:
        last = (output.output_tail.strip().splitlines() or ["no output"])[-1]
        raise MallocbenchError(
            f"step {step.label} failed under the profiler (sysbench exit {output.returncode}): "
            f"{last.strip()}"
        )


# --- the profiled server ----------------------------------------------------------------


class ProfiledServer(mariadb.PrivateServer):
    """A private server whose command runs under the profiler."""

    def __init__(self, *args: object, tool: str, output: Path, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.tool = tool
        self.output = output
        self.massif_file = self.statedir / "massif.out"

    def command(self) -> list[str]:
        if self.tool == "massif":
            prefix = [
                "valgrind",
                "--tool=massif",
                # massif writes as the server's (unprivileged) user: into its state
                # directory, which that user owns; the harness moves the file out afterwards.
                f"--massif-out-file={self.massif_file}",
                "--threshold=0.2",
                "--quiet",
            ]
        else:
            prefix = ["heaptrack", "-o", str(self.output)]
        return [*prefix, *super().command()]

    def shutdown(self, timeout: float = 300) -> None:
        """SHUTDOWN over SQL so the server exits normally and the profiler writes its file
        (a signal would reach heaptrack's wrapper script, not the server)."""
        if self.proc is None or self.proc.poll() is not None:
            return
        with contextlib.suppress(pymysql.err.MySQLError), self.connect() as conn:
            conn.cursor().execute("SHUTDOWN")
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout)
        self.stop()


def _has_variable(build: mariadb.ServerBuild, name: str) -> bool:
    out = subprocess.run(
        [build.mysqld, "--no-defaults", "--verbose", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return name.replace("_", "-") in out.stdout


def profile_server(
    tool: str,
    out: Path,
    step: Step | SqlStep,
    connections: int,
    golden_datadir: GoldenDatadir,
    repeat: int = 1,
    seconds: float = 10.0,
    engine: str = "innodb",
    cache_bytes: int = 64 * 1024 * 1024,
    tables: int = 1,
    rows: int = 20000,
    overrides: Mapping[str, str] | None = None,
    basedir: str | None = None,
    log: Callable[[str], None] = lambda _: None,
) -> Profile:
    """Profile one step: a catalogue step (sysbench, for `seconds`, on a copy of the
    golden sbtest datadir) or the user's SQL (`repeat` rounds, on an empty datadir)."""
    tool = pick_tool(tool)
    build = mariadb.find_build(basedir)
    the_engine = engines.get(engine)
    threads = connections if isinstance(step, SqlStep) else threads_for(step, connections)
    settings = _server_settings(tool, build, engine, cache_bytes, overrides)
    config = mariadb.ServerConfig(
        engine=the_engine,
        cache_bytes=cache_bytes,
        allocator=allocators.get("glibc"),
        overrides=settings,
        max_connections=max(100, threads + 10),
    )
    out.mkdir(parents=True, exist_ok=True)
    output = out / ("massif.out" if tool == "massif" else "heaptrack")
    server = ProfiledServer(build, out / "server", config, tool=tool, output=output)
    if isinstance(step, SqlStep):
        log(f"initialising a private {build.label} datadir in {out / 'server'}")
        server.initialize_datadir()
        what = f"{len(step.statements)} statement(s) x{repeat} on {threads} connection(s)"
    else:
        # The same cached tables the compare pipeline loads, so a step here and a cell
        # there see the same data; loading runs without the profiler, so it stays fast.
        golden = golden_datadir(build, the_engine, tables, rows, cache_bytes, log)
        log(f"copying the sbtest tables ({tables} x {rows} rows) into {out / 'server'}")
        server.copy_datadir_from(golden)
        length = "until done" if step.definition.until_done else f"for {seconds:g}s"
        what = f"step {step.label!r} {length} on {threads} connection(s)"
    try:
        log(f"starting the server under {tool} (slow: {'~20x' if tool == 'massif' else '~2x'})")
        started = time.monotonic()
        server.start(timeout=600)
        log(f"ready after {time.monotonic() - started:.1f}s; running {what}")
        if isinstance(step, SqlStep):
            run_sql(server.connect, step, repeat, connections)
        else:
            bench = Sysbench(
                connection_file=str(server.sysbench_options),
                tables=tables,
                table_size=rows,
                engine_sql=the_engine.sql_engine,
            )
            run_catalogue_step(bench, step, connections, seconds)
        log("stopping the server so the profiler writes its data")
        server.shutdown()
    finally:
        server.stop()
    return _read_profile(server, out)


def _server_settings(
    tool: str,
    build: mariadb.ServerBuild,
    engine: str,
    cache_bytes: int,
    overrides: Mapping[str, str] | None,
) -> dict[str, object]:
    """The my.cnf settings the profiler needs, then the user's overrides over them."""
    settings: dict[str, object] = {}
    if tool == "massif":
        # valgrind supports neither io_uring/libaio nor an 8 TiB address reservation.
        settings["innodb_use_native_aio"] = "0"
        if _has_variable(build, "innodb_buffer_pool_size_max"):
            settings["innodb_buffer_pool_size_max"] = str(
                max(cache_bytes, 32 * 1024 * 1024) if engine == "innodb" else 32 * 1024 * 1024
            )
    settings.update(overrides or {})
    return settings


def _read_profile(server: ProfiledServer, out: Path) -> Profile:
    """The sites from the file the profiler wrote when the server stopped."""
    if server.tool == "massif":
        if server.massif_file.exists():
            shutil.move(server.massif_file, server.output)
        if not server.output.exists():
            raise MallocbenchError(
                f"massif wrote no {server.output}: see {server.error_log} and {server.stdout_log}"
            )
        return parse_massif(server.output)
    written = sorted(out.glob("heaptrack.*"))
    if not written:
        raise MallocbenchError(f"heaptrack wrote no data file in {out}: see {server.stdout_log}")
    return parse_heaptrack_file(written[-1])


def parse_heaptrack_file(path: Path) -> Profile:
    if not tool_available("heaptrack"):
        raise MallocbenchError(f"reading {path} needs heaptrack_print: {INSTALL_HINT['heaptrack']}")
    out = subprocess.run(
        [
            "heaptrack_print",
            "-f",
            str(path),
            "--print-peaks",
            "1",
            "--print-allocators",
            "0",
            "--print-leaks",
            "0",
            "--print-temporary",
            "0",
            # No --print-histogram / --print-flamegraph: they take an output path, not a
            # switch, and "0" would write a file named 0 into the current directory.
            "-n",
            "200",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if out.returncode != 0:
        raise MallocbenchError(f"heaptrack_print could not read {path}: {out.stderr.strip()[:200]}")
    return parse_heaptrack_print(out.stdout, str(path))


def parse_file(path: Path) -> Profile:
    """A massif.out file, or a heaptrack data file (.zst/.gz), by its content."""
    if not path.is_file():
        raise MallocbenchError(f"no file {path}: give a massif.out or heaptrack.*.zst file")
    if path.name.startswith("heaptrack") or path.suffix in (".zst", ".gz"):
        return parse_heaptrack_file(path)
    return parse_massif(path)
