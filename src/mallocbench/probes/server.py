"""What the server says about its own memory, to set beside what the kernel says.

The cheap reading taken with every per-second sample over one kept connection (status
counters and, when enabled, the performance_schema total). The full account at the end of
each cell, RSS split into what the server accounts for and the rest, is memory/'s
(memory/account.py), the same account `mallocbench memory` gives of any running server.
"""

from __future__ import annotations

import contextlib
from typing import Any, Protocol

import pymysql

# SHOW GLOBAL STATUS name -> metric name (bytes); every name is also a Sample.extra key.
# Builds differ in what they expose: MariaDB's MyRocks has no block-cache usage status
# (it is in information_schema.ROCKSDB_DBSTATS) and no pinned usage at all.
STATUS_METRICS = {
    "memory_used": "server_memory_used_bytes",
    "innodb_buffer_pool_bytes_data": "innodb_buffer_pool_data_bytes",
    "rocksdb_block_cache_usage": "rocksdb_block_cache_usage_bytes",
    "rocksdb_block_cache_pinned_usage": "rocksdb_block_cache_pinned_bytes",
    "rocksdb_memtable_total": "rocksdb_memtable_bytes",
}
BLOCK_CACHE_METRIC = "rocksdb_block_cache_usage_bytes"
PFS_METRIC = "pfs_memory_bytes"
# What a capped server's memory cgroup is charged: RSS plus the page cache and kernel
# memory charged to it. The cap acts on this, not on RSS.
CGROUP_METRIC = "cgroup_bytes"


class _Charged(Protocol):
    def usage_bytes(self) -> int | None: ...


class _ProbedConfig(Protocol):
    @property
    def memory_cgroup(self) -> _Charged | None: ...


class ProbedServer(Protocol):
    """What a probe reads of a server (a servers.mariadb.PrivateServer): named here, not
    imported, so probes/ stays below servers/ (whose cgroups read probes/)."""

    @property
    def config(self) -> _ProbedConfig: ...

    def connect(self, connect_timeout: float = ..., **kwargs: Any) -> pymysql.Connection: ...

    def alive(self) -> bool: ...


_STATUS_SQL = "SHOW GLOBAL STATUS WHERE Variable_name IN ({})".format(
    ", ".join(f"'{name}'" for name in STATUS_METRICS)
)
_DBSTATS_SQL = (
    "SELECT VALUE FROM information_schema.ROCKSDB_DBSTATS WHERE STAT_TYPE = 'DB_BLOCK_CACHE_USAGE'"
)
_PFS_SQL = (
    "SELECT SUM(CURRENT_NUMBER_OF_BYTES_USED) "
    "FROM performance_schema.memory_summary_global_by_event_name"
)


class ServerMemoryProbe:
    """Reads the server's memory counters; never raises, so it can never cost a cell."""

    def __init__(self, server: ProbedServer, asks_server: bool = True) -> None:
        self.server = server
        self._conn: pymysql.Connection | None = None
        self._pfs: bool | None = None  # learnt on first read
        self._dbstats: bool | None = None
        # Without SQL (a server whose counters are not these: PostgreSQL) only the
        # cgroup's charge is read.
        self._broken = not asks_server

    def _connection(self) -> pymysql.Connection | None:
        if self._conn is None and not self._broken:
            try:
                self._conn = self.server.connect(connect_timeout=5, read_timeout=10)
            except pymysql.MySQLError:
                self._broken = True
        return self._conn

    def read(self) -> dict[str, float]:
        # Read first and without SQL: it still tells the charge of a server too busy
        # (or too short of memory) to answer.
        values = self.charge()
        conn = self._connection()
        if conn is None:
            return values
        try:
            with conn.cursor() as cur:
                cur.execute(_STATUS_SQL)
                for name, value in cur.fetchall():
                    key = STATUS_METRICS.get(str(name).lower())
                    with contextlib.suppress(TypeError, ValueError):
                        if key:
                            values[key] = float(value)
                if self._dbstats is None:
                    # Only worth asking where RocksDB is loaded but says nothing in status.
                    self._dbstats = (
                        "rocksdb_memtable_bytes" in values and BLOCK_CACHE_METRIC not in values
                    )
                if self._dbstats:
                    cur.execute(_DBSTATS_SQL)
                    row = cur.fetchone()
                    if row and row[0] is not None:
                        values[BLOCK_CACHE_METRIC] = float(row[0])
                if self._pfs is None:
                    cur.execute("SELECT @@GLOBAL.performance_schema")
                    row = cur.fetchone()
                    self._pfs = bool(row and int(row[0]))
                if self._pfs:
                    cur.execute(_PFS_SQL)
                    row = cur.fetchone()
                    if row and row[0] is not None:
                        values[PFS_METRIC] = float(row[0])
        except (pymysql.MySQLError, OSError):
            # A dead or busy server: the cell's own checks say what happened.
            self.close()
            self._broken = True
        return values

    def charge(self) -> dict[str, float]:
        """The server's cgroup charge, without SQL; empty without a group or a server."""
        group = self.server.config.memory_cgroup
        # After a kill the group holds only the page cache left behind: no reading of
        # the server's, any more than RSS is.
        if group is None or not self.server.alive():
            return {}
        usage = group.usage_bytes()
        return {} if usage is None else {CGROUP_METRIC: float(usage)}

    def close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.close()
            self._conn = None

    def __enter__(self) -> ServerMemoryProbe:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
