"""The shared PostgreSQL store: the same runs as SQLite, many writers, one lock per run.

Every test gets a fresh database of one private PostgreSQL server (conftest's
`postgres_store_url`), so no test sees another's runs.
"""

from __future__ import annotations

import copy
import json
import multiprocessing
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner

from cli_runner import run_cli
from mallocbench.cli import main
from mallocbench.errors import EnvironmentLost, MallocbenchError
from mallocbench.model.results import Cell, RunResult, Sample
from mallocbench.store import ResultsStore, Store, load_result, open_store, schema
from mallocbench.store.base import STORE_SCHEMA_VERSION, redact
from postgres_server import PASSWORD, PASSWORD_USER

FIXTURE = Path(__file__).parent / "fixtures" / "results-small.json"


def _run(run_id: str = "small") -> RunResult:
    run = RunResult.from_dict(json.loads(FIXTURE.read_text()))
    run.run_id = run_id
    return run


def _cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    """The command in this process (a fresh one costs seconds of imports): the same
    command group, its output and exit status."""
    result = CliRunner().invoke(main, [str(a) for a in args])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return subprocess.CompletedProcess(args, result.exit_code, result.stdout, result.stderr)


def _save(target: str | Path, *runs: RunResult) -> None:
    store = open_store(target)
    try:
        for run in runs:
            store.save_run(run)
    finally:
        store.close()


@pytest.fixture(params=["sqlite", "postgresql"])
def any_store(request: pytest.FixtureRequest, tmp_path: Path) -> ResultsStore:
    """Each store kind in turn: the behaviour the runner relies on must not differ."""
    if request.param == "sqlite":
        target: str | Path = tmp_path / "results.sqlite"
    else:
        target = request.getfixturevalue("postgres_store_url")
    store = open_store(target)
    request.addfinalizer(store.close)
    return store


# ---------------------------------------------------------------- same runs as SQLite


def test_a_run_reads_back_from_postgresql_as_from_sqlite(
    postgres_store_url: str, tmp_path: Path
) -> None:
    run = _run()
    _save(postgres_store_url, run)
    _save(tmp_path / "results.sqlite", run)
    from_pg = load_result(postgres_store_url)
    from_sqlite = load_result(tmp_path / "results.sqlite")
    assert from_pg == from_sqlite
    assert from_pg.cells == run.cells  # every sample too, floats exact
    assert sum(len(c.samples) for c in from_pg.cells) > 0
    without = load_result(postgres_store_url, "small", with_samples=False)
    assert not any(c.samples for c in without.cells)


def test_the_runner_s_store_calls_behave_alike(any_store: ResultsStore) -> None:
    run = _run()
    any_store.save_run(run)
    cell = run.cells[0]
    failed = copy.deepcopy(cell)
    failed.status, failed.peak_rss_bytes = "failed", None
    any_store.save_cell(run.run_id, failed)  # replaces the measured attempt
    assert cell.key not in any_store.finished_cell_keys(run.run_id)
    any_store.save_cell(run.run_id, cell)
    assert cell.key in any_store.finished_cell_keys(run.run_id)
    assert len(any_store.load_run(run.run_id).cells) == len(run.cells)
    header = any_store.load_run_header(run.run_id)
    assert not header.cells and not header.setups and not header.sessions
    assert header.experiment_text == run.experiment_text
    assert header.metadata.to_dict() == run.metadata.to_dict()

    session = cell.session
    expected = max(c.peak_rss_bytes for c in run.cells if c.session == session and c.peak_rss_bytes)
    assert any_store.max_session_value(run.run_id, session, "rss") == expected
    assert any_store.max_session_value(run.run_id, "no-such-session", "vsz") is None
    assert any_store.session_ids(run.run_id) == {s.id for s in run.sessions}
    assert any_store.setups_with_status(run.run_id, ("oom", "crashed")) == {
        (c.setup, c.engine) for c in run.cells if c.status in ("oom", "crashed")
    }
    assert any_store.latest_run_id() == run.run_id
    assert any_store.schema_version() == STORE_SCHEMA_VERSION
    any_store.finish_run(run.run_id, "finished")
    assert [r["status"] for r in any_store.list_runs()] == ["finished"]
    any_store.delete_run(run.run_id)
    assert not any_store.run_exists(run.run_id)


