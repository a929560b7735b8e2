"""The search: one Optuna study per allocator, kept in OUT/tune.db (SQLite).

Each trial is written to the database the moment it is told, so Ctrl-C loses only the
trial that was running, and `--resume` continues the same studies. The default setting
(no knobs) is always the first trial: every other point is judged against it. Optuna's
multi-objective TPE sampler with constraints does the searching; the objective is one
replay, and what it measured is kept on the trial (user attribute "metrics"), so the
constraints and the report read back exactly what was measured.
"""

from __future__ import annotations

import contextlib
import math
import sqlite3
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mallocbench.allocators.base import Allocator
from mallocbench.errors import EnvironmentLost, MallocbenchError
from mallocbench.files import is_disk_fault
from mallocbench.tune.evaluate import EvaluationFailed, Evaluator
from mallocbench.tune.objectives import Constraint, Metric
from mallocbench.tune.space import Dimension, setting_of, signature

if TYPE_CHECKING:
    import optuna

DB_NAME = "tune.db"
DEFAULT_ATTR = "default"
# Set on a trial a stop (Ctrl-C, SIGTERM) cut short: no measurement, so no count.
INTERRUPTED_ATTR = "interrupted"


def storage_url(out: Path) -> str:
    return f"sqlite:///{(out / DB_NAME).absolute()}"


def study_name(allocator: str) -> str:
    return f"tune-{allocator}"


def _optuna() -> Any:
    # Imported here: Optuna (and SQLAlchemy under it) costs a second that --help and the
    # other commands must not pay.
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    return optuna


# How the replayer measures, where a change moves every trial's figures: a study searched
# by an older replayer is not resumed by this one (its trials and the new ones would not
# compare). Studies from before this key was kept wrote every byte of each new block.
REPLAYER = "one write in each page of a new block"
REPLAYER_BEFORE = "every byte of each new block written"


@dataclass(frozen=True)
class Settings:
    """What makes two invocations the same study: a resume must repeat them."""

    trace: str
    evaluator: str
    objectives: tuple[str, ...]
    constraints: tuple[str, ...]
    space: tuple[str, ...]
    replayer: str | None = None  # REPLAYER for a study measured by replays; None on servers

    def attrs(self) -> dict[str, Any]:
        measured = {} if self.replayer is None else {"replayer": self.replayer}
        return {
            "trace": self.trace,
            "evaluator": self.evaluator,
            "objectives": list(self.objectives),
            "constraints": list(self.constraints),
            "space": list(self.space),
            **measured,
        }


def settings_for(
    trace: str,
    evaluator: str,
    objectives: Sequence[Metric],
    constraints: Sequence[Constraint],
    space: Sequence[Dimension],
    replayed: bool = False,
) -> Settings:
    """`replayed`: the settings are measured by replays (the replayer is part of them)."""
    return Settings(
        trace,
        evaluator,
        tuple(m.name for m in objectives),
        tuple(c.text for c in constraints),
        tuple(signature(space)),
        REPLAYER if replayed else None,
    )


def _pragmas(connection: Any, _record: Any) -> None:
    # WAL with synchronous=NORMAL: a trial told is safe from Ctrl-C and crashes of this
    # process (only a power cut may lose the last few), at a fraction of the fsyncs of
    # SQLite's default, which cost more than a synthetic trial on a busy disk.
    cursor = connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


def open_storage(out: Path) -> Any:
    optuna = _optuna()
    from sqlalchemy import event

    storage = optuna.storages.RDBStorage(
        storage_url(out), engine_kwargs={"connect_args": {"timeout": 60}}
    )
    event.listen(storage.engine, "connect", _pragmas)
    storage.engine.dispose()  # connections made before the listener get no pragmas
    return storage


def _sqlite_error(exc: BaseException) -> sqlite3.Error | None:
    """The sqlite3 error under Optuna's and SQLAlchemy's wrappers, which say what
    happened only in it."""
    seen: BaseException | None = exc
    while seen is not None and not isinstance(seen, sqlite3.Error):
        seen = getattr(seen, "orig", None) or seen.__cause__ or seen.__context__
    return seen


