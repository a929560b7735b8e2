"""The Markdown report: the seeds' relative-QPS and peak-memory tables, plus run facts."""

from __future__ import annotations

from mallocbench.analysis.run_analysis import RunAnalysis
from mallocbench.analysis.summary import RatioCell, RatioTable
from mallocbench.model.metadata import RunMetadata
from mallocbench.model.results import RunResult
from mallocbench.report.facts import brief_facts, setup_table
from mallocbench.report.ratchet import markdown_lines as ratchet_markdown
from mallocbench.report.recommend import engine_lines
from mallocbench.report.replay import markdown_lines as replay_markdown
from mallocbench.report.soak import markdown_lines as soak_markdown
from mallocbench.report.tables import (
    PER_OP_NOTE,
    RelativeMarkup,
    memory_columns,
    memory_notes,
    per_op_tables,
    relative_rows,
    run_notes,
    sla_lines,
)
from mallocbench.report.words import (
    adaptive_lines,
    cell_interval,
    cell_text,
    client_cpu_warnings,
    color_rule,
    exploratory_note,
    problem_text,
    significance_rule,
    unit_note,
    vsz_note,
)


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


def ratio_text(cell: RatioCell) -> str:
    """ratio [low, high] with a bold * when significant, "same" within min_effect."""
    if cell.problem:
        return problem_text(cell).upper()
    parts = [cell_text(cell)]
    if cell.has_interval:
        parts.append(cell_interval(cell))
    if cell.significant:
        parts.append("**\\***")
    if cell.same:
        parts.append("same")
    return " ".join(parts)


MARKDOWN_MARKUP = RelativeMarkup(
    heading=lambda title: f"**{title}**",
    ratio=ratio_text,
    geomean_label=lambda label: f"*{label}*",
    geomean_value=lambda value: f"*{value}*",
)


def render(analysis: RunAnalysis) -> str:
    result = analysis.result
    meta = result.metadata
    out = [f"# mallocbench: {result.experiment}", ""]
    facts = _run_facts(meta)
    out.append(f"Run `{result.run_id}`." + (f" {facts}" if facts else ""))
    out.append("")
    exploratory = exploratory_note(analysis.exploratory)
    if exploratory:
        out += [f"> **{exploratory}**", ""]
    out += _setups(result)
    out += _recommendation(analysis)
    out += _adaptive(analysis)
    for table in analysis.tables:
        out += _relative_section(table)
    out += _per_op(analysis)
    out += _memory(analysis)
    out += soak_markdown(analysis)
    out += replay_markdown(analysis.replay)
    out += ratchet_markdown(analysis)
    out += _findings(analysis)
    if result.experiment_text:
        out += ["## Experiment", "", "```toml", result.experiment_text.rstrip(), "```", ""]
    return "\n".join(out)


def _setups(result: RunResult) -> list[str]:
    columns = setup_table(result.setups)
    return [
        *_table(
            ["setup", *(c.label for c in columns)],
            [
                [
                    s.name + (" (base)" if s.name == result.base_setup else ""),
                    *(c.text(s) for c in columns),
                ]
                for s in result.setups
            ],
        ),
        "",
    ]


def _adaptive(analysis: RunAnalysis) -> list[str]:
    """The adaptive stop: its headline in bold, its explanation, then one item per cell."""
    adaptive = adaptive_lines(analysis.adaptive)
    if not adaptive:
        return []
    out = [f"**{adaptive[0]}**", ""]
    if len(adaptive) > 1:
        out += [adaptive[1], "", *[f"- {line.strip()}" for line in adaptive[2:]], ""]
    return out


def _relative_section(table: RatioTable) -> list[str]:
    out = [f"## Relative QPS: {table.engine}, {table.threads} client thread(s)", ""]
    out.append(
        f"QPS(setup) / QPS({table.reference}); above 1.0 the setup is faster. "
        f"`{table.reference} QPS` is the base's absolute queries per second. "
        f"Colors in the HTML report: {color_rule(table.min_effect)}. "
        + (
            "With repeats, [low, high] is the 95% interval; "
            + significance_rule(table.min_effect).replace("*", "\\*", 1)
            + "."
            if table.has_intervals
            else "One repeat: no confidence intervals; add repeats to tell noise from effect."
        )
        + (f" {unit_note([table])}" if table.units else "")
    )
    out.append("")
    header = ["step", f"{table.reference} QPS", *table.columns]
    rows = [cells for cells, _ in relative_rows(table, MARKDOWN_MARKUP)]
    return [*out, *_table(header, rows), ""]


def _per_op(analysis: RunAnalysis) -> list[str]:
    per_op = per_op_tables(analysis)
    if not per_op:
        return []
    out = ["## Latency and cost per operation", "", PER_OP_NOTE, ""]
    for title, header, rows in per_op:
        out += [f"### {title}", "", *_table(header, rows), ""]
    return out


def _memory(analysis: RunAnalysis) -> list[str]:
    memory = analysis.memory
    if not memory:
        return []
    out = ["## Peak memory of the server", ""]
    out.append(
        "Peak VSZ and RSS over each setup's sessions; RSS/cache divides peak RSS "
        "by the configured cache (InnoDB buffer pool or RocksDB block cache)."
        + "".join(f" {note}" for note in memory_notes(memory))
    )
    out.append("")
    columns = memory_columns(memory, analysis.reserved_vsz_bytes is not None)
    out += _table(
        [header for header, _ in columns],
        [[cell(r) for _, cell in columns] for r in memory],
    )
    out.append("")
    reserved = vsz_note(analysis.reserved_vsz_bytes)
    if reserved:
        out += [f"> **Note:** {reserved}", ""]
    return out


def _findings(analysis: RunAnalysis) -> list[str]:
    """The sections after the tables: SLA, load generator, run notes, failed cells."""
    out: list[str] = []
    sla = [f"- {line}" if met else f"- **{line}**" for line, met in sla_lines(analysis)]
    if sla:
        out += ["## Insert benchmark: background rate (SLA)", "", *sla, ""]
    warnings = client_cpu_warnings(analysis.client_bound)
    if warnings:
        out += ["## Load generator warnings", "", *[f"- {w}" for w in warnings], ""]
    notes = run_notes(analysis)
    if notes:
        out += ["## Notes from the run", "", *[f"- {n}" for n in notes], ""]
    problems = analysis.problems
    if problems:
        out.append("## Cells that did not measure")
        out.append("")
        for cell in problems:
            out.append(
                f"- {cell.setup} / {cell.engine} / {cell.step} / {cell.threads} threads: "
                f"**{cell.status}**: {cell.error or ''}"
            )
        out.append("")
    return out


def _recommendation(analysis: RunAnalysis) -> list[str]:
    """The verdict section: what to run per engine, each claim with its interval."""
    rec = analysis.recommendation
    if not rec.engines or rec.exploratory:
        return []
    out = ["## Recommendation", ""]
    for engine in rec.engines:
        headline, *details = engine_lines(engine, rec)
        out += [f"**{headline}**", "", *[line.removeprefix("  ") for line in details], ""]
    out += [
        "Priorities and budgets (`--memory-budget`, `--max-loss`) can be changed with "
        "`mallocbench recommend` or the experiment's `[decision]` table.",
        "",
    ]
    return out


def _run_facts(meta: RunMetadata) -> str:
    facts = brief_facts(meta)
    return "; ".join(f"{label}: {value}" for label, value in facts) + "." if facts else ""
