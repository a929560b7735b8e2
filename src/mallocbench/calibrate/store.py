"""Calibrations kept per host and shape, for runs with design = "auto"."""

from __future__ import annotations

import hashlib
import json
import socket
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from mallocbench.analysis import designs, noise
from mallocbench.calibrate.summary import CalibrationSummary
from mallocbench.calibrate.target import Target
from mallocbench.files import cache_root
from mallocbench.run.experiment import Experiment

# The host's noise changes with what else runs on it: an older calibration is redone.
STORED_MAX_AGE_S = 24 * 3600
# Bumped when what a calibration measures changes, so older records are measured again:
# 2 = as many copies up at once as the experiment has setups (1 measured two);
# 3 = servers in the harness's session, not each in its own (turns were up to 4x noisier).
_RECORD_FORMAT = 3


def calibration_key(experiment: Experiment, target: Target) -> str:
    """This host and the shape the noise and costs depend on: setup, engine, step,
    clients, data, and the number of setups (a block starts and warms every one)."""
    data = experiment.dataset
    shape = [
        _RECORD_FORMAT,
        len(experiment.setups),
        socket.gethostname(),
        target.setup.name,
        target.setup.allocator_spec,
        target.engine.name,
        target.step.label,
        target.threads,
        data.tables,
        data.rows,
        data.cache_bytes,
    ]
    return hashlib.sha256(json.dumps(shape, default=str).encode()).hexdigest()[:16]


def _path(key: str) -> Path:
    return cache_root() / "calibrations" / f"{key}.json"


def store_calibration(summary: CalibrationSummary, key: str) -> Path | None:
    """Keep a calibration with pairs for later auto runs; None when it has none."""
    if summary.runs_ratio is None or summary.turns_ratio is None:
        return None
    record = {
        "saved_at": time.time(),
        "slice_s": summary.slice_s,
        "turn_s": summary.turn_s,
        "sequential": asdict(summary.components),
        "runs": asdict(summary.runs_ratio),
        "turns": asdict(summary.turns_ratio),
        "costs": asdict(summary.costs),
    }
    path = _path(key)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(record) + "\n")
    except OSError:
        return None  # a cache that cannot be written costs a calibration next time only
    return path


def load_calibration(key: str, now: float | None = None) -> dict[str, Any] | None:
    """A stored calibration for this key, young enough; None otherwise."""
    try:
        record = json.loads(_path(key).read_text())
        record["components"] = {
            name: noise.VarianceComponents(**record[name])
            for name in ("sequential", "runs", "turns")
        }
        # auto prices each design's wall time with these; a record without them (an
        # older version's) is measured again.
        record["costs"] = designs.Costs(**record["costs"])
    except (OSError, ValueError, TypeError, KeyError):
        return None
    age = (now or time.time()) - float(record.get("saved_at", 0))
    return record if 0 <= age <= STORED_MAX_AGE_S else None


__all__ = ["STORED_MAX_AGE_S", "calibration_key", "load_calibration", "store_calibration"]
