"""Numbers into words, colours and CSS classes: the one place the reports share them.

The analysis returns numbers, verdicts and records; how a verdict is coloured and what
a reader is told about it is decided here, once for every format.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from mallocbench import units as fmt
from mallocbench.analysis import stats
from mallocbench.analysis.adjust import AdjustedRatio, CpuAdjustment
from mallocbench.analysis.client import CellLike
from mallocbench.analysis.comparability import Difference, Fact
from mallocbench.analysis.comparison import (
    CHANGED,
    FASTER,
    RSS_DOWN,
    RSS_UP,
    SLOWER,
    Change,
    Comparison,
    OneSided,
)
from mallocbench.analysis.convergence import WideCell
from mallocbench.analysis.criteria import Candidate, ThinEvidence
from mallocbench.analysis.run_noise import BUSY_SHARE, RunNoise
from mallocbench.analysis.sla import SlaStatus
from mallocbench.analysis.steady import WarmupDetector
from mallocbench.analysis.summary import (
    RSS,
    UNSTABLE_MARK,
    VSZ_RESERVED_FACTOR,
    Exploratory,
    MemoryRow,
    RatioCell,
    RatioTable,
)
from mallocbench.analysis.verdict import Finding, GroupDetail, VerdictRow
from mallocbench.model.metadata import AdaptiveRecord
from mallocbench.model.results import Cell
from mallocbench.units import percent

__all__ = [
    "ACCOUNTING_NOTE",
    "CAP_NOTE",
    "adaptive_lines",
    "cell_class",
    "cell_interval",
    "cell_mark",
    "cell_text",
    "cell_title",
    "candidate_reasons",
    "change_reason",
    "change_text",
    "difference_fields",
    "difference_text",
    "fact_text",
    "findings_summary",
    "one_sided_text",
    "client_cpu_warning",
    "client_cpu_warnings",
    "color_rule",
    "exploratory_note",
    "finding_text",
    "group_detail_text",
    "noise_notes",
    "interval_fields",
    "problem_text",
    "stability_notes",
    "oom_text",
    "percent",
    "relative_mark",
    "relative_text",
    "significance_rule",
    "sla_text",
    "table_caption",
    "table_title",
    "thin_clauses",
    "warmup_text",
    "wide_cell_text",
    "unit_note",
    "unmeasured_text",
    "verdict_note",
    "verdict_rss_finding",
    "verdict_rss_interval",
    "verdict_rss_text",
    "verdict_class",
    "vsz_note",
]


def cell_text(cell: RatioCell) -> str:
    """A relative value as the tables print it: the ratio, or what kept it from one."""
    if cell.problem:
        return problem_text(cell).upper()
    return fmt.ratio(cell.ratio) + (UNSTABLE_MARK if cell.unstable else "")


def cell_mark(cell: RatioCell) -> str:
    """The star of a finding."""
    return "*" if cell.significant else ""


def cell_interval(cell: RatioCell) -> str:
    """A relative value's 95% interval, or why it has none ("" for a cell that failed)."""
    if cell.problem or cell.ratio is None:
        return ""
    if cell.has_interval:
        return fmt.interval(cell.low, cell.high)
    if min(cell.repeats) <= 1:
        return "1 repeat: no interval"
    return "no interval"


def relative_mark(value: stats.Relative) -> str:
    """'+' significantly above 1, '-' significantly below, '' otherwise."""
    if not value.significant:
        return ""
    return "+" if value.low > 1.0 else "-"


def relative_text(value: stats.Relative, digits: int = 2) -> str:
    """A ratio with its interval and the star of a finding: "1.12x [1.05, 1.19]*"."""
    if math.isnan(value.ratio):
        return "-"
    body = f"{value.ratio:.{digits}f}x"
    if not math.isnan(value.low):
        body += f" [{_bound(value.low, digits)}, {_bound(value.high, digits)}]"
    return body + ("*" if value.significant else "")


def _bound(x: float, digits: int) -> str:
    return "inf" if math.isinf(x) and x > 0 else "-inf" if math.isinf(x) else f"{x:.{digits}f}"


# stats.classify words any ratio above 1 "faster"; a reader of a memory ratio's export
# would take that for the good direction, so memory says higher or lower.
_MEMORY_WORDS: dict[str, str] = {stats.FASTER: "higher", stats.SLOWER: "lower"}


