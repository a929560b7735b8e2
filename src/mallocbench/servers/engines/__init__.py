"""Storage engines: the my.cnf fragment and cache size each needs.

One module per engine exposing `ENGINE`; list it in `_MODULES` to register it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

from mallocbench.errors import MallocbenchError, did_you_mean


@dataclass(frozen=True)
class Engine:
    name: str
    sql_engine: str
    description: str
    # cache bytes -> my.cnf settings for the engine and its cache
    config: Callable[[int], dict[str, str]]
    cache_variable: str


_MODULES = ("innodb", "myrocks")


def all_engines() -> list[Engine]:
    return [importlib.import_module(f"{__name__}.{m}").ENGINE for m in _MODULES]


def get(name: str) -> Engine:
    for engine in all_engines():
        if engine.name == name.lower():
            return engine
    known = ", ".join(e.name for e in all_engines())
    raise MallocbenchError(
        f"unknown engine {name!r}{did_you_mean(name, known.split(', '))}: use one of {known}"
    )
