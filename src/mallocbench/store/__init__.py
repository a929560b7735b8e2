"""Results store. SQLite by default; every cell is committed the moment it finishes."""

from mallocbench.store.loading import load_result
from mallocbench.store.sqlite import Store, open_store

__all__ = ["Store", "load_result", "open_store"]
