"""Per-setup memory caps: the experiment key, each cell's peak cgroup charge, the memory
table, and a real run in which the kernel OOM-kills a capped server mid-cell."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
from rich.console import Console

from cli_runner import run_cli
from mallocbench import units as fmt
from mallocbench.analysis.run_analysis import analyze
from mallocbench.analysis.summary import memory_rows
from mallocbench.errors import MallocbenchError
from mallocbench.model.results import Cell, RunResult, Sample, SessionInfo, SetupInfo
from mallocbench.report import html, markdown, terminal
from mallocbench.report.words import CAP_NOTE
from mallocbench.run.experiment import MIN_MEMORY_LIMIT
from mallocbench.run.loading import from_dict
from mallocbench.servers.cgroup.hierarchy import memory_cgroup_of
from mallocbench.servers.cgroup.own import MemoryCgroup
from mallocbench.servers.cgroup.parents import capping_problem

MiB = 1 << 20
GiB = 1 << 30
NOBODY = 65534


def _experiment(server: dict[str, Any] | None = None, **caps: object) -> dict[str, Any]:
    """Two setups, a and b; `caps` gives a setup its memory_limit by name."""
    setups: list[dict[str, Any]] = []
    for name in ("a", "b"):
        setup: dict[str, Any] = {"name": name, "allocator": "glibc"}
        if name in caps:
            setup["memory_limit"] = caps[name]
        setups.append(setup)
    data: dict[str, Any] = {"name": "cap", "steps": ["point-query"], "setup": setups}
    if server is not None:
        data["server"] = server
    return data


def _writable_cgroup() -> None:
    try:
        MemoryCgroup.create("probe").remove()
    except MallocbenchError as exc:
        pytest.skip(str(exc))


def _our_groups() -> set[str]:
    """mallocbench's cgroups below ours, where a run started from here creates its own."""
    own = memory_cgroup_of("self")
    if own is None:
        return set()
    parent = own if (own / "memory.limit_in_bytes").exists() else own.parent
    return {p.name for p in parent.glob("mallocbench-*") if p.is_dir()}


# --- the experiment key -------------------------------------------------------------------------


def test_a_setups_cap_overrides_the_server_default() -> None:
    _writable_cgroup()
    plain = from_dict(_experiment())
    assert [s.memory_limit_bytes for s in plain.setups] == [None, None]
    capped = from_dict(_experiment({"memory_limit": "1G"}, b="300M"))
    assert [s.memory_limit_bytes for s in capped.setups] == [GiB, 300 * MiB]
    smallest = from_dict(_experiment(a="128M"))
    assert smallest.setups[0].memory_limit_bytes == MIN_MEMORY_LIMIT


def _ram_plus_one() -> str:
    return f"{(psutil.virtual_memory().total >> 20) + 1}M"


@pytest.mark.parametrize(
    ("server", "caps", "key", "message"),
    [
        (None, {"a": "lots"}, "setup a.memory_limit = 'lots'", "is not a size"),
        (None, {"b": 0}, "setup b.memory_limit = 0", "is not a size"),
        (None, {"a": True}, "setup a.memory_limit = True", "is not a size"),
        (None, {"a": "-1G"}, "setup a.memory_limit = '-1G'", "is not a size"),
        (None, {"a": "127M"}, "setup a.memory_limit = '127M'", "is below 128 MiB"),
        ({"memory_limit": "100M"}, {}, "server.memory_limit = '100M'", "is below 128 MiB"),
        (None, {"b": _ram_plus_one()}, "setup b.memory_limit", "more than this machine's"),
        ({"memory_limit": _ram_plus_one()}, {}, "server.memory_limit", "of RAM"),
    ],
)
def test_bad_caps_are_refused_in_one_line_naming_the_key(
    server: dict[str, Any] | None, caps: dict[str, object], key: str, message: str
) -> None:
    with pytest.raises(MallocbenchError) as info:
        from_dict(_experiment(server, **caps))
    text = str(info.value)
    assert "\n" not in text
    assert text.startswith(key) and message in text


