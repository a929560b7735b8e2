"""A deployment as every form writes it: the setup's environment and preload, the snippet
of each form, and the library path a production server can rely on.
"""

from __future__ import annotations

import os
import re
from dataclasses import asdict, dataclass, field
from typing import Any

from mallocbench import allocators
from mallocbench.allocators.base import LIB_DIRS, Allocator
from mallocbench.deploy.install import DEFAULT_PREFIX, installed_shim
from mallocbench.errors import MallocbenchError
from mallocbench.model.results import SetupInfo

SYSTEMD_DIR = "/etc/systemd/system"


# systemd reads a unit's drop-ins in name order and the last Environment= of a variable
# wins: the recording one sorts before every other (digits before letters), so a tuned
# drop-in (mallocbench-SETUP.conf) left beside it decides LD_PRELOAD.
RECORD_DROPIN = "00-mallocbench-record.conf"


# The name record's drop-in had before; `remove_dropins` takes it away too.
OLD_RECORD_DROPIN = "mbrecord.conf"


RECORD_MARK = "mallocbench recording shim"


# Where `mallocbench install-shim` puts the shim: readable by a unit with ProtectHome=.
INSTALLED_SHIM_DIR = str(installed_shim(DEFAULT_PREFIX).parent)


# The snippets each form of `--form` (launch.FORMS, in its order) prints.
FORM_SNIPPETS: dict[str, tuple[str, ...]] = {
    "systemd": ("systemd",),
    "mysqld_safe": ("mysqld_safe", "etc_default"),
    "env": ("env",),
    "docker": ("compose",),
    "kubernetes": ("kubernetes",),
}


DEFAULT_SOCKET = "/run/mysqld/mysqld.sock"


ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


# Characters systemd takes literally in an unquoted Environment= word; anything else
# (spaces, quotes, backslashes, non-ASCII) goes inside double quotes.
SYSTEMD_PLAIN = re.compile(r"[A-Za-z0-9_./:,=+@-]*")


_SERVICE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9:_.@-]*")


CONTROL = re.compile(r"[\x00-\x1f\x7f]")


OTHER_ALLOCATORS = r"lib(jemalloc|tcmalloc|mimalloc)"


@dataclass(frozen=True)
class Snippet:
    """One piece of configuration: its text and where it goes."""

    kind: str  # systemd, mysqld_safe, etc_default, env, compose, kubernetes, mycnf
    title: str
    text: str
    language: str  # for a fenced code block: ini, sh, yaml
    path: str | None = None  # where the text goes, when it is a file of its own
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["notes"] = list(self.notes)
        return data


@dataclass
class Deployment:
    """A setup made deployable: the environment to give the server, in every form."""

    setup: SetupInfo
    service: str
    environment: dict[str, str]  # what the server's environment must contain
    preload: str | None  # the LD_PRELOAD library (None: glibc's malloc, nothing to load)
    package: str | None  # the Debian package that ships the library, when one does
    snippets: dict[str, Snippet] = field(default_factory=dict)
    verify: list[str] = field(default_factory=list)  # shell lines to run after a restart
    notes: list[str] = field(default_factory=list)
    shim: str | None = None  # the recording shim, preloaded in front of `preload`

    @property
    def forms(self) -> list[str]:
        """The forms (FORM_SNIPPETS) this deployment has a snippet for."""
        return [f for f, kinds in FORM_SNIPPETS.items() if any(k in self.snippets for k in kinds)]

    @property
    def dropin_relpath(self) -> str:
        """`<service>.service.d/mallocbench-<setup>.conf` (the recording's sorts first),
        relative to a unit directory."""
        if self.shim is not None:
            return f"{self.service}.service.d/{RECORD_DROPIN}"
        return f"{self.service}.service.d/mallocbench-{file_part(self.setup.name)}.conf"

    def to_dict(self) -> dict[str, Any]:
        return {
            "setup": asdict(self.setup),
            "service": self.service,
            "environment": dict(self.environment),
            "preload": self.preload,
            "package": self.package,
            "dropin": f"{SYSTEMD_DIR}/{self.dropin_relpath}",
            "snippets": {kind: s.to_dict() for kind, s in self.snippets.items()},
            "verify": list(self.verify),
            "notes": list(self.notes),
        }


