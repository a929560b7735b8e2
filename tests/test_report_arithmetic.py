"""Report arithmetic on recorded cells made by hand: every number below is worked out here."""

from __future__ import annotations

import csv
import io
import json
import math
from typing import Any

import pytest
from rich.console import Console

from mallocbench import units as fmt
from mallocbench.analysis import stats
from mallocbench.analysis.run_analysis import analyze
from mallocbench.analysis.summary import (
    geomean,
    memory_rows,
    relative_tables,
    summarize,
)
from mallocbench.model.metadata import AdaptiveRecord
from mallocbench.model.results import Cell, RunResult, Sample, SessionInfo, SetupInfo
from mallocbench.report import export, html, markdown, terminal
from mallocbench.report.words import (
    cell_class,
    cell_mark,
    cell_text,
    cell_title,
    finding_text,
    verdict_class,
    verdict_note,
)

GIB = 1 << 30


def cell(
    setup: str, step: str, qps: float | None, repeat: int = 0, status: str = "ok", **kw: object
) -> Cell:
    values: dict[str, Any] = {"engine": "innodb", "threads": 8, "cache_bytes": GIB, **kw}
    return Cell(setup=setup, step=step, repeat=repeat, qps=qps, status=status, **values)


def sample_run() -> RunResult:
    return RunResult(
        run_id="r1",
        experiment="t",
        base_setup="glibc",
        setups=[SetupInfo("glibc", "glibc"), SetupInfo("je", "jemalloc")],
        sessions=[
            SessionInfo(
                "glibc.innodb.r0",
                "glibc",
                "innodb",
                0,
                peak_rss_bytes=3 * GIB,
                peak_vsz_bytes=8 * GIB,
            ),
            SessionInfo(
                "je.innodb.r0",
                "je",
                "innodb",
                0,
                peak_rss_bytes=(5 * GIB) // 4,
                peak_vsz_bytes=20 * GIB,
            ),
        ],
        cells=[
            cell("glibc", "point-query range=100", 1000, 0),
            cell("glibc", "point-query range=100", 3000, 1),
            cell("je", "point-query range=100", 2500, 0),
            cell("je", "point-query range=100", 2500, 1),
            cell("glibc", "random-points range=10", 100),
            cell("je", "random-points range=10", 50),
            cell("glibc", "update-nonindex range=100", 400),
            cell("je", "update-nonindex range=100", None, status="crashed", error="died"),
        ],
    )


def terminal_text(run: RunResult, width: int = 250) -> str:
    """What print_run shows, with wrapped lines joined so phrases can be searched."""
    console = Console(record=True, width=width)
    terminal.print_run(analyze(run), console)
    return " ".join(console.export_text().split())


def tight_run(je_level: float, min_effect: float | None = None) -> RunResult:
    """Three repeats per side with 0.1% noise: any change of 1% or more is significant."""
    run = RunResult(
        "tight", "t", "glibc", setups=[SetupInfo("glibc", "glibc"), SetupInfo("je", "x")]
    )
    for i, noise in enumerate((1.0, 1.001, 0.999)):
        run.cells.append(cell("glibc", "point-query range=100", 1000 * noise, i))
        run.cells.append(cell("je", "point-query range=100", je_level * noise, i))
    if min_effect is not None:
        run.metadata.min_effect = min_effect
    return run


def test_relative_qps_uses_mean_over_repeats_and_groups() -> None:
    (table,) = relative_tables(sample_run())
    rows = {r.step: r for r in table.rows}
    assert rows["point-query range=100"].reference_qps == pytest.approx(2000)
    assert rows["point-query range=100"].cells["je"].ratio == pytest.approx(1.25)
    assert rows["random-points range=10"].cells["je"].ratio == pytest.approx(0.5)
    assert rows["update-nonindex range=100"].cells["je"].ratio is None
    assert rows["update-nonindex range=100"].cells["je"].problem == "crashed"
    geo = {group: means for group, _, _, means in table.groups()}
    assert geo["point"]["je"] == pytest.approx(math.sqrt(1.25 * 0.5))
    assert geo["write"]["je"] is None
    assert [r.step for r in table.rows][-1] == "update-nonindex range=100"


