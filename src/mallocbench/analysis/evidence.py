"""The evidence a recommendation rests on: each criterion's relative values for a
candidate against the base (throughput, p99, peak RSS, CPU per operation, a soak's steps
per event, a replay's peaks), weighed into an Assessment, and where the evidence is thin.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from mallocbench.analysis import stats
from mallocbench.analysis.client import client_bound
from mallocbench.analysis.criteria import (
    BETTER,
    CPU_METRIC,
    HIGHER_IS_BETTER,
    NON_INFERIOR,
    REPLAY_KEYS,
    RSS,
    UNCLEAR,
    UNMEASURED,
    WORSE,
    Assessment,
    Evidence,
    Place,
    ThinEvidence,
    Where,
    bad_end,
)
from mallocbench.analysis.summary import RSS as RSS_UNIT
from mallocbench.analysis.summary import (
    RatioCell,
    judged,
    ratio_cell,
    setup_order,
)
from mallocbench.model.metadata import ReplayRecord
from mallocbench.model.results import STATUS_OK, Cell, RunResult

if TYPE_CHECKING:
    from mallocbench.analysis.ratchet import SetupRatchet, StepDifference


def _evidence(where: Where, cell: RatioCell) -> Evidence:
    return Evidence(
        where,
        cell.ratio,
        cell.low,
        cell.high,
        cell.verdict,
        cell.problem,
        cell.reference,
        cell.blocks,
        cell.df,
    )


def _weigh(out: Assessment, evidence: Evidence, cell: RatioCell, min_effect: float) -> None:
    """File one piece of evidence under better, worse and unclear, and keep the worst."""
    higher_better = HIGHER_IS_BETTER[out.criterion]
    better_word = stats.FASTER if higher_better else stats.SLOWER
    worse_word = stats.SLOWER if higher_better else stats.FASTER
    verdict = cell.verdict
    if verdict == better_word:
        out.better.append(evidence)
    elif verdict == worse_word:
        out.worse.append(evidence)
    # Non-inferiority: the interval's bad end must stay within min_effect of 1.0.
    if higher_better:
        past = not cell.has_interval or cell.low < 1.0 - min_effect
    else:
        past = not cell.has_interval or cell.high > 1.0 + min_effect
    if past and verdict != worse_word:
        out.unclear.append(evidence)
    if cell.has_interval:
        bad = cell.low if higher_better else 1 / cell.high
        if out.worst is None or bad < bad_end(out.worst, higher_better):
            out.worst = evidence


def step_cell(difference: StepDifference) -> RatioCell:
    """A soak's step difference on the ratio scale (StepDifference.as_ratio), so that
    stats.classify and the non-inferiority test judge it by the ratchet's rule."""
    ratio, low, high = difference.as_ratio()
    cell = RatioCell(
        ratio,
        low,
        high,
        repeats=(difference.step.n, difference.base_step.n),
        reference_label=difference.base,
        min_effect=difference.min_effect,
        unit=RSS_UNIT,
    )
    return judged(cell)


def assess(
    criterion: str,
    cells: list[tuple[Where, RatioCell]],
    min_effect: float,
    steps: Sequence[StepDifference] = (),
    level_cells: int | None = None,
) -> Assessment:
    """A candidate's status on one criterion from its ratio cells (candidate / base) and,
    for memory, the steps per soak event it leaves beside the base's. The base's level
    comes from the first `level_cells` cells (all by default): a replay's bytes are not
    the server's."""
    out = Assessment(criterion, UNMEASURED, None, cells=len(cells) + len(steps))
    ratios = []
    for where, cell in cells:
        evidence = _evidence(where, cell)
        if cell.problem:
            # A crash or OOM where the base measured is the worst regression there is.
            if cell.problem != "missing":
                out.worse.append(evidence)
            continue
        if cell.ratio is not None:
            ratios.append(cell.ratio)
        _weigh(out, evidence, cell, min_effect)
    for difference in steps:
        cell = step_cell(difference)
        evidence = dataclasses.replace(
            _evidence(Where(Place.SOAK_STEP, name=difference.label), cell), step=difference
        )
        out.steps.append(evidence)
        _weigh(out, evidence, cell, min_effect)
    out.estimate = stats.geomean(ratios) if ratios else None
    levels = [c.reference for _, c in cells[:level_cells] if c.reference and not c.problem]
    out.base_level = stats.geomean(levels) if levels else None
    if out.worse:
        out.status = WORSE
    elif not ratios and not steps:
        out.status = UNMEASURED
    elif out.unclear:
        out.status = UNCLEAR
    elif out.better:
        out.status = BETTER
    else:
        out.status = NON_INFERIOR
    return out


def _p99(cell: Cell) -> float | None:
    return cell.p99_ms


def cpu_per_op(cell: Cell) -> float | None:
    value = (cell.metrics or {}).get(CPU_METRIC)
    return float(value) if value else None


