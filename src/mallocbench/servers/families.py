"""The registry of server families: one line per family (servers/family.py says what a
family is). A family's package is imported when it is first asked for: most commands
never start a server, and PostgreSQL's client library must not slow their start."""

from __future__ import annotations

import importlib
from typing import cast

from mallocbench.errors import MallocbenchError, did_you_mean
from mallocbench.servers.family import ServerFamily

# name -> the module whose FAMILY implements it
FAMILIES: dict[str, str] = {
    "mariadb": "mallocbench.servers.mariadb.family",
    "postgresql": "mallocbench.servers.postgresql.family",
}
DEFAULT = "mariadb"


def get(name: str) -> ServerFamily:
    """The family by name; an unknown one is refused in one line."""
    module = FAMILIES.get(name)
    if module is None:
        raise MallocbenchError(
            f"unknown server family {name!r}{did_you_mean(name, FAMILIES)}: use one of "
            f"{', '.join(FAMILIES)}"
        )
    return cast(ServerFamily, importlib.import_module(module).FAMILY)


def of_flavor(flavor: str) -> ServerFamily:
    """The family a build's flavor runs under (a MySQL build under MariaDB's)."""
    return get(flavor if flavor in FAMILIES else DEFAULT)


__all__ = ["DEFAULT", "FAMILIES", "get", "of_flavor"]
