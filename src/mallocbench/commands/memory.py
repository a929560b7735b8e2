"""`mallocbench memory` and `mallocbench profile`: thin click wrappers."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from mallocbench.errors import MallocbenchError
from mallocbench.units import parse_size

if TYPE_CHECKING:
    from collections.abc import Callable

    import pymysql

    from mallocbench.memory.client import ConnectOptions
    from mallocbench.memory.profile import SqlStep
    from mallocbench.memory.report import MemoryReport
    from mallocbench.servers.engines import Engine
    from mallocbench.servers.mariadb import ServerBuild
    from mallocbench.workloads.catalogue import Step


@click.command("memory")
@click.option("--socket", "-S", metavar="PATH", help="Unix socket of a local server.")
@click.option("--host", metavar="HOST", help="Server host (TCP).")
@click.option("--port", "-P", type=int, help="Server TCP port (default 3306; alone: on 127.0.0.1).")
@click.option(
    "--user",
    "-u",
    metavar="USER",
    help="User (default: from the option files, else your login name, as the client).",
)
@click.option(
    "--defaults-file",
    metavar="FILE",
    help="The only option file to read ([client] socket=, user=, password=); default: "
    "/etc/my.cnf, /etc/mysql/my.cnf and ~/.my.cnf, as the client reads them.",
)
@click.option("--ask-password", "-p", is_flag=True, help="Prompt for the password (not echoed).")
@click.option(
    "--pid",
    type=int,
    help="The server's pid, when it cannot be found by itself; with no server given, "
    "the socket it listens on is used. A PostgreSQL process (the postmaster or a backend) "
    "is accounted as PostgreSQL.",
)
@click.option(
    "--json", "as_json", is_flag=True, help="Print JSON (one object per sample with --watch)."
)
@click.option(
    "--watch",
    type=float,
    metavar="SECONDS",
    help="Sample every SECONDS until Ctrl-C or `kill` (SIGTERM), writing a CSV and an HTML chart.",
)
@click.option("--count", type=int, metavar="N", help="With --watch: stop after N samples.")
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("memory-watch"),
    show_default=True,
    help="With --watch: directory for memory.csv and memory.html (a chart).",
)
def memory(
    socket: str | None,
    host: str | None,
    port: int | None,
    user: str | None,
    defaults_file: str | None,
    ask_password: bool,
    pid: int | None,
    as_json: bool,
    watch: float | None,
    count: int | None,
    out: Path,
) -> None:
    """Explain where a running MariaDB/MySQL or PostgreSQL server's memory goes.

    Connects read-only (SELECT and SHOW only), finds the server's process when it runs on
    this host, and prints:

    \b
      - the process: RSS, VSZ, anonymous / file-backed / shared, threads, stacks;
      - the allocator mapped in it, glibc arenas, and the allocator knobs in force;
      - the configured footprint: global buffers + per-connection buffers x
        max_connections (worst case), x Max_used_connections, x connections now;
      - what the server accounts for: buffer pool, RocksDB cache and memtables,
        Memory_used and its sessions, performance_schema and its top consumers;
      - RSS split into parts that add up to it exactly: binary, libraries, buffer pool
        (resident pages), stacks, and the heap divided by what the server accounts
        there; the rest is allocator overhead and fragmentation, with the ratios
        RSS/accounted and heap/accounted (as Redis reports them);
      - advice, each with the numbers behind it.

    With no server given, it is found as the mysql client finds it: option files
    ([client], [client-server], [client-mariadb], [mysql]) and MYSQL_UNIX_PORT,
    MYSQL_HOST, MYSQL_TCP_PORT, MYSQL_PWD; then /etc/mysql/debian.cnf when readable;
    then the usual socket paths, as your login name by unix_socket authentication.
    One line on stderr says which was used. Flags always win.

    \b
    Examples:
      mallocbench memory
      mallocbench memory --socket /run/mysqld/mysqld.sock
      mallocbench memory --host 127.0.0.1 --port 3307 -u monitor -p
      mallocbench memory -S /run/mysqld/mysqld.sock --watch 5 --out rss-night
      mallocbench memory -S /run/mysqld/mysqld.sock --json | jq .breakdown

    The password is never taken on the command line (it would show in `ps`): put it in
    an option file ([client] password=...), MYSQL_PWD, or use --ask-password. Reading the
    process needs the server's user or root. The full account needs PROCESS and SELECT
    on performance_schema; without them each missing part is named, with its GRANT.

    PostgreSQL: --pid PID of the postmaster or a backend splits the server's PSS into
    shared memory (once), private memory and code, with each process's memory contexts
    and allocator overhead (docs/how-to/memory.md); role --user, else the server's user.
    """
    from mallocbench.memory import take as take_mod
    from mallocbench.memory.client import ConnectOptions
    from mallocbench.memory.connect import find_server

    if count is not None and watch is None:
        raise MallocbenchError("--count only applies with --watch SECONDS")
    postgresql = _is_postgresql(pid, host, defaults_file, watch)
    password = None
    if ask_password:
        password = click.prompt("Password", hide_input=True, default="", show_default=False)
    if pid is not None and postgresql:
        _postgresql(pid, user, password, socket, port, as_json)
        return
    found = find_server(ConnectOptions(socket, host, port, user, password, defaults_file), pid)
    _say_found(found)
    opts, conn = found.opts, found.conn
    if watch is None:
        try:
            report = take_mod.take(opts, pid, conn=conn)
        finally:
            conn.close()
        _print_report(report, as_json)
        return

    _watch(opts, conn, pid, watch, count, out, as_json)


def _say_found(found: Any) -> None:
    """One line on standard error saying which server discovery found, and how."""
    if found.source:
        from mallocbench.commands.output import say
        from mallocbench.report import formats

        say(formats.MEMORY_FOUND, found.describe(), err=True)


def _is_postgresql(
    pid: int | None, host: str | None, defaults_file: str | None, watch: float | None
) -> bool:
    """Whether `pid` is a PostgreSQL process; MariaDB's options are refused for one."""
    from mallocbench.servers.postgresql.attach import postmaster_of

    if pid is None or postmaster_of(pid) is None:
        return False
    for given, option in ((host, "--host"), (defaults_file, "--defaults-file"), (watch, "--watch")):
        if given is not None:
            raise MallocbenchError(
                f"{option} is for MariaDB/MySQL servers; the process given is PostgreSQL's: "
                "leave it out (--socket DIR, --port, --user and --ask-password reach it)"
            )
    return True


