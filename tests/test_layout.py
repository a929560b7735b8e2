"""The package's shape: analysis computes, report renders, commands parse; nothing
imports in a circle (a cycle says a piece of code sits in the wrong module), no two
packages import each other, a handful of modules sit at the top and none runs long.

Every rule judges names as Python resolves them, not as they are spelled, and each has
a self-test per form it must catch."""

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


# --- names as Python resolves them ------------------------------------------------------------
#
# The rules below judge what a name *is*, not how it is spelled: `analysis.stats.mean_ci`,
# `import mallocbench.analysis.stats as s; s.mean_ci`, `m = stats.mean_ci; m()` and
# `getattr(stats, "mean_ci")()` are one function. Imports and plain assignments anywhere in
# a file (inside functions too) bind names; an attribute chain resolves through them.

PACKAGE = "mallocbench"
ANALYSIS = "mallocbench.analysis"


def module_name(path: Path) -> str:
    return ".".join(path.relative_to(SRC).with_suffix("").parts).removesuffix(".__init__")


def _absolute(node: ast.ImportFrom, module: str) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".")[: -node.level]
    return ".".join([*base, *([node.module] if node.module else [])])


class Names:
    """What each name of one module stands for: a dotted path, when it can be known."""

    def __init__(self, tree: ast.AST, module: str = "m") -> None:
        self.module = module
        self.bound: dict[str, str] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname:
                        self.bound[alias.asname] = alias.name
                    else:  # `import a.b.c` binds `a`; the chain resolves from there
                        top = alias.name.split(".")[0]
                        self.bound[top] = top
            elif isinstance(node, ast.ImportFrom):
                source = _absolute(node, module)
                for alias in node.names:
                    self.bound[alias.asname or alias.name] = f"{source}.{alias.name}"
        # Plain aliases (`f = stats.mean_ci`), after the imports they read; twice, for
        # an alias of an alias.
        for _ in range(2):
            for node in ast.walk(tree):
                if isinstance(node, ast.Assign) and len(node.targets) == 1:
                    target, value = node.targets[0], node.value
                    if isinstance(target, ast.Name) and target.id not in self.bound:
                        resolved = self.resolve(value)
                        if resolved is not None:
                            self.bound[target.id] = resolved

    def resolve(self, node: ast.AST) -> str | None:
        """The dotted path `node` names: a name, an attribute chain, or getattr with a
        literal name (`*` for a name only known when it runs)."""
        if isinstance(node, ast.Name):
            return self.bound.get(node.id)
        if isinstance(node, ast.Attribute):
            owner = self.resolve(node.value)
            return f"{owner}.{node.attr}" if owner else None
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "getattr"
            and len(node.args) >= 2
        ):
            owner = self.resolve(node.args[0])
            name = node.args[1]
            if owner is None:
                return None
            label = name.value if isinstance(name, ast.Constant) else None
            return f"{owner}.{label if isinstance(label, str) else '*'}"
        return None


def _parsed(path: Path) -> tuple[ast.Module, Names]:
    tree = ast.parse(path.read_text())
    return tree, Names(tree, module_name(path))


def package_of(module: str) -> str:
    """`mallocbench.run.runner` -> `run`; a top-level module is its own `(top:name)`."""
    parts = module.split(".")
    return (
        parts[1] if len(parts) > 2 or (SRC / PACKAGE / parts[-1]).is_dir() else f"(top:{parts[-1]})"
    )


# --- data flows one way: analyse once, render many ----------------------------------------------


# A method of these names on a value is dict.values() or str.split() far more often than ours.
BUILTIN_METHODS = {n for t in (dict, list, str, set, tuple, bytes) for n in dir(t)}


