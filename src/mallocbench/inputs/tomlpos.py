"""Where each key of a TOML document stands: line and column, for located errors.

The standard parser (tomllib) keeps no positions, and tomlkit, which keeps the text, has
no position API either and is not a dependency. This is a second pass over text that
tomllib has already accepted: a small tokenizer that only has to follow the structure
(table headers, dotted keys, arrays, inline tables, strings) and can therefore be lenient
about values. It maps each key path, as validators see the parsed data, to its place:

    ("durations", "step")          step = 30            under [durations]
    ("setup", 1, "knobs", "X")     knobs = { X = "1" }  in the second [[setup]]
    ("steps", 2)                   the third element of steps = [...]
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass

KeyPath = tuple[str | int, ...]
Position = tuple[int, int]  # line, column; both 1-based

_BARE = re.compile(r"[A-Za-z0-9_\-+:.]+")
_PUNCT = "[]{}=,"


@dataclass(frozen=True)
class _Token:
    kind: str  # "bare", "str", "nl" or one of _PUNCT
    text: str
    line: int
    column: int


def _string_end(text: str, start: int) -> int:
    """The index just past the string that starts at `start` (any of TOML's four kinds)."""
    quote = text[start]
    triple = text.startswith(quote * 3, start)
    delimiter = quote * 3 if triple else quote
    i = start + len(delimiter)
    while i < len(text):
        if quote == '"' and text[i] == "\\":
            i += 2
            continue
        if text.startswith(delimiter, i):
            # A multi-line string may end with up to two extra quotes: """a"""" is 'a"'.
            end = i + len(delimiter)
            while triple and text.startswith(quote, end) and end - i < 5:
                end += 1
            return end
        if not triple and text[i] == "\n":
            break
        i += 1
    return len(text)


def _tokens(text: str) -> Iterator[_Token]:
    line, line_start, i = 1, 0, 0
    while i < len(text):
        char = text[i]
        column = i - line_start + 1
        if char == "\n":
            yield _Token("nl", char, line, column)
            line, line_start, i = line + 1, i + 1, i + 1
        elif char in " \t\r":
            i += 1
        elif char == "#":
            end = text.find("\n", i)
            i = len(text) if end < 0 else end
        elif char in "\"'":
            end = _string_end(text, i)
            raw = text[i:end]
            yield _Token("str", raw, line, column)
            newlines = raw.count("\n")
            if newlines:
                line, line_start = line + newlines, i + raw.rfind("\n") + 1
            i = end
        elif char in _PUNCT:
            yield _Token(char, char, line, column)
            i += 1
        else:
            match = _BARE.match(text, i)
            end = match.end() if match else i + 1
            yield _Token("bare", text[i:end], line, column)
            i = end


def _key_part(token: _Token) -> list[str]:
    """The key parts a token holds: a bare run may hold dots (a.b), a quoted key never."""
    if token.kind == "str":
        try:
            return [str(tomllib.loads(f"k = {token.text}")["k"])]
        except tomllib.TOMLDecodeError:
            return [token.text.strip("\"'")]
    return [part for part in token.text.split(".") if part]


class _Locator:
    def __init__(self, text: str) -> None:
        self.tokens = list(_tokens(text))
        self.i = 0
        self.found: dict[KeyPath, Position] = {}
        self.arrays: dict[KeyPath, int] = {}  # [[name]] tables seen so far, by path

    def peek(self) -> _Token | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def take(self) -> _Token | None:
        token = self.peek()
        self.i += 1
        return token

    def skip_newlines(self) -> None:
        while (token := self.peek()) is not None and token.kind == "nl":
            self.i += 1

    def key(self, stop: str) -> tuple[list[str], _Token | None]:
        """A dotted key up to `stop` ("=" or "]"); its parts and its first token."""
        parts: list[str] = []
        first = self.peek()
        while (token := self.peek()) is not None and token.kind not in (stop, "nl"):
            parts.extend(_key_part(token))
            self.i += 1
        return parts, first

    def resolve(self, parts: list[str]) -> KeyPath:
        """A header's key as a data path: arrays of tables stand for their latest entry."""
        path: KeyPath = ()
        for part in parts:
            path += (part,)
            if path in self.arrays:
                path += (self.arrays[path] - 1,)
        return path

    def record(self, path: KeyPath, token: _Token | None) -> None:
        if token is not None:
            self.found.setdefault(path, (token.line, token.column))

    def document(self) -> dict[KeyPath, Position]:
        table: KeyPath = ()
        while (token := self.peek()) is not None:
            if token.kind == "nl":
                self.i += 1
            elif token.kind == "[":
                table = self.header(token)
            else:
                self.key_value(table)
                while (rest := self.take()) is not None and rest.kind != "nl":
                    pass  # what follows a value on its line (a date's time part, say)
        return self.found

    def header(self, opening: _Token) -> KeyPath:
        self.i += 1
        is_array = (nxt := self.peek()) is not None and nxt.kind == "["
        if is_array:
            self.i += 1
        parts, _ = self.key("]")
        while (token := self.peek()) is not None and token.kind == "]":
            self.i += 1
        if is_array:
            parent = self.resolve(parts[:-1]) + (parts[-1],) if parts else ()
            self.arrays[parent] = self.arrays.get(parent, 0) + 1
            path = parent + (self.arrays[parent] - 1,)
        else:
            path = self.resolve(parts)
        self.record(path, opening)
        return path

    def key_value(self, table: KeyPath) -> None:
        parts, first = self.key("=")
        path = table + tuple(parts)
        self.record(path, first)
        self.i += 1  # the "="
        self.value(path)

    def value(self, path: KeyPath) -> None:
        token = self.take()
        if token is None:
            return
        if token.kind == "[":
            self.array(path)
        elif token.kind == "{":
            while (inner := self.peek()) is not None and inner.kind not in ("}", "nl"):
                if inner.kind == ",":
                    self.i += 1
                    continue
                self.key_value(path)
            self.i += 1  # the "}"

    def array(self, path: KeyPath) -> None:
        index = 0
        while True:
            self.skip_newlines()
            token = self.peek()
            if token is None or token.kind == "]":
                self.i += 1
                return
            if token.kind == ",":
                self.i += 1
                continue
            self.record(path + (index,), token)
            self.value(path + (index,))
            index += 1


def positions(text: str) -> dict[KeyPath, Position]:
    """Every key path of a TOML document (one tomllib accepts) with its line and column."""
    return _Locator(text).document()


def locate(found: dict[KeyPath, Position], path: KeyPath) -> Position | None:
    """The place of `path`, else of its nearest enclosing key or table (a missing key is
    reported where its table is); None when nothing of it is in the text."""
    for end in range(len(path), 0, -1):
        if path[:end] in found:
            return found[path[:end]]
    return None
