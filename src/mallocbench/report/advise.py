"""advise's words: what was searched and replayed, recommend's own account of the
decision (report.recommend, the same sentences), and a last line with the answer, its
ratios with intervals and its saving in the server's terms.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mallocbench import units as fmt
from mallocbench.analysis import criteria
from mallocbench.analysis.choice import Interval
from mallocbench.model.results import json_safe
from mallocbench.report.recommend import (
    admitted_text,
    budget_commands,
    continue_command,
    name_of,
    names_of,
    recommendation_dict,
    recommendation_lines,
)
from mallocbench.report.replay import saving_text
from mallocbench.report.tune import remeasuring_text
from mallocbench.tune.confirm import KIND_WORDS, step_kind
from mallocbench.units import percent

if TYPE_CHECKING:
    from rich.console import Console

    from mallocbench.analysis.advise import Decision
    from mallocbench.analysis.replay import Saving
    from mallocbench.deploy.deployment import Deployment
    from mallocbench.tune.advise import AdviceRun, Finalist
    from mallocbench.tune.advise_confirm import Confirmation

MIB = float(1 << 20)


def setting_text(f: Finalist) -> str:
    """ "jemalloc-tuned-12 (narenas=1, dirty_decay_ms=881)", or the default's name."""
    if not f.setting:
        return f"{f.name} (its defaults)"
    return f"{f.name} ({', '.join(f'{k}={v}' for k, v in f.setting.items())})"


def _finalist(run: AdviceRun, name: str) -> Finalist | None:
    return next((f for f in run.finalists if f.name == name), None)


def _ratios(rss: Interval, cpu: Interval) -> str:
    return (
        f"steady peak RSS {rss.point:.2f}x {fmt.interval(rss.low, rss.high)}, "
        f"CPU {cpu.point:.2f}x {fmt.interval(cpu.low, cpu.high)}"
    )


def _why_change(run: AdviceRun, d: Decision) -> str:
    r = run.recommendation
    subject = r.engines[0].subject if r.engines else None
    better = names_of(
        r, [n for n in r.priorities if subject and subject.assessments[n].status == criteria.BETTER]
    )
    effect = percent(r.min_effect)
    if subject is not None and subject.admitted_by:  # a loss the user's budget took
        price = f"for {admitted_text(subject, r)}"
    else:
        price = f"and no worse than {effect} on the rest"
    return f"shown lower on {' and '.join(better)} by at least {effect}, {price}"


def _why_kept(run: AdviceRun, d: Decision) -> str:
    r = run.recommendation
    c = r.engines[0].subject if r.engines else None
    measured = ""
    if d.subject_rss is not None and d.subject_cpu is not None:
        saving = f"; it {saving_text(d.subject_saving)}" if d.subject_saving else ""
        measured = f" ({_ratios(d.subject_rss, d.subject_cpu)}{saving})"
    if d.kind == criteria.TRADE_OFF and c is not None:
        take = " or ".join(f"`{o}`" for o in budget_commands(c))
        return f"{d.subject} is a trade-off{measured}: take it with {take}"
    if d.kind == criteria.UNDECIDED and c is not None:
        held = " and ".join(name_of(h.criterion, h.replay) for h in c.holds)
        more = "; ".join(dict.fromkeys(continue_command(h, r, None) for h in c.holds))
        return f"{d.subject} is undecided{measured}, its {held} unclear: `{more}` may decide it"
    over = ""
    if run.max_cpu_excluded:
        over = f" ({', '.join(run.max_cpu_excluded)} over --max-cpu {run.plan.max_cpu:g})"
    if not r.engines:
        return f"no other finalist could be compared{over}"
    return (
        f"no setting is shown better on {' or '.join(names_of(r, r.priorities))} by at "
        f"least {percent(r.min_effect)} without a loss or an unclear result on the other{over}"
    )


