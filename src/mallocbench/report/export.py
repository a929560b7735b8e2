"""CSV and JSON exports of a run (results.json is the JSON one)."""

from __future__ import annotations

import csv
import io
import json

from mallocbench.analysis.summary import relative_tables
from mallocbench.results import RunResult

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


def cells_csv(result: RunResult) -> str:
    metric_names = sorted({name for c in result.cells for name in c.metrics})
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow([*CELL_COLUMNS, *metric_names])
    for cell in result.cells:
        data = cell.to_dict(with_samples=False)
        writer.writerow(
            [data.get(c) for c in CELL_COLUMNS] + [cell.metrics.get(m) for m in metric_names]
        )
    return buffer.getvalue()


def relative_csv(result: RunResult) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(["engine", "threads", "step", "group", "setup", "qps", "base_qps", "relative"])
    for table in relative_tables(result):
        for row in table.rows:
            for setup in table.setups:
                writer.writerow(
                    [
                        table.engine,
                        table.threads,
                        row.step,
                        row.group,
                        setup,
                        row.absolute.get(setup),
                        row.base_qps,
                        row.values.get(setup),
                    ]
                )
    return buffer.getvalue()


def results_json(result: RunResult, with_samples: bool = True) -> str:
    return json.dumps(result.to_dict(with_samples=with_samples), indent=1)
