"""Soak events and the ratchet: the settle rule and the step arithmetic on recorded RSS
series, bad [[soak.event]] specs refused in one line at their place, and one short real
soak on a private server that runs every action beside its load, a failing statement
among them."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from mallocbench.analysis.ratchet import (
    END,
    NEXT_EVENT,
    SETTLED,
    TIMEOUT,
    StepReading,
    gap_slopes,
    measure_events,
    settle,
    step_reading,
    t_interval,
)
from mallocbench.errors import MallocbenchError
from mallocbench.model.results import RunResult
from mallocbench.run import loading as loading_mod
from mallocbench.soak.runner import SoakSpec, soak_experiment

MiB = float(1 << 20)

# --- the settle rule on recorded series ---------------------------------------------------


def test_settled_when_a_window_stays_within_the_band() -> None:
    # RSS jumps to 300 MiB during the event (ends at 10 s), falls back to 210 with a
    # ringing whose last swing is at 23 s; 1% of 210 MiB is 2.1 MiB.
    series = [(float(t), 300 * MiB if t < 12 else 210 * MiB + (8 * MiB if t < 25 and t % 2 else 0))
              for t in range(0, 100)]  # fmt: skip
    after, at, how = settle(series, 10.0, 100.0, END)
    assert how == SETTLED and at == 24.0
    assert after == pytest.approx(210 * MiB)


def test_never_settling_meets_the_timeout_or_the_next_event() -> None:
    # A sawtooth of +-5% never stays within 1% for 10 s.
    series = [(float(t), (200 + (10 if t % 2 else -10)) * MiB) for t in range(0, 200)]
    after, at, how = settle(series, 10.0, 200.0, END)
    assert how == TIMEOUT and at == pytest.approx(60.0)  # the last 10 s before end + 60 s
    assert after == pytest.approx(200 * MiB, rel=0.01)
    _, _, how = settle(series, 10.0, 40.0, NEXT_EVENT)
    assert how == NEXT_EVENT
    _, _, how = settle(series, 10.0, 30.0, END)
    assert how == END


def test_a_gap_in_the_samples_is_no_evidence_of_calm() -> None:
    # Between two segments no sample is taken: a window holding two samples is not calm.
    series = [(float(t), 200 * MiB) for t in (11, 19)] + [
        (float(t), (200 + (10 if t % 2 else -10)) * MiB) for t in range(20, 80)
    ]
    _, _, how = settle(series, 10.0, 200.0, END)
    assert how == TIMEOUT


def test_the_settle_band_follows_the_rise_with_a_floor() -> None:
    from mallocbench.analysis.ratchet import settle_band

    assert settle_band(200 * MiB, 0.0) == pytest.approx(0.1 * MiB)  # 0.05% of RSS
    assert settle_band(200 * MiB, 1 * MiB) == pytest.approx(0.1 * MiB)
    assert settle_band(200 * MiB, 256 * MiB) == pytest.approx(12.8 * MiB)  # 5% of the rise
    # After a 250 MiB rise the allocator hands memory back in swings of +-3 MiB around
    # 205 MiB: settled within the event's own scale, not held to a band of its RSS.
    series = [(float(t), (455 if t < 10 else 205 + (3 if t % 2 else -3)) * MiB)
              for t in range(0, 120)]  # fmt: skip
    after, at, how = settle(series, 10.0, 120.0, END, rise_bytes=250 * MiB)
    assert how == SETTLED and at == 10.0 and after == pytest.approx(205 * MiB, abs=0.5 * MiB)
    _, _, how = settle(series, 10.0, 120.0, END)  # no rise known: the floor alone
    assert how == TIMEOUT


def recorded_dump_lifetimes() -> dict[str, tuple[list[tuple[float, float]], list, float]]:
    """Per setup of the recorded examples/dump-ratchet.toml run: its RSS series, its five
    dumps and its server's start."""
    from mallocbench.analysis.soak import soak_setups

    fixture = Path(__file__).parent / "fixtures" / "results-dump-ratchet.json"
    result = RunResult.from_dict(json.loads(fixture.read_text()))
    sessions = {s.id: s for s in result.sessions}
    out = {}
    for soak in soak_setups(result):
        (life,) = soak.lifetimes
        out[soak.setup] = (life.series, sessions[life.session].events, life.started_at)
    return out