# ---------------------------------------------------------------- many writers


def _write_cells(url: str, run_id: str, cells: list[Cell]) -> None:
    store = open_store(url)
    try:
        for cell in cells:
            store.save_cell(run_id, cell)
    finally:
        store.close()


def test_concurrent_writers_of_one_run_lose_nothing(postgres_store_url: str) -> None:
    run = _run()
    # Enough cells and samples that the two writers' transactions overlap.
    cells = []
    for repeat in range(40):
        for base in run.cells[:4]:
            cell = copy.deepcopy(base)
            cell.repeat = repeat
            cell.samples = [Sample(t=float(i), rss_bytes=i, qps=1.5 * i) for i in range(200)]
            cells.append(cell)
    empty = copy.deepcopy(run)
    empty.cells = []
    _save(postgres_store_url, empty)
    context = multiprocessing.get_context("fork")  # no re-import
    writers = [
        context.Process(target=_write_cells, args=(postgres_store_url, run.run_id, cells[i::3]))
        for i in range(3)
    ]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join(120)
        assert writer.exitcode == 0
    loaded = load_result(postgres_store_url, run.run_id)
    assert sorted(c.key for c in loaded.cells) == sorted(c.key for c in cells)
    assert all(len(c.samples) == 200 for c in loaded.cells)


def test_opening_at_once_creates_the_schema_once(postgres_store_url: str) -> None:
    context = multiprocessing.get_context("fork")  # no re-import
    openers = [context.Process(target=_open_close, args=(postgres_store_url,)) for _ in range(4)]
    for opener in openers:
        opener.start()
    for opener in openers:
        opener.join(60)
        assert opener.exitcode == 0
    with psycopg.connect(postgres_store_url) as conn:
        assert conn.execute("SELECT count(*) FROM schema_version").fetchone() == (1,)


def _open_close(url: str) -> None:
    open_store(url).close()


# ---------------------------------------------------------------- one writer per run id

HOLDER = """
import sys, time
from mallocbench.store import open_store
store = open_store(sys.argv[1])
with store.lock_run("r1"):
    print("locked", flush=True)
    time.sleep(600)
"""


def test_lock_run_refuses_a_second_holder_and_dies_with_its_holder(
    postgres_store_url: str,
) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, postgres_store_url],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        store = open_store(postgres_store_url)
        with pytest.raises(MallocbenchError) as caught:
            store.lock_run("r1")
        message = str(caught.value)
        assert f"PID {holder.pid}" in message and "in use by another mallocbench run" in message
        assert "\n" not in message
        assert store.live_status("r1", "running").startswith(f"running (PID {holder.pid}")
        with store.lock_run("r2"):  # another run id is free
            pass
        holder.send_signal(signal.SIGKILL)
        holder.wait(10)
        deadline = time.monotonic() + 20
        while True:  # the server notices the closed connection within moments
            try:
                with store.lock_run("r1"):
                    break
            except MallocbenchError:
                assert time.monotonic() < deadline, "the lock outlived its holder"
                time.sleep(0.2)
        assert store.live_status("r1", "running").startswith("died")
        store.close()
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()


def test_sqlite_lock_run_is_the_file_lock(tmp_path: Path) -> None:
    store = open_store(tmp_path / "results.sqlite")
    with store.lock_run("r1"):
        with pytest.raises(MallocbenchError, match="in use by another mallocbench run"):
            Store(tmp_path / "results.sqlite").lock_run("r1")
        assert store.live_status("r1", "running") == f"running (PID {os.getpid()})"
    store.close()


# ---------------------------------------------------------------- copy and report


