"""advise's confirmation: OUT/confirm.toml for the setting it deploys (or could not
decide) against the default, on the recorded load when the trace describes it
(tune/confirm.py derives that load's experiment)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mallocbench.analysis import criteria
from mallocbench.tune.advise import AdviceRun, Finalist
from mallocbench.tune.confirm import DEFAULT_BUDGET_S, Derived, for_trace


@dataclass(frozen=True)
class Confirmation:
    """OUT/confirm.toml as advise wrote it: `setting` against `base` on private servers,
    on the recorded load (`derived`), or on a generic one (None; `problem`: why the load
    the trace describes gave none, None when it describes none)."""

    path: Path
    out: Path  # the run's --out in the command that runs it
    setting: str
    base: str
    budget_s: float
    derived: Derived | None = None
    problem: str | None = None
    # Another setting the replays left open (a trade-off or undecided), measured beside
    # `setting` on the same servers: the servers may decide what the replays could not.
    also: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": str(self.path),
            "command": ["mallocbench", "run", str(self.path), "--out", str(self.out)],
            "setting": self.setting,
            "also": list(self.also),
            "base": self.base,
            "confirm_time_s": self.budget_s,
            "recorded_load": self.derived is not None,
            "workload": self.derived.to_dict() if self.derived is not None else None,
            "problem": self.problem,
        }


def for_advice(run: AdviceRun, budget_s: float = DEFAULT_BUDGET_S) -> Confirmation | None:
    """Write OUT/confirm.toml for advise's decision (the setting deployed, or the one the
    replays could not decide, against the default, on real private servers, on the
    recorded load when the trace describes it); None: no setting to confirm."""
    from mallocbench.tune.workload import generic_lines, setup_lines

    d = run.decision
    # A default kept for want of evidence names the setting servers may yet decide.
    other = d.setup if d is not None and d.deploy else d.subject if d is not None else None
    if d is None or other is None or other == d.base:
        return None
    by_name = {f.name: f for f in run.finalists}
    also = () if d.deploy else _also_open(run, other, by_name)
    pair = [by_name[n] for n in (d.base, other, *also) if n in by_name]
    derived, problem = for_trace(run.plan.trace, len(pair), budget_s)
    lines = [
        "# Written by `mallocbench advise`: the setting it deploys (or could not decide)",
        "# against the default, on real private servers; the second setup is that setting,",
        "# a third another setting the replays left open.",
        'name = "advise-confirm"',
        f"base = {json.dumps(d.base)}",
        f'min_effect = "{run.plan.min_effect * 100:g}%"',
        *(derived.lines() if derived is not None else generic_lines("innodb")),
    ]
    for f in pair:
        env = {k: v for k, v in f.setup().knobs.items() if k != "LD_PRELOAD"}
        lines += setup_lines(f.name, f.allocator.name, env, {})
    path = run.plan.out / "confirm.toml"
    path.write_text("\n".join(lines) + "\n")
    return Confirmation(
        path, run.plan.out / "confirm", other, d.base, budget_s, derived, problem, also
    )


def _also_open(run: AdviceRun, subject: str, by_name: dict[str, Finalist]) -> tuple[str, ...]:
    """The next candidate the replays left open besides the one the default was kept
    for (another allocator's first, as it differs most), so one confirmation tries both:
    e.g. a tuned glibc priced as a trade-off and jemalloc whose CPU was unclear."""
    engines = run.recommendation.engines
    if not engines:
        return ()
    subject_allocator = by_name[subject].allocator.name if subject in by_name else None
    open_ = [
        c.setup
        for c in engines[0].ranked
        if c.outcome in (criteria.TRADE_OFF, criteria.UNDECIDED)
        and c.setup not in (subject, engines[0].base)
        and c.setup in by_name
    ]
    other_allocator = [n for n in open_ if by_name[n].allocator.name != subject_allocator]
    return tuple((other_allocator or open_)[:1])
