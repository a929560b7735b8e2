"""CPU quotas through the cpu cgroup controller: real groups, a real CPU-burning child held
to its share, the quota read back, bad quotas refused, and a private server started inside."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mallocbench import allocators
from mallocbench.errors import MallocbenchError
from mallocbench.servers import engines
from mallocbench.servers.cgroup.hierarchy import cgroup_of
from mallocbench.servers.cgroup.own import CpuCgroup, cgroup_name
from mallocbench.servers.cgroup.parents import cpu_capping_problem
from mallocbench.servers.mariadb import ServerBuild, ServerConfig, running

MiB = 1 << 20

# Burns CPU for argv[1] seconds of wall time, tells when it stopped (CLOCK_MONOTONIC is
# the same clock in every process), then waits without CPU for its stdin to close: its
# /proc/PID/stat must still be there when the parent reads it.
BURN = """\
import sys, time
end = time.monotonic() + float(sys.argv[1])
while time.monotonic() < end:
    pass
print(time.monotonic(), flush=True)
sys.stdin.read()
"""


def _require_cpu_cgroup() -> None:
    problem = cpu_capping_problem()
    if problem is not None:
        pytest.skip(problem)


def _cpu_seconds(pid: int) -> float:
    """User plus system CPU time of a live process, from /proc/PID/stat."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    # The command name may hold spaces and parentheses: count fields after its last ")".
    fields = stat[stat.rindex(")") + 2 :].split()
    utime, stime = int(fields[11]), int(fields[12])  # fields 14 and 15 of proc(5)
    return (utime + stime) / os.sysconf("SC_CLK_TCK")


def _first_in_line(group: CpuCgroup) -> None:
    """Give the group the kernel's highest weight, so that on a busy host (other test runs
    on few CPUs) the quota, not the competition, is what holds its members back."""
    name, value = ("cpu.weight", "10000") if group.version == 2 else ("cpu.shares", "262144")
    (group.path / name).write_text(value)


