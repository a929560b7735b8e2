"""A private PostgreSQL server's settings: the harness's own, the experiment's, checked
against the server's own list before anything is started or loaded.

`postgres --describe-config` prints every setting the build knows, with its type and
bounds, without a data directory; an unknown name is refused in one line with the
nearest known one. Values the server would refuse at start (a bad enum, text) are left
to it: it stops with a FATAL line that the start error carries.
"""

from __future__ import annotations

import functools
import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass

from mallocbench.errors import MallocbenchError, did_you_mean
from mallocbench.servers.postgresql.build import PgBuild

# What makes the server private and findable: the experiment may not move it.
HARNESS_OWNED = (
    "data_directory",
    "config_file",
    "hba_file",
    "ident_file",
    "external_pid_file",
    "listen_addresses",
    "port",
    "unix_socket_directories",
    "unix_socket_group",
    "unix_socket_permissions",
    "logging_collector",
    "log_destination",
)
_BOOLEAN = ("on", "off", "true", "false", "yes", "no", "1", "0")
_UNITS = ("B", "kB", "MB", "GB", "TB", "us", "ms", "s", "min", "h", "d")
_INTEGER = re.compile(r"-?\d+\s*(" + "|".join(_UNITS) + r")?")
_REAL = re.compile(r"-?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?\s*(" + "|".join(_UNITS) + r")?")


@dataclass(frozen=True)
class Described:
    """One setting as the server describes it."""

    name: str
    context: str  # postmaster, sighup, user, ...: when a change takes effect
    vartype: str  # BOOLEAN, INTEGER, REAL, ENUM, STRING
    minimum: str
    maximum: str


@functools.lru_cache(maxsize=8)
def describe_config(bindir: str) -> dict[str, Described]:
    """The build's settings by name (the server prints them without a data directory)."""
    out = subprocess.run(
        [f"{bindir}/postgres", "--describe-config"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd="/",
    )
    if out.returncode != 0:
        first = (out.stderr.strip().splitlines() or ["no output"])[0]
        raise MallocbenchError(
            f"{bindir}/postgres --describe-config failed ({first}): check the server build"
        )
    described = {}
    for line in out.stdout.splitlines():
        fields = line.split("\t")
        if len(fields) >= 7:
            name, context, _, vartype, _, low, high = fields[:7]
            described[name] = Described(name, context, vartype, low, high)
    return described


def value_text(value: object) -> str:
    """A TOML value as postgresql.conf takes it (TOML booleans are on/off there)."""
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_$]*(\.[A-Za-z_][A-Za-z0-9_$]*)?")


def check_setting(name: str, value: str, known: Mapping[str, Described]) -> None:
    """Refuse, in one line, a name the server does not know or a value of the wrong kind."""
    # Both go into postgresql.conf as one line: a name that is no identifier, or a line
    # break in a value, would write a line of its own.
    if not _NAME.fullmatch(name):
        raise MallocbenchError(
            f"PostgreSQL setting name {name!r} is not a setting's name: give letters, digits "
            "and underscores (an extension's as extension.name)"
        )
    if any(ch in value for ch in "\n\r\0"):
        raise MallocbenchError(
            f"PostgreSQL setting {name} has a line break in its value: give it on one line"
        )
    if name in HARNESS_OWNED:
        raise MallocbenchError(
            f"server setting {name!r} is set by mallocbench (a private server listens on "
            "its own socket only and logs where the harness reads): remove it"
        )
    if "." in name:
        # A custom setting (extension.name): PostgreSQL accepts any, as placeholders.
        return
    described = known.get(name)
    if described is None:
        raise MallocbenchError(
            f"unknown PostgreSQL setting {name!r}{did_you_mean(name, known)}: see "
            "`postgres --describe-config` for the names this build knows"
        )
    text = value.strip()
    kind = described.vartype
    if (
        (kind == "BOOLEAN" and text.lower() not in _BOOLEAN)
        or (kind == "INTEGER" and not _INTEGER.fullmatch(text))
        or (kind == "REAL" and not _REAL.fullmatch(text))
    ):
        raise MallocbenchError(
            f"PostgreSQL setting {name} = {value!r} is not a {kind.lower()}: give "
            + ("on or off" if kind == "BOOLEAN" else "a number, optionally with a unit (64MB)")
        )


def check_settings(build: PgBuild, asked: Mapping[str, object]) -> None:
    """Every setting an experiment gives, checked before any data directory is made."""
    known = describe_config(build.bindir)
    for name, value in asked.items():
        check_setting(name, value_text(value), known)


def quoted(value: str) -> str:
    """A postgresql.conf string literal: single quotes, an embedded one doubled."""
    return "'" + value.replace("\\", "\\\\").replace("'", "''") + "'"


def render(settings: Mapping[str, str]) -> str:
    lines = ["# Written by mallocbench for one private server; not read by any system service."]
    lines.extend(f"{name} = {quoted(value)}" for name, value in settings.items())
    return "\n".join(lines) + "\n"


def render_hba(role: str) -> str:
    """Only the run's own role, only over the socket, only with its password: every other
    connection matches no line and is refused."""
    return (
        "# Written by mallocbench: the run's own role over the Unix socket, nobody else.\n"
        f"local all {role} scram-sha-256\n"
    )
