"""Where groups of our own go: the parent a new group is made below (and whether one can
be made there at all), and the groups left behind by a harness that was killed."""

from __future__ import annotations

import contextlib
import errno
import os
import re
from collections.abc import Iterable
from pathlib import Path

from mallocbench.errors import MallocbenchError
from mallocbench.probes import process as proc_probe
from mallocbench.servers.cgroup.hierarchy import (
    V1_MARKER,
    cgroup_of,
    controllers,
    fix_hint,
    is_v2,
    no_cgroup_hint,
    read_procs,
    read_text,
)


def default_parent(controller: str = "memory") -> Path:
    own = cgroup_of(controller, "self")
    if own is None:
        raise MallocbenchError(
            f"no {controller} cgroup controller found: {no_cgroup_hint(controller)}"
        )
    if not is_v2(own) or os.path.ismount(own):
        # v1 has no rule against processes beside child groups; a v2 root is exempt.
        return own
    return own.parent


def checked_parent(controller: str, parent: Path | None) -> Path:
    """`parent` (None: the default one), made ready to hold a child group of `controller`."""
    if parent is None:
        parent = default_parent(controller)
    if not parent.is_dir():
        raise MallocbenchError(
            f"{controller} cgroup {parent} does not exist: give an existing cgroup directory"
        )
    if is_v2(parent):
        _delegate(parent, controller)
    elif not (parent / V1_MARKER[controller]).exists():
        raise MallocbenchError(
            f"{parent} is not a {controller} cgroup: {no_cgroup_hint(controller)}"
        )
    return parent


def capping_problem(parent: Path | None = None) -> str | None:
    """Why MemoryCgroup.create could not make a capped group here; None when it could.

    It writes nothing (a dry run may ask), so it judges by permissions what create would
    learn by trying; a kernel may still refuse what these checks let through.
    """
    return _group_problem("memory", parent)


def cpu_capping_problem(parent: Path | None = None) -> str | None:
    """Why CpuCgroup.create could not make a group with a quota here; None when it could.

    Writes nothing, like capping_problem.
    """
    return _group_problem("cpu", parent)


def _group_problem(controller: str, parent: Path | None) -> str | None:
    hint = no_cgroup_hint(controller)
    try:
        parent = parent or default_parent(controller)
    except MallocbenchError:
        return f"no {controller} cgroup controller is mounted: {hint}"
    if not parent.is_dir():
        return f"{controller} cgroup {parent} does not exist"
    if is_v2(parent):
        if controller not in controllers(parent):
            return (
                f"cgroup {parent} has no {controller} controller: enable it in its parent's "
                "cgroup.subtree_control"
            )
        control = parent / "cgroup.subtree_control"
        delegated = controller in read_text(control).split()
        if not delegated:
            if not os.access(control, os.W_OK):
                return f"{control} is not writable: {hint}"
            if not os.path.ismount(parent) and read_procs(parent):
                return (
                    f"cgroup {parent} holds processes, so cgroup v2 cannot delegate "
                    f"{controller} limits below it"
                )
    elif not (parent / V1_MARKER[controller]).exists():
        return f"{parent} is not a {controller} cgroup: {hint}"
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"{controller} cgroup {parent} is not writable: {hint}"
    return None


def _delegate(parent: Path, controller: str) -> None:
    """v2: let children of `parent` have `controller` limits (its subtree_control gains it)."""
    if controller not in controllers(parent):
        raise MallocbenchError(
            f"cgroup {parent} has no {controller} controller: enable it in its parent's "
            f"cgroup.subtree_control, or {no_cgroup_hint(controller)}"
        )
    control = parent / "cgroup.subtree_control"
    try:
        if controller in control.read_text().split():
            return
        control.write_text(f"+{controller}")
    except OSError as exc:
        if exc.errno == errno.EBUSY:
            raise MallocbenchError(
                f"cannot enable {controller} limits below cgroup {parent}: it holds processes, "
                f"and cgroup v2 delegates controllers only from groups without any; give a "
                f"parent cgroup without processes of its own"
            ) from None
        raise MallocbenchError(
            f"no writable {controller} cgroup: cannot enable {controller} in {control} "
            f"({exc.strerror}); {fix_hint(exc, controller)}"
        ) from None


# --- groups left by a harness that was killed ------------------------------------------------


_OWN_GROUP = re.compile(r"^mallocbench-.+-(\d+)$")


def abandoned_groups(parent: Path) -> list[Path]:
    """Groups below `parent` named by cgroup_name for a harness pid that no longer runs."""
    try:
        entries = sorted(parent.iterdir())
    except OSError:
        return []
    found = []
    for entry in entries:
        match = _OWN_GROUP.match(entry.name)
        # A live pid may be a harness still using its group, or a reused pid: either way
        # the group is left alone; only a group whose harness is gone is ours to remove.
        if match and entry.is_dir() and not proc_probe.alive(int(match.group(1))):
            found.append(entry)
    return found


def remove_abandoned_groups(parents: Iterable[Path] | None = None) -> list[Path]:
    """Remove the empty groups that harnesses killed before they could clean up left behind.

    A group whose processes still run (a server a run left behind, not yet stopped) is
    kept: rmdir refuses it, and moving its processes out would uncap them. The default
    parents are where MemoryCgroup.create and CpuCgroup.create put groups.
    """
    if parents is None:
        parents = []
        for controller in V1_MARKER:
            with contextlib.suppress(MallocbenchError):
                parents.append(default_parent(controller))
    removed = []
    for parent in dict.fromkeys(parents):
        for group in abandoned_groups(parent):
            if read_procs(group):
                continue
            try:
                group.rmdir()
            except OSError:
                continue
            removed.append(group)
    return removed
