"""Registry of allocators: discover, version, preload environment, verify in /proc/PID/maps.

Each allocator is one module beside this file exposing `ALLOCATOR`; add a module and list
it in `_MODULES` to register a new one. Any other shared object is accepted by path.
"""

from __future__ import annotations

import importlib
import os
import re
from dataclasses import dataclass

from mallocbench.allocators.base import Allocator
from mallocbench.allocators.elf import check_allocator_library
from mallocbench.errors import MallocbenchError, did_you_mean

_MODULES = ("glibc", "jemalloc", "tcmalloc", "tcmalloc_minimal", "mimalloc")


def builtin_allocators() -> list[Allocator]:
    return [importlib.import_module(f"mallocbench.allocators.{m}").ALLOCATOR for m in _MODULES]


def names() -> list[str]:
    return [a.name for a in builtin_allocators()]


def is_custom_spec(spec: str) -> bool:
    return "/" in spec or spec.endswith(".so") or ".so." in spec


# A knob's value may hold commas (MALLOC_CONF=narenas:2,dirty_decay_ms:0), as in --set.
_KNOB = re.compile(r"\s*[A-Za-z_][A-Za-z0-9_]*\s*=")


def split_list(text: str) -> list[str]:
    """--allocators' setups: `glibc,jemalloc:MALLOC_CONF=narenas:2,dirty_decay_ms:0` is
    glibc and one jemalloc setup with one knob.

    After a setup with knobs, a comma starts another setup only before an allocator's
    name, alias or library path; before KNOB= or anything else it stays in that setup,
    so its knobs split as --set splits them.
    """
    known = {n for a in builtin_allocators() for n in (a.name, *a.aliases)}
    setups: list[str] = []
    for piece in text.split(","):
        head = piece.partition(":")[0].strip()
        starts = head in known or is_custom_spec(head)
        if setups and not starts and "=" in setups[-1].partition(":")[2]:
            setups[-1] += "," + piece
        elif piece.strip():
            setups.append(piece.strip())
    return setups


def get(spec: str, require_available: bool = True) -> Allocator:
    """Resolve a name, alias or library path to an allocator.

    Raises MallocbenchError naming the fix when the name is unknown, the path does not
    exist, or (with require_available) the library is not installed.
    """
    if is_custom_spec(spec):
        path = os.path.abspath(os.path.expanduser(spec))
        _check_preloadable(spec, path)
        if not os.path.isfile(path):
            raise MallocbenchError(
                f"allocator library {spec!r} does not exist: give the path of a malloc "
                "shared object (e.g. /usr/local/lib/libjemalloc.so.2)"
            )
        check_allocator_library(path)
        base = os.path.basename(path)
        return Allocator(
            name=base.split(".so")[0].removeprefix("lib") or base,
            description=f"custom library {path}",
            custom_path=path,
        )
    for allocator in builtin_allocators():
        if spec == allocator.name or spec in allocator.aliases:
            if require_available and not allocator.available:
                raise MallocbenchError(
                    f"allocator {allocator.name!r} is not installed: {allocator.install_hint()}"
                )
            return allocator
    known = [n for a in builtin_allocators() for n in (a.name, *a.aliases)]
    raise MallocbenchError(
        f"unknown allocator {spec!r}{did_you_mean(spec, known)}: use one of "
        f"{', '.join(names())} or a path to a .so file"
    )


def _check_preloadable(spec: str, path: str) -> None:
    """LD_PRELOAD splits its list at spaces and colons, so a library whose path holds
    one would be preloaded as pieces that do not exist (the loader says so on stderr
    and the server runs with glibc's malloc)."""
    separator = next((c for c in path if c in " :"), None)
    if separator is not None:
        what = "a space" if separator == " " else "a colon"
        raise MallocbenchError(
            f"allocator library {spec!r} has {what} in its path, which LD_PRELOAD cannot "
            "carry (it separates libraries there): copy or link the library to a path "
            "without one, e.g. /usr/local/lib/libmalloc.so"
        )


def mapped_libraries(pid: int) -> list[str]:
    """Paths of all files mapped into a process (from /proc/PID/maps), in first-seen order."""
    seen: dict[str, None] = {}
    try:
        with open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as maps:
            for line in maps:
                parts = line.split(maxsplit=5)
                if len(parts) == 6 and parts[5].startswith("/"):
                    seen.setdefault(parts[5].strip().removesuffix(" (deleted)"), None)
    except (FileNotFoundError, ProcessLookupError) as exc:
        raise MallocbenchError(f"process {pid} is gone: cannot read its memory maps") from exc
    except PermissionError as exc:
        raise MallocbenchError(
            f"no permission to read /proc/{pid}/maps: run as the server's user or root"
        ) from exc
    return list(seen)


@dataclass(frozen=True)
class MappedAllocator:
    name: str
    path: str | None


def detect(pid: int) -> MappedAllocator:
    """Which allocator a running process uses, judged by the libraries it has mapped."""
    libs = mapped_libraries(pid)
    for allocator in builtin_allocators():
        if allocator.is_builtin:
            continue
        for lib in libs:
            if allocator.is_mapped_path(lib):
                return MappedAllocator(allocator.name, lib)
    libc = next((lib for lib in libs if os.path.basename(lib).startswith("libc.so")), None)
    return MappedAllocator("glibc", libc)


def verify(allocator: Allocator, pid: int) -> str:
    """Check that `pid` really runs under `allocator`; return the library path seen mapped.

    A preload that silently failed (wrong path, setuid binary, a build linked against
    another malloc) would otherwise measure the wrong allocator under the right name.
    """
    libs = mapped_libraries(pid)
    if allocator.is_builtin:
        others = [
            lib
            for lib in libs
            for other in builtin_allocators()
            if not other.is_builtin and other.is_mapped_path(lib)
        ]
        if others:
            raise MallocbenchError(
                f"process {pid} should use glibc malloc but has {others[0]} mapped: "
                "check LD_PRELOAD in the environment and the server's malloc-lib setting"
            )
        libc = next((lib for lib in libs if os.path.basename(lib).startswith("libc.so")), None)
        return libc or "libc"
    for lib in libs:
        if allocator.is_mapped_path(lib):
            return lib
    raise MallocbenchError(
        f"allocator {allocator.name} was requested but {allocator.path} is not mapped in "
        f"process {pid}: the preload did not take effect, so nothing was measured"
    )


def knob_allocator_mismatch(allocator: Allocator, knobs: dict[str, str]) -> list[str]:
    """Knobs that belong to a different allocator than the one chosen (likely a typo)."""
    foreign = []
    for key in knobs:
        owners = [
            a.name for a in builtin_allocators() if any(key.startswith(p) for p in a.knob_prefixes)
        ]
        if owners and allocator.name not in owners and allocator.custom_path is None:
            foreign.append(f"{key} (a {'/'.join(owners)} knob)")
    return foreign


__all__ = [
    "Allocator",
    "MappedAllocator",
    "builtin_allocators",
    "detect",
    "get",
    "is_custom_spec",
    "knob_allocator_mismatch",
    "mapped_libraries",
    "names",
    "verify",
]
