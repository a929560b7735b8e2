"""One validator for run and patterns files: every problem in one run, each at its line,
with a suggestion for a near miss; and a JSON Schema for editors from the same tables."""

from __future__ import annotations

import json
import re
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest

from cli_runner import run_cli
from mallocbench.commands.schema import build
from mallocbench.errors import MallocbenchError
from mallocbench.inputs.tomlpos import positions
from mallocbench.patterns import experiment as pexp
from mallocbench.run.loading import from_dict, load

ROOT = Path(__file__).resolve().parents[1]

# Four mistakes, on lines 2, 7, 15 and 21.
RUN_FILE = """\
name = "four"
stepz = ["point-query"]
engines = ["innodb"]
threads = [1]
steps = [
  "point-query",
  "update-nonindx",
]
[dataset]
tables = 1
rows = 2000
cache = "32M"
[durations]
warmup = 0
step = "ten"
[[setup]]
name = "glibc"
allocator = "glibc"
[[setup]]
name = "je"
allocator = "jemaloc"
"""

# Four mistakes, on lines 3, 10, 13 and 15.
PATTERNS_FILE = """\
name = "four"
base = "glibc"
repeat = 2
seconds = 0.5
[[setup]]
name = "glibc"
allocator = "glibc"
[[setup]]
name = "je"
allocator = "jemaloc"
[[patterns]]
pattern = "sortbuf"
seconds = "ten"
[[patterns]]
pattern = "sortbuff"
"""


def located_errors(result: subprocess.CompletedProcess[str], path: Path) -> list[tuple[int, str]]:
    """(line, message) of each problem the command reported, after checking the frame."""
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stdout + result.stderr, result.stderr
    lines = result.stderr.splitlines()
    assert lines[0].startswith(f"mallocbench: error: {path}: "), result.stderr
    count = int(re.search(r"(\d+) problems:$", lines[0]).group(1))  # type: ignore[union-attr]
    found = []
    for line in lines[1:]:
        match = re.fullmatch(rf"  {re.escape(str(path))}:(\d+): (.*)", line)
        assert match, line
        found.append((int(match.group(1)), match.group(2)))
    assert len(found) == count, result.stderr
    return found


def test_a_run_file_with_four_mistakes_gets_four_located_errors(tmp_path: Path) -> None:
    path = tmp_path / "four.toml"
    path.write_text(RUN_FILE)
    errors = located_errors(run_cli("run", str(path), "--dry-run"), path)
    assert [n for n, _ in errors] == [2, 7, 15, 21], errors
    messages = [m for _, m in errors]
    assert "unknown key 'stepz' in the experiment (did you mean 'steps'?)" in messages[0]
    assert "unknown step 'update-nonindx' (did you mean 'update-nonindex'?)" in messages[1]
    assert messages[2] == "durations.step = 'ten' is not a duration: write e.g. 90s, 30m or 2h"
    assert "unknown allocator 'jemaloc' (did you mean 'jemalloc'?)" in messages[3]


def test_a_patterns_file_with_four_mistakes_gets_four_located_errors(tmp_path: Path) -> None:
    path = tmp_path / "p.toml"
    path.write_text(PATTERNS_FILE)
    errors = located_errors(run_cli("patterns", str(path), "--dry-run"), path)
    assert [n for n, _ in errors] == [3, 10, 13, 15], errors
    messages = [m for _, m in errors]
    assert "unknown key 'repeat' in the experiment (did you mean 'repeats'?)" in messages[0]
    assert (
        "setup je.allocator: unknown allocator 'jemaloc' (did you mean 'jemalloc'?)"
        in (messages[1])
    )
    assert (
        messages[2] == "patterns[0].seconds: expected a duration in seconds (e.g. 1.5), not 'ten'"
    )
    assert "not 'sortbuff' (did you mean 'sortbuf'?)" in messages[3]


def test_soak_reports_the_whole_list_too(tmp_path: Path) -> None:
    path = tmp_path / "four.toml"
    path.write_text(RUN_FILE)
    errors = located_errors(run_cli("soak", str(path), "--dry-run"), path)
    assert [n for n, _ in errors] == [2, 7, 15, 21], errors


def test_one_problem_stays_one_line_and_set_is_named(tmp_path: Path) -> None:
    path = tmp_path / "one.toml"
    text = RUN_FILE.replace('stepz = ["point-query"]', "# no mistake here")
    path.write_text(text.replace("nonindx", "nonindex").replace("jemaloc", "glibc"))
    result = run_cli("run", str(path), "--dry-run")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.splitlines() == [
        f"mallocbench: error: {path}:15: durations.step = 'ten' is not a duration: write e.g. "
        "90s, 30m or 2h"
    ]
    result = run_cli(
        "run", str(path), "--dry-run", "--set", "durations.step=1", "--set", "threads=0"
    )
    assert result.stderr.splitlines() == [
        "mallocbench: error: --set threads=0: threads contains 0: use whole numbers from 1 to 4096"
    ]


