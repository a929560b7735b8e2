"""`mallocbench tune EXPERIMENT` (--on servers): bad input is one line before anything
runs, a real tune on private servers measures each setting by a run of its own and
stores it, and confirm.toml carries the workload that was tuned (the experiment's, or
the one a trace was recorded under), or says that its workload is generic."""

from __future__ import annotations

import dataclasses
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from cli_runner import experiment_text, run_cli, small_experiment
from mallocbench import allocators
from mallocbench.model.metadata import DatasetRecord, Durations, RunMetadata
from mallocbench.model.results import Cell, RunResult, SetupInfo
from mallocbench.run.loading import load
from mallocbench.store import open_store
from mallocbench.tune import driver, front, workload
from mallocbench.tune.objectives import parse_objectives
from mallocbench.tune.result import AllocatorTune, Deployed, Point
from mallocbench.tune.space import build_space

GLIBC = allocators.get("glibc")


def load_run(store_path: Path, experiment_name: str) -> RunResult:
    store = open_store(store_path, readonly=True)
    try:
        run = next(r for r in store.list_runs() if r["experiment"] == experiment_name)
        return store.load_run(str(run["run_id"]), with_samples=False)
    finally:
        store.close()


def experiment(tmp_path: Path, engines: str = '["innodb"]', knobs: str = "") -> Path:
    return small_experiment(tmp_path, file="tiny.toml", **_shape(engines, knobs))


def _shape(engines: str = '["innodb"]', knobs: str = "") -> dict[str, Any]:
    """The tuned experiment: one setup, plain glibc, on a server that takes 50 clients."""
    return {
        "name": "tiny-tune", "base": "plain", "engines": engines, "threads": 2,
        "extra": '[server]\nconfig = { max_connections = "50" }', "setups": (("plain", "glibc"),),
        "setup_extra": knobs,
    }  # fmt: skip


BAD_INPUT = [
    ({"engines": '["innodb", "myrocks"]'}, [], "has 2 engines (innodb, myrocks)"),
    ({"knobs": 'knobs = { MALLOC_ARENA_MAX = "2" }'}, [], "the base setup plain sets knobs"),
    ({}, ["--objectives", "rss,wall"], "objective 'wall' is not measured on servers"),
    ({}, ["--constraint", "p99<=5ms", "--constraint", "wall<=3"], "'wall' is not measured on"),
    ({}, ["--portion", "5s"], "--portion is for a trace"),
    ({}, ["--speed", "2", "--engine", "myrocks"], "--speed, --engine are for a trace"),
    ({}, ["--on", "replay"], "--on replay replays a trace"),
]


@pytest.mark.parametrize(("shape", "args", "message"), BAD_INPUT)
def test_bad_input_on_servers_is_one_line_before_anything_runs(
    tmp_path: Path, shape: dict[str, str], args: list[str], message: str
) -> None:
    out = tmp_path / "out"
    proc = run_cli("tune", str(experiment(tmp_path, **shape)), "--out", str(out), *args)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], proc.stderr
    assert not out.exists()


