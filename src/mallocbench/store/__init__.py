"""Results store. SQLite by default; every cell is committed the moment it finishes."""

from mallocbench.store.base import ResultsStore, is_url, redact
from mallocbench.store.factory import open_store, store_label, store_target
from mallocbench.store.loading import load_pattern_run, load_result
from mallocbench.store.sqlite import Store

__all__ = [
    "ResultsStore",
    "Store",
    "is_url",
    "load_pattern_run",
    "load_result",
    "open_store",
    "redact",
    "store_label",
    "store_target",
]
