"""The MariaDB/MySQL server family: a build found (build), configured (config), reachable by
its run alone (access), started and stopped privately (private), its end told (outcome)."""

from mallocbench.servers.mariadb.access import SERVER_USER, ServerUser, free_port, server_user
from mallocbench.servers.mariadb.build import ServerBuild, find_build
from mallocbench.servers.mariadb.config import ServerConfig
from mallocbench.servers.mariadb.outcome import (
    SERVER_RECORD,
    ServerExit,
    ServerStartError,
    SettingNotTaken,
    process_start_time,
)
from mallocbench.servers.mariadb.private import PrivateServer, running

__all__ = [
    "SERVER_RECORD",
    "SERVER_USER",
    "PrivateServer",
    "ServerBuild",
    "ServerConfig",
    "ServerExit",
    "ServerStartError",
    "ServerUser",
    "SettingNotTaken",
    "find_build",
    "free_port",
    "process_start_time",
    "running",
    "server_user",
]
