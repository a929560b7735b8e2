"""The knob catalogue: what each allocator can be tuned with, how, and whether the
installed version knows it.

A knob's availability is read from the installed library, never assumed from a version
number: glibc's tunables from `ld.so --list-tunables` (or, on older loaders, the names in
its string table), jemalloc's MALLOC_CONF keys from its `opt.*` names, gperftools' and
mimalloc's variables from the names in the shared object. A catalogue entry the library
does not contain is shown as unavailable and refused; a name the library contains but
the catalogue omits is accepted as a raw knob, since the library will read it.
"""

from __future__ import annotations

import functools
import glob
import re
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal, Protocol

from mallocbench.errors import MallocbenchError, did_you_mean

Kind = Literal["int", "float", "bool", "size", "duration", "enum"]
# How a knob reaches the allocator: a key of MALLOC_CONF, a glibc tunable inside
# GLIBC_TUNABLES, or an environment variable of its own.
Channel = Literal["MALLOC_CONF", "GLIBC_TUNABLES", "env"]

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


@dataclass(frozen=True)
class Knob:
    """One tunable parameter: `name` is what a setting {knob: value} uses; `key` is the
    spelling inside its channel (MALLOC_CONF key, tunable name, variable name)."""

    name: str
    kind: Kind
    default: str
    channel: Channel
    key: str
    unit: str = ""
    low: float | None = None
    high: float | None = None
    choices: tuple[str, ...] = ()
    legacy_env: str | None = None  # glibc's older MALLOC_*_ spelling of a tunable
    note: str = ""

    @property
    def passed_as(self) -> str:
        if self.channel == "MALLOC_CONF":
            return f"MALLOC_CONF={self.key}:VALUE"
        if self.channel == "GLIBC_TUNABLES":
            legacy = f" (or {self.legacy_env}=VALUE)" if self.legacy_env else ""
            return f"GLIBC_TUNABLES={self.key}=VALUE{legacy}"
        return f"{self.key}=VALUE"

    def range_text(self) -> str:
        if self.kind == "bool":
            return "true/false"
        if self.choices:
            return "/".join(self.choices)
        low = "" if self.low is None else _number_text(self.low)
        high = "" if self.high is None else _number_text(self.high)
        return f"{low}..{high}" if low or high else "-"

    def to_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "type": self.kind,
            "default": self.default,
            "unit": self.unit,
            "min": self.low,
            "max": self.high,
            "choices": list(self.choices),
            "range": self.range_text(),
            "channel": self.channel,
            "key": self.key,
            "legacy_env": self.legacy_env,
            "passed_as": self.passed_as,
            "note": self.note,
        }

    def normalise(self, value: object) -> str:
        """The value as the allocator reads it, or MallocbenchError naming the range."""
        text = str(value).strip().lower() if isinstance(value, bool) else str(value).strip()
        where = f"knob {self.name} = {value!r}"
        if self.kind == "bool":
            return self._bool(text, where)
        if self.kind == "enum":
            if text not in self.choices:
                raise MallocbenchError(
                    f"{where} is invalid{did_you_mean(text, self.choices)}: "
                    f"use one of {', '.join(self.choices)}"
                )
            return text
        number = self._number(text, where)
        if (self.low is not None and number < self.low) or (
            self.high is not None and number > self.high
        ):
            raise MallocbenchError(f"{where} is out of range: give {self.range_text()}")
        return f"{number:g}" if self.kind == "float" else str(int(number))

    def _bool(self, text: str, where: str) -> str:
        lowered = text.lower()
        if lowered not in _TRUE | _FALSE:
            raise MallocbenchError(f"{where} is not a boolean: write true or false")
        on = lowered in _TRUE
        if self.channel == "MALLOC_CONF":
            return "true" if on else "false"
        return "1" if on else "0"

    def _number(self, text: str, where: str) -> float:
        if self.kind == "size" and not re.fullmatch(r"-?\d+", text):
            from mallocbench.units import parse_size

            return float(parse_size(text, where.removesuffix(f" = {text!r}")))
        try:
            number = float(text) if self.kind == "float" else float(int(text, 0))
        except ValueError:
            hint = "a number" if self.kind == "float" else f"a whole number{self._unit_hint()}"
            raise MallocbenchError(f"{where} is not {hint}: give {self.range_text()}") from None
        return number

    def _unit_hint(self) -> str:
        return f" of {self.unit}" if self.unit else ""


