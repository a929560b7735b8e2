"""Terminal rendering with rich."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table


def print_allocators(entries: list[dict[str, Any]], console: Console | None = None) -> None:
    console = console or Console()
    table = Table(title="Allocators")
    for column in ("name", "version", "library", "status"):
        table.add_column(column)
    for entry in entries:
        status = (
            "[green]available[/]"
            if entry["available"]
            else f"[red]missing[/]: apt-get install {entry['debian_package']}"
        )
        table.add_row(entry["name"], entry["version"] or "-", entry["path"] or "-", status)
    console.print(table)
    console.print("Any other malloc library: give its path (e.g. /opt/lib/libfoo.so) as allocator.")
