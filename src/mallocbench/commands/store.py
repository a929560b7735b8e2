"""`mallocbench store copy` and `store info`: move runs between SQLite and PostgreSQL."""

from __future__ import annotations

from pathlib import Path

import click

from mallocbench.errors import MallocbenchError
from mallocbench.store import is_url, open_store, store_label
from mallocbench.store.copying import copy_runs


def _target(value: str, must_exist: bool) -> str | Path:
    """A URL as given; an output directory means the results.sqlite in it."""
    if is_url(value):
        return value
    path = Path(value)
    if path.is_dir():
        path = path / "results.sqlite"
    if must_exist and not path.is_file():
        raise MallocbenchError(
            f"no results store at {path}: give an output directory, a .sqlite file or a "
            "postgresql:// URL"
        )
    return path


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
    """Copy runs with their setups, sessions, cells and samples from SRC to DST.

    \b
    A run id DST already holds is refused (--replace overwrites it); the runs keep
    their start and finish times and status, so `report` prints the same tables on
    both stores.

    \b
    Examples:
      mallocbench store copy out postgresql://bench@db-host/mallocbench
      mallocbench store copy postgresql://bench@db-host/mallocbench copy.sqlite --run RUN_ID
    """
    source, target = _target(src, must_exist=True), _target(dst, must_exist=False)
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
    click.echo(
        f"copied {len(copied.runs)} run(s), {copied.cells} cells, {copied.samples} samples "
        f"from {reader.label} to {writer.label}: {', '.join(copied.runs)}"
    )


@store_group.command("info")
@click.argument("target", default="out")
def info_cmd(target: str) -> None:
    """What a store is: its kind, schema version and runs."""
    store = open_store(_target(target, must_exist=True), readonly=True)
    try:
        runs = store.list_runs()
        click.echo(store.describe())
        click.echo(f"schema version {store.schema_version()}")
        click.echo(f"{len(runs)} run(s), {sum(int(r['cells']) for r in runs)} cells")
        if runs:
            click.echo(f"latest run: {runs[-1]['run_id']}")
    finally:
        store.close()


commands = [store_group]
