"""What `record` says: the window it starts, the trace it kept (its size, how it closed),
why a window ended early, where a trace is when --out cannot take it, the preload forms
and drop-ins. `commands/record.py` hands the values over through report.formats."""

from __future__ import annotations

import signal
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mallocbench.deploy.deployment import Deployment
    from mallocbench.deploy.launch import Launch
    from mallocbench.replay.control import Segmenting


@dataclass(frozen=True)
class TraceSize:
    """What a trace takes on disk; `segments` when it is a directory of them."""

    size_bytes: int
    segments: int | None = None


def size_text(size: TraceSize) -> str:
    text = f"{size.size_bytes / 1e6:.2f} MB"
    n = size.segments
    return text if n is None else f"{text} in {n} segment{'s' * (n != 1)}"


def segmenting_text(long: Segmenting | None, out: Path) -> str:
    """The segments and the budget, as the start line says them."""
    if long is None:
        return ""
    budget = f", within {long.budget / 2**20:,.0f} MiB" if long.budget else ""
    if not long.segmented:
        return budget
    return f", in segments of {long.seconds:g} s or {long.size / 2**20:,.0f} MiB at {out}/{budget}"


@dataclass(frozen=True)
class Started:
    """A window about to start: in process `pid`, or of a command (`command`, shell-quoted)
    with `seconds` None for its whole run."""

    out: Path
    long: Segmenting | None
    seconds: float | None
    pid: int | None = None
    command: str | None = None


def started_text(s: Started) -> str:
    how = segmenting_text(s.long, s.out)
    if s.command is None:
        return f"recording process {s.pid} for {s.seconds:g} s{how} ...\n"
    span = "until it exits" if s.seconds is None else f"for up to {s.seconds:g} s"
    return f"recording {s.command} {span}{how} ...\n"


# How a kept trace closed, as its line says after the size.
CLOSED = "closed"  # the shim's closing line, as it is
STATUS = "status"  # the trace header's status: the recording stopped
WHOLE_RUN = "whole-run"  # a command recorded until it exited
INTERRUPTED = "interrupted"  # a signal ended the window in a server
INTERRUPTED_COMMAND = "interrupted-command"  # ... in a command record started
BUDGET = "budget"  # --max-size reached; `closing` is where


@dataclass(frozen=True)
class Kept:
    """A trace at --out: its size and how it closed (`closing`, the shim's or the header's
    words, or where the budget was reached)."""

    out: Path
    size: TraceSize
    how: str
    closing: str = ""


def kept_text(k: Kept) -> str:
    size = size_text(k.size)
    if k.how == STATUS:
        return f"{k.out}: {size} (recording {k.closing})\n"
    if k.how == WHOLE_RUN:
        return f"{k.out}: {size} (the program's whole run)\n"
    if k.how == INTERRUPTED:
        return (
            f"{k.out}: {size}, the trace up to the interruption "
            "(it replays as it is); the server was disarmed and runs on\n"
        )
    if k.how == INTERRUPTED_COMMAND:
        return f"{k.out}: {size}, the trace up to the interruption\n"
    if k.how == BUDGET:
        return (
            f"{k.out}: {size}: recording stopped at {k.closing}, where the trace reached "
            "--max-size; the trace so far is whole and replays, and the process runs on\n"
        )
    return f"{k.out}: {size} ({k.closing})\n"


@dataclass(frozen=True)
class Early:
    """A server's window that ended before its time: how (`ended`), the header's status."""

    ended: str
    status: str
    pid: int


def early_text(e: Early) -> str:
    """Why the window ended before its time, and what to do about it."""
    if e.ended in ("exited", "killed"):
        how = "exited" if e.ended == "exited" else "ended before the shim closed the trace"
        return (
            f"note: process {e.pid} {how} during the window; the trace holds what it did "
            "until then and replays as it is\n"
        )
    remedy = (
        "record with a larger --max-buffer or on a quieter host"
        if "fell behind" in e.status
        else "fix that and record again"
    )
    return (
        "note: the recording ended early; the trace is usable up to that point and replays "
        f"as it is (for the whole window, {remedy})\n"
    )


def undescribed_text(missing: str) -> str:
    return (
        f"note: the server's description of its load is not kept ({missing}): "
        "the confirmation experiment will be generic; --socket, --defaults-file and --user "
        "say how to ask the server\n"
    )


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def interrupted_text(signum: int) -> str:
    return f"mallocbench: interrupted by {signal.Signals(signum).name}\n"


