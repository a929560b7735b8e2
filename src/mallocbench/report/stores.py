"""What `store copy` and `store info` say: the runs copied, and what a store holds."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mallocbench.store.copying import Copied


@dataclass(frozen=True)
class Copy:
    copied: Copied
    source: str
    target: str


def copy_text(c: Copy) -> str:
    n = c.copied
    patterns = f", {n.pattern_results} pattern results" if n.pattern_results else ""
    return (
        f"copied {len(n.runs)} run(s), {n.cells} cells, {n.samples} samples"
        f"{patterns} from {c.source} to {c.target}: {', '.join(n.runs)}\n"
    )


@dataclass(frozen=True)
class Info:
    """A store: its own description, schema version, and its runs' and pattern runs'
    counts (of cells, of pattern results); the latest run's id."""

    described: str
    schema_version: int
    runs: int
    cells: int
    pattern_runs: int
    pattern_results: int
    latest: str | None


def info_text(i: Info) -> str:
    lines = [
        i.described,
        f"schema version {i.schema_version}",
        f"{i.runs} run(s), {i.cells} cells",
    ]
    if i.pattern_runs:
        lines.append(f"{i.pattern_runs} pattern run(s), {i.pattern_results} pattern results")
    if i.latest is not None:
        lines.append(f"latest run: {i.latest}")
    return "".join(f"{line}\n" for line in lines)
