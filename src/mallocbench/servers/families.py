"""The registry of server families: one line per family (servers/family.py says what a
family is)."""

from __future__ import annotations

from mallocbench.errors import MallocbenchError, did_you_mean
from mallocbench.servers.family import ServerFamily
from mallocbench.servers.mariadb.family import FAMILY as MARIADB
from mallocbench.servers.postgresql.family import FAMILY as POSTGRESQL

FAMILIES: dict[str, ServerFamily] = {
    MARIADB.name: MARIADB,
    POSTGRESQL.name: POSTGRESQL,
}
DEFAULT = MARIADB.name


def get(name: str) -> ServerFamily:
    """The family by name; an unknown one is refused in one line."""
    family = FAMILIES.get(name)
    if family is None:
        raise MallocbenchError(
            f"unknown server family {name!r}{did_you_mean(name, FAMILIES)}: use one of "
            f"{', '.join(FAMILIES)}"
        )
    return family


def of_flavor(flavor: str) -> ServerFamily:
    """The family a build's flavor runs under (a MySQL build under MariaDB's)."""
    return FAMILIES.get(flavor, FAMILIES[DEFAULT])


__all__ = ["DEFAULT", "FAMILIES", "get", "of_flavor"]
