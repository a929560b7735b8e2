"""`mallocbench replay`: replay a recorded trace under each allocator and knob setting."""

from __future__ import annotations

import json
from pathlib import Path

import click

from mallocbench.commands.options import min_effect_option
from mallocbench.errors import MallocbenchError


def _setups(allocator_list: str, extra: tuple[str, ...]) -> list[tuple[str, str, dict[str, str]]]:
    from mallocbench.patterns.experiment import parse_allocator_flag

    specs = [s.strip() for s in allocator_list.split(",") if s.strip()] if allocator_list else []
    parsed = [parse_allocator_flag(spec) for spec in [*specs, *extra]]
    names = [name for name, _, _ in parsed]
    duplicate = next((n for n in names if names.count(n) > 1), None)
    if duplicate:
        raise MallocbenchError(f"setup {duplicate!r} is given twice: list each setup once")
    if not parsed:
        raise MallocbenchError("give --allocators, e.g. --allocators glibc,jemalloc")
    return parsed


@click.command("replay")
@click.argument("trace", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--allocators",
    "allocator_list",
    default="glibc",
    show_default=True,
    metavar="A,B,...",
    help="Allocators to replay under, comma-separated; the first is the base.",
)
@click.option(
    "--set",
    "extra",
    multiple=True,
    metavar="NAME:KNOB=VALUE[,KNOB=VALUE]",
    help="A further setup with knobs, e.g. glibc:MALLOC_ARENA_MAX=2 (repeatable).",
)
@click.option("--repeats", type=click.IntRange(1, 100), default=3, show_default=True)
@click.option(
    "--timing",
    type=click.Choice(["recorded", "none"]),
    default="recorded",
    show_default=True,
    help="recorded keeps the gaps (time-based purging matters); none runs flat out (CPU cost).",
)
@click.option(
    "--speed",
    type=click.FloatRange(0.001, 10000, min_open=True),
    default=1.0,
    show_default=True,
    help="With --timing recorded: replay N times faster.",
)
@min_effect_option("Ratios smaller than this are never findings (default 0).")
@click.option(
    "--expect-server-version",
    metavar="VERSION",
    help="Warn when the trace was recorded under another server version.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the JSON document instead.")
@click.option(
    "--out",
    "out_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Also write the JSON document to this file.",
)
def replay(
    trace: Path,
    allocator_list: str,
    extra: tuple[str, ...],
    repeats: int,
    timing: str,
    speed: float,
    min_effect: float | None,
    expect_server_version: str | None,
    as_json: bool,
    out_file: Path | None,
) -> None:
    """Replay a recorded trace under each allocator and knob setting.

    Per setup: peak RSS beside the ideal (live requested bytes), RSS/live, CPU time and
    calls/s, with 95% intervals over the repeats."""
    from mallocbench.console import make_console
    from mallocbench.patterns.experiment import make_setup
    from mallocbench.replay import render, runner, summary
    from mallocbench.replay import trace as tracemod

    parsed = _setups(allocator_list, extra)
    info = tracemod.check(trace)
    setups = [make_setup("replay", name, spec, knobs) for name, spec, knobs in parsed]
    console = make_console(stderr=True)
    with console.status("replaying") as status:
        runs = runner.replay_all(
            setups,
            trace,
            repeats,
            timing,
            speed,
            float(info.data.get("duration_s") or 0),
            progress=lambda text: status.update(f"replaying: {text}"),
        )
    keyed = [(s.name, s.allocator.name, dict(s.knobs)) for s in setups]
    rows = summary.summarize(runs, keyed, min_effect or 0.0)
    warnings = info.warnings(expect_server_version)
    doc = render.document(info, rows, timing, speed, repeats, min_effect or 0.0, warnings)
    if out_file is not None:
        out_file.write_text(json.dumps(doc, indent=1) + "\n")
    if as_json:
        click.echo(json.dumps(doc, indent=1))
    else:
        render.print_table(info, rows, timing, min_effect or 0.0, warnings)


commands = [replay]
