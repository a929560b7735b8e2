"""JSON Schemas of the experiment files, for editors (completion, hover, typos marked).

Built from the key tables the validators use (mallocbench.run.dialect, and the driver's
options), so the schema and the validator never disagree on a key's name. The validator
stays the judge: it also checks what a schema cannot (allocators installed, CPUs that
exist, setup names that match).
"""

from __future__ import annotations

from typing import Any

from mallocbench.patterns.driver import PATTERN_OPTIONS, PATTERNS
from mallocbench.patterns.experiment import ALL_OPTIONS, INIT_MODES, OPTION_BOUNDS
from mallocbench.run.dialect import CASE, PATTERNS_TOP, RUN_TOP, Schema, table

# Draft 7: what editor extensions (taplo, behind "Even Better TOML") read best.
DRAFT = "http://json-schema.org/draft-07/schema#"
KINDS = ("run", "patterns")

_OPTION_TYPES = {"size": ["integer", "string"], "count": ["integer", "string"]}


def _option(name: str) -> Schema:
    """A driver option: what it is and which patterns take it."""
    takes = ", ".join(p for p in PATTERNS if name in PATTERN_OPTIONS[p])
    if name == "init":
        return {"type": "string", "enum": list(INIT_MODES), "description": f"for {takes}"}
    kind, low, high = OPTION_BOUNDS[name]
    types = _OPTION_TYPES.get(kind, ["number", "string"])
    return {"type": types, "description": f"{kind} from {low} to {high:,}, for {takes}"}


def build(kind: str) -> dict[str, Any]:
    """The JSON Schema of a `run` or a `patterns` experiment file."""
    if kind == "run":
        top = table(RUN_TOP, "a mallocbench run experiment (mallocbench run FILE)")
    else:
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
    return {"$schema": DRAFT, "title": f"mallocbench {kind} experiment", **top}