class Index:
    """The analysis package's definitions: which dotted names are functions, which are
    value types, and which methods of a value compute (call an analysis function or an
    aggregate of `statistics`, `math.fsum`, numpy)."""

    AGGREGATES = ("statistics.", "math.fsum", "numpy.", "scipy.")

    def __init__(self, sources: dict[str, str]) -> None:
        self.functions: set[str] = set()
        self.classes: set[str] = set()
        parsed = {name: ast.parse(text) for name, text in sources.items()}
        for name, tree in parsed.items():
            for node in tree.body:
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    self.functions.add(f"{name}.{node.name}")
                elif isinstance(node, ast.ClassDef):
                    self.classes.add(f"{name}.{node.name}")
        self.computing: dict[str, str] = {}  # method name -> Class.method
        plain: set[str] = set()  # names some value defines without computing
        for name, tree in parsed.items():
            names = Names(tree, name)
            local = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
            for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
                methods = [i for i in cls.body if isinstance(i, ast.FunctionDef)]
                mine: set[str] = set()
                for _ in methods:  # a method calling one that computes computes too
                    mine |= {m.name for m in methods if self._computes(m, names, local, mine)}
                plain |= {m.name for m in methods} - mine
                for method in mine - BUILTIN_METHODS:
                    self.computing[method] = f"{cls.name}.{method}"
        # Without types, `x.to_dict()` could be any value's: a name that another value
        # defines without computing says nothing, and is left out.
        self.computing = {k: v for k, v in self.computing.items() if k not in plain}

    def _computes(
        self, method: ast.FunctionDef, names: Names, local: set[str], mine: set[str]
    ) -> bool:
        for node in ast.walk(method):
            if isinstance(node, ast.Attribute) and node.attr in mine:
                return True  # `self.geomeans(...)`, `self.qps`
            if not isinstance(node, ast.Call):
                continue
            if isinstance(node.func, ast.Name) and node.func.id in local:
                return True
            target = names.resolve(node.func) or ""
            if target in self.functions or target.startswith(self.AGGREGATES):
                return True
        return False

    def is_call_into_analysis(self, target: str) -> bool:
        if not target.startswith(ANALYSIS + ".") or target in self.classes:
            return False
        last = target.rsplit(".", 1)[-1]
        # A function, a name known only at run time, or any lowercase name of a module.
        return target in self.functions or last == "*" or last[:1].islower()


def analysis_index() -> Index:
    return Index(
        {module_name(path): path.read_text() for path in (SRC / PACKAGE / "analysis").glob("*.py")}
    )


def analysis_calls(source: str, index: Index, module: str = "m") -> list[tuple[int, str]]:
    """(line, what) of every call into analysis from `source`: a function reached by any
    name (an import, an alias, a package attribute, a dotted import, getattr), and a
    method of an analysis value that computes (`table.groups()`); constructing a value
    type is not analysing."""
    tree = ast.parse(source)
    names = Names(tree, module)
    calls = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        target = names.resolve(node.func)
        if target is not None:
            if index.is_call_into_analysis(target):
                calls.append((node.lineno, target))
        elif isinstance(node.func, ast.Attribute) and node.func.attr in index.computing:
            calls.append((node.lineno, f"(a value's) {index.computing[node.func.attr]}"))
    return sorted(calls)


ANALYSIS_SNIPPET = (
    "import math\n"
    "from mallocbench.analysis import stats\n"
    "def geomean(values):\n"
    "    return stats.geomean(values)\n"
    "class Table:\n"
    "    def groups(self):\n"
    "        return geomean([1.0])\n"
    "    def width(self):\n"
    "        return math.inf\n"
    "    def to_dict(self):\n"
    "        return {'mean': geomean([1.0])}\n"
    "class Row:\n"
    "    def to_dict(self):\n"
    "        return {}\n"
)

# The ways a renderer can call the analysis, each in a line of its own: the old check
# caught the first two and none of the others.
CALL_FORMS = {
    "imported function": "from mallocbench.analysis.summary import geomean\ngeomean([1.0])\n",
    "module attribute": "from mallocbench.analysis import summary\nsummary.geomean([1.0])\n",
    "package attribute": "from mallocbench import analysis\nanalysis.summary.geomean([1.0])\n",
    "dotted import": (
        "import mallocbench.analysis.summary\nmallocbench.analysis.summary.geomean([1.0])\n"
    ),
    "local alias": "from mallocbench.analysis import summary\ng = summary.geomean\ng([1.0])\n",
    "getattr": "from mallocbench.analysis import summary\ngetattr(summary, 'geomean')([1.0])\n",
    "a value's computing method": "def draw(table):\n    return table.groups()\n",
}


def snippet_index() -> Index:
    return Index({"mallocbench.analysis.summary": ANALYSIS_SNIPPET})


@pytest.mark.parametrize("form", CALL_FORMS)
def test_the_call_check_finds_each_way_to_call_the_analysis(form: str) -> None:
    found = analysis_calls(CALL_FORMS[form], snippet_index())
    assert len(found) == 1, (form, found)


def test_the_call_check_lets_values_be_built_and_read() -> None:
    source = (
        "from mallocbench.analysis.summary import Table\n"
        "from mallocbench.analysis import stats\n"
        "def draw(table):\n"
        "    Table()\n"
        "    table.width()\n"
        "    table.to_dict()  # Row's too, which computes nothing: no type tells them apart\n"
        "    return table.rows, stats.FASTER\n"
    )
    assert analysis_calls(source, snippet_index()) == []


