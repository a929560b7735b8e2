"""`mallocbench recommend RUN`: which setup to run in production, with the evidence.

The decision is `analysis.recommend`'s; the words are `report.recommend`'s; the
deployment snippets are `deploy`'s. Nothing here touches the system unless
--write-dropin is given, and then only the directory it names.
"""

from __future__ import annotations

from pathlib import Path

import click

from mallocbench.analysis.criteria import (
    CRITERIA,
    REPLAY_PRIORITIES,
    DecisionRule,
    Recommendation,
    parse_max_loss,
    parse_priorities,
    stored_rule,
)
from mallocbench.analysis.recommend import recommend, replay_recommendation
from mallocbench.commands.options import min_effect_option
from mallocbench.commands.output import emit, say
from mallocbench.deploy import forms as deploy
from mallocbench.deploy import systemd
from mallocbench.errors import MallocbenchError
from mallocbench.model.metadata import ReplayRecord
from mallocbench.model.results import RunResult, SetupInfo
from mallocbench.report import formats
from mallocbench.report.recommend import Advice, DropIn
from mallocbench.servers import families
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


def _of_replay(result: RunResult, given: DecisionRule, min_effect: float | None) -> Recommendation:
    """A replay run (`replay --out`, advise's finalists): the same rule on its steady
    peak RSS and CPU, memory first unless --priority says otherwise."""
    from mallocbench.analysis.summary import min_effect_of
    from mallocbench.model.traceinfo import server_rss

    record = result.metadata.replay
    assert record is not None
    rule = DecisionRule(
        given.priorities or REPLAY_PRIORITIES, given.memory_budget_bytes, given.max_loss
    )
    server = server_rss((record.trace or {}).get("info") or {})
    label = Path(record.trace_path or "trace").name
    effect = min_effect_of(result, min_effect)
    return replay_recommendation(record, result.run_id, rule, effect, server, label)


RECOMMEND_HELP = """Recommend a setup for production from a run, and show how to deploy it.

\b
The outcome per engine is one of:
  change     a setup shown better on a priority by at least the minimum effect and
             not worse by as much on any (or only by a loss a budget takes): run it;
  trade-off  the best wins the first priority and is shown worse on another: the
             price in ratios and units (MiB, QPS, ms), and the budget that takes it;
  undecided  a supported gain waits on an unclear priority: what holds it and the
             command that adds evidence;
  keep       nothing else: keep the base.
Budgets decide trade-offs: --memory-budget (absolute) and --max-loss OBJECTIVE=PCT
take a loss within them and refuse one beyond; the experiment's [decision] table
gives the defaults. Every claim prints its ratio, interval and the cells it comes
from; thin evidence (one thread count, no write steps, unstable or client-bound
cells, few repeats) is said. A soak with events adds each setup's RSS step per
event against the base's as memory evidence. Deploy snippets are for a change only.

\b
SOURCE is an output directory, a .sqlite store, a postgresql:// URL or a results.json.
A replay's (`replay --out`, `advise --out`) is decided on its steady peak RSS and
CPU (priorities rss,cpu by default).

\b
Examples:
  mallocbench recommend out
  mallocbench recommend out --priority rss,throughput --memory-budget 12G
  mallocbench recommend out --max-loss rss=10% --max-loss p99=5%
  mallocbench recommend out --engine myrocks --write-dropin /etc/systemd/system
"""


def _given_rule(
    priority_text: str | None, budget_text: str | None, max_loss_items: tuple[str, ...]
) -> DecisionRule:
    """The command line's rule, checked before any run is read; () priorities when not given."""
    return DecisionRule(
        parse_priorities(priority_text) if priority_text else (),
        parse_size(budget_text, "--memory-budget") if budget_text else None,
        parse_max_loss(max_loss_items),
    )


def _merged(given: DecisionRule, stored: DecisionRule) -> DecisionRule:
    """The run's own [decision] fills what the command line leaves out."""
    return DecisionRule(
        given.priorities or stored.priorities,
        given.memory_budget_bytes or stored.memory_budget_bytes,
        {**stored.max_loss, **given.max_loss},
    )


@click.command("recommend", help=RECOMMEND_HELP)
# A str, not a Path: a postgresql:// URL would lose a slash.
@click.argument("source")
@click.option("--run", "run_id", help="Run id in the store (default: the latest).")
@click.option(
    "--priority",
    "priority_text",
    metavar="LIST",
    help="What matters, most important first: throughput, rss, p99, cpu (default: the "
    "experiment's [decision], else throughput,rss). A setup must be shown not worse on "
    "each and better on one; other criteria only veto a shown loss.",
)
@click.option(
    "--memory-budget",
    "budget_text",
    metavar="SIZE",
    help="RAM the server may use (e.g. 8G): setups whose peak RSS exceeds it are out, "
    "and a peak-RSS loss within it is taken.",
)
@click.option(
    "--max-loss",
    "max_loss_items",
    multiple=True,
    metavar="OBJECTIVE=PCT",
    help=f"A loss taken for a gain on a priority ({', '.join(CRITERIA)}), e.g. rss=10%: "
    "every interval's bad end within it. Repeat for more objectives.",
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
    priority_text: str | None,
    budget_text: str | None,
    max_loss_items: tuple[str, ...],
    min_effect: float | None,
    engine: str | None,
    replay_source: str | None,
    service: str,
    dropin_dir: Path | None,
    fmt_name: str,
) -> None:
    """`mallocbench recommend` (RECOMMEND_HELP)."""
    given = _given_rule(priority_text, budget_text, max_loss_items)
    result = load_result(source, run_id, with_samples=False)
    rule = _merged(given, stored_rule(result))
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
    if result.metadata.replay is not None and not result.cells:
        rec = _of_replay(result, given, min_effect)
    else:
        rec = recommend(
            result,
            rule.priorities,
            min_effect,
            rule.memory_budget_bytes,
            replay=replay,
            max_loss=rule.max_loss,
        )
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
        deployment = _deployment(result, _setup(result, chosen), service)
    emit(formats.RECOMMENDATION, fmt_name, Advice(rec, deployment, source))
    if dropin_dir is not None:
        kinds = list(dict.fromkeys(str(e.kind) for e in rec.engines))
        path = None if deployment is None else systemd.write_dropin(deployment, dropin_dir)
        unit = service if deployment is None else deployment.service
        say(formats.RECOMMEND_DROPIN, DropIn(path, unit, kinds), err=True)


def _deployment(result: RunResult, setup: SetupInfo, service: str) -> deploy.Deployment:
    """The forms for the family the run measured (its servers' flavor); --service names
    a MariaDB run's unit, mariadb or mysql."""
    labels = result.metadata.server_versions or [families.DEFAULT]
    family = families.of_flavor(labels[0].split()[0])
    if family.name == families.DEFAULT and service != families.DEFAULT:
        return deploy.deployment_for(setup, service)
    return family.deployment(setup)


commands = [recommend_cmd]
