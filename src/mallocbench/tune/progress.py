"""The search's progress: a bar per allocator with its trial count and current front.

On a terminal the bar redraws in place; in a pipe or a log each finished trial is one
plain line instead, since cursor codes are noise there.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from mallocbench.console import LiveBar
from mallocbench.tune import search
from mallocbench.tune.front import observed_front
from mallocbench.tune.objectives import Constraint, Metric
from mallocbench.tune.space import Dimension
from mallocbench.units import quantity


class SearchProgress(LiveBar):
    def __init__(
        self,
        console: Console,
        objectives: Sequence[Metric],
        constraints: Sequence[Constraint],
        spaces: dict[str, list[Dimension]],
        trials: int | None,
        cut_short: str = "--resume measures it again",
    ) -> None:
        """`cut_short`: what becomes of a trial a stop cut short (advise has no resume)."""
        self.cut_short = cut_short
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

    def front_text(self, name: str, study: Any) -> str:
        """The front's size and its end on each objective, each end one setting with all
        its values: the lowest RSS beside the CPU that same setting took."""
        observed = search.observed(study, self.spaces[name], self.constraints)
        front = observed_front(observed, self.objectives)
        if not front:
            return "no feasible point yet"
        ends: dict[int, list[str]] = {}  # by trial: the objectives it is best on
        for m in self.objectives:
            end = (min if m.lower_is_better else max)(front, key=_on(m.key))
            ends.setdefault(end.number, []).append(m.name)
        by_number = {t.number: t for t in front}
        texts = [
            f"best {', '.join(names)} #{number} ("
            + ", ".join(f"{o.name} {quantity(by_number[number].metrics[o.key], o.unit)}"
                        for o in self.objectives)
            + ")"
            for number, names in ends.items()
        ]  # fmt: skip
        return f"front {len(front)} points; " + "; ".join(texts)

    def __call__(self, name: str, study: Any, trial: Any) -> None:
        finished = len(search.finished_trials(study))
        text = f"{name}: {self.front_text(name, study)}"
        if not self.live and trial.user_attrs.get(search.INTERRUPTED_ATTR):
            self.console.print(
                f"{name} trial {finished + 1} cut short by the stop: {self.cut_short}",
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


def _on(key: str) -> Callable[[search.Observed], float]:
    return lambda t: t.metrics[key]
