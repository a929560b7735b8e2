"""`mallocbench patterns`: experiment validation, plan order, a short end-to-end run."""

from __future__ import annotations

import json
import sqlite3
import traceback
from pathlib import Path

import pytest
from click.testing import CliRunner

from mallocbench.cli import main
from mallocbench.errors import MallocbenchError
from mallocbench.patterns import experiment as pexp
from mallocbench.store import locks, open_store

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "patterns.toml"


def base_doc() -> dict:
    return {
        "setups": {
            "glibc": {"allocator": "glibc"},
            "glibc-a1": {"allocator": "glibc", "knobs": {"MALLOC_ARENA_MAX": "1"}},
        },
        "patterns": [{"pattern": "blockcache", "capacity": "8M"}],
    }


@pytest.mark.parametrize(
    ("mutate", "where"),
    [
        (lambda d: d["patterns"][0].update(capacty="8M"), "unknown key 'capacty' in patterns[0]"),
        (lambda d: d["patterns"][0].update(pattern="heap"), "patterns[0].pattern"),
        (lambda d: d["patterns"][0].update(threads=0), "patterns[0].threads"),
        (lambda d: d["patterns"][0].update(setups=["nope"]), "patterns[0].setups"),
        (lambda d: d["setups"]["glibc"].update(knobs={"MALLOC_CONF": "x"}), "setups.glibc.knobs"),
        (lambda d: d["setups"]["glibc"].update(allocator="nomalloc"), "setups.glibc.allocator"),
        (lambda d: d["setups"]["glibc"].update(options={"init": "calloc"}), "patterns[0].setups"),
        (lambda d: d.update(base="je"), "base"),
        (lambda d: d.update(repeats=0), "repeats"),
        (lambda d: d.update(colour="red"), "unknown key 'colour' in the experiment"),
    ],
)
def test_experiment_errors_name_the_key(mutate, where: str) -> None:
    doc = base_doc()
    mutate(doc)
    with pytest.raises(MallocbenchError) as info:
        pexp.from_dict(doc, "t")
    assert str(info.value).startswith(where)


def test_plan_interleaves_setups_in_alternating_order() -> None:
    doc = base_doc()
    doc["repeats"] = 3
    doc["threads"] = [1]
    doc["setups"]["c"] = {"allocator": "glibc"}
    plan = pexp.from_dict(doc, "t").plan()
    order = [p.setup.name for p in plan]
    assert order == ["glibc", "glibc-a1", "c", "c", "glibc-a1", "glibc", "glibc", "glibc-a1", "c"]


def test_setup_options_apply_as_a_variant() -> None:
    doc = {
        "setups": {
            "m": {"allocator": "glibc"},
            "c": {"allocator": "glibc", "options": {"init": "calloc"}},
        },
        "patterns": [{"pattern": "sortbuf", "size": "2M", "init": "memset"}],
    }
    plan = pexp.from_dict(doc, "t").plan()
    by_setup = {p.setup.name: p.options() for p in plan}
    assert by_setup["m"] == {"size": "2M", "init": "memset"}
    assert by_setup["c"] == {"size": "2M", "init": "calloc"}


def test_example_experiment_is_valid() -> None:
    exp = pexp.load(EXAMPLE)
    assert {c.pattern for c in exp.cases} >= {"blockcache", "sortbuf"}
    assert len(exp.plan()) > 0


def run_cli(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["patterns", *args])
    stderr = result.stderr
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        # An escaped exception is a bug of its own: show it, not just "exit 1".
        stderr += "".join(traceback.format_exception(result.exception))
    return result.exit_code, result.stdout, stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-a", "nomalloc"], "unknown allocator 'nomalloc'"),
        (["-p", "sortbuf", "-o", "capacity=1M"], "--option capacity: no chosen pattern"),
        (["-p", "sortbuf", "-o", "size"], "expected KEY=VALUE"),
        (["-p", "sortbuf", "-o", "size=12Q", "-a", "glibc"], "sortbuf.size: expected a size"),
        (["-a", "glibc:MALLOC_CONF=x"], "has no effect on glibc"),
        ([str(EXAMPLE), "-p", "oltp"], "cannot be combined with an experiment file"),
        (["/nonexistent/x.toml"], "experiment file /nonexistent/x.toml does not exist"),
        (["--report", "--out", "/nonexistent/out"], "no results store"),
    ],
)
def test_cli_bad_input_gives_one_line(args: list[str], message: str) -> None:
    code, out, err = run_cli(*args)
    assert code == 2, out + err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mallocbench: error: "), err
    assert message in lines[0]


