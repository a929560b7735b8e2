"""How a running server was started: a systemd unit, mysqld_safe, a container, or by hand.

The deploy text (the recording shim's and a chosen setting's) must fit how the server
runs: a drop-in for a unit no one uses, or a my.cnf line for a server mysqld_safe does
not start, changes nothing. What /proc says is gathered once (`Facts`, which tests
record as fixtures) and judged by `judge`, which reads nothing itself.
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

FORMS = ("systemd", "mysqld_safe", "env", "docker", "kubernetes")
SAFE_SCRIPTS = ("mysqld_safe", "mariadbd-safe")
# A container runtime's cgroup as the host sees it: docker-ID.scope or /docker/ID,
# cri-containerd-ID.scope or /containerd/ID, libpod-ID.scope (podman).
_CONTAINER_CGROUP = re.compile(r"(^|/)(docker|cri-containerd|containerd|libpod)[-/][0-9a-f]{12,}")
_KUBE_CGROUP = re.compile(r"(^|/)kubepods")
# A service unit's cgroup: the leaf (a unit may delegate sub-cgroups, named otherwise).
_SERVICE = re.compile(r"([A-Za-z0-9:_.\\@-]+)\.service")


@dataclass(frozen=True)
class Facts:
    """What /proc tells of a process's start: its cgroup file, its parent's name and
    command line, its environment's names, and its root's container marker files."""

    pid: int
    cgroup: str = ""
    parent_pid: int = 0
    parent_comm: str = ""
    parent_cmdline: tuple[str, ...] = ()
    environ: frozenset[str] = frozenset()
    root_markers: frozenset[str] = frozenset()  # /.dockerenv, /run/.containerenv


@dataclass(frozen=True)
class Launch:
    """The form that fits (one of FORMS), the unit when systemd runs it, and why."""

    pid: int
    form: str
    reasons: tuple[str, ...] = ()
    service: str | None = None
    container: str | None = None  # docker or kubernetes when in one, whatever starts it
    others: tuple[str, ...] = field(default=())  # the forms not chosen, in FORMS' order


def _read(path: str) -> str:
    try:
        return Path(path).read_text(errors="replace")
    except OSError:
        return ""


def _parent(pid: int) -> int:
    status = _read(f"/proc/{pid}/status")
    match = re.search(r"^PPid:\s*(\d+)", status, re.M)
    return int(match.group(1)) if match else 0


def _environ_names(pid: int) -> frozenset[str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return frozenset()
    return frozenset(item.split(b"=", 1)[0].decode(errors="replace") for item in raw.split(b"\0"))


def gather(pid: int) -> Facts:
    """The facts of process `pid` (those it may not read stay empty)."""
    parent = _parent(pid)
    markers = frozenset(
        name for name in ("/.dockerenv", "/run/.containerenv")
        if os.path.exists(f"/proc/{pid}/root{name}")
    )  # fmt: skip
    cmdline = _read(f"/proc/{parent}/cmdline").split("\0") if parent else []
    return Facts(
        pid=pid,
        cgroup=_read(f"/proc/{pid}/cgroup"),
        parent_pid=parent,
        parent_comm=_read(f"/proc/{parent}/comm").strip() if parent else "",
        parent_cmdline=tuple(a for a in cmdline if a),
        environ=_environ_names(pid),
        root_markers=markers,
    )


def _cgroup_paths(text: str) -> list[str]:
    """The systemd hierarchy's path (v1 name=systemd, or v2's 0::), then the others."""
    paths: list[str] = []
    for line in text.splitlines():
        _, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if controllers in ("", "name=systemd"):
            paths.insert(0, path)
        else:
            paths.append(path)
    return paths


def service_unit(cgroup: str) -> str | None:
    """The service unit owning the process, e.g. "mariadb": the leaf of its systemd
    cgroup path. A process inside a user's manager (user@1000.service/...), a session
    scope or a container's scope belongs to no service of its own."""
    paths = _cgroup_paths(cgroup)
    if not paths:
        return None
    parts = paths[0].rstrip("/").split("/")
    match = _SERVICE.fullmatch(parts[-1])
    # a unit of a user's manager (systemctl --user) has no drop-in under /etc
    if match is None or any(part.startswith("user@") for part in parts):
        return None
    return match.group(1)


