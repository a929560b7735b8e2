"""Issue 45's journey as a DBA walks it: a MariaDB server started by hand (its own
datadir and socket, the recording shim preloaded through the environment, none of
mallocbench's private-server code), driven by sysbench, recorded with `record --pid`,
and `advise` on the trace: one decision line with its ratios, intervals and the saving
in MiB and % of that server's RSS."""

from __future__ import annotations

import getpass
import json
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from cli_runner import run_cli
from mallocbench.native import shim_path
from mallocbench.replay import serverrss, workload
from mallocbench.run.loading import load as load_experiment
from mallocbench.tune import confirm

pytestmark = pytest.mark.server


def _binary(name: str) -> str:
    found = shutil.which(name) or next(
        (str(p) for p in (Path("/usr/sbin") / name, Path("/usr/bin") / name) if p.exists()), None
    )
    if found is None:
        pytest.fail(f"{name} is not installed: run `make setup` (the test needs a real server)")
    return found


@pytest.fixture
def hand_started(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    """mariadbd as a DBA starts it by hand, the shim in LD_PRELOAD; its socket."""
    datadir, sock = tmp_path / "data", tmp_path / "mysqld.sock"
    user = getpass.getuser()
    subprocess.run(
        [_binary("mariadb-install-db"), "--no-defaults", f"--datadir={datadir}",
         f"--user={user}", "--skip-test-db", "--auth-root-authentication-method=normal"],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith("MBRECORD_")}
    env["LD_PRELOAD"] = str(shim_path())
    log = tmp_path / "error.log"
    server = subprocess.Popen(
        [_binary("mariadbd"), "--no-defaults", f"--datadir={datadir}", f"--socket={sock}",
         "--skip-networking", f"--user={user}", "--innodb-buffer-pool-size=64M",
         f"--log-error={log}", f"--pid-file={tmp_path / 'mysqld.pid'}"],
        env=env,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not sock.exists() and server.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert sock.exists(), log.read_text() if log.exists() else "no error log"
        yield server, sock
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def _sysbench(sock: Path, command: str, *extra: str) -> list[str]:
    return [_binary("sysbench"), "oltp_read_write", f"--mysql-socket={sock}",
            "--mysql-user=root", "--mysql-db=sbtest", "--tables=2", "--table-size=2000",
            *extra, command]  # fmt: skip


def prepare(sock: Path) -> None:
    """sysbench's tables in a new database, as a DBA's test load would have them."""
    client = [_binary("mariadb"), f"--socket={sock}", "-uroot"]
    subprocess.run([*client, "-e", "CREATE DATABASE sbtest"], check=True, timeout=60)
    subprocess.run(_sysbench(sock, "prepare"), check=True, capture_output=True, timeout=120)


def test_a_hand_started_server_recorded_and_advised(
    hand_started: tuple[subprocess.Popen[bytes], Path], tmp_path: Path
) -> None:
    server, sock = hand_started
    prepare(sock)
    # A steady, light load (2 clients at 80 transactions/s) recorded for 20 s, the
    # window issue 45's DBA records: a trace small enough that the search and the
    # finalists' repeats fit a half-minute budget when replayed without its timing.
    # It runs until the recording ends, however long record takes to start on a busy
    # machine; its output is kept to say why, should the window see no load.
    load_log = tmp_path / "sysbench.log"
    with load_log.open("wb") as log:
        load = subprocess.Popen(
            _sysbench(sock, "run", "--threads=2", "--rate=80", "--time=300",
                      "--mysql-ignore-errors=1062,1213,1205,1020"),
            stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        time.sleep(2)
        assert load.poll() is None, load_log.read_text()
        trace = tmp_path / "prod.mbt"
        recorded = run_cli("record", "--pid", str(server.pid), "--seconds", "20",
                           "--out", str(trace))  # fmt: skip
        assert recorded.returncode == 0, recorded.stderr
        rss_now = serverrss.sample(server.pid)["rss"]
        assert load.poll() is None, load_log.read_text()
    finally:
        load.terminate()
        load.wait(timeout=60)
    proc = run_cli("advise", str(trace), "--budget", "30s", "--timing", "none",
                   "--allocators", "glibc,jemalloc", "--out", str(tmp_path / "advice"),
                   "--json")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    d = json.loads(proc.stdout)["decision"]
    for key in ("rss_ratio", "cpu_ratio", "saves_mib", "saves_pct_of_server_rss"):
        assert d[key]["low"] <= d[key]["point"] <= d[key]["high"], (key, d, proc.stderr)
    # the server's RSS over the window, as recorded: near what it holds just after
    assert 0.5 < d["server_rss_mib"] * (1 << 20) / rss_now < 2, (d, rss_now)
    assert d["saves_pct_of_server_rss"]["point"] == pytest.approx(
        100 * d["saves_mib"]["point"] / d["server_rss_mib"]
    )
    # what the server said of its load is kept beside the trace, and the confirmation
    # advise writes (for a setting deployed or left undecided) runs that load
    kept = workload.load(trace)
    assert kept is not None and kept.described and kept.counters.get("Com_update"), (
        kept,
        load_log.read_text()[-2000:],
    )
    toml = tmp_path / "advice" / "confirm.toml"
    assert toml.exists() == (d["answer"] == "deploy" or d["subject"] not in (None, d["base"]))
    if toml.exists():
        assert (
            confirm.DERIVED in toml.read_text()
            and "confirm.toml runs the recorded load" in proc.stderr
        )
        assert {s.name for s in load_experiment(toml).steps} >= {"point-query", "update-nonindex"}
        # advise.json and advise.md list its steps with their weights and approximations
        c = json.loads(proc.stdout)["confirmation"]
        assert c["path"] == str(toml) and c["recorded_load"], c
        steps = {s["step"]: s["weight"] for s in c["workload"]["steps"]}
        assert steps["update-nonindex"] > 0 and c["workload"]["approximations"], c
        md = (tmp_path / "advice" / "advise.md").read_text()
        assert f"- `update-nonindex`: {steps['update-nonindex']:.2f} (the updates)" in md
        assert all(f"- {a}" in md for a in c["workload"]["approximations"])
    else:
        assert json.loads(proc.stdout)["confirmation"] is None
    line = d["line"]
    assert line.startswith("deploy " if d["answer"] == "deploy" else "keep the default (glibc)")
    assert "steady peak RSS " in line and ", CPU " in line
    # "saves about 1.0 MiB [0.2, 1.8] of the server's 116 MiB RSS (0.9% [0.2, 1.5])"
    assert re.search(r" MiB( \[[^]]+\])? of the server's [\d.]+ MiB RSS \(", line), line


def test_record_asks_the_server_where_its_options_say(
    hand_started: tuple[subprocess.Popen[bytes], Path], tmp_path: Path
) -> None:
    """A server whose socket sits in a place of its own and whose root needs a password:
    record's discovery cannot ask it (and says what to give), --socket with
    --defaults-file can, and options that point nowhere are one line before anything is
    recorded."""
    server, sock = hand_started
    odd = tmp_path / "run of its own" / "db.sock"
    odd.parent.mkdir()
    odd.symlink_to(sock)  # the path a DBA's my.cnf would give, none discovery tries
    client = [_binary("mariadb"), f"--socket={sock}", "-uroot"]
    subprocess.run([*client, "-e", "ALTER USER root@localhost IDENTIFIED BY 'dba-secret'"],
                   check=True, timeout=60)  # fmt: skip
    plain = tmp_path / "plain.mbt"
    proc = run_cli("record", "--pid", str(server.pid), "--seconds", "2", "--out", str(plain))
    assert proc.returncode == 0, proc.stderr
    assert "description of its load is not kept" in proc.stderr and "--defaults-file" in proc.stderr
    kept = workload.load(plain)
    assert kept is None or not kept.described, kept

    cnf = tmp_path / "dba.cnf"
    cnf.write_text("[client]\nuser = root\npassword = dba-secret\n")
    cnf.chmod(0o600)
    asked = tmp_path / "asked.mbt"
    proc = run_cli("record", "--pid", str(server.pid), "--seconds", "2", "--socket", str(odd),
                   "--defaults-file", str(cnf), "--out", str(asked))  # fmt: skip
    assert proc.returncode == 0 and "not kept" not in proc.stderr, proc.stderr
    kept = workload.load(asked)
    assert kept is not None and kept.described, kept
    assert kept.variables["innodb_buffer_pool_size"] == str(64 << 20)

    for args, said in [
        (["--socket", str(tmp_path / "nowhere.sock")], "no socket at"),
        (["--socket", str(odd)], "access denied for user"),
        (["--defaults-file", str(tmp_path / "none.cnf")], "--defaults-file"),
        (["--user", "root", "--", "true"], "--pid"),
    ]:
        out = tmp_path / "refused.mbt"
        pid = [] if "--" in args else ["--pid", str(server.pid)]
        proc = run_cli("record", *pid, "--seconds", "2", "--out", str(out), *args)
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1, (args, proc.stderr)
        assert said in proc.stderr and not out.exists(), (args, proc.stderr)
    assert server.poll() is None  # the server runs on
