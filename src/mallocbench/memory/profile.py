"""`mallocbench profile`: a private server under heaptrack or valgrind massif, one step, sites.

Both tools replace or wrap malloc, so they only see malloc-family calls: the InnoDB
buffer pool and other mmap'd areas are not in their numbers (the `memory` command's
breakdown covers those).
"""

from __future__ import annotations

import contextlib
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


@dataclass
class Step:
    """What runs against the profiled server. `setup` once, then `statements` per round."""

    name: str
    setup: list[str]
    statements: list[str]


def builtin_steps(rows: int) -> dict[str, Step]:
    table = "mallocbench_profile.t"
    create = [
        "CREATE DATABASE IF NOT EXISTS mallocbench_profile",
        f"CREATE TABLE IF NOT EXISTS {table} (id INT PRIMARY KEY, k INT, pad VARCHAR(200))",
        f"INSERT IGNORE INTO {table} SELECT seq, seq % 1000, REPEAT(MD5(seq), 4) "
        f"FROM mallocbench_profile.seq_1_to_{rows}",
    ]
    return {
        "sorts": Step(
            "sorts",
            create,
            [
                f"SELECT id, pad FROM {table} ORDER BY MD5(pad) LIMIT 10",
                f"SELECT k, COUNT(*), MAX(pad) FROM {table} GROUP BY k ORDER BY 2 DESC LIMIT 5",
            ],
        ),
        "point-select": Step(
            "point-select",
            create,
            [f"SELECT pad FROM {table} WHERE id = {i * 7919 % rows + 1}" for i in range(50)],
        ),
        "insert": Step(
            "insert",
            create[:2],
            [
                f"REPLACE INTO {table} SELECT seq, seq % 7, REPEAT('y', 150) "
                f"FROM mallocbench_profile.seq_1_to_{max(1, rows // 10)}"
            ],
        ),
    }


def sql_step(sql: str) -> Step:
    return Step("sql", [], [s.strip() for s in sql.split(";") if s.strip()])


def run_step(
    connect: Callable[[], pymysql.Connection], step: Step, repeat: int, connections: int
) -> None:
    errors: list[str] = []
    with connect() as conn, conn.cursor() as cur:
        for statement in step.setup:
            cur.execute(statement)

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
        raise MallocbenchError(f"the profiled step failed: {errors[0]}")


# --- the profiled server ----------------------------------------------------------------


class ProfiledServer(mariadb.PrivateServer):
    """A private server whose command runs under the profiler."""

    def __init__(self, *args: object, tool: str, output: Path, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.tool = tool
        self.output = output

    def command(self) -> list[str]:
        if self.tool == "massif":
            prefix = [
                "valgrind",
                "--tool=massif",
                f"--massif-out-file={self.output}",
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
    step: Step,
    repeat: int,
    connections: int,
    engine: str = "innodb",
    cache_bytes: int = 64 * 1024 * 1024,
    overrides: Mapping[str, str] | None = None,
    basedir: str | None = None,
    log: Callable[[str], None] = lambda _: None,
) -> Profile:
    tool = pick_tool(tool)
    build = mariadb.find_build(basedir)
    settings: dict[str, object] = {}
    if tool == "massif":
        # valgrind supports neither io_uring/libaio nor an 8 TiB address reservation.
        settings["innodb_use_native_aio"] = "0"
        if _has_variable(build, "innodb_buffer_pool_size_max"):
            settings["innodb_buffer_pool_size_max"] = str(
                max(cache_bytes, 32 * 1024 * 1024) if engine == "innodb" else 32 * 1024 * 1024
            )
    settings.update(overrides or {})
    config = mariadb.ServerConfig(
        engine=engines.get(engine),
        cache_bytes=cache_bytes,
        allocator=allocators.get("glibc"),
        overrides=settings,
        max_connections=max(100, connections + 10),
    )
    out.mkdir(parents=True, exist_ok=True)
    output = out / ("massif.out" if tool == "massif" else "heaptrack")
    server = ProfiledServer(build, out / "server", config, tool=tool, output=output)
    log(f"initialising a private {build.label} datadir in {out / 'server'}")
    server.initialize_datadir()
    try:
        log(f"starting it under {tool} (slow: {'~20x' if tool == 'massif' else '~2x'})")
        started = time.monotonic()
        server.start(timeout=600)
        log(
            f"ready after {time.monotonic() - started:.1f}s; running step {step.name!r} "
            f"x{repeat} on {connections} connection(s)"
        )
        run_step(server.connect, step, repeat, connections)
        log("stopping the server so the profiler writes its data")
        server.shutdown()
    finally:
        server.stop()
    if tool == "massif":
        if not output.exists():
            raise MallocbenchError(
                f"massif wrote no {output}: see {server.error_log} and {server.stdout_log}"
            )
        return parse_massif(output)
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
            "--print-histogram",
            "0",
            "--print-flamegraph",
            "0",
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
