"""`mallocbench memory` with no server named finds one as the mysql client would, and an
account that may read little still gets a breakdown, with each missing source named.

The server is a real private MariaDB. What "the machine" offers (/etc/mysql, the usual
socket paths) is confined to a temp directory through MALLOCBENCH_TEST_SYSTEM_ROOT, and
HOME to another, so an installed server never answers these tests and each test decides
what discovery can see.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pymysql
import pytest
from rich.console import Console

from cli_runner import run_cli
from mallocbench import allocators
from mallocbench.memory import client as client_mod
from mallocbench.memory import server as server_mod
from mallocbench.memory import take as take_mod
from mallocbench.memory.client import ConnectOptions
from mallocbench.report.memory import gap_text, render
from mallocbench.servers import engines, mariadb

MiB = 2**20
USAGE_USER, USAGE_PW = "mbusage", "usage-pw-7Qx"
SRC = str(Path(__file__).parents[1] / "src")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[mariadb.PrivateServer]:
    config = mariadb.ServerConfig(
        engine=engines.get("innodb"),
        cache_bytes=32 * MiB,
        allocator=allocators.get("glibc"),
        overrides={
            "plugin-load-add": "ha_rocksdb.so",
            "rocksdb_block_cache_size": str(16 * MiB),
            "performance_schema": "ON",
        },
        max_connections=50,
    )
    build = mariadb.find_build()
    with mariadb.running(build, tmp_path_factory.mktemp("discovery"), config) as srv:
        # Only USAGE: no PROCESS, nothing on performance_schema.
        srv.query(f"CREATE USER '{USAGE_USER}'@'localhost' IDENTIFIED BY '{USAGE_PW}'")
        yield srv


@pytest.fixture
def places(tmp_path: Path) -> tuple[Path, Path]:
    """An empty HOME and an empty system root, both private to the test."""
    home, root = tmp_path / "home", tmp_path / "root"
    home.mkdir()
    root.mkdir()
    return home, root


@pytest.fixture
def os_user_by_socket(server: mariadb.PrivateServer) -> Iterator[str]:
    """The OS user may log in by unix_socket authentication, as root does on Debian."""
    me = client_mod.os_user()
    if me == "root":
        server.query(
            "ALTER USER 'root'@'localhost' IDENTIFIED VIA unix_socket "
            f"OR mysql_native_password USING PASSWORD('{server.password}')"
        )
    else:
        server.query(f"CREATE USER '{me}'@'localhost' IDENTIFIED VIA unix_socket")
        server.query(f"GRANT PROCESS, SELECT ON *.* TO '{me}'@'localhost'")
    yield me
    if me == "root":
        server.query(f"ALTER USER 'root'@'localhost' IDENTIFIED BY '{server.password}'")
    else:
        server.query(f"DROP USER '{me}'@'localhost'")


def run(
    *args: str, home: Path, root: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """The command as a user runs it, with no MYSQL_* variables unless given."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("MYSQL_")}
    clean.update(
        HOME=str(home),
        COLUMNS="300",
        PYTHONPATH=SRC,
        **{client_mod.TEST_ROOT_ENV: str(root)},
        **(env or {}),
    )
    return run_cli("memory", *args, timeout=300, whole_env=clean)


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o600)
    return path


def one_line(text: str) -> str:
    assert text.count("\n") == 1 and text.endswith("\n"), text
    assert "Traceback" not in text
    return text.rstrip("\n")


def flat(text: str) -> str:
    """Terminal output with rich's line wrapping undone."""
    return " ".join(text.split())


# --- option files, no server ------------------------------------------------------------


