"""The my.cnf form: the setup's server options, quoted as the server's option files read
them.
"""

from __future__ import annotations

import re

from mallocbench.deploy.deployment import CONTROL, Deployment, Snippet, describe, file_part
from mallocbench.errors import MallocbenchError

# my.cnf values that need quotes: whitespace, comment starts, quotes, escapes.
_MYCNF_QUOTE = re.compile(r"[\s#;'\"\\]")


def _mycnf_value(key: str, value: str) -> str:
    if CONTROL.search(value):
        raise MallocbenchError(
            f"config {key} has a newline or other control character in its value: "
            "give the value on one line"
        )
    if value and not _MYCNF_QUOTE.search(value):
        return value
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def mycnf_snippet(d: Deployment) -> Snippet | None:
    if not d.setup.config:
        return None
    path = f"/etc/mysql/mariadb.conf.d/99-mallocbench-{file_part(d.setup.name)}.cnf"
    lines = [f"# mallocbench: server options of {describe(d.setup, None)}", "[mysqld]"]
    for key, value in d.setup.config.items():
        if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_.-]*", key):
            raise MallocbenchError(f"config key {key!r} is not a server option name")
        lines.append(f"{key} = {_mycnf_value(key, str(value))}")
    notes = (
        "The path is Debian's for MariaDB; files there are read in name order, so 99- "
        "comes last and wins. Elsewhere use any file the server reads (e.g. /etc/my.cnf.d/).",
    )
    return Snippet("mycnf", "my.cnf options", "\n".join(lines) + "\n", "ini", path, notes)
