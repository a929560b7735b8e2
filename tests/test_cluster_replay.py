"""`replay --cluster`: each repeat of every setup a unit (a block) on a benchmark host,
a host killed mid-repeat, the replay it lost run by `replay --resume`.

The hosts are two workers on this one machine (test_cluster's local TLS cluster); the
trace is a little C program recorded with `record -- PROGRAM`.
"""

from __future__ import annotations

import collections
import json
import os
import signal
import time
from pathlib import Path

import psutil
import pytest

import native_programs
from cli_runner import run_cli
from mallocbench.cluster.replays import run_replay_unit
from mallocbench.cluster.units import ReplayUnit
from mallocbench.model.metadata import ReplayRecord
from mallocbench.replay import trace as tracemod
from mallocbench.store import open_store
from test_cluster import _start, cluster

# The recording's length, and so each replay's at its recorded pace: long enough to
# kill a host in the middle of one.
SECONDS = "2"
SETUPS = ["--allocators", "glibc,jemalloc", "--repeats", "2"]


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("clustertrace")
    growth = native_programs.build("growth", directory)
    out = directory / "leak.mbt"
    recorded = run_cli("record", "--out", str(out), "--", str(growth), "leak", SECONDS)
    assert recorded.returncode == 0, recorded.stderr
    return out


def _stored(out: Path) -> tuple[dict[str, object], ReplayRecord, list[str]]:
    """The one run of --out's store, its replay record, and the hosts it names."""
    store = open_store(out / "results.sqlite", readonly=True)
    try:
        (listed,) = store.list_runs()
        metadata = store.load_run(listed["run_id"], with_samples=False).metadata
    finally:
        store.close()
    assert metadata.replay is not None
    return listed, metadata.replay, sorted(metadata.hosts or {})


def _pairs(record: ReplayRecord) -> list[tuple[str, int]]:
    return sorted((r.setup, r.repeat) for r in record.replay_runs)


def _repeat_of(work_dir: Path) -> int | None:
    """The repeat (from 1) whose unit runs on this host: its log is there, its result
    not yet."""
    for log in work_dir.glob("runs/*/replay-r*.log"):
        if not log.with_name(log.name.replace(".log", ".result.json")).exists():
            return int(log.name.removeprefix("replay-r").removesuffix(".log")) + 1
    return None


def _replayers(trace: Path) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["name", "cmdline"]):
        if proc.info["name"] == "mbreplay" and str(trace) in (proc.info["cmdline"] or []):
            found.append(proc)
    return found


