"""Run as root, the servers keep their own state in a runtime directory of their own.

`make demo` from a checkout in /root (0700), or any --out under a private directory,
used to be refused: the server, dropped to `mysql`, could not enter it. Now the server's
datadir, socket, tmpdir and files/ live in a 0700 directory of the server's user under
/var/lib/mallocbench/run, made for the run and removed at its end, and nothing of the
user's is opened up.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import signal
import sqlite3
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest

from cli_runner import small_experiment
from mallocbench import allocators
from mallocbench.errors import MallocbenchError
from mallocbench.servers import engines
from mallocbench.servers.mariadb import SERVER_USER, PrivateServer, ServerBuild, ServerConfig
from mallocbench.servers.runtime import RUNTIME_ROOT, RuntimeDir

REPO = Path(__file__).resolve().parents[1]
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="dropping to the server user needs root")


def _config() -> ServerConfig:
    return ServerConfig(
        engine=engines.get("innodb"), cache_bytes=64 << 20, allocator=allocators.get("glibc")
    )


def _mysql() -> pwd.struct_passwd:
    return pwd.getpwnam(SERVER_USER)


def _owned_0700_by_server_user(path: Path) -> bool:
    info = path.stat()
    return stat.S_IMODE(info.st_mode) == 0o700 and info.st_uid == _mysql().pw_uid


def _clone(destination: Path) -> None:
    """git clone of this checkout, with its uncommitted changes to src/ carried over, so
    the clone runs the code under test."""
    subprocess.run(["git", "clone", "-q", str(REPO), str(destination)], check=True)
    diff = subprocess.run(
        ["git", "-C", str(REPO), "diff", "HEAD", "--binary", "--", "src"],
        capture_output=True,
        check=True,
    ).stdout
    if diff:
        subprocess.run(["git", "-C", str(destination), "apply"], input=diff, check=True)
    untracked = subprocess.run(
        ["git", "-C", str(REPO), "ls-files", "--others", "--exclude-standard", "src"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    for name in untracked:
        (destination / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, destination / name)


def _modes(single: list[Path], trees: list[Path]) -> dict[Path, tuple[int, int]]:
    """Mode and owner of each directory in `single`, and of every directory in `trees`."""
    paths = list(single)
    for tree in trees:
        for root, dirs, _ in os.walk(tree):
            if Path(root).name == "datasets":
                # A dataset load's work directory (.KEY.xxxx) lasts for the load only, and
                # under pytest-xdist another worker's may come and go meanwhile.
                dirs[:] = [d for d in dirs if not d.startswith(".")]
            paths += [Path(root) / d for d in ["", *dirs]]
    found = {}
    for path in paths:
        info = path.stat()
        found[path] = (stat.S_IMODE(info.st_mode), info.st_uid)
    return found


@pytest.mark.server
@needs_root
def test_a_clone_in_a_private_home_runs_to_finished() -> None:
    # Not under pytest's temp root, whose mode other test sessions may change meanwhile.
    home = Path(tempfile.mkdtemp(prefix="mallocbench-home-"))
    try:
        _run_in_a_clone(home)
    finally:
        shutil.rmtree(home, ignore_errors=True)


def _run_in_a_clone(home: Path) -> None:
    checkout = home / "mallocbench"
    _clone(checkout)
    checkout.chmod(0o700)
    small_experiment(checkout / "examples")  # one setup, one step, one repeat, 1 s
    cache = Path(os.environ["MALLOCBENCH_CACHE"])
    # The checkout and everything above it, and the dataset cache: none may change mode.
    watched = ([*checkout.parents, cache.parent], [checkout, cache])
    before = _modes(*watched)
    assert stat.S_IMODE(home.stat().st_mode) == 0o700

    run = subprocess.Popen(
        [sys.executable, "-m", "mallocbench.cli", "run", "examples/e.toml", "--out", "out"],
        cwd=checkout,
        env={**os.environ, "PYTHONPATH": str(checkout / "src"), "COLUMNS": "200"},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    statedir: Path | None = None
    recorded: str | None = None
    deadline = time.monotonic() + 300
    try:
        # While the session's server runs: its record says where its state is.
        while statedir is None and run.poll() is None and time.monotonic() < deadline:
            for record in (checkout / "out" / "servers").glob("*/server.json"):
                with _quiet():
                    seen = Path(json.loads(record.read_text())["statedir"])
                    assert _owned_0700_by_server_user(seen)
                    assert _owned_0700_by_server_user(seen.parent)
                    assert seen.parent.parent == RUNTIME_ROOT
                    recorded = _recorded_runtime_dir(checkout / "out" / "results.sqlite")
                    statedir = seen
            time.sleep(0.02)
        stdout, stderr = run.communicate(timeout=300)
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == 0, stderr[-2000:]
    assert statedir is not None, "never saw the session's server record while it ran"
    assert recorded == str(statedir.parent)
    assert not statedir.parent.exists() and not Path(f"{statedir.parent}.lock").exists()

    out = checkout / "out"
    with sqlite3.connect(out / "results.sqlite") as db:
        assert db.execute("SELECT status FROM runs").fetchall() == [("finished",)]
        assert db.execute("SELECT count(*) FROM cells WHERE status = 'ok'").fetchone() == (1,)
    assert (out / "report.md").is_file() and "wrote" in stdout + stderr
    (session,) = (out / "servers").iterdir()
    # What people read stays in --out: the server's config, client files and error log.
    for name in ("my.cnf", "client.cnf", "error.log"):
        assert (session / name).is_file(), name
    assert f"socket={statedir}/mysqld.sock" in (session / "client.cnf").read_text()
    after = _modes(*watched)
    changed = {p: (before[p], after.get(p)) for p in before if after.get(p) != before[p]}
    assert changed == {}
    assert stat.S_IMODE(home.stat().st_mode) == 0o700


class _quiet:
    """The record may be half-written, or gone again, when it is read: try next round."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: object, value: object, tb: object) -> bool:
        return isinstance(value, OSError | ValueError | KeyError | sqlite3.Error)


