"""One experiment dialect: `run` and `patterns` files share their setup tables, and a
near-miss name gets a suggestion wherever names are checked."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from mallocbench import allocators
from mallocbench.errors import MallocbenchError, did_you_mean
from mallocbench.patterns.experiment import from_dict as patterns_experiment
from mallocbench.run.loading import from_dict as run_experiment

ROOT = Path(__file__).resolve().parents[1]

SETUPS = """
[[setup]]
name = "glibc"
allocator = "glibc"

[[setup]]
name = "je"
allocator = "jemalloc"
knobs = { MALLOC_CONF = "background_thread:true" }
cpus = 1
config = { sort_buffer_size = "2M" }
"""


def test_the_same_setup_tables_serve_run_and_patterns() -> None:
    run = run_experiment(
        tomllib.loads('name = "r"\nsteps = ["point-query"]\n[dataset]\ncache = "32M"\n' + SETUPS)
    )
    patterns = patterns_experiment(tomllib.loads(SETUPS + '[[patterns]]\npattern = "oltp"\n'), "p")
    assert [s.name for s in run.setups] == list(patterns.setups) == ["glibc", "je"]
    assert run.setups[1].knobs == patterns.setups["je"].knobs
    # cpus and config need a server: patterns leaves them out rather than refusing them.
    assert patterns.setups["je"].allocator.name == "jemalloc"


def test_both_examples_use_the_same_setup_syntax() -> None:
    for name in ("quick.toml", "patterns.toml"):
        data = tomllib.loads((ROOT / "examples" / name).read_text())
        assert isinstance(data.get("setup"), list) and "setups" not in data, name


def test_patterns_still_read_the_older_tables_but_not_both() -> None:
    old = patterns_experiment(
        tomllib.loads('[setups.glibc]\nallocator = "glibc"\n[[patterns]]\npattern = "oltp"\n'),
        "p",
    )
    assert list(old.setups) == ["glibc"]
    both = '[setups.a]\nallocator = "glibc"\n' + SETUPS + '[[patterns]]\npattern = "oltp"\n'
    with pytest.raises(MallocbenchError, match="give the setups once"):
        patterns_experiment(tomllib.loads(both), "p")


@pytest.mark.parametrize(
    ("wrong", "right"),
    [("jemaloc", "jemalloc"), ("tcmaloc", "tcmalloc"), ("mimaloc", "mimalloc")],
)
def test_a_misspelt_allocator_gets_a_suggestion(wrong: str, right: str) -> None:
    with pytest.raises(MallocbenchError, match=f"did you mean '{right}'"):
        allocators.get(wrong)


def test_suggestions_only_for_near_misses() -> None:
    assert did_you_mean("stepp", ["step", "slice"]) == " (did you mean 'step'?)"
    assert did_you_mean("banana", ["step", "slice"]) == ""
    with pytest.raises(MallocbenchError, match="did you mean 'warmup'"):
        run_experiment(
            tomllib.loads(
                'steps = ["point-query"]\n[durations]\nwarmpu = 3\n[dataset]\ncache = "32M"\n'
                + SETUPS
            )
        )
    with pytest.raises(MallocbenchError, match="did you mean 'knobs'"):
        patterns_experiment(
            tomllib.loads(
                '[[setup]]\nname = "a"\nallocator = "glibc"\nknbos = {}\n'
                '[[patterns]]\npattern = "oltp"\n'
            ),
            "p",
        )