def test_store_copy_round_trips_with_identical_reports(
    postgres_store_url: str, tmp_path: Path
) -> None:
    first = tmp_path / "first.sqlite"
    back = tmp_path / "back.sqlite"
    store = Store(first)
    store.save_run(_run("small"))
    store.finish_run("small", "finished")
    store.close()

    to_pg = run_cli("store", "copy", str(first), postgres_store_url)
    assert to_pg.returncode == 0, to_pg.stderr
    assert "copied 1 run(s), 48 cells, 74 samples" in to_pg.stdout
    to_sqlite = run_cli("store", "copy", postgres_store_url, str(back), "--run", "small")
    assert to_sqlite.returncode == 0, to_sqlite.stderr
    assert load_result(back) == load_result(first)

    # The real command, in its own process, as a user runs it...
    terminal = [
        run_cli("report", str(first)),
        run_cli("report", postgres_store_url),
        run_cli("report", str(back), "--run", "small"),
    ]
    for done in terminal:
        assert done.returncode == 0, done.stderr
    # The one line that names where the run was read from differs, as it should.
    evidence = "the evidence: mallocbench recommend "
    for done, source in zip(terminal, (first, postgres_store_url, back), strict=True):
        assert f"{evidence}{source} --run small" in done.stdout, done.stdout[-600:]
    tables = [
        "\n".join(line for line in done.stdout.splitlines() if not line.startswith(evidence))
        for done in terminal
    ]
    assert tables[0] == tables[1] == tables[2]
    assert "point-query" in terminal[0].stdout
    # ...and every other format in this one.
    for fmt in ("markdown", "csv", "summary-csv", "relative-json"):
        outputs = [
            _cli("report", source, "--format", fmt) for source in (first, postgres_store_url)
        ]
        outputs.append(_cli("report", back, "--run", "small", "--format", fmt))
        assert all(done.returncode == 0 for done in outputs), [d.stderr for d in outputs]
        assert outputs[0].stdout == outputs[1].stdout == outputs[2].stdout, fmt
        assert outputs[0].stdout.strip()

    runs = _cli("runs", postgres_store_url)
    assert runs.returncode == 0, runs.stderr
    assert "small" in runs.stdout and "finished" in runs.stdout
    info = _cli("store", "info", postgres_store_url)
    assert "schema version 1" in info.stdout and "1 run(s), 48 cells" in info.stdout


def test_store_copy_refuses_a_run_already_there_unless_replace(
    postgres_store_url: str, tmp_path: Path
) -> None:
    _save(tmp_path / "a.sqlite", _run("small"))
    assert _cli("store", "copy", str(tmp_path / "a.sqlite"), postgres_store_url).returncode == 0
    again = _cli("store", "copy", str(tmp_path / "a.sqlite"), postgres_store_url)
    assert again.returncode == 2
    assert again.stderr.strip().splitlines() == [
        f"mallocbench: error: run small is already in {postgres_store_url}: give --replace "
        "to overwrite it, or leave it out of the --run list"
    ]
    replaced = _cli("store", "copy", str(tmp_path / "a.sqlite"), postgres_store_url, "--replace")
    assert replaced.returncode == 0, replaced.stderr
    assert len(load_result(postgres_store_url).cells) == 48
    unknown = _cli("store", "copy", str(tmp_path / "a.sqlite"), postgres_store_url, "--run", "x")
    assert "no run 'x' in" in unknown.stderr


def test_compare_and_recommend_read_a_url(postgres_store_url: str) -> None:
    _save(postgres_store_url, _run("a"), _run("b"))
    compared = _cli("compare", "--store", postgres_store_url, "a", "b", "--format", "json")
    assert compared.returncode == 0, compared.stderr
    recommended = _cli("recommend", postgres_store_url, "--run", "a", "--format", "json")
    assert recommended.returncode == 0, recommended.stderr


# ---------------------------------------------------------------- errors are one line


