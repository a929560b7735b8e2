"""The JSON Schema of a patterns experiment file: the run file's frame, with each case's
pattern and the driver options it takes (from the driver's own option tables)."""

from __future__ import annotations

from typing import Any

from mallocbench.patterns.driver import PATTERN_OPTIONS, PATTERNS
from mallocbench.patterns.experiment import ALL_OPTIONS, INIT_MODES, OPTION_BOUNDS
from mallocbench.run.dialect import CASE, PATTERNS_TOP, Schema, table
from mallocbench.run.schema import document

_OPTION_TYPES = {"size": ["integer", "string"], "count": ["integer", "string"]}


def _option(name: str) -> Schema:
    """A driver option: what it is and which patterns take it."""
    takes = ", ".join(p for p in PATTERNS if name in PATTERN_OPTIONS[p])
    if name == "init":
        return {"type": "string", "enum": list(INIT_MODES), "description": f"for {takes}"}
    kind, low, high = OPTION_BOUNDS[name]
    types = _OPTION_TYPES.get(kind, ["number", "string"])
    return {"type": types, "description": f"{kind} from {low} to {high:,}, for {takes}"}


def build() -> dict[str, Any]:
    """The JSON Schema of a patterns experiment file."""
    case = table(
        {**CASE, "pattern": {**CASE["pattern"], "enum": list(PATTERNS)}}
        | {name: _option(name) for name in ALL_OPTIONS},
        "a case: one pattern with its driver options",
        ("pattern",),
    )
    patterns = {**PATTERNS_TOP["patterns"], "items": case}
    top = table(
        {**PATTERNS_TOP, "patterns": patterns},
        "a mallocbench patterns experiment (mallocbench patterns FILE)",
    )
    return document("patterns", top)
