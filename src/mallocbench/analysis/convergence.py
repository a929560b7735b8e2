"""Which relative-QPS intervals are still wider than the precision asked for.

Adaptive repetition (`run --target-ci PCT`) keeps adding interleaved repeats of the
cells listed here until none is left or the time budget runs out. A cell whose setup or
base crashed, ran out of memory or failed is left out: repeating it would not narrow an
interval that does not exist, and the report lists it as a problem anyway.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from mallocbench.analysis.summary import relative_tables
from mallocbench.model.results import RunResult


@dataclass(frozen=True)
class WideCell:
    engine: str
    step: str
    threads: int
    setup: str
    width_pct: float  # interval width in percentage points; inf with fewer than 2 repeats
    repeats: int  # measured repeats of the setup (the base may have a different count)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["width_pct"] = None if self.width_pct == float("inf") else self.width_pct
        return data


def wide_cells(result: RunResult, target_pct: float) -> list[WideCell]:
    """Every setup/engine/step/threads whose relative QPS interval is wider than target.

    The intervals are the reports' own (`relative_tables`): paired by block, and under
    Stein's rule once the run recorded its first stage.
    """
    out = []
    for table in relative_tables(result):
        for row in table.rows:
            if row.reference_problem:
                continue
            for setup, cell in row.cells.items():
                if cell.problem:
                    continue
                width = cell.width * 100
                if not width < target_pct:
                    where = (table.engine, row.step, table.threads, setup)
                    out.append(WideCell(*where, width, cell.repeats[0]))
    return sorted(out, key=lambda w: (w.engine, w.threads, w.step, w.setup))


def cells_to_repeat(wide: list[WideCell], base: str) -> set[tuple[str, str, str, int]]:
    """(setup, engine, step, threads) for the next round: each wide cell and its base."""
    wanted = set()
    for cell in wide:
        wanted.add((cell.setup, cell.engine, cell.step, cell.threads))
        wanted.add((base, cell.engine, cell.step, cell.threads))
    return wanted
