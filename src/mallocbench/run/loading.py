"""Experiment files: TOML -> a validated Experiment.

Every validation error names the key and how to fix it, in one line; a file's problems
are collected and reported together, each at its line (mallocbench.inputs.validation). The keys
each table takes are listed once, in mallocbench.run.dialect, with the [[setup]] checks that
`patterns` files share.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from mallocbench.analysis.criteria import parse_max_loss, parse_priorities
from mallocbench.analysis.designs import DEFAULT_SETTLE_ROUNDS
from mallocbench.analysis.steady import DEFAULT_MAX_WARMUP_S
from mallocbench.errors import MallocbenchError
from mallocbench.files import cache_root
from mallocbench.inputs.tomlpos import KeyPath
from mallocbench.inputs.validation import Problems, read_toml
from mallocbench.run.dataset import Dataset
from mallocbench.run.dialect import (
    MAX_REPEATS,
    RUN_DATASET,
    RUN_DECISION,
    RUN_DURATIONS,
    RUN_TOP,
    setup_tables,
)
from mallocbench.run.experiment import (
    ALTERNATIONS,
    AUTO,
    DATADIR_OVERHEAD_BYTES,
    DEFAULT_SLICE_S,
    DEFAULT_TURN_S,
    DESIGNS,
    INTERLEAVED,
    MAX_CELLS,
    MAX_DURATION_S,
    MAX_ROWS,
    MAX_SETTLE_ROUNDS,
    MAX_TABLES,
    MAX_TITLE,
    MIN_RUN_SLICE_S,
    MIN_TURN_S,
    RUNS,
    SEQUENTIAL,
    TURNS,
    Decision,
    Experiment,
)
from mallocbench.run.overrides import apply_overrides
from mallocbench.run.planning import planned_cells
from mallocbench.run.setups import expect, read_base, read_server, read_setups
from mallocbench.run.soak_events import parse_events
from mallocbench.servers import families
from mallocbench.servers.engines import Engine
from mallocbench.servers.family import ServerFamily
from mallocbench.servers.mariadb.dataset import BYTES_PER_ROW
from mallocbench.units import gb, parse_count, parse_duration, parse_min_effect, parse_size
from mallocbench.workloads.catalogue import Step, parse_steps


def _bounded_int(value: object, key: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise MallocbenchError(f"{key} = {value!r} is invalid: give a whole number {low}-{high:,}")
    return value


def _seconds(value: object, key: str, low: float) -> float:
    """Seconds from a number or a duration as on the command line ("90s", "2m")."""
    given = value
    if isinstance(value, str):
        value = parse_duration(value, key, allow_zero=True)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise MallocbenchError(f'{key} = {value!r} is invalid: give seconds, e.g. 60 or "1m"')
    # Compared before float(): an int too large for a float would raise, and NaN fails
    # every comparison, so it lands here too.
    if not low <= value <= MAX_DURATION_S:
        raise MallocbenchError(
            f"{key} = {given!r} is out of range: give {low:g} to {MAX_DURATION_S} seconds (24 h)"
        )
    return float(value)


def _slice(value: object, duration: float, alternate: str) -> float:
    """Seconds per slice: given, or the default of `alternate` (at most the whole step).

    A run's default is 5 s, and the whole step when that is shorter than 2 slices.
    """
    if value is None:
        if alternate == TURNS:
            return min(duration, DEFAULT_TURN_S)
        return duration if duration < 2 * DEFAULT_SLICE_S else DEFAULT_SLICE_S
    low = MIN_TURN_S if alternate == TURNS else MIN_RUN_SLICE_S
    slice_s = _seconds(value, "durations.slice", low)
    if slice_s > duration:
        raise MallocbenchError(
            f"durations.slice = {value!r} is longer than durations.step = {duration:g}: a "
            "cell's measured seconds are cut into slices; give a slice of at most the step"
        )
    return slice_s


def _check_memory(dataset: Dataset) -> None:
    """A cache the machine cannot hold would only measure swapping or the OOM killer."""
    ram = psutil.virtual_memory().total
    if dataset.cache_bytes > ram:
        raise MallocbenchError(
            f"dataset.cache = {gb(dataset.cache_bytes)} GiB is more than this machine's "
            f"{gb(ram)} GiB of RAM: give a smaller cache"
        )


def dataset_disk_bytes(dataset: Dataset) -> int:
    """About what one engine's loaded copy of `dataset` takes on disk."""
    return dataset.tables * dataset.rows * BYTES_PER_ROW + DATADIR_OVERHEAD_BYTES