def _number_text(value: float) -> str:
    return str(int(value)) if value == int(value) else f"{value:g}"


def glibc(name: str, kind: Kind, default: str, **extra: object) -> Knob:
    return Knob(name, kind, default, "GLIBC_TUNABLES", f"glibc.malloc.{name}", **extra)  # type: ignore[arg-type]


def conf(name: str, kind: Kind, default: str, **extra: object) -> Knob:
    return Knob(name, kind, default, "MALLOC_CONF", name, **extra)  # type: ignore[arg-type]


def env(name: str, variable: str, kind: Kind, default: str, **extra: object) -> Knob:
    return Knob(name, kind, default, "env", variable, **extra)  # type: ignore[arg-type]


class Allocator(Protocol):
    """What of an allocator entry (base.Allocator) the catalogue reads; base imports
    this module for Knob, so it is described here rather than imported."""

    @property
    def name(self) -> str: ...
    @property
    def path(self) -> str | None: ...
    @property
    def version(self) -> str | None: ...
    @property
    def custom_path(self) -> str | None: ...
    @property
    def knob_family(self) -> str: ...
    @property
    def knobs(self) -> tuple[Knob, ...]: ...


# -- what the installed library knows ---------------------------------------------------

_LOADERS = ("/lib64/ld-linux-x86-64.so.2", "/lib/ld-linux-aarch64.so.1")


@functools.cache
def _library_bytes(path: str) -> bytes:
    try:
        with open(path, "rb") as library:
            return library.read()
    except OSError:
        return b""


def contains_name(path: str | None, name: str) -> bool:
    """Whether `name` is a whole string in the library's data (NUL on both sides, or
    after a dot, since names share storage with longer ones such as "opt.narenas")."""
    if not path:
        return False
    data = _library_bytes(path)
    token = name.encode()
    return any(data.find(prefix + token + b"\0") >= 0 for prefix in (b"\0", b"."))


@functools.cache
def loader_path() -> str | None:
    for candidate in (*_LOADERS, *sorted(glob.glob("/lib*/ld-linux*.so*"))):
        if _library_bytes(candidate):
            return candidate
    return None


@functools.cache
def glibc_tunables() -> frozenset[str]:
    """Tunable names the dynamic loader knows: its own list when it can print one
    (glibc 2.33+), else the glibc.* names in its string table."""
    loader = loader_path()
    if loader is None:
        return frozenset()
    try:
        out = subprocess.run(
            [loader, "--list-tunables"], capture_output=True, text=True, timeout=10, check=False
        )
        listed = re.findall(r"^(glibc\.[\w.]+):", out.stdout, re.MULTILINE)
    except (OSError, subprocess.TimeoutExpired):
        listed = []
    if listed:
        return frozenset(listed)
    return frozenset(
        m.decode()
        for m in re.findall(rb"(?<=\0)(glibc\.[a-z_]+\.\w+)(?=\0)", _library_bytes(loader))
    )


def _strings(path: str | None, pattern: bytes) -> frozenset[str]:
    if not path:
        return frozenset()
    return frozenset(m.decode() for m in re.findall(pattern, _library_bytes(path)))


@functools.cache
def glibc_environment() -> frozenset[str]:
    """glibc's older MALLOC_*_ variables, as aliases the loader maps onto tunables."""
    names = _strings(loader_path(), rb"(?<=\0)(MALLOC_[A-Z_]+)(?=\0)")
    return frozenset(n for n in names if not n.endswith("MALLOC_")) | {"GLIBC_TUNABLES"}


@functools.cache
def jemalloc_keys(path: str) -> frozenset[str]:
    """MALLOC_CONF keys: every option jemalloc exposes as opt.NAME, plus the few it
    parses without one (lg_tcache_max, max_background_threads, narenas_ratio)."""
    keys = set(_strings(path, rb"opt\.([a-z_0-9]+)(?=\0)"))
    keys |= {
        k
        for k in ("lg_tcache_max", "max_background_threads", "narenas_ratio")
        if contains_name(path, k)
    }
    return frozenset(keys)


@functools.cache
def gperftools_environment(path: str) -> frozenset[str]:
    return _strings(path, rb"(?<=\0)(TCMALLOC_[A-Z0-9_]+)(?=\0)")