def test_renderers_never_call_the_analysis() -> None:
    """report/ reads a RunAnalysis (or a Comparison, a Recommendation): a renderer that
    analyses again computes the figures once per format and can disagree with the others.
    (Before the RunAnalysis there were 77 such calls.)"""
    index = analysis_index()
    # report/, and the renderers a feature package still keeps (moving to report/).
    renderers = [*(SRC / PACKAGE / "report").rglob("*.py")]
    renderers += [p for f in WORDLESS[1:] for p in (SRC / PACKAGE / f).glob("render*.py")]
    assert len(renderers) > 20
    found = {
        f"{path.relative_to(SRC / PACKAGE)}:{line} {target}"
        for path in renderers
        for line, target in analysis_calls(path.read_text(), index, module_name(path))
    }
    assert found == set()


# --- values are data ----------------------------------------------------------------------
#
# A value (a dataclass or NamedTuple) of the packages that compute holds what was computed:
# a property or method that calls into the analysis or an aggregate (numpy, scipy,
# statistics, math.fsum) computes again on every read, in whichever module reads it, and
# can disagree with the figure computed once. Building another value is no computing.

VALUE_PACKAGES = ("analysis", "model", "memory", "replay", "tune")


def _is_value(cls: ast.ClassDef, names: Names) -> bool:
    for decorator in cls.decorator_list:
        target = names.resolve(decorator.func if isinstance(decorator, ast.Call) else decorator)
        if (target or "").endswith("dataclasses.dataclass"):
            return True
    return any((names.resolve(b) or "").endswith("typing.NamedTuple") for b in cls.bases)


def computing_methods(source: str, index: Index, module: str = "m") -> list[str]:
    """Class.method of each value's method that calls an analysis function (by any name,
    or a function of its own module when that module is in analysis/) or an aggregate."""
    tree = ast.parse(source)
    names = Names(tree, module)
    local = {
        f"{module}.{n.name}" for n in tree.body if isinstance(n, ast.FunctionDef)
    } & index.functions
    found = []
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef) and _is_value(n, names)):
        for method in (i for i in cls.body if isinstance(i, ast.FunctionDef)):
            for node in ast.walk(method):
                if not isinstance(node, ast.Call):
                    continue
                target = names.resolve(node.func) or ""
                if not target and isinstance(node.func, ast.Name):
                    # a function of this module, when it is one of analysis's
                    own = f"{module}.{node.func.id}"
                    target = own if own in local else ""
                elif target.startswith(f"{module}."):
                    target = ""  # a class of this module built
                if (
                    index.is_call_into_analysis(target)
                    or target == "math.fsum"
                    or target.startswith(Index.AGGREGATES)
                ):
                    found.append(f"{cls.name}.{method.name}")
                    break
    return found


VALUE_SNIPPET = (
    "import statistics\n"
    "import numpy as np\n"
    "from dataclasses import dataclass\n"
    "from typing import NamedTuple\n"
    "from mallocbench.analysis import summary\n"
    "from mallocbench.analysis.summary import Table, geomean\n"
    "@dataclass(frozen=True)\n"
    "class Cell:\n"
    "    values: list[float]\n"
    "    @property\n"
    "    def mean(self) -> float:\n"
    "        return statistics.fmean(self.values)\n"
    "    def spread(self) -> float:\n"
    "        return float(np.std(self.values))\n"
    "    @property\n"
    "    def verdict(self) -> float:\n"
    "        return summary.geomean(self.values)\n"
    "    def middle(self) -> float:\n"
    "        return geomean(self.values)\n"
    "    def table(self) -> Table:\n"
    "        return Table()  # building a value is no computing\n"
    "    def count(self) -> int:\n"
    "        return len(self.values)\n"
    "class Row(NamedTuple):\n"
    "    low: float\n"
    "    def width(self) -> float:\n"
    "        return summary.geomean([self.low])\n"
    "class Helper:  # no value: a class with behaviour may compute\n"
    "    def mean(self, v: list[float]) -> float:\n"
    "        return statistics.fmean(v)\n"
)


def test_the_value_check_finds_each_way_a_value_computes() -> None:
    found = computing_methods(VALUE_SNIPPET, snippet_index(), "mallocbench.memory.x")
    assert found == ["Cell.mean", "Cell.spread", "Cell.verdict", "Cell.middle", "Row.width"]


def test_the_value_check_counts_an_analysis_modules_own_functions() -> None:
    source = (
        "import dataclasses\n"
        "def geomean(v):\n    return 1.0\n"
        "@dataclasses.dataclass\n"
        "class Cell:\n"
        "    low: float\n"
        "    @property\n"
        "    def mean(self):\n        return geomean([self.low])\n"
    )
    index = Index({"mallocbench.analysis.summary": source})
    assert computing_methods(source, index, "mallocbench.analysis.summary") == ["Cell.mean"]


