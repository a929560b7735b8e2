"""The documentation cannot drift from the command line.

Every `mallocbench ...` line in the README and docs/ (fenced and indented code blocks,
and inline code) names commands and options that exist in the click tree; and the
tutorials' commands run, in order, against real private servers, with the durations the
pages give. A command a test cannot run (it needs another host, minutes of servers, or
changes this host's system) is listed in NOT_RUN with the reason.
"""

from __future__ import annotations

import json
import re
import shlex
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import pytest

from cli_runner import run_cli
from mallocbench import allocators
from mallocbench.cli import main
from mallocbench.native import shim_path
from mallocbench.replay import trace as tracemod

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
TUTORIALS = DOCS / "tutorials"
# Where shell syntax ends a mallocbench command line.
SHELL_OPERATORS = {"|", ">", ">>", "2>", "<", "&&", "||", ";", "&"}
# Named in the docs before they exist, each with where it is being built.
PENDING_COMMANDS: dict[str, str] = {}

FENCE = re.compile(r"^(\s*)```\s*([\w-]*)(.*)$")
PLACEHOLDER = re.compile(r"^([A-Z]+|\.\.\.)$")
INLINE = re.compile(r"`(mallocbench [^`]+)`")


def doc_files() -> list[Path]:
    return [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]


def blocks(text: str) -> Iterator[tuple[str, str, list[str]]]:
    """(language, the fence's attributes, lines) of every fenced block."""
    lines = text.splitlines()
    at = 0
    while at < len(lines):
        opened = FENCE.match(lines[at])
        if opened is None:
            at += 1
            continue
        indent = len(opened.group(1))
        body: list[str] = []
        at += 1
        while at < len(lines) and not lines[at].strip().startswith("```"):
            body.append(lines[at][indent:])
            at += 1
        yield opened.group(2), opened.group(3), body
        at += 1


def joined(lines: list[str]) -> Iterator[str]:
    """Lines with their backslash continuations joined."""
    pending = ""
    for line in lines:
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        yield (pending + line).strip()
        pending = ""


def command_lines(text: str) -> Iterator[str]:
    """Every mallocbench command line of a page: in sh blocks, indented blocks, inline."""
    fenced: set[int] = set()
    for language, _, body in blocks(text):
        if language in ("sh", "bash", "console", "shell", ""):
            yield from (c for c in joined(body) if is_command(c))
        fenced.update(hash(line) for line in body)
    plain = [ln for ln in text.splitlines() if ln.startswith("    ") and hash(ln) not in fenced]
    yield from (c for c in joined(plain) if is_command(c))
    yield from INLINE.findall(text)


def is_command(line: str) -> bool:
    return line.removeprefix("$ ").removeprefix(".venv/bin/").startswith("mallocbench ")


def words(line: str) -> list[str]:
    """The command's words, up to the first shell operator (a pipe, a redirection)."""
    line = line.removeprefix("$ ").removeprefix(".venv/bin/")
    taken = []
    for word in shlex.split(line, comments=True):
        if word in SHELL_OPERATORS or word.startswith(("2>", ">")):
            break
        taken.append(word)
    return taken


def option_names(command: click.Command, ctx: click.Context) -> set[str]:
    names = {"--help", "-h"}
    for param in command.get_params(ctx):
        names.update(param.opts)
        names.update(param.secondary_opts)
    return names


def check(line: str) -> str | None:
    """What in `line` the command tree does not have; None when it all exists."""
    command: click.Command = main
    ctx = click.Context(main, info_name="mallocbench")
    for word in words(line)[1:]:
        if word == "--":  # what follows is a program's command line (record -- COMMAND)
            return None
        if word.startswith("-") and len(word) > 1:
            name = word.split("=", 1)[0]
            if name not in option_names(command, ctx):
                return f"{ctx.command_path} has no option {name}"
        elif isinstance(command, click.Group):
            if PLACEHOLDER.match(word):  # `mallocbench COMMAND --help`: any command
                return None
            sub = command.get_command(ctx, word)
            if sub is None:
                return None if word in PENDING_COMMANDS else f"no command {word!r}"
            command = sub
            ctx = click.Context(sub, info_name=word, parent=ctx)
    return None


def documented() -> list[tuple[str, str]]:
    return [
        (str(path.relative_to(ROOT)), line)
        for path in doc_files()
        for line in command_lines(path.read_text())
    ]


def test_every_documented_command_line_uses_commands_and_options_that_exist() -> None:
    found = documented()
    pages = {page for page, _ in found}
    # The parser still finds the commands: each of these pages names some.
    assert {"README.md", "docs/tutorials/first-comparison.md", "docs/how-to/tune.md"} <= pages
    assert len(found) > 100, len(found)
    wrong = [f"{page}: {line}: {problem}" for page, line in found if (problem := check(line))]
    assert not wrong, "\n".join(wrong)


