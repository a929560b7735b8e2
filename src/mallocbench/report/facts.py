"""What a run records about its host and its setups, and how every format words it.

One label and one formatter per fact: the terminal's run line, Markdown's, the HTML
metadata table and the compare page all take their rows from the tables below, so a fact
reads the same everywhere and a new one is one line here.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

from mallocbench import formatting as fmt
from mallocbench.results import SetupInfo

Metadata = Mapping[str, Any]


@dataclass(frozen=True)
class RunFact:
    label: str
    keys: tuple[str, ...]  # the metadata keys it reads
    text: Callable[[Metadata], str | None]  # None: the run did not record it


def _plain(key: str) -> Callable[[Metadata], str | None]:
    return lambda meta: None if meta.get(key) in (None, "") else str(meta[key])


def _joined(key: str) -> Callable[[Metadata], str | None]:
    return lambda meta: ", ".join(str(v) for v in meta.get(key) or []) or None


def _cpu(meta: Metadata) -> str | None:
    if not (meta.get("cpu_model") or meta.get("cpus")):
        return None
    return f"{meta.get('cpus', '?')} x {meta.get('cpu_model') or 'unknown model'}"


def _memory(meta: Metadata) -> str | None:
    return f"{fmt.gb(meta['memory_bytes'])} GiB" if meta.get("memory_bytes") else None


def _thp(meta: Metadata) -> str | None:
    if not meta.get("thp"):
        return None
    return f"{meta['thp']} (defrag: {meta.get('thp_defrag') or '?'})"


def _dataset(meta: Metadata) -> str | None:
    dataset = meta.get("dataset")
    if not isinstance(dataset, dict) or not dataset:
        return None
    return (
        f"{dataset.get('tables')} table(s) x {dataset.get('rows') or 0:,} rows, cache "
        f"{fmt.mib(dataset.get('cache_bytes'))}"
    )


def _durations(meta: Metadata) -> str | None:
    durations = meta.get("durations")
    return fmt.durations(durations) if isinstance(durations, dict) else None


RUN_FACTS = (
    RunFact("host", ("host",), _plain("host")),
    RunFact("OS", ("os",), _plain("os")),
    RunFact("CPU", ("cpus", "cpu_model"), _cpu),
    RunFact("memory", ("memory_bytes",), _memory),
    RunFact("kernel", ("kernel",), _plain("kernel")),
    RunFact("glibc", ("glibc",), _plain("glibc")),
    RunFact("transparent huge pages", ("thp", "thp_defrag"), _thp),
    RunFact("server", ("server_versions",), _joined("server_versions")),
    RunFact("sysbench", ("sysbench",), _plain("sysbench")),
    RunFact("mallocbench", ("mallocbench",), _plain("mallocbench")),
    RunFact("python", ("python",), _plain("python")),
    RunFact("dataset", ("dataset",), _dataset),
    RunFact("durations", ("durations",), _durations),
    RunFact("repeats", ("repeats",), _plain("repeats")),
    RunFact("client threads", ("threads",), _joined("threads")),
    RunFact("experiment file", ("experiment_file",), _plain("experiment_file")),
)

# The host as a one-line heading shows it (the HTML page's subtitle, Markdown's run line).
HOST_LINE = ("host", "CPU", "memory", "kernel", "glibc", "transparent huge pages")

# Recorded keys other sections show (setups, the statistics, the adaptive stop, soak,
# cluster, notes): a fact row of their raw value would say it twice, worse.
SHOWN_ELSEWHERE = frozenset(
    {"allocators", "engines", "steps", "min_effect", "adaptive", "design", "notes", "soak"}
    | {"cluster", "hosts"}
)


def run_facts(meta: Metadata, labels: Collection[str] | None = None) -> list[tuple[str, str]]:
    """(label, text) of each fact the run recorded, in RUN_FACTS order, then the simple
    values of keys this version has no fact for (a newer mallocbench's, a user's).

    `labels` keeps only those facts, and no unknown keys.
    """
    facts = []
    for fact in RUN_FACTS:
        if labels is not None and fact.label not in labels:
            continue
        text = fact.text(meta)
        if text is not None:
            facts.append((fact.label, text))
    if labels is not None:
        return facts
    known = {key for fact in RUN_FACTS for key in fact.keys} | SHOWN_ELSEWHERE
    for key, value in meta.items():
        if key not in known and isinstance(value, str | int | float) and value != "":
            facts.append((key, str(value)))
    return facts


@dataclass(frozen=True)
class SetupField:
    label: str
    text: Callable[[SetupInfo], str]


def _or_dash(value: str | None) -> str:
    return value if value not in (None, "") else "-"


def _memory_limit(setup: SetupInfo) -> str:
    return fmt.mib(setup.memory_limit_bytes) if setup.memory_limit_bytes else "none"


SETUP_FIELDS = (
    SetupField("allocator", lambda s: s.allocator),
    SetupField("allocator version", lambda s: _or_dash(s.allocator_version)),
    SetupField("allocator library", lambda s: _or_dash(s.allocator_library)),
    SetupField("knobs", lambda s: fmt.knobs(s.knobs)),
    SetupField("config", lambda s: fmt.knobs(s.config)),
    SetupField("server", lambda s: _or_dash(s.server)),
    SetupField("server version", lambda s: _or_dash(s.server_version)),
    SetupField("CPU set", lambda s: s.cpus or "all"),
    SetupField("THP (asked)", lambda s: s.thp or "system"),
    SetupField("memory limit", _memory_limit),
)

# The setups table of every format: what a reader needs to rerun a setup. The server's
# path is left to the differences, a cap to the runs that have one.
SETUP_TABLE = (
    "allocator",
    "allocator version",
    "allocator library",
    "knobs",
    "config",
    "server version",
    "CPU set",
    "THP (asked)",
)


# What-differs-between-setups compares these; knobs and config are compared per key.
DIFFERENCE_FIELDS = tuple(f.label for f in SETUP_FIELDS if f.label not in ("knobs", "config"))


def setup_fields(labels: Collection[str]) -> list[SetupField]:
    return [f for f in SETUP_FIELDS if f.label in labels]


def setup_table(setups: list[SetupInfo]) -> list[SetupField]:
    """SETUP_TABLE's fields, and the memory limit when any setup was capped."""
    capped = any(s.memory_limit_bytes for s in setups)
    return setup_fields([*SETUP_TABLE, *(["memory limit"] if capped else [])])
