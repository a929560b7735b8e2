"""Finding a MariaDB/MySQL build: its server binary, its datadir initialiser, its version."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from mallocbench.errors import MallocbenchError

SERVER_BINARIES = ("mariadbd", "mysqld")


@dataclass(frozen=True)
class ServerBuild:
    """A mysqld build: the binary, its datadir initialiser and its version."""

    mysqld: str
    install_db: str | None
    version: str
    flavor: str  # "mariadb" or "mysql"
    basedir: str | None = None

    @property
    def label(self) -> str:
        return f"{self.flavor} {self.version}"

    @property
    def server_program(self) -> str:
        return self.mysqld


def _first_existing(paths: list[Path]) -> str | None:
    return next((str(p) for p in paths if p.is_file() and os.access(p, os.X_OK)), None)


def find_build(basedir: str | None = None) -> ServerBuild:
    """Locate mysqld in a basedir (any build), or the packaged MariaDB when none is given."""
    if basedir:
        base = Path(basedir).expanduser()
        if not base.is_dir():
            raise MallocbenchError(
                f"server basedir {basedir!r} does not exist: give the directory that holds "
                "bin/mysqld (or bin/mariadbd, sbin/mariadbd)"
            )
        dirs = [base / "bin", base / "sbin", base / "libexec", base]
        mysqld = _first_existing([d / b for d in dirs for b in SERVER_BINARIES])
        install_db = _first_existing(
            [
                d / n
                for d in (base / "scripts", base / "bin", base)
                for n in ("mariadb-install-db", "mysql_install_db")
            ]
        )
        if mysqld is None:
            raise MallocbenchError(
                f"no mariadbd or mysqld in {basedir}/bin, /sbin or /libexec: "
                "point basedir at a server installation"
            )
    else:
        mysqld = _first_existing(
            [
                Path(d) / b
                for d in ("/usr/sbin", "/usr/bin", "/usr/local/bin")
                for b in SERVER_BINARIES
            ]
        )
        install_db = shutil.which("mariadb-install-db") or shutil.which("mysql_install_db")
        if mysqld is None:
            raise MallocbenchError(
                "no MariaDB server found: run `make setup` (installs mariadb-server) or "
                "set server.basedir in the experiment"
            )
    version_text = subprocess.run(
        [mysqld, "--version"], capture_output=True, text=True, timeout=30, check=False
    ).stdout
    match = re.search(r"Ver\s+(\S+)", version_text)
    version = match.group(1) if match else "unknown"
    flavor = "mariadb" if "mariadb" in version_text.lower() else "mysql"
    return ServerBuild(mysqld, install_db, version, flavor, basedir)


def initialise_command(build: ServerBuild, datadir: Path, tmpdir: Path) -> list[str]:
    """The command that creates an empty system datadir with this build's own initialiser
    (mariadb-install-db, or mysqld --initialize)."""
    if build.install_db and build.flavor == "mariadb":
        cmd = [
            build.install_db,
            "--no-defaults",
            f"--datadir={datadir}",
            "--auth-root-authentication-method=normal",
            "--skip-test-db",
            "--skip-name-resolve",
            f"--tmpdir={tmpdir}",
        ]
        if build.basedir:
            cmd.append(f"--basedir={build.basedir}")
        return cmd
    # --initialize-insecure leaves root without a password; the init file of every
    # start sets one before any connection is accepted.
    return [build.mysqld, "--no-defaults", "--initialize-insecure", f"--datadir={datadir}"]
