"""An evaluator turns one setting of one allocator into measured numbers.

The search and the repeats only see this interface, so a synthetic evaluator with a
known front can stand in for the replayer (the tests do), and a server evaluator can be
added beside the replay one.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

from mallocbench.allocators import knobs
from mallocbench.allocators.base import Allocator
from mallocbench.errors import MallocbenchError


class EvaluationFailed(Exception):
    """The setting ran but gave no numbers (a crash, a timeout): a failed trial, and
    the search goes on."""


class Evaluator(Protocol):
    def __call__(self, allocator: Allocator, setting: Mapping[str, str]) -> dict[str, float]:
        """The measured values by the replayer's keys (peak_heap_rss, cpu_s, ...)."""
        ...


class ReplayEvaluator:
    """Replays the trace once under the allocator with the setting's environment."""

    def __init__(self, trace: Path, timing: str, speed: float, duration_s: float) -> None:
        from mallocbench.replay.runner import TIMINGS

        if timing not in TIMINGS:
            raise MallocbenchError(f"--timing must be one of {', '.join(TIMINGS)}")
        self.trace = trace
        self.timing = timing
        self.speed = speed
        # as `replay` allows: five times the replay's own length, and a minute to start
        self.timeout = max(120.0, duration_s / speed * 5 + 60)

    def environment(self, allocator: Allocator, setting: Mapping[str, str]) -> dict[str, str]:
        return knobs.environment(allocator, setting)

    def __call__(self, allocator: Allocator, setting: Mapping[str, str]) -> dict[str, float]:
        from mallocbench.patterns.experiment import PatternSetup
        from mallocbench.replay import runner

        setup = PatternSetup("tune", allocator, self.environment(allocator, setting))
        run = runner.run_once(setup, self.trace, self.timing, self.speed, 0, self.timeout)
        if run.status != "ok":
            raise EvaluationFailed(run.error or run.status)
        return {
            key: float(value)
            for key, value in run.data.items()
            if isinstance(value, int | float)
            and not isinstance(value, bool)
            and math.isfinite(float(value))
        }