def test_recorded_dumps_settle_and_a_decay_is_waited_for() -> None:
    lifetimes = recorded_dump_lifetimes()
    for setup, (series, events, started) in lifetimes.items():
        measures = measure_events(series, events, started, "s")
        # Steady load on ~200 MiB stays within the floor: every dump's RSS settles.
        assert [m.settled_by for m in measures] == [SETTLED] * 5, setup
    # jemalloc with 5 s decays hands ~0.4 MiB back over the seconds after its second dump
    # (ended at 93 s): the band waits for it, where 1% of RSS took the first window.
    series, events, started = lifetimes["jemalloc-decay"]
    second = measure_events(series, events, started, "s")[1]
    assert second.settle_s is not None and second.settle_s - second.end_s > 5
    later = [v for t, v in series if 120 <= t < 135]  # RSS just before the third dump
    assert second.after_bytes == pytest.approx(sum(later) / len(later), abs=0.1 * MiB)
    assert second.peak_bytes is not None and second.after_bytes is not None
    assert second.peak_bytes - second.after_bytes > 0.3 * MiB


def ratcheting(step_mib: float, drift_mib_h: float, events: int = 6, seed: int = 3):
    """RSS with an event every 60 s that leaves `step_mib` behind, drift between, noise."""
    rng = np.random.default_rng(seed)
    t = np.arange(0, 60 * (events + 1), dtype=float)
    level = 200 * MiB + drift_mib_h * MiB / 3600 * t
    starts = [60.0 * (i + 1) for i in range(events)]
    for start in starts:
        level = level + np.where(t >= start + 3, step_mib * MiB, 0.0)
        level = level + np.where((t >= start) & (t < start + 3), 40 * MiB, 0.0)  # the peak
    rss = level + rng.normal(0, 0.2 * MiB, len(t))
    records = [{"action": "dump", "label": "dump", "status": "ok", "start": 1000 + s,
                "end": 1000 + s + 2.0} for s in starts]  # fmt: skip
    return list(zip(t.tolist(), rss.tolist(), strict=True)), records


def test_the_step_and_the_slope_between_events_are_kept_apart() -> None:
    series, records = ratcheting(step_mib=8, drift_mib_h=30)
    measures = measure_events(series, records, 1000.0, "s")
    assert [m.settled_by for m in measures] == [SETTLED] * 6
    assert all(m.peak_bytes and m.peak_bytes > m.before_bytes + 30 * MiB for m in measures)  # type: ignore[operator]
    steps = t_interval([m.step_bytes for m in measures if m.step_bytes is not None])
    assert steps is not None and steps.low is not None and steps.high is not None
    # The step holds the drift over the settle window only (~0.1 MiB here).
    assert steps.low <= 8.3 * MiB and steps.high >= 7.9 * MiB and steps.low > 0
    assert step_reading(steps) == StepReading.UP
    between = t_interval(gap_slopes(series, measures))
    assert between is not None and between.low is not None and between.high is not None
    assert between.low * 3600 / MiB < 30 < between.high * 3600 / MiB


def test_no_step_shows_an_interval_holding_zero() -> None:
    series, records = ratcheting(step_mib=0, drift_mib_h=0)
    measures = measure_events(series, records, 1000.0, "s")
    steps = t_interval([m.step_bytes for m in measures if m.step_bytes is not None])
    assert steps is not None and steps.low is not None and steps.high is not None
    assert steps.low < 0 < steps.high
    assert step_reading(steps) == StepReading.NONE_SHOWN
    assert t_interval([1.0]) is not None and t_interval([1.0]).low is None  # type: ignore[union-attr]
    assert step_reading(t_interval([1.0])) == StepReading.TOO_FEW
    assert step_reading(t_interval([-3.0, -2.0, -2.5])) == StepReading.DOWN


# --- bad specs: one line, at their place ----------------------------------------------------

BASE = """name = "ev"
engines = ["innodb"]
steps = ["point-query"]
threads = [2]
[dataset]
tables = 1
rows = 500
cache = "32M"
[[setup]]
name = "a"
allocator = "glibc"
"""