def problem_text(cell: RatioCell) -> str:
    """Why a cell has no ratio: its status, and in a comparison the run it happened in."""
    problem = str(cell.problem or "")
    return f"{problem} in {cell.problem_in}" if cell.problem_in else problem


def interval_fields(cell: RatioCell) -> dict[str, Any]:
    """What every export has beside a ratio: its interval (JSON has no nan) and verdict."""

    def bound(x: float) -> float | None:
        return x if cell.has_interval and math.isfinite(x) else None

    verdict: str = cell.verdict
    if cell.unit == RSS:
        verdict = _MEMORY_WORDS.get(verdict, verdict)
    return {
        "low": bound(cell.low),
        "high": bound(cell.high),
        "verdict": verdict,
        "significant": cell.significant,
    }


def verdict_class(verdict: str) -> str:
    """The color of a verdict. Only findings (faster, slower) are colored; "same" gets a
    neutral grey because it too is a claim the interval supports; everything else none."""
    colors: dict[str, str] = {stats.FASTER: "faster", stats.SLOWER: "slower", stats.SAME: "same"}
    return colors.get(verdict, "none")


def cell_class(cell: RatioCell) -> str:
    """The CSS class (and terminal colour) of a relative value."""
    return "problem" if cell.problem else verdict_class(cell.verdict)


def cell_title(cell: RatioCell) -> str:
    """What hovering a relative value shows: both sides, the ratio, its interval, verdict."""
    if cell.problem:
        return f"this cell did not measure: {problem_text(cell)}"
    unit = cell.unit
    parts = [
        f"{fmt.qps(cell.value)} {unit} vs {fmt.qps(cell.reference)} {unit} ({cell.reference_label})"
    ]
    if cell.ratio is not None:
        parts.append(f"ratio {cell.ratio:.3f}")
    if cell.has_interval:
        parts.append(
            f"95% interval {fmt.bound(cell.low)} to {fmt.bound(cell.high)}"
            + (" (excludes 1.0)" if cell.excludes_one else "")
        )
    elif cell.ratio is not None:
        parts.append(cell_interval(cell))
    parts.append(f"verdict: {cell.verdict}")
    if cell.same:
        parts[-1] += f" (the whole interval within ±{percent(cell.min_effect)})"
    elif cell.verdict == stats.INCONCLUSIVE:
        parts[-1] += f" (excludes 1.0 but may be smaller than ±{percent(cell.min_effect)})"
    parts.append(f"repeats {cell.repeats[0]} / {cell.repeats[1]}")
    if cell.unstable:
        parts.append("unstable: a repeat's throughput trended or shifted while measured")
    return "; ".join(parts)


def table_title(table: RatioTable) -> str:
    """Where a table of relative values was measured: engine and client threads."""
    return f"{table.engine}, {table.threads} client thread{'s' if table.threads != 1 else ''}"


def table_caption(table: RatioTable) -> str:
    """What a table of relative values divides, and when a cell reads "same"."""
    if table.between_runs:
        text = "QPS(B) / QPS(A), 95% interval below"
    else:
        text = (
            f"QPS(setup) / QPS({table.reference}), 95% interval below (paired by block: the "
            "repeats' server starts)"
        )
    effect = table.min_effect
    return text + (f"; same: the whole interval within ±{percent(effect)}" if effect > 0 else "")


def color_rule(min_effect: float = 0.0) -> str:
    """How the reports color ratios, in words."""
    band = f" and the change is at least {percent(min_effect)}" if min_effect > 0 else ""
    text = f"green faster / red slower: the 95% interval excludes 1.0{band}"
    if min_effect > 0:
        text += f"; grey same: the whole interval within ±{percent(min_effect)}"
    return text + "; no color: not significant, inconclusive or no interval (not a finding)"


def significance_rule(min_effect: float = 0.0) -> str:
    """What "*" means, in words."""
    text = "* a finding: the 95% interval excludes 1.0"
    if min_effect > 0:
        text += f" and the change is at least {percent(min_effect)}"
    return text


