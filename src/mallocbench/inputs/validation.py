"""Every problem of an input file in one pass, each at its file and line.

A validator records problems instead of stopping at the first: each is a key path (as in
the parsed data: ("setup", 1, "allocator")) and the one-line message the checks have
always given. At the end they become one MallocbenchError, located with tomlpos:

    examples/x.toml: 4 problems:
      examples/x.toml:3: unknown key 'stepz' in the experiment (did you mean 'steps'?): ...
      examples/x.toml:9: durations.step = 'ten' is not a duration: write e.g. 90s, 30m or 2h

One problem stays one line, so `mallocbench: error: x.toml:3: ...` reads as before.
"""

from __future__ import annotations

import tomllib
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from mallocbench.errors import MallocbenchError, did_you_mean
from mallocbench.files import read_bounded
from mallocbench.inputs.tomlpos import KeyPath, locate, positions

T = TypeVar("T")


@dataclass(frozen=True)
class Problem:
    path: KeyPath
    message: str


@dataclass(frozen=True)
class Located:
    """A problem with its place: line and column in the file, or the --set that made it."""

    message: str
    line: int | None = None
    column: int | None = None
    where: str = ""  # the place when it is not a line of the file


class Problems:
    """The problems found so far; `raise_if_any` turns them into one error."""

    def __init__(self) -> None:
        self.items: list[Problem] = []

    def add(self, path: KeyPath, message: str) -> None:
        self.items.append(Problem(path, message))

    @contextmanager
    def at(self, *path: str | int) -> Iterator[None]:
        """Record a MallocbenchError raised in the block as a problem at `path`."""
        try:
            yield
        except MallocbenchError as exc:
            self.add(path, str(exc))

    def check(self, path: KeyPath, check: Callable[..., T], *args: Any) -> T | None:
        """check(*args), or None when it found a problem (recorded at `path`)."""
        with self.at(*path):
            return check(*args)
        return None

    def failed(self, *prefix: str | int) -> bool:
        """Whether anything at or under `prefix` failed: checks that build on it skip,
        since their complaint would only repeat the first."""
        return any(p.path[: len(prefix)] == prefix for p in self.items)

    def unknown_keys(
        self, path: KeyPath, table: dict[str, Any], allowed: Collection[str], where: str
    ) -> None:
        """One problem per key `table` has beyond `allowed`, with a near miss suggested."""
        for key in table:
            if key not in allowed:
                self.add(
                    path + (key,),
                    f"unknown key {key!r} in {where}{did_you_mean(key, allowed)}: allowed "
                    f"keys are {', '.join(sorted(allowed))}",
                )

    def raise_if_any(
        self,
        source: str | None = None,
        text: str = "",
        overridden: dict[KeyPath, str] | None = None,
    ) -> None:
        """Raise one MallocbenchError listing every problem, located in `source`'s `text`;
        `overridden` maps paths set on the command line to the `--set` that set them."""
        if not self.items:
            return
        located = locate_all(self.items, text if source else "", overridden or {})
        raise MallocbenchError(format_problems(located, source))


def locate_all(problems: list[Problem], text: str, overridden: dict[KeyPath, str]) -> list[Located]:
    """The problems with their places, in file order (those without a line first)."""
    found = positions(text) if text else {}
    located = []
    for problem in problems:
        setter = next((s for p, s in overridden.items() if problem.path[: len(p)] == p), None)
        if setter is not None:
            located.append(Located(problem.message, where=setter))
            continue
        place = locate(found, problem.path)
        line, column = place if place else (None, None)
        located.append(Located(problem.message, line, column))
    return sorted(located, key=lambda p: p.line or 0)


def format_problems(located: list[Located], source: str | None) -> str:
    """`FILE:LINE: message`; several as a count line and one indented line each."""

    def one(problem: Located) -> str:
        if problem.where:
            return f"{problem.where}: {problem.message}"
        if source is None:
            return problem.message
        return (
            f"{source}:{problem.line}: {problem.message}"
            if problem.line
            else (f"{source}: {problem.message}")
        )

    if len(located) == 1:
        return one(located[0])
    head = f"{source}: " if source else ""
    return "\n".join([f"{head}{len(located)} problems:", *(f"  {one(p)}" for p in located)])


# Experiment files are a few KB; the bound stops a device or a data file given by mistake.
TOML_LIMIT = 1024**2


def read_toml(path: Path, what: str = "experiment file") -> tuple[str, dict[str, Any]]:
    """The text of a TOML file and its data; a syntax error keeps tomllib's line."""
    try:
        text = read_bounded(path, TOML_LIMIT, what).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MallocbenchError(
            f"{what} {path} is not text (byte {exc.start} is not UTF-8): "
            "give a TOML experiment file"
        ) from None
    try:
        return text, tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise MallocbenchError(f"{path} is not valid TOML: {exc}") from None
