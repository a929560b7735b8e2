"""`mallocbench store copy` and `store info`: move runs between SQLite and PostgreSQL."""

from __future__ import annotations

import click

from mallocbench.commands.output import say
from mallocbench.errors import MallocbenchError
from mallocbench.report import formats, stores
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
    say(formats.STORE_COPY, stores.Copy(copied, reader.label, writer.label))


@store_group.command("info")
@click.argument("target", default="out")
def info_cmd(target: str) -> None:
    """What a store is: its kind, schema version and runs."""
    store = open_store(store_target(target, must_exist=True), readonly=True)
    try:
        runs = store.list_runs()
        patterns = store.list_pattern_runs()
        info = stores.Info(
            store.describe(),
            store.schema_version(),
            len(runs),
            sum(int(r["cells"]) for r in runs),
            len(patterns),
            sum(int(r["cells"]) for r in patterns),
            str(runs[-1]["run_id"]) if runs else None,
        )
        say(formats.STORE_INFO, info)
    finally:
        store.close()


commands = [store_group]