def test_peak_memory_and_rss_per_cache() -> None:
    rows = {r.setup: r for r in memory_rows(sample_run())}
    assert rows["glibc"].rss_per_cache == pytest.approx(3.0)
    assert rows["je"].rss_per_cache == pytest.approx(1.25)
    assert rows["je"].peak_vsz_bytes == 20 * GIB


def test_geomean_ignores_missing() -> None:
    assert geomean([2.0, 8.0, None]) == pytest.approx(4.0)
    assert geomean([None]) is None


def test_summaries_keep_failed_repeats_out_of_the_mean() -> None:
    cells = [cell("je", "scan range=100", 10.0, 0), cell("je", "scan range=100", None, 1, "failed")]
    summary = summarize(cells)[("je", "innodb", "scan range=100", 8)]
    assert summary.qps == 10.0 and summary.problem == "failed"


def test_markdown_and_csv_render_the_tables() -> None:
    text = markdown.render(analyze(sample_run()))
    # 2 blocks, paired: block ratios 2.5 and 0.833, log spread 1.0986 / 2 = 0.549 per
    # mean, t(1 df) = 12.706: 1.25 x exp(-+6.98), very wide but positive and bounded.
    assert "| point-query range=100 | 2,000 | 1.25 [0.0012, 1343.11] |" in text
    # Without the server's account its three columns would only hold "-": left out.
    assert "CRASHED" in text and "| innodb | glibc | 8.00 | 3.00 | 3.00 |\n" in text
    csv_text = export.relative_csv(analyze(sample_run()))
    assert "innodb,8,point-query range=100,point,je,2500.0,2000.0,1.25," in csv_text
    assert export.cells_csv(analyze(sample_run())).count("\n") == 9


def test_intervals_appear_with_repeats_and_mark_real_differences() -> None:
    cells = [cell("glibc", "scan range=100", q, i) for i, q in enumerate([100, 101, 99])]
    cells += [cell("je", "scan range=100", q, i) for i, q in enumerate([150, 151, 149])]
    cells += [cell("glibc", "point-query range=100", q, i) for i, q in enumerate([100, 90, 110])]
    cells += [cell("je", "point-query range=100", q, i) for i, q in enumerate([95, 112, 101])]
    run = RunResult("r", "t", "glibc", setups=[SetupInfo("glibc", "glibc"), SetupInfo("je", "x")])
    run.cells = cells
    (table,) = relative_tables(run)
    rows = {r.step: r.cells["je"] for r in table.rows}
    assert rows["scan range=100"].significant and rows["scan range=100"].verdict == stats.FASTER
    noisy = rows["point-query range=100"]
    assert noisy.low < 1.0 < noisy.high and not noisy.significant
    assert noisy.verdict == stats.NOT_SIGNIFICANT
    assert "* a finding: the 95% interval excludes 1.0" in markdown.render(analyze(run))


# ---------------------------------------------------------------- one source for every report


def test_html_and_text_reports_share_the_relative_tables() -> None:
    run = sample_run()
    ctx = html.build_context(analyze(run))
    (mine,) = relative_tables(run)
    (theirs,) = ctx.tables
    for a, b in zip(mine.rows, theirs.rows, strict=True):
        assert a.step == b.step and a.cells["je"].ratio == b.cells["je"].ratio
        assert a.cells["je"].verdict == b.cells["je"].verdict


# ---------------------------------------------------------------- min_effect


def test_without_min_effect_a_one_percent_change_is_significant() -> None:
    (table,) = relative_tables(tight_run(1010))
    (row,) = table.rows
    je = row.cells["je"]
    assert je.ratio == pytest.approx(1.01)
    assert je.verdict == stats.FASTER and je.significant and cell_mark(je) == "*"
    assert cell_class(je) == "faster"  # a finding is colored however small: min_effect sets the bar


