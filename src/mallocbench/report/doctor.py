"""What `doctor` says of this host, one line per piece (and what a missing one blocks),
and where `install-shim` put the shim."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mallocbench.doctor.checks import Check


def checks_text(found: list[Check]) -> str:
    width = max(len(c.name) for c in found)
    lines = []
    for check in found:
        status = "ok" if check.found else ("optional" if check.optional else "MISSING")
        lines.append(f"{status:<9}{check.name:<{width + 2}}{check.detail}")
        if not check.found:
            lines.append(f"{'':<{width + 11}}blocks: {check.blocks}")
    return "".join(f"{line}\n" for line in lines)


def checks_json(found: list[Check]) -> str:
    return json.dumps([c.to_dict() for c in found], indent=2) + "\n"


def installed_text(path: Path) -> str:
    """The shim's path, alone on its line for a script to take."""
    return f"{path}\n"