@dataclass(frozen=True)
class NotAtOut:
    """--out could not take the trace: the problem, and where the trace is (None: lost)."""

    out: Path
    problem: str | None
    kept: Path | None
    pid: int


def not_at_out_text(n: NotAtOut) -> str:
    """One line with where the trace is and how to move it."""
    problem = n.problem or f"cannot write {n.out}"
    if n.kept is None:
        where = "no copy could be kept anywhere else: the trace is lost"
    elif str(n.kept).startswith(f"/proc/{n.pid}/"):
        where = (
            f"the trace is kept at {n.kept} while process {n.pid} runs: move it now with "
            f"mv {n.kept} DEST, DEST on a disk with room"
        )
    else:
        where = (
            f"the trace is kept at {n.kept}: move it with mv {n.kept} {n.out} "
            "once that disk has room"
        )
    return f"mallocbench: error: {problem}; {where}\n"


# What happened to a program record started, after its trace's line.
RUNS_ON = "runs-on"  # --leave-running: left running, unrecorded
WAITING = "waiting"  # the window ended: waited for
CUT = "cut"  # the recording stopped before the program ended
CUT_KILLED = "cut-killed"  # killed before the shim closed the trace (`code`: -signal)
CUT_EXIT = "cut-exit"  # _exit: the shim could not close the trace
EXITED = "exited"  # its own status, for a script (`code`)


@dataclass(frozen=True)
class Program:
    what: str
    pid: int = 0
    code: int = 0


def program_text(p: Program) -> str:
    if p.what == RUNS_ON:
        return f"note: the program (pid {p.pid}) runs on, unrecorded\n"
    if p.what == WAITING:
        return f"the window ended; waiting for the program (pid {p.pid}) to exit\n"
    if p.what == EXITED:
        if p.code > 0:
            return f"note: the program exited with status {p.code}\n"
        return f"note: the program was killed by {signal_name(-p.code)}\n" if p.code < 0 else ""
    if p.what == CUT_KILLED:
        why = f"the program was killed by {signal_name(-p.code)} before the shim closed the trace"
    elif p.what == CUT_EXIT:
        why = "the program ended without running its exit handlers (_exit), so the shim "
        why += "could not close the trace"
    else:
        why = "the recording stopped before the program ended"
    return f"note: {why}; the trace holds its calls until then and replays as it is\n"


@dataclass(frozen=True)
class Form:
    """--print-dropin: the deployment, how the process runs (if known), the form asked."""

    deployment: Deployment
    started: Launch | None
    form: str | None


def form_text(f: Form) -> str:
    """The chosen form's text, after a line saying how the process runs."""
    from mallocbench.deploy import forms as deploy

    started = f.started
    chosen = f.form or (started.form if started else "systemd")
    head = ""
    if started is not None:
        # Only forms this deployment has: a PostgreSQL server has no mysqld_safe.
        offered = [x for x in (started.form, *started.others) if x in f.deployment.forms]
        others = "|".join(x for x in offered if x != chosen)
        head = (
            f"# process {started.pid} runs as {started.form}: {'; '.join(started.reasons)}\n"
            f"# the {chosen} form (others: --form {others}):\n"
        )
    return head + deploy.render_form(f.deployment, chosen)


@dataclass(frozen=True)
class Removed:
    """--remove-dropin: the drop-ins removed of `service` under `units_dir`; or, for a
    process that runs in another form (`started`), nothing removed."""

    service: str
    units_dir: Path
    paths: tuple[Path, ...] = ()
    started: Launch | None = None


def removed_text(r: Removed) -> str:
    started = r.started
    if started is not None:
        # no drop-in of its own: what to undo is the text of its form
        return (
            f"process {started.pid} runs as {started.form} ({'; '.join(started.reasons)}): "
            f"remove what `mallocbench record --print-dropin --pid {started.pid}` prints from "
            "where you put it, and restart it; no systemd drop-in removed\n"
        )
    if not r.paths:
        return f"no recording drop-in of {r.service} under {r.units_dir}: nothing removed\n"
    return "".join(f"removed {p}\n" for p in r.paths) + (
        f"apply with: systemctl daemon-reload && systemctl restart {r.service} (the shim "
        "stays loaded, unarmed, until then)\n"
    )