def _existing_ancestor(path: Path) -> Path:
    # The cache directory is created on first use; its file system is what counts.
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _check_disk(dataset: Dataset, engine_list: list[Engine]) -> None:
    """Refuse a dataset the dataset cache cannot hold, before hours of loading fail."""
    cache = cache_root()
    needed = dataset_disk_bytes(dataset) * len(engine_list)
    try:
        free = shutil.disk_usage(_existing_ancestor(cache)).free
    except OSError:
        return  # the loader reports an unusable cache directory with its own message
    if needed > free:
        raise MallocbenchError(
            f"dataset of {dataset.tables} x {dataset.rows:,} rows needs about "
            f"{gb(needed)} GiB on disk ({BYTES_PER_ROW} bytes a row, one copy per engine) "
            f"but the dataset cache {cache} has {gb(free)} GiB free: use fewer rows or "
            "tables, or point MALLOCBENCH_CACHE at a larger disk"
        )


def load(path: str | Path, overrides: list[str] | None = None) -> Experiment:
    """An experiment file, validated whole: every problem in it is reported at once."""
    path = Path(path)
    text, data = read_toml(path)
    overridden: dict[KeyPath, str] = {}
    if overrides:
        recorded = apply_overrides(data, overrides, overridden)
        # The stored text says what ran: the file, then what the command line changed.
        text = text.rstrip("\n") + "\n\n" + "\n".join(recorded) + "\n"
    experiment = from_dict(data, text, path.stem, source=str(path), overridden=overridden)
    experiment.source = str(path)
    return experiment


def from_dict(
    data: dict[str, Any],
    text: str = "",
    default_name: str = "experiment",
    source: str | None = None,
    overridden: dict[KeyPath, str] | None = None,
) -> Experiment:
    """The validated experiment, or one error listing every problem of `data`.

    With `source` (the file `text` was read from) each problem carries its line.
    """
    problems = Problems()
    problems.unknown_keys((), data, RUN_TOP, "the experiment")
    server = read_server(problems, data)
    tables = setup_tables(problems, data, older=False)
    setups = read_setups(problems, tables, server)
    base = read_base(problems, data, tables, setups)
    family = families.get(server.family)
    engine_list = _engines(problems, data, family)
    steps, step_specs = _steps(problems, data, family)
    threads = _threads(problems, data)
    repeats = problems.check(("repeats",), _repeats, data.get("repeats", 1))
    min_effect = problems.check(("min_effect",), parse_min_effect, data.get("min_effect", 0))
    dataset = _dataset(problems, data, engine_list)
    alternate = problems.check(("alternate",), _alternate, data.get("alternate", RUNS))
    design = problems.check(("design",), _design, data.get("design", INTERLEAVED))
    timing = _durations(problems, data, alternate or RUNS, design)
    budget = None
    if "budget" in data:
        budget = problems.check(("budget",), _budget, data["budget"], design)
    events = parse_events(problems, data, family.soak_actions, family.name)
    name = problems.check(("name",), _name, data.get("name", default_name))
    decision = _decision(problems, data)
    problems.raise_if_any(source, text, overridden)
    experiment = Experiment(
        name=str(name),
        text=text,
        setups=setups,
        base=base,
        engines=engine_list,
        steps=steps,
        step_specs=step_specs,
        threads=sorted(set(threads)),
        dataset=dataset,
        warmup_s=timing.warmup,
        max_warmup_s=timing.max_warmup,
        duration_s=timing.step,
        slice_s=timing.slice,
        settle_rounds=timing.settle,
        design=str(design),
        alternate=str(alternate),
        repeats=int(repeats or 1),
        budget_s=budget,
        min_effect=float(min_effect or 0),
        server_config=server.config,
        basedir=server.basedir,
        port=server.port,
        events=events,
        decision=decision,
        family=family.name,
    )
    # Checked once the parts are right: a count of broken parts would mislead.
    problems.check(("repeats",) if "repeats" in data else (), _check_cells, experiment)
    where = ("server", "family") if "family" in (data.get("server") or {}) else ()
    problems.check(
        where,
        family.check_plan,
        experiment.alternate,
        experiment.design,
        any(setup.record for setup in setups),
        experiment.port,
    )
    problems.raise_if_any(source, text, overridden)
    return experiment


