"""An evaluator turns one setting of one allocator into measured numbers.

The search and the repeats only see this interface, so a synthetic evaluator with a
known front can stand in for the replayer (the tests do), and a server evaluator can be
added beside the replay one.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from mallocbench.allocators import knobs
from mallocbench.allocators.base import Allocator
from mallocbench.errors import MallocbenchError

if TYPE_CHECKING:
    from mallocbench.model.results import Cell, RunResult
    from mallocbench.run.experiment import Experiment, Setup


class EvaluationFailed(Exception):
    """The setting ran but gave no numbers (a crash, a timeout): a failed trial, and
    the search goes on."""


class Evaluator(Protocol):
    def __call__(self, allocator: Allocator, setting: Mapping[str, str]) -> dict[str, float]:
        """The measured values by its metrics' keys (objectives.METRICS for a replay:
        peak_heap_rss, cpu_s, ...; SERVER_METRICS on servers)."""
        ...


# Of a trial's share of the search budget, the part its replay may last at recorded
# timing; the rest is the replayer's start (reading and indexing the portion: about a
# CPU second per 10 s of a 200,000 calls/s trace) and Optuna's bookkeeping.
REPLAY_SHARE = 0.7
# The steady peak ("rss") is over a replay's second half: from 6 s on at least, past the
# start's transient (6 s in the trace that showed it), so a portion is at least 12 s.
MIN_PORTION_S = 12.0


def auto_portion(trial_s: float, timing: str, speed: float, duration_s: float) -> float | None:
    """The portion (first seconds of the trace) a trial can replay in `trial_s` of wall
    time; None: the whole trace fits, or its length is not a matter of timing."""
    if timing != "recorded" or duration_s <= 0:
        return None
    portion = max(MIN_PORTION_S, trial_s * REPLAY_SHARE * speed)
    return None if portion >= duration_s else round(portion, 1)


class ReplayEvaluator:
    """Replays the trace once under the allocator with the setting's environment; with
    `portion_s`, only the trace's first that many seconds (its recorded start included),
    so a long trace costs seconds per trial. The search and the front's repeats replay
    the same portion, so every interval compares like with like."""

    def __init__(
        self,
        trace: Path,
        timing: str,
        speed: float,
        duration_s: float,
        portion_s: float | None = None,
    ) -> None:
        from mallocbench.replay.runner import TIMINGS, replay_timeout

        if timing not in TIMINGS:
            raise MallocbenchError(f"--timing must be one of {', '.join(TIMINGS)}")
        self.trace = trace
        self.timing = timing
        self.speed = speed
        self.duration_s = duration_s
        whole = portion_s is None or (duration_s > 0 and portion_s >= duration_s)
        self.portion_s = None if whole else portion_s
        length = duration_s if self.portion_s is None else self.portion_s
        self.timeout = replay_timeout(length, speed, timing)  # as `replay` allows

    def facts(self) -> dict[str, Any]:
        """The same, for scripts (tune.json's "evaluation")."""
        return {
            "method": "replay",
            "timing": self.timing,
            "speed": self.speed,
            "trace_s": self.duration_s,
            "portion_s": self.portion_s,
        }

    def describe(self) -> str:
        """How every setting is measured, for the study (a resume must match) and the
        output: which part of the trace, at which timing and speed."""
        if self.portion_s is None:
            part = f"the whole trace ({self.duration_s:.0f} s)"
        else:
            part = f"the first {self.portion_s:g} s of the trace's {self.duration_s:.0f} s"
        faster = self.timing == "recorded" and self.speed != 1
        pace = f"timing {self.timing}" + (
            f", {self.speed:g}x speed (time-based knobs passed at 1/{self.speed:g} of their "
            "value, the trace's time)"
            if faster
            else ""
        )
        # Said here, so a study searched on the whole peak refuses a --resume that would
        # mix the two in one front.
        return f"replay of {part}, {pace}; rss is the peak over each replay's second half"

    def environment(self, allocator: Allocator, setting: Mapping[str, str]) -> dict[str, str]:
        """The setting's environment in the trace's time: the replay (runner.run_once)
        passes its time-based knobs at 1/speed, as every replay does."""
        return knobs.environment(allocator, setting)

    def __call__(self, allocator: Allocator, setting: Mapping[str, str]) -> dict[str, float]:
        from mallocbench.patterns.experiment import PatternSetup
        from mallocbench.replay import runner

        setup = PatternSetup("tune", allocator, self.environment(allocator, setting))
        run = runner.run_once(
            setup, self.trace, self.timing, self.speed, 0, self.timeout, until=self.portion_s
        )
        if run.status != "ok":
            raise EvaluationFailed(run.error or run.status)
        return {
            key: float(value)
            for key, value in run.data.items()
            if isinstance(value, int | float)
            and not isinstance(value, bool)
            and math.isfinite(float(value))
        }


class _StatusOnly:
    """A run's progress reduced to the dataset's loading: the tune's bar counts trials,
    a server start per trial would only be noise, but the first load takes a while."""

    def __init__(self, say: Callable[[str], None] | None) -> None:
        self.say = say

    def start(self, total_cells: int, skipped: int) -> None:
        pass

    def status(self, text: str) -> None:
        if self.say is not None and text.startswith("loading dataset"):
            self.say(text)

    def cell_started(self, cell: Any, phase: str) -> None:
        pass

    def interval(self, cell: Any, interval: Any, rss_bytes: int | None) -> None:
        pass

    def cell_finished(self, cell: Any) -> None:
        pass

    def round_started(self, repeat: int, cells: int, reason: str) -> None:
        pass


SERVER_RUNS_DIR = "servers"  # under --out: the store and logs of every trial's run


class ServerEvaluator:
    """Measures a setting by a short run of the experiment on a private server: the
    experiment's one engine, step and thread count on its dataset, under the allocator
    with the setting's environment, one server start per evaluation. Each trial is a
    run of its own, and the front's repeats one run in blocks (`measure_blocks`),
    through the same pipeline as `mallocbench run` (golden datadir copy, server start,
    allocator check, warmup, sysbench, probes), kept in OUT/servers/results.sqlite; the
    dataset is loaded once, into the golden datadir cache every later start copies.
    The base setup gives the server (config, CPUs, THP, caps); the tune gives its
    allocator and knobs."""

    def __init__(
        self, experiment: Experiment, out: Path, say: Callable[[str], None] | None = None
    ) -> None:
        from mallocbench.tune.workload import from_experiment

        self.where = experiment.source or experiment.name
        self.workload = from_experiment(experiment, self.where)
        template = experiment.setup(experiment.base)
        if template.knobs:
            raise MallocbenchError(
                f"{self.where}: the base setup {template.name} sets knobs "
                f"({', '.join(template.knobs)}): the tune sets each allocator's knobs "
                "itself, so remove them there"
            )
        self.experiment = experiment
        self.template = template
        self.runs_dir = out / SERVER_RUNS_DIR
        self.say = say

    def facts(self) -> dict[str, Any]:
        return {
            "method": "servers",
            "experiment": self.where,
            "setup": self.template.name,
            **self.workload.to_dict(),
            "store": str(self.runs_dir / "results.sqlite"),
        }

    def describe(self) -> str:
        w = self.workload
        warm = f"warmup {w.warmup_s:g} s" if w.warmup_s > 0 else "no warmup"
        together = "one at a time" if self.experiment.design == "sequential" else "up at once"
        return (
            f"run on a private server ({w.describe()}; {warm}, {w.step_s:g} s measured; "
            f"the server of setup {self.template.name}), one server start per setting, the "
            f"front's repeats in blocks of its settings' servers {together}"
        )

    def check(self) -> None:
        """What a run refuses before it starts a server (no server in the basedir, an
        unwritable --out), refused here before the first trial."""
        from mallocbench.run.options import RunOptions
        from mallocbench.run.source import dry_run_checks

        dry_run_checks(self.experiment, RunOptions(out_dir=self.runs_dir), on_cluster=False)

    def _setup(
        self, allocator: Allocator, setting: Mapping[str, str], name: str
    ) -> tuple[Setup, dict[str, str]]:
        """The base setup's server under the allocator with the setting's environment."""
        import dataclasses

        env = knobs.environment(allocator, setting)
        setup = dataclasses.replace(
            self.template,
            name=name,
            allocator=allocator,
            allocator_spec=allocator.name,
            knobs=env,
            record=False,
            description=" ".join(f"{k}={v}" for k, v in setting.items()) or "default",
        )
        return setup, env

    def _experiment(self, name: str, setups: list[Setup], repeats: int, design: str) -> Experiment:
        import dataclasses

        what = "; ".join(f"{s.name}: {s.allocator.name} {json.dumps(s.knobs)}" for s in setups)
        text = (
            f"{self.experiment.text.rstrip()}\n\n# mallocbench tune: these setups in place of "
            f"the file's, {repeats} repeat(s), design {design}: {what}\n"
        )
        return dataclasses.replace(
            self.experiment,
            name=name,
            text=text,
            setups=setups,
            base=setups[0].name,
            repeats=repeats,
            design=design,
            design_why=None,
        )

    def trial_experiment(self, allocator: Allocator, setting: Mapping[str, str]) -> Experiment:
        """The experiment of one evaluation: one setup, one repeat, one server."""
        from mallocbench.run.experiment import SEQUENTIAL

        name = f"tune-{allocator.name}"
        setup, _ = self._setup(allocator, setting, name)
        return self._experiment(name, [setup], 1, SEQUENTIAL)

    def _execute(self, experiment: Experiment) -> RunResult:
        from mallocbench.executors.real import RealExecutor
        from mallocbench.run.options import RunOptions
        from mallocbench.run.runner import Pipeline

        pipeline = Pipeline(
            experiment,
            RunOptions(out_dir=self.runs_dir),
            _StatusOnly(self.say),
            executor=RealExecutor(),
        )
        outcome = pipeline.execute()
        if outcome.aborted == "interrupted":
            raise KeyboardInterrupt
        if outcome.aborted and not outcome.result.cells:
            raise EvaluationFailed(outcome.aborted)
        return outcome.result

    def __call__(self, allocator: Allocator, setting: Mapping[str, str]) -> dict[str, float]:
        result = self._execute(self.trial_experiment(allocator, setting))
        if not result.cells:
            raise EvaluationFailed("no cell was measured")
        values = _values(result, result.cells[0])
        if values is None:
            cell = result.cells[0]
            raise EvaluationFailed(f"{cell.status}: {cell.error or 'no numbers'}")
        return values

    def measure_blocks(
        self, allocator: Allocator, settings: Sequence[Mapping[str, str]], repeats: int
    ) -> list[list[dict[str, float] | None]]:
        """The front's repeats as one run of the run's blocked design: every setting's
        server up at once in each of `repeats` blocks, their measured slices alternating
        (unless there is one setting, the experiment asks for one server at a time, or
        memory is short), so the host's drift reaches them alike. Per block, each
        setting's values (None: not measured)."""
        from mallocbench.run.experiment import INTERLEAVED, SEQUENTIAL

        # A default alone has no partner to alternate with; its run says sequential.
        alone = len(settings) < 2
        design = SEQUENTIAL if self.experiment.design == SEQUENTIAL or alone else INTERLEAVED
        setups = [
            self._setup(allocator, setting, f"tune-{allocator.name}-{index}")[0]
            for index, setting in enumerate(settings)
        ]
        result = self._execute(
            self._experiment(f"tune-{allocator.name}-front", setups, repeats, design)
        )
        names = [s.name for s in setups]
        out: list[list[dict[str, float] | None]] = [[None] * len(setups) for _ in range(repeats)]
        for cell in result.cells:
            if cell.setup in names and 0 <= cell.repeat < repeats:
                out[cell.repeat][names.index(cell.setup)] = _values(result, cell)
        return out


def _values(result: RunResult, cell: Cell) -> dict[str, float] | None:
    """A measured cell's values by SERVER_METRICS' keys; None for a failed one."""
    if cell.status != "ok":
        return None
    # the session's peak: the server's whole life, its warmup included
    peaks = [s.peak_rss_bytes for s in result.sessions if s.id == cell.session and s.peak_rss_bytes]
    values = {
        "peak_rss_bytes": max(peaks) if peaks else cell.peak_rss_bytes,
        "server_cpu_us_per_op": cell.metrics.get("server_cpu_us_per_op"),
        "qps": cell.qps,
        "p99_ms": cell.p99_ms,
    }
    return {
        k: float(v) for k, v in values.items() if isinstance(v, int | float) and math.isfinite(v)
    }
