"""The private PostgreSQL server (servers/postgresql/): reachable by its run alone, its
settings checked before anything is made, the allocator in its backends, sysbench's
pgsql forms running on it, and nothing of it left once it stops.

Every test starts and stops its own real server on a copy of one small golden data
directory (loaded once per test session, like MariaDB's).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from mallocbench import allocators
from mallocbench.deploy.inforce import read_environ
from mallocbench.errors import MallocbenchError
from mallocbench.model.results import SetupInfo
from mallocbench.run.dataset import Dataset
from mallocbench.servers.family import Launch
from mallocbench.servers.orphans import stop_orphans
from mallocbench.servers.postgresql import settings, workload
from mallocbench.servers.postgresql.build import PgBuild, find_build
from mallocbench.servers.postgresql.dataset import dataset_key, golden_datadir
from mallocbench.servers.postgresql.family import FAMILY
from mallocbench.servers.postgresql.memory import server_pids
from mallocbench.servers.postgresql.server import (
    ROLE,
    PgConfig,
    PgServer,
    running,
    server_user,
)
from mallocbench.servers.runtime import RuntimeDir
from mallocbench.workloads.catalogue import parse_steps
from mallocbench.workloads.pgsql import Pgbench, PgSysbench, pgbench_step
from mallocbench.workloads.sysbench import Interval
from test_private_server_access import as_nobody

SHAPE = Dataset(tables=2, rows=2000, cache_bytes=32 << 20)
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="switching users needs root")


@pytest.fixture(scope="session")
def pg_build() -> PgBuild:
    return find_build()


@pytest.fixture(scope="session")
def golden(pg_build: PgBuild, dataset_cache: Path) -> Path:
    return golden_datadir(pg_build, SHAPE, dataset_cache)


def _config(allocator: str = "glibc", **kw: object) -> PgConfig:
    config = PgConfig(cache_bytes=SHAPE.cache_bytes, allocator=allocators.get(allocator))
    for key, value in kw.items():
        setattr(config, key, value)
    return config


def _server(build: PgBuild, rundir: Path, allocator: str = "glibc", **kw: object) -> PgServer:
    return PgServer(build, rundir, _config(allocator, **kw))


@pytest.fixture
def started(pg_build: PgBuild, golden: Path, tmp_path: Path) -> Iterator[PgServer]:
    with running(pg_build, tmp_path / "s", _config(), golden) as server:
        yield server


def listening_inet_sockets(pid: int) -> list[str]:
    """The TCP sockets a process listens on (state 0A in /proc/net/tcp{,6})."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        target = os.readlink(fd)
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    found = []
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:
                found.append(fields[1])
    return found


@needs_root
def test_another_user_cannot_connect_by_socket_or_tcp(started: PgServer, pg_build: PgBuild) -> None:
    psql = pg_build.binary("psql")

    def as_nobody_to(host: str) -> subprocess.CompletedProcess[str]:
        # nobody is even given the password: what stops it is the socket and the listener.
        login = f"host={host} port={started.port} user={ROLE} dbname=sbtest"
        return as_nobody(psql, f"{login} password={started.password}", "-w", "-c", "SELECT 1")

    by_socket = as_nobody_to(str(started.socket_dir))
    assert by_socket.returncode != 0
    assert "Permission denied" in by_socket.stderr, by_socket.stderr
    by_tcp = as_nobody_to("127.0.0.1")
    assert by_tcp.returncode != 0
    assert "refused" in by_tcp.stderr, by_tcp.stderr
    assert listening_inet_sockets(started.pid) == []
    # Past the socket's directory (root is), only the run's role with its password gets in.
    for user, password in (("postgres", started.password), (ROLE, "not-the-password")):
        with pytest.raises(psycopg.OperationalError):
            psycopg.connect(
                host=str(started.socket_dir),
                port=started.port,
                user=user,
                password=password,
                dbname="sbtest",
                connect_timeout=5,
            ).close()
    assert started.query("SELECT current_user") == [(ROLE,)]
    # The credentials are in 0600 files, never on a command line.
    for path in (started.sysbench_options, started.client_env):
        assert path.stat().st_mode & 0o077 == 0
    assert started.password not in " ".join(started.command())