def test_min_effect_reports_a_small_significant_change_as_same() -> None:
    run = tight_run(1010, min_effect=0.02)
    (table,) = relative_tables(run)
    je = table.rows[0].cells["je"]
    assert stats.significant(je.low, je.high)  # the interval alone would call it faster
    assert je.verdict == stats.SAME and not je.significant and cell_mark(je) == ""
    # Markdown: no star, the word "same", and the rule in the table's text.
    text = markdown.render(analyze(run))
    row = next(line for line in text.splitlines() if line.startswith("| point-query"))
    assert row.endswith(" same |") and "\\*" not in row
    assert "whole interval within ±2%" in text
    # Terminal.
    out = terminal_text(run)
    assert "1.01 same" in out and "1.01*" not in out and "whole interval within ±2%" in out
    # HTML: not in the verdict's faster list, grey, and the legend says why.
    ctx = html.build_context(analyze(run))
    (verdict,) = ctx.verdict
    assert not verdict.faster and "no difference of at least ±2%" in verdict_note(verdict)
    page = html.render_html(analyze(run))
    assert 'data-verdict="same"' in page and "<sup>*</sup>" not in page
    assert "whole interval within ±2%" in page
    # Exports carry the verdict and the interval.
    (record,) = list(csv.DictReader(io.StringIO(export.relative_csv(analyze(run)))))
    assert record["verdict"] == "same" and record["significant"] == "False"
    assert float(record["low"]) > 1.0 and float(record["high"]) < 1.02
    (entry,) = json.loads(export.relative_json(analyze(run)))["cells"]
    assert entry["verdict"] == "same" and entry["min_effect"] == 0.02


def test_a_change_beyond_min_effect_is_still_reported() -> None:
    run = tight_run(970, min_effect=0.02)
    je = relative_tables(run)[0].rows[0].cells["je"]
    assert je.verdict == stats.SLOWER and cell_mark(je) == "*"
    (verdict,) = html.build_context(analyze(run)).verdict
    assert verdict.slower and finding_text(verdict.slower[0]).startswith(
        "point-query range=100 @8 0.97x"
    )


def test_min_effect_override_beats_the_runs_own() -> None:
    run = tight_run(1010, min_effect=0.02)
    assert relative_tables(run, min_effect=0.0)[0].rows[0].cells["je"].verdict == stats.FASTER
    assert html.build_context(analyze(run, min_effect=0.0)).verdict[0].faster


def test_colors_follow_the_verdict_not_the_value() -> None:
    assert verdict_class(stats.FASTER) == "faster" and verdict_class(stats.SLOWER) == "slower"
    assert verdict_class(stats.SAME) == "same"
    for unsupported in (stats.NOT_SIGNIFICANT, stats.INCONCLUSIVE, stats.NO_INTERVAL):
        assert verdict_class(unsupported) == "none"
    run = tight_run(970, min_effect=0.02)
    assert cell_class(relative_tables(run)[0].rows[0].cells["je"]) == "slower"
    assert cell_class(relative_tables(tight_run(970))[0].rows[0].cells["je"]) == "slower"
    # A ratio far from 1.0 without an interval (one repeat) is never colored.
    lone = RunResult("r", "t", "glibc", setups=[SetupInfo("glibc", "glibc"), SetupInfo("je", "x")])
    lone.cells = [cell("glibc", "point-query range=100", 1000, 0)]
    lone.cells += [cell("je", "point-query range=100", 1910, 0)]
    one = relative_tables(lone)[0].rows[0].cells["je"]
    assert one.ratio == pytest.approx(1.91) and one.verdict == stats.NO_INTERVAL
    assert cell_class(one) == "none" and cell_mark(one) == ""
    page = html.render_html(analyze(lone))
    assert '<td class="r none' in page and '<td class="r faster' not in page
    assert "Exploratory run" in page and "Exploratory run" in markdown.render(analyze(lone))
    assert "Exploratory run" in terminal_text(lone)
    legend = html.render_html(analyze(run))
    assert "slower*" in legend and "not significant / inconclusive / no interval" in legend


