"""A run analysed once: everything the reports show, for every format to read.

The renderers receive a `RunAnalysis` and never call the analysis themselves, so one
`write_reports` computes the statistics once, and options such as --min-effect or
--reference are arguments here rather than edits of the stored run.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from mallocbench.analysis import stats
from mallocbench.analysis.adjust import CpuAdjustment, adjust_for_other_cpu
from mallocbench.analysis.backends import BackendSteps, backend_steps
from mallocbench.analysis.client import client_bound
from mallocbench.analysis.criteria import Recommendation, stored_rule
from mallocbench.analysis.ratchet import SetupRatchet, ratchet_setups
from mallocbench.analysis.recommend import recommend
from mallocbench.analysis.replay import ReplayAnalysis, analyze_replay
from mallocbench.analysis.run_noise import RunNoise, run_noise
from mallocbench.analysis.sla import SlaStatus, sla_results
from mallocbench.analysis.soak import SetupSoak, is_soak, soak_setups
from mallocbench.analysis.summary import (
    CellSummary,
    Exploratory,
    MemoryRow,
    RatioCell,
    RatioTable,
    exploratory,
    memory_rows,
    min_effect_of,
    relative_tables,
    reserved_vsz_bytes,
    rss_ratio_cells,
    setup_order,
    summarize_run,
)
from mallocbench.analysis.verdict import VerdictRow, verdict_rows
from mallocbench.errors import MallocbenchError
from mallocbench.model.metadata import AdaptiveRecord
from mallocbench.model.results import STATUS_OK, Cell, RunResult

SummaryKey = tuple[str, str, str, int]


@dataclass(frozen=True)
class RunAnalysis:
    """One run's figures, computed once; `result` is the run as reported (only the
    setups asked for, relative to the reference), never altered by the options."""

    result: RunResult
    min_effect: float  # the one every relative value, colour and verdict used
    min_effect_given: bool  # set by the caller (--min-effect), not the run's own
    setups: tuple[str, ...]  # in the run's order, the base or reference among them
    summaries: Mapping[SummaryKey, CellSummary]
    intervals: Mapping[SummaryKey, tuple[float, float, float]]  # mean QPS, 95% low, high
    tables: tuple[RatioTable, ...]
    memory: tuple[MemoryRow, ...]
    verdict: tuple[VerdictRow, ...]
    recommendation: Recommendation
    sla: tuple[tuple[str, SlaStatus], ...]
    is_soak: bool
    soaks: tuple[SetupSoak, ...]  # empty unless the run is a soak
    problems: tuple[Cell, ...]  # cells that did not measure
    adaptive: AdaptiveRecord | None
    exploratory: Exploratory | None  # why no finding is possible, when so
    noise: RunNoise | None  # the noise the run met, from its slices
    unstable: tuple[Cell, ...]  # cells whose measured seconds trended or shifted level
    not_steady: tuple[Cell, ...]  # cells whose warmup ran out still trending
    client_bound: tuple[Cell, ...]  # cells whose client used more CPU than the server
    # Largest peak VSZ when VSZ is mostly reserved address space (then not compared).
    reserved_vsz_bytes: int | None
    replay: ReplayAnalysis | None = None  # a replay run's results (mallocbench replay)
    # A soak's events: the RSS step each left behind (analysis.ratchet); () without events.
    ratchets: tuple[SetupRatchet, ...] = ()
    # A soak's events' own backends (a process per connection): the private memory each
    # kept (analysis.backends); () when no event read one.
    backends: tuple[BackendSteps, ...] = ()
    # Relative QPS adjusted for the other processes' CPU per paired slice, beside the raw
    # (analysis.adjust); () for soaks and runs without paired slices.
    cpu_adjusted: tuple[CpuAdjustment, ...] = ()

    @property
    def recorded_notes(self) -> list[str]:
        """What the run itself wrote down for the reader (e.g. a THP knob with no effect)."""
        notes = self.result.metadata.notes or []
        return [str(n) for n in notes] if isinstance(notes, list) else []


def select_setups(
    result: RunResult, reference: str | None, setup_list: list[str] | None
) -> RunResult:
    """The run as if only these setups ran, against `reference`: nothing is recomputed but
    the relative values, so the report says exactly what the stored cells say."""
    if reference is None and setup_list is None:
        return result
    known = [s.name for s in result.setups] or sorted({c.setup for c in result.cells})
    base = reference or result.base_setup
    wanted = setup_list or known
    for name in [base, *wanted]:
        if name not in known:
            raise MallocbenchError(
                f"setup {name!r} is not in run {result.run_id}: use one of {', '.join(known)}"
            )
    if base not in wanted:
        raise MallocbenchError(
            f"--setups leaves out {base!r}, the setup the others are compared with: add it, "
            "or pick another with --reference"
        )
    if base == result.base_setup and wanted == known:
        return result
    keep = set(wanted)
    return dataclasses.replace(
        result,
        base_setup=base,
        setups=[s for s in result.setups if s.name in keep],
        sessions=[s for s in result.sessions if s.setup in keep],
        cells=[c for c in result.cells if c.setup in keep],
    )


def _recommendation(
    run: RunResult,
    effect: float,
    tables: list[RatioTable],
    rss_cells: dict[tuple[str, str], RatioCell],
    ratchets: Sequence[SetupRatchet],
) -> Recommendation:
    """The run's recommendation by its own rule: its experiment's [decision], if any."""
    rule = stored_rule(run)
    return recommend(
        run,
        rule.priorities,
        effect,
        rule.memory_budget_bytes,
        tables=tables,
        rss_cells=rss_cells,
        ratchets=ratchets,
        max_loss=rule.max_loss,
    )


def analyze(
    result: RunResult,
    min_effect: float | None = None,
    reference: str | None = None,
    setups: list[str] | None = None,
) -> RunAnalysis:
    """Analyse `result` once for every report: `min_effect` overrides the run's own,
    `reference` replaces its base and `setups` keeps only those setups."""
    run = select_setups(result, reference, setups)
    effect = min_effect_of(run, min_effect)
    summaries = summarize_run(run)
    tables = relative_tables(run, effect, summaries)
    memory = memory_rows(run)
    rss_cells = rss_ratio_cells(run, effect)
    soaks = tuple(soak_setups(run)) if is_soak(run) else ()
    ratchets = ratchet_setups(run, soaks)
    return RunAnalysis(
        result=run,
        min_effect=effect,
        min_effect_given=min_effect is not None,
        setups=tuple(setup_order(run)),
        summaries=summaries,
        intervals={key: stats.mean_ci(s.qps_values) for key, s in summaries.items()},
        tables=tuple(tables),
        memory=tuple(memory),
        verdict=tuple(verdict_rows(run, tables, memory, effect, rss_cells)),
        recommendation=_recommendation(run, effect, tables, rss_cells, ratchets),
        sla=tuple(sla_results(run.cells)),
        is_soak=is_soak(run),
        soaks=soaks,
        problems=tuple(c for c in run.cells if c.status != STATUS_OK),
        adaptive=run.metadata.adaptive,
        exploratory=exploratory(run),
        client_bound=tuple(c for c in run.cells if client_bound(c)),
        noise=run_noise(run),
        unstable=tuple(c for c in run.cells if c.unstable),
        not_steady=tuple(c for c in run.cells if c.warmup_steady is False),
        reserved_vsz_bytes=reserved_vsz_bytes(memory),
        replay=analyze_replay(run.metadata.replay, effect) if run.metadata.replay else None,
        ratchets=ratchets,
        backends=backend_steps(run) if soaks else (),
        cpu_adjusted=() if is_soak(run) else adjust_for_other_cpu(run, summaries),
    )