def _one_line_error(done: subprocess.CompletedProcess[str], *needles: str) -> str:
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "Traceback" not in done.stderr and PASSWORD not in done.stderr + done.stdout
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def test_connection_problems_are_one_line_without_the_password(postgres: object) -> None:
    server = postgres
    host_port = f"127.0.0.1:{server.port}"  # type: ignore[attr-defined]
    wrong = f"postgresql://{PASSWORD_USER}:{PASSWORD}x@{host_port}/mallocbench"
    _one_line_error(
        run_cli("report", wrong),
        f"postgresql://{PASSWORD_USER}@{host_port}/mallocbench",
        "password authentication failed",
        "PGPASSWORD or ~/.pgpass",
    )
    _one_line_error(
        run_cli("runs", f"postgresql://bench:{PASSWORD}@127.0.0.1:1/mallocbench"),
        "postgresql://bench@127.0.0.1:1/mallocbench",
        "Connection refused",
        "is the server running?",
    )
    _one_line_error(
        run_cli("report", f"postgresql://bench@{host_port}/nosuchdb"),
        'database "nosuchdb" does not exist',
        "createdb",
    )
    _one_line_error(
        run_cli("store", "info", f"postgres://bench:{PASSWORD}@[::1/x"), "bad PostgreSQL URL"
    )
    _one_line_error(
        run_cli("report", f"postgresql://bench@{host_port}/mallocbench?password={PASSWORD}&x=1"),
        "bad PostgreSQL URL",
    )
    assert PASSWORD not in redact(f"postgresql://u:{PASSWORD}@h/db?password={PASSWORD}")


def test_a_password_from_pgpass_or_pgpassword_works(postgres: object) -> None:
    url = f"postgresql://{PASSWORD_USER}@127.0.0.1:{postgres.port}/mallocbench"  # type: ignore[attr-defined]
    done = run_cli("runs", url, env={"PGPASSWORD": PASSWORD})
    # Authenticated: what is left is that this empty database holds no store yet.
    _one_line_error(done, "holds no mallocbench results store yet")


def test_an_empty_database_is_no_store_to_read(postgres_store_url: str) -> None:
    _one_line_error(run_cli("report", postgres_store_url), "store copy")


# ---------------------------------------------------------------- schema versions


def test_a_newer_schema_is_refused_by_both_stores(postgres_store_url: str, tmp_path: Path) -> None:
    _save(postgres_store_url, _run())
    with psycopg.connect(postgres_store_url, autocommit=True) as conn:
        conn.execute("UPDATE schema_version SET version = %s", (STORE_SCHEMA_VERSION + 1,))
    sqlite_path = tmp_path / "results.sqlite"
    _save(sqlite_path, _run())
    with sqlite3.connect(sqlite_path) as db:
        db.execute("UPDATE schema_version SET version = ?", (STORE_SCHEMA_VERSION + 1,))
    db.close()
    for target in (postgres_store_url, str(sqlite_path)):
        for readonly in (True, False):
            with pytest.raises(MallocbenchError, match="newer than this mallocbench knows"):
                open_store(target, readonly=readonly)
        _one_line_error(run_cli("report", target), "schema version 2", "upgrade mallocbench")


def test_a_database_from_before_the_pattern_tables_gets_them_and_keeps_its_runs(
    postgres_store_url: str,
) -> None:
    _save(postgres_store_url, _run())
    with psycopg.connect(postgres_store_url, autocommit=True) as conn:
        conn.execute("DROP TABLE pattern_results, pattern_runs")
    reader = open_store(postgres_store_url, readonly=True)  # reading creates nothing
    reader.close()
    with psycopg.connect(postgres_store_url) as conn:
        assert conn.execute("SELECT to_regclass('pattern_runs')").fetchone() == (None,)
    store = open_store(postgres_store_url)
    try:
        assert store.load_run().run_id == "small"
    finally:
        store.close()
    with psycopg.connect(postgres_store_url) as conn:
        assert conn.execute("SELECT count(*) FROM pattern_runs").fetchone() == (0,)
        assert conn.execute("SELECT version FROM schema_version").fetchall() == [(1,)]