def test_a_setting_cannot_write_a_line_of_its_own_into_postgresql_conf() -> None:
    """Names and values go into postgresql.conf one setting a line: an extension's name
    that is no identifier, or a line break in a value, is refused before anything runs."""
    for name, value in (
        ("pg_x.y = 1\nlisten_addresses", "*"),
        ("pg_x.y", "1'\nlisten_addresses = '*"),
        ("application_name", "a\rb"),
    ):
        with pytest.raises(MallocbenchError) as refused:
            settings.check_setting(name, value, {})
        assert "\n" not in str(refused.value)
    settings.check_setting("pg_x.y_2", "one line", {})


def test_an_unknown_setting_is_refused_before_initdb(pg_build: PgBuild, tmp_path: Path) -> None:
    with pytest.raises(MallocbenchError) as refused:
        FAMILY.check_settings(pg_build, {"shared_bufers": "64MB"}, [])
    assert str(refused.value).count("\n") == 0
    assert "unknown PostgreSQL setting 'shared_bufers' (did you mean 'shared_buffers'?)" in str(
        refused.value
    )
    with pytest.raises(MallocbenchError, match="work_mem = 'lots' is not a integer"):
        FAMILY.check_settings(pg_build, {"work_mem": "lots"}, [])
    with pytest.raises(MallocbenchError, match="'listen_addresses' is set by mallocbench"):
        FAMILY.check_settings(pg_build, {"listen_addresses": "*"}, [])
    FAMILY.check_settings(pg_build, {"work_mem": "64MB", "jit": False, "pg_x.y": "1"}, [])
    server = _server(pg_build, tmp_path / "s", overrides={"wrok_mem": "8MB"})
    with pytest.raises(MallocbenchError, match="did you mean 'work_mem'"):
        server.initialize_datadir()
    assert not server.datadir.exists() and not server.statedir.exists()


def test_a_step_without_a_postgresql_form_is_refused_by_name() -> None:
    with pytest.raises(MallocbenchError) as refused:
        FAMILY.check_steps(["read-only", "hot-points"])
    assert str(refused.value).startswith("step 'hot-points' has no PostgreSQL form yet:")
    assert "\n" not in str(refused.value)
    steps = parse_steps(["read-only-sum", "read-write range=100", "insert"])
    workload.check_steps(steps)
    args = workload.step_args(steps[0])
    assert "--sum-ranges=1" in args and "--point-selects=0" in args and "--range-size=1000" in args


def test_jemalloc_and_its_knobs_reach_every_backend(
    pg_build: PgBuild, golden: Path, tmp_path: Path
) -> None:
    knobs = {"MALLOC_CONF": "narenas:2"}
    server = _server(pg_build, tmp_path / "s", "jemalloc", knobs=knobs)
    server.copy_datadir_from(golden)
    with server:
        server.start()
        assert server.allocator_path is not None and "jemalloc" in server.allocator_path
        with server.connect() as conn:
            row = conn.execute("SELECT pg_backend_pid()").fetchone()
            assert row is not None
            backend = int(row[0])
            assert backend != server.pid
            assert allocators.detect(backend).name == "jemalloc"
            # A backend writes its process title over its copy of the environment; it
            # was forked from the postmaster, whose copy is intact.
            assert "MALLOC_CONF" not in read_environ(backend)
        assert read_environ(server.pid)["MALLOC_CONF"] == "narenas:2"
    # The same data directory under glibc: no other allocator in a backend.
    plain = _server(pg_build, tmp_path / "g")
    plain.copy_datadir_from(golden)
    with plain:
        plain.start()
        with plain.connect() as conn:
            row = conn.execute("SELECT pg_backend_pid()").fetchone()
            assert row is not None and allocators.detect(int(row[0])).name == "glibc"


def test_sysbench_oltp_read_only_runs_five_seconds(started: PgServer) -> None:
    driver = PgSysbench(str(started.sysbench_options), SHAPE.tables, SHAPE.rows)
    [step] = parse_steps(["read-only range=10"])
    out = driver.run(step, 2, 5)
    assert out.ok, out.output_tail
    assert out.errors == 0 and out.threads == 2
    assert len(out.intervals) >= 4 and all(i.queries > 0 for i in out.intervals[:4])
    assert 4.5 < out.seconds < 7 and out.qps > 0 and out.p95_ms is not None


