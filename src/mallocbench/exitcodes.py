"""The exit statuses of every mallocbench command: one policy, so scripts and CI can branch.

0 and 1 are what a gate needs (passed / found what it was asked to fail on), 2 is
click's own status for a usage error, so every input problem shares it, and 3 keeps an
aborted run apart from both: its measurements are kept, but it did not finish. A run
stopped by a signal exits the shell's way, 128 + the signal number. `record` adds 4: its
trace is kept, but not where --out said.
"""

from __future__ import annotations

import signal

OK = 0
FINDING = 1  # a gate (compare --fail-on) found what it was asked to fail on
USAGE = 2  # bad input or usage: MallocbenchError, click's usage errors
ABORTED = 3  # a run stopped: a server failed or crashed, a step could not run, store/disk lost
# (and a replay whose every replay failed: no result at all)
INTERRUPTED_BASE = 128  # + the signal number: 130 for Ctrl-C, 143 for SIGTERM


def interrupted(signum: int = signal.SIGINT) -> int:
    """The status of a command stopped by signal `signum` (130 for Ctrl-C)."""
    return INTERRUPTED_BASE + int(signum)


POLICY = (
    (OK, "success (compare --fail-on: nothing to fail on)"),
    (FINDING, "compare --fail-on found a significant change of that kind"),
    (USAGE, "bad input or usage; one line on stderr says what and how to fix it"),
    (
        ABORTED,
        "run aborted: a server failed or crashed, a step could not run, every\n"
        "replay failed, or the results store or its disk was lost (full,\n"
        "failing); what was measured is kept, --resume continues",
    ),  # fmt: skip
    (interrupted(), "interrupted: 128 + the signal (143: SIGTERM); results kept"),
)

# `record` tells apart how its window ended, for a script that records unattended: the
# trace is never lost, but where it is and how much it holds differ.
RECORD_NOT_AT_OUT = 4
RECORD_POLICY = (
    (OK, "the window was recorded whole (a command's: until it exited, or\n"
     "--seconds), or up to the disk budget --max-size; the trace is at --out"),
    (USAGE, "bad input, or the process is already being recorded (the line names\n"
     "that recorder's PID)"),
    (
        ABORTED,
        "the window ended early: the process exited or was killed (a command:\n"
        "killed before the trace was closed), or the shim stopped (its buffer\n"
        "cap, a write error); the trace up to there is at --out and its header\n"
        "says where and why it stopped",
    ),
    (
        RECORD_NOT_AT_OUT,
        "the trace could not be written to --out (a full disk, no permission;\n"
        "after Ctrl-C too): one line names where it is kept and how to move it",
    ),
    (interrupted(), "interrupted (Ctrl-C; 143: SIGTERM, 129: SIGHUP): the trace so far\n"
     "is at --out"),
)  # fmt: skip


def policy_help(policy: tuple[tuple[int, str], ...]) -> str:
    """For a help epilog: click keeps a paragraph that starts with \\b as it is."""
    return "\b\nExit status:\n" + "\n".join(
        f"  {code:<4} " + text.replace("\n", "\n       ") for code, text in policy
    )


POLICY_HELP = policy_help(POLICY)
RECORD_HELP = policy_help(RECORD_POLICY)