def test_a_removed_option_or_command_is_caught() -> None:
    assert check("mallocbench run x.toml --out o --resume") is None
    assert check("mallocbench store copy a b --replace") is None
    assert (
        check("mallocbench run x.toml --no-such-option")
        == "mallocbench run has no option --no-such-option"
    )
    assert check("mallocbench stor copy a b") == "no command 'stor'"
    assert check("mallocbench record --out a.mbt -- ./app --its-own") is None
    assert check("mallocbench runs --store x") == "mallocbench runs has no option --store"
    assert check("mallocbench cluster worker tls://x:1 --tls d --bogus 1") == (
        "mallocbench cluster worker has no option --bogus"
    )
    assert words('mallocbench schema run > run.schema.json  # a comment') == [
        "mallocbench", "schema", "run",
    ]  # fmt: skip


# ------------------------------------------------------------------ the tutorials run


# (tutorial, the start of a line) -> why the test does not run it.
NOT_RUN = {
    ("production-server", "pipx install"): "tests/test_install.py installs the wheel into "
    "a fresh venv; this test uses the checkout's",
    ("production-server", "systemctl"): "the test's private server was started with the "
    "shim preloaded, as the drop-in and the restart would",
    ("production-server", "mallocbench recommend confirm"): "needs the confirmation run, "
    "minutes of private servers (it runs here as --dry-run)",
    ("cluster", "scp"): "one host here; the directories stay where init made them",
    ("cluster", "mallocbench cluster scheduler"): "a long-running service on another host; "
    "tests/test_cluster.py runs a scheduler and workers on this host",
    ("cluster", "mallocbench cluster worker"): "as the scheduler",
    ("cluster", "mallocbench run cluster.toml --cluster tls://10.0.0.1:8786 --tls tls/driver "
     "--store"): "needs the cluster and a PostgreSQL server on the network; "
    "tests/test_cluster.py runs one",
}  # fmt: skip
# (tutorial, what the page says) -> what the test runs instead, and why.
INSTEAD = {
    ("production-server", "mallocbench install-shim"): (
        "mallocbench install-shim --prefix {tmp}/prefix",
        "this host's /usr/local is not the test's to change",
    ),
    ("production-server", '"$(pidof mariadbd)"'): ("{pid}", "the test's private server"),
    ("production-server", "--remove-dropin --service mariadb"): (
        "--remove-dropin --service mariadb --units-dir {tmp}/units",
        "this host's /etc/systemd/system is not the test's to change",
    ),
    ("production-server", "--seconds 60"): ("--seconds 3", "a short window"),
    ("production-server", "--watch 10m"): ("--watch 4s", "a short watch"),
    ("production-server", "glibc,jemalloc,tcmalloc --repeats 3"): (
        "glibc,jemalloc,tcmalloc --repeats 3 --timing none",
        "9 replays at the trace's pace were half the test; the commands are under test "
        "here, recorded timing in tests/test_replay*.py",
    ),
    ("production-server", "mallocbench advise prod.mbt --budget 15m"): (
        "mallocbench advise prod.mbt --budget 15s --timing none --allocators glibc,jemalloc",
        "a 3 s trace: the commands are under test here, not the search (tests/test_advise.py "
        "tests the decision)",
    ),
    ("production-server", "mallocbench run advise-out/confirm.toml --out confirm"): (
        "mallocbench run advise-out/confirm.toml --out confirm --dry-run",
        "the confirmation is minutes of servers; its plan checks the file advise wrote",
    ),
    ("first-comparison", "mallocbench run first.toml --out first-out"): (
        "mallocbench run first.toml --out first-out --set durations.step=3",
        "one 3 s slice a cell, not the page's two: the run and the reports of it are under "
        "test here; slices alternating within a cell in tests/test_interleaved_design.py",
    ),
    ("ci-gate", "mallocbench run gate.toml"): (
        "mallocbench run gate.toml --set durations.step=3",
        "one 3 s slice a cell, not the page's two: the gate (two runs of the file, 3 "
        "blocks each, then compare --fail-on) is under test here, not the noise of 6 s "
        "cells; measured seconds were most of the suite's longest test",
    ),
}
# (tutorial, the start of a line) -> the file it needs, and what the page says an earlier
# command prints when it does not write that file (then the line has nothing to do).
UNLESS = {
    ("production-server", "mallocbench run advise-out/confirm.toml"): (
        "advise-out/confirm.toml",
        "keep the default",
    ),
}
# A command whose documented outcome is one of several statuses.
STATUSES = {"mallocbench compare baseline candidate --fail-on": (0, 1)}


def tutorial_steps(page: Path) -> tuple[dict[str, str], list[str]]:
    """The files a tutorial asks to save (toml blocks with a title) and its shell lines."""
    files: dict[str, str] = {}
    lines: list[str] = []
    for language, attributes, body in blocks(page.read_text()):
        title = re.search(r'title="([^"]+)"', attributes)
        if language == "toml" and title:
            files[title.group(1)] = "\n".join(body) + "\n"
        elif language == "sh":
            lines.extend(line for line in joined(body) if line and not line.startswith("#"))
    return files, lines


def planned(name: str, line: str, subs: dict[str, str]) -> str | None:
    """The line as the test runs it, or None when NOT_RUN says why it does not."""
    if any(key[0] == name and line.startswith(key[1]) for key in NOT_RUN):
        return None
    for (page, said), (instead, _) in INSTEAD.items():
        if page == name and said in line:
            line = line.replace(said, instead.format(**subs))
    return line


