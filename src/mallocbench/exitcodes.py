"""The exit statuses of every mallocbench command: one policy, so scripts and CI can branch.

0 and 1 are what a gate needs (passed / found what it was asked to fail on), 2 is
click's own status for a usage error, so every input problem shares it, and 3 keeps an
aborted run apart from both: its measurements are kept, but it did not finish. A run
stopped by a signal exits the shell's way, 128 + the signal number.
"""

from __future__ import annotations

import signal

OK = 0
FINDING = 1  # a gate (compare --fail-on) found what it was asked to fail on
USAGE = 2  # bad input or usage: MallocbenchError, click's usage errors
ABORTED = 3  # a run stopped: a server failed or crashed, a step could not run, store/disk lost
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
        "run aborted: a server failed or crashed, a step could not run, or the\n"
        "results store or its disk was lost (full, failing); what was measured\n"
        "is kept, --resume continues",
    ),  # fmt: skip
    (interrupted(), "interrupted: 128 + the signal (143: SIGTERM); results kept"),
)

# For help epilogs: click keeps a paragraph that starts with \b as it is.
POLICY_HELP = "\b\nExit status:\n" + "\n".join(
    f"  {code:<4} " + text.replace("\n", "\n       ") for code, text in POLICY
)
