"""What the reports show of a run's metadata and of its setups: one label and one
formatter per fact, for every renderer that shows it (the HTML report's run facts, setup
differences and setups table, the compare page, the Markdown run line and setups table).

A report picks facts from here by key; it never words a fact itself, so a fact reads the
same everywhere.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from mallocbench import units as fmt
from mallocbench.model.metadata import DatasetRecord, HostFacts, RunMetadata
from mallocbench.model.results import RunResult, SetupInfo

# ---------------------------------------------------------------- run facts


@dataclass(frozen=True)
class RunFact:
    key: str
    label: str
    value: Callable[[RunMetadata], object]  # None, "", [] or {}: not shown
    brief: bool = False  # also in the one-line summaries (the Markdown run line)


def _host(meta: RunMetadata) -> HostFacts:
    return meta.host or HostFacts()


def _or(value: object, unknown: object) -> object:
    return unknown if value is None else value


def _cpu(meta: RunMetadata) -> str | None:
    host = _host(meta)
    if not (host.cpu_model or host.cpus):
        return None
    return f"{_or(host.cpus, '?')} x {_or(host.cpu_model, 'unknown model')}"


def _memory(meta: RunMetadata) -> str | None:
    memory = _host(meta).memory_bytes
    return f"{fmt.gb(memory)} GiB" if memory else None


def _thp(meta: RunMetadata) -> str | None:
    host = _host(meta)
    return f"{host.thp} (defrag: {_or(host.thp_defrag, '?')})" if host.thp else None


def _dataset(meta: RunMetadata) -> str | None:
    dataset: DatasetRecord | None = meta.dataset
    if dataset is None:
        return None
    return (
        f"{dataset.tables} table(s) x {_or(dataset.rows, 0):,} rows, cache "
        f"{fmt.mib(dataset.cache_bytes)}"
    )


RUN_FACTS: tuple[RunFact, ...] = (
    RunFact("host", "host", lambda m: _host(m).name, brief=True),
    RunFact("os", "OS", lambda m: _host(m).os),
    RunFact("cpu", "CPU", _cpu, brief=True),
    RunFact("memory", "memory", _memory, brief=True),
    RunFact("kernel", "kernel", lambda m: _host(m).kernel, brief=True),
    RunFact("glibc", "glibc", lambda m: _host(m).glibc, brief=True),
    RunFact("thp", "transparent huge pages", _thp, brief=True),
    RunFact("server", "server", lambda m: ", ".join(m.server_versions or []), brief=True),
    RunFact("sysbench", "sysbench", lambda m: _host(m).sysbench),
    RunFact("mallocbench", "mallocbench", lambda m: _host(m).mallocbench),
    RunFact("python", "python", lambda m: _host(m).python),
    RunFact("dataset", "dataset", _dataset, brief=True),
    RunFact(
        "durations",
        "durations",
        lambda m: fmt.durations(m.durations) if m.durations is not None else None,
        brief=True,
    ),
    RunFact("repeats", "repeats", lambda m: m.repeats),
    RunFact("threads", "client threads", lambda m: ", ".join(str(t) for t in m.threads or [])),
    RunFact("experiment_file", "experiment file", lambda m: m.experiment_file),
)
# The page header's line: the machine at a glance.
HEADLINE = ("host", "cpu", "kernel", "glibc")


def _shown(value: object) -> bool:
    return value not in (None, "", [], {})


def run_facts(meta: RunMetadata) -> list[tuple[str, str]]:
    """(label, text) of every fact the run recorded, then of each simple value under a key
    this version does not know (a newer version's), under that key."""
    facts = [(f.label, str(v)) for f in RUN_FACTS if _shown(v := f.value(meta))]
    known = RunMetadata.known_keys()
    for key, value in meta.extra.items():
        if key not in known and isinstance(value, str | int | float) and _shown(value):
            facts.append((key, str(value)))
    return facts


def brief_facts(meta: RunMetadata) -> list[tuple[str, str]]:
    return _picked(meta, {f.key for f in RUN_FACTS if f.brief})


def headline_facts(meta: RunMetadata) -> list[tuple[str, str]]:
    return _picked(meta, set(HEADLINE))


def _picked(meta: RunMetadata, keys: set[str]) -> list[tuple[str, str]]:
    return [(f.label, str(v)) for f in RUN_FACTS if f.key in keys and _shown(v := f.value(meta))]


# ---------------------------------------------------------------- setups


@dataclass(frozen=True)
class SetupField:
    key: str
    label: str
    value: Callable[[SetupInfo], str | None]
    empty: str = "-"  # shown when the setup has no value

    def text(self, setup: SetupInfo) -> str:
        value = self.value(setup)
        return self.empty if value in (None, "") else str(value)


SETUP_FIELDS: dict[str, SetupField] = {
    f.key: f
    for f in (
        SetupField("allocator", "allocator", lambda s: s.allocator),
        SetupField("allocator_version", "allocator version", lambda s: s.allocator_version),
        SetupField("allocator_library", "allocator library", lambda s: s.allocator_library),
        SetupField("knobs", "knobs", lambda s: fmt.knobs(s.knobs)),
        SetupField("config", "config", lambda s: fmt.knobs(s.config)),
        SetupField("server", "server", lambda s: s.server),
        SetupField("server_version", "server version", lambda s: s.server_version),
        SetupField("cpus", "CPU set", lambda s: s.cpus, empty="all"),
        SetupField("thp", "THP (asked)", lambda s: s.thp, empty="system"),
        SetupField(
            "memory_limit",
            "memory limit",
            lambda s: fmt.mib(s.memory_limit_bytes) if s.memory_limit_bytes else None,
            empty="none",
        ),
    )
}
SETUP_LABELS = {key: f.label for key, f in SETUP_FIELDS.items()}
# The setups table of every format: what a reader needs to rerun a setup. The server's
# path is left to the differences, and the cap to runs where a setup has one.
SETUP_TABLE = (
    "allocator",
    "allocator_version",
    "allocator_library",
    "knobs",
    "config",
    "server_version",
    "cpus",
    "thp",
)


def setup_table(setups: list[SetupInfo]) -> list[SetupField]:
    """The setups table's columns for these setups."""
    capped = any(s.memory_limit_bytes for s in setups)
    return [SETUP_FIELDS[key] for key in (*SETUP_TABLE, *(["memory_limit"] if capped else []))]


# What each setup's servers really ran under, which may differ from what it asked.
THP_RAN_UNDER = "THP (ran under)"


def knob_label(name: str) -> str:
    return f"knob {name}"


def config_label(name: str) -> str:
    return f"config {name}"


# The rows of "what differs between setups", in this order.
_COMPARED = ("allocator", "allocator_version", "allocator_library", "server", "server_version")


def setup_differences(result: RunResult) -> list[tuple[str, dict[str, str]]]:
    """Only what differs between setups: the reader's question is 'what did we change?'."""
    setups = result.setups
    if len(setups) < 2:
        return []
    rows: dict[str, dict[str, str]] = {}
    for key in (*_COMPARED, "cpus", "thp"):
        rows[SETUP_LABELS[key]] = {s.name: SETUP_FIELDS[key].text(s) for s in setups}
    ran_under: dict[str, set[str]] = {}
    for session in result.sessions:
        if session.thp:
            ran_under.setdefault(session.setup, set()).add(session.thp)
    rows[THP_RAN_UNDER] = {
        s.name: "; ".join(sorted(ran_under.get(s.name, ()))) or "-" for s in setups
    }
    rows[SETUP_LABELS["memory_limit"]] = {
        s.name: SETUP_FIELDS["memory_limit"].text(s) for s in setups
    }
    for name in sorted({k for s in setups for k in s.knobs}):
        rows[knob_label(name)] = {s.name: s.knobs.get(name) or "-" for s in setups}
    for name in sorted({k for s in setups for k in s.config}):
        rows[config_label(name)] = {s.name: s.config.get(name) or "-" for s in setups}
    return [(label, values) for label, values in rows.items() if len(set(values.values())) > 1]


__all__ = [
    "HEADLINE",
    "RUN_FACTS",
    "SETUP_FIELDS",
    "SETUP_LABELS",
    "SETUP_TABLE",
    "THP_RAN_UNDER",
    "RunFact",
    "SetupField",
    "brief_facts",
    "config_label",
    "headline_facts",
    "knob_label",
    "run_facts",
    "setup_differences",
    "setup_table",
]