@pytest.mark.parametrize(
    ("event", "line", "message"),
    [
        ('action = "defrag"\nevery = "1m"', 13, "is not an event: use one of dump"),
        ('action = "dump"', 12, "needs one of every"),
        ('action = "dump"\nevery = "1m"\nat = "2m"', 12, "needs one of every"),
        ('action = "dump"\nevery = "2s"', 14, "too often"),
        ('action = "dump"\nevery = "soon"', 14, "is not a duration"),
        ('action = "dump"\nat = "1m"\ntable = "t"', 15, "unknown key 'table'"),
        ('action = "sql"\nat = "1m"\nsql = "SELECT 1; DROP TABLE x"', 15, "more than one"),
        ('action = "sql"\nat = "1m"', 12, "needs its statement"),
        ('action = "alter"\nat = "1m"\ntable = "a`b"', 15, "is not a table name"),
        ('action = "connect-storm"\nat = "1m"\nconnections = 0', 15, "from 1 to 500"),
        ('action = "big-sort"\nat = "1m"\nsort_buffer = "lots"', 15, "sort_buffer"),
    ],
)
def test_a_bad_event_is_refused_in_one_line_at_its_place(
    tmp_path: Path, event: str, line: int, message: str
) -> None:
    path = tmp_path / "ev.toml"
    path.write_text(BASE + "[[soak.event]]\n" + event + "\n")
    with pytest.raises(MallocbenchError) as info:
        loading_mod.load(path)
    text = str(info.value)
    assert "\n" not in text and message in text, text
    assert text.startswith(f"{path}:{line}:"), text


