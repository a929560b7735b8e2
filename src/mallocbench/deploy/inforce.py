"""What is in force in a running process: the allocator mapped, and each allocator
setting of its environment, one by one.

GLIBC_TUNABLES holds every glibc tunable in one variable and MALLOC_CONF every jemalloc
option in one: read whole, a deployment of five settings shows as one line, and a grep
for a name finds nothing for four of them. Here each is split into its settings, and
each is judged against the allocator that serves malloc: a glibc.malloc tunable does
nothing under jemalloc, a MALLOC_CONF key nothing under glibc's malloc.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from mallocbench import allocators
from mallocbench.errors import MallocbenchError

# Variables holding several settings: (how settings are separated, how name and value are).
LISTS = {"GLIBC_TUNABLES": (":", "="), "MALLOC_CONF": (",", ":"), "JE_MALLOC_CONF": (",", ":")}
GLIBC_MALLOC = "glibc.malloc."


@dataclass(frozen=True)
class Setting:
    """One setting as the process got it: the variable it is in, its own name (the
    variable's for a variable of one value), its value, whose it is, and whether it acts."""

    variable: str
    name: str
    value: str
    allocator: str
    status: str  # "in force", "not in force", "unknown name", "mapped", "not mapped"
    why: str = ""

    def line(self) -> str:
        head = self.variable if self.name == self.variable else f"{self.variable} {self.name}"
        why = f" ({self.why})" if self.why else ""
        return f"{head}={self.value}: {self.status}{why}"


def read_environ(pid: int) -> dict[str, str]:
    """The environment process `pid` was started with."""
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except (FileNotFoundError, ProcessLookupError):
        raise MallocbenchError(
            f"process {pid} is not running: give a running server's PID"
        ) from None
    except PermissionError:
        raise MallocbenchError(
            f"no permission to read /proc/{pid}/environ: run as the server's user or root"
        ) from None
    except OSError as exc:
        raise MallocbenchError(f"cannot read /proc/{pid}/environ: {exc.strerror}") from None
    return parse_environ(raw)


def parse_environ(raw: bytes) -> dict[str, str]:
    """/proc/PID/environ as a dict, GLIBC_TUNABLES made whole again: ld.so (glibc 2.36
    at least) ends each tunable it takes with a NUL written over the ':' after it, in
    the process's own copy, so the rest of the list reads as variables named glibc.*."""
    env: dict[str, str] = {}
    last = ""
    for item in raw.split(b"\0"):
        text = item.decode(errors="replace")
        if not text:
            continue
        if last == "GLIBC_TUNABLES" and text.startswith("glibc."):
            env[last] += ":" + text
            continue
        last, _, value = text.partition("=")
        env[last] = value
    return env


def _owner(variable: str) -> str | None:
    """The allocator a variable tunes, by the allocators' knob prefixes."""
    for allocator in allocators.builtin_allocators():
        if any(variable.startswith(p) for p in allocator.knob_prefixes):
            return allocator.name
    return None


def split(environ: Mapping[str, str]) -> list[tuple[str, str, str, str]]:
    """(variable, name, value, allocator) of every allocator setting in `environ`; a
    list variable gives one per entry, in its order."""
    out = []
    for variable, value in environ.items():
        owner = _owner(variable)
        if owner is None:
            continue
        if variable not in LISTS:
            out.append((variable, variable, value, owner))
            continue
        between, inside = LISTS[variable]
        for entry in value.split(between):
            if entry:
                name, _, setting = entry.partition(inside)
                out.append((variable, name, setting, owner))
    return out


def _family(name: str) -> str:
    """tcmalloc_minimal reads tcmalloc's variables: one family, as knob_family says."""
    allocator = next((a for a in allocators.builtin_allocators() if a.name == name), None)
    return allocator.knob_family if allocator is not None else name


def judge(
    environ: Mapping[str, str],
    serving: str,
    mapped: list[str],
    known: Callable[[str, str], bool | None] = lambda variable, name: None,
) -> list[Setting]:
    """Each setting of `environ` against `serving`, the allocator that serves malloc,
    and the files `mapped` in the process; `known(variable, name)` says whether the
    serving library reads a name (None: cannot tell)."""
    out = [_preload(lib, mapped) for lib in environ.get("LD_PRELOAD", "").replace(":", " ").split()]
    for variable, name, value, owner in split(environ):
        out.append(_setting(variable, name, value, owner, serving, known))
    return out


def _setting(
    variable: str,
    name: str,
    value: str,
    owner: str,
    serving: str,
    known: Callable[[str, str], bool | None],
) -> Setting:
    if variable == "GLIBC_TUNABLES" and not name.startswith(GLIBC_MALLOC):
        # glibc.pthread.*, glibc.cpu.*: the C library's own, whatever serves malloc
        status = "in force" if known(variable, name) is not False else "unknown name"
        return Setting(variable, name, value, "glibc", status, "not a malloc tunable")
    if _family(owner) != _family(serving):
        why = f"{serving} serves malloc, not {owner}"
        return Setting(variable, name, value, owner, "not in force", why)
    if known(variable, name) is False:
        why = f"the mapped {serving} does not read it, and ignores it"
        return Setting(variable, name, value, owner, "unknown name", why)
    return Setting(variable, name, value, owner, "in force")


def _preload(lib: str, mapped: list[str]) -> Setting:
    real = {os.path.realpath(m) for m in mapped}
    if lib in mapped or os.path.realpath(lib) in real:
        return Setting("LD_PRELOAD", "LD_PRELOAD", lib, "", "mapped")
    return Setting(
        "LD_PRELOAD", "LD_PRELOAD", lib, "", "not mapped",
        "ld.so could not load it (a missing or unreadable file): the server runs without it",
    )  # fmt: skip


def _known_names(serving: str, library: str | None) -> Callable[[str, str], bool | None]:
    """Whether the serving library reads a name, from its own string table."""
    from mallocbench.allocators import knobs

    def known(variable: str, name: str) -> bool | None:
        names: frozenset[str] = frozenset()
        if variable == "GLIBC_TUNABLES":
            names = knobs.glibc_tunables()
        elif variable in LISTS and library and _family(serving) == "jemalloc":
            names = knobs.jemalloc_keys(library)
        return (name in names) if names else None

    return known


@dataclass(frozen=True)
class Change:
    """An allocator variable the unit's files give otherwise than the process has: what
    the next restart changes (`then` None: unset; `source`: the file that sets it)."""

    variable: str
    now: str | None
    then: str | None
    source: str | None

    def line(self) -> str:
        now = "unset now" if self.now is None else f"not {self.now} as now"
        if self.then is None:
            return f"at the next restart {self.variable} is unset ({now})"
        return f"at the next restart {self.variable}={self.then} from {self.source} ({now})"


def next_start(
    environ: Mapping[str, str], service: str, dirs: tuple[str, ...] | None = None
) -> tuple[list[str], list[Change]]:
    """The unit's files as systemd applies them, and each allocator variable they give
    otherwise than `environ`: a leftover recording drop-in, a tuned one not yet
    restarted into, an UnsetEnvironment that takes a preload away."""

    from mallocbench.deploy import systemd

    paths = systemd.unit_files(service, dirs or systemd.UNIT_DIRS)
    then = systemd.unit_environment(paths)
    names = [v for v in dict.fromkeys([*environ, *then]) if v == "LD_PRELOAD" or _owner(v)]
    changes = []
    for name in names:
        if environ.get(name) == then.get(name):
            continue
        source = next((str(p) for p in reversed(paths) if name in systemd.dropin_environment(p)),
                      None)  # fmt: skip
        changes.append(Change(name, environ.get(name), then.get(name), source))
    return [str(p) for p in paths], changes


@dataclass
class InForce:
    pid: int
    exe: str
    allocator: str
    library: str | None
    shim: str | None
    shim_status: str  # the shim's last answer in its control file's .status, if any
    launch: dict[str, Any]
    settings: list[Setting]
    unit_files: list[str] = field(default_factory=list)  # systemd's, in the order applied
    changes: list[Change] = field(default_factory=list)  # what the next restart changes

    def lines(self) -> list[str]:
        lib = f" ({self.library})" if self.library else ""
        shim = f"loaded ({self.shim})" if self.shim else "not loaded"
        if self.shim and self.shim_status:
            shim += f", its last status: {self.shim_status}"
        reasons = "; ".join(self.launch["reasons"])
        out = [
            f"process {self.pid} ({self.exe}): malloc is {self.allocator}'s{lib}",
            f"started as {self.launch['form']}: {reasons}",
            f"recording shim: {shim}",
        ]
        out += [s.line() for s in self.settings]
        if not self.settings:
            out.append("no allocator setting in its environment: every default is in force")
        if self.unit_files:
            out.append(f"{self.launch['service']}.service, as applied: "
                       + ", ".join(self.unit_files))  # fmt: skip
            out += [c.line() for c in self.changes]
            if not self.changes:
                out.append("at the next restart: the same allocator settings")
        return out

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["settings"] = [asdict(s) for s in self.settings]
        data["changes"] = [asdict(c) for c in self.changes]
        return data


def check(pid: int, status_of: Callable[[int], str] | None = None) -> InForce:
    """What is in force in process `pid`; `status_of` reads the shim's status, when it
    is loaded (replay.control's, which reads this module's environ)."""
    from mallocbench.deploy import launch
    from mallocbench.native import SHIM

    environ = read_environ(pid)
    mapped = allocators.mapped_libraries(pid)
    serving = allocators.detect(pid)
    library = serving.path if serving.name != "glibc" else None
    started = launch.detect(pid)
    try:
        exe = os.readlink(f"/proc/{pid}/exe")
    except OSError:
        exe = "?"
    shim = next((m for m in mapped if os.path.basename(m) == SHIM), None)
    files: list[str] = []
    changes: list[Change] = []
    if started.service is not None:
        files, changes = next_start(environ, started.service)
    return InForce(
        unit_files=files,
        changes=changes,
        pid=pid,
        exe=exe,
        allocator=serving.name,
        library=serving.path,
        shim=shim,
        shim_status=status_of(pid) if shim and status_of else "",
        launch={
            "form": started.form,
            "reasons": list(started.reasons),
            "service": started.service,
        },  # fmt: skip
        settings=judge(environ, serving.name, mapped, _known_names(serving.name, library)),
    )
