"""--set KEY=VALUE: an experiment's keys overridden from the command line before it is
checked, and the form a run records them in.
"""

from __future__ import annotations

import ast
import contextlib
import tomllib
from typing import Any

from mallocbench.errors import MallocbenchError
from mallocbench.inputs.tomlpos import KeyPath


def apply_overrides(
    data: dict[str, Any], overrides: list[str], overridden: dict[KeyPath, str] | None = None
) -> list[str]:
    """Apply `--set KEY=VALUE` overrides to parsed TOML; returns them as TOML comment lines.

    KEY is dotted (durations.step, dataset.rows, server.config.sort_buffer_size); a setup
    is addressed by name (setup.je.knobs.MALLOC_CONF). VALUE is read as a TOML value
    (10, [1, 8], "2%") and otherwise taken as a string (512M, point-query), so the shell
    needs no TOML quoting. The result is validated like the file itself. `overridden`,
    when given, receives the data path each set with its `--set`, so that a problem in an
    overridden value is reported at the option rather than at a line of the file.
    """
    recorded = []
    overridden = {} if overridden is None else overridden
    for item in overrides:
        key, sep, raw = item.partition("=")
        path = [part.strip() for part in key.split(".")]
        if not sep or not all(path):
            raise MallocbenchError(
                f"--set {item!r} is not KEY=VALUE: write e.g. --set durations.step=10"
            )
        try:
            value = tomllib.loads(f"v = {raw}")["v"]
        except tomllib.TOMLDecodeError:
            value = raw.strip()
        shown = _shown_set(f"{key.strip()}={raw.strip()}")
        overridden[_set_path(data, path, value, item)] = shown
        recorded.append(f"# {shown}")
    return recorded


def _shown_set(item: str) -> str:
    """`--set KEY=VALUE` as messages and the stored text show it: a line break or
    another control character escaped, as repr writes it, so a value can neither add a
    line to the terminal nor a TOML line after the comment that records it."""
    return f"--set {item}" if item.isprintable() else f"--set {item!r}"


def recorded_set(shown: str) -> str:
    """The KEY=VALUE a stored `# --set ...` line records (the inverse of _shown_set)."""
    if shown[:1] in ("'", '"') and shown[-1:] == shown[:1]:
        with contextlib.suppress(ValueError, SyntaxError):
            item = ast.literal_eval(shown)
            if isinstance(item, str):
                return item
    return shown


def _set_path(data: dict[str, Any], path: list[str], value: object, item: str) -> KeyPath:
    """Set `value` at `path`; returns the data path it set (a setup by its index)."""
    node: Any = data
    for depth, part in enumerate(path[:-1]):
        if part == "setup" and depth == 0:
            setups = node.get("setup") or []
            name = path[1] if len(path) > 2 else None
            match = [
                i for i, s in enumerate(setups) if isinstance(s, dict) and s.get("name") == name
            ]
            if not match:
                names = ", ".join(str(s.get("name")) for s in setups if isinstance(s, dict))
                raise MallocbenchError(
                    f"--set {item!r}: no setup named {name!r}; setups: {names or 'none'} "
                    "(address one as setup.NAME.KEY=VALUE)"
                )
            node = setups[match[0]]
            rest = path[2:]
            for inner in rest[:-1]:
                node = _child_table(node, inner, item)
            node[rest[-1]] = value
            return ("setup", match[0], *rest)
        node = _child_table(node, part, item)
    node[path[-1]] = value
    return tuple(path)


def _child_table(node: dict[str, Any], key: str, item: str) -> dict[str, Any]:
    child = node.setdefault(key, {})
    if not isinstance(child, dict):
        raise MallocbenchError(f"--set {item!r}: {key} is a value, not a table")
    return child
