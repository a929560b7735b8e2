"""A server family keeps its server to itself: outside its package no module imports the
client library it reaches its servers with or names its binaries (issue 49's layout
rule, for PostgreSQL so far; MariaDB's pymysql and mysqld are still all over the
pipeline until it is wired to the seam)."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "mallocbench"
FAMILY = SRC / "servers" / "postgresql"
# The results store speaks to a PostgreSQL database of the user's, not a server under test.
STORE = SRC / "store" / "postgresql.py"
BINARIES = ("initdb", "pg_ctl", "pg_ctlcluster", "pg_dump", "postgres", "pgbench", "psql")


def crossings(path: Path) -> list[str]:
    """psycopg imports and string constants naming a PostgreSQL binary, in one module."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module]
        found += [
            f"{path.name}:{getattr(node, 'lineno', 0)} imports {n}"
            for n in names
            if n.split(".")[0] == "psycopg"
        ]
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            # A binary as a command names it: alone, or at the end of a path (not prose).
            name = node.value.rsplit("/", 1)[-1]
            if name in BINARIES:
                found.append(f"{path.name}:{node.lineno} names {name}")
    return found


def test_the_checker_finds_a_crossing(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text('import psycopg\nCMD = ["/usr/lib/postgresql/15/bin/initdb", "-D"]\n')
    assert crossings(module) == ["m.py:1 imports psycopg", "m.py:2 names initdb"]


def test_only_the_postgresql_family_reaches_its_servers() -> None:
    outside = [
        crossing
        for path in sorted(SRC.rglob("*.py"))
        if FAMILY not in path.parents and path != STORE
        for crossing in crossings(path)
    ]
    assert outside == []
