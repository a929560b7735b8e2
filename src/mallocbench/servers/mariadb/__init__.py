"""The MariaDB/MySQL server family: a build found (build), configured (config), reachable by
its run alone (access), started and stopped privately (private), its end told (outcome)."""

from mallocbench.servers.mariadb.access import SERVER_USER, server_user
from mallocbench.servers.mariadb.build import ServerBuild, find_build
from mallocbench.servers.mariadb.config import ServerConfig
from mallocbench.servers.mariadb.private import PrivateServer, running

__all__ = [
    "SERVER_USER",
    "PrivateServer",
    "ServerBuild",
    "ServerConfig",
    "find_build",
    "running",
    "server_user",
]