def test_capping_problem_names_what_is_missing(tmp_path: Path) -> None:
    assert "is not a memory cgroup" in (capping_problem(tmp_path) or "")
    assert "does not exist" in (capping_problem(tmp_path / "gone") or "")
    _writable_cgroup()
    assert capping_problem() is None


def _dry_run_as_nobody(path: Path) -> subprocess.CompletedProcess[str]:
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("setpriv (util-linux) is not installed")
    return subprocess.run(
        [setpriv, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
        + [sys.executable, "-m", "mallocbench.cli", "run", str(path), "--dry-run"],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "COLUMNS": "200"},
    )


def test_dry_run_refuses_a_cap_where_no_memory_cgroup_is_writable(readable_dir: Path) -> None:
    """An unprivileged user cannot create cgroups here: the cap is refused up front."""
    if os.geteuid() != 0:
        pytest.skip("needs root, to drop to an unprivileged user")
    tmp_path = readable_dir
    _writable_cgroup()
    uncapped = tmp_path / "uncapped.toml"
    uncapped.write_text('[[setup]]\nname = "a"\nallocator = "glibc"\n')
    if _dry_run_as_nobody(uncapped).returncode != 0:
        pytest.skip("the unprivileged user cannot run mallocbench from here")
    capped = tmp_path / "capped.toml"
    capped.write_text('[[setup]]\nname = "a"\nallocator = "glibc"\nmemory_limit = "1G"\n')
    refused = _dry_run_as_nobody(capped)
    assert refused.returncode == 2
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1, refused.stderr
    # Located at the key that asks for the cap.
    assert lines[0].startswith(f"mallocbench: error: {capped}:4: setup a has a memory_limit")
    assert "writable memory cgroup" in lines[0] and "is not writable" in lines[0]
    # As root the same file validates, and the plan names the cap.
    allowed = run_cli("run", str(capped), "--dry-run")
    assert allowed.returncode == 0, allowed.stderr
    assert "memory caps (on each server's cgroup charge): a 1,024 MiB" in allowed.stdout


# --- the cgroup's peak, per cell ----------------------------------------------------------------


def test_a_groups_peak_restarts_for_each_cell_where_the_kernel_allows() -> None:
    _writable_cgroup()
    with MemoryCgroup.create("peak") as group:
        child = subprocess.Popen(
            [sys.executable, "-c", "b = bytearray(96 << 20)"], preexec_fn=group.join_self
        )
        assert child.wait(30) == 0
        peak = group.peak_bytes()
        assert peak is not None and peak >= 96 * MiB
        restarted = group.reset_peak()
        assert restarted is (group.version == 1)
        after = group.peak_bytes()
        assert after is not None
        if restarted:
            # Only what the exited child left behind (page cache) is still charged.
            assert after < 32 * MiB
        else:
            assert after == peak


# --- the memory table, from recorded cells ------------------------------------------------------

CAP = 384 * MiB


def _sample(t: float, rss_mib: int, charge_mib: int | None) -> Sample:
    extra = {"cgroup_bytes": float(charge_mib * MiB)} if charge_mib is not None else {}
    return Sample(t=t, rss_bytes=rss_mib * MiB, vsz_bytes=2 * GiB, qps=1000.0, extra=extra)


