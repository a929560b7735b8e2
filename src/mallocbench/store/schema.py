"""The results store's tables, defined once; each database's DDL is derived from them.

SQLite and PostgreSQL keep the same rows. What differs is spelled by the column kinds:
a REAL is a DOUBLE PRECISION in PostgreSQL, a byte count needs its BIGINT, and the
order rows were written in is SQLite's implicit rowid where PostgreSQL needs a serial
column of its own. The JSON columns are TEXT in both (store/postgresql.py says why).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from enum import Enum

SQLITE, POSTGRESQL = "sqlite", "postgresql"


class Kind(Enum):
    """A column's type, as (SQLite, PostgreSQL) spell it; None: SQLite has it already."""

    TEXT = ("TEXT", "TEXT")
    REAL = ("REAL", "DOUBLE PRECISION")
    INT = ("INTEGER", "INTEGER")
    BIG = ("INTEGER", "BIGINT")  # byte counts and row ids pass 2**31
    ID = ("INTEGER", "BIGSERIAL")  # a row's own id, given as rows are inserted
    ROWID = (None, "BIGSERIAL")  # the order written: SQLite's rowid keeps it unasked

    def spelled(self, dialect: str) -> str | None:
        return self.value[dialect == POSTGRESQL]


@dataclass(frozen=True)
class Column:
    name: str
    kind: Kind
    not_null: bool = False
    primary_key: bool = False
    default: str | None = None
    references: str | None = None  # "table(column)"; rows go when the row they name does
    only: str | None = None  # the one dialect that has it

    def ddl(self, dialect: str) -> str | None:
        kind = self.kind.spelled(dialect)
        if kind is None or self.only not in (None, dialect):
            return None
        parts = [self.name, kind]
        if self.primary_key:
            parts.append("PRIMARY KEY")
        if self.not_null:
            parts.append("NOT NULL")
        if self.default is not None:
            parts.append(f"DEFAULT {self.default}")
        if self.references is not None:
            parts.append(f"REFERENCES {self.references} ON DELETE CASCADE")
        return " ".join(parts)


@dataclass(frozen=True)
class Table:
    name: str
    columns: tuple[Column, ...]
    constraints: tuple[str, ...] = ()  # PRIMARY KEY (...) and UNIQUE (...) over columns

    def ddl(self, dialect: str) -> str:
        lines = [d for c in self.columns if (d := c.ddl(dialect)) is not None]
        body = ",\n    ".join([*lines, *self.constraints])
        return f"CREATE TABLE IF NOT EXISTS {self.name} (\n    {body}\n);"


@dataclass(frozen=True)
class Index:
    name: str
    table: str
    columns: tuple[str, ...]
    only: str | None = None

    def ddl(self, dialect: str) -> str | None:
        if self.only not in (None, dialect):
            return None
        return f"CREATE INDEX IF NOT EXISTS {self.name} ON {self.table}({', '.join(self.columns)});"


def _text(name: str, not_null: bool = True) -> Column:
    return Column(name, Kind.TEXT, not_null=not_null)


def _run_id(table: str) -> Column:
    return Column("run_id", Kind.TEXT, not_null=True, references=f"{table}(run_id)")


# A run's own row: server runs and replays in `runs`, pattern runs in `pattern_runs`.
_RUN_ROW = (
    _text("experiment"),
    _text("base_setup"),
    _text("experiment_text"),
)
_RUN_END = (
    Column("started_at", Kind.REAL, not_null=True),
    Column("finished_at", Kind.REAL),
    Column("status", Kind.TEXT, not_null=True, default="'running'"),
)

TABLES = (
    Table("schema_version", (Column("version", Kind.INT, not_null=True),)),
    Table(
        "runs",
        (
            Column("run_id", Kind.TEXT, primary_key=True),
            *_RUN_ROW,
            _text("metadata"),
            *_RUN_END,
        ),
    ),
    Table(
        "setups",
        (Column("seq", Kind.ROWID), _run_id("runs"), _text("name"), _text("data")),
        ("PRIMARY KEY (run_id, name)",),
    ),
    Table(
        "sessions",
        (Column("seq", Kind.ROWID), _run_id("runs"), _text("id"), _text("data")),
        ("PRIMARY KEY (run_id, id)",),
    ),
    Table(
        "cells",
        (
            Column("id", Kind.ID, primary_key=True),
            _run_id("runs"),
            _text("setup"),
            _text("engine"),
            _text("step"),
            Column("threads", Kind.INT, not_null=True),
            Column("repeat", Kind.INT, not_null=True),
            _text("status"),
            Column("qps", Kind.REAL),
            Column("p95_ms", Kind.REAL),
            Column("p99_ms", Kind.REAL),
            Column("peak_rss_bytes", Kind.BIG),
            Column("peak_vsz_bytes", Kind.BIG),
            # SQLite reads a cell's session out of its JSON (json_extract); PostgreSQL's
            # TEXT JSON has no such function, so the session is a column there.
            Column("session", Kind.TEXT, only=POSTGRESQL),
            _text("data"),
        ),
        ("UNIQUE (run_id, setup, engine, step, threads, repeat)",),
    ),
    Table(
        "samples",
        (
            Column("id", Kind.ROWID, primary_key=True),
            Column("cell_id", Kind.BIG, not_null=True, references="cells(id)"),
            Column("t", Kind.REAL, not_null=True),
            Column("rss_bytes", Kind.BIG),
            Column("vsz_bytes", Kind.BIG),
            Column("qps", Kind.REAL),
            Column("tps", Kind.REAL),
            Column("latency_ms", Kind.REAL),
            _text("extra", not_null=False),
        ),
    ),
    Table(
        "pattern_runs",
        (
            Column("run_id", Kind.TEXT, primary_key=True),
            *_RUN_ROW,
            _text("model"),
            _text("metadata"),
            *_RUN_END,
        ),
    ),
    Table(
        "pattern_results",
        (
            Column("id", Kind.ID, primary_key=True),
            _run_id("pattern_runs"),
            _text("case_name"),
            _text("pattern"),
            _text("setup"),
            Column("threads", Kind.INT, not_null=True),
            Column("repeat", Kind.INT, not_null=True),
            _text("status"),
            Column("ops_per_sec", Kind.REAL),
            Column("peak_rss_bytes", Kind.BIG),
            Column("final_rss_bytes", Kind.BIG),
            Column("live_bytes", Kind.BIG),
            Column("peak_live_bytes", Kind.BIG),
            Column("rss_per_live", Kind.REAL),
            Column("peak_rss_per_live", Kind.REAL),
            _text("data"),
        ),
        ("UNIQUE (run_id, case_name, setup, threads, repeat)",),
    ),
)

INDEXES = (
    Index("samples_cell", "samples", ("cell_id",)),
    Index("cells_session", "cells", ("run_id", "session"), only=POSTGRESQL),
)

TABLE_NAMES = frozenset(t.name for t in TABLES)


def ddl(dialect: str, tables: Collection[str] = TABLE_NAMES) -> str:
    """`tables` and their indexes, each created where missing: a script for `dialect`."""
    statements = [t.ddl(dialect) for t in TABLES if t.name in tables]
    statements += [d for i in INDEXES if i.table in tables and (d := i.ddl(dialect)) is not None]
    return "\n".join(statements) + "\n"
