"""Per-operation costs and adaptive repetition, on recorded numbers (no server needed)."""

from __future__ import annotations

import math

import pytest

from mallocbench.analysis.convergence import cells_to_repeat, wide_cells
from mallocbench.model.results import Cell, RunResult
from mallocbench.probes.process import Counters
from mallocbench.report.words import wide_cell_text
from mallocbench.run.measure import per_op_metrics as _per_op_metrics


def counters(user: float, system: float, vcs: int, ics: int, rb: int, wb: int, rs: int) -> Counters:
    return Counters(user, system, vcs, ics, rb, wb, rs)


def test_per_op_costs_are_deltas_over_operations() -> None:
    before = counters(10.0, 2.0, 1000, 50, 1 << 20, 0, 100)
    after = counters(12.5, 3.0, 21000, 1050, 3 << 20, 1 << 20, 2100)
    metrics = _per_op_metrics(10_000, 1.5, before, after, 5_000, 45_000)
    assert metrics["server_cpu_us_per_op"] == pytest.approx(350.0)  # 3.5 s / 10k ops
    assert metrics["server_user_us_per_op"] == pytest.approx(250.0)
    assert metrics["server_sys_us_per_op"] == pytest.approx(100.0)
    assert metrics["voluntary_cs_per_op"] == pytest.approx(2.0)
    assert metrics["involuntary_cs_per_op"] == pytest.approx(0.1)
    assert metrics["read_kb_per_op"] == pytest.approx(2048 / 10_000)
    assert metrics["write_kb_per_op"] == pytest.approx(1024 / 10_000)
    assert metrics["reads_per_op"] == pytest.approx(0.2)
    assert metrics["system_cs_per_op"] == pytest.approx(4.0)
    assert metrics["client_cpu_share"] == pytest.approx(1.5 / 5.0)


def test_per_op_costs_need_operations_and_both_readings() -> None:
    reading = counters(1, 1, 1, 1, None, None, None)  # type: ignore[arg-type]
    assert _per_op_metrics(0, 0.0, reading, reading, 1, 2) == {}
    assert _per_op_metrics(100, 0.0, None, reading, 1, 2) == {}
    partial = _per_op_metrics(100, 0.0, reading, reading, None, None)
    assert "read_kb_per_op" not in partial and "system_cs_per_op" not in partial
    assert "client_cpu_share" not in partial  # no CPU at all: no share to speak of


def _cell(setup: str, qps: float, repeat: int, status: str = "ok", threads: int = 8) -> Cell:
    return Cell(setup, "innodb", "point-query", threads, repeat, status=status, qps=qps)


def test_wide_cells_lists_noisy_and_single_repeat_comparisons() -> None:
    cells = [
        *(_cell("glibc", q, r) for r, q in enumerate([1000, 1010, 990])),
        *(_cell("je", q, r) for r, q in enumerate([1500, 1505, 1495])),  # tight: converged
        *(_cell("tc", q, r) for r, q in enumerate([1400, 900, 1900])),  # noisy
        _cell("mi", 1200, 0),  # one repeat: no interval yet
        *(_cell("oom", 0, r, status="oom") for r in range(3)),  # repeating will not help
    ]
    result = RunResult("r", "x", "glibc", cells=cells)
    wide = wide_cells(result, target_pct=10.0)
    assert [w.setup for w in wide] == ["mi", "tc"]
    assert math.isinf(wide[0].width_pct) and wide[0].to_dict()["width_pct"] is None
    assert wide[1].width_pct > 50 and wide[1].repeats == 3
    assert "tc innodb point-query @8" in wide_cell_text(wide[1])
    assert cells_to_repeat(wide, "glibc") == {
        ("mi", "innodb", "point-query", 8),
        ("tc", "innodb", "point-query", 8),
        ("glibc", "innodb", "point-query", 8),
    }
    assert wide_cells(result, target_pct=1000.0) == [wide[0]]
