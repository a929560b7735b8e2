"""`mallocbench store copy` and `store info`: move runs between SQLite and PostgreSQL."""

from __future__ import annotations

import click

from mallocbench.errors import MallocbenchError
from mallocbench.store import open_store, store_label, store_target
from mallocbench.store.copying import copy_runs


@click.group("store")
def store_group() -> None:
    """Results stores: copy runs between SQLite files and a shared PostgreSQL database.

    \b
    A store is an SQLite file (an output directory means its results.sqlite) or a
    PostgreSQL URL postgresql://user@host:5432/db; the password comes from the URL,
    PGPASSWORD or ~/.pgpass.
    """


@store_group.command("copy")
@click.argument("src")
@click.argument("dst")
@click.option(
    "--run",
    "run_ids",
    multiple=True,
    metavar="RUN_ID",
    help="Copy this run (repeatable); default: every run in SRC.",
)
@click.option("--replace", is_flag=True, help="Overwrite runs DST already has.")
def copy_cmd(src: str, dst: str, run_ids: tuple[str, ...], replace: bool) -> None:
    """Copy runs with their setups, sessions, cells and samples (pattern runs with their
    results) from SRC to DST.

    \b
    A run id DST already holds is refused (--replace overwrites it); the runs keep
    their start and finish times and status, so `report` prints the same tables on
    both stores.

    \b
    Examples:
      mallocbench store copy out postgresql://bench@db-host/mallocbench
      mallocbench store copy postgresql://bench@db-host/mallocbench copy.sqlite --run RUN_ID
    """
    source, target = store_target(src, must_exist=True), store_target(dst)
    if store_label(source) == store_label(target):
        raise MallocbenchError(f"SRC and DST are both {store_label(source)}: name two stores")
    reader = open_store(source, readonly=True)
    try:
        writer = open_store(target)
        try:
            copied = copy_runs(reader, writer, list(run_ids), replace)
        finally:
            writer.close()
    finally:
        reader.close()
    patterns = f", {copied.pattern_results} pattern results" if copied.pattern_results else ""
    click.echo(
        f"copied {len(copied.runs)} run(s), {copied.cells} cells, {copied.samples} samples"
        f"{patterns} from {reader.label} to {writer.label}: {', '.join(copied.runs)}"
    )


@store_group.command("info")
@click.argument("target", default="out")
def info_cmd(target: str) -> None:
    """What a store is: its kind, schema version and runs."""
    store = open_store(store_target(target, must_exist=True), readonly=True)
    try:
        runs = store.list_runs()
        click.echo(store.describe())
        click.echo(f"schema version {store.schema_version()}")
        click.echo(f"{len(runs)} run(s), {sum(int(r['cells']) for r in runs)} cells")
        patterns = store.list_pattern_runs()
        if patterns:
            results = sum(int(r["cells"]) for r in patterns)
            click.echo(f"{len(patterns)} pattern run(s), {results} pattern results")
        if runs:
            click.echo(f"latest run: {runs[-1]['run_id']}")
    finally:
        store.close()


commands = [store_group]