def _recorded_runtime_dir(store: Path) -> str | None:
    with sqlite3.connect(store) as db:
        (metadata,) = db.execute("SELECT metadata FROM runs").fetchone()
    return json.loads(metadata).get("runtime_dir")


_VICTIM = """
import sys, time
from pathlib import Path
from mallocbench import allocators
from mallocbench.errors import MallocbenchError
from mallocbench.servers import engines
from mallocbench.servers.mariadb import PrivateServer, find_build, server_user
from mallocbench.servers.mariadb import ServerConfig
from mallocbench.servers.runtime import RuntimeDir
user = server_user()
runtime = RuntimeDir.create("victim", user.uid, user.gid)
config = ServerConfig(engine=engines.get("innodb"), cache_bytes=64 << 20,
                      allocator=allocators.get("glibc"))
server = PrivateServer(find_build(), Path(sys.argv[1]), config, runtime)
server.initialize_datadir()
server.start()
print(server.pid, runtime.path, flush=True)
time.sleep(600)
"""


@pytest.mark.server
@needs_root
def test_a_dead_harness_leaves_nothing_the_next_one_does_not_clean(tmp_path: Path) -> None:
    victim = subprocess.Popen(
        [sys.executable, "-c", _VICTIM, str(tmp_path / "session")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert victim.stdout is not None
        line = victim.stdout.readline()
        assert line, victim.stderr.read() if victim.stderr else ""
        pid_text, path_text = line.split()
        server_pid, left = int(pid_text), Path(path_text)
        assert _owned_0700_by_server_user(left) and psutil.pid_exists(server_pid)
    finally:
        victim.send_signal(signal.SIGKILL)  # no cleanup: the harness just dies
        victim.wait(30)
    assert left.exists() and psutil.Process(server_pid).is_running()

    mysql = _mysql()
    with RuntimeDir.create("next", mysql.pw_uid, mysql.pw_gid) as fresh:
        assert _owned_0700_by_server_user(fresh.path)
        assert not left.exists() and not Path(f"{left}.lock").exists()
        assert not psutil.pid_exists(server_pid) or psutil.Process(server_pid).status() == "zombie"
        # A live harness's directory is never taken: ours survives another creation.
        with RuntimeDir.create("other", mysql.pw_uid, mysql.pw_gid):
            assert fresh.path.exists()
    assert not fresh.path.exists()


@needs_root
def test_session_directory_stays_roots_and_state_goes_with_the_session(tmp_path: Path) -> None:
    build = ServerBuild("/usr/sbin/mariadbd", None, "10.11", "mariadb")
    mysql = _mysql()
    with RuntimeDir.create("t", mysql.pw_uid, mysql.pw_gid) as runtime:
        server = PrivateServer(build, tmp_path / "s", _config(), runtime)
        server.prepare_rundir()
        assert server.statedir.parent == runtime.path
        assert _owned_0700_by_server_user(server.statedir)
        for directory in (server.tmpdir, server.files_dir):
            assert _owned_0700_by_server_user(directory)
        assert server.init_file.stat().st_uid == mysql.pw_uid
        assert server.rundir.stat().st_uid == 0  # the server never enters --out
        assert server.cnf_path.parent == server.rundir and server.socket.parent == server.statedir
        (server.datadir / "x").mkdir(parents=True)
        server.discard_state(keep_datadir=True)
        assert (server.rundir / "data" / "x").is_dir() and not server.statedir.exists()


@needs_root
def test_a_runtime_root_others_could_write_or_not_pass_is_refused(tmp_path: Path) -> None:
    mysql = _mysql()
    # Under pytest's 0700 temp dirs: the server's user could never reach it.
    with pytest.raises(MallocbenchError, match="keeps the server's user out"):
        RuntimeDir.create("t", mysql.pw_uid, mysql.pw_gid, root=tmp_path / "run")
    open_parent = Path(tempfile.mkdtemp(prefix="mallocbench-root-"))
    try:
        open_parent.chmod(0o755)
        (open_parent / "run").mkdir(mode=0o777)
        (open_parent / "run").chmod(0o777)  # someone else's, or a careless umask's
        with pytest.raises(MallocbenchError, match="writable by nobody else"):
            RuntimeDir.create("t", mysql.pw_uid, mysql.pw_gid, root=open_parent / "run")
        assert list((open_parent / "run").iterdir()) == []
    finally:
        shutil.rmtree(open_parent, ignore_errors=True)


@needs_root
def test_a_runtime_root_the_user_named_keeps_what_is_not_a_harness_s() -> None:
    mysql = _mysql()
    parent = Path(tempfile.mkdtemp(prefix="mallocbench-root-"))
    try:
        parent.chmod(0o755)
        root = parent / "run"
        root.mkdir(mode=0o755)
        root.chmod(0o755)
        (root / "theirs").mkdir()  # no lock file beside it: not a harness's directory
        (root / "theirs" / "data").write_text("keep me")
        with RuntimeDir.create("t", mysql.pw_uid, mysql.pw_gid, root=root) as runtime:
            assert runtime.path.parent == root
        assert (root / "theirs" / "data").read_text() == "keep me"
    finally:
        shutil.rmtree(parent, ignore_errors=True)


# A server that stops on its fast-shutdown signal only, as a postmaster does: SIGTERM
# (a smart shutdown, waiting for every client) would hold it for the sweep's 60 s.
_POSTMASTER_LIKE = """
import signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
signal.signal(signal.SIGINT, lambda *_: sys.exit(0))
print("ready", flush=True)
time.sleep(600)
"""


@needs_root
def test_the_sweep_stops_a_leftover_server_its_familys_way() -> None:
    from mallocbench.servers.outcome import SERVER_RECORD, write_record

    parent = Path(tempfile.mkdtemp(prefix="mallocbench-root-"))
    server = None
    try:
        parent.chmod(0o755)
        root = parent / "run"
        dead = RuntimeDir.create("dead", 0, 0, root=root)
        state = dead.state_dir(parent / "session")
        state.mkdir()
        server = subprocess.Popen(
            [sys.executable, "-c", _POSTMASTER_LIKE], cwd=state, stdout=subprocess.PIPE, text=True
        )
        assert server.stdout is not None and server.stdout.readline() == "ready\n"
        session = parent / "session"
        session.mkdir()
        write_record(
            session / SERVER_RECORD, server.pid, family="postgresql", binary="server",
            rundir=session, statedir=state, socket=state / "s",
        )  # fmt: skip
        assert (state / SERVER_RECORD).exists()  # the copy the sweep reads
        assert dead._lock_fd is not None
        os.close(dead._lock_fd)  # its harness died: nobody holds the lock
        began = time.monotonic()
        with RuntimeDir.create("next", 0, 0, root=root):
            assert not dead.path.exists()
        # Stopped by SIGINT (its exit status 0), not held by SIGTERM and then killed.
        assert server.wait(5) == 0
        assert time.monotonic() - began < 30
    finally:
        if server is not None and server.poll() is None:
            server.kill()
            server.wait()
        shutil.rmtree(parent, ignore_errors=True)
