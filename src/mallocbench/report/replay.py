"""The replay section of every report format: the trace's facts, per setup the measured
values with their intervals, and the ratios to the base.

Only a ratio whose interval excludes 1 and is beyond min_effect is coloured and worded as
a finding ("higher"/"lower"); every other ratio is shown plain with its verdict.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from mallocbench.analysis.replay import (
    METRICS,
    SAVING_KEY,
    Estimate,
    Ratio,
    ReplayAnalysis,
    Saving,
    SetupSummary,
)
from mallocbench.model.metadata import ReplayRecord
from mallocbench.model.results import json_safe
from mallocbench.report.growth import growth_lines, growth_numbers
from mallocbench.units import quantity

MIB = 1024 * 1024
# The ratio of RSS/live equals that of peak RSS (one ideal for all setups): not repeated.
RATIO_KEYS = tuple(key for key, _ in METRICS if key != "rss_over_live")
METRIC_LABELS = {
    "peak_heap_rss": "peak RSS",
    "peak_heap_rss_steady": "steady peak RSS",
    "rss_over_live": "RSS/live",
    "cpu_s": "CPU s",
    "calls_per_s": "calls/s",
}


# The unit of each replay metric, as units.quantity prints it.
UNITS = {"peak_heap_rss": "bytes", "peak_heap_rss_steady": "bytes", "calls_per_s": "1/s",
         "cpu_s": "s"}  # fmt: skip


def value_text(key: str, value: float) -> str:
    """A replay metric: its header names every unit but the sizes' (MiB)."""
    unit = UNITS.get(key, "")
    return quantity(value, unit, named=unit == "bytes")


def estimate_text(key: str, e: Estimate) -> str:
    text = value_text(key, e.mean)
    if not math.isnan(e.low) and e.mean:
        text += f" ±{(e.high - e.low) / 2 / e.mean * 100:.0f}%"
    return text


@dataclass(frozen=True)
class RatioView:
    """A ratio as shown: its text and, for a finding only, "better" or "worse"."""

    text: str
    kind: str = ""


def ratio_view(r: Ratio | None, lower_is_better: bool) -> RatioView:
    if r is None or math.isnan(r.ratio):
        return RatioView("")
    bounds = "" if math.isnan(r.low) else f" [{r.low:.2f}, {r.high:.2f}]"
    text = f"{r.ratio:.2f}x{bounds}"
    if not r.finding:
        return RatioView(f"{text} {r.verdict}")
    word = "lower" if r.ratio < 1 else "higher"
    better = (r.ratio < 1) == lower_is_better
    return RatioView(f"{text} {word}", "better" if better else "worse")


def trace_line(replay: ReplayAnalysis) -> str:
    rec = replay.record
    d = rec.trace or {}
    parts = int(d.get("segments") or 0)  # a segmented trace, replayed whole
    named = "" if not parts else f" ({parts} segment{'s' if parts != 1 else ''})"
    return (
        f"replay of {rec.trace_path}{named}: "
        f"{int(d.get('events') or 0):,} calls, "
        f"{d.get('threads', 0)} threads, {float(d.get('duration_s') or 0):.1f} s recorded, "
        f"ideal peak (live requested bytes) {float(d.get('ideal_peak_live') or 0) / MIB:,.1f} "
        f"MiB; timing {rec.timing}"
        + (
            f" at {rec.speed:g}x (time-based knobs passed at 1/{rec.speed:g} of their value)"
            if rec.timing == "recorded" and rec.speed not in (None, 1)
            else ""
        )
        + (f", order {rec.order}" if rec.order else "")
        + own_memory_text(rec)
    )


def own_memory_text(rec: ReplayRecord) -> str:
    """The streamed replayer's own memory at its largest over the replays (its process
    and bookkeeping, left out of every RSS shown); replays from before it say nothing."""
    own = [
        int(run.data["baseline_rss"])
        for run in rec.replay_runs
        if run.data and "bookkeeping_peak" in run.data and "baseline_rss" in run.data
    ]
    if not own:
        return ""
    return f"; the replayer's own memory at most {max(own) / MIB:,.1f} MiB (left out of RSS)"


