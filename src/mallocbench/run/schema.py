"""The JSON Schema of a run experiment file, for editors (completion, hover, typos marked).

Built from the key tables the validators use (mallocbench.run.dialect), so the schema and
the validator never disagree on a key's name. The validator stays the judge: it also
checks what a schema cannot (allocators installed, CPUs that exist, setup names that
match). patterns.schema builds the patterns file's on the same frame.
"""

from __future__ import annotations

from typing import Any

from mallocbench.run.dialect import RUN_TOP, Schema, table

# Draft 7: what editor extensions (taplo, behind "Even Better TOML") read best.
DRAFT = "http://json-schema.org/draft-07/schema#"


def document(kind: str, top: Schema) -> dict[str, Any]:
    """A schema document for a `kind` experiment file whose top table is `top`."""
    return {"$schema": DRAFT, "title": f"mallocbench {kind} experiment", **top}


def build() -> dict[str, Any]:
    """The JSON Schema of a run experiment file."""
    return document("run", table(RUN_TOP, "a mallocbench run experiment (mallocbench run FILE)"))
