"""Which sysbench driver a server family's sessions run with, by the family's name.

Here and not a member of the family (servers/family.py): workloads/ depends on servers/,
not the other way round.
"""

from __future__ import annotations

from mallocbench.errors import MallocbenchError
from mallocbench.workloads.pgsql import PgSysbench
from mallocbench.workloads.sysbench import Sysbench

DRIVERS: dict[str, type[Sysbench]] = {
    "mariadb": Sysbench,
    "mysql": Sysbench,
    "postgresql": PgSysbench,
}


def driver(
    family: str, connection_file: str, tables: int, rows: int, engine_sql: str = ""
) -> Sysbench:
    """sysbench bound to one server (its 0600 connection file) and the dataset's shape."""
    chosen = DRIVERS.get(family)
    if chosen is None:
        raise MallocbenchError(
            f"no sysbench driver for the server family {family!r}: add one to workloads/drivers.py"
        )
    return chosen(connection_file, tables, rows, engine_sql)


__all__ = ["DRIVERS", "driver"]
