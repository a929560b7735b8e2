"""Issue 45's confirmation on the recorded workload and the production-side check.

A server started by hand, loaded by sysbench with a known mix, recorded with
`record --pid`: what the server said of its load is kept beside the trace, the
confirmation experiment derived from it follows the mix (a read-only run derives read
steps only), its clients and tables, loads as an experiment and is planned within its
time; and `check --against` on the same, unchanged server says the prediction held.
The derivation's rules (scaling, rare statements, the time) are checked on loads
written out here, since no test server holds a table too big to load.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from cli_runner import run_cli
from mallocbench import allocators
from mallocbench.analysis import held
from mallocbench.replay import workload
from mallocbench.report.advise import confirmation_notes, confirmation_section
from mallocbench.run.loading import load as load_experiment
from mallocbench.tune import confirm, driver
from mallocbench.tune.advise_confirm import Confirmation
from mallocbench.tune.objectives import parse_objectives
from mallocbench.tune.result import AllocatorTune, Deployed
from mallocbench.tune.space import build_space
from test_advise_dba import _sysbench, hand_started, prepare

__all__ = ["hand_started"]  # the fixture, used by name

GLIBC = allocators.get("glibc")
CHOSEN = [
    AllocatorTune(
        "glibc", None, None, [], 2, 0, [], [], {"memory": "#3"}, True,
        {"memory": Deployed("#3", {"GLIBC_TUNABLES": "glibc.malloc.arena_max=1"}, "", "", {})},
    )
]  # fmt: skip


def _confirmation(tmp_path: Path, trace: Path) -> tuple[str, Any]:
    """tune's confirm.toml for `trace`, and the experiment it loads as."""
    plan = driver.Plan(
        trace=str(trace), evaluator_name="e", objectives=parse_objectives("rss,time"),
        constraints=[], spaces={"glibc": build_space(GLIBC, [])}, tuned=[GLIBC], out=tmp_path,
        resume=False, trials=2, budget_s=None, repeats=2, min_effect=0.03,
    )  # fmt: skip
    text = driver.confirmation_toml(plan, CHOSEN)
    assert text is not None
    path = tmp_path / f"{trace.stem}-confirm.toml"
    path.write_text(text)
    return text, load_experiment(path)


