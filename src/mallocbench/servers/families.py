"""The registry of server families: one line per family (servers/family.py says what a
family is). MariaDB joins when the pipeline is wired to the seam; until then it is
reached directly through servers/mariadb.py."""

from __future__ import annotations

from mallocbench.errors import MallocbenchError, did_you_mean
from mallocbench.servers.family import ServerFamily
from mallocbench.servers.postgresql.family import FAMILY as POSTGRESQL

FAMILIES: dict[str, ServerFamily] = {
    POSTGRESQL.name: POSTGRESQL,
}


def get(name: str) -> ServerFamily:
    """The family by name; an unknown one is refused in one line."""
    family = FAMILIES.get(name)
    if family is None:
        raise MallocbenchError(
            f"unknown server family {name!r}{did_you_mean(name, FAMILIES)}: use one of "
            f"{', '.join(FAMILIES)}"
        )
    return family


__all__ = ["FAMILIES", "get"]
