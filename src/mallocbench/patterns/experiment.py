"""Pattern experiments: a TOML file (or command-line flags) -> validated model -> plan.

```toml
name = "patterns"
base = "glibc"         # every case is compared against this setup (a case may override)
repeats = 3
seconds = 1.0          # per run; or ops = N (operations per thread)
threads = [1, 2]

[[setup]]                        # the same setup tables as `mallocbench run` files
name = "glibc"
allocator = "glibc"
[[setup]]
name = "glibc-nommap"
allocator = "glibc"
knobs = { MALLOC_MMAP_MAX_ = "0" }
[[setup]]
name = "glibc-calloc"
allocator = "glibc"
options = { init = "calloc" }   # driver options: a variant of the "build"

[[patterns]]
pattern = "sortbuf"
name = "sortbuf-32M"   # optional
size = "32M"           # any driver option of that pattern
threads = [1, 2]       # optional overrides: threads, seconds, ops, seed, setups, base
```

Every error names the key it is about, so a typo never runs a half-right experiment.
Setups are `[[setup]]` tables with a name, as in experiments for `mallocbench run`, so
one file's setups serve both; the keys that only mean something to a server (config,
cpus, thp, memory_limit, cpu_quota, basedir) are accepted and left out here. The older
`[setups.NAME]` tables are still read.
"""

from __future__ import annotations

import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mallocbench import allocators
from mallocbench.allocators.base import Allocator
from mallocbench.errors import MallocbenchError, did_you_mean
from mallocbench.patterns.driver import PATTERN_OPTIONS, PATTERNS
from mallocbench.servers.options import check_knob

CASE_KEYS = ("pattern", "name", "threads", "seconds", "ops", "seed", "setups", "base")
TOP_KEYS = (
    "name",
    "description",
    "base",
    "repeats",
    "seconds",
    "ops",
    "threads",
    "seed",
    "setups",
    "setup",
    "patterns",
)
SETUP_KEYS = ("allocator", "knobs", "options", "description")
# Keys of a `mallocbench run` setup that mean nothing without a server.
SERVER_ONLY_KEYS = ("config", "cpus", "thp", "memory_limit", "cpu_quota", "basedir")

# How the driver reads each option and its bounds, as option_defs in native/mbpatterns.c
# has them: checked here too so a file or --option fails before anything runs, --dry-run
# included (the driver checks again before each experiment).
SIZE_MAX = 2**62  # the driver refuses sizes above SIZE_MAX / 4
OPTION_BOUNDS: dict[str, tuple[str, int, int]] = {
    "size": ("size", 1, SIZE_MAX),
    "touch": ("size", 0, SIZE_MAX),
    "capacity": ("size", 1, SIZE_MAX),
    "min_size": ("size", 1, SIZE_MAX),
    "max_size": ("size", 1, SIZE_MAX),
    "keys": ("count", 1, 1 << 32),
    "pin_ops": ("count", 1, 1 << 24),
    "shards": ("count", 1, 1024),
    "allocs": ("count", 1, 1 << 20),
    "long_lived": ("count", 0, 1 << 24),
    "batch": ("count", 1, 1 << 16),
    "queue": ("count", 1, 1 << 24),
    "pinned": ("fraction", 0, 1),
    "long_rate": ("fraction", 0, 1),
}
INIT_MODES = ("memset", "calloc", "none")
# The driver's syntax (strtod, strtoull): plain ASCII numbers; sizes take K, M or G and
# an optional B.
_DRIVER_REAL = r"[0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?"
_DRIVER_SIZE = re.compile(rf"({_DRIVER_REAL})([kKmMgG]?)[bB]?")
_DRIVER_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}


@dataclass
class PatternSetup:
    name: str
    allocator: Allocator
    knobs: dict[str, str] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)
    description: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "allocator": self.allocator.name,
            "allocator_version": self.allocator.version,
            "allocator_library": self.allocator.path,
            "knobs": dict(self.knobs),
            "options": dict(self.options),
            "description": self.description,
        }


