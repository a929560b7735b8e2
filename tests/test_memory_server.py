"""`mallocbench memory` against real private MariaDB servers with known settings.

One glibc server carries a 256 MiB buffer pool filled with data, a 64 MiB RocksDB block
cache filled by a scan, performance_schema on, and four connections each holding a
sort of ~31 MiB (sort_buffer_size=32M) open while measuring: an unbuffered result that
the client stops reading keeps the server's sort buffer allocated and touched.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pymysql
import pytest
from click.testing import CliRunner

from mallocbench import allocators
from mallocbench.cli import main
from mallocbench.memory import take as take_mod
from mallocbench.memory.client import ConnectOptions
from mallocbench.report.memory_advice import jemalloc_arenas_text, shown_advice
from mallocbench.servers import access, engines, mariadb

pytestmark = pytest.mark.server

MiB = 2**20
POOL = 256 * MiB
BLOCK_CACHE = 64 * MiB
SORT_BUFFER = 32 * MiB
SORTERS = 4
# seq rows with an MD5 key take ~81 bytes in the sort buffer: 390k rows fill ~31 MiB of
# it without spilling to disk (a spill would free the buffer before rows are sent).
SORT_ROWS = 390_000


def _config(allocator: str, pool: int, extra: dict[str, str]) -> mariadb.ServerConfig:
    return mariadb.ServerConfig(
        engine=engines.get("innodb"),
        cache_bytes=pool,
        allocator=allocators.get(allocator),
        overrides={"sort_buffer_size": str(SORT_BUFFER), **extra},
        max_connections=100,
    )


def _first_in_md5_order(rows: int) -> int:
    return min(range(1, rows + 1), key=lambda i: hashlib.md5(str(i).encode()).hexdigest())


class HeldSorts:
    """Connections that each sorted SORT_ROWS rows and sleep on the first row they send.

    The SLEEP is evaluated as rows are sent, after the sort, so the sort buffer stays
    allocated and touched until KILL QUERY ends the statement (a clean error for the
    client, with no rows to drain).
    """

    first = 0

    def __init__(self, server: mariadb.PrivateServer, n: int) -> None:
        if not HeldSorts.first:
            HeldSorts.first = _first_in_md5_order(SORT_ROWS)
        self.server = server
        self.conns: list[pymysql.Connection] = [server.connect() for _ in range(n)]
        self.threads = [
            threading.Thread(target=self._run, args=(c,), daemon=True) for c in self.conns
        ]
        for t in self.threads:
            t.start()
        ids = ",".join(str(c.thread_id()) for c in self.conns)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            rows = server.query(
                f"SELECT COUNT(*) FROM information_schema.PROCESSLIST "
                f"WHERE ID IN ({ids}) AND STATE = 'User sleep'"
            )
            if rows[0][0] == n:
                return
            time.sleep(0.1)
        raise AssertionError("the sorts did not reach their first row in time")

    def _run(self, conn: pymysql.Connection) -> None:
        with conn.cursor() as cur, contextlib.suppress(pymysql.err.MySQLError):
            cur.execute(
                f"SELECT seq, IF(seq = {HeldSorts.first}, SLEEP(600), 0) "
                f"FROM t.seq_1_to_{SORT_ROWS} ORDER BY MD5(seq)"
            )

    def close(self) -> None:
        for conn in self.conns:
            with contextlib.suppress(pymysql.err.MySQLError):
                self.server.query(f"KILL QUERY {conn.thread_id()}")
        for t in self.threads:
            t.join(timeout=60)
        for conn in self.conns:
            conn.close()


@pytest.fixture(scope="module")
def glibc_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[mariadb.PrivateServer]:
    build = mariadb.find_build()
    config = _config(
        "glibc",
        POOL,
        {
            "plugin-load-add": "ha_rocksdb.so",
            "rocksdb_block_cache_size": str(BLOCK_CACHE),
            "performance_schema": "ON",
        },
    )
    with mariadb.running(build, tmp_path_factory.mktemp("glibc"), config) as server:
        server.query("CREATE DATABASE t")
        # ~260 MB of rows: more than the pool, so every page of it gets used.
        server.query("CREATE TABLE t.i (id INT PRIMARY KEY, pad VARCHAR(1000)) ENGINE=InnoDB")
        server.query("INSERT INTO t.i SELECT seq, REPEAT('x', 1000) FROM t.seq_1_to_260000")
        # ~96 MB in RocksDB, flushed to SST files and scanned: fills the block cache.
        server.query("CREATE TABLE t.r (id INT PRIMARY KEY, pad VARCHAR(1000)) ENGINE=ROCKSDB")
        with server.connect() as conn, conn.cursor() as cur:
            cur.execute("SET SESSION rocksdb_bulk_load=1")
            cur.execute("INSERT INTO t.r SELECT seq, REPEAT(MD5(seq), 30) FROM t.seq_1_to_100000")
            cur.execute("SET SESSION rocksdb_bulk_load=0")
        server.query("SET GLOBAL rocksdb_force_flush_memtable_now=1")
        server.query("SELECT COUNT(*), SUM(LENGTH(pad)) FROM t.r")
        yield server


@pytest.fixture(scope="module")
def held(glibc_server: mariadb.PrivateServer) -> Iterator[HeldSorts]:
    sorts = HeldSorts(glibc_server, SORTERS)
    yield sorts
    sorts.close()


def _opts(server: mariadb.PrivateServer) -> ConnectOptions:
    return ConnectOptions(socket=str(server.socket), user="root", password=server.password)


def _cli(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_components_match_what_was_set_and_sum_to_rss(
    glibc_server: mariadb.PrivateServer, held: HeldSorts
) -> None:
    report = take_mod.take(_opts(glibc_server))
    assert report.process is not None and report.process.pid == glibc_server.pid
    bd = report.breakdown
    assert bd is not None
    rows = {r.key: r.bytes for r in bd.rows}
    # Exactly RSS: every resident page is in one row, the rest is the signed remainder.
    assert bd.total() == bd.rss == report.process.rss
    assert rows["buffer_pool"] == pytest.approx(POOL, rel=0.10)
    assert rows["rocksdb_block_cache"] == pytest.approx(BLOCK_CACHE, rel=0.10)
    assert rows["connections"] == pytest.approx(SORTERS * SORT_BUFFER, rel=0.10)
    # performance_schema reports its own total; the row must carry it unchanged.
    assert report.server is not None and report.server.pfs_total
    assert rows["performance_schema"] == report.server.pfs_total
    assert len(report.server.pfs_top) > 0
    # Stacks: a mapping per thread but the main one, resident only as touched; stacks
    # created back to back can share one merged mapping, so only a floor is exact.
    assert report.process.by_kind()["stack"]["count"] >= report.process.threads // 2
    assert rows["stacks"] < 16 * MiB
    # The fragmentation ratio is RSS over what is accounted for.
    assert bd.ratio == pytest.approx(bd.rss / (bd.rss - bd.unaccounted))
    fp = report.footprint
    assert fp is not None and fp.max_connections == 100
    assert fp.per_connection["sort_buffer_size"] == SORT_BUFFER
    assert fp.worst_case == fp.global_total + 100 * fp.per_connection_total
    assert fp.connections_now >= SORTERS + 1


def test_sorts_caused_rss_they_are_accounted_for(glibc_server: mariadb.PrivateServer) -> None:
    """Two more sorts: the connections row grows by their buffers, RSS by at least that."""
    before = take_mod.take(_opts(glibc_server))
    sorts = HeldSorts(glibc_server, 2)
    try:
        during = take_mod.take(_opts(glibc_server))
    finally:
        sorts.close()
    assert before.breakdown is not None and during.breakdown is not None
    grown = during.process.rss - before.process.rss  # type: ignore[union-attr]
    conns = {r.key: r.bytes for r in during.breakdown.rows}["connections"]
    conns0 = {r.key: r.bytes for r in before.breakdown.rows}["connections"]
    assert conns - conns0 == pytest.approx(2 * SORT_BUFFER, rel=0.10)
    # The buffers became resident: RSS grew by at least that (plus allocator overhead,
    # which lands in the unaccounted row, not in the connections row).
    assert grown >= 0.9 * (conns - conns0)
    assert during.breakdown.total() == during.breakdown.rss


def test_glibc_allocator_and_arenas(glibc_server: mariadb.PrivateServer, held: HeldSorts) -> None:
    report = take_mod.take(_opts(glibc_server), pid=glibc_server.pid)
    assert report.allocator and report.allocator.name == "glibc"
    assert report.process is not None
    assert report.process.arenas is not None and report.process.arenas >= 2
    assert report.process.glibc_heaps() >= report.process.arenas - 1
    assert report.process.knobs == {}
    titles = [a.title for a in shown_advice(report)]
    assert "MyRocks runs on glibc malloc" in titles


def test_cli_text_and_json(glibc_server: mariadb.PrivateServer, held: HeldSorts) -> None:
    code, out, err = _cli("memory", "--defaults-file", str(glibc_server.client_cnf))
    assert code == 0, err
    assert "where RSS goes" in out and "unaccounted" in out and "advice" in out
    code, out, err = _cli("memory", "--defaults-file", str(glibc_server.client_cnf), "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["breakdown"]["sum_of_rows"] == data["breakdown"]["rss"]
    assert data["allocator"]["name"] == "glibc"
    assert data["process"]["threads"] > 0
    assert data["configured_footprint"]["worst_case"] > 0
    assert data["accounted_by_server"]["performance_schema"]["top"]


def test_watch_writes_csv_and_chart(glibc_server: mariadb.PrivateServer, tmp_path: Path) -> None:
    out = tmp_path / "w"
    code, stdout, err = _cli(
        "memory",
        "--defaults-file",
        str(glibc_server.client_cnf),
        "--watch",
        "0.2",
        "--count",
        "3",
        "--out",
        str(out),
        "--json",
    )
    assert code == 0, err
    lines = [json.loads(line) for line in stdout.splitlines()]
    assert len(lines) == 3 and all(row["rss"] > POOL / 2 for row in lines)
    csv_lines = (out / "memory.csv").read_text().splitlines()
    assert len(csv_lines) == 4 and csv_lines[0].startswith("time,")
    assert '"type":"scatter"' in (out / "memory.html").read_text()


def test_wrong_password_is_one_line(glibc_server: mariadb.PrivateServer, tmp_path: Path) -> None:
    glibc_server.query("CREATE USER IF NOT EXISTS 'mbmon'@'localhost' IDENTIFIED BY 'right-pw'")
    glibc_server.query("GRANT PROCESS, SELECT ON *.* TO 'mbmon'@'localhost'")
    cnf = tmp_path / "wrong.cnf"
    cnf.write_text("[client]\nuser=mbmon\npassword=wrong-pw\n")
    code, out, err = _cli(
        "memory", "--socket", str(glibc_server.socket), "--defaults-file", str(cnf)
    )
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("mallocbench: error: access denied")
    assert "wrong-pw" not in err and "right-pw" not in err
    cnf.write_text("[client]\nuser=mbmon\npassword=right-pw\n")
    code, out, err = _cli(
        "memory", "--socket", str(glibc_server.socket), "--defaults-file", str(cnf), "--json"
    )
    assert code == 0, err
    assert json.loads(out)["breakdown"]["sum_of_rows"] > 0


def test_unreachable_server_is_one_line(tmp_path: Path) -> None:
    code, _, err = _cli("memory", "--socket", str(tmp_path / "none.sock"))
    assert code == 2 and err.count("\n") == 1
    assert "cannot reach the server" in err
    port = access.free_port()
    code, _, err = _cli("memory", "--host", "127.0.0.1", "--port", str(port))
    assert code == 2 and err.count("\n") == 1
    assert "cannot reach the server" in err and "refused" in err


def test_pid_that_is_not_a_server_is_one_line(glibc_server: mariadb.PrivateServer) -> None:
    code, _, err = _cli(
        "memory", "--defaults-file", str(glibc_server.client_cnf), "--pid", str(os.getpid())
    )
    assert code == 2 and err.count("\n") == 1
    assert "is not a MariaDB/MySQL server" in err
    code, _, err = _cli(
        "memory", "--defaults-file", str(glibc_server.client_cnf), "--pid", "999999999"
    )
    assert code == 2 and "does not exist" in err


def test_jemalloc_server(tmp_path: Path) -> None:
    if not allocators.get("jemalloc", require_available=False).available:
        pytest.skip("jemalloc not installed")
    build = mariadb.find_build()
    with mariadb.running(build, tmp_path, _config("jemalloc", 64 * MiB, {})) as server:
        server.query("CREATE DATABASE t")
        sorts = HeldSorts(server, 2)
        try:
            report = take_mod.take(_opts(server))
        finally:
            sorts.close()
    assert report.allocator and report.allocator.name == "jemalloc"
    arenas = report.allocator.jemalloc_arenas
    assert arenas is not None and "4 per CPU" in jemalloc_arenas_text(arenas)
    assert report.process is not None and report.process.arenas is None
    assert report.process.glibc_heaps() == 0
    assert report.process.knobs and "libjemalloc" in report.process.knobs["LD_PRELOAD"]
    bd = report.breakdown
    assert bd is not None and bd.total() == bd.rss
    rows = {r.key: r.bytes for r in bd.rows}
    assert rows["connections"] == pytest.approx(2 * SORT_BUFFER, rel=0.10)


@pytest.mark.parametrize("stop_with", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "kill"])
def test_watch_stops_cleanly_on_ctrl_c_or_kill(
    glibc_server: mariadb.PrivateServer, tmp_path: Path, stop_with: signal.Signals
) -> None:
    """Either signal ends the watch with its CSV and chart, even when the watcher was
    started as a script's background job, which inherits SIGINT ignored."""
    out = tmp_path / "w"
    cmd = [
        sys.executable,
        "-m",
        "mallocbench.cli",
        "memory",
        "--defaults-file",
        str(glibc_server.client_cnf),
        "--watch",
        "0.2",
        "--out",
        str(out),
    ]
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1] / "src")},
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if (out / "memory.csv").exists() and len((out / "memory.csv").read_text().splitlines()) > 2:
            break
        time.sleep(0.1)
    proc.send_signal(stop_with)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0, stderr
    assert "Traceback" not in stderr
    rows = (out / "memory.csv").read_text().splitlines()
    assert len(rows) >= 3
    assert f"{len(rows) - 1} samples" in stdout
    assert (out / "memory.html").read_text().count('"mode":"lines"') >= 3


def test_server_without_its_process(
    glibc_server: mariadb.PrivateServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A remote server: the account still gives settings and server numbers, and says why
    there is no breakdown."""
    from mallocbench.memory import pid as pid_mod

    monkeypatch.setattr(pid_mod, "find_pid", lambda srv, opts: (None, "runs elsewhere"))
    code, out, err = _cli("memory", "--defaults-file", str(glibc_server.client_cnf))
    assert code == 0, err
    assert "process not inspected: runs elsewhere" in out
    assert "configured footprint" in out
    code, out, err = _cli("memory", "--defaults-file", str(glibc_server.client_cnf), "--json")
    data = json.loads(out)
    assert "breakdown" not in data and data["configured_footprint"]["worst_case"] > 0