@pytest.mark.server
def test_a_real_tune_on_private_servers(tmp_path: Path) -> None:
    exp = experiment(tmp_path)
    out = tmp_path / "out"
    args = ["--allocators", "glibc", "--space", "glibc:arena_max=1..4", "--trials", "2",
            "--repeats", "2", "--seed", "1", "--out", str(out)]  # fmt: skip
    proc = run_cli("tune", str(exp), *args, "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(proc.stdout)
    assert doc["evaluation"]["method"] == "servers"
    assert doc["evaluation"]["engine"] == "innodb" and doc["evaluation"]["threads"] == 2
    assert doc["workload"]["step"] == "point-query range=100"
    assert [o["key"] for o in doc["objectives"]] == ["peak_rss_bytes", "server_cpu_us_per_op"]
    assert any(
        "run on a private server (innodb point-query range=100 at 2 client" in n
        for n in doc["notes"]
    )
    (result,) = doc["allocators"]
    assert result["trials"] == 2 and result["failed_trials"] == 0
    assert result["points"][0]["label"] == "default"
    for point in result["points"]:
        assert len(point["samples"]["peak_rss_bytes"]) == 2
        assert point["estimates"]["peak_rss_bytes"]["mean"] > 20 << 20
        assert 0 < point["estimates"]["server_cpu_us_per_op"]["mean"] < 1e5
    # Every trial is a run of its own in OUT/servers' store, and the front's repeats one
    # run of 2 blocks (the default's and each front point's servers up at once, when
    # more than one); the setting's knobs reached the server.
    db = sqlite3.connect(out / "servers" / "results.sqlite")
    cells = db.execute("SELECT run_id, status, qps FROM cells").fetchall()
    assert len(cells) == 2 + 2 * len(result["points"]) and len({c[0] for c in cells}) == 3
    assert all(status == "ok" and qps > 0 for _, status, qps in cells)
    front_run = load_run(out / "servers" / "results.sqlite", "tune-glibc-front")
    assert front_run.metadata.repeats == 2
    together = "interleaved" if len(result["points"]) > 1 else "sequential"
    assert front_run.metadata.design is not None and front_run.metadata.design.used == together
    knobs = [json.loads(d)["knobs"] for (d,) in db.execute("SELECT data FROM setups")]
    assert {} in knobs and any("glibc.malloc.arena_max=" in k.get("GLIBC_TUNABLES", "")
                               for k in knobs)  # fmt: skip
    assert {p.name for p in out.iterdir()} >= {"tune.db", "tune.json", "tune.md", "tune.html"}


def test_the_fronts_run_is_sequential_when_the_default_stands_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A front of the default alone is one setup: nothing to alternate with, so its run
    is recorded as sequential; two or more settings are up at once, unless the
    experiment asks for one server at a time."""
    from mallocbench.tune.evaluate import ServerEvaluator

    asked: list[tuple[int, str]] = []

    def execute(_self: ServerEvaluator, exp: Any) -> RunResult:
        asked.append((len(exp.setups), exp.design))
        return RunResult(run_id="r", experiment=exp.name, base_setup=exp.base, cells=[])

    monkeypatch.setattr(ServerEvaluator, "_execute", execute)
    evaluator = ServerEvaluator(load(experiment(tmp_path)), tmp_path / "out")
    assert evaluator.measure_blocks(GLIBC, [{}], 2) == [[None], [None]]
    evaluator.measure_blocks(GLIBC, [{}, {"arena_max": "1"}], 2)
    evaluator.experiment = dataclasses.replace(evaluator.experiment, design="sequential")
    evaluator.measure_blocks(GLIBC, [{}, {"arena_max": "1"}], 2)
    assert asked == [(1, "sequential"), (2, "interleaved"), (2, "sequential")]


def test_a_changed_workload_is_another_study(tmp_path: Path) -> None:
    """--resume compares the evaluation's description (search.Settings), so it must
    change with anything that changes what a setting measures."""
    from mallocbench.tune.evaluate import ServerEvaluator

    path = experiment(tmp_path)
    before = ServerEvaluator(load(path), tmp_path / "out").describe()
    for old, new in (("step = 1", "step = 2"), ("rows = 2000", "rows = 3000"),
                     ("threads = [2]", "threads = [4]")):  # fmt: skip
        path.write_text(experiment_text(**_shape()).replace(old, new))
        assert ServerEvaluator(load(path), tmp_path / "out").describe() != before, new


# --- the confirmation's workload ------------------------------------------------------


def plan_for(tmp_path: Path, known: workload.Workload | None) -> driver.Plan:
    objectives = parse_objectives("rss,time")
    return driver.Plan(
        trace="t", evaluator_name="e", objectives=objectives, constraints=[],
        spaces={"glibc": build_space(GLIBC, [])}, tuned=[GLIBC], out=tmp_path, resume=False,
        trials=2, budget_s=None, repeats=2, min_effect=0.03, workload=known,
    )  # fmt: skip


ARENA_1 = {"GLIBC_TUNABLES": "glibc.malloc.arena_max=1"}
CHOSEN = [
    AllocatorTune(
        "glibc", None, None, [], 2, 0, [], [], {"memory": "#3"}, True,
        {"memory": Deployed("#3", ARENA_1, "", "", {})},
    )
]  # fmt: skip


def confirmation(tmp_path: Path, known: workload.Workload | None) -> tuple[str, Any]:
    text = driver.confirmation_toml(plan_for(tmp_path, known), CHOSEN)
    assert text is not None
    path = tmp_path / "confirm.toml"
    path.write_text(text)
    return text, load(path)


def test_the_confirmation_runs_the_experiment_that_was_tuned(tmp_path: Path) -> None:
    known = workload.from_experiment(load(experiment(tmp_path)), "tiny.toml")
    _, confirm = confirmation(tmp_path, known)
    assert [e.name for e in confirm.engines] == ["innodb"]
    assert [s.label for s in confirm.steps] == ["point-query range=100"]
    assert confirm.threads == [2]
    assert (confirm.dataset.tables, confirm.dataset.rows) == (1, 2000)
    assert confirm.dataset.cache_bytes == 32 << 20 and confirm.duration_s == 1
    assert confirm.server_config == {"max_connections": "50"}
    assert [s.name for s in confirm.setups] == ["glibc", "glibc-memory"]
    assert confirm.setup("glibc-memory").knobs == {"GLIBC_TUNABLES": "glibc.malloc.arena_max=1"}
    assert confirm.base == "glibc" and confirm.min_effect == pytest.approx(0.03)


def test_the_confirmation_runs_the_workload_a_trace_was_recorded_under(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    trace = run_dir / "traces" / "rec-myrocks-random-points_range_100-16t-r1.mbt"
    trace.parent.mkdir(parents=True)
    trace.write_bytes(b"")
    recorded = RunResult(
        run_id="rec-1",
        experiment="rec",
        base_setup="rec",
        metadata=RunMetadata(
            dataset=DatasetRecord(tables=8, rows=250000, cache_bytes=64 << 20),
            durations=Durations(warmup_s=5, max_warmup_s=30, step_s=120),
        ),
        setups=[SetupInfo(name="rec", allocator="glibc", config={"rocksdb_max_open_files": "64"})],
        cells=[
            Cell("rec", "myrocks", "random-points range=100", 16, 0, trace=None),
            Cell("rec", "myrocks", "random-points range=100", 16, 1, trace=f"traces/{trace.name}"),
        ],  # fmt: skip
    )
    store = open_store(run_dir / "results.sqlite")
    store.save_run(recorded)
    store.close()
    known = workload.of_trace(trace)
    assert known is not None and "run rec-1" in known.source
    text, confirm = confirmation(tmp_path, known)
    assert "GENERIC" not in text
    assert [e.name for e in confirm.engines] == ["myrocks"] and confirm.threads == [16]
    assert [s.label for s in confirm.steps] == ["random-points range=100"]
    assert (confirm.dataset.tables, confirm.dataset.rows) == (8, 250000)
    assert confirm.warmup_s == 5 and confirm.duration_s == 120
    assert confirm.setup("glibc").config == {"rocksdb_max_open_files": "64"}
    assert workload.of_trace(run_dir / "elsewhere.mbt") is None


def test_an_unknown_workload_is_generic_and_says_so(tmp_path: Path) -> None:
    text, confirm = confirmation(tmp_path, None)
    assert "GENERIC" in text and "--workload" in text
    assert [e.name for e in confirm.engines] == ["innodb"]


def test_repeats_in_blocks_are_compared_block_by_block() -> None:
    """A host whose load swings between blocks hides a 5% lower RSS from independent
    repeats; paired by block (what the blocked design is for) it is a finding."""
    rss = parse_objectives("rss,time", "servers")[0]
    load = [1.0, 1.6, 0.7, 1.3]
    default = Point("default", 0, True, {}, {})
    lower = Point("#1", 1, False, {"arena_max": "1"}, {})
    default.samples[rss.key] = [100e6 * x for x in load]
    lower.samples[rss.key] = [95e6 * x * (1.002 if i % 2 else 0.998) for i, x in enumerate(load)]
    unpaired = front.compare(lower, default, rss, 0.02, 0.95)
    assert unpaired.verdict == "not significant" and not unpaired.better
    default.blocks[rss.key] = lower.blocks[rss.key] = [0, 1, 2, 3]
    paired = front.compare(lower, default, rss, 0.02, 0.95)
    assert paired.better and 0.94 < paired.low < paired.ratio < paired.high < 0.96


def test_the_blocks_error_is_pooled_over_the_front_as_run_pools_its_setups() -> None:
    from mallocbench.analysis import stats

    rss = parse_objectives("rss", "servers")[0]
    load, wobble = [1.0, 1.6, 0.7], [[1.0, 1.01, 0.99], [0.99, 1.0, 1.01], [1.01, 0.99, 1.0]]
    points = [Point(f"p{i}", i, i == 0, {}, {}) for i in range(3)]
    for point, level, noise in zip(points, [100e6, 95e6, 97e6], wobble, strict=True):
        point.samples[rss.key] = [level * x * w for x, w in zip(load, noise, strict=True)]
        point.blocks[rss.key] = [0, 1, 2]
    pool = front.pool_of(points, rss.key)
    assert pool is not None and pool.df == 4  # (3 points - 1) x (3 blocks - 1)
    pooled = front.compare(points[1], points[0], rss, 0.02, 0.95, pool)
    by_run = stats.blocked_ratios(
        dict(enumerate(points[0].samples[rss.key])),
        {f"p{i}": dict(enumerate(points[i].samples[rss.key])) for i in (1, 2)},
    )["p1"]
    assert (pooled.ratio, pooled.low, pooled.high) == pytest.approx(
        (by_run.ratio, by_run.low, by_run.high)
    )
    alone = front.compare(points[1], points[0], rss, 0.02, 0.95)  # 2 df: a wider interval
    assert alone.high - alone.low > pooled.high - pooled.low
    front.judge(points, [rss], [], 0.02)
    assert points[1].versus_default["rss"].better and "p1" in points[0].dominated_by