def test_both_databases_make_the_columns_of_the_one_definition(
    postgres_store_url: str, tmp_path: Path
) -> None:
    open_store(postgres_store_url).close()
    open_store(tmp_path / "results.sqlite").close()
    db = sqlite3.connect(tmp_path / "results.sqlite")
    with psycopg.connect(postgres_store_url) as conn:
        for table in schema.TABLES:
            lite = [row[1] for row in db.execute(f"PRAGMA table_info({table.name})")]
            pg = [
                row[0]
                for row in conn.execute(
                    "SELECT column_name FROM information_schema.columns WHERE table_name = %s"
                    " ORDER BY ordinal_position",
                    (table.name,),
                )
            ]
            # PostgreSQL's own: the write order (SQLite's rowid) and cells.session
            extra = [
                c.name
                for c in table.columns
                if c.kind is schema.Kind.ROWID or c.only == schema.POSTGRESQL
            ]
            assert lite == [c.name for c in table.columns if c.name not in extra]
            assert pg == [c.name for c in table.columns], table.name
    db.close()


def test_an_sqlite_store_made_by_the_hand_written_tables_reads_writes_and_copies(
    tmp_path: Path,
) -> None:
    """Stores made before the one definition: the same tables, but no ON DELETE CASCADE."""
    path = tmp_path / "old.sqlite"
    db = sqlite3.connect(path)
    with db:
        db.executescript(schema.ddl(schema.SQLITE).replace(" ON DELETE CASCADE", ""))
        db.execute("INSERT INTO schema_version VALUES (1)")
    db.close()
    _save(path, _run("a"), _run("b"))
    store = open_store(path)
    try:
        store.delete_run("a")
        assert [r["run_id"] for r in store.list_runs()] == ["b"]
        assert store.load_run("b").cells == _run("b").cells
    finally:
        store.close()
    assert _cli("store", "copy", path, tmp_path / "new.sqlite").returncode == 0
    assert load_result(tmp_path / "new.sqlite").to_dict() == _run("b").to_dict()


def test_an_old_sqlite_store_without_a_version_reads_and_is_upgraded(tmp_path: Path) -> None:
    path = tmp_path / "results.sqlite"
    _save(path, _run())
    with sqlite3.connect(path) as db:
        db.execute("DROP TABLE schema_version")
    db.close()
    reader = open_store(path, readonly=True)
    assert reader.schema_version() == 1
    assert reader.load_run().run_id == "small"
    reader.close()
    with sqlite3.connect(path) as db:  # reading created nothing
        assert not db.execute(
            "SELECT name FROM sqlite_master WHERE name = 'schema_version'"
        ).fetchall()
    db.close()
    open_store(path).close()
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT version FROM schema_version").fetchall() == [(1,)]
    db.close()


# ---------------------------------------------------------------- a real run


@pytest.mark.server
def test_a_real_run_writes_its_cells_into_postgresql(
    postgres_store_url: str, tmp_path: Path
) -> None:
    from cli_runner import small_experiment

    experiment = small_experiment(tmp_path)
    done = run_cli("run", str(experiment), "--out", str(tmp_path / "out"), "-q",
                   "--store", postgres_store_url)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert not (tmp_path / "out" / "results.sqlite").exists()
    result = load_result(postgres_store_url)
    assert result.cells and all(c.status == "ok" for c in result.cells)
    assert all(s.peak_rss_bytes for s in result.sessions)
    runs = _cli("runs", postgres_store_url)
    assert f"{result.run_id}  " in runs.stdout and "finished" in runs.stdout


def test_a_killed_test_session_s_server_is_swept_by_the_next(tmp_path: Path) -> None:
    """pytest killed with SIGKILL cannot stop its PostgreSQL: the next session does."""
    from postgres_server import _server_user, bin_dir, sweep_orphans

    tests_dir = Path(__file__).parent
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, time\n"
         f"sys.path.insert(0, {str(tests_dir)!r})\n"
         "from postgres_server import postgres_server\n"
         "with postgres_server() as server:\n"
         "    print(server.port, flush=True)\n"
         "    time.sleep(600)\n"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert holder.stdout is not None
    port = int(holder.stdout.readline())
    url = f"postgresql://bench@127.0.0.1:{port}/mallocbench"
    psycopg.connect(url, connect_timeout=5).close()
    # Alive owner: the sweep leaves its server alone.
    binaries, user = bin_dir(), _server_user()
    sweep_orphans(binaries, user)
    psycopg.connect(url, connect_timeout=5).close()
    holder.kill()
    holder.wait()
    swept = sweep_orphans(binaries, user)
    assert swept and not any(b.exists() for b in swept)
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(url, connect_timeout=5).close()


