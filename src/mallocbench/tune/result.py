"""What a tune found, as values: each re-measured point, each allocator's search and
choices, and the whole tune. report/tune.py renders every format from these; `to_dict`
is tune.json, the document scripts read."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from mallocbench.analysis.replay import Estimate
from mallocbench.analysis.tune import Versus
from mallocbench.model.results import json_safe


@dataclass
class Point:
    label: str  # "default" or "#<trial>"
    trial: int
    default: bool
    setting: dict[str, str]
    searched: dict[str, float]  # the search's one observation
    samples: dict[str, list[float]] = field(default_factory=dict)
    # The block each sample was measured in, by key, when the repeats ran in blocks (on
    # servers): two points are then compared block by block. Empty: independent repeats.
    blocks: dict[str, list[int]] = field(default_factory=dict)
    failed: int = 0
    estimates: dict[str, Estimate] = field(default_factory=dict)
    versus_default: dict[str, Versus] = field(default_factory=dict)
    dominated_by: list[str] = field(default_factory=list)
    feasible: bool = True

    @property
    def on_front(self) -> bool:
        return not self.dominated_by

    @property
    def beats_default(self) -> bool:
        return any(v.better for v in self.versus_default.values())

    def to_dict(self) -> dict[str, Any]:
        data = json_safe(asdict(self))
        data["on_front"] = self.on_front
        data["beats_default"] = self.beats_default
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Point:
        return cls(
            label=data["label"],
            trial=data["trial"],
            default=data["default"],
            setting=data["setting"],
            searched=data["searched"],
            samples=data.get("samples", {}),
            blocks={k: list(v) for k, v in data.get("blocks", {}).items()},
            failed=data.get("failed", 0),
            estimates={k: Estimate(*_floats(e, "mean", "low", "high"))
                       for k, e in data.get("estimates", {}).items()},
            versus_default={k: _versus(v) for k, v in data.get("versus_default", {}).items()},
            dominated_by=data.get("dominated_by", []),
            feasible=data.get("feasible", True),
        )  # fmt: skip


def _versus(data: dict[str, Any]) -> Versus:
    ratio, low, high = _floats(data, "ratio", "low", "high")
    return Versus(ratio, low, high, data["verdict"], data["better"], data["worse"])


def _floats(data: dict[str, Any], *keys: str) -> tuple[float, ...]:
    """The numbers json_safe wrote, nan where it wrote null (an interval not known)."""
    return tuple(math.nan if data.get(k) is None else float(data[k]) for k in keys)


@dataclass(frozen=True)
class Objective:
    """One objective (tune.objectives.Metric's facts); report/tune.py names it by its key."""

    name: str
    key: str
    unit: str
    direction: str


@dataclass(frozen=True)
class Searched:
    """One trial of the search: a setting observed once."""

    trial: int
    default: bool
    setting: dict[str, str]
    metrics: dict[str, float]
    feasible: bool


@dataclass(frozen=True)
class Deployed:
    """A chosen setting's environment and its text in every deploy form."""

    point: str
    environment: dict[str, str]
    systemd: str
    dropin: str
    forms: dict[str, str]


@dataclass
class AllocatorTune:
    """One allocator's search, its re-measured front and what was chosen per priority."""

    allocator: str
    version: str | None
    library: str | None
    space: list[str]  # each dimension as described
    trials: int
    failed_trials: int
    searched: list[Searched]
    points: list[Point]
    chosen: dict[str, str | None]  # priority -> point label; None: nothing beats the default
    beats_default: bool
    deploy: dict[str, Deployed]  # priority -> the chosen setting's deployment

    def point(self, label: str) -> Point:
        return next(p for p in self.points if p.label == label)

    def to_dict(self) -> dict[str, Any]:
        return {
            "allocator": self.allocator,
            "version": self.version,
            "library": self.library,
            "space": self.space,
            "trials": self.trials,
            "failed_trials": self.failed_trials,
            "searched": [asdict(s) for s in self.searched],
            "points": [p.to_dict() for p in self.points],
            "chosen": self.chosen,
            "beats_default": self.beats_default,
            "deploy": {k: asdict(d) for k, d in self.deploy.items()},
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> AllocatorTune:
        return cls(
            allocator=data["allocator"],
            version=data.get("version"),
            library=data.get("library"),
            space=data.get("space", []),
            trials=data["trials"],
            failed_trials=data.get("failed_trials", 0),
            searched=[Searched(**s) for s in data.get("searched", [])],
            points=[Point.from_dict(p) for p in data["points"]],
            chosen=data["chosen"],
            beats_default=data["beats_default"],
            deploy={k: Deployed(**d) for k, d in data.get("deploy", {}).items()},
        )


@dataclass(frozen=True)
class BudgetOverrun:
    """The tune took longer than its budget: re-measuring the front overran its share."""

    elapsed_s: float
    budget_s: float
    repeats_share: str  # the budget's share left for the repeats, as --help words it


@dataclass(frozen=True)
class ChoiceRule:
    """How "memory first" was chosen (a setting was): the options that bound it."""

    memory_at_any_cost: bool
    max_cpu: float | None


@dataclass(frozen=True)
class MeasuredBy:
    """What measured every setting, and whether the front's repeats ran on servers."""

    evaluator: str
    on_servers: bool


@dataclass(frozen=True)
class NothingToConfirm:
    """No setting beats the default on any allocator."""


@dataclass(frozen=True)
class Confirm:
    """The experiment written to confirm the choices, and what it runs: the tuned
    workload (its description and where it came from), the load the recording kept
    (`derived`: tune/confirm.py's lines on it), or a generic one."""

    path: str
    out: str
    workload: str | None = None
    source: str | None = None
    derived_notes: tuple[str, ...] = ()
    derived: bool = False


@dataclass(frozen=True)
class Said:
    """A note as a tune.json written before holds it: its words."""

    text: str


TuneNote = BudgetOverrun | ChoiceRule | MeasuredBy | NothingToConfirm | Confirm | Said


@dataclass
class TuneDocument:
    """A whole tune: what was asked, each allocator's result, and the notes."""

    trace: str
    evaluator: str
    evaluation: dict[str, Any]  # how a setting is measured
    workload: dict[str, Any] | None
    objectives: list[Objective]
    constraints: list[str]
    min_effect: float
    max_cpu: float | None
    memory_at_any_cost: bool
    deploy_form: str  # the form printed (launch.FORMS); the files hold them all
    deploy_form_why: str
    repeats: int
    out: str
    allocators: list[AllocatorTune]
    notes: list[TuneNote]

    def to_dict(self) -> dict[str, Any]:
        """tune.json but its notes (report.tune words them: tune_json)."""
        return {
            "trace": self.trace,
            "evaluator": self.evaluator,
            "evaluation": self.evaluation,
            "workload": self.workload,
            "objectives": [asdict(m) for m in self.objectives],
            "constraints": self.constraints,
            "min_effect": self.min_effect,
            "max_cpu": self.max_cpu,
            "memory_at_any_cost": self.memory_at_any_cost,
            "deploy_form": {"form": self.deploy_form, "why": self.deploy_form_why},
            "repeats": self.repeats,
            "out": self.out,
            "allocators": [r.to_dict() for r in self.allocators],
            "notes": [asdict(n) for n in self.notes],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TuneDocument:
        """A tune.json read back (the reports of a tune written before)."""
        form = data.get("deploy_form") or {}
        return cls(
            trace=data["trace"],
            evaluator=data["evaluator"],
            evaluation=data.get("evaluation", {}),
            workload=data.get("workload"),
            # The label a tune.json holds is the report's word for the key: worded again.
            objectives=[
                Objective(m["name"], m["key"], m["unit"], m["direction"])
                for m in data["objectives"]
            ],
            constraints=data.get("constraints", []),
            min_effect=data["min_effect"],
            max_cpu=data.get("max_cpu"),
            memory_at_any_cost=data.get("memory_at_any_cost", False),
            deploy_form=form.get("form") or "systemd",
            deploy_form_why=form.get("why") or "",
            repeats=data["repeats"],
            out=data.get("out", ""),
            allocators=[AllocatorTune.from_dict(r) for r in data["allocators"]],
            notes=[Said(n) for n in data.get("notes", [])],
        )