def rule_text(replay: ReplayAnalysis) -> str:
    rule = f" and the change is beyond {replay.min_effect:.0%}" if replay.min_effect else ""
    text = (
        "Ratios with 95% intervals; coloured and worded higher/lower only when the interval "
        f"excludes 1{rule} (the project's rule for findings). Peak RSS is the replayer's "
        "RSS above its own bookkeeping, over the whole replay; RSS/live divides it by the "
        "ideal. Steady peak RSS is its peak over each replay's second half (sampled every "
        "10 ms): a replay's start makes the blocks live when the window opened all at once, "
        "into a fresh heap, and some allocators peak there, which the recorded server, "
        "long past its own start, did not; tune decides on the steady peak."
    )
    if replay.record.timing == "recorded":
        text += (
            " With the recorded timing, calls/s is the recording's pace: --timing none "
            "measures CPU cost."
        )
    if replay.record.order == "recorded":
        text += (
            " In the recorded order the threads take turns, one call at a time: CPU s and "
            "calls/s include the turn-taking (--order threads measures them under real "
            "concurrency)."
        )
    return text


def saving_text(s: Saving) -> str:
    """ "saves about 7.5 MiB [6.9, 8.1] of the server's 180 MiB RSS (4.2% [3.8, 4.7])",
    or of the replay's heap when the trace does not hold the server's RSS."""
    share = s.share
    verb = "saves" if s.bytes >= 0 else "costs"
    sign = 1 if s.bytes >= 0 else -1
    low, high = sorted((sign * s.low / MIB, sign * s.high / MIB))
    pct_low, pct_high = sorted((sign * share.low * 100, sign * share.high * 100))
    of = "the server's" if s.of_server else "the replay's"
    what = "RSS" if s.of_server else "heap"
    why = "" if s.of_server else "; the trace holds no server RSS: `record --pid` keeps it"
    return (
        f"{verb} about {sign * s.bytes / MIB:,.1f} MiB [{low:,.1f}, {high:,.1f}] of {of} "
        f"{s.of_bytes / MIB:,.0f} MiB {what} ({sign * share.mean * 100:.1f}% "
        f"[{pct_low:.1f}, {pct_high:.1f}]{why})"
    )


def saving_lines(replay: ReplayAnalysis) -> list[str]:
    """The saving of each setup whose steady peak is shown lower than the base's: only a
    finding is put in the server's terms."""
    out = []
    for row in replay.rows[1:]:
        ratio = row.ratios.get(SAVING_KEY)
        found = replay.saving(row.setup)
        if ratio is not None and ratio.finding and ratio.ratio < 1 and found is not None:
            out.append(f"{row.setup} {saving_text(found)} (steady peak against {replay.base})")
    return out


def value_header() -> list[str]:
    return ["setup", "runs", *(METRIC_LABELS[key] for key, _ in METRICS)]


def value_rows(replay: ReplayAnalysis) -> list[list[str]]:
    return [
        [
            row.setup,
            f"{row.runs - row.failed}/{row.runs}",
            *(estimate_text(key, row.metrics[key]) for key, _ in METRICS),
        ]
        for row in replay.rows
    ]


def ratio_header() -> list[str]:
    return ["setup", *(METRIC_LABELS[key] for key, _ in METRICS if key in RATIO_KEYS)]


def ratio_rows(replay: ReplayAnalysis) -> list[tuple[str, list[RatioView]]]:
    return [
        (
            row.setup,
            [ratio_view(row.ratios.get(key), lower) for key, lower in METRICS if key in RATIO_KEYS],
        )
        for row in replay.rows[1:]
    ]


def _failed_line(row: SetupSummary) -> str:
    crashed = (
        f", {row.crashed} killed by a signal (the run's notes say which call each replay "
        "thread was on)"
        if row.crashed
        else ""
    )
    return f"{row.setup}: {row.failed} of {row.runs} replays failed{crashed}"