@dataclass
class Case:
    """One pattern with its options, run under several setups and thread counts."""

    name: str
    pattern: str
    options: dict[str, Any]
    threads: list[int]
    setups: list[str]
    base: str
    seconds: float | None
    ops: int | None
    seed: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "pattern": self.pattern,
            "options": dict(self.options),
            "threads": list(self.threads),
            "setups": list(self.setups),
            "base": self.base,
            "seconds": self.seconds,
            "ops": self.ops,
            "seed": self.seed,
        }


@dataclass(frozen=True)
class PlannedRun:
    case: Case
    setup: PatternSetup
    threads: int
    repeat: int

    @property
    def key(self) -> tuple[str, str, int, int]:
        return (self.case.name, self.setup.name, self.threads, self.repeat)

    def options(self) -> dict[str, Any]:
        """Case options with the setup's variant options on top (those the pattern takes)."""
        merged = dict(self.case.options)
        accepted = PATTERN_OPTIONS[self.case.pattern]
        merged.update({k: v for k, v in self.setup.options.items() if k in accepted})
        return merged


@dataclass
class PatternExperiment:
    name: str
    base: str
    repeats: int
    setups: dict[str, PatternSetup]
    cases: list[Case]
    text: str = ""
    description: str = ""

    def plan(self) -> list[PlannedRun]:
        """All runs, repeat by repeat; setups alternate direction (A B C, then C B A) so
        slow drift of the machine (heat, page cache, neighbours) cancels out."""
        runs: list[PlannedRun] = []
        for repeat in range(self.repeats):
            for case in self.cases:
                for threads in case.threads:
                    order = case.setups if repeat % 2 == 0 else list(reversed(case.setups))
                    runs.extend(PlannedRun(case, self.setups[s], threads, repeat) for s in order)
        return runs

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "base": self.base,
            "repeats": self.repeats,
            "setups": [s.to_dict() for s in self.setups.values()],
            "cases": [c.to_dict() for c in self.cases],
        }


# --- validation helpers ---------------------------------------------------------------


def _fail(where: str, message: str) -> MallocbenchError:
    return MallocbenchError(f"{where}: {message}")


def _check_keys(where: str, table: dict[str, Any], allowed: tuple[str, ...]) -> None:
    for key in table:
        if key not in allowed:
            raise _fail(
                f"{where}.{key}",
                f"unknown key{did_you_mean(key, allowed)}; use one of {', '.join(allowed)}",
            )


