"""CSV and JSON exports of a run (results.json is the JSON one)."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
from typing import Any

from mallocbench.analysis.run_analysis import RunAnalysis
from mallocbench.analysis.summary import RatioRow, RatioTable
from mallocbench.report.replay import document as replay_document
from mallocbench.report.replay import records as replay_records
from mallocbench.report.words import interval_fields
from mallocbench.workloads.catalogue import label_order

CELL_COLUMNS = (
    "setup",
    "engine",
    "step",
    "group",
    "threads",
    "repeat",
    "status",
    "qps",
    "tps",
    "p95_ms",
    "p99_ms",
    "avg_ms",
    "errors",
    "peak_rss_bytes",
    "peak_vsz_bytes",
    "cache_bytes",
    "allocator_path",
    "session",
    "duration_s",
    "error",
    "exit_signal",
)
# The server's account of its memory at the end of each cell, always present (empty when
# not measured) so scripts reading cells.csv need not guess; other metrics follow sorted.
MEMORY_COLUMNS = (
    "rss_at_accounting_bytes",
    "rss_accounted_bytes",
    "rss_unaccounted_bytes",
    "heap_rss_bytes",
    "heap_accounted_bytes",
    "server_memory_used_bytes",
    "innodb_buffer_pool_data_bytes",
    "rocksdb_block_cache_usage_bytes",
    "rocksdb_block_cache_pinned_bytes",
    "pfs_memory_bytes",
)


def cells_csv(analysis: RunAnalysis) -> str:
    result = analysis.result
    others = sorted({name for c in result.cells for name in c.metrics} - set(MEMORY_COLUMNS))
    metric_names = [*MEMORY_COLUMNS, *others]
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow([*CELL_COLUMNS, *metric_names])
    for cell in result.cells:
        data = cell.to_dict(with_samples=False)
        writer.writerow(
            [data.get(c) for c in CELL_COLUMNS] + [cell.metrics.get(m) for m in metric_names]
        )
    return buffer.getvalue()


# Per-operation costs carried into summary.csv, as means over the repeats that measured.
SUMMARY_METRICS = (
    "server_cpu_us_per_op",
    "server_user_us_per_op",
    "server_sys_us_per_op",
    "voluntary_cs_per_op",
    "involuntary_cs_per_op",
    "system_cs_per_op",
    "read_kb_per_op",
    "write_kb_per_op",
    "reads_per_op",
    "client_cpu_share",
    "rss_unaccounted_bytes",
)


def summary_records(analysis: RunAnalysis) -> list[dict[str, Any]]:
    """One row per setup x engine x step x threads: mean throughput with its 95% interval."""
    records = []
    order = {name: i for i, name in enumerate(analysis.setups)}
    keys = sorted(
        analysis.summaries,
        key=lambda k: (k[1], k[3], label_order(k[2]), order.get(k[0], 99)),
    )
    for key in keys:
        summary = analysis.summaries[key]
        mean, low, high = analysis.intervals[key]
        records.append(
            {
                "setup": summary.setup,
                "engine": summary.engine,
                "step": summary.step,
                "group": summary.group,
                "threads": summary.threads,
                "unit": summary.unit,
                "repeats": len(summary.qps_values),
                "mean": _finite(mean),
                "low": _finite(low),
                "high": _finite(high),
                "p95_ms": summary.p95_ms,
                "p99_ms": summary.p99_ms,
                "peak_rss_bytes": summary.peak_rss_bytes,
                "problem": summary.problem,
                **{name: summary.metrics.get(name) for name in SUMMARY_METRICS},
            }
        )
    return records


def summary_csv(analysis: RunAnalysis) -> str:
    return records_csv(summary_records(analysis), ("setup", "engine", "step", "threads"))


def _finite(x: float | None) -> float | None:
    """JSON has no infinity or NaN: an unbounded or unknown bound is null."""
    return x if x is not None and math.isfinite(x) else None


def location_record(table: RatioTable, row: RatioRow, setup: str) -> dict[str, Any]:
    """The columns that say which cell a relative value is about."""
    return {
        "engine": table.engine,
        "threads": table.threads,
        "step": row.step,
        "group": row.group,
        "setup": setup,
    }


def relative_records(analysis: RunAnalysis) -> list[dict[str, Any]]:
    return [
        {
            **location_record(table, row, setup),
            "qps": cell.value,
            "base_qps": row.reference_qps,
            "relative": cell.ratio,
            **interval_fields(cell),
            "unit": row.unit,
            "repeats": cell.repeats[0],
            "base_repeats": cell.repeats[1],
            "problem": cell.problem or row.reference_problem,
            "min_effect": cell.min_effect,
        }
        for table in analysis.tables
        for row, setup, cell in table.entries()
    ]


def records_csv(records: list[dict[str, Any]], empty_header: tuple[str, ...]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(records[0]) if records else empty_header)
    writer.writeheader()
    writer.writerows(records)
    return buffer.getvalue()


REPLAY_EMPTY_HEADER = ("trace", "setup", "allocator", "knobs")


def replay_csv(analysis: RunAnalysis) -> str:
    """A replay run's setups, one row each (the header alone for a run without one)."""
    return records_csv(replay_records(analysis.replay), REPLAY_EMPTY_HEADER)


def cells_or_replay_csv(analysis: RunAnalysis) -> str:
    """`csv`: a replay run has no cells, so its CSV is its replay's rows."""
    if analysis.replay is not None and not analysis.result.cells:
        return replay_csv(analysis)
    return cells_csv(analysis)


def relative_csv(analysis: RunAnalysis) -> str:
    return records_csv(relative_records(analysis), ("engine", "threads", "step"))


def relative_json(analysis: RunAnalysis) -> str:
    return json.dumps(
        {
            "run_id": analysis.result.run_id,
            "base": analysis.result.base_setup,
            "cells": relative_records(analysis),
        },
        indent=1,
    )


def results_json(analysis: RunAnalysis, with_samples: bool = True) -> str:
    """The run as reported; a --min-effect given goes into its metadata, so that a
    report read back from this file uses it too."""
    result = analysis.result
    if analysis.min_effect_given:
        metadata = dataclasses.replace(result.metadata, min_effect=analysis.min_effect)
        result = dataclasses.replace(result, metadata=metadata)
    data = result.to_dict(with_samples=with_samples)
    if analysis.replay is not None:
        data["replay_summary"] = replay_document(analysis.replay)
    return json.dumps(data, indent=1)
