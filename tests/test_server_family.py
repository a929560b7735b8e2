"""The server-family seam (servers/family.py): MariaDB's private server and PostgreSQL's
satisfy the one Server protocol the pipeline will drive, and PostgreSQL's family the
ServerFamily protocol. Checked by mypy, on this very file: the functions below only
type-check when the classes fit the protocols member by member."""

from __future__ import annotations

from pathlib import Path

from mypy import api

from mallocbench.servers.family import Server, ServerFamily
from mallocbench.servers.mariadb import PrivateServer
from mallocbench.servers.postgresql.family import PostgresFamily
from mallocbench.servers.postgresql.server import PgServer

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
