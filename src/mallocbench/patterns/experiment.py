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
cpus, thp, memory_limit, cpu_quota, basedir, record) are accepted and left out here. The older
`[setups.NAME]` tables are still read.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mallocbench import allocators
from mallocbench.allocators.base import Allocator
from mallocbench.errors import MallocbenchError, did_you_mean
from mallocbench.inputs.tomlpos import KeyPath
from mallocbench.inputs.validation import Problems, read_toml
from mallocbench.model.patterns import Case
from mallocbench.patterns.driver import PATTERN_OPTIONS, PATTERNS
from mallocbench.run.dialect import (
    CASE,
    MAX_PLANNED,
    MAX_REPEATS,
    PATTERNS_TOP,
    SetupTable,
    common_setups,
    setup_knobs,
    setup_names,
    setup_tables,
)

CASE_KEYS = tuple(CASE)  # a case's own keys; the rest are driver options

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


def _options(
    problems: Problems, path: KeyPath, where: str, table: object, accepted: tuple[str, ...]
) -> dict[str, Any]:
    """Driver options (TOML spelling, or with dashes), each checked and kept as written."""
    if not isinstance(table, dict):
        problems.add(path, f'{where}: expected a table, e.g. {{ init = "calloc" }}')
        return {}
    out: dict[str, Any] = {}
    unknown = {k: v for k, v in table.items() if k.replace("-", "_") not in accepted}
    problems.unknown_keys(path, unknown, accepted, where)
    for key, value in table.items():
        norm = key.replace("-", "_")
        if norm in accepted:
            checked = problems.check(path + (key,), _option_value, f"{where}.{key}", norm, value)
            if checked is not None:
                out[norm] = checked
    return out


ALL_OPTIONS = tuple(sorted({o for opts in PATTERN_OPTIONS.values() for o in opts}))


def make_setup(
    where: str,
    name: str,
    spec: str,
    knobs: dict[str, Any] | None = None,
) -> PatternSetup:
    """A setup from the command line (--allocator NAME:KNOB=VALUE)."""
    try:
        allocator = allocators.get(spec)
    except MallocbenchError as exc:
        raise _fail(f"{where}.allocator", str(exc)) from None
    problems = Problems()
    knob_values = setup_knobs(problems, (), knobs or {}, where, allocator)
    problems.raise_if_any()
    return PatternSetup(name, allocator, knob_values or {})


def _table_setups(problems: Problems, tables: list[SetupTable]) -> dict[str, PatternSetup]:
    """Setups from the file's tables; the keys that need a server are left out here."""
    common = common_setups(problems, tables)
    setups = {}
    for index, table in enumerate(tables):
        if not isinstance(table.raw, dict):
            continue
        where = f"{table.label}.options"
        opts = _options(
            problems, table.path + ("options",), where, table.raw.get("options", {}), ALL_OPTIONS
        )
        found = common.get(index)
        if found is not None and not problems.failed(*table.path):
            setups[found.name] = PatternSetup(
                found.name, found.allocator, found.knobs, opts, found.description
            )
    return setups


def default_case_name(pattern: str, options: dict[str, Any]) -> str:
    if not options:
        return pattern
    return pattern + " " + " ".join(f"{k}={v}" for k, v in options.items())


@dataclass
class _Defaults:
    """What a case takes from the top of the file unless it says otherwise."""

    base: str
    seconds: float | None = 1.0
    ops: int | None = None
    threads: list[int] = field(default_factory=lambda: [os.cpu_count() or 1])
    seed: int = 1
    names: list[str] = field(default_factory=list)  # every setup named, broken ones too