def test_a_connection_lost_mid_run_is_one_line_and_keeps_what_was_stored(
    postgres: Any, postgres_store_url: str
) -> None:
    run = _run()
    store = open_store(postgres_store_url)
    try:
        store.save_run(run)
        extra = copy.deepcopy(run.cells[0])
        extra.repeat = 99
        # The server ends this store's backend, as a restart or a network cut would.
        with postgres.admin() as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s",
                (postgres_store_url.rsplit("/", 1)[1],),
            )
        with pytest.raises(MallocbenchError) as lost:
            store.save_cell(run.run_id, extra)
    finally:
        store.close()
    message = str(lost.value)
    # The environment went away, not the input: exit status 3 (aborted), not 2.
    assert isinstance(lost.value, EnvironmentLost)
    assert message.startswith("lost the connection to the results store postgresql://")
    assert "\n" not in message and "--resume" in message
    again = load_result(postgres_store_url, run.run_id)
    assert len(again.cells) == len(run.cells)  # nothing stored before the loss is gone


def test_a_copy_cut_short_leaves_no_partial_run(tmp_path: Path) -> None:
    from mallocbench.store.copying import copy_runs

    run = _run()
    _save(tmp_path / "src.sqlite", run)
    src, dst = open_store(tmp_path / "src.sqlite"), open_store(tmp_path / "dst.sqlite")
    saved = 0
    real_save = dst.save_cell

    def save_then_fail(run_id: str, cell: Cell) -> None:
        nonlocal saved
        if saved == 3:
            raise KeyboardInterrupt  # Ctrl-C in the middle of the cells
        saved += 1
        real_save(run_id, cell)

    dst.save_cell = save_then_fail  # type: ignore[method-assign]
    try:
        with pytest.raises(KeyboardInterrupt):
            copy_runs(src, dst, [run.run_id])
        assert saved == 3 and not dst.run_exists(run.run_id)
    finally:
        src.close()
        dst.close()


# ---------------------------------------------------------------- pattern runs


def test_a_pattern_run_in_postgresql_copies_to_sqlite_with_identical_reports(
    postgres_store_url: str, tmp_path: Path
) -> None:
    """Pattern runs live in the same store as runs: written to either kind, copied both
    ways, read back into the same exports."""
    plan = ["-p", "oltp", "-a", "glibc", "-a", "glibc:MALLOC_ARENA_MAX=1", "-t", "1"]
    plan += ["--ops", "50", "-r", "1"]
    ran = _cli("patterns", *plan, "--out", tmp_path / "pg", "--store", postgres_store_url)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert f"store {redact(postgres_store_url)} (run p" in ran.stdout
    copied = _cli("store", "copy", postgres_store_url, tmp_path / "copy.sqlite")
    assert copied.returncode == 0 and ", 2 pattern results from" in copied.stdout
    info = _cli("store", "info", tmp_path / "copy.sqlite")
    assert "1 pattern run(s), 2 pattern results" in info.stdout
    back = _cli(
        "patterns", "--report", "--out", tmp_path / "back", "--store", tmp_path / "copy.sqlite"
    )
    assert back.returncode == 0, back.stdout + back.stderr
    for name in ("patterns.json", "patterns.csv", "patterns.md"):
        assert (tmp_path / "back" / name).read_text() == (tmp_path / "pg" / name).read_text()
    again = _cli("store", "copy", tmp_path / "copy.sqlite", postgres_store_url)
    assert again.returncode == 2 and "is already in" in again.stderr
    # A resume reads the run back from PostgreSQL: nothing left to do.
    resumed = _cli("patterns", *plan, "--out", tmp_path / "pg", "--store", postgres_store_url,
                   "--resume")  # fmt: skip
    assert resumed.returncode == 0 and "2 runs done, 0 to go" in resumed.stderr