def test_cache_warming_reads_every_relation(started: PgServer) -> None:
    said = FAMILY.warm_cache(started, SHAPE)
    # sysbench's two tables with their primary keys and k indexes; pgbench's four tables
    # and the primary keys of three (its history has none).
    assert said.startswith("read 13 tables and indexes"), said
    started.query("CREATE EXTENSION pg_buffercache")
    [(cached,)] = started.query(
        "SELECT count(*) FROM pg_buffercache b JOIN pg_class c"
        " ON b.relfilenode = pg_relation_filenode(c.oid) WHERE c.relname = 'k_2'"
    )
    [(pages,)] = started.query("SELECT pg_relation_size('k_2') / 8192")
    assert cached == pages  # an index no query has read yet is wholly in shared_buffers


def test_the_server_is_gone_after_its_stop(pg_build: PgBuild, golden: Path, tmp_path: Path) -> None:
    server = _server(pg_build, tmp_path / "s")
    server.copy_datadir_from(golden)
    server.start()
    with server.connect():
        pids = server_pids(server.pid)
        assert len(pids) >= 5  # postmaster, auxiliary processes and our backend
        exit_info = server.stop()
    assert exit_info is not None and exit_info.status == "ok"
    assert all(not Path(f"/proc/{pid}").exists() for pid in pids)
    server.discard_state()
    assert not server.statedir.exists() and not server.record.exists()


def _harness(golden: Path, rundir: Path) -> tuple[subprocess.Popen[str], list[int]]:
    """A child harness holding a started server with a client connected; its server's
    processes."""
    script = textwrap.dedent(
        f"""
        import time
        from pathlib import Path
        from mallocbench import allocators
        from mallocbench.servers.postgresql.build import find_build
        from mallocbench.servers.postgresql.server import PgConfig, PgServer
        config = PgConfig(cache_bytes=32 << 20, allocator=allocators.get("glibc"))
        server = PgServer(find_build(), Path({str(rundir)!r}), config)
        server.copy_datadir_from(Path({str(golden)!r}))
        with server:
            server.start()
            client = server.connect()
            print(server.pid, flush=True)
            time.sleep(120)
        """
    )
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    return child, server_pids(int(child.stdout.readline()))


def _gone(pids: list[int], within: float = 10) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline and any(Path(f"/proc/{p}").exists() for p in pids):
        time.sleep(0.1)
    return not any(Path(f"/proc/{p}").exists() for p in pids)


