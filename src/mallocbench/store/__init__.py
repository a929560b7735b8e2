"""Results store. SQLite by default; every cell is committed the moment it finishes."""

from mallocbench.store.sqlite import Store, open_store

__all__ = ["Store", "open_store"]
