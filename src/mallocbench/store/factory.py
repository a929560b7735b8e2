"""`open_store`: the one way to open a results store, a SQLite file or a PostgreSQL URL."""

from __future__ import annotations

import os
from pathlib import Path

from mallocbench.errors import MallocbenchError
from mallocbench.store.base import STORE_NAME, ResultsStore, is_url, redact
from mallocbench.store.sqlite import Store


def store_target(source: str | os.PathLike[str], *, must_exist: bool = False) -> str | Path:
    """The store `source` names: a URL as given (a Path would fold its //), the
    results.sqlite of an output directory, or a file.

    Every command that takes a store names it this way, so `--store out`, `runs out`
    and `store info out` all mean out/results.sqlite.
    """
    if is_url(source):
        return str(source)
    path = Path(source)
    if path.is_dir():
        path = path / STORE_NAME
    if must_exist and not path.is_file():
        raise MallocbenchError(
            f"no results store at {path}: give an output directory, a .sqlite file or a "
            "postgresql:// URL"
        )
    return path


def open_store(target: str | os.PathLike[str], *, readonly: bool = False) -> ResultsStore:
    """The store at `target`: postgresql://... or postgres://... URLs name a shared
    PostgreSQL database, anything else an SQLite file (created when writing)."""
    if is_url(target):
        from mallocbench.store.postgresql import PostgresStore

        return PostgresStore(str(target), readonly=readonly)
    return Store(target, readonly=readonly)


def store_label(target: str | os.PathLike[str]) -> str:
    """How messages name `target`: a URL without its password, or the path."""
    return redact(str(target)) if is_url(target) else str(Path(target))