# Values that still compute on read, each with its reason (to be made data).
COMPUTING_EXEMPT = {
    # A calibration stored as JSON is read back with VarianceComponents(**record), and
    # calibration.py widens between_var with dataclasses.replace: as fields, the CVs
    # would go stale there. To be made fields with one constructor that derives them.
    "analysis/noise.py:VarianceComponents.slice_cv_pct": "read back from a stored file",
    "analysis/noise.py:VarianceComponents.start_cv_pct": "read back from a stored file",
}


def test_values_hold_no_methods_that_compute() -> None:
    """Computed once in analysis/ into fields; the values are data every reader shares."""
    index = analysis_index()
    found = {
        f"{path.relative_to(SRC / PACKAGE)}:{name}"
        for package in VALUE_PACKAGES
        for path in (SRC / PACKAGE / package).rglob("*.py")
        for name in computing_methods(path.read_text(), index, module_name(path))
    }
    assert found - set(COMPUTING_EXEMPT) == set()
    assert set(COMPUTING_EXEMPT) <= found, "an exemption no longer needed"


def command_modules() -> set[str]:
    """The modules that define commands: those cli.py's COMMANDS table names."""
    from mallocbench.cli import COMMANDS

    return {f"mallocbench.commands.{c.module}" for c in COMMANDS.values()}


# Shared by every command and no command themselves: declared options, the progress
# display, and the one way to print.
OUTPUT_HELPER = "mallocbench.commands.output"
COMMAND_HELPERS = {"mallocbench.commands.options", "mallocbench.commands.progress", OUTPUT_HELPER}


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


# --- commands print only through report/ ---------------------------------------------------
#
# A command hands a value to the registry's entry for its kind (commands/output.py's `say`
# and `emit`); every sentence it prints is worded in report/. Anything else that writes to
# the terminal is a sentence kept in a command.

# What writes to standard output or error, as Python resolves it.
PRINTERS = (
    "builtins.print",
    "click.echo",
    "click.secho",
    "click.utils.echo",
    "click.termui.secho",
    "rich.print",
    "rich.get_console",
    "os.write",
)
STREAMS = ("sys.stdout", "sys.stderr", "sys.__stdout__", "sys.__stderr__")
# A console's (or any object's) methods that print: without types, a `.print` is a print,
# handed over or called; `.out(...)`, `.log(...)`, `.rule(...)` when called (`plan.out` is
# a directory).
CONSOLE_PRINTS = {"print", "print_json"}
CONSOLE_CALLS = {"out", "log", "rule"}


def _is_printer(target: str) -> bool:
    """A printer itself, or anything on one (`click.echo.__call__`); any use of a stream."""
    return any(target == p or target.startswith(f"{p}.") for p in PRINTERS) or any(
        target.startswith(f"{s}.") for s in STREAMS
    )


def prints_in(source: str, module: str = "m") -> list[tuple[int, str]]:
    """(line, what) of every way `source` writes to the terminal: a printer called or
    handed over (a callback), by any name it is reached by; a stream written; a method
    that prints, on any object (`console.print`, `Console(...).print`)."""
    tree = ast.parse(source)
    names = Names(tree, module)
    found = []
    called = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            target = names.resolve(node) or (
                f"builtins.{node.id}" if node.id not in names.bound else None
            )
        elif isinstance(node, ast.Attribute | ast.Call):
            target = names.resolve(node)
        else:
            continue
        if target is not None and _is_printer(target):
            found.append((node.lineno, target))
        elif (
            target is None
            and isinstance(node, ast.Attribute)
            and (node.attr in CONSOLE_PRINTS or (node.attr in CONSOLE_CALLS and id(node) in called))
            and not (names.resolve(node.value) or "").startswith(("logging", "math"))
        ):
            found.append((node.lineno, f"(a value's) .{node.attr}"))
    return sorted(set(found))


# Each way a command can print, one snippet each.
PRINT_FORMS = {
    "click.echo": "import click\nclick.echo('done')\n",
    "echo imported": "from click import echo as say\nsay('done', err=True)\n",
    "click.secho": "import click\nclick.secho('done', fg='red')\n",
    "print": "print('done')\n",
    "print handed over": "def f(log=print):\n    log('done')\n",
    "sys.stdout.write": "import sys\nsys.stdout.write('done\\n')\n",
    "stderr imported": "from sys import stderr\nstderr.write('done\\n')\n",
    "console.print": (
        "from mallocbench.console import make_console\n"
        "console = make_console(stderr=True)\nconsole.print('done')\n"
    ),
    "Console(...).print": "from rich.console import Console\nConsole().print('done')\n",
    "a made console's print": (
        "from mallocbench.console import make_console\nmake_console().print('done')\n"
    ),
    "rich.print": "from rich import print as rprint\nrprint('done')\n",
    "console.out": "def f(console):\n    console.out('done', highlight=False)\n",
    "echo as a callback": "import click\ndef f(run):\n    run(log=click.echo)\n",
}