def unit_note(tables: list[RatioTable] | tuple[RatioTable, ...]) -> str:
    """A sentence naming the insert benchmark's units, or "" when no table uses them."""
    units = list(dict.fromkeys(u for t in tables for u in t.units))
    if not units:
        return ""
    return (
        "Insert-benchmark steps compare their own rate instead of QPS: "
        + " and ".join(units)
        + " (rows/s inserted for the loads, queries/s for the query steps)."
    )


def oom_text(row: MemoryRow) -> str:
    if not row.oom_cells:
        return "-"
    return f"OOM-killed ({row.oom_cells} cell{'s' if row.oom_cells != 1 else ''})"


CAP_NOTE = (
    "memory_limit caps the server's own memory cgroup, and the kernel acts on the group's "
    "charge, not on RSS: the charge adds the page cache and kernel memory charged to the "
    "group (files the server reads and writes, socket buffers) and leaves out shared file "
    "pages that another process was charged for first, so it can sit above or below RSS. "
    "When the charge reaches the cap the kernel first reclaims page cache, then OOM-kills "
    "the server; an OOM-killed cell is a result, with its samples up to the kill."
)

ACCOUNTING_NOTE = (
    "'server accounts for' is the part of RSS the server can name (code, files, buffer "
    "pool pages, stacks, and the heap it says it holds); 'unaccounted' is RSS minus that: "
    "allocator overhead and fragmentation (negative when the server counts memory it never "
    "touched). Both from the cell with the largest unaccounted RSS; heap ratio = resident "
    "heap / heap the server accounts for."
)


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def adaptive_lines(info: AdaptiveRecord | None) -> list[str]:
    """How adaptive repetition ended: a headline, then each cell that did not converge."""
    if info is None:
        return []
    parts = []
    target = _number(info.target_ci_pct)
    if target is not None:
        parts.append(f"target {target:g}% interval width")
    rounds = _number(info.rounds)
    if rounds is not None:
        parts.append(f"{rounds:g} round{'s' if rounds != 1 else ''}")
    stopped = info.stopped
    budget = _number(info.budget_s)
    if stopped == "converged":
        parts.append("converged")
    elif stopped == "budget" and budget is not None:
        parts.append(f"stopped: another round would overrun the {budget / 60:g} min budget")
    elif stopped:
        parts.append(f"stopped: {stopped}")
    lines = ["adaptive repetition: " + (", ".join(parts) or "on")]
    missed = info.not_converged or []
    if isinstance(missed, list) and missed:
        lines.append(f"{len(missed)} cell(s) did not reach the target:")
        for entry in missed:
            if not isinstance(entry, dict):
                continue
            where = " / ".join(
                str(entry[k]) for k in ("setup", "engine", "step") if entry.get(k) not in (None, "")
            )
            if entry.get("threads"):
                where += f" / {entry['threads']} threads"
            width = _number(entry.get("width_pct"))
            shown = f"{width:.1f}%" if width is not None and math.isfinite(width) else None
            lines.append(f"  {where}: interval width {shown or 'no interval yet'}")
    return lines


EXPLORATORY = {
    Exploratory.SOAK: (
        "Soak run: its segments are consecutive windows of one server lifetime per "
        "setup, not independent server starts, so the relative values below have no "
        "interval and none is a finding; the soak section's slopes are its result."
    ),
    Exploratory.ONE_REPEAT: (
        "Exploratory run: every cell was measured once, so no difference below has an "
        "interval and none is a finding. For a verdict, run with repeats >= 3 or --target-ci."
    ),
}


def exploratory_note(reason: Exploratory | None) -> str | None:
    """The line every report puts first when the run cannot support any finding."""
    return None if reason is None else EXPLORATORY[reason]


def noise_notes(noise: RunNoise | None) -> list[str]:
    """One or two sentences on the noise the run met, for every report's notes."""
    if noise is None:
        return []
    notes = []
    if noise.slice_cv_pct is not None:
        text = (
            f"noise in this run: one slice varies by ±{noise.slice_cv_pct:.1f}% within a "
            f"server start"
        )
        if noise.start_cv_pct is not None:
            text += f", server starts by ±{noise.start_cv_pct:.1f}%"
        text += f" (medians over {noise.cells} cells)"
        if noise.best_slices_per_start is not None:
            text += (
                f"; at these levels about {noise.best_slices_per_start} slices per start "
                "narrow intervals fastest (Kalibera and Jones)"
            )
        notes.append(text)
    if noise.other_cpu_median is not None and noise.other_cpu_max is not None:
        text = (
            f"other processes used a median {noise.other_cpu_median:.0%} of the CPU time "
            f"while slices ran (at most {noise.other_cpu_max:.0%})"
        )
        if noise.steal_max:
            text += f", the hypervisor stole up to {noise.steal_max:.0%}"
        if noise.other_cpu_median > BUSY_SHARE:
            text += ": the measurements include that interference"
        notes.append(text)
    return notes


