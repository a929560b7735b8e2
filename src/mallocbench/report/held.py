"""The words of `check --against`: the watched server against its recorded window."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mallocbench.analysis.held import Against, Held, WindowRatio
from mallocbench.units import interval

if TYPE_CHECKING:
    from mallocbench.deploy.inforce import InForce

VERDICT = {
    Held.HELD: "held",
    Held.NOT_HELD: "did not hold",
    Held.UNDECIDED: "not shown either way (watch longer, or at a steadier hour)",
    Held.NO_INTERVAL: "not known (too few samples: watch longer)",
}


def _ratio(r: WindowRatio) -> str:
    text = f"{r.point:.2f}x of the recorded window"
    return text + (f" {interval(r.low, r.high)}" if r.known else " (no interval)")


def _range(low: float, high: float) -> str:
    return f"{low:.2f}x to {high:.2f}x"


def rss_line(a: Against, predicted_by: str) -> str:
    """'RSS 0.91x of the recorded window [0.88, 0.94]; advise predicted 0.90x: held'."""
    return f"RSS {_ratio(a.rss)}; {predicted_by} {a.predicted[0]:.2f}x: {VERDICT[a.rss_held]}"


def qps_line(a: Against) -> str | None:
    if a.qps is None or a.same_load is None:
        return None
    same = {
        Held.HELD: "the load was the recorded one's",
        Held.NOT_HELD: "the load was NOT the recorded one's: the RSS compares another load",
        Held.UNDECIDED: "the load may differ from the recorded one's",
        Held.NO_INTERVAL: "the load's likeness is not known",
    }[a.same_load]
    return f"QPS {_ratio(a.qps)}: {same} (within {a.tolerance:.0%})"


def lines(a: Against, predicted_by: str, notes: list[str]) -> list[str]:
    out = [f"watched {a.watched_s:.0f} s ({a.rss.watched} samples) against the recorded "
           f"window ({a.rss.recorded} samples)"]  # fmt: skip
    out.append(
        f"the prediction holds when the RSS ratio's interval lies within {_range(*a.within)} "
        f"(the prediction's interval, and at least {a.tolerance:.0%} either side)"
    )
    qps = qps_line(a)
    out += [*(f"note: {n}" for n in notes), *([qps] if qps else []), rss_line(a, predicted_by)]
    return out


def _num(x: float) -> float | None:
    return None if math.isnan(x) else x


def _ratio_dict(r: WindowRatio | None) -> dict[str, Any] | None:
    if r is None:
        return None
    return {"point": _num(r.point), "low": _num(r.low), "high": _num(r.high),
            "watched_samples": r.watched, "recorded_samples": r.recorded}  # fmt: skip


def to_dict(a: Against, predicted_by: str, notes: list[str]) -> dict[str, Any]:
    return {
        "watched_s": a.watched_s,
        "rss_ratio": _ratio_dict(a.rss),
        "qps_ratio": _ratio_dict(a.qps),
        "predicted_rss_ratio": {
            "point": a.predicted[0],
            "low": _num(a.predicted[1]),
            "high": _num(a.predicted[2]),
            "by": predicted_by,
        },  # fmt: skip
        "held_within": list(a.within),
        "tolerance": a.tolerance,
        "held": a.rss_held.name.lower(),
        "same_load": a.same_load.name.lower() if a.same_load is not None else None,
        "line": rss_line(a, predicted_by),
        "notes": notes,
    }


# --- what `check` prints ---------------------------------------------------------------------


def watching_text(pid: int, watch_s: float, t: float | None = None) -> str:
    """The spinner's words while --against watches the server."""
    if t is None:
        return f"watching process {pid} for {watch_s:g} s"
    return f"watching process {pid}: {t:.0f} of {watch_s:g} s"


@dataclass(frozen=True)
class CheckedProcess:
    """What `check --pid` found in force, and the PID it was asked about when that was a
    PostgreSQL backend and its postmaster was read instead."""

    found: InForce
    asked: int | None = None


@dataclass(frozen=True)
class BackendAsked:
    """A PostgreSQL backend's PID given to `check`: its postmaster is read."""

    asked: int
    postmaster: int


def backend_asked_text(b: BackendAsked) -> str:
    return (
        f"process {b.asked} is a PostgreSQL backend: its postmaster {b.postmaster} is "
        "checked (a backend writes its title over its environment)\n"
    )


def in_force_text(checked: CheckedProcess) -> str:
    return "".join(f"{line}\n" for line in checked.found.lines())


def in_force_json(checked: CheckedProcess) -> str:
    doc = checked.found.to_dict()
    if checked.asked is not None:
        doc["asked_pid"] = checked.asked
    return json.dumps(doc, indent=2) + "\n"


@dataclass(frozen=True)
class Checked:
    """--against's outcome: the server's window against the recorded one, what the
    prediction came from, the notes, and the setting in force (for the JSON document)."""

    against: Against
    predicted_by: str
    notes: list[str]
    in_force: InForce


def checked_text(c: Checked) -> str:
    return "".join(f"{line}\n" for line in lines(c.against, c.predicted_by, c.notes))


def checked_json(c: Checked) -> str:
    doc = {"in_force": c.in_force.to_dict(), **to_dict(c.against, c.predicted_by, c.notes)}
    return json.dumps(doc, indent=2) + "\n"