@pytest.mark.parametrize("form", PRINT_FORMS)
def test_the_print_check_finds_each_way_to_print(form: str) -> None:
    assert prints_in(PRINT_FORMS[form]) != [], form


def test_the_print_check_lets_the_output_path_and_spinners_be() -> None:
    source = (
        "import click\n"
        "from mallocbench.commands.output import say\n"
        "from mallocbench.report import formats\n"
        "def f(err, value):\n"
        "    say(formats.RUN, value, err=True)\n"
        "    with err.status('working') as status:\n"
        "        status.update('still working')\n"
        "    click.option('--json', is_flag=True)\n"
        "    return 'a b'.split()\n"
    )
    assert prints_in(source) == []


def test_commands_print_only_through_the_output_helper() -> None:
    """Every sentence a command prints is worded in report/ and reaches the terminal
    through commands/output.py (before: 109 prints in 19 command modules)."""
    found = {
        f"{path.relative_to(SRC / PACKAGE)}:{line} {what}"
        for path in (SRC / PACKAGE / "commands").glob("*.py")
        if module_name(path) != OUTPUT_HELPER
        for line, what in prints_in(path.read_text(), module_name(path))
    }
    assert found == set()


# --- words live in report/ ------------------------------------------------------------------
#
# Text is what a reader reads: a phrase (a literal with a space in it), a string built for
# display (an f-string with words or a number format in it, a join or a format with a
# spaced separator), a number put through the units formatter, a function annotated to
# return text that builds some, and a text field named for prose. Keys are not text: a
# setup, step or unit name, an id like `rel-innodb-16`, an enum member's value.
# Left out: docstrings, the one line an error carries (raised, or an Exception's own body).

PROSE_FIELDS = {
    "caption", "detail", "details", "label", "labels", "line", "lines",
    "message", "note", "notes", "reason", "reasons", "sentence", "summary", "text",
    "title", "why", "words",
}  # fmt: skip
CONTAINERS = {  # the text type's place in each: None = every argument
    "Optional": None, "Union": None, "list": None, "List": None, "tuple": None,
    "Tuple": None, "set": None, "frozenset": None, "Iterator": None, "Iterable": None,
    "Sequence": None, "Generator": 0, "Final": None, "ClassVar": None, "Annotated": 0,
    "dict": 1, "Dict": 1, "Mapping": 1, "MutableMapping": 1, "defaultdict": 1,
}  # fmt: skip
STR_NAMES = {"builtins.str", "typing.Text", "str"}
ENUMS = ("enum.Enum", "enum.StrEnum", "enum.IntEnum", "enum.Flag")
FORMATTER = "mallocbench.units."
NOT_FORMATTERS = ("parse_", "slug", "GB", "MB")  # parsing and keys, not display


def _own_nodes(owner: ast.AST) -> list[ast.AST]:
    """The nodes under `owner` that no nested function or class holds."""
    out: list[ast.AST] = []
    todo = list(ast.iter_child_nodes(owner))
    while todo:
        node = todo.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            continue
        out.append(node)
        todo += ast.iter_child_nodes(node)
    return out


