"""`check --against TRACE`: a restarted server watched against its recorded window.

The recorded window's per-second RSS and Questions samples are kept beside the trace
(replay/workload.py); the watch takes the same samples now, analysis/held.py sets one
against the other and report/held.py words it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

from mallocbench.analysis.held import Against, against, rates
from mallocbench.errors import MallocbenchError
from mallocbench.replay import workload

NAN = math.nan


def recorded(trace: Path) -> workload.ServerLoad:
    if not trace.exists():
        raise MallocbenchError(
            f"no trace at {trace}: give the file (or the directory of segments) "
            "`mallocbench record --pid` wrote"
        )
    load = workload.load(trace)
    if load is None or not any(s.rss for s in load.samples):
        raise MallocbenchError(
            f"{trace} has no recorded window's samples beside it ({workload.sidecar(trace)}): "
            "give a trace `mallocbench record --pid` wrote, with that file next to it"
        )
    return load


def predicted_from(
    advice: Path | None, ratio: float | None
) -> tuple[tuple[float, float, float], str]:
    """The predicted ratio of the server's RSS to the recorded window's (point, low,
    high), and who predicted it, in the words of the check's line."""
    if advice is not None and ratio is not None:
        raise MallocbenchError("--advice and --predicted both give the prediction: give one")
    if ratio is not None:
        return (ratio, NAN, NAN), "predicted (--predicted)"
    if advice is None:
        return (1.0, NAN, NAN), "the setting unchanged predicts"
    try:
        d = json.loads(advice.read_text())["decision"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise MallocbenchError(
            f"--advice {advice}: not an advise.json with a decision ({exc}): give the "
            "advise.json `mallocbench advise` wrote"
        ) from None
    if d.get("answer") == "keep":
        return (1.0, NAN, NAN), "advise kept the default, predicting"
    pct = d.get("saves_pct_of_server_rss")
    if not pct:
        raise MallocbenchError(
            f"--advice {advice}: its saving is of the replayed heap, not of the server's RSS "
            "(the trace holds no server RSS): give the expected ratio with --predicted RATIO"
        )
    return (
        (1 - pct["point"] / 100, 1 - pct["high"] / 100, 1 - pct["low"] / 100),
        "advise predicted",
    )


def check_against(
    pid: int,
    trace: Path,
    watch_s: float,
    predicted: tuple[float, float, float],
    tolerance: float,
    tick: Callable[[workload.Sample], None] | None = None,
) -> tuple[Against, list[str]]:
    """Watch `pid` for `watch_s` and compare it with `trace`'s window; what the reader
    must know beside the ratios."""
    load = recorded(trace)
    samples, problem = workload.watch(pid, watch_s, tick)
    notes = []
    if problem is not None:
        notes.append(f"the server's counters were not read ({problem}): RSS only")
    if samples and samples[-1].rss is None:
        notes.append(f"process {pid} ended during the watch")

    def qps(of: list[workload.Sample]) -> list[float]:
        return rates([(s.t, s.questions) for s in of])

    watched_s = samples[-1].t if samples else 0.0
    result = against(
        [s.rss for s in samples if s.rss], [s.rss for s in load.samples if s.rss],
        qps(samples), qps(load.samples), predicted, tolerance, watched_s,
    )  # fmt: skip
    return result, notes