def test_bad_min_effect_in_metadata_is_one_clear_error() -> None:
    from mallocbench.errors import MallocbenchError
    from mallocbench.model.metadata import RunMetadata

    run = tight_run(1010)
    # As a stored run holds it: the field stays unset and the raw text is kept beside it.
    run.metadata = RunMetadata.from_dict({**run.metadata.to_dict(), "min_effect": "lots"})
    with pytest.raises(MallocbenchError, match="min_effect"):
        relative_tables(run)


# ---------------------------------------------------------------- the server's account of RSS

MIB = 1 << 20


def accounted_run() -> RunResult:
    run = sample_run()
    accounts = {
        # setup, step -> (rss, accounted, heap rss, heap accounted)
        ("glibc", "point-query range=100"): (3000, 1800, 1500, 300),
        ("glibc", "random-points range=10"): (2900, 2000, 1200, 500),
        ("je", "point-query range=100"): (1280, 1200, 400, 320),
    }
    for c in run.cells:
        key = (c.setup, c.step)
        if key in accounts and c.repeat == 0:
            rss, accounted, heap_rss, heap_accounted = (v * MIB for v in accounts[key])
            c.metrics.update(
                rss_at_accounting_bytes=float(rss),
                rss_accounted_bytes=float(accounted),
                rss_unaccounted_bytes=float(rss - accounted),
                heap_rss_bytes=float(heap_rss),
                heap_accounted_bytes=float(heap_accounted),
            )
    return run


def test_memory_rows_take_the_account_with_the_most_unaccounted_rss() -> None:
    rows = {r.setup: r for r in memory_rows(accounted_run())}
    glibc, je = rows["glibc"], rows["je"]
    # 3000 - 1800 = 1200 MiB beats 2900 - 2000 = 900 MiB.
    assert glibc.unaccounted_bytes == 1200 * MIB and glibc.accounted_bytes == 1800 * MIB
    assert glibc.heap_ratio == pytest.approx(5.0)
    assert glibc.accounted_in == "point-query range=100 @8 r0"
    assert je.unaccounted_bytes == 80 * MIB and je.heap_ratio == pytest.approx(1.25)


def test_accounted_and_unaccounted_columns_in_every_report() -> None:
    run = accounted_run()
    text = markdown.render(analyze(run))
    assert "| server accounts for (GiB) | unaccounted: RSS − accounted (GiB) | heap ratio |" in text
    assert "| innodb | glibc | 8.00 | 3.00 | 3.00 | 1.76 | 1.17 | 5.00 |" in text
    assert "| innodb | je | 20.00 | 1.25 | 1.25 | 1.17 | 0.08 | 1.25 |" in text
    out = terminal_text(run)
    assert "server accounts for" in out and "5.00" in out and "1.17" in out
    views = {v.setup: v for v in html.build_context(analyze(run)).memory}
    assert (views["glibc"].accounted, views["glibc"].unaccounted) == ("1.76", "1.17")
    assert views["glibc"].heap_ratio == "5.00"
    page = html.render_html(analyze(run))
    assert "unaccounted: RSS − accounted (GiB)</th>" in page
    header = export.cells_csv(analyze(run)).splitlines()[0].split(",")
    assert {"rss_accounted_bytes", "rss_unaccounted_bytes", "pfs_memory_bytes"} <= set(header)


def test_a_negative_unaccounted_remainder_keeps_its_sign() -> None:
    run = accounted_run()
    for c in run.cells:
        if c.setup == "je" and "rss_unaccounted_bytes" in c.metrics:
            c.metrics["rss_unaccounted_bytes"] = -0.5 * GIB
    assert "| innodb | je | 20.00 | 1.25 | 1.25 | 1.17 | -0.50 |" in markdown.render(analyze(run))