class Text:
    """The text found in one module: `found` holds 'file:where kind' entries."""

    def __init__(self, tree: ast.Module, names: Names, filename: str, words: bool = True) -> None:
        self.names, self.filename, self.words = names, filename, words
        self.aliases = self._type_aliases(tree)
        self.skip = self._skipped(tree)
        self.found: list[str] = []
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                returns = node.returns
                if returns is not None and self.is_text(returns) and self._builds(node):
                    self.add(node.name, "returns text")
            elif isinstance(node, ast.ClassDef):
                self._fields(node)
        for owner in ast.walk(tree):  # each text by the function or class it is in
            if isinstance(owner, ast.Module | ast.FunctionDef | ast.ClassDef):
                for node in _own_nodes(owner):
                    if id(node) not in self.skip and self.made_text(node):
                        where = getattr(owner, "name", "<module>")
                        self.add(f"{where} {ast.unparse(node)[:60]}", "builds text")

    def add(self, where: str, kind: str) -> None:
        entry = f"{self.filename}:{where} {kind}"
        if entry not in self.found:
            self.found.append(entry)

    def _type_aliases(self, tree: ast.Module) -> set[str]:
        """Module-level names that stand for str (`Words = str`, `Note: TypeAlias = str`)."""
        out = set()
        for node in tree.body:
            if isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                if self._is_str(node.value):
                    out |= {t.id for t in targets if isinstance(t, ast.Name)}
        return out

    def _is_str(self, node: ast.AST) -> bool:
        if isinstance(node, ast.Name) and node.id in getattr(self, "aliases", ()):
            return True
        return (self.names.resolve(node) or getattr(node, "id", "")) in STR_NAMES

    def is_text(self, node: ast.AST) -> bool:
        """Whether an annotation holds text where a value goes (not as a mapping's key)."""
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return self.is_text(ast.parse(node.value, mode="eval").body)
        if self._is_str(node):
            return True
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
            return self.is_text(node.left) or self.is_text(node.right)
        if isinstance(node, ast.Subscript):
            container = (self.names.resolve(node.value) or ast.unparse(node.value)).rsplit(".")[-1]
            if container not in CONTAINERS:
                return False
            args = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
            place = CONTAINERS[container]
            chosen = args if place is None else args[place : place + 1]
            return any(self.is_text(a) for a in chosen)
        return False

    def _skipped(self, tree: ast.Module) -> set[int]:
        """Docstrings, errors' lines and enum members' values: nodes not to judge."""
        skip: set[int] = set()
        for node in ast.walk(tree):
            body = getattr(node, "body", None)
            if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
                skip.add(id(body[0].value))
            if isinstance(node, ast.Raise) or (
                isinstance(node, ast.ClassDef) and self._is_error_or_enum(node)
            ):
                skip |= {id(n) for n in ast.walk(node)}
            if isinstance(node, ast.Call) and self._names_error(node.func):
                skip |= {id(n) for n in ast.walk(node)}
            if isinstance(node, ast.Call) and self._parses(node.func):
                skip |= {id(n) for a in node.args[1:] for n in ast.walk(a)}
            if isinstance(node, ast.JoinedStr):  # judged whole, not by its pieces
                skip |= {id(n) for n in ast.walk(node) if n is not node}
        return skip

    def _parses(self, node: ast.AST) -> bool:
        """A parser's arguments after the value name where it came from, for its error."""
        name = str(self.names.resolve(node) or getattr(node, "id", "") or getattr(node, "attr", ""))
        return name.rsplit(".", 1)[-1].startswith("parse_")

    def _names_error(self, node: ast.AST) -> bool:
        name = str(self.names.resolve(node) or getattr(node, "id", "") or getattr(node, "attr", ""))
        return name.endswith(("Error", "Exception", "Refused", "Warning"))

    def _is_error_or_enum(self, cls: ast.ClassDef) -> bool:
        for base in cls.bases:
            name = self.names.resolve(base) or ast.unparse(base)
            if name.startswith(ENUMS) or name.endswith(("Error", "Exception", "Warning")):
                return True
        return False

    def _builds(self, function: ast.AST) -> bool:
        return any(self.made_text(n) for n in self._returned(function))

    def _returned(self, function: ast.AST) -> list[ast.AST]:
        """What `function` returns or yields, with the local names those were built in."""
        local: dict[str, list[ast.AST]] = {}
        out: list[ast.AST] = []
        for node in ast.walk(function):
            if isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign) and node.value:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    if isinstance(target, ast.Name):
                        local.setdefault(target.id, []).append(node.value)
            elif isinstance(node, ast.Return | ast.Yield) and node.value is not None:
                out.append(node.value)
        for value in list(out):
            for inner in ast.walk(value):
                if isinstance(inner, ast.Name):
                    out += local.get(inner.id, [])
        return [n for value in out for n in ast.walk(value) if id(n) not in self.skip]

    def made_text(self, node: ast.AST) -> bool:
        """Words or a number shown; without `words` (the feature packages, whose commands,
        SQL and error lines are strings too), only a number put through the formatter."""
        if not self.words:
            return self._number_shown(node)
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return any(c.isspace() for c in node.value.strip())
        if isinstance(node, ast.JoinedStr):
            literal = "".join(str(v.value) for v in node.values if isinstance(v, ast.Constant))
            formatted = any(
                isinstance(v, ast.FormattedValue) and (v.format_spec or v.conversion != -1)
                for v in node.values
            )
            return formatted or any(c.isspace() for c in literal)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            owner = node.func.value
            if node.func.attr in ("join", "format") and isinstance(owner, ast.Constant):
                return isinstance(owner.value, str) and (
                    node.func.attr == "format" or any(c.isspace() for c in owner.value)
                )
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
            return isinstance(node.left, ast.Constant) and isinstance(node.left.value, str)
        return self._number_shown(node)

    def _number_shown(self, node: ast.AST) -> bool:
        """A number put through the units formatter: a rendering for a reader."""
        if isinstance(node, ast.Call):
            target = self.names.resolve(node.func) or ""
            shown = target.removeprefix(FORMATTER)
            return target.startswith(FORMATTER) and not shown.startswith(NOT_FORMATTERS)
        return False

    def _fields(self, cls: ast.ClassDef) -> None:
        for item in cls.body:
            if (
                isinstance(item, ast.AnnAssign)
                and isinstance(item.target, ast.Name)
                and item.target.id in PROSE_FIELDS
                and self.is_text(item.annotation)
            ):
                self.add(f"{cls.name}.{item.target.id}", "text field")