def run_tutorial(name: str, workdir: Path, subs: dict[str, str]) -> list[str]:
    """Run a tutorial's commands in order in `workdir`; the lines it ran."""
    files, lines = tutorial_steps(TUTORIALS / f"{name}.md")
    for filename, text in files.items():
        (workdir / filename).write_text(text)
    ran: list[str] = []
    said = ""
    for line in lines:
        command = planned(name, line, subs)
        if command is None:
            continue
        assert is_command(command), f"{name}: {line!r} is neither run nor in NOT_RUN"
        needs = next((v for k, v in UNLESS.items() if k[0] == name and line.startswith(k[1])), None)
        if needs is not None and not (workdir / needs[0]).exists():
            assert needs[1] in said, f"{command}: no {needs[0]}, and nothing said why"
            ran.append(f"(nothing to do) {command}")
            continue
        result = run_cli(*words(command)[1:], cwd=workdir, timeout=600)
        allowed = next((s for k, s in STATUSES.items() if command.startswith(k)), (0,))
        assert result.returncode in allowed, f"{command}\n{result.stderr[-3000:]}"
        said += result.stdout + result.stderr
        ran.append(command)
    return ran


def test_every_line_not_run_is_still_in_its_tutorial() -> None:
    """NOT_RUN and INSTEAD name lines of the pages: one that left its page goes too."""
    for name, start in NOT_RUN:
        _, lines = tutorial_steps(TUTORIALS / f"{name}.md")
        assert any(line.startswith(start) for line in lines), (name, start)
    for name, said in INSTEAD:
        _, lines = tutorial_steps(TUTORIALS / f"{name}.md")
        assert any(said in line for line in lines), (name, said)
    for (name, start), (_, otherwise) in UNLESS.items():
        text = (TUTORIALS / f"{name}.md").read_text()
        assert any(line.startswith(start) for line in tutorial_steps(TUTORIALS / f"{name}.md")[1])
        assert otherwise in text, (name, otherwise)


@pytest.mark.server
def test_the_first_comparison_tutorial_runs(tmp_path: Path) -> None:
    ran = run_tutorial("first-comparison", tmp_path, {})
    assert len(ran) == 7, ran
    assert (tmp_path / "first-out" / "report.html").is_file()


@pytest.mark.server
def test_the_ci_gate_tutorial_runs(tmp_path: Path) -> None:
    ran = run_tutorial("ci-gate", tmp_path, {})
    assert [c.split()[1] for c in ran] == ["run", "run", "compare", "compare"], ran


def test_the_cluster_tutorial_runs_what_one_host_can(tmp_path: Path) -> None:
    ran = run_tutorial("cluster", tmp_path, {})
    assert [c.split()[1:3] for c in ran] == [["cluster", "init"], ["run", "cluster.toml"]], ran
    assert (tmp_path / "tls" / "driver" / "key.pem").stat().st_mode & 0o777 == 0o600


@pytest.fixture
def recorded_server(build: Any, tmp_path: Path) -> Iterator[int]:
    """A private server under the shim, serving a steady trickle of queries: the
    tutorial's production server. Its pid."""
    from mallocbench.servers import engines
    from mallocbench.servers.mariadb import ServerConfig, running

    shim = allocators.get(str(shim_path()))
    config = ServerConfig(engine=engines.get("innodb"), cache_bytes=64 << 20, allocator=shim)
    with running(build, tmp_path / "srv", config) as server:
        server.query("CREATE DATABASE tut")
        server.query("CREATE TABLE tut.t (id INT PRIMARY KEY AUTO_INCREMENT, v TEXT)")
        stop = threading.Event()

        def serve() -> None:
            while not stop.is_set():
                server.query("INSERT INTO tut.t (v) VALUES (REPEAT('y', 300))")
                server.query("SELECT v FROM tut.t ORDER BY id DESC LIMIT 20")

        worker = threading.Thread(target=serve)
        worker.start()
        try:
            yield server.pid
        finally:
            stop.set()
            worker.join()


@pytest.mark.server
def test_the_production_server_tutorial_runs(recorded_server: int, tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    subs = {"tmp": str(tmp_path), "pid": str(recorded_server)}
    ran = run_tutorial("production-server", work, subs)
    assert [c.removeprefix("(nothing to do) ").split()[1] for c in ran] == [
        "install-shim", "record", "check", "record", "replay", "advise", "run", "record", "check",
        "check",
    ], ran  # fmt: skip
    assert tracemod.check(work / "prod.mbt").complete
    # the decision, and the check that weighs the server against advise's prediction
    decision = json.loads((work / "advise-out" / "advise.json").read_text())["decision"]
    assert decision["line"].startswith(("deploy ", "keep the default ("))
    assert (work / "advise-out" / "confirm.toml").exists() == (
        decision["answer"] == "deploy" or decision["subject"] not in (None, decision["base"])
    )
    assert (tmp_path / "prefix" / "lib" / "mallocbench" / "libmbrecord.so").is_file()
