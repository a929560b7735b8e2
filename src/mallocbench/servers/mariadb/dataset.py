"""MariaDB's golden datadirs: the sysbench tables loaded once per (server build, engine,
shape), and the cache warmed after each start.

Every session starts from a copy, so writes of one session never leak into the next
and a session is ready in seconds instead of a reload. The tables are loaded by the
workload driver the shape carries (servers/ sits below workloads/, which holds the
loader's scripts).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol, runtime_checkable

import pymysql

from mallocbench import allocators
from mallocbench import units as fmt
from mallocbench.errors import MallocbenchError
from mallocbench.files import cache_root, is_disk_fault
from mallocbench.servers.engines import Engine
from mallocbench.servers.family import Shape
from mallocbench.servers.golden import published
from mallocbench.servers.mariadb.build import ServerBuild
from mallocbench.servers.mariadb.config import ServerConfig
from mallocbench.servers.mariadb.private import PrivateServer

# Bumped when golden datadirs change shape: 2 = owned by the server's user, no root
# account without a password; 3 = index statistics taken after the load.
_GOLDEN_FORMAT = 3

# Disk a loaded sysbench table takes per row: id INT + k INT + c CHAR(120) + pad CHAR(60)
# are 188 bytes, plus InnoDB's 18 bytes of row header and transaction fields, page fill
# and the secondary index on k. Measured on MariaDB 10.11 with 200,000 rows: 272 bytes
# (InnoDB), 208 (MyRocks).
BYTES_PER_ROW = 280

# The server aborts a cache-warming read that runs longer (a dataset on a slow disk);
# the first cell then warms the rest, as it would have without this.
CACHE_WARM_STATEMENT_S = 300


@runtime_checkable
class LoadableShape(Shape, Protocol):
    """The dataset's shape with its loader (run.dataset.Dataset is one)."""

    def schema_hash(self, golden_format: int) -> str: ...
    def load(self, connection_file: str, engine_sql: str, threads: int) -> None: ...


def dataset_key(build: ServerBuild, engine: Engine, dataset: LoadableShape) -> str:
    version = "".join(c if c.isalnum() or c in ".-" else "_" for c in build.version)
    shape = f"{dataset.tables}x{dataset.rows}"
    return f"{build.flavor}-{version}-{engine.name}-{shape}-{dataset.schema_hash(_GOLDEN_FORMAT)}"


def golden_datadir(
    build: ServerBuild,
    engine: Engine,
    dataset: LoadableShape,
    root: Path | None = None,
    on_status: Callable[[str], None] | None = None,
) -> Path:
    """The loaded datadir for this shape, building it first when it is not cached."""
    root = root or cache_root()
    key = dataset_key(build, engine, dataset)
    try:
        return published(
            root / "datasets", key, lambda work: _load(build, engine, dataset, work), on_status
        )
    except PermissionError as exc:
        raise MallocbenchError(
            f"cannot write the dataset cache {root}: set MALLOCBENCH_CACHE to a writable directory"
        ) from exc
    except OSError as exc:
        if not is_disk_fault(exc):
            raise
        raise MallocbenchError(
            f"cannot build dataset {key} in the cache {root}: {exc.strerror}: free space "
            "there, or set MALLOCBENCH_CACHE to a directory on a disk with room"
        ) from exc


def _load(build: ServerBuild, engine: Engine, dataset: LoadableShape, workdir: Path) -> None:
    config = ServerConfig(
        engine=engine, cache_bytes=dataset.cache_bytes, allocator=allocators.get("glibc")
    )
    server = PrivateServer(build, workdir, config)
    try:
        server.initialize_datadir()
        with server:
            server.start()
            _fill(server, engine, dataset)
        if server.statedir != workdir:
            # Loaded in a runtime directory (as root): the cache keeps the datadir alone.
            shutil.move(server.datadir, workdir / "data")
    finally:
        if server.statedir != workdir:
            server.discard_state()
    for leftover in ("mysqld.sock", "mysqld.pid"):
        with contextlib.suppress(FileNotFoundError):
            (workdir / leftover).unlink()


