"""The order `make test` hands tests to xdist workers in (tests/scheduling.py)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

import scheduling


def fake_item(nodeid: str, scope: str | None = None, alone: str | None = None) -> Any:
    """What order() reads of an item: its id, its fixtures' scopes and its `alone` mark."""
    fixtures = {"server": [SimpleNamespace(scope=scope)]} if scope else {}
    return SimpleNamespace(
        nodeid=nodeid,
        _fixtureinfo=SimpleNamespace(name2fixturedefs=fixtures),
        alone=alone,
    )


def ordered(items: list[Any], durations: dict[str, float]) -> tuple[list[str], dict[str, str]]:
    groups = scheduling.order(
        cast(list[pytest.Item], items),
        lambda item: item.alone is not None,  # type: ignore[attr-defined]
        lambda item: item.alone == "strict",  # type: ignore[attr-defined]
        durations,
    )
    return [item.nodeid for item in items], groups


def test_longest_first_with_shared_fixtures_and_alone_tests_kept_together() -> None:
    items = [
        fake_item("tests/test_a.py::quick"),
        fake_item("tests/test_a.py::timed", alone="alone"),
        fake_item("tests/test_b.py::one", scope="module"),
        fake_item("tests/test_c.py::slow"),
        fake_item("tests/test_b.py::two", scope="module"),
        fake_item("tests/test_d.py::burner", alone="strict"),
        fake_item("tests/test_e.py::new"),
    ]
    durations = {
        "tests/test_a.py::quick": 1.0,
        "tests/test_a.py::timed": 30.0,
        "tests/test_b.py::one": 20.0,
        "tests/test_b.py::two": 25.0,
        "tests/test_c.py::slow": 60.0,
        "tests/test_d.py::burner": 40.0,
    }
    order, groups = ordered(items, durations)
    assert order == [
        # the alone group first, its strict test leading
        "tests/test_d.py::burner",
        "tests/test_a.py::timed",
        # then longest first: test_c (60 s), the module's server group (45 s, file
        # order kept), the unknown new test (UNKNOWN_S, 10 s), the quick one
        "tests/test_c.py::slow",
        "tests/test_b.py::one",
        "tests/test_b.py::two",
        "tests/test_e.py::new",
        "tests/test_a.py::quick",
    ]
    assert groups == {
        "tests/test_d.py::burner": "alone",
        "tests/test_a.py::timed": "alone",
        "tests/test_b.py::one": "tests/test_b.py",
        "tests/test_b.py::two": "tests/test_b.py",
    }


def test_a_function_scoped_fixture_does_not_tie_tests_to_one_worker() -> None:
    items = [fake_item("tests/t.py::a", scope="function"), fake_item("tests/t.py::b")]
    order, groups = ordered(items, {"tests/t.py::a": 1.0, "tests/t.py::b": 2.0})
    assert order == ["tests/t.py::b", "tests/t.py::a"] and groups == {}


def test_the_scheduler_takes_the_workers_groups_as_scopes(tmp_path: Path) -> None:
    # The scheduler only sees ids; the workers' file names the groups, and without one
    # every test is a unit of its own rather than a failure.
    path = tmp_path / "groups.json"
    scheduling.write_groups(path, {"tests/t.py::a": "tests/t.py"}, "gw0")
    assert json.loads(path.read_text()) == {"tests/t.py::a": "tests/t.py"}
    assert not list(tmp_path.glob("*.gw0"))
    for present in (True, False):
        scheduler = scheduling.GroupScheduling.__new__(scheduling.GroupScheduling)
        scheduler._groups_path = path if present else tmp_path / "missing.json"
        scheduler._groups = None
        expected = "tests/t.py" if present else "tests/t.py::a"
        assert scheduler._split_scope("tests/t.py::a") == expected
        assert scheduler._split_scope("tests/t.py::b") == "tests/t.py::b"


def test_the_stored_durations_name_tests_that_exist() -> None:
    # A renamed or deleted test leaves a stale entry that orders nothing; many of them
    # mean the list should be refreshed (MALLOCBENCH_STORE_DURATIONS=1 make test).
    stored = scheduling.load_durations()
    assert stored, "tests/durations.json is missing or empty"
    files = {nodeid.split("::", 1)[0] for nodeid in stored}
    root = Path(__file__).resolve().parents[1]
    assert all((root / name).exists() for name in files), sorted(files)