def test_without_a_file_the_messages_are_as_before() -> None:
    data = tomllib.loads(RUN_FILE)
    with pytest.raises(MallocbenchError) as caught:
        from_dict(data)
    lines = str(caught.value).splitlines()
    assert lines[0] == "4 problems:" and lines[1].startswith("  unknown key 'stepz'")


def test_every_example_loads() -> None:
    for path in sorted((ROOT / "examples").glob("*.toml")):
        if path.name.startswith("patterns"):
            assert pexp.load(path).plan(), path
        else:
            assert load(path).setups, path


def test_positions_follow_toml_structure() -> None:
    text = """\
a = 1  # a = 2
"b.c" = { d = 'x', "e f" = [1, 2] }
s = \"\"\"
[not a table]
k = 3
\"\"\"
[t.u]
v = [
  "w",  # ]
  { x = 1 },
]
[[arr]]
y = 1
[[arr]]
y = 2
[arr.sub]
z = 3
"""
    assert tomllib.loads(text)  # the locator reads what tomllib accepts
    found = positions(text)
    assert found[("a",)] == (1, 1)
    assert found[("b.c", "e f")] == (2, 20) and found[("b.c", "e f", 1)] == (2, 32)
    assert ("k",) not in found and found[("t", "u")] == (7, 1)
    assert found[("t", "u", "v", 1)] == (10, 3) and found[("t", "u", "v", 1, "x")] == (10, 5)
    assert found[("arr", 1, "y")] == (15, 1) and found[("arr", 1, "sub", "z")] == (17, 1)


# ---------------------------------------------------------------- the JSON Schema


def conforms(value: Any, schema: dict[str, Any], where: str = "") -> list[str]:
    """What of `value` the schema refuses (the keywords mallocbench's schemas use)."""
    if "anyOf" in schema:
        options = [conforms(value, s, where) for s in schema["anyOf"]]
        return [] if any(not o for o in options) else options[0]
    kinds = schema.get("type")
    kinds = [kinds] if isinstance(kinds, str) else kinds
    python: dict[str, type | tuple[type, ...]] = {
        "string": str, "integer": int, "number": (int, float), "boolean": bool,
        "object": dict, "array": list}  # fmt: skip
    if kinds and not any(isinstance(value, python[k]) for k in kinds):
        return [f"{where}: {value!r} is not {kinds}"]
    if "enum" in schema and value not in schema["enum"]:
        return [f"{where}: {value!r} not in {schema['enum']}"]
    problems = []
    if isinstance(value, dict):
        props = schema.get("properties", {})
        extra = schema.get("additionalProperties", True)
        problems += [
            f"{where}: {k} is required" for k in schema.get("required", ()) if k not in value
        ]
        for key, item in value.items():
            if key in props:
                problems += conforms(item, props[key], f"{where}.{key}")
            elif extra is False:
                problems.append(f"{where}: {key} is not allowed")
            elif isinstance(extra, dict):
                problems += conforms(item, extra, f"{where}.{key}")
    if isinstance(value, list) and "items" in schema:
        for i, item in enumerate(value):
            problems += conforms(item, schema["items"], f"{where}[{i}]")
    return problems


def test_the_schema_accepts_every_example_and_marks_a_typo() -> None:
    for path in sorted((ROOT / "examples").glob("*.toml")):
        kind = "patterns" if path.name.startswith("patterns") else "run"
        data = tomllib.loads(path.read_text())
        assert conforms(data, build(kind)) == [], path
    assert conforms(tomllib.loads(RUN_FILE), build("run")) == [": stepz is not allowed"]
    assert ".patterns[1].pattern: 'sortbuff' not in" in "".join(
        conforms(tomllib.loads(PATTERNS_FILE), build("patterns"))
    )


def test_schema_command_prints_json() -> None:
    for kind in ("run", "patterns"):
        result = run_cli("schema", kind)
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout)["title"] == f"mallocbench {kind} experiment"
    assert run_cli("schema", "nope").returncode == 2


def test_one_setup_table_serves_both_kinds_of_file() -> None:
    """Each kind accepts the other's setup keys and leaves them out, checked by one code
    path: a driver option in a run file, a server option in a patterns file."""
    setups = (
        '[[setup]]\nname = "g"\nallocator = "glibc"\noptions = { init = "calloc" }\n'
        'cpus = 1\nconfig = { sort_buffer_size = "2M" }\n'
    )
    run = from_dict(tomllib.loads('steps = ["point-query"]\n[dataset]\ncache = "32M"\n' + setups))
    patterns = pexp.from_dict(tomllib.loads(setups + '[[patterns]]\npattern = "sortbuf"\n'), "p")
    assert run.setups[0].config == {"sort_buffer_size": "2M"}
    assert patterns.setups["g"].options == {"init": "calloc"}
    for checker in (lambda d: from_dict(d), lambda d: pexp.from_dict(d, "p")):
        bad = tomllib.loads(setups.replace("knobs", "x") + '[[patterns]]\npattern = "oltp"\n')
        bad["setup"][0]["knbos"] = {}
        with pytest.raises(MallocbenchError, match=r"unknown key 'knbos' in \[\[setup\]\] g "):
            checker(bad)
