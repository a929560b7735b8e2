from __future__ import annotations

import os
from pathlib import Path

import pytest

from mallocbench.analysis.designs import TURNS_DESIGN
from mallocbench.calibrate import auto as autodesign
from mallocbench.errors import MallocbenchError
from mallocbench.run.loading import from_dict, load
from mallocbench.run.planning import plan, plan_extra_round
from mallocbench.units import parse_size

BASE = {
    "name": "t",
    "engines": ["innodb"],
    "steps": ["point-query", "update-nonindex"],
    "threads": [1, 4],
    "repeats": 2,
    "setup": [
        {"name": "glibc", "allocator": "glibc"},
        {"name": "je", "allocator": "jemalloc", "knobs": {"MALLOC_CONF": "narenas:2"}},
        {"name": "mi", "allocator": "mimalloc"},
    ],
}


def experiment(**changes: object) -> dict[str, object]:
    data = dict(BASE)
    data.update(changes)
    return data


def test_plan_interleaves_setups_and_keeps_cells_in_step_order() -> None:
    sessions = plan(from_dict(experiment()))
    assert [s.setup for s in sessions] == ["glibc", "je", "mi", "mi", "je", "glibc"]
    assert [s.repeat for s in sessions] == [0, 0, 0, 1, 1, 1]
    first = sessions[0]
    assert [(c.step.label, c.threads) for c in first.cells] == [
        ("point-query range=100", 1),
        ("point-query range=100", 4),
        ("update-nonindex range=100", 1),
        ("update-nonindex range=100", 4),
    ]
    keys = [c.key for s in sessions for c in s.cells]
    assert len(keys) == len(set(keys)) == 3 * 2 * 2 * 2


def test_steps_are_reordered_reads_before_writes_and_groups_expand() -> None:
    exp = from_dict(experiment(steps=["update-nonindex", "point", "scan"]))
    labels = [s.label for s in exp.steps]
    assert labels.index("scan range=100") < labels.index("update-nonindex range=100")
    assert "random-points range=10" in labels and "random-points range=1000" in labels


def test_base_defaults_to_first_setup_and_sizes_parse() -> None:
    exp = from_dict(experiment(dataset={"cache": "1.5G", "tables": 2, "rows": 10}))
    assert exp.base == "glibc"
    assert exp.dataset.cache_bytes == int(1.5 * (1 << 30))
    assert parse_size("256M", "x") == 256 << 20
    assert parse_size(4096, "x") == 4096


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"setup": [{"name": "x", "allocator": "hoard"}]}, "unknown allocator 'hoard'"),
        ({"setup": [{"allocator": "/nonexistent/libfoo.so"}]}, "does not exist"),
        ({"steps": ["point-querry"]}, "unknown step 'point-querry'"),
        ({"base": "nope"}, "base = 'nope' is not a setup"),
        ({"engines": ["aria"]}, "unknown engine 'aria'"),
        ({"threads": [0]}, "threads contains 0"),
        ({"bogus": 1}, "unknown key 'bogus'"),
        ({"dataset": {"cache": "lots"}}, "dataset.cache = 'lots' is not a size"),
        (
            {"setup": [{"name": "g", "allocator": "glibc", "knobs": {"MALLOC_CONF": "x"}}]},
            "has no effect on glibc",
        ),
        ({"setup": []}, "no setups"),
        ({"server": {"port": 80}}, "out of range"),
        (
            {"setup": [{"name": "a", "allocator": "glibc"}, {"name": "a", "allocator": "glibc"}]},
            "used twice",
        ),
    ],
)
def test_bad_experiments_name_the_key(changes: dict[str, object], message: str) -> None:
    with pytest.raises(MallocbenchError, match=message):
        from_dict(experiment(**changes))


def test_invalid_toml_and_missing_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("name = [unclosed\n")
    with pytest.raises(MallocbenchError, match="not valid TOML"):
        load(bad)
    with pytest.raises(MallocbenchError, match="does not exist"):
        load(tmp_path / "missing.toml")


def test_examples_are_valid() -> None:
    for path in sorted(Path(__file__).parent.parent.glob("examples/*.toml")):
        if path.name.startswith("patterns"):
            continue
        exp = load(path)
        assert plan(exp), path


