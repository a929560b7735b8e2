"""The registry of formats: each kind of analysed value, its formats by name, and the
ones the golden files do not hold (recommend's Markdown, a heap profile)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from mallocbench.analysis.recommend import recommend
from mallocbench.memory.massif import Profile, ProfileTop, Site
from mallocbench.model.results import RunResult
from mallocbench.report import formats
from mallocbench.report.recommend import Advice

FIXTURES = Path(__file__).parent / "fixtures"


def plain_console() -> Console:
    return Console(file=io.StringIO(), width=120, color_system=None, no_color=True)


def test_each_kind_names_its_formats_as_its_command_offers_them() -> None:
    assert formats.COMPARISON.names == ["terminal", "markdown", "csv", "json"]
    assert formats.RECOMMENDATION.names == ["terminal", "markdown", "json"]
    assert formats.PATTERNS.names == ["terminal", "markdown", "csv", "json"]
    assert formats.MEMORY.names == formats.PROFILE.names == ["terminal", "json"]


def test_an_unknown_format_is_refused_not_drawn() -> None:
    view = ProfileTop(Profile("massif", None, 0, None, [], "massif.out"), 5)
    with pytest.raises(KeyError):
        formats.PROFILE.show("html", view, plain_console())


def test_recommend_markdown_is_the_terminal_text_under_a_title() -> None:
    result = RunResult.from_dict(json.loads((FIXTURES / "results-small.json").read_text()))
    advice = Advice(recommend(result))
    text = formats.RECOMMENDATION.render("terminal", advice)
    markdown = formats.RECOMMENDATION.render("markdown", advice)
    assert markdown == f"# mallocbench recommend: {result.run_id}\n\n{text}"
    assert "thin evidence" in text  # worded from the record by report/words.py


def test_a_profile_shows_its_top_sites_in_both_formats() -> None:
    sites = [Site(f"f{i}", f"f{i}.c:{i}", 1000 * (10 - i), [f"caller{i}"]) for i in range(6)]
    view = ProfileTop(Profile("massif", "mysqld", 45_000, 512, sites, "massif.out"), 2)
    console = plain_console()
    assert formats.PROFILE.show("terminal", view, console) is None
    drawn = console.file.getvalue()  # type: ignore[attr-defined]
    assert "f1 (f1.c:1)" in drawn and "f2" not in drawn and "20.0%" in drawn
    data = json.loads(formats.PROFILE.render("json", view))
    assert [s["function"] for s in data["sites"]] == ["f0", "f1"]


def test_one_registry_holds_every_kind_and_each_view_is_drawn_from_it() -> None:
    """Each command's formats are the registry's entries of its kind, none twice."""
    pairs = [(e.kind, e.name) for e in formats.REGISTRY]
    assert len(pairs) == len(set(pairs))
    assert all((e.text is None) != (e.draw is None) for e in formats.REGISTRY)
    kinds = {e.kind for e in formats.REGISTRY}
    assert {"run", "compare", "recommend", "patterns", "memory", "profile", "calibrate",
            "tune", "plan", "run-end", "runs", "steps"} <= kinds  # fmt: skip
    views: dict[str, formats.Outputs[Any]] = {
        formats.RUN: formats.RUN_OUTPUTS, formats.COMPARE: formats.COMPARISON,
        formats.RECOMMEND: formats.RECOMMENDATION, formats.PATTERNS_KIND: formats.PATTERNS,
        formats.TUNE_KIND: formats.TUNE, formats.CALIBRATE: formats.CALIBRATION,
    }  # fmt: skip
    for kind, view in views.items():
        assert view.names == formats.outputs(kind).names
    assert formats.TUNE.names == ["terminal", "markdown", "json", "html"]
    with pytest.raises(KeyError):
        formats.outputs("no such kind")


def test_the_run_command_prints_only_through_the_registry() -> None:
    """commands/run.py hands values over and prints nothing itself (the layout test's
    rule holds every command to commands/output.py; this names run's own file)."""
    import ast

    source = Path(formats.__file__).parents[1] / "commands" / "run.py"
    calls = [
        node
        for node in ast.walk(ast.parse(source.read_text()))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in ("echo", "print", "out")
    ]
    assert calls == [], [ast.unparse(c)[:60] for c in calls]
