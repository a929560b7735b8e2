"""Golden datadirs: the sysbench tables loaded once per (server build, engine, shape).

Every session starts from a copy, so writes of one session never leak into the next
and a session is ready in seconds instead of a reload.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import secrets
import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from mallocbench import allocators
from mallocbench.errors import MallocbenchError
from mallocbench.files import cache_root, is_disk_fault
from mallocbench.servers.engines import Engine
from mallocbench.servers.mariadb import PrivateServer, ServerBuild, ServerConfig
from mallocbench.servers.orphans import stop_orphan
from mallocbench.servers.outcome import SERVER_RECORD
from mallocbench.workloads.catalogue import lua_dir
from mallocbench.workloads.sysbench import Sysbench

# Bumped when golden datadirs change shape: 2 = owned by the server's user, no root
# account without a password; 3 = index statistics taken after the load.
_GOLDEN_FORMAT = 3


@dataclass
class Dataset:
    """The sysbench tables every server of a run starts from, and the engine cache size."""

    tables: int = 4
    rows: int = 10000
    cache_bytes: int = 256 << 20


def _schema_hash() -> str:
    # The loader lives in mb_common.lua: a changed schema must not reuse old datadirs.
    digest = hashlib.sha256((lua_dir() / "mb_common.lua").read_bytes())
    digest.update(str(_GOLDEN_FORMAT).encode())
    return digest.hexdigest()[:10]


def dataset_key(build: ServerBuild, engine: Engine, dataset: Dataset) -> str:
    version = "".join(c if c.isalnum() or c in ".-" else "_" for c in build.version)
    return (
        f"{build.flavor}-{version}-{engine.name}-{dataset.tables}x{dataset.rows}-{_schema_hash()}"
    )


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def golden_datadir(
    build: ServerBuild,
    engine: Engine,
    dataset: Dataset,
    root: Path | None = None,
    on_status: Callable[[str], None] | None = None,
) -> Path:
    """The loaded datadir for this shape, building it first when it is not cached."""
    root = root or cache_root()
    key = dataset_key(build, engine, dataset)
    final = root / "datasets" / key
    try:
        with _locked(root / "datasets" / f".{key}.lock"):
            if (final / "READY").is_file():
                return final / "data"
            # We hold the lock, so any loader directory left in the cache belongs to a dead
            # harness: stop its server if one still runs, then reclaim the space.
            for leftover in (root / "datasets").glob(f".{key}.*"):
                if not leftover.is_dir():
                    continue  # the lock file itself
                stop_orphan(leftover / SERVER_RECORD)
                shutil.rmtree(leftover, ignore_errors=True)
            if on_status:
                on_status(f"loading dataset {key} (once; later runs reuse it)")
            work = Path(tempfile.mkdtemp(prefix=f".{key}.", dir=root / "datasets"))
            try:
                _load(build, engine, dataset, work)
                if final.exists():
                    shutil.rmtree(final)
                (work / "data").rename(work / "data.loaded")
                final.mkdir(parents=True)
                (work / "data.loaded").rename(final / "data")
                (final / "READY").write_text(key + "\n")
            finally:
                shutil.rmtree(work, ignore_errors=True)
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
    return final / "data"


def _load(build: ServerBuild, engine: Engine, dataset: Dataset, workdir: Path) -> None:
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


def _take_statistics(server: PrivateServer, engine: Engine, dataset: Dataset) -> None:
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


def _fill(server: PrivateServer, engine: Engine, dataset: Dataset) -> None:
    server.query("CREATE DATABASE IF NOT EXISTS sbtest")
    loader = Sysbench(
        connection_file=str(server.sysbench_options),
        tables=dataset.tables,
        table_size=dataset.rows,
        engine_sql=engine.sql_engine,
    )
    loader.prepare(threads=min(dataset.tables, os.cpu_count() or 1))
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