def test_min_effect_thp_and_cpu_counts_parse() -> None:
    exp = from_dict(
        experiment(
            min_effect="2%",
            setup=[
                {"name": "g", "allocator": "glibc", "thp": "never", "cpus": 1},
                {"name": "j", "allocator": "jemalloc", "cpus": "0"},
            ],
        )
    )
    assert exp.min_effect == pytest.approx(0.02)
    assert exp.setup("g").thp == "never" and exp.setup("j").thp is None
    first_cpu = min(os.sched_getaffinity(0))
    assert exp.setup("g").cpus == str(first_cpu)
    assert from_dict(experiment(min_effect=0.05)).min_effect == pytest.approx(0.05)
    assert from_dict(experiment()).min_effect == 0.0


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"min_effect": "lots"}, "min_effect = 'lots' is not a fraction"),
        ({"min_effect": 0.7}, "min_effect = 0.7 is out of range"),
        ({"setup": [{"name": "g", "allocator": "glibc", "thp": "sometimes"}]}, "not a THP mode"),
        ({"setup": [{"name": "g", "allocator": "glibc", "cpus": 4096}]}, "4096 CPUs, but"),
        ({"setup": [{"name": "g", "allocator": "glibc", "cpus": "0-4095"}]}, "does not offer"),
        ({"setup": [{"name": "g", "allocator": "glibc", "cpus": "zero"}]}, "not a CPU list"),
        ({"setup": [{"name": "g", "allocator": "glibc", "cpu_quota": "150%"}]}, "at most 100%"),
        ({"setup": [{"name": "g", "allocator": "glibc", "cpu_quota": 0}]}, "stop the server"),
        ({"design": "paired"}, "design = 'paired' is unknown"),
        ({"durations": {"step": 10, "slice": 1}}, "durations.slice = 1 is out of range"),
        (
            {"alternate": "turns", "durations": {"step": 10, "slice": 0.5}},
            "durations.slice = 0.5 is out of range",
        ),
        ({"alternate": "rounds"}, "alternate = 'rounds' is unknown"),
        ({"durations": {"step": 4, "slice": 5}}, "longer than durations.step"),
        ({"durations": {"settle": 2}}, "durations.settle = 2 applies to turns only"),
        (
            {"design": "sequential", "durations": {"settle": 2}},
            "durations.settle = 2 applies to turns only, and design = 'sequential' takes none",
        ),
        (
            {"design": "auto", "durations": {"settle": 0}},
            r"durations.settle = 0 is invalid: give a whole number 1-100",
        ),
        (
            {"alternate": "turns", "durations": {"settle": 0}},
            r"durations.settle = 0 is invalid: give a whole number 1-100",
        ),
        ({"alternate": "turns", "durations": {"settle": 2.5}}, "durations.settle = 2.5"),
        ({"alternate": "turns", "durations": {"settle": True}}, "durations.settle = True"),
    ],
)
def test_bad_statistics_and_machine_keys(changes: dict[str, object], message: str) -> None:
    with pytest.raises(MallocbenchError, match=message):
        from_dict(experiment(**changes))


def test_turns_settle_four_rounds_unless_asked_otherwise() -> None:
    assert from_dict(experiment(alternate="turns")).settle_rounds == 4
    # Runs have no settle turns; were auto to choose turns, they would settle as default.
    assert from_dict(experiment()).settle_rounds == 4
    one = from_dict(experiment(alternate="turns", durations={"settle": 1}))
    assert one.settle_rounds == 1
    # design = "auto" may choose turns: its settle is taken, and turns chosen keep it.
    auto = from_dict(experiment(design="auto", durations={"settle": 2}))
    assert auto.settle_rounds == 2
    chosen = autodesign.apply(auto, TURNS_DESIGN, {"turn_s": 1.0}, "test")
    assert chosen.alternate == "turns" and chosen.settle_rounds == 2


def test_extra_round_keeps_interleaving_and_only_the_asked_cells() -> None:
    exp = from_dict(experiment())
    label = exp.steps[0].label
    wanted = {("glibc", "innodb", label, 4), ("mi", "innodb", label, 4)}
    odd = plan_extra_round(exp, 3, wanted)
    assert [s.setup for s in odd] == ["mi", "glibc"]  # odd repeats run in reverse order
    assert all(len(s.cells) == 1 and s.cells[0].repeat == 3 for s in odd)
    assert odd[0].cells[0].step.label == label and odd[0].cells[0].threads == 4
    even = plan_extra_round(exp, 4, wanted)
    assert [s.setup for s in even] == ["glibc", "mi"]