def _kept_saving(d: Decision) -> str:
    s = d.saving
    if s is None:
        return ""
    of = "the server's" if s.of_server else "the replay's"
    return (
        f"; saves 0 MiB of {of} {s.of_bytes / MIB:,.0f} MiB {'RSS' if s.of_server else 'heap'} (0%)"
    )


def decision_line(run: AdviceRun) -> str:
    """The answer: deploy SETTING or keep the default, why, the ratios with their
    intervals, and what it saves of the server's RSS (or of the replayed heap)."""
    d = run.decision
    if d is None:
        return "keep the default: no finalist replayed without failing, so nothing was compared"
    if d.deploy:
        chosen = _finalist(run, d.setup)
        what = setting_text(chosen) if chosen else d.setup
        saving = f"; {saving_text(d.saving)}" if d.saving is not None else ""
        return (
            f"deploy {what}: {_why_change(run, d)}; {_ratios(d.rss, d.cpu)} against "
            f"{d.base}{saving}"
        )
    return (
        f"keep the default ({d.base}): {_why_kept(run, d)}; the default itself: "
        f"{_ratios(d.rss, d.cpu)}{_kept_saving(d)}"
    )


def _search_lines(run: AdviceRun) -> list[str]:
    lines = []
    for result in run.searched:
        picked = [f for f in run.finalists if f.allocator.name == result.allocator and f.setting]
        chosen = "; ".join(
            f"{setting_text(f)} for {' and '.join(f.picked_for)} first" for f in picked
        )
        lines.append(
            f"- {result.allocator}: {result.trials} settings searched; "
            + (f"picked {chosen}" if chosen else "none beats its default as a finding")
        )
    return lines


def note_lines(run: AdviceRun) -> list[str]:
    plan = run.plan
    notes = []
    if run.portion_s is not None:
        notes.append(
            f"every replay, the search's and the finalists', covers the trace's first "
            f"{run.portion_s:g} s of {plan.duration_s:.0f} s (what the budget allows)"
        )
    if run.elapsed_s > plan.budget_s * 1.05:
        one = plan.replay_s(run.portion_s)
        replays = run.repeat_replays
        why = (
            f": after the search, the fronts' and the finalists' repeats were {replays} "
            f"replays of {one:g} s, about {replays * one / 60:.0f} min; a larger --speed "
            "shortens every replay"
            if one
            else f": after the search, the fronts' and the finalists' repeats were {replays} "
            "replays"
        )
        notes.append(
            f"advise took {run.elapsed_s / 60:.1f} min against a budget of "
            f"{plan.budget_s / 60:.1f} min{why}"
        )
    for setup, cpu in run.max_cpu_excluded.items():
        notes.append(
            f"{setup} is left out: CPU {cpu:.2f}x the default's, over --max-cpu {plan.max_cpu:g}"
        )
    if run.server_rss is None:
        notes.append(
            "the trace holds no server RSS (recorded before `record --pid` kept it): the "
            "saving is in MiB of the replay's heap only"
        )
    notes.append(
        "the evidence is a replay of the trace, not the server: confirm on the server "
        "(or a private one) before relying on it"
    )
    return notes


def _workload_text(c: Confirmation) -> str:
    """What confirm.toml runs, in a sentence."""
    d = c.derived
    if d is None:
        why = c.problem or "the trace holds no description of the server's load"
        return (
            f"{c.path} runs a generic workload ({why}): set its engines, steps, threads and "
            "[dataset] to that load first"
        )
    planned = f"about {d.planned_s / 60:.0f} min" if d.planned_s is not None else "its time"
    return (
        f"{c.path} runs the recorded load as the server described it ({d.source}): "
        f"{d.describe()}; {planned} of the {d.budget_s / 60:g} min asked (--confirm-time)"
    )


def _settings(c: Confirmation) -> str:
    """The setting confirmed, with any other the replays left open beside it."""
    if not c.also:
        return c.setting
    return f"{c.setting} (and {', '.join(c.also)}, also left open by the replays)"