# mimalloc keeps its option names lowercase in a table and reads MIMALLOC_<NAME>: names
# cannot be listed from the binary alone, so these (from its releases 1.x to 2.2) are
# each looked for in it.
MIMALLOC_OPTIONS = [
    "show_errors",
    "show_stats",
    "verbose",
    "eager_commit",
    "eager_region_commit",
    "reset_decommits",
    "large_os_pages",
    "reserve_huge_os_pages",
    "reserve_huge_os_pages_at",
    "reserve_os_memory",
    "segment_cache",
    "page_reset",
    "abandoned_page_decommit",
    "abandoned_page_reset",
    "segment_reset",
    "eager_commit_delay",
    "reset_delay",
    "use_numa_nodes",
    "limit_os_alloc",
    "os_tag",
    "max_errors",
    "max_warnings",
    "max_segment_reclaim",
    "allow_decommit",
    "segment_decommit_delay",
    "decommit_extend_delay",
    "destroy_on_exit",
    "purge_decommits",
    "allow_large_os_pages",
    "purge_delay",
    "arena_eager_commit",
    "abandoned_page_purge",
    "purge_extend_delay",
    "arena_purge_mult",
    "disallow_os_alloc",
    "arena_reserve",
    "retry_on_oom",
    "visit_abandoned",
    "guarded_min",
    "guarded_max",
    "guarded_precise",
    "guarded_sample_rate",
    "guarded_sample_seed",
    "target_segments_per_thread",
    "generic_collect",
    "disallow_arena_alloc",
    "abandoned_reclaim_on_free",
]


@functools.cache
def mimalloc_environment(path: str) -> frozenset[str]:
    return frozenset(f"MIMALLOC_{o.upper()}" for o in MIMALLOC_OPTIONS if contains_name(path, o))


def installed_names(allocator: Allocator) -> dict[Channel, frozenset[str]]:
    """Per channel, the names the installed library reads (empty when not installed)."""
    path = allocator.path
    family = allocator.knob_family
    if family == "glibc":
        return {"GLIBC_TUNABLES": glibc_tunables(), "env": glibc_environment()}
    if not path:
        return {}
    if family == "jemalloc":
        conf_vars = frozenset(
            v for v in ("MALLOC_CONF", "JE_MALLOC_CONF") if contains_name(path, v)
        )
        return {"MALLOC_CONF": jemalloc_keys(path), "env": conf_vars}
    if family == "gperftools":
        return {"env": gperftools_environment(path)}
    if family == "mimalloc":
        return {"env": mimalloc_environment(path)}
    return {}


def is_available(allocator: Allocator, knob: Knob) -> bool:
    """Whether the installed library reads this knob."""
    return knob.key in installed_names(allocator).get(knob.channel, frozenset())


def find(allocator: Allocator, name: str) -> Knob:
    for knob in allocator.knobs:
        if name in (knob.name, knob.key):
            return knob
    raise MallocbenchError(
        f"{allocator.name} has no knob {name!r}"
        f"{did_you_mean(name, [k.name for k in allocator.knobs])}: "
        "see mallocbench allocators --knobs"
    )


def environment(allocator: Allocator, setting: Mapping[str, object]) -> dict[str, str]:
    """The environment for a setting {knob: value}: one MALLOC_CONF "k:v,k:v", one
    GLIBC_TUNABLES "a=1:b=2", and a variable per other knob; every value checked against
    its type and range, and every knob against the installed library."""
    conf_items: list[str] = []
    tunables: list[str] = []
    result: dict[str, str] = {}
    for name, value in setting.items():
        knob = find(allocator, name)
        if not is_available(allocator, knob):
            raise MallocbenchError(
                f"knob {knob.name} ({knob.key}) is not read by the installed "
                f"{allocator.name} {allocator.version or ''}: leave it out".replace("  ", " ")
            )
        text = knob.normalise(value)
        if knob.channel == "MALLOC_CONF":
            conf_items.append(f"{knob.key}:{text}")
        elif knob.channel == "GLIBC_TUNABLES":
            tunables.append(f"{knob.key}={text}")
        else:
            result[knob.key] = text
    if conf_items:
        result["MALLOC_CONF"] = ",".join(conf_items)
    if tunables:
        result["GLIBC_TUNABLES"] = ":".join(tunables)
    return result