def test_option_files_read_as_the_client_reads_them(tmp_path: Path) -> None:
    conf_d = tmp_path / "conf.d"
    write(conf_d / "10-a.cnf", "[client]\nuser = first\n")
    write(conf_d / "20-b.cnf", "[mysql]\nloose-user=second\n")
    write(conf_d / "notes.txt", "[client]\nuser=not-a-cnf-file\n")
    main = write(
        tmp_path / "my.cnf",
        "# comment\n"
        "[client-server]\n"
        "socket = /a.sock  # trailing comment\n"
        "[mysqld]\n"
        "socket = /server-only.sock\n"
        f"!includedir {conf_d}\n"
        "[client]\n"
        'password = "p#ss w\\\\d"\n'
        "skip-ssl\n"
        f"!include {tmp_path / 'my.cnf'}\n"
        "[client-mariadb]\n"
        "port=3307\n",
    )
    home = write(tmp_path / "home.cnf", "[client]\nsocket=/b.sock\n")
    got = client_mod.read_option_files([main, home, tmp_path / "absent.cnf"])
    assert got.values == {
        "socket": "/b.sock",
        "user": "second",
        "password": "p#ss w\\d",
        "port": "3307",
    }
    assert got.origin["socket"] == str(home)
    assert got.origin["user"] == str(conf_d / "20-b.cnf")
    assert got.read == [str(main), str(conf_d / "10-a.cnf"), str(conf_d / "20-b.cnf"), str(home)]
    assert "p#ss" not in repr(got)


def test_nothing_reachable_is_one_line_naming_each_try(
    places: tuple[Path, Path], tmp_path: Path
) -> None:
    home, root = places
    result = run(home=home, root=root)
    assert result.returncode == 2
    line = one_line(result.stderr)
    assert line.startswith("mallocbench: error: no server found: ")
    assert "option files" in line and "name no server" in line
    for usual in client_mod.USUAL_SOCKETS:
        assert f"{root}{usual}" in line
    for how in ("--socket PATH", "--host HOST --port PORT", "--defaults-file FILE", "--pid PID"):
        assert how in line
    gone = tmp_path / "gone.sock"
    result = run(home=home, root=root, env={"MYSQL_UNIX_PORT": str(gone)})
    assert result.returncode == 2
    assert f"{gone} (from MYSQL_UNIX_PORT)" in one_line(result.stderr)


# --- discovery against a real server ----------------------------------------------------


def test_finds_the_server_from_the_home_option_file(
    server: mariadb.PrivateServer, places: tuple[Path, Path]
) -> None:
    home, root = places
    cnf = write(
        home / ".my.cnf",
        f"[client]\nsocket={server.socket}\nuser=root\npassword={server.password}\n",
    )
    result = run("--json", home=home, root=root)
    assert result.returncode == 0, result.stderr
    assert one_line(result.stderr) == f"mallocbench: using {server.socket} as root (from {cnf})"
    assert server.password not in result.stderr + result.stdout
    data = json.loads(result.stdout)
    assert data["process"]["pid"] == server.pid
    assert data["breakdown"]["sum_of_rows"] == data["breakdown"]["rss"]
    assert data["gaps"] == []


def test_finds_the_server_from_mysql_unix_port(
    server: mariadb.PrivateServer, places: tuple[Path, Path]
) -> None:
    home, root = places
    cnf = write(home / ".my.cnf", "[client]\nuser=root\n")
    env = {"MYSQL_UNIX_PORT": str(server.socket), "MYSQL_PWD": server.password}
    result = run("--json", home=home, root=root, env=env)
    assert result.returncode == 0, result.stderr
    assert one_line(result.stderr) == (
        f"mallocbench: using {server.socket} as root (from MYSQL_UNIX_PORT; user from {cnf})"
    )
    assert server.password not in result.stderr
    assert json.loads(result.stdout)["process"]["pid"] == server.pid


def test_finds_the_server_from_debian_cnf(
    server: mariadb.PrivateServer, places: tuple[Path, Path]
) -> None:
    home, root = places
    debian = write(
        root / "etc/mysql/debian.cnf",
        "# Automatically generated for Debian scripts. DO NOT TOUCH!\n"
        f"[client]\nhost     = localhost\nuser     = root\npassword = {server.password}\n"
        f"socket   = {server.socket}\n[mysql_upgrade]\nhost     = localhost\nuser = root\n",
    )
    result = run("--json", home=home, root=root)
    assert result.returncode == 0, result.stderr
    assert one_line(result.stderr) == f"mallocbench: using {server.socket} as root (from {debian})"
    assert server.password not in result.stderr