def confirmation_notes(c: Confirmation | None) -> list[str]:
    """The confirmation in two lines, for the terminal: the command, and what it runs."""
    if c is None:
        return []
    which = "either" if c.also else "it"
    first = (
        f"confirm {_settings(c)} on real private servers before deploying {which}: "
        f"mallocbench run {c.path} --out {c.out}"
    )
    second = _workload_text(c)
    if c.derived is not None:
        second += (
            f"; its {len(c.derived.steps)} steps' weights and "
            f"{len(c.derived.approximations)} approximations are in advise.md"
        )
    return [first, second]


def confirmation_section(c: Confirmation | None) -> list[str]:
    """The confirmation for advise.md: where confirm.toml is and how to run it, its steps
    with their weights (what each stands for) and every approximation it took."""
    if c is None:
        return []
    lines = [
        "## Confirmation on servers",
        "",
        f"`{c.path}` measures {_settings(c)} against {c.base} on real private servers: "
        f"`mallocbench run {c.path} --out {c.out}`. It "
        f"{_workload_text(c).removeprefix(f'{c.path} ')}.",
    ]
    d = c.derived
    if d is None:
        return lines
    lines += [
        "",
        "Its steps, each run for the same time; a step's weight is the share of the "
        "window's statements it stands for, so read its result with that weight:",
        "",
    ]
    for label, weight in d.steps:
        kind = step_kind(label)
        stands = f"the {KIND_WORDS[kind]}" if kind and weight else "a placeholder: none mapped"
        lines.append(f"- `{label}`: {weight:.2f} ({stands})")
    lines += ["", "Approximations:", "", *(f"- {a}" for a in d.approximations)]
    return lines


def advice_lines(run: AdviceRun, deployment: Deployment | None) -> list[str]:
    plan = run.plan
    lines = [
        f"advise {plan.trace}: {len(plan.tuned)} allocators searched and their finalists "
        f"replayed {plan.repeats} times each in {run.elapsed_s / 60:.1f} min "
        f"(budget {plan.budget_s / 60:.1f} min)",
        *_search_lines(run),
        "",
        *recommendation_lines(run.recommendation),
        "",
        *(f"note: {n}" for n in note_lines(run)),
    ]
    if deployment is not None:
        from mallocbench.deploy.forms import render

        lines += ["", render(deployment)]
    return [*lines, "", decision_line(run)]


def _interval_dict(i: Interval | None) -> dict[str, float] | None:
    return None if i is None else {"point": i.point, "low": i.low, "high": i.high}


def _mib_dict(s: Saving | None) -> dict[str, float] | None:
    return None if s is None else {"point": s.bytes / MIB, "low": s.low / MIB, "high": s.high / MIB}


def decision_dict(run: AdviceRun) -> dict[str, Any] | None:
    d = run.decision
    if d is None:
        return None
    chosen = _finalist(run, d.setup)
    out: dict[str, Any] = {
        "kind": d.kind,
        "answer": "deploy" if d.deploy else "keep",
        "setting": d.setup,
        "base": d.base,
        "allocator": chosen.allocator.name if chosen else None,
        "knobs": dict(chosen.setting) if chosen else {},
        "environment": chosen.setup().knobs if chosen else {},
        "rss_ratio": _interval_dict(d.rss),
        "cpu_ratio": _interval_dict(d.cpu),
        "subject": d.subject,
        "subject_rss_ratio": _interval_dict(d.subject_rss),
        "subject_cpu_ratio": _interval_dict(d.subject_cpu),
        "subject_saves_mib": _mib_dict(d.subject_saving),
        "line": decision_line(run),
    }
    s = d.saving
    if s is not None:
        out["saves_mib"] = _mib_dict(s)
        share = s.share
        pct = {"point": share.mean * 100, "low": share.low * 100, "high": share.high * 100}
        if s.of_server:
            out["server_rss_mib"] = s.of_bytes / MIB
            out["saves_pct_of_server_rss"] = pct
        else:
            out["replay_heap_mib"] = s.of_bytes / MIB
            out["saves_pct_of_replay_heap"] = pct
    return out


