"""The dataset a run's servers start from: the sysbench tables' shape, the cache size,
and how MariaDB's golden datadirs (servers/mariadb/dataset.py) load them.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from mallocbench.workloads.catalogue import lua_dir
from mallocbench.workloads.sysbench import Sysbench


@dataclass
class Dataset:
    """The sysbench tables every server of a run starts from, and the engine cache size."""

    tables: int = 4
    rows: int = 10000
    cache_bytes: int = 256 << 20

    def schema_hash(self, golden_format: int) -> str:
        # The loader lives in mb_common.lua: a changed schema must not reuse old datadirs.
        digest = hashlib.sha256((lua_dir() / "mb_common.lua").read_bytes())
        digest.update(str(golden_format).encode())
        return digest.hexdigest()[:10]

    def load(self, connection_file: str, engine_sql: str, threads: int) -> None:
        """sysbench's tables into the server `connection_file` reaches."""
        loader = Sysbench(
            connection_file=connection_file,
            tables=self.tables,
            table_size=self.rows,
            engine_sql=engine_sql,
        )
        loader.prepare(threads=threads)