def studies_fault(db: Path, exc: BaseException) -> MallocbenchError:
    """One line for tune.db refused by SQLite: damaged (exit 2 with the results store's
    line: the same fault), its disk full or failing, or unusable (read-only, held by
    another program): exit 3, as for the results store's disk, the trials told before
    are in the file."""
    from mallocbench.store.base import damaged_store
    from mallocbench.store.sqlite import DAMAGED, FULL, IO_ERROR, NOT_SQLITE, fault_kind

    cause = _sqlite_error(exc)
    detail = str(cause or exc).splitlines()[0]
    kind = fault_kind(cause) if cause is not None else None
    if kind in (DAMAGED, NOT_SQLITE):
        return MallocbenchError(
            damaged_store(
                str(db),
                detail,
                "the tune's trial store",
                " and --resume, or move it aside to start the tune again",
                "the sqlite3 shell's .recover",
            )
        )
    if kind in (FULL, IO_ERROR):
        what = "no space left for" if kind == FULL else "I/O error on"
        return EnvironmentLost(
            f"{what} the tune's studies {db} ({detail}): free space on (or check) its "
            "disk, then run the same command again (with --resume once a trial is kept); "
            "every finished trial is kept"
        )
    return EnvironmentLost(
        f"cannot use the tune's studies {db} ({detail}): make the file and its directory "
        "writable (and not held by another program), or give another --out"
    )


@contextlib.contextmanager
def guarded(out: Path) -> Iterator[None]:
    """tune.db's SQLite errors (through Optuna's storage) and a full or failing disk
    under --out as one line each, never a traceback."""
    db = out / DB_NAME
    try:
        yield
    except MallocbenchError:
        raise  # already one line (the servers' results store has its own guard)
    except OSError as exc:
        if not is_disk_fault(exc):
            raise
        where = f" ({exc.filename})" if exc.filename else ""
        raise EnvironmentLost(
            f"cannot write into {out}: {exc.strerror}{where}: free space on its disk, then "
            f"run the same command with --resume; every finished trial is kept in {db}"
        ) from exc
    except Exception as exc:
        # Imported only now: SQLAlchemy costs a second that a tune refused early must not.
        from sqlalchemy.exc import SQLAlchemyError

        internal = _optuna().exceptions.StorageInternalError
        if not isinstance(exc, SQLAlchemyError | internal):
            raise
        raise studies_fault(db, exc) from exc


def existing_studies(out: Path) -> list[str]:
    if not (out / DB_NAME).is_file():
        return []
    optuna = _optuna()
    summaries = optuna.study.get_all_study_summaries(open_storage(out))
    return [s.study_name for s in summaries]


def _same_setting(key: str, stored: Any, value: Any) -> bool:
    if key == "trace":
        # One file however it was named: studies keep it absolute, and a study begun
        # before they did holds the path as typed, resolved here from where we are.
        return bool(Path(stored).resolve() == Path(value).resolve())
    return bool(stored == value)


def _check_resumed(study: optuna.Study, settings: Settings, out: Path) -> None:
    stored = study.user_attrs
    was = stored.get("replayer", REPLAYER_BEFORE)
    if settings.replayer is not None and was != settings.replayer:
        raise MallocbenchError(
            f"{out / DB_NAME} searched {study.study_name} with an older replayer ({was}), "
            "whose figures this one's would not compare with: give another --out"
        )
    for key, value in settings.attrs().items():
        if key in stored and not _same_setting(key, stored[key], value):
            raise MallocbenchError(
                f"{out / DB_NAME} searched {study.study_name} with {key} {stored[key]!r}, "
                f"not {value!r}: give the same options to --resume, or another --out"
            )


def open_study(
    out: Path,
    allocator: str,
    objectives: Sequence[Metric],
    constraints: Sequence[Constraint],
    settings: Settings,
    seed: int | None = None,
) -> optuna.Study:
    """The allocator's study: created with the default setting enqueued, or loaded (a
    resume) after checking it was searched with the same settings."""
    optuna = _optuna()
    name = study_name(allocator)
    legacy = constraints and not hasattr(optuna.trial.Trial, "set_constraint")
    sampler = optuna.samplers.TPESampler(
        seed=seed,
        # Optuna 5 reads the constraints the trial carries (run_trial sets them); 4.x
        # asks this function instead.
        constraints_func=(lambda t: constraint_values(t, constraints)) if legacy else None,
    )
    known = name in existing_studies(out)
    study = optuna.create_study(
        storage=open_storage(out),
        study_name=name,
        directions=[m.direction for m in objectives],
        sampler=sampler,
        load_if_exists=True,
    )
    if known:
        _check_resumed(study, settings, out)
        return study
    for key, value in settings.attrs().items():
        study.set_user_attr(key, value)
    study.enqueue_trial({}, user_attrs={DEFAULT_ATTR: True})
    return study


def constraint_values(
    trial: optuna.trial.FrozenTrial, constraints: Sequence[Constraint]
) -> list[float]:
    metrics = trial.user_attrs.get("metrics") or {}
    return [c.violation(metrics) for c in constraints]


