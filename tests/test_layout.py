"""The package's shape: analysis computes, report renders, commands parse; nothing
imports in a circle (a cycle says a piece of code sits in the wrong module)."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"


def import_graph() -> dict[str, set[str]]:
    modules = {}
    for path in SRC.rglob("*.py"):
        name = ".".join(path.relative_to(SRC).with_suffix("").parts).removesuffix(".__init__")
        modules[name] = path
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        # Every import counts, inside functions and under TYPE_CHECKING too.
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("mallocbench"):
                for alias in node.names:
                    target = f"{node.module}.{alias.name}"
                    graph[name].add(target if target in modules else str(node.module))
            elif isinstance(node, ast.Import):
                graph[name] |= {a.name for a in node.names if a.name in modules}
    return {name: {t for t in targets if t in modules} for name, targets in graph.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in graph[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in graph:
        if node not in index:
            visit(node)
    return found


def test_the_checker_finds_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycles() -> None:
    assert cycles(import_graph()) == []


def test_analysis_computes_and_never_renders() -> None:
    """analysis -> report or -> commands would put words and formats back into numbers."""
    for name, targets in import_graph().items():
        if name.startswith("mallocbench.analysis"):
            wrong = {
                t for t in targets if t.startswith(("mallocbench.commands", "mallocbench.report"))
            }
            assert not wrong, f"{name} imports {wrong}"


MAX_FUNCTION_LINES = 80


def long_functions(source: str) -> list[tuple[str, int]]:
    return [
        (node.name, node.end_lineno - node.lineno + 1)
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno is not None
        and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
    ]


def test_the_length_check_finds_a_long_function() -> None:
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES))
    assert long_functions(f"def long():\n{body}") == [("long", MAX_FUNCTION_LINES + 1)]
    assert long_functions("def short():\n    return 1\n") == []


def test_no_function_is_longer_than_a_screen() -> None:
    """A function a reader cannot see whole mixes steps that want names of their own."""
    found = {
        f"{path.relative_to(SRC)}:{name}": lines
        for path in SRC.rglob("*.py")
        for name, lines in long_functions(path.read_text())
    }
    assert found == {}


# --- data flows one way: analyse once, render many ----------------------------------------------

ANALYSIS = "mallocbench.analysis"


def analysis_calls(source: str) -> list[tuple[int, str]]:
    """(line, function) of every call into an analysis *function* in `source`.

    Counted by walking the AST: a name imported from an analysis module and called, or a
    call through an imported analysis module (`stats.mean_ci(...)`). Names starting with
    a capital are value types and enums (constructing a RatioCell is not analysing), and
    methods and properties of the values a renderer holds are not counted.
    """
    tree = ast.parse(source)
    functions: dict[str, str] = {}
    modules: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(ANALYSIS):
            for alias in node.names:
                if node.module == ANALYSIS:
                    modules[alias.asname or alias.name] = f"{ANALYSIS}.{alias.name}"
                elif not alias.name[0].isupper():
                    functions[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith(ANALYSIS):
                    modules[alias.asname or alias.name] = alias.name
    calls = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Name) and func.id in functions:
            calls.append((node.lineno, functions[func.id]))
        elif (
            isinstance(func, ast.Attribute)
            and isinstance(func.value, ast.Name)
            and func.value.id in modules
            and not func.attr[0].isupper()
        ):
            calls.append((node.lineno, f"{modules[func.value.id]}.{func.attr}"))
    return sorted(calls)


def test_the_call_counter_finds_calls_into_analysis() -> None:
    source = (
        "from mallocbench.analysis import stats\n"
        "from mallocbench.analysis.summary import RatioCell, relative_tables as rt\n"
        "def f(run):\n"
        "    RatioCell(1.0)\n"
        "    run.tables()\n"
        "    return rt(run), stats.mean_ci([1]), stats.FASTER\n"
    )
    assert analysis_calls(source) == [
        (6, "mallocbench.analysis.stats.mean_ci"),
        (6, "mallocbench.analysis.summary.relative_tables"),
    ]


def test_renderers_never_call_the_analysis() -> None:
    """report/ reads a RunAnalysis (or a Comparison, a Recommendation): a renderer that
    analyses again computes the figures once per format and can disagree with the others.
    (Before the RunAnalysis there were 77 such calls.)"""
    found = {
        f"{path.name}:{line} {target}"
        for path in (SRC / "mallocbench" / "report").glob("*.py")
        for line, target in analysis_calls(path.read_text())
    }
    assert found == set()


def command_modules() -> set[str]:
    """The modules that define commands: those cli.py's COMMANDS table names."""
    from mallocbench.cli import COMMANDS

    return {f"mallocbench.commands.{c.module}" for c in COMMANDS.values()}


