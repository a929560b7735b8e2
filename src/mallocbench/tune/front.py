"""From the search's single, noisy observations to a front the statistics support.

The search sees each setting once, so its front is partly luck. Here the observed front
and the default are measured again, `repeats` times each and interleaved (default, A, B,
default, A, B, ...) so a drift of the host spreads over all of them; every point gets a
95% interval per objective and a ratio to the default with the project's verdict
(analysis/tune.py), its interval widened for the number of comparisons (Bonferroni),
since the best of many noisy points is otherwise a finding by chance. A point is
dominated only when another is better on some objective and shown the same (within
min_effect) or better on every other; a setting is chosen for a priority only when it
beats the default there as a finding.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from mallocbench.allocators.base import Allocator
from mallocbench.analysis import choice
from mallocbench.analysis.tune import (
    Pool,
    Versus,
    estimate,
    family_confidence,
    pool,
    pooled_versus,
    versus,
)
from mallocbench.tune.evaluate import EvaluationFailed, Evaluator
from mallocbench.tune.objectives import Constraint, Metric
from mallocbench.tune.result import Point
from mallocbench.tune.search import Observed


def _dominates(
    a: Mapping[str, float], b: Mapping[str, float], objectives: Sequence[Metric]
) -> bool:
    """a dominates b on single observations (the search's view)."""
    signs = [1.0 if m.lower_is_better else -1.0 for m in objectives]
    pairs = [(s * a[m.key], s * b[m.key]) for s, m in zip(signs, objectives, strict=True)]
    return all(x <= y for x, y in pairs) and any(x < y for x, y in pairs)


def observed_front(trials: Sequence[Observed], objectives: Sequence[Metric]) -> list[Observed]:
    """The feasible trials no other feasible trial dominates, as observed once."""
    usable = [t for t in trials if t.feasible and all(m.key in t.metrics for m in objectives)]
    return [
        t
        for t in usable
        if not any(_dominates(o.metrics, t.metrics, objectives) for o in usable if o is not t)
    ]


def candidates(
    trials: Sequence[Observed], objectives: Sequence[Metric], limit: int
) -> list[Observed]:
    """The default and about `limit` points of the observed front: always its ends (the
    best on each objective) and its knee, so the choice can weigh the trade-off however
    short the budget; the rest spread evenly along the first objective."""
    default = next((t for t in trials if t.default), None)
    front = [t for t in observed_front(trials, objectives) if not t.default]
    vectors = [[_lower_better(m, t.metrics[m.key]) for m in objectives] for t in front]
    kept = [front[i] for i in choice.span(vectors, limit)]
    return ([default] if default else []) + kept


def _lower_better(m: Metric, value: float) -> float:
    return value if m.lower_is_better else -value


def measure(
    allocator: Allocator,
    chosen: Sequence[Observed],
    evaluator: Evaluator,
    repeats: int,
    progress: Callable[[str], None] | None = None,
) -> list[Point]:
    """Every chosen setting `repeats` times, interleaved; in blocks of the setting's
    servers up at once where the evaluator measures so (on servers)."""
    points = [
        Point("default" if t.default else f"#{t.number}", t.number, t.default, t.setting, t.metrics)
        for t in chosen
    ]
    blocked = getattr(evaluator, "measure_blocks", None)
    if blocked is not None:
        if progress is not None:
            progress(f"{allocator.name}: {len(points)} settings in {repeats} blocks")
        for index, block in enumerate(blocked(allocator, [p.setting for p in points], repeats)):
            for point, values in zip(points, block, strict=True):
                if values is None:
                    point.failed += 1
                    continue
                for key, value in values.items():
                    point.samples.setdefault(key, []).append(value)
                    point.blocks.setdefault(key, []).append(index)
        return points
    for repeat in range(repeats):
        for point in points:
            if progress is not None:
                progress(f"{allocator.name} {point.label} · repeat {repeat + 1}/{repeats}")
            try:
                values = evaluator(allocator, point.setting)
            except EvaluationFailed:
                point.failed += 1
                continue
            for key, value in values.items():
                point.samples.setdefault(key, []).append(value)
    return points


def judge(
    points: Sequence[Point],
    objectives: Sequence[Metric],
    constraints: Sequence[Constraint],
    min_effect: float,
) -> None:
    """Intervals, ratios to the default and dominance under the intervals, in place."""
    keys = {m.key for m in objectives} | {c.metric.key for c in constraints}
    default = next((p for p in points if p.default), None)
    n = len(points)
    to_default = family_confidence((n - 1) * len(objectives))
    pairwise = family_confidence(n * (n - 1) // 2 * len(objectives))
    pools = {m.key: pool_of(points, m.key) for m in objectives}
    for point in points:
        point.estimates = {k: estimate(point.samples.get(k, [])) for k in keys}
        means = {k: e.mean for k, e in point.estimates.items()}
        point.feasible = all(c.satisfied(means) for c in constraints)
        if default is not None and point is not default:
            point.versus_default = {
                m.name: compare(point, default, m, min_effect, to_default, pools[m.key])
                for m in objectives
            }
    for a in points:
        a.dominated_by = [
            b.label
            for b in points
            if b is not a and _shown_better(b, a, objectives, min_effect, pairwise, pools)
        ]


def pool_of(points: Sequence[Point], key: str) -> Pool | None:
    """The points' pooled error term on `key`; None unless every point was measured in
    blocks."""
    if not all(p.blocks.get(key) for p in points):
        return None
    return pool([_by_block(p, key) for p in points])


def _by_block(point: Point, key: str) -> dict[int, float]:
    return dict(zip(point.blocks[key], point.samples[key], strict=True))


def compare(
    a: Point, b: Point, m: Metric, min_effect: float, confidence: float, pooled: Pool | None = None
) -> Versus:
    """Point a against point b on m: with the points' `pooled` error term, on the blocks
    they all measured; else paired by block when both were measured in blocks, else
    unpaired."""
    if pooled is not None:
        return pooled_versus(
            _by_block(a, m.key), _by_block(b, m.key), pooled, m.lower_is_better, min_effect,
            confidence,
        )  # fmt: skip
    a_blocks, b_blocks = a.blocks.get(m.key), b.blocks.get(m.key)
    return versus(
        a.samples.get(m.key, []),
        b.samples.get(m.key, []),
        m.lower_is_better,
        min_effect,
        confidence,
        (a_blocks, b_blocks) if a_blocks and b_blocks else None,
    )


def _shown_better(
    b: Point,
    a: Point,
    objectives: Sequence[Metric],
    min_effect: float,
    confidence: float,
    pools: Mapping[str, Pool | None],
) -> bool:
    """b dominates a as the intervals show it: a finding better on one objective, and on
    every other better or shown the same (within min_effect)."""
    verdicts = [compare(b, a, m, min_effect, confidence, pools.get(m.key)) for m in objectives]
    return any(v.better for v in verdicts) and all(v.better or v.same for v in verdicts)


def choose(
    points: Sequence[Point],
    objectives: Sequence[Metric],
    max_cpu: float | None = None,
    memory_at_any_cost: bool = False,
) -> dict[str, Point | None]:
    """Per priority (memory, speed: the first objective of each), among the feasible
    front points that beat the default there as a finding, the one analysis/choice.py's
    rule picks: within the noise of the best on the priority, the cheapest on the other
    priority's first objective. `max_cpu` bounds the time objective's ratio to the
    default; `memory_at_any_cost` takes the lowest RSS whatever it costs. None: no point
    beats the default there (or none keeps the bound)."""
    out: dict[str, Point | None] = {}
    for m in objectives:
        priority = m.priority or m.name
        if priority in out:
            continue
        winners = [
            p
            for p in points
            if not p.default
            and p.on_front
            and p.feasible
            and (v := p.versus_default.get(m.name)) is not None
            and v.better
        ]
        cost = next((o for o in objectives if (o.priority or o.name) != priority), None)
        options = [
            choice.Option(_oriented(p, m), _oriented(p, cost) if cost else choice.Interval(1, 1, 1))
            for p in winners
        ]
        bound = max_cpu if cost is not None and cost.name == "time" else None
        at_any_cost = memory_at_any_cost and priority == "memory"
        index = choice.noise_aware_pick(options, bound, at_any_cost)
        out[priority] = None if index is None else winners[index]
    return out


def _oriented(point: Point, m: Metric) -> choice.Interval:
    """The point's ratio to the default on m, turned so that lower is better."""
    v = point.versus_default[m.name]
    ratio = choice.Interval(v.ratio, v.low, v.high)
    return ratio if m.lower_is_better else ratio.inverse()