def test_usual_socket_as_the_os_user_by_unix_socket(
    server: mariadb.PrivateServer, places: tuple[Path, Path], os_user_by_socket: str
) -> None:
    home, root = places
    usual = root / "run/mysqld/mysqld.sock"
    usual.parent.mkdir(parents=True)
    usual.symlink_to(server.socket)
    me = os_user_by_socket
    result = run("--json", home=home, root=root)
    assert result.returncode == 0, result.stderr
    assert one_line(result.stderr) == f"mallocbench: using {usual} as {me} (a usual socket path)"
    # An account in ~/.my.cnf that is refused there: the OS user is tried next.
    write(home / ".my.cnf", f"[client]\nuser={USAGE_USER}\npassword=wrong-pw\n")
    result = run("--json", home=home, root=root)
    assert result.returncode == 0, result.stderr
    assert one_line(result.stderr) == (
        f"mallocbench: using {usual} as {me} (unix_socket authentication as the OS user)"
    )
    assert "wrong-pw" not in result.stderr


def test_socket_of_the_given_pid(server: mariadb.PrivateServer, places: tuple[Path, Path]) -> None:
    home, root = places
    cnf = write(home / ".my.cnf", f"[client]\nuser=root\npassword={server.password}\n")
    result = run("--pid", str(server.pid), "--json", home=home, root=root)
    assert result.returncode == 0, result.stderr
    assert one_line(result.stderr) == (
        f"mallocbench: using {server.socket} as root "
        f"(the socket pid {server.pid} listens on; user from {cnf})"
    )
    assert json.loads(result.stdout)["pid_source"] == "--pid"


def test_refused_accounts_are_named_without_passwords(
    server: mariadb.PrivateServer, places: tuple[Path, Path]
) -> None:
    home, root = places
    cnf = write(
        home / ".my.cnf",
        f"[client]\nsocket={server.socket}\nuser={USAGE_USER}\npassword=wrong-pw\n",
    )
    result = run(home=home, root=root)
    assert result.returncode == 2
    line = one_line(result.stderr)
    me = client_mod.os_user()
    assert (
        f"{server.socket} as {USAGE_USER} (from {cnf}): access denied with the password given"
    ) in line
    assert f"{server.socket} as {me} (unix_socket authentication as the OS user)" in line
    assert "wrong-pw" not in line and server.password not in line


def test_flags_win_and_defaults_file_is_the_only_file(
    server: mariadb.PrivateServer, places: tuple[Path, Path], tmp_path: Path
) -> None:
    home, root = places
    write(home / ".my.cnf", "[client]\nsocket=/nowhere.sock\nuser=root\npassword=wrong-pw\n")
    good = write(tmp_path / "good.cnf", f"[client]\nuser=root\npassword={server.password}\n")
    # --socket wins over the file's socket; the account still comes from the files.
    result = run("--socket", str(server.socket), "--defaults-file", str(good), home=home, root=root)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    # --defaults-file: ~/.my.cnf (its socket and wrong password) is not read at all; the
    # server comes from MYSQL_UNIX_PORT, which the client also honours.
    result = run(
        "--defaults-file",
        str(good),
        "--json",
        home=home,
        root=root,
        env={"MYSQL_UNIX_PORT": str(server.socket)},
    )
    assert result.returncode == 0, result.stderr
    assert one_line(result.stderr) == (
        f"mallocbench: using {server.socket} as root (from MYSQL_UNIX_PORT; user from {good})"
    )
    # A file that names the server is used as given: no discovery, no line.
    named = write(tmp_path / "named.cnf", good.read_text() + f"socket={server.socket}\n")
    result = run("--defaults-file", str(named), "--json", home=home, root=root)
    assert result.returncode == 0 and result.stderr == "", result.stderr


# --- gaps: what the server would not say ------------------------------------------------