def text_in(source: str, filename: str = "m.py", module: str = "m") -> list[str]:
    tree = ast.parse(source)
    return Text(tree, Names(tree, module), filename).found


# Each way analysis can hold words, one snippet each: the old check caught none of these.
TEXT_FORMS = {
    "Optional[str] return": (
        "from typing import Optional\n"
        "def caveat(n: int) -> Optional[str]:\n"
        "    note = 'too few' if n < 3 else None\n"
        "    return note\n"
    ),
    "tuple of str return": (
        "def parts(n: int) -> tuple[str, ...]:\n    return (f'{n}', 'rows kept')\n"
    ),
    "dict of str return": (
        "from typing import Dict\n"
        "def notes(n: int) -> 'Dict[str, str]':\n    return {'n': 'a few rows'}\n"
    ),
    "unannotated join": "def words(parts):\n    return ' '.join(parts)\n",
    "short f-string": "def rows(n):\n    return f'{n} rows'\n",
    "a number formatted": "def share(x):\n    return f'{100 * x:.0f}'\n",
    "the units formatter": (
        "from mallocbench import units as fmt\ndef size(n):\n    return fmt.mib(n)\n"
    ),
    "field named label": ("import typing\nclass Row:\n    label: typing.Optional[str] = None\n"),
    "field named detail": "class Row:\n    detail: 'str'\n",
    "field named summary": "Words = str\nclass Row:\n    summary: list[Words]\n",
}


@pytest.mark.parametrize("form", TEXT_FORMS)
def test_the_text_check_finds_each_way_to_hold_words(form: str) -> None:
    assert text_in(TEXT_FORMS[form]) != [], form


def test_the_text_check_lets_keys_errors_and_docstrings_be() -> None:
    source = (
        "import enum\n"
        "from mallocbench.errors import MallocbenchError\n"
        "from mallocbench.units import parse_size, slug\n"
        "class Verdict(enum.StrEnum):\n"
        "    NO_INTERVAL = 'no interval'\n"
        "class Refused(MallocbenchError):\n"
        "    def __init__(self, n: int) -> None:\n"
        "        super().__init__(f'{n} rows cannot be a table')\n"
        "def key(engine: str, threads: int) -> str:\n"
        '    """A docstring is not words to show, however long it runs on."""\n'
        "    if threads < 0:\n"
        "        raise ValueError(f'a negative count {threads}')\n"
        "    return f'rel-{slug(engine)}-{threads}'\n"
        "def order(names: list[str]) -> dict[str, int]:\n"
        "    return {n: parse_size(n, 'x') for n in names}\n"
        "class Row:\n    setup: str\n    title_bytes: int\n    label: int\n"
    )
    assert text_in(source) == []


# --- the rules on the tree ------------------------------------------------------------------

# Packages whose numbers have words: analysis/ and the features with an analysis/words
# split. Their words live in report/ (in analysis/ every form counts; in the features,
# whose commands, SQL and error lines are strings too, text fields and the formatter).
WORDLESS = ("analysis", "calibrate", "tune", "memory", "replay", "patterns")
MAX_TOP_MODULES = 8
MAX_MODULE_LINES = 700