def _adjusted_words(item: AdjustedRatio) -> str:
    raw = item.raw
    raw_text = f"{fmt.ratio(raw.ratio)}x {fmt.interval(raw.low, raw.high)} raw"
    if item.adjusted is None:
        return (
            f"{item.setup} not adjusted ({raw_text}: its slices saw {item.shift:+.0%} of the "
            "machine in other processes' CPU against the base's, so its allocator may be "
            "the cause)"
        )
    done = item.adjusted
    return f"{item.setup} {fmt.ratio(done.ratio)}x {fmt.interval(done.low, done.high)} ({raw_text})"


def adjustment_notes(adjusted: Iterable[CpuAdjustment]) -> list[str]:
    """The relative QPS adjusted for the other processes' CPU, beside the raw, per cell:
    numbers only, never a finding of their own (the verdict is the raw one's)."""
    notes = []
    for cell in adjusted:
        ratios = "; ".join(_adjusted_words(item) for item in cell.ratios)
        notes.append(
            f"adjusted for other processes' CPU ({cell.engine}, {cell.step} at {cell.threads} "
            f"threads): their share in paired slices explains {cell.explained:.0%} of the "
            f"ratios' spread within blocks ({cell.pairs} pairs); {ratios}"
        )
    return notes


def stability_notes(
    unstable: tuple[Cell, ...] | list[Cell], not_steady: tuple[Cell, ...] | list[Cell]
) -> list[str]:
    """Cells whose measured seconds did not hold one level, and warmups that ran out.

    Their samples are kept and their means used; the reader is told which they are,
    since a mean over a ramp or a step describes neither level.
    """
    notes = []
    if unstable:
        where = ", ".join(
            f"{c.setup}/{c.engine}/{c.step}@{c.threads} r{c.repeat} "
            f"({c.stability.get('reason', 'unstable')})"
            for c in unstable[:8]
        )
        more = f" and {len(unstable) - 8} more" if len(unstable) > 8 else ""
        notes.append(
            f"{len(unstable)} cell(s) unstable, marked {UNSTABLE_MARK}: their throughput "
            f"trended or shifted level while measured: {where}{more}"
        )
    if not_steady:
        notes.append(
            f"{len(not_steady)} cell(s) reached durations.max_warmup still trending: raise "
            "it, or expect their first measured seconds to be part of the ramp"
        )
    return notes


def client_cpu_warning(cell: CellLike) -> str:
    """The one-line warning for a cell whose client used more CPU than the server
    (`analysis.client.client_bound`)."""
    metrics = cell.metrics or {}
    share = metrics.get("client_cpu_share", math.nan)
    detail = ""
    if "client_cpu_s" in metrics and "server_cpu_s" in metrics:
        detail = f" ({metrics['client_cpu_s']:.1f} s vs {metrics['server_cpu_s']:.1f} s)"
    return (
        f"{_where(cell)}the client (sysbench) used more CPU than the server{detail}, "
        f"{share:.0%} of the total: the load generator may be the bottleneck; "
        "use fewer threads, pin the server to other CPUs (setup `cpus`), or a bigger host"
    )


def client_cpu_warnings(bound: Iterable[CellLike]) -> list[str]:
    """The warning of each client-bound cell, in the order given."""
    return [client_cpu_warning(c) for c in bound]


def _where(cell: object) -> str:
    parts = [
        str(getattr(cell, name))
        for name in ("setup", "engine", "step")
        if getattr(cell, name, None) not in (None, "")
    ]
    threads = getattr(cell, "threads", None)
    if threads:
        parts.append(f"{threads} threads")
    return f"{' / '.join(parts)}: " if parts else ""