def test_end_to_end_short_run(tmp_path: Path) -> None:
    out = tmp_path / "out"
    code, stdout, stderr = run_cli(
        "-p",
        "oltp",
        "-p",
        "sortbuf",
        "-a",
        "glibc",
        "-a",
        "jemalloc",
        "-t",
        "1",
        "-s",
        "0.2",
        "-r",
        "2",
        "-o",
        "size=64K",
        "--out",
        str(out),
    )
    assert code == 0, stdout + stderr
    assert "oltp" in stdout and "vs base" in stdout
    doc = json.loads((out / "patterns.json").read_text())
    assert len(doc["results"]) == 2 * 2 * 2
    assert all(r["status"] == "ok" for r in doc["results"])
    assert {r["allocator_library"].rsplit("/", 1)[-1].split(".so")[0] for r in doc["results"]} == {
        "libc",
        "libjemalloc",
    }
    rows = {(r["case"], r["setup"]): r for r in doc["summary"]}
    assert rows[("oltp", "glibc")]["rel_ops"] == pytest.approx(1.0)
    assert rows[("oltp", "jemalloc")]["rel_ops"] > 0
    assert (out / "patterns.csv").read_text().startswith("case,pattern,threads,setup")
    assert "| oltp | 1 | jemalloc |" in (out / "patterns.md").read_text()
    db = sqlite3.connect(out / "results.sqlite")
    assert db.execute("SELECT count(*) FROM pattern_results").fetchone()[0] == 8
    assert db.execute("SELECT status FROM pattern_runs").fetchone()[0] == "finished"
    # the report can be printed again from the store alone
    code, stdout, _ = run_cli("--report", "--out", str(out))
    assert code == 0 and "jemalloc" in stdout
    # a report file that cannot be replaced: one line naming it, the store untouched
    (out / "patterns.md").unlink()
    (out / "patterns.md").mkdir()
    code, stdout, stderr = run_cli("--report", "--out", str(out))
    assert code != 0 and "Traceback" not in stdout + stderr
    assert f"cannot write the reports into {out}: Is a directory ({out / 'patterns.md'})" in stderr
    assert db.execute("SELECT count(*) FROM pattern_results").fetchone()[0] == 8


def test_dry_run_lists_the_plan() -> None:
    code, stdout, _ = run_cli(str(EXAMPLE), "--dry-run", "--repeats", "1")
    assert code == 0
    assert "runs" in stdout.splitlines()[-1]


