"""What every allocator entry knows: where its library lives, its version, its knobs."""

from __future__ import annotations

import functools
import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from mallocbench.allocators.knobs import Knob

LIB_DIRS = (
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib64",
    "/usr/lib",
    "/usr/local/lib",
    "/lib/x86_64-linux-gnu",
)


@dataclass(frozen=True)
class Allocator:
    """One malloc implementation that a process can be started under.

    `library` is the shared object to LD_PRELOAD (None for glibc, which is always there);
    `soname_pattern` recognises it in /proc/PID/maps; `knob_prefixes` are the environment
    variables that tune it, so a setup's knobs can be checked against the allocator;
    `knobs` is its catalogue (allocators/knobs.py), `knob_family` says how the installed
    library is searched for the names it reads.
    """

    name: str
    description: str
    library_names: tuple[str, ...] = ()
    debian_package: str | None = None
    soname_pattern: str | None = None
    knob_prefixes: tuple[str, ...] = ()
    custom_path: str | None = None
    aliases: tuple[str, ...] = field(default=())
    knob_family: str = ""
    knobs: tuple[Knob, ...] = ()

    @property
    def is_builtin(self) -> bool:
        return not self.library_names and self.custom_path is None

    @functools.cached_property
    def path(self) -> str | None:
        """The library file to preload, or None when not installed (or glibc)."""
        if self.custom_path is not None:
            return self.custom_path if os.path.isfile(self.custom_path) else None
        if self.is_builtin:
            return glibc_path()
        for directory in LIB_DIRS:
            for lib in self.library_names:
                candidate = Path(directory) / lib
                if candidate.is_file():
                    return str(candidate.resolve())
        return None

    @property
    def available(self) -> bool:
        return self.path is not None

    @functools.cached_property
    def version(self) -> str | None:
        if self.is_builtin:
            return glibc_version()
        if self.debian_package:
            version = dpkg_version(self.debian_package)
            if version:
                return version
        if self.path:
            match = re.search(r"\.so\.([0-9][0-9.]*)$", self.path)
            if match:
                return match.group(1)
        return None

    def preload(self) -> str | None:
        """The LD_PRELOAD value for this allocator (None: run with the C library's malloc)."""
        return None if self.is_builtin else self.path

    def install_hint(self) -> str:
        if self.custom_path is not None:
            return f"check the path {self.custom_path!r}"
        if self.debian_package:
            return f"install it with: apt-get install {self.debian_package}"
        return "it is part of the C library"

    def is_mapped_path(self, mapped: str) -> bool:
        """True when a path seen in /proc/PID/maps is this allocator's library."""
        if self.custom_path is not None:
            return os.path.realpath(mapped) == os.path.realpath(self.custom_path)
        if self.soname_pattern is None:
            return False
        return re.search(self.soname_pattern, os.path.basename(mapped)) is not None

    def to_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "description": self.description,
            "version": self.version,
            "path": self.path,
            "available": self.available,
            "debian_package": self.debian_package,
            "knob_prefixes": list(self.knob_prefixes),
        }


@functools.cache
def glibc_version() -> str | None:
    try:
        value = os.confstr("CS_GNU_LIBC_VERSION")
    except (ValueError, OSError):
        return None
    return value.split()[-1] if value else None


@functools.cache
def glibc_path() -> str | None:
    for directory in LIB_DIRS:
        candidate = Path(directory) / "libc.so.6"
        if candidate.is_file():
            return str(candidate.resolve())
    return None


@functools.cache
def dpkg_version(package: str) -> str | None:
    try:
        out = subprocess.run(
            ["dpkg-query", "-W", "-f=${Version}", package],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None
