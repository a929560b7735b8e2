"""The server-family seam (servers/family.py): MariaDB's private server and PostgreSQL's
satisfy the one Server protocol the pipeline will drive, and PostgreSQL's family the
ServerFamily protocol. Checked by mypy, on this very file: the functions below only
type-check when the classes fit the protocols member by member."""

from __future__ import annotations

from pathlib import Path

import pytest
from mypy import api

from mallocbench.errors import MallocbenchError
from mallocbench.servers import families
from mallocbench.servers.family import Server, ServerFamily
from mallocbench.servers.mariadb import PrivateServer
from mallocbench.servers.postgresql.family import PostgresFamily
from mallocbench.servers.postgresql.server import PgServer
from mallocbench.workloads import drivers
from mallocbench.workloads.pgsql import PgSysbench
from mallocbench.workloads.sysbench import Sysbench

ROOT = Path(__file__).resolve().parents[1]


def mariadb_server_is_a_server(server: PrivateServer) -> Server:
    return server


def postgresql_server_is_a_server(server: PgServer) -> Server:
    return server


def postgresql_is_a_family(family: PostgresFamily) -> ServerFamily:
    return family


def _mypy(*paths: Path) -> tuple[str, int]:
    out, err, status = api.run(["--config-file", str(ROOT / "pyproject.toml"), *map(str, paths)])
    return out + err, status


def test_both_private_servers_satisfy_the_server_protocol(tmp_path: Path) -> None:
    said, status = _mypy(Path(__file__))
    assert status == 0, said
    # The same check fails for a server that lacks a member (here: exit_info), so the
    # passing check above says something.
    lacking = tmp_path / "lacking.py"
    lacking.write_text(
        "from mallocbench.servers.family import Server\n"
        "from mallocbench.servers.postgresql.server import PgServer\n"
        "class Lacking(PgServer):\n"
        "    exit_info = None\n"
        "def check(server: Lacking) -> Server:\n"
        "    return server\n"
    )
    said, status = _mypy(lacking)
    assert status == 1 and 'expected "Server"' in said, said


def test_the_registries_name_postgresql_and_refuse_the_unknown() -> None:
    assert families.get("postgresql").name == "postgresql"
    with pytest.raises(MallocbenchError, match=r"unknown server family 'postgres' \(did you"):
        families.get("postgres")
    pg = drivers.driver("postgresql", "/nonexistent/sysbench.cnf", 2, 100)
    assert isinstance(pg, PgSysbench)
    assert type(drivers.driver("mariadb", "/x", 2, 100, "InnoDB")) is Sysbench
    with pytest.raises(MallocbenchError, match="no sysbench driver for the server family"):
        drivers.driver("oracle", "/x", 2, 100)