# Single texts that stay where they are, each with its reason; never a whole function.
TEXT_EXEMPT = {
    # The events file's own name of an event (soak/events.py), the key steps group by.
    "analysis/ratchet.py:EventMeasure.label text field": "an input's name",
    "analysis/ratchet.py:LabelSteps.label text field": "an input's name",
    "analysis/ratchet.py:StepDifference.label text field": "an input's name",
    "analysis/backends.py:BackendSteps.label text field": "an input's name",
    # The experiment file as the user wrote it, stored with the run.
    "patterns/experiment.py:PatternExperiment.text text field": "the user's file",
    # Read as text by report/html.py or report/templates/_macros.html.j2: to be worded in
    # report/ with them.
    "analysis/sla.py:sla_results f'{cell.setup} / {cell.engine} / {cell.step} r{cell.repeat}'"
    " builds text": "the template prints it",
    "analysis/summary.py:memory_rows f'{account.step} @{account.threads} r{account.repeat}'"
    " builds text": "html.py titles with it",
    "analysis/summary.py:relative_tables f'{base} QPS' builds text": "the template's header",
    # A tune's values (tune/result.py): a point's name ("#3", "default") is an identifier;
    # Said is a note as an older tune.json stored it, read back rather than composed.
    "tune/result.py:Point.label text field": "an identifier",
    "tune/result.py:Said.text text field": "stored words read back",
    # The server's own error text for a refused statement, and a gap's account to grant
    # to or that error text: report/memory.py words the gap around them.
    "memory/server.py:_Answer.message text field": "the server's own words",
    "memory/server.py:Gap.detail text field": "an account or the server's words",
    # A heap tree node's text as valgrind's massif.out wrote it, parsed into sites.
    "memory/massif.py:_Node.label text field": "the input's own words",
    # A --constraint as the user typed it (optuna's name for the constraint too).
    "tune/objectives.py:Constraint.text text field": "the user's own input",
}


def text_findings() -> set[str]:
    found = set()
    for package in WORDLESS:
        for path in (SRC / PACKAGE / package).rglob("*.py"):
            tree, names = _parsed(path)
            where = str(path.relative_to(SRC / PACKAGE))
            found |= set(Text(tree, names, where, words=package == "analysis").found)
    return found


def test_analysis_and_the_features_return_values_not_words() -> None:
    """analysis/ returns numbers, enums and typed records, and so do the feature packages;
    report/ words them (report/words.py, facts.py, ...)."""
    found = text_findings()
    assert found - set(TEXT_EXEMPT) == set()
    assert set(TEXT_EXEMPT) <= found, "an exemption no longer needed"


def top_level_modules() -> list[str]:
    return sorted(p.stem for p in (SRC / PACKAGE).glob("*.py") if p.stem != "__init__")


def test_a_handful_of_shared_modules_stay_at_the_top() -> None:
    """The rest lives in a package that says what it is."""
    assert len(top_level_modules()) <= MAX_TOP_MODULES, top_level_modules()


def long_modules(root: Path = SRC / PACKAGE) -> set[str]:
    return {
        f"lines: {path.relative_to(root)}"
        for path in root.rglob("*.py")
        if len(path.read_text().splitlines()) > MAX_MODULE_LINES
    }


def test_the_module_length_check_finds_a_long_module(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "long.py").write_text("x = 1\n" * (MAX_MODULE_LINES + 1))
    (tmp_path / "pkg" / "short.py").write_text("x = 1\n" * MAX_MODULE_LINES)
    assert long_modules(tmp_path) == {"lines: pkg/long.py"}


def test_no_module_is_longer_than_a_reader_holds() -> None:
    assert long_modules() == set()


def package_edges(sources: dict[str, str]) -> dict[tuple[str, str], set[str]]:
    """(package, package it imports) -> the modules that do, for every import anywhere in
    a module (inside functions and under TYPE_CHECKING too), `from mallocbench import x`
    included; top-level modules are left out (they are no package)."""
    packages = {m.split(".")[1] for m in sources if m.count(".") >= 2}
    edges: dict[tuple[str, str], set[str]] = {}
    for module, text in sources.items():
        mine = module.split(".")[1] if module.count(".") >= 1 else ""
        for node in ast.walk(ast.parse(text)):
            targets = []
            if isinstance(node, ast.ImportFrom):
                source = _absolute(node, module)
                targets = [source, *(f"{source}.{a.name}" for a in node.names)]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            for target in targets:
                parts = target.split(".")
                known = parts[0] == PACKAGE and len(parts) > 1 and parts[1] in packages
                if known and mine in packages and parts[1] != mine:
                    edges.setdefault((mine, parts[1]), set()).add(module)
    return edges


def ties(sources: dict[str, str]) -> set[str]:
    edges = package_edges(sources)
    return {f"tie: {a} <-> {b}" for a, b in edges if a < b and (b, a) in edges}


def test_the_tie_check_finds_a_lazy_import_back() -> None:
    sources = {
        "mallocbench.run.runner": "from mallocbench.soak import events\n",
        "mallocbench.soak.events": "def f():\n    from mallocbench.run.runner import x\n",
        "mallocbench.report.words": "from mallocbench import units\n",
        "mallocbench.units": "",
    }
    assert ties(sources) == {"tie: run <-> soak"}


def test_no_two_packages_import_each_other() -> None:
    """A two-way tie says a piece sits in the wrong package: move it to its owner or pass
    a value (a lazy import only hides the tie)."""
    sources = {module_name(p): p.read_text() for p in (SRC / PACKAGE).rglob("*.py")}
    assert ties(sources) == set()


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
