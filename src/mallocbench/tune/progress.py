"""The search's progress: a bar per allocator with its trial count and current front.

On a terminal the bar redraws in place; in a pipe or a log each finished trial is one
plain line instead, since cursor codes are noise there.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from mallocbench.tune import search
from mallocbench.tune.front import observed_front
from mallocbench.tune.objectives import Constraint, Metric
from mallocbench.tune.render import fmt
from mallocbench.tune.space import Dimension


class SearchProgress:
    def __init__(
        self,
        console: Console,
        objectives: Sequence[Metric],
        constraints: Sequence[Constraint],
        spaces: dict[str, list[Dimension]],
        trials: int | None,
    ) -> None:
        self.console = console
        self.objectives = objectives
        self.constraints = constraints
        self.spaces = spaces
        self.trials = trials
        self.live = console.is_terminal
        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
        )
        self.tasks: dict[str, Any] = {}

    def __enter__(self) -> SearchProgress:
        if self.live:
            self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.live:
            self.progress.stop()

    def front_text(self, name: str, study: Any) -> str:
        observed = search.observed(study, self.spaces[name], self.constraints)
        front = observed_front(observed, self.objectives)
        if not front:
            return "no feasible point yet"
        best = [
            f"{m.name} {fmt(m.unit, min(t.metrics[m.key] for t in front))}"
            if m.lower_is_better
            else f"{m.name} {fmt(m.unit, max(t.metrics[m.key] for t in front))}"
            for m in self.objectives
        ]
        return f"front {len(front)} points, best {', '.join(best)}"

    def __call__(self, name: str, study: Any, trial: Any) -> None:
        finished = len(search.finished_trials(study))
        text = f"{name}: {self.front_text(name, study)}"
        if not self.live and trial.user_attrs.get(search.INTERRUPTED_ATTR):
            self.console.print(
                f"{name} trial {finished + 1} cut short by the stop: --resume measures it again",
                markup=False,
            )
            return
        if not self.live:
            state = "failed" if trial.user_attrs.get("error") else "done"
            self.console.print(f"{name} trial {finished} {state}; {text}", markup=False)
            return
        if name not in self.tasks:
            self.tasks[name] = self.progress.add_task(text, total=self.trials)
        self.progress.update(self.tasks[name], completed=finished, description=text)
