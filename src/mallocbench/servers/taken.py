"""Whether a started server took the settings it was given.

A server that cannot load a plugin from `plugin_load_add` logs it and starts anyway,
and a `loose-` key it does not know is dropped with a warning: the setup would then be
measured under its name without what makes it that setup. So once the server answers,
what it runs with (SHOW GLOBAL VARIABLES, information_schema.PLUGINS) is compared with
what it was asked for, and a setting it did not take fails the start.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from mallocbench.servers.options import OPTION_PREFIXES, option_key

PLUGIN_OPTIONS = ("plugin_load", "plugin_load_add")
# A number as my.cnf takes it: 4M is 4 MiB (the server's suffixes are powers of 1024).
_NUMBER = re.compile(r"(\d+)([kmgtpe]?)", re.IGNORECASE)
_SCALE = {"": 0, "k": 1, "m": 2, "g": 3, "t": 4, "p": 5, "e": 6}
_TRUE, _FALSE = ("1", "on", "true", "yes"), ("0", "off", "false", "no")


@dataclass(frozen=True)
class NotTaken:
    """A setting the server runs without, and the word its error log would say it by."""

    text: str
    word: str


@dataclass(frozen=True)
class Plugin:
    name: str
    library: str | None  # None: built into the server
    status: str  # ACTIVE, DISABLED, INACTIVE, ...


def _libraries(value: str) -> list[str]:
    """The libraries of a plugin-load value: `name=lib.so;lib2`, each as the server
    names it in information_schema.PLUGINS (with .so)."""
    found = []
    for item in value.split(";"):
        library = item.rpartition("=")[2].strip()
        if library:
            found.append(library if library.endswith(".so") else f"{library}.so")
    return found


def _unloaded(key: str, value: str, plugins: list[Plugin]) -> list[NotTaken]:
    active = {p.library for p in plugins if p.status == "ACTIVE" and p.library}
    return [
        NotTaken(f"{key} = {value}: the server did not load {library}", library.removesuffix(".so"))
        for library in _libraries(value)
        if library not in active
    ]


def _ignored(key: str, value: str, variables: Mapping[str, str]) -> NotTaken | None:
    """Why a `loose-` key was dropped, or None when the server has its variable.

    Without `loose-` an unknown key stops the server, so only loose keys can be dropped
    silently; a key that is no variable (plugin_load_add, skip_grant_tables) is an
    option the server read at start, and a shortened name is the variable it begins."""
    name = option_key(key)
    if not name.startswith("loose_"):
        return None
    name = name.removeprefix("loose_").rsplit(".", 1)[-1]
    spellings = {name} | {name.removeprefix(p) for p in OPTION_PREFIXES if name.startswith(p)}
    if any(sum(1 for v in variables if v.startswith(s)) >= 1 for s in spellings):
        return None
    return NotTaken(f"{key} = {value}: the server has no such variable and ignored it", key)


def not_taken(
    asked: Mapping[str, str], variables: Mapping[str, str], plugins: list[Plugin]
) -> list[NotTaken]:
    """What of `asked` (my.cnf keys and values) the running server does not have."""
    problems: list[NotTaken] = []
    lowered = {option_key(k): v for k, v in variables.items()}
    for key, value in asked.items():
        if option_key(key).removeprefix("loose_") in PLUGIN_OPTIONS:
            problems.extend(_unloaded(key, value, plugins))
            continue
        problem = _ignored(key, value, lowered)
        if problem is not None:
            problems.append(problem)
    return problems


def _as_number(text: str) -> int | None:
    match = _NUMBER.fullmatch(text.strip())
    if match is None:
        return None
    return int(match.group(1)) * 1024 ** _SCALE[match.group(2).lower()]


def _as_switch(text: str) -> bool | None:
    lowered = text.strip().lower()
    return True if lowered in _TRUE else False if lowered in _FALSE else None


def adjusted(asked: Mapping[str, str], variables: Mapping[str, str]) -> list[str]:
    """The numbers and switches of `asked` the server runs with another value of: it
    clamps a value out of range and rounds some to a block size, and starts anyway.
    Text values (lists, modes) are left alone: the server may spell them otherwise."""
    lowered = {option_key(k): v for k, v in variables.items()}
    changed = []
    for key, value in asked.items():
        running = lowered.get(option_key(key).removeprefix("loose_"))
        if running is None:
            continue  # an option, not a variable (skip_x, plugin_load_add): nothing to read
        for parse in (_as_number, _as_switch):
            wanted, got = parse(value), parse(running)
            if wanted is not None and got is not None:
                if wanted != got:
                    changed.append(f"{key} = {value} runs as {running}")
                break
    return changed