@dataclass
class Stop:
    """When to stop a study: a number of finished trials, a wall-clock deadline, or both."""

    trials: int | None
    deadline: float | None  # time.monotonic()
    requested: Callable[[], bool] | None = None  # a stop asked for (Ctrl-C, SIGTERM)

    def reached(self, finished: int) -> bool:
        if self.requested is not None and self.requested():
            return True
        if self.trials is not None and finished >= self.trials:
            return True
        return self.deadline is not None and time.monotonic() >= self.deadline


def finished_trials(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    """Measured or failed on their own; not those a stop cut short (--trials and the
    report count these)."""
    optuna = _optuna()
    states = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.FAIL)
    trials = study.get_trials(deepcopy=False, states=states)
    return [t for t in trials if not t.user_attrs.get(INTERRUPTED_ATTR)]


def _put_back(study: optuna.Study, trial: optuna.trial.Trial) -> optuna.trial.FrozenTrial:
    """A trial a stop cut short measured nothing: it is closed (no dangling trial) and
    marked, so no count takes it, and its point is queued again, so a resume measures
    it first: the default above all, which every other point is judged against."""
    optuna = _optuna()
    trial.set_user_attr(INTERRUPTED_ATTR, True)
    frozen = study.tell(trial, state=optuna.trial.TrialState.FAIL)
    attrs = {DEFAULT_ATTR: True} if trial.user_attrs.get(DEFAULT_ATTR) else {}
    study.enqueue_trial(dict(trial.params), user_attrs=attrs)
    return frozen


def run_trial(
    study: optuna.Study,
    allocator: Allocator,
    space: Sequence[Dimension],
    objectives: Sequence[Metric],
    evaluator: Evaluator,
    constraints: Sequence[Constraint] = (),
    stopping: Callable[[], bool] | None = None,
) -> optuna.trial.FrozenTrial:
    """Ask, evaluate, tell. A failed evaluation is a failed trial, unless a stop was
    asked for meanwhile (`stopping`): a Ctrl-C at a terminal reaches the replayer too,
    and what it cut short is put back for the resume, as is the trial any exception
    leaves (a second Ctrl-C), before it goes on up."""
    optuna = _optuna()
    trial = study.ask()
    try:
        default = bool(trial.user_attrs.get(DEFAULT_ATTR))
        setting = {} if default else {d.knob.name: d.suggest(trial) for d in space}
        trial.set_user_attr("setting", setting)
        values = evaluator(allocator, setting)
        missing = [m.key for m in objectives if not math.isfinite(values.get(m.key, math.nan))]
        if missing:
            raise EvaluationFailed(f"no {', '.join(missing)} measured")
    except EvaluationFailed as exc:
        trial.set_user_attr("error", str(exc))
        if stopping is not None and stopping():
            return _put_back(study, trial)
        return study.tell(trial, state=optuna.trial.TrialState.FAIL)
    except BaseException:
        _put_back(study, trial)
        raise
    trial.set_user_attr("metrics", values)
    if hasattr(trial, "set_constraint"):
        for c in constraints:
            trial.set_constraint(c.text, c.violation(values))
    return study.tell(trial, [values[m.key] for m in objectives])


def search(
    study: optuna.Study,
    allocator: Allocator,
    space: Sequence[Dimension],
    objectives: Sequence[Metric],
    evaluator: Evaluator,
    stop: Stop,
    progress: Callable[[optuna.Study, optuna.trial.FrozenTrial], None] | None = None,
    constraints: Sequence[Constraint] = (),
) -> int:
    """Trials until `stop`; returns how many this call ran."""
    ran = 0
    while not stop.reached(len(finished_trials(study))):
        frozen = run_trial(
            study, allocator, space, objectives, evaluator, constraints, stop.requested
        )
        ran += 1
        if progress is not None:
            progress(study, frozen)
    return ran


@dataclass
class Observed:
    """A finished, measured trial as the front needs it."""

    number: int
    default: bool
    setting: dict[str, str]
    metrics: dict[str, float]
    feasible: bool


def observed(
    study: optuna.Study, space: Sequence[Dimension], constraints: Sequence[Constraint]
) -> list[Observed]:
    optuna = _optuna()
    out = []
    for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)):
        metrics = dict(t.user_attrs.get("metrics") or {})
        setting = t.user_attrs.get("setting")
        out.append(
            Observed(
                number=t.number,
                default=bool(t.user_attrs.get(DEFAULT_ATTR)),
                setting=dict(setting) if setting is not None else setting_of(space, t.params),
                metrics=metrics,
                feasible=all(c.satisfied(metrics) for c in constraints),
            )
        )
    return out
