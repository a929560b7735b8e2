"""The knob catalogue against the installed allocators, the environment a setting makes,
and experiment validation refusing knobs an allocator does not read, at their line."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from cli_runner import run_cli
from mallocbench import allocators
from mallocbench.allocators import knobs
from mallocbench.errors import MallocbenchError
from mallocbench.run.loading import load

INSTALLED = [a for a in allocators.builtin_allocators() if a.available]


def strings_of(path: str) -> set[str]:
    """The library's printable strings, read by binutils rather than by the code tested."""
    out = subprocess.run(["strings", "-n", "3", path], capture_output=True, text=True, check=True)
    return set(out.stdout.split())


@pytest.mark.parametrize("allocator", INSTALLED, ids=lambda a: a.name)
def test_availability_matches_the_installed_library(allocator: allocators.Allocator) -> None:
    """Each catalogue knob is available exactly when its name is in the library."""
    assert allocator.knobs, f"{allocator.name} has no catalogue"
    if allocator.knob_family == "glibc":
        listed = subprocess.run(
            [knobs.loader_path() or "/lib64/ld-linux-x86-64.so.2", "--list-tunables"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout
        expected = set(re.findall(r"^(glibc\.[\w.]+):", listed, re.MULTILINE))
        if not expected:
            pytest.skip("this loader cannot list its tunables")
        for knob in allocator.knobs:
            assert knobs.is_available(allocator, knob) == (knob.key in expected), knob.name
        return
    assert allocator.path is not None
    found = strings_of(allocator.path)
    for knob in allocator.knobs:
        if allocator.knob_family == "jemalloc":
            present = f"opt.{knob.key}" in found or knob.key in found
        elif allocator.knob_family == "mimalloc":
            present = knob.key.removeprefix("MIMALLOC_").lower() in found
        else:
            present = knob.key in found
        assert knobs.is_available(allocator, knob) == present, knob.name


@pytest.mark.parametrize("allocator", INSTALLED, ids=lambda a: a.name)
def test_a_made_up_name_is_not_detected(allocator: allocators.Allocator) -> None:
    names = knobs.installed_names(allocator)
    assert names, f"nothing detected in {allocator.name}"
    for channel, found in names.items():
        assert found, f"{allocator.name}: no {channel} names found"
        assert "dirty_decay_msx" not in found
        assert "MALLOC_ARENAS_MAX" not in found
        assert "TCMALLOC_RELEASE_RATES" not in found
    assert not knobs.contains_name(allocator.path, "made_up_knob_name")


def test_the_core_knobs_of_the_installed_versions_are_found() -> None:
    """The knobs the search needs are read by what Debian 12 ships."""
    expect = {
        "glibc": ["arena_max", "trim_threshold", "mmap_threshold", "top_pad", "tcache_count"],
        "jemalloc": ["dirty_decay_ms", "muzzy_decay_ms", "narenas", "background_thread"],
        "tcmalloc_minimal": ["release_rate", "aggressive_decommit"],
    }
    for name, wanted in expect.items():
        allocator = allocators.get(name, require_available=False)
        if not allocator.available:
            continue
        for knob_name in wanted:
            assert knobs.is_available(allocator, knobs.find(allocator, knob_name)), knob_name


def test_env_composes_one_malloc_conf_and_one_glibc_tunables() -> None:
    je = allocators.get("jemalloc", require_available=False)
    if je.available:
        env = knobs.environment(
            je, {"dirty_decay_ms": 0, "muzzy_decay_ms": "5000", "background_thread": True}
        )
        assert env == {"MALLOC_CONF": "dirty_decay_ms:0,muzzy_decay_ms:5000,background_thread:true"}
        assert knobs.environment(je, {"tcache_max": "16K"}) == {"MALLOC_CONF": "tcache_max:16384"}
    glibc = allocators.get("glibc")
    env = knobs.environment(glibc, {"arena_max": 2, "trim_threshold": "1M", "tcache_count": 0})
    assert env == {
        "GLIBC_TUNABLES": "glibc.malloc.arena_max=2:glibc.malloc.trim_threshold=1048576"
        ":glibc.malloc.tcache_count=0"
    }
    assert knobs.environment(glibc, {}) == {}


def test_env_for_variables_of_their_own() -> None:
    tc = allocators.get("tcmalloc_minimal", require_available=False)
    if not tc.available:
        pytest.skip("tcmalloc_minimal is not installed")
    env = knobs.environment(tc, {"release_rate": "2.5", "aggressive_decommit": "yes"})
    assert env == {"TCMALLOC_RELEASE_RATE": "2.5", "TCMALLOC_AGGRESSIVE_DECOMMIT": "1"}


@pytest.mark.parametrize(
    ("allocator", "setting", "message"),
    [
        ("glibc", {"arena_max": 0}, r"arena_max = 0 is out of range: give 1\.\."),
        ("glibc", {"tcache_count": "lots"}, "not a whole number"),
        ("glibc", {"hugetlb": "3"}, "use one of 0, 1, 2"),
        ("glibc", {"arena_maxx": 1}, "no knob 'arena_maxx' .did you mean 'arena_max'"),
        ("jemalloc", {"dirty_decay_ms": -2}, "out of range: give -1.."),
        ("jemalloc", {"background_thread": "maybe"}, "not a boolean"),
        ("jemalloc", {"thp": "alway"}, "did you mean 'always'"),
        ("tcmalloc_minimal", {"release_rate": 11}, r"out of range: give 0\.\.10"),
    ],
)
def test_bad_values_are_one_line(allocator: str, setting: dict[str, object], message: str) -> None:
    chosen = allocators.get(allocator, require_available=False)
    if not chosen.available:
        pytest.skip(f"{allocator} is not installed")
    with pytest.raises(MallocbenchError, match=message) as error:
        knobs.environment(chosen, setting)
    assert "\n" not in str(error.value)


def test_a_knob_the_installed_version_lacks_is_refused() -> None:
    mi = allocators.get("mimalloc", require_available=False)
    if not mi.available:
        pytest.skip("mimalloc is not installed")
    knob = knobs.find(mi, "purge_delay")
    if knobs.is_available(mi, knob):
        pytest.skip("this mimalloc reads MIMALLOC_PURGE_DELAY")
    with pytest.raises(MallocbenchError, match="not read by the installed mimalloc"):
        knobs.environment(mi, {"purge_delay": 0})


EXPERIMENT = """name = "k"
base = "glibc"
steps = ["point-query"]
threads = [1]

[[setup]]
name = "glibc"
allocator = "glibc"
knobs = {{ {glibc} }}

[[setup]]
name = "je"
allocator = "jemalloc"
knobs = {{ {je} }}
"""


def experiment(tmp_path: Path, glibc: str = 'MALLOC_ARENA_MAX = "2"', je: str = "") -> Path:
    path = tmp_path / "k.toml"
    path.write_text(EXPERIMENT.format(glibc=glibc, je=je or 'MALLOC_CONF = "narenas:2"'))
    return path


@pytest.mark.parametrize(
    ("glibc", "je", "line", "message"),
    [
        (
            'MALLOC_ARENAS_MAX = "1"',
            "",
            9,
            "knob 'MALLOC_ARENAS_MAX' is not known to the installed glibc .* "
            "\\(did you mean 'MALLOC_ARENA_MAX'\\?\\)",
        ),
        (
            'GLIBC_TUNABLES = "glibc.malloc.arena_mx=1"',
            "",
            9,
            "tunable 'glibc.malloc.arena_mx' .*did you mean 'glibc.malloc.arena_max'",
        ),
        (
            "",
            'MALLOC_CONF = "background_thread:true,dirty_decay:0"',
            14,
            "MALLOC_CONF key 'dirty_decay' is not known to the installed jemalloc.*"
            "did you mean 'dirty_decay_ms'",
        ),
        ("", 'MALLOC_CONF = "dirty_decay_ms:-5"', 14, "dirty_decay_ms = '-5' is out of range"),
    ],
)
def test_unknown_knobs_are_refused_at_their_line(
    tmp_path: Path, glibc: str, je: str, line: int, message: str
) -> None:
    if not allocators.get("jemalloc", require_available=False).available:
        pytest.skip("jemalloc is not installed")
    path = experiment(tmp_path, glibc or 'MALLOC_ARENA_MAX = "2"', je)
    with pytest.raises(MallocbenchError) as error:
        load(path)
    text = str(error.value)
    assert "\n" not in text
    assert text.startswith(f"{path}:{line}: "), text
    assert re.search(message, text), text


def test_knobs_valid_before_stay_valid(tmp_path: Path) -> None:
    if not allocators.get("jemalloc", require_available=False).available:
        pytest.skip("jemalloc is not installed")
    path = experiment(
        tmp_path,
        'MALLOC_ARENA_MAX = "1", MALLOC_MMAP_MAX_ = "0", MALLOC_TRIM_THRESHOLD_ = "1073741824", '
        'GLIBC_TUNABLES = "glibc.malloc.tcache_count=0:glibc.malloc.arena_max=4", '
        'MALLOC_PERTURB_ = "0", OTHER_VARIABLE = "x"',
        'MALLOC_CONF = "background_thread:true,dirty_decay_ms:5000,muzzy_decay_ms:5000,'
        'abort_conf:true,prof:false"',
    )
    loaded = load(path)
    assert loaded.setup("je").knobs["MALLOC_CONF"].startswith("background_thread:true")
    for example in sorted(Path(__file__).parent.parent.glob("examples/*.toml")):
        if "[[patterns]]" not in example.read_text():
            load(example)


def test_a_knob_of_another_allocator_is_still_named_as_such(tmp_path: Path) -> None:
    if not allocators.get("jemalloc", require_available=False).available:
        pytest.skip("jemalloc is not installed")
    path = experiment(tmp_path, 'MALLOC_CONF = "narenas:2"')
    with pytest.raises(
        MallocbenchError, match=f"^{path}:9: .*MALLOC_CONF .*has no effect on glibc"
    ):
        load(path)


def test_allocators_knobs_lists_the_catalogue() -> None:
    result = run_cli("allocators", "--knobs", "--json")
    assert result.returncode == 0, result.stderr
    entries = {e["name"]: e for e in json.loads(result.stdout)}
    assert set(entries) == {a.name for a in allocators.builtin_allocators()}
    glibc = {k["name"]: k for k in entries["glibc"]["knobs"]}
    assert glibc["arena_max"]["passed_as"].startswith("GLIBC_TUNABLES=glibc.malloc.arena_max=")
    assert glibc["arena_max"]["legacy_env"] == "MALLOC_ARENA_MAX"
    assert glibc["arena_max"]["available"] is True
    table = run_cli("allocators", "--knobs")
    assert table.returncode == 0, table.stderr
    assert "dirty_decay_ms" in table.stdout and "installed" in table.stdout


def test_custom_libraries_are_not_second_guessed() -> None:
    """A .so given by path may read anything: only the built-in allocators are checked."""
    je = allocators.get("jemalloc", require_available=False)
    if not je.available or je.path is None:
        pytest.skip("jemalloc is not installed")
    custom = allocators.get(je.path)
    assert knobs.raw_problems(custom, {"MALLOC_CONF": "made_up:1"}) == []
    assert knobs.raw_problems(je, {"MALLOC_CONF": "made_up:1"}) != []
