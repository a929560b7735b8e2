"""Golden PostgreSQL data directories: sysbench's tables loaded once per (build, shape).

Every session starts from a copy, as with MariaDB (run/dataset.py): writes of one
session never reach the next, and a session is ready in a second instead of a reload.
The cache is MariaDB's, under names of its own.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import psycopg

from mallocbench import allocators
from mallocbench.errors import MallocbenchError
from mallocbench.servers.family import Shape
from mallocbench.servers.golden import published
from mallocbench.servers.postgresql import pgbench, workload
from mallocbench.servers.postgresql.build import PgBuild
from mallocbench.servers.postgresql.server import DATABASE, ROLE, PgConfig, PgServer

# Bumped when golden data directories change shape.
_GOLDEN_FORMAT = 2  # 2: pgbench's tables beside sysbench's
# sysbench's own loader, whose schema the golden directories hold.
_LOADER_SCRIPT = Path("/usr/share/sysbench/oltp_common.lua")


def _schema_hash() -> str:
    digest = hashlib.sha256(str(_GOLDEN_FORMAT).encode())
    if _LOADER_SCRIPT.is_file():
        digest.update(_LOADER_SCRIPT.read_bytes())
    return digest.hexdigest()[:10]


def dataset_key(build: PgBuild, dataset: Shape) -> str:
    version = "".join(c if c.isalnum() or c in ".-" else "_" for c in build.version)
    return f"{build.flavor}-{version}-{dataset.tables}x{dataset.rows}-{_schema_hash()}"


def golden_datadir(
    build: PgBuild,
    dataset: Shape,
    root: Path,
    on_status: Callable[[str], None] | None = None,
) -> Path:
    """The loaded data directory for this shape, loading it first when not cached.

    `root` is the dataset cache (run.dataset.cache_root(): the pipeline's, beside
    MariaDB's golden directories)."""
    key = dataset_key(build, dataset)
    try:
        return published(
            root / "datasets", key, lambda work: _load(build, dataset, work), on_status
        )
    except OSError as exc:
        raise MallocbenchError(
            f"cannot build dataset {key} in the cache {root}: {exc.strerror}: free space "
            "there, or set MALLOCBENCH_CACHE to a writable directory with room"
        ) from exc


def _load(build: PgBuild, dataset: Shape, workdir: Path) -> None:
    config = PgConfig(cache_bytes=dataset.cache_bytes, allocator=allocators.get("glibc"))
    server = PgServer(build, workdir, config)
    try:
        server.initialize_datadir()
        with server:
            server.start()
            server.query(f"CREATE DATABASE {DATABASE} OWNER {ROLE}", dbname="postgres")
            _prepare(server, dataset)
            _prepare_pgbench(server, build, dataset)
            # Statistics and visibility from the loaded data, kept for every copy: each
            # start plans from the same counts and no copy begins by vacuuming.
            server.query("VACUUM (ANALYZE, FREEZE)")
            server.query("CHECKPOINT")
        if server.statedir != workdir:
            shutil.move(server.datadir, workdir / "data")
    finally:
        if server.statedir != workdir:
            server.discard_state()


def _prepare(server: PgServer, dataset: Shape) -> None:
    """sysbench's own loader: its tables, rows and index on k, the schema every
    PostgreSQL form queries."""
    threads = min(dataset.tables, os.cpu_count() or 1)
    cmd = workload.command(
        str(server.sysbench_options), dataset.tables, dataset.rows, max(1, threads), None
    )
    out = subprocess.run(
        [*cmd, "prepare"],
        capture_output=True,
        text=True,
        timeout=3600,
        check=False,
        env={**os.environ, "LUA_PATH": workload.lua_path()},
    )
    if out.returncode != 0:
        tail = "\n".join((out.stdout + out.stderr).strip().splitlines()[-5:])
        raise MallocbenchError(f"loading the dataset with sysbench failed: {tail}")


def warm_cache(server: PgServer) -> str:
    """Read every table and index of the dataset into shared_buffers after a start;
    says what was done. A cold cache is a ramp of its own (run/session.warm_cache has
    MariaDB's figures); relations that do not fit are not read, as there."""
    try:
        with server.connect() as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_prewarm")
            row = conn.execute(
                "SELECT sum(pg_relation_size(c.oid)), pg_size_bytes(current_setting("
                "'shared_buffers')) FROM pg_class c JOIN pg_namespace n ON n.oid ="
                " c.relnamespace WHERE n.nspname = 'public' AND c.relkind IN ('r', 'i')"
            ).fetchone()
            size, cache = (int(row[0] or 0), int(row[1])) if row else (0, 0)
            if size > cache:
                return (
                    f"not warmed: the tables and indexes ({size >> 20} MiB) do not fit "
                    f"shared_buffers ({cache >> 20} MiB)"
                )
            started = time.monotonic()
            relations = conn.execute(
                "SELECT count(pg_prewarm(c.oid)) FROM pg_class c JOIN pg_namespace n"
                " ON n.oid = c.relnamespace WHERE n.nspname = 'public'"
                " AND c.relkind IN ('r', 'i')"
            ).fetchone()
    except psycopg.Error as exc:
        return f"warming failed: {str(exc).strip().splitlines()[0]}"
    count = int(relations[0]) if relations else 0
    return f"read {count} tables and indexes in {time.monotonic() - started:.1f} s"


def _prepare_pgbench(server: PgServer, build: PgBuild, dataset: Shape) -> None:
    """pgbench's tables (pgbench_*), about as many account rows as sysbench's rows."""
    scale = pgbench.scale_for(dataset.tables, dataset.rows)
    out = subprocess.run(
        pgbench.init_command(build, scale),
        capture_output=True,
        text=True,
        timeout=3600,
        check=False,
        env={**os.environ, **pgbench.client_environment(server.client_env)},
    )
    if out.returncode != 0:
        tail = "\n".join((out.stdout + out.stderr).strip().splitlines()[-5:])
        raise MallocbenchError(f"loading pgbench's tables failed: {tail}")
