"""The microbenchmark catalogue: every step's name, group, script and parameters.

Names, groups and order follow the published relative-QPS tables so numbers line up
with them; reads come before writes because writes change which rows exist.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from mallocbench.errors import MallocbenchError

GROUPS = {
    "point": "point queries",
    "range": "range queries without aggregation",
    "range-agg": "range queries with aggregation",
    "write": "writes",
}


@dataclass(frozen=True)
class StepDef:
    """One catalogue entry; `ranges` lists the range values the seeds publish for it."""

    name: str
    group: str
    sql: str
    ranges: tuple[int, ...] = (100,)
    writes: bool = False
    script: str | None = None  # defaults to <name>.lua
    sysbench_args: tuple[str, ...] = ()

    @property
    def script_name(self) -> str:
        return self.script or f"{self.name}.lua"


CATALOGUE: tuple[StepDef, ...] = (
    StepDef("point-query", "point", "SELECT c FROM t WHERE id = ?"),
    StepDef(
        "random-points", "point", "SELECT c FROM t WHERE id IN (N random ids)", (10, 100, 1000)
    ),
    StepDef("range-covered-pk", "range", "SELECT id FROM t WHERE id BETWEEN ? AND ?+N"),
    StepDef(
        "read-only",
        "range",
        "BEGIN; 10 x point; simple, SUM, ORDER BY, DISTINCT ranges of N rows; COMMIT",
        (10, 100, 10000),
    ),
    StepDef("scan", "range", "SELECT * FROM t WHERE LENGTH(c) < 0 (full scan, no rows)"),
    StepDef(
        "read-only-order",
        "range-agg",
        "SELECT c FROM t WHERE id BETWEEN ? AND ?+N-1 ORDER BY c",
        (1000,),
    ),
    StepDef("insert", "write", "INSERT INTO t (k, c, pad) VALUES (?, ?, ?)", writes=True),
    StepDef("update-index", "write", "UPDATE t SET k = k + 1 WHERE id = ?", writes=True),
    StepDef("update-nonindex", "write", "UPDATE t SET c = ? WHERE id = ?", writes=True),
    StepDef(
        "write-only",
        "write",
        "BEGIN; index update; non-index update; delete + re-insert; COMMIT",
        (10000,),
        writes=True,
    ),
)

_BY_NAME = {s.name: s for s in CATALOGUE}
_ORDER = {s.name: i for i, s in enumerate(CATALOGUE)}
# Write steps that must come last: they change which rows exist.
_LAST = ("delete", "insert")


@dataclass(frozen=True)
class Step:
    """A catalogue entry with its parameters: what a cell runs."""

    definition: StepDef
    range: int
    options: dict[str, str] = field(default_factory=dict, compare=False, hash=False)

    @property
    def name(self) -> str:
        return self.definition.name

    @property
    def group(self) -> str:
        return self.definition.group

    @property
    def label(self) -> str:
        return f"{self.definition.name} range={self.range}"

    def sort_key(self) -> tuple[int, int, int]:
        last = _LAST.index(self.name) + 1 if self.name in _LAST else 0
        return (last, _ORDER.get(self.name, len(_ORDER)), self.range)


def lua_dir() -> Path:
    return Path(str(resources.files("mallocbench.workloads") / "lua"))


_SPEC = re.compile(r"^\s*([a-z0-9-]+)(?:[\s_]+range\s*=\s*(\d+))?\s*$")


def parse_steps(specs: list[str]) -> list[Step]:
    """Expand step names, 'name range=N' and group names into steps in the published order."""
    steps: list[Step] = []
    for spec in specs:
        match = _SPEC.match(spec)
        if match is None:
            raise MallocbenchError(
                f"step {spec!r} is not understood: write 'NAME' or 'NAME range=N' "
                f"(see `mallocbench steps`)"
            )
        name, range_text = match.group(1), match.group(2)
        if name in GROUPS and range_text is None:
            steps.extend(Step(d, r) for d in CATALOGUE if d.group == name for r in d.ranges)
            continue
        definition = _BY_NAME.get(name)
        if definition is None:
            raise MallocbenchError(
                f"unknown step {name!r}: use a group ({', '.join(GROUPS)}) or one of "
                f"{', '.join(_BY_NAME)}"
            )
        if range_text is not None:
            steps.append(Step(definition, int(range_text)))
        else:
            steps.append(Step(definition, definition.ranges[0]))
    unique = list(dict.fromkeys(steps))
    return sorted(unique, key=Step.sort_key)


def step_from_label(label: str) -> Step:
    return parse_steps([label])[0]


def group_of(label: str) -> str:
    name = label.split()[0]
    definition = _BY_NAME.get(name)
    return definition.group if definition else ""


def label_order(label: str) -> tuple[int, int, int]:
    try:
        return step_from_label(label).sort_key()
    except MallocbenchError:
        return (9, 999, 0)
