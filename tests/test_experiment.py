from __future__ import annotations

from pathlib import Path

import pytest

from mallocbench.errors import MallocbenchError
from mallocbench.experiment import from_dict, load, parse_size, plan

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
