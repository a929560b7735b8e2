"""Whether a process has the recording shim mapped, where its control file is, and how
to preload the shim for the way that process was started."""

from __future__ import annotations

import os
from pathlib import Path

from mallocbench import allocators
from mallocbench.deploy import deployment, inforce, launch
from mallocbench.deploy import forms as deploy
from mallocbench.errors import MallocbenchError
from mallocbench.native import SHIM, SHIM_ENV, shim_path

CONTROL_ENV = "MBRECORD_CONTROL"


def shim_loaded(pid: int) -> str | None:
    """The shim's path as mapped in `pid`, or None."""
    libs = allocators.mapped_libraries(pid)
    return next((lib for lib in libs if os.path.basename(lib) == SHIM), None)


def _environ(pid: int) -> dict[str, str]:
    try:
        return inforce.read_environ(pid)
    except MallocbenchError:
        return {}


def control_path(pid: int) -> str:
    """The control file as the process sees it (the shim's default unless the env says)."""
    return _environ(pid).get(CONTROL_ENV) or f"/tmp/mbrecord-{pid}.control"


def shim_status(pid: int) -> str:
    """The first line of the shim's .status beside its control file ("recording PATH"
    while a window is open); empty when it never answered or record cleaned up."""
    path = in_process(pid, control_path(pid) + ".status")
    try:
        return path.read_text(errors="replace").split("\n", 1)[0].strip()
    except OSError:
        return ""


def in_process(pid: int, path: str) -> Path:
    """`path` as seen by process `pid`, reached from here."""
    return Path(f"/proc/{pid}/root") / path.lstrip("/")


def record_shim() -> str:
    """The shim to preload: MALLOCBENCH_RECORD_SHIM's when it names one, else the copy
    `mallocbench install-shim` put where a hardened unit can read it, else the one this
    installation or checkout has."""
    from mallocbench.deploy import install

    system = None if os.environ.get(SHIM_ENV) else install.system_shim(install.SYSTEM_PREFIXES)
    return str(system or shim_path())


def recording_for(
    pid: int | None, service: str | None = None
) -> tuple[deployment.Deployment, launch.Launch | None]:
    """The shim's deployment for process `pid` (in front of the allocator it has
    mapped) and how that process was started; without a pid, for glibc's malloc."""
    if pid is None:
        return deploy.recording(record_shim(), service=service or "mariadb"), None
    # A PostgreSQL backend is forked with its postmaster's environment: the postmaster's
    # start is the one a preload reaches, in the forms a PostgreSQL service reads.
    from mallocbench.servers.postgresql import attach
    from mallocbench.servers.postgresql import family as postgresql

    postmaster = attach.postmaster_of(pid)
    pid = postmaster or pid
    started = launch.detect(pid)
    mapped = allocators.detect(pid)
    library = None if mapped.name == "glibc" or not mapped.path else mapped.path
    if postmaster is None:
        name = service or started.service or "mariadb"
        return deploy.recording(record_shim(), mapped.name, library, name), started
    name = service or started.service or default_service(pid)
    d = deploy.recording(record_shim(), mapped.name, library, name)
    return postgresql.postgresql_forms(d), started


def default_service(pid: int | None) -> str:
    """The unit a server of this process's family runs as when nothing else says:
    Debian's postgresql@<version>-<cluster> for a PostgreSQL process, else mariadb."""
    from mallocbench.servers.postgresql import attach
    from mallocbench.servers.postgresql import family as postgresql

    postmaster = attach.postmaster_of(pid) if pid is not None else None
    return "mariadb" if postmaster is None else postgresql.service_of(postmaster)


def not_loaded_message(pid: int) -> str:
    d, started = recording_for(pid)
    assert started is not None
    notes = "".join(f"; note: {n}" for n in d.notes)
    return (
        f"process {pid} does not have the recording shim loaded; it runs as "
        f"{started.form} ({'; '.join(started.reasons)}): {deploy.form_hint(d, started.form)}"
        f" (`mallocbench record --print-dropin --pid {pid}` prints it, --form for another "
        f"way), then record{notes}"
    )