def _postgresql(
    pid: int,
    user: str | None,
    password: str | None,
    socket: str | None,
    port: int | None,
    as_json: bool,
) -> None:
    from mallocbench.commands.output import emit
    from mallocbench.report import formats
    from mallocbench.servers.postgresql.attach import take

    report = take(pid, user, password, socket, port)
    emit(formats.PG_MEMORY, "json" if as_json else formats.TERMINAL, report)


def _watch(
    opts: ConnectOptions,
    conn: pymysql.Connection,
    pid: int | None,
    watch: float,
    count: int | None,
    out: Path,
    as_json: bool,
) -> None:
    """--watch: sample on one connection until Ctrl-C, SIGTERM or --count; closes `conn`."""
    from mallocbench.commands.options import StopOnSignals
    from mallocbench.commands.output import say
    from mallocbench.memory import take as take_mod
    from mallocbench.memory import watch as watch_mod
    from mallocbench.report import formats
    from mallocbench.report.memory import Watched, Watching, write_watch_chart

    try:
        first = take_mod.take(opts, pid, conn=conn)
    except BaseException:
        conn.close()
        raise
    pid = first.process.pid if first.process else pid
    if pid is None:
        conn.close()
        raise MallocbenchError(
            f"--watch needs the server's process, which was not found: {first.pid_source}"
        )
    samples = iter([first])

    def sample() -> MemoryReport:
        return next(samples, None) or take_mod.take(opts, pid, conn=conn, pid_checked=True)

    def show(row: dict[str, object]) -> None:
        say(formats.MEMORY_SAMPLE, row, fmt="json" if as_json else None)

    csv_path, chart_path = out / "memory.csv", out / "memory.html"
    if not as_json:
        say(formats.MEMORY_WATCHING, Watching(pid, watch, os.getpid(), csv_path))
    try:
        # Its own handlers, as run's: a watcher started in the background inherits SIGINT
        # ignored, and `kill` (SIGTERM) would otherwise end it without its chart.
        with StopOnSignals() as stop:
            rows = watch_mod.watch(
                sample,
                watch,
                csv_path,
                lambda rows: write_watch_chart(rows, chart_path),
                count=count,
                on_row=show,
                should_stop=stop.requested,
            )
    finally:
        conn.close()
    say(formats.MEMORY_WATCHED, Watched(len(rows), csv_path, chart_path), err=as_json)