def test_an_event_after_the_soak_and_events_under_run_are_refused(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from mallocbench.cli import main

    path = tmp_path / "ev.toml"
    path.write_text(BASE + '[[soak.event]]\naction = "dump"\nat = "2m"\n')
    loaded = loading_mod.load(path)
    assert loaded.events[0].due_times(300.0) == [120.0]
    with pytest.raises(MallocbenchError, match="due after the soak's 60 s end"):
        soak_experiment(loaded, SoakSpec(60.0, 20.0))
    done = CliRunner().invoke(main, ["run", str(path), "--dry-run"])
    assert done.exit_code != 0 and "use `mallocbench soak" in done.output, done.output
    assert len(done.output.strip().splitlines()) == 1, done.output


# --- every action on a real private server, beside a soak's load ---------------------------

EVENTS = """
[[soak.event]]
action = "sql"
at = "2s"
sql = "SELECT * FROM no_such_table"
[[soak.event]]
action = "dump"
at = "4s"
[[soak.event]]
action = "backup"
at = "6s"
[[soak.event]]
action = "alter"
at = "8s"
[[soak.event]]
action = "optimize"
at = "10s"
[[soak.event]]
action = "big-sort"
at = "12s"
sessions = 3
[[soak.event]]
action = "connect-storm"
at = "14s"
connections = 40
[[soak.event]]
action = "sql"
at = "16s"
sql = "SELECT COUNT(*) FROM sbtest1"
"""


@pytest.mark.server
def test_every_action_runs_beside_the_load_and_a_failure_is_an_outcome(tmp_path: Path) -> None:
    from mallocbench.analysis.run_analysis import analyze
    from mallocbench.report.charts import run_charts
    from mallocbench.report.ratchet import markdown_lines, ratchet_json
    from mallocbench.run.options import RunOptions
    from mallocbench.soak.runner import soak_metadata, soak_pipeline

    path = tmp_path / "ev.toml"
    path.write_text(BASE + EVENTS)
    spec = SoakSpec(20.0, 10.0)
    experiment = soak_experiment(loading_mod.load(path), spec)
    options = RunOptions(out_dir=tmp_path / "out", extra_metadata=soak_metadata(experiment, spec))
    outcome = soak_pipeline(experiment, options).execute()
    assert outcome.aborted is None, outcome.aborted
    result = outcome.result
    # The soak went on past the failed statement: both segments measured.
    assert [(c.repeat, c.status) for c in result.cells] == [(0, "ok"), (1, "ok")]
    (session,) = result.sessions
    events = {e["label"].split(" ")[0] if e["action"] != "sql" else e["label"]: e
              for e in session.events}  # fmt: skip
    failed = events["sql SELECT * FROM no_such_table"]
    assert failed["status"] == "failed" and "1146" in failed["error"], failed
    for name in ("dump", "backup", "alter", "optimize", "big-sort", "connect-storm",
                 "sql SELECT COUNT(*) FROM sbtest1"):  # fmt: skip
        assert events[name]["status"] == "ok", events[name]
        assert session.started_at is not None
        assert session.started_at < events[name]["start"] <= events[name]["end"]
    assert "sort_buffer_size 33554432 bytes, 500 rows sorted" in events["big-sort"]["detail"]
    assert events["connect-storm"]["detail"] == "40 connections"
    assert int(events["dump"]["detail"].split()[0]) > 10_000  # the dataset's rows
    # Stored with the session, kept by results.json; measured in the ratchet table.
    saved = json.loads(json.dumps(result.to_dict()))
    assert len(saved["sessions"][0]["events"]) == 8
    assert RunResult.from_dict(saved).sessions[0].events == session.events
    analysis = analyze(result)
    (ratchet,) = analysis.ratchets
    assert {m.label for m in ratchet.events} == {e["label"] for e in session.events}
    # RSS before each event is measured wherever the load's samples cover the 10 s before
    # it (not in the pause between segments, nor before the first on a slow host).
    (soak,) = analysis.soaks
    series = soak.lifetimes[0].series
    previous_end = -1e9
    for m in ratchet.events:
        since = max(m.start_s - 10, previous_end)  # never inside the event before
        covered = any(since <= t < m.start_s for t, _ in series)
        assert (m.before_bytes is not None) == covered, m
        previous_end = m.end_s
    assert sum(m.before_bytes is not None for m in ratchet.events) >= 3
    _, charts = run_charts(analysis)
    (soak_chart,) = [c for c in charts if c.id == "chart-soak-innodb"]
    marks = [t for t in soak_chart.data if t.get("name") == "a events"]
    placed = [m for m in ratchet.events if m.before_bytes or m.peak_bytes or m.after_bytes]
    assert len(marks) == 1 and len(marks[0]["x"]) == len(placed) >= 4
    (exported,) = json.loads(ratchet_json(analysis))
    assert len(exported["events"]) == 8 and "dump" in exported["steps"]
    lines = "\n".join(markdown_lines(analysis))
    assert "| innodb | a | dump | 1 (1) |" in lines and "1 of 8 events did not end well" in lines


def test_an_event_under_way_is_cut_when_the_session_ends(tmp_path: Path) -> None:
    """The server is about to stop: a tool still running is stopped, and recorded as cut."""
    import time

    from mallocbench.run.soak_events import SoakEvent
    from mallocbench.soak.events import EventRunner

    class Sleeping(EventRunner):
        def _run(self, event: SoakEvent) -> str | None:
            self._tool_run(["sleep", "30"])
            return None

    runner = Sleeping((SoakEvent("dump", at_s=0.1),), None, time.time(), 10.0)  # type: ignore[arg-type]
    runner.start()
    time.sleep(1.0)
    began = time.monotonic()
    (record,) = runner.stop()
    assert time.monotonic() - began < 5
    assert record["status"] == "cut" and "status -15" in record["error"], record


def test_the_schema_names_the_actions_and_keys_the_parser_takes() -> None:
    from mallocbench.run.dialect import SOAK_EVENT
    from mallocbench.run.soak_events import ACTION_KEYS, ACTIONS, EVENT_KEYS
    from mallocbench.servers import families

    assert SOAK_EVENT["action"]["enum"] == list(ACTIONS)
    assert set(SOAK_EVENT) == set(EVENT_KEYS)
    # Every family's actions and keys are ones the parser knows; together, all of them.
    runs = [families.get(name).soak_actions or ACTION_KEYS for name in families.FAMILIES]
    for kinds in runs:
        assert set(kinds) <= set(ACTIONS)
        assert {key for keys in kinds.values() for key in keys} <= set(EVENT_KEYS)
    assert set().union(*runs) == set(ACTIONS)


def test_rss_before_an_event_never_reaches_into_the_one_before() -> None:
    # The first event lifts RSS to 400 MiB until 50 s; the second starts at 52 s.
    series = [(float(t), (400 if 20 <= t < 50 else 200) * MiB) for t in range(100)]
    records = [
        {"action": "sql", "label": "x", "status": "ok", "start": 1020.0, "end": 1050.0},
        {"action": "sql", "label": "x", "status": "ok", "start": 1052.0, "end": 1053.0},
    ]
    first, second = measure_events(series, records, 1000.0, "s")
    assert first.peak_bytes == 400 * MiB and first.settled_by == NEXT_EVENT
    assert second.before_bytes == 200 * MiB  # 50-52 s, not 42-52 s


def test_time_to_the_cap_counts_the_steps_at_events() -> None:
    from mallocbench.analysis.ratchet import setup_ratchet
    from mallocbench.analysis.soak import Lifetime, SetupSoak, analyze
    from mallocbench.model.results import SessionInfo

    series, records = ratcheting(step_mib=8, drift_mib_h=0)
    cap = 400 * MiB
    life = Lifetime("s", 1000.0, series, "ok", 1)
    life.fit = analyze(series, cap)
    soak = SetupSoak("a", "innodb", int(cap), None, [life])
    session = SessionInfo("s", "a", "innodb", 0, started_at=1000.0, events=records)
    ratchet = setup_ratchet(soak, {"s": session})
    assert ratchet is not None and ratchet.projection is not None
    # 8 MiB every 60 s from ~248 MiB: about 19 minutes to 400 MiB.
    expected = (cap - life.fit.level_bytes) / (8 * MiB / 60)
    assert ratchet.projection.seconds == pytest.approx(expected, rel=0.05)
    assert ratchet.projection.low <= ratchet.projection.seconds <= ratchet.projection.high


def test_the_ratchet_export_carries_each_events_backend_readings() -> None:
    """ratchet-json holds what results.json stores of the backends a PostgreSQL event ran
    in, with that event; an event that read none exports as before, without the key."""
    from mallocbench.analysis.ratchet import setup_ratchet
    from mallocbench.analysis.soak import Lifetime, SetupSoak
    from mallocbench.model.results import SessionInfo
    from mallocbench.report.ratchet import ratchet_json

    series, records = ratcheting(step_mib=8, drift_mib_h=0, events=2)
    read = {"pid": 7, "before": {"anon": 1 * MiB}, "after": {"anon": 9 * MiB}, "settle_s": 4.0}
    records[0]["backends"] = [read]
    soak = SetupSoak("je", "postgresql", None, None, [Lifetime("s", 1000.0, series, "ok", 1)])
    session = SessionInfo("s", "je", "postgresql", 0, started_at=1000.0, events=records)
    ratchet = setup_ratchet(soak, {"s": session})

    class Analysis:  # the one field the export reads
        ratchets = (ratchet,)

    (exported,) = json.loads(ratchet_json(Analysis()))  # type: ignore[arg-type]
    first, second = exported["events"]
    assert first["backends"] == [read] and first["step_bytes"] is not None
    assert "backends" not in second and set(first) - set(second) == {"backends"}


def test_a_missing_tool_is_refused_before_the_soak(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "ev.toml"
    path.write_text(BASE + '[[soak.event]]\naction = "backup"\nat = "10s"\n')
    monkeypatch.setenv("PATH", str(tmp_path))  # no mariadb-backup on it
    with pytest.raises(MallocbenchError, match="mariadb-backup is missing: install it") as info:
        soak_experiment(loading_mod.load(path), SoakSpec(60.0, 20.0))
    assert "\n" not in str(info.value)


# --- PostgreSQL: the events' own backends ----------------------------------------------------

PG_SOAK = """name = "pgev"
steps = ["point-query"]
threads = [2]
[server]
family = "postgresql"
[dataset]
tables = 1
rows = 2000
cache = "32M"
[[setup]]
name = "je"
allocator = "jemalloc"
[[soak.event]]
action = "big-sort"
at = "3s"
sessions = 1
work_mem = "64M"
settle = "4s"
"""


@pytest.mark.server
def test_a_postgresql_big_sort_shows_the_step_in_its_own_backend(tmp_path: Path) -> None:
    """The sort's memory lives in the backend that ran it: read there before, during,
    right after and after the settle, stored with the event and shown in the report.
    jemalloc keeps what a 64 MiB sort freed for its decay (10 s), longer than the
    moment between the sort's end and the reading right after it."""
    from mallocbench.analysis.run_analysis import analyze
    from mallocbench.report.html import render_html
    from mallocbench.report.ratchet import markdown_lines
    from mallocbench.run.options import RunOptions
    from mallocbench.soak.runner import soak_metadata, soak_pipeline

    path = tmp_path / "pgev.toml"
    path.write_text(PG_SOAK)
    spec = SoakSpec(20.0, 10.0)
    experiment = soak_experiment(loading_mod.load(path), spec)
    options = RunOptions(out_dir=tmp_path / "out", extra_metadata=soak_metadata(experiment, spec))
    outcome = soak_pipeline(experiment, options).execute()
    assert outcome.aborted is None, outcome.aborted
    (session,) = outcome.result.sessions
    (event,) = session.events
    assert event["status"] == "ok", event
    assert event["label"] == "big-sort 1x64M"
    # The whole sort in memory, at about work_mem: what the event asked for.
    assert "work_mem 65536 kB" in event["detail"] and "quicksort in" in event["detail"]
    (backend,) = event["backends"]
    before, peak, after = (backend[k]["anon"] for k in ("before", "peak", "after"))
    assert peak - before > 40 * MiB, backend
    assert after - before > 16 * MiB, backend  # kept by the allocator, in that backend
    assert backend["settle_s"] >= 4.0 and backend["settled"]["anon"] > 0
    assert all(backend[k]["uss"] > 0 and backend[k]["pss"] > 0 for k in ("before", "after"))
    # Stored with the session and read back alike.
    saved = json.loads(json.dumps(outcome.result.to_dict()))
    assert RunResult.from_dict(saved).sessions[0].events == session.events
    analysis = analyze(outcome.result)
    (steps,) = analysis.backends
    assert steps.setup == "je" and steps.step.n == 1
    assert steps.step.median == pytest.approx(after - before)
    # soak.md: the ratchet's section, then the backends'.
    text = "\n".join(markdown_lines(analysis))
    section = text.split("## Soak events: the private memory of the backend each ran in")[1]
    row = next(line for line in section.splitlines() if line.startswith("| postgresql | je |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[2:4] == ["big-sort 1x64M", "1 backend of 1 event"]
    assert float(cells[5].replace(",", "")) > 16  # the step in MiB, as stored
    assert "one reading, not a finding" in text
    page = render_html(analysis)
    assert '<section id="backends"' in page and "big-sort 1x64M" in page.split('id="backends"')[1]


def test_backend_readings_are_given_as_one_reading_or_by_median_and_range() -> None:
    from mallocbench.analysis.backends import backend_steps
    from mallocbench.model.results import SessionInfo
    from mallocbench.report.backends import backend_notes, backend_table

    def backend(before: float, peak: float, after: float, settled: float) -> dict[str, object]:
        values = {"before": before, "peak": peak, "after": after, "settled": settled}
        read = {k: {"anon": int(v * MiB), "uss": 1, "pss": 1} for k, v in values.items()}
        return {"pid": 1, **read, "settle_s": 12.0}

    sort = {"action": "big-sort", "label": "big-sort 2x64M", "status": "ok"}
    result = RunResult("r", "x", "glibc", sessions=[
        SessionInfo("s1", "glibc", "postgresql", 0, events=[
            {**sort, "backends": [backend(1, 78, 2, 2), backend(1, 79, 3, 2)]},
            {**sort, "backends": [backend(1, 80, 4, 1)]},
            {"action": "dump", "label": "dump", "status": "ok"},  # no backend read
        ]),
        SessionInfo("s2", "je", "postgresql", 0, events=[
            {**sort, "backends": [backend(1, 86, 28, 28)]},
            {**sort, "status": "cut", "backends": [{"pid": 2, "before": {"anon": 1}}]},
        ]),
    ])  # fmt: skip
    glibc, je = backend_steps(result)
    assert (glibc.setup, glibc.events, glibc.step.n) == ("glibc", 2, 3)
    assert glibc.step.median == pytest.approx(2 * MiB)
    assert (glibc.step.low, glibc.step.high) == (pytest.approx(MiB), pytest.approx(3 * MiB))
    assert glibc.stayed.low == 0 and glibc.rise.median == pytest.approx(78 * MiB)
    assert (je.events, je.step.n) == (1, 1)  # the cut event's partial reading is left out

    class Analysis:  # the one field the report's section reads
        backends = (glibc, je)

    header, rows = backend_table(Analysis())  # type: ignore[arg-type]
    cells = [dict(zip(header, row, strict=True)) for row in rows]
    assert cells[0]["backends read"] == "3 backends of 2 events"
    assert cells[0]["step right after (MiB)"] == "+2.0 (median; +1.0 to +3.0)"
    assert cells[1]["step right after (MiB)"] == "+27.0"
    assert cells[1]["stayed after the settle (MiB)"] == "+27.0 after 12 s"
    notes = " ".join(backend_notes(Analysis()))  # type: ignore[arg-type]
    assert "one reading, not a finding" in notes and "median and range" in notes