def vsz_note(reserved_bytes: int | None) -> str | None:
    """A warning when peak VSZ is dominated by reserved address space, else None."""
    if reserved_bytes is None:
        return None
    return (
        f"Peak VSZ (up to {reserved_bytes / (1 << 40):,.1f} TiB) is more than "
        f"{VSZ_RESERVED_FACTOR}x peak RSS: it is dominated by address space the server "
        "reserves (MariaDB 10.11 reserves innodb_buffer_pool_size_max), not by memory in "
        "use, so comparing VSZ across allocators is not meaningful on this build."
    )


def sla_text(status: SlaStatus) -> str:
    """An insert-benchmark cell's background rate against its target."""
    verdict = "met" if status.met else "MISSED"
    return f"SLA {verdict}: {status.achieved:,.0f} of {status.target:,.0f} rows/s"


# ---------------------------------------------------------------- compare


def difference_text(d: Difference) -> str:
    """One fact two compared runs did not share."""
    return f"{d.field} A {fact_text(d.a)} vs B {fact_text(d.b)}"


def fact_text(fact: Fact) -> str:
    """A fact a run held fixed, as a comparison shows it."""
    return fmt.fact(fact.value, fact.reading, fact.missing)


def difference_fields(d: Difference) -> dict[str, str]:
    """A difference as compare's JSON holds it: the field, both sides shown, severity."""
    return {"field": d.field, "a": fact_text(d.a), "b": fact_text(d.b), "severity": d.severity}


def one_sided_text(u: OneSided) -> str:
    if u.step is None:
        return f"{u.setup}/{u.engine} (only in {u.side})"
    return f"{u.engine}/{u.step} @{u.threads} threads (only in {u.side})"


def candidate_reasons(candidate: Candidate) -> list[str]:
    """Why a setup does not qualify, briefly (criterion: status); empty when it does."""
    reasons = [f"{name}: {status}" for name, status in candidate.disqualified_by]
    if candidate.better_on_none:
        reasons.append("better on no priority")
    if candidate.over_budget:
        reasons.append("peak RSS over the memory budget")
    reasons += [f"{name}: loss beyond its budget" for name in candidate.rejected_by]
    return reasons


def change_reason(change: Change) -> str:
    """Why a change counts without a ratio: one run failed where the other measured."""
    if change.failed_in is None:
        return ""
    other = "A" if change.failed_in == "B" else "B"
    if change.oom_cells:
        cells = f"{change.oom_cells} cell{'s' if change.oom_cells != 1 else ''}"
        return f"OOM-killed in {change.failed_in} ({cells}), not in {other}"
    return f"{change.problem} in {change.failed_in}, measured in {other}"


def change_text(change: Change) -> str:
    """One finding of `compare --fail-on`: where, then the ratio beyond the band or why
    it counts without one."""
    where = [change.engine]
    if change.threads is not None:
        where.append(f"{change.threads} thread{'s' if change.threads != 1 else ''}")
    where += [change.step, change.setup]
    text = f"{change.kind}: {', '.join(where)}: "
    if change.failed_in is not None or change.cell is None:
        return text + change_reason(change)
    cell = change.cell
    beyond = f"beyond ±{percent(cell.min_effect)}" if cell.min_effect > 0 else "excludes 1.0"
    return text + f"{fmt.ratio(cell.ratio)} {cell_interval(cell)}, {beyond}"


KIND_WORDS = {
    SLOWER: "slowdown",
    FASTER: "speedup",
    CHANGED: "throughput change",
    RSS_UP: "RSS increase",
    RSS_DOWN: "RSS decrease",
}


def findings_summary(cmp: Comparison, kinds: tuple[str, ...], count: int) -> str:
    """The last line of a gate: how many findings, or what was not found."""
    flag = f"--fail-on {','.join(kinds)}"
    if count:
        return f"compare: {count} finding{'s' if count != 1 else ''} ({flag})"
    named = [KIND_WORDS[k] for k in kinds]
    words = named[0] if len(named) == 1 else ", ".join(named[:-1]) + " or " + named[-1]
    beyond = f" beyond ±{percent(cmp.min_effect)}" if cmp.min_effect > 0 else ""
    return f"compare: no finding ({flag}): no significant {words}{beyond}"


# ---------------------------------------------------------------- run and recommend


