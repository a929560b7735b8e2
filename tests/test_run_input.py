"""What a run's input may ask for, refused at once and in one line (issue 46).

Every count an experiment file or `--set` can set has a bound that the message names;
`--dry-run` refuses what the run would; click's own usage errors are one line too.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from cli_runner import run_cli, small_experiment
from mallocbench import allocators
from mallocbench.cluster.units import experiment_from_run
from mallocbench.model.results import RunResult
from mallocbench.run.dialect import MAX_NAME, MAX_REPEATS
from mallocbench.run.experiment import MAX_CELLS
from mallocbench.run.loading import load
from mallocbench.run.planning import plan, planned_cells
from mallocbench.store import open_store
from test_cli_errors import assert_one_line_error
from test_input_validation import assert_refused


def with_repeats(directory: Path, repeats: int) -> Path:
    path = small_experiment(directory)
    path.write_text(f"repeats = {repeats}\n" + path.read_text())
    return path


def test_a_hundred_million_repeats_are_refused_at_once(
    tmp_path: Path, integrity_figures: Any
) -> None:
    path = with_repeats(tmp_path, 100000000)
    ways = (
        ("run", str(path), "--dry-run"),
        ("run", str(path), "--out", str(tmp_path / "o")),
        ("run", str(path), "--dry-run", "--set", "repeats=2", "--set", "repeats=100000000"),
    )
    for args in ways:
        began = time.monotonic()
        # Before the fix planning alone ran for minutes and grew without end.
        line = assert_refused(run_cli(*args, timeout=120), integrity_figures, "repeats")
        assert time.monotonic() - began < 60
        assert f"1-{MAX_REPEATS:,}" in line and "100000000" in line
    assert not (tmp_path / "o").exists()


def test_the_bound_itself_is_accepted(tmp_path: Path) -> None:
    path = with_repeats(tmp_path, MAX_REPEATS)
    assert load(path).repeats == MAX_REPEATS
    with pytest.raises(Exception, match=f"1-{MAX_REPEATS:,}"):
        load(path, [f"repeats={MAX_REPEATS + 1}"])


def test_cells_planned_are_bounded(tmp_path: Path, integrity_figures: Any) -> None:
    path = small_experiment(tmp_path)
    threads = "threads=[" + ",".join(str(t) for t in range(1, 102)) + "]"
    line = assert_refused(
        run_cli("run", str(path), "--dry-run", "--set", "repeats=1000", "--set", threads),
        integrity_figures,
        "101,000 cells",
        f"the {MAX_CELLS:,} one run may hold",
    )
    assert "fewer repeats" in line
    # Counted without building the plan, and the count is the plan's.
    fine = load(path, ["repeats=7", "threads=[1,2,4]", 'steps=["point"]'])
    assert planned_cells(fine) == sum(len(s.cells) for s in plan(fine)) == 7 * 3 * 9


def test_a_step_range_is_bounded(tmp_path: Path, integrity_figures: Any) -> None:
    path = small_experiment(tmp_path)
    for bad in ("0", "99999999999999999999"):
        assert_refused(
            run_cli("run", str(path), "--dry-run", "--set", f"steps=['point-query range={bad}']"),
            integrity_figures,
            f"range={bad} is out of range: give 1 to 1,000,000,000 rows",
        )


def test_a_long_setup_name_is_refused_before_any_load(
    tmp_path: Path, integrity_figures: Any
) -> None:
    long = "s" * 300
    path = small_experiment(tmp_path, setup=long)
    for args in (("--dry-run",), ("--out", str(tmp_path / "o"), "-q")):
        line = assert_refused(run_cli("run", str(path), *args), integrity_figures, "setup name")
        assert f"300 characters long: give at most {MAX_NAME}" in line
    assert not (tmp_path / "o").exists()  # nothing loaded, no server directory made
    assert load(small_experiment(tmp_path, setup="s" * MAX_NAME)).setups[0].name == "s" * MAX_NAME


@pytest.mark.parametrize(("where", "says"), [("my libs", "a space"), ("lib:x", "a colon")])
def test_an_allocator_path_ld_preload_cannot_carry(
    tmp_path: Path, integrity_figures: Any, where: str, says: str
) -> None:
    jemalloc = allocators.get("jemalloc", require_available=False)
    if not jemalloc.available or jemalloc.path is None:
        pytest.skip("jemalloc is not installed")
    library = tmp_path / where / "libjemalloc.so.2"
    library.parent.mkdir()
    shutil.copy(jemalloc.path, library)  # a real allocator: only its path is wrong
    path = small_experiment(tmp_path, str(library))
    for args in (("--dry-run",), ("--out", str(tmp_path / "o"), "-q")):
        assert_refused(
            run_cli("run", str(path), *args), integrity_figures, str(library), says, "LD_PRELOAD"
        )
    assert not (tmp_path / "o").exists()


def test_a_set_value_with_a_line_break_is_shown_escaped(
    tmp_path: Path, integrity_figures: Any
) -> None:
    path = small_experiment(tmp_path)
    for key in ("name", "server.config.sort_buffer_size", "setup.a.knobs.MALLOC_ARENA_MAX"):
        result = run_cli("run", str(path), "--dry-run", "--set", f"{key}=2\ninit_file=/x")
        line = assert_refused(result, integrity_figures, f"--set '{key}=2\\ninit_file=/x'")
        assert "init_file=/x" in line  # the whole value, on the one line


def test_an_escaped_set_is_rebuilt_from_the_stored_text(tmp_path: Path) -> None:
    """A value with a tab passes validation; its stored line must give it back."""
    path = small_experiment(tmp_path)
    experiment = load(path, ["description=a\tb", "durations.step=3"])
    assert "# --set 'description=a\\tb'\n# --set durations.step=3\n" in experiment.text
    stored = RunResult(
        run_id="r", experiment=experiment.name, base_setup="a", experiment_text=experiment.text
    )
    again = experiment_from_run(stored)
    assert again.text == experiment.text and again.duration_s == 3


@pytest.mark.parametrize(
    ("args", "says", "hint"),
    [
        (["--bogus"], "No such option '--bogus'", "(see mallocbench --help)"),
        (["rnu"], "No such command 'rnu'", "(see mallocbench --help)"),
        (["run"], "Missing argument 'EXPERIMENT_FILE'", "(see mallocbench run --help)"),
        (["run", "x.toml", "--outt", "o"], "'--out'", "(see mallocbench run --help)"),
        (
            ["run", "x.toml", "--max-repeats", "0"],
            "Invalid value for '--max-repeats': 0 is not in the range 2<=x<=1000",
            "(see mallocbench run --help)",
        ),
        (["store", "copy"], "Missing argument 'SRC'", "(see mallocbench store copy --help)"),
        (["cluster", "nope"], "No such command 'nope'", "(see mallocbench cluster --help)"),
    ],
)
def test_click_usage_errors_are_one_line(
    args: list[str], says: str, hint: str, integrity_figures: Any
) -> None:
    result = run_cli(*args)
    line = assert_refused(result, integrity_figures, says, hint)
    assert "Usage:" not in result.stdout + result.stderr and "Try " not in line


# --- config keys: what the server build knows, and what it took --------------------------


def _refused_before_any_load(
    tmp_path: Path, path: Path, integrity_figures: Any, *needles: str, sets: tuple[str, ...] = ()
) -> str:
    """Refused the same by --dry-run and by a run, which loads nothing first."""
    sets_args = [a for item in sets for a in ("--set", item)]
    assert_refused(run_cli("run", str(path), "--dry-run", *sets_args), integrity_figures, *needles)
    out = tmp_path / "o"
    line = assert_refused(
        run_cli("run", str(path), "--out", str(out), "-q", *sets_args), integrity_figures, *needles
    )
    assert not (out / "servers").exists()  # no server directory: no dataset, no start
    return line


@pytest.mark.server
def test_a_config_key_the_server_does_not_know(tmp_path: Path, integrity_figures: Any) -> None:
    path = small_experiment(tmp_path, setup_extra='config = { sort_bufer_size = "4M" }')
    line = _refused_before_any_load(
        tmp_path, path, integrity_figures, "setup a on innodb", "config key sort_bufer_size"
    )
    assert "is not an option of mariadb" in line and "did you mean 'sort_buffer_size'" in line
    # Through --set on the shared [server] table too, and with loose-, which the server
    # would ignore rather than refuse.
    fine = small_experiment(tmp_path)
    for key in ("server.config.sort_bufer_size=4M", "server.config.loose-sort_bufer_size=4M"):
        line = _refused_before_any_load(
            tmp_path, fine, integrity_figures, "sort_bufer_size", sets=(key,)
        )
    assert "would ignore it (loose-)" in line


@pytest.mark.server
def test_spellings_the_server_takes_pass(tmp_path: Path) -> None:
    """`-` or `_`, skip-, loose- of a known option, an unambiguous beginning of one."""
    config = (
        'config = { "sort-buffer-size" = "4M", skip_name_resolve = 1, '
        '"loose-innodb-buffer-pool-size-max" = "1G", "max-heap-table-siz" = "32M" }'
    )
    path = small_experiment(tmp_path, setup_extra=config)
    result = run_cli("run", str(path), "--dry-run")
    assert result.returncode == 0, result.stderr


@pytest.mark.server
def test_plugin_options_exist_where_the_plugin_is_loaded(
    tmp_path: Path, integrity_figures: Any
) -> None:
    path = small_experiment(tmp_path, setup_extra="config = { rocksdb_max_open_files = 100 }")
    myrocks = run_cli("run", str(path), "--dry-run", "--set", 'engines=["myrocks"]')
    assert myrocks.returncode == 0, myrocks.stderr  # the engine loads ha_rocksdb
    _refused_before_any_load(
        tmp_path, path, integrity_figures, "setup a on innodb", "rocksdb_max_open_files"
    )
    # A plugin the setup loads itself brings its options; one that is not there is named.
    missing = small_experiment(tmp_path, setup_extra='config = { plugin_load_add = "ha_nope" }')
    _refused_before_any_load(
        tmp_path, missing, integrity_figures, "cannot load a plugin", "ha_nope.so"
    )


@pytest.mark.server
def test_the_option_list_is_kept_per_build(tmp_path: Path, build: Any) -> None:
    from mallocbench.servers.known_options import known_options

    first = known_options(build, (), cache=tmp_path)
    kept = list((tmp_path / "server-options").iterdir())
    assert first is not None and len(kept) == 1 and "sort_buffer_size" in first.names
    with_rocksdb = known_options(build, ("ha_rocksdb.so",), cache=tmp_path)
    assert with_rocksdb is not None and len(list((tmp_path / "server-options").iterdir())) == 2
    assert "rocksdb_max_open_files" in with_rocksdb.names - first.names
    # Read back, not asked again: the kept list is what the next check uses.
    kept[0].write_text(kept[0].read_text().replace('"sort_buffer_size"', '"sort_buffer_sizx"'))
    again = known_options(build, (), cache=tmp_path)
    assert again is not None and "sort_buffer_sizx" in again.names
    # A plugin that did not load is said, and its list is not kept: it may be installed.
    failed = known_options(build, ("ha_nope",), cache=tmp_path)
    assert failed is not None and "ha_nope.so" in (failed.plugin_error or "")
    assert len(list((tmp_path / "server-options").iterdir())) == 2


@pytest.mark.server
def test_a_plugin_the_server_could_not_start_fails_the_setup(
    tmp_path: Path, integrity_figures: Any
) -> None:
    """file_key_management loads for --help but its start fails without a key file: the
    server runs on without it, and the setup must not be measured as if it had it."""
    path = small_experiment(
        tmp_path, setup_extra='config = { plugin_load_add = "file_key_management" }'
    )
    assert run_cli("run", str(path), "--dry-run").returncode == 0
    out = tmp_path / "o"
    result = run_cli("run", str(path), "--out", str(out), "-q")
    integrity_figures.add("faults injected")
    integrity_figures.check_output(result.stdout + result.stderr)
    assert result.returncode == 3, result.stdout + result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("mallocbench: error:")]
    assert len(errors) == 1 and "Traceback" not in result.stderr, result.stderr
    assert "setup a on innodb failed" in errors[0]
    assert "did not load file_key_management.so" in errors[0]
    assert "init function returned error" in errors[0]  # the server's own reason
    # The run keeps why, as it keeps a crashed server's cells with theirs.
    store = open_store(str(out / "results.sqlite"), readonly=True)
    try:
        header = store.load_run_header()
    finally:
        store.close()
    assert (
        header.metadata.notes and "did not load file_key_management.so" in header.metadata.notes[0]
    )
    assert not (out / "report.md").exists()  # nothing measured, nothing reported as measured


@pytest.mark.server
@pytest.mark.parametrize("design", ["interleaved", "sequential"])
def test_a_setup_the_server_did_not_take_fails_its_cells_and_the_run_goes_on(
    tmp_path: Path, integrity_figures: Any, design: str
) -> None:
    """Setup b's server runs without the plugin it was given: b's cells are failed ones
    with the server's reason, as a crashed server's are, and the base is measured."""
    path = small_experiment(
        tmp_path,
        setup_extra='[[setup]]\nname = "b"\nallocator = "glibc"\n'
        'config = { plugin_load_add = "file_key_management" }',
    )
    path.write_text(path.read_text().replace('name = "e"', f'name = "e"\ndesign = "{design}"', 1))
    out = tmp_path / "o"
    result = run_cli("run", str(path), "--out", str(out), "-q")
    integrity_figures.add("faults injected")
    integrity_figures.check_output(result.stdout + result.stderr)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "mallocbench: error" not in result.stderr
    doc = json.loads((out / "results.json").read_text())
    cells = {c["setup"]: c for c in doc["cells"]}
    assert cells["a"]["status"] == "ok" and cells["a"]["qps"] > 0
    assert cells["b"]["status"] == "failed"
    assert "setup b on innodb failed" in cells["b"]["error"]
    assert "did not load file_key_management.so" in cells["b"]["error"]
    assert any("did not load file_key_management.so" in n for n in doc["metadata"]["notes"])
    # Named where the user reads the run: its end, and its report.
    assert "did not load file_key_management.so" in result.stdout + result.stderr
    assert "did not load file_key_management.so" in (out / "report.md").read_text()


@pytest.mark.server
def test_a_loose_key_the_server_ignored_fails_the_start(tmp_path: Path, build: Any) -> None:
    """The check a started server gets, for what a dry run cannot see (a build swapped
    after the check): its variables and plugins against what it was asked for."""
    from mallocbench.servers import engines
    from mallocbench.servers.mariadb import ServerConfig, running
    from mallocbench.servers.outcome import SettingNotTaken

    def config(overrides: dict[str, object]) -> ServerConfig:
        return ServerConfig(
            engine=engines.get("innodb"),
            cache_bytes=32 << 20,
            allocator=allocators.get("glibc"),
            overrides=overrides,
        )

    ignored = config({"loose-innodb-nope": "1"})
    with (
        pytest.raises(SettingNotTaken, match="loose-innodb-nope = 1: the server has no such"),
        running(build, tmp_path / "a", ignored),
    ):
        pass
    taken: dict[str, object] = {
        "loose-sort-buffer-size": "4M",
        "plugin_load_add": "metadata_lock_info",
    }
    with running(build, tmp_path / "b", config(taken)) as server:
        assert server.query("SELECT @@sort_buffer_size") == [(4 << 20,)]


def test_patterns_plans_are_bounded_too(tmp_path: Path, integrity_figures: Any) -> None:
    many = [a for t in range(1, 120) for a in ("-t", str(t))]
    flags = ("patterns", "-p", "oltp", "-a", "glibc", "--repeats", "1000", "--dry-run")
    assert_refused(run_cli(*flags, *many), integrity_figures, "119,000 runs", "100,000")
    in_file = tmp_path / "p.toml"
    in_file.write_text(
        "repeats = 1000\nthreads = [" + ",".join(map(str, range(1, 120))) + "]\n"
        '[[setup]]\nallocator = "glibc"\n[[patterns]]\npattern = "oltp"\n'
    )
    line = assert_refused(
        run_cli("patterns", str(in_file), "--dry-run"), integrity_figures, "119,000 runs"
    )
    assert line.startswith(f"mallocbench: error: {in_file}:1: ")  # at the repeats line
    in_file.write_text(in_file.read_text().replace("repeats = 1000", "repeats = 2"))
    fine = run_cli("patterns", str(in_file), "--dry-run", "-t", "1")
    assert fine.returncode == 0 and fine.stdout.strip().endswith("2 runs"), fine.stderr


def test_an_engine_listed_twice_is_refused(tmp_path: Path, integrity_figures: Any) -> None:
    """Its sessions would share names, and so the directories their servers keep."""
    path = small_experiment(tmp_path)
    assert_refused(
        run_cli("run", str(path), "--dry-run", "--set", 'engines=["innodb", "innodb"]'),
        integrity_figures,
        "engines names innodb twice: list it once",
    )


@pytest.mark.server
def test_a_value_the_server_adjusted_is_a_note_of_the_run(tmp_path: Path) -> None:
    """Clamped into range, the setting is still taken: measured, and said."""
    path = small_experiment(tmp_path, setup_extra='config = { sort_buffer_size = "1" }')
    out = tmp_path / "o"
    result = run_cli("run", str(path), "--out", str(out), "-q")
    assert result.returncode == 0, result.stdout + result.stderr
    said = "setup a on innodb: the server adjusted sort_buffer_size = 1 runs as "
    assert said in result.stderr
    store = open_store(str(out / "results.sqlite"), readonly=True)
    try:
        notes = store.load_run_header().metadata.notes or []
    finally:
        store.close()
    assert [n for n in notes if n.startswith(said)] and len(notes) == len(set(notes))


def test_what_counts_as_taken() -> None:
    from mallocbench.servers.taken import Plugin, adjusted, not_taken

    variables = {"sort_buffer_size": "4194304", "innodb_adaptive_hash_index": "OFF", "sql_mode": ""}
    same = {"sort-buffer-size": "4M", "innodb_adaptive_hash_index": "off", "sql_mode": "ANSI"}
    assert adjusted(same, variables) == []  # sizes, switches; text is not compared
    assert adjusted({"loose-sort_buffer_size": "1"}, variables) == [
        "loose-sort_buffer_size = 1 runs as 4194304"
    ]
    plugins = [Plugin("ROCKSDB", "ha_rocksdb.so", "ACTIVE"), Plugin("X", "x.so", "DISABLED")]
    asked = {"plugin_load_add": "ha_rocksdb", "plugin-load": "x=x.so;ha_rocksdb.so"}
    assert [p.text for p in not_taken(asked, variables, plugins)] == [
        "plugin-load = x=x.so;ha_rocksdb.so: the server did not load x.so"
    ]
    # Without loose- an unknown key stops the server; with it, it is dropped.
    ignored = not_taken({"nope": "1", "loose-nope": "1", "loose-sort-buf": "1"}, variables, [])
    assert [p.word for p in ignored] == ["loose-nope"]


@pytest.mark.server
def test_a_calibration_checks_the_keys_before_its_load_too(
    tmp_path: Path, integrity_figures: Any
) -> None:
    """`calibrate`, and design = "auto", which calibrates before the run's own checks."""
    path = small_experiment(tmp_path, setup_extra='config = { sort_bufer_size = "4M" }')
    out = tmp_path / "o"
    for args in (("calibrate", str(path)), ("run", str(path), "-q", "--set", "design=auto")):
        # Each says what it is about to do first, on a line of its own.
        result = run_cli(*args, "--out", str(out))
        integrity_figures.add("faults injected")
        integrity_figures.check_output(result.stdout + result.stderr)
        assert result.returncode == 2
        assert_one_line_error(result, "setup a on innodb", "sort_bufer_size")
    assert not (out / "calibrate").exists() and not (out / "servers").exists()
