"""The step catalogue, step parsing and ordering, and the SLA and client-CPU verdicts."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from mallocbench.analysis.client import client_bound
from mallocbench.analysis.sla import ibench_rates, sla_status
from mallocbench.errors import MallocbenchError
from mallocbench.report.words import client_cpu_warning, client_cpu_warnings, sla_text
from mallocbench.workloads.catalogue import (
    CATALOGUE,
    GROUPS,
    group_of,
    label_order,
    lua_dir,
    parse_steps,
    step_from_label,
)

# The seeds' relative-QPS tables, group by group, in their order.
PUBLISHED = {
    "point": [
        "hot-points range=100",
        "point-query range=100",
        "points-covered-pk range=100",
        "points-covered-si range=100",
        "points-notcovered-pk range=100",
        "points-notcovered-si range=100",
        "random-points range=10",
        "random-points range=100",
        "random-points range=1000",
    ],
    "range": [
        "range-covered-pk range=100",
        "range-covered-si range=100",
        "range-notcovered-pk range=100",
        "range-notcovered-si range=100",
        "read-only range=10",
        "read-only range=100",
        "read-only range=10000",
        "scan range=100",
    ],
    "range-agg": [
        "read-only-count range=1000",
        "read-only-distinct range=1000",
        "read-only-order range=1000",
        "read-only-simple range=1000",
        "read-only-sum range=1000",
    ],
    "write": [
        "delete range=100",
        "insert range=100",
        "read-write range=10",
        "read-write range=100",
        "update-index range=100",
        "update-inlist range=100",
        "update-nonindex range=100",
        "update-one range=100",
        "update-zipf range=100",
        "write-only range=10000",
    ],
}
IBENCH = ["l.i0", "l.x", "l.i1", "l.i2", "qr100", "qp100", "qr500", "qp500", "qr1000", "qp1000"]


def labels(specs: list[str]) -> list[str]:
    return [s.label for s in parse_steps(specs)]


def test_catalogue_has_the_32_published_microbenchmarks() -> None:
    published = [label for rows in PUBLISHED.values() for label in rows]
    assert len(published) == 32
    sysbench_steps = [s for s in parse_steps(list(PUBLISHED)) if s.group != "insert-benchmark"]
    assert sorted(s.label for s in sysbench_steps) == sorted(published)
    for group, rows in PUBLISHED.items():
        assert labels([group]) == [r for r in rows if r.split()[0] not in ("delete", "insert")] + [
            r for r in rows if r.split()[0] in ("delete", "insert")
        ]


def test_every_step_has_its_script_and_a_one_line_sql_shape() -> None:
    for definition in CATALOGUE:
        assert (lua_dir() / definition.script_name).is_file(), definition.name
        assert definition.group in GROUPS
        assert definition.sql and "\n" not in definition.sql


def test_reads_before_writes_and_delete_insert_last() -> None:
    steps = labels(["write", "point", "range-agg", "range"])
    assert steps[:9] == PUBLISHED["point"]
    assert steps[9:17] == PUBLISHED["range"]
    assert steps[17:22] == PUBLISHED["range-agg"]
    assert steps[-2:] == ["delete range=100", "insert range=100"]
    assert [group_of(s) for s in steps[22:]] == ["write"] * 10


def test_names_ranges_and_groups_mix_and_deduplicate() -> None:
    steps = labels(["insert", "point-query", "random-points range=10", "point", "scan range=7"])
    assert steps[0] == "hot-points range=100"
    assert steps.count("point-query range=100") == 1
    assert "scan range=7" in steps
    assert steps[-1] == "insert range=100"


def test_insert_benchmark_group_runs_after_everything_in_its_order() -> None:
    assert labels(["insert-benchmark"]) == IBENCH
    assert labels(["ibench"]) == IBENCH
    steps = labels(["qp100", "ibench", "insert", "point-query"])
    assert steps[:2] == ["point-query range=100", "insert range=100"]
    assert steps[2:] == IBENCH
    assert labels(["qr1000", "l.i0"]) == ["l.i0", "qr1000"]


def test_insert_benchmark_steps_fix_threads_and_work() -> None:
    by_name = {s.name: s.definition for s in parse_steps(["ibench"])}
    assert by_name["l.i0"].until_done and by_name["l.x"].until_done
    assert not by_name["l.i1"].until_done
    assert by_name["qr500"].threads == 3 and by_name["l.i1"].threads == 1
    assert "--ibench-rate=500" in by_name["qr500"].sysbench_args
    assert "--ibench-batch=50" in by_name["l.i1"].sysbench_args
    assert "--ibench-batch=5" in by_name["l.i2"].sysbench_args


def test_labels_round_trip() -> None:
    for step in parse_steps([*PUBLISHED, "ibench"]):
        assert step_from_label(step.label) == step
        assert label_order(step.label) == step.sort_key()
        assert group_of(step.label) == step.group
    assert label_order("no-such-step") > label_order("qp1000")


@pytest.mark.parametrize(
    ("spec", "hint"),
    [
        ("point-querry", "mallocbench steps"),
        ("qr100 range=5", "without 'range=N'"),
        ("scan range=x", "NAME range=N"),
    ],
)
def test_bad_step_names_say_how_to_fix_them(spec: str, hint: str) -> None:
    with pytest.raises(MallocbenchError) as err:
        parse_steps([spec])
    message = str(err.value)
    assert "\n" not in message
    assert hint in message


@dataclass
class FakeCell:
    metrics: dict[str, float] = field(default_factory=dict)
    setup: str = "je"
    engine: str = "innodb"
    step: str = "qr100"
    threads: int = 3


def test_sla_met_and_missed() -> None:
    met = FakeCell(
        {
            "ibench_target_rate": 100,
            "ibench_insert_rows": 990,
            "ibench_seconds": 10.0,
            "ibench_delete_rows": 1000,
            "ibench_delete_seconds": 10.0,
        }
    )
    status = sla_status(met)
    assert status is not None
    target, achieved, ok = status
    assert (target, achieved, ok) == (100, 99.0, True)
    assert "met" in sla_text(status)

    # Inserts kept up but deletes did not: the slower writer decides.
    slow_deletes = FakeCell({**met.metrics, "ibench_delete_rows": 900})
    assert sla_status(slow_deletes) == (100, 90.0, False)

    missed = FakeCell(
        {"ibench_target_rate": 1000, "ibench_insert_rows": 9000, "ibench_seconds": 10}
    )
    status = sla_status(missed)
    assert status is not None and not status.met and status.achieved == 900
    assert "MISSED" in sla_text(status)

    # No writer report at all is a miss, not a pass.
    assert sla_status(FakeCell({"ibench_target_rate": 100})) == (100, 0.0, False)
    assert sla_status(FakeCell({"ibench_insert_rows": 5, "ibench_seconds": 1})) is None
    assert sla_status(FakeCell()) is None


def test_ibench_rates() -> None:
    rates = ibench_rates(
        {
            "ibench_insert_rows": 500,
            "ibench_delete_rows": 500,
            "ibench_seconds": 2,
            "ibench_queries": 3000,
            "ibench_query_seconds": 2,
        }
    )
    assert rates == (250.0, 250.0, 1500.0)
    assert ibench_rates({}) == (None, None, None)


def test_client_cpu_warning_only_when_client_outworks_server() -> None:
    busy = FakeCell({"client_cpu_share": 0.62, "client_cpu_s": 6.2, "server_cpu_s": 3.8})
    assert client_bound(busy)
    warning = client_cpu_warning(busy)
    assert "more CPU than the server" in warning and "62%" in warning and "je" in warning
    assert "\n" not in warning
    assert not client_bound(FakeCell({"client_cpu_share": 0.5}))
    assert not client_bound(FakeCell({"client_cpu_share": 0.2}))
    assert not client_bound(FakeCell())
    cells = [busy, FakeCell({"client_cpu_share": 0.1})]
    assert client_cpu_warnings([c for c in cells if client_bound(c)]) == [warning]
