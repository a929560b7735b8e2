"""Deployment snippets: systemd checks the drop-ins, and a real server runs under one."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from mallocbench import allocators
from mallocbench.deploy import forms as deploy
from mallocbench.deploy import systemd
from mallocbench.errors import MallocbenchError
from mallocbench.memory.advice import advise
from mallocbench.memory.breakdown import Breakdown
from mallocbench.memory.process import ArenaCount, ProcessMemory
from mallocbench.memory.report import AllocatorSummary, MemoryReport
from mallocbench.model.results import SetupInfo
from mallocbench.report.memory_advice import shown_advice
from mallocbench.servers import engines
from mallocbench.servers.mariadb import ServerBuild, ServerConfig, running

JEMALLOC = allocators.get("jemalloc", require_available=False)
SYSTEM_UNIT = Path("/lib/systemd/system/mariadb.service")
# A name no host has drop-ins for, so only the drop-in under test is loaded.
TEST_SERVICE = "mallocbench-deploy-test"
MINIMAL_UNIT = "[Unit]\nDescription=test\n[Service]\nExecStart=/bin/true\n"


def jemalloc_setup(**kw: object) -> SetupInfo:
    values: dict[str, object] = {
        "name": "je",
        "allocator": "jemalloc",
        "allocator_version": "5.3.0-1",
        "allocator_library": JEMALLOC.path or "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2",
        "knobs": {"MALLOC_CONF": "background_thread:true,dirty_decay_ms:5000"},
    }
    values.update(kw)
    return SetupInfo(**values)  # type: ignore[arg-type]


def glibc_setup(knobs: dict[str, str] | None = None) -> SetupInfo:
    return SetupInfo(
        "glibc-arena2", "glibc", "2.36", "/usr/lib/x86_64-linux-gnu/libc.so.6", knobs or {}
    )


def systemd_verify(units: Path, service: str) -> subprocess.CompletedProcess[str]:
    """`systemd-analyze verify` of `service` from `units`, its drop-ins included.

    SYSTEMD_UNIT_PATH puts `units` first; the trailing ':' keeps the default directories,
    without which the unit's default dependencies (sysinit.target) are missing. Warnings
    about a drop-in go to stderr while the exit status stays 0, so stderr is the verdict.
    """
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze is not installed (Debian package: systemd)")
    unit = units / f"{service}.service"
    if not unit.exists():
        text = SYSTEM_UNIT.read_text() if SYSTEM_UNIT.is_file() else MINIMAL_UNIT
        unit.write_text(text)
    return subprocess.run(
        ["systemd-analyze", "verify", f"{service}.service"],
        env={**os.environ, "SYSTEMD_UNIT_PATH": f"{units}:"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


AWKWARD = {
    "MALLOC_CONF": "narenas:4,dirty_decay_ms:1000",
    "SPACES": "two words  and a tab-free gap",
    "QUOTES": 'it\'s "quoted"',
    "BACKSLASH": "a\\b\\",
    "PERCENT": "50%h %%",
    "DOLLAR": "$HOME ${X} $(Y)",
    "SEMI_HASH": "a;b #c",
    "UNICODE": "größe",
    "EMPTY": "",
}


@pytest.mark.parametrize(
    "setup",
    [
        jemalloc_setup(),
        jemalloc_setup(
            name="je/awkward name", knobs=AWKWARD, cpus="0-3", memory_limit_bytes=1 << 30
        ),
        glibc_setup({"MALLOC_ARENA_MAX": "2"}),
        glibc_setup(),
    ],
    ids=["jemalloc", "awkward-values", "glibc-knobs", "glibc-plain"],
)
def test_dropin_passes_systemd_verify_and_reads_back(setup: SetupInfo, tmp_path: Path) -> None:
    deployment = deploy.deployment_for(setup, TEST_SERVICE)
    path = systemd.write_dropin(deployment, tmp_path)
    assert path == tmp_path / f"{TEST_SERVICE}.service.d" / path.name
    assert path.name.startswith("mallocbench-")
    result = systemd_verify(tmp_path, TEST_SERVICE)
    assert result.stderr == "" and result.returncode == 0
    assert systemd.dropin_environment(path) == deployment.environment


def test_broken_dropin_is_caught_by_systemd_verify(tmp_path: Path) -> None:
    """The check above can fail: systemd loads the drop-in and reports what it ignores."""
    deployment = deploy.deployment_for(jemalloc_setup(), TEST_SERVICE)
    path = systemd.write_dropin(deployment, tmp_path)
    good = systemd_verify(tmp_path, TEST_SERVICE)
    assert good.stderr == ""
    path.write_text("[Service]\nEnvironment=SPACES=two words\nEnvironmen=X=1\n")
    bad = systemd_verify(tmp_path, TEST_SERVICE)
    assert str(path) in bad.stderr
    assert "Invalid environment assignment" in bad.stderr and "Unknown key" in bad.stderr


@pytest.mark.server
def test_server_started_with_the_dropin_environment_maps_jemalloc(
    build: ServerBuild, tmp_path: Path
) -> None:
    if JEMALLOC.path is None:
        pytest.skip("jemalloc is not installed (Debian package: libjemalloc2)")
    deployment = deploy.deployment_for(jemalloc_setup(), "mariadb")
    env = systemd.dropin_environment(systemd.write_dropin(deployment, tmp_path / "units"))
    config = ServerConfig(
        engine=engines.get("innodb"),
        cache_bytes=32 << 20,
        allocator=allocators.get(env["LD_PRELOAD"]),
        knobs={k: v for k, v in env.items() if k != "LD_PRELOAD"},
    )
    with running(build, tmp_path / "server", config) as server:
        given = server.environment()
        assert {k: given[k] for k in env} == env
        maps = Path(f"/proc/{server.pid}/maps").read_text()
        assert os.path.realpath(JEMALLOC.path) in maps
        environ = Path(f"/proc/{server.pid}/environ").read_bytes().split(b"\0")
        assert f"MALLOC_CONF={env['MALLOC_CONF']}".encode() in environ


def test_glibc_with_knobs_snippets() -> None:
    d = deploy.deployment_for(glibc_setup({"MALLOC_ARENA_MAX": "2"}))
    assert d.preload is None and d.environment == {"MALLOC_ARENA_MAX": "2"}
    dropin = d.snippets["systemd"].text
    assert "Environment=MALLOC_ARENA_MAX=2\n" in dropin
    assert "UnsetEnvironment=LD_PRELOAD\n" in dropin and "LD_PRELOAD=" not in dropin
    assert "malloc-lib=\n" in d.snippets["mysqld_safe"].text
    assert "MALLOC_ARENA_MAX" in " ".join(d.snippets["mysqld_safe"].notes)
    assert "export MALLOC_ARENA_MAX=2" in d.snippets["etc_default"].text
    assert 'MALLOC_ARENA_MAX: "2"' in d.snippets["compose"].text
    assert '- name: MALLOC_ARENA_MAX\n    value: "2"' in d.snippets["kubernetes"].text
    assert "mycnf" not in d.snippets  # the setup changed no server option
    assert any("lib(jemalloc|tcmalloc|mimalloc)" in line for line in d.verify)


def test_glibc_without_knobs_needs_no_preload() -> None:
    d = deploy.deployment_for(glibc_setup())
    assert d.environment == {} and "etc_default" not in d.snippets
    service = d.snippets["systemd"].text.split("[Service]\n", 1)[1]
    assert service == "UnsetEnvironment=LD_PRELOAD\n"
    assert "environment: {}" in d.snippets["compose"].text
    assert "env: []" in d.snippets["kubernetes"].text


def test_jemalloc_with_malloc_conf_snippets() -> None:
    setup = jemalloc_setup(config={"sort_buffer_size": "2M", "init_connect": "SET @a = 'x y'"})
    d = deploy.deployment_for(setup)
    lib = setup.allocator_library
    assert d.preload == lib and d.package == "libjemalloc2"
    dropin = d.snippets["systemd"].text
    assert f"Environment=LD_PRELOAD={lib}\n" in dropin
    assert "Environment=MALLOC_CONF=background_thread:true,dirty_decay_ms:5000\n" in dropin
    assert "libjemalloc2" in dropin
    assert f"malloc-lib={lib}\n" in d.snippets["mysqld_safe"].text
    for kind in ("compose", "kubernetes"):
        assert "apt-get install -y libjemalloc2" in d.snippets[kind].text
    mycnf = d.snippets["mycnf"].text
    assert "[mysqld]\nsort_buffer_size = 2M\ninit_connect = \"SET @a = 'x y'\"\n" in mycnf
    assert d.verify[1].startswith("mallocbench memory --socket ")
    assert "--pid" in d.verify[1] and f"grep -m1 -F {lib}" in d.verify[2]
    text = deploy.render(d)
    assert "### systemd drop-in" in text and "### Verify after the restart" in text
    assert json.loads(json.dumps(d.to_dict()))["environment"]["LD_PRELOAD"] == lib


def test_custom_library_path(tmp_path: Path) -> None:
    lib = tmp_path / "opt" / "libjemalloc.so.2"
    lib.parent.mkdir()
    lib.write_bytes(b"")
    d = deploy.deployment_for(jemalloc_setup(allocator_library=str(lib), knobs={}))
    assert d.preload == str(lib) and d.package is None
    assert f"Environment=LD_PRELOAD={lib}\n" in d.snippets["systemd"].text
    assert "custom library" in d.snippets["systemd"].text
    assert "custom library" in d.snippets["compose"].text


def test_packaged_library_uses_its_soname_link() -> None:
    tcmalloc = allocators.get("tcmalloc", require_available=False)
    if tcmalloc.path is None or tcmalloc.path.endswith("/libtcmalloc.so.4"):
        pytest.skip("needs libtcmalloc.so.4 as a link to a versioned file")
    setup = SetupInfo("tc", "tcmalloc", allocator_library=tcmalloc.path)
    d = deploy.deployment_for(setup)
    assert d.preload is not None and d.preload.endswith("/libtcmalloc.so.4")


def test_values_with_spaces_and_specials_are_quoted() -> None:
    line = systemd.environment_line("GLIBC_TUNABLES", 'a b "c" 5% \\')
    assert line == 'Environment="GLIBC_TUNABLES=a b \\"c\\" 5%% \\\\"'
    assert systemd.environment_line("MALLOC_CONF", "a:1,b:2") == "Environment=MALLOC_CONF=a:1,b:2"
    d = deploy.deployment_for(jemalloc_setup(knobs={"MALLOC_CONF": "x y", "D": "$x"}))
    compose = d.snippets["compose"].text
    assert 'MALLOC_CONF: "x y"' in compose and 'D: "$$x"' in compose
    assert "export MALLOC_CONF='x y'" in d.snippets["etc_default"].text


@pytest.mark.parametrize("value", ["a\nEnvironment=LD_PRELOAD=/evil.so", "a\0b", "a\rb"])
def test_values_that_would_break_the_unit_are_rejected(value: str) -> None:
    with pytest.raises(MallocbenchError, match=r"^setup je: MALLOC_CONF has a newline"):
        deploy.deployment_for(jemalloc_setup(knobs={"MALLOC_CONF": value}))
    with pytest.raises(MallocbenchError, match="config sort_buffer_size has a newline"):
        deploy.deployment_for(jemalloc_setup(config={"sort_buffer_size": value}))


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"knobs": {"BAD NAME": "1"}}, "not an environment variable name"),
        ({"allocator_library": "/opt/my libs/libje.so"}, "space or colon"),
        ({"allocator_library": "libjemalloc.so.2"}, "not an absolute path"),
    ],
)
def test_unusable_setups_are_refused(kw: dict[str, object], message: str) -> None:
    with pytest.raises(MallocbenchError, match=message):
        deploy.deployment_for(jemalloc_setup(**kw))


def test_service_names() -> None:
    d = deploy.deployment_for(jemalloc_setup(), "mysql.service")
    assert d.dropin_relpath == "mysql.service.d/mallocbench-je.conf"
    with pytest.raises(MallocbenchError, match="not a systemd service name"):
        deploy.deployment_for(jemalloc_setup(), "../etc/passwd")


def test_write_dropin_errors_are_one_line(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(MallocbenchError, match=r"^cannot write the drop-in .*mariadb\.service\.d"):
        systemd.write_dropin(deploy.deployment_for(jemalloc_setup()), blocker)
    assert blocker.read_text() == ""


def test_dropin_environment_follows_systemd_rules(tmp_path: Path) -> None:
    path = tmp_path / "x.conf"
    path.write_text(
        "[Unit]\nEnvironment=IGNORED=1\n[Service]\n# Environment=COMMENT=1\n"
        'Environment=A=1 "B=two words" "C=x\\\n  y"\nEnvironment=D=%%\\x41\n'
    )
    # A continued line is joined with a space, as systemd joins it.
    expected = {"A": "1", "B": "two words", "C": "x y", "D": "%A"}
    assert systemd.dropin_environment(path) == expected
    if shutil.which("systemd-analyze"):
        dropin = tmp_path / f"{TEST_SERVICE}.service.d" / "x.conf"
        dropin.parent.mkdir()
        dropin.write_text(path.read_text().replace("[Unit]\nEnvironment=IGNORED=1\n", ""))
        assert systemd_verify(tmp_path, TEST_SERVICE).stderr == ""
    path.write_text(
        "[Service]\nEnvironment=A=1\nEnvironment=\n"
        "Environment=E='it''s' F=\\x41 G=%%\nUnsetEnvironment=F\n"
    )
    assert systemd.dropin_environment(path) == {"E": "its", "G": "%"}
    path.write_text('[Service]\nEnvironment="A=1\n')
    with pytest.raises(MallocbenchError, match=re.escape(f"{path}:2: unterminated quote")):
        systemd.dropin_environment(path)


def test_dropin_hint_names_the_line_and_the_command() -> None:
    hint = deploy.dropin_hint({"MALLOC_ARENA_MAX": "2"})
    assert "Environment=MALLOC_ARENA_MAX=2" in hint
    assert "mariadb.service.d" in hint and "--write-dropin" in hint


def memory_report(allocator: str, knobs: dict[str, str]) -> MemoryReport:
    """A glibc-heavy account: many arenas, a heap twice what the server accounts for."""
    cpus = os.cpu_count() or 1
    proc = ProcessMemory(
        pid=1,
        name="mariadbd",
        exe=None,
        rss=2 << 30,
        vsz=3 << 30,
        status={},
        rollup={},
        threads=50,
        arenas=8 * cpus + 1 if allocator == "glibc" else None,
        arena_source=ArenaCount.MAPS,
        knobs=knobs,
    )
    return MemoryReport(
        taken_at=0.0,
        where="test",
        server=None,
        process=proc,
        pid_source="--pid",
        allocator=AllocatorSummary(name=allocator, path=None),
        footprint=None,
        breakdown=Breakdown(rss=2 << 30, rows=[], heap_rss=1 << 30, heap_accounted=512 << 20),
        memory_limit=None,
        thp=None,
    )


def _advice(report: MemoryReport) -> dict[str, str]:
    return {a.title: a.advice for a in shown_advice(report, advise(report))}


def test_memory_advice_shows_the_dropin_line() -> None:
    advice = _advice(memory_report("glibc", {}))
    arenas = next(text for title, text in advice.items() if "glibc arenas" in title)
    assert "Environment=MALLOC_ARENA_MAX=4" in arenas and "--write-dropin" in arenas
    heap = advice["heap holds more than the server accounts for"]
    if JEMALLOC.path is not None:
        assert f"Environment=LD_PRELOAD={JEMALLOC.path} " in heap
    else:
        assert "apt-get install libjemalloc2" in heap
    advice = _advice(memory_report("jemalloc", {"MALLOC_CONF": "x:1"}))
    heap = advice["heap holds more than the server accounts for"]
    assert "Environment=MALLOC_CONF=x:1,dirty_decay_ms:5000,muzzy_decay_ms:5000 " in heap


def test_memory_advice_speaks_the_servers_own_form() -> None:
    """A server mysqld_safe or a container runs gets no drop-in it would not read."""
    report = memory_report("glibc", {})
    report.deploy_form = "mysqld_safe"
    advice = _advice(report)
    arenas = next(text for title, text in advice.items() if "glibc arenas" in title)
    assert "Environment=" not in arenas and "MALLOC_ARENA_MAX=4 in its environment" in arenas
    assert "restart the server through mysqld_safe" in arenas
    report.deploy_form = "docker"
    advice = _advice(report)
    arenas = next(text for title, text in advice.items() if "glibc arenas" in title)
    assert "set MALLOC_ARENA_MAX=4 in the Compose service's environment" in arenas