def nothing_replayed_text(record: ReplayRecord, out_dir: str | None) -> str | None:
    """The one line of a replay run whose every replay failed (None when one did not):
    the first failure of each setup, and where the rest is kept."""
    runs = record.replay_runs
    if not runs or any(r.status == "ok" for r in runs):
        return None
    first: dict[str, str] = {}
    for run in runs:
        first.setdefault(run.setup, run.error or run.status)
    why = "; ".join(f"{setup}: {error}" for setup, error in first.items())
    crashed = any(r.status == "crashed" for r in runs)
    kept = f" (kept in {out_dir})" if out_dir else ""
    return (
        f"every replay failed ({len(runs)} of {len(runs)}), nothing was measured: {why}"
        + ("; the notes above say which call each replay thread was on" if crashed else "")
        + kept
    )


def error_lines(replay: ReplayAnalysis) -> list[str]:
    lines = []
    for row in replay.rows:
        lines += [_failed_line(row)] if row.failed else []
        lines += [f"{row.setup}: {error}" for error in row.errors[:3]]
    for setup, ratio in replay.behind:
        lines.append(
            f"{setup}: a replay took {ratio:.1f}x the recording's time, so time-based "
            "release saw a slower pace than the program's"
            + (
                " (the threads took turns: --order threads runs them freely)"
                if replay.record.order == "recorded"
                else ""
            )
        )
    return lines


def _md_table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


def markdown_ratio(view: RatioView) -> str:
    return f"**{view.text}**" if view.kind else view.text


def markdown_lines(replay: ReplayAnalysis | None) -> list[str]:
    if replay is None:
        return []
    out = ["## Replay of a recorded trace", "", trace_line(replay) + ".", ""]
    out += [f"> note: {w}" for w in replay.record.warnings or []]
    if replay.record.warnings:
        out.append("")
    out += ["Per setup (mean ±95% interval half-width):", ""]
    out += [*_md_table(value_header(), value_rows(replay)), ""]
    ratios = ratio_rows(replay)
    if ratios:
        out += [f"Relative to {replay.base} (bold: a finding):", ""]
        rows = [[setup, *(markdown_ratio(v) for v in views)] for setup, views in ratios]
        out += [*_md_table(ratio_header(), rows), ""]
    saved = saving_lines(replay)
    out += [f"- {line}" for line in saved] + ([""] if saved else [])
    out += [rule_text(replay), ""]
    growth = growth_lines(replay)
    out += ["### Growth over the trace", "", *growth, ""] if growth else []
    out += [f"- {line}" for line in error_lines(replay)]
    return out + ([""] if error_lines(replay) else [])


def rich_ratio(view: RatioView) -> str:
    if not view.kind:
        return view.text
    return f"[{'green' if view.kind == 'better' else 'red'}]{view.text}[/]"


def print_replay(replay: ReplayAnalysis | None, console: Console) -> None:
    if replay is None:
        return
    console.print(f"[bold]{trace_line(replay)}[/]")
    for warning in replay.record.warnings or []:
        console.print(f"[yellow]note:[/] {warning}")
    values = Table(title="per setup (mean ±95% interval half-width)")
    for index, label in enumerate(value_header()):
        values.add_column(label, justify="left" if index == 0 else "right", overflow="fold")
    for cells in value_rows(replay):
        values.add_row(*cells)
    console.print(values)
    ratios = ratio_rows(replay)
    if ratios:
        table = Table(title=f"relative to {replay.base}")
        for label in ratio_header():
            table.add_column(label, justify="left", overflow="fold")
        for setup, views in ratios:
            table.add_row(setup, *(rich_ratio(v) for v in views))
        console.print(table)
    for line in saving_lines(replay):
        console.print(line, markup=False, highlight=False)
    console.print(rule_text(replay))
    for line in growth_lines(replay):
        console.print(escape(line))
    for line in error_lines(replay):
        console.print(f"[red]{line}[/]")


