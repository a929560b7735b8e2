"""`mallocbench recommend RUN`: which setup to run in production, with the evidence.

The decision is `analysis.recommend`'s; the words are `report.recommend`'s; the
deployment snippets are `deploy`'s. Nothing here touches the system unless
--write-dropin is given, and then only the directory it names.
"""

from __future__ import annotations

from pathlib import Path

import click

from mallocbench import deploy
from mallocbench.analysis.recommend import DEFAULT_PRIORITIES, parse_priorities, recommend
from mallocbench.commands.options import emit, min_effect_option
from mallocbench.console import make_console
from mallocbench.errors import MallocbenchError
from mallocbench.metadata import ReplayRecord
from mallocbench.report import formats
from mallocbench.report.recommend import Advice
from mallocbench.results import RunResult, SetupInfo
from mallocbench.store.loading import load_result
from mallocbench.units import parse_size


def _setup(result: RunResult, name: str) -> SetupInfo:
    for setup in result.setups:
        if setup.name == name:
            return setup
    raise MallocbenchError(f"run {result.run_id} does not describe setup {name!r}")


def _chosen(result: RunResult, choices: dict[str, str | None], engine: str | None) -> str | None:
    """The one setup to deploy: the engines must agree, or --engine must pick one."""
    if engine is not None:
        if engine not in choices:
            raise MallocbenchError(
                f"engine {engine!r} is not in run {result.run_id}: use one of "
                f"{', '.join(choices) or 'none'}"
            )
        return choices[engine]
    picked = set(choices.values())
    if len(picked) > 1:
        detail = ", ".join(f"{e}: {c or 'keep the base'}" for e, c in choices.items())
        raise MallocbenchError(
            f"the engines disagree ({detail}): pick the one you run with --engine NAME"
        )
    return next(iter(picked), None)


def _replay(source: str) -> ReplayRecord:
    replayed = load_result(source, with_samples=False)
    if replayed.metadata.replay is None:
        raise MallocbenchError(
            f"--replay {source}: run {replayed.run_id} is not a replay; give the --out "
            "directory of `mallocbench replay TRACE --out DIR`"
        )
    return replayed.metadata.replay


@click.command("recommend")
# A str, not a Path: a postgresql:// URL would lose a slash.
@click.argument("source")
@click.option("--run", "run_id", help="Run id in the store (default: the latest).")
@click.option(
    "--priority",
    "priority_text",
    default=",".join(DEFAULT_PRIORITIES),
    show_default=True,
    metavar="LIST",
    help="What matters, most important first: throughput, rss, p99. A setup must be "
    "shown not worse on each and better on one; other criteria only veto a shown loss.",
)
@click.option(
    "--memory-budget",
    "budget_text",
    metavar="SIZE",
    help="RAM the server may use (e.g. 8G): setups whose peak RSS exceeds it are out.",
)
@min_effect_option("Smallest change that counts, better or worse (0.03 or 3%); default: the run's.")
@click.option("--engine", help="Recommend for this engine only (when engines disagree).")
@click.option(
    "--replay",
    "replay_source",
    metavar="DIR",
    help="A replay of this workload's trace (`mallocbench replay --out DIR`): its peak RSS "
    "ratios join the servers' as memory evidence, labelled as from a replay.",
)
@click.option(
    "--service",
    type=click.Choice(["mariadb", "mysql"]),
    default="mariadb",
    show_default=True,
    help="systemd service the drop-in is for.",
)
@click.option(
    "--write-dropin",
    "dropin_dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Write the systemd drop-in of the chosen setup under DIR (e.g. /etc/systemd/system); "
    "then run `systemctl daemon-reload` and restart the service yourself.",
)
@click.option(
    "--format",
    "fmt_name",
    type=click.Choice(formats.RECOMMENDATION.names),
    default="terminal",
    show_default=True,
    help="What to print on standard output.",
)
def recommend_cmd(
    source: str,
    run_id: str | None,
    priority_text: str,
    budget_text: str | None,
    min_effect: float | None,
    engine: str | None,
    replay_source: str | None,
    service: str,
    dropin_dir: Path | None,
    fmt_name: str,
) -> None:
    """Recommend a setup for production from a run, and show how to deploy it.

    \b
    A setup is recommended over the base only when the statistics show it better on
    one priority by at least the minimum effect and not worse by as much on any
    (non-inferiority: the 95% interval's bad end stays within the minimum effect);
    otherwise the answer is to keep the base. Every claim prints its ratio, interval
    and the cells it comes from; thin evidence (one thread count, no write steps,
    unstable or client-bound cells, few repeats) is said. A soak with events adds each
    setup's RSS step per event against the base's as memory evidence.

    \b
    SOURCE is an output directory, a .sqlite store, a postgresql:// URL or a results.json.

    \b
    Examples:
      mallocbench recommend out
      mallocbench recommend out --priority rss,throughput --memory-budget 12G
      mallocbench recommend out --engine myrocks --write-dropin /etc/systemd/system
    """
    priorities = parse_priorities(priority_text)
    budget = parse_size(budget_text, "--memory-budget") if budget_text else None
    result = load_result(source, run_id, with_samples=False)
    if any(s.events for s in result.sessions):
        # A soak's steps per event are read from its per-second RSS: load it with them.
        result = load_result(source, result.run_id)
    measured = list(dict.fromkeys(c.engine for c in result.cells))
    if engine is not None and engine not in measured:
        # An answer for the other engines would read as one for this engine.
        raise MallocbenchError(
            f"engine {engine!r} is not in run {result.run_id}: it measured "
            f"{', '.join(measured) or 'no cells'}; drop --engine or give one of those"
        )
    replay = _replay(replay_source) if replay_source else None
    rec = recommend(result, priorities, min_effect, budget, replay=replay)
    if engine is not None:
        rec.engines = [e for e in rec.engines if e.engine == engine] or rec.engines
    choices = {e.engine: e.choice for e in rec.engines}
    deployment = None
    try:
        chosen = _chosen(result, choices, engine)
    except MallocbenchError:
        if dropin_dir is not None:
            raise
        chosen = None  # engines disagree: each engine's choice is in the text above
    if chosen is not None:
        deployment = deploy.deployment_for(_setup(result, chosen), service)
    emit(formats.RECOMMENDATION, fmt_name, Advice(rec, deployment))
    if dropin_dir is not None:
        if deployment is None:
            make_console(stderr=True).print("no change recommended: no drop-in written")
            return
        path = deploy.write_dropin(deployment, dropin_dir)
        make_console(stderr=True).print(
            f"wrote {path}; apply with: systemctl daemon-reload && systemctl restart {service}"
        )


commands = [recommend_cmd]