def _decision(problems: Problems, data: dict[str, Any]) -> Decision | None:
    """The [decision] table, each key checked: the names `recommend --priority` and
    --max-loss take, a size for the memory budget."""
    if "decision" not in data:
        return None
    hint = 'write a [decision] table, e.g. max_loss = { rss = "10%" }'
    raw = problems.check(("decision",), expect, data["decision"], dict, "decision", hint)
    if raw is None:
        return None
    problems.unknown_keys(("decision",), raw, RUN_DECISION, "[decision]")
    priorities = None
    if "priority" in raw:
        priorities = problems.check(("decision", "priority"), _priorities, raw["priority"])
    budget = None
    if "memory_budget" in raw:
        budget = problems.check(
            ("decision", "memory_budget"),
            parse_size,
            raw["memory_budget"],
            "decision.memory_budget",
        )
    losses = problems.check(("decision", "max_loss"), _max_loss, raw.get("max_loss", {}))
    return Decision(priorities, budget, losses or {})


def _priorities(value: object) -> tuple[str, ...]:
    names = value if isinstance(value, list) else [value]
    return parse_priorities(",".join(str(n) for n in names), "decision.priority")


def _max_loss(value: object) -> dict[str, float]:
    expect(value, dict, "decision.max_loss", 'write e.g. max_loss = { rss = "10%" }')
    items = [f"{k}={v}" for k, v in value.items()]  # type: ignore[attr-defined]
    return parse_max_loss(items, "decision.max_loss")


def _as_list(value: object, types: type | tuple[type, ...]) -> Any:
    """One value of `types` stands for a list of one (engines = "innodb", threads = 8)."""
    return [value] if isinstance(value, types) and not isinstance(value, bool) else value


def _engines(problems: Problems, data: dict[str, Any], family: ServerFamily) -> list[Engine]:
    """The engines to run; a family without storage engines has one named after it,
    which is what the list reads when left out (and all it may name)."""
    names = _as_list(data.get("engines", list(family.default_engines)), str)
    hint = 'write a list, e.g. ["innodb", "myrocks"]'
    if problems.check(("engines",), expect, names, list, "engines", hint) is None:
        return []
    if not names:
        problems.add(("engines",), 'engines is empty: write e.g. engines = ["innodb"]')
    found = [problems.check(("engines", i), family.engine, str(n)) for i, n in enumerate(names)]
    seen: set[str] = set()
    for index, engine in enumerate(found):
        if engine is not None and engine.name in seen:
            # Its sessions would share their names, and so their server directories.
            problems.add(("engines", index), f"engines names {engine.name} twice: list it once")
        seen.add(engine.name if engine is not None else "")
    return [engine for engine in found if engine is not None]