def paired_cells(
    result: RunResult,
    min_effect: float,
    value_of: Callable[[Cell], float | None] = _p99,
    unit: str = "ms",
) -> dict[str, list[tuple[Where, RatioCell]]]:
    """Each candidate's value (p99 latency, CPU per operation) over the base's per step
    and thread count, paired by block."""
    by_key: dict[tuple[str, str, str, int], dict[int, float]] = defaultdict(dict)
    for cell in result.cells:
        value = value_of(cell) if cell.status == STATUS_OK else None
        if value:
            by_key[(cell.setup, cell.engine, cell.step, cell.threads)][cell.repeat] = value
    out: dict[str, list[tuple[Where, RatioCell]]] = defaultdict(list)
    base = result.base_setup
    for (setup, engine, step, threads), base_values in sorted(by_key.items()):
        if setup != base:
            continue
        others = {
            s: by_key[(s, engine, step, threads)]
            for s in setup_order(result)
            if s != base and (s, engine, step, threads) in by_key
        }
        blocked = stats.blocked_ratios(base_values, others)
        for name, values in others.items():
            ratio = ratio_cell(
                list(values.values()),
                list(base_values.values()),
                None,
                base,
                min_effect,
                unit,
                blocked.get(name),
            )
            out[f"{engine}/{name}"].append((Where(Place.CELL, step, threads), ratio))
    return out


def _replay_setup_key(allocator: str, knobs: Mapping[str, str]) -> tuple[str, tuple[Any, ...]]:
    return allocator, tuple(sorted((str(k), str(v)) for k, v in knobs.items()))


def replay_rss_cells(
    result: RunResult, replay: ReplayRecord, min_effect: float
) -> dict[str, RatioCell]:
    """Each candidate's replay peak RSS over the base's, for the run's setups whose allocator
    and knobs a setup of the replay has (the replay knows no server config); empty when
    the run's base is not among them."""
    names = {
        _replay_setup_key(str(s.get("allocator")), s.get("knobs") or {}): str(s.get("name"))
        for s in replay.setups or []
    }
    runs = replay.replay_runs

    def peaks(name: str) -> list[float]:
        return [v for r in runs if r.setup == name and (v := r.value("peak_heap_rss")) is not None]

    matched = {s.name: names.get(_replay_setup_key(s.allocator, s.knobs)) for s in result.setups}
    base = matched.get(result.base_setup)
    if base is None:
        return {}
    return {
        setup: ratio_cell(peaks(name), peaks(base), None, base, min_effect, RSS_UNIT)
        for setup, name in matched.items()
        if name is not None and setup != result.base_setup
    }


def rss_evidence(
    engine: str,
    setup: str,
    rss_cells: Mapping[tuple[str, str], RatioCell],
    replay_cells: Mapping[str, RatioCell],
    replay_trace: str,
) -> list[tuple[Where, RatioCell]]:
    """The peak-RSS ratios behind the memory claim: the servers', then the replay's."""
    out = []
    rss = rss_cells.get((engine, setup))
    if rss:
        out.append((Where(Place.PEAK_RSS), rss))
    if setup in replay_cells:
        out.append((Where(Place.REPLAY_PEAK, name=replay_trace), replay_cells[setup]))
    return out


def steps_by_setup(
    result: RunResult, ratchets: Sequence[SetupRatchet] | None, min_effect: float
) -> dict[tuple[str, str], list[StepDifference]]:
    """A soak's steps per event against the base's, per (engine, setup); {} without."""
    # Imported here: numpy and the soak's analysis are for runs with events only, and
    # `recommend --help` should not wait for them.
    from mallocbench.analysis.ratchet import ratchet_setups, step_differences
    from mallocbench.analysis.soak import is_soak, soak_setups

    if ratchets is None:
        if not any(s.events for s in result.sessions) or not is_soak(result):
            return {}
        ratchets = ratchet_setups(result, soak_setups(result))
    out: dict[tuple[str, str], list[StepDifference]] = defaultdict(list)
    for difference in step_differences(ratchets, result.base_setup, min_effect):
        out[(difference.engine, difference.setup)].append(difference)
    return out


def thin_evidence(result: RunResult, engine: str) -> ThinEvidence:
    cells = [c for c in result.cells if c.engine == engine]
    threads = {c.threads for c in cells}
    repeats = len({c.repeat for c in cells})
    return ThinEvidence(
        only_threads=next(iter(threads)) if len(threads) == 1 else None,
        no_writes=not any((c.group in ("write", "insert-benchmark")) for c in cells),
        unstable=sum(c.unstable for c in cells),
        client_bound=sum(client_bound(c) for c in cells),
        # A soak's repeats are segments of one server lifetime: no start-to-start spread.
        soak=result.metadata.soak is not None,
        few_repeats=repeats if repeats < 3 else None,
    )


def replay_values(record: ReplayRecord, key: str) -> dict[str, dict[int, float]]:
    """Each setup's values by repeat (a block: the setups replay interleaved per repeat)."""
    runs = record.replay_runs
    return {
        str(s.get("name")): {
            r.repeat: v
            for r in runs
            if r.setup == s.get("name") and (v := r.value(key)) is not None
        }
        for s in record.setups or []
    }


def replay_cells(record: ReplayRecord, key: str, min_effect: float) -> dict[str, RatioCell]:
    """Each setup's value over the base's (the first setup), paired by repeat; a setup
    none of whose replays gave a value is a failure where the base measured."""
    values = replay_values(record, key)
    names = list(values)
    if not names or not values[names[0]]:
        return {}
    base = names[0]
    measured = {n: values[n] for n in names[1:] if len(values[n]) >= 2}
    blocked = stats.blocked_ratios(values[base], measured) if measured else {}
    unit = RSS_UNIT if key == REPLAY_KEYS[RSS] else "s"
    return {
        n: ratio_cell(
            list(values[n].values()),
            list(values[base].values()),
            None if values[n] else "failed",
            base,
            min_effect,
            unit,
            blocked.get(n),
        )
        for n in names[1:]
    }
