"""What an experiment may ask for, and what reading commands may touch.

Every bad input is refused before anything starts, with one `mallocbench: error:` line
and exit status 2; reading commands leave files that are not theirs exactly as they were.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import shutil
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from cli_runner import run_cli, small_experiment
from mallocbench.errors import MallocbenchError
from mallocbench.model.results import RunResult
from mallocbench.patterns import experiment as pexp
from mallocbench.patterns.driver import PATTERN_OPTIONS
from mallocbench.run.experiment import MAX_DURATION_S, MAX_ROWS, MAX_TABLES
from mallocbench.run.loading import from_dict
from mallocbench.servers.options import OWNED_CONFIG, check_config, check_knob
from mallocbench.store import Store
from mallocbench.units import parse_duration, parse_fraction, parse_size

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "results-small.json"
INJECTION = "2M\ninit_file=/tmp/evil.sql"


def assert_refused(result: subprocess.CompletedProcess[str], figures: Any, *needles: str) -> str:
    """Exit 2 and nothing on stderr but one error line holding every needle."""
    figures.add("faults injected")
    figures.check_output(result.stdout + result.stderr)
    assert "Traceback" not in result.stdout + result.stderr, result.stderr
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("mallocbench: error: "), result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def experiment_file(tmp_path: Path, extra: str = "", setup_extra: str = "") -> Path:
    return small_experiment(tmp_path, extra=extra, setup_extra=setup_extra, setup="je")


def experiment(**changes: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "name": "t",
        "steps": ["point-query"],
        "dataset": {"tables": 1, "rows": 500, "cache": "32M"},
        "setup": [{"name": "je", "allocator": "glibc"}],
    }
    data.update(changes)
    return data


def setup_with(**fields: Any) -> list[dict[str, Any]]:
    return [{"name": "je", "allocator": "glibc", **fields}]


# ---------------------------------------------------------------- my.cnf overrides


def test_a_line_break_cannot_smuggle_an_option_into_my_cnf(
    tmp_path: Path, integrity_figures: Any
) -> None:
    with pytest.raises(MallocbenchError) as caught:
        from_dict(experiment(setup=setup_with(config={"sort_buffer_size": INJECTION})))
    assert str(caught.value) == (
        "setup je: config key sort_buffer_size has a line break in its value: "
        "give one value on one line"
    )
    # As a shared experiment file would carry it: a TOML basic string with \n in it.
    path = experiment_file(
        tmp_path, setup_extra='config = { sort_buffer_size = "2M\\ninit_file=/tmp/evil.sql" }'
    )
    assert_refused(
        run_cli("run", str(path), "--dry-run"),
        integrity_figures,
        "setup je: config key sort_buffer_size has a line break",
    )


@pytest.mark.parametrize(
    ("where", "toml", "needle"),
    [
        ("setup", 'config = { init_file = "/tmp/evil.sql" }', "setup je: config key init_file is"),
        ("server", 'config = { "loose-datadir" = "/var/lib/mysql" }', "[server]: config key loose"),
        ("setup", 'config = { "skip-networking" = "0" }', "skip-networking is set by mallocbench"),
        ("setup", 'config = { "init-fil" = "/tmp/x.sql" }', "(short for init_file)"),
        ("setup", 'config = { sort_buffer_size = "2M # or more" }', "a '#' in its value"),
        ("setup", 'config = { "sort_buffer_size\\n" = "2M" }', "is not a server option name"),
    ],
)
def test_bad_config_overrides_are_one_line(
    tmp_path: Path, integrity_figures: Any, where: str, toml: str, needle: str
) -> None:
    if where == "server":
        path = experiment_file(tmp_path, extra=f"[server]\n{toml}")
    else:
        path = experiment_file(tmp_path, setup_extra=toml)
    assert_refused(run_cli("run", str(path), "--dry-run"), integrity_figures, needle)


@pytest.mark.parametrize("owned", OWNED_CONFIG)
def test_every_spelling_of_an_owned_option_is_refused(owned: str) -> None:
    dashed = owned.replace("_", "-")
    spellings = [owned, dashed, owned.upper(), f"loose-{dashed}", f"loose_{owned}",
                 f"maximum-{dashed}", f"enable-{owned}", f"disable_{owned}", f"skip-{dashed}",
                 f"autoset-{dashed}", owned[: max(3, len(owned) - 2)]]  # fmt: skip
    for name in spellings:
        with pytest.raises(MallocbenchError, match="set by mallocbench for every private server"):
            check_config(name, "x", "setup je")


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("sort_buffer_size", "2M"),
        ("innodb_data_file_path", "ibdata1:12M;ibdata2:12M:autoextend"),  # ; is no comment
        ("sql_mode", "STRICT_TRANS_TABLES,NO_ZERO_DATE"),
        ("hot_cache.key_buffer_size", "8M"),
        ("port_open_timeout", "10"),  # shares a prefix with port but is another option
        ("skip-name-resolve", "ON"),
        ("loose-rocksdb_block_size", "16K"),
        ("init_connect", "SET @a = 'x y'"),
        ("performance_schema", ""),
    ],
)
def test_ordinary_overrides_pass(name: str, value: str) -> None:
    check_config(name, value, "setup je")


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("sort_buffer_size", "2M\r", "a line break"),
        ("sort_buffer_size", "2M\0", "a NUL character"),
        ("sort_buffer_size", "2M\x1b[2J", "a control character"),
        ("sort_buffer_size", "2M\\ninit_file=x", "a backslash"),
        ("sort_buffer_size", "2M#", "a '#'"),
        ("1st_option", "1", "not a server option name"),
        ("a b", "1", "not a server option name"),
        ("a=b", "1", "not a server option name"),
        ("!include", "/etc/passwd", "not a server option name"),
        ("", "1", "not a server option name"),
        ("loose-", "1", "not a server option name"),
        ("x" * 65, "1", "longer than any server option"),
    ],
)
def test_bad_overrides_name_the_key(name: str, value: str, message: str) -> None:
    with pytest.raises(MallocbenchError, match=re.escape(message)) as caught:
        check_config(name, value, "setup je")
    assert str(caught.value).startswith("setup je: config key")
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    ("value", "accepted"),
    [
        ("ibdata1:12M;ibdata2:12M", True),
        ("it's", True),
        ("a\tb", True),
        ("2M # comment", False),  # the server would read 2M
        ("a\\tb", False),  # the server would read a TAB b
        (INJECTION, False),  # the server would read a second option
    ],
)
def test_the_line_rules_match_how_the_server_reads_my_cnf(
    tmp_path: Path, value: str, accepted: bool
) -> None:
    """my_print_defaults parses option files with the server's own code: what
    check_config accepts reads back as exactly that option with exactly that value, and
    what it refuses would not."""
    reader = shutil.which("my_print_defaults")
    if reader is None:
        pytest.skip("my_print_defaults (from the MariaDB packages) is not installed")
    cnf = tmp_path / "my.cnf"
    cnf.write_text(f"[mysqld]\nsome_option={value}\n")
    parsed = subprocess.run(
        [reader, f"--defaults-file={cnf}", "mysqld"], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert (parsed == [f"--some_option={value}"]) == accepted, parsed
    try:
        check_config("some_option", value, "setup je")
    except MallocbenchError:
        assert not accepted
    else:
        assert accepted


# ---------------------------------------------------------------- allocator knobs


def test_ld_preload_is_the_allocator_s_job(tmp_path: Path, integrity_figures: Any) -> None:
    with pytest.raises(MallocbenchError, match='setup je: knob LD_PRELOAD .* use allocator = "'):
        from_dict(experiment(setup=setup_with(knobs={"LD_PRELOAD": "/tmp/x.so"})))
    path = experiment_file(tmp_path, setup_extra='knobs = { LD_PRELOAD = "/tmp/x.so" }')
    assert_refused(run_cli("run", str(path), "--dry-run"), integrity_figures, "LD_PRELOAD", ".so")


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("LD_LIBRARY_PATH", "/tmp", "dynamic loader"),
        ("LD_AUDIT", "/tmp/a.so", "dynamic loader"),
        ("ld_preload", "/tmp/x.so", "set by mallocbench from the setup's allocator"),
        ("GCONV_PATH", "/tmp", "load other code"),
        ("OPENSSL_CONF", "/tmp/o.cnf", "load other code"),
        ("MALLOC_ARENA_MAX", "1\n2", "a line break"),
        ("MALLOC_ARENA_MAX", "1\0", "a NUL character"),
        ("1MALLOC", "1", "not an environment variable name"),
        ("MALLOC-CONF", "1", "not an environment variable name"),
        ("A=B", "1", "not an environment variable name"),
        ("", "1", "not an environment variable name"),
    ],
)
def test_bad_knobs_are_refused(name: str, value: str, message: str) -> None:
    with pytest.raises(MallocbenchError, match=re.escape(message)) as caught:
        check_knob(name, value, "setup je")
    assert str(caught.value).startswith("setup je: knob")


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("MALLOC_ARENA_MAX", "1"),
        ("MALLOC_MMAP_MAX_", "0"),
        ("GLIBC_TUNABLES", "glibc.malloc.arena_max=2:glibc.malloc.tcache_count=0"),
        ("MALLOC_CONF", "background_thread:true,narenas:2"),
        ("TCMALLOC_RELEASE_RATE", "10"),
        ("MIMALLOC_ARENA_EAGER_COMMIT", "1"),
    ],
)
def test_allocator_knobs_pass(name: str, value: str) -> None:
    check_knob(name, value, "setup je")


def test_pattern_setups_check_their_knobs_too(integrity_figures: Any) -> None:
    doc = {
        "setups": {"g": {"allocator": "glibc", "knobs": {"LD_PRELOAD": "/tmp/x.so"}}},
        "patterns": [{"pattern": "oltp"}],
    }
    with pytest.raises(MallocbenchError, match="setups.g: knob LD_PRELOAD"):
        pexp.from_dict(doc, "t")
    assert_refused(
        run_cli("patterns", "-a", "glibc:LD_AUDIT=/tmp/a.so", "--dry-run"),
        integrity_figures,
        "LD_AUDIT",
        "dynamic loader",
    )


# ---------------------------------------------------------------- bounds of an experiment


@pytest.mark.parametrize(
    ("durations", "needle"),
    [
        ("step = nan", "durations.step = nan is out of range"),
        ("step = inf", "durations.step = inf is out of range"),
        ("step = 0.5", "durations.step = 0.5 is out of range: give 1 to 86400"),
        ("step = 100000", "durations.step = 100000 is out of range"),
        ("warmup = -1", "durations.warmup = -1 is out of range: give 0 to 86400"),
        ("warmup = -inf", "durations.warmup = -inf"),
        ('step = "ten"', "durations.step = 'ten' is not a duration: write e.g. 90s"),
        ('step = "25h"', "durations.step = '25h' is out of range"),
    ],
)
def test_durations_are_finite_and_bounded(
    tmp_path: Path, integrity_figures: Any, durations: str, needle: str
) -> None:
    path = experiment_file(tmp_path)
    text = path.read_text().replace("warmup = 0\nstep = 1", durations)
    path.write_text(text)
    assert_refused(run_cli("run", str(path), "--dry-run"), integrity_figures, needle)


def test_counts_and_durations_take_the_units_the_command_line_takes() -> None:
    exp = from_dict(
        experiment(
            dataset={"tables": 1, "rows": "50k", "cache": "32M"},
            durations={"warmup": "2s", "step": "1m"},
        )
    )
    assert (exp.dataset.rows, exp.warmup_s, exp.duration_s) == (50_000, 2.0, 60.0)


def test_durations_bounds_in_the_model() -> None:
    for bad in (math.nan, math.inf, -math.inf, MAX_DURATION_S + 1, 10**400, True):
        with pytest.raises(MallocbenchError, match="durations.step"):
            from_dict(experiment(durations={"step": bad}))
    exp = from_dict(experiment(durations={"warmup": 0, "step": MAX_DURATION_S}))
    assert (exp.warmup_s, exp.duration_s) == (0.0, float(MAX_DURATION_S))


@pytest.mark.parametrize(
    ("dataset", "needle"),
    [
        ("tables = 0", f"dataset.tables = 0 is invalid: give a whole number 1-{MAX_TABLES:,}"),
        (f"tables = {MAX_TABLES + 1}", "dataset.tables = 1025"),
        ("rows = 0", f"dataset.rows = 0 is invalid: give a whole number from 1 to {MAX_ROWS:,}"),
        ('rows = "50kb"', "dataset.rows = '50kb' is invalid"),
        (f"rows = {MAX_ROWS + 1}", f"dataset.rows = {MAX_ROWS + 1}"),
        ("rows = 1.5", "dataset.rows = 1.5 is invalid"),
        ('cache = "nan"', "dataset.cache = 'nan' is not a size"),
        ('cache = "0.1"', "dataset.cache = '0.1' is not a size"),
        ("cache = -5", "dataset.cache = -5 is not a size"),
    ],
)
def test_dataset_shape_is_bounded(
    tmp_path: Path, integrity_figures: Any, dataset: str, needle: str
) -> None:
    path = experiment_file(tmp_path)
    key = dataset.split(" =")[0]
    text = re.sub(rf"^{key} = .*$", dataset, path.read_text(), count=1, flags=re.M)
    path.write_text(text)
    assert_refused(run_cli("run", str(path), "--dry-run"), integrity_figures, needle)


def test_a_cache_larger_than_the_machine_is_refused(tmp_path: Path, integrity_figures: Any) -> None:
    ram = psutil.virtual_memory().total
    path = experiment_file(tmp_path)
    path.write_text(path.read_text().replace('cache = "32M"', f"cache = {2 * ram}"))
    assert_refused(
        run_cli("run", str(path), "--dry-run"), integrity_figures, "dataset.cache", "GiB of RAM"
    )


def test_a_dataset_larger_than_the_disk_is_refused(tmp_path: Path, integrity_figures: Any) -> None:
    path = experiment_file(tmp_path)
    text = path.read_text().replace("tables = 1", f"tables = {MAX_TABLES}")
    path.write_text(text.replace("rows = 2000", f"rows = {MAX_ROWS}"))
    cache = tmp_path / "cache"
    line = assert_refused(
        run_cli("run", str(path), "--dry-run", env={"MALLOCBENCH_CACHE": str(cache)}),
        integrity_figures,
        f"the dataset cache {cache} has",
        "GiB free",
    )
    assert re.search(r"needs about [\d,.]+ GiB on disk", line), line
    assert not cache.exists()  # looked at, not created


@contextlib.contextmanager
def mounted(*args: str, target: Path) -> Iterator[None]:
    """mount ARGS TARGET for the block, or skip the test when this machine will not."""
    target.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", *args, str(target)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount here (root needed): {done.stderr.strip()}")
    try:
        yield
    finally:
        subprocess.run(["umount", str(target)], check=True)


@contextlib.contextmanager
def read_only_view(source: Path, target: Path) -> Iterator[None]:
    with mounted("--bind", str(source), target=target):
        remount = subprocess.run(
            ["mount", "-o", "remount,bind,ro", str(target)], capture_output=True, text=True
        )
        if remount.returncode != 0:
            pytest.skip(f"cannot remount read-only: {remount.stderr.strip()}")
        yield


def test_the_disk_check_counts_the_cache_s_own_file_system(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    small = tmp_path / "small"
    with mounted("-t", "tmpfs", "-o", "size=64m", "tmpfs", target=small):
        monkeypatch.setenv("MALLOCBENCH_CACHE", str(small / "not" / "yet"))
        with pytest.raises(MallocbenchError, match=r"has 0\.06 GiB free") as caught:
            from_dict(experiment())
        assert f"dataset cache {small / 'not' / 'yet'}" in str(caught.value)
        monkeypatch.setenv("MALLOCBENCH_CACHE", str(tmp_path / "cache"))
        assert from_dict(experiment()).dataset.rows == 500


@pytest.mark.parametrize("parse", [parse_size, parse_duration, parse_fraction])
@pytest.mark.parametrize("value", ["nan", "inf", "-inf", math.nan, math.inf, "9" * 400, "-5"])
def test_unit_parsers_refuse_non_finite_values(parse: Any, value: object) -> None:
    with pytest.raises(MallocbenchError, match="^key = "):
        parse(value, "key")


# ---------------------------------------------------------------- pattern options


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["-p", "sortbuf", "-o", "size=-5"], "sortbuf.size: expected a size from 1 to 2^62"),
        (["-p", "sortbuf", "-o", "size=0"], "sortbuf.size: expected a size from 1"),
        (["-p", "sortbuf", "-o", "size=nan"], "not 'nan'"),
        (["-p", "sortbuf", "-o", "size=1e999"], "not '1e999'"),
        (["-p", "sortbuf", "-o", "init=zero"], "expected one of memset, calloc, none"),
        (["-p", "blockcache", "-o", "keys=0"], "blockcache.keys: expected a whole number from 1"),
        (["-p", "blockcache", "-o", "shards=1025"], "from 1 to 1,024, not '1025'"),
        (["-p", "blockcache", "-o", "pinned=nan"], "expected a number from 0 to 1, not 'nan'"),
        (["-p", "oltp", "-o", "long_rate=-0.5"], "expected a number from 0 to 1"),
        (["-p", "xthread", "-o", "batch=1.5"], "xthread.batch: expected a whole number"),
    ],
)
def test_pattern_options_are_checked_before_anything_runs(
    integrity_figures: Any, args: list[str], needle: str
) -> None:
    result = run_cli("patterns", *args, "-a", "glibc", "--dry-run")
    assert_refused(result, integrity_figures, needle)


def test_pattern_options_in_a_file_are_checked_too() -> None:
    doc: dict[str, Any] = {
        "setups": {"g": {"allocator": "glibc", "options": {"min_size": 0}}},
        "patterns": [{"pattern": "oltp", "max_size": "-1K"}],
    }
    # Both mistakes in one run, each naming its key.
    with pytest.raises(MallocbenchError, match=r"^2 problems:\n  setups\.g\.options\.min_size: "):
        pexp.from_dict(doc, "t")
    doc["setups"]["g"]["options"] = {}
    with pytest.raises(MallocbenchError, match=r"^patterns\[0\]\.max_size: expected a size"):
        pexp.from_dict(doc, "t")
    doc["patterns"][0]["max_size"] = "512"
    case = pexp.from_dict(doc, "t").cases[0]
    assert case.options == {"max_size": "512"}  # kept as written: case names depend on it


def _c_bound(text: str) -> int:
    match = re.fullmatch(r"(\d+)(?:ULL|u)?(?:\s*<<\s*(\d+))?", text.strip())
    assert match, text
    return int(match.group(1)) << int(match.group(2) or 0)


def test_option_bounds_mirror_the_driver() -> None:
    """The Python checks are a copy of option_defs in mbpatterns.c: keep them in step."""
    source = (ROOT / "native" / "mbpatterns.c").read_text()
    kinds = {"INT": "count", "U64": "count", "SIZE": "size", "REAL": "fraction"}
    defs = re.findall(
        r'(INT|U64|SIZE|REAL)_OPT\("--([a-z-]+)", \w+, \w+(?:, ([^,]+), ([^)]+))?\)', source
    )
    seen = set()
    for kind, flag, low, high in defs:
        option = flag.replace("-", "_")
        if option not in pexp.OPTION_BOUNDS:
            continue  # threads, seconds, ops, seed, sample_ms: not pattern options
        seen.add(option)
        ours = pexp.OPTION_BOUNDS[option]
        assert ours[0] == kinds[kind], option
        if kind != "SIZE":  # the driver checks sizes' lower bounds after parsing
            assert (ours[1], ours[2]) == (_c_bound(low), _c_bound(high)), option
    every_option = {o for options in PATTERN_OPTIONS.values() for o in options}
    assert seen == every_option - {"init"} == set(pexp.OPTION_BOUNDS)


# ---------------------------------------------------------------- files that are not what they seem


def test_a_binary_experiment_file_is_one_line(tmp_path: Path, integrity_figures: Any) -> None:
    binary = tmp_path / "e.toml"
    binary.write_bytes(b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)))
    for command in ("run", "patterns"):
        assert_refused(run_cli(command, str(binary), "--dry-run"), integrity_figures, "is not text")


def _foreign_sqlite(path: Path, journal_mode: str) -> None:
    db = sqlite3.connect(path)
    db.execute(f"PRAGMA journal_mode = {journal_mode}")
    db.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)")
    db.execute("INSERT INTO notes (body) VALUES ('mine, not mallocbench''s')")
    db.commit()
    db.close()


def _describe(path: Path) -> tuple[str, list[str]]:
    db = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)
    try:
        mode = db.execute("PRAGMA journal_mode").fetchone()[0]
        tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master ORDER BY name")]
    finally:
        db.close()
    return mode, tables


@pytest.mark.parametrize("journal_mode", ["delete", "wal"])
def test_reading_commands_leave_a_foreign_sqlite_file_alone(
    tmp_path: Path, integrity_figures: Any, journal_mode: str
) -> None:
    foreign = tmp_path / "app.db"
    _foreign_sqlite(foreign, journal_mode)
    before = foreign.read_bytes()
    files_before = sorted(os.listdir(tmp_path))
    for args in (["runs", str(foreign)], ["report", str(foreign)],
                 ["compare", str(foreign), str(foreign)],
                 ["compare", "--store", str(foreign), "a", "b"]):  # fmt: skip
        assert_refused(
            run_cli(*args),
            integrity_figures,
            f"{foreign} is an SQLite file but not a mallocbench results store",
        )
    assert foreign.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == files_before  # no -wal, -shm or journal left
    assert _describe(foreign) == (journal_mode, ["notes"])


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (json.dumps({"run_id": "x"}).encode(), "is not a mallocbench results store"),
        (b"SQLite format 3\x00" + b"\xff" * 200, "is not a mallocbench results store"),
        (b"", "is an empty file but not a mallocbench results store"),
    ],
)
def test_runs_on_a_file_that_is_no_store(
    tmp_path: Path, integrity_figures: Any, content: bytes, needle: str
) -> None:
    path = tmp_path / "results.json"
    path.write_bytes(content)
    assert_refused(run_cli("runs", str(path)), integrity_figures, needle)
    assert path.read_bytes() == content


# ---------------------------------------------------------------- reading a real store


def _store(directory: Path) -> tuple[Path, str]:
    run = RunResult.from_dict(json.loads(FIXTURE.read_text()))
    path = directory / "results.sqlite"
    store = Store(path)
    try:
        # finished, as a run that ended well is: a stored "running" run whose harness is
        # gone reads as died, and report says so on a line of its own
        store.save_run(run, status="finished")
    finally:
        store.close()
    return path, run.run_id


def test_reading_a_store_changes_nothing(tmp_path: Path) -> None:
    path, run_id = _store(tmp_path)
    assert _describe(path)[0] == "wal"
    before, files = path.read_bytes(), sorted(os.listdir(tmp_path))
    listed = run_cli("runs", str(tmp_path))
    assert listed.returncode == 0 and run_id in listed.stdout, listed.stderr
    reported = run_cli("report", str(tmp_path), "--format", "csv")
    assert reported.returncode == 0 and "glibc" in reported.stdout, reported.stderr
    assert path.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == files  # no -wal or -shm left by a reader


def test_a_store_being_written_is_read_through_its_log(tmp_path: Path) -> None:
    path, _ = _store(tmp_path)
    writer = Store(path)
    try:
        run = RunResult.from_dict(json.loads(FIXTURE.read_text()))
        run.run_id = "still-running"
        writer.save_run(run)  # committed to the -wal file, not yet to the main file
        assert Path(f"{path}-wal").stat().st_size > 0
        listed = run_cli("runs", str(path))
        assert listed.returncode == 0 and "still-running" in listed.stdout, listed.stderr
        reader = Store(path, readonly=True)
        try:
            assert reader.load_run("still-running").run_id == "still-running"
            with pytest.raises(sqlite3.OperationalError, match="readonly"):
                reader.create_run(run)
        finally:
            reader.close()
    finally:
        writer.close()


def test_a_store_on_a_read_only_mount(tmp_path: Path, integrity_figures: Any) -> None:
    source, view = tmp_path / "out", tmp_path / "view"
    source.mkdir()
    _, run_id = _store(source)
    with read_only_view(source, view):
        listed = run_cli("runs", str(view))
        assert listed.returncode == 0 and run_id in listed.stdout, listed.stderr
        reported = run_cli("report", str(view), "--format", "json")
        assert reported.returncode == 0, reported.stderr
        assert json.loads(reported.stdout)["run_id"] == run_id
        line = assert_refused(
            run_cli("report", str(view), "--out", str(view / "again")),
            integrity_figures,
            f"cannot write the reports into {view / 'again'}: Read-only file system",
        )
        assert "--out" in line
    assert sorted(os.listdir(source)) == ["results.sqlite"]


def test_a_log_without_its_shm_on_a_read_only_mount(tmp_path: Path, integrity_figures: Any) -> None:
    """A copy taken while a run was writing: the log cannot be read without creating
    results.sqlite-shm, which a read-only mount does not allow. Said in one line."""
    live, copy, view = tmp_path / "live", tmp_path / "copy", tmp_path / "view"
    live.mkdir()
    copy.mkdir()
    path, _ = _store(live)
    writer = Store(path)
    try:
        run = RunResult.from_dict(json.loads(FIXTURE.read_text()))
        run.run_id = "in-the-log"
        writer.save_run(run)
        shutil.copy(path, copy / path.name)
        shutil.copy(f"{path}-wal", copy / f"{path.name}-wal")
    finally:
        writer.close()
    with read_only_view(copy, view):
        assert_refused(
            run_cli("runs", str(view)),
            integrity_figures,
            "results.sqlite-shm file beside it",
            "copy the store with its -wal file",
        )


def test_report_out_that_cannot_be_a_directory(tmp_path: Path, integrity_figures: Any) -> None:
    _store(tmp_path)
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert_refused(
        run_cli("report", str(tmp_path), "--out", str(blocker / "out")),
        integrity_figures,
        f"cannot write the reports into {blocker / 'out'}",
        "the results store is not affected",
    )


@pytest.mark.parametrize("journal_mode", ["delete", "wal"])
def test_writing_commands_refuse_a_foreign_sqlite_file(
    tmp_path: Path, integrity_figures: Any, journal_mode: str
) -> None:
    foreign = tmp_path / "app.db"
    _foreign_sqlite(foreign, journal_mode)
    before = foreign.read_bytes()
    exp = experiment_file(tmp_path)
    result = run_cli("run", str(exp), "--out", str(tmp_path / "out"), "--store", str(foreign))
    assert_refused(result, integrity_figures, "not a mallocbench results store")
    # its own --out: the default, patterns-out in the working directory, is the checkout's
    result = run_cli("patterns", "-p", "oltp", "-s", "0.1", "--out", str(tmp_path / "pat"),
                     "--store", str(foreign))  # fmt: skip
    assert_refused(result, integrity_figures, "not a mallocbench results store")
    assert foreign.read_bytes() == before
    assert _describe(foreign) == (journal_mode, ["notes"])


@pytest.mark.parametrize(
    "args",
    [
        ("run", str(ROOT / "examples" / "quick.toml"), "--dry-run", "--target-ci", "nan"),
        ("run", str(ROOT / "examples" / "quick.toml"), "--dry-run", "--target-ci", "inf"),
        ("patterns", "-p", "oltp", "--dry-run", "-s", "nan"),
    ],
)
def test_non_finite_numbers_on_the_command_line(
    args: tuple[str, ...], integrity_figures: Any
) -> None:
    integrity_figures.add("faults injected")
    result = run_cli(*args)
    integrity_figures.check_output(result.stdout + result.stderr)
    assert result.returncode == 2, result.stderr
    assert "Invalid value" in result.stderr or "is not a fraction" in result.stderr


@pytest.mark.parametrize(
    ("value", "needle"),
    [
        ("5", "--target-ci = '5' is ambiguous: write 5% for 5 percent, or a fraction (e.g. 0.05)"),
        ("0%", "--target-ci = '0%' must be above 0%"),
        ("five", "--target-ci = 'five' is not a fraction"),
    ],
)
def test_target_ci_is_a_percentage_like_every_other(
    value: str, needle: str, integrity_figures: Any
) -> None:
    result = run_cli(
        "run", str(ROOT / "examples" / "quick.toml"), "--dry-run", "--target-ci", value
    )
    assert_refused(result, integrity_figures, needle)
    fine = run_cli("run", str(ROOT / "examples" / "quick.toml"), "--dry-run", "--target-ci", "5%")
    assert fine.returncode == 0, fine.stderr
    assert "5%" in fine.stdout


def test_compare_html_into_an_unwritable_place(tmp_path: Path, integrity_figures: Any) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    result = run_cli("compare", str(FIXTURE), str(FIXTURE), "--html", str(blocker / "compare.html"))
    assert_refused(result, integrity_figures, "cannot write", "--html")


def test_set_overrides_keys_for_one_run_and_says_so(integrity_figures: Any) -> None:
    quick = str(ROOT / "examples" / "quick.toml")
    done = run_cli("run", quick, "--dry-run", "--set", "threads=[1,8]", "--set", 'steps=["point"]')
    assert done.returncode == 0, done.stderr
    # The group is expanded on the screen, not silently.
    assert "point -> 9 steps: hot-points range=100," in done.stdout
    assert "threads  1, 8" in done.stdout
    assert "note: more than an hour" in done.stdout
    for args, needle in (
        (("--set", "durations"), "--set 'durations' is not KEY=VALUE"),
        (("--set", "durations.stepp=3"), "unknown key 'stepp' in [durations]"),
        (("--set", "setup.nope.knobs.X=1"), "no setup named 'nope'; setups: glibc, jemalloc"),
        (("--set", "dataset.rows=lots"), "dataset.rows = 'lots' is invalid"),
    ):
        assert_refused(run_cli("run", quick, "--dry-run", *args), integrity_figures, needle)


def test_set_is_recorded_in_the_experiment_text() -> None:
    from mallocbench.run.loading import load

    exp = load(ROOT / "examples" / "quick.toml", ["durations.step=7", "dataset.cache=64M"])
    assert (exp.duration_s, exp.dataset.cache_bytes) == (7.0, 64 << 20)
    assert exp.text.rstrip().endswith("# --set durations.step=7\n# --set dataset.cache=64M")
