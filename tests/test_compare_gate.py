"""`compare --fail-on` as a CI gate, the one exit-code policy, and the comparability guard.

The runs are recorded results built here: repeats drawn around a level with seeded noise,
written as results.json files and compared through the command line, as CI would.
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from mallocbench import exitcodes
from mallocbench.analysis import comparability
from mallocbench.analysis import comparison as cmp_mod
from mallocbench.cli import main
from mallocbench.model.metadata import DatasetRecord, RunMetadata
from mallocbench.model.results import (
    STATUS_CRASHED,
    STATUS_OOM,
    Cell,
    RunResult,
    SessionInfo,
    SetupInfo,
)
from mallocbench.report.words import difference_fields

MIB = 1 << 20
SETUPS = ("glibc", "je")
STEPS = ("point-query range=100", "update-index range=100")


def _metadata(**overrides: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "cpus": 8,
        "cpu_model": "AMD EPYC 7B13",
        "memory_bytes": 32 * 1024 * MIB,
        "kernel": "6.1.0-18-amd64",
        "glibc": "2.36",
        "thp": "madvise",
        "dataset": {"tables": 4, "rows": 20000, "cache_bytes": 256 * MIB},
        "durations": {"warmup_s": 1.0, "max_warmup_s": 15.0, "step_s": 5.0},
        "design": {"asked": "interleaved", "used": "interleaved", "slice_s": 5.0},
        "repeats": 5,
        "min_effect": 0.03,
    }
    meta.update(overrides)
    return meta


def make_run(
    run_id: str,
    seed: int,
    repeats: int = 5,
    qps: dict[str, float] | None = None,
    rss: dict[str, float] | None = None,
    noise: float = 0.02,
    **metadata: Any,
) -> RunResult:
    """Two setups on InnoDB at 8 threads; each repeat's QPS and peak RSS drawn around
    its level with relative noise `noise` (RSS: half of it)."""
    draw = random.Random(seed)
    qps = {"glibc": 10000.0, "je": 12000.0, **(qps or {})}
    rss = {"glibc": 900.0 * MIB, "je": 700.0 * MIB, **(rss or {})}
    run = RunResult(run_id, "gate", "glibc", RunMetadata.from_dict(_metadata(**metadata)))
    run.setups = [
        SetupInfo(s, "glibc" if s == "glibc" else "jemalloc", server_version="10.11.6-MariaDB")
        for s in SETUPS
    ]
    for repeat in range(repeats):
        for setup in SETUPS:
            peak = int(rss[setup] * (1 + draw.gauss(0, noise / 2)))
            session = f"{setup}.innodb.r{repeat}"
            run.sessions.append(SessionInfo(session, setup, "innodb", repeat, peak_rss_bytes=peak))
            for step in STEPS:
                run.cells.append(
                    Cell(
                        setup=setup,
                        engine="innodb",
                        step=step,
                        threads=8,
                        repeat=repeat,
                        qps=qps[setup] * (1 + draw.gauss(0, noise)),
                        peak_rss_bytes=peak,
                        cache_bytes=256 * MIB,
                        session=session,
                    )
                )
    return run


def write(tmp_path: Path, *runs: RunResult) -> list[str]:
    paths = []
    for run in runs:
        path = tmp_path / f"{run.run_id}.json"
        path.write_text(json.dumps(run.to_dict()))
        paths.append(str(path))
    return paths


def invoke(*args: str) -> Result:
    return CliRunner().invoke(main, ["compare", *args])


# ---------------------------------------------------------------- --fail-on


def test_a_clear_slowdown_fails_the_gate(tmp_path: Path) -> None:
    a = make_run("a", seed=1)
    b = make_run("b", seed=2, qps={"je": 12000.0 * 0.8})
    out = invoke(*write(tmp_path, a, b), "--fail-on", "slower")
    assert out.exit_code == exitcodes.FINDING == 1, out.output
    lines = out.stderr.splitlines()
    findings = [line for line in lines if line.startswith("compare: slower: ")]
    assert len(findings) == 2  # je on both steps; glibc did not change
    for finding in findings:
        assert re.match(r"compare: slower: innodb, 8 threads, .+, je: 0\.[78]\d \[0\.\d\d, "
                        r"0\.\d\d\], beyond ±3%$", finding), finding  # fmt: skip
    assert lines[-1] == "compare: 2 findings (--fail-on slower)"
    assert "QPS(B) / QPS(A)" in out.stdout  # the comparison is printed as without a gate
    # The same slowdown is no finding for a gate on the other direction or on memory.
    out = invoke(*write(tmp_path, a, b), "--fail-on", "faster,rss-up")
    assert out.exit_code == exitcodes.OK, out.output
    assert out.stderr.splitlines()[-1] == (
        "compare: no finding (--fail-on faster,rss-up): no significant speedup or RSS "
        "increase beyond ±3%"
    )
    out = invoke(*write(tmp_path, a, b), "--fail-on", "changed")
    assert out.exit_code == exitcodes.FINDING


def test_an_a_a_pair_passes(tmp_path: Path) -> None:
    a = make_run("a", seed=11)
    b = make_run("b", seed=12)
    out = invoke(*write(tmp_path, a, b), "--fail-on", "changed,rss-up,rss-down")
    assert out.exit_code == exitcodes.OK, out.output
    assert "no finding" in out.stderr.splitlines()[-1]
    # Without --fail-on nothing is said about findings and the status is 0 regardless.
    b_slow = make_run("b", seed=12, qps={"je": 9000.0})
    out = invoke(*write(tmp_path, a, b_slow))
    assert out.exit_code == exitcodes.OK and "finding" not in out.stderr


def test_more_peak_rss_over_three_repeats_fails_rss_up(tmp_path: Path) -> None:
    a = make_run("a", seed=3, repeats=3)
    b = make_run("b", seed=4, repeats=3, rss={"je": 700.0 * MIB * 1.3})
    paths = write(tmp_path, a, b)
    out = invoke(*paths, "--fail-on", "rss-up")
    assert out.exit_code == exitcodes.FINDING, out.output
    (finding,) = [line for line in out.stderr.splitlines() if "rss-up:" in line]
    assert finding.startswith("compare: rss-up: innodb, peak RSS, je: 1.3")
    assert "[1.2" in finding or "[1.3" in finding
    assert invoke(*paths, "--fail-on", "slower,rss-down").exit_code == exitcodes.OK
    # The interval is in every format that prints the RSS ratio.
    data = json.loads(invoke(*paths, "--format", "json").stdout)
    je = next(m for m in data["memory"] if m["setup"] == "je")
    assert je["rss"]["verdict"] == "higher" and je["rss"]["repeats_a"] == 3
    assert 1.2 < je["rss"]["low"] < je["rss"]["ratio"] < je["rss"]["high"] < 1.45
    assert [c["kind"] for c in data["changes"]] == ["rss-up"]
    text = invoke(*paths, "--format", "markdown").stdout
    assert "| innodb | je |" in text and "**\\***" in text.split("| innodb | je |")[1]
    rows = invoke(*paths, "--format", "csv").stdout.splitlines()
    rss_rows = [r for r in rows if ",peak RSS,memory,je," in r]
    assert len(rss_rows) == 1 and ",higher,True,bytes,3,3," in rss_rows[0]


def test_one_repeat_has_no_interval_and_is_never_a_finding(tmp_path: Path) -> None:
    a = make_run("a", seed=5, repeats=1)
    b = make_run("b", seed=6, repeats=1, qps={"je": 6000.0}, rss={"je": 2000.0 * MIB})
    out = invoke(*write(tmp_path, a, b), "--fail-on", "slower,rss-up")
    assert out.exit_code == exitcodes.OK, out.output
    assert "no ratio has an interval" in out.stderr


def test_a_crash_in_b_only_counts_as_slower(tmp_path: Path) -> None:
    a = make_run("a", seed=7)
    b = make_run("b", seed=8)
    for c in b.cells:
        if c.setup == "je" and c.step == STEPS[1] and c.repeat == 2:
            c.status, c.qps = STATUS_CRASHED, None
    out = invoke(*write(tmp_path, a, b), "--fail-on", "slower")
    assert out.exit_code == exitcodes.FINDING, out.output
    assert "compare: slower: innodb, 8 threads, update-index range=100, je: crashed in B, " \
        "measured in A" in out.stderr  # fmt: skip
    # The other way round it is an improvement, not a regression.
    out = invoke(*write(tmp_path, b, a), "--fail-on", "slower")
    assert out.exit_code == exitcodes.OK, out.output
    assert invoke(*write(tmp_path, b, a), "--fail-on", "faster").exit_code == exitcodes.FINDING


def test_an_oom_kill_in_b_only_counts_as_rss_up(tmp_path: Path) -> None:
    a = make_run("a", seed=9, repeats=3)
    b = make_run("b", seed=10, repeats=3)
    for c in b.cells:
        if c.setup == "glibc" and c.repeat == 1 and c.step == STEPS[0]:
            c.status, c.qps = STATUS_OOM, None
    out = invoke(*write(tmp_path, a, b), "--fail-on", "rss-up")
    assert out.exit_code == exitcodes.FINDING, out.output
    assert "compare: rss-up: innodb, peak RSS, glibc: OOM-killed in B (1 cell), not in A" \
        in out.stderr  # fmt: skip
    assert "compare: 1 finding (--fail-on rss-up)" in out.stderr


def test_bad_fail_on_is_a_usage_error(tmp_path: Path) -> None:
    paths = write(tmp_path, make_run("a", seed=1), make_run("b", seed=2))
    for bad in ("slowr", "slower,", "rss"):
        out = invoke(*paths, "--fail-on", bad)
        assert out.exit_code == exitcodes.USAGE == 2, out.output
        assert out.stderr.startswith("mallocbench: error: --fail-on ")
        assert "slower, faster, changed, rss-up, rss-down" in out.stderr
        assert out.stderr.count("\n") == 1 and "Traceback" not in out.output
    assert cmp_mod.parse_fail_on(("slower", "rss-up,SLOWER")) == ("slower", "rss-up")


# ---------------------------------------------------------------- comparability guard


def test_a_different_dataset_is_refused_unless_allowed(tmp_path: Path) -> None:
    dataset = {"tables": 4, "rows": 50000, "cache_bytes": 256 * MIB}
    a = make_run("a", seed=1)
    b_same = make_run("b", seed=2, dataset=dataset)
    b_slow = make_run("b", seed=2, dataset=dataset, qps={"je": 9000.0})
    out = invoke(*write(tmp_path, a, b_same), "--fail-on", "slower")
    assert out.exit_code == exitcodes.USAGE, out.output
    assert out.stderr.count("\n") == 1 and not out.stdout
    assert out.stderr.startswith("mallocbench: error: the runs did not measure the same workload")
    assert "dataset.rows A 20000 vs B 50000" in out.stderr and "--allow-different" in out.stderr
    out = invoke(*write(tmp_path, a, b_same), "--fail-on", "slower", "--allow-different")
    assert out.exit_code == exitcodes.OK, out.output
    assert "warning: the runs differ: dataset.rows A 20000 vs B 50000" in out.stderr
    out = invoke(*write(tmp_path, a, b_slow), "--fail-on", "slower", "--allow-different")
    assert out.exit_code == exitcodes.FINDING, out.output


def test_host_durations_and_versions_only_warn(tmp_path: Path) -> None:
    a = make_run("a", seed=1)
    b = make_run("b", seed=2, kernel="6.12.0-1-amd64",
                 durations={"warmup_s": 1.0, "max_warmup_s": 15.0, "step_s": 10.0},
                 memory_bytes=32 * 1024 * MIB - 300 * MIB)  # fmt: skip
    b.setups[1].server_version = "11.4.2-MariaDB"
    out = invoke(*write(tmp_path, a, b), "--format", "json")
    assert out.exit_code == exitcodes.OK, out.output
    differences = json.loads(out.stdout)["differences"]
    assert {d["field"]: d["severity"] for d in differences} == {
        "durations.step": "warn",
        "host.kernel": "warn",
        "server_version[je]": "warn",
    }  # a few hundred MiB of MemTotal is the same host class
    assert "warning: the runs differ: server_version[je] A 10.11.6-MariaDB vs B 11.4.2-MariaDB" \
        in out.stderr  # fmt: skip
    markdown = invoke(*write(tmp_path, a, b), "--format", "markdown").stdout
    assert "> **The runs differ:** durations.step A 5 s vs B 10 s" in markdown


def test_differences_of_cache_and_older_runs() -> None:
    a = make_run("a", seed=1, repeats=1)
    b = make_run("b", seed=1, repeats=1)
    assert comparability.differences(a, b) == []
    # A cache set per setup is refused on its own ...
    for c in b.cells:
        if c.setup == "je":
            c.cache_bytes = 512 * MIB
    (diff,) = comparability.differences(a, b)
    assert (diff.field, diff.a.value, diff.b.value, diff.severity) == (
        "cache[je/innodb]", [256 * MIB], [512 * MIB], comparability.REFUSE
    )  # fmt: skip
    assert difference_fields(diff) == {
        "field": "cache[je/innodb]", "a": "256 MiB", "b": "512 MiB", "severity": "refuse"
    }  # fmt: skip
    # ... but a dataset cache difference is not repeated for every cell.
    for c in b.cells:
        c.cache_bytes = 512 * MIB
    b.metadata.dataset = DatasetRecord(tables=4, rows=20000, cache_bytes=512 * MIB)
    assert [d.field for d in comparability.differences(a, b)] == ["dataset.cache"]
    # A run without the dataset in its metadata is read from its experiment text;
    # one that recorded nothing about its host is compared on what it has.
    old = make_run("old", seed=1, repeats=1)
    assert old.metadata.host is not None
    old.metadata.dataset, old.metadata.host.kernel = None, None
    old.experiment_text = '[dataset]\ntables = 4\nrows = 20000\ncache = "512M"\n'
    assert comparability.facts(old)["dataset.cache"].value == 512 * MIB
    assert [d.field for d in comparability.differences(a, old)] == ["dataset.cache"]
    with pytest.raises(cmp_mod.MallocbenchError, match="--allow-different"):
        cmp_mod.compare(a, old)
    assert cmp_mod.compare(a, old, allow_different=True).differences[0].field == "dataset.cache"


# ---------------------------------------------------------------- exit-code policy


def test_the_policy_is_in_the_help() -> None:
    out = CliRunner().invoke(main, ["--help"])
    assert out.exit_code == exitcodes.OK
    assert "Exit status:" in out.output
    for code in ("0", "1", "2", "3", "130"):
        assert f"\n    {code} " in out.output
    assert "--fail-on" in CliRunner().invoke(main, ["compare", "--help"]).output
    assert (exitcodes.OK, exitcodes.FINDING, exitcodes.USAGE, exitcodes.ABORTED) == (0, 1, 2, 3)
    assert exitcodes.interrupted() == 130 and exitcodes.interrupted(15) == 143


def test_an_aborted_run_exits_3(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The pipeline stands in for servers that failed; what `run` does with that is real."""
    from cli_runner import small_experiment
    from mallocbench.commands import run as run_mod
    from mallocbench.run.options import RunOutcome

    measured = make_run("e-1", seed=1, repeats=2)

    class AbortedPipeline:
        def __init__(self, *args: object, **kwargs: object) -> None:
            pass

        def execute(self) -> RunOutcome:
            return RunOutcome(measured, aborted="server je/innodb crashed at start\nlog line")

    monkeypatch.setattr(run_mod.cluster_mod, "pipeline_for", lambda *a, **k: AbortedPipeline())
    experiment = small_experiment(tmp_path)
    out = CliRunner().invoke(main, ["run", str(experiment), "--out", str(tmp_path / "o"), "-q"])
    assert out.exit_code == exitcodes.ABORTED == 3, out.output
    assert "mallocbench: error: server je/innodb crashed at start" in out.stderr
    assert "cells measured so far are kept" in out.stderr
    assert (tmp_path / "o" / "results.json").is_file()


def test_a_lost_environment_exits_3_and_bad_input_2() -> None:
    """The CLI's one mapping of errors to statuses, on a group of two stand-in commands."""
    from mallocbench.cli import Group
    from mallocbench.errors import EnvironmentLost, MallocbenchError

    group = Group("mb")

    @group.command("lost")
    def lost() -> None:
        raise EnvironmentLost("lost the connection to the results store")

    @group.command("bad")
    def bad() -> None:
        raise MallocbenchError("--budget 5x is not a duration")

    out = CliRunner().invoke(group, ["lost"])
    assert out.exit_code == exitcodes.ABORTED, out.output
    assert out.stderr == "mallocbench: error: lost the connection to the results store\n"
    assert CliRunner().invoke(group, ["bad"]).exit_code == exitcodes.USAGE


def test_statuses_are_only_the_policys() -> None:
    """No command picks an exit status of its own: sys.exit takes a named constant."""
    src = Path(__file__).resolve().parents[1] / "src" / "mallocbench"
    for path in src.rglob("*.py"):
        for match in re.finditer(r"(?:sys\.exit|ctx\.exit)\(([^)]*)\)", path.read_text()):
            assert "exitcodes." in match.group(1), f"{path}: {match.group(0)}"
