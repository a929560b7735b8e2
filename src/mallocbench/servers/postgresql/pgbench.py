"""pgbench's built-in scripts as steps: their command lines and their report lines.

pgbench ships with the server (its bin directory), so the command is the family's; the
binding to the harness's RunOutput is workloads/pgsql.Pgbench. Its tables (pgbench_*)
are loaded into the golden data directory beside sysbench's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from mallocbench.errors import MallocbenchError, did_you_mean
from mallocbench.servers.postgresql.build import PgBuild

# Statements per transaction of each built-in script (BEGIN and END count, as sysbench
# counts its transactions' BEGIN and COMMIT as queries).
SCRIPTS = {"tpcb-like": 7, "simple-update": 5, "select-only": 1}
# Rows of pgbench_accounts per unit of scale.
ROWS_PER_SCALE = 100_000
_PROGRESS = re.compile(
    r"^progress: ([\d.]+) s, ([\d.]+) tps, lat ([\d.]+) ms stddev [\d.]+(?:, (\d+) failed)?"
)
_SUMMARY = {
    "transactions": re.compile(r"^number of transactions actually processed: (\d+)", re.M),
    "failed": re.compile(r"^number of failed transactions: (\d+)", re.M),
    "latency_ms": re.compile(r"^latency average = ([\d.]+) ms", re.M),
    "tps": re.compile(r"^tps = ([\d.]+)", re.M),
    "duration_s": re.compile(r"^duration: (\d+) s", re.M),
}


@dataclass(frozen=True)
class Progress:
    """One `-P 1` line: the second it ends at, and that second's rate and latency."""

    at_s: float
    tps: float
    latency_ms: float
    failed: int


def script(name: str) -> str:
    if name not in SCRIPTS:
        raise MallocbenchError(
            f"unknown pgbench script {name!r}{did_you_mean(name, SCRIPTS)}: use one of "
            f"{', '.join(SCRIPTS)}"
        )
    return name


def scale_for(tables: int, rows: int) -> int:
    """pgbench's scale for a dataset shape: about as many account rows as sysbench's."""
    return max(1, round(tables * rows / ROWS_PER_SCALE))


def init_command(build: PgBuild, scale: int) -> list[str]:
    return [build.binary("pgbench"), "--initialize", f"--scale={scale}", "--quiet"]


def run_command(build: PgBuild, name: str, clients: int, seconds: float) -> list[str]:
    return [
        build.binary("pgbench"),
        f"--builtin={script(name)}",
        f"--client={clients}",
        f"--jobs={clients}",
        f"--time={max(1, round(seconds))}",
        "--progress=1",
        "--no-vacuum",  # the golden directory is vacuumed; each run must not redo it
    ]


def client_environment(client_env: Path) -> dict[str, str]:
    """PGHOST, PGPASSWORD and the rest from the server's 0600 client file: libpq reads
    them from the environment, so the password never reaches a command line."""
    env = {}
    for line in client_env.read_text().splitlines():
        name, sep, value = line.partition("=")
        if sep:
            env[name] = value
    return env


def progress(line: str) -> Progress | None:
    match = _PROGRESS.match(line)
    if match is None:
        return None
    return Progress(
        float(match.group(1)),
        float(match.group(2)),
        float(match.group(3)),
        int(match.group(4) or 0),
    )


def summary(text: str) -> dict[str, float]:
    found = {}
    for key, pattern in _SUMMARY.items():
        match = pattern.search(text)
        if match:
            found[key] = float(match.group(1))
    return found


__all__ = [
    "SCRIPTS",
    "Progress",
    "client_environment",
    "init_command",
    "progress",
    "run_command",
    "scale_for",
    "summary",
]