def check_assignment(name: str, value: str) -> None:
    if not ENV_NAME.fullmatch(name):
        raise MallocbenchError(
            f"{name!r} is not an environment variable name: use letters, digits and '_', "
            "not starting with a digit"
        )
    if CONTROL.search(value):
        raise MallocbenchError(
            f"{name} has a newline or other control character in its value: a unit file "
            "takes one line per setting, so give the value on one line"
        )


def _registry_entry(name: str) -> Allocator | None:
    return next(
        (a for a in allocators.builtin_allocators() if name == a.name or name in a.aliases),
        None,
    )


def stable_library_path(path: str, allocator: Allocator | None) -> str:
    """The soname link for a packaged library, so a package upgrade does not break it.

    The registry resolves links (libtcmalloc.so.4 -> libtcmalloc.so.4.5.10); a preload
    of the versioned file fails after an upgrade, and ld.so then only warns and starts
    the server on glibc's malloc.
    """
    if allocator is None or not os.path.isfile(path):
        return path
    real = os.path.realpath(path)
    for name in allocator.library_names:
        candidate = os.path.join(os.path.dirname(path), name)
        if os.path.isfile(candidate) and os.path.realpath(candidate) == real:
            return candidate
    return path


def packaged(path: str, allocator: Allocator | None) -> bool:
    """The library is the one the registry's Debian package installs (not a custom build)."""
    if allocator is None or allocator.debian_package is None:
        return False
    return os.path.dirname(path) in LIB_DIRS and allocator.is_mapped_path(path)


def check_preload(path: str) -> None:
    if not os.path.isabs(path):
        raise MallocbenchError(
            f"the allocator library {path!r} is not an absolute path: LD_PRELOAD in a "
            "service needs the full path of the .so"
        )
    if re.search(r"[\s:]", path):
        raise MallocbenchError(
            f"the allocator library path {path!r} contains a space or colon, where ld.so "
            "splits LD_PRELOAD: link or copy the library to a plain path"
        )


def resolve_library(setup: SetupInfo) -> tuple[str | None, Allocator | None]:
    """The library to preload (None for glibc) and its registry entry, if any."""
    entry = _registry_entry(setup.allocator)
    if entry is not None and entry.is_builtin:
        return None, entry  # allocator_library is then libc itself: nothing to load
    path = setup.allocator_library or (entry.path if entry is not None else None)
    if path is None:
        hint = entry.install_hint() if entry is not None else "record the .so path"
        raise MallocbenchError(
            f"setup {setup.name}: no library is known for allocator {setup.allocator} "
            f"(none recorded, none installed here): {hint}"
        )
    return stable_library_path(path, entry), entry


def comment(text: str) -> str:
    return CONTROL.sub("?", text)


def describe(setup: SetupInfo, preload: str | None) -> str:
    version = f" {setup.allocator_version}" if setup.allocator_version else ""
    where = f", {preload}" if preload else ""
    return comment(f'setup "{setup.name}" ({setup.allocator}{version}{where})')


def what_it_runs(d: Deployment) -> str:
    if d.shim is None:
        return describe(d.setup, d.preload)
    front = f" in front of {d.preload}" if d.preload else ""
    return f"the {RECORD_MARK}{front}; it records nothing until `mallocbench record` arms it"


def file_part(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "-", name).lstrip(".") or "setup"


def service_name(service: str) -> str:
    name = service.removesuffix(".service")
    if not _SERVICE_NAME.fullmatch(name):
        raise MallocbenchError(
            f"{service!r} is not a systemd service name: give e.g. mariadb or mysql"
        )
    return name


def environment(setup: SetupInfo, preload: str | None) -> dict[str, str]:
    env = {"LD_PRELOAD": preload} if preload else {}
    env.update({k: str(v) for k, v in setup.knobs.items()})  # as the run applied them
    try:
        for name, value in env.items():
            check_assignment(name, value)
        if "LD_PRELOAD" in env:
            check_preload(env["LD_PRELOAD"])
    except MallocbenchError as exc:
        raise MallocbenchError(f"setup {setup.name}: {exc}") from None
    return env