def _container(facts: Facts) -> tuple[str | None, str]:
    """(docker or kubernetes, the evidence), or (None, "")."""
    text = "\n".join(_cgroup_paths(facts.cgroup))
    if _KUBE_CGROUP.search(text):
        return "kubernetes", "its cgroup is under kubepods"
    if "KUBERNETES_SERVICE_HOST" in facts.environ:
        return "kubernetes", "its environment has KUBERNETES_SERVICE_HOST"
    match = _CONTAINER_CGROUP.search(text)
    if match:
        return "docker", f"its cgroup is a {match.group(2)} container's"
    if facts.root_markers:
        return "docker", f"its root has {', '.join(sorted(facts.root_markers))}"
    return None, ""


def _safe_parent(facts: Facts) -> str | None:
    """The mysqld_safe script that started the process, by the parent's name or
    command line (a script's comm is its own name; run as `sh mysqld_safe` it is sh)."""
    words = [facts.parent_comm, *facts.parent_cmdline[:2]]
    for word in words:
        if os.path.basename(word) in SAFE_SCRIPTS:
            return os.path.basename(word)
    return None


def judge(facts: Facts) -> Launch:
    """The form that fits: the closest starter wins. mysqld_safe, when it is the parent,
    reads malloc-lib wherever it runs (in a container too); a service unit's environment
    reaches its process; a container's comes from its image, Compose or pod spec."""
    container, evidence = _container(facts)
    why_container = (f"in a {container} container: {evidence}",) if container else ()
    safe = _safe_parent(facts)
    if safe is not None:
        why = f"its parent {facts.parent_pid} is {safe}"
        return _launch(facts, "mysqld_safe", (why, *why_container), container=container)
    unit = None if container else service_unit(facts.cgroup)
    if unit is not None:
        return _launch(facts, "systemd", (f"its cgroup belongs to {unit}.service",), service=unit)
    if container is not None:
        return _launch(facts, container, why_container, container=container)
    why = "no service unit owns it, no mysqld_safe started it, no container holds it"
    return _launch(facts, "env", (why,))


def _launch(facts: Facts, form: str, reasons: tuple[str, ...], **kw: str | None) -> Launch:
    return Launch(facts.pid, form, reasons, others=tuple(f for f in FORMS if f != form), **kw)


def detect(pid: int) -> Launch:
    return judge(gather(pid))


def of_recording(info: Mapping[str, str]) -> Launch | None:
    """How the server a trace was recorded from runs, when it still runs on this host
    (its header's host, and its pid with the same executable); None otherwise."""
    pid = info.get("pid", "")
    if info.get("host") != socket.gethostname() or not pid.isdigit():
        return None
    try:
        exe = os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return None
    return detect(int(pid)) if exe == info.get("exe") else None


class DeployForm(NamedTuple):
    form: str
    why: str
    service: str = "mariadb"  # the unit a drop-in is for


def form_for(chosen: str | None, info: Mapping[str, str] | None) -> DeployForm:
    """The deploy form to print, why, and the unit: `chosen` (--form), else that of the
    recorded server when it still runs here, else systemd's, the common case."""
    found = of_recording(info) if info else None
    service = (found.service if found else None) or "mariadb"
    if chosen is not None:
        return DeployForm(chosen, "--form", service)
    if found is not None:
        why = f"the recorded process {found.pid} runs so: " + "; ".join(found.reasons)
        return DeployForm(found.form, why, service)
    why = "the recorded server is not running here to tell how it is started"
    return DeployForm("systemd", why, service)