def _burn(group: CpuCgroup, seconds: float) -> float:
    """Run BURN inside the group: the CPUs it got, its CPU time over its wall time."""
    started = time.monotonic()
    with subprocess.Popen(
        [sys.executable, "-c", BURN, str(seconds)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        preexec_fn=group.join_self,
    ) as burner:
        try:
            assert group.pids() == [burner.pid]
            assert burner.stdout is not None
            wall = float(burner.stdout.readline()) - started
            assert wall >= seconds
            return _cpu_seconds(burner.pid) / wall
        finally:
            burner.kill()


# --- real groups --------------------------------------------------------------------------------


@pytest.mark.alone  # measures the CPU share its child gets
def test_a_child_under_half_a_cpu_gets_half_a_cpu_and_is_throttled() -> None:
    _require_cpu_cgroup()
    with CpuCgroup.create("half", 0.5) as group:
        if group.version == 1:
            assert group.path.parent == cgroup_of("cpu", "self")
        assert group.path.name == cgroup_name("half")
        assert group.throttled()["nr_throttled"] == 0
        _first_in_line(group)
        share = _burn(group, 1.5)
        assert 0.3 < share < 0.7, f"{share:.2f} CPUs"
        throttled = group.throttled()
        assert throttled["nr_throttled"] > 0, throttled
        assert throttled["nr_periods"] >= throttled["nr_throttled"]
        assert throttled["throttled_seconds"] > 0, throttled
    assert not group.path.exists()


def test_the_quota_reads_back_as_set() -> None:
    _require_cpu_cgroup()
    with CpuCgroup.create("readback", 0.95) as group:
        assert group.quota_cpus() == pytest.approx(0.95)
        if (os.cpu_count() or 1) >= 2:
            group.set_quota(1.9)
            assert group.quota_cpus() == pytest.approx(1.9)
        group.set_quota(None)
        assert group.quota_cpus() is None
        assert repr(group) == f"CpuCgroup({str(group.path)!r}, v{group.version})"
    assert not group.path.exists()


def test_a_running_process_is_moved_in_and_evicted_on_removal() -> None:
    _require_cpu_cgroup()
    group = CpuCgroup.create("add", 0.5)
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        group.add(sleeper.pid)
        assert cgroup_of("cpu", sleeper.pid) == group.path
        group.remove(timeout=0.5)
        assert not group.path.exists()
        assert cgroup_of("cpu", sleeper.pid) == group.path.parent
    finally:
        sleeper.kill()
        sleeper.wait(10)
        group.remove()


def test_v2_files_are_written_and_read_in_their_own_format(tmp_path: Path) -> None:
    """cgroup v2 is not mounted with the cpu controller on every test host: its file
    formats are checked on plain files here, and on real groups where the host has v2."""
    group = CpuCgroup(tmp_path, 2)
    group.set_quota(0.95)
    assert (tmp_path / "cpu.max").read_text() == "95000 100000"
    assert group.quota_cpus() == pytest.approx(0.95)
    group.set_quota(None)
    assert (tmp_path / "cpu.max").read_text() == "max 100000"
    assert group.quota_cpus() is None
    assert group.throttled() == {}
    (tmp_path / "cpu.stat").write_text(
        "usage_usec 900000\nuser_usec 800000\nsystem_usec 100000\nnr_periods 16\n"
        "nr_throttled 15\nthrottled_usec 750000\nnr_bursts 0\nburst_usec 0\n"
    )
    assert group.throttled() == {
        "nr_periods": 16,
        "nr_throttled": 15,
        "throttled_seconds": pytest.approx(0.75),
    }


# --- refusals -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("quota", "words"),
    [
        (0, "not a positive number of CPUs"),
        (-0.5, "not a positive number of CPUs"),
        (math.nan, "not a positive number of CPUs"),
        (math.inf, "not a positive number of CPUs"),
        (True, "not a positive number of CPUs"),
        (0.001, "below the kernel's least"),
        ((os.cpu_count() or 1) + 1, "not percent"),
    ],
)
def test_a_bad_quota_is_refused_in_one_line_before_any_group_is_made(
    quota: float, words: str
) -> None:
    usable = cpu_capping_problem() is None
    with pytest.raises(MallocbenchError) as info:
        CpuCgroup.create("bad", quota)
    message = str(info.value)
    assert "\n" not in message and message.startswith("CPU quota") and words in message
    if usable:
        own = cgroup_of("cpu", "self")
        assert own is not None
        # The group would be ours (v1) or a sibling of ours (v2).
        assert not any((base / cgroup_name("bad")).exists() for base in (own, own.parent))


def test_cpu_capping_problem_names_what_is_missing(tmp_path: Path) -> None:
    assert "is not a cpu cgroup" in (cpu_capping_problem(tmp_path) or "")
    assert "does not exist" in (cpu_capping_problem(tmp_path / "gone") or "")


def test_create_refuses_a_directory_that_is_no_cpu_cgroup(tmp_path: Path) -> None:
    with pytest.raises(MallocbenchError) as info:
        CpuCgroup.create("x", 0.5, parent=tmp_path)
    message = str(info.value)
    assert "\n" not in message and "not a cpu cgroup" in message and "run as root" in message
    assert list(tmp_path.iterdir()) == []


# --- a real server ------------------------------------------------------------------------------


@pytest.mark.server
def test_a_server_starts_inside_its_cpu_cgroup(build: ServerBuild, tmp_path: Path) -> None:
    _require_cpu_cgroup()
    group = CpuCgroup.create("server", 0.95)
    config = ServerConfig(
        engine=engines.get("innodb"),
        cache_bytes=64 * MiB,
        allocator=allocators.get("glibc"),
        cpu_cgroup=group,
    )
    with group, running(build, tmp_path, config) as server:
        assert group.pids() == [server.pid]
        assert cgroup_of("cpu", server.pid) == group.path
        assert server.query("SELECT 1")
    assert not group.path.exists()
