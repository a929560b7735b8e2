"""--watch: the `while true; do ps ...; sleep N; done` loop, done properly.

Each sample is the full account (same numbers as one `mallocbench memory`), appended to
a CSV and flushed at once so an interrupted watch loses nothing; the chart is written
when the loop ends, including on Ctrl-C or a `kill` (SIGTERM).
"""

from __future__ import annotations

import contextlib
import csv
import time
from collections.abc import Callable
from pathlib import Path

from mallocbench.errors import MallocbenchError
from mallocbench.memory.report import MemoryReport

# How often a wait between samples checks for a requested stop.
_STOP_POLL_S = 0.1

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
    "lazy_free",
    "anon_huge_pages",
)


def row_of(report: MemoryReport, started: float) -> dict[str, object]:
    proc = report.process_summary
    bd = report.breakdown
    rows = {r.key: r.bytes for r in bd.rows} if bd else {}
    return {
        "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(report.taken_at)),
        "elapsed_s": round(report.taken_at - started, 2),
        "rss": proc.rss if proc else None,
        "vsz": proc.vsz if proc else None,
        "anonymous": proc.anonymous if proc else None,
        "file_backed": proc.file_backed if proc else None,
        "threads": proc.threads if proc else None,
        "buffer_pool": rows.get("buffer_pool"),
        "stacks": rows.get("stacks"),
        "heap_rss": bd.heap_rss if bd else None,
        "heap_accounted": bd.heap_accounted if bd else None,
        "unaccounted": bd.unaccounted if bd else None,
        "ratio": round(bd.ratio, 4) if bd and bd.ratio else None,
        "heap_ratio": round(bd.heap_ratio, 4) if bd and bd.heap_ratio else None,
        "glibc_arenas": report.allocator.glibc_arenas if report.allocator else None,
        "memory_used": report.server.stat("Memory_used") if report.server else None,
        "connections": rows.get("connections"),
        "rocksdb_block_cache": rows.get("rocksdb_block_cache"),
        "rocksdb_memtables": rows.get("rocksdb_memtables"),
        "performance_schema": rows.get("performance_schema"),
        "lazy_free": proc.lazy_free if proc else None,
        "anon_huge_pages": proc.anon_huge_pages if proc else None,
    }


def watch(
    sample: Callable[[], MemoryReport],
    interval: float,
    csv_path: Path,
    draw: Callable[[list[dict[str, object]]], None],
    count: int | None = None,
    on_row: Callable[[dict[str, object]], None] | None = None,
    should_stop: Callable[[], bool] = lambda: False,
) -> list[dict[str, object]]:
    """Sample every `interval` seconds until `count` samples, `should_stop()` or Ctrl-C;
    return the rows. `draw` gets the rows when the loop ends (the chart is report's)."""
    if interval <= 0:
        raise MallocbenchError("--watch needs a positive number of seconds, e.g. --watch 5")
    try:
        csv_path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(csv_path, "w", newline="")  # noqa: SIM115 - kept open for the loop
    except OSError as exc:
        raise MallocbenchError(f"cannot write {csv_path}: {exc.strerror}") from exc
    rows: list[dict[str, object]] = []
    failed: OSError | None = None
    started = time.time()
    next_at = time.monotonic()
    try:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS)
        writer.writeheader()
        while (count is None or len(rows) < count) and not should_stop():
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
            # In short naps: a stop asked for by a signal handler ends the wait promptly
            # (the handler only sets a flag, so the sleep itself would run on).
            while not should_stop() and (left := next_at - time.monotonic()) > 0:
                time.sleep(min(left, _STOP_POLL_S))
    except KeyboardInterrupt:
        pass  # Ctrl-C is the normal way to stop watching
    except OSError as exc:
        failed = exc  # a full disk under the CSV: the rows so far are in it
    finally:
        with contextlib.suppress(OSError):
            handle.close()
        if failed is None:
            draw(rows)
    if failed is not None:
        raise MallocbenchError(
            f"cannot write {csv_path} after {len(rows)} samples: {failed.strerror}"
        ) from failed
    return rows