# Shared by every command and no command themselves: declared options, the progress display.
COMMAND_HELPERS = {"mallocbench.commands.options", "mallocbench.commands.progress"}


def imports_of_commands(graph: dict[str, set[str]], commands: set[str]) -> set[str]:
    """Every import of a command module by another module but the CLI itself, and every
    module under commands/ that is neither a command nor a shared helper (a helper that
    works for one command hides a command inside another)."""
    wrong = {
        f"{name} -> {target}"
        for name, targets in graph.items()
        for target in targets & commands
        if target != name and name != "mallocbench.cli"
    }
    wrong |= {
        f"{name} is not a command"
        for name in graph
        if name.startswith("mallocbench.commands.") and name not in commands | COMMAND_HELPERS
    }
    return wrong


def test_the_command_import_check_finds_one_command_using_another() -> None:
    graph = {
        "mallocbench.cli": {"mallocbench.commands.run"},
        "mallocbench.commands.run": {"mallocbench.commands.auto", "mallocbench.commands.options"},
        "mallocbench.commands.auto": {"mallocbench.commands.calibrate"},
        "mallocbench.commands.calibrate": {"mallocbench.commands.options"},
        "mallocbench.commands.options": set(),
        "mallocbench.report.x": {"mallocbench.commands.calibrate"},
    }
    commands = {"mallocbench.commands.run", "mallocbench.commands.calibrate"}
    assert imports_of_commands(graph, commands) == {
        "mallocbench.commands.auto -> mallocbench.commands.calibrate",
        "mallocbench.report.x -> mallocbench.commands.calibrate",
        "mallocbench.commands.auto is not a command",
    }


def test_no_command_imports_another() -> None:
    """What two commands share belongs in the package that does it (report/, analysis/,
    calibrate/, the runner), not in one of them; the command set is cli.py's table."""
    commands = command_modules()
    assert "mallocbench.commands.run" in commands and len(commands) >= 10
    assert imports_of_commands(import_graph(), commands) == set()


# Text in analysis/: functions that return it, str fields named for prose, and prose
# literals. Allowed: names, ids and verdict constants, which are keys rather than
# sentences, errors (each carries its one line), and what runs stored as text.
TEXT_ALLOWED = {
    "stats.py:classify",  # a verdict constant (stats.FASTER, ...)
    "stats.py:verdict",
    "summary.py:verdict",
    "summary.py:problem",  # a cell status name ("oom", "missing")
    "summary.py:setup_order",  # setup names
    "summary.py:units",  # unit names of a table
    "sla.py:setup",  # protocol attributes: names
    "sla.py:engine",
    "sla.py:step",
    "comparison.py:_ordered_setups",
    "run_analysis.py:recorded_notes",  # sentences the run stored, passed on as data
    # A setting's value as shown (a size, seconds, knobs), which a difference between
    # two runs and the refusal's one line carry; not prose.
    "comparability.py:shown",  # the refusal's one line
    # Stored in every results.json since stability was judged: rewording it in report/
    # would need the numbers behind it in stored runs too.
    "steady.py:Stability.reason",
    "steady.py:check_stability (prose)",
    # The evidence's "where" for a replay, beside the "step @threads" of the servers'.
    "recommend.py:recommend (prose)",
}
TEXT_TYPES = {"str", "str | None", "list[str]", "Iterator[str]"}
PROSE_WORDS = 6  # a string of more words than this is a sentence
# A field of these names holding text is a sentence waiting to be shown.
PROSE_FIELDS = {"caption", "message", "note", "notes", "reason", "reasons", "text", "title", "why"}


