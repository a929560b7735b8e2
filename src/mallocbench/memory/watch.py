"""--watch: the `while true; do ps ...; sleep N; done` loop, done properly.

Each sample is the full account (same numbers as one `mallocbench memory`), appended to
a CSV and flushed at once so an interrupted watch loses nothing; the chart is written
when the loop ends, including on Ctrl-C.
"""

from __future__ import annotations

import csv
import html
import time
from collections.abc import Callable
from pathlib import Path

from mallocbench.errors import MallocbenchError
from mallocbench.memory.report import MemoryReport

MiB = 1024 * 1024

COLUMNS = (
    "time",
    "elapsed_s",
    "rss",
    "vsz",
    "anonymous",
    "file_backed",
    "threads",
    "buffer_pool",
    "stacks",
    "heap_rss",
    "heap_accounted",
    "unaccounted",
    "ratio",
    "heap_ratio",
    "glibc_arenas",
    "memory_used",
    "connections",
    "rocksdb_block_cache",
    "rocksdb_memtables",
    "performance_schema",
)
# Series drawn in the chart, with their colours.
CHART_SERIES = (
    ("rss", "#000000"),
    ("heap_rss", "#1f77b4"),
    ("buffer_pool", "#2ca02c"),
    ("unaccounted", "#d62728"),
    ("connections", "#9467bd"),
    ("rocksdb_block_cache", "#ff7f0e"),
    ("stacks", "#8c564b"),
)


def row_of(report: MemoryReport, started: float) -> dict[str, object]:
    data = report.to_dict()
    proc = data.get("process", {})
    bd = report.breakdown
    rows = {r.key: r.bytes for r in bd.rows} if bd else {}
    return {
        "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(report.taken_at)),
        "elapsed_s": round(report.taken_at - started, 2),
        "rss": proc.get("rss"),
        "vsz": proc.get("vsz"),
        "anonymous": proc.get("anonymous"),
        "file_backed": proc.get("file_backed"),
        "threads": proc.get("threads"),
        "buffer_pool": rows.get("buffer_pool"),
        "stacks": rows.get("stacks"),
        "heap_rss": bd.heap_rss if bd else None,
        "heap_accounted": bd.heap_accounted if bd else None,
        "unaccounted": bd.unaccounted if bd else None,
        "ratio": round(bd.ratio, 4) if bd and bd.ratio else None,
        "heap_ratio": round(bd.heap_ratio, 4) if bd and bd.heap_ratio else None,
        "glibc_arenas": data.get("allocator", {}).get("glibc_arenas"),
        "memory_used": report.server.stat("Memory_used") if report.server else None,
        "connections": rows.get("connections"),
        "rocksdb_block_cache": rows.get("rocksdb_block_cache"),
        "rocksdb_memtables": rows.get("rocksdb_memtables"),
        "performance_schema": rows.get("performance_schema"),
    }


def watch(
    sample: Callable[[], MemoryReport],
    interval: float,
    csv_path: Path,
    chart_path: Path,
    count: int | None = None,
    on_row: Callable[[dict[str, object]], None] | None = None,
) -> list[dict[str, object]]:
    """Sample every `interval` seconds until `count` samples or Ctrl-C; return the rows."""
    if interval <= 0:
        raise MallocbenchError("--watch needs a positive number of seconds, e.g. --watch 5")
    try:
        csv_path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(csv_path, "w", newline="")  # noqa: SIM115 - kept open for the loop
    except OSError as exc:
        raise MallocbenchError(f"cannot write {csv_path}: {exc.strerror}") from exc
    rows: list[dict[str, object]] = []
    started = time.time()
    next_at = time.monotonic()
    try:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS)
        writer.writeheader()
        while count is None or len(rows) < count:
            row = row_of(sample(), started)
            rows.append(row)
            writer.writerow(row)
            handle.flush()
            if on_row:
                on_row(row)
            if count is not None and len(rows) >= count:
                break
            # Keep a steady cadence: sampling time is not added to the interval.
            next_at += interval
            time.sleep(max(0.0, next_at - time.monotonic()))
    except KeyboardInterrupt:
        pass  # Ctrl-C is the normal way to stop watching
    finally:
        handle.close()
        write_chart(rows, chart_path)
    return rows


def write_chart(rows: list[dict[str, object]], path: Path) -> None:
    """A self-contained SVG line chart of the main series (MiB over elapsed seconds)."""
    width, height, left, right, top, bottom = 900, 420, 70, 190, 30, 45
    plot_w, plot_h = width - left - right, height - top - bottom
    xs = [float(r["elapsed_s"] or 0) for r in rows]  # type: ignore[arg-type]
    series = []
    for key, color in CHART_SERIES:
        values = [r.get(key) for r in rows]
        if any(isinstance(v, int | float) and v for v in values):
            series.append((key, color, [float(v) / MiB if v is not None else None for v in values]))  # type: ignore[arg-type]
    all_values = [v for _, _, vs in series for v in vs if v is not None]
    y_min = min(0.0, *all_values) if all_values else 0.0
    y_max = max(all_values) if all_values else 1.0
    y_max = y_max if y_max > y_min else y_min + 1
    x_max = max(xs) if xs and max(xs) > 0 else 1.0

    def px(x: float) -> float:
        return left + plot_w * x / x_max

    def py(y: float) -> float:
        return top + plot_h * (1 - (y - y_min) / (y_max - y_min))

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'font-family="sans-serif" font-size="12">',
        '<rect width="100%" height="100%" fill="white"/>',
        f'<text x="{left}" y="18" font-size="14">'
        "mallocbench memory --watch: MiB over seconds</text>",
    ]
    for i in range(6):
        value = y_min + (y_max - y_min) * i / 5
        y = py(value)
        parts.append(
            f'<line x1="{left}" y1="{y:.1f}" x2="{left + plot_w}" y2="{y:.1f}" stroke="#ddd"/>'
        )
        parts.append(f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{value:,.0f}</text>')
    for i in range(6):
        x = px(x_max * i / 5)
        parts.append(
            f'<text x="{x:.1f}" y="{top + plot_h + 18}" text-anchor="middle">'
            f"{x_max * i / 5:.0f}</text>"
        )
    parts.append(
        f'<text x="{left + plot_w / 2}" y="{height - 8}" text-anchor="middle">seconds</text>'
    )
    for n, (key, color, values) in enumerate(series):
        points = " ".join(
            f"{px(x):.1f},{py(v):.1f}" for x, v in zip(xs, values, strict=True) if v is not None
        )
        if len(rows) == 1:
            x, v = xs[0], values[0]
            if v is not None:
                parts.append(f'<circle cx="{px(x):.1f}" cy="{py(v):.1f}" r="3" fill="{color}"/>')
        parts.append(f'<polyline fill="none" stroke="{color}" stroke-width="2" points="{points}"/>')
        ly = top + 16 * n + 8
        parts.append(
            f'<line x1="{left + plot_w + 15}" y1="{ly}" x2="{left + plot_w + 35}" y2="{ly}" '
            f'stroke="{color}" stroke-width="3"/>'
        )
        parts.append(f'<text x="{left + plot_w + 40}" y="{ly + 4}">{html.escape(key)}</text>')
    parts.append("</svg>")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(parts) + "\n")
    except OSError as exc:
        raise MallocbenchError(f"cannot write the chart {path}: {exc.strerror}") from exc