def test_old_results_without_the_account_still_render() -> None:
    run = sample_run()
    data = json.loads(json.dumps(run.to_dict()))
    old = RunResult.from_dict(data)
    assert all(r.accounted_bytes is None and r.heap_ratio is None for r in memory_rows(old))
    assert "| innodb | je | 20.00 | 1.25 | 1.25 |\n" in markdown.render(analyze(old))
    assert "server accounts for" not in terminal_text(old)
    # Every format leaves out the columns of an account the server never gave.
    assert "server accounts for" not in html.render_html(analyze(old))
    record = next(csv.DictReader(io.StringIO(export.cells_csv(analyze(old)))))
    assert record["rss_unaccounted_bytes"] == ""


def test_server_lines_join_rss_over_time() -> None:
    run = sample_run()
    t0 = 1000.0
    for c in run.cells:
        c.session = f"{c.setup}.innodb.r0"
        c.started_at = t0
        c.samples = [
            Sample(t0 + i, rss_bytes=GIB, extra={"server_memory_used_bytes": GIB / 2})
            for i in range(3)
        ]
    charts = {c.id: c for c in html.build_context(analyze(run)).charts}
    rss = charts["chart-rss-innodb"]
    names = [t["name"] for t in rss.data]
    assert not any(t.get("showlegend", True) for t in rss.data if "Memory_used" in t["name"])
    assert "glibc.innodb.r0 Memory_used" in names and "je.innodb.r0 Memory_used" in names
    own = next(t for t in rss.data if t["name"] == "glibc.innodb.r0 Memory_used")
    assert own["line"]["dash"] == "dash" and own["y"][0] == pytest.approx(0.5)
    assert (
        own["line"]["color"]
        == next(t for t in rss.data if t["name"] == "glibc.innodb.r0")["line"]["color"]
    )
    assert "Memory_used" in rss.note
    assert all("Memory_used" not in t["name"] for t in charts["chart-vsz-innodb"].data)


# ---------------------------------------------------------------- VSZ note


def test_vsz_note_when_reserved_address_space_dominates() -> None:
    run = sample_run()
    assert "not meaningful" not in markdown.render(analyze(run))  # 20 GiB VSZ vs 1.25 GiB RSS: 16x
    run.sessions[0].peak_vsz_bytes = 8 << 40  # 8 TiB vs 3 GiB RSS
    note = "comparing VSZ across allocators is not meaningful on this build"
    assert note in markdown.render(analyze(run))
    assert note in html.render_html(analyze(run))
    assert note in terminal_text(run)


# ---------------------------------------------------------------- adaptive repetition


def test_adaptive_repetition_is_reported_everywhere() -> None:
    run = sample_run()
    run.metadata.adaptive = adaptive = AdaptiveRecord(
        target_ci_pct=5.0, budget_s=600.0, rounds=4, stopped="converged", not_converged=[]
    )
    line = "adaptive repetition: target 5% interval width, 4 rounds, converged"
    assert line in markdown.render(analyze(run))
    page = html.render_html(analyze(run))
    assert line in page and page.index('data-kind="adaptive"') < page.index('id="relative"')
    assert line in terminal_text(run)

    adaptive.stopped = "budget"
    adaptive.not_converged = [
        {"engine": "innodb", "step": "point-query range=100", "threads": 8, "setup": "je",
         "width_pct": 7.25},
    ]  # fmt: skip
    text = markdown.render(analyze(run))
    assert "stopped: another round would overrun the 10 min budget" in text
    assert "- je / innodb / point-query range=100 / 8 threads: interval width 7.2%" in text
    assert "je / innodb / point-query range=100 / 8 threads" in html.render_html(analyze(run))


def test_no_adaptive_section_without_adaptive_metadata() -> None:
    assert "adaptive repetition" not in markdown.render(analyze(sample_run()))
    assert 'data-kind="adaptive"' not in html.render_html(analyze(sample_run()))


# ---------------------------------------------------------------- insert benchmark