def _strings(node: ast.AST) -> list[str]:
    """The string literals under `node`, one each ("a" "b" side by side is one),
    f-strings by their source; docstrings and what errors are raised with left out."""
    skip: set[int] = set()
    for inner in ast.walk(node):
        body = getattr(inner, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            skip.add(id(body[0].value))  # a docstring
        if isinstance(inner, ast.Raise | ast.ClassDef) and (
            not isinstance(inner, ast.ClassDef)
            or any(ast.unparse(b).endswith(("Error", "Exception")) for b in inner.bases)
        ):
            skip |= {id(n) for n in ast.walk(inner)}
        if isinstance(inner, ast.JoinedStr):
            skip |= {id(v) for v in inner.values}
    return [
        str(n.value) if isinstance(n, ast.Constant) else ast.unparse(n)
        for n in ast.walk(node)
        if id(n) not in skip
        and (
            isinstance(n, ast.JoinedStr)
            or (isinstance(n, ast.Constant) and isinstance(n.value, str))
        )
    ]


def _prose(strings: list[str]) -> bool:
    return any(len(text.split()) > PROSE_WORDS for text in strings)


def text_in_analysis(path: Path) -> list[str]:
    """Functions annotated to return text, str fields named for prose, module-level
    prose constants and prose written inside functions."""
    tree = ast.parse(path.read_text())
    found = [
        f"{path.name}:{node.name}"
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.returns is not None
        and ast.unparse(node.returns) in TEXT_TYPES
    ]
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
        found += [
            f"{path.name}:{cls.name}.{item.target.id}"
            for item in cls.body
            if isinstance(item, ast.AnnAssign)
            and isinstance(item.target, ast.Name)
            and item.target.id in PROSE_FIELDS
            and "str" in ast.unparse(item.annotation)
        ]
    for node in tree.body:
        if isinstance(node, ast.Assign | ast.AnnAssign) and _prose(_strings(node)):
            found.append(f"{path.name}:{ast.unparse(node).split('=')[0].strip()} (prose)")
        elif isinstance(node, ast.FunctionDef | ast.ClassDef) and _prose(_strings(node)):
            found.append(f"{path.name}:{node.name} (prose)")
    return found


def test_the_text_check_finds_words_and_prose(tmp_path: Path) -> None:
    path = tmp_path / "m.py"
    path.write_text(
        'NOTE = ("a sentence that is long " "enough to be prose")\nKEY = "rel"\n'
        "def words(x) -> str | None:\n    return None\ndef number(x) -> float:\n    return 1.0\n"
        "class Row:\n    title: str\n    caption: str | None = None\n    key: str\n"
        "    count: int\n    text: int = 0\n"
        "def table(n: int) -> Row:\n"
        '    """A docstring is not prose to show, however long it runs on."""\n'
        "    if n < 0:\n"
        '        raise ValueError(f"a negative count {n} cannot be a table of rows")\n'
        '    return Row(title=f"{n} rows of the table, shown for the reader")\n'
        "class Refused(Exception):\n"
        "    def __init__(self) -> None:\n"
        '        super().__init__("an error carries its own line, in as many words")\n'
    )
    assert text_in_analysis(path) == [
        "m.py:words",
        "m.py:Row.title",
        "m.py:Row.caption",
        "m.py:NOTE (prose)",
        "m.py:table (prose)",
    ]


def test_analysis_returns_numbers_and_records_not_words() -> None:
    found = {
        entry
        for path in (SRC / "mallocbench" / "analysis").glob("*.py")
        for entry in text_in_analysis(path)
    }
    new = found - TEXT_ALLOWED
    assert new == set(), "words belong in report/words.py; the analysis returns records"


COUNTED = (
    "mallocbench.analysis.run_analysis.analyze",
    "mallocbench.analysis.summary.summarize_run",
    "mallocbench.analysis.summary.relative_tables",
    "mallocbench.analysis.summary.memory_rows",
    "mallocbench.analysis.recommend.recommend",
    "mallocbench.analysis.verdict.verdict_rows",
    "mallocbench.analysis.summary.rss_ratio_cells",
)


def test_one_report_with_every_file_analyses_the_run_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`report --out` writes results.json, report.md, the CSVs and report.html and prints
    the Markdown: each analysis step runs once, wherever the function was imported."""
    import importlib
    import sys

    from click.testing import CliRunner

    from mallocbench.cli import main

    # Loaded before the wrapping: the CLI may import its commands only when they run.
    importlib.import_module("mallocbench.commands.run")
    calls: dict[str, int] = {}
    for dotted in COUNTED:
        module_name, name = dotted.rsplit(".", 1)
        original = getattr(importlib.import_module(module_name), name)

        def counted(*args: Any, _name: str = name, _f: Any = original, **kw: Any) -> Any:
            calls[_name] = calls.get(_name, 0) + 1
            return _f(*args, **kw)

        for module in list(sys.modules.values()):
            if (module.__name__ or "").startswith("mallocbench") and (
                getattr(module, name, None) is original
            ):
                monkeypatch.setattr(module, name, counted)
    fixture = Path(__file__).parent / "fixtures" / "results-small.json"
    done = CliRunner().invoke(
        main, ["report", str(fixture), "--out", str(tmp_path), "--format", "markdown"]
    )
    assert done.exit_code == 0, done.output
    assert (tmp_path / "report.html").is_file() and "## Recommendation" in done.output
    assert calls == {name.rsplit(".", 1)[1]: 1 for name in COUNTED}