def _recorded(capped: bool = True) -> RunResult:
    """One uncapped and one capped setup; the capped server was OOM-killed in its cell."""
    cap = CAP if capped else None
    free = Cell(
        "free",
        "innodb",
        "read-only-order range=1000",
        1,
        0,
        qps=1500.0,
        peak_rss_bytes=800 * MiB,
        session="free.innodb.r0",
        started_at=100.0,
        samples=[_sample(101, 220, None), _sample(102, 350, None)],
    )
    killed = Cell(
        "capped",
        "innodb",
        "read-only-order range=1000",
        1,
        0,
        status="oom",
        error="server was OOM-killed (signal SIGKILL) while measuring",
        peak_rss_bytes=406 * MiB,
        session="capped.innodb.r0",
        started_at=200.0,
        metrics={"cgroup_peak_bytes": float(CAP), "cgroup_limit_bytes": float(CAP)}
        if capped
        else {},
        samples=[
            _sample(201, 211, 190 if capped else None),
            _sample(202, 324, 303 if capped else None),
        ],
    )
    return RunResult(
        run_id="r",
        experiment="cap",
        base_setup="free",
        setups=[SetupInfo("free", "glibc"), SetupInfo("capped", "glibc", memory_limit_bytes=cap)],
        sessions=[
            SessionInfo("free.innodb.r0", "free", "innodb", 0, started_at=100.0),
            SessionInfo(
                "capped.innodb.r0",
                "capped",
                "innodb",
                0,
                started_at=200.0,
                status="oom",
                memory_limit_bytes=cap,
                peak_cgroup_bytes=CAP if capped else None,
            ),
        ],
        cells=[free, killed],
    )


def test_memory_rows_carry_the_cap_the_peak_charge_and_the_oom_kills() -> None:
    rows = {r.setup: r for r in memory_rows(_recorded())}
    assert rows["capped"].memory_limit_bytes == CAP
    assert rows["capped"].peak_cgroup_bytes == CAP
    assert rows["capped"].peak_rss_bytes == 406 * MiB
    assert rows["capped"].oom_cells == 1
    assert rows["free"].memory_limit_bytes is None and rows["free"].peak_cgroup_bytes is None
    assert rows["free"].oom_cells == 0


def test_reports_show_cap_charge_and_oom_beside_rss_and_say_what_the_cap_acts_on() -> None:
    run = _recorded()
    md = markdown.render(analyze(run))
    assert "| peak RSS (MiB) | memory cap (MiB) | peak cgroup charge (MiB) | OOM |" in md
    assert "| innodb | capped | - | 406 | 384 | 384 | OOM-killed (1 cell) |" in md
    assert "| innodb | free | - | 800 | - | - | - |" in md
    assert CAP_NOTE in md
    console = Console(record=True, width=300)
    terminal.print_run(analyze(run), console)
    text = " ".join(console.export_text().split())
    assert "OOM-killed (1 cell)" in text and "acts on the group's charge" in text
    ctx = html.build_context(analyze(run))
    assert ctx.caps
    view = {m.setup: m for m in ctx.memory}
    assert (view["capped"].memory_limit, view["capped"].peak_cgroup) == ("384", "384")
    assert view["capped"].oom == "OOM-killed (1 cell)" and view["free"].oom == "-"
    chart = next(c for c in ctx.charts if c.id == "chart-rss-innodb")
    cap_lines = [s for s in chart.layout["shapes"] if s.get("xref") == "paper"]
    assert [s["y0"] for s in cap_lines] == [CAP / GiB]
    charge = next(d for d in chart.data if d["name"] == "capped.innodb.r0 cgroup charge")
    assert charge["y"][:2] == [190 * MiB / GiB, 303 * MiB / GiB]
    page = html.render_html(analyze(run))
    assert "peak cgroup charge" in page and "OOM-killed (1 cell)" in page


def test_runs_without_caps_keep_the_memory_table_they_had() -> None:
    run = _recorded(capped=False)
    run.cells[1].status = "crashed"
    md = markdown.render(analyze(run))
    assert "memory cap" not in md and "cgroup" not in md
    assert not html.build_context(analyze(run)).caps


