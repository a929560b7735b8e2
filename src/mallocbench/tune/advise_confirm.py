"""advise's confirmation: OUT/confirm.toml for the setting it deploys (or could not
decide) against the default, on the recorded load when the trace describes it
(tune/confirm.py derives that load's experiment)."""

from __future__ import annotations

import json

from mallocbench.tune.advise import AdviceRun
from mallocbench.tune.confirm import DEFAULT_BUDGET_S, for_trace, workload_notes


def for_advice(run: AdviceRun, budget_s: float = DEFAULT_BUDGET_S) -> list[str]:
    """Write OUT/confirm.toml for advise's decision (the setting deployed, or the one the
    replays could not decide, against the default, on real private servers, on the
    recorded load when the trace describes it); what to say of it, one sentence each
    ([]: no setting to confirm)."""
    from mallocbench.tune.workload import generic_lines, setup_lines

    d = run.decision
    # A default kept for want of evidence names the setting servers may yet decide.
    other = d.setup if d is not None and d.deploy else d.subject if d is not None else None
    if d is None or other is None or other == d.base:
        return []
    by_name = {f.name: f for f in run.finalists}
    pair = [by_name[n] for n in (d.base, other) if n in by_name]
    derived, problem = for_trace(run.plan.trace, len(pair), budget_s)
    lines = [
        "# Written by `mallocbench advise`: the setting it deploys (or could not decide)",
        "# against the default, on real private servers; the second setup is that setting.",
        'name = "advise-confirm"',
        f"base = {json.dumps(d.base)}",
        f'min_effect = "{run.plan.min_effect * 100:g}%"',
        *(derived.lines() if derived is not None else generic_lines("innodb")),
    ]
    for f in pair:
        env = {k: v for k, v in f.setup().knobs.items() if k != "LD_PRELOAD"}
        lines += setup_lines(f.name, f.allocator.name, env, {})
    path = run.plan.out / "confirm.toml"
    text = "\n".join(lines) + "\n"
    path.write_text(text)
    notes = [
        f"confirm {other} on real private servers before deploying it: mallocbench run "
        f"{path} --out {run.plan.out / 'confirm'}"
    ]
    if derived is None:
        return [
            *notes,
            *([problem] if problem else []),
            f"{path} runs a generic workload (the trace holds no description of the "
            "server's load): set its engines, steps, threads and [dataset] to that load first",
        ]
    return notes + workload_notes(run.plan.trace, text, path, budget_s)
