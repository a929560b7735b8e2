"""`mallocbench compare RUN_A RUN_B`: the same relative tables, between two runs.

The comparison is `analysis.comparison`'s, its formats `report.comparison`'s; with
--fail-on it is a CI gate: exit 1 (`exitcodes.FINDING`) when B has a significant change
of the kinds asked for.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from mallocbench import exitcodes
from mallocbench.analysis.comparison import (
    Comparison,
    compare,
    findings,
    parse_fail_on,
)
from mallocbench.commands.options import min_effect_option
from mallocbench.commands.output import emit, say
from mallocbench.errors import MallocbenchError
from mallocbench.files import disk_fault, is_disk_fault
from mallocbench.model.results import RunResult
from mallocbench.report import formats
from mallocbench.report.comparison import Gate
from mallocbench.store.loading import load_result

# ---------------------------------------------------------------- loading


def load_run(source: str, store: str | Path | None = None) -> RunResult:
    """A results.json, an output directory, a .sqlite store or a postgresql:// URL (its
    latest run), or a run id in --store."""
    if store is not None:
        return load_result(store, run_id=source, with_samples=False)
    return load_result(source, with_samples=False)


FAIL_ON_HELP = (
    "Exit 1 when B has a significant change of these kinds against A: slower, faster, "
    "changed (either), rss-up, rss-down; comma-separated or repeated. A change counts "
    "when its 95% interval excludes 1.0 and it is at least --min-effect: 'same', "
    "'not significant', 'inconclusive' and ratios without an interval (1 repeat) never "
    "do. A cell that crashed, was OOM-killed or failed in B but measured in A counts as "
    "slower (the reverse as faster); a setup OOM-killed in B and not in A counts as "
    "rss-up. Each finding is one line on stderr."
)


@click.command("compare", epilog=exitcodes.POLICY_HELP)
@click.argument("run_a")
@click.argument("run_b")
@click.option(
    "--store",
    "store_path",
    metavar="FILE|DIR|URL",
    help="Read RUN_A and RUN_B as run ids in this store: a .sqlite file, an output "
    "directory or a PostgreSQL URL postgresql://user@host/db.",
)
@click.option(
    "--format",
    "fmt_name",
    type=click.Choice(formats.COMPARISON.names),
    default="terminal",
    show_default=True,
    help="What to print on standard output.",
)
@click.option(
    "--html",
    "html_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Also write an HTML page of the comparison (plotly.js beside it).",
)
@click.option(
    "--self-contained",
    is_flag=True,
    help="With --html: plotly.js inside the page (2 MB, one file to mail).",
)
@min_effect_option(
    "Report changes smaller than this as the same (0.02 or 2%); default: run B's "
    "min_effect, else run A's; 0 turns it off."
)
@click.option(
    "--fail-on",
    "fail_on",
    metavar="KIND[,KIND]",
    multiple=True,
    callback=lambda _ctx, _param, value: parse_fail_on(value),
    help=FAIL_ON_HELP,
)
@click.option(
    "--allow-different",
    is_flag=True,
    help="Compare runs whose dataset or cache size differ (refused otherwise); the "
    "differences are still printed as warnings.",
)
def compare_cmd(
    run_a: str,
    run_b: str,
    store_path: str | None,
    fmt_name: str,
    html_path: Path | None,
    self_contained: bool,
    min_effect: float | None,
    fail_on: tuple[str, ...],
    allow_different: bool,
) -> None:
    """Compare run B against run A: QPS(B) / QPS(A) per engine, step, threads and setup.

    \b
    RUN_A and RUN_B are results.json files, output directories, .sqlite stores or
    postgresql:// URLs (their latest run), or, with --store, run ids in one store.

    \b
    The runs must have measured the same workload: a different dataset (tables, rows)
    or cache size is refused (--allow-different compares anyway). Different durations,
    design, host (CPU, memory, kernel, glibc, THP) or server and allocator versions are
    printed as warnings on stderr and listed in the JSON output.

    \b
    Peak RSS B/A is the mean of each repeat's peak in B over A's, with a 95% interval,
    so rss-up is judged like throughput; with --fail-on, compare is a CI gate.

    \b
    Examples:
      mallocbench compare out-10.11/results.json out-11.4/results.json
      mallocbench compare --store out/results.sqlite small-20250101-1200 small-20250102-0900
      mallocbench compare --store postgresql://bench@db-host/mallocbench RUN_A RUN_B
      mallocbench compare old-out new-out --html compare.html --min-effect 2%
      mallocbench compare baseline/results.json out --fail-on slower,rss-up
    """
    cmp = compare(
        load_run(run_a, store_path), load_run(run_b, store_path), min_effect, allow_different
    )
    for difference in cmp.differences:
        # Before the tables: whoever reads the verdicts should know this first.
        say(formats.COMPARE_DIFFERS, difference, err=True)
    if html_path is not None:
        # Imported here: jinja2 is for the HTML report only, not every comparison.
        from mallocbench.report.html import write_compare_html

        try:
            write_compare_html(cmp, html_path, self_contained)
        except OSError as exc:
            if is_disk_fault(exc):
                raise disk_fault(exc, str(html_path)) from exc
            raise MallocbenchError(
                f"cannot write {html_path}: {exc.strerror}; give a writable path with --html"
            ) from exc
    if cmp.a.run_id == cmp.b.run_id:
        say(formats.COMPARE_SAME_RUN, cmp.a.run_id, err=True)
    emit(formats.COMPARISON, fmt_name, cmp)
    if html_path is not None and fmt_name == "terminal":
        say(formats.COMPARE_WROTE, html_path, err=True)
    if fail_on and _gate(cmp, fail_on):
        sys.exit(exitcodes.FINDING)


def _gate(cmp: Comparison, kinds: tuple[str, ...]) -> int:
    """Print the findings of --fail-on on stderr, one line each and a summary; their count."""
    found = findings(cmp, kinds)
    say(formats.COMPARE_GATE, Gate(cmp, kinds, found), err=True)
    return len(found)


commands = [compare_cmd]
