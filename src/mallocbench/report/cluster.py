"""What `cluster` says: where a scheduler, its dashboard and a worker listen, the warning
on --insecure, and the certificates `cluster init` made or kept."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mallocbench.cluster.units import News


def scheduler_text(address: str) -> str:
    return f"mallocbench: scheduler listening at {address}\n"


def dashboard_text(where: tuple[str, int]) -> str:
    return f"mallocbench: dashboard at http://{where[0]}:{where[1]}/status\n"


@dataclass(frozen=True)
class Worker:
    name: str
    address: str
    work_dir: Path


def worker_text(w: Worker) -> str:
    return f"mallocbench: worker {w.name} at {w.address}, units in {w.work_dir}\n"


def insecure_text(where: str) -> str:
    return (
        f"mallocbench: warning: --insecure: plain TCP on {where}, no authentication: "
        "anyone who reaches it can run code as this user\n"
    )


@dataclass(frozen=True)
class Certificates:
    """`cluster init`'s hosts: directories made, directories kept, and the CA's key."""

    made: list[Path]
    kept: list[Path]
    ca_key: Path


def certificates_text(c: Certificates) -> str:
    lines = [f"made {p}: copy it to {p.name} and give it as --tls there" for p in c.made]
    lines += [f"kept {p}: it exists (remove it to make a new certificate)" for p in c.kept]
    lines.append(f"the CA's key {c.ca_key} stays here; copy no host its key")
    return "".join(f"{line}\n" for line in lines)


def news_text(n: News) -> str:
    """A unit's or a replay's news, as the driver's progress shows it."""
    from mallocbench.cluster.units import Event  # told only once a cluster has it loaded

    what = "replay" if n.replay else "unit"
    if n.event is Event.LOST:
        return f"{what} {n.label} lost: {n.why}"
    if n.event is Event.STARTED:
        return f"{what} {n.label} started on {n.host}"
    if n.cells is None:
        return f"{what} {n.label} finished on {n.host}"
    return f"{what} {n.label} finished on {n.host}: {n.cells} cell(s) in {n.seconds:.0f} s"