def _int(where: str, value: Any, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise _fail(where, f"expected a whole number from {low} to {high}, not {value!r}")
    return value


def _seconds(where: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 86400:
        raise _fail(where, f"expected a duration in seconds (e.g. 1.5), not {value!r}")
    return float(value)


def _threads(where: str, value: Any) -> list[int]:
    values = value if isinstance(value, list) else [value]
    if not values:
        raise _fail(where, "expected a thread count or a list of them, e.g. [1, 4]")
    return [_int(where, v, 1, 1024) for v in values]


def _option_value(where: str, option: str, value: Any) -> str | int | float:
    """`value` unchanged (case names and resume keys are built from it), once checked."""
    if option == "init":
        if value not in INIT_MODES:
            raise _fail(where, f"expected one of {', '.join(INIT_MODES)}, not {value!r}")
        return value
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise _fail(where, f'expected a number or a size like "64K", not {value!r}')
    kind, low, high = OPTION_BOUNDS[option]
    text = str(value).strip()
    number: float | None = None
    if kind == "size":
        match = _DRIVER_SIZE.fullmatch(text)
        if match:
            number = float(match.group(1)) * _DRIVER_UNITS[match.group(2).lower()]
        expected = f"a size from {low} to 2^62 bytes, e.g. 4096, 64K, 2M or 1G"
    elif kind == "count":
        if re.fullmatch("[0-9]+", text):
            number = int(text)
        expected = f"a whole number from {low} to {high:,}"
    else:
        if re.fullmatch(_DRIVER_REAL, text):
            number = float(text)
        expected = f"a number from {low} to {high}"
    # NaN fails both comparisons, so it is refused with the rest.
    if number is None or not low <= number <= high:
        raise _fail(where, f"expected {expected}, not {value!r}")
    return value


def _options(where: str, table: dict[str, Any], accepted: tuple[str, ...]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in table.items():
        norm = key.replace("-", "_")
        if norm not in accepted:
            raise _fail(f"{where}.{key}", f"not an option here; use one of {', '.join(accepted)}")
        out[norm] = _option_value(f"{where}.{key}", norm, value)
    return out


def make_setup(
    where: str,
    name: str,
    spec: str,
    knobs: dict[str, Any] | None = None,
    options: dict[str, Any] | None = None,
    description: str = "",
) -> PatternSetup:
    try:
        allocator = allocators.get(spec)
    except MallocbenchError as exc:
        raise _fail(f"{where}.allocator", str(exc)) from None
    knob_values: dict[str, str] = {}
    for key, value in (knobs or {}).items():
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise _fail(f"{where}.knobs.{key}", f"expected a string or number, not {value!r}")
        check_knob(str(key), str(value), where)
        knob_values[str(key)] = str(value)
    foreign = allocators.knob_allocator_mismatch(allocator, knob_values)
    if foreign:
        raise _fail(
            f"{where}.knobs",
            f"{', '.join(foreign)} does not tune {allocator.name}: move it to a setup that "
            "uses that allocator",
        )
    all_options = tuple(sorted({o for opts in PATTERN_OPTIONS.values() for o in opts}))
    opts = _options(f"{where}.options", options or {}, all_options)
    return PatternSetup(name, allocator, knob_values, opts, description)


def default_case_name(pattern: str, options: dict[str, Any]) -> str:
    if not options:
        return pattern
    return pattern + " " + " ".join(f"{k}={v}" for k, v in options.items())


def make_case(
    where: str,
    table: dict[str, Any],
    setups: dict[str, PatternSetup],
    defaults: dict[str, Any],
) -> Case:
    pattern = table.get("pattern")
    if pattern not in PATTERNS:
        raise _fail(f"{where}.pattern", f"expected one of {', '.join(PATTERNS)}, not {pattern!r}")
    accepted = PATTERN_OPTIONS[pattern]
    option_table = {k: v for k, v in table.items() if k not in CASE_KEYS}
    for key in option_table:
        if key.replace("-", "_") not in accepted:
            raise _fail(
                f"{where}.{key}",
                f"unknown key for {pattern}; options: {', '.join(accepted)}; "
                f"other keys: {', '.join(CASE_KEYS)}",
            )
    options = _options(where, option_table, accepted)

    names = table.get("setups", list(setups))
    if not isinstance(names, list) or not names:
        raise _fail(f"{where}.setups", "expected a list of setup names")
    for name in names:
        if name not in setups:
            raise _fail(f"{where}.setups", f"no setup {name!r}; defined: {', '.join(setups)}")
        foreign = [k for k in setups[name].options if k not in accepted]
        if foreign:
            raise _fail(
                f"{where}.setups",
                f"setup {name!r} sets {', '.join(foreign)}, which {pattern} does not take: "
                "list the setups for this case with setups = [...]",
            )
    base = table.get("base", defaults["base"])
    if base not in names:
        raise _fail(
            f"{where}.base",
            f"base setup {base!r} is not among this case's setups ({', '.join(names)})",
        )
    seconds: float | None = defaults["seconds"]
    ops: int | None = defaults["ops"]
    if "seconds" in table and "ops" in table:
        raise _fail(where, "give either seconds or ops, not both")
    if "seconds" in table:
        seconds, ops = _seconds(f"{where}.seconds", table["seconds"]), None
    if "ops" in table:
        seconds, ops = None, _int(f"{where}.ops", table["ops"], 1, 2**62)
    threads = (
        _threads(f"{where}.threads", table["threads"])
        if "threads" in table
        else defaults["threads"]
    )
    seed = _int(f"{where}.seed", table["seed"], 0, 2**63) if "seed" in table else defaults["seed"]
    name = table.get("name", default_case_name(pattern, options))
    if not isinstance(name, str) or not name:
        raise _fail(f"{where}.name", "expected a non-empty string")
    return Case(name, pattern, options, threads, list(names), base, seconds, ops, seed)


def _setup_tables(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Setups by name, from `[[setup]]` tables (the run dialect) or `[setups.NAME]`."""
    if "setup" in data and "setups" in data:
        raise _fail("setups", "give the setups once: [[setup]] tables or [setups.NAME], not both")
    if "setups" in data:
        table = data["setups"]
        if not isinstance(table, dict) or not table:
            raise _fail("setups", 'define at least one setup, e.g. [[setup]] name = "glibc"')
        return table
    listed = data.get("setup")
    if not isinstance(listed, list) or not listed:
        raise _fail(
            "setup", 'define at least one setup: [[setup]] name = "glibc" allocator = "glibc"'
        )
    out: dict[str, dict[str, Any]] = {}
    for i, entry in enumerate(listed):
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            raise _fail(f"setup[{i}]", 'give each [[setup]] a name, e.g. name = "glibc"')
        if entry["name"] in out:
            raise _fail(f"setup[{i}].name", f"two setups are named {entry['name']!r}")
        out[entry["name"]] = {
            k: v for k, v in entry.items() if k != "name" and k not in SERVER_ONLY_KEYS
        }
    return out


def from_dict(data: dict[str, Any], name: str, text: str = "") -> PatternExperiment:
    _check_keys("experiment", data, TOP_KEYS)
    setups_table = _setup_tables(data)
    setups: dict[str, PatternSetup] = {}
    for sname, st in setups_table.items():
        where = f"setups.{sname}"
        if not isinstance(st, dict):
            raise _fail(where, "expected a table with allocator = ...")
        _check_keys(where, st, SETUP_KEYS)
        if "allocator" not in st:
            raise _fail(f"{where}.allocator", "missing: name an allocator or a .so path")
        for sub in ("knobs", "options"):
            if sub in st and not isinstance(st[sub], dict):
                raise _fail(f"{where}.{sub}", 'expected a table, e.g. { KEY = "value" }')
        setups[sname] = make_setup(
            where,
            sname,
            str(st["allocator"]),
            st.get("knobs"),
            st.get("options"),
            str(st.get("description", "")),
        )
    base = data.get("base", next(iter(setups)))
    if base not in setups:
        raise _fail("base", f"no setup {base!r}; defined: {', '.join(setups)}")
    if "seconds" in data and "ops" in data:
        raise _fail("experiment", "give either seconds or ops, not both")
    defaults = {
        "base": base,
        "seconds": _seconds("seconds", data["seconds"])
        if "seconds" in data
        else (None if "ops" in data else 1.0),
        "ops": _int("ops", data["ops"], 1, 2**62) if "ops" in data else None,
        "threads": _threads("threads", data.get("threads", [os.cpu_count() or 1])),
        "seed": _int("seed", data.get("seed", 1), 0, 2**63),
    }
    cases_table = data.get("patterns")
    if not isinstance(cases_table, list) or not cases_table:
        raise _fail("patterns", 'add at least one [[patterns]] table with pattern = "..."')
    cases = []
    for i, table in enumerate(cases_table):
        if not isinstance(table, dict):
            raise _fail(f"patterns[{i}]", "expected a table")
        cases.append(make_case(f"patterns[{i}]", table, setups, defaults))
    seen: set[str] = set()
    for case in cases:
        if case.name in seen:
            raise _fail("patterns", f"two cases are named {case.name!r}: give them distinct names")
        seen.add(case.name)
    repeats = _int("repeats", data.get("repeats", 3), 1, 1000)
    exp_name = data.get("name", name)
    return PatternExperiment(
        name=str(exp_name),
        base=base,
        repeats=repeats,
        setups=setups,
        cases=cases,
        text=text,
        description=str(data.get("description", "")),
    )


def load(path: str | os.PathLike[str]) -> PatternExperiment:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise MallocbenchError(f"cannot read experiment file {p}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise MallocbenchError(
            f"experiment file {p} is not text (byte {exc.start} is not UTF-8): "
            "give a TOML experiment file"
        ) from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise MallocbenchError(f"{p} is not valid TOML: {exc}") from None
    try:
        return from_dict(data, p.stem, text)
    except MallocbenchError as exc:
        raise MallocbenchError(f"{p}: {exc}") from None


def parse_allocator_flag(value: str) -> tuple[str, str, dict[str, str]]:
    """`jemalloc`, `glibc:MALLOC_MMAP_MAX_=0,MALLOC_ARENA_MAX=2` or a .so path ->
    (setup name, allocator spec, knobs)."""
    spec, knobs = value, {}
    head, sep, tail = value.partition(":")
    if sep and "=" in tail:
        spec = head
        for item in tail.split(","):
            key, eq, val = item.partition("=")
            if not eq or not key:
                raise MallocbenchError(
                    f"--allocator {value!r}: knobs look like NAME:KEY=VALUE[,KEY=VALUE]"
                )
            knobs[key.strip()] = val.strip()
    name = (
        allocators.get(spec).name
        if not knobs
        else (
            allocators.get(spec).name + "[" + ",".join(f"{k}={v}" for k, v in knobs.items()) + "]"
        )
    )
    return name, spec, knobs


def from_flags(
    patterns: list[str],
    allocator_flags: list[str],
    threads: list[int],
    seconds: float | None,
    ops: int | None,
    repeats: int,
    options: list[str],
    base: str | None,
    seed: int,
) -> PatternExperiment:
    """An experiment from command-line flags, for quick questions without a file."""
    if not allocator_flags:
        allocator_flags = [a.name for a in allocators.builtin_allocators() if a.available]
    setups: dict[str, PatternSetup] = {}
    for value in allocator_flags:
        name, spec, knobs = parse_allocator_flag(value)
        if name in setups:
            raise MallocbenchError(f"--allocator {value!r} is given twice")
        setups[name] = make_setup(f"--allocator {value}", name, spec, knobs)
    option_values: dict[str, str] = {}
    for item in options:
        key, eq, val = item.partition("=")
        if not eq or not key:
            raise MallocbenchError(f"--option {item!r}: expected KEY=VALUE, e.g. size=32M")
        option_values[key.strip().replace("-", "_")] = val.strip()
    chosen = list(dict.fromkeys(patterns)) or list(PATTERNS)
    for key in option_values:
        if not any(key in PATTERN_OPTIONS[p] for p in chosen):
            raise MallocbenchError(
                f"--option {key}: no chosen pattern takes it; "
                + "; ".join(f"{p}: {', '.join(PATTERN_OPTIONS[p])}" for p in chosen)
            )
    base_name = base or next(iter(setups))
    if base_name not in setups:
        raise MallocbenchError(f"--base {base_name!r} is not a setup; setups: {', '.join(setups)}")
    defaults = {
        "base": base_name,
        "seconds": None if ops else (seconds or 1.0),
        "ops": ops,
        "threads": threads or [os.cpu_count() or 1],
        "seed": seed,
    }
    cases = []
    for pattern in chosen:
        table: dict[str, Any] = {"pattern": pattern}
        table.update({k: v for k, v in option_values.items() if k in PATTERN_OPTIONS[pattern]})
        cases.append(make_case(f"--pattern {pattern}", table, setups, defaults))
    return PatternExperiment(
        name="patterns",
        base=base_name,
        repeats=repeats,
        setups=setups,
        cases=cases,
        text="",
    )