def test_an_interrupted_harness_leaves_no_server(golden: Path, tmp_path: Path) -> None:
    """Ctrl-C unwinds the harness's `with`; SIGTERM stops every tracked server on the way
    out (servers.process), in PostgreSQL's fast mode: a smart shutdown would wait 30 s
    for the connected client, then kill."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        child, pids = _harness(golden, tmp_path / sig.name)
        child.send_signal(sig)
        child.wait(20)
        assert _gone(pids), sig


@needs_root
def test_a_killed_harness_leaves_a_server_the_next_run_stops(golden: Path, tmp_path: Path) -> None:
    """SIGKILL gives the harness no chance: its runtime directory's lock dies with it,
    and the next runtime directory made sweeps the server away (servers/runtime.py)."""
    child, pids = _harness(golden, tmp_path / "killed")
    child.kill()
    child.wait(10)
    assert all(Path(f"/proc/{p}").exists() for p in pids[:1])  # the postmaster lives on
    user = server_user()
    assert user is not None
    RuntimeDir.create("sweeper", user.uid, user.gid).remove()
    assert _gone(pids)


def test_a_postmaster_left_by_a_killed_harness_is_stopped_fast_by_the_next_sweep(
    golden: Path, tmp_path: Path
) -> None:
    """The record a killed harness leaves names the family: the sweep sends a postmaster
    SIGINT (fast shutdown), not SIGTERM, whose smart shutdown would wait out the timeout
    for the session still connected."""
    rundir = tmp_path / "servers" / "s1"
    child, pids = _harness(golden, rundir)
    child.kill()
    child.wait(10)
    assert Path(f"/proc/{pids[0]}").exists()  # the postmaster lives on
    env = dict(line.split("=", 1) for line in (rundir / "client.env").read_text().splitlines())
    # A client still connected, as a dead harness's load would leave one.
    client = psycopg.connect(
        host=env["PGHOST"],
        port=env["PGPORT"],
        user=env["PGUSER"],
        password=env["PGPASSWORD"],
        dbname=env["PGDATABASE"],
        autocommit=True,
    )
    try:
        client.execute("SELECT 1")
        started = time.monotonic()
        stopped = stop_orphans(tmp_path / "servers")
        took = time.monotonic() - started
    finally:
        client.close()  # the server ended its session; closing says nothing
    assert [o.pid for o in stopped] == [pids[0]] and stopped[0].family == "postgresql"
    assert took < 30, f"{took:.1f}s: waited on the client (smart shutdown)"
    assert "received fast shutdown request" in (rundir / "server.out").read_text()
    assert _gone(pids) and not (rundir / "server.json").exists()


def test_the_family_refuses_what_it_cannot_do(pg_build: PgBuild, tmp_path: Path) -> None:
    launch = Launch(allocators.get("glibc"), 32 << 20, port=15432)
    with pytest.raises(MallocbenchError, match="cannot take server.port"):
        FAMILY.new_server(pg_build, tmp_path, launch, None)
    with pytest.raises(MallocbenchError, match="no storage engine 'innodb'"):
        FAMILY.check_settings(pg_build, {}, ["innodb"])
    assert settings.quoted("it's") == "'it''s'"


def test_deploy_forms_name_the_postgresql_unit_and_read_the_postmaster() -> None:
    setup = SetupInfo(
        name="je",
        allocator="jemalloc",
        allocator_library=allocators.get("jemalloc").path,
        knobs={"MALLOC_CONF": "narenas:2"},
        server_version="15.18",
    )
    d = FAMILY.deployment(setup)
    assert d.service == "postgresql@15-main"
    assert set(d.snippets) == {"systemd", "env", "compose", "kubernetes"}
    dropin = d.snippets["systemd"]
    assert dropin.path == "/etc/systemd/system/postgresql@15-main.service.d/mallocbench-je.conf"
    assert "Environment=MALLOC_CONF=narenas:2" in dropin.text
    # The settings are read where they are intact (the postmaster), the mapping in a child.
    assert d.verify[-1].startswith('mallocbench check --pid "$PID"')
    assert '/proc/"$CHILD"/maps' in d.verify[-2]


def test_pgbench_builtin_scripts_run_as_steps(started: PgServer, pg_build: PgBuild) -> None:
    FAMILY.check_steps(["tpcb-like", "select-only", "simple-update", "read-only"])
    driver = Pgbench(pg_build, started.client_env)
    seen: list[Interval] = []
    out = driver.run(pgbench_step("select-only"), 2, 3, on_interval=seen.append)
    assert out.ok, out.output_tail
    assert out.events > 0 and out.queries == out.events and out.errors == 0
    assert len(seen) >= 2 and seen == out.intervals
    assert out.avg_ms is not None and out.avg_ms > 0
    with pytest.raises(MallocbenchError, match=r"script 'select-onyl' \(did you mean"):
        pgbench_step("select-onyl")


def test_the_golden_directory_is_loaded_once_and_a_dead_loaders_is_reclaimed(
    pg_build: PgBuild, golden: Path, dataset_cache: Path, tmp_path: Path
) -> None:
    said: list[str] = []
    assert golden_datadir(pg_build, SHAPE, dataset_cache, said.append) == golden
    assert said == []  # cached: nothing loaded again
    shape = Dataset(tables=1, rows=500, cache_bytes=32 << 20)
    key = dataset_key(pg_build, shape)
    leftover = dataset_cache / "datasets" / f".{key}.dead"
    (leftover / "data").mkdir(parents=True)
    (leftover / "server.json").write_text('{"pid": 999999999, "start_time": 1}\n')
    loaded = golden_datadir(pg_build, shape, dataset_cache, said.append)
    assert said == [f"loading dataset {key} (once; later runs reuse it)"]
    assert not leftover.exists() and (loaded / "PG_VERSION").is_file()
    with running(pg_build, tmp_path / "s", _config(), loaded) as server:
        assert server.query("SELECT count(*) FROM sbtest1") == [(500,)]
        assert server.query("SELECT count(*) FROM pgbench_accounts") == [(100_000,)]