def _record(pid: int, out: Path, seconds: str = "5") -> None:
    proc = run_cli("record", "--pid", str(pid), "--seconds", seconds, "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "description of its load is not kept" not in proc.stderr, proc.stderr


@pytest.mark.server
def test_a_recorded_mix_becomes_its_confirmation_and_the_check_holds(
    hand_started: tuple[subprocess.Popen[bytes], Path], tmp_path: Path
) -> None:
    server, sock = hand_started
    prepare(sock)
    traces = {}
    for mix in ("oltp_read_only", "oltp_read_write"):
        command = _sysbench(sock, "run", "--threads=2", "--rate=60", "--time=15")
        command[1] = mix
        load = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            time.sleep(1.5)
            traces[mix] = tmp_path / f"{mix}.mbt"
            _record(server.pid, traces[mix])
        finally:
            load.terminate()  # its --time only bounds a slow start of record
            load.wait(timeout=60)

    kept = workload.load(traces["oltp_read_only"])
    assert kept is not None and kept.described, kept
    assert {t["name"] for t in kept.tables} == {"sbtest1", "sbtest2"}
    assert len(kept.samples) >= 4 and all(s.rss for s in kept.samples)

    text, read_only = _confirmation(tmp_path, traces["oltp_read_only"])
    assert text.count(confirm.DERIVED) == 1 and "GENERIC" not in text
    assert [s.definition.writes for s in read_only.steps] == [False, False], text
    assert {s.name for s in read_only.steps} == {"point-query", "range-notcovered-pk"}
    # sysbench's 2 clients, 2 tables of 2000 rows (TABLE_ROWS is InnoDB's estimate)
    assert read_only.threads == [2] and read_only.dataset.tables == 2
    assert 1500 <= read_only.dataset.rows <= 2500
    assert read_only.dataset.cache_bytes == 64 << 20
    assert [e.name for e in read_only.engines] == ["innodb"]
    assert read_only.server_config["sort_buffer_size"] == kept.variables["sort_buffer_size"]
    assert [s.name for s in read_only.setups] == ["glibc", "glibc-memory"]

    derived, problem = confirm.for_trace(traces["oltp_read_write"], 2)
    assert derived is not None and problem is None
    weights = dict(derived.steps)
    # oltp_read_write: 10 point reads, 4 ranges of 100 rows, 2 updates, a delete and an
    # insert in each transaction of 18 statements
    assert weights["point-query"] == pytest.approx(10 / 18, abs=0.04), weights
    assert weights["range-notcovered-pk range=100"] == pytest.approx(4 / 18, abs=0.04)
    assert weights["update-nonindex"] == pytest.approx(2 / 18, abs=0.03)
    assert weights["insert"] == pytest.approx(1 / 18, abs=0.02)
    assert weights["delete"] == pytest.approx(1 / 18, abs=0.02)
    assert derived.planned_s is not None and derived.planned_s <= confirm.DEFAULT_BUDGET_S
    text, read_write = _confirmation(tmp_path, traces["oltp_read_write"])
    assert any(s.definition.writes for s in read_write.steps)
    assert confirm.planned_seconds(text) <= confirm.DEFAULT_BUDGET_S

    dry = run_cli("run", str(tmp_path / "oltp_read_write-confirm.toml"), "--dry-run")
    assert dry.returncode == 0, dry.stderr

    load = subprocess.Popen(
        _sysbench(sock, "run", "--threads=2", "--rate=60", "--time=30"),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        time.sleep(1.5)
        proc = run_cli("check", "--pid", str(server.pid), "--against",
                       str(traces["oltp_read_write"]), "--watch", "8s", "--json")  # fmt: skip
    finally:
        load.terminate()
        load.wait(timeout=60)
    assert proc.returncode == 0, proc.stderr
    checked = json.loads(proc.stdout)
    assert checked["held"] == "held", checked
    rss = checked["rss_ratio"]
    assert rss["low"] <= rss["point"] <= rss["high"] and 0.9 < rss["point"] < 1.1
    assert checked["line"].startswith("RSS ") and checked["line"].endswith(": held")
    assert checked["qps_ratio"]["point"] > 0.3, checked


# --- the derivation's rules, on loads written out ------------------------------------------


def _load(counters: dict[str, int], rows: int = 2000, tables: int = 2, **kw: Any) -> Any:
    return workload.ServerLoad(
        window_s=10,
        variables={"innodb_buffer_pool_size": str(256 << 20), "sort_buffer_size": "262144"},
        tables=[
            {
                "schema": "db",
                "name": f"t{i}",
                "engine": "InnoDB",
                "rows": rows,
                "data_bytes": rows * 200,
                "index_bytes": 0,
            }
            for i in range(tables)
        ],  # fmt: skip
        counters=counters,
        samples=[workload.Sample(t=i, rss=100 << 20, connected=12, running=3) for i in range(10)],
        **kw,
    )


def test_a_big_server_is_scaled_down_to_load_in_its_time_and_says_so() -> None:
    load = _load({"Com_select": 1000, "Com_update": 1000}, rows=50_000_000, tables=40)
    derived = confirm.derive(load, setups=2, budget_s=600)
    assert derived.tables == confirm.MAX_TABLES
    loaded = derived.tables * derived.rows
    assert loaded <= 600 * confirm.LOAD_SHARE * confirm.LOAD_ROWS_PER_S
    said = "\n".join(derived.approximations)
    assert "SCALED DOWN" in said and "40 tables are loaded as 16" in said
    assert derived.cache_bytes < 256 << 20  # scaled with the data
    assert derived.planned_s is not None and derived.planned_s <= 600
    assert derived.threads == 12
    text = "\n".join(derived.lines())
    assert "within the 10 min asked" in text
    assert "SCALED DOWN" in text and all(f"#   - {a}" in text for a in derived.approximations)


def test_rare_statements_and_ddl_get_no_step_and_are_named() -> None:
    load = _load({"Com_select": 980, "Com_insert": 10, "Com_create_table": 5})
    derived = confirm.derive(load, setups=2)
    assert [label for label, _ in derived.steps] == ["point-query"]
    said = "\n".join(derived.approximations)
    assert "inserts (1.0%)" in said and "5 DDL statements" in said


def test_point_reads_of_many_keys_each_are_listed_as_approximated(tmp_path: Path) -> None:
    """A MyRocks server running random-points (an IN list of 100 ids per SELECT): its
    reads become point-query, one key each, and the confirmation lists that mapping
    where advise shows every approximation (advise.md, advise.json, the TOML)."""
    load = _load({"Com_select": 1000, "Handler_read_key": 100_000, "Com_update": 200})
    for table in load.tables:
        table["engine"] = "ROCKSDB"
    derived = confirm.derive(load, setups=2, budget_s=600, source="prod.mbt.workload.json")
    assert derived.engines == ["myrocks"] and dict(derived.steps)["point-query"] > 0.5
    said = [a for a in derived.approximations if a.startswith("point reads run as point-query")]
    assert len(said) == 1, derived.approximations
    assert "looked up about 100 keys each" in said[0] and "random-points" in said[0]
    path = tmp_path / "confirm.toml"
    c = Confirmation(path, tmp_path / "confirm", "je-tuned-3", "glibc", 600, derived)
    assert f"- {said[0]}" in "\n".join(confirmation_section(c))
    assert said[0] in json.loads(json.dumps(c.to_dict()))["workload"]["approximations"]
    assert f"#   - {said[0]}" in "\n".join(derived.lines())
    # One key per read is the mapping still, and listed as one.
    single = confirm.derive(_load({"Com_select": 1000, "Handler_read_key": 1000}), setups=2)
    assert any(
        a.startswith("point reads run as point-query") and "keys each" not in a
        for a in single.approximations
    ), single.approximations


def test_a_time_too_short_for_any_plan_says_so() -> None:
    derived = confirm.derive(_load({"Com_select": 100, "Com_update": 50}), setups=4, budget_s=60)
    assert derived.planned_s is not None and derived.planned_s > 60
    assert "over the 1 min asked" in derived.approximations[-1]


def test_held_needs_the_whole_interval_within_the_prediction() -> None:
    steady = [100.0 + (i % 3) for i in range(30)]
    lower = [91.0 + (i % 3) for i in range(30)]
    r = held.window_ratio(lower, steady)
    assert r.low <= r.point <= r.high and r.point == pytest.approx(0.91, abs=0.01)
    assert held.held(r, held.band((0.90, 0.88, 0.92), 0.10)) is held.Held.HELD
    assert held.held(r, held.band((1.30, 1.25, 1.35), 0.10)) is held.Held.NOT_HELD
    assert held.held(held.window_ratio([90.0], steady), (0.8, 1.0)) is held.Held.NO_INTERVAL
    noisy = [60.0, 70.0, 130.0, 140.0, 80.0, 75.0, 120.0, 135.0]
    assert held.held(held.window_ratio(noisy, steady), (0.9, 1.1)) is held.Held.UNDECIDED
    assert held.rates([(0, 10), (1, 31), (2.0, 52), (3, None)]) == [20.0, 20.0]


def test_check_against_refuses_a_trace_without_its_window_in_one_line(tmp_path: Path) -> None:
    trace = tmp_path / "old.mbt"
    trace.write_bytes(b"")
    proc = run_cli("check", "--pid", "1", "--against", str(trace), "--watch", "1s")
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "old.mbt.workload.json" in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr


def test_advise_lists_the_confirmations_steps_weights_and_approximations(tmp_path: Path) -> None:
    """advise.md and advise.json say where confirm.toml is, each step with its weight and
    the statements it stands for, and every approximation; the terminal two lines."""
    load = _load({"Com_select": 700, "Handler_read_next": 20_000, "Com_update": 300})
    derived = confirm.derive(load, setups=2, budget_s=600, source="prod.mbt.workload.json")
    path = tmp_path / "advise-out" / "confirm.toml"
    c = Confirmation(path, tmp_path / "advise-out" / "confirm", "je-tuned-3", "glibc", 600, derived)
    weights = dict(derived.steps)
    assert weights == {
        "point-query": pytest.approx(0.5),
        "range-notcovered-pk range=100": pytest.approx(0.2),
        "update-nonindex": pytest.approx(0.3),
    }
    md = "\n".join(confirmation_section(c))
    assert f"`mallocbench run {path} --out {tmp_path / 'advise-out' / 'confirm'}`" in md
    assert "- `point-query`: 0.50 (the point reads)" in md
    assert "- `range-notcovered-pk range=100`: 0.20 (the range reads)" in md
    assert "- `update-nonindex`: 0.30 (the updates)" in md
    assert len(derived.approximations) >= 3  # the reads told apart, the updates, the clients
    assert all(f"- {a}" in md for a in derived.approximations)
    doc = json.loads(json.dumps(c.to_dict()))
    assert doc["path"] == str(path) and doc["recorded_load"] and doc["confirm_time_s"] == 600
    assert [(s["step"], s["kind"]) for s in doc["workload"]["steps"]] == [
        ("point-query", "point"), ("range-notcovered-pk range=100", "range"),
        ("update-nonindex", "update"),
    ]  # fmt: skip
    assert doc["workload"]["approximations"] == derived.approximations
    notes = confirmation_notes(c)
    assert len(notes) == 2 and str(path) in notes[0] and "je-tuned-3" in notes[0]
    assert "confirm.toml runs the recorded load" in notes[1]
    assert f"{len(derived.approximations)} approximations are in advise.md" in notes[1]
    # a trace without a description: the file is generic, and says so in the same places
    generic = Confirmation(path, path.parent / "confirm", "je-tuned-3", "glibc", 600)
    assert "runs a generic workload" in confirmation_notes(generic)[1]
    assert "Approximations" not in "\n".join(confirmation_section(generic))
    assert confirmation_notes(None) == [] and confirmation_section(None) == []


def test_tune_confirm_time_fits_the_derived_confirmation_as_advise_does(tmp_path: Path) -> None:
    """tune --confirm-time is advise's option (one declaration, one parsing) and plans
    the confirmation derived from the recorded load within it."""
    from mallocbench.commands.advise import advise
    from mallocbench.commands.tune import tune

    trace = tmp_path / "prod.mbt"
    load = _load({"Com_select": 600, "Com_update": 400}, rows=20_000, tables=4)
    workload.sidecar(trace).write_text(json.dumps(load.to_dict()))
    planned = {}
    for minutes in (5, 15):
        plan = driver.Plan(
            trace=str(trace), evaluator_name="e", objectives=parse_objectives("rss,time"),
            constraints=[], spaces={"glibc": build_space(GLIBC, [])}, tuned=[GLIBC],
            out=tmp_path, resume=False, trials=2, budget_s=None, repeats=2, min_effect=0.03,
            confirm_s=minutes * 60,
        )  # fmt: skip
        text = driver.confirmation_toml(plan, CHOSEN)
        assert text is not None and confirm.DERIVED in text
        assert f"within the {minutes} min asked" in text, text
        experiment = load_experiment_text(tmp_path / f"c{minutes}.toml", text)
        planned[minutes] = confirm.planned_seconds(text)
        assert planned[minutes] <= minutes * 60
        assert experiment.threads == [12]
    assert planned[5] < planned[15]  # the longer time holds longer steps or more repeats
    (t_opt,) = [p for p in tune.params if p.name == "confirm_s"]
    (a_opt,) = [p for p in advise.params if p.name == "confirm_s"]
    assert (t_opt.opts, t_opt.default, t_opt.help) == (a_opt.opts, a_opt.default, a_opt.help)


@pytest.mark.parametrize("command", ["tune", "advise"])
def test_a_bad_confirm_time_is_one_line(command: str, tmp_path: Path) -> None:
    proc = run_cli(command, str(tmp_path / "x.mbt"), "--confirm-time", "soon")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "--confirm-time" in proc.stderr and "soon" in proc.stderr


def test_tune_on_servers_refuses_a_confirm_time_it_would_ignore(tmp_path: Path) -> None:
    proc = run_cli("tune", str(tmp_path / "x.toml"), "--confirm-time", "5m")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "--confirm-time is for a trace" in proc.stderr


def load_experiment_text(path: Path, text: str) -> Any:
    path.write_text(text)
    return load_experiment(path)
