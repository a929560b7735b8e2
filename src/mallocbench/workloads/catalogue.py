"""The microbenchmark catalogue: every step's name, group, script and parameters.

Names, groups and order follow the published relative-QPS tables so numbers line up
with them; reads come before writes because writes change which rows exist. The insert
benchmark's steps come after every sysbench step: they build their own table in the
session (it is not in the golden datadir) and must run in their own fixed order.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from mallocbench.errors import MallocbenchError, did_you_mean

GROUPS = {
    "point": "point queries",
    "range": "range queries without aggregation",
    "range-agg": "range queries with aggregation",
    "write": "writes",
    "insert-benchmark": "insert benchmark",
}
# Other names a user may write for a group.
GROUP_ALIASES = {"ibench": "insert-benchmark", "range-aggregation": "range-agg", "writes": "write"}


@dataclass(frozen=True)
class StepDef:
    """One catalogue entry; `ranges` lists the range values the seeds publish for it.

    `ranges` is empty for steps that take no range (the insert benchmark). `threads`, when
    set, is the thread count the step always runs with, whatever the experiment asks: the
    insert benchmark's query steps need exactly one query connection and two writers.
    `until_done` steps do a fixed amount of work and end by themselves (a load, an index
    build); they are not cut at the step duration and a warmup run would redo the work.
    `takes_turns` is False for steps whose background work holds a rate in wall time
    (the insert benchmark's writers): interleaved, they are measured in slices that are
    separate sysbench runs, not in turns (measure.measure_turns).
    """

    name: str
    group: str
    sql: str
    ranges: tuple[int, ...] = (100,)
    writes: bool = False
    script: str | None = None  # defaults to <name>.lua
    sysbench_args: tuple[str, ...] = ()
    threads: int | None = None
    until_done: bool = False
    takes_turns: bool = True

    @property
    def script_name(self) -> str:
        return self.script or f"{self.name}.lua"

    @property
    def takes_range(self) -> bool:
        return bool(self.ranges)


def _ibench_query(rate: int, kind: str) -> StepDef:
    background = f"; + {rate} rows/s inserted and deleted in the background"
    if kind == "qr":
        sql = (
            "SELECT <index cols> FROM purchases_index FORCE INDEX (<1 of 3>) "
            "WHERE <col 1> >= ? ORDER BY <index cols> LIMIT 10" + background
        )
    else:
        sql = "SELECT * FROM purchases_index WHERE transactionid IN (10 random)" + background
    return StepDef(
        f"{kind}{rate}",
        "insert-benchmark",
        sql,
        (),
        writes=True,
        script=f"ibench-{kind}.lua",
        sysbench_args=(f"--ibench-rate={rate}",),
        threads=3,
        takes_turns=False,
    )


CATALOGUE: tuple[StepDef, ...] = (
    # --- point queries ---------------------------------------------------------------------
    StepDef(
        "hot-points", "point", "SELECT c FROM t WHERE id IN (the same N adjacent mid-table ids)"
    ),
    StepDef("point-query", "point", "SELECT c FROM t WHERE id = ?"),
    StepDef("points-covered-pk", "point", "SELECT id FROM t WHERE id IN (N random)"),
    StepDef(
        "points-covered-si", "point", "SELECT k FROM t WHERE k IN (N random) -- index-only on k"
    ),
    StepDef("points-notcovered-pk", "point", "SELECT id, c FROM t WHERE id IN (N random)"),
    StepDef(
        "points-notcovered-si",
        "point",
        "SELECT k, c FROM t WHERE k IN (N random) -- base-row lookup per match",
    ),
    StepDef(
        "random-points", "point", "SELECT c FROM t WHERE id IN (N random ids)", (10, 100, 1000)
    ),
    # --- range queries without aggregation -------------------------------------------------
    StepDef("range-covered-pk", "range", "SELECT id FROM t WHERE id BETWEEN ? AND ?+N"),
    StepDef("range-covered-si", "range", "SELECT k FROM t WHERE k BETWEEN ? AND ?+N"),
    StepDef("range-notcovered-pk", "range", "SELECT id, c FROM t WHERE id BETWEEN ? AND ?+N"),
    StepDef("range-notcovered-si", "range", "SELECT k, c FROM t WHERE k BETWEEN ? AND ?+N"),
    StepDef(
        "read-only",
        "range",
        "BEGIN; 10 x point; simple, SUM, ORDER BY, DISTINCT ranges of N rows; COMMIT",
        (10, 100, 10000),
    ),
    StepDef("scan", "range", "SELECT * FROM t WHERE LENGTH(c) < 0 -- full scan, no rows"),
    # --- range queries with aggregation ----------------------------------------------------
    StepDef(
        "read-only-count",
        "range-agg",
        "SELECT count(c) FROM t WHERE id BETWEEN ? AND ?+N-1",
        (1000,),
    ),
    StepDef(
        "read-only-distinct",
        "range-agg",
        "SELECT DISTINCT c FROM t WHERE id BETWEEN ? AND ?+N-1 ORDER BY c",
        (1000,),
    ),
    StepDef(
        "read-only-order",
        "range-agg",
        "SELECT c FROM t WHERE id BETWEEN ? AND ?+N-1 ORDER BY c",
        (1000,),
    ),
    StepDef(
        "read-only-simple", "range-agg", "SELECT c FROM t WHERE id BETWEEN ? AND ?+N-1", (1000,)
    ),
    StepDef(
        "read-only-sum", "range-agg", "SELECT SUM(k) FROM t WHERE id BETWEEN ? AND ?+N-1", (1000,)
    ),
    # --- writes ------------------------------------------------------------------------------
    StepDef("delete", "write", "DELETE FROM t WHERE id = ?", writes=True),
    StepDef("insert", "write", "INSERT INTO t (k, c, pad) VALUES (?, ?, ?)", writes=True),
    StepDef(
        "read-write",
        "write",
        "BEGIN; 10 x point; 4 ranges of N rows; index + non-index update; "
        "delete + re-insert; COMMIT",
        (10, 100),
        writes=True,
    ),
    StepDef("update-index", "write", "UPDATE t SET k = k + 1 WHERE id = ?", writes=True),
    StepDef("update-inlist", "write", "UPDATE t SET c = ? WHERE id IN (N random)", writes=True),
    StepDef("update-nonindex", "write", "UPDATE t SET c = ? WHERE id = ?", writes=True),
    StepDef("update-one", "write", "UPDATE t SET c = ? WHERE id = 1 -- one hot row", writes=True),
    StepDef(
        "update-zipf",
        "write",
        "UPDATE t SET c = ? WHERE id = ? -- zipfian ids (exponent 0.8, id 1 hottest)",
        writes=True,
    ),
    StepDef(
        "write-only",
        "write",
        "BEGIN; index update; non-index update; delete + re-insert; COMMIT",
        (10000,),
        writes=True,
    ),
    # --- insert benchmark (its own table, purchases_index) ---------------------------------
    StepDef(
        "l.i0",
        "insert-benchmark",
        "CREATE purchases_index; INSERT INTO purchases_index VALUES (1000 rows) in PK order "
        "up to tables x table-size rows",
        (),
        writes=True,
        script="ibench-load.lua",
        threads=1,
        until_done=True,
    ),
    StepDef(
        "l.x",
        "insert-benchmark",
        "ALTER TABLE purchases_index ADD INDEX marketsegment / registersegment / pdc, 3 statements",
        (),
        writes=True,
        script="ibench-index.lua",
        threads=1,
        until_done=True,
    ),
    StepDef(
        "l.i1",
        "insert-benchmark",
        "BEGIN; INSERT 50 rows; DELETE ... ORDER BY transactionid LIMIT 50; COMMIT",
        (),
        writes=True,
        script="ibench-churn.lua",
        sysbench_args=("--ibench-batch=50",),
        threads=1,
    ),
    StepDef(
        "l.i2",
        "insert-benchmark",
        "BEGIN; INSERT 5 rows; DELETE ... ORDER BY transactionid LIMIT 5; COMMIT",
        (),
        writes=True,
        script="ibench-churn.lua",
        sysbench_args=("--ibench-batch=5",),
        threads=1,
    ),
    _ibench_query(100, "qr"),
    _ibench_query(100, "qp"),
    _ibench_query(500, "qr"),
    _ibench_query(500, "qp"),
    _ibench_query(1000, "qr"),
    _ibench_query(1000, "qp"),
)

_BY_NAME = {s.name: s for s in CATALOGUE}
_ORDER = {s.name: i for i, s in enumerate(CATALOGUE)}
# Write steps that must come last among the sysbench steps: they change which rows exist.
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
        if not self.definition.takes_range:
            return self.definition.name
        return f"{self.definition.name} range={self.range}"

    def sort_key(self) -> tuple[int, int, int]:
        if self.group == "insert-benchmark":
            last = len(_LAST) + 1
        else:
            last = _LAST.index(self.name) + 1 if self.name in _LAST else 0
        return (last, _ORDER.get(self.name, len(_ORDER)), self.range)


def lua_dir() -> Path:
    return Path(str(resources.files("mallocbench.workloads") / "lua"))


# A range is rows of one table, and a table holds at most experiment.MAX_ROWS.
MAX_RANGE = 10**9
_SPEC = re.compile(r"^\s*([a-z0-9.-]+)(?:[\s_]+range\s*=\s*(\d+))?\s*$")


def parse_steps(specs: list[str]) -> list[Step]:
    """Expand step names, 'name range=N' and group names into steps in the published order."""
    steps: list[Step] = []
    for spec in specs:
        match = _SPEC.match(spec.lower())
        if match is None:
            raise MallocbenchError(
                f"step {spec!r} is not understood: write 'NAME' or 'NAME range=N' "
                f"(see `mallocbench steps`)"
            )
        name, range_text = match.group(1), match.group(2)
        group = GROUP_ALIASES.get(name, name)
        if group in GROUPS and range_text is None:
            steps.extend(
                Step(d, r) for d in CATALOGUE if d.group == group for r in (d.ranges or (0,))
            )
            continue
        definition = _BY_NAME.get(name)
        if definition is None:
            raise MallocbenchError(
                f"unknown step {name!r}{did_you_mean(name, [*GROUPS, *_BY_NAME])}: use a "
                f"group ({', '.join(GROUPS)}) or one of "
                f"{', '.join(_BY_NAME)} (see `mallocbench steps`)"
            )
        if range_text is not None:
            if not definition.takes_range:
                raise MallocbenchError(
                    f"step {name!r} takes no range: write {name!r} without 'range=N'"
                )
            if not 1 <= int(range_text) <= MAX_RANGE:
                raise MallocbenchError(
                    f"step {spec!r}: range={range_text} is out of range: give 1 to "
                    f"{MAX_RANGE:,} rows (a range is rows of one table)"
                )
            steps.append(Step(definition, int(range_text)))
        else:
            steps.append(Step(definition, definition.ranges[0] if definition.ranges else 0))
    unique = list(dict.fromkeys(steps))
    return sorted(unique, key=Step.sort_key)


def step_from_label(label: str) -> Step:
    return parse_steps([label])[0]


def group_of(label: str) -> str:
    name = label.split()[0] if label.split() else ""
    definition = _BY_NAME.get(name)
    return definition.group if definition else ""


def label_order(label: str) -> tuple[int, int, int]:
    try:
        return step_from_label(label).sort_key()
    except MallocbenchError:
        return (9, 999, 0)
