from __future__ import annotations

import math

import pytest

from mallocbench.analysis.summary import geomean, memory_rows, relative_tables, summarize
from mallocbench.report import export, markdown
from mallocbench.results import Cell, RunResult, SessionInfo, SetupInfo


def cell(
    setup: str, step: str, qps: float | None, repeat: int = 0, status: str = "ok", **kw: object
) -> Cell:
    return Cell(
        setup=setup,
        engine="innodb",
        step=step,
        threads=8,
        repeat=repeat,
        qps=qps,
        status=status,
        cache_bytes=1 << 30,
        **kw,  # type: ignore[arg-type]
    )


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
                peak_rss_bytes=3 << 30,
                peak_vsz_bytes=8 << 30,
            ),
            SessionInfo(
                "je.innodb.r0",
                "je",
                "innodb",
                0,
                peak_rss_bytes=(5 << 30) // 4,
                peak_vsz_bytes=20 << 30,
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


def test_relative_qps_uses_mean_over_repeats_and_groups() -> None:
    (table,) = relative_tables(sample_run())
    rows = {r.step: r for r in table.rows}
    assert rows["point-query range=100"].base_qps == pytest.approx(2000)
    assert rows["point-query range=100"].values["je"] == pytest.approx(1.25)
    assert rows["random-points range=10"].values["je"] == pytest.approx(0.5)
    assert rows["update-nonindex range=100"].values["je"] is None
    assert rows["update-nonindex range=100"].problems["je"] == "crashed"
    geo = table.group_geomeans()
    assert geo["point"]["je"] == pytest.approx(math.sqrt(1.25 * 0.5))
    assert geo["write"]["je"] is None
    assert [r.step for r in table.rows][-1] == "update-nonindex range=100"


def test_peak_memory_and_rss_per_cache() -> None:
    rows = {r.setup: r for r in memory_rows(sample_run())}
    assert rows["glibc"].rss_per_cache == pytest.approx(3.0)
    assert rows["je"].rss_per_cache == pytest.approx(1.25)
    assert rows["je"].peak_vsz_bytes == 20 << 30


def test_geomean_ignores_missing() -> None:
    assert geomean([2.0, 8.0, None]) == pytest.approx(4.0)
    assert geomean([None]) is None


def test_summaries_keep_failed_repeats_out_of_the_mean() -> None:
    cells = [cell("je", "scan range=100", 10.0, 0), cell("je", "scan range=100", None, 1, "failed")]
    summary = summarize(cells)[("je", "innodb", "scan range=100", 8)]
    assert summary.qps == 10.0 and summary.problem == "failed"


def test_markdown_and_csv_render_the_tables() -> None:
    text = markdown.render(sample_run())
    assert "| point-query range=100 | 2,000 | 1.25 (" in text  # 2 repeats: an interval
    assert "CRASHED" in text and "| innodb | glibc | 8.00 | 3.00 | 3.00 |" in text
    csv_text = export.relative_csv(sample_run())
    assert "innodb,8,point-query range=100,point,je,2500.0,2000.0,1.25" in csv_text
    assert export.cells_csv(sample_run()).count("\n") == 9


def test_intervals_appear_with_repeats_and_mark_real_differences() -> None:
    cells = [cell("glibc", "scan range=100", q, i) for i, q in enumerate([100, 101, 99])]
    cells += [cell("je", "scan range=100", q, i) for i, q in enumerate([150, 151, 149])]
    cells += [cell("glibc", "point-query range=100", q, i) for i, q in enumerate([100, 90, 110])]
    cells += [cell("je", "point-query range=100", q, i) for i, q in enumerate([95, 112, 101])]
    run = RunResult("r", "t", "glibc", setups=[SetupInfo("glibc", "glibc"), SetupInfo("je", "x")])
    run.cells = cells
    (table,) = relative_tables(run)
    rows = {r.step: r for r in table.rows}
    assert rows["scan range=100"].significant("je")
    interval = rows["point-query range=100"].intervals["je"]
    assert interval.low < 1.0 < interval.high and not rows["point-query range=100"].significant(
        "je"
    )
    assert "* marks a difference" in markdown.render(run)