def test_resume_runs_only_what_the_latest_run_left(tmp_path: Path) -> None:
    out = tmp_path / "out"
    args = ["-p", "oltp", "-a", "glibc", "-a", "glibc:MALLOC_ARENA_MAX=1", "-t", "1"]
    args += ["--ops", "200", "-r", "2", "--out", str(out)]
    code, stdout, stderr = run_cli(*args)
    assert code == 0, stdout + stderr
    db = sqlite3.connect(out / "results.sqlite")
    # As if Ctrl-C came during the second repeat, after one run had failed.
    with db:
        db.execute("DELETE FROM pattern_results WHERE repeat = 1")
        db.execute("UPDATE pattern_results SET status = 'failed' WHERE setup = 'glibc'")
        db.execute("UPDATE pattern_runs SET status = 'interrupted'")
    kept = db.execute("SELECT id, data FROM pattern_results WHERE status = 'ok'").fetchall()
    assert len(kept) == 1

    code, stdout, _ = run_cli(*args, "--resume", "--dry-run")
    assert code == 0 and stdout.splitlines()[-1].startswith("3 runs (1 done in p")

    code, stdout, stderr = run_cli(*args, "--resume")
    assert code == 0, stdout + stderr
    assert "1 runs done, 3 to go" in stderr
    assert db.execute("SELECT count(*), min(status), max(status) FROM pattern_runs").fetchone() == (
        1,
        "finished",
        "finished",
    )
    rows = db.execute("SELECT id, data, status FROM pattern_results").fetchall()
    assert len(rows) == 4 and {r[2] for r in rows} == {"ok"}
    assert kept[0] in [(r[0], r[1]) for r in rows]  # the finished run was not redone
    doc = json.loads((out / "patterns.json").read_text())
    assert len(doc["results"]) == 4

    # Nothing left: a second resume runs nothing and keeps the report.
    code, stdout, stderr = run_cli(*args, "--resume")
    assert code == 0 and "4 runs done, 0 to go" in stderr


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["-o", "allocs=5"], "the experiment's cases changed since; run without --resume"),
        (["-r", "3"], "the experiment's repeats changed since"),
    ],
)
def test_resume_refuses_a_changed_experiment(
    tmp_path: Path, extra: list[str], message: str
) -> None:
    out = tmp_path / "out"
    args = ["-p", "oltp", "-a", "glibc", "-t", "1", "--ops", "50", "-r", "1", "--out", str(out)]
    assert run_cli(*args)[0] == 0
    code, _, err = run_cli(*args, *extra, "--resume")
    assert code == 2 and err.count("\n") == 1 and message in err, err


def test_resume_needs_an_earlier_run(tmp_path: Path) -> None:
    code, _, err = run_cli("-p", "oltp", "-a", "glibc", "--out", str(tmp_path), "--resume")
    assert code == 2 and "nothing to resume: no results store" in err
    code, _, err = run_cli("--report", "--resume", "--out", str(tmp_path))
    assert code == 2 and "drop --resume" in err


def test_a_run_being_written_is_not_resumed_by_a_second_writer(tmp_path: Path) -> None:
    """One writer per pattern run, as for server runs: the run id's lock in the store."""
    out = tmp_path / "out"
    args = ["-p", "oltp", "-a", "glibc", "-t", "1", "--ops", "50", "-r", "2", "--out", str(out)]
    assert run_cli(*args)[0] == 0
    store = open_store(out / "results.sqlite")
    run_id = store.latest_pattern_run()
    assert run_id is not None
    db = sqlite3.connect(out / "results.sqlite")
    with db:
        db.execute("DELETE FROM pattern_results WHERE repeat = 1")
    try:
        with store.lock_run(run_id):  # as a run still writing it would
            code, _, err = run_cli(*args, "--resume")
    finally:
        store.close()
    assert code == 2 and err.count("\n") == 1, err
    assert f"run {run_id} in {out / 'results.sqlite'} is in use by another mallocbench run" in err
    assert db.execute("SELECT count(*) FROM pattern_results").fetchone() == (1,)
    db.close()


def test_patterns_lock_their_out_as_run_does_and_runs_lists_them(tmp_path: Path) -> None:
    """Two `patterns` into one --out would write its reports over each other: the second
    gets run's one line. `runs` lists a pattern run beside the store's other runs."""
    out = tmp_path / "out"
    args = ["-p", "oltp", "-a", "glibc", "-t", "1", "--ops", "50", "-r", "1", "--out", str(out)]
    with locks.lock_directory(out):  # as a run still writing into it would
        code, _, err = run_cli(*args)
    assert code == 2 and err.count("\n") == 1, err
    assert f"mallocbench: error: the output directory {out} is in use by another" in err
    assert not (out / "results.sqlite").exists()
    assert run_cli(*args)[0] == 0
    store = open_store(out / "results.sqlite")
    run_id = store.latest_pattern_run()
    store.close()
    listed = CliRunner().invoke(main, ["runs", str(out)])
    assert listed.exit_code == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{run_id}  "), lines
    assert "1 pattern results" in lines[0] and lines[0].endswith("  finished")