def thin_clauses(thin: ThinEvidence) -> list[str]:
    """Where a recommendation's evidence is thin, each a short clause."""
    out = []
    if thin.only_threads is not None:
        out.append(f"one thread count only ({thin.only_threads})")
    if thin.no_writes:
        out.append("no write steps")
    if thin.unstable:
        out.append(f"{thin.unstable} unstable cell{'s' if thin.unstable != 1 else ''}")
    if thin.client_bound:
        out.append(f"{thin.client_bound} client-bound cell{'s' if thin.client_bound != 1 else ''}")
    if thin.soak:
        out.append("a soak: its repeats are segments of one server start, not starts")
    if thin.few_repeats is not None:
        out.append(f"{thin.few_repeats} repeat{'s' if thin.few_repeats != 1 else ''}")
    return out


def wide_cell_text(wide: WideCell) -> str:
    """A cell adaptive repetition left wider than its target."""
    width = "no interval yet" if wide.width_pct == float("inf") else f"{wide.width_pct:.1f}%"
    return f"{wide.setup} {wide.engine} {wide.step} @{wide.threads}: {width}"


def warmup_text(detector: WarmupDetector) -> str:
    """How a warmup ended: steady, or still trending when its time ran out."""
    if detector.steady:
        return f"steady after {detector.elapsed_s:.0f} s"
    if detector.last_trend is not None:
        slope = 100 * detector.last_trend.relative_slope
        return (
            f"no steady state within {detector.elapsed_s:.0f} s "
            f"(last {detector.window} s still trend {slope:+.1f}%/s)"
        )
    return f"no steady state within {detector.elapsed_s:.0f} s"


# ---------------------------------------------------------------- verdict rows


def finding_text(f: Finding) -> str:
    """A finding of a verdict row: where, the ratio and its interval."""
    return f"{f.step} @{f.threads} {f.cell.ratio:.2f}x {fmt.interval(f.cell.low, f.cell.high)}"


def unmeasured_text(f: Finding) -> str:
    return f"{f.step} @{f.threads}: {problem_text(f.cell)}"


def group_detail_text(d: GroupDetail) -> str:
    """What hovering a group's geomean shows: its cells, and each thread count's geomean."""
    parts = ", ".join(f"{threads} thr: {value:.2f}" for threads, value in d.by_threads)
    return f"geomean of {d.cells} cells; " + parts


def verdict_note(row: VerdictRow) -> str:
    """What a verdict row's findings mean: none supported, the band they clear, or why
    there can be none; and how many were too small to tell."""
    band = f" of at least ±{percent(row.min_effect)}" if row.min_effect > 0 else ""
    notes = []
    if row.any_interval:
        if not (row.faster or row.slower):
            notes.append(f"no difference{band} the statistics support")
        elif row.min_effect > 0:
            notes.append(
                f"listed: 95% interval excludes 1.0, change at least ±{percent(row.min_effect)}"
            )
    else:
        notes.append("1 repeat: no interval, so no difference can be claimed")
    if row.inconclusive:
        notes.append(
            f"{row.inconclusive} inconclusive: real but possibly smaller than "
            f"±{percent(row.min_effect)}"
        )
    note = "; ".join(notes)
    if row.rss_supported and note.startswith("no difference"):
        # A supported RSS difference is a finding too: only QPS showed none.
        note = "no QPS difference" + note.removeprefix("no difference")
    return note


def verdict_rss_text(row: VerdictRow) -> str:
    """Both peaks, and the per-repeat ratio with its interval and verdict when it has one."""
    text = ""
    if row.rss_peaks is not None:
        text = f"{fmt.mib(row.rss_peaks[0])} vs {fmt.mib(row.rss_peaks[1])}"
    if row.rss is not None:
        rss = row.rss
        text += f"; per-repeat peaks {cell_text(rss)} {cell_interval(rss)}, {rss.verdict}"
    return text


def verdict_rss_interval(row: VerdictRow) -> str:
    return "" if row.rss is None else fmt.interval(row.rss.low, row.rss.high)


def verdict_rss_finding(row: VerdictRow) -> str:
    """The peak-RSS difference the statistics support, or "" when none is."""
    if not row.rss_supported or row.rss is None:
        return ""
    return f"peak RSS {row.rss.ratio:.2f}x {fmt.interval(row.rss.low, row.rss.high)}"
