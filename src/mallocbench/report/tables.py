"""Plain-text pieces the terminal and Markdown reports share, so they print the same facts."""

from __future__ import annotations

from mallocbench.analysis.run_noise import noise_notes
from mallocbench.analysis.sla import sla_results
from mallocbench.analysis.summary import QPS, MemoryRow, RatioRow, oom_text, stability_notes
from mallocbench.report import formatting as fmt
from mallocbench.results import RunResult


def memory_unit(rows: list[MemoryRow]) -> str:
    """The unit of a memory table's RSS columns (VSZ, reserved address space, is in GiB)."""
    return fmt.memory_unit(
        v
        for r in rows
        for v in (
            r.peak_rss_bytes,
            r.accounted_bytes,
            r.unaccounted_bytes,
            r.memory_limit_bytes,
            r.peak_cgroup_bytes,
        )
    )


def memory_header(unit: str, caps: bool = False) -> list[str]:
    """`caps`: the run capped a setup or saw an OOM kill (analysis.summary.has_caps)."""
    capped = [f"memory cap ({unit})", f"peak cgroup charge ({unit})", "OOM"] if caps else []
    return [
        "engine",
        "setup",
        "peak VSZ (GiB)",
        f"peak RSS ({unit})",
        *capped,
        "RSS/cache",
        f"server accounts for ({unit})",
        f"unaccounted: RSS − accounted ({unit})",
        "heap ratio",
    ]


def memory_cells(row: MemoryRow, unit: str, caps: bool = False) -> list[str]:
    capped = (
        [
            fmt.size(row.memory_limit_bytes, unit),
            fmt.size(row.peak_cgroup_bytes, unit),
            oom_text(row),
        ]
        if caps
        else []
    )
    return [
        row.engine,
        row.setup,
        fmt.gb(row.peak_vsz_bytes),
        fmt.size(row.peak_rss_bytes, unit),
        *capped,
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
    """What the run itself found worth telling the reader (e.g. a THP knob with no effect),
    and the cells whose measured seconds did not hold one level."""
    notes = result.metadata.get("notes") or []
    recorded = [str(n) for n in notes] if isinstance(notes, list) else []
    return recorded + noise_notes(result) + stability_notes(result)