def _print_report(report: MemoryReport, as_json: bool) -> None:
    # Imported when a report is printed: --help and bad input stay quick.
    from mallocbench.commands.output import emit
    from mallocbench.report import formats

    emit(formats.MEMORY, "json" if as_json else formats.TERMINAL, report)


@click.command("profile")
@click.argument("file", required=False, type=click.Path(path_type=Path))
@click.option(
    "--tool",
    type=click.Choice(["auto", "heaptrack", "massif"]),
    default="auto",
    show_default=True,
    help="Profiler: heaptrack (fast, ~2x slower server) or valgrind massif (~20x).",
)
@click.option(
    "--step",
    metavar="STEP",
    help="A step of the workload catalogue, run by sysbench as `mallocbench run` runs it: "
    "e.g. read-only-order, 'range-covered-pk range=100', point-query, qr100 "
    "(list them: mallocbench steps). Default: read-only-order.",
)
@click.option("--sql", metavar="SQL", help="Instead of --step: statements to run (';'-separated).")
@click.option(
    "--seconds",
    type=float,
    metavar="SECONDS",
    help="With --step: how long the step runs (steps that load or build end by themselves). "
    "Default: 10.",
)
@click.option(
    "--repeat", type=int, metavar="N", help="With --sql: rounds per connection. Default: 5."
)
@click.option(
    "--connections",
    type=int,
    default=2,
    show_default=True,
    help="Concurrent connections (sysbench threads with --step).",
)
@click.option(
    "--tables", type=int, metavar="N", help="With --step: sbtest tables to load. Default: 1."
)
@click.option("--rows", type=int, metavar="N", help="With --step: rows per table. Default: 20000.")
@click.option(
    "--engine", type=click.Choice(["innodb", "myrocks"]), default="innodb", show_default=True
)
@click.option("--cache", default="64M", show_default=True, help="Buffer pool / block cache size.")
@click.option(
    "--set", "sets", multiple=True, metavar="VAR=VALUE", help="A my.cnf override (repeatable)."
)
@click.option(
    "--basedir", metavar="DIR", help="Server installation to use (default: packaged MariaDB)."
)
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("profile-out"),
    show_default=True,
    help="Directory for the private server and the profiler's file.",
)
@click.option("--top", type=int, default=15, show_default=True, help="How many sites to print.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def profile(
    file: Path | None,
    tool: str,
    step: str | None,
    sql: str | None,
    seconds: float | None,
    repeat: int | None,
    connections: int,
    tables: int | None,
    rows: int | None,
    engine: str,
    cache: str,
    sets: tuple[str, ...],
    basedir: str | None,
    out: Path,
    top: int,
    as_json: bool,
) -> None:
    """Top allocation sites by peak bytes, from a private server under a heap profiler.

    Starts a private server (own datadir, socket and port) under heaptrack or valgrind
    massif, runs one step on it, shuts it down and prints where the heap peak was
    allocated. Sites are attributed past the server's allocation wrappers (my_malloc,
    alloc_root, ut_allocator, operator new), so they name the code that asked.

    The step is any step of the workload catalogue (`mallocbench steps`), run by
    sysbench on the same cached sbtest tables as `mallocbench run`, or your own SQL
    on an empty server. Given FILE (a massif.out, or a heaptrack .zst/.gz data file),
    only parses it.

    \b
    Examples:
      mallocbench profile --step read-only-order --set sort_buffer_size=32M
      mallocbench profile --tool massif --step "range-covered-pk range=100" --connections 4
      mallocbench profile --step qr100 --seconds 30
      mallocbench profile --sql "SELECT ... ORDER BY ..." --repeat 20
      mallocbench profile massif.out.12345

    The profilers see malloc-family calls only: the InnoDB buffer pool and other
    mmap'd areas are not in these numbers (`mallocbench memory` accounts for them).
    """
    from mallocbench.commands.output import emit, say
    from mallocbench.memory import profile as profile_mod
    from mallocbench.memory.massif import ProfileTop
    from mallocbench.report import formats

    if file is not None:
        result = profile_mod.parse_file(file)
    else:
        overrides = _my_cnf_overrides(sets)
        chosen = _profile_step(step, sql, seconds, repeat, tables, rows)
        _check_profile_numbers(connections, repeat, tables, rows, seconds)
        result = profile_mod.profile_server(
            tool,
            out,
            chosen,
            connections,
            _golden_datadir,
            repeat=repeat or 5,
            seconds=seconds or 10.0,
            engine=engine,
            cache_bytes=parse_size(cache, "--cache"),
            tables=tables or 1,
            rows=rows or 20000,
            overrides=overrides,
            basedir=basedir,
            log=(lambda msg: say(formats.PROFILE_PROGRESS, msg, err=True)),
        )
    emit(formats.PROFILE, "json" if as_json else formats.TERMINAL, ProfileTop(result, top))