def _take_statistics(server: PrivateServer, engine: Engine, dataset: LoadableShape) -> None:
    """Index statistics from the loaded data, kept in the golden datadir for every copy.

    Without them the optimizer plans by guesses: MyRocks counted 4,000 rows in every
    index of a 2,000-row table. With them every start plans from the same counts. (They
    do not pin a plan: MyRocks also samples its SST files for each query's key ranges,
    and for 100 random keys of that table scanned it in 26 of 400 EXPLAINs.) MyRocks
    takes its statistics from its SST files, so the rows still in memtables are flushed
    first.
    """
    if engine.name == "myrocks":
        server.query("SET GLOBAL rocksdb_force_flush_memtable_now = 1")
    for table in range(1, dataset.tables + 1):
        server.query(f"ANALYZE TABLE sbtest.sbtest{table}")


def _fill(server: PrivateServer, engine: Engine, dataset: LoadableShape) -> None:
    server.query("CREATE DATABASE IF NOT EXISTS sbtest")
    dataset.load(
        str(server.sysbench_options), engine.sql_engine, min(dataset.tables, os.cpu_count() or 1)
    )
    _take_statistics(server, engine, dataset)
    # Persist everything so a copy needs no crash recovery at its first start.
    if engine.name == "innodb":
        server.query("SET GLOBAL innodb_fast_shutdown = 0")
    # The copies must never start with a passwordless root, even for the moment
    # before their own init file runs: give it one that nobody keeps.
    server.query(
        "ALTER USER IF EXISTS 'root'@'localhost' IDENTIFIED BY %s, "
        "'root'@'127.0.0.1' IDENTIFIED BY %s, 'root'@'::1' IDENTIFIED BY %s",
        (secrets.token_urlsafe(24),) * 3,
    )


def _quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def warm_cache(server: PrivateServer, data: Shape, database: str = "sbtest") -> str:
    """Read every index of every table once after a start; says what was done.

    A cold cache is a ramp of its own, and a long one on a dataset of some size: with
    8 x 150,000 rows and a 1 GiB cache (point-query, 8 clients, no warmup) MyRocks'
    block cache took ~12 s to fill from the queries alone, QPS ramping from 15k to 21k,
    and InnoDB's first second ran at a third of the rest. Reading the indexes took
    1.0-1.4 s and left both flat from the first second. Tables that do not fit the
    cache are not read: a scan would only churn it, for as long as the dataset is big.
    """
    table_bytes = data.tables * data.rows * BYTES_PER_ROW
    if table_bytes > data.cache_bytes:
        return (
            f"not warmed: the tables (about {fmt.mib(table_bytes)}) do not fit the cache "
            f"({fmt.mib(data.cache_bytes)})"
        )
    started = time.monotonic()
    try:
        with (
            server.connect(read_timeout=CACHE_WARM_STATEMENT_S + 30) as conn,
            conn.cursor() as cur,
        ):
            # MySQL has no such variable; there the read timeout still bounds each read.
            with contextlib.suppress(pymysql.MySQLError):
                cur.execute(f"SET SESSION max_statement_time = {CACHE_WARM_STATEMENT_S}")
            cur.execute(
                "SELECT DISTINCT table_name, index_name FROM information_schema.statistics"
                " WHERE table_schema = %s ORDER BY table_name, index_name",
                (database,),
            )
            indexes = [(str(t), str(i)) for t, i in cur.fetchall()]
            for table, index in indexes:
                cur.execute(
                    f"SELECT COUNT(*) FROM {_quoted(database)}.{_quoted(table)}"
                    f" FORCE INDEX ({_quoted(index)})"
                )
                cur.fetchall()
    except pymysql.MySQLError as exc:
        return f"warming failed after {time.monotonic() - started:.1f} s: {exc.args[-1]}"
    tables = len({table for table, _ in indexes})
    return f"read {len(indexes)} indexes of {tables} tables in {time.monotonic() - started:.1f} s"