def ibench_run() -> RunResult:
    run = RunResult("ib", "t", "glibc", setups=[SetupInfo("glibc", "glibc"), SetupInfo("je", "x")])
    for setup, rows_s, queries_s, achieved in (("glibc", 10000, 200, 99), ("je", 15000, 300, 80)):
        run.cells.append(
            cell(setup, "l.i0", 10.0, group="insert-benchmark", threads=1,
                 metrics={"ibench_insert_rows": rows_s * 20.0, "ibench_seconds": 20.0})
        )  # fmt: skip
        run.cells.append(
            cell(setup, "qr100", 5.0, group="insert-benchmark", threads=1,
                 metrics={"ibench_target_rate": 100.0, "ibench_insert_rows": achieved * 10.0,
                          "ibench_delete_rows": achieved * 10.0, "ibench_seconds": 10.0,
                          "ibench_queries": queries_s * 10.0, "ibench_query_seconds": 10.0,
                          "client_cpu_share": 0.7, "client_cpu_s": 7.0, "server_cpu_s": 3.0})
        )  # fmt: skip
        run.cells.append(cell(setup, "l.x", 2.0, group="insert-benchmark", threads=1))
    return run


def test_insert_benchmark_steps_compare_their_own_rates() -> None:
    run = ibench_run()
    (table,) = relative_tables(run)
    rows = {r.step: r for r in table.rows}
    assert rows["l.i0"].unit == "rows/s" and rows["l.i0"].reference_qps == pytest.approx(10000)
    assert rows["l.i0"].cells["je"].ratio == pytest.approx(1.5)
    assert rows["qr100"].unit == "queries/s" and rows["qr100"].cells["je"].ratio == 1.5
    assert rows["l.x"].unit == "QPS"  # builds indexes: no rate of its own
    text = markdown.render(analyze(run))
    assert "| l.i0 | 10,000 rows/s | 1.50 |" in text and "queries/s" in text


def test_sla_and_client_warnings_in_terminal_and_html() -> None:
    run = ibench_run()
    out = terminal_text(run)
    assert "glibc / innodb / qr100 r0: SLA met: 99 of 100 rows/s" in out
    assert "je / innodb / qr100 r0: SLA MISSED: 80 of 100 rows/s" in out
    assert "the client (sysbench) used more CPU than the server" in out
    page = html.render_html(analyze(run))
    assert 'data-kind="sla"' in page and "SLA MISSED: 80 of 100 rows/s" in page
    assert 'data-kind="client-warnings"' in page and "load generator may be the bottleneck" in page
    assert "**je / innodb / qr100 r0: SLA MISSED" in markdown.render(analyze(run))


def test_run_notes_reach_every_report() -> None:
    result = sample_run()
    note = "setup je asks for THP always, but the server turns THP off for itself"
    result.metadata.notes = [note]
    assert f"- {note}" in markdown.render(analyze(result))
    assert note in html.render_html(analyze(result))
    console = Console(record=True, width=200)
    terminal.print_run(analyze(result), console)
    assert note in console.export_text()
    result.metadata.notes = None
    assert "Notes from the run" not in markdown.render(analyze(result))


def test_summary_csv_has_mean_interval_and_per_op_costs() -> None:
    result = sample_run()
    for c in result.cells:
        if c.setup == "je" and c.step == "point-query range=100":
            c.metrics = {"server_cpu_us_per_op": 40.0 + c.repeat * 10, "system_cs_per_op": 3.0}
    rows = list(csv.DictReader(io.StringIO(export.summary_csv(analyze(result)))))
    glibc = next(r for r in rows if r["setup"] == "glibc" and r["step"].startswith("point-query"))
    je = next(r for r in rows if r["setup"] == "je" and r["step"].startswith("point-query"))
    # glibc: 1000 and 3000 -> mean 2000, sd 1414.2, t(0.975, 1) = 12.706
    assert float(glibc["mean"]) == pytest.approx(2000)
    # On the log scale: bounds 2000 * exp(-+t * se / mean), se = 1414.2 / sqrt(2).
    spread = math.exp(12.7062 * (1414.2136 / math.sqrt(2)) / 2000)
    assert float(glibc["low"]) == pytest.approx(2000 / spread, rel=1e-4)
    assert float(glibc["high"]) == pytest.approx(2000 * spread, rel=1e-4)
    assert glibc["repeats"] == "2" and glibc["unit"] == "QPS"
    # je: 2500 twice -> no spread, the interval collapses onto the mean
    assert float(je["low"]) == float(je["high"]) == pytest.approx(2500)
    assert float(je["server_cpu_us_per_op"]) == pytest.approx(45.0)
    assert float(je["system_cs_per_op"]) == pytest.approx(3.0)
    assert glibc["server_cpu_us_per_op"] == ""


