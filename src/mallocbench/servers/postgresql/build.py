"""Which PostgreSQL build a private server runs: its bin directory and version.

Debian keeps the server binaries off PATH, one directory per major version
(/usr/lib/postgresql/15/bin); a self-built or other vendor's server is named by its
basedir, the directory holding bin/postgres (or that bin directory itself).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from mallocbench.errors import MallocbenchError

FLAVOR = "postgresql"
# What a bin directory must hold for a private server: the server and its initialiser.
NEEDED = ("postgres", "initdb")
PACKAGED_ROOT = Path("/usr/lib/postgresql")


@dataclass(frozen=True)
class PgBuild:
    """A PostgreSQL build: its bin directory and the version its server reports."""

    bindir: str
    version: str
    basedir: str | None = None
    flavor: str = FLAVOR

    @property
    def label(self) -> str:
        return f"{self.flavor} {self.version}"

    @property
    def server_program(self) -> str:
        return self.binary("postgres")

    @property
    def major(self) -> str:
        return self.version.split(".")[0]

    def binary(self, name: str) -> str:
        return str(Path(self.bindir) / name)


def _complete(directory: Path) -> bool:
    return all(os.access(directory / name, os.X_OK) for name in NEEDED)


def _packaged() -> Path | None:
    """The newest Debian-packaged major version, else a postgres on PATH."""
    majors = sorted(
        (d for d in PACKAGED_ROOT.glob("*/bin") if _complete(d)),
        key=lambda d: int(d.parent.name) if d.parent.name.isdigit() else -1,
        reverse=True,
    )
    if majors:
        return majors[0]
    found = shutil.which("postgres")
    return Path(found).parent if found and _complete(Path(found).parent) else None


def find_build(basedir: str | None = None) -> PgBuild:
    """The build in `basedir` (its bin directory, or the directory above it), or the
    packaged PostgreSQL when none is given."""
    if basedir:
        base = Path(basedir).expanduser()
        if not base.is_dir():
            raise MallocbenchError(
                f"server basedir {basedir!r} does not exist: give the directory that holds "
                "bin/postgres and bin/initdb"
            )
        bindir = next((d for d in (base / "bin", base) if _complete(d)), None)
        if bindir is None:
            raise MallocbenchError(
                f"no postgres and initdb in {basedir}/bin or {basedir}: point basedir at a "
                "PostgreSQL installation"
            )
    else:
        bindir = _packaged()
        if bindir is None:
            raise MallocbenchError(
                "no PostgreSQL server found: run `make setup` (installs postgresql-15) or "
                "set server.basedir in the experiment"
            )
    text = subprocess.run(
        [str(bindir / "postgres"), "--version"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    ).stdout
    match = re.search(r"\(PostgreSQL\)\s+(\S+)", text)
    return PgBuild(str(bindir.absolute()), match.group(1) if match else "unknown", basedir)
