"""The replay's terminal table and JSON document.

Only a ratio whose interval excludes 1 and is beyond min_effect is coloured and worded as
a finding ("higher"/"lower"); every other ratio is shown plain with its verdict.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.table import Table

from mallocbench.console import make_console
from mallocbench.replay.summary import METRICS, Estimate, Ratio, SetupSummary
from mallocbench.replay.trace import TraceInfo

MIB = 1024 * 1024


def _fmt(key: str, value: float) -> str:
    if math.isnan(value):
        return "-"
    if key == "peak_heap_rss":
        return f"{value / MIB:,.1f} MiB"
    if key == "calls_per_s":
        return f"{value:,.0f}"
    if key == "cpu_s":
        return f"{value:.3f}"
    return f"{value:.2f}"


def _estimate(key: str, e: Estimate) -> str:
    text = _fmt(key, e.mean)
    if not math.isnan(e.low):
        text += f" ±{(e.high - e.low) / 2 / e.mean * 100:.0f}%" if e.mean else ""
    return text


def _ratio(r: Ratio | None, lower_is_better: bool) -> str:
    if r is None or math.isnan(r.ratio):
        return ""
    bounds = "" if math.isnan(r.low) else f" [{r.low:.2f}, {r.high:.2f}]"
    text = f"{r.ratio:.2f}x{bounds}"
    if not r.finding:
        return f"{text} {r.verdict}"
    better = (r.ratio < 1) == lower_is_better
    word = "lower" if r.ratio < 1 else "higher"
    return f"[{'green' if better else 'red'}]{text} {word}[/]"


def print_table(
    info: TraceInfo,
    rows: Sequence[SetupSummary],
    timing: str,
    min_effect: float,
    warnings: Sequence[str] = (),
    console: Console | None = None,
) -> None:
    console = console or make_console()
    d = info.data
    console.print(
        f"[bold]replay of {info.path}[/]: {d.get('events', 0):,} calls, "
        f"{d.get('threads', 0)} threads, {float(d.get('duration_s') or 0):.1f} s recorded, "
        f"ideal peak (live requested bytes) {float(d.get('ideal_peak_live') or 0) / MIB:,.1f} "
        f"MiB; timing {timing}"
    )
    for warning in warnings:
        console.print(f"[yellow]note:[/] {warning}")
    values = Table(title="per setup (mean ±95% interval half-width)")
    values.add_column("setup", overflow="fold")
    values.add_column("runs", justify="right")
    for _, label, _ in METRICS:
        values.add_column(label, justify="right")
    ratios = Table(title=f"relative to {rows[0].setup if rows else 'the base'}")
    ratios.add_column("setup", overflow="fold")
    for key, label, _ in METRICS:
        if key != "rss_over_live":  # the same ratio as peak RSS: one ideal for all
            ratios.add_column(label, justify="left")
    for row in rows:
        cells = [row.setup, f"{row.runs - row.failed}/{row.runs}"]
        values.add_row(*cells, *(_estimate(key, row.metrics[key]) for key, _, _ in METRICS))
        if row.ratios:
            ratios.add_row(
                row.setup,
                *(
                    _ratio(row.ratios.get(key), lower)
                    for key, _, lower in METRICS
                    if key != "rss_over_live"
                ),
            )
    console.print(values)
    if len(rows) > 1:
        console.print(ratios)
    rule = f" and the change is beyond {min_effect:.0%}" if min_effect else ""
    console.print(
        "Ratios with 95% intervals; coloured and worded higher/lower only when the interval "
        f"excludes 1{rule} (the project's rule for findings). Peak RSS is the replayer's "
        "RSS above its own bookkeeping; RSS/live divides it by the ideal."
        + (
            " With the recorded timing, calls/s is the recording's pace: --timing none "
            "measures CPU cost."
            if timing == "recorded"
            else ""
        )
    )
    for row in rows:
        for error in row.errors[:3]:
            console.print(f"[red]{row.setup}:[/] {error}")


def document(
    info: TraceInfo,
    rows: Sequence[SetupSummary],
    timing: str,
    speed: float,
    repeats: int,
    min_effect: float,
    warnings: Sequence[str] = (),
) -> dict[str, Any]:
    trace = {k: v for k, v in info.data.items() if k != "ideal_curve"}
    return {
        "kind": "replay",
        "trace": trace,
        "ideal_curve": info.data.get("ideal_curve", []),
        "warnings": list(warnings),
        "timing": timing,
        "speed": speed,
        "repeats": repeats,
        "min_effect": min_effect,
        "base": rows[0].setup if rows else None,
        "setups": [row.to_dict() for row in rows],
    }