def test_cpu_and_thp_settings_are_shown_with_what_the_server_ran_under() -> None:
    result = sample_run()
    result.setups[1].cpus = "0-1"
    result.setups[1].thp = "never"
    result.sessions[1].thp = "never (PR_SET_THP_DISABLE, set by mallocbench)"
    result.sessions[0].thp = "madvise"
    text = markdown.render(analyze(result))
    assert "| je | jemalloc | - | - | - | - | - | 0-1 | never |" in text
    assert "| glibc (base) | glibc | - | - | - | - | - | all | system |" in text
    differences = dict(html.setup_differences(result))
    # One label and one wording per setup field, and one setups table, in every report
    # (report/facts.py).
    header = "| setup | allocator | allocator version | allocator library | knobs | config |"
    assert header + " server version | CPU set | THP (asked) |" in text
    page = html.render_html(analyze(result))
    assert "<th>allocator library</th><th>knobs</th><th>config</th><th>server version</th>" in page
    assert differences["THP (asked)"] == {"glibc": "system", "je": "never"}
    assert differences["THP (ran under)"]["glibc"] == "madvise"
    assert differences["CPU set"] == {"glibc": "all", "je": "0-1"}
    empty = markdown.render(analyze(RunResult("r2", "t", "glibc")))
    assert empty.startswith("# mallocbench: t\n\nRun `r2`.\n")


def test_small_servers_get_their_memory_in_mib() -> None:
    result = sample_run()
    for session in result.sessions:
        session.peak_rss_bytes = 200 * MIB
    for c in result.cells:
        c.peak_rss_bytes = None
        c.metrics = {"rss_accounted_bytes": 150 * MIB, "rss_unaccounted_bytes": 50 * MIB}
    text = markdown.render(analyze(result))
    # VSZ of 20 GiB against 200 MiB of RSS is reserved address space: the column goes,
    # the note says why.
    assert "| peak RSS (MiB) | RSS/cache | server accounts for (MiB) |" in text
    assert "| innodb | glibc | 200 | 0.20 | 150 | 50 |" in text
    assert "not meaningful on this build" in text
    assert fmt.memory_unit([None, 2 * GIB]) == "GiB" and fmt.size(-3 * MIB, "MiB") == "-3"


def test_unstable_cells_are_marked_and_named_in_every_report() -> None:
    run = tight_run(1200)
    shifted = run.cells[1]  # je, repeat 0
    shifted.stability = {"stable": False, "reason": "level shift of 8% after 6 s"}
    shifted.warmup_s, shifted.warmup_steady = 30.0, False
    je = relative_tables(run)[0].rows[0].cells["je"]
    assert je.unstable and cell_text(je).endswith("~") and "unstable" in cell_title(je)
    # Stable cells stay unmarked.
    assert not relative_tables(tight_run(1200))[0].rows[0].cells["je"].unstable
    for text in (markdown.render(analyze(run)), terminal_text(run), html.render_html(analyze(run))):
        assert "1.20~" in text
        assert "1 cell(s) unstable" in text and "level shift of 8% after 6 s" in text
        assert "1 cell(s) reached durations.max_warmup still trending" in text