def document(replay: ReplayAnalysis) -> dict[str, Any]:
    """The replay as one JSON object: the trace, how it ran, and per setup its summary
    (the ideal curve is in the run's metadata, `replay.ideal_curve`, once)."""
    rec = replay.record
    return {
        "kind": "replay",
        "trace_path": rec.trace_path,
        "trace": rec.trace or {},
        "warnings": list(rec.warnings or []),
        "timing": rec.timing,
        "speed": rec.speed,
        "repeats": rec.repeats,
        "min_effect": replay.min_effect,
        "base": replay.base,
        "setups": [
            {**row.to_dict(), "growth": growth_numbers(replay.growth, row.setup)}
            for row in replay.rows
        ],
        "savings": [json_safe(asdict(s)) for s in replay.savings],
        "growth": growth_lines(replay),
    }


@dataclass(frozen=True)
class ReplayView:
    """The replay section of the HTML page."""

    trace_line: str
    warnings: list[str]
    value_header: list[str]
    value_rows: list[list[str]]
    ratio_header: list[str]
    ratio_rows: list[tuple[str, list[RatioView]]]
    base: str | None
    rule: str
    errors: list[str]
    growth: list[str]


def html_view(replay: ReplayAnalysis | None) -> ReplayView | None:
    if replay is None:
        return None
    return ReplayView(
        trace_line=trace_line(replay),
        warnings=list(replay.record.warnings or []),
        value_header=value_header(),
        value_rows=value_rows(replay),
        ratio_header=ratio_header(),
        ratio_rows=ratio_rows(replay),
        base=replay.base,
        rule=rule_text(replay),
        errors=error_lines(replay),
        growth=growth_lines(replay),
    )


def _verdict(r: Ratio) -> str:
    # classify's faster/slower mean above/below 1, which reads wrong for memory and CPU
    if not r.finding:
        return r.verdict
    return "higher" if r.ratio > 1 else "lower"


def records(replay: ReplayAnalysis | None) -> list[dict[str, Any]]:
    """One row per setup for CSV: the trace it replayed, each metric's mean and 95%
    bounds, and each ratio to the base with its bounds and verdict (empty for the base;
    `finding` is true only under the project's rule)."""
    if replay is None:
        return []
    rec = replay.record
    out = []
    for row in replay.rows:
        record: dict[str, Any] = {
            "trace": rec.trace_path,
            "setup": row.setup,
            "allocator": row.allocator,
            "knobs": " ".join(f"{k}={v}" for k, v in sorted(row.knobs.items())),
            "timing": rec.timing,
            "speed": rec.speed,
            "order": rec.order,
            "runs": row.runs,
            "failed": row.failed,
            "crashed": row.crashed,
            "ideal_peak_live": row.ideal_peak_live,
            **growth_numbers(replay.growth, row.setup),
        }
        for key, _ in METRICS:
            e = row.metrics[key]
            record.update({key: e.mean, f"{key}_low": e.low, f"{key}_high": e.high})
        for key in RATIO_KEYS:
            r = row.ratios.get(key)
            record.update(
                {
                    f"{key}_ratio": r.ratio if r else None,
                    f"{key}_ratio_low": r.low if r else None,
                    f"{key}_ratio_high": r.high if r else None,
                    f"{key}_verdict": _verdict(r) if r else None,
                    f"{key}_finding": r.finding if r else None,
                }
            )
        out.append(json_safe(record))  # an interval not known is an empty field, not nan
    return out


def listing(rec: ReplayRecord) -> str:
    """How `runs` shows a replay run, which has no cells: its trace, setups and replays."""
    setups = [str(s.get("name")) for s in rec.setups or []]
    done = sum(1 for r in rec.runs or [] if r.get("status") == "ok")
    planned = int(rec.repeats or 0) * len(setups)
    # A trace whose recording stopped early (a full disk, the shim's buffer cap) is marked
    # here too: its replays cover only the start of the window.
    cut = str((rec.trace or {}).get("status") or "").startswith("stopped")
    return (
        f"replay of {rec.trace_path}{' (recording stopped early)' if cut else ''}  "
        f"{', '.join(setups) or 'no setups'}  "
        f"{rec.repeats or 0} repeats, {done}/{planned} replays ok"
    )


def reading_text(trace: Path) -> str:
    """What `replay`'s display says while the trace is read."""
    return f"reading the trace {trace}"