def _memory_table(md: str) -> dict[str, dict[str, str]]:
    """The Markdown memory table, as setup -> column -> cell."""
    lines = md.splitlines()
    start = lines.index("## Peak memory of the server")
    rows = [line for line in lines[start:] if line.startswith("| ")]
    header = [c.strip() for c in rows[0].strip("|").split("|")]
    cells = [[c.strip() for c in row.strip("|").split("|")] for row in rows[1:]]
    return {c[1]: dict(zip(header, c, strict=True)) for c in cells if len(c) == len(header)}


# --- a real run ----------------------------------------------------------------------------------

# The query cache keeps every distinct result: a 1000-row range sorted by c is ~125 KB, and
# 20,000 possible ranges make up ~2.4 GiB, so the capped server fills its cap within seconds
# while the uncapped one only grows. No catalogue step allocates that fast on its own at a
# dataset this small.
# The capped server starts at a charge of about 120 MiB and its query cache grows it by
# 33-600 MiB/s (305-4,000 queries/s; the slow end in a loaded CI run, where a 384 MiB cap
# once outlasted an 8 s cell): 256 MiB is reached within about 4 s of a 10 s cell.
REAL_CAP = 256 * MiB
REAL_EXPERIMENT = """
name = "cap"
base = "free"
engines = ["innodb"]
steps = ["read-only-order range=1000"]
threads = [1, 2]
[dataset]
tables = 1
rows = 20000
cache = "32M"
[durations]
warmup = 0
step = 10
[server.config]
query_cache_type = "ON"
query_cache_size = "2G"
query_cache_limit = "4M"
[[setup]]
name = "free"
allocator = "glibc"
[[setup]]
name = "capped"
allocator = "glibc"
memory_limit = "256M"
"""


@pytest.mark.server
@pytest.mark.alone  # the query cache must outgrow the cap within one 10 s cell
def test_a_capped_server_is_oom_killed_mid_cell_and_the_run_records_it(
    tmp_path: Path, integrity_figures
) -> None:
    _writable_cgroup()
    experiment = tmp_path / "cap.toml"
    experiment.write_text(REAL_EXPERIMENT)
    out = tmp_path / "out"
    groups_before = _our_groups()
    done = run_cli("run", str(experiment), "--out", str(out), "--quiet")
    integrity_figures.check_output(done.stdout + done.stderr)
    leftovers = _our_groups() - groups_before
    integrity_figures.add("orphans", len(leftovers))
    assert done.returncode == 0, done.stderr[-2000:]
    assert not leftovers

    shown = run_cli("report", str(out / "results.sqlite"), "--format", "json")
    assert shown.returncode == 0, shown.stderr
    run = RunResult.from_dict(json.loads(shown.stdout))
    cells = {(c.setup, c.threads): c for c in run.cells}
    sessions = {s.id: s for s in run.sessions}
    assert next(s for s in run.setups if s.name == "capped").memory_limit_bytes == REAL_CAP

    for threads in (1, 2):
        free = cells[("free", threads)]
        assert free.status == "ok" and free.qps
        assert "cgroup_peak_bytes" not in free.metrics
        assert all("cgroup_bytes" not in s.extra for s in free.samples)
    assert sessions["free.innodb.r0"].memory_limit_bytes is None

    killed = [cells[("capped", 1)], cells[("capped", 2)]]
    integrity_figures.add("faults injected", len(killed))
    # After the kill the next cell got a server of its own, in a group of its own.
    assert killed[0].session == "capped.innodb.r0" and killed[1].session == "capped.innodb.r0.2"
    timelines = 0
    for cell in killed:
        assert cell.status == "oom" and cell.exit_signal == "SIGKILL", cell.error
        assert "OOM-killed" in (cell.error or "") and "cgroup charge peaked at" in (
            cell.error or ""
        )
        session = sessions[cell.session]
        assert session.status == "oom" and session.memory_limit_bytes == REAL_CAP
        assert session.ended_at is not None
        # The timeline up to the kill: RSS and the group's charge, sampled while it lived
        # (4 readings a second). A clean-clone CI run killed one cell before its sampler
        # had a reading: at least one of the two keeps a timeline.
        lived = [s for s in cell.samples if s.rss_bytes]
        timelines += bool(lived)
        assert all(s.t <= session.ended_at for s in lived)
        charges = [s.extra["cgroup_bytes"] for s in lived]
        assert len(charges) == len(lived) and all(c <= REAL_CAP for c in charges)
        # The kernel killed it at the cap: the group's own peak reached it, whatever
        # the last sample, up to a second earlier, saw.
        assert 0.95 * REAL_CAP <= cell.metrics["cgroup_peak_bytes"] <= REAL_CAP
        assert cell.metrics["cgroup_limit_bytes"] == REAL_CAP
        assert (
            session.peak_cgroup_bytes is not None and session.peak_cgroup_bytes >= 0.95 * REAL_CAP
        )
        if charges:
            assert cell.peak_rss_bytes is not None and cell.peak_rss_bytes > max(charges) * 0.9
    assert timelines >= 1

    md = (out / "report.md").read_text()
    table = _memory_table(md)
    unit = "GiB" if "memory cap (GiB)" in table["capped"] else "MiB"
    assert table["capped"][f"memory cap ({unit})"] == fmt.size(REAL_CAP, unit)
    assert table["capped"][f"peak cgroup charge ({unit})"] == fmt.size(
        sessions["capped.innodb.r0.2"].peak_cgroup_bytes, unit
    )
    assert table["capped"]["OOM"] == "OOM-killed (2 cells)"
    assert table["capped"][f"peak RSS ({unit})"] != "-"
    capped_columns = (f"memory cap ({unit})", f"peak cgroup charge ({unit})", "OOM")
    assert [table["free"][k] for k in capped_columns] == ["-"] * 3
    assert CAP_NOTE in md
    assert "**oom**: server was OOM-killed" in md