def _steps(
    problems: Problems, data: dict[str, Any], family: ServerFamily
) -> tuple[list[Step], list[str]]:
    """The steps in run order, and the specs as written (names and groups)."""
    specs = _as_list(data.get("steps", ["point-query"]), str)
    hint = 'write a list of steps or groups, e.g. ["point", "scan"]'
    if problems.check(("steps",), expect, specs, list, "steps", hint) is None:
        return [], []
    written = [str(spec) for spec in specs]
    if not written:
        problems.add(("steps",), "steps is empty: name at least one step or group")
    for index, spec in enumerate(written):
        problems.check(("steps", index), parse_steps, [spec])  # each, to locate each typo
    if problems.failed("steps"):
        return [], written
    steps = parse_steps(written)
    # Refused here, by name, before anything is loaded or started.
    problems.check(("steps",), family.check_steps, [step.name for step in steps])
    return steps, written


def _threads(problems: Problems, data: dict[str, Any]) -> list[int]:
    threads = _as_list(data.get("threads", [1]), int)
    hint = "write a list of client counts, e.g. [1, 8]"
    if problems.check(("threads",), expect, threads, list, "threads", hint) is None:
        return []
    good = []
    for index, count in enumerate(threads):
        if not isinstance(count, int) or isinstance(count, bool) or not 1 <= count <= 4096:
            problems.add(
                ("threads", index), f"threads contains {count!r}: use whole numbers from 1 to 4096"
            )
        else:
            good.append(count)
    return good


def _name(value: object) -> str:
    """The experiment's name heads its report and the plan: one line of text."""
    if not isinstance(value, str) or not value.isprintable() or len(value) > MAX_TITLE:
        shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
        raise MallocbenchError(
            f"name = {shown} is invalid: give one line of at most {MAX_TITLE} printable characters"
        )
    return value


def _repeats(value: object) -> int:
    expect(value, int, "repeats", "give a whole number of repeats, e.g. 3")
    return _bounded_int(value, "repeats", 1, MAX_REPEATS)


def _check_cells(experiment: Experiment) -> None:
    cells = planned_cells(experiment)
    if cells > MAX_CELLS:
        raise MallocbenchError(
            f"the experiment plans {cells:,} cells ({len(experiment.setups)} setups x "
            f"{len(experiment.engines)} engines x steps and threads x {experiment.repeats} "
            f"repeats), more than the {MAX_CELLS:,} one run may hold: use fewer repeats, "
            "steps, threads or setups, or split it into several runs"
        )


def _budget(value: object, design: object) -> float:
    if design != AUTO:
        raise MallocbenchError(
            'budget is the wall time design = "auto" compares the designs in: add '
            'design = "auto", or remove budget and set repeats'
        )
    return _seconds(value, "budget", 60)


def _design(value: object) -> str:
    design = str(value)
    if design not in DESIGNS:
        raise MallocbenchError(
            f"design = {design!r} is unknown: use {DESIGNS[0]!r} (setups' servers up at once, "
            f"their slices alternating), {DESIGNS[1]!r} (one server at a time) or "
            f"{DESIGNS[2]!r} (chosen from a calibration at the start of the run)"
        )
    return design


def _dataset(problems: Problems, data: dict[str, Any], engine_list: list[Engine]) -> Dataset:
    dataset = Dataset()
    hint = "write a [dataset] table"
    raw = problems.check(("dataset",), expect, data.get("dataset", {}), dict, "dataset", hint)
    if raw is None:
        return dataset
    problems.unknown_keys(("dataset",), raw, RUN_DATASET, "[dataset]")
    checks: dict[str, tuple[Any, ...]] = {
        "tables": (_bounded_int, "dataset.tables", 1, MAX_TABLES),
        "rows": (parse_count, "dataset.rows", 1, MAX_ROWS),
        "cache": (parse_size, "dataset.cache"),
    }
    for key, (check, *args) in checks.items():
        if key in raw:
            value = problems.check(("dataset", key), check, raw[key], *args)
            if value is not None:
                setattr(dataset, "cache_bytes" if key == "cache" else key, value)
    if any(problems.failed("dataset", key) for key in checks):
        return dataset  # a machine check of a wrong shape would only repeat the problem
    problems.check(("dataset", "cache"), _check_memory, dataset)
    if engine_list:
        problems.check(("dataset",), _check_disk, dataset, engine_list)
    return dataset


