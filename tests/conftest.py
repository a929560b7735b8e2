"""Shared fixtures. Tests that need a server start their own private one and stop it."""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import pytest

import scheduling
from mallocbench.servers.mariadb import ServerBuild, find_build


@pytest.fixture(scope="session")
def build() -> ServerBuild:
    if shutil.which("mariadbd") is None and not Path("/usr/sbin/mariadbd").exists():
        pytest.fail("MariaDB is not installed: run `make setup` (the tests need a real server)")
    return find_build()


@pytest.fixture(scope="session")
def native_build(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """native/build, made first when stale (with the replayer's checking build, `make
    check`). xdist workers take turns: two makes at once would write the same files."""
    native = Path(__file__).resolve().parents[1] / "native"
    lock_dir = _shared_dir(tmp_path_factory.getbasetemp()) or tmp_path_factory.getbasetemp()
    with open(lock_dir / "native.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        made = subprocess.run(
            ["make", "-s", "-C", str(native), "all", "check"], capture_output=True, text=True
        )
    assert made.returncode == 0, made.stderr
    return native / "build"


@pytest.fixture(scope="session", autouse=True)
def dataset_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Keep golden datadirs of the test run apart from the user's cache.

    pytest's temp dirs stay 0700: a server that drops root to `mysql` keeps its own
    state in a runtime directory (servers/runtime.py) and never enters them. Under
    pytest-xdist the workers share one cache beside their temp dirs, so each datadir is
    loaded once per test run, not once per worker (dataset.py locks each load).
    """
    cache = os.environ.get("MALLOCBENCH_CACHE")
    if not cache:
        shared = _shared_dir(tmp_path_factory.getbasetemp())
        if shared is None:
            cache = str(tmp_path_factory.mktemp("cache"))
        else:
            (shared / "cache").mkdir(exist_ok=True)
            cache = str(shared / "cache")
    os.environ["MALLOCBENCH_CACHE"] = cache
    return Path(cache)


def _shared_dir(basetemp: str | Path | None) -> Path | None:
    """The temp dir all xdist workers of this test run share: xdist gives each worker
    the controller's basetemp/gwN as its own. None when not under xdist."""
    if not os.environ.get("PYTEST_XDIST_WORKER") or not basetemp:
        return None
    return Path(basetemp).resolve().parent


# The terminal size variables as the controller has them: an xdist worker starts with
# COLUMNS=80 and LINES=24 set, and the commands print at COLUMNS when it is set, so
# without this a test would see 80-column tables under xdist and natural ones without.
_TERMINAL_VARS = ("COLUMNS", "LINES")


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    node.workerinput["terminal environ"] = {name: os.environ.get(name) for name in _TERMINAL_VARS}
    node.workerinput["schedule groups"] = str(scheduling.groups_file(node.config))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if config.getvalue("dist") != "loadgroup":
        return None
    return scheduling.GroupScheduling(config, log)


def pytest_unconfigure(config: pytest.Config) -> None:
    scheduling.remove_groups(config)


def pytest_configure(config: pytest.Config) -> None:
    given = getattr(config, "workerinput", {}).get("terminal environ")
    for name, value in (given or {}).items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


# --- tests that measure time, CPU or noise run alone under xdist ---------------------------
#
# An `alone` test runs while no other test runs at normal priority. The other workers do
# not sit idle meanwhile: they run their next tests at nice 19, so those take only the CPU
# the `alone` test leaves idle (server starts, sleeps, a one-client workload) and the
# `alone` test keeps nearly all it asks for (a nice-0 task's weight is ~70 times a
# nice-19 one's). `alone(strict=True)` tests see any other process's CPU as what they
# measure, so nothing at all runs beside them. Lowering niceness back needs root; elsewhere
# the workers wait for `alone` tests as they did before.

_IDLE_NICE = 19
# What a worker returns to after idle priority: the niceness the suite was started with
# (`nice -n 10 make test` beside someone's benches), not 0, which root may set.
_STARTED_NICE = os.getpriority(os.PRIO_PROCESS, 0)


def _alone_mark(item: pytest.Item | None) -> pytest.Mark | None:
    return None if item is None else item.get_closest_marker("alone")


def _is_alone(item: pytest.Item | None) -> bool:
    return _alone_mark(item) is not None


def _is_strict(item: pytest.Item | None) -> bool:
    mark = _alone_mark(item)
    return mark is not None and bool(mark.kwargs.get("strict", False))


@pytest.hookimpl(trylast=True)  # after pytest's own reordering by fixture
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Under `--dist loadgroup` the `alone` tests are one group that goes first, strict
    # ones leading (they wait out whatever runs at idle priority, and at the start that
    # is nothing yet); one worker keeps the lock from one to the next while the others
    # run the longest of the rest at idle priority beside them (tests/scheduling.py).
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker and config.getvalue("loadgroup"):
        groups = scheduling.order(items, _is_alone, _is_strict, scheduling.load_durations())
        path = Path(config.workerinput["schedule groups"])  # type: ignore[attr-defined]
        scheduling.write_groups(path, groups, worker)


def pytest_sessionstart(session: pytest.Session) -> None:
    if scheduling.wants_recording() and not hasattr(session.config, "workerinput"):
        session.config.pluginmanager.register(scheduling.DurationRecorder())


def _can_restore_priority() -> bool:
    return os.geteuid() == 0


def _set_priority_of_tree(niceness: int, tests_thread: int = 0) -> None:
    """This process and every process it started (servers, clients, harnesses), each of
    their threads: a module's server started by a test at idle priority must not stay
    there for the tests after it. Linux keeps a niceness per thread, and a process's
    value names only its main thread, so a server's running workers (and the threads
    they start later) are set one by one. `tests_thread`: the thread running the tests,
    when another thread calls (0: the caller is that thread)."""
    import psutil

    me = psutil.Process()
    os.setpriority(os.PRIO_PROCESS, tests_thread, niceness)
    for process in me.children(recursive=True):
        with contextlib.suppress(psutil.Error, OSError):  # gone meanwhile, or not ours
            for thread in process.threads():
                with contextlib.suppress(OSError):  # a thread that ended meanwhile
                    os.setpriority(os.PRIO_PROCESS, thread.id, niceness)


class _Turns:
    """A worker's hold on the run's locks.

    alone.lock: exclusive for `alone` tests, shared for tests at normal priority.
    strict.lock: exclusive for `alone(strict=True)` tests, shared for tests at idle
    priority. Each lock has a turnstile so a waiting exclusive holder is not starved by a
    stream of shared ones; a test that finds the `alone` turnstile taken runs at idle
    priority instead of waiting."""

    def __init__(self, shared: Path) -> None:
        # Open for the worker's life; the locks go with the process.
        def opened(name: str) -> int:
            return os.open(shared / name, os.O_RDWR | os.O_CREAT, 0o600)

        self.alone_turnstile, self.alone_lock = opened("alone.turnstile"), opened("alone.lock")
        self.strict_turnstile, self.strict_lock = opened("strict.turnstile"), opened("strict.lock")
        self.held: str | None = None  # "alone", "strict", "normal" or "idle"
        self._mutex = threading.Lock()  # `held` and the locks, against the watcher below
        self._stop_watch = threading.Event()
        self._watcher: threading.Thread | None = None

    @staticmethod
    def _through(turnstile: int, lock: int, mode: int) -> None:
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        try:
            fcntl.flock(lock, mode)
        finally:
            fcntl.flock(turnstile, fcntl.LOCK_UN)

    def _try_normal(self) -> bool:
        """Shared hold on alone.lock unless an `alone` test holds or awaits it."""
        try:
            fcntl.flock(self.alone_turnstile, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        try:
            fcntl.flock(self.alone_lock, fcntl.LOCK_SH | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            return False
        finally:
            fcntl.flock(self.alone_turnstile, fcntl.LOCK_UN)

    def enter(self, item: pytest.Item) -> None:
        kind = "strict" if _is_strict(item) else "alone" if _is_alone(item) else "normal"
        if kind == self.held and kind != "normal":
            return  # the previous `alone` test kept the locks for this one
        self.leave()
        if kind in ("alone", "strict"):
            self._through(self.alone_turnstile, self.alone_lock, fcntl.LOCK_EX)
            # Tests at idle priority hold strict.lock shared; a strict test waits them out.
            self._through(
                self.strict_turnstile,
                self.strict_lock,
                fcntl.LOCK_EX if kind == "strict" else fcntl.LOCK_SH,
            )
        elif self._try_normal():
            pass
        elif _can_restore_priority():
            kind = "idle"
            self._through(self.strict_turnstile, self.strict_lock, fcntl.LOCK_SH)
            _set_priority_of_tree(_IDLE_NICE)
            self._watch_for_normal()
        else:
            self._through(self.alone_turnstile, self.alone_lock, fcntl.LOCK_SH)
        self.held = kind

    def _watch_for_normal(self) -> None:
        """A test begun at idle priority goes back to normal once no `alone` test holds
        or awaits the lock: the longest tests start beside the `alone` group and, left at
        nice 19 to their end, took about three times as long as alone (47.7 s against 17 s
        for the free-running replay test)."""
        tests_thread = threading.get_native_id()
        self._stop_watch.clear()

        def watch() -> None:
            while not self._stop_watch.wait(0.5):
                with self._mutex:
                    if self.held != "idle":
                        return
                    if self._try_normal():
                        _set_priority_of_tree(_STARTED_NICE, tests_thread)
                        fcntl.flock(self.strict_lock, fcntl.LOCK_UN)
                        self.held = "normal"
                        return

        self._watcher = threading.Thread(target=watch, name="alone-watch", daemon=True)
        self._watcher.start()

    def leave(self) -> None:
        if self._watcher is not None:
            self._stop_watch.set()
            self._watcher.join()
            self._watcher = None
        if self.held is None:
            return
        if self.held == "idle":
            _set_priority_of_tree(_STARTED_NICE)
        else:
            fcntl.flock(self.alone_lock, fcntl.LOCK_UN)
        if self.held in ("alone", "strict", "idle"):
            fcntl.flock(self.strict_lock, fcntl.LOCK_UN)
        self.held = None


_TURNS: list[_Turns] = []


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(
    item: pytest.Item, nextitem: pytest.Item | None
) -> Generator[None, object, object]:
    """Under xdist, a test marked `alone` runs while no other worker runs a test at
    normal priority. Fixture set-up and tear-down (a module's server starting or
    stopping) are inside the protocol, so inside the locks too."""
    shared = _shared_dir(item.config.option.basetemp)
    if shared is None:
        return (yield)
    if not _TURNS:
        _TURNS.append(_Turns(shared))
    turns = _TURNS[0]
    turns.enter(item)
    try:
        return (yield)
    finally:
        keep = _is_alone(item) and _is_alone(nextitem) and _is_strict(item) == _is_strict(nextitem)
        if not keep:
            turns.leave()


@pytest.fixture(scope="session")
def postgres() -> Iterator[Any]:
    """A private PostgreSQL server for the test session (tests/postgres_server.py).

    Fails, not skips, when the binaries are missing: `make test` installs postgresql-15.
    """
    from postgres_server import bin_dir, postgres_server

    try:
        bin_dir()
    except RuntimeError as exc:
        pytest.fail(str(exc))
    with postgres_server() as server:
        yield server


@pytest.fixture(scope="session")
def postgres_url(postgres: Any) -> str:
    """The URL of the session's database (shared by the tests that use it)."""
    return str(postgres.url())


@pytest.fixture
def postgres_store_url(postgres: Any) -> Iterator[str]:
    """A fresh database of the session's server, dropped afterwards: this test's alone."""
    name = postgres.create_database()
    try:
        yield str(postgres.url(name))
    finally:
        postgres.drop_database(name)


class IntegrityFigures:
    """Counters the integrity tests add to; the run prints them once at its end.

    faults injected counts what the tests did on purpose (kills, injections, second
    runs); the others count what went wrong and must stay 0.
    """

    def __init__(self) -> None:
        self.counts = {"faults injected": 0, "cells lost": 0, "orphans": 0, "tracebacks": 0}

    def add(self, name: str, n: int = 1) -> None:
        self.counts[name] += n

    def check_output(self, text: str) -> None:
        self.counts["tracebacks"] += text.count("Traceback (most recent call last)")


_FIGURES = IntegrityFigures()


@pytest.fixture
def integrity_figures() -> IntegrityFigures:
    return _FIGURES


def pytest_sessionfinish(session: pytest.Session) -> None:
    # An xdist worker hands its figures to the controller, which prints the sum.
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput["integrity figures"] = dict(_FIGURES.counts)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    for name, n in getattr(node, "workeroutput", {}).get("integrity figures", {}).items():
        _FIGURES.add(name, n)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _FIGURES.counts["faults injected"]:
        terminalreporter.write_line(
            "integrity figures: " + ", ".join(f"{k} {v}" for k, v in _FIGURES.counts.items())
        )


@pytest.fixture
def readable_dir() -> Iterator[Path]:
    """A directory of this test's own that an unprivileged user (nobody, mysql) may read
    (pytest's temp dirs are root's, 0700)."""
    directory = Path(tempfile.mkdtemp(prefix="mallocbench-nobody-"))
    directory.chmod(0o755)
    try:
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


@contextlib.contextmanager
def _small_tmpfs(size: str) -> Iterator[Path]:
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a small tmpfs needs root")
    # Outside pytest's 0700 temp tree: a server that records runs as `mysql`, which must
    # reach the mount to write its trace there.
    parent = Path(tempfile.mkdtemp(prefix="mb-small-disk-", dir="/tmp"))
    parent.chmod(0o711)
    mount = parent / "small"
    mount.mkdir()
    proc = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=1777", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {proc.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)
        shutil.rmtree(parent, ignore_errors=True)


@pytest.fixture
def small_disk() -> Iterator[Path]:
    """A disk that fills in the first frames of a recording (root only)."""
    with _small_tmpfs("96k") as mount:
        yield mount


@pytest.fixture
def segments_disk() -> Iterator[Path]:
    """A disk that fills after two or three segments of tests/native/phases.c."""
    with _small_tmpfs("400k") as mount:
        yield mount
