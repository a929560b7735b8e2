"""Shared fixtures. Tests that need a server start their own private one and stop it."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from mallocbench.servers.mariadb import ServerBuild, find_build


@pytest.fixture(scope="session")
def build() -> ServerBuild:
    if shutil.which("mariadbd") is None and not Path("/usr/sbin/mariadbd").exists():
        pytest.fail("MariaDB is not installed: run `make setup` (the tests need a real server)")
    return find_build()


@pytest.fixture(scope="session", autouse=True)
def dataset_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Keep golden datadirs of the test run apart from the user's cache."""
    cache = Path(os.environ.get("MALLOCBENCH_TEST_CACHE") or tmp_path_factory.mktemp("cache"))
    os.environ["MALLOCBENCH_CACHE"] = str(cache)
    return cache