def test_a_host_killed_mid_repeat_loses_one_replay_named_and_resumed(
    trace: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    # No retry: the killed host's replay is lost, so --resume has something to do.
    with cluster(tmp_path, ["host-a", "host-b"], allowed_failures=0) as running:
        args = ["replay", str(trace.absolute()), *SETUPS, "--out", str(out), "--json"]
        driver = _start([*args, *running.run_args()], tmp_path / "driver.log")
        deadline = time.monotonic() + 60
        # host-a's repeat: its first replay (glibc) committed by the driver while the
        # unit goes on with the second (jemalloc), which the kill then loses alone.
        while (n := _repeat_of(running.work_dirs["host-a"])) is None or (
            f"glibc repeat {n}: " not in (tmp_path / "driver.log").read_text()
        ):
            assert driver.poll() is None and time.monotonic() < deadline, "host-a ran nothing"
            time.sleep(0.1)
        assert _repeat_of(running.work_dirs["host-a"]) == n, "host-a's repeat ended too soon"
        os.killpg(running.workers["host-a"].pid, signal.SIGKILL)
        code = driver.wait(timeout=120)
        log = (tmp_path / "driver.log").read_text()
        # The killed host's replayer stops with its unit: nothing replays on for nobody.
        deadline = time.monotonic() + 20
        while len(_replayers(trace)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not _replayers(trace)
        assert "Traceback" not in log
        assert code == 3, log[-3000:]
        listed, record, _ = _stored(out)
        assert listed["status"] == "interrupted"
        (error,) = [line for line in log.splitlines() if line.startswith("mallocbench: error:")]
        lost = f"jemalloc repeat {n}"
        assert f"1 replay(s) lost with their benchmark host ({lost}: " in error, error
        before = record.runs or []
        assert ("jemalloc", n - 1) not in _pairs(record) and len(before) == 3
        run_id = str(listed["run_id"])
        assert f"mallocbench replay --resume {run_id} --out {out}" in error
        # The measured replays are printed before the error line, as JSON here.
        assert log.count('"setup": ') >= 1

        resumed = run_cli("replay", "--resume", run_id, "--out", str(out), *running.run_args())
        assert resumed.returncode == 0, resumed.stderr[-3000:]
        assert f"1/1 {lost}: " in resumed.stderr  # the one replay missing, and it alone
    listed, record, hosts = _stored(out)
    assert listed["status"] == "finished"
    # Each replay once, and those committed before the resume untouched by it.
    assert collections.Counter(_pairs(record)).most_common(1)[0][1] == 1
    assert (record.runs or [])[: len(before)] == before
    assert all(r.status == "ok" for r in record.replay_runs), record.runs
    # A repeat is a block: its setups replayed on one host in the local order (the
    # other repeat all on host-b); the lost replay on the host that was left, and a
    # note says that repeat was split.
    ran_on = {(r.setup, r.repeat): r.data["host"] for r in record.replay_runs}
    other = 3 - n
    assert ran_on[("glibc", other - 1)] == ran_on[("jemalloc", other - 1)] == "host-b"
    assert ran_on[("glibc", n - 1)] == "host-a" and ran_on[("jemalloc", n - 1)] == "host-b"
    assert set(hosts) == {"host-a", "host-b"}
    notes = _notes(out)
    assert f"repeat {n}'s replays ran on host-a and then on host-b" in " ".join(notes), notes

    local = run_cli("replay", str(trace), *SETUPS, "--out", str(tmp_path / "local"))
    assert local.returncode == 0, local.stderr
    _, here, _ = _stored(tmp_path / "local")
    assert _pairs(here) == _pairs(record)
    assert here.setups == record.setups
    # Resuming a run with nothing missing runs nothing; changing it is refused.
    again = run_cli("replay", "--resume", run_id, "--out", str(out), "--repeats", "3")
    assert again.returncode == 2 and "--repeats cannot change replay run" in again.stderr


def _notes(out: Path) -> list[str]:
    store = open_store(out / "results.sqlite", readonly=True)
    try:
        (listed,) = store.list_runs()
        return list(store.load_run(listed["run_id"], with_samples=False).metadata.notes or [])
    finally:
        store.close()


def test_a_host_that_cannot_see_the_trace_refuses_its_replay(tmp_path: Path) -> None:
    unit = ReplayUnit(
        setups=[{"name": "glibc", "allocator": "glibc", "knobs": {}}],
        repeat=0,
        trace=str(tmp_path / "elsewhere.mbt"),
        trace_bytes=100,
        timing="none",
        speed=1.0,
        order="recorded",
        duration_s=1.0,
    )
    spec = {"host": "host-a", "replay": unit.to_dict(), "out_dir": str(tmp_path / "run")}
    (tmp_path / "run").mkdir()
    result = run_replay_unit(spec)
    assert result["replays"] == []
    assert result["aborted"].startswith(f"host host-a cannot read the trace at {unit.trace}")
    (tmp_path / "elsewhere.mbt").write_bytes(b"x" * 10)
    result = run_replay_unit(spec)
    assert "has another trace at" in result["aborted"]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--allocators", "glibc"], "give the TRACE to replay (or --resume RUN_ID with --out)"),
        (["t.mbt", "--cluster", "127.0.0.1:9", "--insecure"], "--cluster needs --out DIR"),
        (["--resume", "replay-x"], "--resume needs --out DIR"),
        (["t.mbt", "--tls", "tls/driver"], "--tls and --insecure go with --cluster"),
        (["--resume", "replay-x", "--out", "."], "no results store in ."),
    ],
)
def test_bad_replay_requests_get_one_line(args: list[str], says: str, tmp_path: Path) -> None:
    result = run_cli("replay", *args, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("mallocbench: error: ") and says in line, line


def test_a_resume_names_what_it_cannot_resume(trace: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    first = run_cli(
        "replay", str(trace), "--allocators", "glibc,jemalloc", "--timing", "none",
        "--repeats", "1", "--out", str(out),
    )  # fmt: skip
    assert first.returncode == 0, first.stderr
    listed, record, _ = _stored(out)
    unknown = run_cli("replay", "--resume", "replay-nope", "--out", str(out))
    assert unknown.returncode == 2 and "replay-nope is no run of" in unknown.stderr
    moved = tmp_path / "other.mbt"
    moved.write_bytes(trace.read_bytes()[: trace.stat().st_size // 2])
    other = run_cli("replay", str(moved), "--resume", str(listed["run_id"]), "--out", str(out))
    assert other.returncode == 2, other.stderr
    # Nothing missing: nothing replayed again, the run as it was.
    again = run_cli("replay", "--resume", str(listed["run_id"]), "--out", str(out))
    assert again.returncode == 0, again.stderr
    assert _stored(out)[1].runs == record.runs
    # One replay missing (as a Ctrl-C would leave it): a local resume runs it alone.
    store = open_store(out / "results.sqlite")
    try:
        result = store.load_run(str(listed["run_id"]), with_samples=False)
        assert result.metadata.replay is not None and result.metadata.replay.runs
        kept = result.metadata.replay.runs[:-1]
        result.metadata.replay.runs = kept
        store.update_metadata(result.run_id, result.metadata)
        store.finish_run(result.run_id, "interrupted")
    finally:
        store.close()
    local = run_cli("replay", "--resume", result.run_id, "--out", str(out))
    assert local.returncode == 0 and "1/1 jemalloc repeat 1: " in local.stderr, local.stderr
    listed, final, _ = _stored(out)
    assert listed["status"] == "finished" and (final.runs or [])[:-1] == kept
    assert _pairs(final) == _pairs(record)


def test_a_segmented_trace_is_replayed_by_a_unit_as_a_whole_directory(tmp_path: Path) -> None:
    growth = native_programs.build("growth", tmp_path)
    segmented = tmp_path / "leak"
    recorded = run_cli(
        "record", "--segment-seconds", "0.5", "--out", str(segmented), "--",
        str(growth), "leak", "1.5",
    )  # fmt: skip
    assert recorded.returncode == 0 and segmented.is_dir(), recorded.stderr
    assert len(tracemod.segments(segmented)) > 1
    unit = ReplayUnit(
        setups=[
            {"name": "je", "allocator": "jemalloc", "knobs": {}},
            {"name": "glibc", "allocator": "glibc", "knobs": {}},
        ],
        repeat=1,
        trace=str(segmented),
        trace_bytes=tracemod.trace_bytes(segmented),
        timing="none",
        speed=1.0,
        order="recorded",
        duration_s=1.5,
    )
    (tmp_path / "run").mkdir()
    relay = str(tmp_path / "run" / "replay-r1.replayed-{}.json")
    spec = {"host": "host-b", "replay": unit.to_dict(), "out_dir": str(tmp_path / "run")}
    result = run_replay_unit({**spec, "relay": relay})
    assert result["aborted"] is None
    # One repeat of every setup, in the order given (a local replay's), each written
    # for the worker to relay as it ended: what a host lost next has not lost.
    replays = result["replays"]
    assert [(d["replay"]["setup"], d["replay"]["repeat"]) for d in replays] == [
        ("je", 1),
        ("glibc", 1),
    ]
    assert [json.loads(Path(relay.format(i)).read_text()) for i in range(2)] == replays
    assert not Path(relay.format(2)).exists()
    for done in replays:
        assert done["replay"]["status"] == "ok", done
        # Every segment joined: as many calls as the whole recording's check counts.
        assert done["replay"]["data"]["events"] == tracemod.check(segmented).data["events"] > 0
        assert done["replay"]["data"]["segments"] == len(tracemod.segments(segmented))
        assert done["notes"] == []
    assert replays[0]["metadata"]["allocators"] == {"je": unit_setup_version("jemalloc")}


def unit_setup_version(allocator: str) -> str | None:
    from mallocbench import allocators

    return allocators.get(allocator).version