@dataclass
class _Timing:
    warmup: float = 2.0
    max_warmup: float = DEFAULT_MAX_WARMUP_S
    step: float = 10.0
    slice: float = DEFAULT_SLICE_S
    settle: int = DEFAULT_SETTLE_ROUNDS


def _alternate(value: object) -> str:
    alternate = str(value)
    if alternate not in ALTERNATIONS:
        raise MallocbenchError(
            f"alternate = {alternate!r} is unknown: use {RUNS!r} (each slice a sysbench run "
            f"of its own) or {TURNS!r} (clients stay connected and take turns)"
        )
    return alternate


def _durations(
    problems: Problems, data: dict[str, Any], alternate: str, design: str | None
) -> _Timing:
    timing = _Timing(slice=DEFAULT_TURN_S if alternate == TURNS else DEFAULT_SLICE_S)
    hint = "write a [durations] table"
    raw = problems.check(("durations",), expect, data.get("durations", {}), dict, "durations", hint)
    if raw is None:
        return timing
    problems.unknown_keys(("durations",), raw, RUN_DURATIONS, "[durations]")
    at = ("durations",)
    warmup = problems.check(at + ("warmup",), _seconds, raw.get("warmup", 2), "durations.warmup", 0)
    if warmup is not None:
        timing.warmup = warmup
        # A long minimum without a maximum is a fixed warmup, as before max_warmup existed.
        timing.max_warmup = max(DEFAULT_MAX_WARMUP_S, warmup)
        if "max_warmup" in raw:
            found = problems.check(at + ("max_warmup",), _max_warmup, raw["max_warmup"], warmup)
            timing.max_warmup = found if found is not None else timing.max_warmup
    step = problems.check(at + ("step",), _seconds, raw.get("step", 10), "durations.step", 1)
    if step is not None:
        timing.step = step
        slice_s = problems.check(at + ("slice",), _slice, raw.get("slice"), step, alternate)
        timing.slice = slice_s if slice_s is not None else timing.slice
    if "settle" in raw:
        settle = problems.check(at + ("settle",), _settle, raw["settle"], alternate, design)
        timing.settle = settle if settle is not None else timing.settle
    return timing


def _settle(value: object, alternate: str, design: str | None) -> int:
    """Rounds of settle turns: only turns have them (a run's slice is a client of its
    own), so settle is refused only where turns can never run: design = "auto" may
    choose them whatever `alternate` says, and a bad design is told on its own."""
    if design == SEQUENTIAL:
        raise MallocbenchError(
            f"durations.settle = {value!r} applies to turns only, and design = "
            f"{SEQUENTIAL!r} takes none: set design = {AUTO!r}, or {INTERLEAVED!r} with "
            f"alternate = {TURNS!r}, or remove settle"
        )
    if design == INTERLEAVED and alternate != TURNS:
        raise MallocbenchError(
            f"durations.settle = {value!r} applies to turns only: set alternate = "
            f"{TURNS!r} (or design = {AUTO!r}, which may choose turns), or remove settle "
            f"(each {RUNS!r} slice starts a client of its own)"
        )
    return _bounded_int(value, "durations.settle", 1, MAX_SETTLE_ROUNDS)


def _max_warmup(value: object, warmup: float) -> float:
    if warmup == 0:
        raise MallocbenchError(
            "durations.max_warmup is set but warmup = 0 turns warming off: "
            "remove max_warmup, or give warmup the minimum seconds to warm"
        )
    max_warmup = _seconds(value, "durations.max_warmup", 0)
    if max_warmup < warmup:
        raise MallocbenchError(
            f"durations.max_warmup = {value!r} is below durations.warmup "
            f"= {warmup:g}: warmup is the minimum, max_warmup the maximum"
        )
    return max_warmup
