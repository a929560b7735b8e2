"""sysbench on a private PostgreSQL server, read back like the packaged MariaDB steps.

Which script and options a step runs is the PostgreSQL family's (servers/postgresql/
workload.py); this is only the binding to the one reader of sysbench's report lines.
"""

from __future__ import annotations

from dataclasses import dataclass

from mallocbench.errors import MallocbenchError
from mallocbench.servers.postgresql import workload as forms
from mallocbench.workloads.catalogue import Step
from mallocbench.workloads.sysbench import Explained, Sysbench


@dataclass
class PgSysbench(Sysbench):
    """`connection_file` holds --pgsql-host/-port/-user/-password/-db (a 0600 file of
    the server's): the password never reaches a command line. Turns
    (run.measure.measure_turns) need the packaged scripts' worker loop, so PostgreSQL
    steps are measured in slices."""

    engine_sql: str = ""

    def _command(self, step: Step | None, script: str, threads: int) -> list[str]:
        return [
            *forms.command(self.connection_file, self.tables, self.table_size, threads, step),
            f"--rand-seed={self.rand_seed}",
        ]

    def _env(self) -> dict[str, str]:
        env = super()._env()
        env["LUA_PATH"] = forms.lua_path()
        return env

    def explain(self, step: Step, timeout: float = 120) -> list[Explained]:
        raise MallocbenchError(f"explaining {step.label} is not done for PostgreSQL yet")


__all__ = ["PgSysbench"]
