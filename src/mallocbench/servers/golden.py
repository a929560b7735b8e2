"""A golden datadir's publication, whatever the family's loader: built under a lock in a
temporary directory beside its place, renamed into place, then marked READY. Concurrent
runs load a shape once, and a load that died half-way is never taken for a loaded one:
the next run that holds the lock stops its server and reclaims its space."""

from __future__ import annotations

import contextlib
import fcntl
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from mallocbench.servers.orphans import stop_orphan
from mallocbench.servers.outcome import SERVER_RECORD

READY = "READY"


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def published(
    datasets: Path,
    key: str,
    load: Callable[[Path], None],
    on_status: Callable[[str], None] | None = None,
) -> Path:
    """datasets/KEY/data, first loaded by `load(work)` into work/data when it is not
    READY. OSError is the caller's to word (each family names its cache its own way)."""
    final = datasets / key
    with _locked(datasets / f".{key}.lock"):
        if (final / READY).is_file():
            return final / "data"
        # We hold the lock, so any loader directory left in the cache belongs to a dead
        # harness: stop its server if one still runs, then reclaim the space.
        for leftover in datasets.glob(f".{key}.*"):
            if not leftover.is_dir():
                continue  # the lock file itself
            stop_orphan(leftover / SERVER_RECORD)
            shutil.rmtree(leftover, ignore_errors=True)
        if on_status:
            on_status(f"loading dataset {key} (once; later runs reuse it)")
        work = Path(tempfile.mkdtemp(prefix=f".{key}.", dir=datasets))
        try:
            load(work)
            if final.exists():
                shutil.rmtree(final)
            (work / "data").rename(work / "data.loaded")
            final.mkdir(parents=True)
            (work / "data.loaded").rename(final / "data")
            (final / READY).write_text(key + "\n")
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return final / "data"
