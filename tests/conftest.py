"""Shared fixtures. Tests that need a server start their own private one and stop it."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mallocbench.servers.mariadb import ServerBuild, find_build


@pytest.fixture(scope="session")
def build() -> ServerBuild:
    if shutil.which("mariadbd") is None and not Path("/usr/sbin/mariadbd").exists():
        pytest.fail("MariaDB is not installed: run `make setup` (the tests need a real server)")
    return find_build()


@pytest.fixture(scope="session", autouse=True)
def dataset_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Keep golden datadirs of the test run apart from the user's cache.

    pytest's temp dirs stay 0700: a server that drops root to `mysql` keeps its own
    state in a runtime directory (servers/runtime.py) and never enters them.
    """
    cache = Path(os.environ.get("MALLOCBENCH_CACHE") or tmp_path_factory.mktemp("cache"))
    os.environ["MALLOCBENCH_CACHE"] = str(cache)
    return cache


@pytest.fixture(scope="session")
def postgres() -> Iterator[Any]:
    """A private PostgreSQL server for the test session (tests/postgres_server.py).

    Fails, not skips, when the binaries are missing: `make test` installs postgresql-15.
    """
    from postgres_server import bin_dir, postgres_server

    try:
        bin_dir()
    except RuntimeError as exc:
        pytest.fail(str(exc))
    with postgres_server() as server:
        yield server


@pytest.fixture(scope="session")
def postgres_url(postgres: Any) -> str:
    """The URL of the session's database (shared by the tests that use it)."""
    return str(postgres.url())


@pytest.fixture
def postgres_store_url(postgres: Any) -> Iterator[str]:
    """A fresh database of the session's server, dropped afterwards: this test's alone."""
    name = postgres.create_database()
    try:
        yield str(postgres.url(name))
    finally:
        postgres.drop_database(name)


class IntegrityFigures:
    """Counters the integrity tests add to; the run prints them once at its end.

    faults injected counts what the tests did on purpose (kills, injections, second
    runs); the others count what went wrong and must stay 0.
    """

    def __init__(self) -> None:
        self.counts = {"faults injected": 0, "cells lost": 0, "orphans": 0, "tracebacks": 0}

    def add(self, name: str, n: int = 1) -> None:
        self.counts[name] += n

    def check_output(self, text: str) -> None:
        self.counts["tracebacks"] += text.count("Traceback (most recent call last)")


_FIGURES = IntegrityFigures()


@pytest.fixture
def integrity_figures() -> IntegrityFigures:
    return _FIGURES


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _FIGURES.counts["faults injected"]:
        terminalreporter.write_line(
            "integrity figures: " + ", ".join(f"{k} {v}" for k, v in _FIGURES.counts.items())
        )
