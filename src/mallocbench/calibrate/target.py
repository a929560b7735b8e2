"""The one cell a calibration measures: a setup on an engine, a step at a thread count."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mallocbench.errors import MallocbenchError
from mallocbench.run.experiment import Experiment, Setup
from mallocbench.servers.engines import Engine
from mallocbench.workloads.catalogue import Step


@dataclass(frozen=True)
class Target:
    """The one cell calibrated: a setup on an engine, a step at a thread count."""

    setup: Setup
    engine: Engine
    step: Step
    threads: int

    def describe(self) -> str:
        return f"{self.setup.name} on {self.engine.name}, {self.step.label} at {self.threads}t"


def _pick(choices: list[Any], wanted: str | None, name: Callable[[Any], str], what: str) -> Any:
    if wanted is None:
        return choices[0]
    for choice in choices:
        if name(choice) == wanted:
            return choice
    known = ", ".join(name(c) for c in choices)
    raise MallocbenchError(f"no {what} {wanted!r} in the experiment: use one of {known}")


def pick_target(
    experiment: Experiment,
    setup: str | None,
    engine: str | None,
    step: str | None,
    threads: int | None,
) -> Target:
    """The experiment's base setup, first engine, step and thread count, unless named."""
    chosen_setup = _pick(experiment.setups, setup or experiment.base, lambda s: s.name, "setup")
    chosen_engine = _pick(experiment.engines, engine, lambda e: e.name, "engine")
    # A step by its label ("point-query range=100") or by its name (the first with it).
    by_label = step is None or any(s.label == step for s in experiment.steps)
    chosen_step = _pick(
        experiment.steps, step, (lambda s: s.label) if by_label else (lambda s: s.name), "step"
    )
    if chosen_step.definition.until_done:
        raise MallocbenchError(
            f"step {chosen_step.label} does a fixed amount of work and has no steady "
            "throughput to calibrate: choose another with --step"
        )
    wanted_threads = None if threads is None else str(threads)
    chosen_threads = _pick(
        [str(t) for t in experiment.threads], wanted_threads, str, "thread count"
    )
    return Target(chosen_setup, chosen_engine, chosen_step, int(chosen_threads))


__all__ = ["Target", "pick_target"]