def make_case(
    problems: Problems,
    path: KeyPath,
    where: str,
    table: dict[str, Any],
    setups: dict[str, PatternSetup],
    defaults: _Defaults,
) -> Case | None:
    """One [[patterns]] table (or --pattern), its problems recorded; None if any."""
    pattern = table.get("pattern")
    if pattern not in PATTERNS:
        hint = did_you_mean(str(pattern), PATTERNS)
        problems.add(
            path + ("pattern",),
            f"{where}.pattern: expected one of {', '.join(PATTERNS)}, not {pattern!r}{hint}",
        )
        return None
    accepted = PATTERN_OPTIONS[pattern]
    option_table = {k: v for k, v in table.items() if k not in CASE_KEYS}
    problems.unknown_keys(
        path,
        {k: v for k, v in option_table.items() if k.replace("-", "_") not in accepted},
        (*CASE_KEYS, *accepted),
        f"{where}, a {pattern} case",
    )
    option_table = {k: v for k, v in option_table.items() if k.replace("-", "_") in accepted}
    options = _options(problems, path, where, option_table, accepted)
    known = defaults.names or list(setups)
    names = _case_setups(
        problems, path + ("setups",), table.get("setups", known), setups, known, pattern
    )
    base = table.get("base", defaults.base)
    # A wrong setups list or a wrong top-level base is reported once, where it is.
    settled = not problems.failed(*path, "setups") and (
        "base" in table or not problems.failed("base")
    )
    if names and settled and base not in names:
        problems.add(
            path + ("base",),
            f"{where}.base: base setup {base!r} is not among this case's setups "
            f"({', '.join(names)}){did_you_mean(str(base), names)}",
        )
    run_length = _run_length(problems, path, where, table, defaults)
    threads: list[int] | None = defaults.threads
    if "threads" in table:
        threads = problems.check(
            path + ("threads",), _threads, f"{where}.threads", table["threads"]
        )
    seed: int | None = defaults.seed
    if "seed" in table:
        seed = problems.check(path + ("seed",), _int, f"{where}.seed", table["seed"], 0, 2**63)
    name = table.get("name", default_case_name(pattern, options))
    if not isinstance(name, str) or not name:
        problems.add(path + ("name",), f"{where}.name: expected a non-empty string")
    if problems.failed(*path) or run_length is None or threads is None or seed is None:
        return None
    seconds, ops = run_length
    return Case(name, pattern, options, threads, names, str(base), seconds, ops, seed)


def _run_length(
    problems: Problems, path: KeyPath, where: str, table: dict[str, Any], defaults: _Defaults
) -> tuple[float | None, int | None] | None:
    """(seconds, ops) of a case: one of them, from the case or else the defaults; None
    when what the case gives is wrong (recorded at its key)."""
    if "seconds" in table and "ops" in table:
        problems.add(path + ("ops",), f"{where}: give either seconds or ops, not both")
        return None
    if "seconds" in table:
        seconds = problems.check(
            path + ("seconds",), _seconds, f"{where}.seconds", table["seconds"]
        )
        return None if seconds is None else (seconds, None)
    if "ops" in table:
        ops = problems.check(path + ("ops",), _int, f"{where}.ops", table["ops"], 1, 2**62)
        return None if ops is None else (None, ops)
    return defaults.seconds, defaults.ops


def _case_setups(
    problems: Problems,
    path: KeyPath,
    names: object,
    setups: dict[str, PatternSetup],
    known: list[str],
    pattern: str,
) -> list[str]:
    """The setups a case runs (`path` is its setups key): each must take the options it
    sets; `known` are all setup names, the broken ones too."""
    where = f"{path[0]}[{path[1]}].setups" if len(path) == 3 else f"--pattern {pattern}.setups"
    if not isinstance(names, list) or not names:
        problems.add(path, f"{where}: expected a list of setup names")
        return []
    for index, name in enumerate(names):
        if name not in known:
            problems.add(
                path + (index,),
                f"{where}: no setup {name!r}{did_you_mean(str(name), known)}; "
                f"defined: {', '.join(known)}",
            )
            continue
        options = setups[name].options if name in setups else {}
        foreign = [k for k in options if k not in PATTERN_OPTIONS[pattern]]
        if foreign:
            problems.add(
                path + (index,),
                f"{where}: setup {name!r} sets {', '.join(foreign)}, which {pattern} does not "
                "take: list the setups for this case with setups = [...]",
            )
    return [str(n) for n in names]


def _defaults(problems: Problems, data: dict[str, Any], names: list[str]) -> _Defaults:
    """The top of the file: the base and what every case inherits."""
    base = str(data.get("base", names[0] if names else ""))
    if names and base not in names:
        problems.add(
            ("base",),
            f"base: no setup {base!r}{did_you_mean(base, names)}; defined: {', '.join(names)}",
        )
    defaults = _Defaults(base=base, names=names)
    if "seconds" in data and "ops" in data:
        problems.add(("ops",), "experiment: give either seconds or ops, not both")
    elif "seconds" in data:
        defaults.seconds = problems.check(("seconds",), _seconds, "seconds", data["seconds"])
    elif "ops" in data:
        defaults.seconds = None
        defaults.ops = problems.check(("ops",), _int, "ops", data["ops"], 1, 2**62)
    if "threads" in data:
        defaults.threads = problems.check(("threads",), _threads, "threads", data["threads"]) or []
    defaults.seed = problems.check(("seed",), _int, "seed", data.get("seed", 1), 0, 2**63) or 0
    return defaults