INTERRUPTED_EXPERIMENT = """
name = "cap-stop"
engines = ["innodb"]
steps = ["point-query"]
threads = [1]
[dataset]
tables = 1
rows = 2000
cache = "32M"
[durations]
warmup = 0
step = 60
[[setup]]
name = "capped"
allocator = "glibc"
memory_limit = "1G"
"""


def _server_pids(out: Path) -> list[int]:
    pids = []
    for record in (out / "servers").glob("*/server.json"):
        try:
            pids.append(int(json.loads(record.read_text())["pid"]))
        except (OSError, ValueError, KeyError):
            continue  # being written right now
    return pids


@pytest.mark.server
def test_a_stopped_run_removes_its_servers_cgroup(tmp_path: Path, integrity_figures) -> None:
    _writable_cgroup()
    experiment = tmp_path / "stop.toml"
    experiment.write_text(INTERRUPTED_EXPERIMENT)
    out = tmp_path / "out"
    groups_before = _our_groups()
    run = subprocess.Popen(
        [sys.executable, "-m", "mallocbench.cli", "run", "--quiet", str(experiment)]
        + ["--out", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not _server_pids(out) and time.monotonic() < deadline and run.poll() is None:
            time.sleep(0.2)
        pids = _server_pids(out)
        assert pids, "the run started no server"
        group = memory_cgroup_of(pids[0])
        assert group is not None and group.name in _our_groups() - groups_before
        assert int((group / "memory.limit_in_bytes").read_text()) == GiB
        integrity_figures.add("faults injected")
        run.send_signal(signal.SIGTERM)
        stdout, stderr = run.communicate(timeout=120)
    finally:
        if run.poll() is None:
            run.kill()
            run.communicate()
    integrity_figures.check_output(stdout + stderr)
    assert run.returncode == 128 + signal.SIGTERM, stderr[-2000:]
    leftovers = _our_groups() - groups_before
    integrity_figures.add("orphans", len(leftovers) + sum(psutil.pid_exists(p) for p in pids))
    assert not leftovers and not group.exists()
    assert not any(psutil.pid_exists(p) for p in pids)
