"""Plain-text pieces the terminal and Markdown reports share, so they print the same facts."""

from __future__ import annotations

from mallocbench.analysis.sla import sla_results
from mallocbench.analysis.summary import QPS, MemoryRow, RatioRow
from mallocbench.report import formatting as fmt
from mallocbench.results import RunResult


def memory_unit(rows: list[MemoryRow]) -> str:
    """The unit of a memory table's RSS columns (VSZ, reserved address space, is in GiB)."""
    return fmt.memory_unit(
        v for r in rows for v in (r.peak_rss_bytes, r.accounted_bytes, r.unaccounted_bytes)
    )


def memory_header(unit: str) -> list[str]:
    return [
        "engine",
        "setup",
        "peak VSZ (GiB)",
        f"peak RSS ({unit})",
        "RSS/cache",
        f"server accounts for ({unit})",
        f"unaccounted: RSS − accounted ({unit})",
        "heap ratio",
    ]


def memory_cells(row: MemoryRow, unit: str) -> list[str]:
    return [
        row.engine,
        row.setup,
        fmt.gb(row.peak_vsz_bytes),
        fmt.size(row.peak_rss_bytes, unit),
        fmt.ratio(row.rss_per_cache),
        fmt.size(row.accounted_bytes, unit),
        fmt.size(row.unaccounted_bytes, unit),
        fmt.ratio(row.heap_ratio),
    ]


def reference_text(row: RatioRow, base: str) -> str:
    """The base's absolute throughput, with its unit when it is not QPS."""
    if row.reference_problem:
        return row.reference_problem.upper()
    text = fmt.qps(row.reference_qps)
    return f"{text} {row.unit}" if row.unit != QPS and row.reference_qps is not None else text


def sla_lines(result: RunResult) -> list[tuple[str, bool]]:
    """("where: SLA met: 98 of 100 rows/s", met) per insert-benchmark query cell."""
    return [
        (f"{where}: {status.describe()}", status.met) for where, status in sla_results(result.cells)
    ]


def run_notes(result: RunResult) -> list[str]:
    """What the run itself found worth telling the reader (e.g. a THP knob with no effect)."""
    notes = result.metadata.get("notes") or []
    return [str(n) for n in notes] if isinstance(notes, list) else []
