"""OOM kills told apart from other SIGKILLs: cgroup and kernel-log parsing, real capped groups,
and real private servers pushed over their memory cap."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pymysql
import pytest

from mallocbench import allocators
from mallocbench.errors import MallocbenchError
from mallocbench.servers import engines
from mallocbench.servers.cgroup.hierarchy import (
    CgroupMount,
    memory_cgroup_of,
    memory_cgroup_path,
    parse_counters,
    parse_mountinfo,
)
from mallocbench.servers.cgroup.oom import (
    KernelLog,
    KmsgRecord,
    OomWatch,
    oom_killed_pids,
    parse_kmsg_record,
)
from mallocbench.servers.cgroup.own import MemoryCgroup, cgroup_name
from mallocbench.servers.mariadb import ServerBuild, ServerConfig, running

MiB = 1 << 20

# --- parsers ----------------------------------------------------------------------------------

HYBRID_MOUNTINFO = """\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
"""

PROC_CGROUP_V1 = """\
9:name=systemd:/
8:pids:/
4:memory:/process_api/edcd97f825d720ead11277c74743be8d
3:cpu,cpuacct:/
"""
PROC_CGROUP_V2 = "0::/user.slice/user-1000.slice/session-2.scope\n"
PROC_CGROUP_HYBRID = PROC_CGROUP_V1 + "0::/user.slice\n"


def test_mountinfo_keeps_the_memory_mount_and_unified_mounts_only() -> None:
    mounts = parse_mountinfo(HYBRID_MOUNTINFO)
    assert mounts == [
        CgroupMount(1, Path("/sys/fs/cgroup/memory"), "/"),
        CgroupMount(2, Path("/sys/fs/cgroup/unified"), "/"),
    ]


def test_mountinfo_unescapes_paths_and_keeps_a_containers_subtree_root() -> None:
    text = (
        "50 40 0:32 /docker/abc /sys/fs/cgroup/mem\\040ory ro,nosuid - cgroup cgroup "
        "rw,memory,cpu\n"
        "51 40 0:33 / /run/x shared:5 master:2 - cgroup2 none rw,nsdelegate\n"
    )
    assert parse_mountinfo(text) == [
        CgroupMount(1, Path("/sys/fs/cgroup/mem ory"), "/docker/abc"),
        CgroupMount(2, Path("/run/x"), "/"),
    ]


def test_a_cgroup_path_is_joined_below_the_mounts_root() -> None:
    whole = CgroupMount(1, Path("/sys/fs/cgroup/memory"), "/")
    assert whole.directory("/a/b") == Path("/sys/fs/cgroup/memory/a/b")
    assert whole.directory("/") == Path("/sys/fs/cgroup/memory")
    subtree = CgroupMount(1, Path("/sys/fs/cgroup/memory"), "/docker/abc")
    assert subtree.directory("/docker/abc/x") == Path("/sys/fs/cgroup/memory/x")
    assert subtree.directory("/docker/abc") == Path("/sys/fs/cgroup/memory")
    assert subtree.directory("/docker/abcd/x") is None  # a sibling, not below the root
    assert subtree.directory("/other") is None


def test_proc_cgroup_gives_the_memory_line_on_v1_and_the_unified_line_on_v2() -> None:
    v1_path = "/process_api/edcd97f825d720ead11277c74743be8d"
    assert memory_cgroup_path(PROC_CGROUP_V1, 1) == v1_path
    assert memory_cgroup_path(PROC_CGROUP_V1, 2) is None
    assert memory_cgroup_path(PROC_CGROUP_V2, 2) == "/user.slice/user-1000.slice/session-2.scope"
    assert memory_cgroup_path(PROC_CGROUP_V2, 1) is None
    # Hybrid: which line counts depends on where the memory controller is mounted.
    assert memory_cgroup_path(PROC_CGROUP_HYBRID, 1) == v1_path
    assert memory_cgroup_path(PROC_CGROUP_HYBRID, 2) == "/user.slice"
    # Co-mounted controllers share one line; a path may itself hold a colon.
    assert memory_cgroup_path("5:cpu,memory:/a:b\n", 1) == "/a:b"


def test_counters_of_memory_events_and_oom_control() -> None:
    events = "low 0\nhigh 12\nmax 40\noom 3\noom_kill 2\noom_group_kill 0\n"
    assert parse_counters(events)["oom_kill"] == 2
    oom_control = "oom_kill_disable 0\nunder_oom 0\noom_kill 7\n"
    assert parse_counters(oom_control) == {"oom_kill_disable": 0, "under_oom": 0, "oom_kill": 7}
    # Kernels before 4.13 have no oom_kill line in memory.oom_control.
    assert "oom_kill" not in parse_counters("oom_kill_disable 0\nunder_oom 0\n")


def test_kmsg_records_carry_facility_sequence_and_message() -> None:
    raw = (
        "3,1042,255076334,-;Memory cgroup out of memory: Killed process 4432 (python3)\n"
        " SUBSYSTEM=memory\n"
    )
    assert parse_kmsg_record(raw) == KmsgRecord(
        0, 1042, 255076334, "Memory cgroup out of memory: Killed process 4432 (python3)"
    )
    assert parse_kmsg_record("12,419,279465193,-;hello from user space\n") == KmsgRecord(
        1, 419, 279465193, "hello from user space"
    )
    assert parse_kmsg_record("no header here") is None
    assert parse_kmsg_record("x,1,2,-;bad priority") is None


def test_kernel_log_lines_name_the_oom_victims() -> None:
    messages = [
        "Out of memory: Killed process 12345 (mariadbd) total-vm:2097152kB, anon-rss:1kB",
        "Memory cgroup out of memory: Killed process 222 (python3) total-vm:221384kB",
        "oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,"
        "oom_memcg=/a,task_memcg=/a,task=x,pid=9,uid=0,pid=333,uid=0",
        "oom_reaper: reaped process 444 (mariadbd), now anon-rss:0kB, file-rss:0kB",
        # Choosing a victim is not killing it (kernels before 4.19 print both lines).
        "Out of memory: Kill process 555 (mysqld) score 900 or sacrifice child",
        "mariadbd invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=0",
        "Tasks state (memory values in pages):",
    ]
    assert oom_killed_pids(messages) == {12345, 222, 333, 444}


def test_cgroup_names_are_one_safe_path_component() -> None:
    assert cgroup_name("../../etc/passwd", pid=77) == "mallocbench-etc-passwd-77"
    assert cgroup_name("je 4cpu", pid=1) == "mallocbench-je-4cpu-1"
    assert cgroup_name("///", pid=1) == "mallocbench-group-1"
    assert cgroup_name("x" * 500, pid=1) == f"mallocbench-{'x' * 64}-1"


# --- the verdict, with a stand-in kernel log --------------------------------------------------


class _Log:
    """Stands in for /dev/kmsg: records handed out once, like the real reader."""

    def __init__(self, *messages: str):
        self.pending = [KmsgRecord(0, i, i, m) for i, m in enumerate(messages)]

    def read(self) -> list[KmsgRecord]:
        out, self.pending = self.pending, []
        return out

    def close(self) -> None:
        pass


def _fake_cgroup(tmp_path: Path, kills: int) -> Path:
    (tmp_path / "memory.oom_control").write_text(
        f"oom_kill_disable 0\nunder_oom 0\noom_kill {kills}\n"
    )
    return tmp_path


def _watch(pid: int, cgroup: Path | None, log: _Log | None) -> OomWatch:
    kills = None if cgroup is None else parse_counters((cgroup / "memory.oom_control").read_text())
    return OomWatch(pid, cgroup, None if kills is None else kills["oom_kill"], log)  # type: ignore[arg-type]


def test_watch_believes_the_log_over_a_shared_counter(tmp_path: Path) -> None:
    cgroup = _fake_cgroup(tmp_path, 0)
    log = _Log()
    watch = _watch(100, cgroup, log)
    # Someone in the group was OOM-killed, but not our process.
    _fake_cgroup(tmp_path, 1)
    log.pending = [KmsgRecord(0, 1, 1, "Killed process 101 (hog) total-vm:1kB")]
    assert watch.counter_rose() is True
    assert watch.killed(-signal.SIGKILL) is False


def test_watch_takes_the_log_naming_the_pid_without_a_counter() -> None:
    log = _Log("Out of memory: Killed process 100 (mariadbd) total-vm:1kB")
    assert _watch(100, None, log).killed(-signal.SIGKILL) is True


def test_watch_falls_back_on_the_counter_without_a_log(tmp_path: Path) -> None:
    cgroup = _fake_cgroup(tmp_path, 3)
    risen, same = _watch(100, cgroup, None), _watch(100, cgroup, None)
    _fake_cgroup(tmp_path, 4)
    assert risen.killed(-signal.SIGKILL) is True
    assert same.counter_rose() is True
    _fake_cgroup(tmp_path, 3)
    same.kills_at_start = 3
    assert same.killed(-signal.SIGKILL) is False
    assert _watch(100, None, None).killed(-signal.SIGKILL) is False  # nothing to tell by


def test_watch_needs_a_sigkill_and_keeps_its_first_verdict(tmp_path: Path) -> None:
    line = "Memory cgroup out of memory: Killed process 100 (mariadbd)"
    assert _watch(100, None, _Log(line)).killed(-signal.SIGSEGV) is False
    assert _watch(100, None, _Log(line)).killed(None) is False
    cgroup = _fake_cgroup(tmp_path, 0)
    watch = _watch(100, cgroup, _Log())
    assert watch.killed(-signal.SIGKILL) is False
    _fake_cgroup(tmp_path, 5)  # later kills in the group change nothing
    assert watch.killed(-signal.SIGKILL) is False


# --- real cgroups, no server --------------------------------------------------------------------


def _require_writable_cgroup() -> None:
    try:
        MemoryCgroup.create("probe").remove()
    except MallocbenchError as exc:
        pytest.skip(str(exc))


def test_create_refuses_a_directory_that_is_no_memory_cgroup(tmp_path: Path) -> None:
    with pytest.raises(MallocbenchError) as info:
        MemoryCgroup.create("x", 100 * MiB, parent=tmp_path)
    message = str(info.value)
    assert "\n" not in message and "not a memory cgroup" in message and "run as root" in message
    assert list(tmp_path.iterdir()) == []


def test_capped_child_is_oom_killed_and_the_group_goes_away(integrity_figures) -> None:
    _require_writable_cgroup()
    with MemoryCgroup.create("child", 64 * MiB) as group:
        if group.version == 1:
            assert group.path.parent == memory_cgroup_of("self")
        assert group.path.name == f"mallocbench-child-{os.getpid()}"
        assert group.limit_bytes() == 64 * MiB
        memsw = group.path / "memory.memsw.limit_in_bytes"
        if group.version == 1 and memsw.exists():
            assert int(memsw.read_text()) == 64 * MiB  # swap cannot stretch the cap
        hog = subprocess.Popen(
            [sys.executable, "-c", "b = bytearray(256 << 20)"], preexec_fn=group.join_self
        )
        watch = OomWatch.start(hog.pid)
        assert watch.cgroup == group.path
        integrity_figures.add("faults injected")
        code = hog.wait(30)
        assert code == -signal.SIGKILL
        assert watch.killed(code) is True
        assert group.oom_kills() == 1
        peak = group.peak_bytes()
        assert peak is not None and 48 * MiB < peak <= 64 * MiB
    assert not group.path.exists()


def test_remove_moves_lingering_members_to_the_parent(integrity_figures) -> None:
    _require_writable_cgroup()
    group = MemoryCgroup.create("linger")
    sleeper = subprocess.Popen(["sleep", "60"], preexec_fn=group.join_self)
    try:
        assert group.pids() == [sleeper.pid]
        started = time.monotonic()
        group.remove(timeout=0.5)
        assert time.monotonic() - started < 2
        assert not group.path.exists()
        assert memory_cgroup_of(sleeper.pid) == group.path.parent
    finally:
        sleeper.kill()
        sleeper.wait(10)
        group.remove()


# --- real servers ---------------------------------------------------------------------------------


def _config(group: MemoryCgroup) -> ServerConfig:
    return ServerConfig(
        engine=engines.get("innodb"),
        cache_bytes=64 * MiB,
        allocator=allocators.get("glibc"),
        # One REPEAT() may then build a string of up to 1 GiB in a single allocation.
        overrides={"max_allowed_packet": "1G"},
        memory_cgroup=group,
    )


def _leftovers(group: MemoryCgroup, integrity_figures) -> int:
    n = len(group.pids()) + (1 if group.path.exists() else 0)
    integrity_figures.add("orphans", n)
    return n


@pytest.mark.server
def test_server_over_its_memory_cap_is_oom(
    build: ServerBuild, tmp_path: Path, integrity_figures
) -> None:
    _require_writable_cgroup()
    group = MemoryCgroup.create("oom", 1 << 30)
    with group, running(build, tmp_path, _config(group)) as server:
        assert group.pids() == [server.pid]
        idle = group.usage_bytes()
        assert idle is not None
        # Tightened only now: the server's start-up needs an unknown amount.
        group.set_limit(idle + 150 * MiB)
        integrity_figures.add("faults injected")
        # 512 MiB in one string, far over the cap: the kernel kills the server.
        with pytest.raises(pymysql.err.OperationalError):
            server.query("SELECT LENGTH(REPEAT(REPEAT('x', 1048576), 512))")
        server.proc.wait(20)  # type: ignore[union-attr]
        exit_info = server.exit_info()
        assert exit_info is not None
        assert exit_info.signal == "SIGKILL" and not exit_info.stopped_by_us
        assert exit_info.status == "oom" and exit_info.oom
        assert group.oom_kills() == 1
    assert _leftovers(group, integrity_figures) == 0


@pytest.mark.server
def test_sigkill_of_a_capped_server_is_a_crash(
    build: ServerBuild, tmp_path: Path, integrity_figures
) -> None:
    _require_writable_cgroup()
    group = MemoryCgroup.create("kill", 1 << 30)
    with group, running(build, tmp_path, _config(group)) as server:
        integrity_figures.add("faults injected")
        os.kill(server.pid, signal.SIGKILL)
        server.proc.wait(20)  # type: ignore[union-attr]
        exit_info = server.exit_info()
        assert exit_info is not None and exit_info.signal == "SIGKILL"
        assert exit_info.status == "crashed" and not exit_info.oom
        assert group.oom_kills() == 0
    assert _leftovers(group, integrity_figures) == 0


@pytest.mark.server
def test_a_neighbours_oom_kill_does_not_make_the_servers_sigkill_an_oom(
    build: ServerBuild, tmp_path: Path, integrity_figures
) -> None:
    """The cgroup counter rises for any member; only the kernel log names the victim."""
    log = KernelLog.open()
    if log is None:
        pytest.skip("the kernel log is not readable here: the counter is all there is")
    log.close()
    _require_writable_cgroup()
    group = MemoryCgroup.create("neighbour", 1 << 30)
    with group, running(build, tmp_path, _config(group)) as server:
        idle = group.usage_bytes()
        assert idle is not None
        group.set_limit(idle + 100 * MiB)
        # oom_score_adj 1000 makes the neighbour the OOM killer's choice, not the server.
        neighbour = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "open('/proc/self/oom_score_adj', 'w').write('1000'); b = bytearray(512 << 20)",
            ],
            preexec_fn=group.join_self,
        )
        integrity_figures.add("faults injected")
        assert neighbour.wait(30) == -signal.SIGKILL
        assert group.oom_kills() == 1
        assert server.alive()
        integrity_figures.add("faults injected")
        os.kill(server.pid, signal.SIGKILL)
        server.proc.wait(20)  # type: ignore[union-attr]
        exit_info = server.exit_info()
        assert exit_info is not None and exit_info.signal == "SIGKILL"
        assert exit_info.status == "crashed"
    assert _leftovers(group, integrity_figures) == 0


def test_kernel_log_reader_skips_what_user_space_writes() -> None:
    log = KernelLog.open()
    if log is None or not os.access("/dev/kmsg", os.W_OK):
        pytest.skip("the kernel log is not readable and writable here")
    marker = f"mallocbench test {os.getpid()}: a record from user space"
    with contextlib.closing(log):
        Path("/dev/kmsg").write_text(marker + "\n")
        assert all(r.message != marker for r in log.read())
    whole = KernelLog.open(at_end=False)
    assert whole is not None
    with contextlib.closing(whole):
        assert whole.read()  # the kernel's own records since boot, or the newest of them


class _DyingServer:
    """A live session whose server is seen dead after `alive_for` more looks."""

    def __init__(self, alive_for: int | None) -> None:
        self.looks = 0
        self.alive_for = alive_for

    def alive(self) -> bool:
        self.looks += 1
        return self.alive_for is None or self.looks <= self.alive_for


def test_a_server_seen_dead_just_after_its_client_failed_is_a_death_not_a_failure() -> None:
    from mallocbench.run.cellends import died_meanwhile

    # The client lost its connections a moment before the kill was seen: a death.
    assert died_meanwhile(_DyingServer(alive_for=3), grace_s=5.0)  # type: ignore[arg-type]
    # A server that stays up: the step itself failed, decided once the grace is over.
    started = time.monotonic()
    assert not died_meanwhile(_DyingServer(alive_for=None), grace_s=0.3)  # type: ignore[arg-type]
    assert 0.3 <= time.monotonic() - started < 2.0


def test_the_peak_sampler_keeps_a_dead_process_last_reading() -> None:
    """A server killed within its first second leaves no per-second report: the sampler's
    last reading of it alive, with its charge, is the only point of its timeline."""
    from mallocbench.probes.process import PeakSampler

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    charges = iter(range(1, 1000))
    with PeakSampler(child.pid, interval_s=0.05, charge=lambda: {"n": next(charges)}) as peaks:
        time.sleep(0.3)
        assert peaks.last is not None and not peaks.outlived
        child.kill()
        child.wait()
        time.sleep(0.2)
    assert peaks.outlived and peaks.last is not None
    t, memory, charged = peaks.last
    assert t < time.time() and 0 < memory.rss_bytes <= peaks.peak_rss and charged["n"] >= 2