def advice_dict(
    run: AdviceRun, deployment: Deployment | None, confirmation: Confirmation | None = None
) -> dict[str, Any]:
    plan = run.plan
    return {
        "trace": str(plan.trace),
        "budget_s": plan.budget_s,
        "elapsed_s": run.elapsed_s,
        "repeats": plan.repeats,
        "min_effect": plan.min_effect,
        "max_cpu": plan.max_cpu,
        "memory_at_any_cost": plan.memory_at_any_cost,
        "evaluation": run.evaluation,
        "portion_s": run.portion_s,
        "server_rss_bytes": run.server_rss,
        "searched": [
            {
                k: v
                for k, v in r.to_dict().items()
                if k in ("allocator", "version", "trials", "failed_trials", "chosen", "points")
            }
            for r in run.searched
        ],
        "finalists": [
            {
                "name": f.name,
                "allocator": f.allocator.name,
                "knobs": dict(f.setting),
                "environment": f.setup().knobs,
                "picked_for": list(f.picked_for),
            }
            for f in run.finalists
        ],  # fmt: skip
        "replay_run": run.result.run_id,
        "recommendation": recommendation_dict(run.recommendation),
        "excluded_by_max_cpu": run.max_cpu_excluded,
        "decision": decision_dict(run),
        "deployment": deployment.to_dict() if deployment is not None else None,
        "confirmation": confirmation.to_dict() if confirmation is not None else None,
        "notes": note_lines(run),
        "out": str(plan.out),
    }


def advice_json(
    run: AdviceRun, deployment: Deployment | None, confirmation: Confirmation | None = None
) -> str:
    return json.dumps(json_safe(advice_dict(run, deployment, confirmation)), indent=1)


def advice_markdown(
    run: AdviceRun, deployment: Deployment | None, confirmation: Confirmation | None = None
) -> str:
    """The terminal's lines with the confirmation's section before the last line, the
    answer."""
    lines = advice_lines(run, deployment)
    section = confirmation_section(confirmation)
    if section:
        lines[-1:-1] = [*section, ""]
    return f"# mallocbench advise: {run.plan.trace.name}\n\n" + "\n".join(lines)


# --- what `advise` says while it works -----------------------------------------------------

# What the search's display says of a trial a signal cut short.
CUT_SHORT = "advise stops without a decision"
REMEASURING = "re-measuring each allocator's front"
FINALISTS = "replaying the finalists"


@dataclass(frozen=True)
class Overrun:
    """The allocators' repeats take longer than the budget leaves them, however short the
    search: said before it starts."""

    allocators: int
    replay_s: float | None
    least_s: float
    share_s: float
    budget_s: float


def print_overrun(o: Overrun, console: Console) -> None:
    console.print(
        f"note: {o.allocators} allocators' repeats at this trace's {o.replay_s:g} s replays "
        f"take about {o.least_s / 60:.0f} min however short the search, over the "
        f"{o.share_s / 60:.1f} min the {o.budget_s / 60:g} min budget leaves them: expect "
        "an overrun, or give a larger --budget or --speed, or fewer --allocators",
        markup=False, highlight=False, soft_wrap=True,
    )  # fmt: skip


def stopped_text(_: object) -> str:
    return (
        "mallocbench: advise stopped during the search: nothing decided (advise has no "
        "--resume: run it again with another --out, a smaller --budget if time is short)\n"
    )


def print_remeasuring(what: str, console: Console) -> None:
    """A log's line per replay of the front (a terminal has the spinner)."""
    console.print(remeasuring_text(what), markup=False, highlight=False)


@dataclass(frozen=True)
class Advised:
    """An advise's outcome as standard output shows it: the run and its deployment."""

    run: AdviceRun
    deployment: Deployment | None
    confirmation: Confirmation | None = None


def advised_text(a: Advised) -> str:
    return "\n".join(advice_lines(a.run, a.deployment)) + "\n"


def advised_json(a: Advised) -> str:
    return advice_json(a.run, a.deployment, a.confirmation) + "\n"
