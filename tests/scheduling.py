"""The order and grouping in which pytest-xdist hands the tests to its workers.

`make test` runs with `--dist loadgroup`, served by GroupScheduling below: it hands out
work units (a test, or a group of tests that must share a worker) in the workers'
collection order, one to each worker and then one whenever a worker is nearly done.
Left in file order, the suite's slowest tests (a cluster run with a killed host, a
calibration, a soak) could start last and run on alone for a minute or two after
everything else had finished. So units go longest first (the classic
longest-processing-time rule), by the durations of a recorded run kept in
tests/durations.json; that order needs no cache, so a clean checkout in CI gets it too.

Two kinds of tests stay together, in file order (a worker tells the scheduler which, in
a file beside the run, since the scheduler sees test ids only):
- the `alone` tests (conftest.py), one group led by the strict ones: on one worker they
  follow each other, instead of several workers each holding one and waiting for the
  lock while nothing else runs;
- the tests of a file that share a fixture of module or class scope (a private server, a
  recorded trace): split over workers, each worker would build it again.

`MALLOCBENCH_STORE_DURATIONS=1 make test` rewrites tests/durations.json from that run
(failed tests included: their seconds were spent all the same).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from xdist.scheduler import LoadScopeScheduling  # type: ignore[import-untyped]

DURATIONS = Path(__file__).with_name("durations.json")
STORE_VARIABLE = "MALLOCBENCH_STORE_DURATIONS"
# A test the stored run did not have (a new one) counts as this many seconds: slower than
# most, so a new slow test starts early rather than last, and a new quick one costs little
# by going early.
UNKNOWN_S = 10.0
ALONE_GROUP = "alone"
SHARED_SCOPES = ("module", "class")
_GROUPS_FILE = pytest.StashKey[Path]()


def load_durations(path: Path = DURATIONS) -> dict[str, float]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): float(v) for k, v in data.items()} if isinstance(data, dict) else {}


def shared_fixture_group(item: pytest.Item) -> str | None:
    """The file's path when the test uses a fixture of module or class scope."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return None
    for definitions in info.name2fixturedefs.values():
        if definitions and definitions[-1].scope in SHARED_SCOPES:
            return item.nodeid.split("::", 1)[0]
    return None


def order(
    items: list[pytest.Item],
    is_alone: Callable[[pytest.Item], bool],
    is_strict: Callable[[pytest.Item], bool],
    durations: dict[str, float],
) -> dict[str, str]:
    """Sort the items: the `alone` group first (strict tests leading it), then every
    unit by its stored seconds, longest first; a group keeps its tests in their file
    order. Returns the group of each test that is in one."""
    units: dict[str, list[pytest.Item]] = {}
    for item in items:
        key = ALONE_GROUP if is_alone(item) else shared_fixture_group(item) or item.nodeid
        units.setdefault(key, []).append(item)
    alone = units.pop(ALONE_GROUP, [])
    alone.sort(key=lambda item: not is_strict(item))  # stable: file order otherwise

    def seconds(unit: tuple[str, list[pytest.Item]]) -> float:
        return sum(durations.get(item.nodeid, UNKNOWN_S) for item in unit[1])

    ranked = sorted(units.items(), key=seconds, reverse=True)  # stable for equal times
    if alone:
        ranked.insert(0, (ALONE_GROUP, alone))
    items[:] = [item for _, unit in ranked for item in unit]
    return {item.nodeid: group for group, unit in ranked if len(unit) > 1 for item in unit}


def groups_file(config: pytest.Config) -> Path:
    """Where the workers leave the groups for the scheduler: one per test run."""
    path = config.stash.get(_GROUPS_FILE, None)
    if path is None:
        path = Path(tempfile.mkdtemp(prefix="mallocbench-schedule-")) / "groups.json"
        config.stash[_GROUPS_FILE] = path
    return path


def write_groups(path: Path, groups: dict[str, str], worker: str) -> None:
    """Every worker writes the same groups; each renames its own copy into place, so the
    scheduler never reads a half-written file."""
    mine = path.with_name(f"{path.name}.{worker}")
    mine.write_text(json.dumps(groups))
    os.replace(mine, path)


def remove_groups(config: pytest.Config) -> None:
    path = config.stash.get(_GROUPS_FILE, None)
    if path is not None:
        shutil.rmtree(path.parent, ignore_errors=True)


class GroupScheduling(LoadScopeScheduling):
    """xdist's scope scheduling, with the workers' groups as scopes (a test in none is a
    scope of its own) and their order kept: no reordering by group size."""

    def __init__(self, config: pytest.Config, log: Any = None) -> None:
        super().__init__(config, log)
        config.option.loadscopereorder = False
        self._groups_path = groups_file(config)
        self._groups: dict[str, str] | None = None

    def _split_scope(self, nodeid: str) -> str:
        # First called once every worker has collected, so the file is complete.
        if self._groups is None:
            try:
                self._groups = json.loads(self._groups_path.read_text())
            except (OSError, ValueError):
                self._groups = {}  # then every test is its own unit: slower, still right
        return self._groups.get(nodeid, nodeid)


class DurationRecorder:
    """On the controller: each test's setup, call and teardown seconds, written to
    durations.json at the end when STORE_VARIABLE is set."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.seconds[report.nodeid] = self.seconds.get(report.nodeid, 0.0) + report.duration

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if exitstatus not in (0, 1) or not self.seconds:
            return  # an interrupted or broken run is no model of the next one
        rounded = {k: round(v, 1) for k, v in sorted(self.seconds.items())}
        DURATIONS.write_text(json.dumps(rounded, indent=0) + "\n")


def wants_recording() -> bool:
    return os.environ.get(STORE_VARIABLE) == "1"
