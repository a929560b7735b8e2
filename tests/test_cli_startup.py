"""The CLI answers `--help`, `--version`, `steps`, `allocators` and `run --dry-run` without
loading the heavy libraries (scipy alone took a second), and its lazy command table says
what the commands themselves say."""

from __future__ import annotations

import importlib
import json
import pkgutil
import subprocess
import sys
from pathlib import Path

import click
import pytest

import mallocbench.commands
from mallocbench.cli import COMMANDS, main

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("scipy", "dask", "distributed", "plotly", "psycopg")

QUICK = [
    ["--help"],
    ["--version"],
    ["run", "examples/quick.toml", "--dry-run"],
    ["steps"],
    ["allocators"],
]
HELPS = [[name, "--help"] for name in sorted(COMMANDS)]

# Runs each command line in one interpreter, as the console script would, and reports
# after each which heavy top-level packages it had loaded by then.
PROBE = """
import json, sys
from mallocbench.cli import main
heavy, lines, loaded = {heavy!r}, {lines!r}, {{}}
for args in lines:
    try:
        main(args)
    except SystemExit as exit:
        if exit.code not in (0, None):
            raise
    tops = {{name.partition(".")[0] for name in sys.modules}}
    loaded[" ".join(args)] = sorted(tops & set(heavy))
print("PROBE" + json.dumps(loaded))
"""


def loaded_after(lines: list[list[str]]) -> dict[str, list[str]]:
    out = subprocess.run(
        [sys.executable, "-c", PROBE.format(heavy=HEAVY, lines=lines)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    marker = out.stdout.rindex("PROBE")
    return json.loads(out.stdout[marker + len("PROBE") :])


def test_quick_commands_load_no_heavy_library() -> None:
    loaded = loaded_after(QUICK)
    assert set(loaded) == {" ".join(line) for line in QUICK}
    assert {line: mods for line, mods in loaded.items() if mods} == {}


def test_no_subcommand_help_loads_a_heavy_library() -> None:
    loaded = loaded_after(HELPS)
    assert {line: mods for line, mods in loaded.items() if mods} == {}


def test_the_probe_sees_a_heavy_import() -> None:
    """Without this the two tests above could pass by never seeing anything."""
    probe = PROBE.replace("from mallocbench.cli", "import scipy.stats\nfrom mallocbench.cli")
    out = subprocess.run(
        [sys.executable, "-c", probe.format(heavy=HEAVY, lines=[["--version"]])],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert json.loads(out.stdout[out.stdout.rindex("PROBE") + 5 :]) == {"--version": ["scipy"]}


def _registered() -> dict[str, click.Command]:
    """Every command the command modules define, by the name it is registered under."""
    found: dict[str, click.Command] = {}
    for info in pkgutil.iter_modules(mallocbench.commands.__path__):
        module = importlib.import_module(f"mallocbench.commands.{info.name}")
        for command in getattr(module, "commands", []):
            assert command.name is not None
            found[command.name] = command
    return found


def test_the_lazy_table_lists_every_command_as_it_describes_itself() -> None:
    registered = _registered()
    assert set(COMMANDS) == set(registered)
    for name, lazy in COMMANDS.items():
        command = registered[name]
        module = importlib.import_module(f"mallocbench.commands.{lazy.module}")
        assert getattr(module, lazy.attribute) is command, name
        assert lazy.summary == command.get_short_help_str(10**6), name
        assert lazy.hidden == command.hidden, name


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_command_resolves(name: str) -> None:
    with click.Context(main) as ctx:
        command = main.get_command(ctx, name)
    assert command is not None and command.name == name


def test_help_lists_the_visible_commands_only() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "mallocbench.cli", "--help"],
        capture_output=True,
        text=True,
        env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"},
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    listed = out.stdout.split("Commands:")[1].split("Exit status:")[0]
    rows = [line.split(maxsplit=1) for line in listed.strip().splitlines()]
    assert [name for name, _ in rows] == sorted(
        n for n, lazy in COMMANDS.items() if not lazy.hidden
    )
    for name, text in rows:
        assert COMMANDS[name].summary.startswith(text.removesuffix("...")), name
