"""The account a root-run harness hands its MariaDB servers to."""

from __future__ import annotations

from mallocbench.servers.access import ServerUser, handed_to

# Debian's packages create it with mariadb-server.
SERVER_USER = "mysql"


def server_user() -> ServerUser | None:
    """The account a server runs as when mallocbench is root; None: as ourselves."""
    return handed_to(
        SERVER_USER,
        f"mallocbench runs as root and hands its servers to the user {SERVER_USER!r}",
        "mariadb-server",
    )
