"""What a MariaDB server's error log says about a start that failed or a setting it
runs without."""

from __future__ import annotations

import re
from pathlib import Path

from mallocbench.servers.outcome import log_tail


def start_failure_summary(error_log: Path, stdout_log: Path) -> str:
    """The error lines of a server that would not start (else its log's last lines)."""
    tail = log_tail(error_log, 40) or log_tail(stdout_log, 40)
    errors = [line for line in tail.splitlines() if "[ERROR]" in line or "rror" in line]
    return "\n".join(errors[-5:]) if errors else tail


def logged_about(error_log: Path, word: str) -> str | None:
    """The first error or warning of the log that names `word` (the cause comes
    before what follows from it), without its time stamp."""
    for line in log_tail(error_log, 400).splitlines():
        if word in line and ("[ERROR]" in line or "[Warning]" in line):
            return re.sub(r"^.*?\[(ERROR|Warning)\] ", "", line).strip()
    return None
