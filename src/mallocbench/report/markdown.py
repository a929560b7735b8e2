"""The Markdown report: the seeds' relative-QPS and peak-memory tables, plus run facts."""

from __future__ import annotations

from mallocbench.analysis.client import client_cpu_warnings
from mallocbench.analysis.sla import sla_status
from mallocbench.analysis.summary import memory_rows, relative_tables
from mallocbench.report import formatting as fmt
from mallocbench.results import STATUS_OK, RunResult
from mallocbench.workloads.catalogue import GROUPS


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


def render(result: RunResult) -> str:
    meta = result.metadata
    out = [f"# mallocbench: {result.experiment}", ""]
    out.append(f"Run `{result.run_id}`. " + _run_facts(meta))
    out.append("")
    out += _table(
        ["setup", "allocator", "version", "knobs", "config"],
        [
            [
                s.name + (" (base)" if s.name == result.base_setup else ""),
                s.allocator,
                s.allocator_version or "-",
                fmt.knobs(s.knobs),
                fmt.knobs(s.config),
            ]
            for s in result.setups
        ],
    )
    out.append("")
    for table in relative_tables(result):
        out.append(f"## Relative QPS: {table.engine}, {table.threads} client thread(s)")
        out.append("")
        out.append(
            f"QPS(setup) / QPS({table.base}); above 1.0 the setup is faster. "
            f"`{table.base} QPS` is the base's absolute queries per second. "
            + (
                "With repeats, (low-high) is the 95% interval and * marks a difference whose "
                "interval excludes 1.0."
                if any(r.intervals for r in table.rows)
                else "One repeat: no confidence intervals; add repeats to tell noise from effect."
            )
        )
        out.append("")
        header = ["step", f"{table.base} QPS", *table.setups]
        rows: list[list[str]] = []
        geomeans = table.group_geomeans()
        for group in GROUPS:
            group_rows = [r for r in table.rows if r.group == group]
            if not group_rows:
                continue
            rows.append([f"**{GROUPS[group]}**", "", *["" for _ in table.setups]])
            for row in group_rows:
                cells = []
                for setup in table.setups:
                    problem = row.problems.get(setup)
                    if problem:
                        cells.append(problem.upper())
                    elif setup in row.intervals:
                        iv = row.intervals[setup]
                        mark = " **\\***" if iv.significant else ""
                        cells.append(
                            f"{fmt.ratio(row.values[setup])} ({iv.low:.2f}-{iv.high:.2f}){mark}"
                        )
                    else:
                        cells.append(fmt.ratio(row.values[setup]))
                base_text = row.problems.get(table.base, "").upper() or fmt.qps(row.base_qps)
                rows.append([row.step, base_text, *cells])
            rows.append(
                [
                    f"*geomean {group}*",
                    "",
                    *[f"*{fmt.ratio(geomeans[group][s])}*" for s in table.setups],
                ]
            )
        out += _table(header, rows)
        out.append("")
    memory = memory_rows(result)
    if memory:
        out.append("## Peak memory of the server")
        out.append("")
        out.append(
            "Peak VSZ and RSS in GiB over each setup's sessions; RSS/cache divides peak RSS "
            "by the configured cache (InnoDB buffer pool or RocksDB block cache)."
        )
        out.append("")
        out += _table(
            ["engine", "setup", "peak VSZ", "peak RSS", "RSS/cache"],
            [
                [
                    r.engine,
                    r.setup,
                    fmt.gb(r.peak_vsz_bytes),
                    fmt.gb(r.peak_rss_bytes),
                    fmt.ratio(r.rss_per_cache),
                ]
                for r in memory
            ],
        )
        out.append("")
    sla_lines = []
    for cell in result.cells:
        status = sla_status(cell)
        if status is not None:
            sla_lines.append(
                f"- {cell.setup} / {cell.engine} / {cell.step} r{cell.repeat}: "
                f"{'met' if status.met else '**missed**'}: {status.describe()}"
            )
    if sla_lines:
        out += ["## Insert benchmark: background rate (SLA)", "", *sla_lines, ""]
    warnings = client_cpu_warnings(result.cells)
    if warnings:
        out += ["## Load generator warnings", "", *[f"- {w}" for w in warnings], ""]
    problems = [c for c in result.cells if c.status != STATUS_OK]
    if problems:
        out.append("## Cells that did not measure")
        out.append("")
        for cell in problems:
            out.append(
                f"- {cell.setup} / {cell.engine} / {cell.step} / {cell.threads} threads: "
                f"**{cell.status}**: {cell.error or ''}"
            )
        out.append("")
    if result.experiment_text:
        out += ["## Experiment", "", "```toml", result.experiment_text.rstrip(), "```", ""]
    return "\n".join(out)


def _run_facts(meta: dict[str, object]) -> str:
    parts = []
    if meta.get("host"):
        parts.append(f"Host {meta['host']}: {meta.get('cpus')} CPUs ({meta.get('cpu_model')})")
    if meta.get("memory_bytes"):
        parts.append(f"{fmt.gb(meta['memory_bytes'])} GiB RAM")  # type: ignore[arg-type]
    if meta.get("kernel"):
        parts.append(f"kernel {meta['kernel']}")
    if meta.get("glibc"):
        parts.append(f"glibc {meta['glibc']}")
    if meta.get("thp"):
        parts.append(f"THP {meta['thp']}")
    versions = meta.get("server_versions")
    if versions:
        parts.append("server " + ", ".join(versions))  # type: ignore[arg-type]
    dataset = meta.get("dataset")
    if isinstance(dataset, dict):
        parts.append(
            f"dataset {dataset['tables']} x {dataset['rows']:,} rows, cache "
            f"{fmt.mib(dataset['cache_bytes'])}"
        )
    durations = meta.get("durations")
    if isinstance(durations, dict):
        parts.append(f"{durations['warmup_s']:g}s warmup + {durations['step_s']:g}s per cell")
    return "; ".join(parts) + "."