def _cases(
    problems: Problems, data: dict[str, Any], setups: dict[str, PatternSetup], defaults: _Defaults
) -> list[Case]:
    tables = data.get("patterns")
    if not isinstance(tables, list) or not tables:
        problems.add(
            ("patterns",), 'patterns: add at least one [[patterns]] table with pattern = "..."'
        )
        return []
    cases = []
    seen: set[str] = set()
    for i, table in enumerate(tables):
        path: KeyPath = ("patterns", i)
        if not isinstance(table, dict):
            problems.add(path, f"patterns[{i}]: expected a table")
            continue
        case = make_case(problems, path, f"patterns[{i}]", table, setups, defaults)
        if case is not None and case.name in seen:
            problems.add(
                path + ("name",),
                f"patterns: two cases are named {case.name!r}: give them distinct names",
            )
        elif case is not None:
            seen.add(case.name)
            cases.append(case)
    return cases


def from_dict(
    data: dict[str, Any], name: str, text: str = "", source: str | None = None
) -> PatternExperiment:
    """The validated experiment, or one error listing every problem of `data`.

    With `source` (the file `text` was read from) each problem carries its line.
    """
    problems = Problems()
    problems.unknown_keys((), data, PATTERNS_TOP, "the experiment")
    tables = setup_tables(problems, data, older=True)
    setups = _table_setups(problems, tables)
    defaults = _defaults(problems, data, list(dict.fromkeys([*setups, *setup_names(tables)])))
    cases = _cases(problems, data, setups, defaults)
    repeats = problems.check(("repeats",), _int, "repeats", data.get("repeats", 3), 1, MAX_REPEATS)
    if repeats is not None:
        problems.check(("repeats",) if "repeats" in data else (), check_runs, cases, repeats)
    problems.raise_if_any(source, text)
    return PatternExperiment(
        name=str(data.get("name", name)),
        base=defaults.base,
        repeats=int(repeats or 1),
        setups=setups,
        cases=cases,
        text=text,
        description=str(data.get("description", "")),
    )


def check_runs(cases: list[Case], repeats: int) -> None:
    """Refuse a plan beyond MAX_PLANNED runs (also after the command line's overrides)."""
    runs = repeats * sum(len(case.threads) * len(case.setups) for case in cases)
    if runs > MAX_PLANNED:
        raise MallocbenchError(
            f"the experiment plans {runs:,} runs (cases x threads x setups x {repeats} "
            f"repeats), more than the {MAX_PLANNED:,} one run may hold: use fewer repeats, "
            "thread counts, setups or cases"
        )


def load(path: str | os.PathLike[str]) -> PatternExperiment:
    """A patterns file, validated whole: every problem in it is reported at once."""
    p = Path(path)
    text, data = read_toml(p)
    return from_dict(data, p.stem, text, source=str(p))


# A comma starts another knob only before a knob's name and its "=": the comma in
# MALLOC_CONF=dirty_decay_ms:0,muzzy_decay_ms:0 is part of the one value.
_NEXT_KNOB = re.compile(r",(?=\s*[A-Za-z_][A-Za-z0-9_]*\s*=)")


def parse_allocator_flag(value: str, flag: str = "--allocator") -> tuple[str, str, dict[str, str]]:
    """`jemalloc`, `glibc:MALLOC_MMAP_MAX_=0,MALLOC_ARENA_MAX=2`,
    `jemalloc:MALLOC_CONF=narenas:2,dirty_decay_ms:0` or a .so path -> (setup name,
    allocator spec, knobs). `flag` is the option it came from, for the one line."""
    spec, knobs = value, {}
    head, sep, tail = value.partition(":")
    # NAME:KNOB without =VALUE (a .so path may hold a colon; a name holds no slash)
    missing_value = sep and "=" not in tail and "/" not in head
    if missing_value or (sep and "=" in tail):
        spec = head
        for item in _NEXT_KNOB.split(tail):
            key, eq, val = item.partition("=")
            if not eq or not key.strip():
                raise MallocbenchError(
                    f"{flag} {value!r}: knobs look like NAME:KNOB=VALUE[,KNOB=VALUE] (a "
                    "comma inside a value is kept: jemalloc:MALLOC_CONF=narenas:2,"
                    "dirty_decay_ms:0)"
                )
            if key.strip() in knobs:
                raise MallocbenchError(
                    f"{flag} {value!r}: knob {key.strip()} is given twice: give it once"
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
    defaults = _Defaults(
        base=base_name,
        seconds=None if ops else (seconds or 1.0),
        ops=ops,
        threads=threads or [os.cpu_count() or 1],
        seed=seed,
    )
    problems = Problems()
    cases = []
    for pattern in chosen:
        table: dict[str, Any] = {"pattern": pattern}
        table.update({k: v for k, v in option_values.items() if k in PATTERN_OPTIONS[pattern]})
        cases.append(make_case(problems, (), f"--pattern {pattern}", table, setups, defaults))
    problems.raise_if_any()
    return PatternExperiment(
        name="patterns",
        base=base_name,
        repeats=repeats,
        setups=setups,
        cases=[case for case in cases if case is not None],
        text="",
    )
