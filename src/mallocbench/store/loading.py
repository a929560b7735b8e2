"""Find a run from what a user names on the command line: a directory, a store or a file.

`report` and `compare` both read runs this way; `patterns --report` reads its pattern
runs from a store file or URL (`load_pattern_run`). A directory with both a results.sqlite
and a results.json is read from the store: it holds every run made there (the json only
the last), so `--run RUN_ID` can name any of them. A postgresql:// URL names a shared
store, read the same way.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from mallocbench.errors import MallocbenchError
from mallocbench.files import read_bounded
from mallocbench.model.patterns import PatternRun
from mallocbench.model.results import RunResult, type_problem
from mallocbench.store.base import STORE_NAME, ResultsStore, is_url
from mallocbench.store.sqlite import Store

JSON_NAME = "results.json"
# Far above any run's results.json (a two-hour soak writes a few MB); a device or a
# wrong file is refused before it is read whole.
JSON_LIMIT = 512 * 1024**2
_SQLITE_MAGIC = b"SQLite format 3\x00"


def resolve(source: str | Path) -> Path:
    """The file to read for `source`: a directory's store (preferred) or results.json."""
    path = Path(source)
    if path.is_dir():
        for name in (STORE_NAME, JSON_NAME):
            if (path / name).is_file():
                return path / name
        raise MallocbenchError(f"{path} holds no {STORE_NAME} or {JSON_NAME}")
    if not path.exists():
        raise MallocbenchError(
            f"{source} does not exist: give an output directory, a .sqlite store or a results.json"
        )
    return path


def load_result(
    source: str | Path | None = None, run_id: str | None = None, with_samples: bool = True
) -> RunResult:
    """One run from a directory, a store (the latest run, or `run_id`) or a results.json."""
    if is_url(source):
        return _from_url(str(source), run_id, with_samples)
    path = resolve(source if source is not None else Path("out"))
    if _is_sqlite(path):
        return _from_store(path, run_id, with_samples)
    try:
        data = json.loads(read_bounded(path, JSON_LIMIT, "results file"))
        wrong = type_problem(data) if isinstance(data, dict) else None
        if wrong is not None:
            raise MallocbenchError(
                f"{path}: {wrong}: correct that value, or write the file again from the "
                "run's results store (mallocbench report STORE --run RUN_ID --out DIR)"
            )
        result = RunResult.from_dict(data)
    except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as exc:
        raise MallocbenchError(
            f"{path} is neither a results store nor a mallocbench results.json ({exc})"
        ) from exc
    if run_id is not None and run_id != result.run_id:
        raise MallocbenchError(
            f"{path} holds run {result.run_id!r}, not {run_id!r}: name the store "
            f"({STORE_NAME}) to pick among runs"
        )
    return result


def _is_sqlite(path: Path) -> bool:
    try:
        with path.open("rb") as handle:
            return handle.read(len(_SQLITE_MAGIC)) == _SQLITE_MAGIC
    except OSError as exc:
        raise MallocbenchError(f"cannot read {path}: {exc.strerror}") from exc


def _from_url(url: str, run_id: str | None, with_samples: bool) -> RunResult:
    from mallocbench.store.postgresql import PostgresStore

    store = PostgresStore(url, readonly=True)
    try:
        return store.load_run(run_id, with_samples=with_samples)
    finally:
        store.close()


def _from_store(path: Path, run_id: str | None, with_samples: bool) -> RunResult:
    store: Store | None = None
    try:
        store = Store(path, readonly=True)
        return store.load_run(run_id, with_samples=with_samples)
    except sqlite3.Error as exc:
        raise MallocbenchError(f"cannot read the results store {path}: {exc}") from exc
    finally:
        if store is not None:
            store.close()


def load_pattern_run(target: str | Path, run_id: str | None = None) -> PatternRun:
    """A pattern run (the latest, or `run_id`) from a store file or a PostgreSQL URL."""
    store: ResultsStore
    if is_url(target):
        from mallocbench.store.postgresql import PostgresStore

        store = PostgresStore(str(target), readonly=True)
    else:
        path = Path(target)
        if not path.is_file():
            raise MallocbenchError(f"no results store at {path}: run `mallocbench patterns` first")
        try:
            store = Store(path, readonly=True)
        except sqlite3.Error as exc:
            raise MallocbenchError(f"cannot read the results store {path}: {exc}") from exc
    try:
        return store.load_pattern_run(run_id)
    finally:
        store.close()