def _my_cnf_overrides(sets: tuple[str, ...]) -> dict[str, str]:
    """`--set VAR=VALUE` options as my.cnf overrides."""
    overrides = {}
    for item in sets:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise MallocbenchError(f"--set takes VAR=VALUE, got {item!r}")
        overrides[key.strip()] = value.strip()
    return overrides


def _check_profile_numbers(
    connections: int,
    repeat: int | None,
    tables: int | None,
    rows: int | None,
    seconds: float | None,
) -> None:
    for name, value in (
        ("--connections", connections),
        ("--repeat", repeat),
        ("--tables", tables),
        ("--rows", rows),
    ):
        if value is not None and value < 1:
            raise MallocbenchError(f"{name} must be at least 1, got {value}")
    if seconds is not None and seconds <= 0:
        raise MallocbenchError(f"--seconds must be above 0, got {seconds:g}")


def _profile_step(
    step: str | None,
    sql: str | None,
    seconds: float | None,
    repeat: int | None,
    tables: int | None,
    rows: int | None,
) -> Step | SqlStep:
    """The step to profile; an option that does not apply to it is refused, not ignored."""
    from mallocbench.memory import profile as profile_mod

    if sql is not None:
        if step is not None:
            raise MallocbenchError("give --step or --sql, not both")
        for name, value in (("--seconds", seconds), ("--tables", tables), ("--rows", rows)):
            if value is not None:
                raise MallocbenchError(f"{name} applies to --step; with --sql use --repeat")
        chosen = profile_mod.sql_step(sql)
        if not chosen.statements:
            raise MallocbenchError("--sql has no statements: give e.g. --sql 'SELECT 1'")
        return chosen
    if repeat is not None:
        raise MallocbenchError("--repeat applies to --sql; a --step runs for --seconds")
    return profile_mod.catalogue_step(step or profile_mod.DEFAULT_STEP)


def _golden_datadir(
    build: ServerBuild,
    engine: Engine,
    tables: int,
    rows: int,
    cache_bytes: int,
    on_status: Callable[[str], None],
) -> Path:
    """The run pipeline's cached sbtest tables, so a step profiled here and a cell measured
    there see the same data."""
    from mallocbench.run.dataset import Dataset
    from mallocbench.servers.mariadb.dataset import golden_datadir

    shape = Dataset(tables=tables, rows=rows, cache_bytes=cache_bytes)
    return golden_datadir(build, engine, shape, on_status=on_status)


commands = [memory, profile]