def test_usage_only_account_gets_a_breakdown_with_named_gaps(
    server: mariadb.PrivateServer, places: tuple[Path, Path], tmp_path: Path
) -> None:
    home, root = places
    cnf = write(tmp_path / "usage.cnf", f"[client]\nuser={USAGE_USER}\npassword={USAGE_PW}\n")
    args = ("--socket", str(server.socket), "--defaults-file", str(cnf))
    result = run(*args, "--json", home=home, root=root)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    account = f"'{USAGE_USER}'@'localhost'"
    gaps = {g["key"]: g["text"] for g in data["gaps"]}
    assert gaps == {
        "sessions": "memory of other users' connections: unknown — without PROCESS, "
        "information_schema.PROCESSLIST lists only this user's sessions: "
        f"GRANT PROCESS ON *.* TO {account}",
        "performance_schema": "performance_schema memory: unknown — access denied for user "
        f"{account}: GRANT SELECT ON performance_schema.* TO {account}",
        "rocksdb_memtables": "RocksDB memtables and table readers: unknown — "
        f"SHOW ENGINE ROCKSDB STATUS needs PROCESS: GRANT PROCESS ON *.* TO {account}",
        "innodb": "InnoDB's own counters (total large memory, dictionary memory): unknown — "
        f"SHOW ENGINE INNODB STATUS needs PROCESS: GRANT PROCESS ON *.* TO {account}",
    }
    bd = data["breakdown"]
    rows = {r["key"]: r for r in bd["rows"]}
    # What needs no privilege is all there: /proc, variables, Memory_used.
    assert bd["sum_of_rows"] == bd["rss"] == data["process"]["rss"]
    # Present, not necessarily resident: this host's DAMON reclaim pages out an idle pool.
    assert {"buffer_pool", "stacks"} <= set(rows)
    assert rows["server_heap"]["label"] == "server heap, connections included (Memory_used)"
    assert rows["server_heap"]["bytes"] > 0
    # What it could not see is not guessed: no row claims it.
    assert not {"connections", "performance_schema", "rocksdb_memtables"} & set(rows)
    assert set(gaps.values()) <= set(bd["notes"])
    result = run(*args, home=home, root=root)
    assert result.returncode == 0, result.stderr
    out = flat(result.stdout)
    assert "where RSS goes" in out
    for text in gaps.values():
        assert f"note: {text}" in out


def test_missing_memory_used_is_a_named_gap(
    server: mariadb.PrivateServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real server's answer, less Memory_used: what MySQL gives."""
    real = server_mod.read_status

    def without_memory_used(cur: pymysql.cursors.Cursor) -> dict[str, str]:
        status = real(cur)
        assert status.pop("Memory_used") is not None
        return status

    monkeypatch.setattr(server_mod, "read_status", without_memory_used)
    opts = ConnectOptions(socket=str(server.socket), user="root", password=server.password)
    report = take_mod.take(opts)
    assert report.server is not None and report.breakdown is not None
    gap = report.server.gap("memory_used")
    assert gap is not None and gap_text(gap) == (
        "heap the server accounts for: unknown — status variable Memory_used missing from "
        "SHOW GLOBAL STATUS (MariaDB 10.x has it)"
    )
    # MariaDB ships its memory instruments off: performance_schema sees only itself.
    assert report.server.gap("performance_schema_instruments") is not None
    bd = report.breakdown
    rows = {r.key: r.bytes for r in bd.rows}
    assert bd.total() == bd.rss
    assert {"buffer_pool", "performance_schema"} <= set(rows)
    assert "server_heap" not in rows and "connections" not in rows
    assert rows["unaccounted"] == bd.heap_rss - rows["performance_schema"] - rows.get(
        "rocksdb_block_cache", 0
    ) - rows.get("rocksdb_memtables", 0)
    console = Console(file=io.StringIO(), width=300)
    render(report, console)
    assert f"note: {gap_text(gap)}" in flat(console.file.getvalue())  # type: ignore[attr-defined]
    assert gap_text(server_mod._memory_used_gap("mysql")) == (
        "heap the server accounts for: unknown — status variable Memory_used missing "
        "(MySQL has none; MariaDB 10.x has it)"
    )