def at_speed(allocator: Allocator, env: Mapping[str, str], speed: float) -> dict[str, str]:
    """The environment as a replay at `speed` times the recorded pace passes it: every
    time-based knob the library reads (a delay in ms: jemalloc's decays, mimalloc's
    purge delays) at 1/speed of its value, its default too, so that it spans the same
    stretch of the trace as on the server. Unscaled, jemalloc's 10 s decay at 4x would
    hold dirty pages for 40 s of the trace, and a decay chosen there would be off by 4x
    when deployed. Never down to 0, which means "at once", another behaviour."""
    out = dict(env)
    if speed == 1:
        return out
    conf = dict(item.partition(":")[::2] for item in out.get("MALLOC_CONF", "").split(",") if item)
    for knob in allocator.knobs:
        if knob.kind != "duration" or knob.unit != "ms" or knob.channel == "GLIBC_TUNABLES":
            continue
        values = conf if knob.channel == "MALLOC_CONF" else out
        try:
            value = float(values.get(knob.key, knob.default))
        except ValueError:
            continue
        if value > 0 and is_available(allocator, knob):
            values[knob.key] = str(max(1, round(value / speed)))
    if conf:
        out["MALLOC_CONF"] = ",".join(f"{k}:{v}" for k, v in conf.items())
    return out


def catalogue(allocator: Allocator) -> list[dict[str, object]]:
    """The allocator's knobs with their availability in the installed library."""
    return [{**k.to_dict(), "available": is_available(allocator, k)} for k in allocator.knobs]


def _unknown(allocator: Allocator, what: str, name: str, known: Iterable[str]) -> str:
    version = f" {allocator.version}" if allocator.version else ""
    return (
        f"{what} {name!r} is not known to the installed {allocator.name}{version}"
        f"{did_you_mean(name, known)}: see mallocbench allocators --knobs"
    )


_NAMESPACES = ("MALLOC_", "TCMALLOC_", "MIMALLOC_", "GLIBC_TUNABLES", "JE_MALLOC_CONF")


def raw_problems(allocator: Allocator, knobs: Mapping[str, str]) -> list[tuple[str, str]]:
    """(variable, message) for each raw knob the setup's installed allocator would not
    read: an unknown MALLOC_*/TCMALLOC_*/MIMALLOC_* variable, MALLOC_CONF key or glibc
    tunable, or a catalogued knob's value out of its range. Variables outside those
    namespaces, custom libraries and uninstalled allocators are left alone."""
    names = installed_names(allocator) if allocator.custom_path is None else {}
    variables = names.get("env", frozenset())
    if not variables:
        return []
    problems = []
    for variable, value in knobs.items():
        if not variable.startswith(_NAMESPACES):
            continue
        if variable not in variables:
            problems.append((variable, _unknown(allocator, "knob", variable, variables)))
            continue
        try:
            _check_value(allocator, names, variable, value)
        except MallocbenchError as exc:
            problems.append((variable, str(exc)))
    return problems


def _check_value(
    allocator: Allocator, names: dict[Channel, frozenset[str]], variable: str, value: str
) -> None:
    by_key = {k.key: k for k in allocator.knobs}
    if variable in ("MALLOC_CONF", "JE_MALLOC_CONF") and allocator.knob_family == "jemalloc":
        for item in filter(None, value.split(",")):
            key, _, text = item.partition(":")
            if key not in names["MALLOC_CONF"]:
                raise MallocbenchError(
                    _unknown(allocator, f"{variable} key", key, names["MALLOC_CONF"])
                )
            if key in by_key:
                by_key[key].normalise(text)
    elif variable == "GLIBC_TUNABLES" and names.get("GLIBC_TUNABLES"):
        for item in filter(None, value.split(":")):
            key, _, text = item.partition("=")
            if key not in names["GLIBC_TUNABLES"]:
                raise MallocbenchError(
                    _unknown(allocator, "GLIBC_TUNABLES tunable", key, names["GLIBC_TUNABLES"])
                )
            if key in by_key:
                by_key[key].normalise(text)
    else:
        legacy = {k.legacy_env: k for k in allocator.knobs if k.legacy_env}
        knob = by_key.get(variable) or legacy.get(variable)
        if knob is not None:
            knob.normalise(value)
