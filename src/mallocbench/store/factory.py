"""`open_store`: the one way to open a results store, a SQLite file or a PostgreSQL URL."""

from __future__ import annotations

import os
from pathlib import Path

from mallocbench.store.base import ResultsStore, is_url, redact
from mallocbench.store.sqlite import Store


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
