"""Copy runs between stores of any kind: SQLite to PostgreSQL, back, or file to file."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from mallocbench.errors import MallocbenchError
from mallocbench.store.base import ResultsStore


@dataclass
class Copied:
    runs: list[str] = field(default_factory=list)
    cells: int = 0
    samples: int = 0
    pattern_results: int = 0


def copy_runs(
    src: ResultsStore, dst: ResultsStore, run_ids: list[str], replace: bool = False
) -> Copied:
    """Copy `run_ids` (every run when empty) with their setups, sessions, cells and
    samples, or a pattern run with its results, keeping their start and finish times
    and status.

    Everything is checked before anything is written, so a refused copy writes nothing.
    """
    listed = {str(r["run_id"]): r for r in src.list_runs()}
    patterns = {str(r["run_id"]) for r in src.list_pattern_runs()} - set(listed)
    wanted = list(dict.fromkeys(run_ids)) or [*listed, *patterns]
    if not wanted:
        raise MallocbenchError(f"the store {src.label} holds no runs: nothing to copy")
    for run_id in wanted:
        if run_id not in listed and run_id not in patterns:
            latest = ", ".join(list(listed)[-5:]) or "none"
            raise MallocbenchError(f"no run {run_id!r} in {src.label} (latest: {latest})")
    if not replace:
        for run_id in wanted:
            if dst.run_exists(run_id) or dst.pattern_run_exists(run_id):
                raise MallocbenchError(
                    f"run {run_id} is already in {dst.label}: give --replace to overwrite "
                    "it, or leave it out of the --run list"
                )
    copied = Copied()
    for run_id in wanted:
        if run_id in patterns:
            run = src.load_pattern_run(run_id)
            with _whole_or_not(dst, run_id, replace, dst.delete_pattern_run):
                dst.save_pattern_run(run)
            copied.pattern_results += len(run.results)
        else:
            record = listed[run_id]
            result = src.load_run(run_id)
            with _whole_or_not(dst, run_id, replace, dst.delete_run):
                dst.save_run(
                    result,
                    started_at=record["started_at"],
                    finished_at=record["finished_at"],
                    status=record["status"],
                )
            copied.cells += len(result.cells)
            copied.samples += sum(len(c.samples) for c in result.cells)
        copied.runs.append(run_id)
    return copied


@contextlib.contextmanager
def _whole_or_not(
    dst: ResultsStore, run_id: str, replace: bool, delete: Callable[[str], None]
) -> Iterator[None]:
    """Around writing `run_id` into DST: the run is there whole afterwards, or not at all."""
    # Whoever writes this run id into DST now (a run resumed there) would have its
    # results mixed with the copy's: hold the run's lock, refused if held.
    with dst.lock_run(run_id):
        if replace:
            delete(run_id)
        try:
            yield
        except BaseException:
            # Cut short (Ctrl-C, a full disk, a lost connection), the copy would read
            # as a run with fewer cells: take it out, so DST has the run whole or not.
            with contextlib.suppress(Exception):
                delete(run_id)
            raise
