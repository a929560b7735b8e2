"""The mysqld_safe forms: its malloc-lib option (with the knobs beside it) and a
distribution's /etc/default file for the service.
"""

from __future__ import annotations

import shlex

from mallocbench.deploy.deployment import Deployment, Snippet


def beside_malloc_lib(d: Deployment) -> dict[str, str]:
    """What malloc-lib cannot carry: the knobs, and the allocator behind the shim
    (malloc-lib takes one library; mysqld_safe puts it in front of the LD_PRELOAD it
    was started with, the order the shim needs)."""
    env = {k: v for k, v in d.environment.items() if k != "LD_PRELOAD"}
    if d.shim is not None and d.preload:
        env = {"LD_PRELOAD": d.preload, **env}
    return env


def mysqld_safe_snippet(d: Deployment) -> Snippet:
    lines = ["[mysqld_safe]"]
    if d.shim or d.preload:
        lines.append(f"malloc-lib={d.shim or d.preload}")
    else:
        lines.append("# glibc's malloc: an empty malloc-lib cancels one set in another file")
        lines.append("malloc-lib=")
    knobs = beside_malloc_lib(d)
    notes = [
        "Only read when the server is started by mysqld_safe (SysV init, or by hand); "
        "the systemd service starts mariadbd directly and ignores it.",
    ]
    if knobs:
        notes.append(
            f"malloc-lib cannot carry {', '.join(knobs)}: they must be in the environment "
            f"mysqld_safe starts with ({default_file(d.service)} below, or exported in "
            "the shell that starts it)."
        )
    return Snippet(
        "mysqld_safe", "mysqld_safe (my.cnf)", "\n".join(lines) + "\n", "ini", None, tuple(notes)
    )


def default_file(service: str) -> str:
    return f"/etc/default/{service}"


def etc_default_snippet(d: Deployment) -> Snippet | None:
    knobs = beside_malloc_lib(d)
    if not knobs:
        return None
    lines = [
        f"# {default_file(d.service)}: sourced by the SysV init script; export passes the",
        "# variables on through mysqld_safe to the server.",
    ]
    lines += [f"export {k}={shlex.quote(v)}" for k, v in knobs.items()]
    return Snippet(
        "etc_default",
        "allocator knobs for mysqld_safe",
        "\n".join(lines) + "\n",
        "sh",
        default_file(d.service),
    )
