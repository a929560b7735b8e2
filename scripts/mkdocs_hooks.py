"""MkDocs hooks: reference tables generated from the code, so a page cannot drift from it.

A page writes `<!-- mallocbench:schema run -->` (or `patterns`) for the experiment file's
keys, from the JSON Schema that `mallocbench schema` prints, and
`<!-- mallocbench:exitcodes -->` (or `record`) for the exit statuses in exitcodes.py, and
`<!-- mallocbench:fields Cell -->` for a results.json record's fields (results.py).
The commands' options come from the click tree itself (mkdocs-click, reference/cli.md).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

MARKER = re.compile(r"<!-- mallocbench:(\w+)(?: (\w+))? -->")


def _types(node: dict[str, Any]) -> list[str]:
    if "anyOf" in node:
        return sorted({t for option in node["anyOf"] for t in _types(option)})
    kind = node.get("type", "any")
    kinds = kind if isinstance(kind, list) else [kind]
    if "array" in kinds and "items" in node:
        inner = "/".join(_types(node["items"]))
        kinds = [f"array of {inner}" if k == "array" else k for k in kinds]
    return kinds


def _limits(node: dict[str, Any]) -> str:
    parts = []
    if "enum" in node:
        parts.append("one of " + ", ".join(f"`{v}`" for v in node["enum"]))
    bounds = (("minimum", "at least"), ("maximum", "at most"), ("maxLength", "length at most"))
    for key, word in bounds:
        if key in node:
            parts.append(f"{word} {node[key]}")
    for option in node.get("anyOf", []):
        limits = _limits(option)
        if limits and limits not in parts:
            parts.append(limits)
    items = node.get("items")
    if isinstance(items, dict) and items.get("type") != "object":
        limits = _limits(items)
        if limits:
            parts.append(f"each {limits}")
    return "; ".join(parts)


def _rows(node: dict[str, Any], prefix: str) -> Iterator[tuple[str, str, str]]:
    for name, child in node.get("properties", {}).items():
        path = f"{prefix}{name}"
        items = child.get("items", {})
        description = child.get("description") or items.get("description", "")
        limits = _limits(child)
        text = description + (f" ({limits})" if limits else "")
        yield path, ", ".join(_types(child)), text
        if items.get("type") == "object":
            yield from _rows(items, f"{path}[].")
        elif child.get("type") == "object":
            yield from _rows(child, f"{path}.")
            extra = child.get("additionalProperties")
            if isinstance(extra, dict):
                yield (
                    f"{path}.NAME",
                    ", ".join(_types(extra)),
                    "any name: " + (description or "a value"),
                )


def schema_table(kind: str) -> str:
    from mallocbench.commands.schema import build

    schema = build(kind)
    lines = ["| key | type | meaning |", "| --- | --- | --- |"]
    for path, types, text in _rows(schema, ""):
        lines.append(f"| `{path}` | {types} | {text.replace('|', '&#124;')} |")
    return "\n".join(lines)


def exit_table(kind: str) -> str:
    from mallocbench import exitcodes

    policy = exitcodes.RECORD_POLICY if kind == "record" else exitcodes.POLICY
    lines = ["| status | meaning |", "| --- | --- |"]
    for code, text in policy:
        shown = "128 + signal" if code >= exitcodes.INTERRUPTED_BASE else str(code)
        lines.append(f"| {shown} | {' '.join(text.split())} |")
    return "\n".join(lines)


FIELD = re.compile(r"^    (\w+): ([^=#]+?)(?: = [^#]*)?(?:  # (.*))?$")

# Fields whose dataclass carries no comment (their name was thought enough in the code).
MEANINGS = {
    "Cell": {
        "setup": "the setup's name",
        "engine": "innodb or myrocks",
        "step": "the step with its parameters, e.g. `point-query range=100`",
        "threads": "sysbench client threads",
        "repeat": "the block (server start of every setup) it was measured in, from 0",
        "group": "the step's group in the catalogue (`mallocbench steps`)",
        "status": "`ok`, `crashed`, `oom` or `failed`: a crash or OOM kill is a result",
        "qps": "queries per second over the measured seconds",
        "tps": "transactions per second",
        "p95_ms": "95th percentile latency, from sysbench's histogram",
        "p99_ms": "99th percentile latency",
        "avg_ms": "mean latency",
        "errors": "errors sysbench counted",
        "peak_rss_bytes": "the server's highest RSS while the cell ran",
        "peak_vsz_bytes": "the server's highest VSZ (address space, not memory in use)",
        "allocator_path": "the malloc library found mapped in the server (/proc/PID/maps)",
        "cache_bytes": "the buffer pool or block cache the server ran with",
        "session": "the server lifetime it ran in (`sessions[].id`)",
        "started_at": "epoch seconds",
        "duration_s": "measured seconds",
        "error": "why the cell failed or is marked unstable",
        "exit_signal": "the signal that ended a crashed or OOM-killed server",
        "log_tail": "the server's last error-log lines after a crash",
        "metrics": "per-operation costs: `server_cpu_us_per_op`, context switches, "
        "read/write KB and read calls per operation, `client_cpu_share`, ...",
        "samples": "the per-second probe samples (below)",
        "warmup_steady": "see `warmup_s`",
    },
    "Sample": {
        "t": "epoch seconds",
        "rss_bytes": "the server's RSS",
        "vsz_bytes": "the server's VSZ",
        "qps": "queries in that second",
        "tps": "transactions in that second",
        "extra": "the server's own memory counters and cgroup charge, by name",
    },
    "SessionInfo": {
        "id": "`SETUP.ENGINE.rREPEAT`",
        "setup": "the setup's name",
        "engine": "innodb or myrocks",
        "repeat": "its block",
        "started_at": "epoch seconds",
        "ended_at": "epoch seconds",
        "peak_rss_bytes": "the server's highest RSS over its life",
        "peak_vsz_bytes": "the server's highest VSZ over its life",
        "status": "`ok`, `crashed`, `oom` or `failed`",
        "pid": "the server's process id",
        "thp": "the THP mode the server really ran under",
        "peak_cgroup_bytes": "see `memory_limit_bytes`",
        "worker_cpu_share": "see `host`",
    },
    "SetupInfo": {
        "name": "the setup's name",
        "allocator": "its allocator's name",
        "allocator_version": "the installed version",
        "allocator_library": "the library file",
        "knobs": "the allocator environment it ran with",
        "config": "its my.cnf overrides",
        "server": "the server binary",
        "server_version": "its version",
        "cpus": "the CPU list it was pinned to",
        "description": "the setup's description",
    },
    "RunResult": {
        "run_id": "`NAME-YYYYMMDD-HHMMSS`",
        "experiment": "the experiment's name",
        "base_setup": "the setup the ratios divide by",
        "metadata": "host, versions, design, notes (results.json `metadata`)",
        "setups": "the setups as they ran (below)",
        "sessions": "every server lifetime (below)",
        "cells": "every measured result (below)",
        "experiment_text": "the experiment file's text, with its `--set` overrides",
        "schema": "the results.json format's version",
    },
}


def fields_table(name: str) -> str:
    """A results.json record's fields, from its dataclass in results.py: name, type and
    the comment written above the field, when there is one."""
    import inspect

    from mallocbench.model import results

    source = inspect.getsource(getattr(results, name)).splitlines()
    meanings = dict(MEANINGS.get(name, {}))
    lines = ["| field | type | meaning |", "| --- | --- | --- |"]
    comment: list[str] = []
    for line in source:
        stripped = line.strip()
        if stripped.startswith("#") and line.startswith("    #"):
            comment.append(stripped.lstrip("# "))
            continue
        match = FIELD.match(line)
        if match:
            field_name = match.group(1)
            said = match.group(3) or " ".join(comment) or meanings.pop(field_name, "")
            meanings.pop(field_name, None)
            if not said:
                raise ValueError(f"results.{name}.{field_name} has no meaning: add it to MEANINGS")
            text = said.replace("|", "&#124;")
            kind = match.group(2).strip().replace(" | ", " or ")
            lines.append(f"| `{field_name}` | `{kind}` | {text} |")
        comment = []
    if meanings:  # a field renamed or removed in the code, still described here
        raise ValueError(f"results.{name} has no field {', '.join(meanings)}")
    return "\n".join(lines)


def _render(match: re.Match[str]) -> str:
    what, kind = match.group(1), match.group(2)
    if what == "schema":
        return schema_table(kind or "run")
    if what == "fields":
        return fields_table(kind or "Cell")
    if what == "exitcodes":
        return exit_table(kind or "")
    raise ValueError(f"unknown mallocbench marker {match.group(0)}")


def on_page_markdown(markdown: str, **_: Any) -> str:
    return MARKER.sub(_render, markdown)
